//! The servers the nemesis runs against, and the sales it runs: one product per variant.
//! The stock lives on one durable Redis (beside Redlock's servers and ZooKeeper: every
//! variant) or on a Redis Cluster of durable masters (the variants a Cluster serves).

use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use seckill::keys::{ProductId, ProductKeys};
use seckill_testkit::{
    Api, Instance, Nginx, Postgres, RedisCluster, RedisServer, ZooKeeperEnsemble, redis_cli,
};
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
pub static ONE_REDIS: &[Sale] = &[
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

/// What a Redis Cluster serves: `lua` (a limit of 2 and of 1), `watchdog`, `segmented` over
/// 4 shards spread on the masters (fenced and not) and on the reset's one shard, and a
/// cart whose three products live on the three masters ([`World::start`] checks it).
pub static CLUSTER: &[Sale] = &[
    Sale {
        per_user: 2,
        ..sale("401", "lua", 1)
    },
    sale("402", "lua", 1),
    Sale {
        holder_checked: true,
        ..sale("403", "watchdog?work_ms=1", 1)
    },
    Sale {
        holder_checked: true,
        ..sale("404", "segmented?work_ms=1&fence=on", 4)
    },
    Sale {
        holder_checked: true,
        ..sale("405", "segmented?work_ms=1", 4)
    },
    Sale {
        holder_checked: true,
        ..sale("406", "segmented?work_ms=1", 1)
    },
    Sale {
        also: &["408", "411"],
        holder_checked: true,
        ..sale("407", "multi?products=407,408,411&work_ms=1", 1)
    },
];

/// What holds the stock.
#[derive(Debug, Clone, Copy)]
pub enum Topology {
    /// One durable Redis, beside three Redlock servers and a ZooKeeper: every variant.
    OneRedis,
    /// Three durable masters with `replicas` replicas each; with replicas, a sale is
    /// answered once one replica has it (`--redis-wait-replicas 1`).
    Cluster { replicas: usize },
}

/// Where the stock lives.
pub enum Stock {
    One(RedisServer),
    Cluster(RedisCluster),
}

impl Stock {
    /// A connection to look at what the service left there.
    pub async fn conn(&self) -> Conn {
        match self {
            Self::One(redis) => Conn::One(redis.conn().await),
            Self::Cluster(cluster) => Conn::Cluster(cluster.conn().await),
        }
    }
}

/// A connection to the one Redis, or a client of the whole Cluster.
#[derive(Clone)]
pub enum Conn {
    One(redis::aio::MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::One(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::One(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::One(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// The stock's store, the stores only the one-Redis world's variants need (Redlock's
/// servers, ZooKeeper), PostgreSQL, two instances with orders of record, and Nginx in
/// front of them.
pub struct World {
    pub stock: Stock,
    _redlock: Vec<RedisServer>,
    _zookeeper: Option<ZooKeeperEnsemble>,
    pub postgres: Postgres,
    pub instances: Vec<Instance>,
    _nginx: Nginx,
    /// Through Nginx.
    pub api: Api,
    /// What is sold: [`ONE_REDIS`] or [`CLUSTER`].
    pub sales: &'static [Sale],
    /// Of 100 clicks, how many carry an `Idempotency-Key` (a click without one is sent
    /// once): 85 on one Redis; every one on a Cluster, where a key's lost answer is what
    /// is hunted.
    pub keyed_percent: u32,
}

impl World {
    pub fn start(topology: Topology) -> Self {
        let postgres = Postgres::start();
        let lease = LEASE_MS.to_string();
        let mut args: Vec<String> = [
            "--orders-db",
            &postgres.url(),
            "--orders-claim-ms",
            "1000",
            "--lock-lease-ms",
            &lease,
            "--share-lease-ms",
            "2000",
        ]
        .map(str::to_owned)
        .to_vec();
        let (stock, redlock, zookeeper, sales, keyed_percent) = match topology {
            Topology::OneRedis => {
                let redlock: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
                let zookeeper = ZooKeeperEnsemble::start(1);
                let urls: Vec<String> = redlock.iter().map(RedisServer::url).collect();
                args.extend(["--redlock-urls".into(), urls.join(",")]);
                args.extend(["--zookeeper-urls".into(), zookeeper.hosts()]);
                let stock = Stock::One(RedisServer::start());
                (stock, redlock, Some(zookeeper), ONE_REDIS, 85)
            }
            Topology::Cluster { replicas } => {
                let cluster = RedisCluster::start(3, replicas);
                args.extend(["--redis-mode", "cluster"].map(str::to_owned));
                if replicas > 0 {
                    args.extend(["--redis-wait-replicas", "1"].map(str::to_owned));
                }
                assert_carts_span_masters(&cluster, CLUSTER);
                (Stock::Cluster(cluster), Vec::new(), None, CLUSTER, 100)
            }
        };
        let url = match &stock {
            Stock::One(redis) => redis.url(),
            Stock::Cluster(cluster) => cluster.urls(),
        };
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let instances: Vec<Instance> = (0..2)
            .map(|_| Instance::start(SECKILL, &url, &args))
            .collect();
        let nginx = Nginx::start(&instances);
        let api = Api::new(&nginx.url(""));
        Self {
            stock,
            _redlock: redlock,
            _zookeeper: zookeeper,
            postgres,
            instances,
            _nginx: nginx,
            api,
            sales,
            keyed_percent,
        }
    }

    /// Every sale's products reset with its stock, shards and limit.
    pub async fn reset(&self) {
        for sale in self.sales {
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

    /// Once every fault is over: waits until a Cluster serves every slot again, then until
    /// every order in Redis has reached PostgreSQL (the consumers drain the streams; a dead
    /// consumer's entries are claimed), up to 60 s.
    pub async fn settle(&self) {
        if let Stock::Cluster(cluster) = &self.stock {
            tokio::task::block_in_place(|| cluster.wait_for_failover(Duration::from_secs(30)));
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut behind = Vec::new();
            for sale in self.sales {
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

/// A cart is across masters only when its products' slots are served by different
/// masters: asked of the Cluster, not assumed from the ids.
fn assert_carts_span_masters(cluster: &RedisCluster, sales: &[Sale]) {
    let port = cluster.nodes[0].port;
    for sale in sales.iter().filter(|s| !s.also.is_empty()) {
        let masters: std::collections::BTreeSet<u16> = std::iter::once(&sale.product)
            .chain(sale.also)
            .map(|product| {
                let id = ProductId::parse(product).expect("a product id");
                let key = ProductKeys::new(&id).meta;
                let slot = redis_cli(port, &["cluster", "keyslot", &key]);
                let slot = slot.trim().parse().expect("a slot");
                cluster.master_port_of_slot(slot).expect("a master")
            })
            .collect();
        assert_eq!(
            masters.len(),
            1 + sale.also.len(),
            "{}: the cart's products on different masters",
            sale.product
        );
    }
}
