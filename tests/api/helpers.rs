use std::io::Write;
use std::str::FromStr;

use idem::app::AppState;
use idem::config::Settings;
use idem::store::Store;
use reqwest::Response;
use serde_json::{json, Value};
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, PgPool};
use tokio::net::TcpListener;

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    /// A pool on the test's own database, for looking behind the API.
    pub db: PgPool,
    pub options: PgConnectOptions,
    /// The database this app was spawned on, when it created it: dropped with the app.
    _database: Option<TestDatabase>,
}

fn base_options() -> PgConnectOptions {
    let url = std::env::var("DATABASE_URL")
        .expect("DATABASE_URL is not set: run the tests with scripts/test, which starts Postgres");
    PgConnectOptions::from_str(&url).expect("DATABASE_URL is a Postgres URL")
}

/// A database of the test's own on the test server, dropped with the guard.
pub async fn fresh_database() -> (PgConnectOptions, TestDatabase) {
    let (options, _url, database) = fresh_database_url().await;
    (options, database)
}

/// A fresh database, with its URL (for starting idem as a process), dropped
/// with the guard.
pub async fn fresh_database_url() -> (PgConnectOptions, String, TestDatabase) {
    let base = base_options();
    let name = format!("idem_test_{}", uuid::Uuid::now_v7().simple());
    let url = std::env::var("DATABASE_URL").unwrap();
    let (without_query, query) = url
        .split_once('?')
        .map_or((url.as_str(), None), |(u, q)| (u, Some(q)));
    let server = without_query
        .rsplit_once('/')
        .map_or(without_query, |(server, _)| server);
    let url = match query {
        Some(q) => format!("{server}/{name}?{q}"),
        None => format!("{server}/{name}"),
    };
    let maintenance = base.clone().database("postgres");
    let mut admin = PgConnection::connect_with(&maintenance)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!("create database {name}"))
        .execute(&mut admin)
        .await
        .expect("create the test database");
    let database = TestDatabase {
        maintenance,
        name: name.clone(),
    };
    (base.database(&name), url, database)
}

/// Drops its test database when dropped, at the end of the test (also when
/// it fails), terminating the connections still open on it (`with (force)`:
/// the test's servers and idem processes may still hold some).
pub struct TestDatabase {
    maintenance: PgConnectOptions,
    name: String,
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let maintenance = self.maintenance.clone();
        let sql = format!("drop database if exists {} with (force)", self.name);
        // Drop is sync and runs on the test's runtime, which cannot block on
        // a future: a thread of its own runs the statement on a runtime of its own.
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime
                .block_on(async {
                    let mut admin = PgConnection::connect_with(&maintenance).await?;
                    sqlx::query(&sql).execute(&mut admin).await?;
                    admin.close().await
                })
                .map_err(|e| e.to_string())
        })
        .join()
        .unwrap_or_else(|_| Err("the thread dropping it panicked".to_string()));
        if let Err(e) = dropped {
            let message = format!("could not drop the test database {}: {e}", self.name);
            // A second panic while the test unwinds would abort the whole run.
            if std::thread::panicking() {
                eprintln!("{message}");
            } else {
                panic!("{message}");
            }
        }
    }
}

/// The bootstrap admin token every test server starts with.
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789abcdef-0123456789";

/// A client that sends `token` with every request.
pub fn client_with_token(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let bearer = format!("Bearer {token}").parse().expect("a header value");
    headers.insert(reqwest::header::AUTHORIZATION, bearer);
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Settings::default()).await
}

pub async fn spawn_app_with(settings: Settings) -> TestApp {
    let (options, database) = fresh_database().await;
    let mut app = spawn_app_on(options, settings).await;
    app._database = Some(database);
    app
}

/// Another server on the same database (as a second idem process would be).
/// Unless `settings` say otherwise, the server takes `ADMIN_TOKEN` and the
/// app's client sends it.
pub async fn spawn_app_on(options: PgConnectOptions, settings: Settings) -> TestApp {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    spawn_app_listening(listener, options, settings).await
}

/// A server on a fresh database, listening on `listener` (an address a
/// client was told before the server started).
pub async fn spawn_app_listening_fresh(listener: TcpListener) -> TestApp {
    let (options, database) = fresh_database().await;
    let mut app = spawn_app_listening(listener, options, Settings::default()).await;
    app._database = Some(database);
    app
}

