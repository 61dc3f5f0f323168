//! Giving a watchdog lock back: what a release script is asked ([`ReleaseArgs`]) and what
//! it did ([`Released`]), the crate's own release script ([`unlock`]), and a lock handed to
//! a waiter that had gone, given back ([`release_for_gone`]). The holder gives back one
//! hold at a time; on the last, to a waiter of this instance (a hand-off), or to everybody
//! (`WatchdogLock::give_back_with`, in `hold.rs`).

use std::time::Duration;

use redis::Value;

use crate::{Connection, LockError, millis, scripts};

/// What a release script is asked to do, for `WatchdogLock::release_with`.
#[derive(Debug, Clone)]
pub struct ReleaseArgs {
    /// The holder giving a hold back.
    pub holder: String,
    /// The handle's own lease (its explicit one, or the instance's), re-applied while
    /// holds remain.
    pub lease: std::time::Duration,
    /// A fair lock: the release names the queue's head.
    pub fair: bool,
    /// A waiter of this instance to hand the lock to, if the lock is given up.
    pub successor: Option<Successor>,
}

/// The waiter a release may hand the lock to.
#[derive(Debug, Clone)]
pub struct Successor {
    /// The waiter's holder id.
    pub holder: String,
    /// The lease it asked for.
    pub lease: std::time::Duration,
    /// How long it expects to hold the lock (a script that lets it into its critical
    /// section counts it as inside for that long).
    #[cfg_attr(not(feature = "scripting"), allow(dead_code))]
    pub hold: std::time::Duration,
}

/// What a release script did with the lock.
#[derive(Debug)]
pub enum Released {
    /// The holder did not hold it (it expired, or was taken away).
    NotHeld,
    /// Holds remain.
    StillHeld,
    /// Deleted, and the waiters told.
    Freed,
    /// Handed to the successor; what the script returned for it.
    HandedOver(Value),
}

impl Released {
    /// From the code `lib/lock.lua`'s `release` returns (nil, 0, 1, 2).
    pub fn from_code(code: Option<i64>, for_successor: Value) -> Self {
        match code {
            None => Self::NotHeld,
            Some(0) => Self::StillHeld,
            Some(2) => Self::HandedOver(for_successor),
            Some(_) => Self::Freed,
        }
    }
}

/// `watchdog_unlock.lua`, the crate's own release script, as asked: one hold given back,
/// the lock handed to the successor or freed. Answers whether the holder still held it.
pub(super) async fn unlock<C: Connection>(
    mut conn: C,
    keys: [String; 4],
    release: ReleaseArgs,
) -> Result<(bool, Released), LockError> {
    let mut script = scripts::WATCHDOG_UNLOCK.prepare_invoke();
    for key in &keys {
        script.key(key);
    }
    let successor = release.successor.as_ref();
    script
        .arg(millis(release.lease).max(1))
        .arg(&release.holder)
        .arg(if release.fair { "fair" } else { "unfair" })
        .arg(successor.map_or("", |s| s.holder.as_str()))
        .arg(successor.map_or(0, |s| millis(s.lease).max(1)));
    let code: Option<i64> = script.invoke_async(&mut conn).await?;
    let released = Released::from_code(code, Value::Nil);
    let held = !matches!(released, Released::NotHeld);
    Ok((held, released))
}

/// Gives back, once the `hold` it expected has passed, a lock a release handed to a waiter
/// (`holder`) whose acquire was dropped meanwhile: nobody else will (what the hand-off let
/// it into, on the caller's side, ends by then). `keys` in the scripts' order, `lease` the
/// instance's.
pub(super) fn release_for_gone<C: Connection>(
    conn: C,
    keys: [String; 4],
    lease: Duration,
    holder: String,
    hold: Duration,
) {
    tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        let lock = keys[0].clone();
        let asked = ReleaseArgs {
            holder: holder.clone(),
            lease,
            fair: false,
            successor: None,
        };
        if let Err(err) = unlock(conn, keys, asked).await {
            tracing::warn!(%lock, %holder, %err, "a lock handed to a waiter that had gone could not be given back: it expires one lease from now");
        }
    });
}
