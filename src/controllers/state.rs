//! The operator's compact view of the cluster, fed by one watch per kind.
//!
//! No full objects are kept: a node is a [`NodeView`] without its Lease, a Lease is its renew
//! time and when we saw it change, a pod is a [`PodRecord`] and only while it is Terminating, a
//! namespace is its labels, a claim is whether it is ReadWriteOnce. [`ClusterState::observe`]
//! assembles the core's [`Observed`] from them.
//!
//! Every `now` passed in comes from [`crate::clock`]: evidence is timed by the instant *we* saw
//! it, never by the timestamps other machines wrote into the objects.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, Pod};

use crate::adapters::{PodRecord, node_view, pod_record};
use crate::core::rollouts::{
    ReplicaSetView, RolloutAnalysis, WorkloadKind, WorkloadRef, WorkloadView, blocked_rollouts,
};
use crate::core::{
    EvidenceWindow, NodeView, Observed, PastAction, PodView, Readiness, Suspension, lease_drought,
};

/// The kinds the operator watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WatchedKind {
    Node,
    Lease,
    Pod,
    Namespace,
    PersistentVolumeClaim,
    Deployment,
    StatefulSet,
    ReplicaSet,
}

impl WatchedKind {
    pub const ALL: [WatchedKind; 8] = [
        WatchedKind::Node,
        WatchedKind::Lease,
        WatchedKind::Pod,
        WatchedKind::Namespace,
        WatchedKind::PersistentVolumeClaim,
        WatchedKind::Deployment,
        WatchedKind::StatefulSet,
        WatchedKind::ReplicaSet,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WatchedKind::Node => "nodes",
            WatchedKind::Lease => "leases",
            WatchedKind::Pod => "pods",
            WatchedKind::Namespace => "namespaces",
            WatchedKind::PersistentVolumeClaim => "persistentvolumeclaims",
            WatchedKind::Deployment => "deployments",
            WatchedKind::StatefulSet => "statefulsets",
            WatchedKind::ReplicaSet => "replicasets",
        }
    }
}

/// A kubelet Lease as remembered: its `renewTime` (the kubelet's clock, for people) and when we
/// saw that value arrive (our clock, for decisions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    pub renewed: Timestamp,
    pub seen: Timestamp,
    /// Only listed, never seen changing: its `seen` is the list's instant, not a renewal's, so
    /// it does not count as a renewing kubelet for droughts.
    pub listed_only: bool,
}

/// Whether the watches can be trusted, and since when.
#[derive(Clone, Debug, Default)]
struct Sync {
    /// Kinds whose initial list completed.
    listed: BTreeSet<WatchedKind>,
    window: EvidenceWindow,
}

/// What a watch event changed, so the caller knows whether policies must be re-planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Nothing a decision depends on changed (e.g. a heartbeat of a Ready node).
    None,
    /// Something decisions depend on changed: re-plan.
    Relevant,
}

#[derive(Debug, Default)]
pub struct ClusterState {
    nodes: HashMap<String, NodeView>,
    leases: HashMap<String, LeaseRecord>,
    /// Terminating pods by UID.
    pods: HashMap<String, PodRecord>,
    namespaces: HashMap<String, Arc<BTreeMap<String, String>>>,
    /// `namespace/name` of claims whose access modes include ReadWriteOnce(Pod).
    rwo_claims: HashSet<String>,
    /// Deployments and StatefulSets by UID.
    workloads: HashMap<String, WorkloadView>,
    replica_sets: HashMap<String, ReplicaSetView>,
    sync: Sync,
    /// Objects received during a (re)list, swapped in when it completes.
    relist: Relist,
}

