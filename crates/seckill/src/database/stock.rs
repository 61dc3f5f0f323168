//! The stock in a row, where every flash-sale tutorial starts: `seckill_stock`, one row per
//! product reset with `"stock_in": "postgres"`, each sale inserting its order into `orders`
//! in the same transaction — so the audit counts both from the database itself.
//!
//! Three ways to sell from it, each a variant: the conditional `UPDATE … WHERE stock > 0`
//! ([`Database::sell_by_update`], the database's `lua`), the row lock
//! ([`Database::lock_row`], `SELECT … FOR UPDATE`) and the version check
//! ([`Database::sell_if_version`], the seed's optimistic rule on a database).

use std::collections::BTreeMap;
use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;

use super::{Database, Failure, Tx};
use crate::error::AppError;

/// One sale as the database records it: the order row.
pub struct OrderRow<'a> {
    pub product: &'a str,
    /// The sale's number (its reset's): a row of another sale is not sold.
    pub epoch: i64,
    pub order: &'a str,
    pub instance: &'a str,
    pub variant: &'a str,
    pub buyer: Option<&'a str>,
}

impl OrderRow<'_> {
    /// The sale's parameters, `$1`–`$5` of [`sale!`], then `more`.
    fn params<'a>(&'a self, more: &[&'a (dyn ToSql + Sync)]) -> Vec<&'a (dyn ToSql + Sync)> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![
            &self.product,
            &self.order,
            &self.instance,
            &self.variant,
            &self.buyer,
        ];
        params.extend_from_slice(more);
        params
    }
}

/// What a try to sell came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sold {
    /// Sold, this many left.
    Units(i64),
    /// Nothing sold: none left (this many: 0, or below if something oversold).
    SoldOut(i64),
    /// Nothing sold: the row changed since it was read (a version check).
    Changed,
    /// No row: the product's stock is not in the database.
    NoRow,
}

/// The product's row as read: units left and its version.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub stock: i64,
    pub version: i64,
}

/// A sale's statement: `$update`, which takes the unit and returns the sold row as
/// `taken (epoch, stock)`, then the insert of its order — every variant's sale ends with
/// it, in the statement or transaction that took the unit. Parameters `$1`–`$5`: product,
/// order, instance, variant, buyer; the update's own from `$6`. Returns the units left.
macro_rules! sale {
    ($update:literal) => {
        concat!(
            "WITH taken AS (",
            $update,
            " RETURNING epoch, stock)
             INSERT INTO orders (id, product, epoch, shard, instance, variant, buyer, sold_at)
             SELECT $2, $1, epoch, 0, $3, $4, $5, clock_timestamp() FROM taken
             RETURNING (SELECT stock FROM taken)"
        )
    };
}

/// The database's audit of a product's sale: its row and its orders.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    pub epoch: i64,
    pub initial: i64,
    pub remaining: i64,
    /// Orders of this sale, by instance and by variant.
    pub by_instance: BTreeMap<String, i64>,
    pub by_variant: BTreeMap<String, i64>,
}

impl Database {
    /// A new sale of `product` in the database: its row set to `stock` units, numbered
    /// `epoch` (the reset's) — or, when the database has seen that number for the product
    /// already (Redis lost its meta and counts again from 1), the next one it has not: a
    /// sale's orders are never mixed with an older sale's. Returns the number used.
    pub async fn reset_stock(
        &self,
        product: &str,
        epoch: i64,
        stock: i64,
    ) -> Result<i64, AppError> {
        let row = self
            .with(async |c| {
                c.query_one(
                    "INSERT INTO seckill_stock AS s (product, epoch, initial, stock, version)
                     VALUES ($1, GREATEST($2, (SELECT coalesce(max(epoch), 0) + 1 FROM orders
                                               WHERE product = $1)), $3, $3, 0)
                     ON CONFLICT (product) DO UPDATE
                         SET epoch = GREATEST(EXCLUDED.epoch, s.epoch + 1),
                             initial = $3, stock = $3, version = 0
                     RETURNING epoch",
                    &[&product, &epoch, &stock],
                )
                .await
            })
            .await?;
        Ok(row.get(0))
    }

    /// The product's stock leaves the database (it was reset into Redis): a `pg_*` stock
    /// variant no longer sells it.
    pub async fn forget_stock(&self, product: &str) -> Result<(), AppError> {
        self.with(async |c| {
            c.execute("DELETE FROM seckill_stock WHERE product = $1", &[&product])
                .await
        })
        .await?;
        Ok(())
    }

    /// `pg_update`: one statement takes a unit if there is one and records the order.
    pub async fn sell_by_update(&self, sale: &OrderRow<'_>) -> Result<Sold, Failure> {
        let sql = sale!(
            "UPDATE seckill_stock SET stock = stock - 1
             WHERE product = $1 AND epoch = $6 AND stock > 0"
        );
        match self.query_opt(sql, &sale.params(&[&sale.epoch])).await? {
            Some(row) => Ok(Sold::Units(row.get(0))),
            None => Ok(match self.read(sale.product, sale.epoch).await? {
                Some(row) => Sold::SoldOut(row.stock),
                None => Sold::NoRow,
            }),
        }
    }

    /// The product's row for sale `epoch`, read alone.
    pub async fn read(&self, product: &str, epoch: i64) -> Result<Option<Row>, Failure> {
        let sql = "SELECT stock, version FROM seckill_stock WHERE product = $1 AND epoch = $2";
        let row = self.query_opt(sql, &[&product, &epoch]).await?;
        Ok(row.map(|r| Row {
            stock: r.get(0),
            version: r.get(1),
        }))
    }

