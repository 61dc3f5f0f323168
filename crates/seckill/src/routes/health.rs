//! `GET /healthz` (the process answers), `GET /readyz` (Redis answers: a master at least,
//! on a Cluster), `GET /metrics`,
//! and `GET /openapi.json` (the API's description, [`super::openapi`]).

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::error::AppError;
use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(super::openapi::openapi))
}

async fn healthz(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "status": "ok", "instance": &*state.settings.instance }))
}

/// Ready while a master answers: on a Cluster with a master away, the instance still sells
/// every product of the others (and answers the rest `503` at once), and so does every
/// other instance: taking them all out of the upstream would stop every sale for the
/// sake of some. The body says how many masters answer, of how many, and names each that
/// does not with the slots it serves (`masters.away`): what cannot sell now.
async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, AppError> {
    let masters = state.store.answering().await?;
    Ok(Json(json!({
        "status": "ready",
        "instance": &*state.settings.instance,
        "masters": masters,
    })))
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.render(),
    )
}
