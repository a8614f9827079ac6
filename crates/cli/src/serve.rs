//! `kvad serve`: hands over to `kvad-serve`. It has to be a hand-over, not a call: kvad-serve depends on the
//! engine, so the engine cannot depend back on it. On Unix it execs, so Ctrl-C reaches the server and its exit
//! status is the command's.

use anyhow::{anyhow, Result};
use std::path::PathBuf;
use std::process::Command;

/// kvad-serve beside this binary, else on PATH.
fn server_binary() -> PathBuf {
    let name = format!("kvad-serve{}", std::env::consts::EXE_SUFFIX);
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(&name)))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Execs kvad-serve with `args`; returns only on failure.
pub fn serve(args: Vec<String>) -> Result<()> {
    let bin = server_binary();
    let mut cmd = Command::new(&bin);
    cmd.args(&args);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        let e = cmd.exec();
        Err(anyhow!("cannot run {}: {e} (build it with `cargo build --release -p kvad-server`)", bin.display()))
    }
    #[cfg(not(unix))]
    {
        let status = cmd.status().map_err(|e| anyhow!("cannot run {}: {e}", bin.display()))?;
        std::process::exit(status.code().unwrap_or(1));
    }
}
