//! The scheduler's rules with no model: plain data in, plain data out.

use super::*;

fn gen(model: &str) -> Kind {
    Kind::Generate { model: model.into(), alone: false }
}

fn limits() -> Limits {
    Limits {
        batch: Some(4),
        rules: PassRules { batch_from: 2, chunk: 64, pass_tokens: None, batch: 4 },
        ..Limits::default()
    }
}

/// Runs the scheduler the way the engine thread does, with every prompt `prompt` tokens (none cached) and every
/// reply `reply` tokens long; returns the order generations started in, by account.
fn drain(s: &mut Scheduler, prompt: usize, reply: usize) -> Vec<String> {
    let mut order = Vec::new();
    let mut written: HashMap<JobId, usize> = HashMap::new();
    for _ in 0..10_000 {
        match s.decide(Budget::tokens(usize::MAX)) {
            Decision::Idle => return order,
            Decision::Prepare(id) => s.prepared(id, prompt + reply),
            Decision::Join(id) => {
                order.push(s.waiting().iter().find(|w| w.id == id).unwrap().account.clone());
                assert!(s.start(id, prompt));
            }
            Decision::Exclusive(id) | Decision::Inputs(id) => {
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
    let mut s = Scheduler::new(Limits { batch: Some(1), ..limits() });
    // a sends four, then b two, then c one: turns go a, b, c, a, b, a, a.
    for acct in ["a", "a", "a", "a", "b", "b", "c"] {
        s.submit(acct, gen("m"), t).unwrap();
    }
    assert_eq!(drain(&mut s, 3, 2), ["a", "b", "c", "a", "b", "a", "a"]);
}

#[test]
fn an_account_that_sends_ten_does_not_keep_another_waiting_behind_them() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { batch: Some(1), per_account: 10, ..limits() });
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
    let Decision::Prepare(id) = s.decide(Budget::tokens(100)) else { panic!() };
    s.prepared(id, 10);
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Join(id));
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
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Step(vec![vec![Part { id: first, work: Work::Chunk(2) }]]));
    s.remove(first);
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Exclusive(load));
    s.start(load, 0);
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Idle, "nothing runs beside a load");
    s.remove(load);
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Prepare(later));
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
    let mut s = Scheduler::new(Limits { batch: Some(2), ..limits() });
    let ids: Vec<JobId> = (0..3).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    for &id in &ids[..2] {
        assert_eq!(s.decide(Budget::tokens(100)), Decision::Prepare(id));
        s.prepared(id, 10);
        assert_eq!(s.decide(Budget::tokens(100)), Decision::Join(id));
        s.start(id, 1);
        if id == ids[0] {
            // One prompt is read at a time: the second waits for the first's last token.
            assert_eq!(s.decide(Budget::tokens(100)), Decision::Step(vec![vec![Part { id, work: Work::Last }]]));
            s.stepped(&[Part { id, work: Work::Last }]);
        }
    }
    // Two in the batch, one of them reading its last token: one pass holds both.
    let both = vec![Part { id: ids[0], work: Work::Decode }, Part { id: ids[1], work: Work::Last }];
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Step(vec![both.clone()]));
    s.stepped(&both);
    assert_eq!(s.beside(ids[0]), 1);
    // The batch is full: the third waits (it is not even prepared) ...
    assert!(matches!(s.decide(Budget::tokens(100)), Decision::Step(_)));
    // ... until one ends.
    s.remove(ids[0]);
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Prepare(ids[2]));
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
    while let Decision::Step(passes) = s.decide(Budget::tokens(1000)) {
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
    assert_eq!(s.decide(Budget::tokens(1000)), Decision::Prepare(b));
    s.reading(b);
    for _ in 0..3 {
        let d = s.decide(Budget::tokens(1000));
        assert_eq!(d, Decision::Step(vec![vec![Part { id: a, work: Work::Decode }]]), "c is not read before b");
        s.stepped(&[Part { id: a, work: Work::Decode }]);
    }
    s.prepared(b, 10);
    assert_eq!(s.decide(Budget::tokens(1000)), Decision::Join(b));
    s.remove(a);
    s.remove(b);
    s.reading(c);
    assert_eq!(s.decide(Budget::tokens(1000)), Decision::Idle, "nothing runs and c is being read: wait for it");
}

