//! The layer in front of every route: identify the caller (session cookie, API key, Basic, or nobody), refuse
//! what needs an account and has none (401), refuse a browser's state-changing request without its CSRF token or
//! from another site (403), and hand the handlers a [`Caller`].

use super::{secret, Auth, AuthError, Role};
use crate::config::AuthMode;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "kvad_session";

/// The header a browser's state-changing request carries its session's CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// How a caller proved who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// Mode none: nobody proves anything.
    Nothing,
    /// The session cookie: the session's public id and its CSRF token.
    Session {
        /// The session's public id.
        id: String,
        /// What state-changing requests must send as `x-csrf-token`.
        csrf_token: String,
    },
    /// `Authorization: Bearer kvad_...`.
    ApiKey,
    /// `Authorization: Basic ...` (mode basic).
    Basic,
}

/// Who a request is from: the middleware puts one in the request's extensions, and handlers take it as an
/// extractor argument (401 when there is none, which the middleware prevents on routes that need one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The account: what the request is queued, limited and recorded under.
    pub account: String,
    /// What it may do.
    pub role: Role,
    /// How it authenticated.
    pub via: Via,
}

impl Caller {
    /// Whether the caller is an administrator (always, in mode none).
    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// `account` when the caller may only see its own things, None when it may see everyone's (an administrator).
    pub fn scope(&self) -> Option<&str> {
        (!self.is_admin()).then_some(self.account.as_str())
    }

    /// The session's public id, when the caller came with the session cookie.
    pub fn session_id(&self) -> Option<&str> {
        match &self.via {
            Via::Session { id, .. } => Some(id),
            _ => None,
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| AuthError::Unauthenticated.into())
    }
}

/// An administrator: the extractor for administrator-only routes (403 for anyone else).
#[derive(Debug, Clone)]
pub struct Admin(pub Caller);

impl<S: Send + Sync> FromRequestParts<S> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let caller = Caller::from_request_parts(parts, state).await?;
        if !caller.is_admin() {
            return Err(AuthError::Forbidden("this needs an administrator".into()).into());
        }
        Ok(Admin(caller))
    }
}

/// What a path needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: health, the API's documentation, signing in, and the web UI's files.
    Public,
    /// Anyone, but a session it carries is identified (and CSRF-checked): signing out.
    Optional,
    /// An account.
    Required,
}

/// What `method path` needs. Everything under `/v1/`, `/api/` and `/metrics` needs an account except the few
/// routes a signed-out client must reach; other paths are the web UI's files.
pub fn access(method: &Method, path: &str) -> Access {
    const PUBLIC: &[&str] = &[
        "/api",
        "/api/health",
        "/api/openapi.json",
        "/api/auth/login",
        "/api/auth/oidc/login",
        "/api/auth/oidc/callback",
    ];
    if PUBLIC.contains(&path) && (method == Method::GET || path == "/api/auth/login") {
        return Access::Public;
    }
    if path == "/api/auth/logout" {
        return Access::Optional;
    }
    let api = path.starts_with("/v1/") || path.starts_with("/api/") || path == "/metrics" || path == "/v1";
    if api {
        Access::Required
    } else {
        Access::Public
    }
}

fn state_changing(m: &Method) -> bool {
    !matches!(*m, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The session cookie's value in a `Cookie` header.
pub fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).find_map(|c| {
        let (k, v) = c.trim().split_once('=')?;
        (k == SESSION_COOKIE && !v.is_empty()).then(|| v.to_string())
    })
}

/// Whether a browser says the request comes from another site: `Sec-Fetch-Site: cross-site`, or an `Origin`
/// whose host and port differ from `Host` (including the opaque origin `null`).
pub fn cross_site(headers: &HeaderMap) -> bool {
    let get = |h: &str| headers.get(h).and_then(|v| v.to_str().ok());
    if get("sec-fetch-site") == Some("cross-site") {
        return true;
    }
    match (get(header::ORIGIN.as_str()), get(header::HOST.as_str())) {
        (Some(origin), Some(host)) => super::origin::origin_host(origin).is_none_or(|o| !o.eq_ignore_ascii_case(host)),
        (Some(_), None) => true,
        (None, _) => false,
    }
}

