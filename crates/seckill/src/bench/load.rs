//! The load driver: N workers sending POSTs until a request count is reached.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use tokio::time::Instant;

/// How the load is sent.
#[derive(Debug, Clone, Copy)]
pub enum Method {
    Get,
    Post,
}

/// What the clients saw.
pub struct LoadResult {
    pub statuses: BTreeMap<u16, usize>,
    /// Requests that got no HTTP answer.
    pub transport_errors: usize,
    /// Latency of answered requests, in microseconds.
    pub latency: Histogram<u64>,
    pub elapsed: Duration,
    /// When the last 200 arrived, from the start.
    pub last_ok: Option<Duration>,
    /// How long the work inside the lock really took, µs, as each 200 said (`work_us`).
    pub work: Histogram<u64>,
}

impl LoadResult {
    /// Answers of any kind per second.
    pub fn throughput(&self) -> f64 {
        self.statuses.values().sum::<usize>() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A latency percentile (`quantile` in 0..=1), in milliseconds.
    pub fn percentile_ms(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1000.0
    }

    /// The mean and p99 of the real work time, in milliseconds, when answers reported it.
    pub fn work_ms(&self) -> Option<(f64, f64)> {
        (!self.work.is_empty()).then(|| {
            (
                self.work.mean() / 1000.0,
                self.work.value_at_quantile(0.99) as f64 / 1000.0,
            )
        })
    }
}

/// The `work_us` of an answer's body, found without parsing the whole of it.
fn work_us(body: &[u8]) -> Option<u64> {
    const FIELD: &[u8] = b"\"work_us\":";
    let at = body.windows(FIELD.len()).position(|w| w == FIELD)? + FIELD.len();
    let digits = body[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&body[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 10 min, 3 significant figures: enough for any request the knobs allow.
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Sends `requests` POSTs to `url` from `concurrency` workers, each on its own kept-alive
/// connection, as oha does. Every worker stops early once `stop` is set.
pub async fn drive(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    requests: usize,
    concurrency: usize,
    progress: &ProgressBar,
    stop: &Arc<AtomicBool>,
) -> LoadResult {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..concurrency.max(1))
        .map(|_| {
            let (http, url, next, progress) =
                (http.clone(), url.to_owned(), next.clone(), progress.clone());
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut result = LoadResult {
                    statuses: BTreeMap::new(),
                    transport_errors: 0,
                    latency: histogram(),
                    elapsed: Duration::ZERO,
                    last_ok: None,
                    work: histogram(),
                };
                while !stop.load(Ordering::Relaxed)
                    && next.fetch_add(1, Ordering::Relaxed) < requests
                {
                    let sent = Instant::now();
                    let request = match method {
                        Method::Get => http.get(&url),
                        Method::Post => http.post(&url),
                    };
                    let answer = match request.send().await {
                        // Read the body, so the connection can be reused.
                        Ok(response) => {
                            let status = response.status().as_u16();
                            response.bytes().await.ok().map(|body| (status, body))
                        }
                        Err(_) => None,
                    };
                    progress.inc(1);
                    let Some((status, body)) = answer else {
                        result.transport_errors += 1;
                        continue;
                    };
                    let took = u64::try_from(sent.elapsed().as_micros()).unwrap_or(u64::MAX);
                    result.latency.saturating_record(took.max(1));
                    *result.statuses.entry(status).or_default() += 1;
                    if status == 200 {
                        result.last_ok = Some(started.elapsed());
                        if let Some(us) = work_us(&body) {
                            result.work.saturating_record(us.max(1));
                        }
                    }
                }
                result
            })
        })
        .collect();

    let mut total = LoadResult {
        statuses: BTreeMap::new(),
        transport_errors: 0,
        latency: histogram(),
        elapsed: Duration::ZERO,
        last_ok: None,
        work: histogram(),
    };
    for worker in workers {
        let Ok(part) = worker.await else { continue };
        for (status, count) in part.statuses {
            *total.statuses.entry(status).or_default() += count;
        }
        total.transport_errors += part.transport_errors;
        let _ = total.latency.add(&part.latency);
        let _ = total.work.add(&part.work);
        total.last_ok = total.last_ok.max(part.last_ok);
    }
    total.elapsed = started.elapsed();
    total
}

#[cfg(test)]
mod tests {
    use super::work_us;

    #[test]
    fn reads_work_us_from_an_answer() {
        let body = br#"{"outcome":"deducted","remaining":3,"work_us":2031}"#;
        assert_eq!(work_us(body), Some(2031));
        assert_eq!(work_us(br#"{"outcome":"sold_out"}"#), None);
    }
}
