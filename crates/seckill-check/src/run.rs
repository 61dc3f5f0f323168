//! One row of a check: the product reset, each phase's load sent (its faults run when
//! their share of the phase was answered), then the stock left read, every acknowledged
//! order looked up and the service's own figures read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use seckill_load::{Buyers, Control, Load, Shape};
use serde_json::Value;
use tokio::time::Instant;

use crate::fault;
use crate::target::{Meaning, Request, Target};
use crate::template::Slot;

/// One buy request and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub phase: usize,
    /// The request's number in its phase.
    pub n: usize,
    /// `u<buyer>`.
    pub buyer: usize,
    pub key: Option<String>,
    /// From the row's start.
    pub sent: Duration,
    pub done: Duration,
    pub status: Option<u16>,
    pub meaning: Meaning,
    /// The order a sale named (its answer's `buy.order`).
    pub order: Option<String>,
}

/// What one row's run saw.
#[derive(Debug, Clone)]
pub struct Row {
    /// The target's name, and the variant when the file lists them.
    pub label: String,
    pub initial: i64,
    pub limit: i64,
    pub ops: Vec<Op>,
    /// The stock the service reports at the end.
    pub left: i64,
    /// Acknowledged orders looked up: found (true) or answered as not there (false);
    /// a look-up that got no answer is left out.
    pub lookups: BTreeMap<String, bool>,
    /// The service's own figures that must read 0 (`[audit]`).
    pub own: BTreeMap<String, i64>,
    /// What each fault command did.
    pub faults: Vec<String>,
    pub elapsed: Duration,
}

/// Runs `target` (for `variant`, when the file lists variants): one row.
/// `variant` is a row's name and what `{variant}` is for it.
pub async fn row(
    target: &Target,
    variant: Option<(&str, &str)>,
    http: &reqwest::Client,
) -> Result<Row, String> {
    let sale = Sale::new(target, variant);
    let reset = send(http, target, &target.reset, &|s| sale.fill(s)).await?;
    if !(200..300).contains(&reset.0) {
        return Err(format!("reset answered {}: {}", reset.0, reset.1));
    }
    let before = read_stock(http, target, &sale).await?;
    if before != target.stock {
        return Err(format!(
            "after the reset, stock_left reads {before}, not stock = {}: check reset and stock_left",
            target.stock
        ));
    }
    let started = Instant::now();
    let (mut ops, mut faults) = (Vec::new(), Vec::new());
    for (index, phase) in target.phases.iter().enumerate() {
        let offset = started.elapsed();
        let watch = Control::default();
        let faulting = fault::watch(&phase.faults, &target.parts, &watch, &phase.name);
        let load = Load::shaped(sale.shape(target, index, phase.repeats, phase.buyers))
            .requests(phase.requests)
            .concurrency(phase.concurrency)
            .keeping_history()
            .run(http, &watch)
            .await;
        faults.extend(faulting.finish().await);
        let buyers = Buyers {
            users: Some(phase.buyers),
            clicks: phase.repeats,
        };
        for answered in load.history {
            let meaning = target.meanings.of(answered.status);
            let purchase = answered.n / phase.repeats;
            ops.push(Op {
                phase: index,
                n: answered.n,
                buyer: buyers.of(answered.n),
                key: target
                    .buy
                    .holds(Slot::Key)
                    .then(|| sale.key(index, purchase)),
                sent: offset + answered.sent,
                done: offset + answered.done,
                status: answered.status,
                meaning,
                order: (meaning == Meaning::Sold)
                    .then(|| order_of(&answered.body, target.order.as_deref()))
                    .flatten(),
            });
        }
    }
    let elapsed = started.elapsed();
    let left = read_stock(http, target, &sale).await?;
    let lookups = look_up(http, target, &sale, &ops).await;
    let own = read_own(http, target, &sale).await?;
    ops.sort_by_key(|op| (op.sent, op.done));
    Ok(Row {
        label: sale.label(target),
        initial: target.stock,
        limit: target.limit,
        ops,
        left,
        lookups,
        own,
        faults,
        elapsed,
    })
}

/// What fills a row's templates.
#[derive(Debug, Clone)]
struct Sale {
    product: String,
    stock: i64,
    limit: i64,
    /// The row's name and its `{variant}`.
    variant: Option<(String, String)>,
    /// Tells this run's idempotency keys from any earlier run's.
    run: String,
}

