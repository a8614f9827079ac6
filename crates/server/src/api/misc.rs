//! `/v1/models`, `/api/health`, `/api/openapi.json`, the `/api` page, and the answers for unknown routes.

use super::table::ROUTES;
use crate::error::ApiError;
use crate::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, Method, Uri};
use axum::response::{Html, IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

/// `GET /v1/models`: every model this server can load without the network (those `[server] models` names and the
/// ones on its disk), loaded or not; the default model (`kvad use`) first and marked.
pub async fn models(State(state): State<AppState>) -> Json<Value> {
    let default = state.default_model.read().ok().and_then(|d| d.clone());
    let mut all = state.queue.catalog();
    // Stable: the default first, the rest as the engine lists them.
    all.sort_by_key(|m| Some(&m.id) != default.as_ref());
    let data: Vec<Value> = all
        .into_iter()
        .map(|m| {
            json!({
                "id": m.id, "object": "model", "created": 0, "owned_by": "kvad",
                "capabilities": {"chat": m.chat, "tools": m.tools, "reasoning": m.reasoning},
                "loaded": m.loaded, "backend": m.backend, "default_backend": m.default_backend,
                "default": Some(&m.id) == default.as_ref(),
            })
        })
        .collect();
    Json(json!({"object": "list", "data": data}))
}

/// `GET /api/health`: the version and the commit this build is from; 200 "ok"; 503 "shutting down" from SIGINT/SIGTERM until the listener closes (a load balancer
/// takes the server out of rotation while its replies finish, rather than seeing refused connections).
pub async fn health(State(state): State<AppState>) -> Response {
    let loaded: Vec<String> = state.queue.catalog().into_iter().filter(|m| m.loaded).map(|m| m.id).collect();
    let draining = state.draining.load(std::sync::atomic::Ordering::SeqCst);
    let body = Json(json!({
        "status": if draining { "shutting down" } else { "ok" },
        "version": env!("CARGO_PKG_VERSION"),
        "commit": crate::COMMIT,
        "queue": state.queue.depth(),
        "loaded": loaded,
    }));
    let status = if draining { axum::http::StatusCode::SERVICE_UNAVAILABLE } else { axum::http::StatusCode::OK };
    (status, body).into_response()
}

/// The OpenAPI document: the route table's paths and summaries, with each route's request body, parameters and
/// answers from [`super::schema`].
pub fn openapi_doc() -> Value {
    let mut paths = Map::new();
    for r in ROUTES {
        let entry = paths.entry(r.path.to_string()).or_insert_with(|| json!({}));
        let mut op = json!({
            "summary": r.summary,
            "operationId": format!("{} {}", r.method, r.path),
            "tags": [r.tag],
        });
        let detail = super::schema::operation(r.method, r.path).unwrap_or_else(|| json!({"responses": {}}));
        for (k, v) in detail.as_object().into_iter().flatten() {
            op[k] = v.clone();
        }
        for (code, e) in super::schema::errors().as_object().into_iter().flatten() {
            op["responses"][code] = e.clone();
        }
        entry[r.method.to_ascii_lowercase()] = op;
    }
    json!({
        "openapi": "3.1.0",
        "info": {"title": "kvad", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
        "components": {
            "schemas": super::schema::components(),
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer kvad_..."},
                "anthropicKey": {"type": "apiKey", "in": "header", "name": "x-api-key",
                                 "description": "x-api-key: kvad_... (what Anthropic's clients send)"},
                "basic": {"type": "http", "scheme": "basic", "description": "[auth] mode = basic"},
                "session": {"type": "apiKey", "in": "cookie", "name": "kvad_session"},
            },
        },
    })
}

/// `GET /api/openapi.json`.
pub async fn openapi() -> Json<Value> {
    Json(openapi_doc())
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// `GET /api`: for a browser (it accepts text/html) the web UI's API page when the UI is built, which renders the
/// same table from `/api/openapi.json`; otherwise the routes as a plain page.
pub async fn page(headers: HeaderMap) -> Response {
    let browser = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"));
    if browser {
        if let Some(r) = crate::ui::index(&headers) {
            return r;
        }
    }
    plain_page().into_response()
}

fn plain_page() -> Html<String> {
    let rows: String = ROUTES
        .iter()
        .map(|r| {
            format!("<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>\n", r.method, r.path, escape(r.summary))
        })
        .collect();
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>kvad API</title></head><body>\n\
         <h1>kvad API</h1><p>OpenAI-compatible. Errors are <code>{{\"error\": {{message, type, param, code}}}}</code>. \
         Machine-readable: <a href=\"/api/openapi.json\">/api/openapi.json</a>; from a shell: <code>kvad api</code>.</p>\n\
         <table><tr><th>method</th><th>path</th><th>what</th></tr>\n{rows}</table></body></html>"
    ))
}

/// Unknown paths: the API's own (`/api/…`, `/v1/…`) are a JSON 404; every other path is the web UI's.
pub async fn fallback(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    if crate::ui::is_api(uri.path()) {
        return ApiError::no_route(method.as_str(), uri.path()).into_response();
    }
    crate::ui::serve(&method, &uri, &headers)
}

/// Known paths, wrong method.
pub async fn method_not_allowed(method: Method, uri: Uri) -> Response {
    let allowed: Vec<&str> = ROUTES.iter().filter(|r| r.path == uri.path()).map(|r| r.method).collect();
    let message = format!("{} {} is not allowed; {} is", method, uri.path(), allowed.join(", "));
    let mut r = ApiError::method_not_allowed(message).into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(&allowed.join(", ")) {
        r.headers_mut().insert(header::ALLOW, v);
    }
    r
}
