//! Who may reach the server at all, before anyone is identified: the `Host` a request names and the web origin a
//! browser says it comes from.
//!
//! With `[auth] mode = "none"` every caller is the administrator, so the only thing that keeps a web page on
//! another site from reading conversations, usage or `/metrics` is that browsers do not let it. DNS rebinding gets
//! round that: the page's own name is re-pointed at 127.0.0.1, so its requests are same-origin to the browser but
//! carry the attacker's name in `Host`. So in mode none (unless `--insecure`) a request whose `Host` is not a
//! loopback name or address, nor the host `[server] bind` names, is refused, reads included; and a browser's
//! request from another origin is refused unless `[server] allowed_origins` lists it. Listed origins, in every
//! mode, get CORS answers (a preflight, and `Access-Control-Allow-Origin` on the reply) without credentials: a page
//! there reads with an API key or, in mode none, with nothing, never with the session cookie.

use super::AuthError;
use crate::config::AuthMode;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// How long a browser may keep a preflight's answer (seconds).
const PREFLIGHT_MAX_AGE: &str = "600";

/// The host name of a `Host` header or of a `host[:port]` address, without the port or an IPv6 literal's brackets.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match host.rsplit_once(':') {
        // More than one colon and no brackets: a bare IPv6 address, which has no port.
        Some((h, _)) if !h.contains(':') => h,
        _ => host,
    }
}

/// Whether a `Host` header names this machine's loopback (`localhost`, `*.localhost`, `127.x`, `::1`), any port.
pub fn loopback_host(host: &str) -> bool {
    let name = host_name(host);
    name.eq_ignore_ascii_case("localhost")
        || name.to_ascii_lowercase().ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// `host[:port]` of a URL's origin (`scheme://host[:port]`).
pub fn origin_host(origin: &str) -> Option<&str> {
    let rest = origin.split_once("://")?.1;
    Some(rest.split('/').next().unwrap_or(rest))
}

/// Whether `origin` is one `[server] allowed_origins` lists (scheme, host and port; case does not matter).
fn allowed(list: &[String], origin: &str) -> bool {
    let origin = origin.trim_end_matches('/');
    list.iter().any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// Whether the `Origin` header names another origin than the `Host` the request was sent to (the opaque origin
/// `null` included). No `Origin`: not a browser's cross-origin request (navigations and same-origin reads).
fn other_origin(headers: &HeaderMap) -> Option<&str> {
    let get = |h: header::HeaderName| headers.get(h).and_then(|v| v.to_str().ok());
    let origin = get(header::ORIGIN)?;
    let same = match (origin_host(origin), get(header::HOST)) {
        (Some(o), Some(h)) => o.eq_ignore_ascii_case(h),
        _ => false,
    };
    (!same).then_some(origin)
}

/// What a request from `origin` is marked with when `[server] allowed_origins` lists it, so the CSRF gate lets its
/// state-changing requests through (it comes from a site the administrator trusts).
#[derive(Debug, Clone, Copy)]
pub struct ListedOrigin;

/// The middleware (`axum::middleware::from_fn_with_state`), outside authentication.
pub async fn guard(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let server = &state.config.server;
    let guarded = state.auth.mode() == AuthMode::None && !state.auth.insecure();
    if guarded {
        let host = req.headers().get(header::HOST).and_then(|v| v.to_str().ok());
        if let Some(h) =
            host.filter(|h| !loopback_host(h) && !host_name(h).eq_ignore_ascii_case(host_name(&server.bind)))
        {
            return refuse(format!(
                "Host {h:?} is not this machine's loopback: with [auth] mode = \"none\" this server answers requests \
                 for loopback host names only (a page that re-points its own name at this machine, DNS rebinding, \
                 must not read it); use http://127.0.0.1 or localhost, or sign-ins ([auth] mode)"
            ));
        }
    }
    let Some(origin) = other_origin(req.headers()).map(str::to_string) else {
        return next.run(req).await;
    };
    if !allowed(&server.allowed_origins, &origin) {
        if guarded {
            return refuse(format!(
                "a request from the web origin {origin:?} is refused: with [auth] mode = \"none\" other sites may \
                 not read this server unless [server] allowed_origins lists them"
            ));
        }
        return next.run(req).await;
    }
    let value = HeaderValue::from_str(&origin).unwrap_or(HeaderValue::from_static("null"));
    if req.method() == Method::OPTIONS && req.headers().contains_key(header::ACCESS_CONTROL_REQUEST_METHOD) {
        let mut r = StatusCode::NO_CONTENT.into_response();
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, PATCH, DELETE"));
        h.insert(
            header::ACCESS_CONTROL_ALLOW_HEADERS,
            HeaderValue::from_static("authorization, content-type, x-kvad-account"),
        );
        h.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static(PREFLIGHT_MAX_AGE));
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
        return r;
    }
    req.extensions_mut().insert(ListedOrigin);
    let mut r = next.run(req).await;
    r.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, value);
    r.headers_mut().append(header::VARY, HeaderValue::from_static("Origin"));
    r
}

fn refuse(message: String) -> Response {
    ApiError::from(AuthError::Forbidden(message)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(header::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn loopback_names_and_addresses() {
        for h in ["127.0.0.1:5823", "localhost:1", "[::1]:5823", "::1", "localhost", "app.localhost:80", "127.9.9.9"] {
            assert!(loopback_host(h), "{h}");
        }
        for h in [
            "evil.example:5823",
            "192.168.1.2",
            "[::2]:1",
            "localhost.evil.example",
            "0.0.0.0:5823",
            "127.0.0.1.evil.example",
        ] {
            assert!(!loopback_host(h), "{h}");
        }
        assert_eq!(host_name("box.lan:5823"), "box.lan");
        assert_eq!(host_name("[fe80::1]:80"), "fe80::1");
    }

    #[test]
    fn origins_are_other_when_they_name_another_host_or_port() {
        let same = headers(&[("origin", "http://127.0.0.1:5823"), ("host", "127.0.0.1:5823")]);
        assert_eq!(other_origin(&same), None);
        assert_eq!(other_origin(&headers(&[("host", "127.0.0.1:5823")])), None, "no Origin: a navigation");
        let other = headers(&[("origin", "http://127.0.0.1:3000"), ("host", "127.0.0.1:5823")]);
        assert_eq!(other_origin(&other), Some("http://127.0.0.1:3000"));
        assert_eq!(other_origin(&headers(&[("origin", "null"), ("host", "x")])), Some("null"));
        let list = ["http://localhost:3000/".to_string()];
        assert!(allowed(&list, "HTTP://localhost:3000") && !allowed(&list, "http://localhost:3001"));
    }
}
