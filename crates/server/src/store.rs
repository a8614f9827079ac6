//! The SQLite database in the data directory: WAL, numbered migrations, and the requests table.

use rusqlite::{params, Connection};
use std::path::Path;

/// Migrations in order; `PRAGMA user_version` records how many have run. Append, never edit.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE requests (
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
    CREATE INDEX requests_account_time ON requests (account, created_at);",
    "CREATE TABLE active_models (model TEXT PRIMARY KEY, since TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')))",
    // The web UI's chats (api/conversations.rs): each belongs to one account; a message keeps the answer, never
    // the reasoning trace.
    "CREATE TABLE conversations (
        id INTEGER PRIMARY KEY,
        account TEXT NOT NULL,
        title TEXT NOT NULL,
        model TEXT,
        settings TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX conversations_account ON conversations (account, updated_at);
    CREATE TABLE conversation_messages (
        id INTEGER PRIMARY KEY,
        conversation INTEGER NOT NULL REFERENCES conversations (id),
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        tool_calls TEXT,
        tool_call_id TEXT,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX conversation_messages_conversation ON conversation_messages (conversation, id);",
    // The backend each active model was loaded on, so `[server] autoload` puts it back there (NULL: a row from
    // before backends per model, reloaded on `[server] backend`).
    "ALTER TABLE active_models ADD COLUMN backend TEXT",
    // The backend each model's last load named (`kvad load --backend`, the Models page): where the model loads
    // when nothing names one, across unloads and restarts (the seed: a stored per-model choice wins).
    "CREATE TABLE model_backends (model TEXT PRIMARY KEY, backend TEXT NOT NULL)",
    // Rows are opened at admission (created_at) and closed at the end: when, and in what order (ids follow
    // admission; times of replies ending in one pass tie).
    "ALTER TABLE requests ADD COLUMN ended_at TEXT; ALTER TABLE requests ADD COLUMN ended_seq INTEGER",
    // What the server keeps of its own choices across restarts: the default model (`kvad use` against it).
    "CREATE TABLE server_settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    // Stored Responses-API responses (api/responses/): each account's own, with the conversation (template messages)
    // that a `previous_response_id` continues.
    "CREATE TABLE responses (
        id TEXT PRIMARY KEY,
        account TEXT NOT NULL,
        model TEXT NOT NULL,
        conversation TEXT NOT NULL,
        response TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX responses_account ON responses (account, created_at);",
    // Datasets (api/datasets.rs): each account's uploads; the file itself is in the data directory's datasets/.
    // `validation` is the JSON array of the record indices held out.
    "CREATE TABLE datasets (
        id TEXT PRIMARY KEY,
        account TEXT NOT NULL,
        name TEXT NOT NULL,
        format TEXT NOT NULL,
        records INTEGER NOT NULL,
        validation TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX datasets_account ON datasets (account, created_at);",
    // Long-running work (jobs/): training runs. `spec` is what was asked, `result` what it made; `job_events` every
    // progress event in order, what the Training page draws its curves from and a follower replays.
    "CREATE TABLE jobs (
        id TEXT PRIMARY KEY,
        account TEXT NOT NULL,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        spec TEXT NOT NULL,
        result TEXT,
        error TEXT,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        started_at TEXT,
        finished_at TEXT
    );
    CREATE INDEX jobs_account ON jobs (account, created_at);
    CREATE TABLE job_events (job TEXT NOT NULL, seq INTEGER NOT NULL, event TEXT NOT NULL, PRIMARY KEY (job, seq));",
    // An eval job's answers (jobs/eval.rs), kept so two runs can be compared item by item.
    "CREATE TABLE eval_items (
        job TEXT NOT NULL,
        model TEXT NOT NULL,
        idx INTEGER NOT NULL,
        prompt TEXT NOT NULL,
        expected TEXT NOT NULL,
        answer TEXT NOT NULL,
        correct INTEGER NOT NULL,
        PRIMARY KEY (job, model, idx)
    )",
];

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
    /// The connection (other modules' tables, such as api/conversations.rs, query it directly).
    pub(crate) conn: Connection,
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

    /// Opens a request's row as it is admitted (`finish_reason` "running"), so a kill loses no request: the row is
    /// updated as tokens come and closed at the end ([`Store::close`]); one still running at the next start was
    /// interrupted ([`Store::mark_interrupted`]). Returns the row's id.
    pub fn open_row(&self, r: &RequestRow) -> Result<i64, rusqlite::Error> {
        let mut r = r.clone();
        r.finish_reason = "running".into();
        self.record(&r)?;
        Ok(self.conn.last_insert_rowid())
    }

    /// What a running request has generated so far (its row keeps the count should the process die).
    pub fn progress(&self, id: i64, generated_tokens: usize) -> Result<(), rusqlite::Error> {
        self.conn
            .execute("UPDATE requests SET generated_tokens = ?2 WHERE id = ?1", params![id, generated_tokens as i64])?;
        Ok(())
    }

    /// Closes an opened row with the request's final figures.
    pub fn close(&self, id: i64, r: &RequestRow) -> Result<(), rusqlite::Error> {
        self.conn.execute(
            "UPDATE requests SET backend = ?2, prompt_tokens = ?3, cached_tokens = ?4, generated_tokens = ?5,
                 queue_ms = ?6, ttft_ms = ?7, duration_ms = ?8, finish_reason = ?9, error = ?10,
                 ended_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now'),
                 ended_seq = (SELECT coalesce(max(ended_seq), 0) + 1 FROM requests) WHERE id = ?1",
            params![
                id,
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

    /// Rows left "running" by a process that died (a kill, a crash, the power): "interrupted", keeping what they
    /// had generated. Returns how many.
    pub fn mark_interrupted(&self) -> Result<usize, rusqlite::Error> {
        // A job that was running when the server stopped did not finish; its last checkpoint is on disk.
        self.conn.execute(
            "UPDATE jobs SET state = 'failed', error = 'the server stopped while it ran', \
             finished_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE state IN ('queued', 'running')",
            [],
        )?;
        self.conn.execute("UPDATE requests SET finish_reason = 'interrupted' WHERE finish_reason = 'running'", [])
    }

    /// Writes one request's row.
    pub fn record(&self, r: &RequestRow) -> Result<(), rusqlite::Error> {
        self.conn.execute(
            "INSERT INTO requests (account, endpoint, model, backend, prompt_tokens, cached_tokens, generated_tokens,
                 queue_ms, ttft_ms, duration_ms, finish_reason, error, ended_at, ended_seq)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,
                     CASE WHEN ?11 = 'running' THEN NULL ELSE strftime('%Y-%m-%dT%H:%M:%fZ', 'now') END,
                     CASE WHEN ?11 = 'running' THEN NULL
                          ELSE (SELECT coalesce(max(ended_seq), 0) + 1 FROM requests) END)",
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

/// One account's figures over a period, as `kvad metrics usage` prints them.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Usage {
    /// The account.
    pub account: String,
    /// Completions asked for (every outcome).
    pub requests: i64,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Of them, found in kept conversations.
    pub cached_tokens: i64,
    /// Tokens generated.
    pub generated_tokens: i64,
    /// Mean time waiting in the queue, ms.
    pub queue_ms_mean: f64,
    /// Longest time waiting in the queue, ms.
    pub queue_ms_max: f64,
    /// Mean time to the first token, ms (None: no reply reached one).
    pub ttft_ms_mean: Option<f64>,
}

impl Store {
    /// Records that a model is loaded on `backend` (`Some`) or no longer loaded (`None`), for `[server] autoload`.
    /// A model loaded again keeps its place in the order (`since`) and takes the new backend.
    pub fn set_active(&self, model: &str, backend: Option<&str>) -> Result<(), rusqlite::Error> {
        match backend {
            Some(b) => self.conn.execute(
                "INSERT INTO active_models (model, backend) VALUES (?1, ?2)
                 ON CONFLICT (model) DO UPDATE SET backend = excluded.backend",
                params![model, b],
            )?,
            None => self.conn.execute("DELETE FROM active_models WHERE model = ?1", params![model])?,
        };
        Ok(())
    }

    /// Remembers that a load named `backend` for `model`: its default from now on.
    pub fn set_choice(&self, model: &str, backend: &str) -> Result<(), rusqlite::Error> {
        self.conn.execute(
            "INSERT INTO model_backends (model, backend) VALUES (?1, ?2)
             ON CONFLICT (model) DO UPDATE SET backend = excluded.backend",
            params![model, backend],
        )?;
        Ok(())
    }

    /// The server's default model (`kvad use` against it, `PATCH /api/settings`), when one was set.
    pub fn default_model(&self) -> rusqlite::Result<Option<String>> {
        use rusqlite::OptionalExtension;
        self.conn
            .query_row("SELECT value FROM server_settings WHERE key = 'default_model'", [], |r| r.get(0))
            .optional()
    }

    /// Keeps the server's default model across restarts.
    pub fn set_default_model(&self, model: &str) -> rusqlite::Result<()> {
        self.conn.execute(
            "INSERT INTO server_settings (key, value) VALUES ('default_model', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            rusqlite::params![model],
        )?;
        Ok(())
    }

    /// Every model's remembered backend ([`Store::set_choice`]).
    pub fn choices(&self) -> Result<Vec<(String, String)>, rusqlite::Error> {
        let mut st = self.conn.prepare("SELECT model, backend FROM model_backends ORDER BY model")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }

    /// The models that were loaded when the server last ran, in the order they were loaded, each with the backend
    /// it was on (`None`: not recorded).
    pub fn active_models(&self) -> Result<Vec<(String, Option<String>)>, rusqlite::Error> {
        let mut st = self.conn.prepare("SELECT model, backend FROM active_models ORDER BY since, model")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }

    /// The requests table added up by account over the last `days` days (`account`: only that one's).
    pub fn usage(&self, days: u32, account: Option<&str>) -> Result<Vec<Usage>, rusqlite::Error> {
        let mut st = self.conn.prepare(
            "SELECT account, count(*), sum(prompt_tokens), sum(cached_tokens), sum(generated_tokens),
                    avg(queue_ms), max(queue_ms), avg(ttft_ms)
             FROM requests
             WHERE created_at >= strftime('%Y-%m-%dT%H:%M:%fZ', 'now', ?1) AND (?2 IS NULL OR account = ?2)
             GROUP BY account ORDER BY account",
        )?;
        let rows = st.query_map(params![format!("-{days} days"), account], |r| {
            Ok(Usage {
                account: r.get(0)?,
                requests: r.get(1)?,
                prompt_tokens: r.get(2)?,
                cached_tokens: r.get(3)?,
                generated_tokens: r.get(4)?,
                queue_ms_mean: r.get(5)?,
                queue_ms_max: r.get(6)?,
                ttft_ms_mean: r.get(7)?,
            })
        })?;
        rows.collect()
    }
}

impl Store {
    /// The latest `limit` rows of the requests table, newest first (the Dashboard's recent requests); `account`:
    /// only that one's (a user sees its own, an administrator everyone's).
    pub fn recent(&self, limit: u32, account: Option<&str>) -> Result<Vec<serde_json::Value>, rusqlite::Error> {
        let mut st = self.conn.prepare(
            "SELECT created_at, account, endpoint, model, prompt_tokens, cached_tokens, generated_tokens, queue_ms,
                    ttft_ms, duration_ms, finish_reason, error
             FROM requests WHERE (?2 IS NULL OR account = ?2) ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = st.query_map(params![limit, account], |r| {
            Ok(serde_json::json!({
                "created_at": r.get::<_, String>(0)?, "account": r.get::<_, String>(1)?,
                "endpoint": r.get::<_, String>(2)?, "model": r.get::<_, String>(3)?,
                "prompt_tokens": r.get::<_, i64>(4)?, "cached_tokens": r.get::<_, i64>(5)?,
                "generated_tokens": r.get::<_, i64>(6)?, "queue_ms": r.get::<_, f64>(7)?,
                "ttft_ms": r.get::<_, Option<f64>>(8)?, "duration_ms": r.get::<_, f64>(9)?,
                "finish_reason": r.get::<_, String>(10)?, "error": r.get::<_, Option<String>>(11)?,
            }))
        })?;
        rows.collect()
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
        s.set_active("m", Some("cpu-f32")).unwrap();
        s.set_active("m", Some("cpu-q8")).unwrap();
        s.set_active("n", Some("cpu-q4")).unwrap();
        s.set_active("o", Some("gpu-q8")).unwrap();
        s.set_active("o", None).unwrap();
        let on = |m: &str, b: &str| (m.to_string(), Some(b.to_string()));
        assert_eq!(s.active_models().unwrap(), [on("m", "cpu-q8"), on("n", "cpu-q4")], "the latest backend, in order");
        s.set_choice("m", "cpu-q4").unwrap();
        s.set_choice("m", "cpu-f32").unwrap();
        s.set_choice("a", "gpu-q8").unwrap();
        let pair = |m: &str, b: &str| (m.to_string(), b.to_string());
        assert_eq!(s.choices().unwrap(), [pair("a", "gpu-q8"), pair("m", "cpu-f32")], "the latest choice a model");
        // A row from before the backend column reads as None (reloaded on [server] backend).
        s.conn.execute("INSERT INTO active_models (model) VALUES ('p')", []).unwrap();
        assert_eq!(s.active_models().unwrap()[2], ("p".to_string(), None));
        let row = |account: &str, prompt, cached, q| RequestRow {
            account: account.into(),
            prompt_tokens: prompt,
            cached_tokens: cached,
            queue_ms: q,
            ttft_ms: Some(10.0),
            finish_reason: "stop".into(),
            ..Default::default()
        };
        s.record(&row("b", 10, 4, 5.0)).unwrap();
        s.record(&row("b", 30, 20, 15.0)).unwrap();
        let u = s.usage(7, None).unwrap();
        assert_eq!(u.iter().map(|u| u.account.as_str()).collect::<Vec<_>>(), ["b", "local"]);
        assert_eq!((u[0].requests, u[0].prompt_tokens, u[0].cached_tokens), (2, 40, 24));
        assert_eq!((u[0].queue_ms_mean, u[0].queue_ms_max), (10.0, 15.0));
        assert_eq!(s.usage(7, Some("local")).unwrap().len(), 1);
        let recent = s.recent(2, None).unwrap();
        assert_eq!(recent.len(), 2, "limited");
        let own = s.recent(10, Some("local")).unwrap();
        assert!(own.len() == 1 && own[0]["account"] == "local", "scoped to one account: {own:?}");
        assert_eq!(
            (recent[0]["account"].as_str(), recent[0]["prompt_tokens"].as_i64()),
            (Some("b"), Some(30)),
            "newest first"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
