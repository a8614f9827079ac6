// Included by the build scripts of kvad (crates/cli) and kvad-serve (crates/server): the commit a binary is built
// from, for `--version` and `/api/health` (and the cluster's same-build check): `git` asks the repository, with
// `-dirty` when the tree has uncommitted changes; "unknown" for a tree outside git. Cargo reruns this when HEAD
// moves or the index changes.

/// Sets `KVAD_COMMIT` for the crate being built.
fn emit_commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).map(|head| {
        let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
        if dirty {
            format!("{head}-dirty")
        } else {
            head
        }
    });
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/index");
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{r}");
        }
    }
    println!("cargo:rustc-env=KVAD_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
}
