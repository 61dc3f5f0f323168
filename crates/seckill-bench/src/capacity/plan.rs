//! The model turned around: for a number of buyers a second on one hot product, how many
//! instances, Nginx cores, masters and shards a sale needs, and what stops scaling.
//!
//! Assumptions, each named where it is used: every buyer's request is one `lua` deduction
//! that reaches Redis (no waiting room, no sold-out flag: the worst case for the stores);
//! each part has machines of its own and is planned to be at most [`BUSY`]; an instance
//! has [`CORES_PER_INSTANCE`] cores and there are at least [`MIN_INSTANCES`]; a master is
//! one core (Redis runs commands on one thread) and a hot product lives in one slot, so on
//! one master; the orders reach PostgreSQL through a stream, so the database sets how fast
//! the backlog drains, not how fast the sale goes.

use serde::Serialize;

use crate::parts_cpu::PerPart;

/// The share of its cores a part is planned to use: room for bursts and a failed peer.
pub const BUSY: f64 = 0.7;
/// Cores of one instance (the machine this is measured on has 2; tokio runs a worker per core).
pub const CORES_PER_INSTANCE: f64 = 2.0;
/// One instance may fail (the PodDisruptionBudget lets one go at a time).
pub const MIN_INSTANCES: u32 = 2;
/// Cores of one box for Nginx or the database: past it, Nginx takes several boxes (it
/// shares nothing, so they add up) and the database falls behind (one primary takes every
/// write).
pub const BOX_CORES: f64 = 8.0;
/// The sales the chapter's table plans for, buyers a second on one hot product.
pub const RATES: [f64; 3] = [10_000.0, 100_000.0, 1_000_000.0];

/// What the split product (`segmented`) costs a unit, measured: its parts' µs, its shard
/// count and how long a unit holds a shard's lock.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Split {
    pub costs: PerPart,
    pub shards: u32,
    pub hold_us: f64,
}

/// What a sale of `buyers_per_s` on one hot product needs.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub buyers_per_s: f64,
    /// Instances of [`CORES_PER_INSTANCE`] cores for `lua`'s requests.
    pub instances: u32,
    pub nginx_cores: u32,
    /// Cores of Redis work the hot product's slot is asked for: above [`BUSY`], one master
    /// cannot serve it.
    pub hot_slot_cores: f64,
    /// When one slot cannot: the product split as `segmented` — shards, masters, and
    /// instances for its (dearer) requests.
    pub split: Option<SplitPlan>,
    /// PostgreSQL cores for the orders to land as fast as they sell.
    pub postgres_cores: Option<f64>,
    /// What stops scaling at this rate, in words.
    pub stops: Vec<String>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct SplitPlan {
    pub shards: u32,
    pub masters: u32,
    pub instances: u32,
}

/// Cores of work `per_unit_us` at `rate` units/s asks for.
fn cores(rate: f64, per_unit_us: f64) -> f64 {
    rate * per_unit_us / 1e6
}

/// How many of something with `each` cores it takes to keep `cores` of work [`BUSY`].
fn count(cores: f64, each: f64) -> u32 {
    (cores / (each * BUSY)).ceil().max(1.0) as u32
}

/// The most one slot sells of a product whose unit costs Redis `redis_us`, at [`BUSY`].
pub fn one_slot_ceiling(redis_us: f64) -> f64 {
    BUSY * 1e6 / redis_us.max(1e-9)
}

/// What a sale of `rate` buyers a second needs, from `lua`'s costs per request on the hot
/// product and `split`'s (segmented's) per unit.
pub fn plan(lua: &PerPart, split: &Split, rate: f64) -> Plan {
    let instances = count(cores(rate, lua.instances), CORES_PER_INSTANCE).max(MIN_INSTANCES);
    let nginx_cores = count(cores(rate, lua.nginx), 1.0);
    let hot_slot_cores = cores(rate, lua.redis);
    let mut stops = Vec::new();
    let split = (hot_slot_cores > BUSY).then(|| {
        stops.push(format!(
            "the hot slot: one master sells at most {:.0} units/s of it with lua",
            one_slot_ceiling(lua.redis)
        ));
        SplitPlan {
            shards: count(rate * split.hold_us / 1e6, 1.0).max(split.shards),
            masters: count(cores(rate, split.costs.redis), 1.0),
            instances: count(cores(rate, split.costs.instances), CORES_PER_INSTANCE)
                .max(MIN_INSTANCES),
        }
    });
    let postgres_cores = lua.postgres.map(|pg| cores(rate, pg));
    if let Some(pg) = postgres_cores.filter(|&pg| pg > BUSY * BOX_CORES) {
        stops.push(format!(
            "the orders' database: {pg:.0} cores of inserts to keep up; one primary's writes do not spread, so the orders land after the sale"
        ));
    }
    if f64::from(nginx_cores) > BOX_CORES {
        stops.push(format!(
            "Nginx: {nginx_cores} cores, more than one box: several behind an L4 balancer"
        ));
    }
    Plan {
        buyers_per_s: rate,
        instances,
        nginx_cores,
        hot_slot_cores,
        split,
        postgres_cores,
        stops,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> PerPart {
        PerPart {
            load: 10.0,
            nginx: 20.0,
            instances: 30.0,
            redis: 10.0,
            postgres: Some(50.0),
        }
    }

    fn split() -> Split {
        Split {
            costs: PerPart {
                redis: 200.0,
                instances: 300.0,
                ..lua()
            },
            shards: 6,
            hold_us: 2_000.0,
        }
    }

    /// 10,000 requests a second at 30 µs of instance CPU are 0.3 cores: the minimum of two
    /// instances; 0.1 core of the hot slot; nothing stops.
    #[test]
    fn a_small_sale_fits_one_of_everything() {
        let plan = plan(&lua(), &split(), 10_000.0);
        assert_eq!((plan.instances, plan.nginx_cores), (2, 1));
        assert!((plan.hot_slot_cores - 0.1).abs() < 1e-9);
        assert!(plan.split.is_none());
        assert!(plan.stops.is_empty(), "{:?}", plan.stops);
    }

    /// At 1M a second the slot is asked for 10 cores: the split needs 2,858 shards (2 ms
    /// each at 70 %), 286 masters; 50 cores of inserts; 29 cores of Nginx.
    #[test]
    fn a_million_a_second_splits_and_names_what_stops() {
        let plan = plan(&lua(), &split(), 1e6);
        assert_eq!(plan.instances, 22);
        assert_eq!(plan.nginx_cores, 29);
        let split = plan.split.unwrap();
        assert_eq!((split.shards, split.masters), (2_858, 286));
        assert_eq!(plan.stops.len(), 3, "{:?}", plan.stops);
        assert!(plan.stops[0].starts_with("the hot slot: one master sells at most 70000"));
    }
}
