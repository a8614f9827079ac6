//! Tells cargo when the embedded web UI changed. rust-embed (src/ui.rs) includes each file of `web/dist` in a
//! release build, which tracks those files but not a file added or removed, nor the folder appearing; watching
//! the folder (or `web/` while it is missing) covers both. Never runs npm: the UI is built by hand. Also sets
//! `KVAD_COMMIT`, the commit the binary is built from (`../build_commit.rs`).

include!("../build_commit.rs");

fn main() {
    emit_commit();
    let dist = std::path::Path::new("../../web/dist");
    if dist.exists() {
        println!("cargo:rerun-if-changed=../../web/dist");
    } else {
        println!("cargo:rerun-if-changed=../../web");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
