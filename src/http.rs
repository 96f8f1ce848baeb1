//! The HTTP endpoints: `/metrics` (Prometheus text), `/healthz` (the process serves) and
//! `/readyz` (every watch has completed its initial list, and the replica knows whether it
//! leads).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use tokio::sync::watch;

use crate::index::watches::SharedState;
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::{Error, Result};

/// What the probes read: the cluster state (are the watches synced?) and the leadership
/// (does this replica hold the Lease, or know who does?), both read when asked.
pub struct Health {
    pub state: SharedState,
    pub leadership: watch::Receiver<Leadership>,
}

impl Health {
    /// `Err` says why the replica is not ready.
    pub fn ready(&self) -> std::result::Result<(), &'static str> {
        if !self.state.read().is_ok_and(|s| s.synced()) {
            Err("caches not synced yet\n")
        } else if !self.leadership.borrow().is_known() {
            Err("leadership not known yet\n")
        } else {
            Ok(())
        }
    }
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
    match state.health.ready() {
        Ok(()) => (StatusCode::OK, "ready\n"),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
    }
}
