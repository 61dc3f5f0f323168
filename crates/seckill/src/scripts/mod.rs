//! The service's Lua scripts in `lua/`, each built once, and the functions that fill in
//! their keys and arguments, so that no caller counts `KEYS[5]` by hand.
//!
//! [`redis::Script`] sends `EVALSHA` and falls back to `EVAL` (loading the script) when
//! Redis does not know it yet, for instance after a restart. The steps several scripts
//! share — enter a critical section, commit — are Lua functions in `lua/lib/critical.lua`;
//! taking and giving back a watchdog lock are `seckill-lock`'s ([`LOCK_LUA`]). A script
//! is its libraries followed by its own file.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, ScriptInvocation};
use seckill_lock::watchdog::{FAIR_PATIENCE, ReleaseArgs};
use seckill_lock::{LOCK_LUA, millis};

use crate::keys::ShardKeys;

mod deduct;
mod lost;
mod payment;
mod replies;
mod shares;

pub use deduct::{Deduct, ScriptCall, deduct};
pub use lost::{idem_fence, resolve};
pub use payment::{expire, expired_mark, give_back, pay, reserve, return_expired};
pub(crate) use shares::{share_sell, share_take};

pub(crate) use replies::PayReply;
pub use replies::{Refusal, Reply};

const CRITICAL_LUA: &str = include_str!("../../lua/lib/critical.lua");

/// What a lock holder presents at the stock when it commits.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Credentials<'a> {
    /// A holder that must still be a field of the shard's lock hash (a watchdog lock that
    /// lives beside the stock), checked inside the commit script.
    pub lock_holder: Option<&'a str>,
    /// `fence=on`: the fencing token the holder was granted.
    pub token: Option<i64>,
    /// The sale's epoch the holder's entry read (`enter.lua`): it sells only in that sale,
    /// never in one a reset started since (which gave its lock up, wherever it lives).
    pub epoch: Option<&'a str>,
}

/// How the commit takes the unit.
#[derive(Debug, Clone, Copy)]
pub(crate) enum StockWrite {
    /// `DECR` in Redis.
    Decrement,
    /// `SET` a value the application computed from what it read earlier (naive's lost
    /// update).
    Set(i64),
}

/// A script from `lua/`, with the libraries it uses (`[LOCK_LUA, …]`) in front of it.
macro_rules! script {
    ($file:literal) => {
        LazyLock::new(|| Script::new(include_str!(concat!("../../lua/", $file))))
    };
    ([$($library:expr),+], $file:literal) => {
        LazyLock::new(|| {
            Script::new(&[$($library,)+ include_str!(concat!("../../lua/", $file))].concat())
        })
    };
}

/// The lock-free variant: check, decrement and record in one step.
static DEDUCT: LazyLock<Script> = script!([CRITICAL_LUA], "deduct.lua");

/// A lock holder enters its critical section (overlap audit) and reads the stock.
static ENTER: LazyLock<Script> = script!([CRITICAL_LUA], "enter.lua");

/// Leave the critical section without selling (sold out, or the lock found lost).
static LEAVE: LazyLock<Script> = script!([CRITICAL_LUA], "leave.lua");

/// Take one unit, record the order and leave the critical section.
static COMMIT: LazyLock<Script> = script!([CRITICAL_LUA], "commit.lua");

/// Take a watchdog lock and, once it is taken, enter and read the stock: one round trip.
static LOCK_ENTER: LazyLock<Script> = script!([LOCK_LUA, CRITICAL_LUA], "lock_enter.lua");

/// Commit (or just leave) and give the watchdog lock back, or hand it to a waiter of the
/// same instance and let that waiter in: one round trip.
static COMMIT_RELEASE: LazyLock<Script> = script!([LOCK_LUA, CRITICAL_LUA], "commit_release.lua");

/// `shares`: take a share of the pool (after giving expired shares back to it).
static SHARE_TAKE: LazyLock<Script> = script!("share_take.lua");

/// `shares`: record a sale from a share an instance holds, and renew the share's lease.
static SHARE_SELL: LazyLock<Script> = script!([CRITICAL_LUA], "share_sell.lua");

/// A split product's per-user limit: reserve a unit for a buyer, or give it back.
static RESERVE: LazyLock<Script> = script!("reserve.lua");

