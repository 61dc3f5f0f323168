//! The Lua scripts in `lua/`, each built once.
//!
//! [`redis::Script`] sends `EVALSHA` and falls back to `EVAL` (loading the script) when
//! Redis does not know it yet, for instance after a restart.

use std::sync::LazyLock;

use redis::Script;

/// The lock-free variant: check, decrement and record in one step.
pub static DEDUCT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/deduct.lua")));

/// A lock holder enters its critical section (overlap audit) and reads the stock.
pub static ENTER: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/enter.lua")));

/// Take one unit, record the order and leave the critical section.
pub static COMMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/commit.lua")));

/// Compare-and-delete release of a token lock.
pub static TOKEN_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/token_release.lua")));

/// Take or re-enter a watchdog (reentrant hash) lock.
pub static WATCHDOG_LOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/watchdog_lock.lua")));

/// Give back one hold of a watchdog lock; on the last, delete it and publish.
pub static WATCHDOG_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/watchdog_unlock.lua")));

/// The watchdog's tick: extend the lease if the owner still holds the lock.
pub static WATCHDOG_RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/watchdog_renew.lua")));

/// Extend a Redlock lock on one server, if it is still the caller's.
pub static REDLOCK_EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/redlock_extend.lua")));

/// A lock's TTL and holder, whichever kind holds it.
pub static LOCK_STATE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/lock_state.lua")));

/// Delete any lock and wake its waiters.
pub static FORCE_UNLOCK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/force_unlock.lua")));
