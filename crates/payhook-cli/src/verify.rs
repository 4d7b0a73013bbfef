//! `payhook verify`: check a signature header against a body, as a receiver does.
//!
//! The order is the receiver's: the signature over the raw bytes first, then the
//! body as an event. A failure prints exactly the reply body a payhook receiver
//! would send (`Webhook Error: …`), built by the core's [`Reply`].

use std::time::Duration;

use payhook_core::{Error, Event, EventKind, Reply, Verifier};

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
    say!(
        "{} {} {}",
        paint_stdout("verified", Colour::Green),
        event.id(),
        event.event_type()
    );
    if let EventKind::PaymentIntentSucceeded(pi) | EventKind::PaymentIntentFailed(pi) = event.kind() {
        say!(
            "payment_intent {} amount {} {} status {}",
            pi.id,
            pi.amount,
            pi.currency,
            pi.status.as_str()
        );
    }
    Ok(())
}

fn rejected(error: &Error) -> Failure {
    say!("{}", paint_stdout(Reply::error(error).body(), Colour::Red));
    Failure::Rejected
}
