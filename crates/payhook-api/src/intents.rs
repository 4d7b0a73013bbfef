//! Payment intents: create (§4.1 of the service's document), retrieve
//! (§4.2), and the test-mode helpers the emulator serves.

use payhook_core::{PaymentIntent, PaymentMethod};
use serde::Deserialize;

use crate::client::{form, path_id, Client, Reply};
use crate::error::ApiError;

/// What [`Client::create_payment_intent`] sends: the amount and currency,
/// and optionally the payment method types, a description and metadata.
///
/// ```
/// use payhook::api::NewPaymentIntent;
/// use payhook::PaymentMethod;
///
/// let intent = NewPaymentIntent::new(1_500_000_000_000_000_000, "eth")
///     .payment_method_types([PaymentMethod::Ethereum])
///     .description("Order 42")
///     .metadata("order", "42");
/// assert_eq!(intent.amount, 1_500_000_000_000_000_000);
/// assert_eq!(intent.metadata, [("order".to_owned(), "42".to_owned())]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewPaymentIntent {
    /// The amount to pay, in the currency's smallest unit (exact beyond 2^64).
    pub amount: u128,
    /// The lowercase currency code (`btc`, `eth`, …).
    pub currency: String,
    /// The payment methods accepted; empty: the service's default for the
    /// currency.
    pub payment_method_types: Vec<PaymentMethod>,
    /// Free text.
    pub description: Option<String>,
    /// The integrator's key–value pairs (an order id, a customer), in order.
    pub metadata: Vec<(String, String)>,
}

impl NewPaymentIntent {
    /// An intent for `amount` of `currency`.
    ///
    /// ```
    /// use payhook::api::NewPaymentIntent;
    ///
    /// let intent = NewPaymentIntent::new(5000, "btc");
    /// assert!(intent.metadata.is_empty() && intent.description.is_none());
    /// ```
    pub fn new(amount: u128, currency: impl Into<String>) -> Self {
        Self {
            amount,
            currency: currency.into(),
            payment_method_types: Vec::new(),
            description: None,
            metadata: Vec::new(),
        }
    }

    /// The payment methods accepted.
    ///
    /// ```
    /// use payhook::api::NewPaymentIntent;
    /// use payhook::PaymentMethod;
    ///
    /// let intent = NewPaymentIntent::new(5000, "btc").payment_method_types([PaymentMethod::Bitcoin]);
    /// assert_eq!(intent.payment_method_types, [PaymentMethod::Bitcoin]);
    /// ```
    #[must_use]
    pub fn payment_method_types(mut self, types: impl IntoIterator<Item = PaymentMethod>) -> Self {
        self.payment_method_types = types.into_iter().collect();
        self
    }

    /// A description.
    ///
    /// ```
    /// use payhook::api::NewPaymentIntent;
    ///
    /// let intent = NewPaymentIntent::new(5000, "btc").description("Order 42");
    /// assert_eq!(intent.description.as_deref(), Some("Order 42"));
    /// ```
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// One metadata entry; call again for more.
    ///
    /// ```
    /// use payhook::api::NewPaymentIntent;
    ///
    /// let intent = NewPaymentIntent::new(5000, "btc").metadata("order", "42").metadata("user", "7");
    /// assert_eq!(intent.metadata.len(), 2);
    /// ```
    #[must_use]
    pub fn metadata(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.metadata.push((key.into(), value.into()));
        self
    }

    /// The form fields, bracket notation for the lists and maps.
    pub(crate) fn fields(&self) -> Vec<(String, String)> {
        let mut fields = vec![
            ("amount".to_owned(), self.amount.to_string()),
            ("currency".to_owned(), self.currency.clone()),
        ];
        for method in &self.payment_method_types {
            fields.push(("payment_method_types[]".to_owned(), method.as_str().to_owned()));
        }
        if let Some(description) = &self.description {
            fields.push(("description".to_owned(), description.clone()));
        }
        for (key, value) in &self.metadata {
            fields.push((format!("metadata[{key}]"), value.clone()));
        }
        fields
    }
}

/// What [`Client::resend_event`] started: the resend's number and the
/// endpoints it goes to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct Resend {
    /// The resend's number (1, 2, … across the emulator), which each of its
    /// delivery attempts carries in `resend`.
    pub resend: u64,
    /// The endpoints (`we_…`) the event goes to.
    pub webhook_endpoints: Vec<String>,
}

impl Client {
    /// Creates a payment intent: `POST /v1/payment_intents`.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client, NewPaymentIntent};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("https://api.service.example", ApiKey::new(&std::env::var("PAYHOOK_API_KEY")?)?)?;
    /// let intent = client
    ///     .create_payment_intent(&NewPaymentIntent::new(5000, "btc").metadata("order", "42"))
    ///     .await?;
    /// println!("{} {:?}", intent.id, intent.status);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`]; [`ApiError::Refused`] names the parameter the service
    /// refused.
    pub async fn create_payment_intent(&self, intent: &NewPaymentIntent) -> Result<PaymentIntent, ApiError> {
        let reply = self
            .call(
                http::Method::POST,
                "/v1/payment_intents",
                Some(form(&intent.fields())),
            )
            .await?;
        self.intent(&reply)
    }

