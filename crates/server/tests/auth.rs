//! Accounts and security against the real `kvad-serve` (scripted engine) on a loopback port with a fresh SQLite
//! file: who gets in (401), who may do what (403, and 404 for another account's things), the CSRF gate, API keys,
//! Basic, the bind rule, and that nothing secret lands in the database or leaks in an error.

mod common;

use common::Server;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::process::{Command, Stdio};

const ADMIN_PW: &str = "admin-password-1";

/// A response: status, headers (lower-case names; Set-Cookie values joined by "\n"), body as JSON (Null if none).
struct Resp {
    status: u16,
    headers: HashMap<String, String>,
    body: Value,
    text: String,
}

fn call(s: &Server, method: &str, path: &str, headers: &[(&str, &str)], body: Option<Value>) -> Resp {
    let mut req = ureq::request(method, &format!("{}{path}", s.url));
    for (k, v) in headers {
        req = req.set(k, v);
    }
    let r = match body {
        Some(b) => req.set("content-type", "application/json").send_string(&b.to_string()),
        None => req.call(),
    };
    let r = match r {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {path}: {e}"),
    };
    let mut headers = HashMap::new();
    for name in r.headers_names() {
        let all: Vec<&str> = r.all(&name);
        headers.insert(name.to_lowercase(), all.join("\n"));
    }
    let status = r.status();
    let text = r.into_string().unwrap_or_default();
    let body = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp { status, headers, body, text }
}

fn local(tag: &str) -> Server {
    auth_server(tag, "local")
}

fn auth_server(tag: &str, mode: &str) -> Server {
    let script = common::script();
    common::start_env(
        tag,
        &["--scripted", script.to_str().unwrap()],
        &[("KVAD_AUTH_MODE", mode), ("KVAD_ADMIN_PASSWORD", ADMIN_PW)],
    )
}

/// A signed-in browser: the cookie header and the CSRF token.
struct Browser {
    cookie: String,
    csrf: String,
}

impl Browser {
    fn headers(&self) -> Vec<(&str, &str)> {
        vec![("cookie", self.cookie.as_str()), ("x-csrf-token", self.csrf.as_str())]
    }
}

fn login(s: &Server, user: &str, pw: &str) -> Browser {
    let r = call(s, "POST", "/api/auth/login", &[], Some(json!({"username": user, "password": pw})));
    assert_eq!(r.status, 200, "{}", r.text);
    let set = &r.headers["set-cookie"];
    let cookie = set.split(';').next().unwrap().to_string();
    Browser { cookie, csrf: r.body["csrf_token"].as_str().unwrap().to_string() }
}

fn make_user(s: &Server, admin: &Browser, name: &str, role: &str) {
    let r = call(
        s,
        "POST",
        "/api/users",
        &admin.headers(),
        Some(json!({"name": name, "password": pw(name), "role": role})),
    );
    assert_eq!(r.status, 200, "{}", r.text);
}

fn pw(name: &str) -> String {
    format!("{name}-password")
}