#[derive(Debug, Default)]
struct Relist {
    nodes: Option<HashMap<String, NodeView>>,
    leases: Option<HashMap<String, LeaseRecord>>,
    pods: Option<HashMap<String, PodRecord>>,
    namespaces: Option<HashMap<String, Arc<BTreeMap<String, String>>>>,
    rwo_claims: Option<HashSet<String>>,
    /// Workloads of the kinds being relisted (Deployments and StatefulSets are relisted apart).
    workloads: HashMap<WorkloadKind, HashMap<String, WorkloadView>>,
    replica_sets: Option<HashMap<String, ReplicaSetView>>,
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    /// A (re)list of `kind` starts: its objects are collected aside until it completes.
    pub fn list_started(&mut self, kind: WatchedKind) {
        match kind {
            WatchedKind::Node => self.relist.nodes = Some(HashMap::new()),
            WatchedKind::Lease => self.relist.leases = Some(HashMap::new()),
            WatchedKind::Pod => self.relist.pods = Some(HashMap::new()),
            WatchedKind::Namespace => self.relist.namespaces = Some(HashMap::new()),
            WatchedKind::PersistentVolumeClaim => self.relist.rwo_claims = Some(HashSet::new()),
            WatchedKind::Deployment => {
                self.relist.workloads.insert(WorkloadKind::Deployment, HashMap::new());
            }
            WatchedKind::StatefulSet => {
                self.relist.workloads.insert(WorkloadKind::StatefulSet, HashMap::new());
            }
            WatchedKind::ReplicaSet => self.relist.replica_sets = Some(HashMap::new()),
        }
    }

    /// A (re)list of `kind` completed at `now`: its objects replace the old ones and the
    /// evidence window restarts.
    pub fn list_done(&mut self, kind: WatchedKind, now: Timestamp) -> Change {
        match kind {
            WatchedKind::Node => {
                if let Some(m) = self.relist.nodes.take() {
                    self.nodes = m;
                }
            }
            WatchedKind::Lease => {
                if let Some(m) = self.relist.leases.take() {
                    self.leases = m;
                }
            }
            WatchedKind::Pod => {
                if let Some(m) = self.relist.pods.take() {
                    self.pods = m;
                }
            }
            WatchedKind::Namespace => {
                if let Some(m) = self.relist.namespaces.take() {
                    self.namespaces = m;
                }
            }
            WatchedKind::PersistentVolumeClaim => {
                if let Some(m) = self.relist.rwo_claims.take() {
                    self.rwo_claims = m;
                }
            }
            WatchedKind::Deployment | WatchedKind::StatefulSet => {
                let workload_kind = if kind == WatchedKind::Deployment {
                    WorkloadKind::Deployment
                } else {
                    WorkloadKind::StatefulSet
                };
                if let Some(m) = self.relist.workloads.remove(&workload_kind) {
                    self.workloads.retain(|_, w| w.kind != workload_kind);
                    self.workloads.extend(m);
                }
            }
            WatchedKind::ReplicaSet => {
                if let Some(m) = self.relist.replica_sets.take() {
                    self.replica_sets = m;
                }
            }
        }
        self.sync.listed.insert(kind);
        self.sync.window.listed(kind == WatchedKind::Lease, now);
        Change::Relevant
    }

    /// A watch reported an error. For Leases this suspends all evidence until events resume.
    pub fn watch_failed(&mut self, kind: WatchedKind) -> Change {
        if kind == WatchedKind::Lease && self.sync.window.lease_watch_failed() {
            return Change::Relevant;
        }
        Change::None
    }

    /// A Node was added or changed, seen at `now`. The instant it left Ready is ours: kept from
    /// the previous view while it stays not Ready.
    pub fn apply_node(&mut self, node: &Node, now: Timestamp) -> Change {
        let mut view = node_view(node);
        let name = view.observation.name.clone();
        if view.observation.readiness != Readiness::Ready {
            let before = self.nodes.get(&name).map(|n| &n.observation);
            view.observation.not_ready_seen = match before {
                Some(b) if b.readiness != Readiness::Ready => b.not_ready_seen.or(Some(now)),
                _ => Some(now),
            };
        }
        if let Some(relist) = self.relist.nodes.as_mut() {
            relist.insert(name, view);
            return Change::None;
        }
        match self.nodes.insert(name, view.clone()) {
            Some(old) if same_node_evidence(&old, &view) => Change::None,
            _ => Change::Relevant,
        }
    }

    pub fn delete_node(&mut self, name: &str) -> Change {
        self.nodes.remove(name);
        Change::Relevant
    }

