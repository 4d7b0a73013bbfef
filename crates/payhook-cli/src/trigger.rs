//! `payhook trigger TYPE`: one realistic event through a running emulator,
//! as the service's own CLI does it — a payment intent created through the
//! API, driven through the test helper that emits TYPE, and its deliveries
//! followed until every endpoint acknowledged or the emulator gave up.

use std::time::Duration;

use clap::builder::{NonEmptyStringValueParser, PossibleValue, PossibleValuesParser};
use clap::Args;
use payhook_core::event::EventType;
use payhook_core::untrusted::Untrusted;

use payhook_api::{EventsQuery, NewPaymentIntent};

use crate::emulator_api::{follow_deliveries, path_id, text, Api, ApiArgs};
use crate::failure::Failure;
use crate::output::say;
use crate::runtime::{self, Threads};

/// The types `trigger` takes, each with the catalogue entry of its kind: the
/// canonical name of each kind the emulator emits, and the names only
/// Stripe-style senders use (the kind's helper emits the canonical name, so a
/// receiver registered for either sees the event).
fn triggerable() -> impl Iterator<Item = (&'static str, &'static EventType)> {
    EventType::emulated().flat_map(|entry| {
        entry
            .names
            .iter()
            .enumerate()
            .filter(|(position, name)| *position == 0 || !name.emitted)
            .map(move |(_, name)| (name.name, entry))
    })
}

/// The type names `trigger` takes, for clap.
fn type_values() -> PossibleValuesParser {
    PossibleValuesParser::new(triggerable().map(|(name, entry)| {
        PossibleValue::new(name).help(format!(
            "the {} test helper; emits {}",
            entry.test_helper.map_or("", |helper| helper.path),
            entry.name()
        ))
    }))
}

/// `payhook trigger`.
#[derive(Debug, Args)]
pub struct TriggerArgs {
    /// The event to produce: a type of the event catalogue that the emulator emits.
    #[arg(value_name = "TYPE", value_parser = type_values())]
    pub event_type: String,

    /// The emulator and its key.
    #[command(flatten)]
    pub api: ApiArgs,

    /// The payment amount, in the currency's smallest unit (satoshi, wei, …).
    #[arg(long, value_name = "N", default_value = "1500000000000000000", value_parser = parse_amount, allow_negative_numbers = true)]
    pub amount: u128,

    /// The currency code, for example btc or eth.
    #[arg(long, value_name = "CODE", default_value = "eth", value_parser = NonEmptyStringValueParser::new())]
    pub currency: String,

    /// A metadata entry of the payment intent, KEY=VALUE; repeat for more.
    #[arg(long, value_name = "KEY=VALUE", value_parser = parse_metadata)]
    pub metadata: Vec<(String, String)>,
}

fn parse_amount(value: &str) -> Result<u128, String> {
    match value.parse::<u128>() {
        Ok(amount) if amount > 0 => Ok(amount),
        _ => Err(format!(
            "must be a whole number of the currency's smallest unit, from 1 to {}",
            u128::MAX
        )),
    }
}

fn parse_metadata(value: &str) -> Result<(String, String), String> {
    match value.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err("must be KEY=VALUE with a non-empty key, for example order=42".to_owned()),
    }
}

/// Runs `payhook trigger`.
pub fn run(args: &TriggerArgs) -> Result<(), Failure> {
    runtime::block_on(Threads::One, trigger(args))
}

async fn trigger(args: &TriggerArgs) -> Result<(), Failure> {
    let (helper, emitted) = triggerable()
        .find(|(name, _)| *name == args.event_type)
        .and_then(|(_, entry)| Some((entry.test_helper?.path, entry.name())))
        .ok_or_else(|| Failure::usage("unknown event type"))?;
    let api = Api::new(&args.api)?;

    let mut new = NewPaymentIntent::new(args.amount, args.currency.clone());
    for (key, value) in &args.metadata {
        new = new.metadata(key.clone(), value.clone());
    }
    let intent = api
        .client()
        .create_payment_intent(&new)
        .await
        .map_err(|err| api.failure("creating the payment intent", err))?;
    let intent_id = path_id(&intent.id, "a payment intent id")?.to_owned();
    say!(
        "payment intent {} ({} {})",
        Untrusted::value(&intent_id),
        Untrusted::value(&args.amount.to_string()),
        Untrusted::value(&args.currency)
    );
    let settled = match helper {
        "succeed" => api.client().succeed_payment_intent(&intent_id, None).await,
        _ => api.client().fail_payment_intent(&intent_id).await,
    }
    .map_err(|err| api.failure(&format!("the {helper} test helper of {intent_id}"), err))?;
    let created = intent.created.unwrap_or(0);

    // The helper answers with the intent; its event is the one of that type,
    // created since, whose object is this intent.
    let events = api
        .client()
        .page(&EventsQuery {
            types: vec![emitted.to_owned()],
            created_gte: Some(created),
            ..EventsQuery::default()
        })
        .await
        .map_err(|err| api.failure("listing the events", err))?;
    let event = events
        .events
        .iter()
        .find(|listed| listed.event.payment_intent_id() == Some(intent_id.as_str()))
        .ok_or_else(|| Failure::usage("the emulator shows no event for the payment intent"))?;
    let event_id = path_id(event.event.id(), "an event id")?.to_owned();
    say!(
        "event {} {} (payment intent {})",
        Untrusted::value(&event_id),
        Untrusted::value(event.event.event_type()),
        Untrusted::value(settled.status.as_str())
    );

    let endpoints = enabled_endpoints(&api, emitted).await?;
    if endpoints.is_empty() {
        say!("no webhook endpoint is enabled for {emitted}: nothing was delivered");
        return Err(Failure::Rejected);
    }
    let wait = Duration::from_secs(args.api.wait);
    if follow_deliveries(&api, &event_id, 0, &endpoints, wait).await? {
        Ok(())
    } else {
        Err(Failure::Rejected)
    }
}

/// The endpoints whose `enabled_events` take `event_type`, as the emulator
/// decides it: the type itself or `*`.
async fn enabled_endpoints(api: &Api, event_type: &str) -> Result<Vec<String>, Failure> {
    let listed = api.get("/v1/webhook_endpoints?limit=100").await?;
    Ok(listed["data"]
        .as_array()
        .map(|data| {
            data.iter()
                .filter(|endpoint| {
                    endpoint["enabled_events"].as_array().is_some_and(|events| {
                        events
                            .iter()
                            .any(|e| e.as_str() == Some("*") || e.as_str() == Some(event_type))
                    })
                })
                .map(|endpoint| text(endpoint, "id").to_owned())
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        assert_eq!(parse_metadata("order=42"), Ok(("order".into(), "42".into())));
        assert_eq!(parse_metadata("note=a=b"), Ok(("note".into(), "a=b".into())));
        assert!(parse_metadata("=x").is_err());
        assert!(parse_metadata("order").is_err());
        assert!(parse_amount("0").is_err());
        assert_eq!(parse_amount("18446744073709551617"), Ok((1 << 64) + 1));
    }
}
