//! Idempotency keys: a click retried — by the buyer, their client, or Nginx after an
//! instance died — sells once, and gets the first answer again.
//!
//! A deduction that carries an `Idempotency-Key` header (the IETF httpapi draft's) first
//! claims the key: a hash on the product's slot (`lua/idem_claim.lua` says what is in it),
//! kept for `--idempotency-ttl-s`. Then:
//!
//! - **the first request** holds the claim while it is served. A sale under the key writes
//!   its answer into the claim in the script that takes the unit (`lib/critical.lua`'s
//!   `keyed_sale`), so no crash can separate the unit from its answer. An answer that sold
//!   nothing but stands (sold out, limit reached) is written after; one worth retrying
//!   (lock busy, an error before any sale) gives the claim up, and a repeat is served anew.
//!   When the sale's answer is lost and cannot be looked up, the claim is marked unknown
//!   (`504 unknown`): the request does not know, and says so.
//! - **a repeat of the same request** gets the first answer again — same status, same order
//!   id — marked `replayed` (a `503 unconfirmed` asks the replicas again, and is `200` once
//!   one has the order: `Deduction::confirm_again`). One that arrives while the first is still in flight waits for
//!   its answer (up to [`patience`]), and answers 423 `in_flight` if there is none by then.
//! - **the same key with another request** (another variant, product, buyer or knob) is a
//!   422.
//!
//! A repeat takes a claim over when its holder said it does not know, or died (or is far
//! past the time its request may take: its `wait_ms`, `work_ms` and pause plus
//! [`INSIDE_MARGIN`]). Where the claim sits on the slot of the stock it sells from (every
//! product but a split one), the sale script sells only while the claim is still its
//! holder's: the old holder and the repeat never both sell. A split product's shards are on
//! other slots: there the repeat fences every shard first (`lua/idem_fence.lua`), finding
//! the old request's sale if it ran, and keeping it from running anywhere after — no clock
//! is trusted. The audit counts a key sold twice (`keys_sold_twice`), which this rules out.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::error::AppError;
use crate::keys::{IdempotencyKey, ProductKeys, ShardKeys};
use crate::knobs::{INSIDE_MARGIN, Limits};
use crate::outcome::sale::Taken;
use crate::outcome::{KeyKeeps, Outcome};
use crate::scripts;
use crate::store::Store;

mod take_over;
use take_over::take_over;

/// The request header.
pub const HEADER: &str = "idempotency-key";

/// The header as `/openapi.json` names it.
pub const PARAMETER: &str = "Idempotency-Key";

/// How long a repeat waits for the answer of the request that holds its key before it
/// answers 423 `in_flight`: half the request timeout (15 s by default), so that it answers
/// before the timeout does.
pub fn patience(limits: &Limits) -> Duration {
    limits.request_timeout() / 2
}

/// The longest pause between two looks at a claim in flight.
const POLL: Duration = Duration::from_millis(50);

/// The key a request carries, if any; a malformed one is a 400.
pub fn key(headers: &HeaderMap) -> Result<Option<IdempotencyKey>, AppError> {
    let mut values = headers.get_all(HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(AppError::BadRequest(
            "Idempotency-Key is given twice".into(),
        ));
    }
    let value = value
        .to_str()
        .map_err(|_| AppError::BadRequest("Idempotency-Key must be visible ASCII".into()))?;
    IdempotencyKey::parse(value)
        .map(Some)
        .map_err(AppError::BadRequest)
}

/// What idempotency keys need of the instance: its stock store, how long a key is kept
/// (`--idempotency-ttl-s`), how long a repeat waits for an answer in flight
/// ([`patience`]), and the instance's id (written into answers).
#[derive(Clone)]
pub struct Keys {
    pub store: Store,
    pub ttl: Duration,
    pub patience: Duration,
    pub instance: std::sync::Arc<str>,
}

/// A key this request holds the claim on, while it is served.
#[derive(Debug, Clone)]
pub struct Claim {
    pub key: IdempotencyKey,
    /// The claim's hash.
    record: String,
    /// The record of the unit its holder may reserve for the buyer (a split product with a
    /// per-user limit, `lua/reserve.lua`).
    reservation: String,
}

impl Claim {
    /// The claim's hash (on the product's slot).
    pub fn record(&self) -> &str {
        &self.record
    }
}

