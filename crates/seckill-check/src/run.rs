//! One row of a check: the product reset, each phase's load sent (its faults run when
//! their share of the phase was answered), then the stock left read, every acknowledged
//! order looked up and the service's own figures read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use seckill_load::{Control, Load, Shape};
use serde_json::Value;
use tokio::time::Instant;

use crate::fault;
use crate::purchase::purchases;
use crate::target::{Meaning, Request, Target};
use crate::template::Slot;

/// One buy request and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub phase: usize,
    /// The request's number in its phase (the phases after the file's are the settling
    /// resends).
    pub n: usize,
    /// The purchase it is one send of, in the phase that made it.
    pub purchase: usize,
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
    /// Whether a sale's answer names its order (`buy.order`).
    pub names_orders: bool,
    pub ops: Vec<Op>,
    /// The stock the service reports at the end.
    pub left: i64,
    /// Acknowledged orders looked up: found (true) or answered as not there (false);
    /// a look-up that got no answer is left out.
    pub lookups: BTreeMap<String, bool>,
    /// The service's own figures that must read 0 (`[audit]`).
    pub own: BTreeMap<String, i64>,
    /// What each fault command did.
    pub faults: Vec<fault::Ran>,
    /// Requests resent with their keys to settle purchases no answer had settled.
    pub resent: usize,
    pub elapsed: Duration,
}

/// Runs `target` (for `variant`, when the file lists variants): one row.
/// `variant` is a row's name and what `{variant}` is for it.
pub async fn row(
    target: &Target,
    variant: Option<(&str, &str)>,
    http: &reqwest::Client,
) -> Result<Row, String> {
    let slots = Slots::new(target, variant);
    let reset = send(http, target, &target.reset, &|s| slots.fill(s)).await?;
    if !(200..300).contains(&reset.0) {
        return Err(format!("reset answered {}: {}", reset.0, reset.1));
    }
    let before = read_stock(http, target, &slots).await?;
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
        let (repeats, buyers) = (phase.repeats, phase.buyers);
        let sending = move |n: usize| Sending {
            phase: index,
            purchase: n / repeats,
            buyer: (n / repeats) % buyers,
        };
        let load = Load::shaped(slots.shape(target, sending))
            .requests(phase.requests)
            .concurrency(phase.concurrency)
            .keeping_history()
            .run(http, &watch)
            .await;
        faults.extend(faulting.finish().await);
        record(
            &mut ops,
            load.history,
            offset,
            index,
            &sending,
            target,
            &slots,
        );
    }
    if !faults.is_empty() {
        answering(http, target, &slots).await?;
    }
    let sent = ops.len();
    settle(http, target, &slots, &mut ops, started).await;
    let resent = ops.len() - sent;
    let elapsed = started.elapsed();
    let left = read_stock(http, target, &slots).await?;
    let lookups = look_up(http, target, &slots, &ops).await;
    let own = read_own(http, target, &slots).await?;
    ops.sort_by_key(|op| (op.sent, op.done));
    Ok(Row {
        label: slots.label(target),
        initial: target.stock,
        limit: target.limit,
        names_orders: target.order.is_some(),
        ops,
        left,
        lookups,
        own,
        faults,
        resent,
        elapsed,
    })
}

/// Who sends request `n` of a load: purchase `purchase` of phase `phase` (its key), by
/// buyer `u<buyer>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sending {
    phase: usize,
    purchase: usize,
    buyer: usize,
}

