//! The teaching page in a real browser: Debian's Chromium, headless, driven through
//! chromedriver's WebDriver protocol. The page loads with no console errors; a naive lesson
//! started from its button runs through Nginx; the page's oversold and lost-updates figures
//! then equal `/stats`; screenshots go to `run/`. `page.rs`: the lock timeline, the side by
//! side table and the page in Chinese.
//!
//! Skipped, saying so, where Chromium cannot be installed (`scripts/install-deps.sh browser`
//! installs it with `scripts/test.sh`).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod door;
mod page;

use seckill_testkit::{
    Api, Instance, Nginx, RedisServer, heavy_turn, int, ports, root, scratch_dir,
};
use serde_json::{Value, json};

/// The service's binary, as cargo built it for these tests.
const SECKILL: &str = env!("CARGO_BIN_EXE_seckill");

/// chromedriver on a free port, and one browser session.
struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    /// The browser's profile, removed with it.
    profile: std::path::PathBuf,
}

impl Browser {
    /// chromedriver, on a port free a moment before; on another when it was taken after all
    /// (chromedriver exits when it cannot bind). `None` when it cannot run here.
    async fn driver(http: &reqwest::Client) -> Option<(Child, String)> {
        for _ in 0..ports::TRIES {
            let port = ports::candidate();
            // A process group of its own, so that the browsers it starts go with it.
            let mut driver = Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .process_group(0)
                .spawn()
                .ok()?;
            let base = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                if driver.try_wait().ok().flatten().is_some() {
                    break;
                }
                if http.get(format!("{base}/status")).send().await.is_ok() {
                    return Some((driver, base));
                }
                if Instant::now() >= deadline {
                    let _ = driver.kill();
                    let _ = driver.wait();
                    panic!("chromedriver did not start");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        None
    }

    async fn start(width: u32, height: u32) -> Option<Self> {
        Self::start_in(width, height, None).await
    }

    /// A browser whose language is `lang` (`zh-CN`), or the machine's.
    async fn start_in(width: u32, height: u32, lang: Option<&str>) -> Option<Self> {
        let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())?;
        let http = reqwest::Client::new();
        let (driver, base) = Self::driver(&http).await?;
        // Held from here, so that a browser that fails to start leaves neither its driver
        // nor its profile behind (dropped, it stops the one and removes the other).
        let mut browser = Self {
            driver,
            base,
            session: String::new(),
            http,
            profile: scratch_dir("chromium-profile"),
        };
        let (base, http, profile) = (&browser.base, &browser.http, &browser.profile);
        // The flags this machine's Chromium needs headless as root, and none of its
        // background connections (the network is closed).
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.display()),
            format!("--lang={}", lang.unwrap_or("en-US")),
        ];
        let prefs = json!({ "intl": { "accept_languages": lang.unwrap_or("en-US") } });
        let created: Value = http
            .post(format!("{base}/session"))
            .json(&json!({ "capabilities": { "alwaysMatch": {
                "goog:chromeOptions": { "binary": chromium, "args": args, "prefs": prefs },
                "goog:loggingPrefs": { "browser": "ALL" }
            }}}))
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        browser.session = created["value"]["sessionId"].as_str()?.to_owned();
        Some(browser)
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method.clone(), url);
        if method != reqwest::Method::GET {
            request = request.json(&body);
        }
        let answer: Value = request
            .send()
            .await
            .expect("chromedriver answers")
            .json()
            .await
            .expect("chromedriver answers JSON");
        answer["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", json!({ "url": url }))
            .await;
    }

    async fn run(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            json!({ "script": script, "args": [] }),
        )
        .await
    }

    async fn click(&self, css: &str) {
        let found = self
            .call(
                reqwest::Method::POST,
                "/element",
                json!({ "using": "css selector", "value": css }),
            )
            .await;
        let id = found
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {found}"))
            .to_owned();
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            json!({}),
        )
        .await;
    }

    /// Waits until `script` returns true.
    async fn until(&self, script: &str, within: Duration, what: &str) {
        let deadline = Instant::now() + within;
        while self.run(script).await != Value::Bool(true) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn screenshot(&self, path: &std::path::Path) {
        use base64_decode::decode;
        let png = self
            .call(reqwest::Method::GET, "/screenshot", Value::Null)
            .await;
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, decode(png.as_str().expect("a screenshot"))).unwrap();
    }

    /// Console messages at SEVERE, as Chromium logged them.
    async fn severe_console(&self) -> Vec<String> {
        let logs = self
            .call(
                reqwest::Method::POST,
                "/se/log",
                json!({ "type": "browser" }),
            )
            .await;
        logs.as_array()
            .map(|entries| {
                entries
                    .iter()
                    .filter(|e| e["level"] == "SEVERE")
                    .map(|e| e["message"].to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Browser {
    /// No error on the page and none in the console.
    async fn assert_no_errors(&self) {
        assert_eq!(
            self.run("return window.__pageErrors").await,
            json!([]),
            "errors on the page"
        );
        let severe = self.severe_console().await;
        assert!(severe.is_empty(), "console errors: {severe:?}");
    }

    /// The page at a phone's width, as `path`; still no error on it.
    async fn phone_screenshot(&self, path: &std::path::Path) {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            json!({ "width": 390, "height": 844 }),
        )
        .await;
        tokio::time::sleep(Duration::from_millis(800)).await;
        self.screenshot(path).await;
        assert_eq!(self.run("return window.__pageErrors").await, json!([]));
    }

    /// Ends the session: chromedriver closes the browser.
    async fn quit(&self) {
        let url = format!("{}/session/{}", self.base, self.session);
        let _ = self.http.delete(url).send().await;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The whole group: chromedriver and any browser a failed test left open.
        let _ = Command::new("kill")
            .args(["-s", "KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        // Once the browser is gone, its profile goes too (a few MiB a test, left in the
        // temporary directory before).
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// A small base64 decoder, so the test needs no crate for one screenshot.
mod base64_decode {
    pub fn decode(text: &str) -> Vec<u8> {
        let value = |c: u8| match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        };
        let mut out = Vec::with_capacity(text.len() * 3 / 4);
        let (mut buffer, mut bits) = (0u32, 0);
        for v in text.bytes().filter_map(value) {
            buffer = (buffer << 6) | u32::from(v);
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((buffer >> bits) as u8);
            }
        }
        out
    }
}

/// A Redis, two instances whose lessons' load goes to the Nginx in front of them, and
/// that Nginx.
fn behind_nginx() -> (RedisServer, Vec<Instance>, Nginx) {
    behind_nginx_with(&[])
}

/// [`behind_nginx`], the instances with `more` flags.
fn behind_nginx_with(more: &[&str]) -> (RedisServer, Vec<Instance>, Nginx) {
    let redis = RedisServer::start();
    // The instances must know Nginx's address (their lessons' load goes there) before
    // Nginx starts in front of them: when the port turns out taken, all start again.
    let (instances, nginx) = (0..ports::TRIES)
        .find_map(|_| {
            let port = ports::candidate();
            let bench_url = format!("http://127.0.0.1:{port}");
            let instances: Vec<Instance> = (0..2)
                .map(|_| {
                    let mut args = vec!["--bench-url", &bench_url];
                    args.extend_from_slice(more);
                    Instance::start(SECKILL, &redis.url(), &args)
                })
                .collect();
            let upstreams: Vec<_> = instances.iter().map(|i| i.addr).collect();
            Nginx::start_at("127.0.0.1", port, &upstreams).map(|nginx| (instances, nginx))
        })
        .expect("a free port for Nginx");
    (redis, instances, nginx)
}

/// The page through Nginx at 1280x720: no console errors; the naive lesson from its button;
/// the page's oversold and lost updates equal `/stats` (and show the loss); a screenshot.
/// Then at a phone's width, still no errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn page_shows_the_naive_lesson_as_stats_has_it() {
    let _turn = heavy_turn().await;
    let (_redis, _instances, nginx) = behind_nginx();
    let Some(browser) = Browser::start(1280, 720).await else {
        eprintln!(
            "SKIPPED page_shows_the_naive_lesson_as_stats_has_it: no Chromium/chromedriver (scripts/install-deps.sh browser installs them)"
        );
        return;
    };

    browser.open(&nginx.url("/")).await;
    browser
        .until(
            "return !!document.querySelector('#lesson-naive')",
            Duration::from_secs(10),
            "the lesson buttons",
        )
        .await;
    browser.click("#lesson-naive").await;
    browser
        .until(
            "return document.querySelector('#lesson-status').dataset.state === 'done'",
            Duration::from_secs(90),
            "the naive lesson to finish",
        )
        .await;

    let stats = Api::new(&nginx.url("")).stats("101").await;
    // The page reads /stats every 400 ms: give it a few reads to catch up.
    let shown = |field: &str| {
        format!(
            "return Number(document.querySelector('[data-field={field}] b').textContent) === {}",
            int(&stats, field)
        )
    };
    for field in ["oversold", "lost_updates", "sold"] {
        browser
            .until(
                &shown(field),
                Duration::from_secs(5),
                &format!("the page's {field} to equal /stats"),
            )
            .await;
    }
    assert!(
        int(&stats, "oversold") > 0 || int(&stats, "lost_updates") > 0,
        "the naive lesson shows the loss: {stats}"
    );
    let alarm = browser
        .run("return document.querySelector('[data-field=lost_updates]').classList.contains('alarm')")
        .await;
    assert_eq!(
        alarm,
        Value::Bool(int(&stats, "lost_updates") > 0),
        "lost updates stand out"
    );

    let root = root();
    browser.screenshot(&root.join("run/page.png")).await;
    browser.assert_no_errors().await;
    browser
        .phone_screenshot(&root.join("run/page-phone.png"))
        .await;
    browser.quit().await;
    drop(browser);
    drop(nginx);
}
