//! What each route takes and answers, as JSON Schema (OpenAPI 3.1's dialect): the request body, the path and query
//! parameters, and the responses. [`super::misc::openapi_doc`] puts these beside the route table's summaries; a
//! test checks that every route in [`super::table::ROUTES`] has an entry here, and the
//! schemathesis run in the test suite checks every answer against what is declared here.
//!
//! Request bodies list every field the handler reads (`fields.rs` refuses any other by name, so they are closed);
//! responses name the fields always present and leave room for more (kvad adds fields beside OpenAI's).

use serde_json::{json, Map, Value};

fn string() -> Value {
    json!({"type": "string"})
}
fn int() -> Value {
    json!({"type": "integer"})
}
fn boolean() -> Value {
    json!({"type": "boolean"})
}
fn nullable(t: &str) -> Value {
    json!({"type": [t, "null"]})
}
fn array(items: Value) -> Value {
    json!({"type": "array", "items": items})
}
fn any() -> Value {
    json!({})
}
fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// An object with these fields, `required` of them always there; `closed`: no others.
fn object(fields: &[(&str, Value)], required: &[&str], closed: bool) -> Value {
    let props: Map<String, Value> = fields.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let mut o = json!({"type": "object", "properties": props, "required": required});
    if closed {
        o["additionalProperties"] = json!(false);
    }
    o
}

/// A request body: closed, as the handlers refuse unknown fields by name.
fn body(fields: &[(&str, Value)], required: &[&str]) -> Value {
    object(fields, required, true)
}

/// An answer: these fields at least.
fn answer(fields: &[(&str, Value)]) -> Value {
    let required: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
    object(fields, &required, false)
}

/// The sampling fields both OpenAI generation endpoints read (`request.rs`).
fn sampling() -> Vec<(&'static str, Value)> {
    vec![
        ("model", string()),
        ("stream", boolean()),
        ("stream_options", nullable("object")),
        ("max_tokens", nullable("integer")),
        ("temperature", nullable("number")),
        ("top_p", nullable("number")),
        ("top_k", nullable("integer")),
        ("min_p", nullable("number")),
        ("presence_penalty", nullable("number")),
        ("frequency_penalty", nullable("number")),
        ("repetition_penalty", nullable("number")),
        ("seed", nullable("integer")),
        ("n", nullable("integer")),
        ("stop", json!({"type": ["string", "array", "null"], "items": {"type": "string"}})),
        ("logit_bias", nullable("object")),
        ("ignore_eos", boolean()),
        ("cache", boolean()),
        ("user", string()),
        ("metadata", any()),
        ("store", any()),
    ]
}

/// Anthropic's Messages request, its count_tokens request (the prompt fields alone) and its `message` answer.
fn anthropic() -> (Value, Value, Value) {
    let message = object(
        &[
            ("role", json!({"type": "string", "enum": ["user", "assistant"]})),
            ("content", json!({"type": ["string", "array"]})),
        ],
        &["role", "content"],
        true,
    );
    let prompt = vec![
        ("model", string()),
        ("messages", array(message)),
        ("system", json!({"type": ["string", "array"]})),
        ("tools", array(json!({"type": "object"}))),
        ("tool_choice", json!({"type": "object"})),
        ("thinking", json!({"type": "object"})),
    ];
    let mut full = prompt.clone();
    full.extend([
        ("max_tokens", json!({"type": "integer", "minimum": 1})),
        ("stream", boolean()),
        ("temperature", nullable("number")),
        ("top_p", nullable("number")),
        ("top_k", nullable("integer")),
        ("seed", nullable("integer")),
        ("stop_sequences", array(string())),
        ("metadata", any()),
        ("service_tier", string()),
        ("output_config", json!({"type": "object"})),
        ("speed", any()),
        ("inference_geo", any()),
        ("cache_control", any()),
        ("diagnostics", any()),
        ("user_profile_id", any()),
        ("workspace_id", any()),
        ("context_management", any()),
    ]);
    let usage = answer(&[("input_tokens", int()), ("output_tokens", int())]);
    let reply = answer(&[
        ("id", string()),
        ("type", json!({"const": "message"})),
        ("role", json!({"const": "assistant"})),
        ("model", string()),
        ("content", array(json!({"type": "object"}))),
        ("stop_reason", nullable("string")),
        ("stop_sequence", nullable("string")),
        ("usage", usage),
    ]);
    (body(&full, &["model", "messages", "max_tokens"]), body(&prompt, &["model", "messages"]), reply)
}

