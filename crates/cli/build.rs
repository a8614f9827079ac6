//! Sets `KVAD_COMMIT`, the commit `kvad --version` names (`../build_commit.rs`).

include!("../build_commit.rs");

fn main() {
    emit_commit();
    println!("cargo:rerun-if-changed=build.rs");
}
