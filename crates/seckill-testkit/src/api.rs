//! The HTTP API as a client uses it: one handle on an instance or on Nginx, the product a
//! parameter of each call, so that tests read like the API's documentation.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use seckill_load::{Control, Load, Method, Report};
use serde_json::{Value, json};

/// A client of one base URL (an instance, or Nginx in front of several).
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Api {
    pub fn new(base: &str) -> Self {
        Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("an HTTP client"),
            base: base.trim_end_matches('/').to_owned(),
            token: None,
        }
    }

    /// Sends `Authorization: Bearer <token>` on admin calls.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token = Some(token.to_owned());
        self
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// GET `path`: the status and the JSON body (null when it is not JSON).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        answer(self.http.get(self.url(path))).await
    }

    /// POST `path` with no body.
    pub async fn post(&self, path: &str) -> (u16, Value) {
        answer(self.http.post(self.url(path))).await
    }

    /// POST `path` with a JSON body, and the admin token when the handle has one.
    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let mut request = self.http.post(self.url(path)).json(body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        answer(request).await
    }

    /// `POST /deduct_stock/<variant?knobs>` for `product`.
    pub async fn deduct(&self, product: &str, variant_and_knobs: &str) -> (u16, Value) {
        self.post(&deduct_path(product, variant_and_knobs)).await
    }

    /// `POST /deduct_stock/<variant?knobs>` for `product` with `Idempotency-Key: key`: the
    /// status, the body, and whether the answer said it was replayed.
    pub async fn deduct_keyed(
        &self,
        product: &str,
        variant_and_knobs: &str,
        key: &str,
    ) -> (u16, Value, bool) {
        let response = self
            .http
            .post(self.url(&deduct_path(product, variant_and_knobs)))
            .header("idempotency-key", key)
            .send()
            .await
            .expect("an answer");
        let status = response.status().as_u16();
        let replayed = response.headers().contains_key("idempotent-replayed");
        (
            status,
            response.json().await.unwrap_or(Value::Null),
            replayed,
        )
    }

    /// One click sent `times` times at once with the same `key`, through `apis` in turn:
    /// every answer (status, body, replayed).
    pub async fn same_click(
        apis: &[Api],
        product: &str,
        variant_and_knobs: &str,
        key: &str,
        times: usize,
    ) -> Vec<(u16, Value, bool)> {
        let mut clicks = tokio::task::JoinSet::new();
        for i in 0..times {
            let api = apis[i % apis.len()].clone();
            let (product, variant, key) = (
                product.to_owned(),
                variant_and_knobs.to_owned(),
                key.to_owned(),
            );
            clicks.spawn(async move { api.deduct_keyed(&product, &variant, &key).await });
        }
        clicks.join_all().await
    }

    /// `POST /admin/reset`, which must succeed.
    pub async fn reset(&self, product: &str, stock: i64, shards: u32) -> Value {
        let body = json!({ "product": product, "stock": stock, "shards": shards });
        let (status, answer) = self.post_json("/admin/reset", &body).await;
        assert_eq!(status, 200, "reset {product}: {answer}");
        answer
    }

    /// `POST /admin/reset` with a per-user limit, which must succeed.
    pub async fn reset_limited(&self, product: &str, stock: i64, shards: u32, per_user: i64) {
        self.reset_with(json!({
            "product": product, "stock": stock, "shards": shards, "per_user": per_user,
        }))
        .await;
    }

    /// `POST /admin/reset` with `body` (any of its terms), which must succeed.
    pub async fn reset_with(&self, body: Value) -> Value {
        let (status, answer) = self.post_json("/admin/reset", &body).await;
        assert_eq!(status, 200, "reset {body}: {answer}");
        answer
    }

    /// `POST /orders/<order>/pay?product=<product>`.
    pub async fn pay(&self, product: &str, order: &str) -> (u16, Value) {
        self.post(&format!("/orders/{order}/pay?product={product}"))
            .await
    }

    /// `users` buyers (`u0`, `u1`, …) each clicking `clicks` times at once, all together,
    /// through `apis` in turn; again for the buyers that got neither a unit nor a 403 (a
    /// lock busy, a setnx that does not wait), up to 100 rounds. Every status counted.
    pub async fn buyers_click(
        apis: &[Api],
        product: &str,
        variant_and_knobs: &str,
        users: usize,
        clicks: usize,
    ) -> BTreeMap<u16, usize> {
        let mut statuses = BTreeMap::new();
        let mut waiting: Vec<usize> = (0..users).collect();
        for _ in 0..100 {
            let mut running = tokio::task::JoinSet::new();
            for &user in &waiting {
                for click in 0..clicks {
                    let api = apis[(user + click) % apis.len()].clone();
                    let path = format!("{}&user=u{user}", deduct_path(product, variant_and_knobs));
                    running.spawn(async move { (user, api.post(&path).await.0) });
                }
            }
            let mut served = BTreeSet::new();
            while let Some(answer) = running.join_next().await {
                let (user, status) = answer.expect("a click");
                *statuses.entry(status).or_default() += 1;
                if matches!(status, 200 | 403 | 409) {
                    served.insert(user);
                }
            }
            waiting.retain(|user| !served.contains(user));
            if waiting.is_empty() {
                break;
            }
        }
        statuses
    }

    /// `GET /stats` of `product`, which must succeed.
    pub async fn stats(&self, product: &str) -> Value {
        let (status, stats) = self.get(&format!("/stats?product={product}")).await;
        assert_eq!(status, 200, "stats of {product}: {stats}");
        stats
    }

    /// A load of deductions of `product` at this handle (POSTs; add requests, concurrency
    /// and the rest, then [`run`](Api::run) it).
    pub fn load(&self, product: &str, variant_and_knobs: &str) -> Load {
        Load::post(self.url(&deduct_path(product, variant_and_knobs)))
    }

    /// The same deductions spread over several handles in turn (instances without Nginx).
    pub fn load_over(apis: &[Api], product: &str, variant_and_knobs: &str) -> Load {
        let path = deduct_path(product, variant_and_knobs);
        Load::to(apis.iter().map(|a| a.url(&path)).collect(), Method::Post)
    }

    /// Runs `load` with this handle's client, to its end.
    pub async fn run(&self, load: Load) -> Report {
        load.run(&self.http, &Control::default()).await
    }

    /// Runs `load` in the background (the test can kill servers meanwhile), until it ends
    /// or `control` stops it.
    pub fn spawn(&self, load: Load, control: &Control) -> tokio::task::JoinHandle<Report> {
        let (http, control) = (self.http.clone(), control.clone());
        tokio::spawn(async move { load.run(&http, &control).await })
    }

    /// Runs `loads` side by side with this handle's client for `time`, then stops them: a
    /// report each, in their order.
    pub async fn side_by_side(&self, loads: Vec<Load>, time: Duration) -> Vec<Report> {
        let control = Control::default();
        let running: Vec<_> = loads
            .into_iter()
            .map(|load| self.spawn(load.requests(usize::MAX), &control))
            .collect();
        tokio::time::sleep(time).await;
        control.stop();
        let mut reports = Vec::new();
        for load in running {
            reports.push(load.await.expect("a load task"));
        }
        reports
    }

    /// What `/stats` says was sold of `product`, when it answers (it may be 503 while Redis
    /// is away).
    pub async fn sold(&self, product: &str) -> Option<i64> {
        let (status, stats) = self.get(&format!("/stats?product={product}")).await;
        (status == 200).then(|| stats["sold"].as_i64()).flatten()
    }

    /// Waits until `/stats` says at least `units` of `product` were sold; what it says then.
    /// Panics, saying `what` it waited for, after `within`.
    pub async fn wait_sold(&self, product: &str, units: i64, within: Duration, what: &str) -> i64 {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (status, stats) = self.get(&format!("/stats?product={product}")).await;
            if let Some(sold) = (status == 200).then(|| stats["sold"].as_i64()).flatten()
                && sold >= units
            {
                return sold;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: not {units} sold in {within:?}; /stats last said {status} {stats}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Deductions of `product` with `variant_and_knobs`, 200 at a time from 20 clients, in
    /// rounds until it is sold out (setnx fails fast, so it needs rounds) or 40 rounds
    /// went by; `/stats` then.
    pub async fn sell_out_in_rounds(&self, product: &str, variant_and_knobs: &str) -> Value {
        for _ in 0..40 {
            let load = self
                .load(product, variant_and_knobs)
                .requests(200)
                .concurrency(20);
            self.run(load).await;
            if int(&self.stats(product).await, "remaining") == 0 {
                break;
            }
        }
        self.stats(product).await
    }

    /// A metric summed over its series in `/metrics` (`seckill_lock_handoffs_total`, …).
    pub async fn metric(&self, name: &str) -> f64 {
        let url = self.url("/metrics");
        let text = self
            .http
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|err| panic!("GET {url}: {err}"))
            .text()
            .await
            .unwrap_or_default();
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }
}

/// `/deduct_stock/<variant?knobs>` with `product` added to the query.
pub fn deduct_path(product: &str, variant_and_knobs: &str) -> String {
    let sep = if variant_and_knobs.contains('?') {
        '&'
    } else {
        '?'
    };
    format!("/deduct_stock/{variant_and_knobs}{sep}product={product}")
}

/// Sends a request; its status and JSON body (null when the body is not JSON).
async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("an HTTP answer");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A field of a JSON answer (`/stats`) as an integer.
pub fn int(value: &Value, field: &str) -> i64 {
    value[field]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {field} in {value}"))
}
