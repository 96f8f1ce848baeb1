//! The last look: fresh reads (never from a cache) of a pod, its node, the node's Lease and the
//! policy right before a write, in the core's terms ([`last_look`]); and the reads one plan's
//! force deletes share ([`SharedLooks`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt, Shared};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::{Admitted, Sent, Writer};
use crate::adapters::{NODE_LEASE_NAMESPACE, WatchedPod, excluded, node_view, pod_record};
use crate::core::{
    Action, FreshNode, FreshPod, FreshPolicy, LastLook, NodeView, PodTarget, ValidatedPolicy,
};
use crate::crd::{ActionResult, OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE, RemediationPolicy};

/// How long one fresh read of a node, its Lease and the policy serves the last looks of other
/// force deletes on that node: those that start while it is in flight or within this long
/// after it was sent. 110 pods due at once on one node then cost a few reads, not 330.
pub const SHARED_LOOK_FOR: Duration = Duration::from_millis(100);
/// How long before a force delete's due instant, its `Pending` record stored ahead, its last
/// look's reads are sent ([`Writer::look_early`]): about what they take on a busy API server,
/// so that they are answered when it comes, and well within [`SHARED_LOOK_FOR`], so that the
/// look made then (the plan made afresh at the due instant) uses them.
pub const LOOK_EARLY: Duration = Duration::from_millis(30);
/// From how many force deletes on one node in a plan their last looks read the node's pods in
/// one request (a LIST of `spec.nodeName=<node>`, shared like the node's read) rather than one
/// GET each.
pub const LIST_PODS_FROM: usize = 4;

impl Writer {
    /// The last look's fresh reads (never from a cache) of a node, its Lease and the policy,
    /// all at once; `Err` says which read failed.
    pub(crate) async fn reread(
        &self,
        node: &str,
        policy: &str,
    ) -> std::result::Result<(Option<Node>, Option<Lease>, Option<RemediationPolicy>), String> {
        let (node_and_lease, policy) = tokio::join!(self.read_node(node), self.read_policy(policy));
        let (node, lease) = node_and_lease?;
        Ok((node, lease, policy?))
    }

    /// The last look of a pod action other than a force delete (an eviction, a finalizer
    /// removal): fresh reads of the pod, its node, the node's Lease and the policy, all at once;
    /// then whether the action still stands and the safety kernel admits it
    /// ([`Writer::admits`]). `Err` is the result to record, and why.
    pub(super) async fn pod_last_look(
        &self,
        action: &Action,
        target: &PodTarget,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> std::result::Result<Admitted, Sent> {
        Ok(self.pod_last_look_read(action, target, policy, validated).await?.0)
    }

    /// [`Writer::pod_last_look`], also handing back the pod as read, for a request conditional
    /// on it (its resourceVersion).
    pub(super) async fn pod_last_look_read(
        &self,
        action: &Action,
        target: &PodTarget,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> std::result::Result<(Admitted, Option<Pod>), Sent> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &target.namespace);
        let policy_name = policy.name_any();
        let (pod, rest) =
            tokio::join!(pods.get_opt(&target.name), self.reread(&target.node, &policy_name));
        let pod =
            pod.map_err(|e| (ActionResult::Failed, Some(format!("last look: the pod: {e}"))))?;
        let (node, lease, fresh) = rest.map_err(|e| (ActionResult::Failed, Some(e)))?;
        let look = last_look(pod.as_ref(), node.as_ref(), lease.as_ref(), fresh.as_ref());
        let admitted = self.admits(policy, validated, action, &look, None).await?;
        Ok((admitted, pod))
    }

    /// What a fresh read says of the pod a Pending record names: gone (absent, or another pod
    /// under its name), Terminating, or there. `Err`: the read failed (resolve later).
    pub async fn pod_now(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> std::result::Result<crate::core::PodNow, String> {
        use crate::core::PodNow;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = pods.get_opt(name).await.map_err(|e| e.to_string())?;
        Ok(match pod {
            Some(p) if p.metadata.uid.as_deref() == Some(uid) => {
                if p.metadata.deletion_timestamp.is_some() {
                    PodNow::Terminating
                } else if ready_condition(&p).is_some_and(|ready| !ready) {
                    PodNow::NotReady
                } else {
                    PodNow::Present
                }
            }
            _ => PodNow::Gone,
        })
    }

    /// A fresh read of a Node, in the core's terms (`None`: there is none).
    pub async fn node_now(&self, name: &str) -> std::result::Result<Option<NodeView>, String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        Ok(nodes.get_opt(name).await.map_err(|e| e.to_string())?.as_ref().map(node_view))
    }

