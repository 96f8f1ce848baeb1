//! The kinds the operator watches, named once.
//!
//! Each kind says, in one `impl` of [`Watched`], where its objects are and what each of them
//! does to the [`ClusterState`]. The table [`WATCHED`] lists the kinds; the watches
//! ([`super::watches`]), `plan`'s one-shot listing and the start-up permission check all go through
//! it, so a new kind is one `impl` and one table row.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::sync::Arc;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim};
use kube::api::{Api, ListParams};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::state::{Change, ClusterState, WatchedKind};
use super::watches::{InitialLists, SharedState, WatchCtx, spawn};
use crate::adapters::{
    NODE_LEASE_NAMESPACE, WatchedLease, WatchedNode, WatchedPod, deployment_view, replica_set_view,
    stateful_set_view,
};
use crate::metrics::Metrics;

/// One watched kind: where its objects are, and what each one does to the state.
pub trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    const KIND: WatchedKind;

    /// The namespace the operator reads the kind in ([`Watched::api`]); `None`: cluster-wide.
    const NAMESPACE: Option<&'static str> = None;

    /// Every object of the kind the operator reads (cluster-wide unless overridden).
    fn api(client: Client) -> Api<Self> {
        Api::all(client)
    }

    /// The object was added or changed, seen at `now`.
    fn apply(state: &mut ClusterState, obj: &Self, now: Timestamp) -> Change;

    /// The object was deleted, seen at `now`.
    fn delete(state: &mut ClusterState, obj: &Self, now: Timestamp) -> Change;
}

fn uid<K: Resource>(obj: &K) -> &str {
    obj.meta().uid.as_deref().unwrap_or_default()
}

impl Watched for WatchedNode {
    const KIND: WatchedKind = WatchedKind::Node;
    fn apply(state: &mut ClusterState, obj: &Self, now: Timestamp) -> Change {
        state.apply_node(&obj.0, now)
    }
    fn delete(state: &mut ClusterState, obj: &Self, now: Timestamp) -> Change {
        state.delete_node(&obj.name_any(), now)
    }
}

impl Watched for WatchedLease {
    const KIND: WatchedKind = WatchedKind::Lease;
    const NAMESPACE: Option<&'static str> = Some(NODE_LEASE_NAMESPACE);
    fn api(client: Client) -> Api<Self> {
        Api::namespaced(client, NODE_LEASE_NAMESPACE)
    }
    fn apply(state: &mut ClusterState, obj: &Self, now: Timestamp) -> Change {
        let renewed = obj.0.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0);
        let declared = crate::adapters::lease_duration_s(&obj.0);
        state.apply_lease_declaring(&obj.name_any(), renewed, declared, now)
    }
    fn delete(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.delete_lease(&obj.name_any())
    }
}

impl Watched for WatchedPod {
    const KIND: WatchedKind = WatchedKind::Pod;
    fn apply(state: &mut ClusterState, obj: &Self, now: Timestamp) -> Change {
        state.apply_pod(obj, now)
    }
    fn delete(state: &mut ClusterState, obj: &Self, now: Timestamp) -> Change {
        state.pod_deleted(obj, now)
    }
}

impl Watched for Namespace {
    const KIND: WatchedKind = WatchedKind::Namespace;
    fn apply(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.apply_namespace(obj)
    }
    fn delete(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.delete_namespace(&obj.name_any())
    }
}

impl Watched for PersistentVolumeClaim {
    const KIND: WatchedKind = WatchedKind::PersistentVolumeClaim;
    fn apply(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.apply_claim(obj)
    }
    fn delete(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.delete_claim(obj.metadata.namespace.as_deref().unwrap_or_default(), &obj.name_any())
    }
}

impl Watched for Deployment {
    const KIND: WatchedKind = WatchedKind::Deployment;
    fn apply(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.apply_workload(deployment_view(obj))
    }
    fn delete(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.delete_workload(uid(obj))
    }
}

impl Watched for StatefulSet {
    const KIND: WatchedKind = WatchedKind::StatefulSet;
    fn apply(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.apply_workload(stateful_set_view(obj))
    }
    fn delete(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.delete_workload(uid(obj))
    }
}

impl Watched for ReplicaSet {
    const KIND: WatchedKind = WatchedKind::ReplicaSet;
    fn apply(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.apply_replica_set(replica_set_view(obj))
    }
    fn delete(state: &mut ClusterState, obj: &Self, _: Timestamp) -> Change {
        state.delete_replica_set(uid(obj))
    }
}

/// What the operator does with a watched kind, whichever it is (so the kinds fit one table).
pub trait KindOps: Sync {
    fn kind(&self) -> WatchedKind;

    /// Starts the kind's watch into the shared state (see [`super::watches`]).
    fn spawn_watch(&self, client: Client, ctx: WatchCtx) -> JoinHandle<()>;

    /// Whether the operator may list the kind, by the API server's access review
    /// ([`crate::operator::may_list`]): `Ok(Err(why))` when it may not.
    fn check_list(
        &self,
        client: Client,
    ) -> BoxFuture<'static, Result<Result<(), String>, kube::Error>>;

