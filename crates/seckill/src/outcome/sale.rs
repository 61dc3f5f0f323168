//! What a sale came to, as values that must be resolved before anything is answered.
//!
//! A unit the script took is a [`Taken`]: sold on its shard's master, on no replica yet
//! that anyone knows of. A `200` is built only from a [`Confirmed`], and a `Confirmed` is
//! made only here: by [`confirm`] or a [`Verdict`] once as many replicas as
//! `--redis-wait-replicas` asks have the sale (or when none is asked), or by
//! [`Confirmed::in_database`] for a sale PostgreSQL committed. So no path — a cart, a
//! take-over, a replay, the background look-up — can answer `200` for a sale a failover may
//! still take back: the compiler sends it here first.
//!
//! What is not a sale is the caller's to prove: a script's refusal (it ran, and sold
//! nothing), or a lost answer looked up and voided (`variants/lost/`).

use std::sync::Arc;

use super::Counter;
use crate::keys::ShardKeys;
use crate::store::{Confirmations, Confirmed as Acked, RedisConn};

/// A unit taken and its order recorded on its shard's master: the script said so, or a
/// look-up found the order there. Not known to be on any replica.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "a unit taken is answered only once confirmed (sale::confirm)"]
pub struct Taken {
    /// The order's id.
    pub order: String,
    /// The shard it was sold from.
    pub shard: u32,
    /// Units left on that shard after it, when known.
    pub remaining: Option<i64>,
}

/// A unit taken that as many replicas as `--redis-wait-replicas` asks have (or none is
/// asked): what a `200` is made of. Made only in this module.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed(Taken);

impl Confirmed {
    /// A sale PostgreSQL committed (the `pg_*` variants): its transaction is its record,
    /// and no Redis replica is asked.
    pub fn in_database(taken: Taken) -> Self {
        Self(taken)
    }

    pub fn order(&self) -> &str {
        &self.0.order
    }

    pub fn shard(&self) -> u32 {
        self.0.shard
    }

    pub fn remaining(&self) -> Option<i64> {
        self.0.remaining
    }

    /// The sale, for what is written of it (a key's answer).
    pub fn taken(&self) -> &Taken {
        &self.0
    }
}

/// Whether the replicas had the sales of one call on one master ([`confirm_call`]): what
/// each of them is, taken with [`Verdict::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Verdict(bool);

impl Verdict {
    /// A call that sold nothing asks no replica: there is nothing to confirm.
    pub const NOTHING_TO_ASK: Self = Self(true);

    /// `taken`, one of the call's sales: confirmed when the call's were.
    pub fn of(self, taken: Taken) -> Result<Confirmed, Taken> {
        if self.0 {
            Ok(Confirmed(taken))
        } else {
            Err(taken)
        }
    }
}

/// `taken`, sold from `shard`: confirmed once the replicas asked for have it.
pub async fn confirm(
    confirmations: Option<&Arc<Confirmations>>,
    conn: &mut RedisConn,
    shard: &ShardKeys,
    taken: Taken,
) -> Result<Confirmed, Taken> {
    let verdict = confirm_call(confirmations, conn, &[(shard, 1)], &taken.order).await;
    verdict.of(taken)
}

/// After sales written to shards on one master (`sold`: each shard with its count of
/// sales; `witness`, an order id sold on the first): whether as many replicas as
/// `--redis-wait-replicas` asks have them (`confirmations`; one `WAIT` covers them all), or
/// none are asked for. The confirmation finds the witness on the master it asks, in the
/// same round trip: a master found again after the sale (a failover meanwhile) that lacks
/// it confirms nothing. When they do not, or cannot be asked now (every confirmation
/// connection in use, the master gone), the sales are counted as unconfirmed in each
/// shard's audit (on `conn`, the shared connection), where that can still be written.
pub async fn confirm_call(
    confirmations: Option<&Arc<Confirmations>>,
    conn: &mut RedisConn,
    sold: &[(&ShardKeys, i64)],
    witness: &str,
) -> Verdict {
    let (Some(confirmations), Some((first, _))) = (confirmations, sold.first()) else {
        return Verdict(true);
    };
    let confirmed = confirmations.confirm_recorded(&first.confirm, &first.orders, witness);
    match confirmed.await {
        Ok(Acked::Yes) => return Verdict(true),
        // Absent: the master found for the confirmation is not the one that took it (a
        // failover meanwhile), which lacks it.
        Ok(Acked::No | Acked::Absent) => {}
        Ok(Acked::Busy) => tracing::warn!(
            key = %first.stock,
            "every confirmation connection in use: the sale is answered unconfirmed"
        ),
        Err(err) => tracing::warn!(
            error = %err,
            key = %first.stock,
            "confirming the sale with replicas failed"
        ),
    }
    // One round trip for every shard, however many: the calls behind this one wait.
    let mut count = redis::pipe();
    for (shard, sales) in sold {
        count
            .hincr(&shard.audit, Counter::Unconfirmed.field(), *sales)
            .ignore();
    }
    let counted: Result<(), _> = count.query_async(conn).await;
    if let Err(err) = counted {
        tracing::warn!(error = %err, "unconfirmed sales not counted in the audit");
    }
    Verdict(false)
}

/// A sale recorded earlier (a key's answer given again, a sale a look-up or a take-over
/// found), asked of the replicas now.
#[derive(Debug)]
#[must_use]
pub enum Again {
    /// The replicas asked for have it (or none is asked).
    Confirmed(Confirmed),
    /// Its master has it; too few replicas do yet, or they could not be asked.
    Unconfirmed(Taken),
    /// The master that serves its shard now has no such order: a failover took it back
    /// (its replica was promoted without it). The caller voids its id there before it
    /// acts on that ([`crate::scripts::resolve`]): only then is it known never to run.
    Missing(Taken),
}

/// `taken`, confirmed at once when no replica is asked for (`--redis-wait-replicas 0`):
/// nothing to ask, and no need to find where it lives. Given back when replicas are asked.
pub fn unasked(
    confirmations: Option<&Arc<Confirmations>>,
    taken: Taken,
) -> Result<Confirmed, Taken> {
    match confirmations {
        None => Ok(Confirmed(taken)),
        Some(_) => Err(taken),
    }
}

/// `taken`, recorded on `shard` earlier, asked of the replicas again: on the master of
/// the shard's slot, in one round trip on one connection (so on one master, whatever a
/// failover does meanwhile), is the order there, then a marker and one `WAIT`, which covers
/// everything written there before, the order included. Nothing is counted: the sale was
/// counted when it was first answered.
pub async fn confirm_again(
    confirmations: Option<&Arc<Confirmations>>,
    shard: &ShardKeys,
    taken: Taken,
) -> Again {
    let Some(confirmations) = confirmations else {
        return Again::Confirmed(Confirmed(taken));
    };
    let asked = confirmations.confirm_recorded(&shard.confirm, &shard.orders, &taken.order);
    match asked.await {
        Ok(Acked::Yes) => Again::Confirmed(Confirmed(taken)),
        Ok(Acked::Absent) => Again::Missing(taken),
        Ok(Acked::No | Acked::Busy) | Err(_) => Again::Unconfirmed(taken),
    }
}