    /// The last look's fresh reads of a node and its Lease, both at once.
    async fn read_node(&self, node: &str) -> std::result::Result<NodeEvidence, String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), NODE_LEASE_NAMESPACE);
        let (node, lease) = tokio::join!(nodes.get_opt(node), leases.get_opt(node));
        let what = |what: &str, e: kube::Error| format!("last look: the {what}: {e}");
        Ok((node.map_err(|e| what("node", e))?, lease.map_err(|e| what("node's Lease", e))?))
    }

    /// The last look's fresh read of a force delete's pod, alone.
    async fn read_pod(&self, pod: &PodTarget) -> PodRead {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        pods.get_opt(&pod.name).await.map_err(|e| e.to_string())
    }

    /// The last look's fresh read of a policy.
    async fn read_policy(
        &self,
        name: &str,
    ) -> std::result::Result<Option<RemediationPolicy>, String> {
        let policies: Api<RemediationPolicy> = Api::all(self.client.clone());
        policies.get_opt(name).await.map_err(|e| format!("last look: the policy: {e}"))
    }
}

/// A node and its Lease, freshly read.
type NodeEvidence = (Option<Node>, Option<Lease>);

/// A read sent by [`Writer::look_early`], and when: it outlives the reconcile that sent it.
type EarlyRead<T> = (Instant, Shared<BoxFuture<'static, Arc<T>>>);

/// The reads [`Writer::look_early`] sent for the plan due next, by node, pod (namespace/name)
/// and policy; a plan's [`SharedLooks`] starts with those sent less than [`SHARED_LOOK_FOR`]
/// ago.
#[derive(Default)]
pub(super) struct EarlyReads {
    nodes: HashMap<String, EarlyRead<std::result::Result<NodeEvidence, String>>>,
    pods: HashMap<String, EarlyRead<PodRead>>,
    policies: HashMap<String, EarlyRead<PolicyEvidence>>,
}

impl EarlyReads {
    /// Forgets the reads too old to serve a look.
    fn prune(&mut self) {
        let young = |sent: &Instant| sent.elapsed() < SHARED_LOOK_FOR;
        self.nodes.retain(|_, (sent, _)| young(sent));
        self.pods.retain(|_, (sent, _)| young(sent));
        self.policies.retain(|_, (sent, _)| young(sent));
    }
}

/// A pod's key among the shared reads: namespace/name.
fn pod_key(pod: &PodTarget) -> String {
    format!("{}/{}", pod.namespace, pod.name)
}

/// An early read as one of a plan's shared reads.
fn adopt<'a, T: Send + Sync + 'static>((sent, read): &EarlyRead<T>) -> SharedRead<'a, T> {
    let read = read.clone();
    (*sent, read.boxed().shared())
}

