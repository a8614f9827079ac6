//! Configuration: `kvad.toml` in the data directory, then environment variables, then command-line flags, each
//! overriding the one before.
//!
//! ```toml
//! [server]
//! bind = "127.0.0.1:5823"        # KVAD_BIND
//! queue = 16                     # KVAD_QUEUE: generations that may wait; the next is a 503
//! queue_per_account = 4          # generations one account may have waiting; the next is a 429
//! generations_per_minute = 30    # per account (off unless set); over it a 429 says when the next is taken
//! batch = 4                      # KVAD_BATCH: replies on one model written together (unset: 4 on the CPU; on a
//!                                # GPU as many as its K/V pages hold, each reply's pages reserved as it joins)
//! context = 8192                 # tokens of KV cache each model is charged for (unset: the model's context)
//! memory = "24 GB"               # KVAD_MEMORY: what loaded models may be charged in all (unset: available now)
//! autoload = false               # reload the models that were loaded, in the background, at start
//! models = ["smollm2-instruct"]  # KVAD_MODELS (comma-separated): what /v1/models offers
//! backend = "cpu-q8"             # KVAD_BACKEND (unset: gpu-q8 where the GPU runs the model, else cpu-q8)
//! allowed_origins = []           # KVAD_ALLOWED_ORIGINS (comma-separated): other web origins whose pages may call
//!                                # this server (CORS, no cookies), e.g. "http://localhost:3000"; in auth mode
//!                                # none every other origin is refused, reads included
//! max_body = 2097152             # KVAD_MAX_BODY: bytes a request body may hold; a larger one is a 413 (OpenAI's
//!                                # error shape, code request_too_large)
//! shutdown_timeout = 30          # KVAD_SHUTDOWN_TIMEOUT: seconds running replies get after SIGINT/SIGTERM; then
//!                                # they end (finish_reason "length", kvad.shutdown, [DONE]) and the server exits 0
//! stall_timeout = 60             # KVAD_STALL_TIMEOUT: seconds a streaming client may leave its reply unread (its
//!                                # socket full) before the reply is stopped; 0: never
//! chat_template = "hermes.jinja"  # a chat template for every model instead of its own (--chat-template)
//! chat_templates = { "smollm2-instruct" = "hermes.jinja" }  # per model, instead of its own and of chat_template
//! greedy_ahead = 8               # KVAD_GREEDY_AHEAD: greedy steps a lone reply runs ahead (unset: the model's own)
//! step_trace = false             # KVAD_STEP_TRACE=1: each pass's times on stderr
//!
//! [client]
//! url = "http://127.0.0.1:5823"  # KVAD_URL: where `kvad` sends its commands
//!
//! [auth]
//! mode = "local"                 # KVAD_AUTH_MODE: none (default, loopback only), local, basic or oidc
//! session_days = 30              # how long a browser session lasts
//! issuer = "https://id.example"  # KVAD_OIDC_ISSUER (oidc): the provider; its discovery document is read at start
//! client_id = "kvad"             # KVAD_OIDC_CLIENT_ID
//! client_secret = "..."          # KVAD_OIDC_CLIENT_SECRET (unset: a public client, PKCE alone)
//! redirect_url = "https://kvad.example/api/auth/oidc/callback"  # KVAD_OIDC_REDIRECT_URL
//! first_account_admin = false    # the first account an OIDC login creates becomes an administrator
//! ```
//!
//! The data directory is `--data-dir`, else `KVAD_DATA`, else `$XDG_DATA_HOME/kvad`, else `~/.local/share/kvad`.
//! It holds `kvad.toml` and the SQLite database `kvad.db`.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The default address: loopback only.
pub const DEFAULT_BIND: &str = "127.0.0.1:5823";

