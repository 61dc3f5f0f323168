//! `seckill-check`: seckill's load, faults and audit pointed at any HTTP stock service.
//!
//! A target file (TOML, [`target`]) says how to reset a product, buy one, read the stock
//! left and, optionally, look an order up, read the service's own audit and fault each part
//! of the deployment. [`run::row`] sends the phases' load (through `seckill-load`), keeping
//! every request's history; [`verdict::judge`] applies the audit's rules (`seckill-audit`)
//! with every unknown answer a bound; [`history::write`] writes the history as a JSON array
//! for Jepsen's counter checker; [`report`] prints the table and draws the SVG.
//!
//! `docs/src/check-your-service.md` is the guide; `check/seckill.toml` describes seckill's
//! own variants behind Nginx.

pub mod fault;
pub mod history;
mod http;
pub mod op;
pub mod purchase;
pub mod report;
pub mod run;
mod slots;
pub mod target;
mod target_file;
pub mod template;
pub mod verdict;