fn new_key(s: &Server, b: &Browser, name: &str) -> (String, String) {
    let r = call(s, "POST", "/api/keys", &b.headers(), Some(json!({"name": name})));
    assert_eq!(r.status, 200, "{}", r.text);
    (r.body["id"].as_str().unwrap().to_string(), r.body["key"].as_str().unwrap().to_string())
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

fn db(s: &Server) -> rusqlite::Connection {
    rusqlite::Connection::open(s.dir.join("kvad.db")).unwrap()
}

/// Every text column of every row of a table, joined.
fn dump(s: &Server, table: &str) -> String {
    let c = db(s);
    let mut st = c.prepare(&format!("SELECT * FROM {table}")).unwrap();
    let n = st.column_count();
    let rows = st
        .query_map([], |r| {
            Ok((0..n)
                .map(|i| r.get::<_, Option<String>>(i).ok().flatten().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("|"))
        })
        .unwrap();
    rows.map(Result::unwrap).collect::<Vec<_>>().join("\n")
}

fn assert_401(r: &Resp, what: &str) {
    assert_eq!(r.status, 401, "{what}: {}", r.text);
    assert_eq!(r.body["error"]["type"], "authentication_error", "{what}: {}", r.text);
    assert!(r.headers.contains_key("www-authenticate"), "{what}");
}

#[test]
fn without_a_session_or_key_every_api_route_is_401_and_public_ones_answer() {
    let s = local("noauth");
    for (m, p) in [
        ("GET", "/v1/models"),
        ("GET", "/api/queue"),
        ("GET", "/api/ps"),
        ("GET", "/api/keys"),
        ("GET", "/api/sessions"),
        ("GET", "/api/users"),
        ("GET", "/api/auth/me"),
        ("GET", "/api/metrics/usage"),
        ("GET", "/metrics"),
        ("GET", "/api/no-such-route"),
    ] {
        assert_401(&call(&s, m, p, &[], None), p);
    }
    let chat = json!({"model": "qwen2.5-scripted", "messages": [{"role": "user", "content": "hi"}]});
    assert_401(&call(&s, "POST", "/v1/chat/completions", &[], Some(chat.clone())), "chat");
    assert_401(&call(&s, "POST", "/api/load", &[], Some(json!({"model": "qwen2.5-scripted"}))), "load");
    // A made-up key, a key-shaped string, a stale cookie: all 401 and the same words.
    let bogus = bearer(&format!("kvad_{}", "0".repeat(48)));
    let r = call(&s, "GET", "/v1/models", &[("authorization", &bogus)], None);
    assert_401(&r, "bogus key");
    let msg = r.body["error"]["message"].clone();
    let r = call(&s, "GET", "/v1/models", &[("authorization", "Bearer something")], None);
    assert_eq!(r.body["error"]["message"], msg);
    let r = call(&s, "GET", "/v1/models", &[("cookie", "kvad_session=deadbeef")], None);
    assert_eq!((r.status, &r.body["error"]["message"]), (401, &msg));
    // The header that names the account in mode none proves nothing here, and Basic is for mode basic only.
    assert_401(&call(&s, "GET", "/v1/models", &[("x-kvad-account", "admin")], None), "x-kvad-account");
    let basic = format!("Basic {}", base64_like::encode(&format!("admin:{ADMIN_PW}")));
    assert_401(&call(&s, "GET", "/v1/models", &[("authorization", &basic)], None), "Basic in mode local");
    for p in ["/api/health", "/api/openapi.json", "/api"] {
        assert_eq!(call(&s, "GET", p, &[], None).status, 200, "{p}");
    }
}

#[test]
fn login_sets_an_httponly_cookie_stores_only_hashes_and_logout_ends_the_session() {
    let s = local("login");
    // Wrong password and unknown user: the same 401 and message, naming nobody.
    let wrong = call(&s, "POST", "/api/auth/login", &[], Some(json!({"username": "admin", "password": "nope-nope"})));
    let unknown = call(&s, "POST", "/api/auth/login", &[], Some(json!({"username": "zed", "password": "nope-nope"})));
    assert_eq!((wrong.status, unknown.status), (401, 401));
    assert_eq!(wrong.body["error"]["message"], "wrong username or password");
    assert_eq!(wrong.text, unknown.text);
    assert!(!wrong.headers.contains_key("set-cookie"));
    let r = call(&s, "POST", "/api/auth/login", &[], Some(json!({"username": "admin", "password": ADMIN_PW})));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!((r.body["account"].as_str(), r.body["role"].as_str()), (Some("admin"), Some("admin")));
    let set = &r.headers["set-cookie"];
    assert!(set.starts_with("kvad_session="), "{set}");
    for attr in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(set.contains(attr), "{attr} in {set}");
    }
    let cookie = set.split(';').next().unwrap().to_string();
    let token = cookie.trim_start_matches("kvad_session=").to_string();
    let csrf = r.body["csrf_token"].as_str().unwrap().to_string();
    assert!(token.len() >= 64 && csrf.len() >= 32);
    let me = call(&s, "GET", "/api/auth/me", &[("cookie", &cookie)], None);
    assert_eq!(me.body, json!({"account": "admin", "role": "admin", "mode": "local", "csrf_token": csrf}));
    // The database has the session under the token's hash, never the token; the password as argon2id.
    let sessions = dump(&s, "sessions");
    assert!(!sessions.contains(&token), "the cookie token is stored in the clear");
    let accounts = dump(&s, "accounts");
    assert!(accounts.contains("$argon2id$") && !accounts.contains(ADMIN_PW), "{accounts}");
    // Logout needs the CSRF token too (it changes state), then ends the session.
    let r = call(&s, "POST", "/api/auth/logout", &[("cookie", &cookie)], None);
    assert_eq!(r.status, 403, "{}", r.text);
    let r = call(&s, "POST", "/api/auth/logout", &[("cookie", &cookie), ("x-csrf-token", &csrf)], None);
    assert_eq!(r.status, 204);
    assert!(r.headers["set-cookie"].contains("Max-Age=0"));
    assert_401(&call(&s, "GET", "/api/auth/me", &[("cookie", &cookie)], None), "after logout");
    assert_eq!(dump(&s, "sessions"), "");
}

#[test]
fn a_cookie_authenticated_change_needs_the_csrf_token_and_the_same_site() {
    let s = local("csrf");
    let b = login(&s, "admin", ADMIN_PW);
    let body = Some(json!({"name": "k"}));
    // A cross-site form post carries the cookie but cannot know the token.
    let r = call(&s, "POST", "/api/keys", &[("cookie", &b.cookie)], body.clone());
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.body["error"]["code"], "csrf");
    let r = call(&s, "POST", "/api/keys", &[("cookie", &b.cookie), ("x-csrf-token", "0123")], body.clone());
    assert_eq!(r.status, 403);
    let r = call(&s, "POST", "/api/load", &[("cookie", &b.cookie)], Some(json!({"model": "qwen2.5-scripted"})));
    assert_eq!(r.status, 403, "the gate is in front of every route: {}", r.text);
    let origin = "http://evil.example";
    let mut h = b.headers();
    h.push(("origin", origin));
    let r = call(&s, "POST", "/api/keys", &h, body.clone());
    assert_eq!(r.status, 403, "right token, other site: {}", r.text);
    assert_eq!(call(&s, "GET", "/api/keys", &[("cookie", &b.cookie)], None).status, 200, "reads need no token");
    let (id, key) = new_key(&s, &b, "k");
    let r = call(&s, "DELETE", &format!("/api/keys/{id}"), &[("cookie", &b.cookie)], None);
    assert_eq!(r.status, 403, "{}", r.text);
    // An API key is not a browser's ambient credential: no token needed.
    let r = call(&s, "POST", "/api/keys", &[("authorization", &bearer(&key))], body);
    assert_eq!(r.status, 200, "{}", r.text);
}

