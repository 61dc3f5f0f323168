//! seckill — a flash-sale stock service that makes distributed locking on Redis visible.
//!
//! Two or more instances share one Redis. Each variant of `/deduct_stock` is one step of
//! the classic progression (naive → setnx → token → watchdog → segmented → shares, and lua
//! as the lock-free ceiling; redlock and zookeeper over servers of their own), and every
//! deduction leaves evidence in Redis so that `/stats` can say how many units were sold,
//! oversold or lost, and whether two lock holders ever overlapped.
//!
//! The locks themselves are the `seckill-lock` crate; the load the bench, the lessons and
//! the tests drive is `seckill-load`; `seckill-bench` is the comparison.
//!
//! # Layout
//!
//! - [`config`] — the command line (`seckill serve`), every flag, the bounds on every knob,
//!   and [`config::RedisArgs`], the stock store's flags, which the bench takes too.
//! - [`startup`] — [`startup::Application`]: binds, builds the router, runs until a signal.
//! - [`state`] — [`state::AppState`], one instance, shared by every handler and deduction.
//! - [`variants`] — the registry ([`variants::VARIANTS`]) and one file per variant, all the
//!   same shape; the outcome of a deduction, its context, and the one lock sequence and
//!   critical section the lock variants share. Its module doc says how to add a variant.
//! - [`knobs`] — the per-request teaching knobs (`work_ms`, `wait_ms`, `fault`, …): declared,
//!   parsed and bounded before anything touches Redis.
//! - [`routes`] — one module per resource: `deduct`, `stock` (and `/stats`), `admin`,
//!   `health`, `page`, `openapi` (written from the registries).
//! - [`product`] — reset, where a product's shards live, and the audit behind `/stats`.
//! - [`lessons`] — the lessons (defined once, for the page and the bench) and their runner.
//! - [`trace`] — the lock timeline: each critical section's entry and exit, while a
//!   product is traced, for the page (`GET /trace`).
//! - [`store`] — which Redis, in which topology (one server, a Cluster, or behind
//!   sentinels): the one module that knows; everything else talks to its [`store::RedisConn`].
//! - [`idempotency`] — `Idempotency-Key`: a retried click sells once and gets its first answer.
//! - [`keys`] — every Redis key, built in one place; product ids that cannot smuggle keys.
//! - [`scripts`] — the Lua scripts from `lua/`, each loaded once, with their arguments.
//! - [`orders`] — the orders of record: PostgreSQL fed from Redis Streams, and its consumer.
//! - [`payment`] — payment or expiry: a sale with a payment window reserves its unit.
//! - [`close`] — closing a sale cleanly under a read-write lock (`/admin/close`, `guard`).
//! - [`metrics`] — the Prometheus registry behind `/metrics`.
//! - [`error`] — [`error::AppError`], the one error type handlers return, and its statuses.
//! - [`telemetry`] — tracing set-up.
//! - [`timer`] — a sleep that lasts what it says (`work_ms`), where tokio's rounds up a millisecond.

pub mod close;
pub mod config;
pub mod error;
pub mod idempotency;
pub mod keys;
pub mod knobs;
pub mod lessons;
pub mod metrics;
pub mod orders;
pub mod outcome;
pub mod payment;
pub mod product;
pub mod routes;
pub mod scripts;
pub mod startup;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod timer;
pub mod trace;
pub mod variants;
