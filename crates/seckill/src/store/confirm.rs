//! Confirming writes with replicas (`WAIT`) without stalling anything else.
//!
//! `WAIT` blocks the connection it runs on until enough replicas acknowledge, and it only
//! covers that connection's own writes. Run on the instance's shared multiplexed connection,
//! one replica that stops answering makes every command behind it — health checks,
//! `/stats`, other products' sales — wait out the timeout, one `WAIT` after another.
//!
//! So writes stay on the shared connection, and a confirmation runs on a connection of its
//! own, taken from a small pool per master (deadpool, `--confirm-connections` each):
//! a marker write on the slot of the key written (`SET <tag>:confirm`), then `WAIT`.
//! Replication is one ordered stream per master, so replicas that have the marker have
//! everything the master applied before it — the sale or the lock that was just written.
//! With group commit, one confirmation covers a whole batch.
//!
//! A confirmation that cannot come fails fast: once a `WAIT` falls short, the master is
//! *suspect* and every confirmation on it answers "not confirmed" at once, while one probe
//! (a marker and a short `WAIT`) tries every [`PROBE_EVERY`] until replicas answer again.
//! An exhausted pool is said at once too, never queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::{ErrorKind, RedisError};

use super::pools::{self, MasterPool, MasterPools, unavailable};
use super::{RedisConn, Store};

/// How often a suspect master is probed.
pub const PROBE_EVERY: Duration = Duration::from_millis(200);

/// How long a marker lives: long past any confirmation; it only has to outlive its `WAIT`.
const MARKER_TTL_MS: u64 = 60_000;

/// What a confirmation came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmed {
    /// Enough replicas have everything written before it.
    Yes,
    /// Fewer replicas acknowledged in time, or the master is known to lack them now.
    No,
    /// The master that serves the slot now lacks what was to be confirmed
    /// ([`Confirmations::confirm_recorded`]'s field): nothing of it to confirm.
    Absent,
    /// Every confirmation connection of the master is in use: nothing was asked.
    Busy,
}

/// What a confirmation first looks for on the master it asks.
#[derive(Debug, Clone, Copy)]
enum Held<'a> {
    /// A field of a hash (an order in the shard's orders).
    Field(&'a str, &'a str),
    /// An entry of a stream, by id (an orders stream's).
    Entry(&'a str, &'a str),
}

/// `--redis-wait-replicas` (sales) or `--lock-wait-replicas` (locks) on one store.
pub struct Confirmations {
    /// A pool of `--confirm-connections` per master, with its suspicion.
    masters: MasterPools<Suspicion>,
    replicas: u32,
    timeout: Duration,
    /// What the marker says: the instance that wrote it.
    instance: Arc<str>,
}

/// Whether a master's replicas are known to lag, and whether a probe is finding out.
#[derive(Default)]
struct Suspicion {
    suspect: AtomicBool,
    probing: AtomicBool,
}

