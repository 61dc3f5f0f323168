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
use serde_json::json;
use tokio::net::{TcpListener, TcpSocket};
use tower::ServiceBuilder;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnFailure, TraceLayer};

use seckill_lock::{HolderIds, Redlock, WatchdogLocks, ZooKeeper};

use crate::admission::Admission;
use crate::config::{ServeArgs, check_instance_id, instance_id_from};
use crate::database::Database;
use crate::keys::lock_namespace;
use crate::metrics::Metrics;
use crate::orders::consumer::Consumer;
use crate::orders::{OrdersCounters, OrdersDb};
use crate::routes;
use crate::state::{App, AppState};
use crate::store::{Confirmations, RedisMode, Store, StoreConfig};
use crate::variants::Context as Instance;
use crate::variants::{Settings, Start, VariantState};

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
        let faults = args.faults;
        let state = state(args, &instance)?;
        if let Some(db) = &state.orders {
            // The schema before the first request, when the database is there (the
            // consumer keeps trying when it is not): a reset into it must find its table.
            match tokio::time::timeout(Duration::from_secs(5), db.migrate()).await {
                Ok(Ok(())) => {}
                Ok(Err(err)) => tracing::warn!(error = %err, "migrations not applied yet"),
                Err(_) => tracing::warn!("migrations not applied yet: the database is slow"),
            }
        }
        let router = app(state);
        tracing::info!(%local_addr, %instance, faults, "seckill instance ready");
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

/// One instance named `instance`, as `args` describe it: its stores (connected lazily),
/// locks, metrics and each variant's state. Needs a tokio runtime (the locks' subscription
/// starts here). With [`app`], what tests drive in-process with `tower::ServiceExt::oneshot`.
pub fn state(args: ServeArgs, instance: &str) -> anyhow::Result<AppState> {
    args.check()?;
    check_instance_id(instance)?;
    let instance = instance.to_owned();
    let (stock_config, lock_config) = store_configs(&args)?;
    let store = Store::connect(stock_config)?;
    let lock_store = match lock_config {
        Some(config) => Some(Store::connect(config).context("--lock-redis-url")?),
        None => None,
    };
    let (redlock, zookeeper) = (redlock_servers(&args)?, zookeeper_ensemble(&args));
    let settings = args.settings(instance.clone());
    let lock_side = lock_store.as_ref().unwrap_or(&store);
    let sale_confirmations = confirmations(&args, &store, args.redis_wait_replicas, &settings)?;
    let lock_confirmations = confirmations(&args, lock_side, args.lock_wait_replicas, &settings)?;
    let locks = WatchdogLocks::builder(lock_side.subscribe_targets(), lock_side.conn())
        .lease(Duration::from_millis(args.limits.lock_lease_ms))
        .namespace(lock_namespace())
        .handoffs(args.lock_handoffs)
        .instance(&settings.instance)
        .start();

    let order_counters = OrdersCounters::default();
    let orders = start_orders(
        &args,
        &store,
        &instance,
        &order_counters,
        &sale_confirmations,
    )?;
    let every = Duration::from_millis(args.expiry_sweep_ms);
    crate::payment::Sweeper {
        store: store.clone(),
        every,
    }
    .spawn();
    // The database's locks and stock variants use the orders' database.
    let database = args.orders_db.as_deref().map(|url| {
        Database::new(url, args.pg_connections, args.limits.redis_timeout() * 5).map(Arc::new)
    });
    let database = database.transpose()?;
    let variant_state = VariantState::start(&Start {
        settings: &settings,
        store: &store,
        sale_confirmations: sale_confirmations.as_ref(),
        tx_connections: u64::from(args.tx_connections),
        share_lease: Duration::from_millis(args.share_lease_ms),
    })?;
    let admission = Admission::start(store.clone(), store.subscribe_targets());
    let idempotency = crate::idempotency::Keys {
        store: store.clone(),
        ttl: settings.idempotency_ttl,
        patience: crate::idempotency::patience(&settings.limits),
        instance: settings.instance.clone(),
    };
    let context = Instance {
        lock_store: lock_store.unwrap_or_else(|| store.clone()),
        idempotency,
        locks_beside_stock: args.lock_redis_url.is_none(),
        redlock,
        zookeeper,
        database,
        store,
        metrics: Metrics::new(&instance, locks.counters(), &order_counters),
        settings,
        holders: HolderIds::for_instance(&instance),
        locks,
        sale_confirmations,
        lock_confirmations,
        variant_state,
        keys: crate::keys::KeyCache::default(),
    };
    Ok(AppState::new(App {
        context: Arc::new(context),
        orders,
        admission,
    }))
}

