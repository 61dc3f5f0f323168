//! Who holds a lock: ids made by the crate, unique in the process.

use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

/// Who holds a lock through a handle: the value (or the hash field) the lock writes into
/// the store. Made only by the crate ([`HolderIds::next`], [`HolderId::new`]), so no two
/// are alike: a caller-chosen string is how two holders end up as one in Redis — the
/// release of the one freeing the lock under the other.
///
/// Cheap to clone, for a caller that records who held a lock. A clone is the same holder:
/// give each handle on one lock an id of its own, and re-enter a reentrant lock through
/// the handle that holds it ([`Lock::take`](crate::Lock::take) again).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct HolderId(std::sync::Arc<str>);

impl HolderId {
    /// A fresh id from the process's own [`HolderIds`]: `"<process uuid>:<n>"`.
    pub fn new() -> Self {
        static PROCESS: std::sync::OnceLock<HolderIds> = std::sync::OnceLock::new();
        PROCESS.get_or_init(HolderIds::new).next()
    }

    /// The id as written into the store.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for HolderId {
    fn default() -> Self {
        Self::new()
    }
}

impl std::ops::Deref for HolderId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for HolderId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for HolderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for HolderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

/// Holder ids: one UUID per generator plus a sequence number per id, so two tasks on the
/// same thread never share an identity (as Redisson's thread ids would).
#[derive(Debug)]
pub struct HolderIds {
    /// The generator's UUID (after the instance's name, when there is one), formatted once.
    process: String,
    next: AtomicU64,
}

impl HolderIds {
    /// Holder ids of a process: a fresh UUID, numbered from 1.
    pub fn new() -> Self {
        Self {
            process: Uuid::new_v4().to_string(),
            next: AtomicU64::new(1),
        }
    }

    /// Holder ids that start with the instance's name, `"<instance>/<uuid>:<n>"`, so that
    /// whoever looks at a lock sees which instance holds it.
    pub fn for_instance(instance: &str) -> Self {
        Self {
            process: format!("{instance}/{}", Uuid::new_v4()),
            next: AtomicU64::new(1),
        }
    }

    /// A fresh holder id, `"<uuid>:<n>"` (after the instance, when there is one).
    pub fn next(&self) -> HolderId {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(self.process.len() + 21);
        id.push_str(&self.process);
        id.push(':');
        id.push_str(itoa::Buffer::new().format(n));
        HolderId(id.into())
    }
}

impl Default for HolderIds {
    fn default() -> Self {
        Self::new()
    }
}
