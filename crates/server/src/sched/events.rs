//! A job's events from the engine thread to the HTTP side, counted at both ends. A streaming client that stops
//! reading stops hyper polling its stream once the socket and hyper's buffer are full; its events then wait here
//! untaken, and the engine thread, which sees the counts, stops the reply after `[server] stall_timeout` instead of
//! writing (and holding in memory) all of it for nobody.

use super::Event;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::error::SendError;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// What both ends see.
#[derive(Debug)]
struct Gauge {
    start: Instant,
    sent: AtomicUsize,
    taken: AtomicUsize,
    /// Milliseconds after `start` the last event was taken (0: none yet).
    taken_at_ms: AtomicU64,
    /// Milliseconds after `start` an event was last sent with none waiting: since then the client has had
    /// something to read. A first token that comes after a long prompt's read is not a stall.
    waiting_since_ms: AtomicU64,
}

/// The engine thread's end.
#[derive(Debug)]
pub struct Events {
    tx: UnboundedSender<Event>,
    gauge: Arc<Gauge>,
}

/// The HTTP side's end.
#[derive(Debug)]
pub struct EventsRx {
    rx: UnboundedReceiver<Event>,
    gauge: Arc<Gauge>,
}

/// A job's channel.
pub fn channel() -> (Events, EventsRx) {
    let (tx, rx) = unbounded_channel();
    let gauge = Arc::new(Gauge {
        start: Instant::now(),
        sent: AtomicUsize::new(0),
        taken: AtomicUsize::new(0),
        taken_at_ms: AtomicU64::new(0),
        waiting_since_ms: AtomicU64::new(0),
    });
    (Events { tx, gauge: gauge.clone() }, EventsRx { rx, gauge })
}

impl Events {
    /// Sends an event (Err: the HTTP side is gone).
    pub fn send(&self, e: Event) -> Result<(), SendError<Event>> {
        let g = &self.gauge;
        if g.sent.load(Ordering::SeqCst) == g.taken.load(Ordering::SeqCst) {
            g.waiting_since_ms.store(g.start.elapsed().as_millis() as u64, Ordering::SeqCst);
        }
        // Counted before it can be taken, so `taken` never passes `sent`.
        g.sent.fetch_add(1, Ordering::SeqCst);
        self.tx.send(e)
    }

    /// Whether events have waited untaken for `after` with nothing taken meanwhile: the client stopped reading.
    /// The wait counts from the later of the last take and the moment something was there to take.
    pub fn stalled(&self, after: Duration) -> bool {
        let g = &self.gauge;
        let waiting = g.sent.load(Ordering::SeqCst) > g.taken.load(Ordering::SeqCst);
        let since = g.taken_at_ms.load(Ordering::SeqCst).max(g.waiting_since_ms.load(Ordering::SeqCst));
        let idle_ms = (g.start.elapsed().as_millis() as u64).saturating_sub(since);
        waiting && idle_ms > after.as_millis() as u64
    }
}

impl EventsRx {
    /// The next event, marked as taken.
    pub async fn recv(&mut self) -> Option<Event> {
        let e = self.rx.recv().await;
        if e.is_some() {
            let g = &self.gauge;
            g.taken_at_ms.store(g.start.elapsed().as_millis() as u64, Ordering::SeqCst);
            g.taken.fetch_add(1, Ordering::SeqCst);
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn untaken_events_are_a_stall_only_after_the_timeout() {
        let (tx, mut rx) = channel();
        let after = Duration::from_millis(50);
        assert!(!tx.stalled(Duration::ZERO), "nothing sent: nothing waits");
        tx.send(Event::Failed(crate::error::ApiError::bad_request("x"))).unwrap();
        assert!(!tx.stalled(after), "sent just now");
        std::thread::sleep(Duration::from_millis(80));
        assert!(tx.stalled(after), "waited untaken past the timeout");
        assert!(rx.recv().await.is_some());
        assert!(!tx.stalled(after), "taken: the client reads");
        tx.send(Event::Failed(crate::error::ApiError::bad_request("y"))).unwrap();
        assert!(!tx.stalled(after), "just taken one, so not idle yet");
    }

    /// A reply whose first event comes long after the job began (a long prompt read, a non-streamed reply) is not
    /// stalled the moment it is sent: the client has had nothing to read until then.
    #[tokio::test]
    async fn a_first_event_after_a_long_wait_is_not_a_stall() {
        let (tx, mut rx) = channel();
        let after = Duration::from_millis(50);
        std::thread::sleep(Duration::from_millis(80));
        tx.send(Event::Failed(crate::error::ApiError::bad_request("x"))).unwrap();
        assert!(!tx.stalled(after), "sent just now, after the wait");
        std::thread::sleep(Duration::from_millis(80));
        assert!(tx.stalled(after), "then left untaken past the timeout");
        assert!(rx.recv().await.is_some());
        std::thread::sleep(Duration::from_millis(80));
        tx.send(Event::Failed(crate::error::ApiError::bad_request("y"))).unwrap();
        assert!(!tx.stalled(after), "a later event after a quiet spell is not a stall either");
    }
}
