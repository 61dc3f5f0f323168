//! An instance's consumer: moves orders from the shards' streams into the database.
//!
//! Per stream, each round: entries other consumers left pending longer than
//! `--orders-claim-ms` (`XAUTOCLAIM`: their instance died, or its database connection
//! did), else this consumer's own pending ones (an insert that failed), else new ones
//! (`XREADGROUP … >`). A batch is inserted in one transaction and only then acknowledged,
//! so an entry is acknowledged only once the database has its order; a crash in between
//! leaves it pending, to be inserted again — which inserts nothing twice.
//!
//! With `--redis-wait-replicas`, a batch is inserted only once as many replicas have its
//! entries: the master it was read from is asked, in one round trip, whether it still
//! has the batch's last entry and then `WAIT`s (replication is one ordered stream, so a
//! replica with the last entry has them all). Until then the batch stays pending; should a
//! failover take the entries back (the replica promoted without them), they are read no
//! more, and the database never has an order Redis lost.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::{RedisError, Value};
use tokio::time::Instant;

use super::entries::{
    Entry, as_list, as_map, batch, id_ms, integer, parse_entries, stream_entries, text,
};
use super::{GROUP, OrdersCounters, OrdersDb};
use crate::keys::{ORDER_STREAMS, product_of_stream, shard_of_stream};
use crate::store::{Confirmations, Confirmed, Store};

/// How the consumer runs.
pub struct Consumer {
    pub store: Store,
    pub db: Arc<OrdersDb>,
    /// Its name in the group: the instance's id.
    pub name: String,
    /// Pending this long, an entry is claimed from whoever has it.
    pub claim_after: Duration,
    /// Entries per read and per transaction.
    pub batch: usize,
    pub counters: OrdersCounters,
    /// `--redis-wait-replicas`: a batch goes into the database once replicas have it.
    pub confirmations: Option<Arc<Confirmations>>,
}

/// The streams are looked up again this often (a reset adds its product's).
const REFRESH: Duration = Duration::from_secs(1);
/// A round that found less than a full batch waits this long before the next, so that
/// under load the database gets fewer, larger transactions (each commit is a WAL flush)
/// rather than one per few entries; an order reaches it this much later at most.
const PACE: Duration = Duration::from_millis(25);
/// After an error (Redis or the database away), the next round waits this long.
const BACKOFF: Duration = Duration::from_millis(500);
/// Unread entries counted one by one, at most, when Redis does not know the group's lag.
const UNREAD_COUNTED: usize = 10_000;
/// Streams are trimmed at most this often.
const TRIM_EVERY: Duration = Duration::from_secs(1);

