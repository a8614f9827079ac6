//! Accounts and security: who each request is from, and what it may do.
//!
//! `[auth] mode` (see `config.rs`) picks how requests are authenticated:
//! - `none` (the default): nobody signs in; every request is an administrator, named by the `x-kvad-account` header
//!   or `local`. The server refuses to bind a non-loopback address in this mode unless `--insecure` is given, and
//!   any request (reads too) with a `Host` that is not loopback (DNS rebinding), or from a web origin that
//!   `[server] allowed_origins` does not list, is 403 ([`origin::guard`]).
//! - `local`: accounts with argon2id passwords; a browser signs in (`POST /api/auth/login`) to a session cookie
//!   `kvad_session` (HttpOnly, SameSite=Lax), a program sends `Authorization: Bearer kvad_...` (an API key).
//! - `basic`: HTTP Basic against the same accounts, or an API key (or a session, after a login).
//! - `oidc`: an OpenID provider signs people in (`GET /api/auth/oidc/login`) to a session cookie, or an API key.
//!
//! The first administrator: in `local` and `basic` mode, `kvad-serve` creates the account `admin` at its first
//! start from `KVAD_ADMIN_PASSWORD` (and refuses to start with no accounts and no such variable); in `oidc` mode
//! `[auth] first_account_admin = true` makes the first account a login creates an administrator.
//!
//! **API Boundary (for handlers):** [`middleware::authenticate`] runs before every route. It puts a [`Caller`] in
//! the request's extensions whenever it identified one (always, in mode `none`), answers 401 for a route that needs
//! an account and got none, and answers 403 to a state-changing request authenticated by the session cookie that
//! lacks the session's `x-csrf-token` header. A handler takes `caller: Caller` as an extractor argument
//! (`caller.account`, `caller.role`, `caller.is_admin()`), or [`Admin`] for administrator-only routes (403 for
//! anyone else); both answer 401 if the middleware found nobody. The account a request is recorded, queued and
//! limited under is `caller.account`. Something another account owns is answered 404, as if it did not exist.

pub mod jwt;
pub mod middleware;
pub mod oidc;
pub mod origin;
pub mod routes;
pub mod secret;
pub mod session;
pub mod store;
pub mod throttle;

pub use middleware::{Admin, Caller, Via};

use crate::config::{AuthMode, AuthSection};
use crate::error::ApiError;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use store::AuthStore;

/// What an account may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything: load and unload, pull, accounts, everyone's keys, sessions, queue and usage.
    Admin,
    /// Generate, and manage its own keys, sessions and password.
    User,
}

impl Role {
    /// The name as the API and the tables spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }

    /// Parses `admin` or `user`; anything else is an error naming the field and the value.
    pub fn parse(field: &'static str, s: &str) -> Result<Role, AuthError> {
        match s {
            "admin" => Ok(Role::Admin),
            "user" => Ok(Role::User),
            other => Err(AuthError::bad(field, other, "a role is admin or user")),
        }
    }
}

/// Why an authentication or account operation failed. Each maps to one HTTP status; the messages of 401s and 404s
/// never say whether an account, key or session exists.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No valid credentials on a route that needs them (401).
    #[error("authentication required: sign in, or send Authorization: Bearer <API key>")]
    Unauthenticated,
    /// A login with a wrong username or password; the same for an unknown user (401).
    #[error("wrong username or password")]
    WrongCredentials,
    /// Authenticated, not allowed (403).
    #[error("{0}")]
    Forbidden(String),
    /// A browser's state-changing request without its session's CSRF token, or from another site (403).
    #[error("{0}")]
    Csrf(String),
    /// Not there, or not the caller's (404; the two answer alike).
    #[error("no {0} with that id here")]
    NotFound(&'static str),
    /// A field's value is wrong (400), naming the field and the value.
    #[error("{field} = {value:?}: {why}")]
    BadField {
        /// The field.
        field: &'static str,
        /// What was sent (never a password).
        value: String,
        /// What it should be.
        why: String,
    },
    /// The account name is taken (409).
    #[error("name = {0:?}: an account with that name exists")]
    Taken(String),
    /// The last administrator may not be removed or demoted (409), so the server keeps someone who can manage it.
    #[error("{0:?} is the last administrator; make another administrator first")]
    LastAdmin(String),
    /// The route has no meaning in this mode (400), e.g. a password login while mode is oidc.
    #[error("{what} is not available when [auth] mode = {mode:?}")]
    NotInMode {
        /// What was asked.
        what: &'static str,
        /// The mode.
        mode: &'static str,
    },
    /// An OIDC login failed at the callback (401): a bad state, code or ID token. Names the check that failed.
    #[error("OIDC login failed: {0}")]
    Oidc(String),
    /// The OIDC provider could not be reached or answered nonsense (502).
    #[error("the OIDC provider: {0}")]
    Provider(String),
    /// Too many failed sign-ins for this account or from this address (429): the next attempt is checked only
    /// after `retry_after` seconds ([`throttle`]).
    #[error("too many failed sign-ins; try again in {retry_after} s")]
    Throttled {
        /// Whole seconds to wait.
        retry_after: u64,
    },
    /// The database or the random source failed (500).
    #[error("{0}")]
    Internal(String),
}