/// `[server]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// Address to listen on.
    pub bind: String,
    /// Generations that may wait.
    pub queue: usize,
    /// Generations one account may have waiting.
    pub queue_per_account: usize,
    /// Generations one account may start per minute (None: no limit).
    pub generations_per_minute: Option<usize>,
    /// Replies written together (None: the backend's rule, 4 on the CPU; on a GPU as many as the K/V page pool
    /// holds, each reply's prompt + max_tokens reserved as it joins).
    pub batch: Option<usize>,
    /// Tokens of KV cache each model is charged for (None: the model's own context).
    pub context: Option<usize>,
    /// What loaded models may be charged in all, e.g. "24 GB" (None: the memory available at start).
    pub memory: Option<String>,
    /// Reload the models that were loaded when the server last ran.
    pub autoload: bool,
    /// Models offered.
    pub models: Vec<String>,
    /// Backend models load on when nothing names one and no load has chosen one for the model (None: the seed's
    /// rule, as `kvad run` applies it: gpu-q8 where the GPU runs the model's family, else cpu-q8).
    pub backend: Option<String>,
    /// Web origins (`scheme://host[:port]`) other than the server's own whose pages may call it: they get CORS
    /// answers (without credentials), and in mode none they are the only other origins answered at all.
    pub allowed_origins: Vec<String>,
    /// Bytes a request body may hold (2 MiB: a prompt of a model's longest context, as JSON, with room); a larger
    /// body is refused whole with a 413 before anything reads it.
    pub max_body: usize,
    /// Seconds running replies (and pulls) get to finish after SIGINT/SIGTERM before they are ended, so a long
    /// stream cannot hold shutdown forever.
    pub shutdown_timeout: u64,
    /// Seconds a streaming client may leave its reply unread (its socket and the server's buffer full) before the
    /// reply is stopped, so a client that stopped reading does not have its whole reply written and held for it
    /// (0: never).
    pub stall_timeout: u64,
    /// A Jinja chat template file every model's prompts are rendered with instead of its own (None: each its own).
    pub chat_template: Option<std::path::PathBuf>,
    /// Chat template files by model id, each in place of that model's own and of `chat_template` (llama.cpp and
    /// vLLM serve one model each; a server of several may need a tool-calling template for one of them only).
    pub chat_templates: std::collections::BTreeMap<String, std::path::PathBuf>,
    /// Greedy steps a reply stepping alone runs ahead of its stop checks (None: the model's own count, 8 on a GPU
    /// where it saves the host's wait a step, 1 on the CPU).
    pub greedy_ahead: Option<usize>,
    /// Each pass's engine time and the gap between passes on stderr: where a step's time goes.
    pub step_trace: bool,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            bind: DEFAULT_BIND.into(),
            queue: 16,
            queue_per_account: 4,
            generations_per_minute: None,
            batch: None,
            context: None,
            memory: None,
            autoload: false,
            models: vec![kvad_hub::DEFAULT_ALIAS.into()],
            backend: None,
            allowed_origins: Vec::new(),
            max_body: 2 * 1024 * 1024,
            shutdown_timeout: 30,
            stall_timeout: 60,
            chat_template: None,
            chat_templates: Default::default(),
            greedy_ahead: None,
            step_trace: false,
        }
    }
}

/// `[client]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClientSection {
    /// The server `kvad` talks to.
    pub url: Option<String>,
}

/// How requests are authenticated (`[auth] mode`).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Nobody signs in: every request is the local administrator. Loopback only, unless `--insecure`.
    #[default]
    None,
    /// Accounts with passwords; browsers sign in to a session cookie, programs send an API key.
    Local,
    /// HTTP Basic against the same accounts (or an API key), for clients that only know Basic.
    Basic,
    /// An OpenID provider signs people in (authorisation code flow with PKCE); programs send an API key.
    Oidc,
}

impl AuthMode {
    /// The name as `kvad.toml` and `/api/auth/me` spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Local => "local",
            AuthMode::Basic => "basic",
            AuthMode::Oidc => "oidc",
        }
    }
}

impl std::str::FromStr for AuthMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(AuthMode::None),
            "local" => Ok(AuthMode::Local),
            "basic" => Ok(AuthMode::Basic),
            "oidc" => Ok(AuthMode::Oidc),
            other => Err(format!("mode = {other:?}: one of none, local, basic, oidc")),
        }
    }
}

