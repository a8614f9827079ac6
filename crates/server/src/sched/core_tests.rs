//! The scheduler's rules with no model: plain data in, plain data out.

use super::*;

fn gen(model: &str) -> Kind {
    Kind::Generate { model: model.into(), alone: false }
}

fn limits() -> Limits {
    Limits { batch: 4, chunk: 64, batch_from: 2, ..Limits::default() }
}

/// Runs the scheduler the way the engine thread does, with every prompt `prompt` tokens (none cached) and every
/// reply `reply` tokens long; returns the order generations started in, by account.
fn drain(s: &mut Scheduler, prompt: usize, reply: usize) -> Vec<String> {
    let mut order = Vec::new();
    let mut written: HashMap<JobId, usize> = HashMap::new();
    for _ in 0..10_000 {
        match s.decide(usize::MAX) {
            Decision::Idle => return order,
            Decision::Prepare(id) => s.prepared(id, prompt + reply),
            Decision::Join(id) => {
                order.push(s.waiting().iter().find(|w| w.id == id).unwrap().account.clone());
                assert!(s.start(id, prompt));
            }
            Decision::Exclusive(id) => {
                s.start(id, 0);
                s.remove(id);
            }
            Decision::Step(passes) => {
                for pass in passes {
                    s.stepped(&pass);
                    for p in pass.iter().filter(|p| !matches!(p.work, Work::Chunk(_))) {
                        let n = written.entry(p.id).or_default();
                        *n += 1;
                        if *n == reply {
                            s.remove(p.id);
                        }
                    }
                }
            }
        }
    }
    panic!("the scheduler did not run down");
}

#[test]
fn whose_turn_is_the_earliest_request_of_the_account_served_longest_ago() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { batch: 1, ..limits() });
    // a sends four, then b two, then c one: turns go a, b, c, a, b, a, a.
    for acct in ["a", "a", "a", "a", "b", "b", "c"] {
        s.submit(acct, gen("m"), t).unwrap();
    }
    assert_eq!(drain(&mut s, 3, 2), ["a", "b", "c", "a", "b", "a", "a"]);
}

#[test]
fn an_account_that_sends_ten_does_not_keep_another_waiting_behind_them() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { batch: 1, per_account: 10, ..limits() });
    for _ in 0..10 {
        s.submit("busy", gen("m"), t).unwrap();
    }
    s.submit("quiet", gen("m"), t).unwrap();
    let order = drain(&mut s, 1, 1);
    assert_eq!(order.iter().position(|a| a == "quiet"), Some(1), "{order:?}");
}

#[test]
fn the_queue_and_each_account_have_an_end() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { queue: 5, per_account: 2, ..limits() });
    s.submit("a", gen("m"), t).unwrap();
    s.submit("a", gen("m"), t).unwrap();
    assert_eq!(s.submit("a", gen("m"), t), Err(Refusal::AccountFull { account: "a".into(), limit: 2 }));
    s.submit("b", gen("m"), t).unwrap();
    s.submit("b", gen("m"), t).unwrap();
    s.submit("c", gen("m"), t).unwrap();
    assert_eq!(s.submit("d", gen("m"), t), Err(Refusal::Full { waiting: 5 }));
    // Loads are not generations: never refused, not counted.
    s.submit("d", Kind::Load { model: "m".into(), backend: None }, t).unwrap();
    assert_eq!(s.depth(), 5);
    // A running generation no longer waits, so its account may queue another.
    let Decision::Prepare(id) = s.decide(100) else { panic!() };
    s.prepared(id, 10);
    assert_eq!(s.decide(100), Decision::Join(id));
    s.start(id, 5);
    s.submit("a", gen("m"), t).unwrap();
}

#[test]
fn generations_per_minute_says_when_the_next_is_taken() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { per_minute: Some(2), per_account: 10, ..limits() });
    s.submit("a", gen("m"), t).unwrap();
    s.submit("a", gen("m"), t + Duration::from_secs(20)).unwrap();
    let r = s.submit("a", gen("m"), t + Duration::from_millis(30_500));
    assert_eq!(r, Err(Refusal::RateLimited { account: "a".into(), limit: 2, retry_after: 30 }));
    s.submit("b", gen("m"), t + Duration::from_secs(31)).unwrap();
    // At 60 s the first has left the window.
    s.submit("a", gen("m"), t + Duration::from_secs(60)).unwrap();
}

