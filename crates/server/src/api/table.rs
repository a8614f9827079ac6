//! The route table: every route the server registers, with what it does. `/api/openapi.json` and the `/api` page
//! are generated from it, a test compares it with the router's source, and the CLI's COMMANDS table is checked
//! against it. This file is plain data with no imports, so the CLI's tests can include it as it is.

/// One route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// GET, POST, PATCH or DELETE.
    pub method: &'static str,
    /// The path.
    pub path: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// OpenAPI tag.
    pub tag: &'static str,
}

/// Every route.
pub const ROUTES: &[Route] = &[
    Route {
        method: "POST",
        path: "/v1/chat/completions",
        summary: "OpenAI chat completion: messages through the model's template; stream (SSE) or not; reasoning as \
                  reasoning_content, tool calls when tools are offered",
        tag: "openai",
    },
    Route {
        method: "POST",
        path: "/v1/completions",
        summary: "OpenAI (legacy) text completion of a plain prompt; stream (SSE) or not",
        tag: "openai",
    },
    Route {
        method: "POST",
        path: "/v1/embeddings",
        summary: "OpenAI embeddings from an embedding model (sentence-transformers' pooling, or a GGUF's \
                  pooling_type): a string, strings or token ids; encoding_format float or base64; dimensions where \
                  the model declares Matryoshka training",
        tag: "openai",
    },
    Route {
        method: "POST",
        path: "/v1/messages",
        summary: "Anthropic Messages: system, text/tool_use/tool_result/thinking blocks, tools and tool_choice \
                  (auto/any/tool/none), thinking as the template's enable_thinking, stop_sequences; streamed as \
                  Anthropic's events or whole; errors in Anthropic's shape",
        tag: "anthropic",
    },
    Route {
        method: "POST",
        path: "/v1/messages/count_tokens",
        summary: "Anthropic's token count: the prompt's tokens as the model's template renders it, tools \
                  included, without generating",
        tag: "anthropic",
    },
    Route {
        method: "POST",
        path: "/v1/responses",
        summary: "OpenAI Responses: input items (messages, function calls and outputs, reasoning), instructions, \
                  function tools, text.format, previous_response_id over stored responses; typed events or whole",
        tag: "openai",
    },
    Route {
        method: "GET",
        path: "/v1/responses/{id}",
        summary: "A stored response (store: true, the default), to the account that made it",
        tag: "openai",
    },
    Route {
        method: "DELETE",
        path: "/v1/responses/{id}",
        summary: "Deletes a stored response: a later previous_response_id naming it is a 404",
        tag: "openai",
    },
    Route {
        method: "GET",
        path: "/v1/models",
        summary: "The models this server can load without the network ([server] models and every model on its \
                  disk), with capabilities (chat, tools, reasoning), whether each is loaded, and the default first",
        tag: "openai",
    },
    Route {
        method: "GET",
        path: "/api/health",
        summary: "Liveness: ok (503 \"shutting down\" during a drain), the version and the commit of this build, \
                  queue depth, the loaded models",
        tag: "kvad",
    },
    Route {
        method: "GET",
        path: "/api/queue",
        summary: "What waits (for how long, and whose, to an administrator) and what runs; the limits in force",
        tag: "kvad",
    },
    Route {
        method: "GET",
        path: "/api/ps",
        summary: "The models in memory: what each is charged (weights and a full context of KV cache), its kept \
                  conversations, and the memory left",
        tag: "kvad",
    },
    Route {
        method: "POST",
        path: "/api/load",
        summary: "Load a model ({\"model\", \"backend\"?}) on that backend (default: [server] backend), as a job on \
                  the queue; refused, naming what holds the memory, when it does not fit, and naming the backend it \
                  is on (409: unload it first) when it is loaded on another",
        tag: "kvad",
    },
    Route {
        method: "POST",
        path: "/api/unload",
        summary: "Unload a model ({\"model\"}) or every model ({\"all\": true}), as a job on the queue",
        tag: "kvad",
    },
    Route {
        method: "POST",
        path: "/api/pull",
        summary:
            "Download a model into the server's cache, as `kvad pull` does. Request: {\"model\": \"owner/name[@rev]\" \
                  | an alias | \"ollama:name[:tag]\"}. Response: server-sent events, each JSON with an \"event\" key: \
                  plan {title, files: [{name, size, cached}]}; per file start {file, size, resumed_from}, advance \
                  {file, bytes, done}, finish {file, bytes}; note {line}; then done {model, path, commit, transferred} \
                  or error {error: {message, type, param, code}} (a refused config names its field and value). 400 a \
                  bad name, 403 offline mode, 409 the same repo is being pulled, 503 shutting down",
        tag: "kvad",
    },
    Route {
        method: "GET",
        path: "/api/metrics/usage",
        summary: "The requests table added up by account over the last days (?days=7): requests, tokens in, cached \
                  and out, time waiting, time to first token",
        tag: "kvad",
    },
    Route {
        method: "GET",
        path: "/metrics",
        summary:
            "Prometheus metrics: queue depth, running, tokens in and out, cache hits, TTFT and step-time histograms",
        tag: "kvad",
    },
    Route { method: "GET", path: "/api/openapi.json", summary: "This API as an OpenAPI 3.1 document", tag: "kvad" },
    Route {
        method: "POST",
        path: "/api/auth/login",
        summary: "Sign in (mode local or basic): {\"username\", \"password\"} → {account, role, csrf_token} and the \
                  kvad_session cookie (HttpOnly, SameSite=Lax); 401 \"wrong username or password\" for any mismatch",
        tag: "auth",
    },
    Route {
        method: "POST",
        path: "/api/auth/logout",
        summary: "Sign out: ends the cookie's session and clears the cookie (204)",
        tag: "auth",
    },
    Route {
        method: "GET",
        path: "/api/auth/me",
        summary: "Who is signed in: {account, role, mode, csrf_token}; state-changing requests made with the session \
                  cookie must send csrf_token as the x-csrf-token header",
        tag: "auth",
    },
    Route {
        method: "GET",
        path: "/api/auth/oidc/login",
        summary: "Mode oidc: 302 to the OpenID provider (authorisation code flow, PKCE S256, state, nonce)",
        tag: "auth",
    },
    Route {
        method: "GET",
        path: "/api/auth/oidc/callback",
        summary: "Mode oidc: where the provider sends the browser back; verifies the ID token, signs in, 302 to /",
        tag: "auth",
    },
    Route {
        method: "GET",
        path: "/api/keys",
        summary: "API keys: [{id, name, prefix, account, created, last_used, revoked}] (the caller's; an \
                  administrator's: everyone's)",
        tag: "auth",
    },
    Route {
        method: "POST",
        path: "/api/keys",
        summary: "Create an API key ({\"name\"}) → {id, name, key}: the only time the key is shown; send it as \
                  Authorization: Bearer kvad_...",
        tag: "auth",
    },
    Route {
        method: "DELETE",
        path: "/api/keys/{id}",
        summary: "Revoke an API key (one's own; an administrator: any); 404 for another account's",
        tag: "auth",
    },
    Route {
        method: "GET",
        path: "/api/users",
        summary: "Accounts (administrators): [{name, role, created}]",
        tag: "auth",
    },
    Route {
        method: "POST",
        path: "/api/users",
        summary: "Create an account (administrators): {\"name\", \"password\", \"role\": \"admin\" | \"user\"}",
        tag: "auth",
    },
    Route {
        method: "PATCH",
        path: "/api/users/{name}",
        summary: "Change an account ({\"password\"?, \"role\"?}): administrators any; a user only its own \
                  password. A new password ends the account's other sessions",
        tag: "auth",
    },
    Route {
        method: "DELETE",
        path: "/api/users/{name}",
        summary: "Delete an account with its sessions and keys (administrators; never the last administrator)",
        tag: "auth",
    },
    Route {
        method: "GET",
        path: "/api/sessions",
        summary: "Signed-in sessions: [{id, account, created, last_seen, user_agent, current}] (the caller's; an \
                  administrator's: everyone's)",
        tag: "auth",
    },
    Route {
        method: "DELETE",
        path: "/api/sessions/{id}",
        summary: "Sign a session out (one's own; an administrator: any); 404 for another account's",
        tag: "auth",
    },
    Route {
        method: "GET",
        path: "/api",
        summary: "This API's documentation page (the web UI's API page for a browser, when the UI is built)",
        tag: "kvad",
    },
    Route {
        method: "POST",
        path: "/api/tokenize",
        summary: "A text as the model's tokenizer reads it ({\"model\", \"text\"} → {tokens: [{id, text}], count}), \
                  without loading its weights",
        tag: "web",
    },
    Route {
        method: "GET",
        path: "/api/models",
        summary:
            "The models in the server's Hugging Face cache on disk: size, complete or not, revisions, and whether \
                  the server offers each",
        tag: "web",
    },
    Route {
        method: "GET",
        path: "/api/requests",
        summary: "The latest rows of the requests table (?limit=20, at most 200), newest first: account, model, \
                  tokens, queue time, time to first token, how it ended",
        tag: "web",
    },
    Route {
        method: "GET",
        path: "/api/settings",
        summary: "The [server] values in force, and which of them can change while the server runs (live)",
        tag: "web",
    },
    Route {
        method: "PATCH",
        path: "/api/settings",
        summary: "Change the live limits now, for this run ({queue?, queue_per_account?, generations_per_minute?, \
                  batch?}), or the default model ({default_model}: offered first, kept across restarts; what `kvad \
                  use` sends); any other key is refused by name",
        tag: "web",
    },
    Route {
        method: "GET",
        path: "/api/bench",
        summary: "The benchmark running now, or the last: every sample, and each variant's median and range",
        tag: "web",
    },
    Route {
        method: "POST",
        path: "/api/bench",
        summary: "Run interleaved benchmark rounds ({models: [1-4 ids], rounds?, max_tokens?}), each generation from \
                  an empty cache; server-sent events start, sample, then done {summary} or error. 409 while another \
                  benchmark runs, naming it",
        tag: "web",
    },
    Route { method: "GET", path: "/api/datasets", summary: "The caller's datasets, newest first", tag: "training" },
    Route {
        method: "POST",
        path: "/api/datasets",
        summary: "Upload a dataset (the body: JSONL of {text} or {messages}, or plain text; ?name=, ?validation= \
                  fraction held out, default 0.1), checked whole: a 400 names every bad line and field; 201",
        tag: "training",
    },
    Route {
        method: "GET",
        path: "/api/datasets/{id}",
        summary: "A dataset: records, split, its first ?rows= records, and with ?model= its token counts as that \
                  model reads them",
        tag: "training",
    },
    Route { method: "DELETE", path: "/api/datasets/{id}", summary: "Delete a dataset and its file", tag: "training" },
    Route {
        method: "GET",
        path: "/api/jobs",
        summary: "The caller's jobs, newest first, each with its last step",
        tag: "training",
    },
    Route {
        method: "POST",
        path: "/api/jobs",
        summary: "Start a job: {kind: train, output, model | config (from scratch), dataset, steps?, lr?, warmup?, \
                  batch?, accum?, seq_len?, clip?, weight_decay?, seed?, save_every?, eval_every?, lora?} (the model \
                  becomes trained:OUTPUT), {kind: eval, dataset (a prompt suite), models (1-4), scorer?, \
                  max_tokens?, system?}, {kind: perplexity, model, dataset, split?, window?} or {kind: bench, \
                  models, rounds?, max_tokens?} (an administrator's); 201, queued",
        tag: "training",
    },
    Route {
        method: "GET",
        path: "/api/jobs/{id}",
        summary: "One job: state, what was asked, what it made, its last step",
        tag: "training",
    },
    Route {
        method: "DELETE",
        path: "/api/jobs/{id}",
        summary: "Cancel a job: it stops after the step it is on, its last checkpoint kept",
        tag: "training",
    },
    Route {
        method: "POST",
        path: "/api/jobs/{id}/resume",
        summary: "Continue a cancelled or failed training run from its latest checkpoint, as a new job (201)",
        tag: "training",
    },
    Route {
        method: "GET",
        path: "/api/jobs/{id}/events",
        summary: "A job's events (SSE): every one so far, then the live ones; start, step {loss, lr, grad_norm, \
                  tokens_per_s}, eval, checkpoint, item (evals), and a last state done, failed or cancelled",
        tag: "training",
    },
    Route {
        method: "GET",
        path: "/api/jobs/{id}/items",
        summary: "An eval job's answers: model, index, prompt, expected, answer, correct",
        tag: "training",
    },
    Route {
        method: "GET",
        path: "/api/conversations",
        summary: "The caller's conversations, most recently changed first",
        tag: "web",
    },
    Route {
        method: "POST",
        path: "/api/conversations",
        summary: "A new conversation ({title?, model?, settings?}), 201",
        tag: "web",
    },
    Route {
        method: "GET",
        path: "/api/conversations/{id}",
        summary: "One of the caller's conversations with its messages (another account's is a 404)",
        tag: "web",
    },
    Route {
        method: "PATCH",
        path: "/api/conversations/{id}",
        summary: "Rename a conversation or change its model or settings ({title?, model?, settings?})",
        tag: "web",
    },
    Route { method: "DELETE", path: "/api/conversations/{id}", summary: "Delete a conversation, 204", tag: "web" },
    Route {
        method: "POST",
        path: "/api/conversations/{id}/messages",
        summary: "Append a message ({role, content, tool_calls?, tool_call_id?}), 201: the answer is kept, never the \
                  reasoning trace",
        tag: "web",
    },
];
