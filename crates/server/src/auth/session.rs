//! A browser session's start: its token, CSRF token and cookie, kept in the accounts store. Password sign-in and
//! the OIDC callback both start one here.

use super::middleware::SESSION_COOKIE;
use super::{secret, AuthError};
use crate::AppState;
use axum::http::{header, HeaderMap, HeaderValue};

/// The session cookie's header value (`max_age` 0 clears it); `Secure` behind an HTTPS proxy.
pub(crate) fn cookie(value: &str, max_age: u64, headers: &HeaderMap) -> Result<HeaderValue, AuthError> {
    let https = headers.get("x-forwarded-proto").and_then(|v| v.to_str().ok()) == Some("https");
    let secure = if https { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{SESSION_COOKIE}={value}; HttpOnly; SameSite=Lax; Path=/; Max-Age={max_age}{secure}"
    ))
    .map_err(|e| AuthError::Internal(e.to_string()))
}

/// A new session for `account`: (the Set-Cookie header, the CSRF token).
pub fn start_session(state: &AppState, account: &str, headers: &HeaderMap) -> Result<(HeaderValue, String), AuthError> {
    let token = secret::token(32)?;
    let id = secret::token(8)?;
    let csrf = secret::token(16)?;
    let ua: String =
        headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()).unwrap_or("").chars().take(200).collect();
    let days = state.auth.session_days();
    state.auth.store().create_session(&secret::sha256_hex(&token), &id, account, &csrf, days, &ua)?;
    Ok((cookie(&token, u64::from(days) * 86_400, headers)?, csrf))
}
