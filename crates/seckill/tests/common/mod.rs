//! Test helpers: a real `redis-server` and real `seckill serve` processes on free loopback
//! ports, each test with its own. Their logs are printed when a test fails.

#![allow(dead_code)] // each test binary uses a different part of the helpers

pub mod redis_cluster;
pub mod sentinel;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `redis-cli -p PORT ARGS…` against a loopback server; what it printed.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli must be installed (scripts/test.sh installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// After a failover under lua load: every request answered (200, or a clean 503 with
/// `Retry-After`), none hanging past the Redis timeout and a batch, nothing oversold, the
/// stock and the orders adding up to `initial`, one order per unit sold. Returns how many
/// orders answered 200 are not in `recorded` (lost in the failover).
pub fn assert_survived_failover(
    load: &LoadReport,
    stats: &Value,
    initial: i64,
    recorded: &BTreeMap<String, String>,
) -> usize {
    assert_eq!(
        load.transport_errors, 0,
        "every request got an answer: {load:?}"
    );
    assert!(
        load.statuses.keys().all(|s| [200, 503].contains(s)),
        "only sales and clean 503s: {load:?}"
    );
    assert_eq!(load.without_retry_after, 0, "{load:?}");
    // Redis timeout 1 s, WAIT 0.5 s, a batch in flight before: nothing waits much longer.
    assert!(
        load.slowest < Duration::from_secs(4),
        "a request hung: {load:?}"
    );
    assert_eq!(int(stats, "oversold"), 0, "{stats}");
    assert_eq!(
        int(stats, "sold") + int(stats, "remaining"),
        initial,
        "the stock and the orders add up: {stats}"
    );
    assert_eq!(int(stats, "sold") as usize, recorded.len(), "{stats}");
    load.orders
        .iter()
        .filter(|o| !recorded.contains_key(*o))
        .count()
}

/// GETs `url`; its JSON body.
pub async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url)
        .send()
        .await
        .unwrap_or_else(|err| panic!("GET {url}: {err}"))
        .json()
        .await
        .unwrap_or_else(|err| panic!("GET {url}: not JSON: {err}"))
}

/// A counter summed over the instances' `/metrics` (`seckill_lock_hand_offs_total`, …).
pub async fn metric_total(http: &reqwest::Client, instances: &[Instance], name: &str) -> f64 {
    let mut total = 0.0;
    for instance in instances {
        let url = instance.url("/metrics");
        let text = http
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|err| panic!("GET {url}: {err}"))
            .text()
            .await
            .unwrap();
        total += text
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

pub fn scratch_dir(what: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "seckill-test-{}-{what}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

pub fn print_log(name: &str, path: &PathBuf) {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(60).collect();
    eprintln!("----- {name} log ({}) -----", path.display());
    for line in tail.into_iter().rev() {
        eprintln!("{line}");
    }
}

/// A real `redis-server` on a free loopback port, durable as the project runs it: AOF with
/// `appendfsync always`, in its own data directory.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    /// Extra `redis-server` arguments (a password, TLS).
    extra: Vec<String>,
}

impl RedisServer {
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// With extra `redis-server` arguments; `{port}` in them stands for the chosen port
    /// (for `--tls-port {port} --port 0`).
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_on(free_port(), extra)
    }

    /// On `port`, with extra `redis-server` arguments.
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        let mut server = Self {
            child: None,
            port,
            dir: scratch_dir("redis"),
            extra: extra
                .iter()
                .map(|a| a.replace("{port}", &port.to_string()))
                .collect(),
        };
        server.spawn();
        server
    }

    pub fn dir(&self) -> &PathBuf {
        &self.dir
    }

    /// Whether the process is still there (not killed by the test).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn spawn(&mut self) {
        let port = self.port.to_string();
        let plain = !self.extra.iter().any(|a| a == "--tls-port");
        let child = Command::new("redis-server")
            .args(if plain { vec!["--port", &port] } else { vec![] })
            .args(["--bind", "127.0.0.1"])
            .args(&self.extra)
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/test.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A direct connection, to look at what the service left in Redis.
    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("a connection to the test redis")
    }

    /// Kills the server (SIGKILL): what it had not written to its AOF is lost.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and the same AOF (after `kill`: a crash and a
    /// restart).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Starts it again on the same port with its data gone: a Redis that lost everything.
    pub fn restart_empty(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).expect("a scratch directory");
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("redis-server", &self.dir.join("redis.log"));
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A real `seckill serve` process on a free loopback port.
pub struct Instance {
    child: Child,
    pub addr: SocketAddr,
    log: PathBuf,
}

