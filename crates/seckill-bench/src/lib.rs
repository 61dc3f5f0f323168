//! `seckill-bench`: the side-by-side comparison of seckill's variants under one load, and
//! the performance suites.
//!
//! For each scenario — by default every variant of the progression, in its order, all
//! under the same load — it resets the stock, drives the load through Nginx
//! (`seckill-load`), reads `/stats` and Redis's `INFO`, and prints one table. `--lessons`
//! adds the failure modes, the same lessons the teaching page runs; `--suite` picks a
//! performance suite instead, which also prints its ratios (every ratio from rows of the
//! same run); `--json` and `--chart` write the results and an SVG.
//!
//! # Layout
//!
//! - [`args`] — the command line.
//! - [`scenario`] — a row as asked for, and its [`scenario::Key`]: which row it is.
//! - [`suites`] — the scenarios each suite runs; [`ratios`] — what each reports;
//!   [`partial`] — the partial suite's loads side by side, and the failures it makes.
//! - [`run`] — the run itself; [`admin`] — resets, `/stats`, `/metrics`;
//!   [`redis_usage`] — Redis's own counters per master; [`parts_cpu`] — each part's CPU
//!   from `/proc`, when the bench knows the parts' processes (the capacity suite).
//! - [`admission`] — the front door's suite: buyers on their own schedules.
//! - [`capacity`] — the capacity model: its own parts started, the CPU each spends per
//!   unit, the scaling from 1 to 2 instances and 1 to 3 masters, the model beside them.
//! - [`report`] — the rows; `table.rs` and `chart.rs` — the table and the SVG.

pub mod admin;
pub mod admission;
pub mod args;
pub mod capacity;
mod chart;
pub mod lock_store;
pub mod measure;
pub mod partial;
pub mod parts_cpu;
pub mod ratio;
pub mod ratios;
pub mod redis_usage;
pub mod report;
pub mod row;
pub mod run;
pub mod scenario;
pub mod seed003;
pub mod suites;
pub mod table;

pub use args::BenchArgs;
pub use report::Report;
pub use row::Row;
pub use run::run;
