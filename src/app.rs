//! The application: shared state, `app(state) -> Router`, and serving with
//! graceful shutdown.

use std::future::Future;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request};
use axum::{middleware, Router};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpListener;
use tower::ServiceExt;
use tower_http::catch_panic::CatchPanicLayer;

use crate::config::{LogFormat, ServeArgs, TrustedProxies};
use crate::http::auth::OwnChecks;
use crate::http::client_addr::ClientAddr;
use crate::http::client_requests::{Held, PerClient};
pub use crate::http::state::AppState;
use crate::http::token_cache::follow_revocations;
use crate::http::{client_addr, edge, observe};
use crate::log_writer::{buffered_log, LogGuard};
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::store::contents::FOLD_AFTER;
use crate::store::load_events::LOADS_CHANNEL;
use crate::store::Store;

/// The routes and, from the inside out, what every request goes through:
/// a panic answered as a problem, the `Host` allow-list, a JSON answer's
/// final newline, CORS, and the request's id, log line and metrics. (Each
/// `layer` wraps every route, so all of them see the matched route.)
pub fn app(state: AppState) -> Router {
    // The console's pages check their own session, not a bearer token.
    let own_checks = OwnChecks(if state.settings.console {
        vec![crate::http::console::ROOT]
    } else {
        Vec::new()
    });
    let routes = crate::http::router(state.settings.console)
        // Every route, the fallback included: no request reaches a handler
        // (or learns which paths exist) without a token, but the open ones.
        .layer(middleware::from_fn_with_state(
            (state.clone(), own_checks),
            crate::http::auth::authenticate,
        ))
        .with_state(state.clone())
        // Bodies are streamed and limited by idem itself (IDEM_MAX_BODY_BYTES).
        .layer(DefaultBodyLimit::disable())
        .layer(CatchPanicLayer::custom(edge::panicked))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            edge::check_host,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            client_addr::limit_forwarded,
        ))
        .layer(middleware::map_response(edge::end_json_with_newline));
    let routes = match edge::cors(&state.settings.cors_origins) {
        Some(cors) => routes.layer(cors),
        None => routes,
    };
    routes.layer(middleware::from_fn_with_state(state, observe::observe))
}

/// Serves `state` on `listener` until `shutdown` completes, then lets
/// requests in flight finish. Each connection gets `header_timeout_secs` to
/// send a request's headers (hyper's own timer), so a client that opens
/// connections and sends nothing holds nothing for long; and one client
/// (one address) holds at most `max_connections_per_client` at once.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let background = start_background(&state);
    let header_timeout = Duration::from_secs(state.settings.header_timeout_secs);
    let clients = PerClient::new(state.settings.max_connections_per_client);
    let proxies = Arc::new(state.settings.trusted_proxies.clone());
    let router = app(state);
    let connections = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    while let Some((stream, peer)) = next_connection(&listener, &mut shutdown).await {
        // A trusted proxy's connections carry many clients' requests: each
        // client's share is counted per request (`client_addr`) instead.
        let held = if proxies.trusts(peer.ip()) {
            None
        } else {
            let Some(held) = clients.admit(peer.ip()) else {
                tokio::spawn(refuse_connection(stream));
                continue;
            };
            Some(held)
        };
        let connection = Connection {
            peer,
            proxies: proxies.clone(),
            _held: held,
        };
        spawn_connection(&router, &connections, stream, connection, header_timeout);
    }
    drop(listener);
    connections.shutdown().await;
    for task in background {
        task.abort();
    }
    Ok(())
}

/// The next accepted connection, or `None` once `shutdown` has come.
async fn next_connection(
    listener: &TcpListener,
    shutdown: &mut Pin<&mut impl Future<Output = ()>>,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => return Some(accepted),
                Err(e) => {
                    // Out of file descriptors, say: wait instead of spinning.
                    tracing::warn!(error = %e, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            () = &mut *shutdown => return None,
        }
    }
}

