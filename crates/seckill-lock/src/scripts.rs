//! The locks' Lua scripts in `lua/`, each built once.
//!
//! [`redis::Script`] sends `EVALSHA` and falls back to `EVAL` (loading the script) when
//! Redis does not know it yet, for instance after a restart. The steps several scripts
//! share — take a lock, give it back, queue fairly — are Lua functions in
//! `lua/lib/lock.lua`, written once and put in front of each script that uses them.

use std::sync::LazyLock;

use redis::Script;

/// `lua/lib/lock.lua`: the watchdog lock's steps as Lua functions (`take`, `take_fair`,
/// `release`, `announce`, `leave_queue`), for a caller's script that takes or gives back a
/// lock in the same step as its own work on the lock's slot.
pub const LOCK_LUA: &str = include_str!("../lua/lib/lock.lua");

/// A script from `lua/`, with `lua/lib/lock.lua` in front of it when it uses it.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(include_str!(concat!("../lua/", $file))))
    };
    (lock, $file:literal) => {
        LazyLock::new(|| Script::new(&[LOCK_LUA, include_str!(concat!("../lua/", $file))].concat()))
    };
}

/// Compare-and-delete release of a string lock (setnx, token, Redlock).
pub(crate) static TOKEN_RELEASE: LazyLock<Script> = script!("token_release.lua");

/// Take or re-enter a watchdog (reentrant hash) lock, fair or not.
pub(crate) static WATCHDOG_LOCK: LazyLock<Script> = script!(lock, "watchdog_lock.lua");

/// Take or re-enter a watchdog lock, and issue a fencing token with it.
pub(crate) static FENCED_LOCK: LazyLock<Script> = script!(lock, "fenced_lock.lua");

/// A fenced lock's token for a hand-off, issued only while the new holder holds the lock.
pub(crate) static FENCED_TOKEN: LazyLock<Script> = script!("fenced_token.lua");

/// Give back one hold of a watchdog lock; on the last, hand it on or delete it and publish.
pub(crate) static WATCHDOG_UNLOCK: LazyLock<Script> = script!(lock, "watchdog_unlock.lua");

/// A fair lock's waiter leaves the queue.
pub(crate) static FAIR_LEAVE: LazyLock<Script> = script!(lock, "fair_leave.lua");

/// The watchdog's tick: extend the lease if the holder still holds the lock.
pub(crate) static WATCHDOG_RENEW: LazyLock<Script> = script!("watchdog_renew.lua");

/// Extend a string lock (a token lock, Redlock's on one server), if it is still the
/// caller's.
pub(crate) static TOKEN_EXTEND: LazyLock<Script> = script!("token_extend.lua");

/// A lock's TTL and holder, whichever kind holds it.
pub(crate) static LOCK_STATE: LazyLock<Script> = script!("lock_state.lua");

/// Delete any lock and wake its waiters.
pub(crate) static FORCE_UNLOCK: LazyLock<Script> = script!(lock, "force_unlock.lua");