/// Who the headers say the caller is. `Ok(None)`: no credentials (or a stale cookie). `Err`: credentials that do
/// not authenticate (a wrong or revoked key, a wrong Basic password), which is a 401 on any route that reads them.
/// `address` is the client's, for throttling failed Basic sign-ins.
pub fn identify(
    auth: &Auth,
    headers: &HeaderMap,
    address: Option<std::net::IpAddr>,
) -> Result<Option<Caller>, ApiError> {
    if auth.mode() == AuthMode::None {
        let account = account(headers)?;
        return Ok(Some(Caller { account, role: Role::Admin, via: Via::Nothing }));
    }
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let value = value.to_str().unwrap_or("");
        let (scheme, cred) = value.split_once(' ').unwrap_or((value, ""));
        let cred = cred.trim();
        if scheme.eq_ignore_ascii_case("bearer") && cred.starts_with(secret::KEY_PREFIX) {
            let (account, role) = auth.store().key(&secret::sha256_hex(cred))?.ok_or(AuthError::Unauthenticated)?;
            return Ok(Some(Caller { account, role, via: Via::ApiKey }));
        }
        if scheme.eq_ignore_ascii_case("basic") && auth.mode() == AuthMode::Basic {
            let decoded = base64::engine::general_purpose::STANDARD.decode(cred).ok();
            let text = decoded.and_then(|d| String::from_utf8(d).ok()).unwrap_or_default();
            let (name, password) = text.split_once(':').ok_or(AuthError::Unauthenticated)?;
            let (account, role) = auth.check_basic(name, password, address)?.ok_or(AuthError::Unauthenticated)?;
            return Ok(Some(Caller { account, role, via: Via::Basic }));
        }
        return Err(AuthError::Unauthenticated.into());
    }
    // Anthropic's clients send their key as `x-api-key` (an API key only: no other scheme travels there).
    if let Some(value) = headers.get("x-api-key") {
        let cred = value.to_str().unwrap_or("").trim();
        let key =
            if cred.starts_with(secret::KEY_PREFIX) { auth.store().key(&secret::sha256_hex(cred))? } else { None };
        let (account, role) = key.ok_or(AuthError::Unauthenticated)?;
        return Ok(Some(Caller { account, role, via: Via::ApiKey }));
    }
    if let Some(token) = session_cookie(headers) {
        if let Some(s) = auth.store().session(&secret::sha256_hex(&token))? {
            let via = Via::Session { id: s.id, csrf_token: s.csrf_token };
            return Ok(Some(Caller { account: s.account, role: s.role, via }));
        }
    }
    Ok(None)
}

/// The browser gates for a state-changing request: from this site only (mode none, a session, Basic), and with
/// the session's CSRF token when a session cookie authenticated it. Programs (API keys) are not browsers'
/// ambient credentials and pass, and so does a site `[server] allowed_origins` lists (`listed`). The `Host` check
/// against DNS rebinding is [`super::origin::guard`]'s, for reads too.
pub fn csrf_gate(caller: &Caller, headers: &HeaderMap, listed: bool) -> Result<(), AuthError> {
    if caller.via == Via::ApiKey {
        return Ok(());
    }
    if cross_site(headers) && !listed {
        return Err(AuthError::Csrf("a state-changing request from another site is refused".into()));
    }
    if let Via::Session { csrf_token, .. } = &caller.via {
        let sent = headers.get(super::middleware::CSRF_HEADER).map(HeaderValue::as_bytes).unwrap_or(b"");
        if !secret::constant_time_eq(sent, csrf_token.as_bytes()) {
            return Err(AuthError::Csrf(format!(
                "this request is authenticated by the session cookie and needs the session's {CSRF_HEADER} header \
                 (from POST /api/auth/login or GET /api/auth/me)"
            )));
        }
    }
    Ok(())
}

/// A 401 with the challenge that tells a client how to authenticate.
fn unauthorized(auth: &Auth, e: ApiError) -> Response {
    let mut r = e.into_response();
    let challenge = if auth.mode() == AuthMode::Basic { "Basic realm=\"kvad\", charset=\"UTF-8\"" } else { "Bearer" };
    r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(challenge));
    r
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let auth = &state.auth;
    let need = access(req.method(), req.uri().path());
    if need == Access::Public {
        return next.run(req).await;
    }
    let address = req.extensions().get::<axum::extract::ConnectInfo<std::net::SocketAddr>>().map(|c| c.0.ip());
    // Basic credentials may need a password hash (tens of milliseconds): checked on a blocking thread, never on
    // the async workers that answer every other request.
    let basic = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.len() > 6 && v[..6].eq_ignore_ascii_case("basic "));
    let identified = if basic {
        let (auth, headers) = (auth.clone(), req.headers().clone());
        tokio::task::spawn_blocking(move || identify(&auth, &headers, address))
            .await
            .unwrap_or_else(|e| Err(AuthError::Internal(e.to_string()).into()))
    } else {
        identify(auth, req.headers(), address)
    };
    let caller = match identified {
        Ok(c) => c,
        Err(_) if need == Access::Optional => None,
        Err(e) if e.status == axum::http::StatusCode::UNAUTHORIZED => return unauthorized(auth, e),
        Err(e) => return e.into_response(),
    };
    let Some(caller) = caller else {
        if need == Access::Required {
            return unauthorized(auth, AuthError::Unauthenticated.into());
        }
        return next.run(req).await;
    };
    if state_changing(req.method()) {
        let listed = req.extensions().get::<super::origin::ListedOrigin>().is_some();
        if let Err(e) = csrf_gate(&caller, req.headers(), listed) {
            return ApiError::from(e).into_response();
        }
    }
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// The header that names the account while authentication is `none`; in the other modes the account is the one
/// the session, API key or Basic credentials prove, and this header is ignored.
pub const ACCOUNT_HEADER: &str = "x-kvad-account";

