//! The faults a request can ask for inside the lock sequence (`fault=…`, with
//! `--enable-faults`): a holder that sleeps before giving its lock back, and a process
//! that stops the world before its commit.

use std::time::Duration;

use seckill_lock::{Lock, LockError};

use super::Deduction;

/// A lock whose holder sleeps before giving it back (`fault=pause_before_release`): the
/// window in which a blind release deletes somebody else's lock.
pub(super) struct Paused<L> {
    lock: L,
    pause: Option<Duration>,
}

impl<L: Lock> Lock for Paused<L> {
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        self.lock.take(wait).await
    }

    async fn give_back(&mut self) -> Result<bool, LockError> {
        if let Some(pause) = self.pause {
            tokio::time::sleep(pause).await;
        }
        self.lock.give_back().await
    }

    async fn clean_up(&mut self) -> Result<(), LockError> {
        self.lock.clean_up().await
    }

    fn abandon(&mut self) {
        self.lock.abandon();
    }

    fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    fn holder(&self) -> &str {
        self.lock.holder()
    }

    fn key(&self) -> &str {
        self.lock.key()
    }

    fn holder_is_a_hash_field(&self) -> bool {
        self.lock.holder_is_a_hash_field()
    }

    fn fencing_token(&self) -> Option<i64> {
        self.lock.fencing_token()
    }

    fn lease(&self) -> Option<Duration> {
        self.lock.lease()
    }

    fn renewals(&self) -> Vec<std::time::Instant> {
        self.lock.renewals()
    }
}

/// `lock` with the request's `fault=pause_before_release`, when it asked for one.
pub(super) fn pausing<L: Lock>(d: &Deduction, lock: L) -> Paused<L> {
    Paused {
        lock,
        pause: d.knobs.pause_before_release(),
    }
}

/// `fault=stop_before_commit`: the process stops for `pause` ([`stop_process`]), then the
/// commit goes once the stock store answers — whatever else was in flight over the stop
/// timed out on waking, and the connection may be replaced for it.
pub(super) async fn stop_the_world(d: &Deduction, pause: Duration) {
    stop_process(pause);
    for _ in 0..20 {
        let answered: Result<String, _> = redis::cmd("PING").query_async(&mut d.redis()).await;
        if answered.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `fault=stop_before_commit`: the whole process stops for `pause` — every thread, the lock
/// store's client and its pings too, as in a stop-the-world GC pause — right after the
/// holder's last check that it still holds its lock. A child `sh` waits until the process
/// is stopped, then `pause`, then lets it go on (SIGCONT, once).
fn stop_process(pause: Duration) {
    let pid = std::process::id();
    let resume = format!(
        "i=0; until grep -q '^State:.*stopped' /proc/{pid}/status; do \
           i=$((i+1)); [ $i -gt 500 ] && exit 1; sleep 0.01; done; \
         sleep {:.3}; kill -CONT {pid}",
        pause.as_secs_f64()
    );
    match std::process::Command::new("sh")
        .args(["-c", &resume])
        .spawn()
    {
        Ok(mut child) => {
            std::thread::spawn(move || child.wait());
            tracing::warn!(?pause, "fault=stop_before_commit: the process stops itself");
            // SAFETY: kill(2) with our own pid and a signal number has no memory effects.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) };
        }
        Err(err) => {
            tracing::warn!(error = %err, "fault=stop_before_commit: no sh to resume us; not stopping")
        }
    }
}
