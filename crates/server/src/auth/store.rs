//! The accounts, sessions and API keys tables, in the server's SQLite file beside `requests`, on a connection of
//! their own. Their migrations are numbered apart from `store.rs`'s (in `kvad_migrations`, keyed by module), so
//! either list can grow without renumbering the other. Only hashes of secrets are stored.

use super::{AuthError, Role};
use rusqlite::{params, Connection, OptionalExtension};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// This module's migrations, in order. Append, never edit.
const MIGRATIONS: &[&str] = &["CREATE TABLE accounts (
        name TEXT PRIMARY KEY,
        role TEXT NOT NULL CHECK (role IN ('admin', 'user')),
        password_hash TEXT,
        oidc_subject TEXT UNIQUE,
        created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE TABLE sessions (
        token_hash TEXT PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        account TEXT NOT NULL REFERENCES accounts (name) ON DELETE CASCADE,
        csrf_token TEXT NOT NULL,
        created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        last_seen TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        expires TEXT NOT NULL,
        user_agent TEXT NOT NULL
    );
    CREATE INDEX sessions_account ON sessions (account);
    CREATE TABLE api_keys (
        id TEXT PRIMARY KEY,
        account TEXT NOT NULL REFERENCES accounts (name) ON DELETE CASCADE,
        name TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        last_used TEXT,
        revoked TEXT
    );
    CREATE INDEX api_keys_account ON api_keys (account);
    CREATE TABLE oidc_logins (
        state TEXT PRIMARY KEY,
        verifier TEXT NOT NULL,
        nonce TEXT NOT NULL,
        created TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );"];

const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// An account as the tables hold it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Account {
    /// The account's name (what requests are recorded under).
    pub name: String,
    /// Administrator or user.
    pub role: Role,
    /// When it was made (UTC, ISO 8601).
    pub created: String,
    /// The argon2id hash (None: signs in through OIDC only).
    #[serde(skip)]
    pub password_hash: Option<String>,
}

/// A session found by its cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHit {
    /// The session's public id (what `/api/sessions` lists; never the cookie).
    pub id: String,
    /// Whose.
    pub account: String,
    /// The account's role now.
    pub role: Role,
    /// The token state-changing requests must send as `x-csrf-token`.
    pub csrf_token: String,
}

/// A session as `/api/sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionRow {
    /// Public id.
    pub id: String,
    /// Whose.
    pub account: String,
    /// Signed in at.
    pub created: String,
    /// Last request.
    pub last_seen: String,
    /// The browser's User-Agent at sign-in.
    pub user_agent: String,
}

/// An API key as `/api/keys` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyRow {
    /// Public id (used to revoke it).
    pub id: String,
    /// The name its owner gave it.
    pub name: String,
    /// Its first characters, to recognise it.
    pub prefix: String,
    /// Whose.
    pub account: String,
    /// Made at.
    pub created: String,
    /// Last request it authenticated (None: never used).
    pub last_used: Option<String>,
    /// Whether it was revoked (it no longer authenticates anything).
    pub revoked: bool,
}

/// The tables, shared by every request (one connection behind a mutex; each query is short).
#[derive(Clone)]
pub struct AuthStore {
    conn: Arc<Mutex<Connection>>,
}

fn db_err(e: rusqlite::Error) -> AuthError {
    AuthError::Internal(format!("the accounts tables: {e}"))
}

fn role_of(s: &str) -> Role {
    if s == "admin" {
        Role::Admin
    } else {
        Role::User
    }
}

impl AuthStore {
    /// Opens the database file and runs this module's migrations it has not run.
    pub fn open(path: &Path) -> Result<Self, AuthError> {
        let conn = Connection::open(path).map_err(db_err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(db_err)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(db_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5)).map_err(db_err)?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS kvad_migrations (module TEXT PRIMARY KEY, version INTEGER NOT NULL)",
        )
        .map_err(db_err)?;
        let done: usize = conn
            .query_row("SELECT version FROM kvad_migrations WHERE module = 'auth'", [], |r| r.get(0))
            .optional()
            .map_err(db_err)?
            .unwrap_or(0);
        for (i, m) in MIGRATIONS.iter().enumerate().skip(done) {
            conn.execute_batch(&format!(
                "BEGIN; {m}; INSERT OR REPLACE INTO kvad_migrations (module, version) VALUES ('auth', {}); COMMIT;",
                i + 1
            ))
            .map_err(db_err)?;
        }
        Ok(AuthStore { conn: Arc::new(Mutex::new(conn)) })
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    // --- accounts

