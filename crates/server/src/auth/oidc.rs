//! Signing in through an OpenID provider: the authorisation code flow with PKCE (S256), `state` and `nonce`.
//!
//! `GET /api/auth/oidc/login` remembers a random state, PKCE verifier and nonce (the state also in a short cookie,
//! so a callback only completes in the browser that started it) and sends the browser to the provider.
//! `GET /api/auth/oidc/callback` takes the state back once, exchanges the code (with the verifier, and the client
//! secret when there is one) at the token endpoint, verifies the ID token's signature against the provider's JWKS
//! and its claims ([`super::jwt`]), finds or creates the account for `iss` + `sub`, starts a session and sends the
//! browser to `/`. The provider's endpoints come from its discovery document, read at start.
//!
//! This is the server's only outgoing HTTP besides kvad-hub's (ureq, as `oidc_http`), and it talks only to the
//! configured issuer's endpoints.

use super::{jwt, secret, AuthError, Role};
use crate::config::AuthSection;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// The cookie that ties a callback to the browser that began the login.
const STATE_COOKIE: &str = "kvad_oidc_state";

/// Largest provider response read (discovery, JWKS, token).
const MAX_BODY: u64 = 1 << 20;

/// The provider, as its discovery document describes it.
pub struct Provider {
    issuer: String,
    client_id: String,
    client_secret: Option<String>,
    redirect_url: String,
    authorization_endpoint: String,
    token_endpoint: String,
    jwks_uri: String,
    /// Whether the token endpoint takes the secret as HTTP Basic (else in the form).
    secret_basic: bool,
    jwks: Mutex<Option<Value>>,
    agent: oidc_http::Agent,
}

