//! Every Redis key the service touches, built in one place.
//!
//! Keys live under the `seckill:` prefix with a hash tag, so that one shard's stock, lock
//! and counters share a Redis Cluster slot while different shards may live on different
//! nodes: `seckill:{101}:stock` for an unsplit product, `seckill:{101/3}:stock` for shard 3.

use std::sync::{Arc, OnceLock};

use seckill_lock::{LockKeys, Namespace};

mod cache;
mod ids;
mod layout;

pub use cache::KeyCache;
pub use layout::{Layout, shard_tag};

pub use ids::{IdempotencyKey, ProductId, UserId};

/// Where the watchdog locks live: `seckill:<tag>:lock`, their release channels
/// `seckill:<tag>:lock:released`, all matched by the instance's one subscription.
pub const LOCK_PREFIX: &str = "seckill";

/// The locks' namespace ([`LOCK_PREFIX`]): it builds every lock's keys, here and in the
/// lock crate, and the subscription's pattern.
pub fn lock_namespace() -> Namespace {
    // Every lock name here is a shard's hash tag: refused at once if one ever is not.
    Namespace::new(LOCK_PREFIX).requiring_hash_tags()
}

/// Set of every shard's orders stream (`ShardKeys::stream`) the consumers read: a reset by
/// an instance with `--orders-db` adds its product's.
pub const ORDER_STREAMS: &str = "seckill:orders:streams";

/// Set of every shard's `unpaid` sorted set (`ShardKeys::unpaid`) the instances sweep for
/// expired reservations: a reset with a payment window adds its product's.
pub const UNPAID_SETS: &str = "seckill:orders:unpaid";

/// The shard whose `unpaid` set `unpaid` is (`seckill:{101/3.1}:unpaid`: a shard of 101,
/// split), its product, and whether the product is split; `None` for any other key.
/// (The shard's index is not in its key; it is 0 here.)
pub fn shard_of_unpaid(unpaid: &str) -> Option<(ProductId, bool, ShardKeys)> {
    let inner = unpaid.strip_prefix("seckill:{")?.strip_suffix("}:unpaid")?;
    let (product, split) = match inner.split_once('/') {
        Some((product, rest)) => {
            let placed = rest.chars().all(|c| c.is_ascii_digit() || c == '.');
            (product, (!rest.is_empty() && placed).then_some(true)?)
        }
        None => (inner, false),
    };
    let product = ProductId::parse(product).ok()?;
    Some((product, split, ShardKeys::with_tag(&tag(inner), 0)))
}

/// The shard whose orders stream `stream` is (`seckill:{101/3.1}:orders:stream`), if it is
/// one. (The shard's index is not in its key; it is 0 here.)
pub fn shard_of_stream(stream: &str) -> Option<ShardKeys> {
    let inner = stream
        .strip_prefix("seckill:{")?
        .strip_suffix("}:orders:stream")?;
    Some(ShardKeys::with_tag(&tag(inner), 0))
}

/// The order a shard's `keys` record of an idempotency key names, while it still counts
/// (`lib/critical.lua`'s `key_record`): the record is `<order> <until ms>`, kept for the
/// key's TTL, and past it (by `now_ms`, the wall clock, which the TTL's hours dwarf any skew
/// of) a reuse of the key is a new request. A record without a time counts.
pub fn key_record(record: &str, now_ms: i64) -> Option<&str> {
    match record.split_once(' ') {
        None => Some(record),
        Some((order, until)) => match until.parse::<i64>() {
            Ok(until) if until <= now_ms => None,
            _ => Some(order),
        },
    }
}

/// The product whose shard's orders stream `stream` is (`seckill:{101/3.1}:orders:stream`
/// is 101's), if it is one.
pub fn product_of_stream(stream: &str) -> Option<ProductId> {
    let tag = stream
        .strip_prefix("seckill:{")?
        .strip_suffix("}:orders:stream")?;
    ProductId::parse(tag.split('/').next()?).ok()
}

/// The consumer group every instance reads the orders' streams in (`crate::orders`).
pub const ORDERS_GROUP: &str = "orders";

/// The product-wide keys: its metadata and its request counters.
#[derive(Debug, Clone)]
pub struct ProductKeys {
    pub product: ProductId,
    /// Hash: `initial`, `shards`, `tags` (where each shard lives, see [`Layout`]),
    /// `per_user`, and `epoch` (bumped by every reset: an idempotency key's claim from an
    /// earlier sale no longer counts).
    pub meta: String,
    /// Hash of counters of requests that sold nothing: `sold_out`, `lock_busy`. For an
    /// unsplit product it is the one shard's audit hash.
    pub audit: String,
    /// A split product's per-user limit: hash user -> units reserved (taken before a
    /// shard sells, given back when none did). An unsplit product checks its shard's
    /// `buyers` instead.
    pub reserved: String,
    /// The keys of the whole stock, built at the first [`ProductKeys::whole`].
    whole: OnceLock<Arc<ShardKeys>>,
}

