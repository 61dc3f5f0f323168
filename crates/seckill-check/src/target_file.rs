//! The target file as written (TOML, unknown fields refused) and its checks, which turn it
//! into a [`Target`]: each error names the field (`buy.sold`, `phases[1].faults[0].part`).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;

use crate::target::{Lookup, Meanings, Part, Phase, Read, Request, Target};
use crate::template::{Slot, Template};

mod phases;

use phases::check_phases;

impl Target {
    /// Reads and checks a target file's text.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        file.check()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<String>,
    base: String,
    /// The one host that is not loopback the checker may send load to.
    allow_host: Option<String>,
    product: String,
    stock: i64,
    #[serde(default)]
    limit: i64,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    #[serde(default)]
    variants: Variants,
    reset: RawRequest,
    buy: RawBuy,
    stock_left: RawRead,
    orders: Option<RawOrders>,
    audit: Option<RawAudit>,
    #[serde(default)]
    parts: BTreeMap<String, Part>,
    phases: Vec<Phase>,
}

fn default_timeout_ms() -> u64 {
    5_000
}

/// `variants = ["a", "b"]`, or `[variants]` with a row's name and what `{variant}` is
/// for it (`token_past_ttl = "token?ttl_ms=20&work_ms=60"`).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Variants {
    Names(Vec<String>),
    /// In the file's order.
    Named(toml::Table),
}

impl Default for Variants {
    fn default() -> Self {
        Variants::Names(Vec::new())
    }
}

impl Variants {
    /// Each row's name and its `{variant}`, checked.
    fn check(self) -> Result<Vec<(String, String)>, String> {
        let pairs: Vec<(String, String)> = match self {
            Variants::Names(names) => names.into_iter().map(|n| (n.clone(), n)).collect(),
            Variants::Named(named) => named
                .into_iter()
                .map(|(name, value)| match value {
                    toml::Value::String(value) => Ok((name, value)),
                    other => Err(format!(
                        "variants.{name}: a {} is not a string",
                        other.type_str()
                    )),
                })
                .collect::<Result<_, _>>()?,
        };
        for (name, value) in &pairs {
            check_id(&format!("variants.{name}"), name)?;
            let fits = |b: u8| b.is_ascii_alphanumeric() || b"-_.,?=&".contains(&b);
            if value.is_empty() || value.len() > 200 || !value.bytes().all(fits) {
                return Err(format!(
                    "variants.{name}: {value:?} must be 1 to 200 of A-Z a-z 0-9 - _ . , ? = &"
                ));
            }
        }
        Ok(pairs)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    method: Option<String>,
    path: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBuy {
    method: Option<String>,
    path: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: String,
    sold: Vec<u16>,
    sold_out: Vec<u16>,
    #[serde(default)]
    refused: Vec<u16>,
    #[serde(default)]
    busy: Vec<u16>,
    order: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRead {
    path: String,
    pointer: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOrders {
    method: Option<String>,
    path: String,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    found: Vec<u16>,
    missing: Vec<u16>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    path: String,
    zero: BTreeMap<String, String>,
}

const SALE: [Slot; 4] = [Slot::Product, Slot::Stock, Slot::Limit, Slot::Variant];
const BUY: [Slot; 4] = [Slot::Product, Slot::User, Slot::Key, Slot::Variant];
const READ: [Slot; 2] = [Slot::Product, Slot::Variant];
const ORDER: [Slot; 3] = [Slot::Product, Slot::Order, Slot::Variant];

impl File {
    fn check(self) -> Result<Target, String> {
        let base = check_base(&self.base, self.allow_host.as_deref())?;
        check_id("product", &self.product)?;
        let variants = self.variants.check()?;
        within("stock", self.stock, 1, 10_000_000)?;
        within("limit", self.limit, 0, self.stock)?;
        within("timeout_ms", self.timeout_ms, 100, 600_000)?;
        let reset = self.reset.check("reset", "POST", &SALE)?;
        let buy = RawRequest {
            method: self.buy.method.clone(),
            path: self.buy.path.clone(),
            headers: self.buy.headers.clone(),
            body: self.buy.body.clone(),
        }
        .check("buy", "POST", &BUY)?;
        let meanings = self.buy.meanings()?;
        if let Some(pointer) = &self.buy.order {
            check_pointer("buy.order", pointer)?;
        }
        check_pointer("stock_left.pointer", &self.stock_left.pointer)?;
        let stock_left = Read {
            path: Template::parse("stock_left.path", &self.stock_left.path, &READ)?,
            pointer: self.stock_left.pointer,
        };
        let orders = match self.orders {
            Some(orders) => Some(orders.check(self.buy.order.is_some())?),
            None => None,
        };
        let audit = match self.audit {
            Some(audit) => Some(audit.check()?),
            None => None,
        };
        check_phases(&self.phases, &self.parts, &buy, self.limit)?;
        let target = Target {
            name: self.name.unwrap_or_else(|| base.to_string()),
            base,
            product: self.product,
            stock: self.stock,
            limit: self.limit,
            timeout_ms: self.timeout_ms,
            variants,
            reset,
            buy,
            meanings,
            order: self.buy.order,
            stock_left,
            orders,
            audit,
            parts: self.parts,
            phases: self.phases,
        };
        check_variants(&target)?;
        Ok(target)
    }
}

/// Load goes to loopback only, unless the file names the host it goes to.
fn check_base(base: &str, allow_host: Option<&str>) -> Result<reqwest::Url, String> {
    let url = reqwest::Url::parse(base).map_err(|e| format!("base: {base:?}: {e}"))?;
    if url.scheme() != "http" {
        return Err(format!(
            "base: {base:?} is not an http:// URL (this build speaks plain HTTP: check the service behind its TLS terminator, or on its own port)"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "base: {base:?} holds a user or password; give credentials as a header"
        ));
    }
    if url.path() != "/" || url.query().is_some() {
        return Err(format!(
            "base: {base:?}: give the scheme, host and port only; paths go in each request's path"
        ));
    }
    let host = url.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let loopback = host == "localhost" || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback && allow_host != Some(host) {
        return Err(format!(
            "base: {host} is not a loopback address; to send load to it, name it: allow_host = \"{host}\""
        ));
    }
    Ok(url)
}

fn check_id(field: &str, id: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{field}: {id:?} must be 1 to 64 of A-Z a-z 0-9 - _"
        ))
    }
}

fn within<T: PartialOrd + std::fmt::Display>(
    field: &str,
    value: T,
    low: T,
    high: T,
) -> Result<(), String> {
    if value < low || value > high {
        return Err(format!("{field}: {value} is not within {low}..={high}"));
    }
    Ok(())
}

fn check_pointer(field: &str, pointer: &str) -> Result<(), String> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(())
    } else {
        Err(format!(
            "{field}: {pointer:?} is not a JSON pointer (it starts with /, as in /remaining)"
        ))
    }
}

