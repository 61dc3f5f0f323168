//! The lock timeline: who was inside a product's critical section, and when.
//!
//! While a reset with `trace` says so, the scripts that enter and leave a critical section
//! (`lua/lib/critical.lua`) append each entry and exit to the shard's `trace` stream —
//! the stream's ids are Redis time, one clock for every instance — with a note of what
//! the holder knows of itself: its instance and variant, how long it waited, when its lock
//! was granted, the lease it got and when the watchdog renewed it. `GET /trace` merges the
//! shards' streams for the page, which draws one bar per critical section.
//!
//! A product that is not traced pays one `HGET` inside the entering script, and nothing
//! else: its holders write no note and no event.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::streams::StreamRangeReply;
use serde::Serialize;

use crate::error::AppError;
use crate::keys::{ProductId, ProductKeys};
use crate::product;
use crate::store::Store;

/// Events one `GET /trace` answers with, per shard: a lesson's worth.
pub const MAX_EVENTS: usize = 5_000;

/// One holder's times, as it goes: when it began to wait for its lock, when it got it,
/// when it entered; whether the product is traced (the entering script said so).
#[derive(Debug, Default)]
pub struct Timeline {
    waiting: Mutex<Option<Instant>>,
    granted: Mutex<Option<Instant>>,
    entered: Mutex<Option<Instant>>,
    renewals: Mutex<Vec<Instant>>,
    traced: AtomicBool,
}

impl Timeline {
    fn at(slot: &Mutex<Option<Instant>>) -> std::sync::MutexGuard<'_, Option<Instant>> {
        // Held for a read or a write, never across an await.
        slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The holder begins to wait for its lock.
    pub fn waiting(&self) {
        *Self::at(&self.waiting) = Some(Instant::now());
    }

    /// The holder has its lock.
    pub fn granted(&self) {
        *Self::at(&self.granted) = Some(Instant::now());
    }

    /// A holder let in by the holder that handed it the lock: it entered (about) now.
    pub fn entered_by_now(&self) {
        Self::at(&self.entered).get_or_insert_with(Instant::now);
    }

    /// The entering script's answer: whether the holder is on the timeline.
    pub fn set_traced(&self, traced: bool) {
        self.traced.store(traced, Ordering::Relaxed);
    }

    /// A holder handed the lock (and let in) by another: on the timeline when the other
    /// was.
    pub fn is_traced(&self) -> bool {
        self.traced.load(Ordering::Relaxed)
    }

    /// When the lock's lease was renewed, as the lock saw it, before the holder leaves.
    pub fn renewed(&self, renewals: Vec<Instant>) {
        *self.renewals.lock().unwrap_or_else(|e| e.into_inner()) = renewals;
    }

    /// The holder is inside: its entering script answered.
    pub fn entered_now(&self) {
        *Self::at(&self.entered) = Some(Instant::now());
    }

    /// What the holder says of itself as it enters (see [`Note`]), about to send the script
    /// that enters.
    pub fn entering(&self, instance: &str, variant: &str, lease: Option<Duration>) -> String {
        let now = Instant::now();
        let ago = |slot: &Mutex<Option<Instant>>| Self::at(slot).map(|t| ms(now - t));
        let mut note = format!("i={instance} v={variant}");
        if let Some(waited) = ago(&self.waiting) {
            note.push_str(&format!(" w={waited}"));
        }
        if let Some(granted) = ago(&self.granted) {
            note.push_str(&format!(" g={granted}"));
        }
        if let Some(lease) = lease {
            note.push_str(&format!(" l={}", ms(lease)));
        }
        note
    }

    /// What the holder says of itself as it leaves, `""` when it is not on the timeline:
    /// how long it waited before it entered and when its lease was renewed (ms after it
    /// entered).
    pub fn leaving(&self) -> String {
        if !self.is_traced() {
            return String::new();
        }
        let entered = *Self::at(&self.entered);
        let waiting = *Self::at(&self.waiting);
        let mut note = String::from("x=1");
        if let (Some(entered), Some(waiting)) = (entered, waiting) {
            note.push_str(&format!(
                " w={}",
                ms(entered.saturating_duration_since(waiting))
            ));
        }
        let renewals = self.renewals.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entered) = entered {
            let ticks: Vec<String> = renewals
                .iter()
                .filter(|t| **t >= entered)
                .map(|t| ms(*t - entered).to_string())
                .collect();
            if !ticks.is_empty() {
                note.push_str(&format!(" k={}", ticks.join(",")));
            }
        }
        note
    }

    /// What a holder handed the lock by `from` says of itself as its predecessor lets it in.
    pub fn handed_over(instance: &str, variant: &str, from: &str) -> String {
        format!("i={instance} v={variant} f={from}")
    }
}

fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// One entry or exit, as `GET /trace` answers it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Event {
    /// The stream entry's id: unique within its shard.
    pub id: String,
    /// Redis time, ms.
    pub at: u64,
    pub shard: u32,
    /// `enter` or `leave`.
    pub event: String,
    pub holder: String,
    /// The holder's note, field by field (see [`Note`]).
    #[serde(flatten)]
    pub note: Note,
    /// `enter`: whether another holder was inside.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlap: Option<bool>,
    /// `leave`: what the holder did (`deducted`, `sold_out`, `lock_lost`, `fenced`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// What a holder says of itself: `i=<instance> v=<variant> w=<ms it waited before
/// entering> g=<ms since its lock was granted> l=<its lease, ms> k=<renewals, ms after it
/// entered, comma-separated> f=<the holder that handed it the lock>`, each when known.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Note {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub granted_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub renewals_ms: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handed_by: Option<String>,
}

impl Note {
    pub fn parse(text: &str) -> Self {
        let mut note = Self::default();
        for (name, value) in text.split(' ').filter_map(|f| f.split_once('=')) {
            let number = || value.parse().ok();
            match name {
                "i" => note.instance = Some(value.to_owned()),
                "v" => note.variant = Some(value.to_owned()),
                "w" => note.waited_ms = number(),
                "g" => note.granted_ms = number(),
                "l" => note.lease_ms = number(),
                "k" => note.renewals_ms = value.split(',').filter_map(|v| v.parse().ok()).collect(),
                "f" => note.handed_by = Some(value.to_owned()),
                _ => {}
            }
        }
        note
    }
}

/// The product's timeline from `since` (Redis time, ms) on: whether its sale is traced, and
/// every shard's events, merged in time order, at most [`MAX_EVENTS`] per shard.
pub async fn read(
    store: &Store,
    product: &ProductId,
    since: u64,
) -> Result<(bool, Vec<Event>), AppError> {
    let layout = product::layout(store, product).await?;
    let keys = ProductKeys::new(product);
    let first = keys.shard(&layout, 0);
    let traced: Option<i64> = store.conn().hget(&first.audit, "trace").await?;
    let mut events = Vec::new();
    for index in 0..layout.shards() {
        let shard = keys.shard(&layout, index);
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(&shard.trace)
            .arg(since)
            .arg("+")
            .arg("COUNT")
            .arg(MAX_EVENTS)
            .query_async(&mut store.conn())
            .await?;
        for entry in reply.ids {
            let field = |name: &str| entry.get::<String>(name);
            let at = entry.id.split('-').next().and_then(|t| t.parse().ok());
            let (Some(at), Some(event), Some(holder)) = (at, field("e"), field("h")) else {
                continue;
            };
            events.push(Event {
                at,
                shard: index,
                overlap: field("o").map(|o| o == "1"),
                outcome: field("r"),
                note: Note::parse(&field("n").unwrap_or_default()),
                id: entry.id,
                event,
                holder,
            });
        }
    }
    events.sort_by(|a, b| (a.at, a.shard, &a.id).cmp(&(b.at, b.shard, &b.id)));
    Ok((traced == Some(1), events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_read_back_field_by_field() {
        let note = Note::parse("i=a v=watchdog w=12 g=3 l=600 k=200,400 f=a/x:1 z=ignored");
        assert_eq!(note.instance.as_deref(), Some("a"));
        assert_eq!(note.variant.as_deref(), Some("watchdog"));
        assert_eq!(
            (note.waited_ms, note.granted_ms, note.lease_ms),
            (Some(12), Some(3), Some(600))
        );
        assert_eq!(note.renewals_ms, vec![200, 400]);
        assert_eq!(note.handed_by.as_deref(), Some("a/x:1"));
        assert_eq!(Note::parse(""), Note::default());
    }

    #[test]
    fn a_holder_not_on_the_timeline_says_nothing_as_it_leaves() {
        let timeline = Timeline::default();
        timeline.waiting();
        timeline.granted();
        let entering = timeline.entering("a", "token", Some(Duration::from_millis(200)));
        timeline.entered_now();
        assert!(
            entering.starts_with("i=a v=token w=") && entering.ends_with(" l=200"),
            "{entering}"
        );
        assert_eq!(timeline.leaving(), "");
        timeline.set_traced(true);
        assert!(timeline.leaving().starts_with("x=1 w="));
    }
}