impl Consumer {
    /// Applies the migrations (again and again until the database answers), then consumes
    /// until the process ends.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                match self.db.migrate().await {
                    Ok(()) => break,
                    Err(err) => {
                        tracing::warn!(error = %err, "orders database not ready; trying again");
                        tokio::time::sleep(BACKOFF * 4).await;
                    }
                }
            }
            self.run().await;
        })
    }

    async fn run(&self) {
        let mut streams: Vec<String> = Vec::new();
        let mut refreshed: Option<Instant> = None;
        let mut claimed = Instant::now();
        let mut trimmed: HashMap<String, Instant> = HashMap::new();
        // What waits in each stream, as its last trim saw it: entries, and the oldest's age.
        let mut waiting: HashMap<String, (i64, i64)> = HashMap::new();
        loop {
            if refreshed.is_none_or(|at| at.elapsed() >= REFRESH) {
                let mut conn = self.store.conn();
                match redis::cmd("SMEMBERS")
                    .arg(ORDER_STREAMS)
                    .query_async::<Vec<String>>(&mut conn)
                    .await
                {
                    Ok(found) => {
                        streams = found;
                        refreshed = Some(Instant::now());
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "orders: streams not listed");
                        tokio::time::sleep(BACKOFF).await;
                        continue;
                    }
                }
            }
            let claiming = claimed.elapsed() >= self.claim_after / 2;
            if claiming {
                claimed = Instant::now();
            }
            let mut moved = 0;
            let mut failed = false;
            for stream in &streams {
                match self.round(stream, claiming).await {
                    Ok(n) => moved += n,
                    Err(err) => {
                        failed = true;
                        self.counters.failed_batches.inc();
                        tracing::warn!(error = %err, stream, "orders: a batch stays in the stream");
                    }
                }
                let due = trimmed
                    .get(stream)
                    .is_none_or(|at| at.elapsed() >= TRIM_EVERY);
                if due && let Ok(backlog) = trim(&self.store, stream).await {
                    trimmed.insert(stream.clone(), Instant::now());
                    let now = unix_ms();
                    let waits = backlog.map_or((0, 0), |b| {
                        let age = b.oldest.as_deref().and_then(id_ms).map(|at| now - at);
                        (b.pending + b.unread, age.unwrap_or(0).max(0))
                    });
                    waiting.insert(stream.clone(), waits);
                }
            }
            waiting.retain(|stream, _| streams.contains(stream));
            self.counters
                .backlog
                .set(waiting.values().map(|(entries, _)| entries).sum());
            self.counters
                .oldest_ms
                .set(waiting.values().map(|(_, age)| *age).max().unwrap_or(0));
            if failed {
                tokio::time::sleep(BACKOFF).await;
            } else if moved < self.batch {
                tokio::time::sleep(PACE).await;
            }
        }
    }

    /// One batch from `stream` into the database, acknowledged: how many entries.
    async fn round(&self, stream: &str, claiming: bool) -> anyhow::Result<usize> {
        let Some(product) = product_of_stream(stream) else {
            return Ok(0);
        };
        let mut conn = self.store.conn();
        let count = self.batch.to_string();
        let mut entries = Vec::new();
        if claiming {
            let claimed: Value = redis::cmd("XAUTOCLAIM")
                .arg(stream)
                .arg(GROUP)
                .arg(&self.name)
                .arg(u64::try_from(self.claim_after.as_millis()).unwrap_or(u64::MAX))
                .arg("0-0")
                .arg("COUNT")
                .arg(&count)
                .query_async(&mut conn)
                .await?;
            if let Value::Array(parts) = claimed
                && let Some(list) = parts.get(1)
            {
                entries = parse_entries(list);
                self.counters.claimed.inc_by(entries.len() as u64);
            }
        }
        for from in ["0", ">"] {
            if !entries.is_empty() {
                break;
            }
            let read: Value = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(GROUP)
                .arg(&self.name)
                .arg("COUNT")
                .arg(&count)
                .arg("STREAMS")
                .arg(stream)
                .arg(from)
                .query_async(&mut conn)
                .await?;
            entries = stream_entries(&read);
        }
        if entries.is_empty() {
            return Ok(0);
        }
        self.replicas_have(stream, &entries).await?;
        let batch = batch(product.as_str(), &entries);
        if !batch.orders.is_empty() || !batch.settlements.is_empty() {
            let inserted = self.db.insert(&batch).await?;
            self.counters.inserted.inc_by(inserted);
        }
        let mut ack = redis::cmd("XACK");
        ack.arg(stream).arg(GROUP);
        for (id, _) in &entries {
            ack.arg(id);
        }
        let acknowledged: i64 = ack.query_async(&mut conn).await?;
        self.counters
            .acknowledged
            .inc_by(u64::try_from(acknowledged).unwrap_or(0));
        Ok(entries.len())
    }
}

impl Consumer {
    /// With `--redis-wait-replicas`: `Ok` once as many replicas as asked for have
    /// `entries`, read from `stream` (the master asked still has the last, then `WAIT`);
    /// else the batch stays pending, and this says why.
    async fn replicas_have(&self, stream: &str, entries: &[Entry]) -> anyhow::Result<()> {
        let (Some(confirmations), Some((last, _))) = (&self.confirmations, entries.last()) else {
            return Ok(());
        };
        let shard = shard_of_stream(stream)
            .ok_or_else(|| anyhow::anyhow!("{stream} is no shard's orders stream"))?;
        match confirmations
            .confirm_entry(&shard.confirm, stream, last)
            .await?
        {
            Confirmed::Yes => Ok(()),
            Confirmed::Absent => anyhow::bail!(
                "entry {last} is no longer on the master of {stream} (a failover took it back): \
                 it never reaches the database"
            ),
            Confirmed::No | Confirmed::Busy => {
                anyhow::bail!("replicas do not have entry {last} of {stream} yet: it waits")
            }
        }
    }
}