#[test]
fn nothing_passes_a_load_and_it_waits_for_the_batch_to_run_down() {
    let t = Instant::now();
    let mut s = Scheduler::new(limits());
    let first = s.submit("a", gen("m"), t).unwrap();
    s.prepared(first, 10);
    s.start(first, 3);
    let load = s.submit("admin", Kind::Load { model: "n".into(), backend: Some("cpu-q8".into()) }, t).unwrap();
    let later = s.submit("b", gen("m"), t).unwrap();
    // b (never served) would win on fairness, but the load came first: nobody joins, the batch runs on.
    assert_eq!(s.next_in_turn().map(|w| w.id), Some(load));
    assert_eq!(s.decide(100), Decision::Step(vec![vec![Part { id: first, work: Work::Chunk(2) }]]));
    s.remove(first);
    assert_eq!(s.decide(100), Decision::Exclusive(load));
    s.start(load, 0);
    assert_eq!(s.decide(100), Decision::Idle, "nothing runs beside a load");
    s.remove(load);
    assert_eq!(s.decide(100), Decision::Prepare(later));
}

#[test]
fn generations_that_came_before_a_load_still_go_by_turns() {
    let t = Instant::now();
    let mut s = Scheduler::new(limits());
    s.submit("a", gen("m"), t).unwrap();
    s.submit("a", gen("m"), t).unwrap();
    s.submit("b", gen("m"), t).unwrap();
    s.submit("x", Kind::Unload { model: None }, t).unwrap();
    s.submit("c", gen("m"), t).unwrap();
    let mut s1 = s.clone();
    let order = drain(&mut s1, 1, 1);
    assert_eq!(order, ["a", "b", "a", "c"], "c came after the unload: it goes after it");
}

#[test]
fn replies_join_up_to_the_batch_and_a_place_freed_is_taken() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { batch: 2, ..limits() });
    let ids: Vec<JobId> = (0..3).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    for &id in &ids[..2] {
        assert_eq!(s.decide(100), Decision::Prepare(id));
        s.prepared(id, 10);
        assert_eq!(s.decide(100), Decision::Join(id));
        s.start(id, 1);
        if id == ids[0] {
            // One prompt is read at a time: the second waits for the first's last token.
            assert_eq!(s.decide(100), Decision::Step(vec![vec![Part { id, work: Work::Last }]]));
            s.stepped(&[Part { id, work: Work::Last }]);
        }
    }
    // Two in the batch, one of them reading its last token: one pass holds both.
    let both = vec![Part { id: ids[0], work: Work::Decode }, Part { id: ids[1], work: Work::Last }];
    assert_eq!(s.decide(100), Decision::Step(vec![both.clone()]));
    s.stepped(&both);
    assert_eq!(s.beside(ids[0]), 1);
    // The batch is full: the third waits (it is not even prepared) ...
    assert!(matches!(s.decide(100), Decision::Step(_)));
    // ... until one ends.
    s.remove(ids[0]);
    assert_eq!(s.decide(100), Decision::Prepare(ids[2]));
    assert_eq!(s.beside(ids[2]), 1, "it would be written beside the one still running");
}

#[test]
fn a_long_prompt_is_read_a_chunk_a_pass_while_the_others_write() {
    let t = Instant::now();
    let mut s = Scheduler::new(limits());
    let a = s.submit("a", gen("m"), t).unwrap();
    s.prepared(a, 10);
    s.start(a, 1);
    s.stepped(&[Part { id: a, work: Work::Last }]);
    let b = s.submit("b", gen("m"), t).unwrap();
    s.prepared(b, 300);
    s.start(b, 150);
    let mut works = Vec::new();
    while let Decision::Step(passes) = s.decide(1000) {
        assert_eq!(passes.len(), 1, "two parts: one pass");
        let pass = &passes[0];
        assert_eq!(pass[0], Part { id: a, work: Work::Decode }, "a writes a token every pass");
        works.push(pass[1].work);
        s.stepped(pass);
        if works.len() == 5 {
            break;
        }
    }
    // 149 tokens before the last: 64, 64, 21, then the last alone, then b writes.
    assert_eq!(works, [Work::Chunk(64), Work::Chunk(64), Work::Chunk(21), Work::Last, Work::Decode]);
}

/// A prompt being read (off the engine thread) holds its place in the line but not the batch: the running reply
/// keeps writing, nobody passes it, and once read it joins.
#[test]
fn while_a_prompt_is_read_elsewhere_the_batch_steps_and_nobody_passes_it() {
    let t = Instant::now();
    let mut s = Scheduler::new(limits());
    let a = s.submit("a", gen("m"), t).unwrap();
    s.prepared(a, 10);
    s.start(a, 1);
    s.stepped(&[Part { id: a, work: Work::Last }]);
    let b = s.submit("b", gen("m"), t).unwrap();
    let c = s.submit("c", gen("m"), t).unwrap();
    assert_eq!(s.decide(1000), Decision::Prepare(b));
    s.reading(b);
    for _ in 0..3 {
        let d = s.decide(1000);
        assert_eq!(d, Decision::Step(vec![vec![Part { id: a, work: Work::Decode }]]), "c is not read before b");
        s.stepped(&[Part { id: a, work: Work::Decode }]);
    }
    s.prepared(b, 10);
    assert_eq!(s.decide(1000), Decision::Join(b));
    s.remove(a);
    s.remove(b);
    s.reading(c);
    assert_eq!(s.decide(1000), Decision::Idle, "nothing runs and c is being read: wait for it");
}

