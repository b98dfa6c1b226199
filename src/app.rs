//! The application: shared state, `app(state) -> Router`, and serving with
//! graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::Router;
use tokio::net::TcpListener;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::config::{LogFormat, ServeArgs};
pub use crate::http::AppState;
use crate::store::Store;

pub fn app(state: AppState) -> Router {
    crate::http::router()
        .with_state(state)
        // Bodies are streamed and limited by idem itself (IDEM_MAX_BODY_BYTES).
        .layer(DefaultBodyLimit::disable())
        .layer(TraceLayer::new_for_http())
        .layer(CatchPanicLayer::new())
}

/// Serves `state` on `listener` until `shutdown` completes, then lets
/// requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let reaper = tokio::spawn(maintain(state.store.clone()));
    let served = axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await;
    reaper.abort();
    served
}

/// How often each process looks for expired idempotency keys and for
/// stages nobody owns: a crashed process's stage goes within this long of
/// its database session ending.
const MAINTAIN_EVERY: Duration = Duration::from_secs(30);

/// Removes expired idempotency keys and stages left by crashed processes,
/// now and then. Every idem process runs one; they share the work through
/// `skip locked` and the stages' advisory locks.
async fn maintain(store: Store) {
    let mut tick = tokio::time::interval(MAINTAIN_EVERY);
    loop {
        tick.tick().await;
        match store.reap_keys().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(reaped = n, "removed expired idempotency keys"),
            Err(e) => tracing::warn!(error = %e, "could not reap idempotency keys"),
        }
        match store.sweep_stages().await {
            Ok(0) => {}
            Ok(n) => tracing::info!(swept = n, "removed stages left behind"),
            Err(e) => tracing::warn!(error = %e, "could not sweep stages"),
        }
    }
}

pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "idem=info,tower_http=info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// `idem serve`: connect, migrate, sweep stages left by crashes, listen.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    init_tracing(args.log_format);
    let store =
        Store::connect(args.database.database_url.expose(), args.database.pool_size).await?;
    store.migrate().await?;
    let swept = store.sweep_stages().await?;
    if swept > 0 {
        tracing::info!(swept, "removed stages left behind");
    }
    let listener = TcpListener::bind(args.listen).await?;
    let addr: SocketAddr = listener.local_addr()?;
    tracing::info!(%addr, "idem listening");
    println!("idem serving on http://{addr}");
    let state = AppState::new(store, args.settings);
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
    init_tracing(LogFormat::Text);
    let store = Store::connect(args.database_url.expose(), 2).await?;
    store.migrate().await?;
    println!("migrations applied");
    Ok(())
}
