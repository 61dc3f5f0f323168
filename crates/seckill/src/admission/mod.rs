//! The sale's front door: what a deduction passes before it reaches the stock. Each part is
//! opted into at reset, and each is measured (`seckill-bench --suite admission`):
//!
//! - **a waiting room** ([`room`]): a buyer takes a number, polls until the serving number
//!   reaches it, and gets a signed pass; a deduction without a valid pass is turned away
//!   (403), so units go in arrival order and the stock sees no more requests than the
//!   room lets in;
//! - **a per-buyer rate limit**: a token bucket per buyer in Redis
//!   (`lua/admission/bucket.lua`); past it, 429 with `Retry-After`, and until the buyer's
//!   next token the instance that said so answers their clicks from memory;
//! - **the sold-out flag**: an instance that saw the product sold out answers 409 from
//!   memory, without Redis, until a unit may be back.
//!
//! Every instance keeps each product's front-door [`DoorTerms`] in memory, read from the
//! product's meta. A reset, a reopen and a reservation that expired and gave its unit back
//! each `PUBLISH` a notice (on [`CHANNEL`]), and every instance forgets what it kept of
//! the product — its terms and its flag. A notice can be lost (the subscription down, or
//! on its way while the request comes): so terms are read again at the latest
//! [`TERMS_MAX_AGE`] after they were, and everything is forgotten when the subscription
//! connects again. An instance may therefore apply a product's previous terms for a moment
//! after a reset (on loopback, the notice's millisecond; at most `TERMS_MAX_AGE`).
//!
//! What an instance answers from memory (sold out from its flag, passes it refuses, a
//! buyer held back until their next token) it
//! counts in memory too, and adds to the product's audit every [`FLUSH_EVERY`]: `/stats`
//! sees those counts up to that late, and Redis gets one command per product per flush,
//! not one per answer.

mod notices;
pub mod room;
pub mod terms;

pub use notices::notify;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

pub use terms::{DoorTerms, Flag, LimitTerms, Opening, RoomTerms};

use crate::error::AppError;
use crate::keys::{ProductId, ProductKeys, UserId};
use crate::outcome::{Outcome, TurnedAway};
use crate::store::{Nodes, Store};

/// Where resets, reopens and units given back are announced.
pub const CHANNEL: &str = "seckill:admission";
/// How long an instance trusts the terms it read without a notice.
pub const TERMS_MAX_AGE: Duration = Duration::from_secs(1);
/// How often what was counted in memory goes to the audit.
pub const FLUSH_EVERY: Duration = Duration::from_millis(200);
/// A poll reads the stock at most this often per product and instance.
const STOCK_MAX_AGE: Duration = Duration::from_millis(50);
/// Products an instance keeps terms for; past it the oldest are forgotten (a flood of
/// unknown products cannot grow the memory).
const MAX_PRODUCTS: usize = 4_096;

static TICKET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/admission/ticket.lua")));
static BUCKET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/admission/bucket.lua")));
static COUNT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../lua/admission/count.lua")));

/// The audit fields the front door counts.
pub mod counted {
    pub const FLAGGED: &str = "admission/sold_out_flagged";
    pub const NO_PASS: &str = "admission/no_pass";
    pub const PASS_REFUSED: &str = "admission/pass_refused";
    pub const PASSES: &str = "admission/passes";
    pub const RATE_LIMITED: &str = "admission/rate_limited";
}

/// One instance's front door. Cheap to clone.
#[derive(Clone)]
pub struct Admission {
    shared: Arc<Shared>,
}

struct Shared {
    store: Store,
    doors: Mutex<HashMap<ProductId, Arc<Door>>>,
    /// Bumped by every notice: terms read before it are not kept.
    notices: AtomicU64,
    /// `Flag::Sticky`: the sale each product was seen sold out in ([`DoorTerms::sale`]).
    sticky: Mutex<HashMap<ProductId, (i64, i64)>>,
    /// Buyers the bucket turned away, until their next token: their clicks before it are
    /// turned away from memory (the bucket would refuse them too), without Redis.
    held_back: Mutex<HashMap<(ProductId, String), Instant>>,
    /// What this instance counted of each product's sale (by its epoch) and has not added
    /// to the audit yet: two sales' counts side by side around a reset, never mixed.
    pending: Mutex<HashMap<(ProductId, i64), Counts>>,
}

