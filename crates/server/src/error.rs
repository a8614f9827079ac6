//! One error type for every route, answered in OpenAI's shape:
//! `{"error": {"message", "type", "param", "code"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error a client sees.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, naming the field and value where there is one.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `not_found_error`, `server_error`, ...).
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `unsupported_field`, ...).
    pub code: Option<&'static str>,
    /// Seconds after which to retry (503 when the queue is full).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// 400 naming the field.
    pub fn bad_field(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.to_string()),
            code: None,
            retry_after: None,
        }
    }

    /// 400 for a field or value this server does not support.
    pub fn unsupported(param: &str, message: impl Into<String>) -> Self {
        ApiError { code: Some("unsupported"), ..Self::bad_field(param, message) }
    }

    /// 400 with no single field at fault.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError { param: None, ..Self::bad_field("", message) }
    }

    /// 404 for a model this server does not have.
    pub fn model_not_found(model: &str, known: &[String]) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("model {model:?} does not exist here; this server has: {}", known.join(", ")),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
            retry_after: None,
        }
    }

    /// 413: a request body over `[server] max_body` bytes.
    pub fn too_large(limit: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body is over {limit} bytes, this server's [server] max_body"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
            retry_after: None,
        }
    }

    /// 405 for a route that exists with other methods (the message names them).
    pub fn method_not_allowed(message: String) -> Self {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message,
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
            retry_after: None,
        }
    }

    /// 404 for a path with no route.
    pub fn no_route(method: &str, path: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("no route {method} {path}; GET /api/openapi.json lists them"),
            kind: "not_found_error",
            param: None,
            code: Some("no_route"),
            retry_after: None,
        }
    }

    /// 503: the queue is full or the server is shutting down.
    pub fn unavailable(message: impl Into<String>, retry_after: Option<u64>) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("unavailable"),
            retry_after,
        }
    }

    /// 409: a model does not fit in memory beside the ones loaded (the message names what holds it).
    pub fn insufficient_memory(message: String) -> Self {
        ApiError {
            status: StatusCode::CONFLICT,
            message,
            kind: "server_error",
            param: Some("model".into()),
            code: Some("insufficient_memory"),
            retry_after: None,
        }
    }

    /// 429: the account has its share waiting, or reached its generations per minute.
    pub fn too_many(message: String, retry_after: Option<u64>) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message,
            kind: "rate_limit_error",
            param: None,
            code: Some("rate_limit_exceeded"),
            retry_after,
        }
    }

    /// 401: no valid session, API key or Basic credentials. The message says how to authenticate and nothing about
    /// which part was wrong, so it cannot be used to find out which accounts or keys exist.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
            kind: "authentication_error",
            param: None,
            code: Some("unauthorized"),
            retry_after: None,
        }
    }

    /// 403: authenticated, but this account may not do this (or a browser request lacks its CSRF token).
    pub fn forbidden(message: impl Into<String>, code: &'static str) -> Self {
        ApiError {
            status: StatusCode::FORBIDDEN,
            message: message.into(),
            kind: "permission_error",
            param: None,
            code: Some(code),
            retry_after: None,
        }
    }

    /// 404 for a thing (a key, a session, an account) that does not exist, or that the caller may not see: the two
    /// answer alike so existence does not leak.
    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
            kind: "not_found_error",
            param: None,
            code: Some("not_found"),
            retry_after: None,
        }
    }

    /// 409: the request conflicts with what exists (a name taken, the last administrator).
    pub fn conflict(param: &str, message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::CONFLICT,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param.to_string()),
            code: Some("conflict"),
            retry_after: None,
        }
    }

    /// 500: the engine failed.
    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status.as_u16(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(self.body())).into_response();
        if let Some(s) = self.retry_after {
            if let Ok(v) = HeaderValue::from_str(&s.to_string()) {
                r.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        r
    }
}

impl From<kvad_engine::EngineError> for ApiError {
    /// The one place the engine's errors become HTTP: a field at fault is a 400 naming it, what this machine
    /// cannot do a 400 `unsupported`, an unknown model a 404, memory and backend conflicts 409s, the rest a 500.
    fn from(e: kvad_engine::EngineError) -> Self {
        use kvad_engine::EngineError as E;
        match e {
            E::Sampling(s) => ApiError::bad_field(s.field, s.to_string()),
            E::BadRequest(m) => ApiError::bad_request(m),
            E::BadField { field, message } => ApiError::bad_field(&field, message),
            E::Unsupported { field, message } => ApiError::unsupported(&field, message),
            E::ModelNotFound { model, known } => ApiError::model_not_found(&model, &known),
            E::NotOnDisk(message) => ApiError { message, ..ApiError::model_not_found("", &[]) },
            E::InsufficientMemory(m) => ApiError::insufficient_memory(m),
            E::Conflict { field, message } => ApiError::conflict(&field, message),
            other => ApiError::internal(other.to_string()),
        }
    }
}
