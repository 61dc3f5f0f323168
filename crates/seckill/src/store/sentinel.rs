//! A master found through Redis Sentinel, followed across failovers.
//!
//! redis-rs asks the sentinels for the master once; this keeps the multiplexed connection
//! it got, and drops it when the master stops being one — a connection error, a timeout,
//! or a `READONLY`/`MASTERDOWN` answer from a node that was demoted. The next command asks
//! the sentinels again. While they still name the dead master (they need
//! `down-after-milliseconds` and an election to agree), commands fail fast with 503.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::Mutex;

/// A connection to whichever node the sentinels call the master now. Cheap to clone.
#[derive(Clone)]
pub struct SentinelConn {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Mutex<SentinelClient>,
    /// The master's connection and `host:port`, once found; `None` until the next command
    /// asks the sentinels.
    current: Mutex<Option<(MultiplexedConnection, String)>>,
    timeout: Duration,
}

impl SentinelConn {
    /// Nothing is asked of the sentinels until the first command.
    pub fn new(
        sentinel_urls: &[&str],
        master: &str,
        timeout: Duration,
    ) -> redis::RedisResult<Self> {
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

    /// A client for the master the sentinels name now (for a subscription of its own).
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

impl ConnectionLike for SentinelConn {
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