#[test]
fn below_batch_from_each_reply_takes_its_own_pass() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { batch_from: 3, ..limits() });
    let ids: Vec<JobId> = (0..2).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    for &id in &ids {
        s.prepared(id, 10);
        s.start(id, 1);
        s.stepped(&[Part { id, work: Work::Last }]);
    }
    let d = s.decide(100);
    assert_eq!(
        d,
        Decision::Step(vec![
            vec![Part { id: ids[0], work: Work::Decode }],
            vec![Part { id: ids[1], work: Work::Decode }]
        ])
    );
    let third = s.submit("u2", gen("m"), t).unwrap();
    s.prepared(third, 10);
    s.start(third, 1);
    let Decision::Step(passes) = s.decide(100) else { panic!() };
    assert_eq!(passes.len(), 1, "three parts reach batch_from: one pass");
}

#[test]
fn the_running_models_backend_sets_the_pass_rules() {
    let t = Instant::now();
    // The server's default is the CPU's (one pass from two parts, 64-token chunks); the model that joins is on a
    // backend whose rules are one pass from three and 512-token chunks.
    let mut s = Scheduler::new(limits());
    s.set_pass_limits((3, 512));
    let ids: Vec<JobId> = (0..2).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    s.prepared(ids[0], 10);
    s.start(ids[0], 1);
    s.stepped(&[Part { id: ids[0], work: Work::Last }]);
    s.prepared(ids[1], 1000);
    s.start(ids[1], 900);
    let Decision::Step(passes) = s.decide(2000) else { panic!() };
    assert_eq!(
        passes,
        vec![vec![Part { id: ids[0], work: Work::Decode }], vec![Part { id: ids[1], work: Work::Chunk(512) }]],
        "two parts below batch_from 3: a pass each; the chunk is the backend's 512"
    );
}

#[test]
fn another_model_an_alone_request_or_no_room_means_nobody_joins() {
    let t = Instant::now();
    for (kind, reserve, budget) in
        [(gen("other"), 10, 100), (Kind::Generate { model: "m".into(), alone: true }, 10, 100), (gen("m"), 60, 100)]
    {
        let mut s = Scheduler::new(limits());
        let a = s.submit("a", gen("m"), t).unwrap();
        s.prepared(a, 50);
        s.start(a, 1);
        s.stepped(&[Part { id: a, work: Work::Last }]);
        let b = s.submit("b", kind.clone(), t).unwrap();
        s.prepared(b, reserve);
        let late = s.submit("c", gen("m"), t).unwrap();
        s.prepared(late, 1);
        assert_eq!(
            s.decide(budget),
            Decision::Step(vec![vec![Part { id: a, work: Work::Decode }]]),
            "{kind:?} with {reserve} of {budget}: the batch runs down, and c (whose turn it is not) waits too"
        );
        s.remove(a);
        assert_eq!(s.decide(budget), Decision::Join(b));
        s.start(b, 1);
        if kind == gen("m") {
            continue;
        }
        assert!(matches!(s.decide(budget), Decision::Step(p) if p.len() == 1 && p[0].len() == 1), "b runs by itself");
    }
}

#[test]
fn removing_frees_a_place_wherever_the_job_was() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { queue: 1, ..limits() });
    let a = s.submit("a", gen("m"), t).unwrap();
    assert!(s.submit("b", gen("m"), t).is_err());
    assert!(s.remove(a), "a queued request, cancelled");
    let b = s.submit("b", gen("m"), t).unwrap();
    s.prepared(b, 10);
    s.start(b, 500);
    assert!(s.remove(b), "mid-prefill, cancelled");
    assert!(!s.remove(b));
    assert_eq!((s.waiting().len(), s.running().len(), s.decide(10)), (0, 0, Decision::Idle));
}

#[test]
fn limits_changed_live_apply_to_later_submissions_only() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { queue: 5, per_account: 3, ..limits() });
    for _ in 0..3 {
        s.submit("a", gen("m"), t).unwrap();
    }
    s.set_limits(Limits { per_account: 1, ..s.limits() });
    // The three already waiting stay; the next is refused at the new limit.
    assert_eq!(s.depth(), 3);
    assert_eq!(s.submit("a", gen("m"), t), Err(Refusal::AccountFull { account: "a".into(), limit: 1 }));
    s.set_limits(Limits { per_account: 4, ..s.limits() });
    s.submit("a", gen("m"), t).unwrap();
}
