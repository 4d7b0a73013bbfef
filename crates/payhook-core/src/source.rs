//! The source-IP allowlist: which networks may deliver to an endpoint, and
//! which proxies in front of it are trusted to say who the client is.
//!
//! The payment service's rules for receivers advise IP allowlisting where
//! possible. Its document does not publish the addresses deliveries come from,
//! so the allowlist is for networks you know: the service's, if it tells you
//! them out of band, or the egress of a relay or gateway you run in front.
//!
//! The allowlist is off unless [`ReceiverBuilder::allowed_networks`] is set.
//! With it on, every delivery's **client address** is decided as follows:
//!
//! 1. It is the connection's peer (the address the TCP connection comes from).
//! 2. When the peer is in [`ReceiverBuilder::trusted_proxies`], the client is
//!    the **rightmost** address of `X-Forwarded-For` that is not itself a
//!    trusted proxy — never the leftmost, which any client can write. Each proxy
//!    appends the address it received the request from, so walking from the
//!    right past your own proxies lands on the first hop nobody you trust
//!    vouches for. The same goes for the `for=` parameters of `Forwarded`
//!    (RFC 7239), quoted forms like `for="[2001:db8::17]:4711"` included.
//! 3. Without trusted proxies, or when the peer is not one, forwarding headers
//!    are ignored: a client cannot choose its own address.
//!
//! Decisions for the edge cases, all on the side of refusing:
//!
//! * Several `X-Forwarded-For` (or `Forwarded`) lines are one list, in the
//!   order received (RFC 9110 §5.3).
//! * An entry that is not an address (`unknown`, `_hidden`, garbage, an empty
//!   entry) and is reached before the first untrusted address cannot be
//!   vouched for: the delivery is refused, and the entry is logged escaped.
//!   Entries left of the client address are never read.
//! * Ports are allowed and ignored (`192.0.2.7:4711`, `[2001:db8::1]:80`).
//! * IPv4-mapped IPv6 addresses (`::ffff:192.0.2.7`) are compared as IPv4,
//!   in the peer, in headers and in configured networks.
//! * When both headers are present and name different clients, the delivery is
//!   refused: a proxy usually sets one of them, so the other came from the
//!   client, and it can then only get a request refused, never let in.
//! * When every hop is a trusted proxy the client is the leftmost hop; when the
//!   headers are absent it is the peer itself.
//! * At most [`MAX_FORWARDED_HOPS`] trusted hops are walked; a longer chain is
//!   refused, so a header of thousands of entries costs no more than that.
//!
//! A refused source gets `403 Webhook Error: the source address is not allowed
//! to deliver to this endpoint` before its body is read; see
//! [`Receiver::check_source`].
//!
//! ```
//! use std::net::IpAddr;
//! use payhook::source::{client_address, Networks};
//!
//! let proxies: Networks = "10.0.0.0/8".parse().unwrap();
//! let mut headers = http::HeaderMap::new();
//! // A client wrote the first entry; the load balancer appended the real peer.
//! headers.insert("x-forwarded-for", "203.0.113.66, 198.51.100.7".parse().unwrap());
//! let peer: IpAddr = "10.1.2.3".parse().unwrap();
//! assert_eq!(client_address(peer, &headers, &proxies).unwrap(), "198.51.100.7".parse::<IpAddr>().unwrap());
//! // From a peer that is not a trusted proxy, the header is ignored.
//! let stranger: IpAddr = "192.0.2.1".parse().unwrap();
//! assert_eq!(client_address(stranger, &headers, &proxies).unwrap(), stranger);
//! ```
//!
//! [`ReceiverBuilder::allowed_networks`]: crate::ReceiverBuilder::allowed_networks
//! [`ReceiverBuilder::trusted_proxies`]: crate::ReceiverBuilder::trusted_proxies
//! [`Receiver::check_source`]: crate::Receiver::check_source

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use ipnet::{IpNet, Ipv4Net};

use crate::headers::Headers;
use crate::untrusted::Untrusted;

/// How many trusted hops of one forwarding header are walked at most before the
/// request is refused.
pub const MAX_FORWARDED_HOPS: usize = 32;