    /// A payment intent's latest state: `GET /v1/payment_intents/:id`. Ask
    /// before acting on a webhook: the service's word now, not the event's
    /// then.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("https://api.service.example", ApiKey::new(&std::env::var("PAYHOOK_API_KEY")?)?)?;
    /// let intent = client.retrieve_payment_intent("pi_123").await?;
    /// println!("{:?} {:?}", intent.status, intent.amount_received);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`]; [`ApiError::Refused`] with status 404 for an unknown id,
    /// [`ApiError::Invalid`] for an id that is not one.
    pub async fn retrieve_payment_intent(&self, id: &str) -> Result<PaymentIntent, ApiError> {
        let path = format!("/v1/payment_intents/{}", path_id(id)?);
        let reply = self.call(http::Method::GET, &path, None).await?;
        self.intent(&reply)
    }

    /// Test mode: the customer pays (`POST
    /// /v1/test_helpers/payment_intents/:id/succeed`, optional
    /// `amount_received`); the service emits `payment_intent.succeeded`.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client, NewPaymentIntent};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// let intent = client.create_payment_intent(&NewPaymentIntent::new(5000, "btc")).await?;
    /// let paid = client.succeed_payment_intent(&intent.id, None).await?;
    /// println!("{:?}", paid.status);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`]; [`ApiError::Refused`] with code
    /// `payment_intent_unexpected_state` unless the intent awaits payment.
    pub async fn succeed_payment_intent(
        &self,
        id: &str,
        amount_received: Option<u128>,
    ) -> Result<PaymentIntent, ApiError> {
        let fields: Vec<(&str, String)> = amount_received
            .map(|amount| ("amount_received", amount.to_string()))
            .into_iter()
            .collect();
        self.test_helper(id, "succeed", &form(&fields)).await
    }

    /// Test mode: the payment fails (`POST
    /// /v1/test_helpers/payment_intents/:id/fail`); the service emits
    /// `payment_intent.failed`.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client, NewPaymentIntent};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// let intent = client.create_payment_intent(&NewPaymentIntent::new(5000, "btc")).await?;
    /// let failed = client.fail_payment_intent(&intent.id).await?;
    /// println!("{:?}", failed.status);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`succeed_payment_intent`](Self::succeed_payment_intent).
    pub async fn fail_payment_intent(&self, id: &str) -> Result<PaymentIntent, ApiError> {
        self.test_helper(id, "fail", "").await
    }

    /// Test mode: delivers an event again (`POST /v1/events/:id/resend`),
    /// to `endpoint` only or to every endpoint enabled for its type.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// let resend = client.resend_event("evt_123", None).await?;
    /// println!("resend {} to {:?}", resend.resend, resend.webhook_endpoints);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`]; [`ApiError::Refused`] with status 404 for an unknown
    /// event or endpoint.
    pub async fn resend_event(&self, id: &str, endpoint: Option<&str>) -> Result<Resend, ApiError> {
        let path = format!("/v1/events/{}/resend", path_id(id)?);
        let fields: Vec<(&str, &str)> = endpoint
            .map(|endpoint| ("webhook_endpoint", endpoint))
            .into_iter()
            .collect();
        let reply = self.call(http::Method::POST, &path, Some(form(&fields))).await?;
        serde_json::from_slice(&reply.body)
            .map_err(|err| ApiError::BadReply(self.scrub(&format!("not a resend: {err}"))))
    }

    /// Test mode: every attempt the emulator made to deliver an event
    /// (`GET /v1/events/:id/delivery_attempts`, at most 100, newest first),
    /// each as the JSON object the emulator returns.
    ///
    /// ```no_run
    /// use payhook::api::{ApiKey, Client};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = Client::new("http://127.0.0.1:12111", ApiKey::new("sk_test_1")?)?;
    /// for attempt in client.delivery_attempts("evt_123").await? {
    ///     println!("{} {}", attempt["webhook_endpoint"], attempt["status"]);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ApiError`]; [`ApiError::Refused`] with status 404 for an unknown
    /// event.
    pub async fn delivery_attempts(&self, event: &str) -> Result<Vec<serde_json::Value>, ApiError> {
        let path = format!("/v1/events/{}/delivery_attempts?limit=100", path_id(event)?);
        let mut list = self.get_json(&path).await?;
        match list.get_mut("data").map(serde_json::Value::take) {
            Some(serde_json::Value::Array(attempts)) => Ok(attempts),
            _ => Err(ApiError::BadReply("not a list of delivery attempts".to_owned())),
        }
    }

    async fn test_helper(&self, id: &str, helper: &str, body: &str) -> Result<PaymentIntent, ApiError> {
        let path = format!("/v1/test_helpers/payment_intents/{}/{helper}", path_id(id)?);
        let reply = self
            .call(http::Method::POST, &path, Some(body.to_owned()))
            .await?;
        self.intent(&reply)
    }

    fn intent(&self, reply: &Reply) -> Result<PaymentIntent, ApiError> {
        serde_json::from_slice(&reply.body)
            .map_err(|err| ApiError::BadReply(self.scrub(&format!("not a payment intent: {err}"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_is_sent_in_bracket_notation() {
        let intent = NewPaymentIntent::new(u128::MAX, "eth")
            .payment_method_types([PaymentMethod::Ethereum])
            .description("Order 42")
            .metadata("order", "42");
        assert_eq!(
            form(&intent.fields()),
            "amount=340282366920938463463374607431768211455&currency=eth\
             &payment_method_types%5B%5D=ethereum&description=Order+42&metadata%5Border%5D=42"
        );
    }
}