/// A load's history as ops of phase `phase` (the settling resends are a phase after the
/// file's).
fn record(
    ops: &mut Vec<Op>,
    history: Vec<seckill_load::Answered>,
    offset: Duration,
    phase: usize,
    sending: &dyn Fn(usize) -> Sending,
    target: &Target,
    slots: &Slots,
) {
    for answered in history {
        let meaning = target.meanings.of(answered.status);
        let who = sending(answered.n);
        ops.push(Op {
            phase,
            n: answered.n,
            purchase: who.purchase,
            buyer: who.buyer,
            key: target
                .buy
                .holds(Slot::Key)
                .then(|| slots.key(who.phase, who.purchase)),
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

/// How many times a purchase no answer settled is sent again with its key.
const SETTLE_ROUNDS: usize = 3;

/// Each purchase whose outcome is unknown sent again with its key, as an app resends a
/// click that timed out: a service that keeps its keys answers what the first send did,
/// which settles it. Up to [`SETTLE_ROUNDS`] times; without keys there is nothing to send.
async fn settle(
    http: &reqwest::Client,
    target: &Target,
    slots: &Slots,
    ops: &mut Vec<Op>,
    started: Instant,
) {
    if !target.buy.holds(Slot::Key) {
        return;
    }
    for _ in 0..SETTLE_ROUNDS {
        let unknown: Vec<Sending> = purchases(ops)
            .iter()
            .filter(|p| p.is_unknown())
            .map(|p| {
                let op = &ops[p.ops[0]];
                let key_phase = if op.phase < target.phases.len() {
                    op.phase
                } else {
                    0
                };
                Sending {
                    phase: key_phase,
                    purchase: op.purchase,
                    buyer: op.buyer,
                }
            })
            .collect();
        if unknown.is_empty() {
            return;
        }
        let (count, unknown) = (unknown.len(), Arc::new(unknown));
        let sending = move |n: usize| unknown[n];
        let offset = started.elapsed();
        let load = Load::shaped(slots.shape(target, sending.clone()))
            .requests(count)
            .concurrency(count.min(16))
            .keeping_history()
            .run(http, &Control::default())
            .await;
        let phase = target.phases.len();
        record(ops, load.history, offset, phase, &sending, target, slots);
    }
}

/// After faults: waits until the service answers its stock again (a part restarted takes
/// a moment), polling, for up to a minute.
async fn answering(http: &reqwest::Client, target: &Target, slots: &Slots) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..600 {
        match read_stock(http, target, slots).await {
            Ok(_) => return Ok(()),
            Err(err) => last = err,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "after the faults, the service did not answer for a minute: {last}"
    ))
}

/// What fills a row's templates: the sale's own slots and the variant.
#[derive(Debug, Clone)]
struct Slots {
    product: String,
    stock: i64,
    limit: i64,
    /// The row's name and its `{variant}`.
    variant: Option<(String, String)>,
    /// Tells this run's idempotency keys from any earlier run's.
    run: String,
}

impl Slots {
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

    /// The buy of request `n`, sent as `sending(n)` says.
    fn shape(
        &self,
        target: &Target,
        sending: impl Fn(usize) -> Sending + Send + Sync + 'static,
    ) -> Shape {
        let (target, slots) = (target.clone(), self.clone());
        Arc::new(move |http, n| {
            let who = sending(n);
            let user = format!("u{}", who.buyer);
            let key = slots.key(who.phase, who.purchase);
            let fill = |slot: Slot| match slot {
                Slot::User => user.clone(),
                Slot::Key => key.clone(),
                _ => slots.fill(slot),
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
    // A value that came from an answer (an order id) goes into the path as one segment.
    let path = request.path.fill(|slot| match slot {
        Slot::Order => encode_segment(&fill(slot)),
        _ => fill(slot),
    });
    let url = format!("{}{path}", target.base.as_str().trim_end_matches('/'));
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

/// `value` percent-encoded as one path segment: only `A-Z a-z 0-9 - . _ ~` stay as they are.
fn encode_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

async fn read_stock(http: &reqwest::Client, target: &Target, slots: &Slots) -> Result<i64, String> {
    let read = Request::get(target.stock_left.path.clone());
    let (status, body) = send(http, target, &read, &|s| slots.fill(s)).await?;
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
    slots: &Slots,
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
            let (http, target, request, slots, order) = (
                http.clone(),
                target.clone(),
                request.clone(),
                slots.clone(),
                (*order).clone(),
            );
            set.spawn(async move {
                let fill = |slot: Slot| match slot {
                    Slot::Order => order.clone(),
                    _ => slots.fill(slot),
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
    slots: &Slots,
) -> Result<BTreeMap<String, i64>, String> {
    let Some((path, zero)) = &target.audit else {
        return Ok(BTreeMap::new());
    };
    let read = Request::get(path.clone());
    let (status, body) = send(http, target, &read, &|s| slots.fill(s)).await?;
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
