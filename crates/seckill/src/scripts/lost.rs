//! The scripts a lost answer is settled with: look a sale up (voiding it if it never ran),
//! and fence a split product's shard for a repeat that took the idempotency key over.

use std::time::Duration;

use redis::ScriptInvocation;
use seckill_lock::millis;

use super::{IDEM_FENCE, RESOLVE};
use crate::keys::ShardKeys;

/// `resolve.lua`: whether `holder`'s sale `order` on `shard`, whose answer was lost, was
/// sold; voided when it was not.
pub fn resolve(shard: &ShardKeys, holder: &str, order: &str) -> ScriptInvocation<'static> {
    let mut script = RESOLVE.prepare_invoke();
    script
        .key(&shard.stock)
        .key(&shard.inside)
        .key(&shard.orders)
        .key(&shard.void)
        .key(&shard.audit)
        .arg(holder)
        .arg(order);
    script
}

/// `idem_fence.lua`: on `shard`, the order sold under idempotency key `key`, or a fence that
/// lets only `holder` sell under it there from now on, for `ttl`.
pub fn idem_fence(
    shard: &ShardKeys,
    key: &str,
    holder: &str,
    ttl: Duration,
) -> ScriptInvocation<'static> {
    let mut script = IDEM_FENCE.prepare_invoke();
    script
        .key(&shard.keys)
        .key(shard.key_fence(key))
        .key(&shard.audit)
        .arg(key)
        .arg(holder)
        .arg(millis(ttl).max(1));
    script
}
