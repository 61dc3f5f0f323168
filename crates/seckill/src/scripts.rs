//! The Lua scripts in `lua/`, each built once.
//!
//! [`redis::Script`] sends `EVALSHA` and falls back to `EVAL` (loading the script) when
//! Redis does not know it yet, for instance after a restart.
//!
//! The steps that several scripts share — take a lock, give it back, enter a critical
//! section, commit — are Lua functions in `lua/lib/`, written once; a script is its
//! libraries followed by its own file, joined at compile time.

use std::sync::LazyLock;

use redis::Script;

/// A script from `lua/`, with the libraries it uses in front of it.
macro_rules! script {
    ($($file:literal),+) => {
        LazyLock::new(|| Script::new(concat!($(include_str!(concat!("../lua/", $file))),+)))
    };
}

/// The lock-free variant: check, decrement and record in one step.
pub static DEDUCT: LazyLock<Script> = script!("deduct.lua");

/// A lock holder enters its critical section (overlap audit) and reads the stock.
pub static ENTER: LazyLock<Script> = script!("lib/critical.lua", "enter.lua");

/// Take one unit, record the order and leave the critical section.
pub static COMMIT: LazyLock<Script> = script!("lib/critical.lua", "commit.lua");

/// Take a watchdog lock and, once it is taken, enter and read the stock: one round trip.
pub static LOCK_ENTER: LazyLock<Script> =
    script!("lib/lock.lua", "lib/critical.lua", "lock_enter.lua");

/// Commit (or just leave) and give the watchdog lock back, or hand it to a waiter of the
/// same instance and let that waiter in: one round trip.
pub static COMMIT_RELEASE: LazyLock<Script> =
    script!("lib/lock.lua", "lib/critical.lua", "commit_release.lua");

/// `shares`: claim a share of the pool (after giving expired claims back to it).
pub static SHARE_CLAIM: LazyLock<Script> = script!("share_claim.lua");

/// `shares`: record a sale from a claimed share, and renew the claim's lease.
pub static SHARE_SELL: LazyLock<Script> = script!("share_sell.lua");

/// Compare-and-delete release of a token lock.
pub static TOKEN_RELEASE: LazyLock<Script> = script!("token_release.lua");

/// Take or re-enter a watchdog (reentrant hash) lock, fair or not.
pub static WATCHDOG_LOCK: LazyLock<Script> = script!("lib/lock.lua", "watchdog_lock.lua");

/// Give back one hold of a watchdog lock; on the last, hand it on or delete it and publish.
pub static WATCHDOG_UNLOCK: LazyLock<Script> = script!("lib/lock.lua", "watchdog_unlock.lua");

/// A fair lock's waiter leaves the queue.
pub static FAIR_LEAVE: LazyLock<Script> = script!("lib/lock.lua", "fair_leave.lua");

/// The watchdog's tick: extend the lease if the owner still holds the lock.
pub static WATCHDOG_RENEW: LazyLock<Script> = script!("watchdog_renew.lua");

/// Extend a Redlock lock on one server, if it is still the caller's.
pub static REDLOCK_EXTEND: LazyLock<Script> = script!("redlock_extend.lua");

/// A lock's TTL and holder, whichever kind holds it.
pub static LOCK_STATE: LazyLock<Script> = script!("lock_state.lua");

/// Delete any lock and wake its waiters.
pub static FORCE_UNLOCK: LazyLock<Script> = script!("lib/lock.lua", "force_unlock.lua");