/// An admitted connection: its peer, the proxies whose word on the client
/// counts, and its place among its client's connections (none for a
/// trusted proxy's), held until it ends.
struct Connection {
    peer: SocketAddr,
    proxies: Arc<TrustedProxies>,
    _held: Option<Held>,
}

/// Serves one admitted connection on its own task, watched by
/// `connections` for the graceful shutdown.
fn spawn_connection(
    router: &Router,
    connections: &GracefulShutdown,
    stream: tokio::net::TcpStream,
    connection: Connection,
    header_timeout: Duration,
) {
    let _ = stream.set_nodelay(true);
    // The peer's address and the client's go with each request: `/metrics`
    // may be open to local clients, and per-client limits and the access
    // log name the client.
    let (peer, proxies) = (connection.peer, connection.proxies.clone());
    let service = TowerToHyperService::new(router.clone().map_request(
        move |request: Request<Incoming>| {
            let mut request = request.map(Body::new);
            let client = ClientAddr::of(peer.ip(), request.headers(), &proxies);
            request.extensions_mut().insert(ConnectInfo(peer));
            request.extensions_mut().insert(client);
            request
        },
    ));
    let mut builder = ConnectionBuilder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let stream = FirstByte::new(stream, header_timeout);
    let served = builder
        .serve_connection(TokioIo::new(stream), service)
        .into_owned();
    let served = connections.watch(served);
    tokio::spawn(async move {
        if let Err(e) = served.await {
            tracing::debug!(error = %e, "connection ended with an error");
        }
        drop(connection);
    });
}

/// A connection whose first byte must arrive within a timeout. hyper's
/// header timer starts once it reads a request, and the HTTP/1-or-2
/// sniffing before that has none: without this, a connection that never
/// sends a byte would stay open for good.
struct FirstByte {
    stream: tokio::net::TcpStream,
    /// Until the first byte has arrived.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl FirstByte {
    fn new(stream: tokio::net::TcpStream, timeout: Duration) -> Self {
        FirstByte {
            stream,
            timer: Some(Box::pin(tokio::time::sleep(timeout))),
        }
    }
}

impl AsyncRead for FirstByte {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        if read.is_ready() {
            this.timer = None;
        } else if let Some(timer) = this.timer.as_mut() {
            if timer.as_mut().poll(cx).is_ready() {
                let silent = std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no request within the header timeout",
                );
                return Poll::Ready(Err(silent));
            }
        }
        read
    }
}

impl AsyncWrite for FirstByte {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Every idem process's own tasks: the janitor, the folder of partition
/// deltas, the expire rounds and, with tokens, the listener for their
/// revocations.
fn start_background(state: &AppState) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = vec![
        tokio::spawn(maintain(state.store.clone(), state.metrics.clone())),
        tokio::spawn(fold_deltas(state.store.clone())),
        tokio::spawn(expire_partitions(state.pipeline())),
    ];
    let announce = Arc::new(tokio::sync::Notify::new());
    tasks.push(tokio::spawn(listen_loads(state.clone(), announce.clone())));
    tasks.push(tokio::spawn(announce_loads(state.clone(), announce)));
    if !state.settings.insecure_no_auth {
        let follow = follow_revocations(state.store.clone(), state.tokens.clone());
        tasks.push(tokio::spawn(follow));
    }
    tasks
}

/// The problem a connection past its client's limit is answered: written
/// out once, as `wire::problem::Problem` serializes it (see the test).
const REFUSAL_BODY: &str = concat!(
    r#"{"type":"https://idem.dev/problems/too-many-connections","#,
    r#""title":"Too many connections","status":429,"#,
    r#""detail":"this client has too many connections open; reuse one or retry later","#,
    r#""code":"too_many_connections"}"#,
    "\n"
);

/// The whole answer to a connection past its client's limit: a 429 problem,
/// then the connection closes.
async fn refuse_connection(mut stream: tokio::net::TcpStream) {
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/problem+json\r\n\
         retry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{REFUSAL_BODY}",
        REFUSAL_BODY.len()
    );
    let write = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), write).await;
}