impl Instance {
    pub fn start(redis_url: &str, extra_args: &[&str]) -> Self {
        let dir = scratch_dir("instance");
        let log = dir.join("seckill.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args(["serve", "--listen", "127.0.0.1:0", "--redis-url", redis_url])
            .args(extra_args)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("a log file"))
            .spawn()
            .expect("the seckill binary");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("reading the bound address");
        let Some(addr) = line.trim().strip_prefix("listening on ") else {
            print_log("seckill", &log);
            panic!("seckill did not start: {line:?}");
        };
        Self {
            addr: addr.parse().expect("a socket address"),
            child,
            log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The most memory the process has held (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("a live instance");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/<pid>/status")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process: a paused holder, as a long GC pause
    /// or a frozen VM would make one.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal}");
    }

    /// SIGKILL: the process dies wherever it is, without releasing anything.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("seckill", &self.log);
        }
        self.kill();
    }
}

/// One Redis and N instances sharing it.
pub struct Cluster {
    pub redis: RedisServer,
    pub instances: Vec<Instance>,
    pub http: reqwest::Client,
}

/// What a load run saw.
#[derive(Default)]
pub struct LoadReport {
    /// Responses by status code.
    pub statuses: BTreeMap<u16, usize>,
    /// The order id of every 200.
    pub orders: Vec<String>,
    /// Requests that got no HTTP answer at all.
    pub transport_errors: usize,
    /// 503s that did not say when to come back.
    pub without_retry_after: usize,
    /// The slowest answer.
    pub slowest: Duration,
}

impl std::fmt::Debug for LoadReport {
    // The counts, not the thousands of order ids.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadReport")
            .field("statuses", &self.statuses)
            .field("orders", &self.orders.len())
            .field("transport_errors", &self.transport_errors)
            .field("without_retry_after", &self.without_retry_after)
            .field("slowest", &self.slowest)
            .finish()
    }
}

impl LoadReport {
    pub fn count(&self, status: u16) -> usize {
        self.statuses.get(&status).copied().unwrap_or(0)
    }
}

impl Cluster {
    pub fn start(instances: usize, extra_args: &[&str]) -> Self {
        let redis = RedisServer::start();
        let instances = (0..instances)
            .map(|_| Instance::start(&redis.url(), extra_args))
            .collect();
        Self {
            redis,
            instances,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        }
    }

