//! Headless Chromium for the console's tests, driven over WebDriver by
//! its own chromedriver (`IDEM_CHROMEDRIVER`, else `chromedriver` on
//! PATH; `scripts/test` installs Debian's `chromium` and
//! `chromium-driver` when they are missing). Each `Browser` is a driver
//! process and a fresh profile of its own, gone when it drops.
//!
//! Screenshots go to `target/console-screenshots/` (or
//! `IDEM_SCREENSHOTS_DIR`): the test run's artifacts, and the pictures of
//! the docs' console page (copied to `docs/console/`).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

pub struct Browser {
    pub client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
}

fn chromedriver() -> String {
    std::env::var("IDEM_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into())
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Browser {
    /// A driver and a browser window of a laptop's size.
    pub async fn start() -> Browser {
        let port = free_port();
        // A process group of its own, so that the browsers it starts end
        // with it.
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("chromedriver did not start ({e}); run the tests with scripts/test, which installs chromium and chromium-driver")
            });
        let profile = tempfile::tempdir().unwrap();
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1366,900",
                format!("--user-data-dir={}", profile.path().display()),
            ]}),
        );
        let url = format!("http://127.0.0.1:{port}");
        let mut last_error = None;
        // The driver takes a moment to listen.
        for _ in 0..100 {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => {
                    return Browser {
                        client,
                        driver,
                        _profile: profile,
                    }
                }
                Err(e) => last_error = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no WebDriver session: {last_error:?}");
    }

    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    pub async fn css(&self, selector: &str) -> fantoccini::elements::Element {
        self.client
            .find(Locator::Css(selector))
            .await
            .unwrap_or_else(|e| panic!("no {selector:?} on the page: {e}"))
    }

    pub async fn all(&self, selector: &str) -> Vec<fantoccini::elements::Element> {
        self.client.find_all(Locator::Css(selector)).await.unwrap()
    }

    pub async fn text(&self, selector: &str) -> String {
        self.css(selector).await.text().await.unwrap()
    }

    pub async fn title(&self) -> String {
        self.client.title().await.unwrap()
    }

    /// Signs in on the console's own form, as a person would.
    pub async fn sign_in(&self, base: &str, token: &str) {
        self.goto(&format!("{base}/console")).await;
        self.css("#token").await.send_keys(token).await.unwrap();
        self.click("form.signin button").await;
    }

    /// Clicks the button (or link) `selector` and waits for the next page:
    /// until the document it was on is gone (a click does not always wait
    /// for the navigation it starts).
    pub async fn click(&self, selector: &str) {
        let before = self.css("html").await;
        self.css(selector).await.click().await.unwrap();
        for _ in 0..200 {
            if before.tag_name().await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("clicking {selector:?} led to no new page");
    }

    /// Saves the window as `NAME.png` among the run's screenshots.
    pub async fn screenshot(&self, name: &str) {
        save_screenshot(name, &self.client.screenshot().await.unwrap());
    }

    /// Saves the element `selector` alone as `NAME.png` among the run's
    /// screenshots. It is scrolled to the window's top first: Chromium
    /// crops an element's screenshot to what the window shows of it.
    pub async fn screenshot_of(&self, selector: &str, name: &str) {
        let element = self.css(selector).await;
        let argument = serde_json::to_value(&element).unwrap();
        self.client
            .execute(
                "arguments[0].scrollIntoView({block: 'start'})",
                vec![argument],
            )
            .await
            .unwrap();
        save_screenshot(name, &element.screenshot().await.unwrap());
    }
}

fn save_screenshot(name: &str, png: &[u8]) {
    let dir = screenshots_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
}

pub fn screenshots_dir() -> PathBuf {
    match std::env::var_os("IDEM_SCREENSHOTS_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/console-screenshots"),
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // The driver's whole group: it and the browser it started.
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}
