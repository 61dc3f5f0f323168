//! The audit's rules, said once. The service applies them to what its deductions left in
//! Redis (`/stats`); `seckill-check` applies them to what a service it did not write
//! answered, where a request whose answer never came may or may not have sold, so every
//! figure there is a [`Bounds`] of the two ends.
//!
//! The counts are units: `initial` put on sale, `held` by buyers (sold and not given back),
//! `remaining` in the stock at the end, `turned_away` requests that sold nothing although
//! a unit might have been left for them (refused as sold out, or busy).
//!
//! ```
//! use seckill_audit::Sale;
//! // 100 on sale; 103 buyers were told they bought; 0 left: 3 oversold.
//! let sale = Sale { initial: 100, held: 103, remaining: 0, turned_away: 0 };
//! assert_eq!(sale.oversold(), 3);
//! // 100 on sale; 100 told they bought; 5 still in the stock: 5 updates lost.
//! let sale = Sale { initial: 100, held: 100, remaining: 5, turned_away: 0 };
//! assert_eq!(sale.lost_updates(), 5);
//! ```

/// What a sale's counts are at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sale {
    /// Units put on sale.
    pub initial: i64,
    /// Units buyers hold: sold, and not given back (an expired reservation gives one back).
    pub held: i64,
    /// Units left in the stock.
    pub remaining: i64,
    /// Requests that sold nothing while a unit might have been left for them.
    pub turned_away: i64,
}

impl Sale {
    /// Units held past the initial stock.
    pub fn oversold(&self) -> i64 {
        (self.held - self.initial).max(0)
    }

    /// Units held that never left the stock: two deductions read the same stock and both
    /// wrote it back one lower (a `GET` then `SET`), so one update was lost.
    pub fn lost_updates(&self) -> i64 {
        (self.held - self.left_the_stock()).max(0)
    }

    /// Units that left the stock with nobody holding them: taken and never sold.
    pub fn unaccounted(&self) -> i64 {
        (self.left_the_stock() - self.held).max(0)
    }

    /// Units left while buyers were turned away: a sale that could have sold them and
    /// did not.
    pub fn undersold(&self) -> i64 {
        self.remaining.max(0).min(self.turned_away.max(0))
    }

    fn left_the_stock(&self) -> i64 {
        self.initial - self.remaining
    }
}

/// A figure known only between two ends: what the rule gives when every unknown answer
/// sold nothing (`least`), and when every one sold (`most`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bounds {
    pub least: i64,
    pub most: i64,
}

impl Bounds {
    /// `rule` of the sale with `held` at each end of `held..=held + unknown`.
    pub fn of(sale: Sale, unknown: i64, rule: impl Fn(&Sale) -> i64) -> Self {
        let low = rule(&sale);
        let high = rule(&Sale {
            held: sale.held + unknown.max(0),
            ..sale
        });
        Self {
            least: low.min(high),
            most: low.max(high),
        }
    }

    /// The rule is broken whatever the unknown answers were.
    pub fn certain(&self) -> bool {
        self.least > 0
    }
}

impl std::fmt::Display for Bounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.least == self.most {
            write!(f, "{}", self.least)
        } else {
            write!(f, "{}..{}", self.least, self.most)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_sale_breaks_no_rule() {
        let sale = Sale {
            initial: 10,
            held: 10,
            remaining: 0,
            turned_away: 50,
        };
        assert_eq!(
            (
                sale.oversold(),
                sale.lost_updates(),
                sale.unaccounted(),
                sale.undersold()
            ),
            (0, 0, 0, 0)
        );
    }

    #[test]
    fn units_left_while_buyers_were_refused_are_undersold() {
        let sale = Sale {
            initial: 10,
            held: 6,
            remaining: 4,
            turned_away: 3,
        };
        assert_eq!(sale.undersold(), 3);
        assert_eq!(
            Sale {
                turned_away: 9,
                ..sale
            }
            .undersold(),
            4
        );
    }

    #[test]
    fn unknown_answers_widen_a_figure_into_bounds() {
        // 10 on sale, 8 acknowledged, 2 left, 3 answers lost: held is 8..=11.
        let sale = Sale {
            initial: 10,
            held: 8,
            remaining: 2,
            turned_away: 0,
        };
        let lost = Bounds::of(sale, 3, Sale::lost_updates);
        assert_eq!((lost.least, lost.most), (0, 3));
        assert!(!lost.certain(), "the unknowns may have sold nothing");
        let taken = Bounds::of(sale, 3, Sale::unaccounted);
        assert_eq!((taken.least, taken.most), (0, 0));
        let sale = Sale { held: 9, ..sale };
        assert!(Bounds::of(sale, 3, Sale::lost_updates).certain());
        assert_eq!(Bounds::of(sale, 3, Sale::lost_updates).to_string(), "1..4");
    }
}
