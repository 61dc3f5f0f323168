//! seckill — a flash-sale stock service that makes distributed locking on Redis visible.
//!
//! Two or more instances share one Redis. Each variant of `/deduct_stock` is one step of
//! the classic progression (naive → setnx → token → watchdog → segmented, and lua as the
//! lock-free ceiling), and every deduction leaves evidence in Redis so that `/stats` can
//! say how many units were sold, oversold or lost, and whether two lock holders ever
//! overlapped.
//!
//! # Layout
//!
//! - [`cli`] — the command line: `seckill serve`, `seckill bench`, and their flags.
//! - [`bench`] — the side-by-side comparison driver behind `seckill bench`.
//! - [`config`] — what one instance is told at start, and the bounds on every knob.
//! - [`startup`] — [`startup::Application`]: binds, builds the router, runs until a signal.
//! - [`state`] — [`state::AppState`], shared by every handler: the store, metrics, config.
//! - [`store`] — which Redis, in which topology (one server or a Cluster): the one module
//!   that knows; everything else talks to its [`store::RedisConn`].
//! - [`routes`] — one module per resource: `deduct`, `stock` (and `/stats`), `admin`, `health`.
//! - [`lessons`] — the lessons a teacher starts from the page (`GET /`): a reset and the
//!   bench's load, driven from inside the instance.
//! - [`knobs`] — the per-request teaching knobs (`work_ms`, `ttl_ms`, `fault`, …), parsed
//!   and bounded before anything touches Redis.
//! - [`variant`] — [`variant::Variant`], the variants' names, below everything that names them.
//! - [`variants`] — one file per variant of `/deduct_stock`, all the same shape, and the
//!   critical section they share.
//! - [`lock`] — the locks themselves (`SetnxLock`, `TokenLock`, `WatchdogLock`, `Redlock`),
//!   usable without HTTP.
//! - [`product`] — product-level operations: reset, and the audit behind `/stats`.
//! - [`keys`] — every Redis key, built in one place; product ids that cannot smuggle keys.
//! - [`scripts`] — the Lua scripts from `lua/`, each loaded once.
//! - [`metrics`] — the Prometheus registry behind `/metrics`.
//! - [`error`] — [`error::AppError`], the one error type handlers return, and its statuses.
//! - [`telemetry`] — tracing set-up.
//! - [`timer`] — a sleep that lasts what it says (`work_ms`), where tokio's rounds up a millisecond.

pub mod bench;
pub mod cli;
pub mod config;
pub mod error;
pub mod keys;
pub mod knobs;
pub mod lessons;
pub mod lock;
pub mod metrics;
pub mod product;
pub mod routes;
pub mod scripts;
pub mod startup;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod timer;
pub mod variant;
pub mod variants;
