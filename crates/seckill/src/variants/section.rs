//! The critical section every lock variant shares — the seed's business logic (read the
//! stock, check it, work, take one unit) with the audit around it — and the one lock
//! sequence around it, [`Deduction::under_lock`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::AsyncCommands;
use seckill_lock::{Lock, LockError};
use uuid::Uuid;

use super::{Deduction, Outcome};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::scripts::{self, Leaving};
pub(crate) use crate::scripts::{Credentials, Refusal, Reply, StockWrite};
use crate::store::{Confirmations, Confirmed, RedisConn};
use crate::timer;

pub use crate::knobs::INSIDE_MARGIN;

/// How a lock variant's critical section reaches Redis: the one thing the lock variants'
/// sequences differ in ([`Deduction::under_lock`] is the sequence). [`FourTrips`] takes the
/// lock, enters, commits and gives the lock back in four round trips, for every lock and
/// lock store; the watchdog lock beside the stock does it in two (`watchdog::TwoTrips`:
/// the lock's try enters, the commit gives the lock back or hands it on).
pub(super) trait Trips: Send {
    /// The lock held, for what the section asks of it: its lease, its renewals, whether it
    /// knows itself lost.
    type Lock: Lock;

    fn lock(&self) -> &Self::Lock;

    /// Takes the lock, waiting up to `wait`, and enters `shard`'s critical section.
    fn enter(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        wait: Duration,
    ) -> impl Future<Output = Result<Entry, AppError>> + Send;

    /// Leaves without selling, for `why`.
    fn leave(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        why: Leaving,
    ) -> impl Future<Output = Result<(), AppError>> + Send;

    /// Takes one unit as sale `order`, records it and leaves: what the script said.
    fn commit(
        &mut self,
        d: &Deduction,
        shard: &ShardKeys,
        order: &str,
    ) -> impl Future<Output = Result<Reply, AppError>> + Send;

    /// Gives the lock back, if the leave or the commit did not, once what the section
    /// came to is known (`held`, its lost answer looked up).
    fn release(
        self,
        d: &Deduction,
        held: &Result<Outcome, AppError>,
    ) -> impl Future<Output = ()> + Send;
}

/// What taking the lock and entering came to.
pub(super) enum Entry {
    /// Inside, holding the lock, with the stock read there (`None`: no stock key).
    Inside { stock: Option<i64> },
    /// Not inside, and holding nothing: the lock busy, not confirmed, or abandoned.
    Out(Outcome),
}

impl Deduction {
    /// The one lock sequence, whatever the lock and however it reaches Redis (`trips`):
    /// take the lock and enter `shard`'s critical section (waiting up to `wait`), read
    /// the stock, check it, work, take one unit and leave — then give the lock back,
    /// whatever the section came to (an error included), as the seed's `finally` does;
    /// a commit whose answer was lost is looked up first ([`Deduction::learn`]), since it
    /// may still run and must find the lock held when it does.
    pub(super) async fn under_lock(
        &self,
        shard: &ShardKeys,
        mut trips: impl Trips,
        wait: Duration,
    ) -> Result<Outcome, AppError> {
        self.timeline.waiting();
        let stock = match trips.enter(self, shard, wait).await? {
            Entry::Inside { stock } => stock,
            Entry::Out(outcome) => return Ok(outcome),
        };
        let held = self.critical_section(shard, &mut trips, stock).await;
        let held = self.learn(held).await;
        trips.release(self, &held).await;
        held
    }