    pub async fn reset(&self, product: &str, stock: i64, shards: u32) {
        let response = self
            .http
            .post(self.instances[0].url("/admin/reset"))
            .json(&json!({ "product": product, "stock": stock, "shards": shards }))
            .send()
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            200,
            "reset: {}",
            response.text().await.unwrap()
        );
    }

    /// POSTs `path_and_query` to instance `i`; returns the status and the JSON body.
    pub async fn post(&self, i: usize, path_and_query: &str) -> (u16, Value) {
        answer(self.http.post(self.instances[i].url(path_and_query))).await
    }

    /// GETs `path_and_query` from instance `i`; returns the status and the JSON body.
    pub async fn get(&self, i: usize, path_and_query: &str) -> (u16, Value) {
        answer(self.http.get(self.instances[i].url(path_and_query))).await
    }

    pub async fn stats(&self, product: &str) -> Value {
        let (status, stats) = self.get(0, &format!("/stats?product={product}")).await;
        assert_eq!(status, 200, "stats: {stats}");
        stats
    }

    /// Sends `requests` POSTs to `path_and_query`, alternating between instances, from
    /// `concurrency` workers. With `stop_when_sold_out`, a worker stops at its first 409.
    pub async fn load(
        &self,
        path_and_query: &str,
        requests: usize,
        concurrency: usize,
        stop_when_sold_out: bool,
    ) -> LoadReport {
        let urls = self
            .instances
            .iter()
            .map(|i| i.url(path_and_query))
            .collect();
        load_urls(
            self.http.clone(),
            urls,
            requests,
            concurrency,
            stop_when_sold_out,
        )
        .await
    }

    /// Like `load`, to one URL (Nginx).
    pub async fn load_through(
        &self,
        url: String,
        requests: usize,
        concurrency: usize,
        stop_when_sold_out: bool,
    ) -> LoadReport {
        load_urls(
            self.http.clone(),
            vec![url],
            requests,
            concurrency,
            stop_when_sold_out,
        )
        .await
    }

    /// A load to one URL that does not borrow the cluster, so that the test can kill parts
    /// of it while the load runs.
    pub fn load_detached(
        http: reqwest::Client,
        url: String,
        requests: usize,
        concurrency: usize,
    ) -> impl Future<Output = LoadReport> + Send + 'static {
        load_urls(http, vec![url], requests, concurrency, false)
    }

    /// A load to `url` that goes on until `stop` is set (or `requests` were sent), and does
    /// not borrow the cluster.
    pub fn load_until(
        http: reqwest::Client,
        url: String,
        requests: usize,
        concurrency: usize,
        stop: Arc<AtomicBool>,
    ) -> impl Future<Output = LoadReport> + Send + 'static {
        load_urls_until(http, vec![url], requests, concurrency, false, stop)
    }

    /// A counter summed over the instances' `/metrics`.
    pub async fn metric(&self, name: &str) -> f64 {
        metric_total(&self.http, &self.instances, name).await
    }

    /// Every order id recorded in Redis for a product, over all its shards.
    pub async fn recorded_orders(&self, product: &str) -> BTreeMap<String, String> {
        recorded_orders(&mut self.redis.conn().await, product).await
    }
}

/// Every order id recorded for a product, over all its shards, wherever the reset put them
/// (the tags in its meta).
pub async fn recorded_orders(
    conn: &mut impl redis::aio::ConnectionLike,
    product: &str,
) -> BTreeMap<String, String> {
    let meta: BTreeMap<String, String> = redis::cmd("HGETALL")
        .arg(format!("seckill:{{{product}}}:meta"))
        .query_async(conn)
        .await
        .unwrap();
    let tags: Vec<String> = match meta.get("tags") {
        Some(tags) if meta.get("shards").is_some_and(|n| n != "1") => {
            tags.split(',').map(str::to_owned).collect()
        }
        _ => vec![product.to_owned()],
    };
    let mut orders = BTreeMap::new();
    for tag in tags {
        let shard: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("seckill:{{{tag}}}:orders"))
            .query_async(conn)
            .await
            .unwrap();
        orders.extend(shard);
    }
    orders
}

/// `requests` POSTs spread over `urls`, from `concurrency` workers.
async fn load_urls(
    http: reqwest::Client,
    urls: Vec<String>,
    requests: usize,
    concurrency: usize,
    stop_when_sold_out: bool,
) -> LoadReport {
    let never = Arc::new(AtomicBool::new(false));
    load_urls_until(http, urls, requests, concurrency, stop_when_sold_out, never).await
}

