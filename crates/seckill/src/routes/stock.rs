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
    let (remaining, per_shard) = product::remaining(&state.store, &product).await?;
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
    reconcile(&state, &product, &mut stats).await?;
    Ok(Json(stats))
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
