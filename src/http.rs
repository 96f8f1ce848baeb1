//! The HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process serves) and
//! `/readyz` (every watch has completed its initial list, and the replica knows whether it
//! leads).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;
use crate::{Error, Result};

/// What the probes report.
#[derive(Debug, Default)]
pub struct Health {
    /// Every watch has completed its initial list.
    pub synced: AtomicBool,
    /// The replica holds the leader Lease, or knows who does (or leader election is off).
    pub leadership_known: AtomicBool,
}

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Serves until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready_handler))
        .with_state(AppState { metrics, health });
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Serve { addr, source })?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| Error::Serve { addr, source })
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")],
        state.metrics.encode(),
    )
}

async fn ready_handler(State(state): State<AppState>) -> impl IntoResponse {
    if !state.health.synced.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet\n")
    } else if !state.health.leadership_known.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "leadership not known yet\n")
    } else {
        (StatusCode::OK, "ready\n")
    }
}
