//! `payhook sign`: the signature header value for a body on stdin.

use payhook_core::sender::{unix_now, SignedDelivery};

use crate::cli::SignArgs;
use crate::failure::Failure;
use crate::input;
use crate::output::{note, say};
use crate::secret::{self, Stdin};

/// Signs stdin and prints `t=…,v1=…`.
pub fn run(args: &SignArgs) -> Result<(), Failure> {
    let secret = secret::one(&args.secret, Stdin::Body)?;
    let body = input::stdin()?;
    let timestamp = args.timestamp.unwrap_or_else(unix_now);
    let delivery = SignedDelivery::at(body, &secret, timestamp).map_err(Failure::usage)?;
    if let Some(hint) = input::newline_hint(&delivery.body) {
        note!("{hint}");
    }
    say!("{}", delivery.signature);
    Ok(())
}
