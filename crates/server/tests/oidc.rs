//! OIDC against a real OpenID provider: panva's `oidc-provider` (npm; `tests/oidc/`, installed here by `npm ci`
//! when its node_modules is missing) on a loopback port, and the real `kvad-serve` in mode oidc. The browser is
//! played by hand: redirects followed one at a time, each side's cookies kept apart.

mod common;

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

const CLIENT_ID: &str = "kvad-test";
const CLIENT_SECRET: &str = "kvad-test-secret";

struct Kill(Child, Option<PathBuf>);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        if let Some(d) = &self.1 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn provider_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/oidc")
}

/// `npm ci` in tests/oidc unless its node_modules has oidc-provider already.
fn install_provider() {
    let dir = provider_dir();
    if dir.join("node_modules/oidc-provider/package.json").is_file() {
        return;
    }
    let st = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund"])
        .current_dir(&dir)
        .status()
        .expect("npm (Node.js) is needed for the OIDC test: apt-get install nodejs npm");
    assert!(st.success(), "npm ci in {} failed", dir.display());
}

/// Starts the provider; returns it and its issuer URL.
fn start_provider(redirect: &str) -> (Kill, String) {
    install_provider();
    let mut child = Command::new("node")
        .arg("provider.mjs")
        .current_dir(provider_dir())
        .env("CLIENT_ID", CLIENT_ID)
        .env("CLIENT_SECRET", CLIENT_SECRET)
        .env("REDIRECT_URL", redirect)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("node");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let issuer = loop {
        let line = lines.next().expect("the provider exited before listening").unwrap();
        if let Some(url) = line.strip_prefix("issuer ") {
            break url.to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    (Kill(child, None), issuer)
}

/// Starts kvad-serve on `port` in mode oidc against `issuer`.
fn start_kvad(port: u16, issuer: &str, redirect: &str) -> Kill {
    let dir = std::env::temp_dir().join(format!("kvad-oidc-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kvad.toml"), "[auth]\nmode = \"oidc\"\nfirst_account_admin = true\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvad-serve"))
        .args(["--scripted", common::script().to_str().unwrap(), "--data-dir", dir.to_str().unwrap()])
        .args(["--bind", &format!("127.0.0.1:{port}")])
        .env_remove("KVAD_AUTH_MODE")
        .env("KVAD_OIDC_ISSUER", issuer)
        .env("KVAD_OIDC_CLIENT_ID", CLIENT_ID)
        .env("KVAD_OIDC_CLIENT_SECRET", CLIENT_SECRET)
        .env("KVAD_OIDC_REDIRECT_URL", redirect)
        // A fuzzed pull (common::openapi) is refused at once rather than waiting on an unreachable Hub.
        .env("KVAD_OFFLINE", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    loop {
        let Some(Ok(line)) = lines.next() else { panic!("kvad-serve exited: {seen}") };
        seen.push_str(&line);
        if line.contains("listening on") {
            break;
        }
    }
    std::thread::spawn(move || lines.for_each(drop));
    Kill(child, Some(dir))
}

/// One origin's cookies, as a browser keeps them (enough for these two servers: names are distinct, paths ignored).
#[derive(Default, Clone)]
struct Jar(BTreeMap<String, String>);

impl Jar {
    fn header(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }

    fn take(&mut self, r: &ureq::Response) {
        for c in r.all("set-cookie") {
            let first = c.split(';').next().unwrap_or("");
            if let Some((k, v)) = first.split_once('=') {
                if c.contains("Max-Age=0") || c.contains("expires=Thu, 01 Jan 1970") || v.is_empty() {
                    self.0.remove(k.trim());
                } else {
                    self.0.insert(k.trim().to_string(), v.to_string());
                }
            }
        }
    }
}

fn get(url: &str, jar: &mut Jar) -> (u16, Option<String>, String) {
    let agent = ureq::AgentBuilder::new().redirects(0).build();
    let r = match agent.get(url).set("cookie", &jar.header()).call() {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("GET {url}: {e}"),
    };
    jar.take(&r);
    let (status, location) = (r.status(), r.header("location").map(str::to_string));
    (status, location, r.into_string().unwrap_or_default())
}

fn absolute(base: &str, location: &str) -> String {
    if location.starts_with("http") {
        location.to_string()
    } else {
        format!("{base}{location}")
    }
}

/// Signs `account` in through the provider: returns kvad's session cookie jar and the callback URL it used.
fn browser_login(kvad: &str, issuer: &str, account: &str) -> (Jar, String) {
    let r = ureq::post(&format!("{issuer}/test/next-account?name={account}")).call().unwrap();
    assert_eq!(r.status(), 204);
    let (mut kv, mut idp) = (Jar::default(), Jar::default());
    let (status, loc, body) = get(&format!("{kvad}/api/auth/oidc/login"), &mut kv);
    assert_eq!(status, 302, "{body}");
    let mut next = loc.unwrap();
    assert!(next.starts_with(&format!("{issuer}/auth?")), "{next}");
    for needed in ["code_challenge_method=S256", "code_challenge=", "state=", "nonce=", "response_type=code"] {
        assert!(next.contains(needed), "{needed} in {next}");
    }
    for _ in 0..10 {
        if next.starts_with(kvad) {
            break;
        }
        let (status, loc, body) = get(&next, &mut idp);
        assert!((300..400).contains(&status), "the provider answered {status} at {next}: {body}");
        next = absolute(issuer, &loc.unwrap());
    }
    assert!(next.starts_with(&format!("{kvad}/api/auth/oidc/callback?")), "{next}");
    let callback = next.clone();
    let (status, loc, body) = get(&callback, &mut kv);
    assert_eq!((status, loc.as_deref()), (302, Some("/")), "{body}");
    assert!(kv.0.contains_key("kvad_session") && !kv.0.contains_key("kvad_oidc_state"), "{:?}", kv.0);
    (kv, callback)
}

fn me(kvad: &str, jar: &Jar) -> (u16, Value) {
    match ureq::get(&format!("{kvad}/api/auth/me")).set("cookie", &jar.header()).call() {
        Ok(r) => (200, r.into_json().unwrap()),
        Err(ureq::Error::Status(c, r)) => (c, r.into_json().unwrap_or(Value::Null)),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn oidc_login_against_a_real_provider() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let kvad = format!("http://127.0.0.1:{port}");
    let redirect = format!("{kvad}/api/auth/oidc/callback");
    let (_provider, issuer) = start_provider(&redirect);
    let _server = start_kvad(port, &issuer, &redirect);

    // The first account is an administrator (first_account_admin), named from the ID token.
    let (alice, callback) = browser_login(&kvad, &issuer, "alice");
    let (code, v) = me(&kvad, &alice);
    assert_eq!(code, 200, "{v}");
    assert_eq!(
        (v["account"].as_str(), v["role"].as_str(), v["mode"].as_str()),
        (Some("alice"), Some("admin"), Some("oidc"))
    );
    assert_eq!(v["csrf_token"].as_str().unwrap().len(), 32);
    // A callback replayed: its state was used.
    let mut stale = Jar::default();
    stale
        .0
        .insert("kvad_oidc_state".into(), callback.split("state=").nth(1).unwrap().split('&').next().unwrap().into());
    let (status, _, body) = get(&callback, &mut stale);
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("state"), "{body}");
    // A callback in a browser that did not start the login (no state cookie): refused before the code is used.
    let (_, other_callback) = {
        let r = ureq::post(&format!("{issuer}/test/next-account?name=mallory")).call().unwrap();
        assert_eq!(r.status(), 204);
        let mut kv = Jar::default();
        let (_, loc, _) = get(&format!("{kvad}/api/auth/oidc/login"), &mut kv);
        let mut idp = Jar::default();
        let mut next = loc.unwrap();
        while !next.starts_with(&kvad) {
            let (_, loc, _) = get(&next, &mut idp);
            next = absolute(&issuer, &loc.unwrap());
        }
        (kv, next)
    };
    let (status, _, body) = get(&other_callback, &mut Jar::default());
    assert_eq!(status, 401, "{body}");
    // Later accounts are users; the same subject signs in to the same account again.
    let (bob, _) = browser_login(&kvad, &issuer, "bob");
    assert_eq!(me(&kvad, &bob).1["role"], "user");
    let (alice2, _) = browser_login(&kvad, &issuer, "alice");
    assert_eq!(me(&kvad, &alice2).1["account"], "alice");
    let users: Value =
        ureq::get(&format!("{kvad}/api/users")).set("cookie", &alice.header()).call().unwrap().into_json().unwrap();
    let names: Vec<&str> = users.as_array().unwrap().iter().map(|u| u["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["alice", "bob"], "mallory's login never completed");
    // No password login in this mode.
    let r = ureq::post(&format!("{kvad}/api/auth/login")).send_string(r#"{"username": "alice", "password": "x"}"#);
    assert!(matches!(r, Err(ureq::Error::Status(400, _))));
    // The OpenAPI document holds in this mode too: an administrator's API key, every route fuzzed.
    let csrf = me(&kvad, &alice).1["csrf_token"].as_str().unwrap().to_string();
    let key: Value = ureq::post(&format!("{kvad}/api/keys"))
        .set("cookie", &alice.header())
        .set("x-csrf-token", &csrf)
        .send_string(r#"{"name": "fuzz"}"#)
        .unwrap()
        .into_json()
        .unwrap();
    common::openapi::check(&kvad, &[format!("Authorization: Bearer {}", key["key"].as_str().unwrap())]);
}
