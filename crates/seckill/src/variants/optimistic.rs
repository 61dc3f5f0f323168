//! `optimistic` — no lock: `WATCH` the stock, read it, work, then `MULTI`, the sale, `EXEC`.
//!
//! Seed 000's rule 8: below about 20 % conflict probability prefer an optimistic lock to a
//! pessimistic one, and retry it at least three times. Redis's version is `WATCH`: when the
//! stock changed between the read and `EXEC` — another buyer sold a unit — `EXEC` answers
//! nil and nothing of the transaction runs. That is a conflict: the deduction reads again
//! and tries again, up to `retries` times with a short random pause, and then answers 429
//! `conflict`. Nothing is ever oversold; what it costs under contention is buyers turned
//! away while units are left (`/stats` `undersold`), and the tries spent
//! (`optimistic.conflicts`). Spread over many products the conflicts fall away, and it
//! sells without any lock's round trips; `seckill-bench --suite contention` measures where.
//!
//! `WATCH` is state of the connection that sent it, so a transaction cannot run on the
//! instance's shared multiplexed connection: it takes a connection of its own to the
//! master of the stock's slot (a pool per master, `--tx-connections` each; every one in
//! use for `--redis-timeout-ms` is a 503 `tx_busy`). On a Cluster one transaction is one
//! slot: the shard's keys share a hash tag. The sale inside `MULTI` is the same commit
//! script every variant uses, so the order, the audit, the per-user limit and the
//! idempotency key are written as everywhere else.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, ServerErrorKind};
use tokio::time::Instant;
use uuid::Uuid;

use super::section;
use super::{Deduction, Outcome, Spec, Start};
use crate::error::AppError;
use crate::keys::ShardKeys;
use crate::knobs::{Kind, Knob, WORK_MS};
use crate::scripts;
use crate::scripts::{Credentials, Reply, StockWrite};
use crate::store::{MasterPools, drop_broken};

/// `retries`: how many times a transaction that found the stock changed is tried again.
pub const RETRIES: Knob = Knob {
    name: "retries",
    doc: "optimistic, pg_version: how many times a try that found the stock changed (EXEC \
          answered nil; the version check updated no row) is tried again before the request \
          is answered 429 conflict; 0 to 10, default 3 (the seed's rule: retry at least three \
          times).",
    kind: Kind::Count { min: 0, max: 10 },
};

/// The seed's "at least three times".
pub const DEFAULT_RETRIES: i64 = 3;

pub static SPEC: Spec = Spec {
    name: "optimistic",
    summary: "WATCH the stock, MULTI/EXEC the sale: no lock, a changed stock aborts the transaction; retried, then 429 conflict",
    color: "#9e9d24",
    knobs: &[WORK_MS, RETRIES, super::close_guard::GUARD],
    in_progression: true,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: false,
    // Cut short between WATCH and EXEC, its connection would go back to the pool mid-way.
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

/// The instance's transaction connections: a pool per master.
pub struct Transactions {
    pools: MasterPools<()>,
}

/// The instance's transaction connections (`--tx-connections` per master).
pub(super) fn start(start: &Start<'_>) -> anyhow::Result<Transactions> {
    let size = usize::try_from(start.tx_connections).unwrap_or(1);
    Ok(Transactions {
        pools: MasterPools::new(start.store, size)?,
    })
}

/// What one try came to.
enum Tried {
    Done(Outcome),
    /// `EXEC` answered nil: the stock changed after the read.
    Conflict,
    /// Redis did not know the commit script (a restart, `SCRIPT FLUSH`): it is loaded now.
    Loaded,
}

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let pools = &d.app.variant_state.optimistic.pools;
    let shard = d.whole_stock();
    let master = pools.master_of(&shard.stock).await?;
    let mut conn = match master.checkout(pools.timeout(), pools.timeout()).await {
        Ok(Some(conn)) => conn,
        Ok(None) => return Ok(Outcome::TxBusy),
        Err(err) => {
            pools.forget_slots().await;
            return Err(err.into());
        }
    };
    let mut conflicts = 0;
    let tried = tries(d, &shard, &mut conn, &mut conflicts).await;
    if tried.is_err() {
        // Failed between WATCH and EXEC, or to a master that is gone.
        drop_broken(conn);
        pools.forget_slots().await;
    }
    if conflicts > 0 {
        let counted = redis::cmd("HINCRBY")
            .arg(&shard.audit)
            .arg("tx_conflicts")
            .arg(conflicts)
            .exec_async(&mut d.redis())
            .await;
        if let Err(err) = counted {
            tracing::warn!(error = %err, conflicts, "conflicts not counted in the audit");
        }
    }
    tried
}

