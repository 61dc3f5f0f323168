//! `pg_version` — the stock in a PostgreSQL row with a version column: read the stock and
//! its version, check, work, then `UPDATE … SET stock = $read - 1, version = version + 1
//! WHERE version = $read_version` with the order's `INSERT` in the same statement. No row
//! changed means another sale came first: read again and retry, `retries` times more
//! (default 3, the seed's rule), then 429 `conflict`. Seed 000's optimistic rule on a
//! database, with the same contention curve the `optimistic` variant shows on Redis
//! (`--suite contention`): its commits and conflicts are counted in the product's audit.

use super::optimistic::{DEFAULT_RETRIES, RETRIES};
use super::{Deduction, Outcome, Spec};
use super::{in_database, section};
use crate::database::stock::Sold;
use crate::error::AppError;
use crate::knobs::WORK_MS;

pub static SPEC: Spec = Spec {
    name: "pg_version",
    summary: "the stock in a PostgreSQL row with a version: UPDATE … WHERE version = the one read, retried, then 429 conflict (optimistic on a database)",
    color: "#00838f",
    knobs: &[WORK_MS, RETRIES],
    in_progression: false,
    splits_stock: false,
    whole_stock: true,
    stock_in_database: true,
    must_finish: true,
    counts_its_refusals: false,
    deduct: |d| Box::pin(deduct(d)),
};

async fn deduct(d: &Deduction) -> Result<Outcome, AppError> {
    let db = in_database::database(d)?;
    let retries = d.knobs.count(&RETRIES).unwrap_or(DEFAULT_RETRIES);
    let epoch = in_database::epoch(d).await?;
    let product = d.product.product.as_str();
    let mut conflicts = 0;
    let outcome = loop {
        let Some(row) = db.read(product, epoch).await? else {
            break Err(in_database::no_row(d));
        };
        if row.stock <= 0 {
            break Ok(Outcome::SoldOut {
                remaining: row.stock,
            });
        }
        section::work(d).await;
        let order = uuid::Uuid::now_v7().to_string();
        let sold = db
            .sell_if_version(&in_database::row(d, epoch, &order), row)
            .await;
        if matches!(sold, Ok(Sold::Changed)) {
            conflicts += 1;
            if conflicts > retries {
                break Ok(Outcome::Conflict);
            }
            // A little jitter, so the losers do not read again all at once.
            let jitter = fastrand::u64(0..=1_000 * conflicts.unsigned_abs());
            tokio::time::sleep(std::time::Duration::from_micros(jitter)).await;
            continue;
        }
        break in_database::answer(d, db, sold, order).await;
    };
    // Seed 000's conflict rate, in the same audit fields as optimistic's.
    let committed = i64::from(matches!(outcome, Ok(Outcome::Deducted { .. })));
    if conflicts > 0 || committed > 0 {
        let counted: Result<(), _> = redis::pipe()
            .hincr(&d.product.audit, "tx_conflicts", conflicts)
            .ignore()
            .hincr(&d.product.audit, "tx_commits", committed)
            .ignore()
            .query_async(&mut d.redis())
            .await;
        if let Err(err) = counted {
            tracing::warn!(error = %err, conflicts, "conflicts not counted in the audit");
        }
    }
    outcome
}
