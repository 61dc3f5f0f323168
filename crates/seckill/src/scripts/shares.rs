//! The per-instance shares' scripts (`shares`): claim a share of the pool, sell from it.

use std::time::Duration;

use redis::ScriptInvocation;
use seckill_lock::millis;

use super::{SHARE_CLAIM, SHARE_SELL, Sale};
use crate::keys::ShardKeys;

/// `share_claim.lua`: `claim` takes up to `units` (0: what the instance's turn allows)
/// from `shard`'s pool for `lease`, after the expired claims gave theirs back. Its answer:
/// `(Option<i64>, i64)` — the units claimed (none without a stock key), and the units held
/// in other instances' claims.
pub(crate) fn share_claim(
    shard: &ShardKeys,
    meta: &str,
    claim: &str,
    units: i64,
    lease: Duration,
) -> ScriptInvocation<'static> {
    let mut script = SHARE_CLAIM.prepare_invoke();
    script
        .key(&shard.stock)
        .key(&shard.claims)
        .key(&shard.claim_leases)
        .key(meta)
        .key(&shard.audit)
        .arg(claim)
        .arg(units)
        .arg(millis(lease));
    script
}

/// `share_sell.lua`: `sale`, a unit from claim `claim`, recorded, the claim's lease renewed
/// for `lease`. Its answer: a [`Reply`] (the units left in the claim, or why not —
/// [`Refusal::ShareGone`] when the claim ran out first).
pub(crate) fn share_sell(
    sale: &Sale<'_>,
    claim: &str,
    lease: Duration,
) -> ScriptInvocation<'static> {
    let shard = sale.shard;
    let key = sale.keyed.unwrap_or_default();
    let mut script = SHARE_SELL.prepare_invoke();
    script
        .key(&shard.claims)
        .key(&shard.claim_leases)
        .key(&shard.orders)
        .key(&shard.audit)
        .key(&shard.meta)
        .key(&shard.buyers)
        .arg(claim)
        .arg(millis(lease))
        .arg(sale.order)
        .arg(sale.instance)
        .arg(sale.variant)
        .arg(sale.user)
        .key(shard.claim(key))
        .key(&shard.keys)
        .key(&shard.stream)
        .key(&shard.unpaid)
        .key(&shard.void)
        .arg(sale.holder)
        .arg(key);
    script
}