impl ProductKeys {
    pub fn new(product: &ProductId) -> Self {
        let product_tag = tag(product.as_str());
        Self {
            product: product.clone(),
            meta: key(&product_tag, "meta"),
            audit: key(&product_tag, "audit"),
            reserved: key(&product_tag, "reserved"),
            whole: OnceLock::new(),
        }
    }

    /// The record of the unit `holder` reserved for its buyer (`lua/reserve.lua`), on the
    /// meta's slot: given back at most once, by whoever learns first that no shard sold it.
    pub fn reservation(&self, holder: &str) -> String {
        key(
            &tag(self.product.as_str()),
            &format!("reservation:{holder}"),
        )
    }

    /// The waiting room's counter: the last number handed out (`INCR`), on the meta's slot.
    pub fn room_counter(&self) -> String {
        key(&tag(self.product.as_str()), "room:next")
    }

    /// The waiting room's buyers: hash buyer -> the number of their first arrival.
    pub fn room_buyers(&self) -> String {
        key(&tag(self.product.as_str()), "room:buyers")
    }

    /// A buyer's token bucket (`rate_limit`), on the audit's slot: the script that takes a
    /// token counts a refusal there.
    pub fn bucket(&self, user: &str) -> String {
        key(&tag(self.product.as_str()), &format!("bucket:{user}"))
    }

    /// The read-write lock that closes the product's sale (`/admin/close`), on the meta's
    /// slot.
    pub fn rw_keys(&self) -> seckill_lock::RwKeys {
        seckill_lock::RwKeys::under(&key(&tag(self.product.as_str()), "rw"))
    }

    /// The keys of the whole stock of an unsplit product, under the product's own tag
    /// (built once per `ProductKeys`).
    pub fn whole(&self) -> Arc<ShardKeys> {
        let whole = self
            .whole
            .get_or_init(|| Arc::new(ShardKeys::with_tag(&tag(self.product.as_str()), 0)));
        Arc::clone(whole)
    }

    /// The keys of shard `index` in `layout`.
    pub fn shard(&self, layout: &Layout, index: u32) -> ShardKeys {
        match layout.tags().get(index as usize) {
            Some(shard_tag) if layout.tags().len() > 1 => {
                ShardKeys::with_tag(&tag(shard_tag), index)
            }
            _ => ShardKeys::clone(&self.whole()),
        }
    }
}

/// The keys of one shard of stock. All of them share one hash tag.
#[derive(Debug, Clone)]
pub struct ShardKeys {
    pub index: u32,
    /// The shard's watchdog lock's name in [`lock_namespace`]: its hash tag.
    pub lock_name: String,
    /// String: the units left.
    pub stock: String,
    /// The lock guarding this stock (a string for setnx/token, a hash for watchdog).
    pub lock: String,
    /// Pub/sub channel a watchdog unlock publishes on.
    pub lock_channel: String,
    /// A fair watchdog lock's queue: a list of waiting owners, oldest first.
    pub lock_queue: String,
    /// A fair lock's waiters' deadlines: sorted set owner -> time (ms) after which a
    /// waiter that has not tried again leaves the queue.
    pub lock_waiting: String,
    /// Sorted set of holders inside the critical section, scored by the time they must
    /// have left by; the audit counts an overlap when a holder enters a non-empty set.
    pub inside: String,
    /// Hash: order id -> "instance variant" (and " user" when the buyer gave one).
    pub orders: String,
    /// Hash: user -> units this shard sold them, written with each order.
    pub buyers: String,
    /// Hash: idempotency key -> the order this shard sold under it, written with the order.
    pub keys: String,
    /// Stream of the orders this shard sold, for the orders' database (`--orders-db`): an
    /// entry per sale, appended by the script that takes the unit, when the stream exists
    /// (a reset by an instance with `--orders-db` creates it, with its consumer group). A
    /// later reset leaves it: the entries carry their sale's epoch, and what still waits
    /// for the database is never dropped.
    pub stream: String,
    /// With a payment window (`pay_within_ms` at reset): sorted set order id -> the time
    /// (ms) it must be paid by. A sale adds its order; a payment or its expiry removes it
    /// (`lua/pay.lua`, `lua/expire.lua`). Its size is the units reserved.
    pub unpaid: String,
    /// Hash: order id -> `paid` or `expired`, written once per order.
    pub settled: String,
    /// The product's meta (`per_user`) when the shard is the whole product; for a shard of
    /// a split product, a key on its slot that does not exist (no limit is checked there:
    /// the product's `reserved` is).
    pub meta: String,
    /// Hash of counters: `sold/<instance>/<variant>`, `lock_overlaps`, `lock_lost`,
    /// `voided` (order ids whose answer was lost, voided by `lua/resolve.lua`); and the
    /// sale's terms, written by its reset (`epoch`, `streamed`, `pay_within_ms`, `trace`,
    /// `per_user`).
    pub audit: String,
    /// Hash: `seen`, the highest fencing token that has read or written the shard's stock
    /// (the tokens come from the lock's own counter, `<lock>:token`, which a reset leaves).
    pub fence: String,
    /// `shares`: hash share id -> units of the share an instance holds not yet sold.
    pub shares: String,
    /// `shares`: sorted set share id -> time (ms) the share's lease runs out.
    pub share_leases: String,
    /// A marker written just before `WAIT`, on this slot, in whichever store a write of
    /// the shard's is confirmed (see `store::Confirmations`); it expires by itself.
    pub confirm: String,
    /// Stream: the shard's timeline, who entered and left its critical section and when,
    /// written only while a reset with `trace` says so (`GET /trace`), capped.
    pub trace: String,
    /// Hash: order id -> 1, for the sales whose answer was lost and that `lua/resolve.lua`
    /// found had not run: voided, so that they never run after.
    pub void: String,
    /// A split product's shard, with a payment window: hash expired order id -> its buyer,
    /// owed the reservation on the product's slot until it is given back.
    pub owed: String,
}

