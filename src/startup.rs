//! Building and running one instance.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{BoxError, Json, Router};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::json;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use crate::config::{ServeArgs, check_instance_id, instance_id_from};
use crate::keys::LOCK_CHANNEL_PATTERN;
use crate::lock::{OwnerIds, WatchdogLocks};
use crate::metrics::Metrics;
use crate::routes;
use crate::state::{AppState, Settings};

pub struct Application {
    listener: TcpListener,
    router: Router,
    local_addr: SocketAddr,
}

impl Application {
    /// Binds the listener and connects to Redis lazily: an instance starts (and answers
    /// `/healthz`, and 503 elsewhere) even while Redis is away.
    pub async fn build(args: ServeArgs) -> anyhow::Result<Self> {
        args.check()?;
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let local_addr = listener.local_addr()?;
        let instance = args
            .instance_id
            .clone()
            .unwrap_or_else(|| instance_id_from(local_addr));
        check_instance_id(&instance)?;

        let redis_timeout = args.limits.redis_timeout();
        let client = redis::Client::open(args.redis_url.as_str()).context("--redis-url")?;
        let redis =
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config(redis_timeout))
                .context("creating the redis connection")?;
        let lease = Duration::from_millis(args.limits.lock_lease_ms);
        let locks = WatchdogLocks::start(client, redis.clone(), lease, LOCK_CHANNEL_PATTERN);
        let pool = pool(&args.redis_url, redis_timeout)?;

        let state = AppState {
            redis,
            pool,
            settings: Arc::new(Settings::new(&args, instance.clone())),
            metrics: Arc::new(Metrics::new(locks.counters())),
            owners: Arc::new(OwnerIds::new()),
            locks,
        };
        let router = app(state);
        tracing::info!(%local_addr, %instance, faults = args.faults, "seckill instance ready");
        Ok(Self {
            listener,
            router,
            local_addr,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until SIGINT or SIGTERM, then lets requests in flight finish.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        axum::serve(
            self.listener,
            self.router
                .into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(shutdown_signal())
        .await
    }
}

/// The router with the layers every request goes through: load shedding past the
/// in-flight limit (503 with Retry-After), a request timeout (408), a body-size limit (413).
pub fn app(state: AppState) -> Router {
    let limits = &state.settings.limits;
    let max_in_flight = usize::try_from(limits.max_in_flight).unwrap_or(usize::MAX);
    let max_body = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
    let timeout = limits.request_timeout();
    routes::router(state).layer(
        ServiceBuilder::new()
            .layer(TraceLayer::new_for_http())
            .layer(HandleErrorLayer::new(overloaded))
            .load_shed()
            .concurrency_limit(max_in_flight)
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                timeout,
            ))
            .layer(DefaultBodyLimit::max(max_body)),
    )
}

async fn overloaded(err: BoxError) -> Response {
    let (status, outcome) = if err.is::<tower::load_shed::error::Overloaded>() {
        (StatusCode::SERVICE_UNAVAILABLE, "overloaded")
    } else {
        tracing::error!(error = %err, "unhandled middleware error");
        (StatusCode::INTERNAL_SERVER_ERROR, "error")
    };
    let mut response = (status, Json(json!({ "outcome": outcome }))).into_response();
    response
        .headers_mut()
        .insert("retry-after", HeaderValue::from_static("1"));
    response
}

/// Fail fast while Redis is away: every command and every connection attempt is bounded by
/// `timeout`, and reconnection is retried in the background rather than by waiting callers.
fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(Duration::from_millis(500))
}

fn pool(url: &str, timeout: Duration) -> anyhow::Result<deadpool_redis::Pool> {
    let mut config = deadpool_redis::Config::from_url(url);
    let mut pool_config = deadpool_redis::PoolConfig::new(8);
    pool_config.timeouts.wait = Some(timeout);
    pool_config.timeouts.create = Some(timeout);
    pool_config.timeouts.recycle = Some(timeout);
    config.pool = Some(pool_config);
    config
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))
        .context("creating the redis pool")
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}