    /// A kubelet Lease was added or changed, seen at `now`. A new `renewTime` value is a renewal
    /// seen now, whatever instant the kubelet wrote into it.
    pub fn apply_lease(
        &mut self,
        name: &str,
        renewed: Option<Timestamp>,
        now: Timestamp,
    ) -> Change {
        let have_nodes = !self.nodes.is_empty();
        let mut change = Change::None;
        if self.sync.window.lease_event(now, have_nodes) {
            change = Change::Relevant;
        }
        let Some(renewed) = renewed else { return change };
        let listing = self.relist.leases.is_some();
        let record = match self.leases.get(name) {
            Some(old) if old.renewed == renewed => *old,
            Some(_) => LeaseRecord { renewed, seen: now, listed_only: false },
            None => LeaseRecord { renewed, seen: now, listed_only: listing },
        };
        if let Some(relist) = self.relist.leases.as_mut() {
            relist.insert(name.to_string(), record);
            return Change::None;
        }
        self.leases.insert(name.to_string(), record);
        // A renewal only matters for a node that is not Ready: it postpones its death.
        let node_ready = self
            .nodes
            .get(name)
            .is_some_and(|n| n.observation.readiness == crate::core::Readiness::Ready);
        if node_ready { change } else { Change::Relevant }
    }

    pub fn delete_lease(&mut self, name: &str) -> Change {
        self.leases.remove(name);
        Change::Relevant
    }

    pub fn apply_pod(&mut self, pod: &Pod) -> Change {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let record = pod_record(pod);
        if let Some(relist) = self.relist.pods.as_mut() {
            if let Some(record) = record {
                relist.insert(uid, record);
            }
            return Change::None;
        }
        match record {
            Some(record) => match self.pods.insert(uid, record.clone()) {
                Some(old) if old == record => Change::None,
                _ => Change::Relevant,
            },
            None => {
                if self.pods.remove(&uid).is_some() {
                    Change::Relevant
                } else {
                    Change::None
                }
            }
        }
    }

    pub fn delete_pod(&mut self, uid: &str) -> Change {
        if self.pods.remove(uid).is_some() { Change::Relevant } else { Change::None }
    }

    pub fn apply_namespace(&mut self, ns: &Namespace) -> Change {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let labels = Arc::new(ns.metadata.labels.clone().unwrap_or_default());
        if let Some(relist) = self.relist.namespaces.as_mut() {
            relist.insert(name, labels);
            return Change::None;
        }
        match self.namespaces.insert(name, labels.clone()) {
            Some(old) if old == labels => Change::None,
            _ => Change::Relevant,
        }
    }

    pub fn delete_namespace(&mut self, name: &str) -> Change {
        self.namespaces.remove(name);
        Change::Relevant
    }

    pub fn apply_claim(&mut self, claim: &PersistentVolumeClaim) -> Change {
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        );
        let rwo = claim.spec.as_ref().and_then(|s| s.access_modes.as_ref()).is_some_and(|modes| {
            modes.iter().any(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod")
        });
        let set = self.relist.rwo_claims.as_mut().unwrap_or(&mut self.rwo_claims);
        let changed = if rwo { set.insert(key) } else { set.remove(&key) };
        if changed && self.relist.rwo_claims.is_none() { Change::Relevant } else { Change::None }
    }

    pub fn delete_claim(&mut self, namespace: &str, name: &str) -> Change {
        if self.rwo_claims.remove(&format!("{namespace}/{name}")) {
            Change::Relevant
        } else {
            Change::None
        }
    }

    /// A Deployment or StatefulSet was added or changed.
    pub fn apply_workload(&mut self, workload: WorkloadView) -> Change {
        if let Some(relist) = self.relist.workloads.get_mut(&workload.kind) {
            relist.insert(workload.uid.clone(), workload);
            return Change::None;
        }
        match self.workloads.insert(workload.uid.clone(), workload.clone()) {
            Some(old) if old == workload => Change::None,
            _ => Change::Relevant,
        }
    }

    pub fn delete_workload(&mut self, uid: &str) -> Change {
        if self.workloads.remove(uid).is_some() { Change::Relevant } else { Change::None }
    }

    pub fn apply_replica_set(&mut self, rs: ReplicaSetView) -> Change {
        if let Some(relist) = self.relist.replica_sets.as_mut() {
            relist.insert(rs.uid.clone(), rs);
            return Change::None;
        }
        match self.replica_sets.insert(rs.uid.clone(), rs.clone()) {
            Some(old) if old == rs => Change::None,
            _ => Change::Relevant,
        }
    }

