//! The operator's compact view of the cluster, fed by one watch per kind.
//!
//! No full objects are kept: a node is a [`NodeView`] with its Lease's two instants joined in
//! (behind an `Arc`, so that the table's spare buckets cost a pointer, not a record, and the
//! planner's input shares the records instead of copying them; its label strings shared
//! between nodes through one [`Interner`]), a Lease is its renew time and when we saw it change,
//! a pod is a [`PodView`] (behind an `Arc` the same way, its repeated strings shared) and only
//! while it matters (Terminating, left not Ready, failed by a shutdown, Ready on a node that is
//! not), a namespace is its labels, a claim is whether it is ReadWriteOnce. [`ClusterState::observe`]
//! assembles the core's [`Observed`] from them.
//!
//! Every `now` passed in comes from [`crate::clock`]: evidence is timed by the instant *we* saw
//! it, never by the timestamps other machines wrote into the objects.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::hash::Hash;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim};

use super::intern::Interner;
use crate::adapters::{
    PodRecord, WatchedPod, node_view, pod_is_ready, pod_record, ready_pod_record,
};
use crate::core::observed::{REPAIRED_KEPT, RepairedPod};
use crate::core::quiet::quiet_until;
use crate::core::rollouts::{
    ReplicaSetView, RolloutAnalysis, WorkloadKind, WorkloadRef, WorkloadView, blocked_rollouts,
};
use crate::core::stamp::Stamp;
use crate::core::uid::Uid;
use crate::core::{
    EvidenceWindow, NodeControl, NodeObservation, NodeView, OWN_DELETIONS_COUNT_FOR, Observed,
    Outage, PastAction, PodView, Readiness, Suspension, lease_drought,
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

    /// Whether a (re)list of this kind restarts the evidence window: a relist of Nodes or
    /// Leases may hide a change made while the watch was down (a renewal, a Ready flip); one of
    /// Pods, Namespaces, claims or workloads says nothing about whether a node is dead.
    pub fn restarts_evidence(self) -> bool {
        matches!(self, WatchedKind::Node | WatchedKind::Lease)
    }

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
/// saw that value arrive (our clock, for decisions). Both always set, each in a [`Stamp`]'s 8
/// bytes (a `renewTime` is a `MicroTime`, our clock reads microseconds): 24 bytes a Lease, not 40.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    pub renewed: Stamp,
    pub seen: Stamp,
    /// Only listed, never seen changing: its `seen` is the list's instant, not a renewal's, so
    /// it does not count as a renewing kubelet for droughts.
    pub listed_only: bool,
    /// `spec.leaseDurationSeconds` (saturated to `u16`): a renewal gap shorter than this is no
    /// evidence of death, and the kubelet renews every quarter of it.
    pub duration_s: Option<u16>,
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
    /// A pod that no decision, report or count can depend on before this instant changed:
    /// re-plan then ([`ClusterState::next_deferred`]), or with the next relevant change,
    /// whichever comes first (see [`ClusterState::apply_pod`]).
    At(Timestamp),
}

/// One kind's records by key, and the shadow copy a (re)list fills before it replaces them
/// (so that objects deleted while the watch was down disappear). Keyed by `String` unless said
/// otherwise: the nodes' and Leases' by the node's name, shared with the node's record.
#[derive(Debug)]
struct Store<V, K = String> {
    live: HashMap<K, V>,
    relist: Option<HashMap<K, V>>,
}

impl<V, K> Default for Store<V, K> {
    fn default() -> Self {
        Store { live: HashMap::new(), relist: None }
    }
}

impl<V: PartialEq, K: Hash + Eq + Borrow<str>> Store<V, K> {
    /// Records `value`: into the (re)list being collected, or live. Returns whether the live
    /// records changed in a way `same` cannot tell apart (never during a relist).
    fn put_with(&mut self, key: K, value: V, same: impl Fn(&V, &V) -> bool) -> Change {
        if let Some(relist) = self.relist.as_mut() {
            relist.insert(key, value);
            return Change::None;
        }
        let changed = self.live.get(key.borrow()).is_none_or(|old| !same(old, &value));
        self.live.insert(key, value);
        if changed { Change::Relevant } else { Change::None }
    }

    fn put(&mut self, key: K, value: V) -> Change {
        self.put_with(key, value, |a, b| a == b)
    }

    /// Forgets `key`: in the (re)list being collected, or live. Returns whether the live
    /// records changed (never during a relist).
    fn remove(&mut self, key: &str) -> Change {
        if let Some(relist) = self.relist.as_mut() {
            relist.remove(key);
            return Change::None;
        }
        if self.live.remove(key).is_some() { Change::Relevant } else { Change::None }
    }
}

/// What a (re)list does to one kind's records, whatever they are.
trait Relist {
    fn start(&mut self);
    fn finish(&mut self);
}

impl<V, K> Relist for Store<V, K> {
    fn start(&mut self) {
        self.relist = Some(HashMap::new());
    }

    fn finish(&mut self) {
        if let Some(m) = self.relist.take() {
            self.live = m;
        }
    }
}

#[derive(Debug, Default)]
pub struct ClusterState {
    /// Each with its Lease's instants joined in, as the Lease store has them (see
    /// [`ClusterState::join_lease`]).
    nodes: Store<Arc<NodeView>, Arc<str>>,
    /// The one copy of each node label key and value, and of the kept pods' repeated strings.
    strings: Interner,
    leases: Store<LeaseRecord, Arc<str>>,
    /// The pods kept (Terminating, left not Ready, failed by a shutdown, Ready on a node that is
    /// not), by UID: each view behind an `Arc`, so that the table's spare buckets cost a pointer,
    /// not a record (a zone's outage keeps tens of thousands), and the planner's input shares
    /// the views instead of copying them; their repeated strings shared.
    pods: Store<KeptPod, Uid>,
    namespaces: Store<Arc<BTreeMap<String, String>>>,
    /// The labels of a namespace that has none (or is not known), shared by its pods' views.
    no_labels: Arc<BTreeMap<String, String>>,
    /// `namespace/name` of claims whose access modes include ReadWriteOnce(Pod).
    rwo_claims: Store<()>,
    /// Deployments and StatefulSets by UID (relisted apart).
    deployments: Store<WorkloadView>,
    stateful_sets: Store<WorkloadView>,
    replica_sets: Store<ReplicaSetView>,
    /// Nodes seen deleted (by a watch event, not missing from a relist), by name, with when:
    /// kept while pods still reference them, and those this operator deleted for
    /// [`OWN_DELETIONS_COUNT_FOR`] (the storm guard still counts them).
    tombstones: HashMap<String, (NodeView, Timestamp)>,
    /// Node UIDs this operator deleted itself, with when: their tombstones are its own write,
    /// never evidence for its own decisions.
    own_node_deletions: HashMap<String, Timestamp>,
    /// Nodes whose Ready condition is False or Unknown, by name: the pods on them that are
    /// Ready=True are kept too (`readyOnDeadNode`), listed once when the node leaves Ready
    /// (after the pods' list, if one is under way: [`ClusterState::take_nodes_to_list`]), then
    /// followed by the pod watch. With each, the UIDs of its pods the pod watch delivered since:
    /// the listed copy of those may be older.
    unready_nodes: HashMap<String, HashSet<Uid>>,
    /// Nodes whose pods are to be listed.
    nodes_to_list: Vec<String>,
    /// Pods seen left Ready=False that turned Ready again, by UID, for
    /// [`REPAIRED_KEPT`]: the stale-readiness rule's report of what it waited on.
    repaired: HashMap<String, RepairedPod>,
    /// Pod changes whose re-plan waits for an instant ([`Change::At`]), by UID, and the same
    /// by instant.
    deferred: HashMap<String, Timestamp>,
    deferred_by_time: BTreeSet<(Timestamp, String)>,
    sync: Sync,
}

/// A pod as kept: its view as the planner reads it, with its namespace's labels and whether it
/// mounts a single-writer claim filled in as the state had them when the view was made (a
/// namespace or claim that changes since refreshes it; [`ClusterState::observe`] checks both
/// again), and what the second is made of.
#[derive(Clone, Debug, PartialEq)]
struct KeptPod {
    view: Arc<PodView>,
    /// The names of the claims it mounts.
    claims: Vec<String>,
    /// It mounts a single-writer volume inline (not through a claim).
    inline_rwo: bool,
}

/// What a kept pod's view takes from the other stores: its namespace's labels and whether a
/// claim it mounts is single-writer.
struct PodContext<'a> {
    namespaces: &'a HashMap<String, Arc<BTreeMap<String, String>>>,
    rwo_claims: &'a HashMap<String, ()>,
    no_labels: &'a Arc<BTreeMap<String, String>>,
}

