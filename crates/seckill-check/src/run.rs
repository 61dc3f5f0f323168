//! One row of a check: the product reset, each phase's load sent (its faults run when
//! their count of answers came), the purchases no answer settled resent with their keys,
//! then the stock left read, every acknowledged order looked up and the service's own
//! figures read.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use seckill_load::{Control, KEPT_BODY, Keep, Load};
use tokio::time::Instant;

use crate::fault;
use crate::http::{look_up, order_of, read_own, read_stock, send};
use crate::purchase::purchases;
use crate::slots::{Sending, Slots};
use crate::target::{Meaning, Target};
use crate::template::Slot;

pub use crate::op::Op;

/// Set to `true` (by Ctrl-C) to end the check: the phase under way stops sending, its
/// faults' remaining commands run (a paused part is resumed), and no row runs after it.
pub type Interrupted = tokio::sync::watch::Receiver<bool>;

/// An [`Interrupted`] that never flips: for a caller with no Ctrl-C to pass on.
pub fn never_interrupted() -> Interrupted {
    tokio::sync::watch::channel(false).1
}

/// Why a row has no verdict.
#[derive(Debug)]
pub struct RowError {
    pub why: String,
    /// A fault's command failed or the check was interrupted: the deployment may be as a
    /// fault left it, so no row runs after this one.
    pub ends_the_check: bool,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

impl From<String> for RowError {
    fn from(why: String) -> Self {
        Self {
            why,
            ends_the_check: false,
        }
    }
}

/// How long the service may take to answer its stock again after a phase's faults.
const ANSWERING: Duration = Duration::from_secs(60);

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
/// `variant` is a row's name and what `{variant}` is for it. A fault command that fails
/// ends the row at the end of its phase, after the phase's other commands ran.
pub async fn row(
    target: &Target,
    variant: Option<(&str, &str)>,
    http: &reqwest::Client,
    interrupted: &Interrupted,
) -> Result<Row, RowError> {
    let slots = Slots::new(target, variant);
    let reset = send(http, target, &target.reset, &|s| slots.fill(s)).await?;
    if !(200..300).contains(&reset.0) {
        return Err(format!("reset answered {}: {}", reset.0, reset.1).into());
    }
    let before = read_stock(http, target, &slots).await?;
    if before != target.stock {
        return Err(format!(
            "after the reset, stock_left reads {before}, not stock = {}: check reset and stock_left",
            target.stock
        )
        .into());
    }
    let started = Instant::now();
    let (mut ops, mut faults) = (Vec::new(), Vec::new());
    for index in 0..target.phases.len() {
        let (sent, ran) = phase(target, index, &slots, http, interrupted, started).await?;
        ops.extend(sent);
        faults.extend(ran);
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

/// Phase `index` of `target`'s row: its load sent, each of its faults run when its count of
/// answers came; its requests as ops, and what its fault commands did. A command that
/// failed, or Ctrl-C, ends the row once every command of the phase ran.
async fn phase(
    target: &Target,
    index: usize,
    slots: &Slots,
    http: &reqwest::Client,
    interrupted: &Interrupted,
    started: Instant,
) -> Result<(Vec<Op>, Vec<fault::Ran>), RowError> {
    let phase = &target.phases[index];
    let offset = started.elapsed();
    let watch = Control::default();
    let faulting = fault::watch(&phase.faults, &target.parts, &watch, &phase.name);
    let (repeats, buyers) = (phase.repeats, phase.buyers);
    let sending = move |n: usize| Sending {
        phase: index,
        purchase: n / repeats,
        buyer: (n / repeats) % buyers,
    };
    let stopper = {
        let (watch, mut interrupted) = (watch.clone(), interrupted.clone());
        tokio::spawn(async move {
            if interrupted.wait_for(|&yes| yes).await.is_ok() {
                watch.stop();
            }
        })
    };
    let load = Load::shaped(slots.shape(target, sending))
        .requests(phase.requests)
        .concurrency(phase.concurrency)
        .keeping_history_by(keep(target))
        .run(http, &watch)
        .await;
    stopper.abort();
    let faults = faulting.finish().await;
    let said = |ran: &[fault::Ran]| {
        let ran: Vec<String> = ran.iter().map(ToString::to_string).collect();
        ran.join("; ")
    };
    let failed: Vec<fault::Ran> = faults
        .iter()
        .filter(|ran| ran.failed.is_some())
        .cloned()
        .collect();
    if !failed.is_empty() {
        return Err(RowError {
            why: format!(
                "a fault's command failed, so the run is not the one asked for: {}",
                said(&failed)
            ),
            ends_the_check: true,
        });
    }
    if *interrupted.borrow() {
        let why = if faults.is_empty() {
            "interrupted".to_owned()
        } else {
            format!("interrupted; the faults' commands ran: {}", said(&faults))
        };
        return Err(RowError {
            why,
            ends_the_check: true,
        });
    }
    let mut ops = Vec::new();
    record(
        &mut ops,
        load.history,
        offset,
        index,
        &sending,
        target,
        slots,
    );
    Ok((ops, faults))
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
            // What `keep` kept of a sale: its order id, when the file names where it is.
            order: (meaning == Meaning::Sold && target.order.is_some())
                .then(|| String::from_utf8(answered.body).ok())
                .flatten()
                .filter(|order| !order.is_empty()),
        });
    }
}

/// What a history keeps of an answer: of a sale, when the file names where its order is,
/// the order id read from the whole body (a service may answer a sale with a long
/// document); of any other answer, its first [`KEPT_BODY`] bytes.
fn keep(target: &Target) -> Keep {
    let (sold, pointer) = (target.meanings.sold.clone(), target.order.clone());
    Arc::new(move |status, body| match &pointer {
        Some(pointer) if sold.contains(&status) => order_of(body, Some(pointer))
            .map(|order| order.into_bytes())
            .unwrap_or_default(),
        _ => body[..body.len().min(KEPT_BODY)].to_vec(),
    })
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
            .keeping_history_by(keep(target))
            .run(http, &Control::default())
            .await;
        let phase = target.phases.len();
        record(ops, load.history, offset, phase, &sending, target, slots);
    }
}

/// After faults: waits until the service answers its stock again (a part restarted takes
/// a moment), polling, for up to [`ANSWERING`] in all (a read that hangs until the file's
/// `timeout_ms` counts in it).
async fn answering(http: &reqwest::Client, target: &Target, slots: &Slots) -> Result<(), String> {
    let mut last = String::from("no answer yet");
    let polling = async {
        loop {
            match read_stock(http, target, slots).await {
                Ok(_) => return,
                Err(err) => last = err,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    match tokio::time::timeout(ANSWERING, polling).await {
        Ok(()) => Ok(()),
        Err(_) => Err(format!(
            "after the faults, the service did not answer its stock for {ANSWERING:?}: {last}"
        )),
    }
}
