//! `payhook sign`: the signature header value for a body on stdin.
//!
//! `--scheme service` (the default) prints the `t=…,v1=…` value;
//! `--scheme standard` prints the three Standard Webhooks headers, signed with
//! the whsec_ secret (`v1`) or the `--signing-key` whsk_ key (`v1a`) by
//! `payhook_core::sender`. The key itself is never printed.

use payhook_core::sender::{unix_now, SignedDelivery, StandardDelivery};

use crate::cli::SignArgs;
use crate::failure::Failure;
use crate::input;
use crate::output::{note, say};
use crate::scheme::Scheme;
use crate::secret::{self, Stdin};

/// Signs stdin and prints `t=…,v1=…`, or the three Standard Webhooks headers.
pub fn run(args: &SignArgs) -> Result<(), Failure> {
    let standard_only = [
        (args.webhook_id.is_some(), "--webhook-id"),
        (args.signing_key.is_some(), "--signing-key"),
    ];
    if args.scheme == Scheme::Service {
        if let Some((_, flag)) = standard_only.iter().find(|(given, _)| *given) {
            return Err(Failure::usage(format_args!("{flag} is for --scheme standard")));
        }
    }
    let key = match &args.signing_key {
        Some(key) => key.clone(),
        None => secret::one(&args.secret, Stdin::Body)?,
    };
    let body = input::stdin()?;
    let timestamp = args.timestamp.unwrap_or_else(unix_now);
    match (args.scheme, &args.webhook_id) {
        (Scheme::Standard, Some(webhook_id)) => {
            let delivery =
                StandardDelivery::at(body, webhook_id.as_str(), &key, timestamp).map_err(Failure::usage)?;
            hint(&delivery.body);
            say!("webhook-id: {}", delivery.webhook_id);
            say!("webhook-timestamp: {}", delivery.webhook_timestamp);
            say!("webhook-signature: {}", delivery.webhook_signature);
        }
        // (clap requires --webhook-id with --scheme standard.)
        (Scheme::Standard, None) => return Err(Failure::usage("--webhook-id is required")),
        (Scheme::Service, _) => {
            let delivery = SignedDelivery::at(body, &key, timestamp).map_err(Failure::usage)?;
            hint(&delivery.body);
            say!("{}", delivery.signature);
        }
    }
    Ok(())
}

fn hint(body: &[u8]) {
    if let Some(hint) = input::newline_hint(body) {
        note!("{hint}");
    }
}
