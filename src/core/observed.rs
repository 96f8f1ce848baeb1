//! The observed inputs: plain views of the pods, nodes, workloads and past actions the core
//! decides on, as the adapters extract them from Kubernetes objects.
//!
//! Its own module so that every judgement (node health, blocked rollouts, the rules, the plan)
//! reads the same inputs without importing one another: the inputs sit below all of them. Only
//! accessors live here; what the inputs mean is decided elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use super::evidence::Suspension;
use super::labels::{Labels, NodeLabels};
use super::policy::MaxUnhealthy;
use super::stamp::Stamp;
use super::uid::Uid;
use crate::crd::CircuitState;

/// The status of a node's `Ready` condition as the node lifecycle controller reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// `Ready=True`: the kubelet reports healthy.
    Ready,
    /// `Ready=False`: the kubelet reports a problem, so it is alive.
    NotReady,
    /// `Ready=Unknown`: the node controller stopped hearing from the kubelet.
    Unknown,
    /// No `Ready` condition yet (a node that never started).
    Missing,
}

impl Readiness {
    /// Parses a condition status (`True`, `False`, `Unknown`); `None` means no condition.
    pub fn from_condition_status(status: Option<&str>) -> Self {
        match status {
            Some("True") => Readiness::Ready,
            Some("False") => Readiness::NotReady,
            Some(_) => Readiness::Unknown,
            None => Readiness::Missing,
        }
    }

    /// The word shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Ready => "Ready",
            Readiness::NotReady => "NotReady",
            Readiness::Unknown => "Unknown",
            Readiness::Missing => "NoCondition",
        }
    }
}

/// What is known about one node, extracted from its Node object and kubelet Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeObservation {
    pub name: Arc<str>,
    pub readiness: Readiness,
    /// When the `Ready` condition last changed status, as written in it (by the kubelet or the
    /// node lifecycle controller, on their clocks): shown, never compared with ours.
    pub ready_transition: Stamp,
    /// The Lease's `spec.renewTime`, written by the kubelet on its clock: shown, never compared
    /// with ours.
    pub lease_renewed: Stamp,
    /// When the operator first saw the node not Ready, by its own clock (`None` while Ready, or
    /// for a one-shot read).
    pub not_ready_seen: Stamp,
    /// When the operator last saw the Lease's `renewTime` change, by its own clock (`None`
    /// without a Lease, or for a one-shot read).
    pub lease_seen: Stamp,
    /// The Lease's `spec.leaseDurationSeconds`, as the kubelet declares it: no renewal for
    /// this long is the least evidence of death, whatever `leaseStaleFor` says (`None`: no
    /// Lease, or none declared).
    pub lease_duration_s: Option<u16>,
    /// The Ready condition's `lastHeartbeatTime`, written by the kubelet when it posts the
    /// node's status (the node lifecycle controller leaves it as it was): shown, never compared
    /// with our clock.
    pub ready_heartbeat: Stamp,
    /// When the operator last saw `ready_heartbeat` take a new value, by its own clock: the
    /// kubelet posted the node's status, a sign of life like a Lease renewal (`None`: not seen
    /// changing).
    pub heartbeat_seen: Stamp,
    /// `plan` only: `lease_seen` was not seen but dated from the Lease's renewTime (no renewal
    /// arrived while it watched), and is worded so.
    pub seen_from_stamps: bool,
    /// `plan` only: `not_ready_seen` was not seen but dated from the condition's
    /// lastTransitionTime, and is worded so.
    pub not_ready_from_stamp: bool,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `key:effect` of each taint.
    pub taints: Box<[String]>,
    /// `status.volumesInUse`: the volumes the kubelet reports still mounted (a pod stuck on a
    /// live node may be waiting for one to unmount).
    pub volumes_in_use: Box<[String]>,
}

/// The only taint keys a decision reads: fencing evidence (and our own fencing taint). Taints of
/// other tools are read as the node's manager ([`NodeControl::managed_by`]); the rest (the node
/// lifecycle controller's `not-ready` and `unreachable`, which follow the Ready condition, a
/// scheduler's own) are shown, never judged.
pub const DECISION_TAINTS: [&str; 2] =
    [crate::crd::OUT_OF_SERVICE_TAINT, crate::crd::SHUTDOWN_TAINT];

