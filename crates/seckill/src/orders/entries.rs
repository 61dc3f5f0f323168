//! Reading the orders streams' replies: entries, and the orders and settlements they
//! carry (the format `lua/lib/critical.lua` writes), and the few `redis::Value` shapes the
//! consumer, the backlog and the payments read.

use std::collections::HashMap;

use redis::Value;

use super::{Batch, Order, Settlement};

/// The time (ms) an entry id was made at.
pub fn id_ms(id: &str) -> Option<i64> {
    id.split('-').next()?.parse().ok()
}

pub(crate) type Entry = (String, HashMap<String, String>);

/// The entries of an `XREADGROUP` reply for one stream.
pub(crate) fn stream_entries(reply: &Value) -> Vec<Entry> {
    let streams = as_list(reply);
    match streams.first() {
        // RESP2: [[name, entries]]
        Some(Value::Array(pair)) => pair.get(1).map(parse_entries).unwrap_or_default(),
        _ => match reply {
            // RESP3: {name: entries}
            Value::Map(map) => map
                .first()
                .map(|(_, v)| parse_entries(v))
                .unwrap_or_default(),
            _ => Vec::new(),
        },
    }
}

/// `[[id, [field, value, …]], …]`; entries deleted meanwhile (nil fields) are skipped.
pub(crate) fn parse_entries(list: &Value) -> Vec<Entry> {
    as_list(list)
        .iter()
        .filter_map(|entry| {
            let parts = as_list(entry);
            let id = text(parts.first()?)?;
            let flat = as_list(parts.get(1)?);
            let fields = flat
                .chunks(2)
                .filter_map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
                .collect();
            Some((id, fields))
        })
        .collect()
}

/// What `entries` of `product`'s stream carry: orders, and settled reservations
/// (entries with a `settled` field). An entry that is neither is acknowledged and dropped.
pub(crate) fn batch(product: &str, entries: &[Entry]) -> Batch {
    let mut batch = Batch::default();
    for (_, fields) in entries {
        if fields.contains_key("settled") {
            batch.settlements.extend(settlement(product, fields));
        } else {
            batch.orders.extend(orders(product, fields));
        }
    }
    batch
}

/// The orders of a stream entry of `product`'s: one call's sales, `orders` being
/// `"<order id> <buyer>"` each (the buyer empty for none), comma-separated. (An entry
/// written before calls shared one has `order` and `user` instead.)
fn orders(product: &str, fields: &HashMap<String, String>) -> Vec<Order> {
    let get = |k: &str| fields.get(k).cloned();
    let number = |k: &str| get(k).and_then(|v| v.parse().ok());
    let (Some(epoch), Some(shard), Some(instance), Some(variant), Some(at)) = (
        number("epoch"),
        get("shard").and_then(|v| v.parse().ok()),
        get("instance"),
        get("variant"),
        number("at"),
    ) else {
        return Vec::new();
    };
    let lines: Vec<(String, String)> = match (get("orders"), get("order")) {
        (Some(lines), _) => lines
            .split(',')
            .filter_map(|line| {
                let (id, user) = line.split_once(' ').unwrap_or((line, ""));
                (!id.is_empty()).then(|| (id.to_owned(), user.to_owned()))
            })
            .collect(),
        (None, Some(id)) => vec![(id, get("user").unwrap_or_default())],
        (None, None) => Vec::new(),
    };
    lines
        .into_iter()
        .map(|(id, user)| Order {
            id,
            product: product.to_owned(),
            epoch,
            shard,
            instance: instance.clone(),
            variant: variant.clone(),
            buyer: Some(user).filter(|u| !u.is_empty()),
            sold_at_ms: at,
            pay_by_ms: number("pay_by"),
        })
        .collect()
}

/// A settled reservation from a stream entry of `product`'s.
fn settlement(product: &str, fields: &HashMap<String, String>) -> Option<Settlement> {
    let get = |k: &str| fields.get(k).cloned();
    Some(Settlement {
        id: get("order")?,
        product: product.to_owned(),
        epoch: get("epoch")?.parse().ok()?,
        outcome: get("settled").filter(|o| o == "paid" || o == "expired")?,
        settled_at_ms: get("at")?.parse().ok()?,
    })
}

pub(crate) fn as_list(value: &Value) -> Vec<Value> {
    match value {
        Value::Array(items) | Value::Set(items) => items.clone(),
        _ => Vec::new(),
    }
}

pub(crate) fn as_map(value: &Value) -> HashMap<String, Value> {
    match value {
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, v.clone())))
            .collect(),
        Value::Array(flat) => flat
            .chunks(2)
            .filter_map(|kv| Some((text(kv.first()?)?, kv.get(1)?.clone())))
            .collect(),
        _ => HashMap::new(),
    }
}

pub(crate) fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(crate) fn integer(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        other => text(other)?.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_entries_and_their_orders() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk("seckill:{101}:orders:stream"),
            Value::Array(vec![Value::Array(vec![
                bulk("1700000000000-0"),
                Value::Array(
                    [
                        "order",
                        "o1",
                        "epoch",
                        "3",
                        "shard",
                        "0",
                        "instance",
                        "i1",
                        "variant",
                        "lua",
                        "user",
                        "",
                        "at",
                        "1700000000000",
                    ]
                    .map(bulk)
                    .to_vec(),
                ),
            ])]),
        ])]);
        let entries = stream_entries(&reply);
        assert_eq!(entries.len(), 1);
        let old = orders("101", &entries[0].1);
        assert_eq!(old.len(), 1);
        assert_eq!(old[0].id, "o1");
        assert_eq!(
            (old[0].epoch, old[0].shard, old[0].buyer.clone()),
            (3, 0, None)
        );
        assert_eq!(old[0].pay_by_ms, None);
        assert_eq!(id_ms(&entries[0].0), Some(1_700_000_000_000));
        let call: HashMap<String, String> = [
            ("orders", "o2 u7,o3 "),
            ("epoch", "4"),
            ("shard", "2"),
            ("instance", "i1"),
            ("variant", "lua"),
            ("at", "17"),
            ("pay_by", "1017"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        let two = orders("101", &call);
        let ids: Vec<(&str, Option<&str>)> = two
            .iter()
            .map(|o| (o.id.as_str(), o.buyer.as_deref()))
            .collect();
        assert_eq!(ids, [("o2", Some("u7")), ("o3", None)]);
        assert_eq!((two[1].shard, two[1].pay_by_ms), (2, Some(1017)));
        let settled: HashMap<String, String> = [
            ("settled", "paid"),
            ("order", "o1"),
            ("epoch", "3"),
            ("at", "17"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .into();
        let batch = batch(
            "101",
            &[("1-0".into(), settled.clone()), ("2-0".into(), call)],
        );
        assert_eq!((batch.orders.len(), batch.settlements.len()), (2, 1));
        assert_eq!(batch.settlements[0].outcome, "paid");
        let mut bogus = settled;
        bogus.insert("settled".into(), "both".into());
        assert!(settlement("101", &bogus).is_none());
        assert_eq!(id_ms(&entries[0].0), Some(1_700_000_000_000));
    }
}