/// Like `load_urls`, and every worker also stops once `stop` is set.
async fn load_urls_until(
    http: reqwest::Client,
    urls: Vec<String>,
    requests: usize,
    concurrency: usize,
    stop_when_sold_out: bool,
    stop: Arc<AtomicBool>,
) -> LoadReport {
    let next = Arc::new(AtomicUsize::new(0));
    let urls = Arc::new(urls);
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (next, urls, http) = (next.clone(), urls.clone(), http.clone());
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut report = LoadReport::default();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= requests || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let sent = Instant::now();
                    let Ok(response) = http.post(&urls[n % urls.len()]).send().await else {
                        report.transport_errors += 1;
                        continue;
                    };
                    report.slowest = report.slowest.max(sent.elapsed());
                    let status = response.status().as_u16();
                    *report.statuses.entry(status).or_default() += 1;
                    if status == 503 && !response.headers().contains_key("retry-after") {
                        report.without_retry_after += 1;
                    }
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    if status == 200 {
                        let order = body["order"].as_str().expect("a 200 names its order");
                        report.orders.push(order.to_owned());
                    }
                    if status == 409 && stop_when_sold_out {
                        break;
                    }
                }
                report
            })
        })
        .collect();
    let mut total = LoadReport::default();
    for worker in workers {
        let report = worker.await.unwrap();
        for (status, count) in report.statuses {
            *total.statuses.entry(status).or_default() += count;
        }
        total.orders.extend(report.orders);
        total.transport_errors += report.transport_errors;
        total.without_retry_after += report.without_retry_after;
        total.slowest = total.slowest.max(report.slowest);
    }
    total
}

/// Sends a request; its status and JSON body (null when the body is not JSON).
async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A field of `/stats` as an integer.
pub fn int(stats: &Value, field: &str) -> i64 {
    stats[field]
        .as_i64()
        .unwrap_or_else(|| panic!("stats has no integer {field}: {stats}"))
}

/// A real Nginx with the project's config (`nginx/nginx.conf.template` and
/// `nginx/locations.conf`), in front of the given instances.
pub struct Nginx {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

impl Nginx {
    pub fn start(instances: &[Instance]) -> Self {
        Self::start_on("127.0.0.1", instances)
    }

    /// Listening on `host` (an address of this machine) instead of loopback.
    pub fn start_on(host: &str, instances: &[Instance]) -> Self {
        Self::start_at(host, free_port(), instances)
    }

    /// On `host:port`, chosen beforehand (for instances that must know it, `--bench-url`).
    pub fn start_at(host: &str, port: u16, instances: &[Instance]) -> Self {
        let dir = scratch_dir("nginx");
        std::fs::create_dir_all(dir.join("nginx-tmp")).unwrap();
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
        let rendered = Command::new(format!("{root}/scripts/nginx-config.sh"))
            .arg(&dir)
            .arg(format!("{host}:{port}"))
            .arg("1")
            .args(instances.iter().map(|i| i.addr.to_string()))
            .output()
            .expect("scripts/nginx-config.sh");
        assert!(
            rendered.status.success(),
            "{}",
            String::from_utf8_lossy(&rendered.stderr)
        );
        let config = rendered.stdout;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config).unwrap();
        let child = Command::new(nginx_binary())
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.join("nginx-error.log"))
            .args(["-g", "daemon off;"])
            .stdout(Stdio::null())
            .spawn()
            .expect("nginx must be installed (scripts/test.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect((host, port)).is_err() {
            assert!(Instant::now() < deadline, "nginx did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child: Some(child),
            port,
            dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// `POST /admin/reset` through Nginx (from loopback, so Nginx lets it through).
    pub async fn reset(&self, http: &reqwest::Client, stock: i64, shards: u32) {
        let response = http
            .post(self.url("/admin/reset"))
            .json(&json!({ "product": "101", "stock": stock, "shards": shards }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "admin through Nginx from loopback");
    }

    /// `GET /stats` of product 101 through Nginx.
    pub async fn stats(&self, http: &reqwest::Client) -> Value {
        http.get(self.url("/stats"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// `nginx` on the PATH, or Debian's /usr/sbin/nginx (not on a normal user's PATH).
pub fn nginx_binary() -> String {
    std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|dir| format!("{dir}/nginx"))
        .find(|path| std::path::Path::new(path).exists())
        .unwrap_or_else(|| "/usr/sbin/nginx".into())
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if std::thread::panicking() {
            print_log("nginx", &self.dir.join("nginx-error.log"));
        }
        if let Some(mut child) = self.child.take() {
            // SIGTERM, so the master takes its workers down with it.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
