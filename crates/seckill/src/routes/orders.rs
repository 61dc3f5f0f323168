//! `GET /orders/{id}`: an order of record; `POST /orders/{id}/pay`: pay for a reserved one.

use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Value, json};

use super::params;
use crate::error::AppError;
use crate::keys::ProductId;
use crate::payment::{self, Paid};
use crate::product;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orders/{id}", get(order))
        .route("/orders/{id}/pay", post(pay))
}

/// Pays for a reserved order (a sale with a payment window): 200 `paid` (with
/// `"replayed": true` when an earlier payment did it), 410 `expired` (its time ran out
/// first: the unit went back on sale), 409 `not_reserved` (sold outright), 404.
async fn pay(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, AppError> {
    let (id, product) = order_and_product(&id, query.as_deref(), &headers)?;
    let product = product.unwrap_or_else(crate::knobs::default_product);
    let paid = payment::pay(&state.store, &product, id.as_str()).await?;
    Ok(Json(json!({
        "outcome": "paid",
        "order": id.as_str(),
        "product": product.as_str(),
        "replayed": paid == Paid::Before,
    })))
}

/// The order id from the path and the optional `product` parameter.
fn order_and_product(
    id: &str,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Result<(ProductId, Option<ProductId>), AppError> {
    // Order ids are UUIDs; anything else is not one of ours.
    let id =
        ProductId::parse(id).map_err(|_| AppError::BadRequest("an order id is a UUID".into()))?;
    let params = params(query, headers, &[])?;
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
    Ok((id, product))
}

/// The order as the database has it (`"state": "recorded"`, and its `status`: `sold`,
/// `reserved`, `paid` or `expired`, as far as the database knows); with `product=`, an order
/// Redis has and the database does not yet is `"state": "pending"` (its stream entry
/// waits); otherwise 404.
async fn order(
    State(state): State<AppState>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Json<Value>, AppError> {
    let (id, product) = order_and_product(&id, query.as_deref(), &headers)?;
    let Some(db) = &state.orders else {
        return Err(AppError::NotConfigured(
            "orders of record need an instance with --orders-db".into(),
        ));
    };
    if let Some((order, status)) = db.find(id.as_str()).await? {
        return Ok(Json(
            json!({ "state": "recorded", "status": status, "order": order }),
        ));
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
