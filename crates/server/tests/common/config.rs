//! The server tests' settings from the environment, read here and nowhere else.

/// `KVAD_WEB_TESTS=1`: run the browser tests (scripts/test.sh sets it once web/dist, the node modules and Chromium
/// are there).
pub fn web_tests() -> bool {
    std::env::var("KVAD_WEB_TESTS").as_deref() == Ok("1")
}

/// `KVAD_CHROMIUM`: the Chromium the browser tests drive (default /usr/bin/chromium).
pub fn chromium() -> String {
    std::env::var("KVAD_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}
