//! A row's history as a JSON array of operations, one a line, in the shape Jepsen's
//! checkers read through elle-cli (`--model counter`; a `.json` file, one array): every buy an `add` of 1 to the units that left the stock — its
//! `invoke`, then `ok` (sold), `fail` (sold nothing: sold out, refused, busy) or `info` (no
//! answer, or one that means nothing known: it may have sold) — and a final `read` of
//! `initial - left`. The counter model's rule is the lost-update and the taken-unsold rule
//! with unknowns as bounds: the read lies between the `ok` adds and every add attempted.
//! A resend answered with a sale already counted completes with value 0 (Jepsen takes an
//! `ok`'s value as what the add did). Each line also carries what the verdict names:
//! `phase`, `n`, `buyer`, `key`, `status`, `order`, `latency_us`.

use std::io::Write;

use serde_json::{Value, json};

use crate::purchase::{purchases, sales};
use crate::run::Row;
use crate::target::Meaning;

/// Writes `row`'s history to `out`: a JSON array, one operation a line, ordered by time.
pub fn write(row: &Row, out: &mut impl Write) -> std::io::Result<()> {
    let counted: std::collections::BTreeSet<usize> =
        sales(&purchases(&row.ops)).into_iter().collect();
    let mut events: Vec<(u128, u8, Value)> = Vec::with_capacity(row.ops.len() * 2 + 2);
    for (i, op) in row.ops.iter().enumerate() {
        let (sent, done) = (op.sent.as_nanos(), op.done.as_nanos());
        events.push((
            sent,
            0,
            json!({"type": "invoke", "f": "add", "value": 1, "process": i, "time": sent,
                   "phase": op.phase, "n": op.n, "buyer": format!("u{}", op.buyer), "key": op.key}),
        ));
        let (kind, value) = match op.meaning {
            Meaning::Sold => ("ok", i64::from(counted.contains(&i))),
            Meaning::SoldOut | Meaning::Refused | Meaning::Busy => ("fail", 1),
            Meaning::Unknown => ("info", 1),
        };
        events.push((
            done,
            1,
            json!({"type": kind, "f": "add", "value": value, "process": i, "time": done,
                   "status": op.status, "order": op.order,
                   "latency_us": (op.done - op.sent).as_micros()}),
        ));
    }
    let end = row.elapsed.as_nanos() + 1;
    let process = row.ops.len();
    events.push((
        end,
        0,
        json!({"type": "invoke", "f": "read", "value": null, "process": process, "time": end}),
    ));
    events.push((
        end,
        1,
        json!({"type": "ok", "f": "read", "value": row.initial - row.left, "process": process, "time": end}),
    ));
    events.sort_by_key(|e| (e.0, e.1));
    let last = events.len().saturating_sub(1);
    out.write_all(b"[\n")?;
    for (index, (_, _, mut event)) in events.into_iter().enumerate() {
        event["index"] = json!(index);
        serde_json::to_writer(&mut *out, &event)?;
        out.write_all(if index == last { b"\n" } else { b",\n" })?;
    }
    out.write_all(b"]\n")?;
    Ok(())
}