impl AuthError {
    /// A 400 naming the field and the value.
    pub fn bad(field: &'static str, value: &str, why: impl Into<String>) -> Self {
        AuthError::BadField { field, value: value.to_string(), why: why.into() }
    }
}

impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        let msg = e.to_string();
        match e {
            AuthError::Unauthenticated | AuthError::WrongCredentials | AuthError::Oidc(_) => {
                ApiError::unauthorized(msg)
            }
            AuthError::Forbidden(_) => ApiError::forbidden(msg, "forbidden"),
            AuthError::Csrf(_) => ApiError::forbidden(msg, "csrf"),
            AuthError::NotFound(_) => ApiError::not_found(msg),
            AuthError::BadField { field, .. } => ApiError::bad_field(field, msg),
            AuthError::Taken(_) => ApiError::conflict("name", msg),
            AuthError::LastAdmin(_) => ApiError::conflict("role", msg),
            AuthError::NotInMode { .. } => ApiError::bad_request(msg),
            AuthError::Provider(_) => {
                let mut e = ApiError::internal(msg);
                e.status = axum::http::StatusCode::BAD_GATEWAY;
                e
            }
            AuthError::Throttled { retry_after } => ApiError::too_many(msg, Some(retry_after)),
            AuthError::Internal(_) => ApiError::internal(msg),
        }
    }
}

/// Checks an account name: 1 to 64 letters, digits, `.`, `_`, `-` or `@` (the `x-kvad-account` rule, so names are
/// safe in URLs, logs and the requests table).
pub fn check_name(field: &'static str, name: &str) -> Result<(), AuthError> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(AuthError::bad(field, name, "an account name is 1 to 64 letters, digits, '.', '_', '-' or '@'"))
    }
}

/// Checks a new password: 8 to 1024 characters. The error names the field and the length, never the password.
pub fn check_password(password: &str) -> Result<(), AuthError> {
    let n = password.chars().count();
    if (8..=1024).contains(&n) {
        Ok(())
    } else {
        Err(AuthError::BadField {
            field: "password",
            value: format!("({n} characters)"),
            why: "a password is 8 to 1024 characters".into(),
        })
    }
}

/// Refuses to serve a non-loopback address with no authentication, unless the operator said `--insecure`.
pub fn check_bind(mode: AuthMode, addr: SocketAddr, insecure: bool) -> Result<(), String> {
    if mode == AuthMode::None && !addr.ip().is_loopback() && !insecure {
        return Err(format!(
            "bind = {addr} is reachable from other machines, and [auth] mode = \"none\" lets anyone who reaches it \
             administer this server; set [auth] mode (local, basic or oidc; KVAD_AUTH_MODE), pass --insecure to \
             serve it with none, or bind a loopback address"
        ));
    }
    Ok(())
}

/// How long a verified Basic password is remembered, so Basic clients do not pay an argon2 hash per request.
const BASIC_CACHE: Duration = Duration::from_secs(60);

/// The authentication state every request shares.
#[derive(Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

struct Inner {
    mode: AuthMode,
    store: AuthStore,
    session_days: u32,
    /// Mode none served on a non-loopback address by `--insecure`: the loopback `Host` check is off.
    insecure: bool,
    oidc: Option<oidc::Provider>,
    first_account_admin: bool,
    /// sha256(name \0 password) → (account, the hash it was checked against, when).
    basic: Mutex<HashMap<String, (String, String, Instant)>>,
    /// Failed sign-ins by account and client address.
    throttle: throttle::Throttle,
}

impl Auth {
    /// Opens the accounts tables in `db`, creates the first administrator from `admin_password` (local and basic
    /// mode, when there are no accounts), and in oidc mode reads the provider's discovery document.
    pub fn start(
        section: &AuthSection,
        db: &Path,
        insecure: bool,
        admin_password: Option<&str>,
    ) -> Result<Auth, String> {
        let store = AuthStore::open(db).map_err(|e| e.to_string())?;
        let mode = section.mode;
        if matches!(mode, AuthMode::Local | AuthMode::Basic) && store.account_count().map_err(|e| e.to_string())? == 0 {
            let Some(pw) = admin_password.filter(|p| !p.is_empty()) else {
                return Err(format!(
                    "[auth] mode = {:?} and there are no accounts yet: set KVAD_ADMIN_PASSWORD for the first start \
                     to create the administrator \"admin\" with that password",
                    mode.as_str()
                ));
            };
            check_password(pw).map_err(|e| format!("KVAD_ADMIN_PASSWORD: {e}"))?;
            let hash = secret::hash_password(pw).map_err(|e| e.to_string())?;
            store.create_account("admin", Role::Admin, Some(&hash), None).map_err(|e| e.to_string())?;
            eprintln!("kvad-serve: created the administrator \"admin\" (password from KVAD_ADMIN_PASSWORD)");
        }
        let oidc = match mode {
            AuthMode::Oidc => Some(oidc::Provider::discover(section).map_err(|e| e.to_string())?),
            _ => None,
        };
        Ok(Auth {
            inner: Arc::new(Inner {
                mode,
                store,
                session_days: section.session_days,
                insecure,
                oidc,
                first_account_admin: section.first_account_admin,
                basic: Mutex::new(HashMap::new()),
                throttle: throttle::Throttle::default(),
            }),
        })
    }

