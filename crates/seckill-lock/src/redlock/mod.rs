//! Redlock: one lock over N independent Redis masters, as the Redis docs describe it.
//!
//! One random token; `SET key token NX PX ttl` on every server at once, each bounded by a
//! timeout small against the TTL; the lock is held when a majority (N/2+1) granted it and
//! time is left: validity = TTL − the time taking it took − drift (1 % of the TTL + 2 ms).
//! Otherwise what was granted is given back on every server at once and the lock is tried
//! again after a random delay (the Redis docs' cure for split votes), until the wait runs
//! out. Release is a compare-and-delete on every server. A round listens only until its
//! answer is decided, and a server that did not answer is left alone for a second
//! ([`DOWN_FOR`], counted as a no): two dead servers of five cost nothing per lock.
//!
//! One contender per process and lock at a time: the holders of one process queue for
//! their turn in the process (in arrival order, as Redisson queues its waiters) and only
//! the one whose turn it is asks the servers. Without that, a hundred waiters of one
//! instance each take some of the servers, none gets a majority when two of five are down,
//! and all back off and try again, again.
//!
//! With `extend`, the lock is extended while the work runs, by a quorum again, every
//! TTL/3: an extension must reach a majority before the current validity ends, or the
//! holder is told the lock is lost ([`Lock::is_lost`]) and must not act on it.
//!
//! What it does not promise (the Redis docs, and Kleppmann's reply): a holder paused past
//! its validity still thinks it holds the lock, and a server restarted without its data
//! forgets the grants it made. Fencing tokens where the work lands cover the first.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, RedisError, SetExpiry, SetOptions};
use tokio::sync::OwnedMutexGuard;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::{Connection, HolderId, Lock, LockError, millis, scripts, time_left};

mod servers;

pub use servers::DOWN_FOR;
use servers::{Ask, Servers};

/// The independent servers a Redlock lock is taken on, and this process's queue of
/// contenders for each lock. Cheap to clone.
#[derive(Clone)]
pub struct Redlock<C> {
    servers: Arc<Servers<C>>,
    turns: Arc<Turns>,
}

/// Whose turn it is to contend for each lock, in this process.
#[derive(Default)]
struct Turns {
    by_key: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl Turns {
    /// The queue for `key`, shared by every handle on it that is alive.
    fn of(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        // Held for a lookup or an insert, never across an await.
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(turn) = by_key.get(key).and_then(Weak::upgrade) {
            return turn;
        }
        by_key.retain(|_, turn| turn.strong_count() > 0);
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        by_key.insert(key.to_owned(), Arc::downgrade(&turn));
        turn
    }
}

impl Redlock<ConnectionManager> {
    /// Lazy connections to `urls` (3 or 5 standalone servers): nothing is asked until the
    /// first lock. Each command and connection attempt is bounded by `timeout`.
    pub fn connect(urls: &[String], timeout: Duration) -> Result<Self, RedisError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500));
        let servers = urls
            .iter()
            .map(|url| {
                let client = redis::Client::open(url.as_str())?;
                ConnectionManager::new_lazy_with_config(client, config.clone())
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(servers))
    }
}

impl<C: Connection> Redlock<C> {
    /// Over `servers`, each a connection to an independent master.
    pub fn new(servers: Vec<C>) -> Self {
        Self {
            servers: Arc::new(Servers::new(servers)),
            turns: Arc::default(),
        }
    }

    /// Servers that must agree: a majority.
    pub fn quorum(&self) -> usize {
        self.servers.quorum()
    }

    /// A handle on the lock at `key` with a `ttl`, for a holder of its own (a fresh
    /// [`HolderId`], the token the servers hold).
    pub fn lock(&self, key: &str, ttl: Duration) -> RedlockLock<C> {
        self.lock_as(key, ttl, &HolderId::new())
    }

    /// A handle on the lock at `key` with a `ttl`, for `holder`, for a caller that records
    /// who held what. Give each handle on a lock an id of its own.
    pub fn lock_as(&self, key: &str, ttl: Duration, holder: &HolderId) -> RedlockLock<C> {
        RedlockLock {
            turn: self.turns.of(key),
            my_turn: None,
            servers: self.servers.clone(),
            key: key.to_owned(),
            token: holder.to_string(),
            ttl,
            extend: false,
            valid_until: Arc::new(Mutex::new(None)),
            lost: Arc::new(AtomicBool::new(false)),
            extender: None,
        }
    }
}

impl<C> RedlockLock<C> {
    /// Whether the lock is extended, by a quorum, every third of its TTL while held (off
    /// by default: the lock expires one TTL after it was taken, unless the holder
    /// [extends](crate::Guard::extend) it).
    pub fn extending(mut self, extend: bool) -> Self {
        self.extend = extend;
        self
    }
}