fn agent() -> oidc_http::Agent {
    oidc_http::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(15)))
        .http_status_as_error(false)
        .user_agent(format!("kvad/{}", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

fn read_json(
    r: Result<oidc_http::http::Response<oidc_http::Body>, oidc_http::Error>,
    what: &str,
) -> Result<(u16, Value), AuthError> {
    let mut r = r.map_err(|e| AuthError::Provider(format!("{what}: {e}")))?;
    let status = r.status().as_u16();
    let text = r
        .body_mut()
        .with_config()
        .limit(MAX_BODY)
        .read_to_string()
        .map_err(|e| AuthError::Provider(format!("{what}: reading the answer: {e}")))?;
    let v = serde_json::from_str(&text)
        .map_err(|_| AuthError::Provider(format!("{what} answered {status} with something that is not JSON")))?;
    Ok((status, v))
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved characters).
pub fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

impl Provider {
    /// Reads `issuer/.well-known/openid-configuration`; its `issuer` must equal the configured one exactly.
    pub fn discover(section: &AuthSection) -> Result<Provider, AuthError> {
        let issuer = section.issuer.clone().unwrap_or_default();
        let agent = agent();
        let url = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
        let (status, doc) = read_json(agent.get(&url).call(), &url)?;
        if status != 200 {
            return Err(AuthError::Provider(format!("{url} answered {status}")));
        }
        if doc["issuer"].as_str() != Some(issuer.as_str()) {
            return Err(AuthError::Provider(format!(
                "{url} says issuer = {}, not the configured [auth] issuer {issuer:?}",
                doc["issuer"]
            )));
        }
        let field = |k: &str| {
            doc[k].as_str().map(str::to_string).ok_or_else(|| AuthError::Provider(format!("{url} has no {k}")))
        };
        let methods: Vec<&str> = doc["token_endpoint_auth_methods_supported"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        Ok(Provider {
            authorization_endpoint: field("authorization_endpoint")?,
            token_endpoint: field("token_endpoint")?,
            jwks_uri: field("jwks_uri")?,
            secret_basic: methods.is_empty() || methods.contains(&"client_secret_basic"),
            issuer,
            client_id: section.client_id.clone().unwrap_or_default(),
            client_secret: section.client_secret.clone().filter(|s| !s.is_empty()),
            redirect_url: section.redirect_url.clone().unwrap_or_default(),
            jwks: Mutex::new(None),
            agent,
        })
    }

    /// The provider's URL for a new login.
    pub fn authorize_url(&self, state: &str, nonce: &str, verifier: &str) -> String {
        let challenge = URL_SAFE_NO_PAD.encode(<sha2::Sha256 as sha2::Digest>::digest(verifier.as_bytes()));
        let sep = if self.authorization_endpoint.contains('?') { '&' } else { '?' };
        format!(
            "{}{sep}response_type=code&client_id={}&redirect_uri={}&scope={}&state={}&nonce={}&code_challenge={}\
             &code_challenge_method=S256",
            self.authorization_endpoint,
            encode(&self.client_id),
            encode(&self.redirect_url),
            encode("openid profile email"),
            encode(state),
            encode(nonce),
            challenge
        )
    }

    /// Exchanges the code for tokens; the ID token.
    fn exchange(&self, code: &str, verifier: &str) -> Result<String, AuthError> {
        let mut form = vec![
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", self.redirect_url.as_str()),
            ("code_verifier", verifier),
            ("client_id", self.client_id.as_str()),
        ];
        let mut req = self.agent.post(&self.token_endpoint);
        match &self.client_secret {
            Some(s) if self.secret_basic => {
                let pair = format!("{}:{}", encode(&self.client_id), encode(s));
                req = req.header("Authorization", &format!("Basic {}", STANDARD.encode(pair)));
            }
            Some(s) => form.push(("client_secret", s.as_str())),
            None => {}
        }
        let (status, v) = read_json(req.send_form(form), "the token endpoint")?;
        if status != 200 {
            let why = v["error_description"].as_str().or(v["error"].as_str()).unwrap_or("no reason given");
            return Err(AuthError::Oidc(format!("the token endpoint answered {status}: {why}")));
        }
        v["id_token"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| AuthError::Oidc("the token answer has no id_token".into()))
    }

    fn fetch_jwks(&self) -> Result<Value, AuthError> {
        let (status, v) = read_json(self.agent.get(&self.jwks_uri).call(), "the JWKS")?;
        if status != 200 {
            return Err(AuthError::Provider(format!("{} answered {status}", self.jwks_uri)));
        }
        if let Ok(mut g) = self.jwks.lock() {
            *g = Some(v.clone());
        }
        Ok(v)
    }

    /// Verifies an ID token and returns its claims. The JWKS is cached; a signature no cached key verifies fetches
    /// it again once (the provider rotated its keys).
    pub fn verify(&self, id_token: &str, nonce: &str) -> Result<Value, AuthError> {
        let jws = jwt::parse(id_token)?;
        let cached = self.jwks.lock().ok().and_then(|g| g.clone());
        let checked = match cached {
            Some(keys) if jwt::verify_signature(&jws, &keys).is_ok() => Ok(()),
            _ => jwt::verify_signature(&jws, &self.fetch_jwks()?),
        };
        checked?;
        jwt::check_claims(
            &jws.claims,
            &jwt::Expect { issuer: &self.issuer, client_id: &self.client_id, nonce, now: now() },
        )?;
        Ok(jws.claims)
    }
}

fn state_cookie(value: &str, max_age: u32) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{STATE_COOKIE}={value}; HttpOnly; SameSite=Lax; Path=/api/auth/oidc; Max-Age={max_age}"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static(""))
}

fn provider(state: &AppState) -> Result<&Provider, AuthError> {
    state.auth.oidc().ok_or(AuthError::NotInMode { what: "OIDC login", mode: state.auth.mode().as_str() })
}

/// `GET /api/auth/oidc/login`: 302 to the provider.
pub async fn login(State(state): State<AppState>) -> Result<Response, ApiError> {
    let p = provider(&state)?;
    let (st, verifier, nonce) = (secret::token(16)?, secret::token(32)?, secret::token(16)?);
    state.auth.store().begin_oidc(&st, &verifier, &nonce)?;
    let location = HeaderValue::from_str(&p.authorize_url(&st, &nonce, &verifier))
        .map_err(|_| AuthError::Provider("the authorization endpoint is not a valid header value".into()))?;
    let mut r = StatusCode::FOUND.into_response();
    r.headers_mut().insert(header::LOCATION, location);
    r.headers_mut().insert(header::SET_COOKIE, state_cookie(&st, 600));
    Ok(r)
}

fn state_from_cookie(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == STATE_COOKIE).then(|| v.to_string())
    })
}

