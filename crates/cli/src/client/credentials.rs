//! `credentials.json` in the config directory: the API key `kvad auth login` made for each server, keyed by the
//! server's URL, readable by the user only (mode 0600, written whole to a temporary file and renamed). Every
//! request a client command sends to that server carries `Authorization: Bearer <key>`; `KVAD_API_KEY`, when set,
//! is sent instead (scripts, CI).
//!
//! The config directory is `KVAD_CONFIG_DIR`, else `$XDG_CONFIG_HOME/kvad`, else `~/.config/kvad`.

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// One server's stored key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The API key (`kvad_...`).
    pub key: String,
    /// Its id on the server (to revoke it at `kvad auth logout`; None when it was given by hand).
    pub key_id: Option<String>,
    /// The account it belongs to.
    pub account: String,
}

/// The file's contents: server URL → entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Credentials {
    /// By server URL (no trailing slash).
    pub servers: BTreeMap<String, Entry>,
}

/// The config directory.
pub fn config_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("KVAD_CONFIG_DIR")
        .or_else(|| env("XDG_CONFIG_HOME").map(|d| d.join("kvad")))
        .unwrap_or_else(|| env("HOME").unwrap_or_else(|| PathBuf::from(".")).join(".config/kvad"))
}

/// `credentials.json`'s path.
pub fn path() -> PathBuf {
    config_dir().join("credentials.json")
}

/// The URL as the file keys it.
pub fn normalise(url: &str) -> String {
    url.trim_end_matches('/').to_string()
}

impl Credentials {
    /// Reads the file (empty when there is none).
    pub fn load() -> Result<Credentials> {
        let p = path();
        match std::fs::read_to_string(&p) {
            Ok(t) => serde_json::from_str(&t).with_context(|| format!("reading {}", p.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Credentials::default()),
            Err(e) => Err(e).with_context(|| format!("reading {}", p.display())),
        }
    }

    /// Writes the file, readable and writable by the user only.
    pub fn save(&self) -> Result<PathBuf> {
        let p = path();
        let dir = config_dir();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let tmp = dir.join(format!(".credentials.json.{}", std::process::id()));
        let text = serde_json::to_string_pretty(self)?;
        {
            use std::io::Write;
            let mut o = std::fs::OpenOptions::new();
            o.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            let mut f = o.open(&tmp).with_context(|| format!("writing {}", tmp.display()))?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        }
        std::fs::rename(&tmp, &p).with_context(|| format!("writing {}", p.display()))?;
        Ok(p)
    }
}

/// The key to send to `url`: `KVAD_API_KEY`, else the stored one (read once per process).
pub fn key_for(url: &str) -> Option<String> {
    if let Some(k) = crate::config::api_key() {
        return Some(k);
    }
    static LOADED: std::sync::OnceLock<Credentials> = std::sync::OnceLock::new();
    let c = LOADED.get_or_init(|| {
        Credentials::load().unwrap_or_else(|e| {
            eprintln!("kvad: warning: {e:#}; sending no API key");
            Credentials::default()
        })
    });
    c.servers.get(&normalise(url)).map(|e| e.key.clone())
}
