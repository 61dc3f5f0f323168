//! What `/stats` says of one product: the audit's fields, section by section, and how the
//! counters of one audit hash add into them. `audit.rs` reads Redis and fills them in.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::outcome::{Counter, TurnedAway};

/// The audit of one product.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub product: String,
    /// Units set by the last reset.
    pub initial: i64,
    /// Which sale this is: the number of the last reset.
    pub epoch: i64,
    pub shards: u32,
    /// Units left, summed over shards (with the units in instances' shares).
    pub remaining: i64,
    /// `shares`: units in the shares instances hold, not sold yet (part of `remaining`).
    pub in_shares: i64,
    /// `shares`: units given back to the pool when a share's lease ran out (a dead or idle
    /// instance's unsold share).
    pub reclaimed: i64,
    /// Orders recorded: one per 200.
    pub sold: i64,
    /// Units buyers hold, `sold - expired` (with a payment window, reservations that
    /// expired gave their units back).
    pub held: i64,
    /// `held - initial`, when positive: units sold that never existed.
    pub oversold: i64,
    /// `held - (initial - remaining)`, when positive: sales the stock never saw, because a
    /// write based on a stale read overwrote them.
    pub lost_updates: i64,
    /// Requests answered 409: nothing left.
    pub sold_out: i64,
    /// Requests answered 429 because the lock stayed held for their whole wait.
    pub lock_busy: i64,
    /// Units left while buyers were turned away with nothing sold (429: `lock_busy`,
    /// `optimistic`'s `conflict`; 409 from a sold-out flag that outlived the sell-out): the
    /// fewer of the two. 0 once the stock is gone. The cost of a lock that times out, of an
    /// optimistic lock that gives up, and of a flag nobody cleared.
    pub undersold: i64,
    /// `/admin/close`: whether the sale is closed, and what came after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub close: Option<Close>,
    /// `multi`: the carts with this product that waited in vain for the cart's locks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi: Option<Multi>,
    /// `optimistic`: its transactions, when there were any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optimistic: Option<Optimistic>,
    /// Times a holder entered a critical section another holder was still inside.
    pub lock_overlaps: i64,
    /// Times a watchdog-lock holder found, at commit, that the lock was no longer its own
    /// (and so sold nothing).
    pub lock_lost: i64,
    /// Sales answered 503 `unconfirmed`: `WAIT` saw fewer replicas than asked for in
    /// time. Each is recorded as an order (it is in `sold` if it survived), but whether it
    /// outlives a failover of its master nobody can say.
    pub unconfirmed: i64,
    /// Commits refused because the holder's fencing token was older than one the stock
    /// had already seen (`fence=on`): a lock that failed, caught at the stock.
    pub fenced: i64,
    /// Locks given back because fewer replicas of the lock store than
    /// `--lock-wait-replicas` confirmed them in time.
    pub lock_unconfirmed: i64,
    /// Units one user may buy (0: no limit), as the last reset set it.
    pub per_user: i64,
    /// Distinct buyers named in the orders.
    pub buyers: i64,
    /// From the orders: buyers holding more units than `per_user`, and the units past it.
    pub over_limit: OverLimit,
    /// Requests answered 403 `limit_reached`: the buyer already had their limit.
    pub limit_reached: i64,
    /// A split product: units reserved for a buyer that no order accounts for (an
    /// instance died between the reservation and the sale): the buyer may buy fewer.
    pub reserved_unsold: i64,
    /// Requests that carried an `Idempotency-Key`, as far as the stock is concerned.
    pub idempotency: Idempotency,
    pub by_instance: BTreeMap<String, i64>,
    pub by_variant: BTreeMap<String, i64>,
    pub shard_remaining: Vec<i64>,
    /// Each shard's hash tag, as the reset recorded it.
    pub shard_tags: Vec<String>,
    /// The master that holds each shard (`host:port`; the one server when standalone).
    pub shard_nodes: Vec<String>,
    pub locks: Vec<LockView>,
    /// With a payment window (`pay_within_ms` at reset): what became of the reservations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment: Option<Payment>,
    /// With `--orders-db`: Redis against the orders' database.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orders_of_record: Option<Reconciliation>,
    /// The sale's front door, when the reset set one (`crate::admission`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
    /// Where the stock is, as the last reset put it: `redis`, or `postgres` (the `pg_*`
    /// stock variants; `remaining`, `sold` and the per-instance and per-variant counts
    /// are then the database's).
    pub stock_in: &'static str,
}

