//! A flood of failed sign-ins against the real `kvad-serve` (scripted engine, `local` and `basic` modes): the
//! password hashes run a few at a time on threads of their own, so memory stays bounded and the async workers keep
//! answering; failures past the first few make the next attempt wait, answered at once with a 429 and Retry-After.

mod common;

use common::Server;
use std::time::{Duration, Instant};

const ADMIN_PW: &str = "admin-password-1";

fn server(tag: &str, mode: &str) -> Server {
    let script = common::script();
    common::start_env(
        tag,
        &["--scripted", script.to_str().unwrap()],
        &[("KVAD_AUTH_MODE", mode), ("KVAD_ADMIN_PASSWORD", ADMIN_PW)],
    )
}

/// The server process's resident memory, in MB (Linux).
fn rss_mb(s: &Server) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb / 1024.0
}

/// (status, Retry-After) of a request.
fn send(s: &Server, method: &str, path: &str, auth: Option<&str>, body: Option<String>) -> (u16, Option<String>) {
    let mut req = ureq::request(method, &format!("{}{path}", s.url));
    if let Some(a) = auth {
        req = req.set("authorization", a);
    }
    let r = match body {
        Some(b) => req.set("content-type", "application/json").send_string(&b),
        None => req.call(),
    };
    match r {
        Ok(r) | Err(ureq::Error::Status(_, r)) => (r.status(), r.header("retry-after").map(str::to_string)),
        Err(e) => panic!("{method} {path}: {e}"),
    }
}

fn login(s: &Server, user: &str, pw: &str) -> (u16, Option<String>) {
    send(s, "POST", "/api/auth/login", None, Some(format!(r#"{{"username":"{user}","password":"{pw}"}}"#)))
}

#[test]
fn forty_concurrent_wrong_logins_keep_memory_bounded_then_wait() {
    let s = server("flood", "local");
    // The first hash (the dummy one, made once) is not part of the flood.
    assert_eq!(login(&s, "warm-up", "nope-nope").0, 401);
    let before = rss_mb(&s);
    let s = &s;
    let codes: Vec<u16> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..40).map(|i| sc.spawn(move || login(s, &format!("user{i}"), "wrong-password").0)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let after = rss_mb(s);
    // Each argon2id hash takes 19 MiB. Unbounded, forty at once grew the server by 726 MB on a 2-core machine (to
    // 3.5 GB on a larger one); bounded, the hashers' few arenas stay: 100 to 160 MB measured, under load or not.
    assert!(after - before < 300.0, "memory grew from {before:.0} to {after:.0} MB over the flood");
    assert!(codes.iter().all(|&c| c == 401 || c == 429), "{codes:?}");
    // This address has failed far past the free attempts: the next is refused at once, even with the right password.
    let t = Instant::now();
    let (status, retry) = login(s, "admin", ADMIN_PW);
    assert_eq!(status, 429);
    let wait: u64 = retry.expect("a Retry-After header").parse().unwrap();
    assert!((1..=60).contains(&wait), "Retry-After {wait}");
    assert!(t.elapsed() < Duration::from_millis(500), "a throttled attempt computes no hash");
}

#[test]
fn wrong_passwords_for_one_account_wait_longer_each_and_the_right_one_clears_it() {
    let s = server("throttle", "local");
    for i in 0..5 {
        assert_eq!(login(&s, "admin", "wrong-password").0, 401, "attempt {i}: the first five are free");
    }
    let (status, retry) = login(&s, "admin", ADMIN_PW);
    assert_eq!((status, retry.as_deref()), (429, Some("1")), "the sixth waits a second, right password or not");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(login(&s, "admin", ADMIN_PW).0, 200, "after the wait the right password signs in");
    assert_eq!(login(&s, "admin", "wrong-password").0, 401, "and a success clears the count");
}

#[test]
fn a_basic_flood_does_not_stall_other_requests() {
    let s = server("basic-flood", "basic");
    // admin:wrong-password
    let bad = "Basic YWRtaW46d3JvbmctcGFzc3dvcmQ=";
    let mut worst = Duration::ZERO;
    std::thread::scope(|sc| {
        let flood: Vec<_> = (0..40).map(|_| sc.spawn(|| send(&s, "GET", "/v1/models", Some(bad), None).0)).collect();
        for _ in 0..20 {
            let t = Instant::now();
            assert_eq!(send(&s, "GET", "/api/health", None, None).0, 200);
            worst = worst.max(t.elapsed());
            std::thread::sleep(Duration::from_millis(10));
        }
        for h in flood {
            assert!(matches!(h.join().unwrap(), 401 | 429));
        }
    });
    // Hashed on the async workers, the health check took up to 1.7 s under such a flood.
    assert!(worst < Duration::from_millis(300), "health answered in up to {worst:?} during the flood");
}