impl NodeObservation {
    /// The node's taints a decision reads ([`DECISION_TAINTS`]), as `key:effect`.
    pub fn decision_taints(&self) -> impl Iterator<Item = &str> {
        self.taints.iter().map(String::as_str).filter(|t| {
            let key = t.split_once(':').map_or(*t, |(k, _)| k);
            DECISION_TAINTS.contains(&key)
        })
    }

    /// Whether the node carries a taint with this key (any effect).
    pub fn has_taint_key(&self, key: &str) -> bool {
        self.taints.iter().any(|t| t.split_once(':').map_or(t.as_str(), |(k, _)| k) == key)
    }

    /// Whether the node carries a taint with this key and effect.
    pub fn has_taint(&self, key: &str, effect: &str) -> bool {
        self.taints.iter().any(|t| t.split_once(':') == Some((key, effect)))
    }

    /// How far the kubelet's clock runs behind ours (negative: ahead), as seen when its last
    /// renewal arrived: our clock then minus the `renewTime` it wrote.
    pub fn lease_skew(&self) -> Option<SignedDuration> {
        Some(self.lease_seen.get()?.duration_since(self.lease_renewed.get()?))
    }
}

/// What the planner keeps about one node: the observation plus what scoping needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub observation: NodeObservation,
    /// The node's labels (last known, for a deleted node).
    pub labels: NodeLabels,
    /// Annotated `remediator.io/exclude: "true"`: its pods are never touched.
    pub excluded: bool,
    /// The Node object is gone (a tombstone kept while pods still reference it).
    pub deleted: bool,
    /// What node actions need beyond health.
    pub control: NodeControl,
}

/// What node actions need to know about a node beyond its health.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeControl {
    pub uid: Uid,
    /// Labelled `node-role.kubernetes.io/control-plane` (or `master`): never deleted.
    pub control_plane: bool,
    /// Another tool that manages this node's remediation (Cluster API, Karpenter, medik8s),
    /// if any: node actions leave the node to it. Inline: where one tool manages a cluster,
    /// it manages every node.
    pub managed_by: Option<ManagedBy>,
    /// When the operator saw the node Ready again, by its own clock (`None` while not Ready).
    pub ready_seen: Stamp,
    /// When the operator saw the node leave Ready, by its own clock, if it saw the change
    /// itself (a node first seen not Ready has none): kept while it stays not Ready.
    pub left_ready_seen: Stamp,
    /// What is rarely set on a node: read through it as if inline, changed with
    /// [`Rare::update`].
    pub rare: Rare,
}

/// The parts of a node's [`NodeControl`] that a healthy node in a quiet cluster leaves unset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RareControl {
    /// Its node lifecycle conditions (maintenance, drain, graceful shutdown).
    pub lifecycle: Lifecycle,
    /// The annotation `node.kubernetes.io/out-of-service-applied-by`: who applied the node's
    /// out-of-service taint (`kube-remediator` for ours, `pacemaker` for OpenShift's fencing).
    pub out_of_service_applied_by: Option<String>,
    /// What this operator did to the node, from its annotation.
    pub record: NodeRecord,
    /// The last outage the operator watched from its start to its end (Ready left, then Ready
    /// again), by its own clock: what a stale Ready=False pod must have come with.
    pub last_outage: Option<Outage>,
    /// A tombstone ([`NodeView::deleted`]) of a Node this operator deleted itself, and when:
    /// its own write, never evidence for its own decisions.
    pub deleted_by_us: Option<Timestamp>,
}

/// Every part of [`RareControl`] unset: what [`Rare`] reads as while it holds nothing.
static UNSET: RareControl = RareControl {
    lifecycle: Lifecycle {
        maintenance: None,
        maintenance_planned: false,
        shutting_down: false,
        shutdown_transition: None,
        shutdown_seen: None,
        shutdown_from_stamp: false,
    },
    out_of_service_applied_by: None,
    record: NodeRecord { policy: None, cordoned: None, tainted: None },
    last_outage: None,
    deleted_by_us: None,
};

