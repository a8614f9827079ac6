//! The SQLite database in the data directory: WAL, numbered migrations, and the requests table.

use rusqlite::{params, Connection};
use std::path::Path;

/// Migrations in order; `PRAGMA user_version` records how many have run. Append, never edit.
const MIGRATIONS: &[&str] = &["CREATE TABLE requests (
        id INTEGER PRIMARY KEY,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        account TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        model TEXT NOT NULL,
        backend TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        cached_tokens INTEGER NOT NULL,
        generated_tokens INTEGER NOT NULL,
        queue_ms REAL NOT NULL,
        ttft_ms REAL,
        duration_ms REAL NOT NULL,
        finish_reason TEXT NOT NULL,
        error TEXT
    );
    CREATE INDEX requests_account_time ON requests (account, created_at);"];

/// One completion's row.
#[derive(Debug, Clone, Default)]
pub struct RequestRow {
    /// Who asked ("local" until accounts exist).
    pub account: String,
    /// `/v1/chat/completions` or `/v1/completions`.
    pub endpoint: String,
    /// The model id.
    pub model: String,
    /// The backend it ran on.
    pub backend: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens read from a cache (0 until the prefix cache exists).
    pub cached_tokens: usize,
    /// Tokens generated.
    pub generated_tokens: usize,
    /// Time waiting in the queue.
    pub queue_ms: f64,
    /// Time from the start of the job to the first token (None when there was none).
    pub ttft_ms: Option<f64>,
    /// Time from the start of the job to its end.
    pub duration_ms: f64,
    /// stop, length, tool_calls, cancelled or error.
    pub finish_reason: String,
    /// The error's message, when it failed.
    pub error: Option<String>,
}

/// The database.
pub struct Store {
    conn: Connection,
}

impl Store {
    /// Opens (creating) the database and runs the migrations it has not run.
    pub fn open(path: &Path) -> Result<Self, rusqlite::Error> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let done: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        for (i, m) in MIGRATIONS.iter().enumerate().skip(done) {
            conn.execute_batch(&format!("BEGIN; {m}; PRAGMA user_version = {}; COMMIT;", i + 1))?;
        }
        Ok(Store { conn })
    }

    /// Writes one request's row.
    pub fn record(&self, r: &RequestRow) -> Result<(), rusqlite::Error> {
        self.conn.execute(
            "INSERT INTO requests (account, endpoint, model, backend, prompt_tokens, cached_tokens, generated_tokens,
                 queue_ms, ttft_ms, duration_ms, finish_reason, error)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                r.account,
                r.endpoint,
                r.model,
                r.backend,
                r.prompt_tokens as i64,
                r.cached_tokens as i64,
                r.generated_tokens as i64,
                r.queue_ms,
                r.ttft_ms,
                r.duration_ms,
                r.finish_reason,
                r.error
            ],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_run_once_and_rows_land() {
        let dir = std::env::temp_dir().join(format!("kvad-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kvad.db");
        let _ = std::fs::remove_file(&path);
        let s = Store::open(&path).unwrap();
        s.record(&RequestRow { account: "local".into(), finish_reason: "stop".into(), ..Default::default() }).unwrap();
        drop(s);
        // Reopening runs nothing again (the table would already exist) and keeps the row.
        let s = Store::open(&path).unwrap();
        let n: i64 = s.conn.query_row("SELECT count(*) FROM requests", [], |r| r.get(0)).unwrap();
        let mode: String = s.conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!((n, mode.as_str()), (1, "wal"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
