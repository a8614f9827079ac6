//! `kvad service status`: asks the service manager whether the job runs and `/api/health` whether anything
//! answers, and says when the two disagree (a unit that runs but does not answer is the failure people hit).

use super::answers;
use anyhow::{bail, Result};
use std::process::Command;
use std::time::Duration;

/// What systemd says about the `kvad` unit (user unit, else system unit), or None without systemctl.
fn systemd_state() -> Option<(String, &'static str)> {
    let ask = |args: &[&str]| {
        Command::new("systemctl")
            .args(args)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let user = ask(&["--user", "is-active", "kvad"])?;
    if user == "active" {
        return Some((user, "user unit"));
    }
    let system = ask(&["is-active", "kvad"]).unwrap_or_default();
    Some((if system.is_empty() { "inactive".into() } else { system }, "system unit"))
}

/// `kvad service status`. Fails (exit 1) when nothing answers.
pub fn status(url: &str) -> Result<()> {
    let unit = systemd_state();
    let health = answers(url, Duration::from_secs(2));
    match &unit {
        Some((state, scope)) => println!("systemd: kvad ({scope}) is {state}"),
        None => println!("systemd: not available on this machine (no systemctl)"),
    }
    match &health {
        Ok(h) => println!(
            "{url}/api/health: {} (version {}, queue {}, loaded {})",
            h["status"], h["version"], h["queue"], h["loaded"]
        ),
        Err(e) => println!("{url}/api/health: no answer ({e})"),
    }
    let running = unit.as_ref().is_some_and(|(s, _)| s == "active");
    match (running, health.is_ok()) {
        (true, false) => println!("they disagree: systemd runs kvad but nothing answers at {url}"),
        (false, true) if unit.is_some() => {
            println!(
                "they disagree: a server answers at {url} but systemd's kvad unit is not running (started by hand?)"
            )
        }
        _ => {}
    }
    if health.is_err() {
        bail!("no kvad server answers at {url}");
    }
    Ok(())
}
