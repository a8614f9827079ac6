//! Secrets: random tokens from the operating system, SHA-256 for high-entropy tokens (session cookies, API keys)
//! and argon2id for passwords, which are low-entropy and must be slow to guess. Nothing here keeps a secret in
//! the clear: the database holds hashes only.

use super::AuthError;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use sha2::{Digest, Sha256};

/// What every API key starts with, so a leaked one is recognisable (secret scanners, logs) and the server can tell
/// a key from other bearer tokens at a glance.
pub const KEY_PREFIX: &str = "kvad_";

/// `n` random bytes from the operating system.
pub fn random_bytes(n: usize) -> Result<Vec<u8>, AuthError> {
    let mut b = vec![0u8; n];
    getrandom::fill(&mut b).map_err(|e| AuthError::Internal(format!("the OS random source failed: {e}")))?;
    Ok(b)
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A random token of `n` bytes as hex (`2n` characters).
pub fn token(n: usize) -> Result<String, AuthError> {
    Ok(hex(&random_bytes(n)?))
}

/// A new API key: `kvad_` and 48 hex characters (192 random bits).
pub fn new_api_key() -> Result<String, AuthError> {
    Ok(format!("{KEY_PREFIX}{}", token(24)?))
}

/// What lists show of a key: its first characters, enough to tell keys apart, far too few to guess the rest.
pub fn key_shown_prefix(key: &str) -> String {
    key.chars().take(KEY_PREFIX.len() + 6).collect()
}

/// SHA-256 as hex: the stored form of session tokens and API keys. They carry 192 bits or more of randomness, so
/// a fast hash is enough (nobody can enumerate them), and a lookup by hash is a plain index search.
pub fn sha256_hex(s: &str) -> String {
    hex(&Sha256::digest(s.as_bytes()))
}

/// Equality whose time does not depend on where the inputs first differ (for CSRF tokens).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Runs `f` on the password hashers: a few threads of their own, so that however many sign-ins arrive at once, at
/// most that many argon2id hashes (19 MiB each, by design) run, each always on the same threads, whose memory the
/// allocator reuses. Many threads hashing at once had each keep its own 19 MiB (a flood of 40 logins took the server
/// to gigabytes). The caller waits for the answer; async code calls this from a blocking thread.
fn on_hasher<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    type Job = Box<dyn FnOnce() + Send>;
    static QUEUE: std::sync::OnceLock<std::sync::Mutex<std::sync::mpsc::Sender<Job>>> = std::sync::OnceLock::new();
    let queue = QUEUE.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, HASHERS_MAX);
        for i in 0..n {
            let rx = rx.clone();
            let _ = std::thread::Builder::new().name(format!("kvad-hash-{i}")).spawn(move || loop {
                let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
                    Ok(job) => job,
                    Err(_) => return,
                };
                job();
            });
        }
        std::sync::Mutex::new(tx)
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let job: Job = Box::new(move || {
        let _ = tx.send(f());
    });
    let sent = queue.lock().unwrap_or_else(|e| e.into_inner()).send(job);
    match sent {
        Ok(()) => rx.recv().expect("a password hasher answers every job it takes"),
        // No hasher thread could be started: hash here.
        Err(std::sync::mpsc::SendError(job)) => {
            job();
            rx.recv().expect("the job just run answered")
        }
    }
}

/// Most password hashes running at once (one a core, up to this).
const HASHERS_MAX: usize = 4;

/// An argon2id hash (PHC string, random salt) of a password.
pub fn hash_password(password: &str) -> Result<String, AuthError> {
    let salt =
        SaltString::encode_b64(&random_bytes(16)?).map_err(|e| AuthError::Internal(format!("encoding a salt: {e}")))?;
    let password = password.to_string();
    on_hasher(move || {
        Argon2::default()
            .hash_password(password.as_bytes(), &salt)
            .map(|h| h.to_string())
            .map_err(|e| AuthError::Internal(format!("hashing a password: {e}")))
    })
}

/// Whether `password` matches the stored hash. With no hash (an unknown account, or one that signs in through
/// OIDC) a dummy hash is checked anyway, so the answer takes as long as for a real account and its time does not
/// tell which accounts exist.
pub fn verify_password(password: &str, stored: Option<&str>) -> bool {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash_password("kvad-dummy-password").unwrap_or_default());
    let (hash, real) = match stored {
        Some(h) => (h, true),
        None => (dummy.as_str(), false),
    };
    let (hash, password) = (hash.to_string(), password.to_string());
    let ok = on_hasher(move || {
        let Ok(parsed) = PasswordHash::new(&hash) else { return false };
        Argon2::default().verify_password(password.as_bytes(), &parsed).is_ok()
    });
    ok && real
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_salted_argon2id_and_verify() {
        let a = hash_password("correct horse").unwrap();
        let b = hash_password("correct horse").unwrap();
        assert!(a.starts_with("$argon2id$"), "{a}");
        assert_ne!(a, b, "a random salt each time");
        assert!(verify_password("correct horse", Some(&a)));
        assert!(!verify_password("correct hors", Some(&a)));
        assert!(!verify_password("kvad-dummy-password", None), "the dummy hash never lets anyone in");
        assert!(!verify_password("x", Some("not a hash")));
    }

    #[test]
    fn keys_tokens_and_comparisons() {
        let k = new_api_key().unwrap();
        assert!(k.starts_with("kvad_") && k.len() == 5 + 48, "{k}");
        assert_ne!(k, new_api_key().unwrap());
        assert_eq!(key_shown_prefix(&k), &k[..11]);
        assert_eq!(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd") && !constant_time_eq(b"abc", b"ab"));
    }
}
