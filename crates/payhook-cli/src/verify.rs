//! `payhook verify`: check a signature header against a body, as a receiver does.
//!
//! The order is the receiver's: the signature over the raw bytes first, then the
//! body as an event. A failure prints exactly the reply body a payhook receiver
//! would send (`Webhook Error: …`), built by the core's [`Reply`].

use std::time::Duration;

use payhook_core::untrusted::Untrusted;
use payhook_core::{Error, Event, Reply, Verifier};

use crate::cli::VerifyArgs;
use crate::failure::Failure;
use crate::input;
use crate::output::{note, paint_stdout, say, Colour};
use crate::secret;

/// Verifies stdin against `--header`; prints the event or the error reply.
pub fn run(args: &VerifyArgs) -> Result<(), Failure> {
    let secrets = secret::several(&args.secret, &args.secret_file)?;
    let mut verifier = Verifier::builder().secrets(&secrets);
    verifier = if args.no_timestamp_check {
        verifier.disable_timestamp_check()
    } else {
        verifier.tolerance(Duration::from_secs(args.tolerance))
    };
    let verifier = verifier.build().map_err(Failure::usage)?;
    let body = input::stdin()?;

    if let Err(error) = verifier.verify_value(args.header.as_bytes(), &body) {
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
    let event = Event::from_slice(&body).map_err(|error| {
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

fn rejected(error: &Error) -> Failure {
    say!("{}", paint_stdout(Reply::error(error).body(), Colour::Red));
    Failure::Rejected
}
