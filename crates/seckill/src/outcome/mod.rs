//! What a deduction came to, and the status each answer has.

use axum::http::StatusCode;

pub mod sale;

pub use sale::{Confirmed, Taken};

/// What a deduction came to. Each maps to its own status code, so that oha's and JMeter's
/// status summaries read as a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200: one unit sold and its order recorded, on as many replicas as asked for: the
    /// only answer built from a [`Confirmed`] sale, and the only `200`.
    Deducted(Confirmed),
    /// 409: nothing left.
    SoldOut { remaining: i64 },
    /// 429: the lock was held for the whole wait.
    LockBusy,
    /// 503: the lock was lost before the holder could commit (its lease ran out while
    /// Redis was away, or an operator deleted it); nothing was sold, retrying is safe.
    LockLost,
    /// 500 (fault injection only): the holder stopped without releasing its lock.
    Abandoned,
    /// 503: the unit was taken and its order recorded on the shard's master, but `WAIT`
    /// saw fewer replicas than `--redis-wait-replicas` have it in time: it may or may not
    /// survive a failover of that master. Counted as `unconfirmed` in `/stats`. A repeat
    /// of its key asks the replicas again.
    Unconfirmed(Taken),
    /// 503 (`multi`): some of the cart's lines sold (these) and the others did not, or it
    /// is not known yet whether they did: a master failed between the lines. Not "nothing
    /// sold": a repeat with the same `Idempotency-Key` completes the cart, never buying a
    /// line twice. Counted as `multi_half_sold`.
    PartlySold(Vec<Taken>),
    /// 503: the stock refused the commit: the holder's fencing token was older than one
    /// that had already read or written the stock (`fence=on`). Nothing was sold.
    Fenced,
    /// 503: the lock was taken but fewer replicas of the lock store than
    /// `--lock-wait-replicas` confirmed it in time; it was given back, nothing was sold.
    LockUnconfirmed,
    /// 403: the buyer already holds as many units as the product's `per_user` allows
    /// (一人一单); nothing was sold. Retrying will not help.
    LimitReached,
    /// 423: another request with the same `Idempotency-Key` is being served (and did not
    /// finish within the wait for it), or took this one's claim over; this one sold
    /// nothing. Repeat the same request with the same key for the answer.
    InFlight,
    /// 429 (`optimistic`): the stock changed under every try (the first and `retries`
    /// more): nothing was sold, though units may be left.
    Conflict,
    /// 410: the product's sale was closed (`/admin/close`) before this deduction checked
    /// (`guard`); nothing was sold.
    Closed,
    /// 503 (`optimistic`): every transaction connection to the stock's master stayed in use
    /// for the whole wait; nothing was tried.
    TxBusy,
    /// 504: the sale was sent, its answer was lost (Redis paused, or the connection
    /// dropped), and Redis did not answer the look-up either: it may or may not have sold.
    /// A repeat with the same `Idempotency-Key` finds out; so does looking `order` up.
    Unknown { order: String, shard: u32 },
}

impl Outcome {
    /// Every outcome's name, as answers, metrics and `/openapi.json` spell them.
    pub const NAMES: [&'static str; 15] = [
        "deducted",
        "sold_out",
        "lock_busy",
        "lock_lost",
        "abandoned",
        "unconfirmed",
        "partly_sold",
        "fenced",
        "lock_unconfirmed",
        "limit_reached",
        "in_flight",
        "conflict",
        "tx_busy",
        "closed",
        "unknown",
    ];

    /// The name of a sale (`deducted`), for an answer built without an `Outcome` (a
    /// repeat's replay of a sale whose answer was lost).
    pub const DEDUCTED: &'static str = "deducted";
    /// The name of a sale too few replicas confirmed (`unconfirmed`), for a key's answer
    /// read back.
    pub const UNCONFIRMED: &'static str = "unconfirmed";
    /// The name of a closed sale's refusal, and of `/admin/close`'s answer.
    pub const CLOSED: &'static str = "closed";