/// A node's [`RareControl`], behind a box that exists only while some part of it is set: a
/// node pays one pointer for them (they would take about 240 bytes inline, on every node).
/// Reads go through `Deref`; the only way to change them, [`Rare::update`], drops the box again
/// once everything is unset, so two equal values are also equal in memory use.
#[derive(Clone, Default)]
pub struct Rare(Option<Box<RareControl>>);

impl Rare {
    pub fn new(parts: RareControl) -> Self {
        Rare((parts != UNSET).then(|| Box::new(parts)))
    }

    /// Changes the rare parts in place.
    pub fn update<R>(&mut self, change: impl FnOnce(&mut RareControl) -> R) -> R {
        let parts = self.0.get_or_insert_with(Box::default);
        let result = change(parts);
        if **parts == UNSET {
            self.0 = None;
        }
        result
    }
}

impl std::ops::Deref for Rare {
    type Target = RareControl;

    fn deref(&self) -> &RareControl {
        self.0.as_deref().unwrap_or(&UNSET)
    }
}

impl PartialEq for Rare {
    fn eq(&self, other: &Rare) -> bool {
        **self == **other
    }
}

impl Eq for Rare {}

impl fmt::Debug for Rare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        RareControl::fmt(self, f)
    }
}

/// Another tool that manages a node, and the label, annotation, taint or finalizer that says
/// so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedBy {
    /// The tool's name (`Karpenter`).
    pub tool: &'static str,
    /// The key found (`karpenter.sh/nodepool`), shared between the nodes that carry it.
    pub marker: Arc<str>,
}

impl fmt::Display for ManagedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.tool, self.marker)
    }
}

/// A node's lifecycle conditions (Kubernetes 1.37, KEP-5683) with status True.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lifecycle {
    /// The first of `MaintenanceInProgress`, `DrainInProgress`, `Drained` that is True: the
    /// node is in maintenance.
    pub maintenance: Option<&'static str>,
    /// `MaintenancePlanned` is True (shown; it holds nothing).
    pub maintenance_planned: bool,
    /// `GracefulNodeShutdownInProgress` is True.
    pub shutting_down: bool,
    /// That condition's `lastTransitionTime`, written by another machine's clock: shown, and
    /// used by one-shot reads only, worded so.
    pub shutdown_transition: Option<Timestamp>,
    /// When the operator first saw `GracefulNodeShutdownInProgress` True, by its own clock
    /// (`None` while it is not, or for a one-shot read).
    pub shutdown_seen: Option<Timestamp>,
    /// `plan` only: `shutdown_seen` was not seen but dated from the condition's
    /// lastTransitionTime, and is worded so.
    pub shutdown_from_stamp: bool,
}

/// An outage of a node the operator watched: it saw the node leave Ready at `from` and come
/// back at `to`, both by its own clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    pub from: Timestamp,
    pub to: Timestamp,
}

/// What kube-remediator recorded on a node (annotation `remediator.io/node-actions`): only what
/// is recorded here is ever undone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeRecord {
    /// The policy that acted.
    pub policy: Option<String>,
    /// When it cordoned the node.
    pub cordoned: Option<Timestamp>,
    /// When it added the out-of-service taint.
    pub tainted: Option<Timestamp>,
}

impl NodeRecord {
    pub fn is_empty(&self) -> bool {
        self.cordoned.is_none() && self.tainted.is_none()
    }
}

impl NodeControl {
    /// Whether the node's out-of-service taint may be ours: our record names one, or the
    /// applied-by annotation names us. Ours is never evidence for our own decisions.
    pub fn taint_may_be_ours(&self) -> bool {
        self.rare.record.tainted.is_some()
            || self.rare.out_of_service_applied_by.as_deref() == Some(crate::crd::APPLIED_BY_US)
    }
}

impl NodeView {
    /// A node known only by name because pods reference it but the operator has no Node object
    /// for it and never saw one deleted: nothing is known about it (not dead, not fenced).
    pub fn unknown(name: &str) -> Self {
        NodeView { deleted: false, ..NodeView::deleted_unknown(name) }
    }