/// The shared component schemas.
pub fn components() -> Value {
    let error = answer(&[(
        "error",
        object(
            &[("message", string()), ("type", string()), ("param", nullable("string")), ("code", nullable("string"))],
            &["message", "type"],
            false,
        ),
    )]);
    let message = object(
        &[
            ("role", json!({"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]})),
            ("content", json!({"type": ["string", "array", "null"]})),
            ("name", string()),
            ("tool_calls", array(json!({"type": "object"}))),
            ("tool_call_id", string()),
            ("reasoning_content", nullable("string")),
            ("reasoning", nullable("string")),
            ("refusal", nullable("string")),
        ],
        &["role"],
        true,
    );
    let mut chat = sampling();
    chat.extend([
        ("messages", array(reference("ChatMessage"))),
        ("max_completion_tokens", nullable("integer")),
        ("logprobs", nullable("boolean")),
        ("top_logprobs", nullable("integer")),
        ("tools", array(json!({"type": "object"}))),
        ("tool_choice", json!({"type": ["string", "object"]})),
        ("parallel_tool_calls", boolean()),
        ("response_format", json!({"type": "object"})),
    ]);
    let mut text = sampling();
    text.extend([
        ("prompt", json!({"type": ["string", "array"]})),
        ("logprobs", nullable("integer")),
        ("echo", boolean()),
        ("best_of", nullable("integer")),
        ("suffix", nullable("string")),
    ]);
    let usage = answer(&[("prompt_tokens", int()), ("completion_tokens", int()), ("total_tokens", int())]);
    let choice_msg = answer(&[("index", int()), ("message", json!({"type": "object"})), ("finish_reason", string())]);
    let choice_text = answer(&[("index", int()), ("text", string()), ("finish_reason", string())]);
    let completion = |object_name: &str, choice: Value| {
        answer(&[
            ("id", string()),
            ("object", json!({"const": object_name})),
            ("created", int()),
            ("model", string()),
            ("choices", array(choice)),
            ("usage", usage.clone()),
        ])
    };
    let model = answer(&[
        ("id", string()),
        ("object", json!({"const": "model"})),
        ("capabilities", json!({"type": "object"})),
        ("loaded", boolean()),
        ("backend", string()),
        ("default", boolean()),
    ]);
    let key_row = answer(&[("id", string()), ("name", string()), ("prefix", string()), ("account", string())]);
    let account = answer(&[("name", string()), ("role", string()), ("created", string())]);
    let session = answer(&[("id", string()), ("account", string()), ("created", string()), ("current", boolean())]);
    let conversation = answer(&[("id", int()), ("title", string()), ("model", nullable("string"))]);
    let (anthropic_request, anthropic_count, anthropic_message) = anthropic();
    json!({
        "Error": error,
        "ChatMessage": message,
        "ChatRequest": body(&chat, &["model", "messages"]),
        "CompletionRequest": body(&text, &["model", "prompt"]),
        "ChatCompletion": completion("chat.completion", choice_msg),
        "Completion": completion("text_completion", choice_text),
        "Model": model,
        "ApiKey": key_row,
        "Account": account,
        "Session": session,
        "Conversation": conversation,
        "Dataset": answer(&[("id", string()), ("name", string()), ("format", json!({"enum": ["text", "messages", "plain", "suite"]})),
            ("records", int()), ("train_records", int()), ("validation_records", int()), ("bytes", int())]),
        "Job": answer(&[("id", string()), ("kind", string()), ("state", json!({"enum": crate::jobs::STATES})),
            ("spec", json!({"type": "object"})), ("created_at", string())]),
        "MessagesRequest": anthropic_request,
        "CountTokensRequest": anthropic_count,
        "Message": anthropic_message,
        "Response": answer(&[
            ("id", string()), ("object", json!({"const": "response"})), ("created_at", int()), ("status", string()),
            ("model", string()), ("output", array(json!({"type": "object"}))), ("usage", json!({"type": "object"}))]),
    })
}

/// One operation's request body, parameters and responses: (method, path) → the OpenAPI fields to merge in.
pub fn operation(method: &str, path: &str) -> Option<Value> {
    let json_body = |schema: Value| json!({"required": true, "content": {"application/json": {"schema": schema}}});
    let ok = |schema: Value| json!({"description": "success", "content": {"application/json": {"schema": schema}}});
    let sse_or = |schema: Value| {
        json!({"description": "the reply: JSON, or server-sent events when stream is true", "content": {
            "application/json": {"schema": schema}, "text/event-stream": {"schema": string()}}})
    };
    let created =
        |schema: Value| json!({"201": {"description": "created", "content": {"application/json": {"schema": schema}}}});
    let none = || json!({"204": {"description": "done; no body"}});
    let path_param = |name: &str| json!([{"name": name, "in": "path", "required": true, "schema": string()}]);
    let conversation_id = json!([{"name": "id", "in": "path", "required": true, "schema": int()}]);
    let changes = json!({"required": false, "content": {"application/json": {"schema": body(&[
        ("title", string()), ("model", nullable("string")), ("settings", json!({"type": "object"}))], &[])}}});
    let query_int = |name: &str, lo: u32, hi: u32| {
        json!([{"name": name, "in": "query", "required": false,
                "schema": {"type": "integer", "minimum": lo, "maximum": hi}}])
    };
    let queue_item = answer(&[("id", int()), ("kind", string()), ("account", string())]);
    let op = match (method, path) {
        ("POST", "/v1/chat/completions") => json!({
            "requestBody": json_body(reference("ChatRequest")),
            "responses": {"200": sse_or(reference("ChatCompletion"))},
        }),
        ("POST", "/v1/messages") => json!({
            "requestBody": json_body(reference("MessagesRequest")),
            "responses": {"200": sse_or(reference("Message"))},
        }),
        ("POST", "/v1/messages/count_tokens") => json!({
            "requestBody": json_body(reference("CountTokensRequest")),
            "responses": {"200": ok(answer(&[("input_tokens", int())]))},
        }),
        ("POST", "/v1/responses") => json!({
            "requestBody": json_body(body(&[
                ("model", string()), ("input", json!({"type": ["string", "array"]})), ("instructions", nullable("string")),
                ("tools", array(json!({"type": "object"}))), ("tool_choice", json!({"type": ["string", "object"]})),
                ("parallel_tool_calls", boolean()), ("previous_response_id", nullable("string")), ("store", boolean()),
                ("stream", boolean()), ("temperature", nullable("number")), ("top_p", nullable("number")),
                ("seed", nullable("integer")), ("max_output_tokens", nullable("integer")), ("text", json!({"type": "object"})),
                ("reasoning", json!({"type": "object"})), ("background", boolean()), ("metadata", any()), ("user", any()),
                ("safety_identifier", any()), ("prompt_cache_key", any()), ("service_tier", any()), ("include", any()),
                ("truncation", any()), ("prompt_cache_retention", any()), ("max_tool_calls", any()),
                ("client_metadata", any())],
                &["model", "input"])),
            "responses": {"200": sse_or(reference("Response"))},
        }),
        ("GET", "/v1/responses/{id}") => {
            json!({"parameters": path_param("id"), "responses": {"200": ok(reference("Response"))}})
        }
        ("DELETE", "/v1/responses/{id}") => json!({"parameters": path_param("id"), "responses": {"200": ok(answer(&[
            ("id", string()), ("object", json!({"const": "response"})), ("deleted", boolean())]))}}),
        ("POST", "/v1/completions") => json!({
            "requestBody": json_body(reference("CompletionRequest")),
            "responses": {"200": sse_or(reference("Completion"))},
        }),
        ("POST", "/v1/embeddings") => json!({
            "requestBody": json_body(body(&[
                ("model", string()), ("input", json!({"type": ["string", "array"]})),
                ("encoding_format", json!({"enum": ["float", "base64"]})), ("dimensions", nullable("integer")),
                ("user", any())],
                &["model", "input"])),
            "responses": {"200": ok(answer(&[
                ("object", json!({"const": "list"})), ("model", string()),
                ("data", array(answer(&[("object", json!({"const": "embedding"})), ("index", int()),
                    ("embedding", json!({"type": ["array", "string"]}))]))),
                ("usage", answer(&[("prompt_tokens", int()), ("total_tokens", int())]))]))},
        }),
        ("GET", "/v1/models") => json!({"responses": {"200": ok(answer(&[
            ("object", json!({"const": "list"})), ("data", array(reference("Model")))]))}}),
        ("GET", "/api/health") => {
            let health =
                answer(&[("status", string()), ("version", string()), ("queue", int()), ("loaded", array(string()))]);
            json!({"responses": {"200": ok(health.clone()),
                   "503": {"description": "shutting down", "content": {"application/json": {"schema": health}}}}})
        }
        ("GET", "/api/queue") => json!({"responses": {"200": ok(answer(&[
            ("waiting", array(queue_item.clone())), ("running", array(queue_item)),
            ("next", nullable("integer")), ("limits", json!({"type": "object"})),
            ("jobs", array(answer(&[("id", nullable("string")), ("kind", string()), ("account", nullable("string")),
                ("started_at", string()), ("chat", json!({"type": ["object", "null"]}))])))]))}}),
        ("GET", "/api/ps") => json!({"responses": {"200": ok(answer(&[
            ("models", array(answer(&[("name", string()), ("charged_bytes", int()), ("context", int())]))),
            ("memory", answer(&[("total_bytes", int()), ("left_bytes", int())]))]))}}),
        ("POST", "/api/load") => json!({
            "requestBody": json_body(body(&[("model", string()), ("backend", nullable("string"))], &["model"])),
            "responses": {"200": ok(answer(&[("loaded", array(string())), ("backend", string())]))},
        }),
        ("POST", "/api/unload") => json!({
            "requestBody": json_body(body(&[("model", nullable("string")), ("all", boolean())], &[])),
            "responses": {"200": ok(answer(&[("unloaded", array(string()))]))},
        }),
        ("POST", "/api/pull") => json!({
            "requestBody": json_body(body(&[("model", string())], &["model"])),
            "responses": {"200": {"description": "progress as server-sent events",
                                  "content": {"text/event-stream": {"schema": string()}}}},
        }),
        ("GET", "/api/metrics/usage") => json!({
            "parameters": query_int("days", 1, 3650),
            "responses": {"200": ok(answer(&[("days", int()), ("accounts", array(json!({"type": "object"})))]))},
        }),
        ("GET", "/metrics") => json!({"responses": {"200": {"description": "Prometheus text format",
            "content": {"text/plain": {"schema": string()}}}}}),
        ("GET", "/api/openapi.json") => json!({"responses": {"200": ok(json!({"type": "object"}))}}),
        ("GET", "/api") => json!({"responses": {"200": {"description": "an HTML page",
            "content": {"text/html": {"schema": string()}}}}}),
        ("POST", "/api/auth/login") => json!({
            "requestBody": json_body(body(&[("username", string()), ("password", string())], &["username", "password"])),
            "responses": {"200": ok(answer(&[("account", string()), ("role", string()), ("csrf_token", string())]))},
        }),
        ("POST", "/api/auth/logout") => json!({"responses": none()}),
        ("GET", "/api/auth/me") => json!({"responses": {"200": ok(answer(&[
            ("account", string()), ("role", string()), ("mode", string()), ("csrf_token", string())]))}}),
        ("GET", "/api/auth/oidc/login") => json!({"responses": {"302": {"description": "to the OpenID provider"}}}),
        ("GET", "/api/auth/oidc/callback") => json!({
            "parameters": [
                {"name": "code", "in": "query", "required": false, "schema": string()},
                {"name": "state", "in": "query", "required": false, "schema": string()},
                {"name": "error", "in": "query", "required": false, "schema": string()},
            ],
            "responses": {"302": {"description": "signed in: to the web UI"}},
        }),
        ("GET", "/api/keys") => json!({"responses": {"200": ok(array(reference("ApiKey")))}}),
        ("POST", "/api/keys") => json!({
            "requestBody": json_body(body(&[("name", string())], &["name"])),
            "responses": {"200": ok(answer(&[("id", string()), ("name", string()), ("key", string())]))},
        }),
        ("DELETE", "/api/keys/{id}") => json!({"parameters": path_param("id"), "responses": none()}),
        ("GET", "/api/users") => json!({"responses": {"200": ok(array(reference("Account")))}}),
        ("POST", "/api/users") => json!({
            "requestBody": json_body(body(
                &[("name", string()), ("password", string()), ("role", json!({"enum": ["admin", "user"]}))],
                &["name", "password"])),
            "responses": {"200": ok(reference("Account"))},
        }),
        ("PATCH", "/api/users/{name}") => json!({
            "parameters": path_param("name"),
            "requestBody": json_body(body(
                &[("password", string()), ("role", json!({"enum": ["admin", "user"]}))], &[])),
            "responses": {"200": ok(reference("Account"))},
        }),
        ("DELETE", "/api/users/{name}") => json!({"parameters": path_param("name"), "responses": none()}),
        ("GET", "/api/sessions") => json!({"responses": {"200": ok(array(reference("Session")))}}),
        ("DELETE", "/api/sessions/{id}") => json!({"parameters": path_param("id"), "responses": none()}),
        ("POST", "/api/tokenize") => json!({
            "requestBody": json_body(body(&[("model", string()), ("text", string())], &["model", "text"])),
            "responses": {"200": ok(answer(&[("model", string()), ("count", int()),
                ("tokens", array(answer(&[("id", int()), ("text", string())])))]))},
        }),
        ("GET", "/api/models") => json!({"responses": {"200": ok(answer(&[
            ("cache", string()), ("models", array(json!({"type": "object"})))]))}}),
        ("GET", "/api/requests") => json!({
            "parameters": query_int("limit", 1, 200),
            "responses": {"200": ok(answer(&[("requests", array(json!({"type": "object"})))]))},
        }),
        ("GET", "/api/settings") => json!({"responses": {"200": ok(answer(&[
            ("server", json!({"type": "object"})), ("live", array(string()))]))}}),
        ("PATCH", "/api/settings") => json!({
            "requestBody": json_body(body(&[("queue", int()), ("queue_per_account", int()),
                ("generations_per_minute", nullable("integer")), ("batch", int()), ("default_model", string())], &[])),
            "responses": {"200": ok(answer(&[("server", json!({"type": "object"})), ("live", array(string()))]))},
        }),
        ("GET", "/api/bench") => json!({"responses": {"200": ok(json!({"type": ["object", "null"]}))}}),
        ("POST", "/api/bench") => json!({
            "requestBody": json_body(body(&[("models", array(string())), ("max_tokens", int()), ("rounds", int())],
                &["models"])),
            "responses": {"200": {"description": "progress as server-sent events",
                                  "content": {"text/event-stream": {"schema": string()}}}},
        }),
        ("GET", "/api/datasets") => json!({"responses": {"200": ok(answer(&[("data", array(reference("Dataset")))]))}}),
        ("POST", "/api/datasets") => json!({
            "parameters": [
                {"name": "name", "in": "query", "required": false, "schema": string()},
                {"name": "validation", "in": "query", "required": false,
                 "schema": {"type": "number", "minimum": 0, "exclusiveMaximum": 1}},
            ],
            "requestBody": {"required": true, "content": {
                "application/octet-stream": {"schema": string()}, "text/plain": {"schema": string()}}},
            "responses": created(reference("Dataset")),
        }),
        ("GET", "/api/datasets/{id}") => json!({
            "parameters": [
                {"name": "id", "in": "path", "required": true, "schema": string()},
                {"name": "rows", "in": "query", "required": false, "schema": {"type": "integer", "minimum": 0}},
                {"name": "model", "in": "query", "required": false, "schema": string()},
            ],
            "responses": {"200": ok(reference("Dataset"))},
        }),
        ("DELETE", "/api/datasets/{id}") => json!({
            "parameters": path_param("id"),
            "responses": {"200": ok(answer(&[("id", string()), ("deleted", boolean())]))},
        }),
        ("GET", "/api/jobs") => json!({"responses": {"200": ok(answer(&[("data", array(reference("Job")))]))}}),
        ("POST", "/api/jobs") => json!({
            "requestBody": json_body(body(&[
                ("kind", json!({"enum": ["train", "eval", "perplexity", "bench"]})), ("output", string()),
                ("model", string()), ("split", json!({"enum": crate::jobs::ppl::SPLITS})), ("window", int()),
                ("rounds", int()),
                ("models", array(string())), ("scorer", json!({"enum": ["exact", "contains", "regex", "choice"]})),
                ("max_tokens", int()), ("system", string()),
                ("config", json!({"type": "object"})), ("tokenizer", string()), ("eos", string()),
                ("chat_template", string()), ("dataset", string()), ("steps", int()),
                ("lr", json!({"type": "number"})), ("warmup", int()), ("batch", int()), ("accum", int()),
                ("seq_len", int()), ("clip", json!({"type": "number"})), ("weight_decay", json!({"type": "number"})),
                ("seed", int()), ("save_every", int()), ("eval_every", int()),
                ("lora", body(&[("rank", int()), ("alpha", json!({"type": "number"})), ("targets", array(string()))],
                    &[]))], &["kind"])),
            "responses": created(reference("Job")),
        }),
        ("GET", "/api/jobs/{id}") => {
            json!({"parameters": path_param("id"), "responses": {"200": ok(reference("Job"))}})
        }
        ("DELETE", "/api/jobs/{id}") => {
            json!({"parameters": path_param("id"), "responses": {"200": ok(reference("Job"))}})
        }
        ("POST", "/api/jobs/{id}/resume") => {
            json!({"parameters": path_param("id"), "responses": created(reference("Job"))})
        }
        ("GET", "/api/jobs/{id}/items") => json!({
            "parameters": path_param("id"),
            "responses": {"200": ok(answer(&[("data", array(answer(&[("model", string()), ("index", int()),
                ("prompt", string()), ("expected", string()), ("answer", string()), ("correct", boolean())])))]))},
        }),
        ("GET", "/api/jobs/{id}/events") => json!({
            "parameters": path_param("id"),
            "responses": {"200": {"description": "the job's events, then the live ones (server-sent events)",
                                  "content": {"text/event-stream": {"schema": string()}}}},
        }),
        ("GET", "/api/conversations") => json!({"responses": {"200": ok(answer(&[
            ("conversations", array(reference("Conversation")))]))}}),
        ("POST", "/api/conversations") => json!({
            "requestBody": changes,
            "responses": created(reference("Conversation")),
        }),
        ("GET", "/api/conversations/{id}") => json!({
            "parameters": conversation_id,
            "responses": {"200": ok(reference("Conversation"))},
        }),
        ("PATCH", "/api/conversations/{id}") => json!({
            "parameters": conversation_id,
            "requestBody": changes,
            "responses": {"200": ok(reference("Conversation"))},
        }),
        ("DELETE", "/api/conversations/{id}") => json!({"parameters": conversation_id, "responses": none()}),
        ("POST", "/api/conversations/{id}/messages") => json!({
            "parameters": conversation_id,
            "requestBody": json_body(body(&[("role", json!({"enum": ["system", "user", "assistant", "tool"]})),
                ("content", nullable("string")), ("tool_calls", array(json!({"type": "object"}))),
                ("tool_call_id", string())], &["role"])),
            "responses": created(answer(&[("id", int()), ("conversation", int()), ("role", string())])),
        }),
        _ => return None,
    };
    Some(op)
}

/// Every response may also be one of these, in OpenAI's error shape.
pub fn errors() -> Value {
    let e = json!({"application/json": {"schema": reference("Error")}});
    json!({
        "4XX": {"description": "the request is wrong, not allowed, or names nothing here", "content": e},
        "5XX": {"description": "the server could not answer (shutting down: 503, with Retry-After)", "content": e},
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::table::ROUTES;

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r.clone());
                }
                o.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    /// Every route is described, every `{name}` in a path is declared as a path parameter, and every reference
    /// names a component that exists.
    #[test]
    fn every_route_has_its_parameters_bodies_and_answers() {
        let components = components();
        for r in ROUTES {
            let op = operation(r.method, r.path).unwrap_or_else(|| panic!("{} {} has no schema", r.method, r.path));
            assert!(op["responses"].as_object().is_some_and(|o| !o.is_empty()), "{} {}", r.method, r.path);
            let declared: Vec<&str> = op["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path")
                .filter_map(|p| p["name"].as_str())
                .collect();
            let templated: Vec<&str> =
                r.path.split('/').filter_map(|s| s.strip_prefix('{')?.strip_suffix('}')).collect();
            assert_eq!(declared, templated, "{} {}", r.method, r.path);
            let mut found = Vec::new();
            refs(&op, &mut found);
            refs(&components, &mut found);
            for name in found {
                let key = name.trim_start_matches("#/components/schemas/");
                assert!(components.get(key).is_some(), "{} {}: {name}", r.method, r.path);
            }
        }
    }
}
