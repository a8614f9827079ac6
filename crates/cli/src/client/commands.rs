//! Which command reaches each server route. A route with no command says why in NOT_COMMANDS. The server's tests
//! fail when a route is in neither table; the CLI's tests fail when the paths the client source requests differ
//! from COMMANDS. This file is plain data with no imports, so the server's tests can include it as it is.

/// `(method, path, the command that sends it)`.
pub const COMMANDS: &[(&str, &str, &str)] = &[
    ("POST", "/v1/chat/completions", "kvad run / kvad chat (chat models)"),
    ("POST", "/v1/completions", "kvad run (completion models)"),
    ("GET", "/v1/models", "kvad ls; kvad run and chat ask it which endpoint a model takes"),
    ("GET", "/api/health", "kvad service status; every remote command asks it first"),
    ("GET", "/api/openapi.json", "kvad api (with no path: lists every route)"),
    ("GET", "/api/queue", "kvad queue"),
    ("GET", "/api/ps", "kvad ps"),
    ("POST", "/api/load", "kvad load MODEL"),
    ("POST", "/api/unload", "kvad unload [MODEL] (no name: every model)"),
    ("GET", "/api/metrics/usage", "kvad metrics usage [--days N]"),
    ("POST", "/api/pull", "kvad pull MODEL (progress from the events; --json prints them)"),
];

/// `(method, path, why no command sends it)`.
pub const NOT_COMMANDS: &[(&str, &str, &str)] = &[
    ("GET", "/api", "an HTML page for a browser; `kvad api` lists the same routes from /api/openapi.json"),
    ("GET", "/metrics", "Prometheus' text format for a scraper; `kvad metrics usage` and `kvad queue` are for people"),
];
