//! A read-write lock, as Redisson's `RReadWriteLock`: many readers at once or one writer,
//! reentrant, each holder's lease renewed by a watchdog until it gives the lock back.
//!
//! Four keys in one hash tag ([`RwKeys`]): `reads` (hash: reader -> hold count), `readers`
//! (sorted set: reader -> the time its lease runs out, so a reader that died stops counting
//! one lease later), `writer` (hash: the writer -> hold count, with the lease as its TTL)
//! and `intent` (the writer first in line). A holder of the write lock may also take the
//! read lock, as in Redisson.
//!
//! **A writer is not starved by a stream of readers.** A writer that finds readers inside
//! writes its `intent` (renewed at every try, gone a second after it stops trying); a new
//! reader that finds an intent waits, so the readers inside finish, none come in after
//! them, and the writer gets the lock as soon as the last one leaves (writer preference).
//! A reader that already holds the read lock may take it again (reentrant) even then.
//!
//! Waiting is polling, every few milliseconds: a read-write lock guards rare writes (a sale
//! closed) against many readers, and readers wait only while a writer is in line.

use std::sync::Arc;
use std::time::Duration;

use redis::Script;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::watch::{Watch, retry_pause};
use crate::{Connection, HolderId, Lock, LockError, millis};

/// How long a waiting writer's intent outlives its last try.
pub const INTENT_TTL: Duration = Duration::from_secs(1);

/// How often a waiter tries again (with up to as much again of jitter).
const POLL: Duration = Duration::from_millis(2);

static RW: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(include_str!("../lua/rw.lua")));

/// The keys of one read-write lock, all in one hash tag.
#[derive(Debug, Clone)]
pub struct RwKeys {
    /// Hash: reader -> hold count.
    pub reads: String,
    /// Sorted set: reader -> the time (ms) its lease runs out.
    pub readers: String,
    /// Hash: the writer -> hold count, with the lease as its TTL.
    pub writer: String,
    /// The writer first in line, while it waits for the readers inside to leave.
    pub intent: String,
}

impl RwKeys {
    /// The keys under `base` (which carries the hash tag): `<base>:reads`, …
    pub fn under(base: &str) -> Self {
        Self {
            reads: format!("{base}:reads"),
            readers: format!("{base}:readers"),
            writer: format!("{base}:writer"),
            intent: format!("{base}:intent"),
        }
    }
}

/// Which side of the lock a handle takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// One holder's handle on one side of a read-write lock.
pub struct RwLock<C: Connection> {
    conn: C,
    keys: RwKeys,
    holder: String,
    side: Side,
    lease: Duration,
    /// The lease as this holder knows it, and whether a renewal found the lock gone.
    watch: Arc<Watch>,
    /// Holds taken through this handle and not yet given back: one renewal task serves
    /// them all, and stops with the last.
    holds: u32,
    watchdog: Option<JoinHandle<()>>,
}

impl<C: Connection> RwLock<C> {
    /// The `side` of the lock at `keys`, for `holder`, its lease `lease` renewed every
    /// third of it while held.
    pub fn new(conn: C, keys: RwKeys, holder: &HolderId, side: Side, lease: Duration) -> Self {
        Self {
            conn,
            keys,
            holder: holder.to_string(),
            side,
            lease: lease.max(Duration::from_millis(30)),
            watch: Arc::default(),
            holds: 0,
            watchdog: None,
        }
    }

    async fn call(&self, op: &str) -> Result<bool, LockError> {
        call(
            &mut self.conn.clone(),
            &self.keys,
            op,
            &self.holder,
            self.lease,
        )
        .await
    }