impl ShardKeys {
    fn with_tag(tag: &str, index: u32) -> Self {
        let lock = lock_namespace().keys(tag);
        Self {
            index,
            lock_name: tag.to_owned(),
            stock: key(tag, "stock"),
            lock: lock.lock().to_owned(),
            lock_channel: lock.channel().to_owned(),
            lock_queue: lock.queue().to_owned(),
            lock_waiting: lock.waiting().to_owned(),
            inside: key(tag, "inside"),
            orders: key(tag, "orders"),
            buyers: key(tag, "buyers"),
            keys: key(tag, "keys"),
            stream: key(tag, "orders:stream"),
            unpaid: key(tag, "unpaid"),
            settled: key(tag, "settled"),
            meta: key(tag, "meta"),
            audit: key(tag, "audit"),
            fence: key(tag, "fence"),
            shares: key(tag, "shares"),
            share_leases: key(tag, "shares:leases"),
            confirm: key(tag, "confirm"),
            trace: key(tag, "trace"),
            void: key(tag, "void"),
            owed: key(tag, "owed"),
        }
    }

    /// The keys of the shard whose stock key is `stock` (as [`ShardKeys::stock`] names it),
    /// shard `index` of its product.
    pub fn of_stock(stock: &str, index: u32) -> Self {
        let tag = stock
            .strip_prefix("seckill:")
            .and_then(|rest| rest.strip_suffix(":stock"))
            .unwrap_or(stock);
        Self::with_tag(tag, index)
    }

    /// The claim on idempotency key `idempotency` on this shard's slot (`""`: no key, a
    /// name that is never written). For an unsplit product, the key's one claim.
    pub fn claim(&self, idempotency: &str) -> String {
        let tag = &self.stock[..self.stock.len() - ":stock".len()];
        let mut claim = String::with_capacity(tag.len() + 6 + idempotency.len());
        claim.push_str(tag);
        claim.push_str(":idem:");
        claim.push_str(idempotency);
        claim
    }

    /// The fence of idempotency key `idempotency` on this shard's slot (a string, `"<epoch>
    /// <holder>"`): where a request sells under a key whose claim gets its answer after the
    /// sale (a split product's shard, a cart's line), the one holder that may still sell under
    /// the key here, once a repeat took the claim over (`lua/idem_fence.lua`).
    ///
    /// Apart from the claims' names (`:idem-fence:`, not the claim's name and a suffix): a
    /// key may hold `:`, and key `K:fence`'s claim would be key `K`'s fence.
    pub fn key_fence(&self, idempotency: &str) -> String {
        let tag = &self.stock[..self.stock.len() - ":stock".len()];
        let mut fence = String::with_capacity(tag.len() + 12 + idempotency.len());
        fence.push_str(tag);
        fence.push_str(":idem-fence:");
        fence.push_str(idempotency);
        fence
    }

    /// The shard's lock, as the watchdog lock takes its keys.
    pub fn lock_keys(&self) -> LockKeys {
        lock_namespace().keys(&self.lock_name)
    }

    /// The shard's keys in the lock store: the lock, a fair lock's queue, the marker.
    pub fn lock_side(&self) -> [&str; 4] {
        [
            &self.lock,
            &self.lock_queue,
            &self.lock_waiting,
            &self.confirm,
        ]
    }

