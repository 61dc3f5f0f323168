//! Orders of record: PostgreSQL, fed from Redis Streams.
//!
//! Redis keeps the hot stock; the database keeps the orders. With `--orders-db`, every
//! sale's script — the one that takes the unit — also appends the order to its shard's
//! stream (`XADD`), so there is no moment when a unit is taken and its order is nowhere.
//! Every instance runs a [`consumer`] in one consumer group: it reads entries in batches,
//! inserts each batch in one transaction (`ON CONFLICT DO NOTHING` on the order id: a
//! replay inserts nothing twice), then acknowledges them; entries a dead consumer left
//! pending are claimed by another after `--orders-claim-ms`; the stream is trimmed only
//! below what the group has acknowledged. With the database down, sales go on at Redis
//! speed and the backlog waits in the streams; when it returns, it drains by itself.
//!
//! A product's orders go to the database when an instance with `--orders-db` reset it (the
//! reset creates the streams and their group); `/stats` then reconciles the two stores.

pub mod consumer;
pub(crate) mod entries;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use serde::Serialize;
use tokio_postgres::NoTls;

use crate::error::AppError;

/// The schema, in order; each applied once, in a transaction, recorded in
/// `seckill_migrations`.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("../../migrations/0001_orders.sql")),
    (2, include_str!("../../migrations/0002_settlements.sql")),
    (3, include_str!("../../migrations/0003_locks_and_stock.sql")),
];

pub use crate::keys::ORDERS_GROUP as GROUP;

pub use crate::metrics::OrdersCounters;

/// One order as the stream carries it and the database keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Order {
    pub id: String,
    pub product: String,
    pub epoch: i64,
    pub shard: i32,
    pub instance: String,
    pub variant: String,
    pub buyer: Option<String>,
    /// When the sale's script ran, ms since the epoch (Redis time).
    pub sold_at_ms: i64,
    /// With a payment window: the time it must be paid by, ms.
    pub pay_by_ms: Option<i64>,
}

/// How a reservation ended, as the stream carries it and the database keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Settlement {
    pub id: String,
    pub product: String,
    pub epoch: i64,
    /// `paid` or `expired`.
    pub outcome: String,
    /// When the payment or expiry script ran, ms (Redis time).
    pub settled_at_ms: i64,
}

/// What one read of a stream carries to the database: orders, and reservations settled.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub orders: Vec<Order>,
    pub settlements: Vec<Settlement>,
}

/// The orders' database: a small pool of connections, every call bounded.
pub struct OrdersDb {
    pool: Pool,
    /// A call's bound: connecting, waiting for a connection, and each call's answer. A
    /// host gone without a reset leaves a sent call unanswered for hours (TCP keepalive
    /// begins after two), so the bound is the instance's own.
    timeout: Duration,
}

/// How long the migrations may take at start: they may wait for another instance's.
const MIGRATING: Duration = Duration::from_secs(60);

