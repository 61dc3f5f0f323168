//! The scripts around a reservation: a split product's per-buyer unit reserved and given
//! back, and an order paid for or expired on its shard.

use std::time::Duration;

use redis::{Script, ScriptInvocation};
use seckill_lock::millis;

use super::{EXPIRE, PAY, RESERVE};
use crate::keys::{ProductKeys, ShardKeys};

/// `reserve.lua take`: one unit of `product` for `holder`'s buyer `user`, the record kept
/// for `keep`, and noted in the idempotency key's claim `claim` when it is `holder`'s.
pub fn reserve(
    product: &ProductKeys,
    holder: &str,
    user: &str,
    claim: &str,
    keep: Duration,
) -> ScriptInvocation<'static> {
    let mut script = RESERVE.prepare_invoke();
    script
        .key(&product.meta)
        .key(&product.reserved)
        .key(product.reservation(holder))
        .key(claim)
        .arg("take")
        .arg(user)
        .arg(holder)
        .arg(millis(keep).max(1));
    script
}

/// `reserve.lua give`: `holder`'s reservation of `product` back to its buyer, if it is
/// still there.
pub fn give_back(product: &ProductKeys, holder: &str) -> ScriptInvocation<'static> {
    let mut script = RESERVE.prepare_invoke();
    script
        .key(&product.meta)
        .key(&product.reserved)
        .key(product.reservation(holder))
        .key(product.whole().claim(""))
        .arg("give");
    script
}

/// `reserve.lua return`: expired order `order`'s unit of `product` back to its buyer
/// `buyer`, once per order.
pub fn return_expired(
    product: &ProductKeys,
    order: &str,
    buyer: &str,
) -> ScriptInvocation<'static> {
    let mut script = RESERVE.prepare_invoke();
    let mark = expired_mark(product, order);
    script
        .key(&product.meta)
        .key(&product.reserved)
        .key(&mark)
        .key(product.whole().claim(""))
        .arg("return")
        .arg(buyer);
    script
}

/// The mark that expired order `order`'s unit went back to its buyer
/// ([`return_expired`]): kept until the shard's note of the debt is struck.
pub fn expired_mark(product: &ProductKeys, order: &str) -> String {
    product.reservation(&format!("expired:{order}"))
}

/// The keys `pay.lua` and `expire.lua` both take, for `shard`.
fn settling(script: &'static Script, shard: &ShardKeys) -> ScriptInvocation<'static> {
    let mut script = script.prepare_invoke();
    script
        .key(&shard.unpaid)
        .key(&shard.settled)
        .key(&shard.stock)
        .key(&shard.orders)
        .key(&shard.buyers)
        .key(&shard.audit)
        .key(&shard.stream)
        .key(&shard.owed);
    script
}

/// `pay.lua`: pay for `order` on `shard` (`split`: a shard of a split product).
pub fn pay(shard: &ShardKeys, split: bool, order: &str) -> ScriptInvocation<'static> {
    let mut script = settling(&PAY, shard);
    script.arg(order).arg(if split { "1" } else { "0" });
    script
}

/// `expire.lua`: expire up to `at_most` of `shard`'s reservations that are due (`split`: a
/// shard of a split product, whose buyers are owed their reservations).
pub fn expire(shard: &ShardKeys, split: bool, at_most: usize) -> ScriptInvocation<'static> {
    let mut script = settling(&EXPIRE, shard);
    script.arg(at_most).arg(if split { "1" } else { "0" });
    script
}