fn check_statuses(field: &str, statuses: &[u16]) -> Result<(), String> {
    match statuses.iter().find(|s| !(100..=599).contains(*s)) {
        Some(bad) => Err(format!("{field}: {bad} is not an HTTP status")),
        None => Ok(()),
    }
}

impl RawRequest {
    fn check(self, field: &str, method: &str, slots: &[Slot]) -> Result<Request, String> {
        let method = self.method.as_deref().unwrap_or(method);
        let method = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("{field}.method: {method:?} is not an HTTP method"))?;
        if !self.path.starts_with('/') {
            return Err(format!("{field}.path: {:?} must start with /", self.path));
        }
        let mut headers = Vec::new();
        for (name, value) in &self.headers {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{field}.headers: {name:?} is not a header name"))?;
            let value = Template::parse(&format!("{field}.headers.{name}"), value, slots)?;
            headers.push((header, value));
        }
        Ok(Request {
            method,
            path: Template::parse(&format!("{field}.path"), &self.path, slots)?,
            headers,
            body: Template::parse(&format!("{field}.body"), &self.body, slots)?,
        })
    }
}

impl RawBuy {
    fn meanings(&self) -> Result<Meanings, String> {
        let lists = [
            ("buy.sold", &self.sold),
            ("buy.sold_out", &self.sold_out),
            ("buy.refused", &self.refused),
            ("buy.busy", &self.busy),
        ];
        for (i, (field, list)) in lists.iter().enumerate() {
            check_statuses(field, list)?;
            // A 5xx is the server's (or a proxy's, after its upstream timed out) error: a
            // sale may be behind it. Only `sold` may name one; the rest stay unknown.
            if let Some(error) = list.iter().find(|s| *s >= &500).filter(|_| i > 0) {
                return Err(format!(
                    "{field}: {error} is a server error, which may have sold: leave it unknown"
                ));
            }
            for (other, earlier) in &lists[..i] {
                if let Some(twice) = list.iter().find(|s| earlier.contains(s)) {
                    return Err(format!("{field}: {twice} is also in {other}"));
                }
            }
        }
        if self.sold.is_empty() {
            return Err("buy.sold: name the statuses of a sale, e.g. [200]".into());
        }
        Ok(Meanings {
            sold: self.sold.clone(),
            sold_out: self.sold_out.clone(),
            refused: self.refused.clone(),
            busy: self.busy.clone(),
        })
    }
}

impl RawOrders {
    fn check(self, orders_named: bool) -> Result<(Request, Lookup), String> {
        if !orders_named {
            return Err(
                "orders: looking orders up needs buy.order, where a sale names its order".into(),
            );
        }
        check_statuses("orders.found", &self.found)?;
        check_statuses("orders.missing", &self.missing)?;
        if let Some(both) = self.missing.iter().find(|s| self.found.contains(s)) {
            return Err(format!("orders.missing: {both} is also in orders.found"));
        }
        if self.found.is_empty() || self.missing.is_empty() {
            return Err("orders: name the statuses of an order found and of one missing, e.g. found = [200], missing = [404]".into());
        }
        let request = RawRequest {
            method: self.method,
            path: self.path,
            headers: self.headers,
            body: String::new(),
        }
        .check("orders", "GET", &ORDER)?;
        if !request.path.holds(Slot::Order) {
            return Err("orders.path: holds no {order}".into());
        }
        let lookup = Lookup {
            found: self.found,
            missing: self.missing,
        };
        Ok((request, lookup))
    }
}

impl RawAudit {
    fn check(self) -> Result<(Template, BTreeMap<String, String>), String> {
        for (name, pointer) in &self.zero {
            check_pointer(&format!("audit.zero.{name}"), pointer)?;
        }
        Ok((Template::parse("audit.path", &self.path, &READ)?, self.zero))
    }
}

/// `{variant}` and `variants` go together.
fn check_variants(target: &Target) -> Result<(), String> {
    let requests = [&target.reset, &target.buy];
    let holds = requests.iter().any(|r| r.holds(Slot::Variant));
    match (holds, target.variants.is_empty()) {
        (true, true) => Err("variants: the requests hold {variant}; list the variants".into()),
        (false, false) => Err("variants: listed, but no request holds {variant}".into()),
        _ => Ok(()),
    }
}
