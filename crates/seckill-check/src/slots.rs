//! What fills a row's buy requests: the sale's own slots (product, stock, limit, the
//! variant) and, per request, who sends it — a purchase's key and its buyer.

use std::sync::Arc;

use seckill_load::Shape;

use crate::target::{Request, Target};
use crate::template::Slot;

/// Who sends request `n` of a load: purchase `purchase` of phase `phase` (its key), by
/// buyer `u<buyer>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sending {
    pub(crate) phase: usize,
    pub(crate) purchase: usize,
    pub(crate) buyer: usize,
}

/// What fills a row's templates: the sale's own slots and the variant.
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    product: String,
    stock: i64,
    limit: i64,
    /// The row's name and its `{variant}`.
    variant: Option<(String, String)>,
    /// Tells this run's idempotency keys from any earlier run's.
    run: String,
}

impl Slots {
    pub(crate) fn new(target: &Target, variant: Option<(&str, &str)>) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Self {
            product: target.product.clone(),
            stock: target.stock,
            limit: target.limit,
            variant: variant.map(|(name, value)| (name.to_owned(), value.to_owned())),
            run: format!("{:x}{:x}", std::process::id(), nanos % (1 << 40)),
        }
    }

    pub(crate) fn label(&self, target: &Target) -> String {
        match &self.variant {
            Some((name, _)) => format!("{} {name}", target.name),
            None => target.name.clone(),
        }
    }

    pub(crate) fn key(&self, phase: usize, purchase: usize) -> String {
        format!("{}-{phase}-{purchase}", self.run)
    }

    /// The sale's own slots; a request's (`user`, `key`, `order`) are filled by its caller.
    pub(crate) fn fill(&self, slot: Slot) -> String {
        match slot {
            Slot::Product => self.product.clone(),
            Slot::Stock => self.stock.to_string(),
            Slot::Limit => self.limit.to_string(),
            Slot::Variant => self
                .variant
                .as_ref()
                .map(|v| v.1.clone())
                .unwrap_or_default(),
            Slot::User | Slot::Key | Slot::Order => String::new(),
        }
    }

    /// The buy of request `n`, sent as `sending(n)` says.
    pub(crate) fn shape(
        &self,
        target: &Target,
        sending: impl Fn(usize) -> Sending + Send + Sync + 'static,
    ) -> Shape {
        let (target, slots) = (target.clone(), self.clone());
        Arc::new(move |http, n| {
            let who = sending(n);
            let user = format!("u{}", who.buyer);
            let key = slots.key(who.phase, who.purchase);
            let fill = |slot: Slot| match slot {
                Slot::User => user.clone(),
                Slot::Key => key.clone(),
                _ => slots.fill(slot),
            };
            build(http, &target, &target.buy, &fill)
        })
    }
}

pub(crate) fn build(
    http: &reqwest::Client,
    target: &Target,
    request: &Request,
    fill: &(dyn Fn(Slot) -> String + Sync),
) -> reqwest::RequestBuilder {
    // A value that came from an answer (an order id) goes into the path as one segment.
    let path = request.path.fill(|slot| match slot {
        Slot::Order => encode_segment(&fill(slot)),
        _ => fill(slot),
    });
    let url = format!("{}{path}", target.base.as_str().trim_end_matches('/'));
    let mut builder = http.request(request.method.clone(), url);
    for (name, value) in &request.headers {
        builder = builder.header(name, value.fill(fill));
    }
    let body = request.body.fill(fill);
    if !body.is_empty() {
        builder = builder.body(body);
    }
    builder
}

/// `value` percent-encoded as one path segment: only `A-Z a-z 0-9 - . _ ~` stay as they are.
fn encode_segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