/// One holder's handle on a Redlock lock.
pub struct RedlockLock<C> {
    /// This process's queue for the lock, and this handle's place at its head while it
    /// contends and holds.
    turn: Arc<tokio::sync::Mutex<()>>,
    my_turn: Option<OwnedMutexGuard<()>>,
    servers: Arc<Servers<C>>,
    key: String,
    token: String,
    ttl: Duration,
    extend: bool,
    /// Until when the lock is known to be held by a quorum; `None` when not held.
    valid_until: Arc<Mutex<Option<Instant>>>,
    lost: Arc<AtomicBool>,
    extender: Option<JoinHandle<()>>,
}

impl<C: Connection> Lock for RedlockLock<C> {
    /// Takes the lock on a quorum, trying again after a random delay until `wait` runs out.
    /// False when the lock stayed held elsewhere; [`LockError::NoQuorum`] as soon as a round
    /// finds fewer than a quorum of servers answering at all (the lock cannot be had,
    /// whoever holds it), whatever is left of `wait`: with none to run out, it would
    /// otherwise ask for ever.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let deadline = Instant::now().checked_add(wait);
        // This process's turn first: its other contenders for the lock wait here, in
        // order, instead of splitting the servers' votes.
        let turn = self.turn.clone().lock_owned();
        let my_turn = match deadline {
            None => turn.await,
            Some(deadline) => match tokio::time::timeout_at(deadline, turn).await {
                Ok(my_turn) => my_turn,
                Err(_) => return Ok(false),
            },
        };
        loop {
            let started = Instant::now();
            let grants = self.grant_everywhere().await;
            let validity = validity(self.ttl, started.elapsed());
            if grants.yes >= self.servers.quorum() && !validity.is_zero() {
                self.my_turn = Some(my_turn);
                *self.valid() = Some(started + validity);
                self.lost.store(false, Ordering::Release);
                if self.extend {
                    self.extender = Some(tokio::spawn(extend(
                        self.servers.clone(),
                        self.key.clone(),
                        self.token.clone(),
                        self.ttl,
                        self.valid_until.clone(),
                        self.lost.clone(),
                    )));
                }
                return Ok(true);
            }
            // Not ours: give back whatever was granted, so it does not block the others.
            self.release_everywhere().await;
            if grants.answered < self.servers.quorum() {
                return Err(LockError::NoQuorum {
                    answered: grants.answered,
                    servers: self.servers.len(),
                });
            }
            let left = time_left(deadline);
            if left.is_zero() {
                return Ok(false);
            }
            // A random delay, so that holders on several instances do not retry in step.
            let delay = Duration::from_millis(fastrand::u64(5..=50)).min(left);
            tokio::time::sleep(delay).await;
        }
    }

    /// Gives the lock back on every server, then the turn to this process's next
    /// contender. True when a quorum still had it.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        self.stop_extending();
        *self.valid() = None;
        let released = self.release_everywhere().await >= self.servers.quorum();
        self.my_turn = None;
        Ok(released)
    }

    /// Stops as if the process died: no release, no extension. The process's other
    /// contenders go on (they would not have died with this one), and find the lock held
    /// until its TTL runs out.
    fn abandon(&mut self) {
        self.stop_extending();
        *self.valid() = None;
        self.my_turn = None;
    }

    /// The lock's TTL made `lease` from now on a quorum, before its current validity ends;
    /// false, and lost from then on, when it could not be.
    async fn extend(&mut self, lease: Duration) -> Result<bool, LockError> {
        if self.valid().is_none() {
            return Ok(false);
        }
        Ok(extend_once(
            &self.servers,
            &self.key,
            &self.token,
            lease,
            &self.valid_until,
            &self.lost,
        )
        .await)
    }

    /// True once the holder can no longer count on the lock: an extension missed the
    /// quorum, or the validity ran out.
    fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
            || self.valid().is_none_or(|until| Instant::now() >= until)
    }

    fn key(&self) -> &str {
        &self.key
    }

    fn holder(&self) -> &str {
        &self.token
    }

    /// The TTL, when nothing extends it (with `extend`, the extensions keep it).
    fn lease(&self) -> Option<Duration> {
        (!self.extend).then_some(self.ttl)
    }
}

impl<C: Connection> RedlockLock<C> {
    /// `SET NX PX` on every server not known to be down, at once, until decided.
    async fn grant_everywhere(&self) -> servers::Tally {
        let ttl_ms = millis(self.ttl).max(1);
        self.servers
            .ask(Ask::Up, node_timeout(self.ttl), |mut server| {
                let (key, token) = (self.key.clone(), self.token.clone());
                async move {
                    let options = SetOptions::default()
                        .conditional_set(redis::ExistenceCheck::NX)
                        .with_expiration(SetExpiry::PX(ttl_ms));
                    let set: Option<String> = server.set_options(key, token, options).await?;
                    Ok(set.is_some())
                }
            })
            .await
    }