#[test]
fn below_batch_from_each_reply_takes_its_own_pass() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { rules: PassRules { batch_from: 3, ..limits().rules }, ..limits() });
    let ids: Vec<JobId> = (0..2).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    for &id in &ids {
        s.prepared(id, 10);
        s.start(id, 1);
        s.stepped(&[Part { id, work: Work::Last }]);
    }
    let d = s.decide(Budget::tokens(100));
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
    let Decision::Step(passes) = s.decide(Budget::tokens(100)) else { panic!() };
    assert_eq!(passes.len(), 1, "three parts reach batch_from: one pass");
}

#[test]
fn the_running_models_backend_sets_the_pass_rules() {
    let t = Instant::now();
    // The server's default is the CPU's (one pass from two parts, 64-token chunks); the model that joins is on a
    // backend whose rules are one pass from three and 512-token chunks.
    let mut s = Scheduler::new(limits());
    s.set_rules(PassRules { batch_from: 3, chunk: 512, ..limits().rules });
    let ids: Vec<JobId> = (0..2).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    s.prepared(ids[0], 10);
    s.start(ids[0], 1);
    s.stepped(&[Part { id: ids[0], work: Work::Last }]);
    s.prepared(ids[1], 1000);
    s.start(ids[1], 900);
    let Decision::Step(passes) = s.decide(Budget::tokens(2000)) else { panic!() };
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
            s.decide(Budget::tokens(budget)),
            Decision::Step(vec![vec![Part { id: a, work: Work::Decode }]]),
            "{kind:?} with {reserve} of {budget}: the batch runs down, and c (whose turn it is not) waits too"
        );
        s.remove(a);
        assert_eq!(s.decide(Budget::tokens(budget)), Decision::Join(b));
        s.start(b, 1);
        if kind == gen("m") {
            continue;
        }
        assert!(
            matches!(s.decide(Budget::tokens(budget)), Decision::Step(p) if p.len() == 1 && p[0].len() == 1),
            "b runs by itself"
        );
    }
}

fn embed(model: &str) -> Kind {
    Kind::Inputs { model: model.into(), alone: false, what: "embed" }
}

/// A scheduler with one reply of model "m" writing; returns it and the reply's id.
fn one_writing(t: Instant) -> (Scheduler, JobId) {
    let mut s = Scheduler::new(limits());
    let a = s.submit("a", gen("m"), t).unwrap();
    s.prepared(a, 50);
    s.start(a, 1);
    s.stepped(&[Part { id: a, work: Work::Last }]);
    (s, a)
}

#[test]
fn embeddings_of_the_running_model_run_between_its_steps_and_take_their_accounts_turn() {
    let t = Instant::now();
    let (mut s, a) = one_writing(t);
    let e = s.submit("b", embed("m"), t).unwrap();
    assert_eq!(s.decide(Budget::tokens(100)), Decision::Inputs(e), "at once, beside the writing reply");
    s.start(e, 0);
    s.remove(e);
    assert_eq!(s.beside(a), 0, "the embeddings never counted as a reply");
    let b2 = s.submit("b", gen("m"), t).unwrap();
    let c = s.submit("c", gen("m"), t).unwrap();
    assert_eq!(s.next_in_turn().map(|w| w.id), Some(c), "b was served: c goes first");
    assert_ne!(b2, c);
}

