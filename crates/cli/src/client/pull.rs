//! `kvad pull` against a server: `POST /api/pull`, whose events are drawn with the bars an in-process pull uses
//! (kvad-hub's `PullEvent::replay`), or printed one a line with `--json`. The files land in the server's cache, and
//! the path printed last is on the server's machine.

use super::http_error;
use crate::hub_cmds::{human, Bars};
use anyhow::{bail, Context, Result};
use kvad_hub::events::PullEvent;
use serde_json::json;
use std::io::{BufRead, BufReader};

/// Pulls `model` on the server at `url`.
pub fn pull(url: &str, model: &str, json_out: bool) -> Result<()> {
    let resp = super::with_auth(url, ureq::post(&format!("{url}/api/pull")))
        .send_json(json!({ "model": model }))
        .map_err(http_error)?;
    let mut bars = Bars::default();
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.context("reading the server's pull events")?;
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if json_out {
            println!("{data}");
        }
        let ev: PullEvent = serde_json::from_str(data).with_context(|| format!("the server sent {data:?}"))?;
        match ev {
            PullEvent::Done { path, commit, transferred, .. } => {
                if !json_out {
                    let at = commit.map(|c| format!(" at {c}")).unwrap_or_default();
                    eprintln!("kvad: {model}{at}: complete on the server ({} transferred)", human(transferred));
                    println!("{path}");
                }
                return Ok(());
            }
            PullEvent::Error { error } => {
                bail!("the server's pull of {model} failed: {}", error["message"].as_str().unwrap_or("(no message)"))
            }
            other if !json_out => other.replay(&mut bars),
            _ => {}
        }
    }
    bail!("the server's pull stream ended before the pull did (was the server stopped?)")
}