    /// The shard's keys in the stock store (all but its lock), for a reset to delete.
    /// (Not its orders stream: what waits there for the database outlives a reset.)
    pub fn stock_side(&self) -> [&str; 15] {
        [
            &self.stock,
            &self.inside,
            &self.orders,
            &self.unpaid,
            &self.settled,
            &self.buyers,
            &self.keys,
            &self.audit,
            &self.fence,
            &self.shares,
            &self.share_leases,
            &self.confirm,
            &self.trace,
            &self.void,
            &self.owed,
        ]
    }
}

/// The hash tag: `{101}`, or `{101/3}` for shard 3.
fn tag(inner: &str) -> String {
    format!("{{{inner}}}")
}

/// `seckill:<tag>:<name>`. Built by hand rather than with `format!`: every deduction
/// builds half a dozen keys, and this is several times cheaper.
fn key(tag: &str, name: &str) -> String {
    let mut key = String::with_capacity(9 + tag.len() + name.len());
    key.push_str("seckill:");
    key.push_str(tag);
    key.push(':');
    key.push_str(name);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_found_again_from_its_stock_key() {
        let id = ProductId::parse("101").unwrap();
        let keys = ProductKeys::new(&id);
        let layout = Layout::plain(&id, 4);
        let shard = keys.shard(&layout, 3);
        let again = ShardKeys::of_stock(&shard.stock, 3);
        assert_eq!(again.stock, shard.stock);
        assert_eq!(again.orders, shard.orders);
        assert_eq!(again.void, shard.void);
        assert_eq!(again.index, 3);
    }

    #[test]
    fn claims_streams_and_unpaid_sets_name_their_shard() {
        let id = ProductId::parse("101").unwrap();
        let claim = ProductKeys::new(&id).whole().claim("k:1.a");
        assert_eq!(claim, "seckill:{101}:idem:k:1.a");
        // No key's claim is another key's fence, whatever `:` the keys hold.
        let whole = ProductKeys::new(&id).whole();
        assert_eq!(whole.key_fence("k"), "seckill:{101}:idem-fence:k");
        for (a, b) in [("k:fence", "k"), ("k", "k:fence"), ("idem-fence:k", "k")] {
            assert_ne!(whole.claim(a), whole.key_fence(b), "{a} {b}");
        }
        let placed = Layout::from_meta(&id, 2, Some("101/0,101/1.4"));
        let stream = ProductKeys::new(&id).shard(&placed, 1).stream;
        assert_eq!(product_of_stream(&stream), Some(id.clone()));
        assert_eq!(product_of_stream("seckill:{a}b}:orders:stream"), None);
        let shard = ProductKeys::new(&id).shard(&placed, 1);
        let (product, split, found) = shard_of_unpaid(&shard.unpaid).unwrap();
        assert_eq!(
            (product, split, found.stock),
            (id.clone(), true, shard.stock)
        );
        let whole = ProductKeys::new(&id).whole();
        let (product, split, found) = shard_of_unpaid(&whole.unpaid).unwrap();
        assert_eq!(
            (product, split, found.settled),
            (id, false, whole.settled.clone())
        );
        for bad in [
            "seckill:{a:b}:unpaid",
            "seckill:{1/x}:unpaid",
            "seckill:{1/}:unpaid",
        ] {
            assert!(shard_of_unpaid(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_key_record_counts_until_its_time() {
        assert_eq!(key_record("o-1 2000", 1_999), Some("o-1"));
        assert_eq!(key_record("o-1 2000", 2_000), None);
        assert_eq!(key_record("o-1", i64::MAX), Some("o-1"));
    }

    #[test]
    fn shard_keys_share_a_hash_tag() {
        let id = ProductId::parse("101").unwrap();
        let product = ProductKeys::new(&id);
        let one = product.shard(&Layout::plain(&id, 1), 0);
        assert_eq!(one.stock, "seckill:{101}:stock");
        let third = product.shard(&Layout::plain(&id, 8), 3);
        assert_eq!(third.stock, "seckill:{101/3}:stock");
        assert_eq!(third.lock, "seckill:{101/3}:lock");
        assert_eq!(product.meta, "seckill:{101}:meta");
        let placed = Layout::from_meta(&id, 2, Some("101/0,101/1.4"));
        assert_eq!(product.shard(&placed, 1).stock, "seckill:{101/1.4}:stock");
    }

    #[test]
    fn recorded_tags_cannot_reach_other_keys() {
        let id = ProductId::parse("101").unwrap();
        for bad in [
            "101/0,102/1",
            "101/0,101/}x",
            "101/0",
            "101/0,101/",
            "101/0,101/1,101/2",
        ] {
            assert_eq!(
                Layout::from_meta(&id, 2, Some(bad)),
                Layout::plain(&id, 2),
                "{bad}"
            );
        }
    }
}