/// Counts by audit field.
type Counts = BTreeMap<&'static str, i64>;

/// A product's front door, as this instance knows it.
pub struct Door {
    pub terms: DoorTerms,
    read_at: Instant,
    /// `Flag::On`: this instance saw the sale sold out since it read the terms.
    sold_out: AtomicBool,
    /// When a poll last read the stock, and whether it was gone.
    stock_seen: Mutex<Option<(Instant, bool)>>,
}

impl Door {
    /// Whether a poll read the stock gone within [`STOCK_MAX_AGE`] (`None`: read it).
    pub fn stock_gone_lately(&self) -> Option<bool> {
        let seen = *lock(&self.stock_seen);
        seen.filter(|(at, _)| at.elapsed() < STOCK_MAX_AGE)
            .map(|(_, gone)| gone)
    }

    pub fn saw_stock(&self, gone: bool) {
        *lock(&self.stock_seen) = Some((Instant::now(), gone));
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A front-door refusal.
fn turned_away(why: TurnedAway, message: String) -> AppError {
    AppError::TurnedAway {
        why,
        message,
        retry_after_s: None,
    }
}

fn rate_limited(product: &ProductId, user: &str, limit: LimitTerms, wait_ms: u64) -> AppError {
    AppError::TurnedAway {
        why: TurnedAway::RateLimited,
        message: format!(
            "{user} asks faster than product {product} allows ({} a second): try again in \
             {wait_ms} ms",
            limit.per_s
        ),
        retry_after_s: Some(wait_ms.div_ceil(1_000)),
    }
}

impl Admission {
    /// The instance's front door: its notice subscription on `subscriber` (what the lock
    /// subscription uses) and its counter flush. Needs a Tokio runtime.
    pub fn start(store: Store, subscriber: Nodes) -> Self {
        let shared = Arc::new(Shared {
            store,
            doors: Mutex::default(),
            notices: AtomicU64::new(0),
            sticky: Mutex::default(),
            held_back: Mutex::default(),
            pending: Mutex::default(),
        });
        tokio::spawn(notices::listen(subscriber, Arc::downgrade(&shared)));
        tokio::spawn(notices::flush(Arc::downgrade(&shared)));
        Self { shared }
    }

    /// The product's door: as kept, or read from its meta when not kept or too old.
    pub async fn door(&self, keys: &ProductKeys) -> Result<Arc<Door>, AppError> {
        let product = &keys.product;
        if let Some(door) = lock(&self.shared.doors).get(product)
            && door.read_at.elapsed() < TERMS_MAX_AGE
        {
            return Ok(door.clone());
        }
        let before = self.shared.notices.load(Ordering::Acquire);
        let values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&keys.meta)
            .arg(&terms::META_FIELDS[..])
            .query_async(&mut self.shared.store.conn())
            .await?;
        let door = Arc::new(Door {
            terms: DoorTerms::from_meta(&values),
            read_at: Instant::now(),
            sold_out: AtomicBool::new(false),
            stock_seen: Mutex::new(None),
        });
        let mut doors = lock(&self.shared.doors);
        // Read before a notice came: good for this request, not to keep.
        if self.shared.notices.load(Ordering::Acquire) == before {
            if doors.len() >= MAX_PRODUCTS {
                doors.retain(|_, d| d.read_at.elapsed() < TERMS_MAX_AGE);
                if doors.len() >= MAX_PRODUCTS {
                    doors.clear();
                }
            }
            doors.insert(product.clone(), door.clone());
        }
        Ok(door)
    }

    /// Forgets what this instance keeps of `product`'s door, at once: the instance that
    /// reset or reopened a sale does not wait for its own notice.
    pub fn forget(&self, product: &ProductId) {
        self.shared.forget(Some(product));
    }

    /// The product's door, if this instance keeps it fresh and it lets everyone through:
    /// a deduction then goes on without an await (the common case, on the hot path).
    pub fn open_now(&self, product: &ProductId) -> Option<Arc<Door>> {
        let doors = lock(&self.shared.doors);
        let door = doors.get(product)?;
        (door.read_at.elapsed() < TERMS_MAX_AGE && door.terms.wide_open()).then(|| door.clone())
    }

    /// Whether this instance answers the product's deductions 409 from memory.
    pub fn flagged(&self, product: &ProductId, door: &Door) -> bool {
        match door.terms.flag {
            Flag::Off => false,
            Flag::On => door.sold_out.load(Ordering::Relaxed),
            Flag::Sticky => lock(&self.shared.sticky).get(product) == Some(&door.terms.sale()),
        }
    }

    /// The front door for one deduction: at once when the product's door is known to be
    /// wide open and the request brings no pass (most requests: no Redis), else through
    /// [`gate`](Self::gate). `whole`: the deduction sells from the product's one stock, so
    /// the sold-out flag speaks for it.
    pub async fn admit(
        &self,
        keys: &ProductKeys,
        user: Option<&UserId>,
        pass: Option<&str>,
        whole: bool,
    ) -> Result<Arc<Door>, AppError> {
        if pass.is_none()
            && let Some(door) = self.open_now(&keys.product)
        {
            return Ok(door);
        }
        // Boxed: the path of a door not known open, kept out of every request's future.
        Box::pin(self.gate(keys, user, pass, whole)).await
    }

    /// The door a deduction of `keys`' product by `user` with `pass` must pass, in order:
    /// the sold-out flag (409), the waiting room's pass (403), the buyer's bucket (429).
    /// Returns the door, for [`Admission::saw`].
    async fn gate(
        &self,
        keys: &ProductKeys,
        user: Option<&UserId>,
        pass: Option<&str>,
        use_flag: bool,
    ) -> Result<Arc<Door>, AppError> {
        let door = self.door(keys).await?;
        let terms = &door.terms;
        if terms.wide_open() {
            if pass.is_some() && terms.epoch > 0 {
                return Err(AppError::BadRequest(format!(
                    "product {} has no waiting room: a deduction carries no pass",
                    keys.product
                )));
            }
            return Ok(door);
        }
        let product = &keys.product;
        if use_flag && self.flagged(product, &door) {
            self.count(product, terms.epoch, counted::FLAGGED);
            return Err(turned_away(
                TurnedAway::SoldOut,
                format!("product {product} is sold out (this instance's sold-out flag)"),
            ));
        }
        if terms.room.is_none() && pass.is_some() {
            return Err(AppError::BadRequest(format!(
                "product {product} has no waiting room: a deduction carries no pass"
            )));
        }
        let needs_user = terms.room.is_some() || terms.limit.is_some();
        let user = match user {
            Some(user) => user.as_str(),
            None if needs_user => {
                return Err(AppError::BadRequest(format!(
                    "product {product} admits named buyers only: give user"
                )));
            }
            None => "",
        };
        if let Some(room) = &terms.room {
            self.check_pass(product, terms.epoch, room, user, pass)?;
        }
        if let Some(limit) = terms.limit {
            self.check_rate(keys, terms.epoch, limit, user).await?;
        }
        Ok(door)
    }

    /// The waiting room's pass, for `user`: none (403 `no_pass`) or one that does not let
    /// them in (403 `pass_refused`) is counted and refused.
    fn check_pass(
        &self,
        product: &ProductId,
        epoch: i64,
        room: &terms::Room,
        user: &str,
        pass: Option<&str>,
    ) -> Result<(), AppError> {
        let Some(pass) = pass else {
            self.count(product, epoch, counted::NO_PASS);
            return Err(turned_away(
                TurnedAway::NoPass,
                format!(
                    "product {product} sells through its waiting room: take a ticket \
                     (POST /room/{product}/ticket?user={user}), poll it until you are \
                     let in, and bring the pass"
                ),
            ));
        };
        let checked = room::check_pass(room, product.as_str(), user, epoch, pass, wall_clock_ms());
        if let Err(refusal) = checked {
            self.count(product, epoch, counted::PASS_REFUSED);
            return Err(turned_away(
                TurnedAway::PassRefused,
                format!("the pass does not let {user} in: {}", refusal.reason()),
            ));
        }
        Ok(())
    }

    /// The buyer's bucket (429 `rate_limited`): refused from memory while this instance
    /// knows the buyer is held back, else by the bucket's script in Redis, whose answer
    /// this instance then remembers.
    async fn check_rate(
        &self,
        keys: &ProductKeys,
        epoch: i64,
        limit: LimitTerms,
        user: &str,
    ) -> Result<(), AppError> {
        let product = &keys.product;
        let held = (product.clone(), user.to_owned());
        let until = lock(&self.shared.held_back).get(&held).copied();
        if let Some(until) = until
            && let Some(left) = until.checked_duration_since(Instant::now())
        {
            self.count(product, epoch, counted::RATE_LIMITED);
            let wait_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX).max(1);
            return Err(rate_limited(product, user, limit, wait_ms));
        }
        let wait_ms: u64 = BUCKET
            .key(keys.bucket(user))
            .key(&keys.audit)
            .arg(limit.per_s)
            .arg(limit.burst)
            .invoke_async(&mut self.shared.store.conn())
            .await?;
        if wait_ms == 0 {
            return Ok(());
        }
        let mut held_back = lock(&self.shared.held_back);
        if held_back.len() >= MAX_PRODUCTS {
            let now = Instant::now();
            held_back.retain(|_, until| *until > now);
            if held_back.len() >= MAX_PRODUCTS {
                held_back.clear();
            }
        }
        held_back.insert(held, Instant::now() + Duration::from_millis(wait_ms));
        Err(rate_limited(product, user, limit, wait_ms))
    }