/// How often each process looks for expired idempotency keys and for
/// stages nobody owns: a crashed process's stage goes within this long of
/// its database session ending.
const MAINTAIN_EVERY: Duration = Duration::from_secs(30);
/// How often busy partitions' deltas are folded (see `fold_deltas`).
const FOLD_EVERY: Duration = Duration::from_secs(1);

/// Folds the deltas of busy partitions often, so that a read adds few, and
/// of every partition at times. Any process may fold any partition; folders
/// skip a partition another is folding.
async fn fold_deltas(store: Store) {
    let mut tick = tokio::time::interval(FOLD_EVERY);
    for round in 0u64.. {
        tick.tick().await;
        let min_deltas = if round % 30 == 0 { 1 } else { FOLD_AFTER };
        if let Err(e) = store.fold_partitions(min_deltas).await {
            tracing::warn!(error = %e, "could not fold partition deltas");
        }
    }
}

/// Drops the partitions past their table's retention, every
/// `retention_every`. Every process runs rounds; one runs at a time, the
/// others skip theirs.
async fn expire_partitions(pipeline: Pipeline) {
    let mut tick = tokio::time::interval(pipeline.settings.retention_every());
    loop {
        tick.tick().await;
        if let Err(e) = pipeline.expire_partitions().await {
            tracing::warn!(error = %e, "could not expire partitions past retention");
        }
    }
}

/// The least time between two announcer rounds of one process.
const ANNOUNCE_PAUSE: Duration = Duration::from_millis(50);

/// Gives committed loads their positions (`store::load_events`) when told
/// of one (`listen_loads`), and every second for what a lost notification
/// left; one process at a time does, the others find nothing to do.
async fn announce_loads(state: AppState, told: Arc<tokio::sync::Notify>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = told.notified() => {}
            _ = tick.tick() => {}
        }
        match state.store.announce_loads().await {
            Ok(0) => {}
            Ok(last) => state
                .load_events
                .heard(i64::try_from(last).unwrap_or(i64::MAX)),
            Err(e) => tracing::debug!(error = %e, "could not announce loads"),
        }
        // What commits meanwhile waits for the next round: a round for
        // each notification would cost more than the loads it announces.
        tokio::time::sleep(ANNOUNCE_PAUSE).await;
    }
}

