//! `POST|GET /deduct_stock/{variant}` and `/deduct_stock` (the instance's default variant).

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use std::time::Duration;

use tokio::time::Instant;

use super::params;
use crate::error::AppError;
use crate::knobs::Knobs;
use crate::state::AppState;
use crate::variants::{Deduction, Outcome, Variant};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/deduct_stock", get(deduct_default).post(deduct_default))
        .route(
            "/deduct_stock/{variant}",
            get(deduct_named).post(deduct_named),
        )
}

async fn deduct_default(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let variant = state.settings.default_variant;
    deduct(state, variant, query, headers, body).await
}

async fn deduct_named(
    State(state): State<AppState>,
    Path(name): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match Variant::parse(&name) {
        Some(variant) => deduct(state, variant, query, headers, body).await,
        None => AppError::UnknownVariant(name.chars().take(40).collect()).into_response(),
    }
}

/// The body of every answer that got as far as a variant.
#[derive(Debug, Serialize)]
struct Answer {
    outcome: &'static str,
    variant: Variant,
    product: String,
    instance: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    remaining: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shard: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'static str>,
    /// How long the work inside the lock really took, µs, when `work_ms` asked for some.
    #[serde(skip_serializing_if = "Option::is_none")]
    work_us: Option<u64>,
}

/// What an `unconfirmed` answer tells the client, plainly.
const UNCONFIRMED: &str = "the unit was taken and the order recorded on the master, but too few \
    replicas confirmed it in time: it may or may not survive a failover; do not retry blindly, \
    look the order up";

/// What a `limit_reached` answer tells the client.
const LIMIT_REACHED: &str =
    "this buyer already has as many units as the product allows one user (per_user)";

async fn deduct(
    state: AppState,
    variant: Variant,
    query: Option<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let result = run(&state, variant, query.as_deref(), &headers, &body).await;
    let outcome = match &result {
        Ok((_, outcome, _)) => outcome.name(),
        Err(err) => err.outcome(),
    };
    state.metrics.deduction(variant, outcome, started.elapsed());
    result.map_or_else(IntoResponse::into_response, |(product, outcome, worked)| {
        answer(&state, variant, product, outcome, worked)
    })
}

async fn run(
    state: &AppState,
    variant: Variant,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(String, Outcome, Option<Duration>), AppError> {
    let params = params(query, headers, body)?;
    let settings = &state.settings;
    let knobs = Knobs::parse(variant, &params, &settings.limits, settings.faults)?;
    let product = knobs.product.to_string();
    let deduction = Deduction::new(state.clone(), variant, knobs);
    let (outcome, worked) = if variant.spec().must_finish {
        // Spawned, so that a client hanging up (or the request timeout) cannot cut a
        // deduction short between taking a lock and giving it back.
        tokio::spawn(async move { (deduction.run().await, deduction.worked()) })
            .await
            .map_err(|err| AppError::Internal(err.into()))?
    } else {
        (deduction.run().await, deduction.worked())
    };
    Ok((product, outcome?, worked))
}

fn answer(
    state: &AppState,
    variant: Variant,
    product: String,
    outcome: Outcome,
    worked: Option<Duration>,
) -> Response {
    let status = outcome.status();
    let mut answer = Answer {
        outcome: outcome.name(),
        variant,
        product,
        instance: state.settings.instance.to_string(),
        remaining: None,
        order: None,
        shard: None,
        note: None,
        work_us: worked.map(|w| u64::try_from(w.as_micros()).unwrap_or(u64::MAX)),
    };
    match outcome {
        Outcome::Deducted {
            remaining,
            order,
            shard,
        } => {
            answer.remaining = Some(remaining);
            answer.order = Some(order);
            answer.shard = Some(shard);
        }
        Outcome::SoldOut { remaining } => answer.remaining = Some(remaining),
        Outcome::Unconfirmed { order, shard } => {
            answer.order = Some(order);
            answer.shard = Some(shard);
            answer.note = Some(UNCONFIRMED);
        }
        Outcome::LockBusy
        | Outcome::LockLost
        | Outcome::Abandoned
        | Outcome::Fenced
        | Outcome::LockUnconfirmed => {}
        Outcome::LimitReached => answer.note = Some(LIMIT_REACHED),
    }
    let mut response = json(status, &answer);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static("1"));
    }
    response
}

/// A JSON response, serialized in one go into one buffer (cheaper than `Json`'s writer on
/// the hot path).
fn json(status: StatusCode, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(bytes) => (status, [(CONTENT_TYPE, "application/json")], bytes).into_response(),
        Err(err) => AppError::Internal(err.into()).into_response(),
    }
}