    /// The seed's business logic, inside the lock: check the stock read on entering,
    /// work, take one unit and leave.
    async fn critical_section(
        &self,
        shard: &ShardKeys,
        trips: &mut impl Trips,
        stock: Option<i64>,
    ) -> Result<Outcome, AppError> {
        let Some(stock) = stock else {
            return Err(self.not_for_sale().await);
        };
        if stock <= 0 {
            trips.leave(self, shard, Leaving::SoldOut).await?;
            return Ok(Outcome::SoldOut { remaining: stock });
        }
        self.work().await;
        self.timeline.renewed(trips.lock().renewals());
        if trips.lock().is_lost() {
            // The holder knows its lock is gone: it must not commit.
            trips.leave(self, shard, Leaving::LockLost).await?;
            return Ok(Outcome::LockLost);
        }
        if let Some(stop) = self.knobs.stop_before_commit() {
            stop_the_world(stop);
            // Whatever else was in flight over the stop timed out on waking, and the
            // connection may be replaced for it: the commit goes once the stock store answers.
            for _ in 0..20 {
                let answered: Result<String, _> =
                    redis::cmd("PING").query_async(&mut self.redis()).await;
                if answered.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let order = Uuid::now_v7().to_string();
        match trips.commit(self, shard, &order).await? {
            Reply::Units(remaining) => Ok(self.sold(shard, order, remaining).await),
            Reply::Refused(why) => self.refused(why).await,
        }
    }

    /// The business time the seeds spend inside the critical section: `work_ms`, to the
    /// tens of microseconds ([`timer`]), and measured.
    pub async fn work(&self) {
        let work = self.knobs.work();
        if work.is_zero() {
            return;
        }
        let started = tokio::time::Instant::now();
        timer::sleep(work).await;
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.worked_us.store(took, Ordering::Relaxed);
    }

    /// How long the work really took, when there was any.
    pub fn worked(&self) -> Option<Duration> {
        match self.worked_us.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }

    /// Why there was no stock key: a product split into shards is sold by the variants
    /// that split stock only; any other product was never reset (or Redis lost it) and is
    /// not for sale.
    pub async fn not_for_sale(&self) -> AppError {
        let meta: Result<(Option<u32>, Option<String>), _> = redis::cmd("HMGET")
            .arg(&self.product.meta)
            .arg("shards")
            .arg("stock_in")
            .query_async(&mut self.redis())
            .await;
        let product = &self.product.product;
        match meta {
            // Its stock is a row in the database.
            Ok((_, Some(stock_in))) if stock_in == "postgres" => AppError::BadRequest(format!(
                "product {product} keeps its stock in PostgreSQL (stock_in postgres): only {} \
                 sells it",
                variants_that(|spec| spec.stock_in_database)
            )),
            Ok((Some(n), _)) if n > 1 => AppError::BadRequest(format!(
                "product {product} is split into {n} shards; only {} sells it",
                variants_that(|spec| spec.splits_stock)
            )),
            Ok(_) => AppError::UnknownProduct(product.to_string()),
            Err(err) => err.into(),
        }
    }

    /// What this holder says of itself as it enters, on the product's timeline (used only
    /// if the product is traced), its lock granted with `lease`.
    pub(super) fn entering(&self, lease: Option<Duration>) -> String {
        self.timeline
            .entering(&self.app.settings.instance, self.variant.name(), lease)
    }

    /// Leaves `shard`'s critical section without selling, for `why`.
    pub(super) async fn leave(&self, shard: &ShardKeys, why: Leaving) -> Result<(), AppError> {
        let note = self.timeline.leaving();
        let _: i64 = scripts::leave(shard, &self.holder, why, &note)
            .invoke_async(&mut self.redis())
            .await?;
        Ok(())
    }

    /// Takes one unit, records the order and leaves the critical section, in one round trip.
    pub(super) async fn commit(
        &self,
        shard: &ShardKeys,
        write: StockWrite,
        credentials: Credentials<'_>,
    ) -> Result<Outcome, AppError> {
        let order = Uuid::now_v7().to_string();
        let reply: Reply = scripts::commit(&self.sale(shard, &order), write, credentials)
            .invoke_async(&mut self.redis())
            .await?;
        self.answered();
        match reply {
            Reply::Units(remaining) => Ok(self.sold(shard, order, remaining).await),
            Reply::Refused(why) => self.refused(why).await,
        }
    }

    /// This deduction's sale from `shard`, recorded as `order`, as the commit scripts take
    /// it; noted as sent ([`Deduction::sending`]), since it is about to be.
    pub(super) fn sale<'a>(&'a self, shard: &'a ShardKeys, order: &'a str) -> scripts::Sale<'a> {
        self.sending(shard, order);
        scripts::Sale {
            shard,
            holder: &self.holder,
            order,
            instance: &self.app.settings.instance,
            variant: self.variant.name(),
            user: self.user(),
            keyed: self.claim.as_ref().map(|claim| claim.key.as_str()),
            // Whether the sale leaves the key's claim alone: it lives on another slot (a
            // split product's shard), or its answer comes after the sale (a cart).
            split: self.claim.as_ref().is_some_and(|claim| {
                self.answers_after_sale() || claim.record() != shard.claim(claim.key.as_str())
            }),
            trace: self.timeline.leaving(),
        }
    }

    /// What a script's refusal to sell answers: every variant's, in one place.
    pub(super) async fn refused(&self, why: Refusal) -> Result<Outcome, AppError> {
        match why {
            Refusal::Gone => Err(self.not_for_sale().await),
            Refusal::LockLost => Ok(Outcome::LockLost),
            Refusal::Fenced => Ok(Outcome::Fenced),
            Refusal::LimitReached => Ok(Outcome::LimitReached),
            Refusal::UserRequired => Err(AppError::BadRequest(format!(
                "product {} limits the units one buyer may have: name the buyer with user",
                self.product.product
            ))),
            // Another request serves the key now, or this sale was given up for unsold:
            // either way, another request's answer is the one that counts.
            Refusal::TakenOver | Refusal::Voided => Ok(Outcome::InFlight),
            // The share's units went back to the pool: `shares` tries again before this.
            Refusal::ShareGone => Ok(Outcome::LockBusy),
        }
    }

