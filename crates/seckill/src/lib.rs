//! seckill — a flash-sale stock service that makes distributed locking on Redis visible.
//!
//! Two or more instances share one Redis. Each variant of `/deduct_stock` is one step of
//! the classic progression (naive → setnx → token → watchdog → segmented → shares, and lua
//! as the lock-free ceiling; redlock and zookeeper over servers of their own), and every
//! deduction leaves evidence in Redis so that `/stats` can say how many units were sold,
//! oversold or lost, and whether two lock holders ever overlapped.
//!
//! The locks themselves are the `seckill-lock` crate; the load the bench, the lessons and
//! the tests drive is `seckill-load`; the lessons and their runner are `seckill-lessons`;
//! `seckill-bench` is the comparison.
//!
//! # Layout
//!
//! The modules import one way, bottom to top: a module uses only those in the layers
//! below it (`scripts/imports.py` prints the graph, `--all` every crate's; `scripts/test.sh`
//! fails on a circle in any).
//! Read from the bottom and you are never sent back up.
//!
//! 1. **Names and plumbing** — [`keys`] (every Redis key, built in one place; product ids
//!    that cannot smuggle keys), [`store`] (which Redis, in which topology: the one module
//!    that knows; everything else talks to its [`store::RedisConn`]), [`database`]
//!    (PostgreSQL as a lock store and a stock store: its pool, its two locks, the stock
//!    row), [`error`]
//!    ([`error::AppError`], the one error type, and its statuses), [`outcome`] (what a
//!    deduction came to, and each answer's status; [`outcome::sale`], what a sale came
//!    to: a unit taken, and the same confirmed by replicas — the only thing a `200` is
//!    built from), [`metrics`] (the Prometheus registry
//!    behind `/metrics`), [`telemetry`], [`timer`] (a sleep that lasts what it says).
//! 2. **What a request asks, and the scripts** — [`admission`] (the sale's front door: the
//!    waiting room, a buyer's rate limit, the sold-out flag, before any stock is touched),
//!    [`knobs`] (the per-request teaching knobs, declared, parsed and bounded before
//!    anything touches Redis, and the bounds themselves), [`scripts`] (the Lua scripts
//!    from `lua/`, each loaded once, with their arguments and reply codes).
//! 3. **A product** — [`product`] (reset, where its shards live, the audit behind
//!    `/stats`), [`trace`] (the lock timeline, while a product is traced),
//!    [`idempotency`] (`Idempotency-Key`: a retried click sells once).
//! 4. **The deduction** — [`variants`]: the registry ([`variants::VARIANTS`]), one file per
//!    variant, all the same shape; a deduction's [`variants::Context`] (what it may reach of
//!    its instance), the one lock sequence and critical section, and what a lost answer
//!    takes (`variants/lost/`). Its module doc says how to add a variant.
//! 5. **Around the deduction** — [`orders`] (the orders of record: PostgreSQL fed from
//!    Redis Streams), [`payment`] (payment or expiry), [`config`] (the command line,
//!    `seckill serve`, every flag).
//! 6. **The instance** — [`state`] ([`state::AppState`]: the context and the orders'
//!    database), [`close`] (the admin's close under a read-write lock), [`lessons`] (the
//!    lessons of `seckill-lessons` run in this instance: its `Service` over the state).
//! 7. **HTTP** — [`routes`] (one module per resource: `deduct`, `stock` and `/stats`,
//!    `admin`, `health`, `room`, `page`, `book`, `openapi`), and [`startup`] ([`startup::Application`]:
//!    binds, builds the router, runs until a signal).

// The futures of a keyed deduction nest deeply (the claim, the replay of a recorded sale,
// the sale, its confirmation): proving them `Send` can take the trait solver past its
// default depth of 128, depending on the build (E0275 on `tokio::spawn`).
#![recursion_limit = "256"]

pub mod admission;
pub mod close;
pub mod config;
pub mod database;
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