#[test]
fn api_keys_authenticate_record_their_use_and_stop_when_revoked() {
    let s = local("keys");
    let b = login(&s, "admin", ADMIN_PW);
    let (id, key) = new_key(&s, &b, "laptop");
    assert!(key.starts_with("kvad_"));
    let list = call(&s, "GET", "/api/keys", &[("cookie", &b.cookie)], None).body;
    let row = list.as_array().unwrap().iter().find(|k| k["id"] == id.as_str()).unwrap().clone();
    assert_eq!(
        (row["name"].as_str(), row["account"].as_str(), &row["revoked"]),
        (Some("laptop"), Some("admin"), &json!(false))
    );
    assert!(row["last_used"].is_null());
    assert!(key.starts_with(row["prefix"].as_str().unwrap()) && row["prefix"].as_str().unwrap().len() < 16);
    assert!(!list.to_string().contains(&key), "the key is shown once");
    assert!(!dump(&s, "api_keys").contains(&key[5..]), "only the key's hash is stored");
    let r = call(&s, "GET", "/api/auth/me", &[("authorization", &bearer(&key))], None);
    assert_eq!(r.body, json!({"account": "admin", "role": "admin", "mode": "local", "csrf_token": ""}));
    let list = call(&s, "GET", "/api/keys", &[("authorization", &bearer(&key))], None).body;
    assert!(list[0]["last_used"].is_string(), "{list}");
    // Anthropic's clients send the key as x-api-key; a Messages path answers a refusal in Anthropic's shape.
    let r = call(&s, "GET", "/api/auth/me", &[("x-api-key", &key)], None);
    assert_eq!(r.body["account"], "admin", "{:?}", r.body);
    let ask = json!({"model": "qwen2.5-scripted", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let r = call(&s, "POST", "/v1/messages", &[("x-api-key", &key)], Some(ask.clone()));
    assert_eq!((r.status, r.body["type"].as_str()), (200, Some("message")), "{:?}", r.body);
    let r = call(&s, "POST", "/v1/messages", &[("x-api-key", "kvad_not_a_key")], Some(ask.clone()));
    assert_eq!(r.status, 401);
    assert_eq!(r.body["type"], "error", "{:?}", r.body);
    assert_eq!(r.body["error"]["type"], "authentication_error", "{:?}", r.body);
    let r = call(&s, "DELETE", &format!("/api/keys/{id}"), &b.headers(), None);
    assert_eq!(r.status, 204);
    assert_401(&call(&s, "GET", "/v1/models", &[("authorization", &bearer(&key))], None), "revoked key");
    assert_eq!(call(&s, "POST", "/v1/messages", &[("x-api-key", &key)], Some(ask)).status, 401, "revoked key");
    let list = call(&s, "GET", "/api/keys", &[("cookie", &b.cookie)], None).body;
    assert_eq!(list[0]["revoked"], true);
}

#[test]
fn a_user_sees_and_changes_only_its_own_and_admin_routes_are_403() {
    let s = local("users");
    let admin = login(&s, "admin", ADMIN_PW);
    make_user(&s, &admin, "ann", "user");
    make_user(&s, &admin, "bob", "user");
    let ann = login(&s, "ann", &pw("ann"));
    let (ann_key_id, _) = new_key(&s, &ann, "ann-laptop");
    let ann_session = call(&s, "GET", "/api/sessions", &[("cookie", &ann.cookie)], None).body[0]["id"].clone();
    let ann_session = ann_session.as_str().unwrap().to_string();
    let bob = login(&s, "bob", &pw("bob"));
    let (_, bob_key) = new_key(&s, &bob, "bob-box");
    let bk = bearer(&bob_key);
    let as_bob = [("authorization", bk.as_str())];

    // Lists: bob's own only.
    let keys = call(&s, "GET", "/api/keys", &as_bob, None);
    assert_eq!(keys.body.as_array().unwrap().len(), 1);
    assert!(!keys.text.contains("ann"), "{}", keys.text);
    let sessions = call(&s, "GET", "/api/sessions", &as_bob, None);
    assert!(sessions.body.as_array().unwrap().iter().all(|x| x["account"] == "bob"), "{}", sessions.text);
    // Another account's key or session: 404, the same answer as for one that does not exist, naming nobody.
    let r = call(&s, "DELETE", &format!("/api/keys/{ann_key_id}"), &as_bob, None);
    let none = call(&s, "DELETE", "/api/keys/0000000000000000", &as_bob, None);
    assert_eq!((r.status, &r.text), (404, &none.text));
    assert!(!r.text.contains("ann"));
    let r = call(&s, "DELETE", &format!("/api/sessions/{ann_session}"), &as_bob, None);
    assert_eq!(r.status, 404);
    assert!(!r.text.contains("ann"));
    assert_eq!(call(&s, "GET", "/api/auth/me", &[("cookie", &ann.cookie)], None).status, 200, "ann still in");
    // Administrator routes: 403.
    for (m, p, body) in [
        ("GET", "/api/users", None),
        ("POST", "/api/users", Some(json!({"name": "eve", "password": "eve-password", "role": "admin"}))),
        ("DELETE", "/api/users/ann", None),
        ("PATCH", "/api/users/ann", Some(json!({"password": "taken-over-1"}))),
        ("PATCH", "/api/users/bob", Some(json!({"role": "admin"}))),
        ("POST", "/api/load", Some(json!({"model": "qwen2.5-scripted"}))),
        ("POST", "/api/unload", Some(json!({"all": true}))),
        ("POST", "/api/pull", Some(json!({"model": "owner/name"}))),
        ("PATCH", "/api/settings", Some(json!({"queue": 1}))),
        ("POST", "/api/bench", Some(json!({"models": ["qwen2.5-scripted"]}))),
    ] {
        let r = call(&s, m, p, &as_bob, body);
        assert_eq!(r.status, 403, "{m} {p}: {}", r.text);
        assert!(!r.text.contains("ann") || p.contains("ann"), "{}", r.text);
    }
    assert_eq!(login(&s, "ann", &pw("ann")).csrf.len(), 32, "ann's password is unchanged");
    // Bob changes his own password: the old one stops working.
    let r = call(&s, "PATCH", "/api/users/bob", &as_bob, Some(json!({"password": "bob-new-password"})));
    assert_eq!(r.status, 200, "{}", r.text);
    let r = call(&s, "POST", "/api/auth/login", &[], Some(json!({"username": "bob", "password": pw("bob")})));
    assert_eq!(r.status, 401);
    assert_401(&call(&s, "GET", "/api/auth/me", &[("cookie", &bob.cookie)], None), "a new password ends sessions");
    login(&s, "bob", "bob-new-password");
    // The administrator sees everyone's and may revoke anyone's; never removes the last administrator.
    let all = call(&s, "GET", "/api/keys", &admin.headers(), None).body;
    assert_eq!(all.as_array().unwrap().len(), 2);
    assert_eq!(call(&s, "DELETE", &format!("/api/keys/{ann_key_id}"), &admin.headers(), None).status, 204);
    let users = call(&s, "GET", "/api/users", &admin.headers(), None).body;
    let names: Vec<&str> = users.as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["admin", "ann", "bob"]);
    let r = call(&s, "DELETE", "/api/users/admin", &admin.headers(), None);
    assert_eq!(r.status, 409, "{}", r.text);
    let r = call(&s, "PATCH", "/api/users/admin", &admin.headers(), Some(json!({"role": "user"})));
    assert_eq!(r.status, 409, "{}", r.text);
    let r = call(&s, "POST", "/api/users", &admin.headers(), Some(json!({"name": "a b", "password": "long-enough"})));
    assert_eq!(r.status, 400);
    assert!(r.body["error"]["message"].as_str().unwrap().starts_with("name = \"a b\""), "{}", r.text);
    let r = call(&s, "POST", "/api/users", &admin.headers(), Some(json!({"name": "ann", "password": "long-enough"})));
    assert_eq!(r.status, 409);
    let r = call(&s, "POST", "/api/users", &admin.headers(), Some(json!({"name": "cy", "password": "short"})));
    assert_eq!(r.status, 400);
    assert!(!r.text.contains("short"), "no password echoed: {}", r.text);
    assert_eq!(call(&s, "DELETE", "/api/users/ann", &admin.headers(), None).status, 204);
    assert_401(&call(&s, "GET", "/api/auth/me", &[("cookie", &ann.cookie)], None), "a deleted account's session");
}

#[test]
fn the_account_generations_run_under_comes_from_the_credentials() {
    let s = local("account");
    let admin = login(&s, "admin", ADMIN_PW);
    make_user(&s, &admin, "bob", "user");
    let bob = login(&s, "bob", &pw("bob"));
    let (_, key) = new_key(&s, &bob, "k");
    let chat = json!({"model": "qwen2.5-scripted", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]});
    let k = bearer(&key);
    let r = call(
        &s,
        "POST",
        "/v1/chat/completions",
        &[("authorization", &k), ("x-kvad-account", "admin")],
        Some(chat.clone()),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let r = call(&s, "POST", "/v1/chat/completions", &admin.headers(), Some(chat));
    assert_eq!(r.status, 200, "{}", r.text);
    let accounts: Vec<String> = db(&s)
        .prepare("SELECT account FROM requests ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(accounts, ["bob", "admin"], "the header is ignored outside mode none");
    let mine = call(&s, "GET", "/api/metrics/usage", &[("authorization", &k)], None).body;
    let names: Vec<&str> =
        mine["accounts"].as_array().unwrap().iter().map(|a| a["account"].as_str().unwrap()).collect();
    assert_eq!(names, ["bob"], "a user's usage is its own");
    let all = call(&s, "GET", "/api/metrics/usage", &admin.headers(), None).body;
    assert_eq!(all["accounts"].as_array().unwrap().len(), 2);
    // The Dashboard's recent requests: a user's own rows, an administrator's everyone's.
    let mine = call(&s, "GET", "/api/requests", &[("authorization", &k)], None).body;
    let rows: Vec<&str> = mine["requests"].as_array().unwrap().iter().map(|r| r["account"].as_str().unwrap()).collect();
    assert_eq!(rows, ["bob"], "a user's recent requests are its own");
    let all = call(&s, "GET", "/api/requests", &admin.headers(), None).body;
    assert_eq!(all["requests"].as_array().unwrap().len(), 2);
}

#[test]
fn basic_mode_takes_basic_credentials_or_a_key() {
    use base64_like::encode;
    let s = auth_server("basic", "basic");
    let good = format!("Basic {}", encode(&format!("admin:{ADMIN_PW}")));
    let r = call(&s, "GET", "/api/auth/me", &[("authorization", &good)], None);
    assert_eq!(r.body, json!({"account": "admin", "role": "admin", "mode": "basic", "csrf_token": ""}), "{}", r.text);
    // Again (remembered for a minute, same answer).
    assert_eq!(call(&s, "GET", "/api/auth/me", &[("authorization", &good)], None).status, 200);
    let r = call(&s, "POST", "/api/keys", &[("authorization", &good)], Some(json!({"name": "k"})));
    assert_eq!(r.status, 200, "Basic needs no CSRF token: {}", r.text);
    let key = r.body["key"].as_str().unwrap().to_string();
    assert_eq!(call(&s, "GET", "/v1/models", &[("authorization", &bearer(&key))], None).status, 200);
    let bad = format!("Basic {}", encode("admin:wrong-password"));
    let r = call(&s, "GET", "/v1/models", &[("authorization", &bad)], None);
    assert_401(&r, "wrong Basic password");
    assert!(r.headers["www-authenticate"].starts_with("Basic realm=\"kvad\""));
    let r = call(&s, "GET", "/v1/models", &[("authorization", "Basic !!!")], None);
    assert_401(&r, "garbage");
    // A browser's Basic credentials are ambient like a cookie: a post from another site is refused.
    let r = call(
        &s,
        "POST",
        "/api/keys",
        &[("authorization", &good), ("origin", "http://evil.example")],
        Some(json!({"name": "x"})),
    );
    assert_eq!(r.status, 403, "{}", r.text);
    // A new password: the remembered old one stops working at once.
    let r = call(
        &s,
        "PATCH",
        "/api/users/admin",
        &[("authorization", &good)],
        Some(json!({"password": "another-password"})),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_401(&call(&s, "GET", "/v1/models", &[("authorization", &good)], None), "the old Basic password");
    let new = format!("Basic {}", encode("admin:another-password"));
    assert_eq!(call(&s, "GET", "/v1/models", &[("authorization", &new)], None).status, 200);
}

#[test]
fn a_user_sees_the_queue_without_other_accounts_names() {
    let s = local("queue");
    let admin = login(&s, "admin", ADMIN_PW);
    make_user(&s, &admin, "bob", "user");
    let (_, key) = new_key(&s, &login(&s, "bob", &pw("bob")), "k");
    let bk = bearer(&key);
    let url = s.url.clone();
    let headers: Vec<(String, String)> = admin.headers().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let slow = std::thread::spawn(move || {
        let mut req = ureq::post(&format!("{url}/v1/chat/completions"));
        for (k, v) in &headers {
            req = req.set(k, v);
        }
        let body = json!({"model": "slow-scripted", "max_tokens": 30, "messages": [{"role": "user", "content": "go"}]});
        req.send_string(&body.to_string()).map(|r| r.status()).unwrap_or(0)
    });
    let t0 = std::time::Instant::now();
    let (as_admin, as_bob) = loop {
        let v = call(&s, "GET", "/api/queue", &admin.headers(), None).body;
        if v["running"].as_array().is_some_and(|r| !r.is_empty()) {
            break (v, call(&s, "GET", "/api/queue", &[("authorization", &bk)], None).body);
        }
        assert!(t0.elapsed().as_secs() < 20, "the slow reply never ran");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(slow.join().unwrap(), 200);
    assert_eq!(as_admin["running"][0]["account"], "admin", "{as_admin}");
    assert_eq!(as_bob["running"][0]["account"], Value::Null, "{as_bob}");
    assert_eq!(as_bob["running"][0]["model"], "slow-scripted", "the job itself is shown: {as_bob}");
    assert!(!as_bob.to_string().contains("admin"), "{as_bob}");
}

#[test]
fn mode_none_keeps_the_account_header_and_refuses_other_sites() {
    let s = common::scripted("none", &[]);
    // No accounts in mode none, so no API keys: a 400 saying so, not a database error.
    let r = call(&s, "POST", "/api/keys", &[], Some(json!({"name": "k"})));
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.body["error"]["message"].as_str().unwrap().contains("mode = \"none\""), "{}", r.text);
    let me = call(&s, "GET", "/api/auth/me", &[("x-kvad-account", "ann")], None);
    assert_eq!(me.body, json!({"account": "ann", "role": "admin", "mode": "none", "csrf_token": ""}));
    let me = call(&s, "GET", "/api/auth/me", &[], None);
    assert_eq!(me.body["account"], "local");
    let r = call(&s, "POST", "/api/auth/login", &[], Some(json!({"username": "a", "password": "b"})));
    assert_eq!(r.status, 400);
    assert!(r.text.contains("mode = \\\"none\\\""), "{}", r.text);
    let load = Some(json!({"model": "nope"}));
    let r = call(&s, "POST", "/api/load", &[("origin", "http://evil.example")], load.clone());
    assert_eq!(r.status, 403, "{}", r.text);
    let r = call(&s, "POST", "/api/load", &[("host", "evil.example:5823")], load.clone());
    assert_eq!(r.status, 403, "DNS rebinding: {}", r.text);
    let host = s.url.trim_start_matches("http://").to_string();
    let r = call(&s, "POST", "/api/load", &[("origin", &s.url), ("host", &host)], load);
    assert_eq!(r.status, 404, "same origin passes (and the model is unknown): {}", r.text);
}

/// DNS rebinding: a page whose name was re-pointed at 127.0.0.1 sends its own name as `Host`. In mode none every
/// request it makes is refused, reads included (conversations, usage, metrics, the UI itself); other web origins
/// are refused unless `[server] allowed_origins` lists them, and listed ones get CORS answers.
#[test]
fn mode_none_refuses_rebound_hosts_and_unlisted_origins_for_reads_too() {
    let s = common::start_env(
        "rebind",
        &["--scripted", common::script().to_str().unwrap()],
        &[("KVAD_ALLOWED_ORIGINS", "http://localhost:3000")],
    );
    let evil = [("host", "evil.example:5823")];
    for path in
        ["/api/conversations", "/api/requests", "/api/metrics/usage", "/metrics", "/v1/models", "/", "/api/health"]
    {
        let r = call(&s, "GET", path, &evil, None);
        assert_eq!(r.status, 403, "GET {path} with a rebound Host: {}", r.text);
        assert!(r.body["error"]["message"].as_str().unwrap().contains("evil.example"), "{}", r.text);
    }
    let host = s.url.trim_start_matches("http://").to_string();
    for h in [host.as_str(), "localhost", "[::1]:5823"] {
        assert_eq!(call(&s, "GET", "/api/conversations", &[("host", h)], None).status, 200, "Host {h}");
    }
    // A page on another origin reading with fetch(): refused unless listed.
    let other = [("origin", "http://evil.example"), ("host", host.as_str())];
    let r = call(&s, "GET", "/api/conversations", &other, None);
    assert_eq!(r.status, 403, "{}", r.text);
    assert!(r.body["error"]["message"].as_str().unwrap().contains("allowed_origins"), "{}", r.text);
    let listed = [("origin", "http://localhost:3000"), ("host", host.as_str())];
    let r = call(&s, "GET", "/v1/models", &listed, None);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.headers["access-control-allow-origin"], "http://localhost:3000");
    assert!(!r.headers.contains_key("access-control-allow-credentials"), "never the cookie cross-origin");
    let pre = [listed[0], listed[1], ("access-control-request-method", "POST")];
    let r = call(&s, "OPTIONS", "/v1/chat/completions", &pre, None);
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(r.headers["access-control-allow-methods"].contains("POST"), "{:?}", r.headers);
    assert!(r.headers["access-control-allow-headers"].contains("authorization"), "{:?}", r.headers);
    // A listed site's writes pass the other-site gate too.
    let r = call(&s, "POST", "/api/load", &listed, Some(json!({"model": "nope"})));
    assert_eq!(r.status, 404, "{}", r.text);
    let r = call(&s, "OPTIONS", "/v1/chat/completions", &[other[0], other[1], pre[2]], None);
    assert_eq!(r.status, 403, "an unlisted preflight: {}", r.text);
}

/// Outside mode none the account is the guard: other origins' reads are left to the browser (no CORS answer),
/// a listed origin gets one, and an allowed_origins entry that is not an origin stops the start, named.
#[test]
fn listed_origins_get_cors_in_every_mode_and_bad_entries_are_named() {
    let script = common::script();
    let s = common::start_env(
        "cors-local",
        &["--scripted", script.to_str().unwrap()],
        &[
            ("KVAD_AUTH_MODE", "local"),
            ("KVAD_ADMIN_PASSWORD", ADMIN_PW),
            ("KVAD_ALLOWED_ORIGINS", "https://app.example"),
        ],
    );
    let b = login(&s, "admin", ADMIN_PW);
    let (_, key) = new_key(&s, &b, "k");
    let auth = bearer(&key);
    let r = call(&s, "GET", "/v1/models", &[("authorization", &auth), ("origin", "https://app.example")], None);
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.headers["access-control-allow-origin"], "https://app.example");
    let r = call(&s, "GET", "/v1/models", &[("authorization", &auth), ("origin", "https://other.example")], None);
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.headers.contains_key("access-control-allow-origin"), "{:?}", r.headers);
    let e = serve_outcome(&[], &[("KVAD_ALLOWED_ORIGINS", "http://localhost:3000/app")]).unwrap_err();
    assert!(e.contains("\"http://localhost:3000/app\"") && e.contains("allowed_origins"), "{e}");
}

