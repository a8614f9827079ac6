//! The web UI in a real browser: Playwright (web/tests/*.spec.ts) drives Debian's Chromium against the real
//! `kvad-serve` with the scripted models, a fresh SQLite file and the fake Hugging Face Hub of kvad-hub's tests on
//! loopback; a second server runs in `local` authentication mode for the accounts tests.
//!
//! It needs `web/dist` built and `web/node_modules` installed, which `scripts/test.sh` does before it sets
//! `KVAD_WEB_TESTS=1`; a plain `cargo test` without that variable says it did not run the browser and passes.

mod common;

#[path = "../../hub/tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::{tiny_llama_files, Fake, C1};

const ADMIN_PASSWORD: &str = "web-test-admin-password";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// kvad-serve on the scripted models with caches of its own, its Hub the fake one.
fn server(tag: &str, hub: &str, extra: &[(&str, &str)]) -> common::Server {
    let hf = std::env::temp_dir().join(format!("kvad-web-test-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&hf);
    let (cache, kvad) = (hf.join("hub"), hf.join("kvad"));
    let mut env = vec![
        ("HF_HUB_CACHE", cache.to_str().unwrap().to_string()),
        ("KVAD_CACHE", kvad.to_str().unwrap().to_string()),
        ("HF_ENDPOINT", hub.to_string()),
        ("KVAD_OLLAMA_REGISTRY", hub.to_string()),
    ];
    env.extend(extra.iter().map(|(k, v)| (*k, v.to_string())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    common::start_env(tag, &["--scripted", common::script().to_str().unwrap()], &env)
}

#[test]
fn the_web_ui_in_chromium() {
    if !common::config::web_tests() {
        eprintln!(
            "web.rs: the browser tests did not run: scripts/test.sh runs them (it builds web/dist, installs the \
             node modules and Chromium, and sets KVAD_WEB_TESTS=1)"
        );
        return;
    }
    let web = root().join("web");
    assert!(web.join("dist/index.html").is_file(), "web/dist is not built: cd web && npm ci && npm run build");
    assert!(web.join("node_modules/@playwright/test").is_dir(), "web/node_modules is missing: cd web && npm ci");
    let chromium = common::config::chromium();
    assert!(Path::new(&chromium).exists(), "{chromium} is missing: apt-get install chromium (scripts/test.sh does)");

    let fake = Fake::start();
    fake.add_repo("tiny/llama", C1, tiny_llama_files(), &["main"]);
    let cats = support::fixtures().join("datasets/cat-text/data/train-00000-of-00001.parquet");
    fake.add_dataset(
        "tiny/cats",
        C1,
        vec![("data/train-00000-of-00001.parquet".into(), std::fs::read(cats).unwrap())],
        &["main"],
    );
    let open = server("open", &fake.url, &[]);
    let auth = server("auth", &fake.url, &[("KVAD_AUTH_MODE", "local"), ("KVAD_ADMIN_PASSWORD", ADMIN_PASSWORD)]);
    let shots = root().join("docs/screenshots");
    std::fs::create_dir_all(&shots).unwrap();

    let out = Command::new("npx")
        .args(["--no-install", "playwright", "test"])
        .current_dir(&web)
        .env("KVAD_URL", &open.url)
        .env("KVAD_AUTH_URL", &auth.url)
        .env("KVAD_ADMIN_PASSWORD", ADMIN_PASSWORD)
        .env("KVAD_CHROMIUM", &chromium)
        .env("KVAD_SCREENSHOTS", &shots)
        .output()
        .expect("running npx playwright test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}\n{stderr}");
    if stdout.contains("AUTH TESTS SKIPPED") {
        eprintln!("\n!!! web.rs: the accounts tests (sign in, API keys, 403) were SKIPPED: /api/auth/me is 404\n");
    }
    assert!(
        out.status.success(),
        "Playwright failed ({}):\n{stdout}\n{stderr}\nkvad-serve said:\n{}",
        out.status,
        open.log.lock().unwrap()
    );
    // Every page was photographed, and each picture is small enough to commit.
    for page in ["dashboard", "models", "chat", "playground", "benchmarks", "monitoring", "settings", "api"] {
        let p = shots.join(format!("{page}.png"));
        let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(len < 200_000, "{} is {len} bytes; keep screenshots under 200 KB", p.display());
    }
}