/// A set of IPv4 and IPv6 networks, written as CIDR (`203.0.113.0/24`,
/// `2001:db8::/32`) or as single addresses (`192.0.2.7` is `/32`, `::1` is
/// `/128`).
///
/// [`parse`](Self::parse) (and `str::parse`) take a comma-separated list, with
/// spaces allowed around entries: the form of an environment variable such as
/// `PAYHOOK_ALLOWED_IPS="203.0.113.0/24, 2001:db8::/32"`. An entry with bits set
/// past its prefix (`10.0.0.1/8`) is refused rather than widened: it is usually
/// a typo for `/32`.
///
/// ```
/// use payhook::source::Networks;
///
/// let networks = Networks::parse("203.0.113.0/24, 2001:db8::/32,192.0.2.7").unwrap();
/// assert!(networks.contains("203.0.113.9".parse().unwrap()));
/// assert!(networks.contains("::ffff:192.0.2.7".parse().unwrap())); // IPv4-mapped
/// assert!(!networks.contains("192.0.2.8".parse().unwrap()));
/// assert_eq!(networks.to_string(), "203.0.113.0/24, 2001:db8::/32, 192.0.2.7/32");
///
/// let error = Networks::parse("10.0.0.0/33").unwrap_err();
/// assert_eq!(error.entry(), "10.0.0.0/33");
/// assert_eq!(error.to_string(), r#""10.0.0.0/33": the prefix length is over 32, the most an IPv4 network has"#);
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Networks {
    networks: Vec<IpNet>,
}

impl Networks {
    /// Parses a comma-separated list of networks or addresses.
    ///
    /// # Errors
    /// The first entry that is empty, not an address, has a prefix length that
    /// is not a number or too large, or has bits set past its prefix.
    pub fn parse(list: &str) -> Result<Self, NetworkError> {
        let mut networks = Self::default();
        networks.extend_from(list)?;
        Ok(networks)
    }

    pub(crate) fn extend_from(&mut self, list: &str) -> Result<(), NetworkError> {
        for entry in list.split(',') {
            let entry = entry.trim();
            let network = parse_network(entry).map_err(|reason| NetworkError {
                entry: entry.to_owned(),
                reason,
            })?;
            self.networks.push(network);
        }
        Ok(())
    }

    /// Whether `addr` is in one of the networks (an IPv4-mapped IPv6 address is
    /// looked up as IPv4).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.networks.iter().any(|network| network.contains(&addr))
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.networks.is_empty()
    }

    /// How many networks the set lists.
    pub fn len(&self) -> usize {
        self.networks.len()
    }
}

impl FromStr for Networks {
    type Err = NetworkError;

    fn from_str(list: &str) -> Result<Self, NetworkError> {
        Self::parse(list)
    }
}

impl fmt::Display for Networks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, network) in self.networks.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{network}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Networks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Networks({self})")
    }
}

/// An entry of a network list that could not be parsed: which one, and why.
///
/// Its `Display` is `"<entry>": <reason>`, the entry escaped and shortened like
/// any untrusted text (it may come from an environment variable).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{}\": {reason}", Untrusted::value(.entry))]
pub struct NetworkError {
    entry: String,
    reason: &'static str,
}

impl NetworkError {
    /// The entry as written, spaces around it removed.
    pub fn entry(&self) -> &str {
        &self.entry
    }

    /// Why it was refused.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

fn parse_network(entry: &str) -> Result<IpNet, &'static str> {
    if entry.is_empty() {
        return Err("the entry is empty (two commas in a row, or a comma at an end)");
    }
    let (addr, prefix) = match entry.split_once('/') {
        Some((addr, prefix)) => (addr.trim_end(), Some(prefix.trim_start())),
        None => (entry, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| {
        "not an IPv4 or IPv6 address or network (write e.g. 203.0.113.0/24, 2001:db8::/32 or 192.0.2.7)"
    })?;
    let (addr, max) = match addr {
        IpAddr::V4(_) => (addr, 32u8),
        IpAddr::V6(_) => (addr, 128u8),
    };
    let prefix = match prefix {
        None => max,
        Some(prefix) => {
            if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
                return Err("the prefix length after `/` is not a whole number");
            }
            let prefix: u8 = prefix
                .parse()
                .map_err(|_| "the prefix length after `/` is not a whole number")?;
            if prefix > max {
                return Err(if max == 32 {
                    "the prefix length is over 32, the most an IPv4 network has"
                } else {
                    "the prefix length is over 128, the most an IPv6 network has"
                });
            }
            prefix
        }
    };
    let network = IpNet::new(addr, prefix).map_err(|_| "the prefix length is out of range")?;
    if network.trunc() != network {
        return Err(
            "bits are set past the prefix length: write the network's first address \
                    (e.g. 10.0.0.0/8), or /32 (/128 for IPv6) for one address",
        );
    }
    Ok(canonical_network(network))
}

