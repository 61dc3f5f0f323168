//! `deduct.lua`'s calls, written straight into one command.
//!
//! The lua path's call carries fourteen arguments a product, and a call may carry a hundred
//! products. [`redis::ScriptInvocation`] keeps each key and argument in a buffer of its
//! own, then copies them all into the command; [`deduct`] writes them once, into the
//! command's one buffer, and [`ScriptCall`] sends it as `redis::Script` would.

use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind};

use super::DEDUCT;
use crate::keys::ShardKeys;

/// One deduction of a [`deduct`] call.
#[derive(Debug, Clone, Copy)]
pub struct Deduct<'a> {
    pub order: &'a str,
    /// The buyer, or `""`.
    pub user: &'a str,
    pub holder: &'a str,
    /// The idempotency key, or `""`.
    pub key: &'a str,
}

/// A script's call, ready to send: its `EVALSHA`, keys and arguments in one command.
pub struct ScriptCall {
    script: &'static Script,
    evalsha: Cmd,
}

impl ScriptCall {
    /// Sends the call; when Redis does not know the script yet (after a restart, or on a
    /// master it never ran on), loads it and sends the call again, as
    /// [`redis::ScriptInvocation::invoke_async`] does.
    ///
    /// # Cancel safety
    ///
    /// As any command's: dropped once sent, the script may still run whole.
    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        con: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self.evalsha.query_async(con).await {
            Err(err) if err.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(con).await?;
                self.evalsha.query_async(con).await
            }
            answered => answered,
        }
    }
}

/// `deduct.lua` (the lock-free variant) for `lines`, each a shard and its sales, first
/// come first served, sold by `instance` as `variant`. Every line's keys must be on one
/// slot on a Redis Cluster (one line, then). Its answer: `Vec<Vec<`[`Reply`]`>>`, a line
/// each — empty without a stock key, else the stock before the call, then one reply per
/// sale (1 sold, 0 sold out, or why not).
///
/// [`Reply`]: super::Reply
pub fn deduct<'a, L, S>(instance: &str, variant: &str, lines: L) -> ScriptCall
where
    L: IntoIterator<Item = (&'a ShardKeys, S)>,
    L::IntoIter: Clone,
    S: IntoIterator<Item = Deduct<'a>>,
    S::IntoIter: Clone,
{
    let lines = lines.into_iter();
    // The keys come first, every line's, then the arguments: two passes over the lines.
    let (mut keys, mut args, mut bytes) = (0, 2, 64 + instance.len() + variant.len());
    for (shard, sales) in lines.clone() {
        keys += LINE_KEYS;
        args += 1;
        bytes += shard.stock.len() * LINE_KEYS + 48;
        for sale in sales {
            keys += usize::from(!sale.key.is_empty());
            args += 4;
            bytes += sale.order.len() + sale.user.len() + sale.holder.len();
            bytes += 2 * sale.key.len() + shard.stock.len() + 48;
        }
    }
    let mut evalsha = Cmd::with_capacity(3 + keys + args, bytes);
    evalsha.arg("EVALSHA").arg(DEDUCT.get_hash()).arg(keys);
    for (shard, sales) in lines.clone() {
        evalsha
            .arg(&shard.stock)
            .arg(&shard.orders)
            .arg(&shard.audit)
            .arg(&shard.meta)
            .arg(&shard.buyers)
            .arg(&shard.keys)
            .arg(&shard.stream)
            .arg(&shard.unpaid)
            .arg(&shard.void);
        for sale in sales {
            if !sale.key.is_empty() {
                evalsha.arg(shard.claim(sale.key));
            }
        }
    }
    evalsha.arg(instance).arg(variant);
    for (_, sales) in lines {
        let sales = sales.into_iter();
        debug_assert!(sales.clone().next().is_some(), "a line without a sale");
        evalsha.arg(sales.clone().count());
        for sale in sales {
            evalsha
                .arg(sale.order)
                .arg(sale.user)
                .arg(sale.holder)
                .arg(sale.key);
        }
    }
    ScriptCall {
        script: &DEDUCT,
        evalsha,
    }
}

/// The keys of a line before its claims: stock, orders, audit, meta, buyers, keys, stream,
/// unpaid, void (`deduct.lua`'s header).
const LINE_KEYS: usize = 9;