    /// One account by name.
    pub fn account(&self, name: &str) -> Result<Option<Account>, AuthError> {
        self.lock()
            .query_row("SELECT name, role, created, password_hash FROM accounts WHERE name = ?1", [name], |r| {
                Ok(Account {
                    name: r.get(0)?,
                    role: role_of(&r.get::<_, String>(1)?),
                    created: r.get(2)?,
                    password_hash: r.get(3)?,
                })
            })
            .optional()
            .map_err(db_err)
    }

    /// Every account, by name.
    pub fn accounts(&self) -> Result<Vec<Account>, AuthError> {
        let c = self.lock();
        let mut st = c.prepare("SELECT name, role, created FROM accounts ORDER BY name").map_err(db_err)?;
        let rows = st
            .query_map([], |r| {
                Ok(Account {
                    name: r.get(0)?,
                    role: role_of(&r.get::<_, String>(1)?),
                    created: r.get(2)?,
                    password_hash: None,
                })
            })
            .map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    /// How many accounts there are.
    pub fn account_count(&self) -> Result<usize, AuthError> {
        self.lock().query_row("SELECT count(*) FROM accounts", [], |r| r.get(0)).map_err(db_err)
    }

    /// How many administrators there are (the last one may not be removed or demoted).
    pub fn admin_count(&self) -> Result<usize, AuthError> {
        self.lock().query_row("SELECT count(*) FROM accounts WHERE role = 'admin'", [], |r| r.get(0)).map_err(db_err)
    }

    /// Makes an account; a name that is taken is [`AuthError::Taken`].
    pub fn create_account(
        &self,
        name: &str,
        role: Role,
        password_hash: Option<&str>,
        oidc_subject: Option<&str>,
    ) -> Result<(), AuthError> {
        let r = self.lock().execute(
            "INSERT INTO accounts (name, role, password_hash, oidc_subject) VALUES (?1, ?2, ?3, ?4)",
            params![name, role.as_str(), password_hash, oidc_subject],
        );
        match r {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _)) if e.code == rusqlite::ErrorCode::ConstraintViolation => {
                Err(AuthError::Taken(name.to_string()))
            }
            Err(e) => Err(db_err(e)),
        }
    }

    /// The account an OIDC subject (`issuer` + `sub`) signed in as before.
    pub fn account_by_subject(&self, subject: &str) -> Result<Option<String>, AuthError> {
        self.lock()
            .query_row("SELECT name FROM accounts WHERE oidc_subject = ?1", [subject], |r| r.get(0))
            .optional()
            .map_err(db_err)
    }

    /// Sets an account's password hash; false when there is no such account.
    pub fn set_password(&self, name: &str, hash: &str) -> Result<bool, AuthError> {
        let n = self
            .lock()
            .execute("UPDATE accounts SET password_hash = ?2 WHERE name = ?1", params![name, hash])
            .map_err(db_err)?;
        Ok(n == 1)
    }

    /// Sets an account's role; false when there is no such account.
    pub fn set_role(&self, name: &str, role: Role) -> Result<bool, AuthError> {
        let n = self
            .lock()
            .execute("UPDATE accounts SET role = ?2 WHERE name = ?1", params![name, role.as_str()])
            .map_err(db_err)?;
        Ok(n == 1)
    }

    /// Deletes an account with its sessions and keys; false when there is no such account.
    pub fn delete_account(&self, name: &str) -> Result<bool, AuthError> {
        let n = self.lock().execute("DELETE FROM accounts WHERE name = ?1", [name]).map_err(db_err)?;
        Ok(n == 1)
    }

    // --- sessions

    /// Records a new session under the hash of its cookie token.
    pub fn create_session(
        &self,
        token_hash: &str,
        id: &str,
        account: &str,
        csrf_token: &str,
        days: u32,
        user_agent: &str,
    ) -> Result<(), AuthError> {
        self.lock()
            .execute(
                "INSERT INTO sessions (token_hash, id, account, csrf_token, expires, user_agent)
                 VALUES (?1, ?2, ?3, ?4, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?5), ?6)",
                params![token_hash, id, account, csrf_token, format!("+{days} days"), user_agent],
            )
            .map_err(db_err)?;
        Ok(())
    }

    /// The live session whose cookie hashes to `token_hash` (expired ones are not found), and marks it seen
    /// (at most once a minute, so a busy browser does not write on every request).
    pub fn session(&self, token_hash: &str) -> Result<Option<SessionHit>, AuthError> {
        let c = self.lock();
        let hit = c
            .query_row(
                &format!(
                    "SELECT s.id, s.account, a.role, s.csrf_token FROM sessions s JOIN accounts a ON a.name = s.account
                     WHERE s.token_hash = ?1 AND s.expires > {NOW}"
                ),
                [token_hash],
                |r| {
                    Ok(SessionHit {
                        id: r.get(0)?,
                        account: r.get(1)?,
                        role: role_of(&r.get::<_, String>(2)?),
                        csrf_token: r.get(3)?,
                    })
                },
            )
            .optional()
            .map_err(db_err)?;
        if hit.is_some() {
            c.execute(
                &format!(
                    "UPDATE sessions SET last_seen = {NOW} WHERE token_hash = ?1
                     AND last_seen < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds')"
                ),
                [token_hash],
            )
            .map_err(db_err)?;
        }
        Ok(hit)
    }

    /// Sessions not yet expired: one account's, or everyone's.
    pub fn sessions(&self, account: Option<&str>) -> Result<Vec<SessionRow>, AuthError> {
        let c = self.lock();
        let mut st = c
            .prepare(&format!(
                "SELECT id, account, created, last_seen, user_agent FROM sessions
                 WHERE expires > {NOW} AND (?1 IS NULL OR account = ?1) ORDER BY created"
            ))
            .map_err(db_err)?;
        let rows = st
            .query_map([account], |r| {
                Ok(SessionRow {
                    id: r.get(0)?,
                    account: r.get(1)?,
                    created: r.get(2)?,
                    last_seen: r.get(3)?,
                    user_agent: r.get(4)?,
                })
            })
            .map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    /// Ends a session by public id, if it is `account`'s (None: anyone's); false when none matched.
    pub fn delete_session(&self, id: &str, account: Option<&str>) -> Result<bool, AuthError> {
        let n = self
            .lock()
            .execute("DELETE FROM sessions WHERE id = ?1 AND (?2 IS NULL OR account = ?2)", params![id, account])
            .map_err(db_err)?;
        Ok(n == 1)
    }

    /// Ends an account's sessions except `keep` (a password change signs out everywhere else).
    pub fn delete_sessions_of(&self, account: &str, keep: Option<&str>) -> Result<usize, AuthError> {
        self.lock()
            .execute("DELETE FROM sessions WHERE account = ?1 AND (?2 IS NULL OR id != ?2)", params![account, keep])
            .map_err(db_err)
    }

    // --- API keys

    /// Records a new key under its hash.
    pub fn create_key(&self, id: &str, account: &str, name: &str, hash: &str, prefix: &str) -> Result<(), AuthError> {
        self.lock()
            .execute(
                "INSERT INTO api_keys (id, account, name, hash, prefix) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, account, name, hash, prefix],
            )
            .map_err(db_err)?;
        Ok(())
    }

    /// The account and role of the unrevoked key that hashes to `hash`, and marks it used (at most once a minute
    /// after its first use).
    pub fn key(&self, hash: &str) -> Result<Option<(String, Role)>, AuthError> {
        let c = self.lock();
        let hit = c
            .query_row(
                "SELECT k.account, a.role FROM api_keys k JOIN accounts a ON a.name = k.account
                 WHERE k.hash = ?1 AND k.revoked IS NULL",
                [hash],
                |r| Ok((r.get::<_, String>(0)?, role_of(&r.get::<_, String>(1)?))),
            )
            .optional()
            .map_err(db_err)?;
        if hit.is_some() {
            c.execute(
                &format!(
                    "UPDATE api_keys SET last_used = {NOW} WHERE hash = ?1
                     AND (last_used IS NULL OR last_used < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds'))"
                ),
                [hash],
            )
            .map_err(db_err)?;
        }
        Ok(hit)
    }

    /// Keys: one account's, or everyone's; newest last.
    pub fn keys(&self, account: Option<&str>) -> Result<Vec<KeyRow>, AuthError> {
        let c = self.lock();
        let mut st = c
            .prepare(
                "SELECT id, name, prefix, account, created, last_used, revoked IS NOT NULL FROM api_keys
                 WHERE ?1 IS NULL OR account = ?1 ORDER BY created, id",
            )
            .map_err(db_err)?;
        let rows = st
            .query_map([account], |r| {
                Ok(KeyRow {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    prefix: r.get(2)?,
                    account: r.get(3)?,
                    created: r.get(4)?,
                    last_used: r.get(5)?,
                    revoked: r.get(6)?,
                })
            })
            .map_err(db_err)?;
        rows.collect::<Result<_, _>>().map_err(db_err)
    }

    /// Revokes a key by id, if it is `account`'s (None: anyone's); false when none matched. Revoking twice is
    /// not an error (the first time stands).
    pub fn revoke_key(&self, id: &str, account: Option<&str>) -> Result<bool, AuthError> {
        let n = self
            .lock()
            .execute(
                &format!(
                    "UPDATE api_keys SET revoked = coalesce(revoked, {NOW})
                     WHERE id = ?1 AND (?2 IS NULL OR account = ?2)"
                ),
                params![id, account],
            )
            .map_err(db_err)?;
        Ok(n == 1)
    }

    // --- OIDC logins in flight

    /// Remembers a login started at the provider: its state, PKCE verifier and nonce (10 minutes at most).
    pub fn begin_oidc(&self, state: &str, verifier: &str, nonce: &str) -> Result<(), AuthError> {
        let c = self.lock();
        c.execute("DELETE FROM oidc_logins WHERE created < strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-10 minutes')", [])
            .map_err(db_err)?;
        c.execute(
            "INSERT INTO oidc_logins (state, verifier, nonce) VALUES (?1, ?2, ?3)",
            params![state, verifier, nonce],
        )
        .map_err(db_err)?;
        Ok(())
    }

    /// Takes (once) the login with this state: its verifier and nonce, if it is under 10 minutes old.
    pub fn finish_oidc(&self, state: &str) -> Result<Option<(String, String)>, AuthError> {
        let c = self.lock();
        let hit = c
            .query_row(
                "SELECT verifier, nonce FROM oidc_logins
                 WHERE state = ?1 AND created >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-10 minutes')",
                [state],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(db_err)?;
        c.execute("DELETE FROM oidc_logins WHERE state = ?1", [state]).map_err(db_err)?;
        Ok(hit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(tag: &str) -> (AuthStore, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("kvad-auth-store-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        (AuthStore::open(&dir.join("kvad.db")).unwrap(), dir)
    }

    #[test]
    fn accounts_sessions_and_keys_round_trip_and_cascade() {
        let (s, dir) = store("roundtrip");
        s.create_account("ann", Role::Admin, Some("h"), None).unwrap();
        s.create_account("bob", Role::User, None, Some("iss|1")).unwrap();
        assert!(matches!(s.create_account("ann", Role::User, None, None), Err(AuthError::Taken(n)) if n == "ann"));
        assert_eq!((s.account_count().unwrap(), s.admin_count().unwrap()), (2, 1));
        assert_eq!(s.account_by_subject("iss|1").unwrap().as_deref(), Some("bob"));

        s.create_session("th1", "s1", "bob", "csrf1", 30, "ua").unwrap();
        let hit = s.session("th1").unwrap().unwrap();
        assert_eq!((hit.id.as_str(), hit.account.as_str(), hit.role), ("s1", "bob", Role::User));
        assert!(s.session("th2").unwrap().is_none());
        assert!(!s.delete_session("s1", Some("ann")).unwrap(), "another account's session is not deleted");

        s.create_key("k1", "bob", "laptop", "kh1", "kvad_abcdef").unwrap();
        assert_eq!(s.keys(Some("ann")).unwrap().len(), 0);
        assert!(s.keys(Some("bob")).unwrap()[0].last_used.is_none());
        assert_eq!(s.key("kh1").unwrap(), Some(("bob".into(), Role::User)));
        assert!(s.keys(None).unwrap()[0].last_used.is_some(), "use is recorded");
        assert!(!s.revoke_key("k1", Some("ann")).unwrap());
        assert!(s.revoke_key("k1", Some("bob")).unwrap());
        assert!(s.key("kh1").unwrap().is_none(), "a revoked key authenticates nothing");
        assert!(s.keys(None).unwrap()[0].revoked);

        // Reopening runs no migration twice.
        drop(s);
        let s = AuthStore::open(&dir.join("kvad.db")).unwrap();
        assert!(s.delete_account("bob").unwrap());
        assert!(s.session("th1").unwrap().is_none() && s.keys(None).unwrap().is_empty(), "cascaded");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn expired_sessions_and_old_oidc_logins_are_not_found() {
        let (s, dir) = store("expiry");
        s.create_account("ann", Role::User, None, None).unwrap();
        s.create_session("th", "s", "ann", "c", 1, "ua").unwrap();
        s.lock().execute("UPDATE sessions SET expires = '2000-01-01T00:00:00.000Z'", []).unwrap();
        assert!(s.session("th").unwrap().is_none());
        assert!(s.sessions(None).unwrap().is_empty());
        s.begin_oidc("st", "v", "n").unwrap();
        assert_eq!(s.finish_oidc("st").unwrap(), Some(("v".into(), "n".into())));
        assert_eq!(s.finish_oidc("st").unwrap(), None, "a state is used once");
        s.begin_oidc("old", "v", "n").unwrap();
        s.lock().execute("UPDATE oidc_logins SET created = '2000-01-01T00:00:00.000Z'", []).unwrap();
        assert_eq!(s.finish_oidc("old").unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
