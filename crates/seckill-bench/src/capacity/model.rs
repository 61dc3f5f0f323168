//! The capacity model: units/s from what one unit costs each part, and where the parts run.
//!
//! Every limit is a resource with a capacity (µs of CPU, or of lock time, per second) and a
//! demand (µs of it per unit sold); the model's units/s is the smallest capacity ÷ demand,
//! and that limit is what stops scaling. The limits:
//!
//! - **shared cores** — on one machine every part (the load generator, Nginx, the
//!   instances, Redis, PostgreSQL) draws on the same cores: `cores × 1e6 ÷ Σ parts`;
//! - **the instances' cores** — `instances × cores each × 1e6 ÷ instances' µs`;
//! - **Nginx's cores** — when it has cores of its own;
//! - **the busiest master** — Redis runs commands on one thread, so a master is one core:
//!   `1e6 ÷ (Redis µs × the busiest master's share of the units)`; a hot product lives in
//!   one slot, so its share is 1 however many masters there are;
//! - **the locks** — a lock is held at least for the work inside it: `locks × 1e6 ÷ work µs`.
//!
//! PostgreSQL is not a limit on the sale: the orders reach it through a stream, so a slow
//! database grows the backlog, not the sale's time. On one machine its CPU is in the shared
//! cores' demand, because there it does take cores from the sale.

use serde::Serialize;

use crate::parts_cpu::PerPart;

/// Where the parts run, and how the units spread over masters and locks.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Layout {
    /// Cores every part shares (one machine); `None` when each part has machines of its own.
    pub shared_cores: Option<f64>,
    pub instances: u32,
    pub cores_per_instance: f64,
    /// Nginx's own cores (`None`: it shares them, or is not counted).
    pub nginx_cores: Option<f64>,
    /// The busiest master's share of the units: 1 for one hot product (one slot), 1/M
    /// for shards or products spread evenly over M masters.
    pub busiest_master_share: f64,
    /// Locks a unit takes one of, and how long it holds it (µs): `None` for lua.
    pub locks: Option<(u32, f64)>,
}

/// One limit on units/s: `capacity` µs (of CPU or of lock time) a second, `demand` µs a unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Limit {
    pub name: &'static str,
    pub capacity: f64,
    pub demand: f64,
}

impl Limit {
    pub fn units_per_s(&self) -> f64 {
        self.capacity / self.demand.max(1e-9)
    }
}

pub const SHARED_CORES: &str = "the shared cores";
pub const INSTANCE_CORES: &str = "the instances' cores";
pub const NGINX_CORES: &str = "Nginx's cores";
pub const BUSIEST_MASTER: &str = "the busiest master";
pub const LOCKS: &str = "the locks";

/// The limits `costs` (µs per unit) meet on `layout`.
pub fn limits(costs: &PerPart, layout: &Layout) -> Vec<Limit> {
    let limit = |name, capacity, demand| Limit {
        name,
        capacity,
        demand,
    };
    let mut limits = Vec::new();
    if let Some(cores) = layout.shared_cores {
        limits.push(limit(SHARED_CORES, cores * 1e6, costs.total()));
    }
    let instance_cores = f64::from(layout.instances) * layout.cores_per_instance;
    limits.push(limit(INSTANCE_CORES, instance_cores * 1e6, costs.instances));
    if let Some(cores) = layout.nginx_cores {
        limits.push(limit(NGINX_CORES, cores * 1e6, costs.nginx));
    }
    let busiest = costs.redis * layout.busiest_master_share;
    limits.push(limit(BUSIEST_MASTER, 1e6, busiest));
    if let Some((locks, hold_us)) = layout.locks {
        limits.push(limit(LOCKS, f64::from(locks) * 1e6, hold_us));
    }
    limits
}

/// The model's units/s: the tightest of `limits`, and which one it is.
pub fn predict(limits: &[Limit]) -> Option<(f64, &Limit)> {
    limits
        .iter()
        .map(|limit| (limit.units_per_s(), limit))
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

/// How far `predicted` is from `measured`, as a share of `measured` (+0.10: 10 % high).
pub fn error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured.max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs() -> PerPart {
        PerPart {
            load: 10.0,
            nginx: 20.0,
            instances: 40.0,
            redis: 20.0,
            postgres: Some(10.0),
        }
    }

    /// The model's units/s and the name of the limit that binds.
    fn at(costs: &PerPart, layout: &Layout) -> (f64, &'static str) {
        let limits = limits(costs, layout);
        let (units, limit) = predict(&limits).unwrap();
        (units, limit.name)
    }

    fn machine(cores: f64, share: f64, locks: Option<(u32, f64)>) -> Layout {
        Layout {
            shared_cores: Some(cores),
            instances: 1,
            cores_per_instance: cores,
            nginx_cores: None,
            busiest_master_share: share,
            locks,
        }
    }

    /// 100 µs a unit over 2 shared cores is 20,000 units/s, whatever the instance count.
    #[test]
    fn shared_cores_bind_on_one_machine() {
        let (units, limit) = at(&costs(), &machine(2.0, 1.0, None));
        assert_eq!(limit, SHARED_CORES);
        assert!((units - 20_000.0).abs() < 1e-6);
        let two = Layout {
            instances: 2,
            ..machine(2.0, 1.0, None)
        };
        assert_eq!(at(&costs(), &two).0, units);
    }

    /// A master is one core: 20 µs of Redis a unit on one slot caps it at 50,000/s;
    /// spread evenly over 3 masters, at 150,000/s.
    #[test]
    fn one_slot_is_one_core() {
        let (units, limit) = at(&costs(), &machine(64.0, 1.0, None));
        assert_eq!(limit, BUSIEST_MASTER);
        assert!((units - 50_000.0).abs() < 1e-6);
        let spread = machine(64.0, 1.0 / 3.0, None);
        let (units, limit) = at(&costs(), &spread);
        assert_eq!(limit, BUSIEST_MASTER);
        assert!((units - 150_000.0).abs() < 1e-6);
    }

    /// 8 locks held 2 ms a unit sell at most 4,000 units/s.
    #[test]
    fn locks_bind_when_held_long() {
        let layout = machine(64.0, 1.0 / 3.0, Some((8, 2_000.0)));
        let (units, limit) = at(&costs(), &layout);
        assert_eq!(limit, LOCKS);
        assert!((units - 4_000.0).abs() < 1e-6);
    }

    #[test]
    fn medians_and_errors() {
        let rounds = [
            costs(),
            costs().scaled(2.0),
            PerPart {
                postgres: None,
                ..costs()
            },
        ];
        let median = PerPart::median(&rounds);
        assert_eq!(median.nginx, 20.0);
        assert_eq!(median.postgres, None);
        assert_eq!(PerPart::median(&rounds[..2]).instances, 60.0);
        assert_eq!(costs().total(), 100.0);
        assert!((error(110.0, 100.0) - 0.1).abs() < 1e-12);
    }
}
