//! The lessons a teacher starts from the page (the `seckill-lessons` crate) run in this
//! instance: [`Instance`], the instance as the lessons' runner asks for it (a reset, a
//! close, the audit, a payment), the front door's terms converted, and whether the
//! instance has what a lesson needs ([`available`]). The routes use the crate through here.

pub use seckill_lessons::{LESSONS, Lesson, Lessons, Needs, Status, find};

use std::time::Duration;

use seckill_lessons::{Audit, Phase, Refused, second_product};

use crate::admission::{self, Flag, Opening, RoomTerms};
use crate::error::AppError;
use crate::keys::ProductId;
use crate::product;
use crate::state::AppState;
use crate::variants::Variant;

/// This instance, as a lesson's runner asks of it.
#[derive(Clone)]
pub struct Instance(pub AppState);

/// Whether the instance has what `lesson` needs.
pub fn available(lesson: &Lesson, state: &AppState) -> bool {
    has(state, lesson.needs)
}

fn has(state: &AppState, needs: Needs) -> bool {
    match needs {
        Needs::Nothing => true,
        Needs::Faults => state.settings.faults,
        Needs::RedlockServers => state.redlock.is_some(),
        Needs::ZooKeeper => state.zookeeper.is_some(),
        Needs::OrdersDb => state.orders.is_some(),
        Needs::OrdersDbAndFaults => state.orders.is_some() && state.settings.faults,
    }
}

/// Starts `lesson` on `product` in this instance, unless one is running (409) or the
/// instance lacks what it needs (400).
pub fn start(
    lessons: &Lessons,
    lesson: &'static Lesson,
    product: &ProductId,
    state: AppState,
) -> Result<Status, AppError> {
    lessons
        .start(lesson, product.as_str(), Instance(state))
        .map_err(|refused| match refused {
            Refused::Unavailable(_) => AppError::BadRequest(refused.to_string()),
            Refused::Running => AppError::Conflict(refused.to_string()),
        })
}

/// The front door a lesson's phase opens, in the admission's terms.
pub fn opening(door: seckill_lessons::Opening) -> Opening {
    let room = door.room.map(|room| RoomTerms {
        rate_per_s: room.rate_per_s,
        pass_ttl_ms: room.pass_ttl_ms,
    });
    let flag = match door.flag {
        seckill_lessons::Flag::Off => Flag::Off,
        seckill_lessons::Flag::On => Flag::On,
        seckill_lessons::Flag::Sticky => Flag::Sticky,
    };
    Opening {
        room,
        limit: None,
        flag,
    }
}

/// A sale's terms for `phase`: traced, its stock where its variant sells it from.
fn terms(phase: &Phase) -> Result<product::Terms, String> {
    let variant = Variant::parse(phase.variant)
        .ok_or_else(|| format!("reset: no variant {} in the registry", phase.variant))?;
    Ok(product::Terms {
        stock: phase.stock,
        shards: phase.shards,
        per_user: phase.per_user,
        pay_within_ms: phase.pay_within_ms,
        trace: true,
        in_database: variant.spec().stock_in_database,
        door: opening(phase.door),
    })
}

impl seckill_lessons::Service for Instance {
    fn has(&self, needs: Needs) -> bool {
        has(&self.0, needs)
    }

    /// The product (and a cart's second one) reset for `phase`, traced, reopened, its door
    /// forgotten by this instance. The lessons' products are scratch: their orders stay in
    /// Redis only, unless the phase is about the orders' database.
    async fn reset(&self, phase: &Phase, product: &str) -> Result<(), String> {
        let state = &self.0;
        let product = ProductId::parse(product).map_err(|err| format!("reset: {err}"))?;
        let second = match phase.has_cart() {
            true => Some(
                ProductId::parse(&second_product(product.as_str()))
                    .map_err(|err| format!("the cart's second product: {err}"))?,
            ),
            false => None,
        };
        let terms = terms(phase)?;
        let streaming = if phase.streamed {
            product::Streaming::Streamed
        } else {
            product::Streaming::AsBefore
        };
        for reset in std::iter::once(&product).chain(second.as_ref()) {
            let db = state.database.as_deref();
            product::reset_with_database(
                &state.store,
                &state.lock_store,
                db,
                reset,
                terms,
                streaming,
                state.settings.idempotency_ttl,
            )
            .await
            .map_err(|err| format!("reset: {err}"))?;
            // A close earlier in the lesson (or before it) ends with the reset.
            crate::close::reopen(state, reset)
                .await
                .map_err(|err| format!("reopen: {err}"))?;
            state.admission.forget(reset);
        }
        Ok(())
    }