/// Pay for a reserved order (or find it expired), on its shard.
static PAY: LazyLock<Script> = script!([CRITICAL_LUA], "pay.lua");

/// Expire a shard's reservations that were not paid in time.
static EXPIRE: LazyLock<Script> = script!([CRITICAL_LUA], "expire.lua");

/// What became of a sale whose answer was lost: found, or voided so that it never runs.
static RESOLVE: LazyLock<Script> = script!("resolve.lua");

/// A request that took a split product's key over looks at one shard: the old request's
/// sale there, or a fence that keeps it from selling there after.
static IDEM_FENCE: LazyLock<Script> = script!("idem_fence.lua");

/// Claim an idempotency key before serving its request, or find its answer.
pub static IDEM_CLAIM: LazyLock<Script> = script!("idem_claim.lua");

/// Give an idempotency key's claim its answer, or give it up.
pub static IDEM_FINISH: LazyLock<Script> = script!("idem_finish.lua");

/// `idem_claim.lua`'s answer while another request holds the key.
pub const IDEM_IN_FLIGHT: &str = "in_flight";
/// `idem_finish.lua`'s step that marks a key's sale unknown (its answer lost).
pub const IDEM_UNKNOWN: &str = "unknown";

/// One sale as the commit scripts record it.
pub struct Sale<'a> {
    pub shard: &'a ShardKeys,
    /// Who leaves the critical section.
    pub holder: &'a str,
    /// The order id the sale is recorded under.
    pub order: &'a str,
    pub instance: &'a str,
    pub variant: &'a str,
    /// The buyer, or `""` when the request named none.
    pub user: &'a str,
    /// The request's idempotency key, when it has one.
    pub keyed: Option<&'a str>,
    /// The shard is one of a split product's, whose claims live on the product's slot.
    pub split: bool,
    /// What the holder says of itself on the product's timeline, `""` when it is not on it
    /// (`crate::trace`).
    pub trace: String,
}

impl Sale<'_> {
    /// The keys and first arguments of `lib/critical.lua`'s `commit`, as `commit.lua` and
    /// `commit_release.lua` both take them.
    fn fill(&self, script: &mut ScriptInvocation<'_>) {
        let shard = self.shard;
        script
            .key(&shard.stock)
            .key(&shard.inside)
            .key(&shard.orders)
            .key(&shard.audit)
            .key(&shard.lock)
            .key(&shard.fence)
            .arg(self.holder)
            .arg(self.order)
            .arg(self.instance)
            .arg(self.variant);
    }

    /// The keys and arguments of the sale's extras (`lib/critical.lua`'s `sale`: the
    /// idempotency key, the orders stream, the unpaid reservations, the voided order
    /// ids), after everything else the script takes.
    fn fill_keyed(&self, script: &mut ScriptInvocation<'_>) {
        let key = self.keyed.unwrap_or("");
        // The claim, or where the claim's answer comes after the sale, the key's fence.
        let claim = if self.split {
            self.shard.key_fence(key)
        } else {
            self.shard.claim(key)
        };
        script
            .key(claim)
            .key(&self.shard.keys)
            .key(&self.shard.stream)
            .key(&self.shard.unpaid)
            .key(&self.shard.trace)
            .key(&self.shard.void)
            .arg(key)
            .arg(if self.split { "1" } else { "0" })
            .arg(self.shard.index)
            .arg(&self.trace);
    }
}

/// `enter.lua`: `holder` enters `shard`'s critical section for up to `stay`, presenting its
/// fencing `token` if it has one, and saying `note` of itself on the timeline
/// (`crate::trace`) if the product is traced.
pub fn enter(
    shard: &ShardKeys,
    holder: &str,
    stay: Duration,
    token: Option<i64>,
    note: &str,
) -> ScriptInvocation<'static> {
    let mut script = ENTER.prepare_invoke();
    script
        .key(&shard.stock)
        .key(&shard.inside)
        .key(&shard.audit)
        .key(&shard.fence)
        .key(&shard.trace)
        .arg(holder)
        .arg(millis(stay))
        .arg(token_arg(token))
        .arg(note);
    script
}

/// Why a holder leaves its critical section without selling.
#[derive(Debug, Clone, Copy)]
pub enum Leaving {
    SoldOut,
    /// It found its lock gone before committing (counted in the audit).
    LockLost,
}

