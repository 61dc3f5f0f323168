//! The servers the nemesis runs against, and the sales it runs: one product per variant.

use std::time::{Duration, Instant};

use seckill_testkit::{Api, Instance, Nginx, Postgres, RedisServer, ZooKeeperEnsemble};
use serde_json::json;

use crate::SECKILL;

/// One product's sale: who sells it and how it was reset.
pub struct Sale {
    pub product: &'static str,
    /// `variant?knobs`, without `product` and `user`.
    pub path: &'static str,
    pub shards: u32,
    pub stock: i64,
    pub per_user: i64,
    /// Buyers `u0` … `u<users-1>` click on it.
    pub users: u32,
    /// The variant keeps the stock and the limit exact (naive does not, by design: it
    /// shows lost updates and buyers over the limit).
    pub exact: bool,
    /// A cart's other products (multi): reset like this one, sold only through it.
    pub also: &'static [&'static str],
    /// Its commit checks, in the same script, that the holder still holds its lock.
    pub holder_checked: bool,
    /// Buyers come through a waiting room ([`ROOM`]): a ticket, polls, the pass.
    pub room: bool,
}

/// The room sale's waiting room: buyers let in faster than they come, with passes short
/// enough that a paused Redis or instance outlives some of them.
pub const ROOM: (u32, u64) = (200, 2_000);

/// The watchdog locks' lease (`--lock-lease-ms`): one a paused Redis outlives, so that what
/// a lock does when its lease runs out under a holder is part of what is checked.
pub const LEASE_MS: i64 = 1_000;

const STOCK: i64 = 1_000;
const USERS: u32 = 800;

const fn sale(product: &'static str, path: &'static str, shards: u32) -> Sale {
    Sale {
        product,
        path,
        shards,
        stock: STOCK,
        per_user: 1,
        users: USERS,
        exact: true,
        also: &[],
        holder_checked: false,
        room: false,
    }
}

/// Every variant, one product each: the lock variants with a little work inside the lock,
/// `token` and one `segmented` fenced (a token's TTL may run out under a paused Redis; the
/// fence is what keeps it exact then), the other `segmented` on the hand-off path.
pub static SALES: &[Sale] = &[
    Sale {
        exact: false,
        ..sale("301", "naive?work_ms=1", 1)
    },
    sale("302", "setnx?work_ms=1", 1),
    sale("303", "token?work_ms=1&fence=on", 1),
    Sale {
        holder_checked: true,
        ..sale("304", "watchdog?work_ms=1", 1)
    },
    Sale {
        holder_checked: true,
        ..sale("305", "segmented?work_ms=1&fence=on", 4)
    },
    Sale {
        holder_checked: true,
        ..sale("306", "segmented?work_ms=1", 4)
    },
    sale("307", "shares?work_ms=1", 1),
    Sale {
        per_user: 2,
        ..sale("308", "lua", 1)
    },
    sale("309", "optimistic", 1),
    sale("310", "redlock?work_ms=1", 1),
    sale("311", "zookeeper?work_ms=1", 1),
    Sale {
        also: &["313"],
        holder_checked: true,
        ..sale("312", "multi?products=312,313&work_ms=1", 1)
    },
    Sale {
        holder_checked: true,
        room: true,
        ..sale("314", "watchdog?work_ms=1", 1)
    },
];

/// Redis (stock and locks, durable), three Redlock servers, a one-server ZooKeeper,
/// PostgreSQL, two instances with orders of record, and Nginx in front of them.
pub struct World {
    pub redis: RedisServer,
    _redlock: Vec<RedisServer>,
    _zookeeper: ZooKeeperEnsemble,
    pub postgres: Postgres,
    pub instances: Vec<Instance>,
    _nginx: Nginx,
    /// Through Nginx.
    pub api: Api,
}

impl World {
    pub fn start() -> Self {
        let redis = RedisServer::start();
        let redlock: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let zookeeper = ZooKeeperEnsemble::start(1);
        let postgres = Postgres::start();
        let (orders, zk) = (postgres.url(), zookeeper.hosts());
        let lease = LEASE_MS.to_string();
        let redlock_urls = redlock
            .iter()
            .map(RedisServer::url)
            .collect::<Vec<_>>()
            .join(",");
        let args = [
            "--orders-db",
            &orders,
            "--orders-claim-ms",
            "1000",
            "--redlock-urls",
            &redlock_urls,
            "--zookeeper-urls",
            &zk,
            "--lock-lease-ms",
            &lease,
            "--share-lease-ms",
            "2000",
        ];
        let instances: Vec<Instance> = (0..2)
            .map(|_| Instance::start(SECKILL, &redis.url(), &args))
            .collect();
        let nginx = Nginx::start(&instances);
        let api = Api::new(&nginx.url(""));
        Self {
            redis,
            _redlock: redlock,
            _zookeeper: zookeeper,
            postgres,
            instances,
            _nginx: nginx,
            api,
        }
    }

    /// Every sale's products reset with its stock, shards and limit.
    pub async fn reset(&self) {
        for sale in SALES {
            for product in std::iter::once(&sale.product).chain(sale.also) {
                let mut terms = json!({
                    "product": product,
                    "stock": sale.stock,
                    "shards": sale.shards,
                    "per_user": sale.per_user,
                });
                if sale.room {
                    terms["waiting_room"] = json!({"rate_per_s": ROOM.0, "pass_ttl_ms": ROOM.1});
                }
                self.api.reset_with(terms).await;
            }
        }
    }

    /// Once every fault is over: waits until every order in Redis has reached PostgreSQL
    /// (the consumers drain the streams; a dead consumer's entries are claimed), up to 60 s.
    pub async fn settle(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut behind = Vec::new();
            for sale in SALES {
                for product in std::iter::once(&sale.product).chain(sale.also) {
                    let in_redis = crate::check::redis_orders(self, product).await.len();
                    let in_db = crate::check::database_orders(self, product).await.len();
                    if in_redis != in_db {
                        behind.push(format!(
                            "{product}: {in_redis} in Redis, {in_db} in PostgreSQL"
                        ));
                    }
                }
            }
            if behind.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                eprintln!("the orders did not all reach PostgreSQL in 60 s: {behind:?}");
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
