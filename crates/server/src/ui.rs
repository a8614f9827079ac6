//! The web UI, baked into the binary: `web/dist` (built by `cd web && npm ci && npm run build`) is embedded by
//! rust-embed, so there is nothing to copy beside `kvad-serve` and nothing to serve it with.
//!
//! `cargo build` never runs npm. A binary built without `web/dist` still compiles (`allow_missing`) and answers
//! every UI path with a page saying how to build the UI. In a debug build rust-embed reads `web/dist` from disk at
//! run time (a rebuilt UI shows without recompiling); a release build holds the files themselves.
//!
//! Every path that is not the API's (`/api/…`, `/v1/…`, `/metrics`) is the UI's: a file of `dist` when there is
//! one, else `index.html`, so the single-page app's own routes (`/chat`, `/models`, …) survive a reload. Vite's
//! hashed files under `assets/` are cached for a year; everything else is revalidated by its ETag.

use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use rust_embed::RustEmbed;
use std::borrow::Cow;

#[derive(RustEmbed)]
#[folder = "../../web/dist"]
#[allow_missing = true]
struct Dist;

/// The page every UI path answers when the binary was built without `web/dist`.
pub const NOT_BUILT: &str =
    "this kvad was built without the web UI: run `cd web && npm ci && npm run build` and rebuild";

/// One file of the UI.
pub struct Asset {
    /// Its bytes.
    pub bytes: Cow<'static, [u8]>,
    /// SHA-256 of the bytes (the ETag).
    pub hash: [u8; 32],
}

fn embedded(path: &str) -> Option<Asset> {
    Dist::get(path).map(|f| Asset { hash: f.metadata.sha256_hash(), bytes: f.data })
}

/// Whether this binary holds the UI (its `index.html`).
pub fn built() -> bool {
    Dist::get("index.html").is_some()
}

/// Whether a path belongs to the API rather than to the UI.
pub fn is_api(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/") || path.starts_with("/v1/") || path == "/v1" || path == "/metrics"
}

/// Answers a UI path from the embedded files.
pub fn serve(method: &Method, uri: &Uri, headers: &HeaderMap) -> Response {
    respond(embedded, method, uri.path(), headers)
}

/// `index.html` of the embedded UI, for a UI route that is also an API path (`GET /api` from a browser).
pub fn index(headers: &HeaderMap) -> Option<Response> {
    built().then(|| respond(embedded, &Method::GET, "/", headers))
}

fn hex(hash: &[u8; 32]) -> String {
    hash.iter().map(|b| format!("{b:02x}")).collect()
}

/// The answer for `path`, with `files` as the UI's contents (a parameter so the rules are tested without a build).
pub fn respond(files: impl Fn(&str) -> Option<Asset>, method: &Method, path: &str, headers: &HeaderMap) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET, HEAD")], "").into_response();
    }
    let rel = path.trim_start_matches('/');
    let (name, asset) = match files(rel).filter(|_| !rel.is_empty()) {
        Some(a) => (rel, a),
        None => {
            let last = rel.rsplit('/').next().unwrap_or("");
            // A missing file (it has an extension) is a 404; anything else is a route of the app.
            if last.contains('.') || rel.starts_with("assets/") {
                return (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "no such file")
                    .into_response();
            }
            match files("index.html") {
                Some(a) => ("index.html", a),
                None => return not_built(),
            }
        }
    };
    let etag = format!("\"{}\"", &hex(&asset.hash)[..32]);
    let cache = if name.starts_with("assets/") { "public, max-age=31536000, immutable" } else { "no-cache" };
    let mime = mime_guess::from_path(name).first_or_octet_stream();
    let mut h = HeaderMap::new();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    let text = mime.type_() == mime_guess::mime::TEXT || mime.subtype() == mime_guess::mime::JAVASCRIPT;
    let ct = if text { format!("{mime}; charset=utf-8") } else { mime.to_string() };
    if let Ok(v) = HeaderValue::from_str(&ct) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag));
    if fresh {
        return (StatusCode::NOT_MODIFIED, h).into_response();
    }
    if method == Method::HEAD {
        return (StatusCode::OK, h).into_response();
    }
    (StatusCode::OK, h, asset.bytes.into_owned()).into_response()
}

