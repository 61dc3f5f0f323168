//! Where watchdog locks live in Redis: one namespace builds every lock's keys and the
//! pattern the instance's subscription listens on, so that they cannot disagree.

/// The prefix a process's watchdog locks live under.
///
/// A lock named `name` lives at `<prefix>:<name>:lock` and announces its release on
/// `<prefix>:<name>:lock:released`; the instance's one subscription listens on
/// `<prefix>:*:lock:released` ([`channel_pattern`](Namespace::channel_pattern)). Built
/// from one namespace, a lock's channel always matches the subscription that wakes its
/// waiters — a channel it did not match would leave them asleep until the lease ran out.
///
/// On a Redis Cluster, put a hash tag in the name (`{order:42}`): the lock's keys then
/// share one slot, as its scripts need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    prefix: String,
    /// Every lock's keys must carry a hash tag ([`requiring_hash_tags`](Self::requiring_hash_tags)).
    tagged: bool,
}

impl Namespace {
    /// Locks under `prefix` (`"myapp"`).
    ///
    /// # Panics
    ///
    /// When `prefix` is empty or holds a glob character (`*`, `?`, `[`, `]`, `\`), which
    /// would make the subscription's pattern match other channels than the locks'.
    pub fn new(prefix: &str) -> Self {
        assert!(
            !prefix.is_empty() && !prefix.contains(['*', '?', '[', ']', '\\']),
            "a lock namespace is a plain prefix, without glob characters: {prefix:?}"
        );
        Self {
            prefix: prefix.to_owned(),
            tagged: false,
        }
    }

    /// Refuses, at [`keys`](Self::keys) (so at `WatchdogLocks::lock`), a lock whose keys
    /// carry no hash tag: on a Redis Cluster its scripts would fail with `CROSSSLOT` at the
    /// first take instead. [`WatchdogLocksBuilder::start`](crate::WatchdogLocksBuilder::start) asks for
    /// it by itself on redis-rs's `ClusterConnection`; a connection of the caller's that
    /// may be a Cluster's asks for it here.
    pub fn requiring_hash_tags(mut self) -> Self {
        self.tagged = true;
        self
    }

    /// Whether a lock's keys must carry a hash tag.
    pub fn requires_hash_tags(&self) -> bool {
        self.tagged
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The keys of the lock named `name`.
    ///
    /// # Panics
    ///
    /// When the namespace [requires hash tags](Self::requiring_hash_tags) and the lock's
    /// keys have none (`{…}` with something inside, in the name or the prefix).
    pub fn keys(&self, name: &str) -> LockKeys {
        let base = format!("{}:{name}:lock", self.prefix);
        assert!(
            !self.tagged || has_hash_tag(&base),
            "on a Redis Cluster a lock's keys must share a slot: put a hash tag in its name \
             ({{order:42}}), {name:?} has none"
        );
        LockKeys {
            channel: format!("{base}:released"),
            queue: format!("{base}:queue"),
            waiting: format!("{base}:waiting"),
            token: format!("{base}:token"),
            lock: base,
        }
    }

    /// The pattern every lock's release channel in this namespace matches.
    pub fn channel_pattern(&self) -> String {
        format!("{}:*:lock:released", self.prefix)
    }
}

/// Whether `key` has a hash tag, as Redis Cluster reads one: the first `{` and the first
/// `}` after it, with something between.
fn has_hash_tag(key: &str) -> bool {
    key.split_once('{')
        .and_then(|(_, after)| after.split_once('}'))
        .is_some_and(|(tag, _)| !tag.is_empty())
}

/// The keys of one watchdog lock, all under the lock's name (one Cluster slot when the
/// name has a hash tag), as its [`Namespace`] builds them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    pub(crate) lock: String,
    pub(crate) channel: String,
    pub(crate) queue: String,
    pub(crate) waiting: String,
    pub(crate) token: String,
}

impl LockKeys {
    /// The lock: a hash `holder -> hold count` while held.
    pub fn lock(&self) -> &str {
        &self.lock
    }

    /// The channel a release publishes on.
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// A fair lock's queue: a list of waiting holders, oldest first.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// A fair lock's waiters' deadlines: sorted set holder -> the time (ms) after which a
    /// waiter that has not tried again leaves the queue.
    pub fn waiting(&self) -> &str {
        &self.waiting
    }

    /// A fenced lock's last fencing token: a counter the take script increments, which
    /// never expires, so that tokens grow for as long as the lock's name is used.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The keys in the order the watchdog lock's scripts take them: lock, channel, and the
    /// fair queue's two keys (the lock twice over for an unfair lock, which has none).
    pub(crate) fn for_scripts(&self, fair: bool) -> [&str; 4] {
        if fair {
            [&self.lock, &self.channel, &self.queue, &self.waiting]
        } else {
            [&self.lock, &self.channel, &self.lock, &self.lock]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_locks_channel_matches_its_namespaces_pattern() {
        let ns = Namespace::new("myapp");
        let keys = ns.keys("{order:42}");
        assert_eq!(keys.lock(), "myapp:{order:42}:lock");
        assert_eq!(keys.channel(), "myapp:{order:42}:lock:released");
        let pattern = ns.channel_pattern();
        let (head, tail) = pattern.split_once('*').unwrap();
        assert!(keys.channel().starts_with(head) && keys.channel().ends_with(tail));
    }

    #[test]
    fn a_namespace_requiring_hash_tags_takes_only_tagged_names() {
        let ns = Namespace::new("myapp").requiring_hash_tags();
        assert_eq!(ns.keys("{order:42}").lock(), "myapp:{order:42}:lock");
        for untagged in ["order:42", "{}order", "order}{42"] {
            let refused = std::panic::catch_unwind(|| ns.keys(untagged));
            assert!(refused.is_err(), "{untagged:?} refused");
        }
        // A tag in the prefix puts every lock of the namespace on one slot: allowed.
        let one_slot = Namespace::new("{myapp}").requiring_hash_tags();
        assert_eq!(one_slot.keys("order:42").lock(), "{myapp}:order:42:lock");
    }

    #[test]
    #[should_panic(expected = "glob")]
    fn a_glob_in_the_prefix_is_refused() {
        Namespace::new("my*app");
    }
}