async fn spawn_app_listening(
    listener: TcpListener,
    options: PgConnectOptions,
    mut settings: Settings,
) -> TestApp {
    if settings.admin_token.is_none() && !settings.insecure_no_auth {
        settings.admin_token = Some(ADMIN_TOKEN.parse().expect("a valid admin token"));
    }
    // TEST_LOG=1 shows the server's logs.
    if std::env::var_os("TEST_LOG").is_some() {
        static LOG: std::sync::OnceLock<idem::log_writer::LogGuard> = std::sync::OnceLock::new();
        LOG.get_or_init(|| {
            idem::app::init_tracing(idem::config::LogFormat::Text).expect("the log starts")
        });
    }
    let store = Store::connect_with(options.clone(), 10)
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store.sweep_stages().await.expect("sweep");
    let addr = listener.local_addr().unwrap();
    let state = AppState::new(store.clone(), settings);
    tokio::spawn(idem::app::serve(listener, state, std::future::pending()));
    let db = PgPool::connect_with(options.clone()).await.unwrap();
    TestApp {
        base: format!("http://{addr}"),
        client: client_with_token(ADMIN_TOKEN),
        db,
        options,
        _database: None,
    }
}

pub const ORDERS: &str = r#"{"columns": {"order_id": "bigint", "ds": "date", "customer_id": "bigint",
  "status": "text", "amount": "numeric", "updated_at": "timestamptz", "note": "text"},
  "partition_by": "ds", "primary_key": ["order_id"], "cursor": "updated_at"}"#;

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    pub async fn declare(&self, table: &str, declaration: &str) -> Response {
        self.client
            .put(self.url(&format!("/tables/{table}")))
            .header("content-type", "application/json")
            .body(declaration.to_string())
            .send()
            .await
            .unwrap()
    }

    pub async fn declare_orders(&self) {
        let r = self.declare("orders", ORDERS).await;
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    }

    pub async fn put(
        &self,
        path: &str,
        content_type: &str,
        body: impl Into<reqwest::Body>,
    ) -> Response {
        self.client
            .put(self.url(path))
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    pub async fn put_ndjson(&self, path: &str, rows: &[Value]) -> Response {
        self.put(path, "application/x-ndjson", ndjson(rows)).await
    }

    pub async fn get(&self, path: &str) -> Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    /// The partition's rows via the API, sorted by their JSON text.
    pub async fn rows(&self, table: &str, ds: &str) -> Vec<Value> {
        let r = self.get(&format!("/partitions/{table}/{ds}")).await;
        assert_eq!(r.status(), 200, "reading {table}/{ds}");
        let text = r.text().await.unwrap();
        let mut rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        rows.sort_by_key(|r| r.to_string());
        rows
    }

    /// Rows of a table straight from Postgres, behind the API.
    pub async fn count(&self, table: &str, ds: &str) -> i64 {
        sqlx::query_scalar(&format!(
            "select count(*) from idem_data.{table} where ds = '{ds}'"
        ))
        .fetch_one(&self.db)
        .await
        .unwrap()
    }
}

/// A request whose NDJSON body the test sends piece by piece: send on
/// `body`, drop it to end the body, then await `answer`.
pub struct Trickle {
    pub body: tokio::sync::mpsc::Sender<Result<String, std::io::Error>>,
    pub answer: tokio::task::JoinHandle<reqwest::Result<Response>>,
}

impl TestApp {
    pub fn trickle(&self, method: reqwest::Method, path: &str, key: Option<&str>) -> Trickle {
        let (body, rx) = tokio::sync::mpsc::channel(2);
        let mut request = self
            .client
            .request(method, self.url(path))
            .header("content-type", "application/x-ndjson")
            .body(reqwest::Body::wrap_stream(
                tokio_stream::wrappers::ReceiverStream::new(rx),
            ));
        if let Some(key) = key {
            request = request.header("idempotency-key", key);
        }
        Trickle {
            body,
            answer: tokio::spawn(request.send()),
        }
    }
}

pub fn ndjson(rows: &[Value]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

pub fn order(id: i64, status: &str, updated_at: &str) -> Value {
    json!({"order_id": id, "ds": "2026-10-12", "customer_id": 7, "status": status,
           "amount": "10.50", "updated_at": updated_at, "note": null})
}

pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// Every item of a list, from `first` on, following its `Link` headers;
/// each page holds at most `page_size` items.
pub async fn all_pages(app: &TestApp, first: &str, page_size: usize) -> Vec<Value> {
    let mut next = Some(first.to_string());
    let mut all = Vec::new();
    while let Some(path) = next.take() {
        let r = app.get(&path).await;
        assert_eq!(r.status(), 200, "{path}");
        next = r
            .headers()
            .get("link")
            .map(|l| l.to_str().unwrap().to_string())
            .map(|l| l[1..l.find('>').unwrap()].to_string());
        let page: Vec<Value> = serde_json::from_value(json_body(r).await).unwrap();
        assert!(page.len() <= page_size, "{path}");
        all.extend(page);
    }
    all
}

pub async fn json_body(r: Response) -> Value {
    let text = r.text().await.unwrap();
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}