/// What claiming a key came to.
#[derive(Debug)]
enum Claimed {
    /// This request serves the key.
    Ours(Claim),
    /// This request serves the key, which it took over from another ([`TakenFrom`]): it
    /// must [`take_over`] before it sells.
    TookOver(Claim, TakenFrom),
    /// The key has its answer already: this one.
    Answered(Replay),
    /// Another request still serves the key, past [`patience`].
    InFlight,
}

/// Whom a claim was taken over from.
#[derive(Debug, Clone)]
pub struct TakenFrom {
    /// The request that held it.
    pub holder: String,
    /// The holder whose reservation its request held (`""` for none).
    pub reserved: String,
}

/// Where a request may sell under its key besides its claim's own slot: what a repeat
/// that takes the claim over must fence first (`take_over`, from [`claim_for`]).
#[derive(Debug)]
pub enum Elsewhere {
    /// Nowhere: the claim is on the slot of the one stock it sells from, whose sale script
    /// sells only for the claim's holder.
    Nowhere,
    /// A split product's shards: a sale found on one is the key's answer.
    Shards(Vec<ShardKeys>),
    /// A cart's products (`multi`), one unit each under the key: what was found is part of
    /// the cart, which the repeat then completes.
    Cart(Vec<ShardKeys>),
}

/// A key's first answer, given again.
#[derive(Debug, Clone)]
pub struct Replay {
    pub answer: Recorded,
    /// The instance that served it first, when known.
    pub instance: Option<String>,
}

/// What a key's claim holds of its first answer.
#[derive(Debug, Clone)]
pub enum Recorded {
    /// A unit sold under the key (first answered `200`, or `503 unconfirmed`): asked of the
    /// replicas again before it is answered (`sale::confirm_again`), since a failover since
    /// may have taken it back.
    Sale(Taken),
    /// An answer that sold nothing and stands (sold out, the buyer's limit): given again as
    /// it was.
    Refusal {
        status: StatusCode,
        outcome: &'static str,
        remaining: Option<i64>,
    },
}

impl Replay {
    /// From a claim's `status, outcome, order, shard, remaining, instance` ('' for none).
    fn from_fields(fields: &[String]) -> Result<Self, AppError> {
        let field = |i: usize| fields.get(i).filter(|f| !f.is_empty());
        let status = field(0)
            .and_then(|s| s.parse::<u16>().ok())
            .and_then(|s| StatusCode::from_u16(s).ok());
        let outcome = field(1).and_then(|o| Outcome::NAMES.iter().find(|n| *n == o));
        let unreadable = || {
            AppError::Internal(anyhow::anyhow!(
                "an idempotency claim holds an answer this instance cannot read: {fields:?}"
            ))
        };
        let (Some(status), Some(&outcome)) = (status, outcome) else {
            return Err(unreadable());
        };
        let remaining = field(4).and_then(|s| s.parse().ok());
        let answer = if [Outcome::DEDUCTED, Outcome::UNCONFIRMED].contains(&outcome) {
            let order = field(2).ok_or_else(unreadable)?.clone();
            let shard = field(3).and_then(|s| s.parse().ok()).unwrap_or(0);
            Recorded::Sale(Taken {
                order,
                shard,
                remaining,
            })
        } else {
            Recorded::Refusal {
                status,
                outcome,
                remaining,
            }
        };
        Ok(Self {
            answer,
            instance: field(5).cloned(),
        })
    }
}

/// A key's answer as its claim records it: `status, outcome, order, shard, remaining,
/// instance`.
#[derive(Debug, Default)]
struct Fields {
    status: u16,
    outcome: &'static str,
    order: Option<String>,
    shard: Option<u32>,
    remaining: Option<i64>,
    instance: Option<String>,
}

impl Fields {
    /// What `outcome`'s key records, as answered by `instance`.
    fn of(outcome: &Outcome, instance: Option<String>) -> Self {
        let sold = |taken: &Taken| (Some(taken.order.clone()), Some(taken.shard));
        let ((order, shard), remaining) = match outcome {
            Outcome::Deducted(confirmed) => (sold(confirmed.taken()), confirmed.remaining()),
            Outcome::Unconfirmed(taken) => (sold(taken), taken.remaining),
            Outcome::SoldOut { remaining } => ((None, None), Some(*remaining)),
            _ => ((None, None), None),
        };
        Self {
            status: outcome.status().as_u16(),
            outcome: outcome.name(),
            order,
            shard,
            remaining,
            instance,
        }
    }

