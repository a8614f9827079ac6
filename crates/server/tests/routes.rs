//! The tables that keep the docs and the CLI honest: the route table against the router's source and against the
//! served OpenAPI document and /api page, and every route against the CLI's COMMANDS / NOT_COMMANDS.

mod common;

#[path = "../src/api/table.rs"]
mod table;

#[path = "../../cli/src/client/commands.rs"]
mod commands;

use std::collections::BTreeSet;
use table::ROUTES;

fn table_routes() -> BTreeSet<(String, String)> {
    ROUTES.iter().map(|r| (r.method.to_string(), r.path.to_string())).collect()
}

/// `.route("PATH", get(…))` / `post(…)` / `patch(…)` / `delete(…)` calls in the files that register routes.
fn registered() -> BTreeSet<(String, String)> {
    let needle = concat!(".route", "(\"");
    let mut out = BTreeSet::new();
    for src in [include_str!("../src/api/mod.rs"), include_str!("../src/auth/routes.rs")] {
        for part in src.split(needle).skip(1) {
            let (path, rest) = part.split_once('"').unwrap();
            let rest = rest.trim_start_matches(',').trim_start();
            let method = rest.split('(').next().unwrap().to_uppercase();
            out.insert((method, path.to_string()));
        }
    }
    out
}

#[test]
fn the_router_registers_exactly_the_table() {
    let reg = registered();
    assert!(reg.len() >= 6, "the scan found the routes: {reg:?}");
    assert_eq!(reg, table_routes(), "a route registered but not in api/table.rs ROUTES, or the reverse");
}

#[test]
fn every_route_has_a_command_or_a_reason() {
    let commands: BTreeSet<(String, String)> =
        commands::COMMANDS.iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    let not: BTreeSet<(String, String)> =
        commands::NOT_COMMANDS.iter().map(|(m, p, _)| (m.to_string(), p.to_string())).collect();
    for r in table_routes() {
        assert!(commands.contains(&r) ^ not.contains(&r), "{r:?} must be in exactly one of COMMANDS and NOT_COMMANDS");
    }
    for r in commands.union(&not) {
        assert!(table_routes().contains(r), "{r:?} is in the CLI's tables but the server has no such route");
    }
    assert!(commands::NOT_COMMANDS.iter().all(|(_, _, why)| why.len() > 10), "every exclusion says why");
}

#[test]
fn the_served_openapi_document_and_page_list_every_route_and_each_answers() {
    let s = common::scripted("openapi", &[]);
    let (code, doc) = s.get("/api/openapi.json");
    assert_eq!(code, 200);
    let doc: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let mut served = BTreeSet::new();
    for (p, ops) in doc["paths"].as_object().unwrap() {
        for m in ops.as_object().unwrap().keys() {
            served.insert((m.to_uppercase(), p.clone()));
        }
    }
    assert_eq!(served, table_routes());
    let (code, page) = s.get("/api");
    assert_eq!(code, 200);
    for r in ROUTES {
        assert!(page.contains(&format!("<code>{}</code>", r.path)), "/api lacks {}", r.path);
        // The router really has it (auth mode none): a GET route answers 200, a POST route answers an empty body
        // with a 400; a path with a parameter answers for an id that does not exist (404 not_found, or 400 for an
        // empty change), never the router's no_route or a 405. The OIDC routes say mode none has no OIDC (400),
        // and signing out with no session is a 204.
        let path = r.path.replace("{id}", "nope").replace("{name}", "nope");
        let (code, body) =
            match ureq::request(r.method, &format!("{}{path}", s.url)).send_string("{\"no such field\": 1}") {
                Ok(resp) => (resp.status(), resp.into_string().unwrap()),
                Err(ureq::Error::Status(code, resp)) => (code, resp.into_string().unwrap()),
                Err(e) => panic!("{} {path}: {e}", r.method),
            };
        let want = match (r.method, r.path) {
            (_, p) if p.starts_with("/api/conversations/{id}") => 400,
            (_, p) if p.starts_with("/api/auth/oidc/") => 400,
            // A stored response, dataset or job that does not exist: 404 for a GET as for a DELETE.
            (_, "/v1/responses/{id}") => 404,
            (_, p) if p.starts_with("/api/datasets/{id}") || p.starts_with("/api/jobs/{id}") => 404,
            ("POST", "/api/auth/logout") => 204,
            ("GET", _) => 200,
            ("POST" | "PATCH", _) => 400,
            _ => 404,
        };
        assert_eq!(code, want, "{} {path}: {body}", r.method);
        assert!(!body.contains("no_route"), "{} {path}: {body}", r.method);
    }
}
