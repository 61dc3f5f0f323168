//! What the bench asks of the service besides the load: resets, `/stats`, `/metrics`.

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::args::BenchArgs;
use crate::parts_cpu::Pids;
use crate::row::Row;

/// What a reset sets.
#[derive(Debug, Clone, Copy)]
pub struct Terms {
    pub stock: i64,
    pub shards: u32,
    pub per_user: i64,
    /// Orders streamed to the database (with --orders-db) or kept in Redis.
    pub orders: bool,
    /// The stock in PostgreSQL (the `pg_*` stock variants).
    pub in_database: bool,
}

/// A client of the service under test.
pub struct Service<'a> {
    pub args: &'a BenchArgs,
    pub http: &'a reqwest::Client,
    /// The processes of each part, when the bench started them: each row then reads what
    /// each part spent on its load.
    pub parts: Option<&'a Pids>,
}

impl Service<'_> {
    pub fn base(&self) -> &str {
        self.args.url.trim_end_matches('/')
    }

    /// `POST /admin/reset`: the product's stock, split over `shards`, with the bench's
    /// `--per-user` limit.
    pub async fn reset(&self, stock: i64, shards: u32) -> anyhow::Result<()> {
        self.reset_streamed(stock, shards, true).await
    }

    /// [`Self::reset`], its orders going to the database (`orders`) or staying in Redis.
    pub async fn reset_streamed(
        &self,
        stock: i64,
        shards: u32,
        orders: bool,
    ) -> anyhow::Result<()> {
        self.reset_in(stock, shards, orders, false).await
    }

    /// [`Self::reset_streamed`], the stock in PostgreSQL when `in_database` (for the
    /// `pg_*` stock variants).
    pub async fn reset_in(
        &self,
        stock: i64,
        shards: u32,
        orders: bool,
        in_database: bool,
    ) -> anyhow::Result<()> {
        let product = &self.args.product;
        let terms = Terms {
            stock,
            shards,
            per_user: self.args.per_user,
            orders,
            in_database,
        };
        self.reset_with(product, terms).await
    }

    /// `POST /admin/reset` of any product.
    pub async fn reset_product(
        &self,
        product: &str,
        stock: i64,
        shards: u32,
        per_user: i64,
    ) -> anyhow::Result<()> {
        let terms = Terms {
            stock,
            shards,
            per_user,
            orders: true,
            in_database: false,
        };
        self.reset_with(product, terms).await
    }

    /// `POST /admin/reset` of `product` on `terms`.
    pub async fn reset_with(&self, product: &str, terms: Terms) -> anyhow::Result<()> {
        let Terms {
            stock,
            shards,
            per_user,
            orders,
            in_database,
        } = terms;
        self.reset_body(json!({
            "product": product,
            "stock": stock,
            "shards": shards,
            "per_user": per_user,
            "orders_of_record": orders,
            "stock_in": if in_database { "postgres" } else { "redis" },
        }))
        .await
    }

    /// `POST /admin/reset` with `body` as it is (the admission suite's front-door terms).
    pub async fn reset_body(&self, body: Value) -> anyhow::Result<()> {
        let admin = self.args.admin_url.as_deref().unwrap_or(&self.args.url);
        let mut request = self
            .http
            .post(format!("{}/admin/reset", admin.trim_end_matches('/')))
            .json(&body);
        if let Some(token) = &self.args.admin_token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.context("POST /admin/reset")?;
        if !response.status().is_success() {
            bail!(
                "reset refused ({}): {}",
                response.status(),
                response.text().await.unwrap_or_default()
            );
        }
        Ok(())
    }

    /// `POST /admin/unlock` of `product`: its locks deleted, whoever holds them.
    pub async fn unlock(&self, product: &str) -> anyhow::Result<()> {
        let admin = self.args.admin_url.as_deref().unwrap_or(&self.args.url);
        let mut request = self
            .http
            .post(format!("{}/admin/unlock", admin.trim_end_matches('/')))
            .json(&json!({ "product": product }));
        if let Some(token) = &self.args.admin_token {
            request = request.bearer_auth(token);
        }
        request
            .send()
            .await
            .context("POST /admin/unlock")?
            .error_for_status()?;
        Ok(())
    }

    /// `GET /stats` of the product.
    pub async fn stats(&self) -> anyhow::Result<Value> {
        self.stats_of(&self.args.product).await
    }

    /// `GET /stats` of any product.
    pub async fn stats_of(&self, product: &str) -> anyhow::Result<Value> {
        let url = format!("{}/stats?product={product}", self.base());
        Ok(self
            .http
            .get(url)
            .send()
            .await?
            .error_for_status()
            .context("GET /stats")?
            .json()
            .await?)
    }

    /// The product's stock and shard count before the bench, if it had been reset.
    pub async fn layout_found(&self) -> Option<(i64, u32)> {
        let stats = self.stats().await.ok()?;
        Some((
            stats["initial"].as_i64()?,
            u32::try_from(stats["shards"].as_u64()?).ok()?,
        ))
    }

    /// Every row resets the product; at the end it is set back to the stock and shard count
    /// the bench found (its orders cleared), so that what sold it before sells it again.
    pub async fn leave_as_found(
        &self,
        found: Option<(i64, u32)>,
        rows: &[Row],
    ) -> anyhow::Result<()> {
        let product = &self.args.product;
        let last_shards = rows
            .iter()
            .rev()
            .find(|r| r.scenario.variant.is_some())
            .map(|r| r.scenario.shards);
        match (found, last_shards) {
            (_, None) => {}
            (Some((stock, shards)), Some(_)) => {
                self.reset(stock, shards).await?;
                eprintln!(
                    "product {product} reset to {stock} units in {shards} shard(s), as the bench found it"
                );
            }
            (None, Some(shards)) => eprintln!(
                "product {product} had no stock before the bench; it is left as the last row set it ({shards} shard(s){})",
                if shards > 1 {
                    ": only the variants that split stock sell it; reset it with shards 1 for the others"
                } else {
                    ""
                }
            ),
        }
        Ok(())
    }

    /// Each instance's `/metrics` text, with its URL.
    async fn metrics(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut pages = Vec::new();
        for url in &self.args.instance_urls {
            let text = self
                .http
                .get(format!("{}/metrics", url.trim_end_matches('/')))
                .send()
                .await?
                .error_for_status()?
                .text()
                .await?;
            pages.push((url.clone(), text));
        }
        Ok(pages)
    }

    /// A counter's value summed over every instance's `/metrics` (`seckill_<name>_total`),
    /// 0 where an instance does not have it.
    pub async fn counter_sum(&self, name: &str) -> anyhow::Result<u64> {
        let metric = format!("seckill_{name}_total");
        let pages = self.metrics().await?;
        Ok(pages
            .iter()
            .flat_map(|(_, text)| samples(text, &metric))
            .sum::<f64>() as u64)
    }

    /// A gauge's highest value over every instance's `/metrics` (`seckill_<name>`); `None`
    /// when no instance has it.
    pub async fn gauge_max(&self, name: &str) -> anyhow::Result<Option<u64>> {
        let metric = format!("seckill_{name}");
        let pages = self.metrics().await?;
        Ok(pages
            .iter()
            .flat_map(|(_, text)| samples(text, &metric))
            .map(|v| v as u64)
            .max())
    }

    /// Each instance's peak resident memory, from its `/metrics`.
    pub async fn peak_rss(&self) -> anyhow::Result<Vec<(String, u64)>> {
        let mut peaks = Vec::new();
        for (url, text) in self.metrics().await? {
            let bytes = samples(&text, "seckill_process_peak_resident_memory_bytes")
                .next()
                .with_context(|| format!("{url}/metrics has no peak RSS: {:.300}", text))?;
            peaks.push((url, bytes as u64));
        }
        Ok(peaks)
    }
}

/// The values of `metric`'s samples in a `/metrics` text: `name{labels} value` or
/// `name value` lines (not another metric whose name merely starts the same).
fn samples<'a>(text: &'a str, metric: &'a str) -> impl Iterator<Item = f64> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(metric)?;
        (rest.starts_with('{') || rest.starts_with(' '))
            .then(|| rest.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
            .flatten()
    })
}