    /// What a deduction through `door` came to: a sold-out answer sets the flag (when the
    /// answer speaks for the product's whole stock: `whole`).
    pub fn saw(&self, product: &ProductId, door: &Door, outcome: &Outcome, whole: bool) {
        if !whole || !matches!(outcome, Outcome::SoldOut { remaining } if *remaining <= 0) {
            return;
        }
        match door.terms.flag {
            Flag::Off => {}
            Flag::On => door.sold_out.store(true, Ordering::Relaxed),
            Flag::Sticky => {
                let mut sticky = lock(&self.shared.sticky);
                if sticky.len() >= MAX_PRODUCTS && !sticky.contains_key(product) {
                    sticky.clear();
                }
                sticky.insert(product.clone(), door.terms.sale());
            }
        }
    }

    /// A buyer's ticket: its number (kept from its first arrival) and the signed ticket.
    pub async fn ticket(
        &self,
        keys: &ProductKeys,
        room: &terms::Room,
        epoch: i64,
        user: &UserId,
    ) -> Result<(i64, String), AppError> {
        let (number, _new): (i64, i64) = TICKET
            .key(keys.room_counter())
            .key(keys.room_buyers())
            .arg(user.as_str())
            .invoke_async(&mut self.shared.store.conn())
            .await?;
        let ticket = room::ticket(room, keys.product.as_str(), user.as_str(), epoch, number);
        Ok((number, ticket))
    }

    /// Counts a pass given out (in the audit, at the next flush).
    pub fn passed(&self, product: &ProductId, epoch: i64) {
        self.count(product, epoch, counted::PASSES);
    }

    fn count(&self, product: &ProductId, epoch: i64, field: &'static str) {
        let mut pending = lock(&self.shared.pending);
        let counts = pending.entry((product.clone(), epoch)).or_default();
        *counts.entry(field).or_default() += 1;
    }
}

impl Shared {
    /// Forgets what a notice says may have changed (`None`: every product).
    fn forget(&self, product: Option<&ProductId>) {
        self.notices.fetch_add(1, Ordering::AcqRel);
        let mut doors = lock(&self.doors);
        match product {
            Some(product) => {
                doors.remove(product);
            }
            None => doors.clear(),
        }
    }
}

/// Milliseconds since the Unix epoch on this machine's clock: what passes and the
/// serving number are measured in (instances on different machines must keep their
/// clocks close, as any expiry on the wall clock needs).
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
