//! Where one watchdog lock lives in Redis.

/// The keys of one watchdog lock, all under one hash tag (one Cluster slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    /// The lock: a hash `holder -> hold count` while held.
    pub lock: String,
    /// The channel a release publishes on; the instance's pattern subscription must
    /// match it.
    pub channel: String,
    /// A fair lock's queue: a list of waiting holders, oldest first.
    pub queue: String,
    /// A fair lock's waiters' deadlines: sorted set holder -> the time (ms) after which a
    /// waiter that has not tried again leaves the queue.
    pub waiting: String,
}

impl LockKeys {
    /// `<prefix>:lock`, `<prefix>:lock:released`, `<prefix>:lock:queue`,
    /// `<prefix>:lock:waiting`; the subscription pattern `*:lock:released` matches them.
    pub fn under(prefix: &str) -> Self {
        Self {
            lock: format!("{prefix}:lock"),
            channel: format!("{prefix}:lock:released"),
            queue: format!("{prefix}:lock:queue"),
            waiting: format!("{prefix}:lock:waiting"),
        }
    }
}
