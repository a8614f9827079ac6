//! The worker pool: persistent threads, one per physical core, that spin briefly between parallel regions.
//!
//! Decode runs a few hundred parallel regions a token; at 100 tok/s a token has 10 ms, so a dispatch that wakes a
//! sleeping thread (10–30 µs) would eat a fifth of it. Workers here spin on one atomic for a while after each region
//! and only then sleep, so back-to-back regions start in well under a microsecond. The calling thread works too.
//!
//! A region is `parallel_for(n, f)`: tasks `0..n` are claimed one at a time from the job's own counter, so a worker
//! that wakes late finds nothing left of a finished job and can never run a task of another.
//! Threads: the physical cores, or `KVAD_THREADS`.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an idle worker spins before it sleeps.
const SPIN: Duration = Duration::from_micros(300);

type Task = dyn Fn(usize) + Sync;

/// One parallel region: its closure and its own counters, so a worker that picks up a finished job finds nothing
/// left to claim and can never touch another job's tasks.
struct Job {
    f: &'static Task,
    n: usize,
    next: AtomicUsize,
    done: AtomicUsize,
}

struct Pool {
    threads: usize,
    /// Bumped for every job; workers spin on it.
    epoch: AtomicU64,
    /// The current job.
    current: Mutex<Option<Arc<Job>>>,
    /// One submitter at a time; others run their region on their own thread.
    submit: Mutex<()>,
    sleep: Mutex<usize>,
    wake: Condvar,
}

static POOL: OnceLock<&'static Pool> = OnceLock::new();

thread_local! {
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// Sets up the pool once (later calls return the first answer) and returns its thread count.
pub fn init(threads: Option<usize>) -> usize {
    pool_with(threads).threads
}

/// The number of threads regions run on.
pub fn threads() -> usize {
    pool_with(None).threads
}

fn pool_with(threads: Option<usize>) -> &'static Pool {
    POOL.get_or_init(|| {
        let n = threads.or_else(super::config::threads).filter(|&n| n > 0).unwrap_or_else(physical_cores);
        let pool: &'static Pool = Box::leak(Box::new(Pool {
            threads: n,
            epoch: AtomicU64::new(0),
            current: Mutex::new(None),
            submit: Mutex::new(()),
            sleep: Mutex::new(0),
            wake: Condvar::new(),
        }));
        for i in 1..n {
            std::thread::Builder::new()
                .name(format!("kvad-worker-{i}"))
                .spawn(move || worker(pool))
                .expect("spawn a worker thread");
        }
        pool
    })
}

/// Runs `f(0..n)` across the pool and returns when every task is done. Called from inside a task, or while another
/// thread holds the pool, it runs the tasks on the calling thread instead (same result, no deadlock).
pub fn parallel_for(n: usize, f: impl Fn(usize) + Sync) {
    let pool = pool_with(None);
    if n == 0 {
        return;
    }
    let serial = n == 1 || pool.threads == 1 || IN_TASK.with(|c| c.get());
    let guard = if serial { None } else { pool.submit.try_lock().ok() };
    if guard.is_none() {
        (0..n).for_each(f);
        return;
    }
    let task: &(dyn Fn(usize) + Sync + '_) = &f;
    // SAFETY: `f` is only called for a claimed index of this job, every index is claimed once, and this function
    // does not return (so `f` stays alive) until all n claimed tasks are done; a worker that still holds the job
    // afterwards finds `next >= n` and never calls it.
    let task: &'static Task = unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Task>(task) };
    let job = Arc::new(Job { f: task, n, next: AtomicUsize::new(0), done: AtomicUsize::new(0) });
    *pool.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(job.clone());
    pool.epoch.fetch_add(1, SeqCst);
    if *pool.sleep.lock().unwrap_or_else(|e| e.into_inner()) > 0 {
        pool.wake.notify_all();
    }
    run_tasks(&job);
    while job.done.load(SeqCst) < n {
        std::hint::spin_loop();
    }
    *pool.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
    drop(guard);
}

/// Claims and runs tasks of a job until none are left.
fn run_tasks(job: &Job) {
    loop {
        let idx = job.next.fetch_add(1, SeqCst);
        if idx >= job.n {
            return;
        }
        IN_TASK.with(|c| c.set(true));
        (job.f)(idx);
        IN_TASK.with(|c| c.set(false));
        job.done.fetch_add(1, SeqCst);
    }
}

fn worker(pool: &'static Pool) {
    let mut seen = 0u64;
    loop {
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            let e = pool.epoch.load(SeqCst);
            if e != seen {
                seen = e;
                let job = pool.current.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if let Some(job) = job {
                    run_tasks(&job);
                }
                break;
            }
            std::hint::spin_loop();
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(1024) && start.elapsed() > SPIN {
                let mut sleepers = pool.sleep.lock().unwrap_or_else(|e| e.into_inner());
                *sleepers += 1;
                while pool.epoch.load(SeqCst) == seen {
                    sleepers = pool.wake.wait(sleepers).unwrap_or_else(|e| e.into_inner());
                }
                *sleepers -= 1;
                break;
            }
        }
    }
}