/// What confirms a write on `store` with `replicas` replicas (`--redis-wait-replicas` for
/// the stock, `--lock-wait-replicas` for the locks); `None` when none are asked for.
fn confirmations(
    args: &ServeArgs,
    store: &Store,
    replicas: u32,
    settings: &Settings,
) -> anyhow::Result<Option<Arc<Confirmations>>> {
    Confirmations::new(
        store,
        replicas,
        Duration::from_millis(args.redis_wait_timeout_ms),
        usize::try_from(args.confirm_connections).unwrap_or(1),
        settings.instance.clone(),
    )
}

/// Redlock's servers (`--redlock-urls`), a lock store of their own, when given.
fn redlock_servers(
    args: &ServeArgs,
) -> anyhow::Result<Option<Redlock<redis::aio::ConnectionManager>>> {
    if args.redlock_urls.is_empty() {
        return Ok(None);
    }
    let urls = &args.redlock_urls;
    let servers = Redlock::connect(urls, args.limits.redis_timeout())
        .with_context(|| format!("--redlock-urls {urls:?}"))?;
    Ok(Some(servers))
}

/// The ZooKeeper ensemble (`--zookeeper-urls`), when given: nothing asked until a lock.
fn zookeeper_ensemble(args: &ServeArgs) -> Option<Arc<ZooKeeper>> {
    (!args.zookeeper_urls.is_empty()).then(|| {
        Arc::new(ZooKeeper::new(
            &args.zookeeper_urls.join(","),
            Duration::from_millis(args.zookeeper_session_ms),
            args.limits.redis_timeout(),
        ))
    })
}

/// The orders of record (`--orders-db`): the database, and this instance's consumer of
/// the orders' streams, started; `None` when orders live in Redis only.
fn start_orders(
    args: &ServeArgs,
    store: &Store,
    instance: &str,
    counters: &OrdersCounters,
    confirmations: &Option<Arc<Confirmations>>,
) -> anyhow::Result<Option<Arc<OrdersDb>>> {
    Ok(match &args.orders_db {
        Some(url) => {
            let db = Arc::new(OrdersDb::new(url, args.limits.redis_timeout() * 5)?);
            Consumer {
                store: store.clone(),
                db: db.clone(),
                name: instance.to_owned(),
                claim_after: Duration::from_millis(args.orders_claim_ms),
                batch: usize::try_from(args.orders_batch).unwrap_or(500),
                counters: counters.clone(),
                confirmations: confirmations.clone(),
            }
            .spawn();
            tracing::info!("orders of record: PostgreSQL (--orders-db), fed from Redis Streams");
            Some(db)
        }
        None => {
            tracing::info!("orders live in Redis only (no --orders-db)");
            None
        }
    })
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

/// The router with the layers every request goes through — a request timeout (408), a
/// body-size limit (413) — and, for all but the probes, load shedding past the in-flight
/// limit (503 with Retry-After): a probe is answered while the instance sheds a burst.
pub fn app(state: AppState) -> Router {
    let limits = &state.settings.limits;
    let max_in_flight = usize::try_from(limits.max_in_flight).unwrap_or(usize::MAX);
    let max_body = usize::try_from(limits.max_body_bytes).unwrap_or(usize::MAX);
    let timeout = limits.request_timeout();
    // Every request's layers, given to each router whole, in one `Router::layer`: each call
    // of it wraps every route in a boxed service of its own, cloned, with a boxed future,
    // for every request.
    let every = || {
        ServiceBuilder::new()
            // Per-request spans and failures at debug: a 503 storm while Redis is away must
            // not become a log storm; errors worth a line are logged where they arise.
            .layer(
                TraceLayer::new_for_http()
                    .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
            )
            .layer(TimeoutLayer::with_status_code(
                StatusCode::REQUEST_TIMEOUT,
                timeout,
            ))
            .layer(DefaultBodyLimit::max(max_body))
    };
    // One limit for the whole instance: `Router::layer` gives each route its own copy of a
    // layer, and a plain concurrency limit would be a limit per route.
    let shedding = ServiceBuilder::new()
        .layer(HandleErrorLayer::new(overloaded))
        .load_shed()
        .layer(GlobalConcurrencyLimitLayer::new(max_in_flight));
    routes::router(state.clone())
        .layer(every().layer(shedding))
        .merge(routes::probes(state).layer(every()))
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

/// The stock store's and the lock store's topology and URLs (the lock store is the stock
/// store unless one is named), and the CA to trust for `rediss://` when one is given.
fn store_configs(args: &ServeArgs) -> anyhow::Result<(StoreConfig, Option<StoreConfig>)> {
    let stock = args.redis.store_config(args.limits.redis_timeout())?;
    let locks = args.lock_redis_url.as_ref().map(|urls| StoreConfig {
        mode: args.lock_redis_mode.unwrap_or(RedisMode::Standalone),
        urls: urls.clone(),
        tls_ca: stock.tls_ca.clone(),
        timeout: args.limits.redis_timeout(),
        sentinel_master: args.lock_redis_sentinel_master.clone(),
    });
    Ok((stock, locks))
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
