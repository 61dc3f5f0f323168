//! What the `pg_*` variants share: the database itself, a sale as it records it, and
//! what its answer — or the lack of one — comes to.

use std::sync::Arc;

use super::{Deduction, Outcome};
use crate::database::stock::{OrderRow, Sold};
use crate::database::{Database, Failure};
use crate::error::AppError;
use crate::outcome::sale::{Confirmed, Taken};

/// The instance's database, or 503 `not_configured` when it was started without one.
pub(super) fn database(d: &Deduction) -> Result<&Arc<Database>, AppError> {
    d.app.database.as_ref().ok_or_else(|| {
        AppError::NotConfigured(format!(
            "{} needs PostgreSQL: start the instance with --orders-db postgres://…",
            d.variant
        ))
    })
}

/// The number of the product's current sale, if its stock is in the database: the
/// product's meta in Redis says where its stock is, and a row of an older sale is
/// not sold (its product reset into Redis meanwhile, the row left behind).
pub(super) async fn epoch(d: &Deduction) -> Result<i64, AppError> {
    let (epoch, stock_in): (Option<i64>, Option<String>) = redis::cmd("HMGET")
        .arg(&d.product.meta)
        .arg("epoch")
        .arg("stock_in")
        .query_async(&mut d.redis())
        .await?;
    let product = &d.product.product;
    match (epoch, stock_in.as_deref()) {
        (Some(epoch), Some("postgres")) => Ok(epoch),
        (Some(_), _) => Err(AppError::BadRequest(format!(
            "product {product} keeps its stock in Redis: reset it with \"stock_in\": \
             \"postgres\" for {} to sell it",
            d.variant
        ))),
        (None, _) => Err(AppError::UnknownProduct(product.to_string())),
    }
}

/// `d`'s sale of sale `epoch` as the database records it, as `order`.
pub(super) fn row<'a>(d: &'a Deduction, epoch: i64, order: &'a str) -> OrderRow<'a> {
    OrderRow {
        epoch,
        product: d.product.product.as_str(),
        order,
        instance: &d.app.settings.instance,
        variant: d.variant.name(),
        buyer: d.knobs.user.as_ref().map(|u| u.as_str()),
    }
}

/// What a sale's statement or `COMMIT` came to. One whose answer was lost is looked
/// up by its order id: found, it sold; otherwise — not found yet, or the database
/// still away — it may yet have, and the answer is 504 `unknown`, never a "no".
pub(super) async fn answer(
    d: &Deduction,
    db: &Database,
    sold: Result<Sold, Failure>,
    order: String,
) -> Result<Outcome, AppError> {
    let committed = |order, remaining| {
        let taken = Taken {
            order,
            shard: 0,
            remaining: Some(remaining),
        };
        Outcome::Deducted(Confirmed::in_database(taken))
    };
    match sold {
        Ok(Sold::Units(remaining)) => Ok(committed(order, remaining)),
        Ok(Sold::SoldOut(remaining)) => Ok(Outcome::SoldOut { remaining }),
        Ok(Sold::NoRow) => Err(no_row(d)),
        Ok(Sold::Changed) => Ok(Outcome::Conflict),
        Err(Failure::Lost(why)) => {
            tracing::warn!(%order, why, "a sale's answer was lost: looking it up");
            let product = d.product.product.as_str();
            match db.find_sale(&order, product).await {
                Ok(Some(remaining)) => Ok(committed(order, remaining)),
                _ => Ok(Outcome::Unknown { order, shard: 0 }),
            }
        }
        Err(failure) => Err(failure.into()),
    }
}

/// The product's meta names a sale in the database that has no row there (its reset's
/// database part failed, or a newer reset is under way): nothing to sell until a
/// reset sets it.
pub(super) fn no_row(d: &Deduction) -> AppError {
    AppError::UnknownProduct(d.product.product.to_string())
}
