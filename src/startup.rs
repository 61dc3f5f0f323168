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
use tokio::net::{TcpListener, TcpSocket};
use tower::ServiceBuilder;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};

use crate::config::{ServeArgs, check_instance_id, instance_id_from};
use crate::keys::LOCK_CHANNEL_PATTERN;
use crate::lock::{OwnerIds, WatchdogLocks};
use crate::metrics::Metrics;
use crate::routes;
use crate::state::{AppState, Settings};
use crate::variants::LuaBatches;

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
        let listener = bind(args.listen).with_context(|| format!("binding {}", args.listen))?;
        let local_addr = listener.local_addr()?;
        let instance = args
            .instance_id
            .clone()
            .unwrap_or_else(|| instance_id_from(local_addr));
        check_instance_id(&instance)?;

        let redis_timeout = args.limits.redis_timeout();
        let client = redis_client(&args)?;
        let pool = pool(&client, redis_timeout)?;
        let redis =
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config(redis_timeout))
                .context("creating the redis connection")?;
        let lease = Duration::from_millis(args.limits.lock_lease_ms);
        let locks = WatchdogLocks::start(client, redis.clone(), lease, LOCK_CHANNEL_PATTERN);

        let lua = LuaBatches::start(
            redis.clone(),
            instance.as_str().into(),
            usize::try_from(args.limits.max_in_flight).unwrap_or(usize::MAX),
        );
        let state = AppState {
            redis,
            pool,
            settings: Arc::new(Settings::new(&args, instance.clone())),
            metrics: Arc::new(Metrics::new(locks.counters())),
            owners: Arc::new(OwnerIds::new()),
            locks,
            lua,
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

/// A listener with a deep accept queue. Nginx opens a connection per request in flight
/// beyond its keepalive pool, so a burst of 2,000 clients arrives as a burst of connects;
/// with the usual 1,024 some SYNs are dropped, and Nginx counts the instance as failed.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(8192)
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
            // Per-request spans and failures at debug: a 503 storm while Redis is away
            // must not become a log storm; errors worth a line are logged where they arise.
            .layer(
                TraceLayer::new_for_http()
                    .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
            )
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

/// The Redis client: the URL (password, database, `rediss://` included), and the CA to
/// trust for TLS when one is given.
fn redis_client(args: &ServeArgs) -> anyhow::Result<redis::Client> {
    let url = args.redis_url.as_str();
    let Some(ca) = &args.redis_tls_ca else {
        return redis::Client::open(url).context("--redis-url");
    };
    let root_cert = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
    let certificates = redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(root_cert),
    };
    redis::Client::build_with_tls(url, certificates).context("--redis-url with --redis-tls-ca")
}

/// A few exclusive connections, made like the shared one (same URL, same TLS trust).
fn pool(client: &redis::Client, timeout: Duration) -> anyhow::Result<deadpool_redis::Pool> {
    let manager = deadpool_redis::Manager::new(client.get_connection_info().clone())?;
    deadpool_redis::Pool::builder(manager)
        .max_size(8)
        .wait_timeout(Some(timeout))
        .create_timeout(Some(timeout))
        .recycle_timeout(Some(timeout))
        .runtime(deadpool_redis::Runtime::Tokio1)
        .build()
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