/// Runs kvad-serve with exactly these arguments and environment until it listens (Ok: the log) or exits (Err).
fn serve_outcome(args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    use std::io::{BufRead, BufReader};
    let dir = std::env::temp_dir().join(format!("kvad-auth-bind-{}-{}", std::process::id(), args.join("_").len()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = common::script();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvad-serve"))
        .args(["--scripted", script.to_str().unwrap(), "--data-dir", dir.to_str().unwrap()])
        .args(args)
        .env_remove("KVAD_AUTH_MODE")
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines().map_while(Result::ok) {
        log.push_str(&line);
        log.push('\n');
        if line.contains("listening on") {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_dir_all(&dir);
            return Ok(log);
        }
    }
    let status = child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!status.success());
    Err(log)
}

#[test]
fn a_non_loopback_bind_needs_an_auth_mode_or_insecure() {
    let e = serve_outcome(&["--bind", "0.0.0.0:0"], &[]).unwrap_err();
    assert!(e.starts_with("kvad-serve: bind = 0.0.0.0:0 is reachable from other machines"), "{e}");
    assert!(e.contains("--insecure") && e.contains("[auth] mode"), "{e}");
    assert!(serve_outcome(&["--bind", "0.0.0.0:0", "--insecure"], &[]).is_ok());
    let env = [("KVAD_AUTH_MODE", "local"), ("KVAD_ADMIN_PASSWORD", ADMIN_PW)];
    let log = serve_outcome(&["--bind", "0.0.0.0:0"], &env).unwrap();
    assert!(log.contains("created the administrator \"admin\"") && log.contains("auth: local"), "{log}");
    // local mode with no accounts and no KVAD_ADMIN_PASSWORD: nobody could sign in, so it says how to start.
    let e = serve_outcome(&["--bind", "127.0.0.1:0"], &[("KVAD_AUTH_MODE", "local")]).unwrap_err();
    assert!(e.contains("KVAD_ADMIN_PASSWORD"), "{e}");
    let e = serve_outcome(&["--bind", "127.0.0.1:0"], &[("KVAD_AUTH_MODE", "local"), ("KVAD_ADMIN_PASSWORD", "short")])
        .unwrap_err();
    assert!(e.contains("KVAD_ADMIN_PASSWORD") && e.contains("8 to 1024"), "{e}");
}

/// Standard base64 for Basic credentials, written out here so the test does not share the server's decoder.
mod base64_like {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(s: &str) -> String {
        let mut out = String::new();
        for chunk in s.as_bytes().chunks(3) {
            let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    #[test]
    fn matches_rfc_4648() {
        assert_eq!(encode("foob"), "Zm9vYg==");
        assert_eq!(encode("fooba"), "Zm9vYmE=");
        assert_eq!(encode("foobar"), "Zm9vYmFy");
    }
}