    pub fn name(&self) -> &'static str {
        match self {
            Self::Deducted(_) => Self::DEDUCTED,
            Self::SoldOut { .. } => "sold_out",
            Self::LockBusy => "lock_busy",
            Self::LockLost => "lock_lost",
            Self::Abandoned => "abandoned",
            Self::Unconfirmed(_) => Self::UNCONFIRMED,
            Self::PartlySold(_) => "partly_sold",
            Self::Fenced => "fenced",
            Self::LockUnconfirmed => "lock_unconfirmed",
            Self::LimitReached => "limit_reached",
            Self::InFlight => "in_flight",
            Self::Conflict => "conflict",
            Self::TxBusy => "tx_busy",
            Self::Closed => Self::CLOSED,
            Self::Unknown { .. } => "unknown",
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::Deducted(_) => StatusCode::OK,
            Self::SoldOut { .. } => StatusCode::CONFLICT,
            Self::LimitReached => StatusCode::FORBIDDEN,
            Self::Closed => StatusCode::GONE,
            Self::InFlight => StatusCode::LOCKED,
            Self::LockBusy | Self::Conflict => StatusCode::TOO_MANY_REQUESTS,
            Self::Abandoned => StatusCode::INTERNAL_SERVER_ERROR,
            Self::LockLost
            | Self::Unconfirmed(_)
            | Self::PartlySold(_)
            | Self::Fenced
            | Self::LockUnconfirmed
            | Self::TxBusy => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unknown { .. } => StatusCode::GATEWAY_TIMEOUT,
        }
    }

    /// What the answer tells the client in plain words (its `note`), when its name and
    /// status are not enough.
    pub fn note(&self) -> Option<&'static str> {
        Self::note_of(self.name())
    }

    /// The note of the outcome named `name` (a key's first answer, given again).
    pub fn note_of(name: &str) -> Option<&'static str> {
        Some(match name {
            "unconfirmed" => {
                "the unit was taken and the order recorded on the master, but too few \
                 replicas confirmed it in time: it may or may not survive a failover; do \
                 not retry blindly, look the order up"
            }
            "partly_sold" => {
                "some of the cart's lines sold (their orders are listed) and the others did \
                 not, or it is not known yet: repeat the request with the same \
                 Idempotency-Key to complete the cart (no line is bought twice), or look the \
                 orders up"
            }
            "unknown" => {
                "the sale was sent but its answer was lost (Redis did not answer in time), \
                 and it could not be looked up yet: it may or may not have sold. Do not \
                 retry blindly: repeat the request with the same Idempotency-Key, or look \
                 the order up"
            }
            "limit_reached" => {
                "this buyer already has as many units as the product allows one user \
                 (per_user)"
            }
            "conflict" => {
                "the stock changed between the read and the sale on every try (the first \
                 and `retries` more): nothing was sold; units may be left, try again"
            }
            "tx_busy" => {
                "every transaction connection to the stock's master was in use \
                 (--tx-connections): nothing was tried, try again"
            }
            "closed" => "the sale of this product was closed (POST /admin/close); nothing was sold",
            "in_flight" => {
                "another request with this Idempotency-Key is being served; this one sold \
                 nothing: repeat the same request with the same key for its answer"
            }
            _ => return None,
        })
    }

    /// What the request's idempotency key keeps of this answer.
    pub fn for_its_key(&self) -> KeyKeeps {
        match self {
            Self::Deducted(_)
            | Self::Unconfirmed(_)
            | Self::SoldOut { .. }
            | Self::LimitReached => KeyKeeps::Answer,
            Self::Unknown { .. } => KeyKeeps::Unknown,
            Self::InFlight => KeyKeeps::Nothing,
            // A repeat completes the cart around the lines sold under the key.
            Self::PartlySold(_) => KeyKeeps::Released,
            Self::LockBusy
            | Self::LockLost
            | Self::Abandoned
            | Self::Fenced
            | Self::LockUnconfirmed
            | Self::Conflict
            | Self::Closed
            | Self::TxBusy => KeyKeeps::Released,
        }
    }

    /// The counter in the product's audit that counts this answer, for the answers that
    /// sold nothing and whose script did not count them already.
    pub fn refusal_counter(&self) -> Option<Counter> {
        match self {
            Self::SoldOut { .. } => Some(Counter::SoldOut),
            Self::LockBusy => Some(Counter::LockBusy),
            Self::LockUnconfirmed => Some(Counter::LockUnconfirmed),
            Self::LimitReached => Some(Counter::LimitReached),
            Self::Conflict => Some(Counter::Conflict),
            Self::TxBusy => Some(Counter::TxBusy),
            Self::Closed => Some(Counter::Closed),
            // Counted by the route, for the requests its key turned away as well.
            _ => None,
        }
    }
}

/// An audit counter of answers that sold nothing ([`Outcome::refusal_counter`], and
/// `in_flight`, which the route counts): its field in the product's audit hash is the
/// outcome's name; `/stats` reads it back by this type,
/// so a new one must be placed there too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    SoldOut,
    LockBusy,
    LockUnconfirmed,
    LimitReached,
    Conflict,
    TxBusy,
    Closed,
    InFlight,
    /// Counted by the scripts (a holder that found its lock lost, a commit refused for
    /// its fencing token) and by a sale that replicas did not confirm.
    LockLost,
    Fenced,
    Unconfirmed,
}