    /// A unit sold and recorded: a 200, once as many replicas as asked for have it.
    pub(super) async fn sold(&self, shard: &ShardKeys, order: String, remaining: i64) -> Outcome {
        let confirm = self.app.sale_confirmations.as_ref();
        if !confirm_sales(confirm, &mut self.redis(), shard, 1).await {
            return Outcome::Unconfirmed {
                order,
                shard: shard.index,
            };
        }
        Outcome::Deducted {
            remaining,
            order,
            shard: shard.index,
        }
    }

    /// With `fence=on`, a fencing token for a holder that has just taken `shard`'s lock,
    /// from a lock that issues none itself: the next number of the lock's token counter
    /// (`<lock>:token`, the one a fenced watchdog lock's take increments), kept in the stock
    /// store. The stock store issues it because the stock store is what checks it: the
    /// counter and the highest token seen sit on the shard's slot, so whatever happens to
    /// the lock store (a failover that forgets a lock), the same token is never handed out
    /// twice while the stock remembers tokens; and a reset, which forgets the tokens seen,
    /// leaves the counter to go on growing.
    pub(super) async fn fencing_token(&self, shard: &ShardKeys) -> Result<Option<i64>, AppError> {
        if !self.knobs.fence() {
            return Ok(None);
        }
        // The lock's own token counter, which a fenced watchdog lock's take increments too:
        // one sequence per lock, whichever variant draws from it.
        let token: i64 = self.redis().incr(shard.lock_keys().token(), 1).await?;
        Ok(Some(token))
    }

    /// With `--lock-wait-replicas`, whether enough replicas of the lock store have the
    /// lock just taken on `shard` (Redisson's `checkLockSyncedSlaves`). A confirmation that
    /// cannot be asked now (every connection for it in use) is no confirmation.
    pub(super) async fn lock_confirmed(&self, shard: &ShardKeys) -> Result<bool, AppError> {
        let Some(confirmations) = &self.app.lock_confirmations else {
            return Ok(true);
        };
        Ok(confirmations.confirm(&shard.confirm).await? == Confirmed::Yes)
    }

    /// A release that did not go as it should is worth a line in the log.
    pub(super) fn log_release(&self, released: Result<bool, LockError>) {
        log_release(self.variant, &self.holder, released);
    }
}

/// The variants whose spec says `which`, by name: "the segmented variant", "the
/// pg_update, pg_for_update or pg_version variant".
fn variants_that(which: fn(&super::Spec) -> bool) -> String {
    let names: Vec<&str> = super::VARIANTS
        .iter()
        .filter(|v| which(v.spec()))
        .map(|v| v.name())
        .collect();
    match names.split_last() {
        Some((last, [])) => format!("the {last} variant"),
        Some((last, others)) => format!("the {} or {last} variant", others.join(", ")),
        None => "no variant".into(),
    }
}

/// A release by `holder` of `variant` that did not go as it should, in the log.
pub(super) fn log_release(
    variant: super::Variant,
    holder: &str,
    released: Result<bool, LockError>,
) {
    match released {
        Ok(true) => {}
        Ok(false) => tracing::warn!(
            %variant,
            holder,
            "lock was no longer ours at release: the work outlasted it"
        ),
        Err(err) => tracing::warn!(
            %variant,
            holder,
            error = %err,
            "lock release failed; it stays until it expires (setnx: until deleted by hand)"
        ),
    }
}

/// `fault=stop_before_commit`: the whole process stops for `pause` — every thread, the lock
/// store's client and its pings too, as in a stop-the-world GC pause — right after the
/// holder's last check that it still holds its lock. A child `sh` waits until the process
/// is stopped, then `pause`, then lets it go on (SIGCONT, once).
fn stop_the_world(pause: Duration) {
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

/// After `count` sales written to `shard`: true when as many replicas as
/// `--redis-wait-replicas` asks have them (`confirmations`), or none are asked for. When
/// they do not, or cannot be asked now (every confirmation connection in use, the master
/// gone), the sales are counted as unconfirmed in the shard's audit (on `conn`, the shared
/// connection), where that can still be written.
pub(super) async fn confirm_sales(
    confirmations: Option<&Arc<Confirmations>>,
    conn: &mut RedisConn,
    shard: &ShardKeys,
    count: i64,
) -> bool {
    let Some(confirmations) = confirmations else {
        return true;
    };
    match confirmations.confirm(&shard.confirm).await {
        Ok(Confirmed::Yes) => return true,
        Ok(Confirmed::No) => {}
        Ok(Confirmed::Busy) => tracing::warn!(
            key = %shard.stock,
            "every confirmation connection in use: the sale is answered unconfirmed"
        ),
        Err(err) => tracing::warn!(
            error = %err,
            key = %shard.stock,
            "confirming the sale with replicas failed"
        ),
    }
    let counted: Result<i64, _> = conn.hincr(&shard.audit, "unconfirmed", count).await;
    if let Err(err) = counted {
        tracing::warn!(error = %err, "unconfirmed sales not counted in the audit");
    }
    false
}
