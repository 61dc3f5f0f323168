//! The requests a target file describes besides the buy — the reset, the stock left, an
//! order's look-up, the service's own audit — and how any of them is built.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::op::Op;
use crate::slots::{Slots, build};
use crate::target::{Request, Target};
use crate::template::Slot;

/// Sends one request of the file's own (a reset, a read): its status and body.
pub(crate) async fn send(
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

pub(crate) fn order_of(body: &[u8], pointer: Option<&str>) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    match value.pointer(pointer?)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) async fn read_stock(
    http: &reqwest::Client,
    target: &Target,
    slots: &Slots,
) -> Result<i64, String> {
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
pub(crate) async fn look_up(
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

pub(crate) async fn read_own(
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
