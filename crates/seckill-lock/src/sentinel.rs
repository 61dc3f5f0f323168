//! A master found through Redis Sentinel, followed across failovers (feature `sentinel`).
//!
//! redis-rs asks the sentinels for the master once, and a connection it makes stays on that
//! node after a failover. [`SentinelConnection`] keeps the multiplexed connection it got,
//! and drops it when the master stops being one — a connection error, a timeout, or a
//! `READONLY`/`MASTERDOWN` answer from a node that was demoted; the next command asks the
//! sentinels again. While they still name the dead master (they need
//! `down-after-milliseconds` and an election to agree), commands fail fast.
//!
//! It never sends a command twice: the command that met the failover fails with its own
//! error (a timeout is a lost answer, [`LockError::may_have_run`](crate::LockError::may_have_run)),
//! and only the next one goes to the new master.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::Mutex;

use crate::watchdog::Subscriber;

/// A connection to whichever node the sentinels call the master now, for the locks to be
/// taken on and, as a [`Subscriber`], for their subscription to listen on. Cheap to clone.
///
/// ```no_run
/// # use std::time::Duration;
/// use seckill_lock::sentinel::SentinelConnection;
/// use seckill_lock::{Namespace, WatchdogLocks};
///
/// # async fn run() -> Result<(), redis::RedisError> {
/// let sentinels = ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"];
/// let conn = SentinelConnection::new(&sentinels, "mymaster", Duration::from_secs(2))?;
/// let locks = WatchdogLocks::builder(conn.clone(), conn)
///     .namespace(Namespace::new("myapp"))
///     .start();
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SentinelConnection {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Mutex<SentinelClient>,
    /// The master's connection and `host:port`, once found; `None` until the next command
    /// asks the sentinels.
    current: Mutex<Option<(MultiplexedConnection, String)>>,
    timeout: Duration,
}

impl SentinelConnection {
    /// The master named `master`, as `sentinel_urls` name it; every command, and every
    /// question to the sentinels, bounded by `timeout`. Nothing is asked of the sentinels
    /// until the first command.
    pub fn new(
        sentinel_urls: &[&str],
        master: impl Into<String>,
        timeout: Duration,
    ) -> redis::RedisResult<Self> {
        let master: String = master.into();
        let sentinels = SentinelClient::build(
            sentinel_urls.to_vec(),
            master,
            None,
            SentinelServerType::Master,
        )?;
        Ok(Self {
            shared: Arc::new(Shared {
                sentinels: Mutex::new(sentinels),
                current: Mutex::new(None),
                timeout,
            }),
        })
    }

    /// A client for the master the sentinels name now (for a connection of its own, such as
    /// a subscription's).
    pub async fn master_client(&self) -> redis::RedisResult<redis::Client> {
        let mut sentinels = self.shared.sentinels.lock().await;
        tokio::time::timeout(self.shared.timeout, sentinels.async_get_client())
            .await
            .map_err(|_| timed_out("asking the sentinels for the master"))?
    }

    /// `host:port` of the master in use.
    pub async fn master_address(&self) -> redis::RedisResult<String> {
        Ok(self.connection().await?.1)
    }

    /// The master's connection: the one in use, or a new one to the master the sentinels
    /// name. One caller at a time asks them; the others wait for its answer.
    async fn connection(&self) -> redis::RedisResult<(MultiplexedConnection, String)> {
        let mut current = self.shared.current.lock().await;
        if let Some(found) = current.as_ref() {
            return Ok(found.clone());
        }
        let client = self.master_client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.shared.timeout))
            .set_response_timeout(Some(self.shared.timeout));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        tracing::info!(master = %addr, "connected to the master the sentinels name");
        *current = Some((conn.clone(), addr.clone()));
        Ok((conn, addr))
    }

    /// Forgets the master in use: the next command asks the sentinels again. For a reply
    /// that says the node is no longer the master where the connection cannot see it — a
    /// script that caught `READONLY` and answered it as a value.
    pub async fn forget_master(&self) {
        *self.shared.current.lock().await = None;
    }

    /// After an error that means the node is gone or no longer the master, forget it.
    async fn check(&self, result: &redis::RedisResult<impl Sized>) {
        let Err(err) = result else { return };
        let moved_on = err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || matches!(
                err.kind(),
                ErrorKind::Server(
                    redis::ServerErrorKind::ReadOnly | redis::ServerErrorKind::MasterDown
                )
            );
        if moved_on {
            tracing::warn!(error = %err, "master lost; asking the sentinels again");
            *self.shared.current.lock().await = None;
        }
    }
}

fn timed_out(what: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        what.to_owned(),
    ))
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (mut conn, _) = self.connection().await?;
            let result = conn.req_packed_command(cmd).await;
            self.check(&result).await;
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (mut conn, _) = self.connection().await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            self.check(&result).await;
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// The subscription listens on the master the sentinels name at each (re)connection, so it
/// follows a failover as the connection does.
impl Subscriber for SentinelConnection {
    async fn client(&self, _attempt: usize) -> Option<redis::Client> {
        match self.master_client().await {
            Ok(client) => Some(client),
            Err(err) => {
                tracing::warn!(%err, "no master from the sentinels");
                None
            }
        }
    }
}