    /// A tombstone: a Node the operator saw deleted, known only by name.
    pub fn deleted_unknown(name: &str) -> Self {
        NodeView {
            observation: NodeObservation {
                name: name.into(),
                readiness: Readiness::Missing,
                ready_transition: Stamp::NONE,
                lease_renewed: Stamp::NONE,
                not_ready_seen: Stamp::NONE,
                lease_seen: Stamp::NONE,
                lease_duration_s: None,
                ready_heartbeat: Stamp::NONE,
                heartbeat_seen: Stamp::NONE,
                seen_from_stamps: false,
                not_ready_from_stamp: false,
                unschedulable: false,
                taints: Box::default(),
                volumes_in_use: Box::default(),
            },
            labels: NodeLabels::default(),
            excluded: false,
            deleted: true,
            control: NodeControl::default(),
        }
    }
}

/// A workload as the blocked-rollout analysis needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadView {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Deployment `strategy.type: Recreate` (always false for StatefulSets).
    pub recreate: bool,
    /// `spec.replicas`.
    pub replicas: i32,
    /// Deployment `status.updatedReplicas`: pods of the current template.
    pub updated_replicas: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
}

impl WorkloadKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A ReplicaSet: which Deployment controls it, and how many replicas it wants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaSetView {
    pub uid: String,
    /// UID of the controlling Deployment.
    pub deployment_uid: Option<String>,
    pub replicas: i32,
}

/// A reference to a blocked workload.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkloadRef {
    pub kind: WorkloadKind,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind.as_str(), self.namespace, self.name)
    }
}

/// A pod's controlling owner reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    pub kind: Arc<str>,
    pub name: Arc<str>,
    pub uid: Arc<str>,
}

/// The key of per-owner budgets: one ReplicaSet, StatefulSet or Job.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerKey {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

impl fmt::Display for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the planner keeps about one pod. The controller only needs to pass Terminating pods
/// (`deletion_timestamp` set); the others are ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub namespace: Arc<str>,
    pub name: String,
    pub uid: Uid,
    /// `spec.nodeName`; pods never scheduled are ignored.
    pub node_name: Option<Arc<str>>,
    /// Its labels, compact like a node's: the state shares their strings between pods.
    pub labels: Labels,
    /// The labels of the pod's namespace, shared between the pods of one namespace.
    pub namespace_labels: Arc<BTreeMap<String, String>>,
    /// The owner reference with `controller: true`, if any.
    pub owner: Option<OwnerRef>,
    /// `metadata.deletionTimestamp`: deletion time plus grace period.
    pub deletion_timestamp: Stamp,
    /// `metadata.deletionGracePeriodSeconds` (informational: already in `deletion_timestamp`).
    pub deletion_grace_seconds: Option<i64>,
    /// A mirror pod of a static pod (annotation `kubernetes.io/config.mirror`).
    pub is_mirror: bool,
    /// Mounts a PVC whose access modes include ReadWriteOnce or ReadWriteOncePod.
    pub has_rwo_volume: bool,
    /// Annotated `remediator.io/exclude: "true"`.
    pub excluded: bool,
    /// `status.phase`, for reports.
    pub phase: Option<Arc<str>>,
    /// `metadata.finalizers`: while any is left, deleting the pod does not remove it.
    pub finalizers: Vec<String>,
    /// The containers whose status is running (a Terminating pod on a live node: the kubelet
    /// has not stopped them).
    pub running_containers: Box<[String]>,
    /// A running pod (not Terminating) whose Ready condition is False while every container
    /// reports ready (field incident 2): when the condition went False, as written in it.
    /// `None` for every other pod.
    pub stale_ready_since: Stamp,
    /// When the operator first saw the pod in that state (Ready=False, every container ready),
    /// by its own clock: a stale pod must have turned so during an outage of its node it
    /// watched ([`NodeControl::last_outage`]).
    pub stale_seen: Stamp,
    /// When the operator first saw the pod's current deletion (its `deletionTimestamp` and grace
    /// period; a DELETE with a shorter grace moves both), by its own clock: time on a live node
    /// is counted from here, never from the API server's timestamp.
    pub terminating_seen: Stamp,
    /// A pod (not Terminating) left Failed by a graceful node shutdown: its `status.reason`
    /// (`Terminated`, `Shutdown` or `NodeShutdown`). `None` for every other pod.
    pub shutdown_reason: Option<String>,
    /// When the operator first saw the pod Failed by a shutdown, by its own clock
    /// (`failedByShutdown.deleteAfter` is counted from here).
    pub shutdown_seen: Stamp,
    /// A running pod (not Terminating) whose Ready condition is True, kept only while its node
    /// is not Ready ([`crate::adapters::ready_pod_record`]): when the condition went True, as
    /// written in it. `None` for every other pod.
    pub ready_since: Stamp,
    /// The Recreate Deployment or StatefulSet whose rollout this pod blocks, if any (filled by
    /// the controller from [`crate::core::rollouts::blocked_rollouts`]; boxed, since few pods
    /// have one and every kept pod has the field).
    pub blocks_rollout: Option<Box<WorkloadRef>>,
}

