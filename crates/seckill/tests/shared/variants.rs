//! The variants a test sells with, read from the registry ([`seckill::variants::VARIANTS`]
//! and each one's `Spec`), so that a new variant is tested by every test that means "every
//! variant" without a test naming it. Shared by the `one_redis` and `topology` binaries.

use seckill::knobs::DEFAULT_LOCK_WAIT_MS;
use seckill::variants::Variant;

/// The progression on one Redis (`Spec::in_progression`: the variants that need no
/// servers of their own, in the progression's order), each as `(variant, path, shards)`:
/// see [`path`] and [`shards`].
pub fn progression(knobs: &[(&str, &str)], split: u32) -> Vec<(Variant, String, u32)> {
    Variant::progression()
        .map(|v| (v, path(v, knobs), shards(v, split)))
        .collect()
}

/// [`progression`] but naive: every variant that must sell exactly the stock under
/// contention.
pub fn progression_but_naive(knobs: &[(&str, &str)], split: u32) -> Vec<(Variant, String, u32)> {
    let mut variants = progression(knobs, split);
    variants.retain(|(v, ..)| *v != naive());
    variants
}

/// `variant?knobs`, as `/deduct_stock/` takes it: each of `knobs` that the variant takes
/// (`("work_ms", "20")` is left out for lua), and the lock variants' default wait
/// (`wait_ms=5000`) if it takes a wait and `knobs` gives none: token's own default is not
/// to wait, and a test under contention wants every waiter to wait alike.
pub fn path(variant: Variant, knobs: &[(&str, &str)]) -> String {
    let mut query: Vec<String> = knobs
        .iter()
        .filter(|(name, _)| variant.takes(name))
        .map(|(name, value)| format!("{name}={value}"))
        .collect();
    if variant.takes("wait_ms") && !knobs.iter().any(|(name, _)| *name == "wait_ms") {
        query.push(format!("wait_ms={DEFAULT_LOCK_WAIT_MS}"));
    }
    if query.is_empty() {
        variant.name().to_owned()
    } else {
        format!("{variant}?{}", query.join("&"))
    }
}

/// `path` with one knob more: `with_knob("lua", "user=u1")` is `lua?user=u1`,
/// `with_knob("token?wait_ms=5000", "user=u1")` is `token?wait_ms=5000&user=u1`.
pub fn with_knob(path: &str, knob: &str) -> String {
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}{knob}")
}

/// The shards a test resets the product into for `variant`: `split` for a variant that
/// sells a split stock (`Spec::splits_stock`), one for the others.
pub fn shards(variant: Variant, split: u32) -> u32 {
    if variant.spec().splits_stock {
        split
    } else {
        1
    }
}

/// naive, the one variant of the progression that loses stock (its lesson).
pub fn naive() -> Variant {
    Variant::of(&seckill::variants::naive::SPEC)
}
