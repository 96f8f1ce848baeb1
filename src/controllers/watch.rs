//! One watch per kind, feeding the compact [`ClusterState`]. A change that can alter a decision
//! bumps the trigger, which makes the policy controller re-plan every policy.

use std::fmt::Debug;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};

use super::state::{Change, ClusterState, WatchedKind};
use crate::adapters::{NODE_LEASE_NAMESPACE, deployment_view, replica_set_view, stateful_set_view};
use crate::metrics::Metrics;

pub type SharedState = Arc<RwLock<ClusterState>>;

/// Starts the watches, one per kind. Each runs until the process ends, retrying with backoff.
pub fn spawn_watches(
    client: Client,
    state: SharedState,
    trigger: watch::Sender<u64>,
    metrics: Arc<Metrics>,
) -> Vec<JoinHandle<()>> {
    let ctx = WatchCtx { state, trigger, metrics };
    vec![
        spawn(
            Api::<Node>::all(client.clone()),
            WatchedKind::Node,
            ctx.clone(),
            |s, n: &Node, now| s.apply_node(n, now),
            |s, n: &Node| s.delete_node(&n.name_any()),
        ),
        spawn(
            Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE),
            WatchedKind::Lease,
            ctx.clone(),
            |s, l: &Lease, now| {
                let renewed = l.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
                s.apply_lease(&l.name_any(), renewed, now)
            },
            |s, l: &Lease| s.delete_lease(&l.name_any()),
        ),
        spawn(
            Api::<Pod>::all(client.clone()),
            WatchedKind::Pod,
            ctx.clone(),
            |s, p: &Pod, _| s.apply_pod(p),
            |s, p: &Pod| s.delete_pod(p.metadata.uid.as_deref().unwrap_or_default()),
        ),
        spawn(
            Api::<Namespace>::all(client.clone()),
            WatchedKind::Namespace,
            ctx.clone(),
            |s, n: &Namespace, _| s.apply_namespace(n),
            |s, n: &Namespace| s.delete_namespace(&n.name_any()),
        ),
        spawn(
            Api::<Deployment>::all(client.clone()),
            WatchedKind::Deployment,
            ctx.clone(),
            |s, d: &Deployment, _| s.apply_workload(deployment_view(d)),
            |s, d: &Deployment| s.delete_workload(d.metadata.uid.as_deref().unwrap_or_default()),
        ),
        spawn(
            Api::<StatefulSet>::all(client.clone()),
            WatchedKind::StatefulSet,
            ctx.clone(),
            |s, st: &StatefulSet, _| s.apply_workload(stateful_set_view(st)),
            |s, st: &StatefulSet| s.delete_workload(st.metadata.uid.as_deref().unwrap_or_default()),
        ),
        spawn(
            Api::<ReplicaSet>::all(client.clone()),
            WatchedKind::ReplicaSet,
            ctx.clone(),
            |s, rs: &ReplicaSet, _| s.apply_replica_set(replica_set_view(rs)),
            |s, rs: &ReplicaSet| {
                s.delete_replica_set(rs.metadata.uid.as_deref().unwrap_or_default())
            },
        ),
        spawn(
            Api::<PersistentVolumeClaim>::all(client),
            WatchedKind::PersistentVolumeClaim,
            ctx,
            |s, c: &PersistentVolumeClaim, _| s.apply_claim(c),
            |s, c: &PersistentVolumeClaim| {
                s.delete_claim(c.metadata.namespace.as_deref().unwrap_or_default(), &c.name_any())
            },
        ),
    ]
}

#[derive(Clone)]
struct WatchCtx {
    state: SharedState,
    trigger: watch::Sender<u64>,
    metrics: Arc<Metrics>,
}

fn spawn<K>(
    api: Api<K>,
    kind: WatchedKind,
    ctx: WatchCtx,
    apply: fn(&mut ClusterState, &K, Timestamp) -> Change,
    delete: fn(&mut ClusterState, &K) -> Change,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
    tokio::spawn(consume(stream, kind, ctx, apply, delete))
}

async fn consume<K>(
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    kind: WatchedKind,
    ctx: WatchCtx,
    apply: fn(&mut ClusterState, &K, Timestamp) -> Change,
    delete: fn(&mut ClusterState, &K) -> Change,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        let now = crate::clock::now();
        let (change, synced, nodes, pods) = {
            let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
            let change = match &event {
                Ok(Event::Init) => {
                    debug!(kind = kind.as_str(), "listing");
                    state.list_started(kind);
                    Change::None
                }
                Ok(Event::InitApply(obj)) | Ok(Event::Apply(obj)) => apply(&mut state, obj, now),
                Ok(Event::Delete(obj)) => delete(&mut state, obj),
                Ok(Event::InitDone) => {
                    info!(kind = kind.as_str(), "watch synced");
                    state.list_done(kind, now)
                }
                Err(e) => {
                    warn!(kind = kind.as_str(), error = %e, "watch failed; retrying");
                    state.watch_failed(kind)
                }
            };
            (change, state.synced(), state.node_count(), state.terminating_pod_count())
        };
        ctx.metrics.caches_synced.set(i64::from(synced));
        ctx.metrics.cached_nodes.set(nodes as i64);
        ctx.metrics.cached_terminating_pods.set(pods as i64);
        if change == Change::Relevant {
            ctx.trigger.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// A stream that yields once per burst of trigger bumps (bumps during a reconcile coalesce).
pub fn trigger_stream(rx: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        rx.borrow_and_update();
        Some(((), rx))
    })
}
