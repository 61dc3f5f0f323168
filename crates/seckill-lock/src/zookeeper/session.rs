//! The process's one ZooKeeper session, made again when it ends, and the clean-up of nodes
//! a contender could not delete itself.

use std::time::Duration;

use tokio::sync::Mutex;
use zookeeper_client::{Client, Error};

use crate::LockError;

/// How long a background clean-up keeps trying to delete a node before it leaves it to
/// the session's end.
const CLEAN_UP_FOR: Duration = Duration::from_secs(600);

/// An ensemble and this process's session with it. Every lock of the process lives in the
/// one session, as every `InterProcessMutex` of a JVM lives in its `CuratorFramework`'s:
/// the session's pings keep them all, and its expiry takes them all.
pub struct ZooKeeper {
    hosts: String,
    session_timeout: Duration,
    op_timeout: Duration,
    current: Mutex<Option<Client>>,
}

impl ZooKeeper {
    /// An ensemble at `hosts` (`"127.0.0.1:2181,127.0.0.1:2182,…"`), with nothing asked yet:
    /// the session starts with the first lock. The session asks for `session_timeout` (the
    /// servers bound it); every request is bounded by `op_timeout`.
    pub fn new(hosts: &str, session_timeout: Duration, op_timeout: Duration) -> Self {
        Self {
            hosts: hosts.to_owned(),
            session_timeout,
            op_timeout,
            current: Mutex::new(None),
        }
    }

    /// The live session, or a new one when there is none or it ended (expired, closed): an
    /// ended session is never used again, and its nodes are gone with it.
    /// Waiting for another request's connect counts against the request timeout too, so
    /// that with the ensemble unreachable requests fail one timeout apart, not in a queue.
    pub(super) async fn client(&self) -> Result<Client, LockError> {
        let mut current = tokio::time::timeout(self.op_timeout, self.current.lock())
            .await
            .map_err(|_| Error::Timeout)?;
        if let Some(client) = current.as_ref()
            && !client.state().is_terminated()
        {
            return Ok(client.clone());
        }
        let connect = Client::connector()
            .with_session_timeout(self.session_timeout)
            .with_connection_timeout(self.op_timeout)
            .with_fail_eagerly()
            .connect(&self.hosts);
        let client = tokio::time::timeout(self.op_timeout, connect)
            .await
            .map_err(|_| Error::Timeout)??;
        tracing::info!(session = %client.session_id(), "zookeeper session started");
        *current = Some(client.clone());
        Ok(client)
    }

    /// `request`, given up after the request timeout.
    pub(super) async fn bounded<T>(
        &self,
        request: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::time::timeout(self.op_timeout, request)
            .await
            .unwrap_or(Err(Error::Timeout))
    }

    /// Deletes, in the background, the child of `dir` whose name starts with `name` (a
    /// contender's node, found by its unique prefix, whether or not its create was answered),
    /// trying again while the ensemble cannot be reached, until it is gone or the session
    /// ends (and the node with it). Left behind, it would block the lock for as long as the
    /// session lives.
    pub(super) fn clean_up(&self, client: Client, dir: String, name: String) {
        let op_timeout = self.op_timeout;
        tokio::spawn(async move {
            let bounded = |d: Duration| tokio::time::sleep(d.min(op_timeout));
            let until = tokio::time::Instant::now() + CLEAN_UP_FOR;
            while tokio::time::Instant::now() < until && !client.state().is_terminated() {
                let listed = tokio::time::timeout(op_timeout, client.list_children(&dir)).await;
                let node = match listed {
                    Ok(Ok(children)) => children.into_iter().find(|c| c.starts_with(&name)),
                    Ok(Err(Error::NoNode)) => return,
                    _ => {
                        bounded(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Some(node) = node else { return };
                let path = format!("{dir}/{node}");
                match tokio::time::timeout(op_timeout, client.delete(&path, None)).await {
                    Ok(Ok(())) | Ok(Err(Error::NoNode)) => return,
                    _ => bounded(Duration::from_millis(100)).await,
                }
            }
            tracing::warn!(%dir, %name, "a zookeeper lock node could not be deleted; it goes with the session");
        });
    }
}
