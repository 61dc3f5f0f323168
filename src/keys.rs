//! Every Redis key the service touches, built in one place.
//!
//! Keys live under the `seckill:` prefix with a hash tag, so that one shard's stock, lock
//! and counters share a Redis Cluster slot while different shards may live on different
//! nodes: `seckill:{101}:stock` for an unsplit product, `seckill:{101/3}:stock` for shard 3.

use std::fmt;

/// Matches every lock's release channel: one subscription per instance serves them all.
pub const LOCK_CHANNEL_PATTERN: &str = "seckill:*:lock:released";

/// A product id that is safe to put inside a Redis key: `[A-Za-z0-9_-]{1,64}`.
///
/// Braces, colons, slashes and whitespace are refused, so a product id can never open
/// another hash tag or reach another product's keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProductId(String);

impl ProductId {
    pub const MAX_LEN: usize = 64;

    pub fn parse(raw: &str) -> Result<Self, String> {
        let valid_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if raw.is_empty() || raw.len() > Self::MAX_LEN || !raw.chars().all(valid_char) {
            return Err(format!(
                "product must match [A-Za-z0-9_-]{{1,{}}}",
                Self::MAX_LEN
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProductId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The product-wide keys: its metadata and its request counters.
#[derive(Debug, Clone)]
pub struct ProductKeys {
    pub product: ProductId,
    /// Hash: `initial`, `shards`.
    pub meta: String,
    /// Hash of counters of requests that sold nothing: `sold_out`, `lock_busy`. For an
    /// unsplit product it is the one shard's audit hash.
    pub audit: String,
}

impl ProductKeys {
    pub fn new(product: &ProductId) -> Self {
        let product_tag = tag(product.as_str(), None);
        Self {
            product: product.clone(),
            meta: key(&product_tag, "meta"),
            audit: key(&product_tag, "audit"),
        }
    }

    /// The keys of shard `index` of a product split into `shards`.
    ///
    /// An unsplit product (one shard) uses the product's own tag, `{101}`; a split one
    /// uses `{101/0}` … `{101/N-1}`.
    pub fn shard(&self, index: u32, shards: u32) -> ShardKeys {
        if shards <= 1 {
            ShardKeys::with_tag(&tag(self.product.as_str(), None), 0)
        } else {
            ShardKeys::with_tag(&tag(self.product.as_str(), Some(index)), index)
        }
    }
}

/// The keys of one shard of stock. All of them share one hash tag.
#[derive(Debug, Clone)]
pub struct ShardKeys {
    pub index: u32,
    /// String: the units left.
    pub stock: String,
    /// The lock guarding this stock (a string for setnx/token, a hash for watchdog).
    pub lock: String,
    /// Pub/sub channel a watchdog unlock publishes on.
    pub lock_channel: String,
    /// Sorted set of holders inside the critical section, scored by the time they must
    /// have left by; the audit counts an overlap when a holder enters a non-empty set.
    pub inside: String,
    /// Hash: order id -> "instance variant".
    pub orders: String,
    /// Hash of counters: `sold/<instance>/<variant>`, `lock_overlaps`, `lock_lost`.
    pub audit: String,
}

impl ShardKeys {
    fn with_tag(tag: &str, index: u32) -> Self {
        Self {
            index,
            stock: key(tag, "stock"),
            lock: key(tag, "lock"),
            lock_channel: key(tag, "lock:released"),
            inside: key(tag, "inside"),
            orders: key(tag, "orders"),
            audit: key(tag, "audit"),
        }
    }

    /// Every key of the shard, for a reset to delete.
    pub fn all(&self) -> [&str; 5] {
        [
            &self.stock,
            &self.lock,
            &self.inside,
            &self.orders,
            &self.audit,
        ]
    }
}

/// The hash tag: `{101}`, or `{101/3}` for shard 3.
fn tag(product: &str, shard: Option<u32>) -> String {
    match shard {
        None => format!("{{{product}}}"),
        Some(index) => format!("{{{product}/{index}}}"),
    }
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
    fn product_ids_cannot_smuggle_keys() {
        for bad in [
            "",
            "a}b",
            "{101}",
            "1 0",
            "a:b",
            "a/b",
            "é",
            "a\r\nb",
            &"x".repeat(65),
        ] {
            assert!(ProductId::parse(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["101", "sku_9-A", &"x".repeat(64)] {
            assert!(ProductId::parse(good).is_ok(), "{good:?} refused");
        }
    }

    #[test]
    fn shard_keys_share_a_hash_tag() {
        let product = ProductKeys::new(&ProductId::parse("101").unwrap());
        let one = product.shard(0, 1);
        assert_eq!(one.stock, "seckill:{101}:stock");
        let third = product.shard(3, 8);
        assert_eq!(third.stock, "seckill:{101/3}:stock");
        assert_eq!(third.lock, "seckill:{101/3}:lock");
        assert_eq!(product.meta, "seckill:{101}:meta");
    }
}