impl Writer {
    /// Once the `Pending` records of force deletes due at `due` are stored ahead of it, sends
    /// their last looks' reads (each pod, its node and the node's Lease, the policy)
    /// [`LOOK_EARLY`] before `due`, in a task of their own: the plan made afresh at `due` finds
    /// them answered, and its looks use them as they use one another's ([`SHARED_LOOK_FOR`]).
    /// Nothing is sent but reads; the safety kernel admits each action at its look, after
    /// `due`, on these reads as on any.
    pub(super) fn look_early(&self, policy: &str, due: Timestamp, pods: Vec<PodTarget>) {
        let early = due - jiff::SignedDuration::try_from(LOOK_EARLY).unwrap_or_default();
        let Ok(wait) = Duration::try_from(early.duration_since(crate::clock::now())) else {
            return; // Due sooner than that: the look reads for itself.
        };
        let (writer, policy) = (self.clone(), policy.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let reads = writer.send_early_reads(&policy, &pods);
            futures::future::join_all(reads).await;
        });
    }

    /// The reads of [`Writer::look_early`], kept for the looks; returned to be driven.
    fn send_early_reads(&self, policy: &str, pods: &[PodTarget]) -> Vec<BoxFuture<'static, ()>> {
        let mut early = self.early.lock().unwrap_or_else(|e| e.into_inner());
        early.prune();
        let sent = Instant::now();
        let mut reads: Vec<BoxFuture<'static, ()>> = Vec::new();
        let (writer, name) = (self.clone(), policy.to_string());
        let read = async move { Arc::new(writer.read_policy(&name).await) }.boxed().shared();
        early.policies.insert(policy.to_string(), (sent, read.clone()));
        reads.push(read.map(drop).boxed());
        let nodes: HashSet<&str> = pods.iter().map(|p| p.node.as_str()).collect();
        for node in nodes {
            let (writer, name) = (self.clone(), node.to_string());
            let read = async move { Arc::new(writer.read_node(&name).await) }.boxed().shared();
            early.nodes.insert(node.to_string(), (sent, read.clone()));
            reads.push(read.map(drop).boxed());
        }
        for pod in pods {
            let (writer, target) = (self.clone(), pod.clone());
            let read = async move { Arc::new(writer.read_pod(&target).await) }.boxed().shared();
            early.pods.insert(pod_key(pod), (sent, read.clone()));
            reads.push(read.map(drop).boxed());
        }
        reads
    }
}

/// The pods on one node, by namespace and name, or why they could not be read.
type NodePods = std::result::Result<HashMap<(String, String), Pod>, String>;

/// A fresh read shared by several last looks, and when it was sent.
type SharedRead<'a, T> = (Instant, Shared<BoxFuture<'a, Arc<T>>>);

/// One plan's last-look reads of nodes, Leases, the policy and, where several of its force
/// deletes are on one node, that node's pods: each shared by the force deletes (on the same
/// node) whose last look starts within [`SHARED_LOOK_FOR`] of its request. The policy may come
/// from the answer to the status write that recorded the plan's actions `Pending`, made just
/// before them.
pub(super) struct SharedLooks<'a> {
    writer: &'a Writer,
    policy: String,
    /// Nodes with at least [`LIST_PODS_FROM`] force deletes in the plan.
    list_pods_on: HashSet<String>,
    nodes: Mutex<HashMap<String, SharedRead<'a, std::result::Result<NodeEvidence, String>>>>,
    policies: Mutex<HashMap<String, SharedRead<'a, PolicyEvidence>>>,
    pod_lists: Mutex<HashMap<String, SharedRead<'a, NodePods>>>,
    /// Single pods, by namespace/name: read ahead by [`SharedLooks::prefetch`].
    pods: Mutex<HashMap<String, SharedRead<'a, PodRead>>>,
}

/// A pod, freshly read (`None`: there is none).
type PodRead = std::result::Result<Option<Pod>, String>;

/// The policy, freshly read.
type PolicyEvidence = std::result::Result<Option<RemediationPolicy>, String>;

impl<'a> SharedLooks<'a> {
    /// `fresh_policy`: the policy as the API server answered a write sent at that instant.
    pub(super) fn new(
        writer: &'a Writer,
        policy: String,
        actions: &[Action],
        fresh_policy: Option<(Instant, RemediationPolicy)>,
    ) -> Self {
        // The reads sent early for this plan (if it is the one they were sent for), younger
        // than SHARED_LOOK_FOR: shared as this plan's own.
        let (mut nodes, mut policies, mut pods) = (HashMap::new(), HashMap::new(), HashMap::new());
        {
            let mut early = writer.early.lock().unwrap_or_else(|e| e.into_inner());
            early.prune();
            nodes.extend(early.nodes.iter().map(|(k, read)| (k.clone(), adopt(read))));
            pods.extend(early.pods.iter().map(|(k, read)| (k.clone(), adopt(read))));
            if let Some(read) = early.policies.get(&policy) {
                policies.insert(policy.clone(), adopt(read));
            }
        }
        if let Some((sent, answer)) = fresh_policy {
            let read = futures::future::ready(Arc::new(Ok(Some(answer)))).boxed().shared();
            policies.insert(policy.clone(), (sent, read));
        }
        let mut per_node: HashMap<&str, usize> = HashMap::new();
        for action in actions {
            if let Action::ForceDelete(fd) = action {
                *per_node.entry(fd.pod.node.as_str()).or_default() += 1;
            }
        }
        let list_pods_on = per_node
            .into_iter()
            .filter(|(_, n)| *n >= LIST_PODS_FROM)
            .map(|(node, _)| node.to_string())
            .collect();
        SharedLooks {
            writer,
            policy,
            list_pods_on,
            nodes: Mutex::new(nodes),
            policies: Mutex::new(policies),
            pod_lists: Mutex::new(HashMap::new()),
            pods: Mutex::new(pods),
        }
    }

