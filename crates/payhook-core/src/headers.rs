//! A framework-neutral view of request headers.
//!
//! Each framework has its own header map type (actix-web 4 is not on `http` 1), so
//! the core asks for headers through this small trait. It is implemented for
//! [`http::HeaderMap`]; an adapter for another framework wraps its map in a newtype.

/// What a header lookup found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderLookup<'a> {
    /// The header is absent.
    Missing,
    /// The header is present exactly once, with these raw bytes.
    Once(&'a [u8]),
    /// The header is present more than once. A genuine delivery carries one
    /// signature header, so this is rejected rather than guessing which one counts.
    Repeated,
}

impl<'a> HeaderLookup<'a> {
    /// Classifies every value of one header, in order.
    pub fn from_values(mut values: impl Iterator<Item = &'a [u8]>) -> Self {
        match (values.next(), values.next()) {
            (None, _) => Self::Missing,
            (Some(value), None) => Self::Once(value),
            (Some(_), Some(_)) => Self::Repeated,
        }
    }
}

/// Read access to a request's headers.
pub trait Headers {
    /// Looks up `name` (lowercase ASCII) case-insensitively.
    fn lookup(&self, name: &str) -> HeaderLookup<'_>;

    /// Every value of `name` (lowercase ASCII), in the order received; empty
    /// when the header is absent. The source-IP allowlist reads the forwarding
    /// headers (`X-Forwarded-For`, `Forwarded`) through it, which a chain of
    /// proxies may send as several lines.
    ///
    /// The default, for implementations that only provide
    /// [`lookup`](Self::lookup), cannot list a repeated header and returns
    /// `None` for it; a forwarding header read that way is refused rather than
    /// guessed at.
    fn values(&self, name: &str) -> Option<Vec<&[u8]>> {
        match self.lookup(name) {
            HeaderLookup::Missing => Some(Vec::new()),
            HeaderLookup::Once(value) => Some(vec![value]),
            HeaderLookup::Repeated => None,
        }
    }
}

impl Headers for http::HeaderMap {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        HeaderLookup::from_values(self.get_all(name).iter().map(http::HeaderValue::as_bytes))
    }

    fn values(&self, name: &str) -> Option<Vec<&[u8]>> {
        Some(
            self.get_all(name)
                .iter()
                .map(http::HeaderValue::as_bytes)
                .collect(),
        )
    }
}