impl Counter {
    const ALL: [Self; 11] = [
        Self::SoldOut,
        Self::LockBusy,
        Self::LockUnconfirmed,
        Self::LimitReached,
        Self::Conflict,
        Self::TxBusy,
        Self::Closed,
        Self::InFlight,
        Self::LockLost,
        Self::Fenced,
        Self::Unconfirmed,
    ];

    /// Its field in the audit hash.
    pub fn field(self) -> &'static str {
        match self {
            Self::SoldOut => "sold_out",
            Self::LockBusy => "lock_busy",
            Self::LockUnconfirmed => "lock_unconfirmed",
            Self::LimitReached => "limit_reached",
            Self::Conflict => "conflict",
            Self::TxBusy => "tx_busy",
            Self::Closed => "closed",
            Self::InFlight => "in_flight",
            Self::LockLost => "lock_lost",
            Self::Fenced => "fenced",
            Self::Unconfirmed => "unconfirmed",
        }
    }

    /// The counter an audit field is, if it is one of these.
    pub fn of_field(field: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.field() == field)
    }
}

/// Why the front door turned a buyer away before any stock was touched — the waiting room,
/// the rate limit, the instance's sold-out flag: each a name of its own (the body's
/// `outcome`) and a status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnedAway {
    /// 409: sold out, known at the door (the instance's sold-out flag, or the room's).
    SoldOut,
    /// 429: the buyer asks faster than the product's rate limit allows.
    RateLimited,
    /// 403: the product sells through its waiting room and the request brought no pass.
    NoPass,
    /// 403: the pass does not let this buyer in (forged, expired, another buyer's).
    PassRefused,
    /// 403: the waiting room's ticket is refused.
    TicketRefused,
    /// 404: the product has no waiting room to take a ticket for.
    NoWaitingRoom,
}

impl TurnedAway {
    const ALL: [Self; 6] = [
        Self::SoldOut,
        Self::RateLimited,
        Self::NoPass,
        Self::PassRefused,
        Self::TicketRefused,
        Self::NoWaitingRoom,
    ];

    /// The refusal named `name`, if it is one.
    pub fn of_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The body's `outcome`.
    pub fn name(self) -> &'static str {
        match self {
            // The same word as a deduction that found nothing left.
            Self::SoldOut => "sold_out",
            Self::RateLimited => "rate_limited",
            Self::NoPass => "no_pass",
            Self::PassRefused => "pass_refused",
            Self::TicketRefused => "ticket_refused",
            Self::NoWaitingRoom => "no_waiting_room",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Self::SoldOut => StatusCode::CONFLICT,
            Self::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            Self::NoPass | Self::PassRefused | Self::TicketRefused => StatusCode::FORBIDDEN,
            Self::NoWaitingRoom => StatusCode::NOT_FOUND,
        }
    }
}

/// The meta hash's field that marks a product's sale closed (`/admin/close`), with the
/// time of the close: the word a deduction after the close answers. The selling scripts
/// read it by that name.
pub const META_CLOSED: &str = Outcome::CLOSED;

/// A buyer's place in the waiting room, as `POST /room/{product}/ticket` answers it.
pub const WAITING: &str = "waiting";

/// What an idempotency key keeps of a request's answer ([`Outcome::for_its_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKeeps {
    /// The answer: a repeat gets it again (a sale, or a refusal that stands).
    Answer,
    /// Nothing: the key is released, and a repeat is served anew (nothing sold, and
    /// retrying may help).
    Released,
    /// That its sale's answer was lost: a repeat takes the key over at once, and finds out.
    Unknown,
    /// Nothing at all: the answer is about another request that holds the key.
    Nothing,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken() -> Taken {
        Taken {
            order: String::new(),
            shard: 0,
            remaining: None,
        }
    }

    #[test]
    fn names_lists_every_outcome() {
        let every = [
            Outcome::Deducted(Confirmed::in_database(taken())),
            Outcome::SoldOut { remaining: 0 },
            Outcome::LockBusy,
            Outcome::LockLost,
            Outcome::Abandoned,
            Outcome::Unconfirmed(taken()),
            Outcome::PartlySold(vec![taken()]),
            Outcome::Fenced,
            Outcome::LockUnconfirmed,
            Outcome::LimitReached,
            Outcome::InFlight,
            Outcome::Conflict,
            Outcome::TxBusy,
            Outcome::Closed,
            Outcome::Unknown {
                order: String::new(),
                shard: 0,
            },
        ];
        assert_eq!(every.each_ref().map(|o| o.name()), Outcome::NAMES);
        for outcome in &every {
            if let Some(counter) = outcome.refusal_counter() {
                assert_eq!(counter.field(), outcome.name(), "{outcome:?}");
                assert_eq!(Counter::of_field(counter.field()), Some(counter));
            }
        }
    }
}
