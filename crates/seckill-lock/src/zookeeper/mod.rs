//! The lock on a ZooKeeper ensemble: the standard recipe, named as Apache Curator's
//! `InterProcessMutex` names it, so a Java service locking the same path waits in the same
//! queue.
//!
//! Each contender creates an ephemeral sequential node `{dir}/_c_{uuid}-lock-{sequence}`;
//! the lowest sequence holds the lock; every other contender watches only the node just
//! before its own, so a release wakes one waiter, not all of them (no herd). The create is
//! answered once a majority of the ensemble has logged it (ZAB): a leader that dies right
//! after granting the lock loses nothing, and the next leader refuses the lock to anyone
//! else. Release deletes the node.
//!
//! The session is the lease: the node lives as long as the process's session, kept alive by
//! the client's pings. A holder whose session expires (the process paused, or cut off from
//! the ensemble for longer than the session timeout) loses its node, and the next in line
//! gets the lock — while the paused holder, when it wakes, does not know yet. Consensus
//! does not fix that; a fencing token does: the node's creation zxid, which the ensemble
//! hands out in one total order, so a later holder's is always greater
//! ([`Lock::fencing_token`]).

mod session;

pub use session::ZooKeeper;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;
use zookeeper_client::{Acls, Client, CreateMode, Error};

use crate::{HolderId, Lock, LockError};

/// Curator's lock name: the part of a node's name before its sequence.
const LOCK_NAME: &str = "lock-";

/// A handle on one lock for one holder.
pub struct ZooKeeperLock {
    zk: Arc<ZooKeeper>,
    /// The lock's directory, `{root}/{name}`: its contenders' nodes are its children.
    dir: String,
    holder: String,
    /// Once acquired: the session the node lives in, the node's path and its creation zxid.
    held: Option<Held>,
    /// While a take is in flight: its node's name, so that a take dropped before it
    /// answered can find the node it may have created.
    creating: Option<String>,
}

struct Held {
    client: Client,
    /// The node's name before its sequence, `_c_{uuid}-lock-`.
    name: String,
    node: String,
    czxid: i64,
}

impl ZooKeeper {
    /// The lock at `dir` (an absolute path, `/seckill/locks/101`) for a holder of its own
    /// (a fresh [`HolderId`]), whose id is the node's data.
    pub fn lock(self: &Arc<Self>, dir: &str) -> ZooKeeperLock {
        self.lock_as(dir, &HolderId::new())
    }

    /// The lock at `dir` for `holder`, for a caller that records who held what. Give each
    /// handle on a lock an id of its own.
    pub fn lock_as(self: &Arc<Self>, dir: &str, holder: &HolderId) -> ZooKeeperLock {
        ZooKeeperLock {
            zk: Arc::clone(self),
            dir: dir.to_owned(),
            holder: holder.to_string(),
            held: None,
            creating: None,
        }
    }
}

impl ZooKeeperLock {
    /// Creates this contender's node (and the lock's directory, the first time), named
    /// `_c_{uuid}-lock-`: the uuid finds it again when the answer was lost.
    async fn create(&self, client: &Client, name: &str) -> Result<(String, i64), Error> {
        let prefix = format!("{}/{name}", self.dir);
        let node = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let dir = CreateMode::Persistent.with_acls(Acls::anyone_all());
        loop {
            let created = self
                .zk
                .bounded(client.create(&prefix, self.holder.as_bytes(), &node))
                .await;
            match created {
                Ok((stat, sequence)) => return Ok((format!("{prefix}{sequence}"), stat.czxid)),
                Err(Error::NoNode) => self.zk.bounded(client.mkdir(&self.dir, &dir)).await?,
                Err(err) => return Err(err),
            }
        }
    }

    /// Waits until this contender's node is the first of the queue (true) or `deadline`
    /// passes (false; `None`: never), watching only the node before its own.
    async fn wait_turn(
        &self,
        client: &Client,
        node: &str,
        deadline: Option<Instant>,
    ) -> Result<bool, Error> {
        let mine = sequence(node).ok_or(Error::RuntimeInconsistent)?;
        loop {
            let children = self.zk.bounded(client.list_children(&self.dir)).await?;
            let before = children
                .iter()
                .filter_map(|child| Some((sequence(child)?, child)))
                .filter(|(seq, _)| *seq < mine)
                .max_by_key(|(seq, _)| *seq);
            let Some((_, before)) = before else {
                let own = node.rsplit('/').next().unwrap_or(node);
                if !children.iter().any(|child| child == own) {
                    // Our node is gone: the session that held it expired.
                    return Err(Error::SessionExpired);
                }
                return Ok(true);
            };
            let path = format!("{}/{before}", self.dir);
            let watcher = match self.zk.bounded(client.get_and_watch_data(&path)).await {
                Ok((_, _, watcher)) => watcher,
                Err(Error::NoNode) => continue,
                Err(err) => return Err(err),
            };
            let Some(deadline) = deadline else {
                watcher.changed().await;
                continue;
            };
            tokio::select! {
                _ = watcher.changed() => {}
                _ = tokio::time::sleep_until(deadline) => return Ok(false),
            }
        }
    }