/// `[auth]`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthSection {
    /// How requests are authenticated.
    pub mode: AuthMode,
    /// Days a browser session lasts from sign-in.
    pub session_days: u32,
    /// OIDC: the provider's issuer URL (its `/.well-known/openid-configuration` is read).
    pub issuer: Option<String>,
    /// OIDC: this server's client id at the provider.
    pub client_id: Option<String>,
    /// OIDC: the client secret (None: a public client, PKCE alone).
    pub client_secret: Option<String>,
    /// OIDC: where the provider sends the browser back: this server's `/api/auth/oidc/callback`.
    pub redirect_url: Option<String>,
    /// OIDC: the first account a login creates is an administrator (off: every OIDC account starts as a user).
    pub first_account_admin: bool,
}

impl Default for AuthSection {
    fn default() -> Self {
        AuthSection {
            mode: AuthMode::None,
            session_days: 30,
            issuer: None,
            client_id: None,
            client_secret: None,
            redirect_url: None,
            first_account_admin: false,
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[server]`.
    pub server: ServerSection,
    /// `[client]`.
    pub client: ClientSection,
    /// `[auth]`.
    pub auth: AuthSection,
}

/// The data directory.
pub fn data_dir(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(d) = env("KVAD_DATA") {
        return d;
    }
    if let Some(d) = env("XDG_DATA_HOME") {
        return d.join("kvad");
    }
    env("HOME").unwrap_or_else(|| PathBuf::from(".")).join(".local/share/kvad")
}

impl Config {
    /// Reads `kvad.toml` from the data directory (defaults when it is absent), then applies the environment.
    pub fn load(dir: &Path) -> Result<Config, String> {
        let path = dir.join("kvad.toml");
        let mut c = match std::fs::read_to_string(&path) {
            Ok(text) => Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        c.apply_env(|k| std::env::var(k).ok())?;
        Ok(c)
    }

    /// Checks values no type can: each names the key and the value.
    pub fn check(&self) -> Result<(), String> {
        let s = &self.server;
        let positive =
            [("queue", s.queue), ("queue_per_account", s.queue_per_account), ("batch", s.batch.unwrap_or(1))];
        for (key, v) in positive {
            if v == 0 {
                return Err(format!("[server] {key} = 0: must be at least 1"));
            }
        }
        if s.max_body < 1024 {
            return Err(format!("[server] max_body = {}: at least 1024 bytes", s.max_body));
        }
        if s.generations_per_minute == Some(0) {
            return Err("[server] generations_per_minute = 0: at least 1 (leave it unset for no limit)".into());
        }
        for o in &s.allowed_origins {
            check_origin(o)?;
        }
        if s.context == Some(0) {
            return Err("[server] context = 0: must be at least 1 token (leave it unset for the model's)".into());
        }
        let a = &self.auth;
        if a.session_days == 0 || a.session_days > 3650 {
            return Err(format!("[auth] session_days = {}: a whole number of days from 1 to 3650", a.session_days));
        }
        if a.mode == AuthMode::Oidc {
            for (key, v) in [("issuer", &a.issuer), ("client_id", &a.client_id), ("redirect_url", &a.redirect_url)] {
                if v.as_deref().is_none_or(str::is_empty) {
                    return Err(format!("[auth] {key} is required when mode = \"oidc\""));
                }
            }
            for (key, v) in [("issuer", &a.issuer), ("redirect_url", &a.redirect_url)] {
                let v = v.as_deref().unwrap_or("");
                if !(v.starts_with("https://") || v.starts_with("http://")) {
                    return Err(format!("[auth] {key} = {v:?}: an http:// or https:// URL"));
                }
            }
        }
        Ok(())
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Environment overrides; `get` reads a variable.
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), String> {
        if let Some(v) = get("KVAD_BIND").filter(|v| !v.is_empty()) {
            self.server.bind = v;
        }
        if let Some(v) = get("KVAD_QUEUE").filter(|v| !v.is_empty()) {
            self.server.queue = v.parse().map_err(|_| format!("KVAD_QUEUE = {v:?}: not a whole number"))?;
        }
        if let Some(v) = get("KVAD_BATCH").filter(|v| !v.is_empty()) {
            self.server.batch = Some(v.parse().map_err(|_| format!("KVAD_BATCH = {v:?}: not a whole number"))?);
        }
        if let Some(v) = get("KVAD_MEMORY").filter(|v| !v.is_empty()) {
            self.server.memory = Some(v);
        }
        if let Some(v) = get("KVAD_MODELS").filter(|v| !v.is_empty()) {
            self.server.models = v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        }
        if let Some(v) = get("KVAD_BACKEND").filter(|v| !v.is_empty()) {
            self.server.backend = Some(v);
        }
        if let Some(v) = get("KVAD_ALLOWED_ORIGINS").filter(|v| !v.is_empty()) {
            self.server.allowed_origins =
                v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
        }
        if let Some(v) = get("KVAD_MAX_BODY").filter(|v| !v.is_empty()) {
            self.server.max_body =
                v.parse().map_err(|_| format!("KVAD_MAX_BODY = {v:?}: not a whole number of bytes"))?;
        }
        if let Some(v) = get("KVAD_SHUTDOWN_TIMEOUT").filter(|v| !v.is_empty()) {
            self.server.shutdown_timeout =
                v.parse().map_err(|_| format!("KVAD_SHUTDOWN_TIMEOUT = {v:?}: not a whole number of seconds"))?;
        }
        if let Some(v) = get("KVAD_STALL_TIMEOUT").filter(|v| !v.is_empty()) {
            self.server.stall_timeout =
                v.parse().map_err(|_| format!("KVAD_STALL_TIMEOUT = {v:?}: not a whole number of seconds"))?;
        }
        if let Some(v) = get("KVAD_GREEDY_AHEAD").filter(|v| !v.is_empty()) {
            let n = v.parse().map_err(|_| format!("KVAD_GREEDY_AHEAD = {v:?}: not a whole number"))?;
            self.server.greedy_ahead = Some(n);
        }
        if let Some(v) = get("KVAD_STEP_TRACE").filter(|v| !v.is_empty()) {
            self.server.step_trace = v == "1";
        }
        if let Some(v) = get("KVAD_URL").filter(|v| !v.is_empty()) {
            self.client.url = Some(v);
        }
        if let Some(v) = get("KVAD_AUTH_MODE").filter(|v| !v.is_empty()) {
            self.auth.mode = v.parse().map_err(|e| format!("KVAD_AUTH_MODE: {e}"))?;
        }
        let oidc = [
            ("KVAD_OIDC_ISSUER", &mut self.auth.issuer),
            ("KVAD_OIDC_CLIENT_ID", &mut self.auth.client_id),
            ("KVAD_OIDC_CLIENT_SECRET", &mut self.auth.client_secret),
            ("KVAD_OIDC_REDIRECT_URL", &mut self.auth.redirect_url),
        ];
        for (k, slot) in oidc {
            if let Some(v) = get(k).filter(|v| !v.is_empty()) {
                *slot = Some(v);
            }
        }
        Ok(())
    }
}

/// `KVAD_ADMIN_PASSWORD`: the first administrator's password in `local` mode, where no account exists yet (read at
/// start only; never stored in `kvad.toml`).
pub fn admin_password() -> Option<String> {
    std::env::var("KVAD_ADMIN_PASSWORD").ok()
}

/// Checks an `allowed_origins` entry: `scheme://host[:port]`, nothing after it, so a typo is named at start
/// rather than silently never matching.
pub fn check_origin(entry: &str) -> Result<(), String> {
    let rest = entry.strip_prefix("http://").or_else(|| entry.strip_prefix("https://"));
    let ok = rest.is_some_and(|r| {
        let host = r.trim_end_matches('/');
        !host.is_empty() && !host.contains('/')
    });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "[server] allowed_origins: {entry:?} is not a web origin: scheme://host[:port] with no path, e.g. \
             \"http://localhost:3000\""
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_then_environment() {
        let mut c =
            Config::parse("[server]\nbind = \"127.0.0.1:9000\"\nqueue = 3\n[client]\nurl = \"http://h:1\"\n").unwrap();
        assert_eq!((c.server.bind.as_str(), c.server.queue), ("127.0.0.1:9000", 3));
        assert_eq!(c.server.models, vec!["smollm2-instruct".to_string()], "unset keys keep their defaults");
        c.apply_env(|k| (k == "KVAD_QUEUE").then(|| "7".to_string())).unwrap();
        assert_eq!((c.server.bind.as_str(), c.server.queue), ("127.0.0.1:9000", 7));
        assert_eq!(c.client.url.as_deref(), Some("http://h:1"));
    }

    #[test]
    fn bad_files_and_values_are_named() {
        let e = Config::parse("[server]\nbindd = \"x\"\n").unwrap_err();
        assert!(e.contains("bindd"), "{e}");
        let e = Config::parse("[server]\nqueue = \"many\"\n").unwrap_err();
        assert!(e.contains("queue") || e.contains("many"), "{e}");
        let e = Config::default().apply_env(|k| (k == "KVAD_QUEUE").then(|| "lots".to_string())).unwrap_err();
        assert!(e.contains("KVAD_QUEUE") && e.contains("lots"), "{e}");
        let c = Config::parse("[server]\nbatch = 0\n").unwrap();
        assert_eq!(c.check().unwrap_err(), "[server] batch = 0: must be at least 1");
        let c = Config::parse("[server]\ngenerations_per_minute = 0\n").unwrap();
        assert!(c.check().unwrap_err().contains("generations_per_minute = 0"));
        assert_eq!(Config::default().server.shutdown_timeout, 30);
        let mut c = Config::parse("[server]\nshutdown_timeout = 5\n").unwrap();
        assert_eq!(c.server.shutdown_timeout, 5);
        c.apply_env(|k| (k == "KVAD_SHUTDOWN_TIMEOUT").then(|| "2".to_string())).unwrap();
        assert_eq!(c.server.shutdown_timeout, 2);
        let e = c.apply_env(|k| (k == "KVAD_SHUTDOWN_TIMEOUT").then(|| "soon".to_string())).unwrap_err();
        assert!(e.contains("KVAD_SHUTDOWN_TIMEOUT") && e.contains("soon"), "{e}");
        let c = Config::parse("[server]\nbatch = 8\ncontext = 2048\nautoload = true\n").unwrap();
        assert_eq!((c.server.batch, c.server.context, c.server.autoload), (Some(8), Some(2048), true));
        assert!(c.check().is_ok());
    }

    #[test]
    fn auth_section_modes_and_oidc_requirements() {
        assert_eq!(Config::default().auth.mode, AuthMode::None);
        let c = Config::parse("[auth]\nmode = \"basic\"\n").unwrap();
        assert_eq!(c.auth.mode, AuthMode::Basic);
        let e = Config::parse("[auth]\nmode = \"ldap\"\n").unwrap_err();
        assert!(e.contains("ldap"), "{e}");
        let e = Config::parse("[auth]\nissuerr = \"x\"\n").unwrap_err();
        assert!(e.contains("issuerr"), "{e}");
        let mut c = Config::default();
        c.apply_env(|k| (k == "KVAD_AUTH_MODE").then(|| "local".to_string())).unwrap();
        assert_eq!(c.auth.mode, AuthMode::Local);
        let e = c.apply_env(|k| (k == "KVAD_AUTH_MODE").then(|| "open".to_string())).unwrap_err();
        assert!(e.contains("KVAD_AUTH_MODE") && e.contains("open"), "{e}");
        let c = Config::parse("[auth]\nmode = \"oidc\"\nissuer = \"https://id\"\n").unwrap();
        assert_eq!(c.check().unwrap_err(), "[auth] client_id is required when mode = \"oidc\"");
        let mut c = Config::parse(
            "[auth]\nmode = \"oidc\"\nissuer = \"id.example\"\nclient_id = \"k\"\nredirect_url = \"http://h/cb\"\n",
        )
        .unwrap();
        assert_eq!(c.check().unwrap_err(), "[auth] issuer = \"id.example\": an http:// or https:// URL");
        c.apply_env(|k| (k == "KVAD_OIDC_ISSUER").then(|| "https://id.example".to_string())).unwrap();
        assert!(c.check().is_ok());
        let c = Config::parse("[auth]\nsession_days = 0\n").unwrap();
        assert!(c.check().unwrap_err().contains("session_days = 0"));
    }

    #[test]
    fn allowed_origin_entries_are_origins() {
        for ok in ["http://localhost:3000", "https://app.example", "https://app.example/"] {
            assert!(check_origin(ok).is_ok(), "{ok}");
        }
        for bad in ["*", "localhost:3000", "http://", "https://app.example/path", "ftp://x"] {
            let e = check_origin(bad).unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
