//! kvad as users install it: the wheel (`scripts/wheel.sh`) into a fresh venv, and `cargo install` into a temporary
//! root. Each install then answers the README's question from the default model's offline source, and its
//! `kvad serve` finds its own `kvad-serve`, which reports the version and commit on `/api/health` and serves the web
//! UI's index page.
//!
//! Both build kvad in release mode from scratch (minutes), so they run when `KVAD_INSTALL_TESTS=1`, which
//! scripts/test.sh sets (as KVAD_WEB_TESTS for the browser). They build in `target/install`, not the target dir this
//! test runs from: cargo keeps that one locked while the tests run.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

#[path = "install/config.rs"]
mod config;

/// One release build at a time: they share `target/install` and two cores.
static BUILD: Mutex<()> = Mutex::new(());

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn enabled(test: &str) -> bool {
    let on = config::install_tests();
    if !on {
        eprintln!("{test}: off (KVAD_INSTALL_TESTS=1 turns it on; scripts/test.sh sets it)");
    }
    on
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{stdout}\n{stderr}", out.status);
    stdout.into_owned()
}

/// The commit this tree is at, as the binaries' build script names it (None outside git).
fn head_commit() -> Option<String> {
    let o = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(repo()).output().ok()?;
    o.status.success().then(|| String::from_utf8_lossy(&o.stdout).trim().to_string())
}

/// A PATH without the directory the binaries were installed into, so `kvad serve` can only find `kvad-serve`
/// beside itself.
fn path_without(bin: &Path) -> String {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&path).filter(|p| p != bin).collect();
    std::env::join_paths(kept).unwrap().into_string().unwrap()
}

/// GET on loopback; (status, body).
fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status = raw.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = raw.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    (status, body)
}

/// The checks every install passes, on the binaries in `bin`.
fn check_installed(bin: &Path) {
    let path = path_without(bin);
    let kvad = bin.join("kvad");
    let version = run(Command::new(&kvad).arg("--version").env("PATH", &path), "kvad --version");
    assert!(version.starts_with(&format!("kvad {}", env!("CARGO_PKG_VERSION"))), "{version}");
    if let Some(commit) = head_commit() {
        assert!(version.contains(&commit), "kvad --version names the commit {commit}: {version}");
    }

    let answer =
        run(Command::new(&kvad).args(["run", "-p", "What is the capital of France?"]).env("PATH", &path), "kvad run");
    assert_eq!(answer.trim(), "The capital of France is Paris.");

    // `kvad serve` with `kvad-serve` off PATH: found beside `kvad`.
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(&kvad)
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env("PATH", &path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvad serve");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = String::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("kvad serve exited before listening:\n{seen}");
        };
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.split("listening on ").nth(1) {
            let url = rest.split_whitespace().next().unwrap();
            break url.trim_start_matches("http://").trim_end_matches('/').to_string();
        }
    };
    std::thread::spawn(move || lines.for_each(drop));
    let health = get(&addr, "/api/health");
    let index = get(&addr, "/");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(health.0, 200, "{health:?}");
    let health: serde_json::Value = serde_json::from_str(&health.1).unwrap();
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"), "{health}");
    if let Some(commit) = head_commit() {
        assert!(health["commit"].as_str().is_some_and(|c| c.starts_with(&commit)), "{health} vs HEAD {commit}");
    }
    assert_eq!(index.0, 200);
    // The built UI (web/dist), not the page a binary built without it answers.
    assert!(
        index.1.contains("<title>kvad</title>") && index.1.contains("<div id=\"app\">") && index.1.contains("/assets/"),
        "the web UI's index page: {}",
        index.1
    );
}

/// `scripts/wheel.sh` builds a manylinux_2_28 wheel that installs, with nothing else, into a fresh venv, and with
/// `uv tool install` and `pipx install`.
#[test]
fn wheel_installs_into_a_fresh_venv_and_runs() {
    if !enabled("wheel_installs_into_a_fresh_venv_and_runs") {
        return;
    }
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let tmp = tempfile::tempdir().unwrap();
    let wheels = tmp.path().join("wheels");
    run(
        Command::new("bash")
            .arg(repo().join("scripts/wheel.sh"))
            .arg(&wheels)
            .env("CARGO_TARGET_DIR", repo().join("target/install"))
            .current_dir(repo()),
        "scripts/wheel.sh",
    );
    let wheel: Vec<PathBuf> = std::fs::read_dir(&wheels).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(wheel.len(), 1, "one wheel: {wheel:?}");
    let name = wheel[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("kvad-{}-", env!("CARGO_PKG_VERSION")))
            && name.ends_with("manylinux_2_28_x86_64.whl"),
        "{name}"
    );

    let venv = tmp.path().join("venv");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv), "python3 -m venv");
    run(
        Command::new(venv.join("bin/python")).args(["-m", "pip", "install", "--quiet", "--no-index"]).arg(&wheel[0]),
        "pip install the wheel",
    );
    let listed = run(Command::new(venv.join("bin/python")).args(["-m", "pip", "list"]), "pip list");
    let installed: Vec<&str> = listed.lines().skip(2).filter_map(|l| l.split_whitespace().next()).collect();
    assert!(installed.contains(&"kvad"), "{listed}");
    assert!(installed.iter().all(|p| ["kvad", "pip", "setuptools"].contains(p)), "nothing else: {listed}");
    check_installed(&venv.join("bin"));

    // The tool installers, each into folders of its own: their `kvad` is a link in a bin folder to the binary in
    // a venv of theirs, and `kvad serve` still finds the kvad-serve beside the binary.
    let tools = tmp.path().join("tools");
    run(Command::new("python3").args(["-m", "venv"]).arg(&tools), "python3 -m venv (tools)");
    run(
        Command::new(tools.join("bin/python")).args(["-m", "pip", "install", "--quiet", "uv==0.13.9", "pipx==1.18.4"]),
        "pip install uv pipx",
    );
    let uv_bin = tmp.path().join("uv-bin");
    run(
        Command::new(tools.join("bin/uv"))
            .args(["tool", "install", "--no-index"])
            .arg(&wheel[0])
            .env("UV_TOOL_DIR", tmp.path().join("uv-tools"))
            .env("UV_TOOL_BIN_DIR", &uv_bin),
        "uv tool install",
    );
    check_installed(&uv_bin);
    let pipx_bin = tmp.path().join("pipx-bin");
    run(
        Command::new(tools.join("bin/pipx"))
            .arg("install")
            .arg(&wheel[0])
            .env("PIPX_HOME", tmp.path().join("pipx-home"))
            .env("PIPX_BIN_DIR", &pipx_bin)
            .env("PIPX_MAN_DIR", tmp.path().join("pipx-man")),
        "pipx install",
    );
    check_installed(&pipx_bin);
}

/// `cargo install --locked --path crates/cli` and `--path crates/server` into one root.
#[test]
fn cargo_install_into_a_temporary_root_runs() {
    if !enabled("cargo_install_into_a_temporary_root_runs") {
        return;
    }
    let _one = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        repo().join("web/dist/index.html").is_file(),
        "kvad-serve embeds web/dist: build it first (cd web && npm ci && npm run build; scripts/test.sh does)"
    );
    let root = tempfile::tempdir().unwrap();
    for krate in ["crates/cli", "crates/server"] {
        run(
            Command::new(env!("CARGO"))
                .args(["install", "--locked", "--quiet", "--path", krate, "--root"])
                .arg(root.path())
                .arg("--target-dir")
                .arg(repo().join("target/install"))
                .current_dir(repo()),
            &format!("cargo install --path {krate}"),
        );
    }
    check_installed(&root.path().join("bin"));
}
