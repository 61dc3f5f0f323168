//! `GET /healthz` (the process answers), `GET /readyz` (Redis answers), `GET /metrics`,
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

async fn readyz(State(state): State<AppState>) -> Result<Json<Value>, AppError> {
    // On a Cluster, PING goes to every master: ready when all of them answer.
    let _: String = redis::cmd("PING")
        .query_async(&mut state.store.conn())
        .await?;
    Ok(Json(
        json!({ "status": "ready", "instance": &*state.settings.instance }),
    ))
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
