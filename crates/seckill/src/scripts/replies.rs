//! What the sale scripts answer, decoded once: a number of units, or why nothing was sold
//! ([`Reply`], [`Refusal`]); and what `pay.lua` answers ([`PayReply`]).

use redis::{FromRedisValue, ParsingError, Value};

/// Why a sale script sold nothing, as the script names it (`lib/critical.lua`'s `sell`,
/// `share_sell.lua`, `deduct.lua`, `reserve.lua`). Decoded here, once: no caller reads a
/// script's raw answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `gone`: the stock key is gone (never reset, reset away, or Redis lost it).
    Gone,
    /// `lock_lost`: the holder no longer holds the lock it committed under.
    LockLost,
    /// `fenced`: a newer fencing token has read the stock.
    Fenced,
    /// `limit_reached`: the buyer already has the product's `per_user` units.
    LimitReached,
    /// `user_required`: the product limits each buyer and the request named none.
    UserRequired,
    /// `taken_over`: another request now serves the idempotency key (a repeat took its
    /// claim over).
    TakenOver,
    /// `voided`: the sale's order id was voided — its answer had been lost, and a look-up
    /// found it had not run (`lua/resolve.lua`). Only a command sent again (by a client
    /// library) can meet it.
    Voided,
    /// `reset`: the holder entered the sale before a reset; it sells nothing in the new one
    /// (the reset gave its lock up).
    Reset,
    /// `share_gone`: `shares` only — the share the instance held ran out (its lease, or a
    /// reset) before the sale reached Redis; its units went back to the pool.
    ShareGone,
}

impl Refusal {
    fn named(name: &str) -> Option<Self> {
        Some(match name {
            "gone" => Self::Gone,
            "lock_lost" => Self::LockLost,
            "fenced" => Self::Fenced,
            "limit_reached" => Self::LimitReached,
            "user_required" => Self::UserRequired,
            "taken_over" => Self::TakenOver,
            "voided" => Self::Voided,
            "share_gone" => Self::ShareGone,
            "reset" => Self::Reset,
            _ => return None,
        })
    }
}

/// A sale script's answer: a number (the units left after a sale or a look; what
/// `deduct.lua` and `reserve.lua` say of one request: see each script), or why it sold
/// nothing. A number can be below zero — two holders under a broken lock both sold the last
/// unit — and is still a number: the refusals are names, never codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Units(i64),
    Refused(Refusal),
}

impl FromRedisValue for Reply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        match v {
            Value::Int(units) => Ok(Self::Units(units)),
            Value::BulkString(ref bytes) => std::str::from_utf8(bytes)
                .ok()
                .and_then(Refusal::named)
                .map(Self::Refused)
                .ok_or_else(|| format!("not a sale script's answer: {v:?}").into()),
            other => Err(format!("not a sale script's answer: {other:?}").into()),
        }
    }
}

/// `pay.lua`'s answer on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PayReply {
    /// Paid now: the unit is the buyer's.
    Paid,
    /// Paid by an earlier request: nothing changed.
    PaidBefore,
    /// Expired; `owed` names the buyer a split product's reservation is owed back to when
    /// this very call expired it (noted in the shard's `owed` until it is given back).
    Expired { owed: Option<String> },
    /// The shard sold it with no payment window: nothing to pay.
    NotReserved,
    /// Not sold on this shard.
    NotHere,
}

impl FromRedisValue for PayReply {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let Value::Array(items) = v else {
            return Err(format!("not pay.lua's answer: {v:?}").into());
        };
        let mut items = items.into_iter();
        let code: i64 = items
            .next()
            .map(redis::from_redis_value)
            .transpose()?
            .unwrap_or(0);
        let buyer: Option<String> = items
            .next()
            .map(redis::from_redis_value::<Option<String>>)
            .transpose()?
            .flatten();
        Ok(match code {
            1 => Self::Paid,
            2 => Self::PaidBefore,
            -1 => Self::Expired {
                owed: buyer.filter(|b| !b.is_empty()),
            },
            -2 => Self::NotReserved,
            _ => Self::NotHere,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sale_scripts_answer_is_a_number_or_a_named_refusal() {
        let reply = |v| redis::from_redis_value::<Reply>(v);
        assert_eq!(reply(Value::Int(-3)).unwrap(), Reply::Units(-3));
        let named = |name: &str| Value::BulkString(name.as_bytes().to_vec());
        assert_eq!(
            reply(named("lock_lost")).unwrap(),
            Reply::Refused(Refusal::LockLost)
        );
        assert_eq!(
            reply(named("share_gone")).unwrap(),
            Reply::Refused(Refusal::ShareGone)
        );
        assert!(reply(named("sold")).is_err(), "an unknown name is an error");
        assert!(reply(Value::Nil).is_err());
    }

    #[test]
    fn a_payments_answer_names_the_buyer_owed_only_when_there_is_one() {
        let pay = |items: Vec<Value>| redis::from_redis_value::<PayReply>(Value::Array(items));
        let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(pay(vec![Value::Int(1)]).unwrap(), PayReply::Paid);
        assert_eq!(
            pay(vec![Value::Int(-1), text("u1")]).unwrap(),
            PayReply::Expired {
                owed: Some("u1".into())
            }
        );
        assert_eq!(
            pay(vec![Value::Int(-1), text("")]).unwrap(),
            PayReply::Expired { owed: None }
        );
        assert_eq!(pay(vec![Value::Int(0)]).unwrap(), PayReply::NotHere);
    }
}