impl Stats {
    /// Adds one audit hash's counters.
    pub(super) fn add(&mut self, audit: BTreeMap<String, i64>) {
        for (field, count) in audit {
            // `sold/<instance>/<variant>`: one counter per pair, bumped in the same script
            // that records the order.
            if let Some((instance, variant)) = field
                .strip_prefix("sold/")
                .and_then(|pair| pair.split_once('/'))
            {
                *self.by_instance.entry(instance.to_owned()).or_default() += count;
                *self.by_variant.entry(variant.to_owned()).or_default() += count;
            } else if let Some(counter) = Counter::of_field(&field) {
                match counter {
                    Counter::SoldOut => self.sold_out += count,
                    Counter::LockBusy => self.lock_busy += count,
                    Counter::LockUnconfirmed => self.lock_unconfirmed += count,
                    Counter::LimitReached => self.limit_reached += count,
                    Counter::Conflict => self.optimistic.get_or_insert_default().conflict += count,
                    Counter::TxBusy => self.optimistic.get_or_insert_default().tx_busy += count,
                    Counter::Closed => self.close.get_or_insert_default().refused += count,
                    Counter::InFlight => self.idempotency.in_flight += count,
                    Counter::LockLost => self.lock_lost += count,
                    Counter::Fenced => self.fenced += count,
                    Counter::Unconfirmed => self.unconfirmed += count,
                }
            } else {
                match field.as_str() {
                    "tx_commits" => self.optimistic.get_or_insert_default().commits += count,
                    "tx_conflicts" => self.optimistic.get_or_insert_default().conflicts += count,
                    "sold_after_close" => {
                        self.close.get_or_insert_default().sold_after_close += count;
                    }
                    "multi_timed_out" => self.multi.get_or_insert_default().timed_out += count,
                    "multi_waited_ms" => self.multi.get_or_insert_default().waited_ms += count,
                    "multi_half_sold" => self.multi.get_or_insert_default().half_sold += count,
                    "lock_overlaps" => self.lock_overlaps += count,
                    "reclaimed" => self.reclaimed += count,
                    "paid" => self.payment.get_or_insert_default().paid += count,
                    "expired" => self.payment.get_or_insert_default().expired += count,
                    "keys_sold_twice" => self.idempotency.keys_sold_twice += count,
                    "replayed" => self.idempotency.replayed += count,
                    field => {
                        if let Some(counter) = field.strip_prefix("admission/") {
                            self.admission.get_or_insert_default().add(counter, count);
                        }
                    }
                }
            }
        }
    }
}

/// A sale's front door: its terms as the reset set them, and what it turned away. The
/// counts an instance keeps in memory (`sold_out_flagged`, `no_pass`, `pass_refused`,
/// `passes`) reach the audit within `admission::FLUSH_EVERY`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Admission {
    pub waiting_room: Option<crate::admission::RoomTerms>,
    pub rate_limit: Option<crate::admission::LimitTerms>,
    pub sold_out_flag: crate::admission::Flag,
    /// Numbers handed out by the waiting room: one per buyer.
    pub tickets: i64,
    /// Passes handed out to buyers whose number came up.
    pub passes: i64,
    /// Deductions turned away 403 without a pass.
    pub no_pass: i64,
    /// Deductions turned away 403 with a pass that was forged, another buyer's, another
    /// sale's, or expired.
    pub pass_refused: i64,
    /// Deductions turned away 429 past the buyer's rate.
    pub rate_limited: i64,
    /// Deductions answered 409 from an instance's sold-out flag, without Redis (not in
    /// `sold_out`, which counts the stock's own answers).
    pub sold_out_flagged: i64,
}

impl Admission {
    fn add(&mut self, counter: &str, count: i64) {
        match (TurnedAway::of_name(counter), counter) {
            (Some(TurnedAway::NoPass), _) => self.no_pass += count,
            (Some(TurnedAway::PassRefused), _) => self.pass_refused += count,
            (Some(TurnedAway::RateLimited), _) => self.rate_limited += count,
            (_, "passes") => self.passes += count,
            (_, "sold_out_flagged") => self.sold_out_flagged += count,
            _ => {}
        }
    }
}

