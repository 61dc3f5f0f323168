//! The per-instance shares' scripts (`shares`): take a share of the pool, sell from it.

use std::time::Duration;

use redis::ScriptInvocation;
use seckill_lock::millis;

use super::{SHARE_SELL, SHARE_TAKE, Sale};
use crate::keys::ShardKeys;

/// `share_take.lua`: a new share, id `share`, of up to `units` (0: what the instance's
/// turn allows) taken from `shard`'s pool for `lease`, after the expired shares gave theirs
/// back. Its answer: `(Option<i64>, i64)` — the units taken (none without a stock key),
/// and the units held in other instances' shares.
pub(crate) fn share_take(
    shard: &ShardKeys,
    meta: &str,
    share: &str,
    units: i64,
    lease: Duration,
) -> ScriptInvocation<'static> {
    let mut script = SHARE_TAKE.prepare_invoke();
    script
        .key(&shard.stock)
        .key(&shard.shares)
        .key(&shard.share_leases)
        .key(meta)
        .key(&shard.audit)
        .arg(share)
        .arg(units)
        .arg(millis(lease));
    script
}

/// `share_sell.lua`: `sale`, a unit from share `share`, recorded, the share's lease renewed
/// for `lease`. Its answer: a [`Reply`] (the units left in the share, or why not —
/// [`Refusal::ShareGone`] when the share's lease ran out first).
pub(crate) fn share_sell(
    sale: &Sale<'_>,
    share: &str,
    lease: Duration,
) -> ScriptInvocation<'static> {
    let shard = sale.shard;
    let key = sale.keyed.unwrap_or_default();
    let mut script = SHARE_SELL.prepare_invoke();
    script
        .key(&shard.shares)
        .key(&shard.share_leases)
        .key(&shard.orders)
        .key(&shard.audit)
        .key(&shard.meta)
        .key(&shard.buyers)
        .arg(share)
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