/// Tries until a try is not a conflict, `retries` times more at most, and not past the
/// instance's longest wait (`--max-wait-ms`), so that the request timeout is never reached.
async fn tries(
    d: &Deduction,
    shard: &ShardKeys,
    conn: &mut MultiplexedConnection,
    conflicts: &mut i64,
) -> Result<Outcome, AppError> {
    let retries = d.knobs.count(&RETRIES).unwrap_or(DEFAULT_RETRIES);
    let budget = Duration::from_millis(d.app.settings.limits.max_wait_ms);
    let started = Instant::now();
    let mut loaded = false;
    loop {
        match try_once(d, shard, conn).await? {
            Tried::Done(outcome) => return Ok(outcome),
            Tried::Loaded if !loaded => loaded = true,
            Tried::Loaded => {
                return Err(AppError::Internal(anyhow::anyhow!(
                    "the commit script was unknown to Redis twice in one deduction"
                )));
            }
            Tried::Conflict => {
                *conflicts += 1;
                if *conflicts > retries || started.elapsed() >= budget {
                    return Ok(Outcome::Conflict);
                }
                // Apart from the others that lost the same race, up to a millisecond per
                // conflict so far.
                let jitter = fastrand::u64(0..=1_000 * conflicts.unsigned_abs());
                tokio::time::sleep(Duration::from_micros(jitter)).await;
            }
        }
    }
}

/// One try: watch and read the stock, work, and sell in a transaction that runs only if
/// the stock is still what was read.
async fn try_once(
    d: &Deduction,
    shard: &ShardKeys,
    conn: &mut MultiplexedConnection,
) -> Result<Tried, AppError> {
    // UNWATCH first: a try that stopped after its read (sold out) left its WATCH behind.
    let (stock,): (Option<i64>,) = redis::pipe()
        .cmd("UNWATCH")
        .ignore()
        .cmd("WATCH")
        .arg(&shard.stock)
        .ignore()
        .get(&shard.stock)
        .query_async(conn)
        .await?;
    let Some(stock) = stock else {
        return Err(d.not_for_sale().await);
    };
    if stock <= 0 {
        return Ok(Tried::Done(Outcome::SoldOut { remaining: stock }));
    }
    section::work(d).await;
    let order = Uuid::now_v7().to_string();
    let sale = d.sale(shard, &order);
    let commit = scripts::commit(&sale, StockWrite::Decrement, Credentials::default());
    // The audit counts the transactions that ran, for the conflict rate.
    let executed: Result<Option<(Reply,)>, RedisError> = redis::pipe()
        .atomic()
        .invoke_script(&commit)
        .cmd("HINCRBY")
        .arg(&shard.audit)
        .arg("tx_commits")
        .arg(1)
        .ignore()
        .query_async(conn)
        .await;
    if executed.is_ok() {
        d.lost.answered();
    }
    let reply = match executed {
        Ok(Some((reply,))) => reply,
        Ok(None) => return Ok(Tried::Conflict),
        Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            // EXEC ran the transaction's other command: it counted a commit that sold
            // nothing.
            commit.load_async(conn).await?;
            redis::cmd("HINCRBY")
                .arg(&shard.audit)
                .arg("tx_commits")
                .arg(-1)
                .exec_async(conn)
                .await?;
            return Ok(Tried::Loaded);
        }
        Err(err) => return Err(err.into()),
    };
    match reply {
        Reply::Units(remaining) => Ok(Tried::Done(d.sold(shard, order, remaining).await)),
        Reply::Refused(why) => d.refused(why).await.map(Tried::Done),
    }
}
