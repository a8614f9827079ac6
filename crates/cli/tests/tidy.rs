//! The house rules that a reader of any file relies on, checked over every tracked file: no source file longer
//! than a reader can hold (800 lines: split it along a real boundary), and the environment read only in config
//! modules (a file named `config.rs` or under a `config/` folder), so every setting is found in one place per crate
//! and a measuring switch cannot hide in a hot path; no two modules of a crate naming each other, however
//! indirectly (a circle makes every module in it one unit to read and change); and the server reaching models only
//! through the engine.

use std::collections::{BTreeMap, BTreeSet};
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

/// A source file's module path inside its crate (`src/a/b.rs` and `src/a/b/mod.rs` are `a::b`).
fn module_of(src_rel: &str) -> String {
    let trimmed = src_rel.trim_end_matches(".rs");
    let mut parts: Vec<&str> = trimmed.split('/').collect();
    if matches!(parts.last(), Some(&("mod" | "lib" | "main"))) {
        parts.pop();
    }
    parts.join("::")
}

/// The modules each module of a crate names (`crate::…` and `super::…` paths outside comments and unit tests),
/// parents and children not counted.
fn module_edges(crate_dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = format!("{crate_dir}/src/");
    let files: Vec<String> = files().into_iter().filter(|f| f.starts_with(&src) && f.ends_with(".rs")).collect();
    let mods: BTreeMap<String, &String> = files.iter().map(|f| (module_of(&f[src.len()..]), f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, f) in &mods {
        let text = std::fs::read_to_string(root().join(f)).unwrap_or_default();
        let code: String = text
            .split("#[cfg(test)]\nmod tests")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let parent = m.rsplit_once("::").map_or("", |(p, _)| p);
        let mut named = BTreeSet::new();
        for (prefix, base) in [("crate::", String::new()), ("super::", parent.to_string())] {
            for (i, _) in code.match_indices(prefix) {
                let before = code[..i].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let path: String = code[i + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let parts: Vec<&str> = path.split("::").filter(|p| !p.is_empty()).collect();
                // The longest prefix of the path that is a module of the crate.
                for n in (1..=parts.len()).rev() {
                    let cand = if base.is_empty() {
                        parts[..n].join("::")
                    } else {
                        format!("{base}::{}", parts[..n].join("::"))
                    };
                    if mods.contains_key(&cand) {
                        named.insert(cand);
                        break;
                    }
                }
            }
        }
        named.retain(|n| {
            n != m && !m.starts_with(&format!("{n}::")) && !n.starts_with(&format!("{m}::")) && !m.is_empty()
        });
        edges.insert(m.clone(), named);
    }
    edges
}

/// The circles of a graph: its strongly connected parts of more than one module.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Two modules are in one circle when each reaches the other.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(v) = todo.pop() {
            for w in edges.get(&v).into_iter().flatten() {
                if seen.insert(w.clone()) {
                    todo.push(w.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> = edges.keys().map(|k| (k, reach(k))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (a, ra) in &reaches {
        let circle: Vec<String> =
            ra.iter().filter(|b| reaches.get(b).is_some_and(|rb| rb.contains(*a)) && *b != *a).cloned().collect();
        if !circle.is_empty() {
            let mut all = circle;
            all.push((*a).clone());
            all.sort();
            if !out.contains(&all) {
                out.push(all);
            }
        }
    }
    out
}

#[test]
fn no_module_of_a_crate_names_another_that_names_it_back() {
    let crates: BTreeSet<String> = files()
        .iter()
        .filter_map(|f| f.strip_prefix("crates/")?.split('/').next().map(|c| format!("crates/{c}")))
        .collect();
    let mut found = Vec::new();
    for c in &crates {
        for circle in circles(&module_edges(c)) {
            found.push(format!("{c}: {}", circle.join(" <-> ")));
        }
    }
    assert!(
        found.is_empty(),
        "modules in a circle (move what both need into a module of its own):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_circle_check_finds_a_circle() {
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.insert("a".into(), ["b".to_string()].into());
    g.insert("b".into(), ["c".to_string()].into());
    g.insert("c".into(), ["a".to_string()].into());
    g.insert("d".into(), ["a".to_string()].into());
    assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
    assert_eq!(module_of("arch/llama/mod.rs"), "arch::llama");
    assert_eq!(module_of("lib.rs"), "");
}

#[test]
fn the_server_reaches_models_only_through_the_engine() {
    let manifest = std::fs::read_to_string(root().join("crates/server/Cargo.toml")).unwrap();
    let deps = manifest.split("[dependencies]").nth(1).unwrap_or_default().split("\n[").next().unwrap_or_default();
    for banned in ["kvad-models", "kvad-tensor"] {
        assert!(!deps.contains(banned), "crates/server depends on {banned}: reach it through kvad-engine");
    }
}
