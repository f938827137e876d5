//! A real headless Chromium (Debian's `chromium`), driven through `chromedriver` (WebDriver) by
//! `fantoccini`, for the dashboard's tests: a page opened at a URL, scripts run in it, waits
//! for a condition of its DOM (never a fixed sleep), and screenshots saved under
//! `target/dashboard-screenshots/`.
//!
//! [`Browser::start`] asks the gate ([`require`], tool `CHROMIUM`) for both programs. Dropped,
//! the session is closed (Chromium exits) and chromedriver is killed.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};

use super::process::{Proc, wait_for};
use super::require::{require, runs};

/// How long the page may take to show what a test waits for, on a loaded machine.
pub const SHOWN: Duration = Duration::from_secs(30);

/// The look a browser is started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// A desktop window (1280×800), in the light theme.
    Desktop,
    /// A phone's width (390×844), in the dark theme (`prefers-color-scheme: dark`).
    DarkPhone,
}

/// A headless Chromium, one WebDriver session.
pub struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<Client>,
    _driver: Proc,
    _dir: tempfile::TempDir,
}

impl Browser {
    /// Chromium with `look`, or `None` (the test skipped with a note) where `chromium` or
    /// `chromedriver` cannot run, unless `DISTLOCK_TEST_REQUIRE_CHROMIUM` is set.
    pub fn start(what: &str, look: Look) -> Option<Browser> {
        let found =
            runs("chromium", &["--version"]).and_then(|()| runs("chromedriver", &["--version"]));
        require("CHROMIUM", what, found)?;
        let dir = tempfile::tempdir().expect("a folder for chromedriver");
        let port = free_port();
        let mut cmd = std::process::Command::new("chromedriver");
        cmd.arg(format!("--port={port}"));
        let driver = Proc::spawn(&mut cmd, dir.path(), "chromedriver");
        let up = wait_for(SHOWN, || {
            TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok()
        });
        assert!(up, "chromedriver did not listen on port {port}");
        let (width, height, dark) = match look {
            Look::Desktop => (1280, 800, false),
            Look::DarkPhone => (390, 844, true),
        };
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", dir.path().join("profile").display()),
        ];
        if dark {
            args.push("--force-dark-mode".to_owned());
            args.push("--blink-settings=preferredColorScheme=0".to_owned());
        }
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({ "binary": "/usr/bin/chromium", "args": args }),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the WebDriver client");
        let client = runtime
            .block_on(
                ClientBuilder::new(HttpConnector::new())
                    .capabilities(capabilities)
                    .connect(&format!("http://127.0.0.1:{port}")),
            )
            .unwrap_or_else(|e| panic!("a Chromium session through chromedriver: {e}"));
        Some(Browser {
            runtime,
            client: Some(client),
            _driver: driver,
            _dir: dir,
        })
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("an open session")
    }

    /// Opens `url` (a new document).
    pub fn goto(&self, url: &str) {
        let client = self.client();
        self.runtime
            .block_on(client.goto(url))
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    /// The value of `script` (a function body: `return …;`) run in the page.
    pub fn eval(&self, script: &str) -> Value {
        let client = self.client();
        self.runtime
            .block_on(client.execute(script, Vec::new()))
            .unwrap_or_else(|e| panic!("run {script:?} in the page: {e}"))
    }

    /// Waits until `script` returns `true` in the page, at most [`SHOWN`]; fails the test
    /// naming `what` and showing the page's text if it does not.
    pub fn wait_until(&self, what: &str, script: &str) {
        let shown = wait_for(SHOWN, || self.eval(script) == Value::Bool(true));
        if !shown {
            let text = self.eval("return document.body.innerText;");
            panic!("the page did not show {what} within {SHOWN:?}; it shows:\n{text}");
        }
    }

    /// Types `text` into the element `css` finds, as a user would.
    pub fn type_into(&self, css: &str, text: &str) {
        let client = self.client();
        self.runtime.block_on(async {
            let field = client.find(Locator::Css(css)).await.expect("the field");
            field.send_keys(text).await.expect("typing into it");
        });
    }

    /// Clicks the element `css` finds.
    pub fn click(&self, css: &str) {
        let client = self.client();
        self.runtime.block_on(async {
            let button = client.find(Locator::Css(css)).await.expect("the element");
            button.click().await.expect("a click");
        });
    }

    /// Saves what the window shows as `target/dashboard-screenshots/NAME.png`.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let client = self.client();
        let png = self
            .runtime
            .block_on(client.screenshot())
            .unwrap_or_else(|e| panic!("a screenshot: {e}"));
        let dir = screenshots();
        std::fs::create_dir_all(&dir).expect("the screenshots' folder");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
    }
}

/// `target/dashboard-screenshots/`.
pub fn screenshots() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(&tmp).join("dashboard-screenshots")
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("a free port");
    listener.local_addr().expect("its address").port()
}