    /// A sale found under the key after its answer was lost (a take-over's fences).
    fn sale(taken: &Taken) -> Self {
        Self {
            status: StatusCode::OK.as_u16(),
            outcome: Outcome::DEDUCTED,
            order: Some(taken.order.clone()),
            shard: Some(taken.shard),
            remaining: taken.remaining,
            instance: None,
        }
    }
}

/// Claims `key` for `holder`, serving `request` (what was asked, to tell a repeat from
/// another request), for up to `lease`; waits while another request holds it (up to
/// [`patience`]).
async fn claim(
    keys: &Keys,
    product: &ProductKeys,
    key: IdempotencyKey,
    request: &str,
    holder: &str,
    lease: Duration,
) -> Result<Claimed, AppError> {
    let record = product.whole().claim(key.as_str());
    let ttl = keys.ttl;
    let lease = lease + INSIDE_MARGIN;
    let patience = keys.patience;
    let started = Instant::now();
    let mut pause = Duration::from_millis(2);
    loop {
        let answer: Vec<String> = scripts::IDEM_CLAIM
            .key(&record)
            .key(&product.meta)
            .key(&product.audit)
            .arg(request)
            .arg(holder)
            .arg(millis(lease))
            .arg(millis(ttl))
            .invoke_async(&mut keys.store.conn())
            .await?;
        match answer.first().map(String::as_str) {
            Some("claimed") => {
                let reservation = product.reservation(holder);
                let claim = Claim {
                    key,
                    record,
                    reservation,
                };
                return Ok(match (answer.get(2), answer.get(3)) {
                    (Some(old), Some(reserved)) => Claimed::TookOver(
                        claim,
                        TakenFrom {
                            holder: old.clone(),
                            reserved: reserved.clone(),
                        },
                    ),
                    _ => Claimed::Ours(claim),
                });
            }
            Some("done") => return Ok(Claimed::Answered(Replay::from_fields(&answer[1..])?)),
            Some("mismatch") => {
                return Err(AppError::KeyReused(
                    key.as_str().to_owned(),
                    "repeat the first request exactly, or use a new key".into(),
                ));
            }
            Some(scripts::IDEM_IN_FLIGHT) => {
                let waited = started.elapsed();
                if waited >= patience {
                    return Ok(Claimed::InFlight);
                }
                let left = answer.get(1).and_then(|l| l.parse().ok()).unwrap_or(0);
                let nap = pause
                    .min(Duration::from_millis(left) + Duration::from_millis(1))
                    .min(patience - waited);
                tokio::time::sleep(nap).await;
                pause = (pause * 2).min(POLL);
            }
            _ => {
                return Err(AppError::Internal(anyhow::anyhow!(
                    "idem_claim.lua answered {answer:?}"
                )));
            }
        }
    }
}

/// What a request's key came to, its claim taken over and fenced where it had to be.
#[derive(Debug)]
pub enum Keyed {
    /// This request serves the key: it sells, and gives the claim its answer after.
    Serve(Claim),
    /// The key has its answer already, or the request it took the claim over from had
    /// sold: that answer, given again.
    Replay(Replay),
    /// Another request still serves the key, past [`patience`].
    InFlight,
}

/// Claims `key` for `holder` (`claim`) and, when the claim was taken over from another
/// request, fences every place that request may have sold (`take_over`), asking
/// `elsewhere` where that is only then: the one call a deduction makes for its key.
pub async fn claim_for<F, Fut>(
    keys: &Keys,
    product: &ProductKeys,
    key: IdempotencyKey,
    request: &str,
    holder: &str,
    lease: Duration,
    elsewhere: F,
) -> Result<Keyed, AppError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Elsewhere, AppError>>,
{
    match claim(keys, product, key, request, holder, lease).await? {
        Claimed::Ours(claim) => Ok(Keyed::Serve(claim)),
        Claimed::TookOver(claim, from) => {
            // Boxed: the path of a take-over only, kept out of every claim's future.
            let elsewhere = Box::pin(elsewhere()).await?;
            let replay = Box::pin(take_over(keys, product, &claim, holder, &from, &elsewhere));
            Ok(match replay.await? {
                Some(replay) => Keyed::Replay(replay),
                None => Keyed::Serve(claim),
            })
        }
        Claimed::Answered(replay) => Ok(Keyed::Replay(replay)),
        Claimed::InFlight => Ok(Keyed::InFlight),
    }
}