/// The account a request names in mode `none`: the `x-kvad-account` header, else `local`. A malformed name is a
/// 400 naming the header and the value. Handlers take [`crate::auth::Caller`] instead, which the auth layer fills
/// from this in mode none and from the credentials otherwise.
pub fn account(headers: &axum::http::HeaderMap) -> Result<String, ApiError> {
    let Some(v) = headers.get(ACCOUNT_HEADER) else { return Ok("local".into()) };
    let s = v.to_str().unwrap_or("");
    let ok = !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c));
    if !ok {
        return Err(ApiError::bad_field(
            ACCOUNT_HEADER,
            format!("{ACCOUNT_HEADER} = {v:?}: an account name is 1 to 64 letters, digits, '.', '_', '-' or '@'"),
        ));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(caller: Option<Caller>) -> Parts {
        let (mut p, ()) = axum::http::Request::new(()).into_parts();
        if let Some(c) = caller {
            p.extensions.insert(c);
        }
        p
    }

    #[tokio::test]
    async fn the_extractors_refuse_nobody_and_non_administrators() {
        let e = Caller::from_request_parts(&mut parts(None), &()).await.unwrap_err();
        assert_eq!(e.status.as_u16(), 401);
        let e = Admin::from_request_parts(&mut parts(None), &()).await.unwrap_err();
        assert_eq!(e.status.as_u16(), 401);
        let user = Caller { account: "bob".into(), role: Role::User, via: Via::ApiKey };
        let e = Admin::from_request_parts(&mut parts(Some(user.clone())), &()).await.unwrap_err();
        assert_eq!((e.status.as_u16(), e.code), (403, Some("forbidden")));
        assert!(!e.message.contains("bob"), "{}", e.message);
        assert_eq!(user.scope(), Some("bob"));
        let admin = Caller { role: Role::Admin, ..user };
        let Admin(got) = Admin::from_request_parts(&mut parts(Some(admin.clone())), &()).await.unwrap();
        assert_eq!(admin.scope(), None);
        assert_eq!(got, admin);
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn which_paths_need_an_account() {
        assert_eq!(access(&Method::GET, "/api/health"), Access::Public);
        assert_eq!(access(&Method::POST, "/api/auth/login"), Access::Public);
        assert_eq!(access(&Method::POST, "/api/auth/logout"), Access::Optional);
        assert_eq!(access(&Method::GET, "/api/auth/me"), Access::Required);
        assert_eq!(access(&Method::POST, "/api/health"), Access::Required, "only the listed method is public");
        assert_eq!(access(&Method::GET, "/v1/models"), Access::Required);
        assert_eq!(access(&Method::GET, "/metrics"), Access::Required);
        assert_eq!(access(&Method::GET, "/api/nothing-here"), Access::Required, "unknown API paths leak nothing");
        assert_eq!(access(&Method::GET, "/"), Access::Public);
        assert_eq!(access(&Method::GET, "/assets/app.js"), Access::Public);
    }

    #[test]
    fn cookies_and_origins() {
        let h = headers(&[("cookie", "a=b; kvad_session=tok; c=d")]);
        assert_eq!(session_cookie(&h).as_deref(), Some("tok"));
        assert_eq!(session_cookie(&headers(&[("cookie", "kvad_session=")])), None);
        assert!(!cross_site(&headers(&[("origin", "http://127.0.0.1:5823"), ("host", "127.0.0.1:5823")])));
        assert!(cross_site(&headers(&[("origin", "http://evil.example"), ("host", "127.0.0.1:5823")])));
        assert!(cross_site(&headers(&[("origin", "http://127.0.0.1:9999"), ("host", "127.0.0.1:5823")])));
        assert!(cross_site(&headers(&[("origin", "null"), ("host", "127.0.0.1:5823")])));
        assert!(cross_site(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!cross_site(&headers(&[("host", "127.0.0.1:5823")])), "no Origin: not a browser's cross-site post");
    }
}