    async fn close(&self, product: &str) -> Result<(), String> {
        let product = ProductId::parse(product)?;
        crate::close::close(&self.0, &product, Duration::from_secs(10))
            .await
            .map(drop)
            .map_err(|err| err.to_string())
    }

    async fn audit(&self, product: &str) -> Result<Audit, String> {
        let product = ProductId::parse(product)?;
        let stats = product::stats(&self.0.store, &self.0.lock_store, &product)
            .await
            .map_err(|err| err.to_string())?;
        Ok(Audit {
            sold: stats.sold,
            oversold: stats.oversold,
            lost_updates: stats.lost_updates,
            lock_overlaps: stats.lock_overlaps,
            undersold: stats.undersold,
            remaining: stats.remaining,
            flagged: stats.admission.as_ref().map_or(0, |a| a.sold_out_flagged),
        })
    }

    async fn pay(&self, product: &str, order: &str) -> Result<(), String> {
        let product = ProductId::parse(product)?;
        crate::payment::pay(&self.0.store, &product, order)
            .await
            .map(drop)
            .map_err(|err| err.to_string())
    }

    fn flush_every(&self) -> Duration {
        admission::FLUSH_EVERY
    }
}

/// The lessons against the service's registries: each phase's variant found, its shards
/// as the variant splits stock, its door within the admission's bounds, its knobs accepted.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_names_a_variant_of_the_registry() {
        for lesson in LESSONS {
            for phase in lesson.phases {
                let variant = Variant::parse(phase.variant)
                    .unwrap_or_else(|| panic!("{}: no variant {}", lesson.name, phase.variant));
                assert_eq!(
                    phase.shards > 1,
                    variant.spec().splits_stock,
                    "{}",
                    lesson.name
                );
                assert!(terms(phase).is_ok(), "{}", lesson.name);
                let door = opening(phase.door);
                assert_eq!(door.is_wide_open(), phase.door.is_wide_open());
                assert!(door.checked().is_ok(), "{}: {door:?}", lesson.name);
            }
        }
    }

    /// Every request a lesson sends is one an instance with the default bounds accepts.
    #[test]
    fn every_phase_asks_for_knobs_within_the_default_bounds() {
        use clap::Parser;

        #[derive(Parser)]
        struct LimitsOnly {
            #[command(flatten)]
            limits: crate::config::Limits,
        }
        let limits = LimitsOnly::parse_from(["x"]).limits;
        for lesson in LESSONS {
            for phase in lesson.phases {
                let variant = Variant::parse(phase.variant).unwrap();
                let knobs = [Some(phase.knobs), phase.alternate, phase.first];
                for knobs in knobs.into_iter().flatten() {
                    let knobs = knobs
                        .replace("{cart_reversed}", "101-b,101")
                        .replace("{cart}", "101,101-b");
                    let params: Vec<(String, String)> = serde_urlencoded::from_str(&knobs).unwrap();
                    let faults = matches!(lesson.needs, Needs::Faults | Needs::OrdersDbAndFaults);
                    let (name, takes) = (variant.name(), variant.spec().knobs);
                    let parsed = crate::knobs::Knobs::parse(name, takes, &params, &limits, faults);
                    assert!(
                        parsed.is_ok(),
                        "{} {knobs}: {:?}",
                        lesson.name,
                        parsed.err()
                    );
                }
            }
        }
    }
}