impl PodContext<'_> {
    /// Makes `view` (of a pod mounting `claims`, and a single-writer volume inline if
    /// `inline_rwo`) carry the namespace labels and single-writer verdict the stores have now;
    /// a view that carries them already is left as it is, shared.
    fn apply(&self, view: &mut Arc<PodView>, claims: &[String], inline_rwo: bool) {
        let labels = self.namespaces.get(&*view.namespace).unwrap_or(self.no_labels);
        let rwo = inline_rwo
            || claims.iter().any(|c| self.rwo_claims.contains_key(&claim_key(&view.namespace, c)));
        let same_labels =
            Arc::ptr_eq(labels, &view.namespace_labels) || **labels == *view.namespace_labels;
        if !same_labels || rwo != view.has_rwo_volume {
            let view = Arc::make_mut(view);
            (view.namespace_labels, view.has_rwo_volume) = (labels.clone(), rwo);
        }
    }
}

impl ClusterState {
    pub fn new() -> Self {
        Self::default()
    }

    fn store(&mut self, kind: WatchedKind) -> &mut dyn Relist {
        match kind {
            WatchedKind::Node => &mut self.nodes,
            WatchedKind::Lease => &mut self.leases,
            WatchedKind::Pod => &mut self.pods,
            WatchedKind::Namespace => &mut self.namespaces,
            WatchedKind::PersistentVolumeClaim => &mut self.rwo_claims,
            WatchedKind::Deployment => &mut self.deployments,
            WatchedKind::StatefulSet => &mut self.stateful_sets,
            WatchedKind::ReplicaSet => &mut self.replica_sets,
        }
    }

    /// A (re)list of `kind` starts: its objects are collected aside until it completes.
    pub fn list_started(&mut self, kind: WatchedKind) {
        self.store(kind).start();
        if kind == WatchedKind::Pod {
            // The list brings every pod of each node not Ready now, kept as it comes.
            self.nodes_to_list.clear();
        }
    }

    /// A (re)list of `kind` completed at `now`: its objects replace the old ones and, for Nodes
    /// and Leases, the evidence window restarts.
    pub fn list_done(&mut self, kind: WatchedKind, now: Timestamp) -> Change {
        self.store(kind).finish();
        if matches!(kind, WatchedKind::Namespace | WatchedKind::PersistentVolumeClaim) {
            self.refresh_pod_views(None);
        }
        if kind.restarts_evidence() {
            // Nodes listed while Leases changed, or Leases relisted under the nodes.
            let names: Vec<Arc<str>> = self.nodes.live.keys().cloned().collect();
            for name in names {
                self.join_lease(&name);
            }
        }
        self.sync.listed.insert(kind);
        if kind.restarts_evidence() {
            self.sync.window.listed(kind == WatchedKind::Lease, now);
        }
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
        view.labels = self.strings.node_labels(&view.labels);
        // One copy of the name for the record, the plans and the hostname label.
        self.strings.share(&mut view.observation.name);
        // The tool's key is the same on every node it manages (often one of their labels).
        if let Some(managed) = view.control.managed_by.as_mut() {
            self.strings.share(&mut managed.marker);
        }
        let name = view.observation.name.clone();
        // A Node re-created under the same name is a new node, not the deleted one.
        self.tombstones.remove(&*name);
        let before = self.nodes.live.get(&name).filter(|b| b.control.uid == view.control.uid);
        let was_ready = before.map(|b| b.observation.readiness == Readiness::Ready);
        let last_outage = before.and_then(|b| b.control.rare.last_outage);
        // The kubelet posted the node's status: a sign of life, timed when we saw it.
        view.observation.heartbeat_seen = match before {
            Some(b) if b.observation.ready_heartbeat != view.observation.ready_heartbeat => {
                Some(now).into()
            }
            Some(b) => b.observation.heartbeat_seen,
            None => Stamp::NONE,
        };
        // A graceful shutdown is timed from when we saw it begin, by our clock.
        if view.control.rare.lifecycle.shutting_down {
            let earlier = before.filter(|b| b.control.rare.lifecycle.shutting_down);
            let seen = earlier.and_then(|b| b.control.rare.lifecycle.shutdown_seen).or(Some(now));
            view.control.rare.update(|r| r.lifecycle.shutdown_seen = seen);
        }
        if view.observation.readiness != Readiness::Ready {
            view.observation.not_ready_seen = match before {
                Some(b) if was_ready == Some(false) => {
                    b.observation.not_ready_seen.get().or(Some(now))
                }
                _ => Some(now),
            }
            .into();
            // Only a change we saw ourselves starts an outage we watched.
            view.control.left_ready_seen = match before {
                Some(_) if was_ready == Some(true) => Some(now).into(),
                Some(b) => b.control.left_ready_seen,
                None => Stamp::NONE,
            };
            set_last_outage(&mut view.control, last_outage);
        } else {
            view.control.ready_seen = match before {
                Some(b) if was_ready == Some(true) => b.control.ready_seen.get().or(Some(now)),
                _ => Some(now),
            }
            .into();
            let outage = match before {
                Some(b) if was_ready == Some(false) => b
                    .control
                    .left_ready_seen
                    .get()
                    .map(|from| Outage { from, to: now })
                    .or(last_outage),
                _ => last_outage,
            };
            set_last_outage(&mut view.control, outage);
        }
        let unready =
            matches!(view.observation.readiness, Readiness::NotReady | Readiness::Unknown);
        self.follow_ready_pods(&name, unready);
        let lease = self.leases.live.get(&name).copied();
        set_lease(&mut view.observation, lease);
        self.nodes.put_with(name, Arc::new(view), |a, b| same_node_evidence(a, b))
    }

    /// Starts keeping the Ready pods of a node that left Ready (its pods are to be listed), or
    /// stops and forgets them once it is Ready again.
    fn follow_ready_pods(&mut self, node: &str, unready: bool) {
        match (unready, self.unready_nodes.contains_key(node)) {
            (true, false) => {
                self.unready_nodes.insert(node.to_string(), HashSet::new());
                self.nodes_to_list.push(node.to_string());
            }
            (false, true) => {
                self.unready_nodes.remove(node);
                let on_node = |r: &KeptPod| {
                    r.view.ready_since.is_some() && r.view.node_name.as_deref() == Some(node)
                };
                self.pods.live.retain(|_, r| !on_node(r));
                if let Some(relist) = self.pods.relist.as_mut() {
                    relist.retain(|_, r| !on_node(r));
                }
            }
            _ => {}
        }
    }

    /// The nodes that left Ready since the last call, whose pods are to be listed
    /// ([`ClusterState::apply_listed_pods`]); none until the pods' (re)list has ended. That
    /// list brings the pods of every node not Ready when it started ([`list_started`] forgets
    /// those nodes), and the lists of the nodes that left Ready since wait for its end rather
    /// than add to an API server already streaming every pod (at tier L, 628 of them did).
    ///
    /// [`list_started`]: ClusterState::list_started
    pub fn take_nodes_to_list(&mut self) -> Vec<String> {
        if !self.pods_listed() {
            return Vec::new();
        }
        std::mem::take(&mut self.nodes_to_list)
    }

    /// Whether some node's pods are to be listed now.
    pub fn wants_node_lists(&self) -> bool {
        self.pods_listed() && !self.nodes_to_list.is_empty()
    }

    /// The pods were listed, and no relist of them is under way.
    fn pods_listed(&self) -> bool {
        self.sync.listed.contains(&WatchedKind::Pod) && self.pods.relist.is_none()
    }