/// An IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`) as the IPv4 network it
/// stands for, so it matches IPv4 peers, which are compared as IPv4.
fn canonical_network(network: IpNet) -> IpNet {
    if let IpNet::V6(v6) = network {
        if let (Some(v4), true) = (v6.network().to_ipv4_mapped(), v6.prefix_len() >= 96) {
            if let Ok(v4) = Ipv4Net::new(v4, v6.prefix_len() - 96) {
                return IpNet::V4(v4);
            }
        }
    }
    network
}

/// Why the client address of a request could not be decided from its
/// forwarding headers. Its `Display` quotes the offending entry escaped and
/// shortened; it is for logs only, never for the reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ForwardedError {
    message: String,
}

impl ForwardedError {
    fn new(message: String) -> Self {
        Self { message }
    }
}

/// The client address of a request from `peer` (see the [module docs](self)
/// for the rule): `peer` itself unless it is in `trusted_proxies`, otherwise the
/// rightmost address of `X-Forwarded-For` / `Forwarded` that is not a trusted
/// proxy. The address returned is canonical (IPv4-mapped IPv6 as IPv4).
///
/// # Errors
/// When the peer is a trusted proxy and its forwarding headers cannot be
/// trusted to name a client: an entry that is not an address before the first
/// untrusted one, more than [`MAX_FORWARDED_HOPS`] trusted hops, a repeated
/// header the [`Headers`] implementation cannot list, or the two headers naming
/// different clients.
pub fn client_address(
    peer: IpAddr,
    headers: &dyn Headers,
    trusted_proxies: &Networks,
) -> Result<IpAddr, ForwardedError> {
    let peer = peer.to_canonical();
    if !trusted_proxies.contains(peer) {
        return Ok(peer);
    }
    let forwarded_for = forwarding_values(headers, "x-forwarded-for")?;
    let by_xff = rightmost_untrusted(
        "X-Forwarded-For",
        forwarded_for.iter().rev().flat_map(|value| value.rsplit(',')),
        trusted_proxies,
    )?;
    let forwarded = forwarding_values(headers, "forwarded")?;
    let by_forwarded = if forwarded.is_empty() {
        None
    } else {
        let hops = forwarded_for_params(&forwarded)?;
        rightmost_untrusted(
            "Forwarded",
            hops.iter().rev().map(|hop| hop.as_deref().unwrap_or("")),
            trusted_proxies,
        )?
    };
    match (by_xff, by_forwarded) {
        (None, None) => Ok(peer),
        (Some(client), None) | (None, Some(client)) => Ok(client),
        (Some(xff), Some(forwarded)) if xff == forwarded => Ok(xff),
        (Some(xff), Some(forwarded)) => Err(ForwardedError::new(format!(
            "X-Forwarded-For names client {xff} and Forwarded names {forwarded}: one of them was set by the client"
        ))),
    }
}

fn forwarding_values<'h>(headers: &'h dyn Headers, name: &str) -> Result<Vec<&'h str>, ForwardedError> {
    let values = headers.values(name).ok_or_else(|| {
        ForwardedError::new(format!(
            "{name} is repeated and this server's headers cannot list its lines"
        ))
    })?;
    values
        .into_iter()
        .map(|value| {
            std::str::from_utf8(value).map_err(|_| ForwardedError::new(format!("{name} is not valid UTF-8")))
        })
        .collect()
}

/// Walks `hops` from the right (the iterator yields the rightmost first) past
/// trusted proxies; the first other address is the client. All trusted: the
/// leftmost. No hops: `None`.
fn rightmost_untrusted<'a>(
    header: &str,
    hops: impl Iterator<Item = &'a str>,
    trusted_proxies: &Networks,
) -> Result<Option<IpAddr>, ForwardedError> {
    let mut leftmost = None;
    for (walked, hop) in hops.enumerate() {
        if walked == MAX_FORWARDED_HOPS {
            return Err(ForwardedError::new(format!(
                "{header} lists more than {MAX_FORWARDED_HOPS} trusted proxies"
            )));
        }
        let Some(addr) = parse_hop(hop.trim()) else {
            return Err(ForwardedError::new(format!(
                "{header} entry \"{}\" is not an IP address, and it is not left of an untrusted one",
                Untrusted::value(hop.trim())
            )));
        };
        if !trusted_proxies.contains(addr) {
            return Ok(Some(addr));
        }
        leftmost = Some(addr);
    }
    Ok(leftmost)
}

