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
    ("POST", "/v1/embeddings", "kvad embed MODEL TEXT... [--dimensions N]"),
    ("POST", "/api/load", "kvad load MODEL [--backend B]"),
    ("POST", "/api/unload", "kvad unload [MODEL] (no name: every model)"),
    ("GET", "/api/metrics/usage", "kvad metrics usage [--days N]"),
    ("POST", "/api/pull", "kvad pull MODEL (progress from the events; --json prints them)"),
    ("POST", "/api/auth/login", "kvad auth login (signs in, makes an API key, signs the session out)"),
    ("POST", "/api/auth/logout", "kvad auth login (the session it used for making the key)"),
    ("GET", "/api/auth/me", "kvad auth status; kvad auth login --api-key-stdin checks the key with it"),
    ("GET", "/api/keys", "kvad keys list"),
    ("POST", "/api/keys", "kvad keys create NAME; kvad auth login"),
    ("DELETE", "/api/keys/{id}", "kvad keys revoke ID; kvad auth logout (the stored key)"),
    ("GET", "/api/users", "kvad users list"),
    ("POST", "/api/users", "kvad users add NAME [--role admin|user] (password from stdin)"),
    ("PATCH", "/api/users/{name}", "kvad users set NAME [--role R] [--password]"),
    ("DELETE", "/api/users/{name}", "kvad users rm NAME"),
    ("GET", "/api/sessions", "kvad sessions list"),
    ("DELETE", "/api/sessions/{id}", "kvad sessions rm ID"),
    ("PATCH", "/api/settings", "kvad use MODEL (the default model); the limits from the web UI's Settings page"),
    ("GET", "/api/datasets", "kvad datasets list"),
    (
        "POST",
        "/api/datasets",
        "kvad datasets add FILE|--hub REPO [--split S] [--name N] [--validation F]; kvad train --data FILE",
    ),
    ("GET", "/api/datasets/{id}", "kvad datasets show ID [--rows N] [--model M]"),
    ("DELETE", "/api/datasets/{id}", "kvad datasets rm ID"),
    ("GET", "/api/jobs", "kvad jobs list"),
    ("POST", "/api/jobs", "kvad train MODEL --data FILE|--dataset ID --output NAME [...]; kvad evals run|ppl"),
    ("GET", "/api/jobs/{id}/items", "kvad evals items JOB [--against JOB2]"),
    ("GET", "/api/jobs/{id}", "kvad jobs show ID"),
    ("DELETE", "/api/jobs/{id}", "kvad jobs cancel ID"),
    ("POST", "/api/jobs/{id}/resume", "kvad jobs resume ID"),
    ("GET", "/api/jobs/{id}/events", "kvad jobs follow ID; kvad train (follows the job it starts)"),
];

/// `(method, path, why no command sends it)`.
pub const NOT_COMMANDS: &[(&str, &str, &str)] = &[
    ("GET", "/api", "an HTML page for a browser; `kvad api` lists the same routes from /api/openapi.json"),
    ("GET", "/metrics", "Prometheus' text format for a scraper; `kvad metrics usage` and `kvad queue` are for people"),
    (
        "GET",
        "/api/auth/oidc/login",
        "a browser's redirect to the OpenID provider; from a shell, make a key in the web UI \
      and give it to `kvad auth login --api-key-stdin`",
    ),
    ("GET", "/api/auth/oidc/callback", "where the OpenID provider sends the browser back; not something to type"),
    // Other vendors' APIs, for their clients: kvad's own commands speak OpenAI's.
    (
        "POST",
        "/v1/messages",
        "Anthropic's Messages API, for Claude Code and the anthropic SDKs; kvad run speaks OpenAI's",
    ),
    ("POST", "/v1/messages/count_tokens", "Anthropic's token count, for its clients; kvad api can send it"),
    ("POST", "/v1/responses", "OpenAI's Responses API, for Codex CLI and its SDKs; kvad run speaks chat completions"),
    ("GET", "/v1/responses/{id}", "a stored response, for Responses clients; kvad api can fetch it"),
    ("DELETE", "/v1/responses/{id}", "deletes a stored response, for Responses clients; kvad api -X DELETE"),
    // The web UI's routes: each reachable from a shell as `kvad api PATH [-X METHOD] [-d JSON]` until a command of its
    // own exists.
    ("POST", "/api/tokenize", "the web UI's tokeniser inspector; not yet a command (kvad api /api/tokenize -d JSON)"),
    ("GET", "/api/models", "the web UI's Models page; kvad ls reads the same cache in process (kvad api /api/models)"),
    ("GET", "/api/requests", "the web UI's Dashboard; kvad metrics usage adds the same rows up by account"),
    ("GET", "/api/settings", "the web UI's Settings page; kvad queue shows the limits in force"),
    ("GET", "/api/bench", "the web UI's Benchmarks page; kvad bench runs in process"),
    ("POST", "/api/bench", "the web UI's Benchmarks page; kvad bench runs the same protocol in process"),
    ("GET", "/api/conversations", "the web UI's Chat page keeps its conversations; kvad chat keeps none"),
    ("POST", "/api/conversations", "the web UI's Chat page keeps its conversations; kvad chat keeps none"),
    ("GET", "/api/conversations/{id}", "the web UI's Chat page keeps its conversations; kvad chat keeps none"),
    ("PATCH", "/api/conversations/{id}", "the web UI's Chat page renames and re-sets a conversation"),
    ("DELETE", "/api/conversations/{id}", "the web UI's Chat page deletes a conversation"),
    ("POST", "/api/conversations/{id}/messages", "the web UI's Chat page stores each answer; kvad chat keeps none"),
];
