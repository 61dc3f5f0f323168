//! `GET /orders/{id}`: an order of record.

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::params;
use crate::error::AppError;
use crate::keys::ProductId;
use crate::product;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/orders/{id}", get(order))
}

/// The order as the database has it (`"state": "recorded"`); with `product=`, an order
/// Redis has and the database does not yet is `"state": "pending"` (its stream entry
/// waits); otherwise 404.
async fn order(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, AppError> {
    // Order ids are UUIDs; anything else is not one of ours.
    let id =
        ProductId::parse(&id).map_err(|_| AppError::BadRequest("an order id is a UUID".into()))?;
    let params = params(query.as_deref(), &headers, &[])?;
    let product = match params.as_slice() {
        [] => None,
        [(name, value)] if name == "product" => {
            Some(ProductId::parse(value).map_err(AppError::BadRequest)?)
        }
        _ => {
            return Err(AppError::BadRequest(
                "the only parameter is product, once".into(),
            ));
        }
    };
    let Some(db) = &state.orders else {
        return Err(AppError::NotConfigured(
            "orders of record need an instance with --orders-db".into(),
        ));
    };
    if let Some(order) = db.find(id.as_str()).await? {
        return Ok(Json(json!({ "state": "recorded", "order": order })));
    }
    if let Some(product) = product {
        let in_redis = product::recorded_orders(&mut state.store.conn(), &product).await?;
        if let Some(who) = in_redis.get(id.as_str()) {
            return Ok(Json(json!({
                "state": "pending",
                "order": { "id": id.as_str(), "product": product.as_str(), "sold_by": who },
            })));
        }
    }
    Err(AppError::UnknownOrder(id.as_str().to_owned()))
}