impl PodView {
    /// Its deletion as we timed it, if we saw it: time on a live node is counted from here.
    pub fn live_deletion(&self) -> Option<super::action::LiveDeletion> {
        Some(super::action::LiveDeletion {
            seen: self.terminating_seen.get()?,
            deletion: self.deletion_timestamp.get()?,
            grace_s: self.deletion_grace_seconds.unwrap_or(0),
        })
    }

    /// The per-owner budget key; `None` for bare pods.
    pub fn owner_key(&self) -> Option<OwnerKey> {
        self.owner.as_ref().map(|o| OwnerKey {
            namespace: self.namespace.to_string(),
            kind: o.kind.to_string(),
            name: o.name.to_string(),
        })
    }
}

/// An action this policy already took (or recorded in DryRun), for rate limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PastAction {
    pub at: Timestamp,
    pub owner: Option<OwnerKey>,
}

/// The circuit as remembered from the last evaluation (the policy's `status.circuit`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CircuitMemory {
    pub state: CircuitState,
    /// When it entered `state`.
    pub since: Timestamp,
    /// `CoolingDown`: when it closes.
    pub until: Option<Timestamp>,
    /// `Latched`: the value of the re-arm annotation when it latched (`None`: absent).
    pub rearm_token: Option<String>,
}

impl CircuitMemory {
    /// Closed since `since`.
    pub fn closed(since: Timestamp) -> Self {
        CircuitMemory { state: CircuitState::Closed, since, until: None, rearm_token: None }
    }
}

/// What the storm guard needs beyond the nodes: the process-wide limit and the policy's
/// circuit as it was.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StormInput {
    /// `--max-unhealthy-nodes-in-cluster`, over every node the operator sees; `None`: no
    /// cluster-wide guard (the core's own tests).
    pub cluster_limit: Option<MaxUnhealthy>,
    /// The policy's circuit as its status remembers it.
    pub previous: Option<CircuitMemory>,
    /// The policy's annotation `remediator.io/rearm-circuit`, if set.
    pub rearm_token: Option<String>,
}

/// Everything the planner looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Nodes, including tombstones of Nodes the operator saw deleted that pods still reference
    /// (`deleted: true`). A node referenced by a pod but absent here is unknown: neither alive
    /// nor dead. Shared with the watch index's records (a reconcile copies no node).
    pub nodes: Vec<Arc<NodeView>>,
    /// Terminating pods, running pods left Ready=False while every container is ready
    /// ([`PodView::stale_ready_since`]) and pods left Failed by a graceful node shutdown
    /// ([`PodView::shutdown_reason`]); others are ignored. Shared with the watch index's
    /// records (a reconcile copies only the pods whose view it changes).
    pub pods: Vec<Arc<PodView>>,
    /// The start of the evidence window (see [`crate::core::evidence`]): when the watches last
    /// finished a (re)list or the Lease view last resumed after a stall. `None` while evidence
    /// is not trusted: then no node is dead and nothing is done.
    pub watch_synced_at: Option<Timestamp>,
    /// Why evidence is not trusted, when `watch_synced_at` is `None`.
    pub suspended: Option<Suspension>,
    /// This policy's actions of at least the last 60 s (older ones are ignored), with result
    /// Done, WouldAct or Failed: attempts count towards the rate limits.
    pub recent_actions: Vec<PastAction>,
    /// The other policies' actions in Enforce of at least the last 60 s: they share the
    /// per-owner budgets.
    pub others_actions: Vec<PastAction>,
    /// UIDs of pods this policy already force-deleted (Enforce) or recorded as would-be
    /// force-deleted (DryRun), in the current mode, that are still present. They are not acted on
    /// again, so DryRun reports each pod once and moves on to the next, as Enforce would.
    pub acted_pods: BTreeSet<String>,
    /// Actions whose last attempts failed (a refusing admission webhook, say), by the key
    /// their outcome is remembered by ([`super::action::Action::acted_key`]): not attempted
    /// again before their `until`, so one action failing every time neither comes first in
    /// every plan nor spends the budgets of the others.
    pub backoff: BTreeMap<String, Backoff>,
    /// The storm guard's inputs beyond the nodes.
    pub storm: StormInput,
    /// Who is deciding: the policy's name, and every policy that exists now (`None`: not known,
    /// as in `plan`'s one-shot reading). An undo is done only by the policy that acted, or, if
    /// it is gone, by one with node actions over the node.
    pub acting: Acting,
    /// Pods seen left Ready=False that turned Ready again, within the last
    /// [`REPAIRED_KEPT`]: what the stale-readiness rule was waiting on when a kubelet
    /// repaired its own pods, for its report.
    pub repaired: Vec<RepairedPod>,
}

