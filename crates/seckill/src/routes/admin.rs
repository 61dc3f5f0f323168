//! `POST /admin/reset`, `/admin/unlock`, `/admin/close` and `/admin/reopen`, and the lessons. Admin needs the bearer token when one is configured, and answers
//! loopback peers only when none is.

use std::net::SocketAddr;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, FromRef, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::admission::{Flag, LimitTerms, Opening, RoomTerms};
use crate::error::AppError;
use crate::keys::ProductId;
use crate::lessons::{self, Lessons};
use crate::product::{self, MAX_PAY_WITHIN_MS, MAX_SHARDS, MAX_STOCK, Streaming, Terms};
use crate::state::AppState;

pub fn router(state: AppState, lessons: Lessons) -> Router<AppState> {
    let admin = Admin {
        app: state.clone(),
        lessons,
    };
    Router::new()
        .route("/reset", post(reset))
        .route("/unlock", post(unlock))
        .route("/close", post(close))
        .route("/reopen", post(reopen))
        .route("/lesson", post(start_lesson).get(lesson_status))
        .route("/lesson/cancel", post(cancel_lesson))
        .route_layer(middleware::from_fn_with_state(state, require_admin))
        .with_state(admin)
}

/// The admin routes' state: the instance's, and the lessons the page starts.
#[derive(Clone)]
struct Admin {
    app: AppState,
    lessons: Lessons,
}

impl FromRef<Admin> for AppState {
    fn from_ref(admin: &Admin) -> Self {
        admin.app.clone()
    }
}

impl FromRef<Admin> for Lessons {
    fn from_ref(admin: &Admin) -> Self {
        admin.lessons.clone()
    }
}