    /// Compare-and-delete on every server at once; how many had it, once decided (the
    /// rest finish in the background).
    async fn release_everywhere(&self) -> usize {
        let tally = self
            .servers
            .ask(Ask::Everyone, RELEASE_TIMEOUT, |mut server| {
                let (key, token) = (self.key.clone(), self.token.clone());
                async move {
                    let mut release = scripts::TOKEN_RELEASE.prepare_invoke();
                    release.key(key).arg(token);
                    Ok(release.invoke_async::<i64>(&mut server).await? == 1)
                }
            })
            .await;
        tally.yes
    }

    fn valid(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // Held for a read or a write, never across an await.
        self.valid_until.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<C> RedlockLock<C> {
    fn stop_extending(&mut self) {
        if let Some(extender) = self.extender.take() {
            extender.abort();
        }
    }
}

impl<C> Drop for RedlockLock<C> {
    fn drop(&mut self) {
        self.stop_extending();
    }
}

/// Extends the lock on every server every TTL/3 while the holder works. An extension that
/// reaches a quorum before the current validity ends moves the validity on; one that does
/// not marks the lock lost, and extending stops.
async fn extend<C: Connection>(
    servers: Arc<Servers<C>>,
    key: String,
    token: String,
    ttl: Duration,
    valid_until: Arc<Mutex<Option<Instant>>>,
    lost: Arc<AtomicBool>,
) {
    loop {
        tokio::time::sleep(ttl / 3).await;
        if !extend_once(&servers, &key, &token, ttl, &valid_until, &lost).await {
            return;
        }
    }
}

/// One extension to `ttl` on every server at once: true when a quorum had it before the
/// current validity ended (the validity moves on), false when not (the lock is lost).
async fn extend_once<C: Connection>(
    servers: &Servers<C>,
    key: &str,
    token: &str,
    ttl: Duration,
    valid_until: &Mutex<Option<Instant>>,
    lost: &AtomicBool,
) -> bool {
    let quorum = servers.quorum();
    let started = Instant::now();
    let extended = servers
        .ask(Ask::Up, node_timeout(ttl), |mut server| {
            let (key, token) = (key.to_owned(), token.to_owned());
            async move {
                let mut extend = scripts::TOKEN_EXTEND.prepare_invoke();
                extend.key(key).arg(token).arg(millis(ttl).max(1));
                Ok(extend.invoke_async::<i64>(&mut server).await? == 1)
            }
        })
        .await
        .yes;
    let mut valid = valid_until.lock().unwrap_or_else(|e| e.into_inner());
    let in_time = valid.is_some_and(|until| Instant::now() < until);
    let validity = validity(ttl, started.elapsed());
    if extended >= quorum && in_time && !validity.is_zero() {
        *valid = Some(started + validity);
        true
    } else {
        lost.store(true, Ordering::Release);
        tracing::warn!(%key, extended, quorum, "redlock extension missed its quorum: the lock is lost");
        false
    }
}

/// TTL − elapsed − drift, where drift is 1 % of the TTL plus 2 ms (the Redis docs').
fn validity(ttl: Duration, elapsed: Duration) -> Duration {
    let drift = ttl / 100 + Duration::from_millis(2);
    ttl.saturating_sub(elapsed).saturating_sub(drift)
}

/// How long a release waits for each server's answer. Not a share of the TTL, as a take's
/// is ([`node_timeout`]): a release eats no validity, and a live server on a busy machine
/// that answers after a take's 100 ms would be counted as not holding the lock (a lost
/// answer is not a no) while its key stayed for the TTL. The round still ends as soon as a
/// quorum has answered; a silent server's call finishes in a task of its own.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// Each server gets a small share of the TTL to answer, so that a dead one does not eat
/// the validity: a tenth of the TTL, between 10 and 100 ms.
fn node_timeout(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(10), Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_leaves_room_for_drift() {
        let ttl = Duration::from_millis(10_000);
        assert_eq!(
            validity(ttl, Duration::from_millis(40)),
            Duration::from_millis(9_858)
        );
        assert_eq!(validity(ttl, Duration::from_millis(9_990)), Duration::ZERO);
        assert_eq!(
            node_timeout(Duration::from_secs(30)),
            Duration::from_millis(100)
        );
        assert_eq!(
            node_timeout(Duration::from_millis(50)),
            Duration::from_millis(10)
        );
    }
}