/// How long a pod that turned Ready again is remembered for the stale-readiness report: longer
/// than any reconcile takes to see it.
pub const REPAIRED_KEPT: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);

/// A pod seen left Ready=False (every container ready) that turned Ready again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairedPod {
    /// The pod as last seen not Ready ([`PodView::stale_seen`] set).
    pub view: PodView,
    /// When we saw it Ready again, by our own clock.
    pub repaired_at: Timestamp,
}

/// The policy a plan is made for, among the policies that exist.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Acting {
    pub policy: String,
    pub live_policies: Option<BTreeSet<String>>,
}

impl Acting {
    /// Whether this policy may undo what the record names: it acted, or the policy that acted
    /// is gone and this one (`has_node_actions`) would act on the node too.
    pub fn may_undo(&self, record: &NodeRecord, has_node_actions: bool) -> bool {
        match record.policy.as_deref() {
            Some(acted) if acted == self.policy => true,
            Some(acted) => {
                has_node_actions && self.live_policies.as_ref().is_some_and(|l| !l.contains(acted))
            }
            None => has_node_actions,
        }
    }
}

/// The attempts of one action that failed in a row, and when it may be attempted again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub failures: u32,
    pub until: Timestamp,
}

/// The first retry of a failed action comes after this; each further failure doubles it.
pub const BACKOFF_FIRST: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);
/// The longest wait between two attempts of a failing action.
pub const BACKOFF_MAX: jiff::SignedDuration = jiff::SignedDuration::from_secs(300);

impl Backoff {
    /// After `failures` failed attempts in a row, the last at `at`: 10 s, 20 s, 40 s, ... up to
    /// 5 minutes.
    pub fn after(failures: u32, at: Timestamp) -> Backoff {
        let doublings = failures.saturating_sub(1).min(16);
        let wait = BACKOFF_FIRST.saturating_mul(1 << doublings).min(BACKOFF_MAX);
        Backoff { failures, until: super::duration::add(at, wait) }
    }
}

/// Inputs for the tests of the modules that judge them.
#[cfg(test)]
pub mod fixtures {
    use super::*;
    use crate::core::node::{NodeState, NodeSummary};

    /// Node `name` judged `state`, nothing more about it.
    pub fn node_summary(name: &str, state: NodeState) -> NodeSummary {
        NodeSummary {
            name: name.into(),
            state,
            excluded: false,
            deleted: false,
            fenced_by: None,
            dead_at: Stamp::NONE,
            why: "".into(),
            lease_renewed: Stamp::NONE,
            held_alive: None,
            death: None,
            hold: None,
            shutdown_seen: Stamp::NONE,
        }
    }