    /// The mode in force.
    pub fn mode(&self) -> AuthMode {
        self.inner.mode
    }

    /// The tables.
    pub fn store(&self) -> &AuthStore {
        &self.inner.store
    }

    /// Days a new session lasts.
    pub fn session_days(&self) -> u32 {
        self.inner.session_days
    }

    /// Whether mode none was allowed onto a non-loopback address.
    pub fn insecure(&self) -> bool {
        self.inner.insecure
    }

    /// The OIDC provider (oidc mode only).
    pub fn oidc(&self) -> Option<&oidc::Provider> {
        self.inner.oidc.as_ref()
    }

    /// Whether the first OIDC account becomes an administrator.
    pub fn first_account_admin(&self) -> bool {
        self.inner.first_account_admin
    }

    /// Checks a username and password against the accounts table (argon2id; as slow for an unknown name as for a
    /// known one). Some(account, role) when they match.
    pub fn check_password(&self, name: &str, password: &str) -> Result<Option<(String, Role)>, AuthError> {
        let account = if check_name("username", name).is_ok() { self.store().account(name)? } else { None };
        let hash = account.as_ref().and_then(|a| a.password_hash.clone());
        if secret::verify_password(password, hash.as_deref()) {
            Ok(account.map(|a| (a.name, a.role)))
        } else {
            Ok(None)
        }
    }

    /// [`Auth::check_password`] for a sign-in from `address`, throttled: a name or address with too many recent
    /// failures is answered at once ([`AuthError::Throttled`]), before any hash is computed.
    pub fn sign_in(
        &self,
        name: &str,
        password: &str,
        address: Option<std::net::IpAddr>,
    ) -> Result<Option<(String, Role)>, AuthError> {
        let keys = throttle::keys(name, address);
        if let Some(wait) = self.inner.throttle.wait(&keys, Instant::now()) {
            return Err(AuthError::Throttled { retry_after: wait.as_secs_f64().ceil() as u64 });
        }
        let found = self.check_password(name, password)?;
        match found {
            Some(_) => self.inner.throttle.succeeded(&keys),
            None => self.inner.throttle.failed(&keys, Instant::now()),
        }
        Ok(found)
    }

    /// Basic credentials, with a short memory of recent successes (a changed password or a deleted account
    /// misses it, because the remembered hash no longer matches).
    pub fn check_basic(
        &self,
        name: &str,
        password: &str,
        address: Option<std::net::IpAddr>,
    ) -> Result<Option<(String, Role)>, AuthError> {
        let key = secret::sha256_hex(&format!("{name}\0{password}"));
        let remembered = self.inner.basic.lock().ok().and_then(|m| m.get(&key).cloned());
        if let Some((account, hash, at)) = remembered {
            if at.elapsed() < BASIC_CACHE {
                if let Some(a) = self.store().account(&account)? {
                    if a.password_hash.as_deref() == Some(hash.as_str()) {
                        return Ok(Some((a.name, a.role)));
                    }
                }
            }
        }
        let Some((account, role)) = self.sign_in(name, password, address)? else { return Ok(None) };
        if let (Ok(mut m), Some(a)) = (self.inner.basic.lock(), self.store().account(&account)?) {
            m.retain(|_, (_, _, at)| at.elapsed() < BASIC_CACHE);
            m.insert(key, (account.clone(), a.password_hash.unwrap_or_default(), Instant::now()));
        }
        Ok(Some((account, role)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_passwords_and_roles_are_checked_naming_the_field() {
        assert!(check_name("name", "ann.b-c_d@x").is_ok());
        let e = check_name("name", "a b").unwrap_err().to_string();
        assert!(e.starts_with("name = \"a b\":"), "{e}");
        assert!(check_name("name", "").is_err() && check_name("name", &"a".repeat(65)).is_err());
        let e = check_password("short").unwrap_err().to_string();
        assert!(e.contains("password") && e.contains("5 characters") && !e.contains("short"), "{e}");
        assert!(check_password("long enough").is_ok());
        assert_eq!(Role::parse("role", "admin").unwrap(), Role::Admin);
        assert_eq!(Role::parse("role", "root").unwrap_err().to_string(), "role = \"root\": a role is admin or user");
    }

    #[test]
    fn mode_none_stays_on_loopback_unless_insecure() {
        let lan: SocketAddr = "0.0.0.0:5823".parse().unwrap();
        let lo: SocketAddr = "127.0.0.1:5823".parse().unwrap();
        assert!(check_bind(AuthMode::None, lo, false).is_ok());
        let e = check_bind(AuthMode::None, lan, false).unwrap_err();
        assert!(e.starts_with("bind = 0.0.0.0:5823") && e.contains("--insecure"), "{e}");
        assert!(check_bind(AuthMode::None, lan, true).is_ok());
        assert!(check_bind(AuthMode::Local, lan, false).is_ok());
    }
}
