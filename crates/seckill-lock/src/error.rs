//! Why a lock could not say yes or no.

use redis::RedisError;

/// Why a lock could not say yes or no.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The store could not be reached, or did not answer in time. When
    /// [`may_have_run`](LockError::may_have_run) is true (the command was sent and its answer
    /// lost), the command may still have run: a timeout is an unknown outcome, not a no.
    #[error("lock store unavailable: {source}")]
    Unavailable {
        /// Whether the command was sent before the answer was lost.
        may_have_run: bool,
        /// The client's error (a [`redis::RedisError`], or the ZooKeeper client's).
        source: BoxError,
    },
    /// The store answered with an error, or with something the lock did not expect.
    #[error("lock store error: {source}")]
    Store {
        /// The client's error.
        source: BoxError,
    },
    /// Redlock: fewer than a quorum of its servers answered at all, so the lock cannot be
    /// had, whoever holds it.
    #[error("redlock: {answered} of {servers} servers answered, fewer than a quorum")]
    NoQuorum {
        /// Servers that answered.
        answered: usize,
        /// Servers asked.
        servers: usize,
    },
    /// The lock was granted, but fewer replicas than asked had the grant within the time
    /// given ([`confirmed_by_replicas`](crate::WatchdogLock::confirmed_by_replicas)): it
    /// was given back, as a grant a failover could lose.
    #[error("lock granted but confirmed by {confirmed} of {wanted} replicas: given back")]
    NotConfirmed {
        /// Replicas asked for.
        wanted: u32,
        /// Replicas that had the grant in time.
        confirmed: u32,
    },
    /// The lock cannot do what was asked of it (the operation's name): a ZooKeeper lock
    /// has no lease to [`extend`](crate::Guard::extend), a setnx lock none at all.
    #[error("this lock does not support {0}")]
    Unsupported(&'static str),
    /// The lock was handed over, and lost before the acquire could return it: a fenced
    /// lock handed on by a holder of this instance, its new holder delayed past the lease
    /// before its token was issued. Not held (nothing to give back); try again.
    #[error("the lock was lost before its fencing token was issued")]
    Lost,
    /// The Tokio runtime shut down before a release it was running finished.
    #[error("the runtime shut down before the release finished")]
    RuntimeGone,
}

/// The error a store's client gave, boxed: [`LockError`] names no client's types.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl LockError {
    /// True when the command was sent and its answer lost (a timeout, a connection dropped
    /// once sent): it may have run.
    pub fn may_have_run(&self) -> bool {
        matches!(
            self,
            Self::Unavailable {
                may_have_run: true,
                ..
            }
        )
    }

    /// The store client's error, for a caller that looks into it (downcast it to
    /// [`redis::RedisError`]).
    pub fn into_source(self) -> Option<BoxError> {
        match self {
            Self::Unavailable { source, .. } | Self::Store { source } => Some(source),
            Self::NoQuorum { .. }
            | Self::NotConfirmed { .. }
            | Self::Unsupported(_)
            | Self::Lost
            | Self::RuntimeGone => None,
        }
    }
}

impl From<RedisError> for LockError {
    fn from(err: RedisError) -> Self {
        let lost =
            err.is_timeout() || (err.is_connection_dropped() && !err.is_connection_refusal());
        if lost || err.is_io_error() || err.is_connection_refusal() || err.is_cluster_error() {
            Self::Unavailable {
                may_have_run: lost,
                source: Box::new(err),
            }
        } else {
            Self::Store {
                source: Box::new(err),
            }
        }
    }
}
