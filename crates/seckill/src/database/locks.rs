//! Two locks in PostgreSQL, as [`seckill_lock::Lock`]s, so that the lock variants' one
//! sequence runs on them unchanged.
//!
//! - [`UniqueLock`]: seed 003's first row as written — a lock table with a unique key;
//!   `INSERT` takes the lock (the key refuses a second row: held), `DELETE` gives it back.
//!   There is no blocking wait: a waiter tries again every few milliseconds. A holder that
//!   dies leaves its row, and the lock is held until an operator deletes it, exactly as
//!   `setnx`'s key. With a lease (ShedLock's and Spring's `JdbcLockRegistry`'s repair) the
//!   row carries `lock_until`, and a waiter takes over a row whose lease ran out — which
//!   ends the deadlock, and lets in a second holder while a slow first one still works.
//! - [`AdvisoryLock`]: `pg_advisory_xact_lock(key)` in a transaction held open across the
//!   work. Waiters queue inside PostgreSQL (no polling); the lock goes with the
//!   transaction, so a holder whose connection dies — its process killed — frees it at once.

use std::time::{Duration, Instant};

use seckill_lock::{Lock, LockError};

use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;

use super::{Database, Failure, Tx};
use std::sync::Arc;

/// Sleep between two tries of a waiter on a [`UniqueLock`] (the seed: the database's lock
/// has no blocking wait): Spring's `JdbcLockRegistry` waits 100 ms (`idleBetweenTries`);
/// here 50 to 150 ms, jittered so that waiters on two instances do not retry in
/// lock-step, never past the deadline. Two hundred waiters still try 2,000 times a second.
fn retry_delay(left: Duration) -> Duration {
    Duration::from_millis(fastrand::u64(50..=150)).min(left)
}

/// The seed's database lock: a row in `seckill_locks`, keyed by the lock's name.
pub struct UniqueLock {
    db: Arc<Database>,
    name: String,
    holder: String,
    /// `lock_until` = now + this, and waiters take over a row past it; `None`: the seed's
    /// row, held until deleted.
    lease: Option<Duration>,
    /// When this holder took it (for `is_lost` with a lease).
    taken: Option<Instant>,
    /// The connection of a try whose answer has not come back (in flight, or cut short):
    /// kept in the handle, not the try's future, so that a clean-up's `DELETE` goes on the
    /// same connection, after the `INSERT` — on another, it could run first, and the
    /// `INSERT` land after it and hold the lock for ever.
    in_flight: Option<Object>,
}

impl UniqueLock {
    pub fn new(db: Arc<Database>, name: &str, holder: &str, lease: Option<Duration>) -> Self {
        Self {
            db,
            name: name.to_owned(),
            holder: holder.to_owned(),
            lease,
            taken: None,
            in_flight: None,
        }
    }

    /// One `INSERT`: whether this holder got the row (or, with a lease, took over one
    /// whose lease ran out).
    async fn try_once(&mut self) -> Result<bool, Failure> {
        let sql = match self.lease {
            None => {
                "INSERT INTO seckill_locks (name, holder) VALUES ($1, $2)
                 ON CONFLICT (name) DO NOTHING RETURNING 1"
            }
            Some(_) => {
                "INSERT INTO seckill_locks AS l (name, holder, lock_until)
                 VALUES ($1, $2, clock_timestamp() + $3 * interval '1 millisecond')
                 ON CONFLICT (name) DO UPDATE
                     SET holder = EXCLUDED.holder, lock_until = EXCLUDED.lock_until,
                         locked_at = clock_timestamp()
                     WHERE l.lock_until < clock_timestamp()
                 RETURNING 1"
            }
        };
        let ms = self.lease.map(|lease| lease.as_secs_f64() * 1_000.0);
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&self.name, &self.holder];
        if let Some(ms) = &ms {
            params.push(ms);
        }
        self.in_flight = Some(self.db.conn().await.map_err(Failure::NotSent)?);
        let conn = self.in_flight.as_ref().expect("just set");
        let call = async {
            let statement = conn.prepare_cached(sql).await?;
            conn.query_opt(&statement, &params).await
        };
        let taken = match tokio::time::timeout(self.db.timeout(), call).await {
            Ok(answered) => answered.map_err(Failure::of),
            // Its connection stays in the handle for the clean-up.
            Err(_) => {
                return Err(Failure::Lost(format!(
                    "no answer within {:?}",
                    self.db.timeout()
                )));
            }
        };
        // Answered: the connection may serve another.
        self.in_flight = None;
        Ok(taken?.is_some())
    }
}