    /// The policy as the API server answered a write sent at `sent`: the last looks that start
    /// within [`SHARED_LOOK_FOR`] of it need not read it again.
    pub(super) fn set_policy(&self, sent: Instant, answer: RemediationPolicy) {
        let read = futures::future::ready(Arc::new(Ok(Some(answer)))).boxed().shared();
        let mut policies = self.policies.lock().unwrap_or_else(|e| e.into_inner());
        policies.insert(self.policy.clone(), (sent, read));
    }

    /// Sends the reads of the force deletes' last looks (each node with its Lease, each pod or
    /// its node's pods) and waits for their answers: run while the plan's `Pending` records are
    /// written, so that the looks, which start once the records are stored, find them answered.
    /// Nothing is sent but reads; a look that starts more than [`SHARED_LOOK_FOR`] after a read
    /// was sent reads again.
    pub(super) async fn prefetch(&self, actions: &[Action]) {
        let reads = actions.iter().filter_map(|a| match a {
            Action::ForceDelete(fd) => Some(&fd.pod),
            _ => None,
        });
        futures::future::join_all(reads.map(|pod| async move {
            let _ = tokio::join!(self.node(&pod.node), self.pod(pod));
        }))
        .await;
    }

    /// A read sent less than [`SHARED_LOOK_FOR`] ago (answered or in flight) under `key`, or a
    /// new one made by `read`.
    async fn shared<T: Send + Sync + 'a>(
        cache: &Mutex<HashMap<String, SharedRead<'a, T>>>,
        key: &str,
        read: impl FnOnce() -> BoxFuture<'a, T>,
    ) -> Arc<T> {
        let read = {
            let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
            match cache.get(key) {
                Some((sent, read)) if sent.elapsed() < SHARED_LOOK_FOR => read.clone(),
                _ => {
                    let read = read().map(Arc::new).boxed().shared();
                    cache.insert(key.to_string(), (Instant::now(), read.clone()));
                    read
                }
            }
        };
        read.await
    }

    /// The node `node` and its Lease.
    pub(super) async fn node(&self, node: &str) -> Arc<std::result::Result<NodeEvidence, String>> {
        let (writer, name) = (self.writer, node.to_string());
        Self::shared(&self.nodes, node, move || {
            async move { writer.read_node(&name).await }.boxed()
        })
        .await
    }

    /// The policy.
    pub(super) async fn policy(&self) -> Arc<PolicyEvidence> {
        let (writer, name) = (self.writer, self.policy.clone());
        Self::shared(&self.policies, &self.policy, move || {
            async move { writer.read_policy(&name).await }.boxed()
        })
        .await
    }

    /// The pod of a force delete, fresh: from its node's shared LIST where the plan has several force
    /// deletes there, else (and where the LIST does not hold it: gone, or replaced by a pod of
    /// the same name elsewhere) by a GET of its own.
    pub(super) async fn pod(&self, pod: &PodTarget) -> std::result::Result<Option<Pod>, String> {
        if self.list_pods_on.contains(&pod.node) {
            let (client, node) = (self.writer.client.clone(), pod.node.clone());
            let listed = Self::shared(&self.pod_lists, &pod.node, move || {
                async move {
                    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
                    let pods =
                        Api::<Pod>::all(client).list(&params).await.map_err(|e| e.to_string())?;
                    Ok(pods
                        .items
                        .into_iter()
                        .map(|p| ((p.namespace().unwrap_or_default(), p.name_any()), p))
                        .collect())
                }
                .boxed()
            })
            .await;
            match &*listed {
                Ok(pods) => {
                    if let Some(found) = pods.get(&(pod.namespace.clone(), pod.name.clone())) {
                        return Ok(Some(found.clone()));
                    }
                }
                Err(e) => return Err(e.clone()),
            }
        }
        let (writer, target) = (self.writer, pod.clone());
        let read = Self::shared(&self.pods, &pod_key(pod), move || {
            async move { writer.read_pod(&target).await }.boxed()
        })
        .await;
        (*read).clone()
    }
}