/// `leave.lua`: `holder` leaves `shard`'s critical section without selling, saying `note`
/// of itself on the timeline (`""`: it is not on it).
pub fn leave(
    shard: &ShardKeys,
    holder: &str,
    why: Leaving,
    note: &str,
) -> ScriptInvocation<'static> {
    let mut script = LEAVE.prepare_invoke();
    script
        .key(&shard.inside)
        .key(&shard.audit)
        .key(&shard.trace)
        .arg(holder)
        .arg(match why {
            Leaving::SoldOut => "sold_out",
            Leaving::LockLost => "lock_lost",
        })
        .arg(note);
    script
}

/// `commit.lua`: the sale written as `write` says, its holder presenting `credentials`.
pub(crate) fn commit(
    sale: &Sale<'_>,
    write: StockWrite,
    credentials: Credentials<'_>,
) -> ScriptInvocation<'static> {
    let mut script = COMMIT.prepare_invoke();
    sale.fill(&mut script);
    // naive checked the per-user limit itself, before its work; every other sale is
    // checked here, inside the critical section.
    let (take, value, limit) = match write {
        StockWrite::Decrement => ("decr", 0, "check"),
        StockWrite::Set(value) => ("set", value, "record"),
    };
    script
        .key(&sale.shard.buyers)
        .key(&sale.shard.meta)
        .arg(take)
        .arg(value)
        .arg(credentials.lock_holder.unwrap_or_default())
        .arg(token_arg(credentials.token))
        .arg(sale.user)
        .arg(limit);
    sale.fill_keyed(&mut script);
    script.arg(credentials.epoch.unwrap_or_default());
    script
}

/// `lock_enter.lua` for `holder` on `shard`'s lock: one try at the watchdog lock, which
/// enters the critical section once the lock is taken (`stay`: how long it may be inside;
/// `note`: what it says of itself on the timeline, if the product is traced).
pub fn lock_enter(
    shard: &ShardKeys,
    holder: &str,
    lease: Duration,
    fair: bool,
    stay: Duration,
    note: &str,
) -> ScriptInvocation<'static> {
    let mut script = LOCK_ENTER.prepare_invoke();
    script
        .key(&shard.lock)
        .key(&shard.lock_channel)
        .key(&shard.lock_queue)
        .key(&shard.lock_waiting)
        .key(&shard.stock)
        .key(&shard.inside)
        .key(&shard.audit)
        .key(&shard.fence)
        .key(&shard.trace)
        .arg(millis(lease).max(1))
        .arg(holder)
        .arg(if fair { "fair" } else { "unfair" })
        .arg(millis(FAIR_PATIENCE))
        .arg(millis(stay))
        .arg(note);
    script
}

/// `commit_release.lua`: the sale's holder leaves the critical section — selling a unit
/// when `sells`, otherwise just leaving — and gives the lock back as `release` says (to
/// its successor, when it names one, which says `successor_note` of itself on the timeline
/// when this holder is on it).
pub fn commit_release(
    sale: &Sale<'_>,
    sells: bool,
    release: &ReleaseArgs,
    successor_note: &str,
) -> ScriptInvocation<'static> {
    let successor = release.successor.as_ref();
    let shard = sale.shard;
    let mut script = COMMIT_RELEASE.prepare_invoke();
    sale.fill(&mut script);
    script
        .key(&shard.lock_channel)
        .key(&shard.lock_queue)
        .key(&shard.lock_waiting)
        .key(&shard.buyers)
        .key(&shard.meta)
        .arg(if sells { "decr" } else { "leave" })
        .arg(millis(release.lease).max(1))
        .arg(if release.fair { "fair" } else { "unfair" })
        .arg(successor.map_or("", |s| s.holder.as_str()))
        .arg(successor.map_or(0, |s| millis(s.lease).max(1)))
        .arg(successor.map_or(0, |s| millis(s.hold)))
        .arg(sale.user);
    sale.fill_keyed(&mut script);
    script.arg(successor_note);
    script
}

/// A fencing token as the scripts take it: `''` for none.
fn token_arg(token: Option<i64>) -> String {
    token.map(|t| t.to_string()).unwrap_or_default()
}