/// [`NOT_BUILT`] as HTML: escaped, with the command in `<code>`.
fn not_built_html() -> String {
    let escaped = NOT_BUILT.replace('&', "&amp;").replace('<', "&lt;");
    let mut out = String::new();
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str(&format!("<code>{part}</code>"));
        } else {
            out.push_str(part);
        }
    }
    out
}

fn not_built() -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>kvad</title></head>\
         <body><h1>kvad</h1><p>{}</p><p>The API works without it: <a href=\"/api\">/api</a>.</p></body></html>",
        not_built_html()
    );
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-cache")],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    fn files(path: &str) -> Option<Asset> {
        let body: &'static [u8] = match path {
            "index.html" => b"<!doctype html><div id=app></div>",
            "assets/index-abc123.js" => b"console.log(1)",
            "favicon.svg" => b"<svg/>",
            _ => return None,
        };
        Some(Asset { bytes: Cow::Borrowed(body), hash: [path.len() as u8; 32] })
    }

    fn get(f: impl Fn(&str) -> Option<Asset>, path: &str, headers: &HeaderMap) -> Response {
        respond(f, &Method::GET, path, headers)
    }

    async fn body(r: Response) -> String {
        String::from_utf8(to_bytes(r.into_body(), 1 << 20).await.unwrap().to_vec()).unwrap()
    }

    fn header_of(r: &Response, h: header::HeaderName) -> &str {
        r.headers().get(h).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    #[tokio::test]
    async fn files_routes_and_missing_files() {
        let none = HeaderMap::new();
        let r = get(files, "/assets/index-abc123.js", &none);
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(header_of(&r, header::CONTENT_TYPE), "text/javascript; charset=utf-8");
        assert_eq!(header_of(&r, header::CACHE_CONTROL), "public, max-age=31536000, immutable");
        let r = get(files, "/favicon.svg", &none);
        assert_eq!(
            (header_of(&r, header::CONTENT_TYPE), header_of(&r, header::CACHE_CONTROL)),
            ("image/svg+xml", "no-cache")
        );
        // An app route and the root are index.html, revalidated every time.
        for path in ["/", "/chat", "/models/owner/name"] {
            let r = get(files, path, &none);
            assert_eq!(header_of(&r, header::CONTENT_TYPE), "text/html; charset=utf-8", "{path}");
            assert_eq!(header_of(&r, header::CACHE_CONTROL), "no-cache");
            assert!(body(r).await.contains("id=app"), "{path}");
        }
        // A file that is not there is a 404, not the app.
        assert_eq!(get(files, "/assets/gone-123.js", &none).status(), StatusCode::NOT_FOUND);
        assert_eq!(get(files, "/robots.txt", &none).status(), StatusCode::NOT_FOUND);
        assert_eq!(respond(files, &Method::POST, "/chat", &none).status(), StatusCode::METHOD_NOT_ALLOWED);
    }

    #[tokio::test]
    async fn an_etag_that_matches_is_not_sent_again() {
        let r = get(files, "/favicon.svg", &HeaderMap::new());
        let etag = header_of(&r, header::ETAG).to_string();
        assert!(etag.starts_with('"') && etag.len() == 34, "{etag}");
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_str(&etag).unwrap());
        let r = get(files, "/favicon.svg", &h);
        assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
        assert_eq!(body(r).await, "");
    }

    #[tokio::test]
    async fn without_the_build_every_ui_path_says_how_to_build_it() {
        for path in ["/", "/chat", "/dashboard"] {
            let r = get(|_| None, path, &HeaderMap::new());
            assert_eq!(r.status(), StatusCode::NOT_FOUND);
            let b = body(r).await;
            assert!(
                b.contains(
                    "this kvad was built without the web UI: run <code>cd web &amp;&amp; npm ci &amp;&amp; npm run \
                     build</code> and rebuild"
                ),
                "{b}"
            );
        }
    }

    #[test]
    fn api_paths_are_not_the_uis() {
        for p in ["/api", "/api/ps", "/v1/models", "/metrics"] {
            assert!(is_api(p), "{p}");
        }
        for p in ["/", "/chat", "/apis", "/v1x", "/metrics/x"] {
            assert!(!is_api(p), "{p}");
        }
    }
}