    /// Lists every object of the kind, page by page, into `state` as seen at `now`; returns
    /// the list's resourceVersion.
    fn load<'a>(
        &self,
        client: Client,
        state: &'a mut ClusterState,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<String, kube::Error>>;
}

struct Ops<K>(PhantomData<fn() -> K>);

impl<K: Watched> KindOps for Ops<K> {
    fn kind(&self) -> WatchedKind {
        K::KIND
    }

    fn spawn_watch(&self, client: Client, ctx: WatchCtx) -> JoinHandle<()> {
        spawn(K::api(client), K::KIND, ctx, K::apply, K::delete)
    }

    fn check_list(
        &self,
        client: Client,
    ) -> BoxFuture<'static, Result<Result<(), String>, kube::Error>> {
        let (group, resource) = (K::group(&()).into_owned(), K::plural(&()).into_owned());
        Box::pin(crate::operator::may_list(K::api(client), group, resource, K::NAMESPACE))
    }

    fn load<'a>(
        &self,
        client: Client,
        state: &'a mut ClusterState,
        now: Timestamp,
    ) -> BoxFuture<'a, Result<String, kube::Error>> {
        Box::pin(async move {
            let api = K::api(client);
            state.list_started(K::KIND);
            let mut lp = ListParams::default().limit(super::watches::PAGE_SIZE);
            let mut version = None;
            loop {
                let page = api.list(&lp).await?;
                version = version.or(page.metadata.resource_version.clone());
                for obj in &page.items {
                    K::apply(state, obj, now);
                }
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => lp = lp.continue_token(&token),
                    None => break,
                }
            }
            state.list_done(K::KIND, now);
            Ok(version.unwrap_or_default())
        })
    }
}

/// Starts the watches, one per kind of [`WATCHED`], the pods' on `pods_client` and every
/// other on `client`. Each runs until the process ends, retrying with backoff.
pub fn spawn_watches(
    client: Client,
    pods_client: Client,
    state: SharedState,
    trigger: watch::Sender<u64>,
    metrics: Arc<Metrics>,
    lists: InitialLists,
) -> Vec<JoinHandle<()>> {
    let node_lists = Arc::new(tokio::sync::Notify::new());
    let deferred = Arc::new(tokio::sync::Notify::new());
    let ctx = WatchCtx { state, trigger, metrics, lists, node_lists, deferred };
    let mut tasks: Vec<_> = WATCHED
        .iter()
        .map(|kind| {
            let on = if kind.kind() == WatchedKind::Pod { &pods_client } else { &client };
            kind.spawn_watch(on.clone(), ctx.clone())
        })
        .collect();
    tasks.push(tokio::spawn(super::watches::trigger_deferred(ctx.clone())));
    tasks.push(tokio::spawn(list_pods_of_unready_nodes(client, ctx)));
    tasks
}

/// Lists the pods of each node that left Ready (`spec.nodeName=<node>`, one request per node
/// and outage) into the state, whose pod watch follows them from then on: the pods that were
/// Ready before their node left, which no pod event brings (`readyOnDeadNode`). Not while the
/// pods themselves are being listed ([`ClusterState::take_nodes_to_list`]). A failed list is
/// tried again a second later.
async fn list_pods_of_unready_nodes(client: Client, ctx: WatchCtx) {
    let pods: Api<WatchedPod> = Api::all(client);
    loop {
        ctx.node_lists.notified().await;
        let nodes = ctx.state.write().unwrap_or_else(|e| e.into_inner()).take_nodes_to_list();
        for node in nodes {
            let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
            let listed = pods.list(&params).await;
            let failed = {
                let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
                match listed {
                    Ok(list) => {
                        if state.apply_listed_pods(&node, &list.items) == Change::Relevant {
                            ctx.trigger.send_modify(|n| *n = n.wrapping_add(1));
                        }
                        None
                    }
                    Err(e) => {
                        state.list_node_again(&node);
                        Some(e)
                    }
                }
            };
            if let Some(e) = failed {
                tracing::warn!(node = %node, error = %e, "cannot list the pods of a node not Ready; retrying");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                ctx.node_lists.notify_one();
            }
        }
    }
}

/// Every kind the operator watches, in the order the watches start.
pub static WATCHED: [&dyn KindOps; 8] = [
    &Ops::<WatchedNode>(PhantomData),
    &Ops::<WatchedLease>(PhantomData),
    &Ops::<WatchedPod>(PhantomData),
    &Ops::<Namespace>(PhantomData),
    &Ops::<PersistentVolumeClaim>(PhantomData),
    &Ops::<Deployment>(PhantomData),
    &Ops::<StatefulSet>(PhantomData),
    &Ops::<ReplicaSet>(PhantomData),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_every_kind_once() {
        let kinds: Vec<WatchedKind> = WATCHED.iter().map(|k| k.kind()).collect();
        assert_eq!(kinds, WatchedKind::ALL.to_vec());
    }
}