async fn require_admin(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Result<Response, AppError> {
    match &state.settings.admin_token {
        Some(token) => {
            let given = request
                .headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default();
            // Constant time, so the answer's timing says nothing about the token.
            if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
                return Err(AppError::Unauthorized);
            }
        }
        None if !peer.ip().is_loopback() => return Err(AppError::Forbidden),
        None => {}
    }
    Ok(next.run(request).await)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetRequest {
    product: String,
    stock: i64,
    #[serde(default = "one_shard")]
    shards: u32,
    /// Units one user may buy; 0 (the default): no limit.
    #[serde(default)]
    per_user: i64,
    /// How long a buyer has to pay, ms; 0 (the default): a sale is final.
    #[serde(default)]
    pay_within_ms: i64,
    /// With `--orders-db`, whether this sale's orders go to the database (the default);
    /// `false` keeps them in Redis only (the bench measures what the database costs).
    #[serde(default = "yes")]
    orders_of_record: bool,
    /// Whether the sale's critical sections go on its timeline (`GET /trace`); false (the
    /// default) costs the sale nothing.
    #[serde(default)]
    trace: bool,
    /// Where the stock is: `redis` (the default), or `postgres` — a row in the database
    /// (`--orders-db`) that only the `pg_*` stock variants sell, unsplit, with no buyer
    /// limit and no payment window.
    #[serde(default)]
    stock_in: StockIn,
    /// A waiting room in front of the stock: `{"rate_per_s": 100, "pass_ttl_ms": 5000}`.
    #[serde(default)]
    waiting_room: Option<RoomTerms>,
    /// Each buyer's deductions per second: `{"per_s": 5, "burst": 5}`.
    #[serde(default)]
    rate_limit: Option<LimitTerms>,
    /// `off` (the default), `on` (409 from memory once seen sold out, forgotten when a
    /// unit may be back), or `sticky` (the demos' flag, kept until the next reset).
    #[serde(default)]
    sold_out_flag: Flag,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum StockIn {
    #[default]
    Redis,
    Postgres,
}

fn yes() -> bool {
    true
}

fn one_shard() -> u32 {
    1
}

impl ResetRequest {
    /// The product's terms, every bound checked: a clear 400 naming the field otherwise.
    fn terms(&self) -> Result<Terms, AppError> {
        if !(0..=MAX_STOCK).contains(&self.stock) {
            return Err(AppError::BadRequest(format!(
                "stock must be from 0 to {MAX_STOCK}"
            )));
        }
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(AppError::BadRequest(format!(
                "shards must be from 1 to {MAX_SHARDS}"
            )));
        }
        if !(0..=MAX_STOCK).contains(&self.per_user) {
            return Err(AppError::BadRequest(format!(
                "per_user must be from 0 (no limit) to {MAX_STOCK}"
            )));
        }
        if !(0..=MAX_PAY_WITHIN_MS).contains(&self.pay_within_ms) {
            return Err(AppError::BadRequest(format!(
                "pay_within_ms must be from 0 (a sale is final) to {MAX_PAY_WITHIN_MS}"
            )));
        }
        let in_database = self.stock_in == StockIn::Postgres;
        let plain = self.shards == 1 && self.per_user == 0 && self.pay_within_ms == 0;
        if in_database && !plain {
            return Err(AppError::BadRequest(
                "stock_in postgres sells one unsplit row: shards 1, per_user 0, pay_within_ms 0"
                    .into(),
            ));
        }
        let door = Opening {
            room: self.waiting_room,
            limit: self.rate_limit,
            flag: self.sold_out_flag,
        }
        .checked()
        .map_err(AppError::BadRequest)?;
        if in_database && door.room.is_some() {
            return Err(AppError::BadRequest(
                "a waiting room fronts a stock in Redis: stock_in postgres takes none".into(),
            ));
        }
        Ok(Terms {
            stock: self.stock,
            shards: self.shards,
            per_user: self.per_user,
            pay_within_ms: self.pay_within_ms,
            trace: self.trace,
            in_database,
            door,
        })
    }
}

async fn reset(State(state): State<AppState>, body: Bytes) -> Result<Json<Value>, AppError> {
    let request: ResetRequest = json_body(
        &body,
        r#"{"product": "101", "stock": 100, "shards": 1, "per_user": 0, "pay_within_ms": 0}"#,
    )?;
    let product = ProductId::parse(&request.product).map_err(AppError::BadRequest)?;
    let terms = request.terms()?;
    let (in_database, door) = (terms.in_database, terms.door);
    let streaming = match (state.orders.is_some(), request.orders_of_record) {
        // The database sells and records the orders itself: nothing to stream.
        _ if in_database => Streaming::Off,
        (true, true) => Streaming::Streamed,
        (false, true) => Streaming::AsBefore,
        (_, false) => Streaming::Off,
    };
    let db = state.database.as_deref();
    let layout = product::reset_with_database(
        &state.store,
        &state.lock_store,
        db,
        &product,
        terms,
        streaming,
        state.settings.idempotency_ttl,
    )
    .await?;
    state.admission.forget(&product);
    tracing::info!(%product, ?terms, "stock reset");
    Ok(Json(json!({
        "outcome": "reset",
        "product": product.as_str(),
        "stock": request.stock,
        "shards": request.shards,
        "per_user": request.per_user,
        "pay_within_ms": request.pay_within_ms,
        "trace": request.trace,
        "orders_of_record": in_database
            || (streaming != Streaming::Off && state.orders.is_some()),
        "stock_in": if in_database { "postgres" } else { "redis" },
        "waiting_room": door.room,
        "rate_limit": door.limit,
        "sold_out_flag": door.flag,
        "shard_tags": layout.tags(),
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnlockRequest {
    product: String,
}

/// Deletes the product's locks whoever holds them (pg_unique's row too): the way out of
/// the setnx and pg_unique deadlocks, and
/// (if done while the holder is still working) the way into setnx's other flaw.
async fn unlock(State(state): State<AppState>, body: Bytes) -> Result<Json<Value>, AppError> {
    let request: UnlockRequest = json_body(&body, r#"{"product": "101"}"#)?;
    let product = ProductId::parse(&request.product).map_err(AppError::BadRequest)?;
    let mut freed = product::force_unlock(&state.store, &state.lock_store, &product).await?;
    if let Some(db) = &state.database {
        // pg_unique's row, which only an operator removes.
        let lock = &crate::keys::ProductKeys::new(&product).whole().lock;
        freed += u32::try_from(crate::database::locks::force_unlock(db, lock).await?)
            .unwrap_or(u32::MAX);
    }
    tracing::warn!(%product, freed, "locks deleted by an operator");
    Ok(Json(
        json!({ "outcome": "unlocked", "product": product.as_str(), "freed": freed }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseRequest {
    product: String,
    /// How long to wait for the sales in flight (their read locks), ms.
    #[serde(default = "close_wait_ms")]
    wait_ms: u64,
}

fn close_wait_ms() -> u64 {
    10_000
}

/// Closes a product's sale under its write lock: waits for the `guard=rw` deductions in
/// flight, marks it closed. 409 when they still held it after `wait_ms`.
async fn close(State(state): State<AppState>, body: Bytes) -> Result<Json<Value>, AppError> {
    let request: CloseRequest = json_body(&body, r#"{"product": "101", "wait_ms": 10000}"#)?;
    let product = ProductId::parse(&request.product).map_err(AppError::BadRequest)?;
    let max = state.settings.limits.max_wait_ms;
    if request.wait_ms > max {
        return Err(AppError::BadRequest(format!(
            "wait_ms must be from 0 to {max} (--max-wait-ms)"
        )));
    }
    let closed = crate::close::close(
        &state,
        &product,
        std::time::Duration::from_millis(request.wait_ms),
    )
    .await?;
    Ok(Json(json!(closed)))
}

/// Opens a closed product's sale again.
async fn reopen(State(state): State<AppState>, body: Bytes) -> Result<Json<Value>, AppError> {
    let request: UnlockRequest = json_body(&body, r#"{"product": "101"}"#)?;
    let product = ProductId::parse(&request.product).map_err(AppError::BadRequest)?;
    crate::close::reopen(&state, &product).await?;
    state.admission.forget(&product);
    Ok(Json(
        json!({ "outcome": "reopened", "product": product.as_str() }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LessonRequest {
    lesson: String,
    #[serde(default = "default_product")]
    product: String,
}

fn default_product() -> String {
    crate::knobs::DEFAULT_PRODUCT.to_owned()
}

/// Resets the product and drives one lesson's load at `--bench-url`, in the background.
async fn start_lesson(
    State(state): State<AppState>,
    State(lessons): State<Lessons>,
    body: Bytes,
) -> Result<Json<Value>, AppError> {
    let request: LessonRequest = json_body(&body, r#"{"lesson": "naive", "product": "101"}"#)?;
    let lesson = lessons::find(&request.lesson).ok_or_else(|| {
        let names: Vec<&str> = lessons::LESSONS.iter().map(|l| l.name).collect();
        AppError::BadRequest(format!("lesson must be one of: {}", names.join(", ")))
    })?;
    let product = ProductId::parse(&request.product).map_err(AppError::BadRequest)?;
    let status = lessons::start(&lessons, lesson, &product, state)?;
    tracing::info!(lesson = lesson.name, product = %status.product, "lesson started");
    Ok(Json(json!(status)))
}

async fn lesson_status(State(lessons): State<Lessons>) -> Json<Value> {
    Json(json!(lessons.status()))
}

async fn cancel_lesson(State(lessons): State<Lessons>) -> Json<Value> {
    Json(json!(lessons.cancel()))
}

/// Parses a JSON body, or says what one looks like. The parser's message is cut short: it
/// can quote the client's input.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8], example: &str) -> Result<T, AppError> {
    serde_json::from_slice(body).map_err(|err| {
        let reason: String = err.to_string().chars().take(120).collect();
        AppError::BadRequest(format!("body must be JSON like {example}: {reason}"))
    })
}