    /// Renews the lease every third of it until released; marks the lock lost when a
    /// renewal finds it gone. A hold taken again (re-entry) keeps the task it has. A
    /// renewal that fails is tried again soon — a tenth of the lease, at most a second — so
    /// that a long lease gets many tries before it runs out; if Redis stays away past it,
    /// the lease's end says lost ([`Lock::is_lost`]).
    fn watch(&mut self) {
        if self
            .watchdog
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let (mut conn, keys, holder, lease) = (
            self.conn.clone(),
            self.keys.clone(),
            self.holder.clone(),
            self.lease,
        );
        let (op, watch) = (format!("renew_{}", self.side.name()), self.watch.clone());
        self.watchdog = Some(tokio::spawn(async move {
            let mut pause = lease / 3;
            loop {
                tokio::time::sleep(pause).await;
                pause = lease / 3;
                let sent = std::time::Instant::now();
                match call(&mut conn, &keys, &op, &holder, lease).await {
                    Ok(true) => watch.renewed_at(sent, lease),
                    Ok(false) => {
                        watch.found_lost();
                        return;
                    }
                    Err(_) => pause = retry_pause(lease),
                }
            }
        }));
    }

    fn stop_watching(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }
}

async fn call<C: Connection>(
    conn: &mut C,
    keys: &RwKeys,
    op: &str,
    holder: &str,
    lease: Duration,
) -> Result<bool, LockError> {
    let done: i64 = RW
        .key(&keys.reads)
        .key(&keys.readers)
        .key(&keys.writer)
        .key(&keys.intent)
        .arg(op)
        .arg(holder)
        .arg(millis(lease))
        .arg(millis(INTENT_TTL))
        .invoke_async(conn)
        .await?;
    Ok(done == 1)
}

impl<C: Connection> Lock for RwLock<C> {
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        // `None`: no deadline (`Duration::MAX`, as long as it takes).
        let deadline = Instant::now().checked_add(wait);
        loop {
            let sent = std::time::Instant::now();
            if self.call(self.side.name()).await? {
                // A first hold is a new one (not lost); a re-entry renewed the lease.
                if self.holds == 0 {
                    self.watch.start(sent, self.lease);
                } else {
                    self.watch.renewed_at(sent, self.lease);
                }
                self.holds += 1;
                self.watch();
                return Ok(true);
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                if self.side == Side::Write {
                    // Out of line: readers need not wait for a writer that gave up.
                    self.call("give_up").await?;
                }
                return Ok(false);
            }
            let jitter = Duration::from_micros(fastrand::u64(0..=millis(POLL) * 1_000));
            tokio::time::sleep(POLL + jitter).await;
        }
    }

    async fn give_back(&mut self) -> Result<bool, LockError> {
        self.holds = self.holds.saturating_sub(1);
        if self.holds == 0 {
            self.stop_watching();
        }
        let op = match self.side {
            Side::Read => "unread",
            Side::Write => "unwrite",
        };
        self.call(op).await
    }

    /// After a cancelled take: a writer's intent withdrawn, and the side given back if the
    /// take reached Redis.
    async fn clean_up(&mut self) -> Result<(), LockError> {
        if self.side == Side::Write {
            self.call("give_up").await?;
        }
        // What the take may have won, this handle does not know: one hold, given back if
        // Redis has it (the script checks), else nothing.
        self.holds += 1;
        self.give_back().await?;
        Ok(())
    }

    fn abandon(&mut self) {
        self.holds = 0;
        self.stop_watching();
    }

    /// A renewal found the lock gone, or its lease ran out since the take or renewal this
    /// holder last heard of; once true, true until the next take.
    fn is_lost(&self) -> bool {
        self.watch.is_lost()
    }

    /// Woken when a renewal finds the lock gone or the lease runs out, as the watchdog
    /// lock's holder is.
    async fn lost(&self) {
        self.watch.lost().await;
    }

    fn key(&self) -> &str {
        &self.keys.writer
    }

    fn holder(&self) -> &str {
        &self.holder
    }
}

impl<C: Connection> Drop for RwLock<C> {
    fn drop(&mut self) {
        self.stop_watching();
    }
}