impl OrdersDb {
    /// A pool on `url` (`postgres://user@host:port/db`); connections are made when needed,
    /// so an instance starts while the database is away.
    pub fn new(url: &str, timeout: Duration) -> anyhow::Result<Self> {
        let mut config: tokio_postgres::Config = url.parse().context("--orders-db")?;
        config.connect_timeout(timeout);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(8)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(timeout))
            .create_timeout(Some(timeout))
            .recycle_timeout(Some(timeout))
            .build()
            .context("the orders' connection pool")?;
        Ok(Self { pool, timeout })
    }

    /// `call` on a connection of the pool, within `bound`. Past it, the connection goes
    /// with whatever it sent (PostgreSQL asked to cancel it), which may still run: an insert replayed later inserts
    /// nothing twice, and a read is only a read.
    async fn bounded<T>(
        &self,
        bound: Duration,
        call: impl AsyncFnOnce(&mut Object) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mut client = self.pool.get().await?;
        match tokio::time::timeout(bound, call(&mut client)).await {
            Ok(result) => result,
            Err(_) => {
                crate::database::close(client, self.timeout);
                anyhow::bail!("no answer from the orders database within {bound:?}")
            }
        }
    }

    /// Applies the migrations not applied yet; instances starting together take turns
    /// (an advisory lock).
    pub async fn migrate(&self) -> anyhow::Result<()> {
        self.bounded(MIGRATING, async |client| migrate(client).await)
            .await
    }

    /// Inserts `batch` in one transaction; orders and settlements already there are left
    /// as they are. Returns how many rows were new.
    pub async fn insert(&self, batch: &Batch) -> anyhow::Result<u64> {
        self.bounded(self.timeout, async |client| insert(client, batch).await)
            .await
    }

    /// The ids of one sale's orders (a product between two resets).
    pub async fn ids(&self, product: &str, epoch: i64) -> Result<BTreeSet<String>, AppError> {
        let rows = self.bounded(self.timeout, async |client| {
            let sql = "SELECT id FROM orders WHERE product = $1 AND epoch = $2";
            Ok(client.query(sql, &[&product, &epoch]).await?)
        });
        Ok(rows
            .await
            .map_err(unavailable)?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    /// How one sale's reservations ended, as the database has it: order id -> outcome.
    pub async fn settlements(
        &self,
        product: &str,
        epoch: i64,
    ) -> Result<BTreeMap<String, String>, AppError> {
        let rows = self.bounded(self.timeout, async |client| {
            let sql = "SELECT id, outcome FROM order_settlements WHERE product = $1 AND epoch = $2";
            Ok(client.query(sql, &[&product, &epoch]).await?)
        });
        let rows = rows.await.map_err(unavailable)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

/// The migrations not applied yet, on `client`, in one transaction.
async fn migrate(client: &mut Object) -> anyhow::Result<()> {
    {
        let tx = client.transaction().await?;
        tx.batch_execute(
            "SELECT pg_advisory_xact_lock(7211001);
             CREATE TABLE IF NOT EXISTS seckill_migrations (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );",
        )
        .await?;
        for (version, sql) in MIGRATIONS {
            let applied = tx
                .query_opt(
                    "SELECT 1 FROM seckill_migrations WHERE version = $1",
                    &[version],
                )
                .await?;
            if applied.is_none() {
                tx.batch_execute(sql)
                    .await
                    .with_context(|| format!("migration {version}"))?;
                tx.execute(
                    "INSERT INTO seckill_migrations (version) VALUES ($1)",
                    &[version],
                )
                .await?;
                tracing::info!(version, "orders database: migration applied");
            }
        }
        tx.commit().await?;
    }
    Ok(())
}

/// `batch` inserted on `client` in one transaction: how many rows were new.
async fn insert(client: &mut Object, batch: &Batch) -> anyhow::Result<u64> {
    {
        let tx = client.transaction().await?;
        let mut inserted = 0;
        let orders = &batch.orders;
        if !orders.is_empty() {
            let column = |f: fn(&Order) -> String| orders.iter().map(f).collect::<Vec<_>>();
            let ids = column(|o| o.id.clone());
            let products = column(|o| o.product.clone());
            let instances = column(|o| o.instance.clone());
            let variants = column(|o| o.variant.clone());
            let epochs: Vec<i64> = orders.iter().map(|o| o.epoch).collect();
            let shards: Vec<i32> = orders.iter().map(|o| o.shard).collect();
            let buyers: Vec<Option<String>> = orders.iter().map(|o| o.buyer.clone()).collect();
            let sold: Vec<f64> = orders.iter().map(|o| seconds(o.sold_at_ms)).collect();
            let pay_by: Vec<Option<f64>> =
                orders.iter().map(|o| o.pay_by_ms.map(seconds)).collect();
            inserted += tx
                .execute(
                    "INSERT INTO orders (id, product, epoch, shard, instance, variant, buyer,
                                         sold_at, pay_by)
                     SELECT id, product, epoch, shard, instance, variant, buyer,
                            to_timestamp(sold), to_timestamp(pay_by)
                     FROM unnest($1::text[], $2::text[], $3::bigint[], $4::integer[],
                                 $5::text[], $6::text[], $7::text[], $8::float8[],
                                 $9::float8[])
                          AS t(id, product, epoch, shard, instance, variant, buyer, sold,
                               pay_by)
                     ON CONFLICT (id) DO NOTHING",
                    &[
                        &ids, &products, &epochs, &shards, &instances, &variants, &buyers, &sold,
                        &pay_by,
                    ],
                )
                .await?;
        }
        let settled = &batch.settlements;
        if !settled.is_empty() {
            let column = |f: fn(&Settlement) -> String| settled.iter().map(f).collect::<Vec<_>>();
            let ids = column(|s| s.id.clone());
            let products = column(|s| s.product.clone());
            let outcomes = column(|s| s.outcome.clone());
            let epochs: Vec<i64> = settled.iter().map(|s| s.epoch).collect();
            let at: Vec<f64> = settled.iter().map(|s| seconds(s.settled_at_ms)).collect();
            inserted += tx
                .execute(
                    "INSERT INTO order_settlements (id, product, epoch, outcome, settled_at)
                     SELECT id, product, epoch, outcome, to_timestamp(at)
                     FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[],
                                 $5::float8[]) AS t(id, product, epoch, outcome, at)
                     ON CONFLICT (id) DO NOTHING",
                    &[&ids, &products, &epochs, &outcomes, &at],
                )
                .await?;
        }
        tx.commit().await?;
        Ok(inserted)
    }
}

impl OrdersDb {
    /// One order, if the database has it, with what became of it: `sold` (no payment
    /// window), `reserved` (not paid yet, as far as the database knows), `paid`, `expired`.
    pub async fn find(&self, id: &str) -> Result<Option<(Order, String)>, AppError> {
        let row = self.bounded(self.timeout, async |client| {
            Ok(client
                .query_opt(
                    "SELECT o.id, o.product, o.epoch, o.shard, o.instance, o.variant, o.buyer,
                        (extract(epoch FROM o.sold_at) * 1000)::bigint,
                        (extract(epoch FROM o.pay_by) * 1000)::bigint,
                        coalesce(s.outcome,
                                 CASE WHEN o.pay_by IS NULL THEN 'sold' ELSE 'reserved' END)
                 FROM orders o LEFT JOIN order_settlements s ON s.id = o.id
                 WHERE o.id = $1",
                    &[&id],
                )
                .await?)
        });
        let row = row.await.map_err(unavailable)?;
        Ok(row.map(|r| {
            let order = Order {
                id: r.get(0),
                product: r.get(1),
                epoch: r.get(2),
                shard: r.get(3),
                instance: r.get(4),
                variant: r.get(5),
                buyer: r.get(6),
                sold_at_ms: r.get(7),
                pay_by_ms: r.get(8),
            };
            (order, r.get(9))
        }))
    }
}

/// Ms since the epoch, as seconds for `to_timestamp`.
fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

/// The database did not answer: a 503 like Redis's.
fn unavailable(err: impl std::fmt::Display) -> AppError {
    AppError::DatabaseUnavailable(format!("the orders database is unavailable: {err}"))
}

pub use crate::product::Reconciliation;

/// Reconciles `product`'s current sale (its `epoch`, `sold` orders in Redis over
/// `layout`'s shards) with the database.
pub async fn reconcile(
    store: &crate::store::Store,
    db: &OrdersDb,
    product: &crate::keys::ProductId,
    layout: &crate::keys::Layout,
    epoch: i64,
    sold: i64,
) -> Result<Reconciliation, AppError> {
    let keys = crate::keys::ProductKeys::new(product);
    let mut reconciliation = Reconciliation {
        streamed: true,
        in_redis: sold,
        in_database: None,
        backlog: 0,
        oldest_ms: None,
        settled_in_redis: 0,
        settled_in_database: None,
        drift: None,
    };
    read_streams(store, &keys, layout, &mut reconciliation).await?;
    if !reconciliation.streamed {
        // Orders in Redis only: nothing to reconcile (what the backlog holds is an
        // earlier sale's).
        return Ok(reconciliation);
    }
    let mut conn = store.conn();
    let settled = crate::product::settled_orders(&mut conn, product).await?;
    reconciliation.settled_in_redis = settled.len() as i64;
    let (Ok(in_database), Ok(settled_in_database)) = (
        db.ids(product.as_str(), epoch).await,
        db.settlements(product.as_str(), epoch).await,
    ) else {
        return Ok(reconciliation);
    };
    reconciliation.in_database = Some(in_database.len() as i64);
    reconciliation.settled_in_database = Some(settled_in_database.len() as i64);
    if reconciliation.backlog == 0 {
        let in_redis = crate::product::recorded_orders(&mut conn, product).await?;
        let only_in_redis = in_redis
            .keys()
            .filter(|id| !in_database.contains(*id))
            .count();
        let only_in_database = in_database
            .iter()
            .filter(|id| !in_redis.contains_key(*id))
            .count();
        let settled_apart = settled
            .iter()
            .filter(|(id, outcome)| settled_in_database.get(*id) != Some(*outcome))
            .count()
            + settled_in_database
                .keys()
                .filter(|id| !settled.contains_key(*id))
                .count();
        reconciliation.drift = Some((only_in_redis + only_in_database + settled_apart) as i64);
    }
    Ok(reconciliation)
}

/// Whether every shard's orders of the current sale are streamed to the database, and the
/// streams' backlog and the age of its oldest entry, into `reconciliation`.
async fn read_streams(
    store: &crate::store::Store,
    keys: &crate::keys::ProductKeys,
    layout: &crate::keys::Layout,
    reconciliation: &mut Reconciliation,
) -> Result<(), AppError> {
    let now_ms = consumer::unix_ms();
    for index in 0..layout.shards() {
        let shard = keys.shard(layout, index);
        // Whether this sale's orders go to the database, as its reset said.
        let streamed: Option<i64> = redis::cmd("HGET")
            .arg(&shard.audit)
            .arg("streamed")
            .query_async(&mut store.conn())
            .await?;
        if streamed != Some(1) {
            reconciliation.streamed = false;
        }
        let Some(backlog) = consumer::backlog(store, &shard.stream).await? else {
            continue;
        };
        reconciliation.backlog += backlog.pending + backlog.unread;
        if let Some(age) = backlog
            .oldest
            .as_deref()
            .and_then(entries::id_ms)
            .map(|at| (now_ms - at).max(0))
        {
            reconciliation.oldest_ms = Some(reconciliation.oldest_ms.unwrap_or(0).max(age));
        }
    }
    Ok(())
}