/// Trims `stream` below what the group has acknowledged: below its oldest pending entry,
/// or up to the last one delivered when none is pending. Returns what waits in it, as
/// seen before the trim.
async fn trim(store: &Store, stream: &str) -> Result<Option<Backlog>, RedisError> {
    let mut conn = store.conn();
    let Some(backlog) = backlog(store, stream).await? else {
        return Ok(None);
    };
    let below = backlog
        .oldest_pending
        .as_ref()
        .or(backlog.last_delivered.as_ref());
    if let Some(id) = below {
        let _: i64 = redis::cmd("XTRIM")
            .arg(stream)
            .arg("MINID")
            .arg(id)
            .query_async(&mut conn)
            .await?;
    }
    Ok(Some(backlog))
}

/// The time now, ms since the Unix epoch (as stream ids count it).
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// What waits in one stream.
#[derive(Debug, Clone, Default)]
pub struct Backlog {
    /// Entries delivered to a consumer and not acknowledged.
    pub pending: i64,
    /// Entries not delivered yet.
    pub unread: i64,
    pub oldest_pending: Option<String>,
    pub last_delivered: Option<String>,
    /// The oldest entry not yet in the database, if any: its id.
    pub oldest: Option<String>,
}

/// The group's view of `stream`; `None` when the stream or its group is gone.
pub async fn backlog(store: &Store, stream: &str) -> Result<Option<Backlog>, RedisError> {
    let mut conn = store.conn();
    let groups: Value = match redis::cmd("XINFO")
        .arg("GROUPS")
        .arg(stream)
        .query_async(&mut conn)
        .await
    {
        Ok(groups) => groups,
        // No such key: the product was reset without the database.
        Err(err) if err.code() == Some("ERR") => return Ok(None),
        Err(err) => return Err(err),
    };
    let Some(group) = as_list(&groups)
        .iter()
        .map(as_map)
        .find(|g| g.get("name").and_then(text).as_deref() == Some(GROUP))
    else {
        return Ok(None);
    };
    let number = |k: &str| group.get(k).and_then(integer).unwrap_or(0);
    let mut backlog = Backlog {
        pending: number("pending"),
        last_delivered: group
            .get("last-delivered-id")
            .and_then(text)
            .filter(|id| id != "0-0"),
        ..Backlog::default()
    };
    // The group's `lag` is a count Redis keeps beside the ids, and it can be wrong (after a
    // restart that replayed the AOF it was seen thousands of entries high) or null (after
    // deletions): the ids decide. Everything is delivered when the last delivered id is
    // the last one the stream generated; otherwise `lag` when Redis knows it, else the
    // entries after the last delivered one, counted (up to a bound).
    let last_generated: Value = redis::cmd("XINFO")
        .arg("STREAM")
        .arg(stream)
        .query_async(&mut conn)
        .await?;
    let last_generated = as_map(&last_generated)
        .get("last-generated-id")
        .and_then(text)
        .filter(|id| id != "0-0");
    backlog.unread = if last_generated.is_none() || last_generated == backlog.last_delivered {
        0
    } else if let Some(lag) = group.get("lag").and_then(integer) {
        lag.max(1)
    } else {
        let after = undelivered(&mut conn, stream, &backlog, UNREAD_COUNTED).await?;
        i64::try_from(after.len()).unwrap_or(i64::MAX).max(1)
    };
    if backlog.pending > 0 {
        let summary: Value = redis::cmd("XPENDING")
            .arg(stream)
            .arg(GROUP)
            .query_async(&mut conn)
            .await?;
        backlog.oldest_pending = as_list(&summary).get(1).and_then(text);
        backlog.oldest = backlog.oldest_pending.clone();
    } else if backlog.unread > 0 {
        let first = undelivered(&mut conn, stream, &backlog, 1).await?;
        backlog.oldest = first.into_iter().next().map(|(id, _)| id);
    }
    Ok(Some(backlog))
}

/// Up to `count` entries of `stream` after the last one delivered to the group.
async fn undelivered(
    conn: &mut crate::store::RedisConn,
    stream: &str,
    backlog: &Backlog,
    count: usize,
) -> Result<Vec<Entry>, RedisError> {
    let from = backlog
        .last_delivered
        .as_ref()
        .map_or("-".to_owned(), |id| format!("({id}"));
    let entries: Value = redis::cmd("XRANGE")
        .arg(stream)
        .arg(from)
        .arg("+")
        .arg("COUNT")
        .arg(count)
        .query_async(conn)
        .await?;
    Ok(parse_entries(&entries))
}