/// A freshly read policy, in the core's terms.
fn fresh_policy(policy: &RemediationPolicy) -> FreshPolicy {
    FreshPolicy {
        mode: policy.spec.mode,
        paused: policy.spec.paused,
        generation: policy.metadata.generation,
    }
}

/// What the fresh reads say, in the core's terms.
pub(crate) fn last_look<'a>(
    pod: Option<&'a Pod>,
    node: Option<&Node>,
    lease: Option<&Lease>,
    policy: Option<&RemediationPolicy>,
) -> LastLook<'a> {
    LastLook {
        pod: pod.map(|p| {
            // Decoded as the watch decodes it: the deletion compares with the one it timed.
            let watched = WatchedPod::from(p);
            let record = pod_record(&watched);
            let view = record.as_ref().map(|r| &r.view);
            let meta = &watched.metadata;
            FreshPod {
                uid: p.metadata.uid.as_deref(),
                terminating: p.metadata.deletion_timestamp.is_some(),
                deletion: meta
                    .deletion_timestamp
                    .as_ref()
                    .map(|t| (t.0, meta.deletion_grace_period_seconds.unwrap_or(0))),
                node: p.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default(),
                excluded: excluded(p.metadata.annotations.as_ref()),
                stale: view.is_some_and(|v| v.stale_ready_since.is_some()),
                failed_by_shutdown: view.is_some_and(|v| v.shutdown_reason.is_some()),
                ready: ready_condition(p) == Some(true),
            }
        }),
        node: node.map(|n| {
            let view = node_view(n);
            FreshNode {
                observation: view.observation,
                excluded: view.excluded,
                control: view.control,
                cordon_managers: field_managers(n, &["f:spec", "f:unschedulable"]),
                out_of_service_added: out_of_service_added(n),
            }
        }),
        lease_renewed: lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0),
        policy: policy.map(fresh_policy),
    }
}

/// Whether the pod's `Ready` condition is True; `None` when it has none.
fn ready_condition(pod: &Pod) -> Option<bool> {
    let conditions = pod.status.as_ref()?.conditions.as_deref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status == "True")
}

/// The managers whose managedFields entry holds the field at `path` (`["f:spec",
/// "f:unschedulable"]`).
fn field_managers(node: &Node, path: &[&str]) -> Vec<String> {
    let entries = node.metadata.managed_fields.as_deref().unwrap_or_default();
    entries
        .iter()
        .filter(|e| {
            let fields = e.fields_v1.as_ref().map(|f| &f.0);
            path.iter().try_fold(fields, |at, key| Some(at?.get(*key))).flatten().is_some()
        })
        .filter_map(|e| e.manager.clone())
        .collect()
}

/// The `timeAdded` of the node's out-of-service taint with this operator's value and effect.
fn out_of_service_added(node: &Node) -> Option<Timestamp> {
    let taints = node.spec.as_ref()?.taints.as_deref()?;
    taints.iter().find(|t| our_taint(t))?.time_added.as_ref().map(|t| t.0)
}

/// The out-of-service taint as this operator adds it (key, value, effect).
pub(crate) fn our_taint(t: &k8s_openapi::api::core::v1::Taint) -> bool {
    t.key == OUT_OF_SERVICE_TAINT
        && t.effect == "NoExecute"
        && t.value.as_deref() == Some(OUT_OF_SERVICE_VALUE)
}
