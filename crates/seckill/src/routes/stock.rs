//! `GET /stock` and `GET /stats` (the audit).

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::params;
use crate::error::AppError;
use crate::keys::{Layout, ProductId};
use crate::knobs::default_product;
use crate::orders;
use crate::product::{self, Stats};
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/stock", get(stock))
        .route("/stats", get(stats))
}

async fn stock(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, AppError> {
    let product = product_param(query.as_deref(), &headers)?;
    let (mut remaining, mut per_shard) = product::remaining(&state.store, &product).await?;
    let stock_in: Option<String> = redis::cmd("HGET")
        .arg(&crate::keys::ProductKeys::new(&product).meta)
        .arg("stock_in")
        .query_async(&mut state.store.conn())
        .await?;
    if stock_in.as_deref() == Some("postgres")
        && let Some(audit) = database_audit(&state, &product).await?
    {
        (remaining, per_shard) = (audit.remaining, vec![audit.remaining]);
    }
    Ok(Json(json!({
        "product": product.as_str(),
        "remaining": remaining,
        "shard_remaining": per_shard,
    })))
}

async fn stats(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Stats>, AppError> {
    let product = product_param(query.as_deref(), &headers)?;
    let mut stats = product::stats(&state.store, &state.lock_store, &product).await?;
    if stats.stock_in == "postgres" {
        let audit = database_audit(&state, &product).await?;
        let audit = audit.filter(|a| a.epoch == stats.epoch).unwrap_or_default();
        stats.from_database(audit.remaining, audit.by_instance, audit.by_variant);
    } else {
        reconcile(&state, &product, &mut stats).await?;
    }
    Ok(Json(stats))
}

/// A product whose stock is in PostgreSQL (`stock_in: postgres`, as its meta says): its
/// row and orders as the database has them; `None` when the database has no row for it.
async fn database_audit(
    state: &AppState,
    product: &ProductId,
) -> Result<Option<crate::database::stock::Audit>, AppError> {
    let Some(db) = &state.database else {
        return Err(AppError::NotConfigured(format!(
            "product {product} keeps its stock in PostgreSQL: ask an instance with --orders-db"
        )));
    };
    db.audit(product.as_str()).await
}

/// With `--orders-db`: `stats` gains Redis reconciled against the database.
pub(super) async fn reconcile(
    state: &AppState,
    product: &ProductId,
    stats: &mut Stats,
) -> Result<(), AppError> {
    if let Some(db) = &state.orders {
        let layout = Layout::from_meta(product, stats.shards, Some(&stats.shard_tags.join(",")));
        let reconciled =
            orders::reconcile(&state.store, db, product, &layout, stats.epoch, stats.sold);
        stats.orders_of_record = Some(reconciled.await?);
    }
    Ok(())
}

/// `product` is the only parameter these take.
fn product_param(query: Option<&str>, headers: &HeaderMap) -> Result<ProductId, AppError> {
    let params = params(query, headers, &[])?;
    match params.as_slice() {
        [] => Ok(default_product()),
        [(name, value)] if name == "product" => {
            ProductId::parse(value).map_err(AppError::BadRequest)
        }
        _ => Err(AppError::BadRequest(
            "the only parameter is product, once".into(),
        )),
    }
}