impl Lock for UniqueLock {
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let deadline = tokio::time::Instant::now().checked_add(wait);
        loop {
            if self.try_once().await? {
                self.taken = Some(Instant::now());
                return Ok(true);
            }
            let left = deadline.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(tokio::time::Instant::now())
            });
            if left.is_zero() {
                return Ok(false);
            }
            tokio::time::sleep(retry_delay(left)).await;
        }
    }

    /// A take cut short, or whose answer was lost: its own row deleted, on the connection
    /// its `INSERT` went on (so after it) when that is still at hand.
    async fn clean_up(&mut self) -> Result<(), LockError> {
        let Some(conn) = self.in_flight.take() else {
            self.give_back().await?;
            return Ok(());
        };
        let sql = "DELETE FROM seckill_locks WHERE name = $1 AND holder = $2";
        let params: [&(dyn ToSql + Sync); 2] = [&self.name, &self.holder];
        match tokio::time::timeout(self.db.timeout(), conn.execute(sql, &params)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(Failure::of(err).into()),
            Err(_) => {
                drop(Object::take(conn));
                Err(Failure::Lost("the clean-up's DELETE had no answer".into()).into())
            }
        }
    }

    /// `DELETE … WHERE holder = me`: only the holder gives it back.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        let sql = "DELETE FROM seckill_locks WHERE name = $1 AND holder = $2 RETURNING 1";
        let deleted = self.db.query_opt(sql, &[&self.name, &self.holder]).await?;
        Ok(deleted.is_some())
    }

    /// With a lease, the holder knows the lease ran out: a waiter may have taken the row
    /// over. (A holder paused past it cannot look: only a fencing token stops it.)
    fn is_lost(&self) -> bool {
        match (self.lease, self.taken) {
            (Some(lease), Some(taken)) => taken.elapsed() >= lease,
            _ => false,
        }
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn key(&self) -> &str {
        &self.name
    }

    fn lease(&self) -> Option<Duration> {
        self.lease
    }
}

/// Deletes the lock rows named `name` in `db`, whoever holds them: the operator's way out
/// of `pg_unique`'s deadlock (`POST /admin/unlock`). Returns how many there were.
pub async fn force_unlock(db: &Database, name: &str) -> Result<u64, crate::error::AppError> {
    Ok(db
        .with(async |c| {
            c.execute("DELETE FROM seckill_locks WHERE name = $1", &[&name])
                .await
        })
        .await?)
}

/// PostgreSQL's advisory lock on a key, held by an open transaction.
pub struct AdvisoryLock {
    db: Arc<Database>,
    /// The lock's name; PostgreSQL hashes it to the lock's 64-bit key
    /// (`hashtextextended`), the same in every instance.
    name: String,
    holder: String,
    /// The transaction that holds it, once taken.
    tx: Option<Tx>,
}

impl AdvisoryLock {
    pub fn new(db: Arc<Database>, name: &str, holder: &str) -> Self {
        Self {
            db,
            name: name.to_owned(),
            holder: holder.to_owned(),
            tx: None,
        }
    }
}

impl Lock for AdvisoryLock {
    /// `BEGIN`, then `pg_advisory_xact_lock` with the wait as the transaction's
    /// `lock_timeout` (`pg_try_advisory_xact_lock` for no wait). Waiters queue in
    /// PostgreSQL; one that times out rolls back and holds nothing.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        // lock_timeout counts whole milliseconds, up to i32::MAX; 0 is no limit (a wait too
        // long to count: "as long as it takes").
        let ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let lock_timeout = (!wait.is_zero()).then_some(if ms > i32::MAX as u64 { 0 } else { ms });
        let tx = self.db.begin(lock_timeout).await?;
        let name: &(dyn tokio_postgres::types::ToSql + Sync) = &self.name;
        let taken = if wait.is_zero() {
            let sql = "SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))";
            tx.query_opt(Duration::ZERO, sql, &[name])
                .await
                .map(|row| row.is_some_and(|r| r.get::<_, bool>(0)))
        } else {
            let sql = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))";
            match tx.query_opt(wait, sql, &[name]).await {
                Ok(_) => Ok(true),
                Err(failure)
                    if failure.is(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE) =>
                {
                    Ok(false)
                }
                Err(failure) => Err(failure),
            }
        }?;
        if taken {
            self.tx = Some(tx);
        } else {
            tx.rollback().await?;
        }
        Ok(taken)
    }

    /// `COMMIT`: the transaction ends, and the lock with it. False when the transaction
    /// was already gone (its connection dropped): the lock was freed then, and whatever
    /// the holder did since was not under it.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        let Some(tx) = self.tx.take() else {
            return Ok(false);
        };
        match tx.commit().await {
            Ok(()) => Ok(true),
            Err(Failure::Answered(_)) => Ok(false),
            Err(failure) => Err(failure.into()),
        }
    }

    /// A take cut short: its transaction, if any, is closed with its connection.
    async fn clean_up(&mut self) -> Result<(), LockError> {
        if let Some(tx) = self.tx.take() {
            tx.abandon();
        }
        Ok(())
    }

    /// As a process that died: the connection closes, and PostgreSQL frees the lock.
    fn abandon(&mut self) {
        if let Some(tx) = self.tx.take() {
            tx.abandon();
        }
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    fn key(&self) -> &str {
        &self.name
    }
}