/// One hop's address: `192.0.2.7`, `2001:db8::1`, `[2001:db8::1]`, with an
/// optional port (`192.0.2.7:4711`, `[2001:db8::1]:4711`, or an obfuscated
/// `_port` as RFC 7239 allows). Canonical: IPv4-mapped IPv6 as IPv4.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let addr = if let Some(rest) = hop.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(valid_port)) {
            return None;
        }
        IpAddr::V6(inside.parse::<Ipv6Addr>().ok()?)
    } else if let Ok(addr) = hop.parse::<IpAddr>() {
        addr
    } else {
        let (host, port) = hop.split_once(':')?;
        if !valid_port(port) {
            return None;
        }
        IpAddr::V4(host.parse::<Ipv4Addr>().ok()?)
    };
    Some(addr.to_canonical())
}

fn valid_port(port: &str) -> bool {
    let digits = !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
    let obfuscated = port.len() > 1
        && port.len() <= 64
        && port.starts_with('_')
        && port
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    digits || obfuscated
}

/// The `for=` value of each element of the `Forwarded` lines, left to right
/// (`None` for an element without one). Only the last
/// [`MAX_FORWARDED_HOPS`]` + 1` are kept: the walk from the right never needs
/// more, so a header of thousands of elements costs one pass and no memory.
fn forwarded_for_params(values: &[&str]) -> Result<VecDeque<Option<String>>, ForwardedError> {
    let mut hops = VecDeque::new();
    for value in values {
        let mut parser = ForwardedParser { rest: value };
        loop {
            let element = parser.element().map_err(|reason| {
                ForwardedError::new(format!(
                    "Forwarded \"{}\" is malformed: {reason}",
                    Untrusted::value(value)
                ))
            })?;
            if hops.len() > MAX_FORWARDED_HOPS {
                hops.pop_front();
            }
            hops.push_back(element);
            if !parser.next_element() {
                break;
            }
        }
    }
    Ok(hops)
}

/// RFC 7239 §4: `forwarded-element *( OWS "," OWS forwarded-element )`, each
/// element `pair *( ";" pair )`, each pair `token "=" ( token / quoted-string )`.
struct ForwardedParser<'a> {
    rest: &'a str,
}

impl ForwardedParser<'_> {
    /// Parses one element; returns its `for` value, unquoted.
    fn element(&mut self) -> Result<Option<String>, &'static str> {
        let mut found = None;
        loop {
            self.rest = self.rest.trim_start_matches([' ', '\t']);
            let name_len = self.rest.find(|c: char| !is_tchar(c)).unwrap_or(self.rest.len());
            if name_len == 0 {
                return Err("a parameter name is missing");
            }
            let name = &self.rest[..name_len];
            self.rest = &self.rest[name_len..];
            self.rest = self
                .rest
                .strip_prefix('=')
                .ok_or("a parameter has no `=` and value")?;
            let value = self.value()?;
            if name.eq_ignore_ascii_case("for") {
                if found.is_some() {
                    return Err("an element has `for` twice");
                }
                found = Some(value);
            }
            self.rest = self.rest.trim_start_matches([' ', '\t']);
            match self.rest.strip_prefix(';') {
                Some(rest) => self.rest = rest,
                None if self.rest.is_empty() || self.rest.starts_with(',') => return Ok(found),
                None => return Err("unexpected text after a value"),
            }
        }
    }

    /// Moves past the `,` to the next element; `false` at the end.
    fn next_element(&mut self) -> bool {
        match self.rest.strip_prefix(',') {
            Some(rest) => {
                self.rest = rest;
                true
            }
            None => false,
        }
    }

    fn value(&mut self) -> Result<String, &'static str> {
        if let Some(quoted) = self.rest.strip_prefix('"') {
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            while let Some((at, c)) = chars.next() {
                match c {
                    '"' => {
                        self.rest = &quoted[at + 1..];
                        return Ok(value);
                    }
                    '\\' => match chars.next() {
                        Some((_, escaped)) => value.push(escaped),
                        None => break,
                    },
                    c => value.push(c),
                }
            }
            Err("a quoted value is not closed")
        } else {
            let len = self.rest.find(|c: char| !is_tchar(c)).unwrap_or(self.rest.len());
            if len == 0 {
                return Err("a parameter has an empty value");
            }
            let value = self.rest[..len].to_owned();
            self.rest = &self.rest[len..];
            Ok(value)
        }
    }
}