/// An account name for a new OIDC account: `preferred_username`, else `email`, else `sub`, cut to the name rule,
/// with `-2`, `-3`, ... when taken.
fn new_name(claims: &Value, taken: impl Fn(&str) -> Result<bool, AuthError>) -> Result<String, AuthError> {
    let raw = ["preferred_username", "email", "sub"].iter().find_map(|k| claims[*k].as_str().filter(|s| !s.is_empty()));
    let mut base: String =
        raw.unwrap_or("oidc").chars().filter(|c| c.is_ascii_alphanumeric() || "._-@".contains(*c)).take(56).collect();
    if base.is_empty() {
        base = "oidc".into();
    }
    let mut name = base.clone();
    let mut n = 1;
    while taken(&name)? {
        n += 1;
        name = format!("{base}-{n}");
    }
    Ok(name)
}

/// The account for these verified claims: the one `iss|sub` signed in as before, else a new one (a user, or an
/// administrator when `first_account_admin` is set and there is no administrator yet).
fn account_for(state: &AppState, claims: &Value) -> Result<(String, Role), AuthError> {
    let store = state.auth.store();
    let subject = format!("{}|{}", claims["iss"].as_str().unwrap_or(""), claims["sub"].as_str().unwrap_or(""));
    if let Some(name) = store.account_by_subject(&subject)? {
        let a = store.account(&name)?.ok_or(AuthError::Internal("an OIDC account vanished".into()))?;
        return Ok((a.name, a.role));
    }
    let name = new_name(claims, |n| Ok(store.account(n)?.is_some()))?;
    let role = if state.auth.first_account_admin() && store.admin_count()? == 0 { Role::Admin } else { Role::User };
    store.create_account(&name, role, None, Some(&subject))?;
    eprintln!("kvad-serve: OIDC: created the account {name:?} ({}) for {subject}", role.as_str());
    Ok((name, role))
}

/// `GET /api/auth/oidc/callback?code&state`: verifies everything, starts a session, 302 to `/`.
pub async fn callback(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    provider(&state)?;
    if let Some(e) = q.get("error") {
        let why = q.get("error_description").map_or(String::new(), |d| format!(": {d}"));
        return Err(AuthError::Oidc(format!("the provider answered error = {e:?}{why}")).into());
    }
    let st = q.get("state").ok_or_else(|| AuthError::Oidc("the callback has no state".into()))?;
    let code = q.get("code").ok_or_else(|| AuthError::Oidc("the callback has no code".into()))?.clone();
    if state_from_cookie(&headers).as_deref() != Some(st.as_str()) {
        return Err(
            AuthError::Oidc("state: not the login this browser started (no or another state cookie)".into()).into()
        );
    }
    let (verifier, nonce) =
        state.auth.store().finish_oidc(st)?.ok_or_else(|| AuthError::Oidc("state: unknown, used or expired".into()))?;
    let app = state.clone();
    let claims = tokio::task::spawn_blocking(move || {
        let p = provider(&app)?;
        let id_token = p.exchange(&code, &verifier)?;
        p.verify(&id_token, &nonce)
    })
    .await
    .map_err(|e| AuthError::Internal(e.to_string()))??;
    let (account, _) = account_for(&state, &claims)?;
    let (set_cookie, _) = super::session::start_session(&state, &account, &headers)?;
    let mut r = StatusCode::FOUND.into_response();
    r.headers_mut().insert(header::LOCATION, HeaderValue::from_static("/"));
    r.headers_mut().append(header::SET_COOKIE, set_cookie);
    r.headers_mut().append(header::SET_COOKIE, state_cookie("", 0));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_for_new_accounts() {
        let none = |_: &str| Ok(false);
        assert_eq!(new_name(&json!({"preferred_username": "ann", "email": "a@x"}), none).unwrap(), "ann");
        assert_eq!(new_name(&json!({"email": "a b@x.org"}), none).unwrap(), "ab@x.org");
        assert_eq!(new_name(&json!({"sub": "!!!"}), none).unwrap(), "oidc");
        let taken = |n: &str| Ok(n == "ann" || n == "ann-2");
        assert_eq!(new_name(&json!({"preferred_username": "ann"}), taken).unwrap(), "ann-3");
        assert_eq!(encode("a b/c~"), "a%20b%2Fc~");
    }
}