impl Sale {
    fn new(target: &Target, variant: Option<(&str, &str)>) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            product: target.product.clone(),
            stock: target.stock,
            limit: target.limit,
            variant: variant.map(|(name, value)| (name.to_owned(), value.to_owned())),
            run: format!("{:x}{:x}", std::process::id(), nanos % (1 << 40)),
        }
    }

    fn label(&self, target: &Target) -> String {
        match &self.variant {
            Some((name, _)) => format!("{} {name}", target.name),
            None => target.name.clone(),
        }
    }

    fn key(&self, phase: usize, purchase: usize) -> String {
        format!("{}-{phase}-{purchase}", self.run)
    }

    /// The sale's own slots; a request's (`user`, `key`, `order`) are filled by its caller.
    fn fill(&self, slot: Slot) -> String {
        match slot {
            Slot::Product => self.product.clone(),
            Slot::Stock => self.stock.to_string(),
            Slot::Limit => self.limit.to_string(),
            Slot::Variant => self
                .variant
                .as_ref()
                .map(|v| v.1.clone())
                .unwrap_or_default(),
            Slot::User | Slot::Key | Slot::Order => String::new(),
        }
    }

    /// Request `n` of phase `phase`: purchase `n / repeats`, by buyer `u<purchase mod buyers>`.
    fn shape(&self, target: &Target, phase: usize, repeats: usize, buyers: usize) -> Shape {
        let (target, sale) = (target.clone(), self.clone());
        Arc::new(move |http, n| {
            let purchase = n / repeats;
            let (user, key) = (format!("u{}", purchase % buyers), sale.key(phase, purchase));
            let fill = |slot: Slot| match slot {
                Slot::User => user.clone(),
                Slot::Key => key.clone(),
                _ => sale.fill(slot),
            };
            build(http, &target, &target.buy, &fill)
        })
    }
}

fn build(
    http: &reqwest::Client,
    target: &Target,
    request: &Request,
    fill: &(dyn Fn(Slot) -> String + Sync),
) -> reqwest::RequestBuilder {
    let url = format!(
        "{}{}",
        target.base.as_str().trim_end_matches('/'),
        request.path.fill(fill)
    );
    let mut builder = http.request(request.method.clone(), url);
    for (name, value) in &request.headers {
        builder = builder.header(name, value.fill(fill));
    }
    let body = request.body.fill(fill);
    if !body.is_empty() {
        builder = builder.body(body);
    }
    builder
}

/// Sends one request of the file's own (a reset, a read): its status and body.
async fn send(
    http: &reqwest::Client,
    target: &Target,
    request: &Request,
    fill: &(dyn Fn(Slot) -> String + Sync),
) -> Result<(u16, String), String> {
    let path = request.path.fill(fill);
    let answer = build(http, target, request, fill)
        .send()
        .await
        .map_err(|e| format!("{} {path}: {e}", request.method))?;
    let status = answer.status().as_u16();
    let body = answer.text().await.unwrap_or_default();
    Ok((status, body))
}

fn pointed(body: &str, pointer: &str) -> Option<Value> {
    serde_json::from_str::<Value>(body)
        .ok()?
        .pointer(pointer)
        .cloned()
}

fn order_of(body: &[u8], pointer: Option<&str>) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    match value.pointer(pointer?)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

async fn read_stock(http: &reqwest::Client, target: &Target, sale: &Sale) -> Result<i64, String> {
    let read = Request::get(target.stock_left.path.clone());
    let (status, body) = send(http, target, &read, &|s| sale.fill(s)).await?;
    let pointer = &target.stock_left.pointer;
    match (status, pointed(&body, pointer).and_then(|v| v.as_i64())) {
        (200..=299, Some(left)) => Ok(left),
        _ => Err(format!(
            "stock_left: answered {status} with no integer at {pointer:?}: {body}"
        )),
    }
}

/// Every acknowledged order looked up, eight at a time.
async fn look_up(
    http: &reqwest::Client,
    target: &Target,
    sale: &Sale,
    ops: &[Op],
) -> BTreeMap<String, bool> {
    let Some((request, found)) = &target.orders else {
        return BTreeMap::new();
    };
    let orders: BTreeSet<&String> = ops.iter().filter_map(|op| op.order.as_ref()).collect();
    let mut lookups = BTreeMap::new();
    for chunk in orders.into_iter().collect::<Vec<_>>().chunks(8) {
        let mut set = tokio::task::JoinSet::new();
        for order in chunk {
            let (http, target, request, sale, order) = (
                http.clone(),
                target.clone(),
                request.clone(),
                sale.clone(),
                (*order).clone(),
            );
            set.spawn(async move {
                let fill = |slot: Slot| match slot {
                    Slot::Order => order.clone(),
                    _ => sale.fill(slot),
                };
                let status = send(&http, &target, &request, &fill)
                    .await
                    .ok()
                    .map(|a| a.0);
                (order.clone(), status)
            });
        }
        while let Some(Ok((order, status))) = set.join_next().await {
            match status {
                Some(s) if found.found.contains(&s) => lookups.insert(order, true),
                Some(s) if found.missing.contains(&s) => lookups.insert(order, false),
                _ => None,
            };
        }
    }
    lookups
}

async fn read_own(
    http: &reqwest::Client,
    target: &Target,
    sale: &Sale,
) -> Result<BTreeMap<String, i64>, String> {
    let Some((path, zero)) = &target.audit else {
        return Ok(BTreeMap::new());
    };
    let read = Request::get(path.clone());
    let (status, body) = send(http, target, &read, &|s| sale.fill(s)).await?;
    let mut own = BTreeMap::new();
    for (name, pointer) in zero {
        let value = pointed(&body, pointer).and_then(|v| v.as_i64());
        let value = value.ok_or_else(|| {
            format!("audit.zero.{name}: answered {status} with no integer at {pointer:?}")
        })?;
        own.insert(name.clone(), value);
    }
    Ok(own)
}