    /// `pg_version`: takes a unit and records the order if the row is still at `read`'s
    /// version — the seed's optimistic rule, `UPDATE … WHERE version = $read`.
    pub async fn sell_if_version(&self, sale: &OrderRow<'_>, read: Row) -> Result<Sold, Failure> {
        let sql = sale!(
            "UPDATE seckill_stock SET stock = $6, version = version + 1
             WHERE product = $1 AND version = $7 AND epoch = $8"
        );
        let left = read.stock - 1;
        let row = self
            .query_opt(sql, &sale.params(&[&left, &read.version, &sale.epoch]))
            .await?;
        Ok(row.map_or(Sold::Changed, |row| Sold::Units(row.get(0))))
    }

    /// `pg_for_update`: `BEGIN` and `SELECT … FOR UPDATE`, waiting up to `wait` for the row
    /// lock (the transaction's `lock_timeout`; `NOWAIT` for none). `None` when another
    /// transaction held it for the whole wait.
    pub async fn lock_row(
        &self,
        product: &str,
        epoch: i64,
        wait: Duration,
    ) -> Result<Option<(RowLock, Option<Row>)>, Failure> {
        // lock_timeout counts whole milliseconds; NOWAIT for no wait at all.
        let ms = u64::try_from(wait.as_millis())
            .unwrap_or(u64::MAX)
            .clamp(1, i32::MAX as u64);
        let tx = self.begin((!wait.is_zero()).then_some(ms)).await?;
        let select = if wait.is_zero() {
            "SELECT stock, version FROM seckill_stock WHERE product = $1 AND epoch = $2
             FOR UPDATE NOWAIT"
        } else {
            "SELECT stock, version FROM seckill_stock WHERE product = $1 AND epoch = $2
             FOR UPDATE"
        };
        let read = tx.query_opt(wait, select, &[&product, &epoch]).await;
        match read {
            Ok(row) => {
                let row = row.map(|r| Row {
                    stock: r.get(0),
                    version: r.get(1),
                });
                Ok(Some((RowLock { tx }, row)))
            }
            Err(failure) if failure.is(&SqlState::LOCK_NOT_AVAILABLE) => {
                tx.rollback().await?;
                Ok(None)
            }
            Err(failure) => Err(failure),
        }
    }

    /// A sale whose answer was lost, looked up by its order `id`: the units `product` has
    /// left if the order is in the database, `None` if it is not (yet).
    pub async fn find_sale(&self, id: &str, product: &str) -> Result<Option<i64>, Failure> {
        let row = self
            .with(async |c| {
                c.query_opt(
                    "SELECT s.stock FROM orders o JOIN seckill_stock s ON s.product = o.product
                     WHERE o.id = $1 AND o.product = $2",
                    &[&id, &product],
                )
                .await
            })
            .await?;
        Ok(row.map(|r| r.get(0)))
    }

    /// The database's audit of `product`'s current sale: its row, and the orders of its
    /// epoch by instance and variant, in one statement (one snapshot: a sale committing
    /// meanwhile is in both or in neither). `None` when the product's stock is not in
    /// the database.
    pub async fn audit(&self, product: &str) -> Result<Option<Audit>, AppError> {
        let rows = self
            .with(async |c| {
                c.query(
                    "SELECT s.epoch, s.initial, s.stock, o.instance, o.variant, count(o.id)
                     FROM seckill_stock s
                     LEFT JOIN orders o ON o.product = s.product AND o.epoch = s.epoch
                     WHERE s.product = $1
                     GROUP BY s.epoch, s.initial, s.stock, o.instance, o.variant",
                    &[&product],
                )
                .await
            })
            .await?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let mut audit = Audit {
            epoch: first.get(0),
            initial: first.get(1),
            remaining: first.get(2),
            ..Audit::default()
        };
        for row in &rows {
            let count: i64 = row.get(5);
            if let (Some(instance), Some(variant)) = (
                row.get::<_, Option<String>>(3),
                row.get::<_, Option<String>>(4),
            ) {
                *audit.by_instance.entry(instance).or_default() += count;
                *audit.by_variant.entry(variant).or_default() += count;
            }
        }
        Ok(Some(audit))
    }
}

/// A product's row locked by `SELECT … FOR UPDATE`, in its open transaction: the row lock
/// is the lock. Dropped without [`RowLock::sell`] or [`RowLock::leave`], the connection
/// closes and PostgreSQL frees the row.
pub struct RowLock {
    tx: Tx,
}

impl RowLock {
    /// Writes the stock read minus one (the seed's `GET`-then-`SET`, safe under the row
    /// lock), records the order, and commits: the units left. A failed `COMMIT` is
    /// an unknown outcome.
    pub async fn sell(self, sale: &OrderRow<'_>, read: Row) -> Result<i64, Failure> {
        let sql =
            sale!("UPDATE seckill_stock SET stock = $6, version = version + 1 WHERE product = $1");
        let left = read.stock - 1;
        let row = self
            .tx
            .query_opt(Duration::ZERO, sql, &sale.params(&[&left]))
            .await?;
        self.tx.commit().await?;
        // The update found the row the transaction locked: it returns one.
        Ok(row.map_or(left, |row| row.get(0)))
    }

    /// Ends the transaction selling nothing: the row lock is free.
    pub async fn leave(self) -> Result<(), Failure> {
        self.tx.rollback().await
    }

    /// As a holder that died: the connection closes with the transaction open.
    pub fn abandon(self) {
        self.tx.abandon();
    }
}