#[test]
fn embeddings_of_another_model_or_that_did_not_fit_wait_for_the_batch_to_run_down() {
    let t = Instant::now();
    for (kind, alone) in [(embed("other"), false), (embed("m"), true)] {
        let (mut s, a) = one_writing(t);
        let e = s.submit("b", kind.clone(), t).unwrap();
        if alone {
            s.inputs_alone(e);
        }
        let late = s.submit("c", gen("m"), t).unwrap();
        s.prepared(late, 1);
        assert_eq!(
            s.decide(Budget::tokens(100)),
            Decision::Step(vec![vec![Part { id: a, work: Work::Decode }]]),
            "{kind:?} (alone: {alone}): the batch runs down and nobody passes"
        );
        s.remove(a);
        assert_eq!(s.decide(Budget::tokens(100)), Decision::Inputs(e));
    }
}

#[test]
fn embeddings_wait_under_the_queue_and_account_limits() {
    let t = Instant::now();
    let mut s = Scheduler::new(Limits { queue: 2, per_account: 1, ..limits() });
    s.submit("a", embed("m"), t).unwrap();
    assert_eq!(s.submit("a", embed("m"), t), Err(Refusal::AccountFull { account: "a".into(), limit: 1 }));
    s.submit("b", gen("m"), t).unwrap();
    assert_eq!(s.submit("c", embed("m"), t), Err(Refusal::Full { waiting: 2 }));
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
    assert_eq!((s.waiting().len(), s.running().len(), s.decide(Budget::tokens(10))), (0, 0, Decision::Idle));
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

/// A GPU's rules: one step carries `rows` rows, one pass for the replies' tokens from two.
fn gpu(rows: usize) -> Limits {
    Limits {
        batch: None,
        rules: PassRules { batch_from: 2, chunk: 512, pass_tokens: Some(rows), batch: 64 },
        ..limits()
    }
}

/// Runs decisions until the next step, as the engine thread does: each prepared with `reserve`, each started with
/// `to_read` tokens to read. Returns the step's passes (None: idle).
fn next_step(s: &mut Scheduler, budget: Budget, reserve: usize, to_read: usize) -> Option<Vec<Vec<Part>>> {
    loop {
        match s.decide(budget) {
            Decision::Idle => return None,
            Decision::Prepare(id) => s.prepared(id, reserve),
            Decision::Join(id) => assert!(s.start(id, to_read)),
            Decision::Exclusive(_) | Decision::Inputs(_) => panic!("no loads or embeddings here"),
            Decision::Step(passes) => return Some(passes),
        }
    }
}

#[test]
fn on_a_gpu_a_crowds_prompts_join_at_once_and_are_read_together_within_the_pass() {
    let t = Instant::now();
    let mut s = Scheduler::new(gpu(100));
    let ids: Vec<JobId> = (0..5).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    // All five join before the first step (on the CPU only the first would, until its prompt is read).
    let passes = next_step(&mut s, Budget::tokens(10_000), 50, 40).unwrap();
    assert_eq!(s.running().len(), 5);
    // 39 tokens before each last: the first two whole, the third what is left of 100, the others wait.
    let chunk = |id, n| Part { id, work: Work::Chunk(n) };
    assert_eq!(passes, vec![vec![chunk(ids[0], 39), chunk(ids[1], 39), chunk(ids[2], 22)]]);
    s.stepped(&passes[0]);
    let passes = next_step(&mut s, Budget::tokens(10_000), 50, 40).unwrap();
    // The first two read their last tokens (a part each, in one pass: two reach batch_from); the prompts share
    // the 98 rows left.
    let last = |id| Part { id, work: Work::Last };
    assert_eq!(
        passes,
        vec![vec![last(ids[0]), last(ids[1])], vec![chunk(ids[2], 17), chunk(ids[3], 39), chunk(ids[4], 39)]]
    );
}

#[test]
fn a_gpu_step_gives_every_reply_its_token_and_prompts_what_is_left() {
    let t = Instant::now();
    let mut s = Scheduler::new(gpu(10));
    let ids: Vec<JobId> = (0..5).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    for &id in &ids[..3] {
        s.prepared(id, 20);
        s.start(id, 1);
        s.stepped(&[Part { id, work: Work::Last }]);
    }
    for &id in &ids[3..] {
        s.prepared(id, 60);
        s.start(id, 50);
    }
    let Decision::Step(passes) = s.decide(Budget::tokens(1000)) else { panic!() };
    let decode = |id| Part { id, work: Work::Decode };
    assert_eq!(
        passes,
        vec![vec![decode(ids[0]), decode(ids[1]), decode(ids[2])], vec![Part { id: ids[3], work: Work::Chunk(7) }]],
        "three replies' tokens first, in a pass of their own; 7 rows left for the first prompt, none for the second"
    );
    // More replies than the pass has rows: every one still writes, and a prompt still reads a token.
    let mut s = Scheduler::new(gpu(2));
    let ids: Vec<JobId> = (0..4).map(|i| s.submit(&format!("u{i}"), gen("m"), t).unwrap()).collect();
    for &id in &ids[..3] {
        s.prepared(id, 20);
        s.start(id, 1);
        s.stepped(&[Part { id, work: Work::Last }]);
    }
    s.prepared(ids[3], 20);
    s.start(ids[3], 10);
    let Decision::Step(passes) = s.decide(Budget::tokens(1000)) else { panic!() };
    assert_eq!(passes[0].len(), 3);
    assert_eq!(passes[1], vec![Part { id: ids[3], work: Work::Chunk(1) }]);
}

#[test]
fn a_reply_joins_only_when_its_pages_fit_and_the_model_has_a_sequence_for_it() {
    let t = Instant::now();
    // Pages of 16: a reserve of 17 takes two (32 tokens); 64 tokens of room hold two such replies, not three.
    let budget = Budget { tokens: 64, page: 16, sequences: usize::MAX };
    let mut s = Scheduler::new(gpu(100));
    for i in 0..3 {
        s.submit(&format!("u{i}"), gen("m"), t).unwrap();
    }
    next_step(&mut s, budget, 17, 5).unwrap();
    assert_eq!((s.running().len(), s.waiting().len()), (2, 1));
    // A reserve of 16 fits a page exactly: four fit.
    let mut s = Scheduler::new(gpu(100));
    for i in 0..5 {
        s.submit(&format!("u{i}"), gen("m"), t).unwrap();
    }
    next_step(&mut s, budget, 16, 5).unwrap();
    assert_eq!(s.running().len(), 4);
    // Room for many, but one sequence (a recurrent model's last slot): one runs.
    let mut s = Scheduler::new(gpu(100));
    for i in 0..3 {
        s.submit(&format!("u{i}"), gen("m"), t).unwrap();
    }
    next_step(&mut s, Budget { tokens: 1 << 20, page: 16, sequences: 1 }, 16, 5).unwrap();
    assert_eq!(s.running().len(), 1);
    // `[server] batch` named: no more than it, whatever the pages hold.
    let mut s = Scheduler::new(Limits { batch: Some(2), ..gpu(100) });
    for i in 0..3 {
        s.submit(&format!("u{i}"), gen("m"), t).unwrap();
    }
    next_step(&mut s, Budget::tokens(1 << 20), 16, 5).unwrap();
    assert_eq!(s.running().len(), 2);
}

mod simulated {
    //! The GPU rules under random arrivals, over thousands of simulated steps: pages reserved never exceed the
    //! budget, no step exceeds its rows, every running reply writes every step, and every admitted reply ends.

    use super::*;
    use proptest::prelude::*;

    /// A request: the step it arrives at, its prompt and its reply's length.
    #[derive(Debug, Clone)]
    struct Arrival {
        at: usize,
        prompt: usize,
        reply: usize,
    }

    fn arrivals() -> impl Strategy<Value = Vec<Arrival>> {
        prop::collection::vec(
            (0usize..400, 1usize..300, 1usize..60).prop_map(|(at, prompt, reply)| Arrival { at, prompt, reply }),
            1..120,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn replies_are_never_starved_or_evicted(
            list in arrivals(), pages in 24usize..200, rows in 1usize..600, batch_from in 1usize..7,
            sequences in 1usize..80,
        ) {
            const PAGE: usize = 16;
            let budget = Budget { tokens: pages * PAGE, page: PAGE, sequences };
            let mut s = Scheduler::new(Limits {
                queue: 10_000,
                per_account: 10_000,
                rules: PassRules { batch_from, chunk: 512, pass_tokens: Some(rows), batch: 1024 },
                ..Limits::default()
            });
            // What each job is, what it has read and written, when it joined.
            let mut job: HashMap<JobId, Arrival> = HashMap::new();
            let (mut read, mut written) = (HashMap::<JobId, usize>::new(), HashMap::<JobId, usize>::new());
            let (mut ended, mut step, t) = (0, 0usize, Instant::now());
            let mut late: Vec<Arrival> = list.clone();
            late.sort_by_key(|a| a.at);
            let mut next = 0;
            while ended < list.len() {
                prop_assert!(step < 100_000, "{} of {} ended after {step} steps", ended, list.len());
                while next < late.len() && late[next].at <= step {
                    // A reply that cannot fit even alone is refused at reading (max_tokens names it): not sent.
                    let a = late[next].clone();
                    next += 1;
                    if budget.reserve(a.prompt + a.reply) > budget.tokens {
                        ended += 1;
                        continue;
                    }
                    let id = s.submit(&format!("u{}", next % 7), gen("m"), t).unwrap();
                    job.insert(id, a);
                }
                let passes = loop {
                    match s.decide(budget) {
                        Decision::Prepare(id) => s.prepared(id, job[&id].prompt + job[&id].reply),
                        Decision::Join(id) => {
                            prop_assert!(s.start(id, job[&id].prompt));
                        }
                        Decision::Exclusive(_) | Decision::Inputs(_) => prop_assert!(false, "no loads here"),
                        Decision::Idle => break vec![],
                        Decision::Step(p) => break p,
                    }
                };
                step += 1;
                // Pages reserved by the running replies never exceed the budget, nor the sequences.
                let reserved: usize = s.running().iter().map(|r| budget.reserve(r.reserve)).sum();
                prop_assert!(reserved <= budget.tokens && s.running().len() <= sequences);
                let parts: Vec<Part> = passes.iter().flatten().copied().collect();
                // A step carries at most its rows; the replies' tokens alone may take more, and then one prompt
                // token rides with them.
                let carried: usize = parts.iter().map(|p| if let Work::Chunk(n) = p.work { n } else { 1 }).sum();
                let sampling = parts.iter().filter(|p| !matches!(p.work, Work::Chunk(_))).count();
                prop_assert!(carried <= rows.max(sampling + 1), "{carried} rows with {sampling} replies, of {rows}");
                // Every reply writing or at its last token has its part this step.
                for r in s.running() {
                    if !matches!(r.phase, Phase::Reading { .. }) {
                        prop_assert!(parts.iter().any(|p| p.id == r.id), "reply {} went quiet", r.id);
                    }
                }
                for pass in &passes {
                    s.stepped(pass);
                }
                for p in parts {
                    let a = &job[&p.id];
                    match p.work {
                        Work::Chunk(n) => *read.entry(p.id).or_default() += n,
                        _ => {
                            let w = written.entry(p.id).or_default();
                            *w += 1;
                            // What it holds stays within what it reserved.
                            let held = a.prompt + *w - 1;
                            prop_assert!(held <= a.prompt + a.reply);
                            if *w == a.reply {
                                s.remove(p.id);
                                ended += 1;
                            }
                        }
                    }
                    prop_assert!(read.get(&p.id).copied().unwrap_or(0) < a.prompt, "read past the prompt's last");
                }
                if s.running().is_empty() && s.waiting().is_empty() && next < late.len() {
                    step = step.max(late[next].at);
                }
            }
        }
    }
}