    /// A Terminating pod of ReplicaSet `web-1` in `default` on `node`, deleted at
    /// 2026-01-01T00:08:00Z with a 30 s grace period.
    pub fn pod(name: &str, node: &str) -> PodView {
        PodView {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}").into(),
            node_name: Some(node.into()),
            labels: [("app", "web")].into_iter().collect(),
            namespace_labels: Arc::default(),
            owner: Some(OwnerRef {
                kind: "ReplicaSet".into(),
                name: "web-1".into(),
                uid: "rs-uid".into(),
            }),
            deletion_timestamp: Stamp::from(
                "2026-01-01T00:08:00Z".parse::<Timestamp>().expect("ts"),
            ),
            deletion_grace_seconds: Some(30),
            is_mirror: false,
            has_rwo_volume: false,
            excluded: false,
            phase: Some("Running".into()),
            blocks_rollout: None,
            finalizers: vec![],
            running_containers: Box::default(),
            stale_ready_since: Stamp::NONE,
            stale_seen: Stamp::NONE,
            shutdown_reason: None,
            shutdown_seen: Stamp::NONE,
            ready_since: Stamp::NONE,
            // Seen when the delete was requested (deletionTimestamp minus the grace period).
            terminating_seen: Stamp::from("2026-01-01T00:07:30Z".parse::<Timestamp>().expect("ts")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{OUT_OF_SERVICE_TAINT, SHUTDOWN_TAINT};

    #[test]
    fn readiness_from_condition_status() {
        let table = [
            (Some("True"), Readiness::Ready),
            (Some("False"), Readiness::NotReady),
            (Some("Unknown"), Readiness::Unknown),
            (Some("garbage"), Readiness::Unknown),
            (None, Readiness::Missing),
        ];
        for (status, want) in table {
            assert_eq!(Readiness::from_condition_status(status), want, "status {status:?}");
        }
    }

    #[test]
    fn has_taint_key_ignores_effect() {
        let mut obs = NodeView::deleted_unknown("n").observation;
        obs.taints =
            vec!["node.kubernetes.io/out-of-service:NoExecute".into(), "bare-key".into()].into();
        assert!(obs.has_taint_key(OUT_OF_SERVICE_TAINT));
        assert!(obs.has_taint_key("bare-key"));
        assert!(!obs.has_taint_key("node.kubernetes.io"));
        assert!(!obs.has_taint_key(SHUTDOWN_TAINT));
    }

    #[test]
    fn a_nodes_rare_parts_take_a_box_only_while_set() {
        let mut rare = Rare::default();
        assert!(rare.0.is_none());
        assert_eq!(rare.record.cordoned, None, "unset parts read as unset");
        let at = Timestamp::UNIX_EPOCH + jiff::SignedDuration::from_secs(1_000);
        rare.update(|r| r.record.cordoned = Some(at));
        assert_eq!(rare.record.cordoned, Some(at));
        assert!(rare.0.is_some());
        assert_ne!(rare, Rare::default());
        rare.update(|r| r.record.cordoned = None);
        assert!(rare.0.is_none(), "the box goes once everything is unset again");
        assert_eq!(rare, Rare::default());
        assert!(Rare::new(RareControl::default()).0.is_none());
        let set = RareControl { deleted_by_us: Some(at), ..RareControl::default() };
        assert_eq!(Rare::new(set.clone()).deleted_by_us, Some(at));
        assert_eq!(Rare::new(set.clone()), Rare::new(set));
    }

    #[test]
    fn a_node_view_stays_small() {
        // What every node keeps inline (benchmarks: "What a node costs"); the rare parts are
        // one pointer, each optional instant 8 bytes.
        assert_eq!(std::mem::size_of::<Rare>(), 8);
        assert_eq!(std::mem::size_of::<Stamp>(), 8);
        // Behind its `Arc`, 248 bytes take glibc's 272-byte block; 256 would take 288.
        let size = std::mem::size_of::<NodeView>();
        assert!(size <= 248, "NodeView grew to {size} bytes");
    }

    #[test]
    fn a_pod_view_stays_small() {
        // What every kept pod holds inline (benchmarks: "What a kept pod costs"): its six
        // optional instants 8 bytes each, where `Option<Timestamp>` took 24. Behind its `Arc`,
        // 328 bytes take glibc's 352-byte block; 336 would take 368.
        let size = std::mem::size_of::<PodView>();
        assert!(size <= 328, "PodView grew to {size} bytes");
    }
}
