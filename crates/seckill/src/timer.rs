//! A sleep that lasts what it says, for the teaching knob `work_ms`.
//!
//! tokio's timer has a resolution of one millisecond and rounds every deadline up to the
//! next tick, so `tokio::time::sleep(2 ms)` lasts between 2 and 3 ms, 2.5 on average: a
//! lock "held for 2 ms of work" would really be held a quarter longer, and every figure
//! measured against `work_ms` would be off by as much. Here one thread per process keeps
//! the pending deadlines in a heap and waits for the earliest with `recv_timeout`, which
//! the kernel times to tens of microseconds; it wakes the sleeping task through a oneshot
//! channel. One thread, however many sleep: the work of every holder shares it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::LazyLock;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A pending sleep: its deadline, and whom to tell.
struct Due {
    at: Instant,
    /// Breaks ties, so the heap needs no order on the sender.
    seq: u64,
    done: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

static TIMER: LazyLock<Option<mpsc::Sender<Due>>> = LazyLock::new(|| {
    let (sender, receiver) = mpsc::channel();
    std::thread::Builder::new()
        .name("seckill-timer".into())
        .spawn(move || run(&receiver))
        .ok()
        .map(|_| sender)
});

/// Sleeps for `duration`, to within tens of microseconds (tokio's own sleep if the timer
/// thread could not be started).
pub async fn sleep(duration: Duration) {
    if duration.is_zero() {
        return;
    }
    let (done, wait) = oneshot::channel();
    let due = Due {
        at: Instant::now() + duration,
        seq: 0,
        done,
    };
    match TIMER.as_ref().map(|timer| timer.send(due)) {
        Some(Ok(())) => {
            let _ = wait.await;
        }
        _ => tokio::time::sleep(duration).await,
    }
}

fn run(receiver: &mpsc::Receiver<Due>) {
    // Linux lets a sleeping thread wake up to 50 µs late (its timer slack), to batch
    // wake-ups; this thread is here to wake on time.
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes plain integers and touches only this thread.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong);
    }
    let mut pending: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut seq = 0_u64;
    loop {
        let now = Instant::now();
        while pending.peek().is_some_and(|Reverse(due)| due.at <= now) {
            if let Some(Reverse(due)) = pending.pop() {
                // The sleeper may have gone (its request was cut short): nothing to do.
                let _ = due.done.send(());
            }
        }
        let next = match pending.peek() {
            Some(Reverse(due)) => receiver.recv_timeout(due.at.saturating_duration_since(now)),
            None => receiver.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok(mut due) => {
                seq += 1;
                due.seq = seq;
                pending.push(Reverse(due));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sleeps of different lengths at once each last at least what they say. (How close
    /// they come is measured by the bench, which reports the real work time of every row:
    /// a test does not time things on a shared machine.)
    #[tokio::test]
    async fn concurrent_sleeps_never_wake_early() {
        let sleeps = (0..50_u64).map(|i| async move {
            let asked = Duration::from_micros(500 + 97 * (i % 13));
            let started = Instant::now();
            sleep(asked).await;
            (asked, started.elapsed())
        });
        for (asked, took) in futures_util::future::join_all(sleeps).await {
            assert!(took >= asked, "asked {asked:?}, woke after {took:?}");
        }
    }
}