    /// Creates the node `name` and waits its turn, for up to `wait`.
    async fn take_named(&mut self, wait: Duration, name: String) -> Result<bool, LockError> {
        // `None`: no deadline (`Duration::MAX`, as long as it takes).
        let deadline = Instant::now().checked_add(wait);
        let client = self.zk.client().await?;
        let (node, czxid) = match self.create(&client, &name).await {
            Ok(created) => created,
            Err(err) => {
                // The create may have reached the ensemble without its answer reaching us.
                if matches!(err, Error::ConnectionLoss | Error::Timeout) {
                    self.zk.clean_up(client, self.dir.clone(), name);
                }
                return Err(err.into());
            }
        };
        match self.wait_turn(&client, &node, deadline).await {
            Ok(true) => {
                self.held = Some(Held {
                    client,
                    name,
                    node,
                    czxid,
                });
                Ok(true)
            }
            Ok(false) => {
                self.zk.clean_up(client, self.dir.clone(), name);
                Ok(false)
            }
            Err(err) => {
                self.zk.clean_up(client, self.dir.clone(), name);
                Err(err.into())
            }
        }
    }
}

impl From<Error> for LockError {
    /// A lost connection or a timeout may have let the request run; an ended session took
    /// its nodes with it.
    fn from(err: Error) -> Self {
        match err {
            Error::ConnectionLoss | Error::Timeout => Self::Unavailable {
                may_have_run: true,
                source: Box::new(err),
            },
            Error::SessionExpired | Error::ClientClosed | Error::NoHosts => Self::Unavailable {
                may_have_run: false,
                source: Box::new(err),
            },
            err => Self::Store {
                source: Box::new(err),
            },
        }
    }
}

/// The sequence of a contender's node: the number after Curator's lock name.
fn sequence(node: &str) -> Option<i64> {
    let at = node.rfind(LOCK_NAME)?;
    node[at + LOCK_NAME.len()..].parse().ok()
}

impl Lock for ZooKeeperLock {
    /// Queues for the lock and waits its turn for up to `wait`. With a zero wait, one try:
    /// the node is created and the queue read once.
    async fn take(&mut self, wait: Duration) -> Result<bool, LockError> {
        let name = format!("_c_{}-{LOCK_NAME}", Uuid::new_v4());
        self.creating = Some(name.clone());
        let taken = self.take_named(wait, name).await;
        self.creating = None;
        taken
    }

    /// Deletes the node (a cancelled take's too, whether or not its create was answered).
    async fn clean_up(&mut self) -> Result<(), LockError> {
        if let Some(name) = self.creating.take() {
            let client = self.zk.client().await?;
            self.zk.clean_up(client, self.dir.clone(), name);
        }
        self.give_back().await?;
        Ok(())
    }

    /// Deletes the node. False when it was gone already (the session expired under the
    /// holder). When the ensemble cannot be reached, the delete goes on in the background.
    async fn give_back(&mut self) -> Result<bool, LockError> {
        let Some(held) = self.held.take() else {
            return Ok(false);
        };
        if held.client.state().is_terminated() {
            return Ok(false);
        }
        match self.zk.bounded(held.client.delete(&held.node, None)).await {
            Ok(()) => Ok(true),
            Err(Error::NoNode | Error::SessionExpired) => Ok(false),
            Err(err) => {
                self.zk.clean_up(held.client, self.dir.clone(), held.name);
                Err(err.into())
            }
        }
    }

    /// Nothing a holder of a live session can do is "as if it died": its node lives as long
    /// as its session. The handle just forgets the lock, which goes on being held.
    fn abandon(&mut self) {
        self.held = None;
    }

    /// True once the client knows the session ended: the node is gone with it. A client cut
    /// off from the ensemble learns that only when it reaches it again (the ensemble ends
    /// the session, as in Curator): until then this says false.
    fn is_lost(&self) -> bool {
        self.held
            .as_ref()
            .is_some_and(|held| held.client.state().is_terminated())
    }

    fn key(&self) -> &str {
        &self.dir
    }

    fn holder(&self) -> &str {
        &self.holder
    }

    /// The node's creation zxid.
    fn fencing_token(&self) -> Option<i64> {
        self.held.as_ref().map(|held| held.czxid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_are_read_after_curators_lock_name() {
        assert_eq!(sequence("_c_0f9c-lock-0000000042"), Some(42));
        // Curator's own nodes, and a uuid that happens to contain the lock name.
        assert_eq!(sequence("_c_1e2d-lock-x-lock-0000000007"), Some(7));
        assert_eq!(sequence("leader"), None);
        assert_eq!(sequence("_c_1e2d-lock-"), None);
    }
}
