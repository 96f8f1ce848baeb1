//! `kube-remediator run`: the operator. Watches nodes, kubelet Leases, pods, namespaces, claims
//! and RemediationPolicies, and carries out (Enforce) or records (DryRun) what each policy
//! decides.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::ConnectionArgs;
use crate::controllers::observe::NODE_LEASE_NAMESPACE;
use crate::controllers::policy::{self, Context};
use crate::controllers::state::ClusterState;
use crate::controllers::watch::spawn_watches;
use crate::crd::RemediationPolicy;
use crate::http::{self, Health};
use crate::metrics::Metrics;
use crate::writer::Writer;
use crate::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "KUBE_REMEDIATOR_METRICS_ADDR")]
    metrics_addr: SocketAddr,

    /// Serve only the RemediationPolicies matching this label selector (e.g. `team=storage`),
    /// to shard policies between operators or canary a new version.
    #[arg(long, env = "KUBE_REMEDIATOR_POLICY_SELECTOR")]
    policy_selector: Option<String>,

    /// Name of this replica in Events (defaults to $POD_NAME, then the host name).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
}

pub async fn run(conn: &ConnectionArgs, args: Args) -> Result<ExitCode> {
    let client = conn.client().await?;
    preflight(&client).await?;

    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let state = Arc::new(RwLock::new(ClusterState::new()));
    let (trigger_tx, trigger_rx) = tokio::sync::watch::channel(0u64);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let http_task = {
        let mut stop = stop_rx.clone();
        tokio::spawn(http::serve(args.metrics_addr, metrics.clone(), health.clone(), async move {
            let _ = stop.wait_for(|s| *s).await;
        }))
    };
    let watches = spawn_watches(client.clone(), state.clone(), trigger_tx, metrics.clone());

    // Readiness follows the caches.
    let readiness = {
        let (state, health) = (state.clone(), health.clone());
        tokio::spawn(async move {
            loop {
                let synced = state.read().map(|s| s.synced()).unwrap_or(false);
                health.synced.store(synced, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    let instance = args.instance.or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string())
    });
    let writer = Writer::new(client.clone(), metrics.clone(), instance);
    let ctx = Arc::new(Context::new(state, writer, metrics));
    info!(selector = args.policy_selector.as_deref().unwrap_or(""), "kube-remediator started");
    let mut stop = stop_rx.clone();
    let controller = policy::run(client, ctx, trigger_rx, args.policy_selector, async move {
        let _ = stop.wait_for(|s| *s).await;
    });

    tokio::select! {
        _ = controller => warn!("the policy controller stopped"),
        result = http_task => match result {
            Ok(Err(e)) => return Err(e),
            _ => warn!("the HTTP server stopped"),
        },
        _ = shutdown_signal() => info!("shutting down"),
    }
    let _ = stop_tx.send(true);
    readiness.abort();
    for w in watches {
        w.abort();
    }
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Checks at start-up that the CRD is installed and that every list the operator needs is
/// allowed, so a missing CRD or RBAC rule is one clear error instead of endless retries.
pub async fn preflight(client: &Client) -> Result<()> {
    let lp = ListParams::default().limit(1);
    match Api::<RemediationPolicy>::all(client.clone()).list(&lp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::CrdMissing),
        Err(e) => return Err(classify("list", "remediationpolicies", e)),
    }
    check_list(Api::<Node>::all(client.clone()), "nodes").await?;
    check_list(Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE), "leases").await?;
    check_list(Api::<Pod>::all(client.clone()), "pods").await?;
    check_list(Api::<Namespace>::all(client.clone()), "namespaces").await?;
    check_list(Api::<PersistentVolumeClaim>::all(client.clone()), "persistentvolumeclaims").await?;
    Ok(())
}

async fn check_list<K>(api: Api<K>, resource: &'static str) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.list_metadata(&ListParams::default().limit(1))
        .await
        .map(|_| ())
        .map_err(|e| classify("list", resource, e))
}

fn classify(verb: &'static str, resource: &'static str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => {
            Error::Forbidden { verb, resource, message: s.message }
        }
        source => Error::List { kind: resource, source },
    }
}