/// Runs `f(i, piece)` for every `piece_len`-long piece of `data` (the last may be shorter), spread over the pool in
/// contiguous runs of pieces. Each piece is handed to exactly one call, so callers write without locks.
pub fn for_each_piece_mut<T: Send>(data: &mut [T], piece_len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let pieces = data.len().div_ceil(piece_len.max(1));
    let tasks = (threads() * 4).min(pieces);
    let len = data.len();
    let base = SendPtr(data.as_mut_ptr());
    parallel_for(tasks, |t| {
        for i in chunk(pieces, tasks, t) {
            let start = i * piece_len;
            let end = (start + piece_len).min(len);
            // SAFETY: pieces are disjoint and each index `i` belongs to exactly one task.
            let piece = unsafe { std::slice::from_raw_parts_mut(base.get().add(start), end - start) };
            f(i, piece);
        }
    });
}

struct SendPtr<T>(*mut T);
impl<T> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SendPtr<T> {}
// SAFETY: only used by `for_each_piece_mut`, whose tasks touch disjoint pieces.
unsafe impl<T> Sync for SendPtr<T> {}
// SAFETY: as for Sync: the pointer crosses to the region's tasks, which touch disjoint pieces.
unsafe impl<T> Send for SendPtr<T> {}
impl<T> SendPtr<T> {
    fn get(self) -> *mut T {
        self.0
    }
}

/// Splits `0..len` into `parts` contiguous ranges of nearly equal size; range `i` of them.
pub fn chunk(len: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let base = len / parts;
    let extra = len % parts;
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// Counts physical cores from /proc/cpuinfo (distinct (physical id, core id) pairs), else the logical count.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return logical;
    };
    let mut pairs = std::collections::HashSet::new();
    let (mut phys, mut core) = (None, None);
    for line in info.lines().chain(std::iter::once("")) {
        if let Some((k, v)) = line.split_once(':') {
            match k.trim() {
                "physical id" => phys = Some(v.trim().to_string()),
                "core id" => core = Some(v.trim().to_string()),
                _ => {}
            }
        }
        if line.trim().is_empty() {
            if let (Some(p), Some(c)) = (phys.take(), core.take()) {
                pairs.insert((p, c));
            }
        }
    }
    if pairs.is_empty() {
        logical
    } else {
        pairs.len().min(logical)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn every_task_runs_exactly_once_across_many_regions_and_callers() {
        init(Some(2));
        let handles: Vec<_> = (0..3)
            .map(|_| {
                std::thread::spawn(|| {
                    for round in 0..300 {
                        let n = 1 + round % 37;
                        let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                        parallel_for(n, |i| {
                            hits[i].fetch_add(1, SeqCst);
                            // nested regions run serially and still complete
                            parallel_for(2, |_| {});
                        });
                        assert!(hits.iter().all(|h| h.load(SeqCst) == 1), "round {round}");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn chunks_cover_the_range_without_overlap() {
        for len in 0..50 {
            for parts in 1..7 {
                let mut next = 0;
                for i in 0..parts {
                    let r = chunk(len, parts, i);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, len);
            }
        }
    }
}