/// Listens for committed loads (to announce them) and for positions handed
/// out by any process's announcer (to wake this process's event streams);
/// listens again after a lost connection.
async fn listen_loads(state: AppState, announce: Arc<tokio::sync::Notify>) {
    loop {
        match state.store.listen_loads().await {
            Ok(mut listener) => loop {
                match listener.recv().await {
                    Ok(told) if told.channel() == LOADS_CHANNEL => announce.notify_one(),
                    Ok(told) => {
                        if let Ok(position) = told.payload().parse() {
                            state.load_events.heard(position);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "lost the loads' notifications");
                        break;
                    }
                }
            },
            Err(e) => tracing::debug!(error = %e, "could not listen for loads"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Removes expired idempotency keys and stages left by crashed processes,
/// now and then. Every idem process runs one; they share the work through
/// `skip locked` and the stages' advisory locks.
async fn maintain(store: Store, metrics: Arc<Metrics>) {
    let mut tick = tokio::time::interval(MAINTAIN_EVERY);
    loop {
        tick.tick().await;
        match store.reap_keys().await {
            Ok(0) => {}
            Ok(n) => {
                metrics.keys_reaped(n);
                tracing::info!(reaped = n, "removed expired idempotency keys");
            }
            Err(e) => tracing::warn!(error = %e, "could not reap idempotency keys"),
        }
        match store.sweep_stages().await {
            Ok(0) => {}
            Ok(n) => {
                metrics.stages_swept(n);
                tracing::info!(swept = n, "removed stages left behind");
            }
            Err(e) => tracing::warn!(error = %e, "could not sweep stages"),
        }
        if let Err(e) = store.expire_loads().await {
            tracing::warn!(error = %e, "could not expire staged loads");
        }
    }
}

/// Logs to stderr (stdout carries only the `idem serving on` line, and
/// the console's address), in
/// colour only on a terminal. A JSON line holds the event's fields and
/// those of its span (a request's id, route, table…) as `span`.
///
/// Lines are written by a thread of their own, every few milliseconds, all
/// the lines waiting at once (see `log_writer`); none is dropped. Keep the
/// guard: dropping it writes what waits.
pub fn init_tracing(format: LogFormat) -> anyhow::Result<LogGuard> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "idem=info".into());
    let (writer, guard) = buffered_log(std::io::stderr())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
        LogFormat::Text => builder.try_init(),
    };
    Ok(guard)
}

/// `idem serve`: connect, migrate, sweep stages left by crashes, listen.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let _log = init_tracing(args.log_format)?;
    announce_access(&args.settings)?;
    let database = &args.database;
    let store = Store::connect(
        database.database_url.expose(),
        database.pool_size,
        database.statement_cache,
    )
    .await?
    .with_distribution_default(args.distribution_default);
    store.refuse_citus_worker().await?;
    store.migrate().await?;
    let state = AppState::new(store, args.settings);
    let swept = state.store.sweep_stages().await?;
    if swept > 0 {
        state.metrics.stages_swept(swept);
        tracing::info!(swept, "removed stages left behind");
    }
    state.store.expire_loads().await?;
    let listener = TcpListener::bind(args.listen).await?;
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "idem listening");
    // One write, so that a script that waits for the first line finds the
    // second with it.
    let console = match state.settings.console {
        true => format!(
            "\nidem console on http://{addr}{} (sign in with a token)",
            crate::http::console::ROOT
        ),
        false => String::new(),
    };
    println!("idem serving on http://{addr}{console}");
    let grace = Duration::from_secs(args.shutdown_grace_secs);
    let (drained_tx, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, state, async move {
        shutdown_signal().await;
        tracing::info!("shutting down: finishing requests in flight");
        let _ = drained_tx.send(());
    }));
    tokio::select! {
        result = server => result??,
        _ = async { let _ = drained_rx.await; tokio::time::sleep(grace).await } => {
            tracing::warn!("requests still running after the grace period; exiting");
        }
    }
    Ok(())
}

/// Says at start how callers are let in; both modes at once is a mistake.
fn announce_access(settings: &crate::config::Settings) -> anyhow::Result<()> {
    match (settings.insecure_no_auth, settings.admin_token.is_some()) {
        (true, true) => anyhow::bail!("IDEM_ADMIN_TOKEN and --insecure-no-auth exclude each other"),
        (true, false) => tracing::warn!(
            "--insecure-no-auth: every caller may read, write and delete every table; \
             never expose this server beyond your own machine"
        ),
        (false, false) => tracing::info!(
            "no IDEM_ADMIN_TOKEN: only tokens made earlier (idem.tokens) are accepted"
        ),
        (false, true) => {}
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = terminate => {} }
}

/// `idem migrate`.
pub async fn migrate(args: crate::config::DatabaseArgs) -> anyhow::Result<()> {
    let _log = init_tracing(LogFormat::Text)?;
    let store = Store::connect(args.database_url.expose(), 2, args.statement_cache).await?;
    store.refuse_citus_worker().await?;
    store.migrate().await?;
    println!("migrations applied");
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::problem::ProblemCode;
    use crate::wire::problem::Problem;

    #[test]
    fn a_refused_connection_is_answered_a_problem_like_any_other() {
        let problem = Problem::new(
            ProblemCode::TooManyConnections,
            "Too many connections",
            429,
            "this client has too many connections open; reuse one or retry later".into(),
        );
        let text = serde_json::to_string(&problem).unwrap();
        assert_eq!(super::REFUSAL_BODY, format!("{text}\n"));
    }
}