impl Confirmations {
    /// Confirmations on `store` by `replicas` replicas within `timeout`, with `pool_size`
    /// connections per master; `None` when no replica is asked for.
    pub fn new(
        store: &Store,
        replicas: u32,
        timeout: Duration,
        pool_size: usize,
        instance: Arc<str>,
    ) -> anyhow::Result<Option<Arc<Self>>> {
        if replicas == 0 {
            return Ok(None);
        }
        Ok(Some(Arc::new(Self {
            masters: MasterPools::new(store, pool_size)?,
            replicas,
            timeout,
            instance,
        })))
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// Whether `replicas` replicas of the master that serves `marker`'s slot have everything
    /// written to it until now. `marker` is a key of the written key's hash tag.
    pub async fn confirm(self: &Arc<Self>, marker: &str) -> Result<Confirmed, RedisError> {
        self.confirm_held(marker, None).await
    }

    /// [`Confirmations::confirm`], and first, in the same round trip on the same
    /// connection (so on the same master, whatever a failover does meanwhile), whether
    /// `field` is in hash `hash` (on `marker`'s slot) there: `Absent` when it is not —
    /// nothing of it to confirm, and nothing said of the master.
    pub async fn confirm_recorded(
        self: &Arc<Self>,
        marker: &str,
        hash: &str,
        field: &str,
    ) -> Result<Confirmed, RedisError> {
        self.confirm_held(marker, Some(Held::Field(hash, field)))
            .await
    }

    /// [`Confirmations::confirm`], and first, in the same round trip on the same
    /// connection, whether stream `stream` (on `marker`'s slot) still has entry `id`:
    /// `Absent` when it does not.
    pub async fn confirm_entry(
        self: &Arc<Self>,
        marker: &str,
        stream: &str,
        id: &str,
    ) -> Result<Confirmed, RedisError> {
        self.confirm_held(marker, Some(Held::Entry(stream, id)))
            .await
    }

    async fn confirm_held(
        self: &Arc<Self>,
        marker: &str,
        held: Option<Held<'_>>,
    ) -> Result<Confirmed, RedisError> {
        let master = self.masters.master_of(marker).await?;
        if master.state.suspect.load(Ordering::Acquire) {
            self.probe(master, marker);
            return Ok(Confirmed::No);
        }
        let checkout = master
            .checkout(Duration::ZERO, self.masters.timeout())
            .await;
        let mut conn = match checkout {
            Ok(Some(conn)) => conn,
            Ok(None) => return Ok(Confirmed::Busy),
            Err(err) => {
                self.masters.forget_slots().await;
                return Err(err);
            }
        };
        let acked = match self.wait_held(&mut *conn, marker, held, self.timeout).await {
            Ok(Some(acked)) => acked,
            Ok(None) => return Ok(Confirmed::Absent),
            Err(err) => {
                // A connection that failed may be to a master that is gone.
                pools::drop_broken(conn);
                self.masters.forget_slots().await;
                return Err(err);
            }
        };
        if acked >= self.replicas {
            return Ok(Confirmed::Yes);
        }
        tracing::warn!(
            key = %marker,
            acked,
            wanted = self.replicas,
            "not confirmed by enough replicas in time: confirmations on this master fail fast until a probe succeeds"
        );
        master.state.suspect.store(true, Ordering::Release);
        self.probe(master, marker);
        Ok(Confirmed::No)
    }

    /// A marker on `marker`'s slot, then `WAIT`, in one round trip on `conn`.
    async fn wait(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        marker: &str,
        timeout: Duration,
    ) -> Result<u32, RedisError> {
        let acked = self.wait_held(conn, marker, None, timeout).await?;
        Ok(acked.unwrap_or(0))
    }

    /// [`Confirmations::wait`], after a look for `held` in the same round trip: `None`
    /// when it is not there (the marker written and waited for all the same).
    async fn wait_held(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        marker: &str,
        held: Option<Held<'_>>,
        timeout: Duration,
    ) -> Result<Option<u32>, RedisError> {
        let mut pipe = redis::pipe();
        match held {
            Some(Held::Field(hash, field)) => {
                pipe.cmd("HEXISTS").arg(hash).arg(field);
            }
            // How many entries of id `id`: one, or none.
            Some(Held::Entry(stream, id)) => {
                pipe.cmd("XRANGE")
                    .arg(stream)
                    .arg(id)
                    .arg(id)
                    .arg("COUNT")
                    .arg(1);
            }
            None => {}
        }
        let replies: Vec<redis::Value> = pipe
            .cmd("SET")
            .arg(marker)
            .arg(&*self.instance)
            .arg("PX")
            .arg(MARKER_TTL_MS)
            .ignore()
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(seckill_lock::millis(timeout).max(1))
            .query_async(conn)
            .await?;
        let (acked, found) = match replies.as_slice() {
            [redis::Value::Array(entries), acked] => (acked, !entries.is_empty()),
            [found, acked] => (acked, redis::from_redis_value_ref::<bool>(found)?),
            [acked] => (acked, true),
            _ => {
                return Err(RedisError::from((
                    ErrorKind::UnexpectedReturnType,
                    "WAIT's reply",
                )));
            }
        };
        let acked = redis::from_redis_value_ref::<u32>(acked)?;
        Ok(found.then_some(acked))
    }

    /// Tries, every [`PROBE_EVERY`], whether replicas confirm again; clears the master's
    /// suspicion when they do. One probe per master at a time.
    fn probe(self: &Arc<Self>, master: Arc<MasterPool<Suspicion>>, marker: &str) {
        if master.state.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (this, marker) = (self.clone(), marker.to_owned());
        tokio::spawn(async move {
            // A short WAIT: a replica that answers at all answers in well under it.
            let short = this.timeout.min(Duration::from_millis(100));
            loop {
                tokio::time::sleep(PROBE_EVERY).await;
                let checkout = master.checkout(this.timeout, this.masters.timeout()).await;
                let answered = match checkout {
                    Ok(Some(mut conn)) => match this.wait(&mut *conn, &marker, short).await {
                        Ok(acked) => Some(acked),
                        Err(_) => {
                            pools::drop_broken(conn);
                            None
                        }
                    },
                    Ok(None) | Err(_) => None,
                };
                match answered {
                    Some(acked) if acked >= this.replicas => {
                        master.state.suspect.store(false, Ordering::Release);
                        master.state.probing.store(false, Ordering::Release);
                        tracing::info!(key = %marker, "replicas confirm again");
                        return;
                    }
                    Some(_) => {}
                    None => {
                        // The master is gone (a failover, a crash): forget it; the next
                        // confirmation finds the master that serves the slot then.
                        this.masters.forget(&master);
                        this.masters.forget_slots().await;
                        master.state.probing.store(false, Ordering::Release);
                        return;
                    }
                }
            }
        });
    }
}

impl RedisConn {
    /// `host:port` of the master in use, for a connection to one master (standalone:
    /// `None`; a Cluster has many).
    pub async fn master_address(&self) -> Result<String, RedisError> {
        match self {
            Self::Sentinel(conn) => conn.master_address().await,
            _ => Err(unavailable("only a sentinel connection names one master")),
        }
    }
}
