//! The house rules that a reader of any file relies on, checked over every tracked file: no source file longer
//! than a reader can hold (800 lines: split it along a real boundary), and the environment read only in config
//! modules (a file named `config.rs` or under a `config/` folder), so every setting is found in one place per crate
//! and a measuring switch cannot hide in a hot path.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every file git tracks (or would: new files not yet added count too).
fn files() -> Vec<String> {
    let out = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(root())
        .output()
        .expect("git runs (the tidy check reads the tracked files)");
    assert!(out.status.success(), "git ls-files: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).filter(|f| root().join(f).is_file()).collect()
}

const SOURCE: &[&str] = &[".rs", ".cu", ".cuh", ".svelte", ".ts", ".js", ".py", ".sh"];

#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<String> = files()
        .into_iter()
        .filter(|f| SOURCE.iter().any(|e| f.ends_with(e)) && !f.contains("package-lock"))
        .filter_map(|f| {
            let n = std::fs::read_to_string(root().join(&f)).ok()?.lines().count();
            (n > 800).then(|| format!("{f}: {n} lines"))
        })
        .collect();
    assert!(long.is_empty(), "split these along a real boundary:\n{}", long.join("\n"));
}

/// Whether a path is a config module: `config.rs`, or inside a `config/` folder.
fn is_config(path: &str) -> bool {
    path.ends_with("/config.rs") || path.contains("/config/")
}

#[test]
fn the_environment_is_read_only_in_config_modules() {
    let patterns = ["env::var(\"KVAD_", "env::var_os(\"KVAD_"];
    let mut outside = Vec::new();
    for f in files().into_iter().filter(|f| f.starts_with("crates/") && f.ends_with(".rs") && !is_config(f)) {
        // This file names the patterns it looks for.
        if f.ends_with("tests/tidy.rs") {
            continue;
        }
        let text = std::fs::read_to_string(root().join(&f)).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            if patterns.iter().any(|p| line.contains(p)) {
                outside.push(format!("{f}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        outside.is_empty(),
        "read these in the crate's config module (a setting) or remove them (a measuring switch belongs in a \
         branch or docs/):\n{}",
        outside.join("\n")
    );
}

#[test]
fn the_checks_see_what_they_should() {
    assert!(is_config("crates/server/src/config.rs") && is_config("crates/models/tests/common/config.rs"));
    assert!(!is_config("crates/server/src/configure.rs") && !is_config("crates/engine/src/local/mod.rs"));
    let all = files();
    assert!(all.iter().any(|f| f == "crates/cli/tests/tidy.rs"), "git ls-files lists this very file");
}
