//! What only the API suite needs: `TestApp`, the server in this process
//! on a fresh database, with a client and a pool for looking behind the
//! API; and the list pages. The fixtures, the databases and the idem
//! processes are the shared ones, in `tests/support/`.

use idem::app::AppState;
use idem::config::Settings;
use idem::schema::DistributionDefault;
use idem::store::Store;
use reqwest::Response;
use serde_json::Value;
use sqlx::postgres::PgConnectOptions;
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::support::*;

/// A daily table of events, keyed by `id`, whose bad rows are quarantined.
pub const QUARANTINED_EVENTS: &str = r#"{"columns": {"id": "bigint", "ds": "date", "qty": "integer"},
  "primary_key": ["id"], "bad_rows": "quarantine"}"#;

pub struct TestApp {
    pub base: String,
    pub client: reqwest::Client,
    /// A pool on the test's own database, for looking behind the API.
    pub db: PgPool,
    pub options: PgConnectOptions,
    /// The server's state, for what no request starts (an expire round).
    pub state: AppState,
    /// The database this app was spawned on, when it created it: dropped with the app.
    _database: Option<TestDatabase>,
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
        .expect("connect")
        .with_distribution_default(distribution_default());
    store.migrate().await.expect("migrate");
    store.sweep_stages().await.expect("sweep");
    let addr = listener.local_addr().unwrap();
    let state = AppState::new(store.clone(), settings);
    tokio::spawn(idem::app::serve(
        listener,
        state.clone(),
        std::future::pending(),
    ));
    let db = PgPool::connect_with(options.clone()).await.unwrap();
    TestApp {
        base: format!("http://{addr}"),
        client: client_with_token(ADMIN_TOKEN),
        db,
        options,
        state,
        _database: None,
    }
}

/// The suite's runs on a Citus cluster distribute every table they make
/// (`IDEM_TEST_DISTRIBUTION_DEFAULT=key`, set by scripts/test there).
pub fn distribution_default() -> DistributionDefault {
    std::env::var("IDEM_TEST_DISTRIBUTION_DEFAULT")
        .ok()
        .and_then(|text| DistributionDefault::parse(&text))
        .unwrap_or_default()
}

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

    /// `rows` as NDJSON to `path` by `method`, under the Idempotency-Key `key`.
    pub async fn send_keyed(
        &self,
        method: reqwest::Method,
        path: &str,
        key: &str,
        rows: &[Value],
    ) -> Response {
        self.client
            .request(method, self.url(path))
            .header("content-type", "application/x-ndjson")
            .header("idempotency-key", key)
            .body(ndjson(rows))
            .send()
            .await
            .unwrap()
    }

    /// Runs an expire round now, as the server's own task would; what it
    /// dropped.
    pub async fn expire_now(&self) -> Vec<idem::pipeline::Expired> {
        let round = self.state.pipeline().expire_partitions().await;
        round.expect("the round ran").expect("no other round runs")
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

    /// The partition at `path` read as NDJSON and PUT back as it was read:
    /// the same `ETag`, `"changed": false` (an export is taken back
    /// unchanged). Returns what was read.
    pub async fn put_back_unchanged(&self, path: &str) -> String {
        let stored = self.get(path).await;
        let etag = stored.headers()["etag"].to_str().unwrap().to_string();
        let text = stored.text().await.unwrap();
        let put = self.put(path, "application/x-ndjson", text.clone()).await;
        assert_eq!(put.headers()["etag"].to_str().unwrap(), etag, "{path}");
        assert_eq!(json_body(put).await["changed"], false, "{path}");
        text
    }

    /// The declared columns of `table`, in order: name and type.
    pub async fn column_types(&self, table: &str) -> Vec<(String, String)> {
        let info = json_body(self.get(&format!("/tables/{table}")).await).await;
        info["columns"]
            .as_array()
            .unwrap_or_else(|| panic!("{info}"))
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().to_string(),
                    c["type"].as_str().unwrap().to_string(),
                )
            })
            .collect()
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
    /// A connection in the middle of a write to `table`: its transaction
    /// holds the table's lock shared, as a writer's does, until the caller
    /// commits.
    pub async fn writer_holding(&self, table: &str) -> sqlx::pool::PoolConnection<sqlx::Postgres> {
        use idem::names::TableName;
        use idem::store::locks::lock_table_shared;

        let mut writer = self.db.acquire().await.unwrap();
        sqlx::query("begin").execute(&mut *writer).await.unwrap();
        lock_table_shared(&mut writer, &TableName::parse(table).unwrap())
            .await
            .unwrap();
        writer
    }

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

/// Every page of a list, from `first` on, following its `Link: <…>;
/// rel="next"` headers to the end.
pub async fn list_pages(app: &TestApp, first: &str) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut next = Some(first.to_string());
    while let Some(path) = next.take() {
        let r = app.get(&path).await;
        assert_eq!(r.status(), 200, "{path}");
        next = r.headers().get("link").map(|link| {
            let link = link.to_str().unwrap();
            assert!(link.ends_with("; rel=\"next\""), "{link}");
            link[1..link.find('>').unwrap()].to_string()
        });
        pages.push(serde_json::from_value(json_body(r).await).unwrap());
        assert!(pages.len() < 1000, "paging ends");
    }
    pages
}

/// Every item of a list, from `first` on; each page holds at most
/// `page_size` items.
pub async fn all_pages(app: &TestApp, first: &str, page_size: usize) -> Vec<Value> {
    let pages = list_pages(app, first).await;
    for (n, page) in pages.iter().enumerate() {
        assert!(page.len() <= page_size, "page {n} of {first}");
    }
    pages.into_iter().flatten().collect()
}

/// Declares the orders table through the idem (a process of its own, or a
/// test app) at `base`.
pub async fn declare_orders(client: &reqwest::Client, base: &str) {
    let declared = client
        .put(format!("{base}/tables/orders"))
        .header("content-type", "application/json")
        .body(ORDERS)
        .send()
        .await
        .unwrap();
    assert!(declared.status().is_success());
}