    /// The pods of `node` as listed at `now` (`spec.nodeName=<node>`): its Ready pods are kept,
    /// unless the node is Ready again or the pod watch delivered the pod since the node left
    /// Ready (the watch's copy is as new as the list's, or newer).
    pub fn apply_listed_pods(&mut self, node: &str, pods: &[WatchedPod]) -> Change {
        let Some(delivered) = self.unready_nodes.get(node) else { return Change::None };
        let mut records = Vec::new();
        for pod in pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let on_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
            if !on_node
                || delivered.contains(uid.as_str())
                || self.pods.live.contains_key(uid.as_str())
            {
                continue;
            }
            records.extend(ready_pod_record(pod).map(|record| (uid, record)));
        }
        let mut change = Change::None;
        for (uid, record) in records {
            if self.keep_pod(uid, record) == Change::Relevant {
                change = Change::Relevant;
            }
        }
        change
    }

    /// The list of a node's pods failed: list them again, if the node is still not Ready.
    pub fn list_node_again(&mut self, node: &str) {
        if self.unready_nodes.contains_key(node) {
            self.nodes_to_list.push(node.to_string());
        }
    }

    /// A Node was deleted, seen at `now`: its last view is kept as a tombstone.
    pub fn delete_node(&mut self, name: &str, now: Timestamp) -> Change {
        if self.nodes.relist.is_none()
            && let Some(view) = self.nodes.live.get(name)
        {
            let mut view = NodeView::clone(view);
            // A tombstone is judged without its Lease, as it always was.
            set_lease(&mut view.observation, None);
            view.deleted = true;
            // Ours for good: the mark outlives the storm guard's window of our deletions.
            let ours = self.own_node_deletions.get(view.control.uid.as_str()).copied();
            view.control.rare.update(|r| r.deleted_by_us = ours);
            self.tombstones.insert(name.to_string(), (view, now));
        }
        self.nodes.remove(name);
        // Its pods go with it (PodGC): the pod watch forgets their records.
        self.unready_nodes.remove(name);
        Change::Relevant
    }

    /// This operator deleted the Node with this UID at `at` (recorded by the controller that
    /// sent the DELETE, before any other policy in Enforce decides again).
    pub fn node_deleted_by_us(&mut self, uid: &str, at: Timestamp) {
        self.own_node_deletions.insert(uid.to_string(), at);
        // The watch may have delivered the deletion first.
        for (view, _) in self.tombstones.values_mut().filter(|(v, _)| v.control.uid == uid) {
            view.control.rare.update(|r| r.deleted_by_us = Some(at));
        }
    }

    /// A kubelet Lease of the kubelet's 40 s was added or changed, seen at `now` (see
    /// [`ClusterState::apply_lease_declaring`]).
    pub fn apply_lease(
        &mut self,
        name: &str,
        renewed: Option<Timestamp>,
        now: Timestamp,
    ) -> Change {
        self.apply_lease_declaring(name, renewed, Some(40), now)
    }

    /// A kubelet Lease was added or changed, seen at `now`, declaring `duration_s`
    /// (`spec.leaseDurationSeconds`). A new `renewTime` value is a renewal seen now, whatever
    /// instant the kubelet wrote into it.
    pub fn apply_lease_declaring(
        &mut self,
        name: &str,
        renewed: Option<Timestamp>,
        duration_s: Option<u16>,
        now: Timestamp,
    ) -> Change {
        let restarted = self.sync.window.lease_event(now, !self.nodes.live.is_empty());
        let change = if restarted { Change::Relevant } else { Change::None };
        let Some(renewed) = renewed else { return change };
        let listing = self.leases.relist.is_some();
        let old = self.leases.live.get(name).copied();
        let record = match old {
            Some(old) if old.renewed == Stamp::from(renewed) => LeaseRecord { duration_s, ..old },
            _ => LeaseRecord {
                renewed: renewed.into(),
                seen: now.into(),
                listed_only: listing && old.is_none(),
                duration_s,
            },
        };
        // The interned name, as its node's record holds it: a renewal allocates no key.
        let key = self.strings.intern(name);
        if listing {
            return self.leases.put(key, record);
        }
        self.leases.put(key, record);
        self.join_lease(name);
        // A renewal only matters for a node that is not Ready: it postpones its death.
        let node_ready =
            self.nodes.live.get(name).is_some_and(|n| n.observation.readiness == Readiness::Ready);
        if node_ready { change } else { Change::Relevant }
    }

    pub fn delete_lease(&mut self, name: &str) -> Change {
        self.leases.remove(name);
        self.join_lease(name);
        Change::Relevant
    }

    /// A pod was added or changed, seen at `now`: kept only while Terminating, left
    /// Ready=False with every container ready, or left Failed by a graceful node shutdown. When
    /// it was first seen so is ours, and kept.
    ///
    /// Decide only what changed: a pod that starts Terminating on a Ready node, within its
    /// grace period, is what every rolling update and scale-down makes, and no rule, report or
    /// count can depend on it before its grace period ends ([`crate::core::quiet`]).
    /// Its changes, and its removal when its kubelet finishes it, re-plan nothing now: the
    /// re-plan is deferred to that instant ([`Change::At`]), and a pod gone by then asks for
    /// none.
    pub fn apply_pod(&mut self, pod: &WatchedPod, now: Timestamp) -> Change {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let kept = self.pods.live.contains_key(uid);
        let change = self.apply_pod_now(pod, now);
        self.defer(uid, kept, change, now)
    }

    /// What a change of the pod `uid` (`kept` before it) asks for once deferral is weighed. A
    /// pod kept and not deferred may be in a plan's reports: its changes re-plan now. A pod new
    /// to the state, or deferred until after `now`, has been in no report: while it stays
    /// deferrable its changes re-plan at its instant, and its removal not at all.
    fn defer(&mut self, uid: &str, kept: bool, change: Change, now: Timestamp) -> Change {
        if change != Change::Relevant {
            return change;
        }
        let deferred = self.deferred.remove(uid).filter(|at| {
            self.deferred_by_time.remove(&(*at, uid.to_string()));
            *at > now
        });
        if kept && deferred.is_none() {
            return change;
        }
        let Some(record) = self.pods.live.get(uid) else {
            return Change::None;
        };
        match self.deferrable_until(record, now) {
            Some(at) => {
                self.deferred.insert(uid.to_string(), at);
                self.deferred_by_time.insert((at, uid.to_string()));
                Change::At(at)
            }
            None => change,
        }
    }

    /// Until when no decision, report or count can depend on `record`
    /// ([`crate::core::quiet::quiet_until`]), with node readiness as this state has it.
    fn deferrable_until(&self, record: &KeptPod, now: Timestamp) -> Option<Timestamp> {
        let ready = |node: &str| {
            !self.unready_nodes.contains_key(node)
                && self
                    .nodes
                    .live
                    .get(node)
                    .is_some_and(|n| !n.deleted && n.observation.readiness == Readiness::Ready)
        };
        let pods = self.pods.live.values().map(|r| &*r.view);
        quiet_until(&record.view, ready, pods, &self.replica_sets.live, now)
    }

    /// The earliest instant a deferred pod change asks for a re-plan.
    pub fn next_deferred(&self) -> Option<Timestamp> {
        self.deferred_by_time.first().map(|(at, _)| *at)
    }

    /// Forgets the deferred changes due by `now`: whether there were any (then re-plan).
    pub fn take_due_deferred(&mut self, now: Timestamp) -> bool {
        let mut any = false;
        while let Some((at, uid)) = self.deferred_by_time.first().cloned() {
            if at > now {
                break;
            }
            self.deferred_by_time.pop_first();
            self.deferred.remove(&uid);
            any = true;
        }
        any
    }

    fn apply_pod_now(&mut self, pod: &WatchedPod, now: Timestamp) -> Change {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let unready_node = node.and_then(|n| self.unready_nodes.get_mut(n));
        let on_unready_node = unready_node.is_some();
        if let Some(delivered) = unready_node {
            delivered.insert(Uid::new(&uid));
        }
        let record = match pod_record(pod) {
            None if on_unready_node => ready_pod_record(pod),
            record => record,
        };
        let repaired = self.pods.live.get(uid.as_str()).filter(|r| r.view.stale_seen.is_some());
        if let Some(before) = repaired.filter(|_| pod_is_ready(pod)) {
            let view = PodView::clone(&before.view);
            self.repaired.retain(|_, r| now.duration_since(r.repaired_at) < REPAIRED_KEPT);
            self.repaired.insert(uid.clone(), RepairedPod { view, repaired_at: now });
        }
        match record {
            Some(mut record) => {
                let before = self.pods.live.get(uid.as_str()).map(|r| &*r.view);
                let view = &mut record.view;
                // A deletion re-issued with a shorter grace period (the kubelet's final DELETE)
                // moves the deletionTimestamp: time is counted from when we saw that one.
                let same_deletion = |b: &&PodView| {
                    (b.deletion_timestamp, b.deletion_grace_seconds)
                        == (view.deletion_timestamp, view.deletion_grace_seconds)
                };
                // Kept from before, else now; never earlier than seen (`at_or_after`).
                let seen = |kept: bool, before: Option<Stamp>| match before {
                    _ if !kept => Stamp::NONE,
                    Some(before) if before.is_some() => before,
                    _ => Stamp::at_or_after(now),
                };
                view.terminating_seen = seen(
                    view.deletion_timestamp.is_some(),
                    before.filter(same_deletion).map(|b| b.terminating_seen),
                );
                view.stale_seen =
                    seen(view.stale_ready_since.is_some(), before.map(|b| b.stale_seen));
                view.shutdown_seen =
                    seen(view.shutdown_reason.is_some(), before.map(|b| b.shutdown_seen));
                self.keep_pod(uid, record)
            }
            None => self.pods.remove(&uid),
        }
    }

    /// Joins the live Lease of node `name` (or its absence) into the node's live record, so
    /// that the record reads as the Lease store does: what [`ClusterState::observe`] once did
    /// for each node on each call, done once for each change.
    fn join_lease(&mut self, name: &str) {
        let lease = self.leases.live.get(name).copied();
        if let Some(node) = self.nodes.live.get_mut(name) {
            let o = &node.observation;
            if (o.lease_renewed, o.lease_seen, o.lease_duration_s) != lease_fields(lease) {
                set_lease(&mut Arc::make_mut(node).observation, lease);
            }
        }
    }

    pub fn delete_pod(&mut self, uid: &str, now: Timestamp) -> Change {
        let change = self.pods.remove(uid);
        self.defer(uid, true, change, now)
    }

    /// A pod was deleted, as the pod watch delivers it (with its node).
    pub fn pod_deleted(&mut self, pod: &WatchedPod, now: Timestamp) -> Change {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        if let Some(delivered) = node.and_then(|n| self.unready_nodes.get_mut(n)) {
            delivered.insert(Uid::new(&uid));
        }
        let change = self.pods.remove(&uid);
        self.defer(&uid, true, change, now)
    }

    pub fn apply_namespace(&mut self, ns: &Namespace) -> Change {
        let name = ns.metadata.name.as_deref().unwrap_or_default();
        let labels = Arc::new(ns.metadata.labels.clone().unwrap_or_default());
        let change = self.namespaces.put(name.to_string(), labels);
        self.refresh_pod_views_if(change, name);
        change
    }

    pub fn delete_namespace(&mut self, name: &str) -> Change {
        let change = self.namespaces.remove(name);
        self.refresh_pod_views_if(change, name);
        Change::Relevant
    }

    /// A claim was added or changed: only whether it is ReadWriteOnce(Pod) is kept.
    pub fn apply_claim(&mut self, claim: &PersistentVolumeClaim) -> Change {
        let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
        let key = claim_key(namespace, claim.metadata.name.as_deref().unwrap_or_default());
        let rwo = claim.spec.as_ref().and_then(|s| s.access_modes.as_ref()).is_some_and(|modes| {
            modes.iter().any(|m| m == "ReadWriteOnce" || m == "ReadWriteOncePod")
        });
        let change = if rwo { self.rwo_claims.put(key, ()) } else { self.rwo_claims.remove(&key) };
        self.refresh_pod_views_if(change, namespace);
        change
    }

    pub fn delete_claim(&mut self, namespace: &str, name: &str) -> Change {
        let change = self.rwo_claims.remove(&claim_key(namespace, name));
        self.refresh_pod_views_if(change, namespace);
        change
    }

    /// Keeps `record` as the pod `uid`: its repeated strings (labels, namespace, node, owner,
    /// phase) shared with every other record's, its namespace's labels and claims' verdict
    /// filled in.
    fn keep_pod(&mut self, uid: String, mut record: PodRecord) -> Change {
        let strings = &mut self.strings;
        let view = &mut record.view;
        view.labels = strings.label_set(&view.labels);
        strings.share(&mut view.namespace);
        for s in view.node_name.iter_mut().chain(view.phase.iter_mut()) {
            strings.share(s);
        }
        if let Some(owner) = view.owner.as_mut() {
            for s in [&mut owner.kind, &mut owner.name, &mut owner.uid] {
                strings.share(s);
            }
        }
        let inline_rwo = view.has_rwo_volume;
        let mut kept = KeptPod { view: Arc::new(record.view), claims: record.claims, inline_rwo };
        self.pod_context().apply(&mut kept.view, &kept.claims, inline_rwo);
        self.pods.put(uid.into(), kept)
    }

    fn pod_context(&self) -> PodContext<'_> {
        PodContext {
            namespaces: &self.namespaces.live,
            rwo_claims: &self.rwo_claims.live,
            no_labels: &self.no_labels,
        }
    }

    /// After a namespace or claim event in `namespace`: its pods' views, if the live store
    /// changed (during a relist it does not; its end refreshes every view).
    fn refresh_pod_views_if(&mut self, change: Change, namespace: &str) {
        if change != Change::None {
            self.refresh_pod_views(Some(namespace));
        }
    }

    /// Brings the kept pods' views (of `namespace`, or all) up to date with their namespaces'
    /// labels and claims, after one of those changed (otherwise every plan would copy the views
    /// that differ).
    fn refresh_pod_views(&mut self, namespace: Option<&str>) {
        // The fields apart: the pods' store is written while the others are read.
        let context = PodContext {
            namespaces: &self.namespaces.live,
            rwo_claims: &self.rwo_claims.live,
            no_labels: &self.no_labels,
        };
        let relist = self.pods.relist.iter_mut().flat_map(|r| r.values_mut());
        let kept = self.pods.live.values_mut().chain(relist);
        for kept in kept.filter(|k| namespace.is_none_or(|ns| *k.view.namespace == *ns)) {
            context.apply(&mut kept.view, &kept.claims, kept.inline_rwo);
        }
    }

    /// A Deployment or StatefulSet was added or changed.
    pub fn apply_workload(&mut self, workload: WorkloadView) -> Change {
        let store = match workload.kind {
            WorkloadKind::Deployment => &mut self.deployments,
            WorkloadKind::StatefulSet => &mut self.stateful_sets,
        };
        store.put(workload.uid.clone(), workload)
    }

    pub fn delete_workload(&mut self, uid: &str) -> Change {
        match self.deployments.remove(uid) {
            Change::None => self.stateful_sets.remove(uid),
            removed => removed,
        }
    }

    pub fn apply_replica_set(&mut self, rs: ReplicaSetView) -> Change {
        self.replica_sets.put(rs.uid.clone(), rs)
    }

    pub fn delete_replica_set(&mut self, uid: &str) -> Change {
        self.replica_sets.remove(uid)
    }

    /// The blocked Recreate Deployments and StatefulSets at `now`.
    pub fn rollout_analysis(&self, now: Timestamp) -> RolloutAnalysis {
        let pods: Vec<&PodView> = self.pods.live.values().map(|r| &*r.view).collect();
        self.analyze(&pods, now)
    }

    fn analyze(&self, pods: &[impl Borrow<PodView>], now: Timestamp) -> RolloutAnalysis {
        let workloads: Vec<WorkloadView> = self
            .deployments
            .live
            .values()
            .chain(self.stateful_sets.live.values())
            .cloned()
            .collect();
        blocked_rollouts(
            &workloads,
            &self.replica_sets.live,
            pods,
            |node| self.nodes.live.get(node).map(|n| n.observation.readiness == Readiness::Ready),
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
        self.prune_tombstones(now);
        let renewals = self.leases.live.values().filter(|l| !l.listed_only);
        let renewals = renewals.filter_map(|l| Some((l.seen.get()?, l.duration_s)));
        let drought = lease_drought(renewals, now);
        if self.sync.window.drought(now, drought) { Change::Relevant } else { Change::None }
    }

    /// Forgets the tombstones no pod references any more, but those of Nodes this operator
    /// deleted within [`OWN_DELETIONS_COUNT_FOR`].
    fn prune_tombstones(&mut self, now: Timestamp) {
        let own = &mut self.own_node_deletions;
        own.retain(|_, at| now.duration_since(*at) < OWN_DELETIONS_COUNT_FOR);
        let referenced: BTreeSet<&str> =
            self.pods.live.values().filter_map(|r| r.view.node_name.as_deref()).collect();
        self.tombstones.retain(|name, (view, _)| {
            let counted = view
                .control
                .rare
                .deleted_by_us
                .is_some_and(|at| now.duration_since(at) < OWN_DELETIONS_COUNT_FOR);
            referenced.contains(name.as_str())
                || own.contains_key(view.control.uid.as_str())
                || counted
        });
    }

    /// The tombstones to show the planner at `now`, marked when the deletion was ours.
    fn tombstone_views(&self, now: Timestamp) -> impl Iterator<Item = NodeView> + '_ {
        let referenced: BTreeSet<&str> =
            self.pods.live.values().filter_map(|r| r.view.node_name.as_deref()).collect();
        self.tombstones.iter().filter_map(move |(name, (view, _))| {
            let ours = view
                .control
                .rare
                .deleted_by_us
                .or(self.own_node_deletions.get(view.control.uid.as_str()).copied());
            let counted = ours.is_some_and(|at| now.duration_since(at) < OWN_DELETIONS_COUNT_FOR);
            if !referenced.contains(name.as_str()) && !counted {
                return None;
            }
            let mut view = view.clone();
            view.control.rare.update(|r| r.deleted_by_us = ours);
            Some(view)
        })
    }

    /// The start of the evidence window at `now`, or why evidence cannot be trusted: a watch
    /// not listed yet, a broken or silent Lease watch, a drought of renewals.
    pub fn evidence_since(&self, now: Timestamp) -> Result<Timestamp, Suspension> {
        self.sync.window.since(now, self.synced(), !self.nodes.live.is_empty())
    }

    pub fn node_count(&self) -> usize {
        self.nodes.live.len()
    }

    pub fn terminating_pod_count(&self) -> usize {
        self.pods.live.len()
    }

    /// Assembles the planner's input at `now`, with one policy's action history.
    pub fn observe(
        &self,
        now: Timestamp,
        recent_actions: Vec<PastAction>,
        acted_pods: BTreeSet<String>,
    ) -> Observed {
        let nodes = self
            .nodes
            .live
            .values()
            .cloned()
            .chain(self.tombstone_views(now).map(Arc::new))
            .collect();
        let pods = self
            .pods
            .live
            .values()
            .map(|kept| {
                let mut view = kept.view.clone();
                // Shared with the record unless a namespace or claim changed under it since.
                self.pod_context().apply(&mut view, &kept.claims, kept.inline_rwo);
                view
            })
            .collect();
        let mut pods: Vec<Arc<PodView>> = pods;
        let analysis = self.analyze(&pods, now);
        let blocking: HashMap<&str, &WorkloadRef> = analysis
            .blocked
            .iter()
            .flat_map(|b| b.pods.iter().map(move |p| (p.uid.as_str(), &b.workload)))
            .collect();
        for pod in &mut pods {
            // Only the views of pods that hold a rollout are copied (a record never has one).
            if let Some(workload) = blocking.get(pod.uid.as_str()) {
                Arc::make_mut(pod).blocks_rollout = Some(Box::new((*workload).clone()));
            }
        }
        let evidence = self.evidence_since(now);
        let mut repaired: Vec<RepairedPod> = self
            .repaired
            .values()
            .filter(|r| now.duration_since(r.repaired_at) < REPAIRED_KEPT)
            .map(|r| {
                let mut r = r.clone();
                r.view.namespace_labels =
                    self.namespaces.live.get(&*r.view.namespace).unwrap_or(&self.no_labels).clone();
                r
            })
            .collect();
        repaired.sort_by(|a, b| a.view.uid.cmp(&b.view.uid));
        Observed {
            nodes,
            pods,
            watch_synced_at: evidence.as_ref().ok().copied(),
            suspended: evidence.err(),
            recent_actions,
            others_actions: Vec::new(),
            acted_pods,
            backoff: Default::default(),
            storm: Default::default(),
            acting: Default::default(),
            repaired,
        }
    }
}

