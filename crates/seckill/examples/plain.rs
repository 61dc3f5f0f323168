//! The yardstick of issue 35: a lock-free flash sale written the way a Rust team would
//! write it in an hour — axum, one multiplexed redis-rs connection shared by every request,
//! one `EVALSHA` per request that checks the stock, takes a unit and records the order.
//! No idempotency keys, no buyers, no audit, no lost-answer rule: it is here to be measured
//! against (PERFORMANCE.md, "Every product mix against a plain service"), not to be run.
//!
//! `POST /deduct_stock/kept` is the same service with what seckill's `deduct.lua` does for a
//! deduction without a buyer or a key written into its one script: the sale's terms read
//! from its audit hash, the order id looked up (a call sent twice sells once) and the sale
//! counted in the audit. Measured beside `lua`, it tells the cost of those guarantees
//! from the cost of the service around them.
//!
//! ```text
//! cargo run --release --example plain -- 127.0.0.1:8081 redis://127.0.0.1:6390
//! ```
//!
//! `GET /healthz` answers `ok`; `POST /deduct_stock/lua?product=101` sells one unit of
//! `seckill:{101}:stock` (the same key seckill's reset writes) and records the order in
//! `plain:{101}:orders` (`kept` also counts it in `plain:{101}:audit`).

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use redis::aio::ConnectionManager;
use serde::Deserialize;
use serde_json::json;

const DEDUCT: &str = r"
local stock = tonumber(redis.call('GET', KEYS[1]) or '-1')
if stock < 0 then return -1 end
if stock == 0 then return 0 end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return stock
";

/// What `deduct.lua` does for a lone deduction without a buyer or a key: the stock, the
/// terms, whether the order id was sold already, then the unit taken, the order recorded
/// and the sale counted.
const KEPT: &str = r"
local stock = redis.call('GET', KEYS[1])
if not stock then return -1 end
stock = tonumber(stock)
local terms = redis.call('HMGET', KEYS[3], 'epoch', 'streamed', 'pay_within_ms', 'closed_at',
  'per_user', 'voided')
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return stock + 1 end
if stock <= 0 then return 0 end
redis.call('DECR', KEYS[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[3], 'sold/' .. ARGV[2], 1)
return stock
";

#[derive(Clone)]
struct App {
    redis: ConnectionManager,
    script: Arc<redis::Script>,
    kept: Arc<redis::Script>,
    instance: Arc<str>,
}

#[derive(Deserialize)]
struct Params {
    product: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:8081".into());
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6390".into());
    let redis = ConnectionManager::new(redis::Client::open(url)?).await?;
    let app = App {
        redis,
        script: Arc::new(redis::Script::new(DEDUCT)),
        kept: Arc::new(redis::Script::new(KEPT)),
        instance: listen.clone().into(),
    };
    let router = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/deduct_stock/lua", get(deduct).post(deduct))
        .route("/deduct_stock/kept", get(deduct_kept).post(deduct_kept))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    axum::serve(listener, router).await?;
    Ok(())
}

async fn deduct(State(app): State<App>, Query(params): Query<Params>) -> impl IntoResponse {
    let script = app.script.clone();
    sell(app, &script, params, false).await
}

async fn deduct_kept(State(app): State<App>, Query(params): Query<Params>) -> impl IntoResponse {
    let script = app.kept.clone();
    sell(app, &script, params, true).await
}

/// One deduction by `script`; `kept` (the `kept` script) with the audit hash's key.
async fn sell(
    app: App,
    script: &redis::Script,
    params: Params,
    kept: bool,
) -> impl IntoResponse + use<> {
    let product = params.product.unwrap_or_else(|| "101".into());
    if product.is_empty() || !product.chars().all(|c| c.is_ascii_alphanumeric()) {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"outcome": "bad_request"})),
        );
    }
    let order = uuid::Uuid::now_v7().to_string();
    let mut redis = app.redis.clone();
    let mut call = script.prepare_invoke();
    call.key(format!("seckill:{{{product}}}:stock"))
        .key(format!("plain:{{{product}}}:orders"));
    if kept {
        call.key(format!("plain:{{{product}}}:audit"));
    }
    let sold: Result<i64, _> = call
        .arg(&order)
        .arg(&*app.instance)
        .invoke_async(&mut redis)
        .await;
    match sold {
        Ok(left) if left > 0 => (
            StatusCode::OK,
            Json(json!({"outcome": "deducted", "remaining": left - 1, "order": order})),
        ),
        Ok(0) => (
            StatusCode::CONFLICT,
            Json(json!({"outcome": "sold_out", "remaining": 0})),
        ),
        Ok(_) => (
            StatusCode::NOT_FOUND,
            Json(json!({"outcome": "not_for_sale"})),
        ),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"outcome": "unavailable"})),
        ),
    }
}