/// After the request holding `claim` was served: records its answer (`outcome`; `None`
/// for an error after which nothing can have sold) in the claim, unless the sale's script
/// did (`recorded_by_sale`); gives the claim up when the answer is worth retrying; marks
/// it unknown when the sale's answer was lost ([`Outcome::Unknown`]), so that a repeat
/// takes it over at once and finds out. Best effort: if Redis is away the claim stays
/// pending until its deadline, and a repeat then takes it over.
pub async fn finish(
    keys: &Keys,
    claim: &Claim,
    holder: &str,
    outcome: Option<&Outcome>,
    recorded_by_sale: bool,
) {
    let instance = Some(keys.instance.to_string());
    let Some(outcome) = outcome else {
        return release(keys, claim, holder).await;
    };
    let script = match outcome.for_its_key() {
        KeyKeeps::Nothing => return,
        KeyKeeps::Answer if recorded_by_sale && matches!(outcome, Outcome::Deducted(_)) => {
            return;
        }
        KeyKeeps::Released => step(claim, holder, "release"),
        KeyKeeps::Unknown => step(claim, holder, scripts::IDEM_UNKNOWN),
        KeyKeeps::Answer => {
            let fields = Fields::of(outcome, instance);
            finish_script(claim, holder, &claim.reservation, &fields)
        }
    };
    let done: Result<i64, _> = script.invoke_async(&mut keys.store.conn()).await;
    if let Err(err) = done {
        tracing::warn!(
            error = %err,
            key = claim.key.as_str(),
            "an idempotency claim kept no answer: a repeat will wait for its deadline"
        );
    }
}

/// After an error after which nothing can have sold: the claim goes, and a repeat is
/// served anew.
async fn release(keys: &Keys, claim: &Claim, holder: &str) {
    let done: Result<i64, _> = step(claim, holder, "release")
        .invoke_async(&mut keys.store.conn())
        .await;
    if let Err(err) = done {
        tracing::warn!(
            error = %err,
            key = claim.key.as_str(),
            "an idempotency claim was not released: a repeat will wait for its deadline"
        );
    }
}

/// Gives up the claim of `key` on `product` whose answer is a sale `order` that a failover
/// took back (its id voided there since): a repeat is served anew. Nothing happens when the
/// claim has another answer by now. Whether it was given up.
pub async fn forget(
    keys: &Keys,
    product: &ProductKeys,
    key: &IdempotencyKey,
    order: &str,
) -> Result<bool, AppError> {
    let record = product.whole().claim(key.as_str());
    let forgotten: i64 = scripts::IDEM_FINISH
        .key(&record)
        .key(&record)
        .arg(order)
        .arg("forget")
        .invoke_async(&mut keys.store.conn())
        .await?;
    Ok(forgotten == 1)
}

/// `idem_finish.lua` for `claim`, held by `holder`: `release` or `unknown`.
fn step(claim: &Claim, holder: &str, what: &str) -> redis::ScriptInvocation<'static> {
    let mut script = scripts::IDEM_FINISH.prepare_invoke();
    script
        .key(&claim.record)
        .key(&claim.reservation)
        .arg(holder)
        .arg(what);
    script
}

/// `idem_finish.lua` giving `claim`, held by `holder`, the answer `fields`; a sale's
/// answer also drops the record of the reservation it used (`reservation`).
fn finish_script(
    claim: &Claim,
    holder: &str,
    reservation: &str,
    fields: &Fields,
) -> redis::ScriptInvocation<'static> {
    let text = |v: Option<String>| v.unwrap_or_default();
    let mut script = scripts::IDEM_FINISH.prepare_invoke();
    script
        .key(&claim.record)
        .key(reservation)
        .arg(holder)
        .arg("done")
        .arg(fields.status)
        .arg(fields.outcome)
        .arg(text(fields.order.clone()))
        .arg(text(fields.shard.map(|s| s.to_string())))
        .arg(text(fields.remaining.map(|r| r.to_string())))
        .arg(text(fields.instance.clone()));
    script
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
