//! The install tests' settings from the environment, read here and nowhere else.

/// `KVAD_INSTALL_TESTS=1`: run the install tests, which build kvad in release mode from scratch (scripts/test.sh
/// sets it).
pub fn install_tests() -> bool {
    std::env::var("KVAD_INSTALL_TESTS").as_deref() == Ok("1")
}
