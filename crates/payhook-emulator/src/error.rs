//! API errors: `{"error":{"type","code","message","param"}}` with the HTTP status
//! that goes with them.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use payhook_core::untrusted::Untrusted;
use serde::Serialize;

/// The `type` of an API error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum ErrorType {
    #[serde(rename = "invalid_request_error")]
    InvalidRequest,
    #[serde(rename = "authentication_error")]
    Authentication,
    #[serde(rename = "idempotency_error")]
    Idempotency,
    #[serde(rename = "api_error")]
    Api,
}

/// One API error reply.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub kind: ErrorType,
    pub code: Option<&'static str>,
    pub message: String,
    pub param: Option<String>,
}

#[derive(Serialize)]
struct Envelope<'a> {
    error: Body<'a>,
}

#[derive(Serialize)]
struct Body<'a> {
    #[serde(rename = "type")]
    kind: ErrorType,
    code: Option<&'a str>,
    message: &'a str,
    param: Option<&'a str>,
}

impl ApiError {
    /// 400 `invalid_request_error` about `param`.
    pub fn invalid(param: impl Into<String>, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: ErrorType::InvalidRequest,
            code: Some(code),
            message: message.into(),
            // A parameter's name may come from the request (an unknown one, a
            // metadata key): escaped and capped like any request-derived text.
            param: Some(Untrusted::value(&param.into()).to_string()),
        }
    }

    /// 400 `invalid_request_error` about the request as a whole.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            kind: ErrorType::InvalidRequest,
            code: Some(code),
            message: message.into(),
            param: None,
        }
    }

    /// 404 `resource_missing`.
    pub fn missing(param: &str, what: &str, id: &str) -> Self {
        Self {
            status: StatusCode::NOT_FOUND,
            kind: ErrorType::InvalidRequest,
            code: Some("resource_missing"),
            message: format!("No such {what}: {}", crate::text::shown(id)),
            param: Some(param.to_owned()),
        }
    }

    /// 401 `authentication_error`.
    pub fn unauthenticated(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::UNAUTHORIZED,
            kind: ErrorType::Authentication,
            code: Some(code),
            message: message.into(),
            param: None,
        }
    }

    /// An `idempotency_error` with `status` (400 for a reused key, 409 while in flight).
    pub fn idempotency(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind: ErrorType::Idempotency,
            code: Some(code),
            message: message.into(),
            param: None,
        }
    }

    /// Any other status with an `invalid_request_error` (404 route, 405, 413, 415).
    pub fn with_status(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            kind: ErrorType::InvalidRequest,
            code: Some(code),
            message: message.into(),
            param: None,
        }
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        let envelope = Envelope {
            error: Body {
                kind: self.kind,
                code: self.code,
                message: &self.message,
                param: self.param.as_deref(),
            },
        };
        serde_json::to_vec(&envelope).unwrap_or_else(|_| {
            br#"{"error":{"type":"api_error","code":null,"message":"error","param":null}}"#.to_vec()
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        json_response(self.status, self.to_json())
    }
}

/// A JSON reply with `status`.
pub(crate) fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
