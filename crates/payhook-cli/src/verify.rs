//! `payhook verify`: check a signature against a body, as a receiver does.
//!
//! The order is the receiver's: the signature over the raw bytes first, then the
//! body as an event. A failure prints exactly the reply body a payhook receiver
//! would send (`Webhook Error: …`), built by the core's [`Reply`].
//!
//! `--scheme service` (the default) checks a `t=…,v1=…` header with the core's
//! [`Verifier`]; `--scheme standard` checks the three Standard Webhooks headers
//! with the core's [`StandardWebhooks`], and the event id is the `webhook-id`.

use std::time::Duration;

use payhook_core::adapter::{HeaderLookup, Headers};
use payhook_core::signature::{StandardWebhooks, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use payhook_core::untrusted::Untrusted;
use payhook_core::{Error, Event, Reply, Verifier};

use crate::cli::VerifyArgs;
use crate::failure::Failure;
use crate::input;
use crate::output::{note, paint_stdout, say, Colour};
use crate::scheme::Scheme;
use crate::secret;

/// Verifies stdin against the signature arguments; prints the event or the error reply.
pub fn run(args: &VerifyArgs) -> Result<(), Failure> {
    let check = match args.scheme {
        Scheme::Service => {
            refuse_standard_arguments(args)?;
            Check::Service(service_verifier(args)?)
        }
        Scheme::Standard => Check::Standard(standard(args)?),
    };
    let body = input::stdin()?;
    let verified = match &check {
        Check::Service(verifier) => {
            verifier.verify_value(args.header.as_deref().unwrap_or_default().as_bytes(), &body)
        }
        Check::Standard(given) => given.scheme.verify_headers(&given.headers(), &body),
    };
    if let Err(error) = verified {
        if error == Error::NoSignatureMatch {
            if let Some(hint) = input::newline_hint(&body) {
                note!("{hint}");
            }
        }
        return Err(rejected(&error));
    }
    if args.signature_only {
        say!("{}", paint_stdout("signature valid", Colour::Green));
        return Ok(());
    }
    let event = match &check {
        Check::Service(_) => Event::from_slice(&body),
        Check::Standard(given) => Event::from_slice_with_id(&body, &given.id),
    }
    .map_err(|error| {
        note!("the signature is valid; the body is not a valid event");
        rejected(&error)
    })?;
    // Everything after "verified" comes from the body: escaped and capped, so
    // a signed but hostile event cannot repaint the terminal or forge a line.
    say!(
        "{} {} {}",
        paint_stdout("verified", Colour::Green),
        Untrusted::value(event.id()),
        Untrusted::value(event.event_type())
    );
    if let Some(pi) = event.payment_intent() {
        let received = pi
            .amount_received
            .map_or_else(String::new, |received| format!(" received {received}"));
        // (Nothing is shown for a received amount the sender left out.)
        say!(
            "payment_intent {} amount {} {} status {}{received}",
            Untrusted::value(&pi.id),
            pi.amount,
            Untrusted::value(&pi.currency),
            Untrusted::value(pi.status.as_str())
        );
    }
    Ok(())
}

/// The verifier of one scheme, built (and its keys checked) before the body is read.
enum Check {
    Service(Verifier),
    Standard(Standard),
}

/// Refuses the Standard Webhooks arguments without `--scheme standard`.
fn refuse_standard_arguments(args: &VerifyArgs) -> Result<(), Failure> {
    let standard_only = [
        (!args.public_key.is_empty(), "--public-key"),
        (args.webhook_id.is_some(), "--webhook-id"),
        (args.webhook_timestamp.is_some(), "--webhook-timestamp"),
        (args.webhook_signature.is_some(), "--webhook-signature"),
    ];
    match standard_only.iter().find(|(given, _)| *given) {
        Some((_, flag)) => Err(Failure::usage(format_args!("{flag} is for --scheme standard"))),
        None => Ok(()),
    }
}

fn service_verifier(args: &VerifyArgs) -> Result<Verifier, Failure> {
    let secrets = secret::several(&args.secret, &args.secret_file)?;
    let mut verifier = Verifier::builder().secrets(&secrets);
    verifier = if args.no_timestamp_check {
        verifier.disable_timestamp_check()
    } else {
        verifier.tolerance(Duration::from_secs(args.tolerance))
    };
    verifier.build().map_err(Failure::usage)
}

/// A Standard Webhooks delivery's headers as given, and the scheme to check them with.
struct Standard {
    scheme: StandardWebhooks,
    id: String,
    timestamp: String,
    signature: String,
}

impl Standard {
    fn headers(&self) -> GivenHeaders<'_> {
        GivenHeaders([
            (WEBHOOK_ID, &self.id),
            (WEBHOOK_TIMESTAMP, &self.timestamp),
            (WEBHOOK_SIGNATURE, &self.signature),
        ])
    }
}

/// The secrets (`--secret`, `--secret-file`, else `PAYHOOK_SECRET` when no
/// `--public-key` is given either) and public keys of `--scheme standard`.
fn standard(args: &VerifyArgs) -> Result<Standard, Failure> {
    let secrets = if args.public_key.is_empty() || !args.secret.is_empty() || !args.secret_file.is_empty() {
        secret::several(&args.secret, &args.secret_file)?
    } else {
        Vec::new()
    };
    let mut scheme = StandardWebhooks::builder()
        .secrets(secrets)
        .public_keys(args.public_key.iter().cloned());
    scheme = if args.no_timestamp_check {
        scheme.disable_timestamp_check()
    } else {
        scheme.tolerance(Duration::from_secs(args.tolerance))
    };
    let scheme = scheme.build().map_err(Failure::usage)?;
    let given = |value: &Option<String>| value.clone().unwrap_or_default();
    Ok(Standard {
        scheme,
        id: given(&args.webhook_id),
        timestamp: given(&args.webhook_timestamp),
        signature: given(&args.webhook_signature),
    })
}

/// The three headers exactly as typed: a value that could not travel in an
/// HTTP header is still checked, and refused by the scheme's own rules.
struct GivenHeaders<'a>([(&'static str, &'a str); 3]);

impl Headers for GivenHeaders<'_> {
    fn lookup(&self, name: &str) -> HeaderLookup<'_> {
        match self.0.iter().find(|(known, _)| *known == name) {
            Some((_, value)) => HeaderLookup::Once(value.as_bytes()),
            None => HeaderLookup::Missing,
        }
    }
}

fn rejected(error: &Error) -> Failure {
    say!("{}", paint_stdout(Reply::error(error).body(), Colour::Red));
    Failure::Rejected
}