/// RFC 9110 `tchar`; `:` is not one, which is why an IPv6 `for` is quoted.
fn is_tchar(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut map = http::HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(value.as_bytes()).unwrap(),
            );
        }
        map
    }

    fn proxies() -> Networks {
        Networks::parse("10.0.0.0/8, fd00::/8").unwrap()
    }

    #[test]
    fn network_lists_parse_cidrs_and_bare_addresses_with_spaces() {
        let networks = Networks::parse(" 203.0.113.0/24 ,2001:db8::/32,192.0.2.7 , ::1 ").unwrap();
        assert_eq!(networks.len(), 4);
        assert_eq!(
            networks.to_string(),
            "203.0.113.0/24, 2001:db8::/32, 192.0.2.7/32, ::1/128"
        );
        for inside in [
            "203.0.113.0",
            "203.0.113.255",
            "2001:db8:ffff::1",
            "192.0.2.7",
            "::1",
            "::ffff:203.0.113.4",
        ] {
            assert!(networks.contains(ip(inside)), "{inside}");
        }
        for outside in ["203.0.114.0", "2001:db9::", "192.0.2.6", "::2", "127.0.0.1"] {
            assert!(!networks.contains(ip(outside)), "{outside}");
        }
        // A mapped network is an IPv4 one.
        let mapped = Networks::parse("::ffff:10.0.0.0/104").unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        assert!(mapped.contains(ip("10.9.9.9")));
        assert_eq!(Networks::parse("0.0.0.0/0").unwrap().to_string(), "0.0.0.0/0");
        assert!(Networks::default().is_empty());
    }

    #[test]
    fn malformed_entries_say_which_and_why() {
        let cases = [
            ("10.0.0.0/33", "10.0.0.0/33", "over 32"),
            ("::/129", "::/129", "over 128"),
            ("10.0.0.0/8,", "", "empty"),
            ("10.0.0.0/8,,::1", "", "empty"),
            ("", "", "empty"),
            ("10.0.0.1/8", "10.0.0.1/8", "bits are set"),
            ("10.0.0.0/", "10.0.0.0/", "not a whole number"),
            ("10.0.0.0/-1", "10.0.0.0/-1", "not a whole number"),
            ("10.0.0.0/0008", "10.0.0.0/0008", "not a whole number"),
            (
                "10.0.0.0/99999999999999999999",
                "10.0.0.0/99999999999999999999",
                "not a whole number",
            ),
            ("example.com", "example.com", "not an IPv4 or IPv6"),
            ("10.0.0.0/8/8", "10.0.0.0/8/8", "not a whole number"),
            ("[::1]", "[::1]", "not an IPv4 or IPv6"),
            ("1.2.3.4.5", "1.2.3.4.5", "not an IPv4 or IPv6"),
        ];
        for (list, entry, why) in cases {
            let error = Networks::parse(list).unwrap_err();
            assert_eq!(error.entry(), entry, "{list}");
            assert!(error.reason().contains(why), "{list}: {error}");
        }
        let hostile = Networks::parse("\u{1b}[2J\n").unwrap_err();
        assert_eq!(hostile.to_string().lines().count(), 1);
        assert!(!hostile.to_string().contains('\u{1b}'));
    }

    #[test]
    fn without_a_trusted_peer_forwarding_headers_are_ignored() {
        let spoofed = headers(&[
            ("x-forwarded-for", "203.0.113.5"),
            ("forwarded", "for=203.0.113.5"),
        ]);
        assert_eq!(
            client_address(ip("192.0.2.1"), &spoofed, &proxies()).unwrap(),
            ip("192.0.2.1")
        );
        assert_eq!(
            client_address(ip("10.0.0.1"), &spoofed, &Networks::default()).unwrap(),
            ip("10.0.0.1")
        );
        // Even garbage is not read.
        let garbage = headers(&[("x-forwarded-for", "\u{202e}!!"), ("forwarded", ";;;")]);
        assert_eq!(
            client_address(ip("192.0.2.1"), &garbage, &proxies()).unwrap(),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client_never_the_leftmost() {
        let cases = [
            ("198.51.100.7", "198.51.100.7"),
            ("203.0.113.66, 198.51.100.7", "198.51.100.7"),
            ("203.0.113.66,198.51.100.7, 10.0.0.2", "198.51.100.7"),
            ("garbage, 198.51.100.7, 10.0.0.2", "198.51.100.7"),
            ("10.0.0.3, 10.0.0.2", "10.0.0.3"), // all trusted: the leftmost
            ("198.51.100.7:4711", "198.51.100.7"),
            ("[2001:db8::7]:4711, 10.0.0.2", "2001:db8::7"),
            ("2001:db8::7", "2001:db8::7"),
            ("::ffff:198.51.100.7", "198.51.100.7"),
            ("::ffff:10.0.0.9, fd00::1", "10.0.0.9"),
        ];
        for (xff, client) in cases {
            let map = headers(&[("x-forwarded-for", xff)]);
            assert_eq!(
                client_address(ip("10.0.0.1"), &map, &proxies()).unwrap(),
                ip(client),
                "{xff}"
            );
        }
        // Several lines are one list, in order.
        let lines = headers(&[
            ("x-forwarded-for", "203.0.113.66"),
            ("x-forwarded-for", "198.51.100.7, 10.0.0.5"),
        ]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &lines, &proxies()).unwrap(),
            ip("198.51.100.7")
        );
        // A mapped peer is a trusted IPv4 proxy.
        let map = headers(&[("x-forwarded-for", "198.51.100.7")]);
        assert_eq!(
            client_address(ip("::ffff:10.0.0.1"), &map, &proxies()).unwrap(),
            ip("198.51.100.7")
        );
        // No header: the proxy itself.
        assert_eq!(
            client_address(ip("10.0.0.1"), &headers(&[]), &proxies()).unwrap(),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn an_unparseable_hop_before_the_client_is_refused() {
        for xff in [
            "unknown",
            "198.51.100.7, ",
            "198.51.100.7,,10.0.0.2",
            "_hidden, 10.0.0.2",
            "1.2.3.4:port",
            "[::1",
            "[::1]x",
            "\u{202e}evil\u{85}, 10.0.0.2",
            "",
        ] {
            let map = headers(&[("x-forwarded-for", xff)]);
            let error = client_address(ip("10.0.0.1"), &map, &proxies())
                .unwrap_err()
                .to_string();
            assert!(error.starts_with("X-Forwarded-For entry"), "{xff}: {error}");
            assert!(!error.contains(['\u{202e}', '\u{85}']), "{error}");
        }
    }

    #[test]
    fn a_header_that_is_not_utf8_is_refused() {
        let mut map = http::HeaderMap::new();
        map.insert(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"198.51.100.7\xff").unwrap(),
        );
        let error = client_address(ip("10.0.0.1"), &map, &proxies()).unwrap_err();
        assert_eq!(error.to_string(), "x-forwarded-for is not valid UTF-8");
    }

    #[test]
    fn forwarded_for_params_are_read_quoted_and_bare() {
        let cases = [
            ("for=198.51.100.7", "198.51.100.7"),
            (
                "for=203.0.113.66, for=198.51.100.7;proto=https;by=10.0.0.2",
                "198.51.100.7",
            ),
            (r#"for="[2001:db8:cafe::17]:4711""#, "2001:db8:cafe::17"),
            (r#"For="[2001:db8:cafe::17]", for=10.0.0.4"#, "2001:db8:cafe::17"),
            (r#"for="198.51.100.7:_gazonk""#, "198.51.100.7"),
            (r#"proto=https;for="198.51.100.7" ; by=x"#, "198.51.100.7"),
            (r#"for="a,b;c", for=198.51.100.7"#, "198.51.100.7"),
            (r#"for="\1\9\8.51.100.7""#, "198.51.100.7"),
        ];
        for (forwarded, client) in cases {
            let map = headers(&[("forwarded", forwarded)]);
            assert_eq!(
                client_address(ip("10.0.0.1"), &map, &proxies()).unwrap(),
                ip(client),
                "{forwarded}"
            );
        }
        let lines = headers(&[("forwarded", "for=198.51.100.7"), ("forwarded", "for=10.0.0.8")]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &lines, &proxies()).unwrap(),
            ip("198.51.100.7")
        );
        for bad in [
            "for=unknown",
            "for=_hidden",
            "proto=https",
            "for",
            "for=",
            "for=\"1.2.3.4",
            "for=1.2.3.4 x",
            ";",
            "for=1;for=2",
            "for=[::1]",
            "=x",
        ] {
            let map = headers(&[("forwarded", bad)]);
            assert!(client_address(ip("10.0.0.1"), &map, &proxies()).is_err(), "{bad}");
        }
    }

    #[test]
    fn both_headers_must_agree() {
        let agree = headers(&[
            ("x-forwarded-for", "198.51.100.7"),
            ("forwarded", "for=198.51.100.7"),
        ]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &agree, &proxies()).unwrap(),
            ip("198.51.100.7")
        );
        let disagree = headers(&[
            ("x-forwarded-for", "198.51.100.7"),
            ("forwarded", "for=203.0.113.5"),
        ]);
        let error = client_address(ip("10.0.0.1"), &disagree, &proxies()).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("names client 198.51.100.7 and Forwarded names 203.0.113.5"),
            "{error}"
        );
    }

    #[test]
    fn long_chains_are_bounded() {
        // Thousands of untrusted hops to the left cost nothing: the walk stops at the first.
        let long = format!("{}198.51.100.7", "203.0.113.1, ".repeat(20_000));
        let map = headers(&[("x-forwarded-for", &long)]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &map, &proxies()).unwrap(),
            ip("198.51.100.7")
        );
        // Thousands of trusted hops are refused after the cap.
        let trusted = vec!["10.0.0.7"; 5_000].join(",");
        let map = headers(&[("x-forwarded-for", &trusted)]);
        let error = client_address(ip("10.0.0.1"), &map, &proxies()).unwrap_err();
        assert!(
            error.to_string().contains("more than 32 trusted proxies"),
            "{error}"
        );
        let exactly = vec!["10.0.0.7"; MAX_FORWARDED_HOPS].join(",");
        let map = headers(&[("x-forwarded-for", &exactly)]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &map, &proxies()).unwrap(),
            ip("10.0.0.7")
        );
        let forwarded = format!("{}for=198.51.100.7", "for=203.0.113.1, ".repeat(20_000));
        let map = headers(&[("forwarded", &forwarded)]);
        assert_eq!(
            client_address(ip("10.0.0.1"), &map, &proxies()).unwrap(),
            ip("198.51.100.7")
        );
        let trusted = vec!["for=10.0.0.7"; 5_000].join(",");
        let map = headers(&[("forwarded", &trusted)]);
        assert!(client_address(ip("10.0.0.1"), &map, &proxies()).is_err());
    }

    /// `lookup` only: a repeated forwarding header cannot be listed, so it is refused.
    struct LookupOnly(http::HeaderMap);

    impl Headers for LookupOnly {
        fn lookup(&self, name: &str) -> crate::headers::HeaderLookup<'_> {
            self.0.lookup(name)
        }
    }

    #[test]
    fn a_repeated_header_that_cannot_be_listed_is_refused() {
        let once = LookupOnly(headers(&[("x-forwarded-for", "198.51.100.7")]));
        assert_eq!(
            client_address(ip("10.0.0.1"), &once, &proxies()).unwrap(),
            ip("198.51.100.7")
        );
        let twice = LookupOnly(headers(&[
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-for", "10.0.0.2"),
        ]));
        assert!(client_address(ip("10.0.0.1"), &twice, &proxies()).is_err());
    }

    proptest! {
        #[test]
        fn any_header_bytes_are_answered_without_panicking(
            xff in proptest::collection::vec(any::<u8>(), 0..300),
            forwarded in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut map = http::HeaderMap::new();
            if let Ok(value) = http::HeaderValue::from_bytes(&xff) {
                map.append("x-forwarded-for", value);
            }
            if let Ok(value) = http::HeaderValue::from_bytes(&forwarded) {
                map.append("forwarded", value);
            }
            if let Err(error) = client_address(ip("10.0.0.1"), &map, &proxies()) {
                let message = error.to_string();
                prop_assert!(!message.chars().any(char::is_control), "{}", message);
            }
        }

        #[test]
        fn any_network_list_is_answered_without_panicking(list in ".{0,80}") {
            let _ = Networks::parse(&list).map(|networks| networks.to_string());
        }

        #[test]
        fn a_trusted_chain_after_the_client_always_yields_the_client(
            client in any::<[u8; 4]>().prop_filter("not in 10/8", |a| a[0] != 10),
            junk in "[ -~]{0,40}",
            chain in 0usize..MAX_FORWARDED_HOPS,
        ) {
            let client = IpAddr::from(client);
            let hops = vec!["10.1.2.3"; chain];
            let mut list = vec![junk.replace(',', ""), client.to_string()];
            list.extend(hops.iter().map(|hop| hop.to_string()));
            let xff = list.join(", ");
            let map = headers(&[("x-forwarded-for", &xff)]);
            prop_assert_eq!(client_address(ip("10.0.0.1"), &map, &proxies()).unwrap(), client);
        }
    }

    fn receiver(allowed: &[&str], trusted: &[&str]) -> Result<crate::Receiver, crate::ConfigError> {
        let mut builder = crate::Receiver::builder().secret("whsec_test");
        if !allowed.is_empty() {
            builder = builder.allowed_networks(allowed);
        }
        if !trusted.is_empty() {
            builder = builder.trusted_proxies(trusted);
        }
        builder.build()
    }

    #[test]
    fn the_receiver_checks_the_source_before_anything_else() {
        let open = receiver(&[], &[]).unwrap();
        assert!(!open.has_allowlist());
        assert!(open.check_source(None, &headers(&[]), "fix").is_ok());

        let guarded = receiver(&["198.51.100.0/24"], &["10.0.0.0/8"]).unwrap();
        assert!(guarded
            .check_source(Some(ip("198.51.100.7")), &headers(&[]), "fix")
            .is_ok());
        let refused = guarded
            .check_source(Some(ip("192.0.2.1")), &headers(&[]), "fix")
            .unwrap_err();
        assert_eq!(refused.status(), http::StatusCode::FORBIDDEN);
        assert_eq!(
            refused.body(),
            "Webhook Error: the source address is not allowed to deliver to this endpoint"
        );
        assert!(refused.closes_connection());
        // A spoofed header from a stranger changes nothing.
        let spoofed = headers(&[("x-forwarded-for", "198.51.100.7")]);
        assert_eq!(
            guarded
                .check_source(Some(ip("192.0.2.1")), &spoofed, "fix")
                .unwrap_err()
                .status(),
            403
        );
        // The same header from the trusted proxy is believed.
        assert!(guarded
            .check_source(Some(ip("10.0.0.1")), &spoofed, "fix")
            .is_ok());
        // A malformed one is refused.
        let malformed = headers(&[("x-forwarded-for", "nonsense")]);
        assert_eq!(
            guarded
                .check_source(Some(ip("10.0.0.1")), &malformed, "fix")
                .unwrap_err()
                .status(),
            403
        );
        // No peer address with an allowlist: a setup mistake, never an allow.
        let unknown = guarded
            .check_source(None, &headers(&[]), "pass the peer like so")
            .unwrap_err();
        assert_eq!(unknown.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            unknown
                .body()
                .starts_with("Webhook Error: server misconfigured: "),
            "{}",
            unknown.body()
        );
        assert!(
            unknown.body().ends_with("; pass the peer like so"),
            "{}",
            unknown.body()
        );
        assert_eq!(
            crate::metrics::reason(&crate::Error::SourceNotAllowed),
            "source_not_allowed"
        );
    }

    #[test]
    fn malformed_settings_fail_the_build_without_panicking() {
        let error = receiver(&["10.0.0.0/8", "10.0.0.0/33"], &[]).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"invalid allowed_networks entry "10.0.0.0/33": the prefix length is over 32, the most an IPv4 network has"#
        );
        let error = receiver(&["::1"], &["fc00::/7, nope"]).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with(r#"invalid trusted_proxies entry "nope": not an IPv4"#),
            "{error}"
        );
        let error = receiver(&[], &["10.0.0.0/8"]).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("trusted_proxies is set without allowed_networks"),
            "{error}"
        );
        let none: [&str; 0] = [];
        let error = crate::Receiver::builder()
            .secret("whsec_test")
            .allowed_networks(none)
            .build()
            .unwrap_err();
        assert!(
            error.to_string().contains("allowed_networks lists no network"),
            "{error}"
        );
        let error = crate::Receiver::builder()
            .secret("whsec_test")
            .allowed_networks(["::1"])
            .trusted_proxies(none)
            .build()
            .unwrap_err();
        assert!(
            error.to_string().contains("trusted_proxies lists no network"),
            "{error}"
        );
    }
}