    pub fn delete_replica_set(&mut self, uid: &str) -> Change {
        if self.replica_sets.remove(uid).is_some() { Change::Relevant } else { Change::None }
    }

    /// The blocked Recreate Deployments and StatefulSets at `now`.
    pub fn rollout_analysis(&self, now: Timestamp) -> RolloutAnalysis {
        let pods: Vec<PodView> = self.pods.values().map(|r| r.view.clone()).collect();
        self.analyze(&pods, now)
    }

    fn analyze(&self, pods: &[PodView], now: Timestamp) -> RolloutAnalysis {
        let workloads: Vec<WorkloadView> = self.workloads.values().cloned().collect();
        blocked_rollouts(
            &workloads,
            &self.replica_sets,
            pods,
            |node| self.nodes.get(node).map(|n| n.observation.readiness == Readiness::Ready),
            now,
        )
    }

    /// Whether every kind has completed its initial list.
    pub fn synced(&self) -> bool {
        WatchedKind::ALL.iter().all(|k| self.sync.listed.contains(k))
    }

    /// Reads the renewals for a drought at `now` (see [`crate::core::evidence`]); call before
    /// [`ClusterState::evidence_since`]. Returns whether the reading changed.
    pub fn refresh_evidence(&mut self, now: Timestamp) -> Change {
        let renewals = self.leases.values().filter(|l| !l.listed_only).map(|l| l.seen);
        let drought = lease_drought(renewals, now);
        if self.sync.window.drought(now, drought) { Change::Relevant } else { Change::None }
    }

    /// The start of the evidence window at `now`, or why evidence cannot be trusted: a watch
    /// not listed yet, a broken or silent Lease watch, a drought of renewals.
    pub fn evidence_since(&self, now: Timestamp) -> Result<Timestamp, Suspension> {
        self.sync.window.since(now, self.synced(), !self.nodes.is_empty())
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn terminating_pod_count(&self) -> usize {
        self.pods.len()
    }

    /// Assembles the planner's input at `now`, with one policy's action history.
    pub fn observe(
        &self,
        now: Timestamp,
        recent_actions: Vec<PastAction>,
        acted_pods: BTreeSet<String>,
    ) -> Observed {
        let empty = Arc::new(BTreeMap::new());
        let nodes = self
            .nodes
            .values()
            .map(|n| {
                let mut n = n.clone();
                let lease = self.leases.get(&n.observation.name);
                n.observation.lease_renewed = lease.map(|l| l.renewed);
                n.observation.lease_seen = lease.map(|l| l.seen);
                n
            })
            .collect();
        let pods = self
            .pods
            .values()
            .map(|r| {
                let mut view = r.view.clone();
                view.namespace_labels =
                    self.namespaces.get(&view.namespace).cloned().unwrap_or_else(|| empty.clone());
                view.has_rwo_volume = r
                    .claims
                    .iter()
                    .any(|c| self.rwo_claims.contains(&format!("{}/{c}", view.namespace)));
                view
            })
            .collect();
        let mut pods: Vec<PodView> = pods;
        let analysis = self.analyze(&pods, now);
        let blocking: HashMap<&str, &WorkloadRef> = analysis
            .blocked
            .iter()
            .flat_map(|b| b.pods.iter().map(move |p| (p.uid.as_str(), &b.workload)))
            .collect();
        for pod in &mut pods {
            pod.blocks_rollout = blocking.get(pod.uid.as_str()).map(|w| (*w).clone());
        }
        let evidence = self.evidence_since(now);
        Observed {
            nodes,
            pods,
            watch_synced_at: evidence.as_ref().ok().copied(),
            suspended: evidence.err(),
            recent_actions,
            acted_pods,
        }
    }
}

/// Two views of a node that no decision can tell apart.
fn same_node_evidence(a: &NodeView, b: &NodeView) -> bool {
    let (x, y) = (&a.observation, &b.observation);
    x.readiness == y.readiness
        && x.ready_transition == y.ready_transition
        && x.unschedulable == y.unschedulable
        && x.taints == y.taints
        && a.labels == b.labels
        && a.excluded == b.excluded
        && a.deleted == b.deleted
}