/// A sale with a payment window: every order a reservation until paid or expired.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Payment {
    pub pay_within_ms: i64,
    /// Orders not paid yet and not expired: their units are held for their buyers.
    pub reserved: i64,
    /// Orders paid in time.
    pub paid: i64,
    /// Orders unpaid in time: their units went back to the stock.
    pub expired: i64,
    /// `initial = remaining + reserved + paid`: every unit is for sale, reserved or paid,
    /// once.
    pub balanced: bool,
}

/// A sale closed by `/admin/close`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Close {
    /// Closed now (`/admin/reopen` opens it again).
    pub closed: bool,
    /// Deductions answered 410 `closed`: they checked after the close.
    pub refused: i64,
    /// Units sold after the close marked the product closed: deductions that checked
    /// "open" just before it (`guard=check`). 0 with `guard=rw`.
    pub sold_after_close: i64,
}

/// `multi`'s carts that held up this product.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Multi {
    /// Carts with this product answered 429: a lock of the cart stayed held for the whole
    /// wait (with `lock_order=given`, typically by a cart waiting for a lock this one held).
    pub timed_out: i64,
    /// How long those carts waited, ms, summed: the time the deadlock cost.
    pub waited_ms: i64,
    /// Lines of a cart refused after others of the cart were sold (0 unless a buyer's
    /// limit or a lock was lost under the cart's locks).
    pub half_sold: i64,
}

/// `optimistic`'s transactions: `WATCH`, read, `MULTI`, sale, `EXEC`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Optimistic {
    /// Transactions that ran (`EXEC` with the stock unchanged since the read).
    pub commits: i64,
    /// Transactions that did not: the stock changed after the read, `EXEC` answered nil.
    pub conflicts: i64,
    /// `conflicts / (commits + conflicts)`: the chance that a try is wasted (seed 000's
    /// rule: below about 0.2, the optimistic lock is the better one).
    pub conflict_rate: f64,
    /// Requests answered 429 `conflict`: every try conflicted.
    pub conflict: i64,
    /// Requests answered 503 `tx_busy`: no transaction connection came free.
    pub tx_busy: i64,
}

/// What idempotency keys came to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Idempotency {
    /// Units sold under a key.
    pub keyed_sales: i64,
    /// Keys a unit was sold under more than once (0, unless the claims failed: see
    /// `src/idempotency/`).
    pub keys_sold_twice: i64,
    /// Repeats answered with their key's first answer.
    pub replayed: i64,
    /// Requests answered 423 `in_flight`: their key was being served by another.
    pub in_flight: i64,
}

/// Buyers past the per-user limit.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OverLimit {
    pub users: i64,
    pub units: i64,
}

/// One shard's lock as Redis has it now.
#[derive(Debug, Clone, Serialize)]
pub struct LockView {
    pub shard: u32,
    pub held: bool,
    /// Time left before the lock expires; null when it is free or never expires.
    pub ttl_ms: Option<i64>,
    /// Held with no TTL at all: only a DEL frees it (the setnx deadlock).
    pub never_expires: bool,
    /// The instance whose request holds it, when one does.
    pub holder: Option<String>,
}

/// Redis against the database, for one product's current sale (`/stats`).
#[derive(Debug, Clone, Serialize)]
pub struct Reconciliation {
    /// Whether this sale's orders go to the database at all: its reset was made by an
    /// instance with `--orders-db` (which created the streams) and did not opt out
    /// (`orders_of_record: false`). When not, nothing else is compared.
    pub streamed: bool,
    /// Orders in Redis (`sold`).
    pub in_redis: i64,
    /// Orders of this sale in the database; `null` while it does not answer.
    pub in_database: Option<i64>,
    /// Stream entries not yet in the database: pending with a consumer, or not read yet.
    pub backlog: i64,
    /// How long the oldest of them has waited, ms.
    pub oldest_ms: Option<i64>,
    /// Reservations paid or expired, in Redis (a sale with a payment window).
    pub settled_in_redis: i64,
    /// The same in the database; `null` while it does not answer.
    pub settled_in_database: Option<i64>,
    /// Once the backlog is drained: orders in one store and not the other, and
    /// reservations settled in one and not the other or differently (must be 0); `null`
    /// while entries wait.
    pub drift: Option<i64>,
}