/// Carries the node's last watched outage into its new view; on the hot path of every node
/// update, so a node that never had one gets no box for its rare parts.
fn set_last_outage(control: &mut NodeControl, outage: Option<Outage>) {
    if control.rare.last_outage != outage {
        control.rare.update(|r| r.last_outage = outage);
    }
}

/// A node's Lease instants as the planner reads them: its `renewTime` and when we saw it.
fn set_lease(observation: &mut NodeObservation, lease: Option<LeaseRecord>) {
    (observation.lease_renewed, observation.lease_seen, observation.lease_duration_s) =
        lease_fields(lease);
}

/// A Lease's `renewTime`, when we saw it, and its declared duration, as a node's record keeps
/// them.
fn lease_fields(lease: Option<LeaseRecord>) -> (Stamp, Stamp, Option<u16>) {
    (
        lease.map_or(Stamp::NONE, |l| l.renewed),
        lease.map_or(Stamp::NONE, |l| l.seen),
        lease.and_then(|l| l.duration_s),
    )
}

fn claim_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Two views of a node that no decision can tell apart.
fn same_node_evidence(a: &NodeView, b: &NodeView) -> bool {
    let (x, y) = (&a.observation, &b.observation);
    x.readiness == y.readiness
        // A status heartbeat matters only where it postpones a death.
        && (x.readiness == Readiness::Ready || x.heartbeat_seen == y.heartbeat_seen)
        && x.ready_transition == y.ready_transition
        && x.unschedulable == y.unschedulable
        // The lifecycle controller's taints follow the Ready condition (and a new node's come
        // and go while it starts): only those a decision reads are compared.
        && x.decision_taints().eq(y.decision_taints())
        && a.labels == b.labels
        && a.excluded == b.excluded
        && a.deleted == b.deleted
        && a.control == b.control
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_remembered_in_24_bytes_under_its_nodes_name() {
        assert_eq!(std::mem::size_of::<LeaseRecord>(), 24);
        // The Lease's record and its node's share one copy of the name.
        let mut s = synced(0, &[("n1", "True")]);
        s.apply_lease("n1", Some(at(1)), at(1));
        s.apply_lease("n1", Some(at(2)), at(2));
        let (node_key, _) = s.nodes.live.get_key_value("n1").expect("node kept");
        let (lease_key, lease) = s.leases.live.get_key_value("n1").expect("lease kept");
        assert!(Arc::ptr_eq(node_key, lease_key), "one copy of the name");
        assert_eq!((lease.renewed.get(), lease.seen.get()), (Some(at(2)), Some(at(2))));
        let view = s.nodes.live.get("n1").expect("node kept");
        assert!(Arc::ptr_eq(node_key, &view.observation.name), "the record's name too");
        // A Lease seen before its node: the node takes the Lease's copy.
        s.apply_lease("n2", Some(at(3)), at(3));
        s.apply_node(&node("n2", "True"), at(4));
        let (node_key, _) = s.nodes.live.get_key_value("n2").expect("node kept");
        let (lease_key, _) = s.leases.live.get_key_value("n2").expect("lease kept");
        assert!(Arc::ptr_eq(node_key, lease_key), "one copy of the name, the Lease's first");
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("test instant")
    }

    fn node(name: &str, ready: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"conditions": [
                {"type": "Ready", "status": ready, "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
        }))
        .expect("valid node")
    }

    /// A state with every kind listed at `t`, holding the given nodes.
    fn synced(t: i64, nodes: &[(&str, &str)]) -> ClusterState {
        let mut s = ClusterState::new();
        for kind in WatchedKind::ALL {
            s.list_started(kind);
            if kind == WatchedKind::Node {
                for (name, ready) in nodes {
                    s.apply_node(&node(name, ready), at(t));
                }
            }
            s.list_done(kind, at(t));
        }
        s
    }

    fn seen(s: &ClusterState, node: &str) -> (Option<Timestamp>, Option<Timestamp>) {
        let observed = s.observe(at(1000), Vec::new(), BTreeSet::new());
        let n = observed.nodes.iter().find(|n| &*n.observation.name == node).expect("node");
        (n.observation.lease_seen.get(), n.observation.not_ready_seen.get())
    }

    #[test]
    fn a_graceful_shutdown_is_timed_from_when_we_saw_it_begin() {
        let mut s = synced(0, &[("n1", "True")]);
        let shutting = |status: &str, transition: &str| -> Node {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "n1"},
                "status": {"conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"},
                    {"type": "GracefulNodeShutdownInProgress", "status": status,
                     "lastTransitionTime": transition}]}
            }))
            .expect("valid node")
        };
        let shutdown_seen = |s: &ClusterState| {
            let observed = s.observe(at(1000), Vec::new(), BTreeSet::new());
            observed.nodes[0].control.rare.lifecycle.shutdown_seen
        };
        // The condition's lastTransitionTime (another clock) is not when we saw it.
        s.apply_node(&shutting("True", "2020-01-01T00:00:00Z"), at(10));
        assert_eq!(shutdown_seen(&s), Some(at(10)));
        s.apply_node(&shutting("True", "2020-01-01T00:00:00Z"), at(20));
        assert_eq!(shutdown_seen(&s), Some(at(10)), "kept while it lasts");
        s.apply_node(&shutting("False", "2020-01-01T00:01:00Z"), at(30));
        assert_eq!(shutdown_seen(&s), None);
        s.apply_node(&shutting("True", "2020-01-01T00:02:00Z"), at(40));
        assert_eq!(shutdown_seen(&s), Some(at(40)), "a new shutdown, timed anew");
    }

    #[test]
    fn a_renewal_is_timed_when_seen_whatever_its_renew_time_says() {
        let mut s = synced(0, &[("n1", "False")]);
        // The kubelet's clock runs 5 minutes behind: its renewTime is far in the past.
        s.apply_lease("n1", Some(at(-300)), at(5));
        assert_eq!(seen(&s, "n1").0, Some(at(5)));
        // The same renewTime again is no renewal.
        s.apply_lease("n1", Some(at(-300)), at(7));
        assert_eq!(seen(&s, "n1").0, Some(at(5)));
        // A new value is, even an older one.
        s.apply_lease("n1", Some(at(-301)), at(9));
        assert_eq!(seen(&s, "n1").0, Some(at(9)));
    }

    #[test]
    fn not_ready_is_timed_from_when_first_seen_and_reset_by_ready() {
        let mut s = synced(0, &[("n1", "True")]);
        assert_eq!(seen(&s, "n1").1, None);
        s.apply_node(&node("n1", "False"), at(10));
        s.apply_node(&node("n1", "Unknown"), at(20));
        assert_eq!(seen(&s, "n1").1, Some(at(10)), "still not Ready since 10");
        s.apply_node(&node("n1", "True"), at(30));
        s.apply_node(&node("n1", "Unknown"), at(40));
        assert_eq!(seen(&s, "n1").1, Some(at(40)));
    }

    #[test]
    fn a_relist_drops_what_vanished_and_keeps_unchanged_renewals() {
        let mut s = synced(0, &[("n1", "False"), ("n2", "False")]);
        s.apply_lease("n1", Some(at(1)), at(1));
        s.apply_lease("n2", Some(at(1)), at(1));
        s.list_started(WatchedKind::Lease);
        s.apply_lease("n1", Some(at(1)), at(50));
        assert_eq!(s.list_done(WatchedKind::Lease, at(50)), Change::Relevant);
        assert_eq!(seen(&s, "n1").0, Some(at(1)), "unchanged renewTime keeps its instant");
        assert_eq!(seen(&s, "n2").0, None, "the Lease gone during the relist is forgotten");
        assert_eq!(s.evidence_since(at(51)), Ok(at(50)), "the window restarts at the relist");
    }

    #[test]
    fn only_a_relist_of_nodes_or_leases_restarts_the_evidence_window() {
        let mut s = synced(0, &[("n1", "True")]);
        for (t, kind) in WatchedKind::ALL.into_iter().enumerate() {
            let t = 10 * (t as i64 + 1);
            // Lease events keep arriving, so the view is never silent.
            s.apply_lease("n1", Some(at(t)), at(t));
            let before = s.evidence_since(at(t));
            s.list_started(kind);
            s.list_done(kind, at(t));
            let want = if kind.restarts_evidence() { Ok(at(t)) } else { before };
            assert_eq!(s.evidence_since(at(t)), want, "a relist of {}", kind.as_str());
        }
        assert!(WatchedKind::Node.restarts_evidence() && WatchedKind::Lease.restarts_evidence());
    }

    #[test]
    fn a_silent_lease_view_suspends_evidence_until_renewals_resume() {
        let mut s = synced(0, &[("n1", "True")]);
        s.apply_lease("n1", Some(at(10)), at(10));
        assert_eq!(s.evidence_since(at(25)), Ok(at(0)));
        assert!(matches!(s.evidence_since(at(26)), Err(Suspension::Silent { .. })));
        assert_eq!(s.apply_lease("n1", Some(at(70)), at(70)), Change::Relevant);
        assert_eq!(s.evidence_since(at(71)), Ok(at(70)));
    }

    #[test]
    fn only_terminating_pods_and_rwo_claims_are_kept() {
        let mut s = synced(0, &[]);
        let pod = |deleting: bool| -> WatchedPod {
            let mut meta = serde_json::json!({"name": "p", "namespace": "ns", "uid": "u1"});
            if deleting {
                meta["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            serde_json::from_value(serde_json::json!({"metadata": meta})).expect("pod")
        };
        assert_eq!(s.apply_pod(&pod(false), at(1)), Change::None);
        assert_eq!(s.apply_pod(&pod(true), at(1)), Change::Relevant);
        assert_eq!(s.apply_pod(&pod(true), at(1)), Change::None, "unchanged");
        assert_eq!(s.terminating_pod_count(), 1);
        assert_eq!(s.delete_pod("u1", at(2)), Change::Relevant);
        assert_eq!(s.terminating_pod_count(), 0);

        let claim = |mode: &str| -> PersistentVolumeClaim {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "c", "namespace": "ns"}, "spec": {"accessModes": [mode]}
            }))
            .expect("claim")
        };
        assert_eq!(s.apply_claim(&claim("ReadWriteMany")), Change::None);
        assert_eq!(s.apply_claim(&claim("ReadWriteOnce")), Change::Relevant);
        assert_eq!(s.apply_claim(&claim("ReadWriteMany")), Change::Relevant);
    }

    /// A plan shares the kept pods' views; a namespace relabelled, or a claim seen after the
    /// pod, shows in the next plan (and the record is brought up to date, shared again).
    #[test]
    fn plans_share_pod_views_that_follow_their_namespace_and_claims() {
        let mut s = synced(0, &[]);
        let pod: WatchedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "ns", "uid": "u1",
                         "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": "n1", "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}}]},
        }))
        .expect("pod");
        s.apply_pod(&pod, at(1));
        let pod_of =
            |s: &ClusterState| s.observe(at(2), Vec::new(), BTreeSet::new()).pods[0].clone();
        let (first, second) = (pod_of(&s), pod_of(&s));
        assert!(Arc::ptr_eq(&first, &second), "two plans, one view");
        assert!(first.namespace_labels.is_empty() && !first.has_rwo_volume);

        let namespace = |team: &str| -> Namespace {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "ns", "labels": {"team": team}}
            }))
            .expect("namespace")
        };
        let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "data-db-0", "namespace": "ns"},
            "spec": {"accessModes": ["ReadWriteOnce"]},
        }))
        .expect("claim");
        s.apply_namespace(&namespace("a"));
        s.apply_claim(&claim);
        let (third, fourth) = (pod_of(&s), pod_of(&s));
        assert_eq!(third.namespace_labels.get("team").map(String::as_str), Some("a"));
        assert!(third.has_rwo_volume, "the claim seen after the pod");
        assert!(Arc::ptr_eq(&third, &fourth), "the record itself was brought up to date");

        s.apply_namespace(&namespace("b"));
        s.delete_claim("ns", "data-db-0");
        let fifth = pod_of(&s);
        assert_eq!(fifth.namespace_labels.get("team").map(String::as_str), Some("b"));
        assert!(!fifth.has_rwo_volume, "the claim deleted");
        s.delete_namespace("ns");
        assert!(pod_of(&s).namespace_labels.is_empty());
    }

    fn node_with_uid(name: &str, uid: &str, ready: &str) -> Node {
        let mut n = node(name, ready);
        n.metadata.uid = Some(uid.into());
        n
    }

    fn terminating_pod_on(node: &str) -> WatchedPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "p1",
                         "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"nodeName": node},
        }))
        .expect("pod")
    }

    fn view<'a>(observed: &'a Observed, name: &str) -> Option<&'a NodeView> {
        observed.nodes.iter().find(|n| &*n.observation.name == name).map(|n| &**n)
    }

    #[test]
    fn a_deleted_lease_leaves_no_renewal_to_judge_by() {
        let mut s = synced(0, &[("n1", "False")]);
        s.apply_lease("n1", Some(at(1)), at(1));
        assert_eq!(seen(&s, "n1").0, Some(at(1)));
        s.delete_lease("n1");
        assert_eq!(seen(&s, "n1").0, None, "no Lease: nothing seen, not 'since the window'");
        s.apply_lease("n1", Some(at(20)), at(20));
        assert_eq!(seen(&s, "n1").0, Some(at(20)));
    }

    #[test]
    fn a_node_reads_its_lease_as_the_lease_store_has_it() {
        let mut s = synced(0, &[("n1", "False")]);
        // A renewal while the Nodes are relisted: the relisted record reads it too.
        s.list_started(WatchedKind::Node);
        s.apply_node(&node("n1", "False"), at(2));
        s.apply_lease("n1", Some(at(3)), at(3));
        s.list_done(WatchedKind::Node, at(4));
        assert_eq!(seen(&s, "n1").0, Some(at(3)));
        // A Lease seen before its Node.
        s.apply_lease("n2", Some(at(5)), at(5));
        s.apply_node(&node_with_uid("n2", "u2", "False"), at(6));
        assert_eq!(seen(&s, "n2").0, Some(at(5)));
        // A tombstone is judged without its Lease, as before the Lease was joined in.
        s.apply_pod(&terminating_pod_on("n2"), at(7));
        s.delete_node("n2", at(8));
        let observed = s.observe(at(9), Vec::new(), BTreeSet::new());
        let gone = view(&observed, "n2").expect("a tombstone while a pod is on it");
        assert_eq!(
            (gone.observation.lease_renewed, gone.observation.lease_seen),
            (Stamp::NONE, Stamp::NONE)
        );
    }

    #[test]
    fn tombstones_only_for_nodes_seen_deleted_and_ours_marked() {
        let mut s = synced(0, &[]);
        s.apply_node(&node_with_uid("n1", "u1", "Unknown"), at(1));
        s.apply_node(&node_with_uid("n2", "u2", "Unknown"), at(1));
        s.apply_pod(&terminating_pod_on("n1"), at(1));
        s.delete_node("n1", at(5));
        let observed = s.observe(at(6), Vec::new(), BTreeSet::new());
        let gone = view(&observed, "n1").expect("a tombstone while a pod is on it");
        assert!(gone.deleted && gone.control.rare.deleted_by_us.is_none());
        // A Node we deleted ourselves: marked ours, and kept for the storm guard without pods.
        s.node_deleted_by_us("u2", at(7));
        s.delete_node("n2", at(7));
        s.refresh_evidence(at(8));
        let observed = s.observe(at(8), Vec::new(), BTreeSet::new());
        assert_eq!(view(&observed, "n2").and_then(|n| n.control.rare.deleted_by_us), Some(at(7)));
        // Re-created under the same name: a new node, not the deleted one.
        s.apply_node(&node_with_uid("n1", "u3", "True"), at(9));
        let observed = s.observe(at(9), Vec::new(), BTreeSet::new());
        assert!(view(&observed, "n1").is_some_and(|n| !n.deleted));
        // Ours age out of the storm guard.
        s.refresh_evidence(at(8 + 601));
        let observed = s.observe(at(8 + 601), Vec::new(), BTreeSet::new());
        assert!(view(&observed, "n2").is_none());
    }

    #[test]
    fn an_outage_is_ours_only_when_we_watched_it_start_and_end() {
        let mut s = synced(0, &[("n1", "True")]);
        s.apply_node(&node("n1", "Unknown"), at(10));
        s.apply_node(&node("n1", "True"), at(40));
        let observed = s.observe(at(41), Vec::new(), BTreeSet::new());
        let outage = view(&observed, "n1").and_then(|n| n.control.rare.last_outage);
        assert_eq!(outage, Some(crate::core::Outage { from: at(10), to: at(40) }));
        // A node first seen not Ready: its outage's start was not watched.
        let mut fresh = synced(0, &[("n2", "Unknown")]);
        fresh.apply_node(&node("n2", "True"), at(40));
        let observed = fresh.observe(at(41), Vec::new(), BTreeSet::new());
        assert_eq!(view(&observed, "n2").and_then(|n| n.control.rare.last_outage), None);
    }

    #[test]
    fn kept_pods_share_their_label_strings_and_match_as_before() {
        let mut s = synced(0, &[]);
        for uid in ["u1", "u2"] {
            let pod: WatchedPod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "namespace": "ns", "uid": uid,
                             "labels": {"app": "web", "pod-template-hash": "5d8f"},
                             "deletionTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"nodeName": "n1"},
            }))
            .expect("pod");
            s.apply_pod(&pod, at(1));
        }
        let observed = s.observe(at(2), Vec::new(), BTreeSet::new());
        let [a, b] = [0, 1].map(|i| observed.pods[i].labels.clone());
        assert_eq!(a.get("app"), Some("web"));
        assert_eq!(a, b);
        let (pa, pb) = (&a.pairs()[0], &b.pairs()[0]);
        assert!(Arc::ptr_eq(&pa.0, &pb.0) && Arc::ptr_eq(&pa.1, &pb.1), "one copy of each string");
        let [pa, pb] = [0, 1].map(|i| &observed.pods[i]);
        assert!(Arc::ptr_eq(&pa.namespace, &pb.namespace), "one copy of the namespace");
        let [na, nb] = [pa, pb].map(|p| p.node_name.clone().expect("scheduled"));
        assert!(Arc::ptr_eq(&na, &nb), "one copy of the node's name");
        let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
            serde_json::from_value(serde_json::json!({"matchLabels": {"app": "web"}}))
                .expect("selector");
        let selector = crate::core::selector::Selector::compile(Some(&selector)).expect("valid");
        assert!(selector.matches(&a));
    }

    #[test]
    fn when_a_pod_was_first_seen_terminating_is_kept() {
        let mut s = synced(0, &[]);
        s.apply_pod(&terminating_pod_on("n1"), at(3));
        s.apply_pod(&terminating_pod_on("n1"), at(9));
        let observed = s.observe(at(10), Vec::new(), BTreeSet::new());
        assert_eq!(observed.pods[0].terminating_seen, Some(at(3)));
    }

    #[test]
    fn a_deletion_reissued_with_a_shorter_grace_is_timed_from_when_it_was_seen() {
        let deleted = |stamp: &str, grace: i64| -> WatchedPod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "p1",
                             "deletionTimestamp": stamp, "deletionGracePeriodSeconds": grace},
                "spec": {"nodeName": "n1"},
            }))
            .expect("pod")
        };
        let seen = |s: &ClusterState, now| {
            s.observe(now, Vec::new(), BTreeSet::new()).pods[0].terminating_seen
        };
        let mut s = synced(0, &[]);
        // Deleted with 30 s of grace, seen at 3; the kubelet's final DELETE (grace 0) at 9.
        s.apply_pod(&deleted("2026-01-01T00:00:33Z", 30), at(3));
        assert_eq!(seen(&s, at(4)), Some(at(3)));
        s.apply_pod(&deleted("2026-01-01T00:00:09Z", 0), at(9));
        assert_eq!(seen(&s, at(10)), Some(at(9)), "the final DELETE restarts the count");
        // Delivered again (a relist, a label change): the same deletion, kept.
        s.apply_pod(&deleted("2026-01-01T00:00:09Z", 0), at(20));
        assert_eq!(seen(&s, at(21)), Some(at(9)));
    }

    /// A running pod `name` (UID `<name>-uid`) on `node` whose Ready condition is `ready`.
    fn running_pod(name: &str, node: &str, ready: &str) -> WatchedPod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("{name}-uid")},
            "spec": {"nodeName": node},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
        }))
        .expect("pod")
    }

    fn ready_pods(s: &ClusterState) -> Vec<String> {
        let observed = s.observe(at(100), Vec::new(), BTreeSet::new());
        let mut names: Vec<String> = observed
            .pods
            .iter()
            .filter(|p| p.ready_since.is_some())
            .map(|p| p.name.clone())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn ready_pods_are_kept_only_while_their_node_is_not_ready() {
        let mut s = synced(0, &[("n1", "True"), ("n2", "True")]);
        // Ready pods of a Ready node: nothing kept, nothing to list.
        s.apply_pod(&running_pod("a", "n1", "True"), at(1));
        assert!(ready_pods(&s).is_empty());
        assert!(s.take_nodes_to_list().is_empty());
        // n1 leaves Ready: its pods are to be listed, once.
        s.apply_node(&node("n1", "False"), at(2));
        s.apply_node(&node("n1", "Unknown"), at(3));
        assert_eq!(s.take_nodes_to_list(), vec!["n1".to_string()]);
        // The watch delivers b (Ready) and c (marked not Ready) before the list answers; the
        // list's older copies of them do not count, its copy of a (never delivered since) does;
        // a pod of another node in the answer is ignored.
        s.apply_pod(&running_pod("b", "n1", "True"), at(4));
        s.apply_pod(&running_pod("c", "n1", "False"), at(4));
        let listed = [
            running_pod("a", "n1", "True"),
            running_pod("c", "n1", "True"),
            running_pod("d", "n2", "True"),
        ];
        assert_eq!(s.apply_listed_pods("n1", &listed), Change::Relevant);
        assert_eq!(ready_pods(&s), vec!["a", "b"]);
        // a deleted: gone, and a list answering late does not bring it back.
        s.pod_deleted(&running_pod("a", "n1", "True"), at(20));
        s.apply_listed_pods("n1", &listed);
        assert_eq!(ready_pods(&s), vec!["b"]);
        // Ready again: forgotten; a list for it now keeps nothing.
        s.apply_node(&node("n1", "True"), at(5));
        assert!(ready_pods(&s).is_empty());
        assert_eq!(s.apply_listed_pods("n1", &listed), Change::None);
        assert!(ready_pods(&s).is_empty());
    }

    #[test]
    fn node_lists_wait_for_the_pods_list_which_brings_the_nodes_not_ready_when_it_started() {
        let mut s = synced(0, &[("n1", "True"), ("n2", "True")]);
        // A relist of the pods starts while n1 is not Ready: its pods come with the list.
        s.apply_node(&node("n1", "False"), at(1));
        s.list_started(WatchedKind::Pod);
        s.apply_pod(&running_pod("a", "n2", "True"), at(2));
        // n2 leaves Ready during the list (a, already listed, was not kept): listed after it.
        s.apply_node(&node("n2", "False"), at(3));
        s.apply_pod(&running_pod("b", "n1", "True"), at(4));
        assert!(!s.wants_node_lists(), "no node list while the pods are listed");
        assert!(s.take_nodes_to_list().is_empty());
        s.list_done(WatchedKind::Pod, at(5));
        assert!(s.wants_node_lists());
        assert_eq!(s.take_nodes_to_list(), vec!["n2".to_string()], "n1's pods came with it");
        s.apply_listed_pods("n2", &[running_pod("a", "n2", "True")]);
        assert_eq!(ready_pods(&s), vec!["a", "b"]);
    }

    #[test]
    fn when_a_pod_was_first_seen_failed_by_a_shutdown_is_kept() {
        let failed = |reason: &str| -> WatchedPod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                "spec": {"nodeName": "n1"},
                "status": {"phase": "Failed", "reason": reason},
            }))
            .expect("pod")
        };
        let mut s = synced(0, &[]);
        s.apply_pod(&failed("Terminated"), at(3));
        s.apply_pod(&failed("Terminated"), at(9));
        let observed = s.observe(at(10), Vec::new(), BTreeSet::new());
        assert_eq!(observed.pods[0].shutdown_seen, Some(at(3)));
        s.apply_pod(&failed("Evicted"), at(11));
        assert!(s.observe(at(12), Vec::new(), BTreeSet::new()).pods.is_empty());
    }

    #[test]
    fn a_status_heartbeat_is_seen_when_it_changes() {
        let mut s = synced(0, &[]);
        let beat = |at: &str| {
            let mut n = node("n1", "False");
            if let Some(c) = n.status.as_mut().and_then(|s| s.conditions.as_mut()) {
                c[0].last_heartbeat_time = Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at.parse().expect("ts")),
                );
            }
            n
        };
        s.apply_node(&beat("2020-01-01T00:00:00Z"), at(1));
        let heartbeat = |s: &ClusterState| {
            let observed = s.observe(at(50), Vec::new(), BTreeSet::new());
            view(&observed, "n1").and_then(|n| n.observation.heartbeat_seen.get())
        };
        assert_eq!(heartbeat(&s), None, "first seen: not seen changing");
        assert_eq!(s.apply_node(&beat("2020-01-01T00:00:00Z"), at(5)), Change::None);
        assert_eq!(s.apply_node(&beat("2020-01-01T00:00:10Z"), at(9)), Change::Relevant);
        assert_eq!(heartbeat(&s), Some(at(9)));
    }

    #[test]
    fn only_the_taints_a_decision_reads_re_plan() {
        let tainted = |taints: &[(&str, &str)]| {
            let mut n = node("n1", "True");
            let taints = taints.iter().map(|(key, effect)| k8s_openapi::api::core::v1::Taint {
                key: (*key).into(),
                effect: (*effect).into(),
                ..Default::default()
            });
            n.spec = Some(k8s_openapi::api::core::v1::NodeSpec {
                taints: Some(taints.collect()),
                ..Default::default()
            });
            n
        };
        let mut s = synced(0, &[("n1", "True")]);
        // (case, the node's taints now, want)
        type Row<'a> = (&'a str, &'a [(&'a str, &'a str)], Change);
        let rows: [Row; 5] = [
            (
                "the lifecycle controller's not-ready taint",
                &[("node.kubernetes.io/not-ready", "NoSchedule")],
                Change::None,
            ),
            ("and its removal", &[], Change::None),
            (
                "an out-of-service taint: fencing evidence",
                &[("node.kubernetes.io/out-of-service", "NoExecute")],
                Change::Relevant,
            ),
            (
                "another taint beside it",
                &[
                    ("node.kubernetes.io/out-of-service", "NoExecute"),
                    ("example.com/x", "NoSchedule"),
                ],
                Change::None,
            ),
            (
                "the shutdown taint",
                &[("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule")],
                Change::Relevant,
            ),
        ];
        for (i, (case, taints, want)) in rows.into_iter().enumerate() {
            assert_eq!(s.apply_node(&tainted(taints), at(10 + i as i64)), want, "{case}");
            let observed = s.observe(at(20), Vec::new(), BTreeSet::new());
            let shown = view(&observed, "n1").map(|n| n.observation.taints.len());
            assert_eq!(shown, Some(taints.len()), "{case}: every taint is still shown");
        }
    }

    #[test]
    fn a_pod_seen_stale_then_ready_again_is_remembered_as_repaired() {
        let pod = |ready: &str, deleting: bool| -> WatchedPod {
            let mut meta = serde_json::json!({"name": "web-1", "namespace": "ns", "uid": "u1"});
            if deleting {
                meta["deletionTimestamp"] = "2020-01-01T00:00:00Z".into();
            }
            serde_json::from_value(serde_json::json!({
                "metadata": meta,
                "spec": {"nodeName": "n1", "containers": [{"name": "c"}]},
                "status": {"phase": "Running",
                    "conditions": [{"type": "Ready", "status": ready,
                        "lastTransitionTime": "2020-01-01T00:00:00Z"}],
                    "containerStatuses": [{"name": "c", "ready": true,
                        "state": {"running": {}}}]}
            }))
            .expect("valid pod")
        };
        let repaired =
            |s: &ClusterState, now: i64| -> Vec<(String, Option<Timestamp>, Timestamp)> {
                let observed = s.observe(at(now), Vec::new(), BTreeSet::new());
                observed
                    .repaired
                    .iter()
                    .map(|r| (r.view.uid.to_string(), r.view.stale_seen.get(), r.repaired_at))
                    .collect()
            };
        // (case, the pod's updates (Ready status, deleting, seen at), observed at, want)
        type Row = (&'static str, Vec<(&'static str, bool, i64)>, i64, Vec<i64>);
        let rows: [Row; 5] = [
            (
                "stale at 10, Ready at 20",
                vec![("False", false, 10), ("False", false, 15), ("True", false, 20)],
                30,
                vec![10, 20],
            ),
            ("never seen stale", vec![("True", false, 10)], 30, vec![]),
            (
                "stale, then deleted: not a repair",
                vec![("False", false, 10), ("True", true, 20)],
                30,
                vec![],
            ),
            (
                "forgotten after REPAIRED_KEPT",
                vec![("False", false, 10), ("True", false, 20)],
                20 + 600,
                vec![],
            ),
            (
                "remembered just before",
                vec![("False", false, 10), ("True", false, 20)],
                20 + 599,
                vec![10, 20],
            ),
        ];
        for (case, updates, now, want) in rows {
            let mut s = synced(0, &[("n1", "True")]);
            for (ready, deleting, seen) in updates {
                s.apply_pod(&pod(ready, deleting), at(seen));
            }
            let want: Vec<_> = if want.is_empty() {
                vec![]
            } else {
                vec![("u1".to_string(), Some(at(want[0])), at(want[1]))]
            };
            assert_eq!(repaired(&s, now), want, "{case}");
        }
    }

    #[test]
    fn a_pod_within_its_grace_on_a_ready_node_re_plans_only_when_its_grace_ends() {
        // (uid, owner ReplicaSet, node, deletionTimestamp, grace seconds)
        let pod = |uid: &str, rs: &str, node: &str, deleted: i64, grace: i64| -> WatchedPod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "namespace": "ns", "uid": uid,
                    "deletionTimestamp": at(deleted).to_string(),
                    "deletionGracePeriodSeconds": grace,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                        "name": rs, "uid": rs, "controller": true}]},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"phase": "Running"}
            }))
            .expect("valid pod")
        };
        let nodes = [("live", "True"), ("down", "Unknown")];
        // At 100: deleted with 30 s of grace (deletionTimestamp 130).
        let mut s = synced(0, &nodes);
        assert_eq!(s.apply_pod(&pod("a", "rs1", "live", 130, 30), at(100)), Change::At(at(130)));
        assert_eq!(s.next_deferred(), Some(at(130)));
        // Its kubelet finishes it: an update, then its removal, ask for nothing now.
        let finished = pod("a", "rs1", "live", 130, 30);
        assert_eq!(s.apply_pod(&finished, at(101)), Change::None, "unchanged record");
        assert_eq!(s.pod_deleted(&finished, at(102)), Change::None);
        assert_eq!(s.next_deferred(), None, "gone: no re-plan at all");

        // Its kubelet's final delete (grace cut to 0): the API server writes it once more, then
        // removes it; neither asks for a re-plan now.
        let mut s = synced(0, &nodes);
        assert_eq!(s.apply_pod(&pod("f", "rs1", "live", 130, 30), at(100)), Change::At(at(130)));
        let final_delete = pod("f", "rs1", "live", 105, 0);
        assert_eq!(s.apply_pod(&final_delete, at(105)), Change::At(at(106)));
        assert_eq!(s.pod_deleted(&final_delete, at(105)), Change::None);
        assert_eq!(s.next_deferred(), None);
        // Still there a second later (the removal lost, or slow): re-planned then.
        let mut s = synced(0, &nodes);
        assert_eq!(s.apply_pod(&final_delete, at(105)), Change::At(at(106)), "first seen so");
        assert!(s.take_due_deferred(at(106)));
        // Held by a finalizer, it stays: past its grace at once, like any other.
        let mut held = pod("g", "rs1", "live", 105, 0);
        held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
        let mut s = synced(0, &nodes);
        assert_eq!(s.apply_pod(&held, at(105)), Change::Relevant);

        // (case, the pod, seen at, want)
        let rows: [(&str, WatchedPod, i64, Change); 5] = [
            (
                "our sighting plus grace ends first",
                pod("b", "rs2", "live", 200, 10),
                100,
                Change::At(at(110)),
            ),
            ("on a node not Ready", pod("b", "rs2", "down", 200, 30), 100, Change::Relevant),
            ("on a node we do not know", pod("b", "rs2", "gone", 200, 30), 100, Change::Relevant),
            ("past its deletionTimestamp", pod("b", "rs2", "live", 100, 5), 100, Change::Relevant),
            (
                "a sibling blocks its workload now",
                pod("b", "rs1", "live", 200, 30),
                100,
                Change::Relevant,
            ),
        ];
        for (case, p, seen, want) in rows {
            let mut s = synced(0, &nodes);
            // A pod of rs1 Terminating on the down node since 50: it blocks rs1 now.
            s.apply_pod(&pod("old", "rs1", "down", 50, 30), at(60));
            assert_eq!(s.apply_pod(&p, at(seen)), want, "{case}");
        }

        // Due: the re-plan is asked for once; after it, the pod's changes re-plan at once.
        let mut s = synced(0, &nodes);
        assert_eq!(s.apply_pod(&pod("c", "rs3", "live", 130, 30), at(100)), Change::At(at(130)));
        assert!(!s.take_due_deferred(at(129)));
        assert!(s.take_due_deferred(at(130)));
        assert!(!s.take_due_deferred(at(131)), "once");
        assert_eq!(s.pod_deleted(&pod("c", "rs3", "live", 130, 30), at(131)), Change::Relevant);
    }
}
