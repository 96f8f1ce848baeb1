//! The `RemediationPolicy` custom resource (`remediator.io/v1alpha1`, cluster-scoped).
//!
//! The Rust types are the source of truth: the CRD YAML is generated from them ([`crd_yaml`]),
//! and their doc comments are what `kubectl explain remediationpolicy.spec...` shows, so they are
//! written for the SRE reading them at 3 a.m. CEL rules (`x-kubernetes-validations`) make the API
//! server refuse contradictory specs; [`crate::core::validate`] checks the same rules again (and
//! what CEL cannot see, such as selector operators) so a bad object becomes an `Invalid` condition
//! instead of a crash.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use kube::CustomResourceExt;
use prometheus_client::encoding::EncodeLabelValue;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Pods and nodes carrying this annotation with the value `"true"` are never touched.
pub const EXCLUDE_ANNOTATION: &str = "remediator.io/exclude";
/// The field manager kube-remediator writes under (managedFields name it).
pub const FIELD_MANAGER: &str = "kube-remediator";

/// The annotation on a RemediationPolicy whose every new value re-arms a latched circuit
/// (`safety.latch`).
pub const REARM_ANNOTATION: &str = "remediator.io/rearm-circuit";
/// The taint of Kubernetes' non-graceful node shutdown: an admin (or we) say the machine is off.
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";
/// The value kube-remediator gives the out-of-service taint it adds (as in the Kubernetes docs).
pub const OUT_OF_SERVICE_VALUE: &str = "nodeshutdown";
/// Where kube-remediator records on a node what it did to it (a JSON object): only what is
/// recorded there is ever undone.
pub const NODE_ACTIONS_ANNOTATION: &str = "remediator.io/node-actions";
/// Labels of control-plane nodes, which are never deleted.
pub const CONTROL_PLANE_LABELS: [&str; 2] =
    ["node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"];
/// The taint cloud providers put on nodes whose instance is shut down.
pub const SHUTDOWN_TAINT: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// The most entries kept in `status.recentActions`.
pub const MAX_RECENT_ACTIONS: usize = 20;
/// The pattern every duration field must match (a subset of Go's `time.ParseDuration`).
pub const DURATION_PATTERN: &str = "^([0-9]+(ms|s|m|h))+$";
/// The kubelet's Lease duration: a Lease younger than this is not stale by anyone's measure.
pub const MIN_LEASE_STALE_FOR: &str = "40s";

/// A policy telling kube-remediator which stuck pods it may release, on which evidence, and how
/// fast. Start with `mode: DryRun`, read `status.recentActions` and the Events, then switch to
/// `Enforce`.
// clippy reads the repeated `type_ = "integer"` of the printer columns as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "remediator.io",
    version = "v1alpha1",
    kind = "RemediationPolicy",
    status = "RemediationPolicyStatus",
    shortname = "rp",
    category = "remediator",
    derive = "PartialEq",
    doc = "RemediationPolicy tells kube-remediator which pods stuck Terminating on dead nodes it may release, on which evidence, and how fast.",
    printcolumn(name = "Mode", type_ = "string", json_path = ".spec.mode"),
    printcolumn(name = "Paused", type_ = "boolean", json_path = ".spec.paused"),
    printcolumn(name = "Matched Nodes", type_ = "integer", json_path = ".status.matchedNodes"),
    printcolumn(name = "Unhealthy", type_ = "integer", json_path = ".status.unhealthyNodes"),
    printcolumn(name = "Actions", type_ = "integer", json_path = ".status.actionsTotal"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase", default)]
pub struct RemediationPolicySpec {
    /// DryRun (default) decides exactly as Enforce would but changes nothing: every would-be
    /// action is recorded as an Event, a metric with mode="DryRun", a log line and an entry in
    /// status.recentActions with result WouldAct. Enforce performs the actions.
    pub mode: Mode,

    /// When true the policy keeps evaluating and reporting (status, Events) but takes no action
    /// at all, in either mode. Use it to stop remediation during maintenance without losing the
    /// policy.
    pub paused: bool,

    /// Which nodes this policy watches, by node labels. Absent or empty selects every node.
    /// Nodes outside the selector are ignored entirely: they do not count towards
    /// safety.maxUnhealthyNodes and their pods are never touched. A deleted Node whose labels
    /// are no longer known is matched as if it had no labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,

    /// Which namespaces' pods this policy may touch, by namespace labels (e.g.
    /// kubernetes.io/metadata.name). Absent or empty selects every namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Which pods this policy may touch, by pod labels. Absent or empty selects every pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,

    /// Which pods may be released, by the kind of their controlling owner: ReplicaSet
    /// (Deployments), StatefulSet, Job, Bare (no controller owner). Default: all four. Pods of
    /// any other owner kind (custom controllers) are not touched. DaemonSet pods and mirror
    /// (static) pods are never touched whatever this says: their controllers handle dead nodes.
    #[schemars(length(min = 1, max = 4), extend("x-kubernetes-list-type" = "set"))]
    pub owner_kinds: Vec<OwnerKind>,

    /// When a node counts as dead, and which evidence counts as fencing (proof the machine is
    /// really off).
    pub dead_node: DeadNodeSpec,

    /// Releasing pods stuck Terminating on dead nodes (force delete with grace period 0 and a
    /// UID precondition), which unblocks Recreate rollouts and StatefulSets.
    pub stuck_terminating: StuckTerminatingSpec,

    /// Releasing the pods that block a Recreate Deployment's rollout or a StatefulSet (old pods
    /// Terminating on dead nodes), with a delay of its own. Blocked rollouts are reported
    /// (Events on the workload, metrics, status) whatever this rule says; this rule only decides
    /// whether and when their blocking pods are released. The pods must pass every other check
    /// of this policy: scope, dead node, fencing, circuit breaker, rate limits.
    pub recreate_rollouts: RecreateRolloutsSpec,

    /// Actions on a dead node itself, each this long after the node was judged dead (see
    /// deadNode), each off unless set. They pass the same checks as pod releases (scope,
    /// exclusion, circuit breaker, rate limit, DryRun) and a fresh read of the node right before
    /// the request. Once the node has been Ready for undoAfter, kube-remediator removes its own
    /// cordon and taint (recorded in the node's annotation remediator.io/node-actions), and never
    /// an admin's. Nodes another tool manages (Cluster API, Karpenter, medik8s: a label or
    /// annotation key under cluster.x-k8s.io/, karpenter.sh/, medik8s.io/ or
    /// remediation.medik8s.io/) are left to it, said once per node and episode (a NodeLeftAlone
    /// Event on the Node naming the tool, status.nodesLeftAlone, `plan`, `explain`).
    pub node_actions: NodeActionsSpec,

    /// Kubernetes' node lifecycle conditions (1.37): a node in maintenance gets no action and
    /// no pod release; a node in graceful shutdown is given its shutdown to finish first.
    pub node_lifecycle: NodeLifecycleSpec,

    /// Pods stuck Terminating on a live node (field incident 3): diagnosed and reported; force
    /// deleted only with forceDeleteAfter.
    pub live_node_stuck: LiveNodeStuckSpec,

    /// Finalizers that may be removed from a Terminating pod they hold, on a live or dead node.
    pub finalizers: FinalizersSpec,

    /// Pods left Ready=False after a node blip (field incident 2): reported; evicted only with
    /// action Evict.
    pub stale_readiness: StaleReadinessSpec,

    /// Pods left Failed by a graceful node shutdown (phase Failed, reason Terminated, Shutdown
    /// or NodeShutdown): deleted deleteAfter after kube-remediator first saw them so, only
    /// with enabled.
    pub failed_by_shutdown: FailedByShutdownSpec,

    /// Pods left Ready=True on a node dead by this policy's evidence, still receiving their
    /// Services' traffic: reported.
    pub ready_on_dead_node: ReadyOnDeadNodeSpec,

    /// Storm guards: when to stop acting, and how fast to act.
    pub safety: SafetySpec,
}

impl Default for RemediationPolicySpec {
    fn default() -> Self {
        RemediationPolicySpec {
            mode: Mode::DryRun,
            paused: false,
            node_selector: None,
            namespace_selector: None,
            pod_selector: None,
            owner_kinds: OwnerKind::ALL.to_vec(),
            dead_node: DeadNodeSpec::default(),
            stuck_terminating: StuckTerminatingSpec::default(),
            recreate_rollouts: RecreateRolloutsSpec::default(),
            node_actions: NodeActionsSpec::default(),
            node_lifecycle: NodeLifecycleSpec::default(),
            live_node_stuck: LiveNodeStuckSpec::default(),
            finalizers: FinalizersSpec::default(),
            stale_readiness: StaleReadinessSpec::default(),
            failed_by_shutdown: FailedByShutdownSpec::default(),
            ready_on_dead_node: ReadyOnDeadNodeSpec::default(),
            safety: SafetySpec::default(),
        }
    }
}

/// Whether the policy only records what it would do (DryRun) or does it (Enforce).
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    JsonSchema,
    strum::IntoStaticStr,
    strum::EnumIter,
    EncodeLabelValue,
)]
pub enum Mode {
    /// Decide and record, never mutate pods or nodes.
    #[default]
    DryRun,
    /// Decide and act.
    Enforce,
}

impl Mode {
    /// The value as written in the spec (also the metrics label).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The kind of a pod's controlling owner, as selected by ownerKinds.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    JsonSchema,
    strum::IntoStaticStr,
)]
pub enum OwnerKind {
    /// Pods of a ReplicaSet, i.e. of a Deployment.
    ReplicaSet,
    /// Pods of a StatefulSet.
    StatefulSet,
    /// Pods of a Job (and so of a CronJob).
    Job,
    /// Pods without a controller owner.
    Bare,
}

impl OwnerKind {
    /// Every selectable kind, the default of ownerKinds.
    pub const ALL: [OwnerKind; 4] =
        [OwnerKind::ReplicaSet, OwnerKind::StatefulSet, OwnerKind::Job, OwnerKind::Bare];

    /// The value as written in the spec.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// When a node counts as dead, and what counts as fencing evidence.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!('None' in self.requireFencingFor) || size(self.requireFencingFor) == 1",
        "message": "requireFencingFor: None cannot be combined with other entries"
    },
    {
        "rule": "!('All' in self.requireFencingFor) || size(self.requireFencingFor) == 1",
        "message": "requireFencingFor: All already covers every pod, list it alone"
    },
    {
        "rule": "self.requireFencingFor == ['None'] || self.fencing.outOfServiceTaint || self.fencing.shutdownTaint || self.fencing.nodeDeleted",
        "message": "requireFencingFor needs at least one kind of fencing evidence enabled in fencing; set requireFencingFor: [None] to release without fencing, or use ownerKinds to exclude workloads"
    }
]))]
pub struct DeadNodeSpec {
    /// How long the node's Ready condition must have been other than True (False, Unknown or
    /// missing) before the node can count as dead. Go duration, e.g. "5m", "90s", "1m30s".
    /// Timed by kube-remediator's own clock from when it saw the condition leave True (the
    /// condition's lastTransitionTime, written by another machine's clock, is only shown), and
    /// never from earlier than the start of its evidence window: after a restart, a watch
    /// relist or a stall of the API server or etcd the clock starts again. Default "5m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub not_ready_for: String,

    /// How long the kubelet's Lease (namespace kube-node-lease) must have gone unrenewed before
    /// the node can count as dead. Both this and notReadyFor must hold. Timed by
    /// kube-remediator's own clock from when it last saw the Lease's renewTime change, never by
    /// comparing renewTime (the kubelet's clock, which may run minutes off) with its own, and
    /// never from earlier than the start of its evidence window: when no Lease renewal arrives
    /// for 15 s (an etcd or API server stall, after which every Lease looks stale) the window
    /// restarts once renewals resume, so a stall does not read as mass node death. A node
    /// whose Lease is missing or deleted is unknown, never dead. When the Lease declares a longer
    /// leaseDurationSeconds (a kubelet configured with a longer nodeLeaseDurationSeconds renews
    /// every quarter of it), the node must have gone unrenewed for that long instead. At least
    /// "40s" (the kubelet's lease duration). Default "2m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "duration(self) >= duration('40s')",
        "message": "leaseStaleFor must be at least 40s, the kubelet's lease duration; shorter values flag healthy nodes"
    }]))]
    pub lease_stale_for: String,

    /// Which evidence proves a dead node's machine is really off (fenced). Pods listed in
    /// requireFencingFor are released only from fenced nodes.
    pub fencing: FencingSpec,

    /// Which pods need fencing evidence on top of a dead node before they are released,
    /// because a dead kubelet is not a dead machine and two writers corrupt data:
    /// StatefulSet (pods of StatefulSets), ReadWriteOnce (pods mounting a PersistentVolumeClaim,
    /// or a generic ephemeral volume's, with access mode ReadWriteOnce or ReadWriteOncePod, or an
    /// inline block device only one node can write: awsElasticBlockStore, gcePersistentDisk,
    /// azureDisk, cinder, rbd, iscsi, fc, vsphereVolume and the like), All (every pod), or None alone (no
    /// pod needs fencing: an explicit opt-out). Default [StatefulSet, ReadWriteOnce].
    #[schemars(length(min = 1, max = 3), extend("x-kubernetes-list-type" = "set"))]
    pub require_fencing_for: Vec<FencingRequirement>,
}

impl Default for DeadNodeSpec {
    fn default() -> Self {
        DeadNodeSpec {
            not_ready_for: "5m".into(),
            lease_stale_for: "2m".into(),
            fencing: FencingSpec::default(),
            require_fencing_for: vec![
                FencingRequirement::StatefulSet,
                FencingRequirement::ReadWriteOnce,
            ],
        }
    }
}

/// Which evidence counts as fencing. Each kind can be switched off when it is not trustworthy
/// in this cluster.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct FencingSpec {
    /// The node carries the taint node.kubernetes.io/out-of-service (non-graceful node
    /// shutdown: someone asserted the machine is off). Default true.
    pub out_of_service_taint: bool,

    /// The node carries the taint node.cloudprovider.kubernetes.io/shutdown (the cloud
    /// provider reports the instance shut down). Default true.
    pub shutdown_taint: bool,

    /// The Node object was deleted while pods still reference it. Default true.
    pub node_deleted: bool,
}

impl Default for FencingSpec {
    fn default() -> Self {
        FencingSpec { out_of_service_taint: true, shutdown_taint: true, node_deleted: true }
    }
}

/// Which pods need fencing evidence before they are released from a dead node.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    JsonSchema,
    strum::IntoStaticStr,
)]
pub enum FencingRequirement {
    /// Pods owned by a StatefulSet.
    StatefulSet,
    /// Pods mounting a PVC with access mode ReadWriteOnce or ReadWriteOncePod.
    ReadWriteOnce,
    /// Every pod.
    All,
    /// No pod (must be the only entry).
    None,
}

impl FencingRequirement {
    /// The value as written in the spec.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Releasing pods stuck Terminating on dead nodes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct StuckTerminatingSpec {
    /// Whether this rule runs. Default true.
    pub enabled: bool,

    /// How long after the pod's deletionTimestamp to wait before releasing it. The API server
    /// sets deletionTimestamp to the moment of deletion plus the pod's grace period, so the
    /// grace period is already included: a pod deleted at 10:00:00 with a 30s grace period has
    /// deletionTimestamp 10:00:30, and with delayAfterGrace "30s" becomes eligible at 10:01:00
    /// (if its node is dead, and fenced when the pod requires it). Go duration. Default "30s".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub delay_after_grace: String,
}

/// Releasing pods that block a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RecreateRolloutsSpec {
    /// Whether this rule runs. Default true.
    pub enabled: bool,

    /// How long after its deletionTimestamp a pod that blocks a rollout is released (when its
    /// node is dead, and fenced where required). When stuckTerminating also applies, the
    /// shorter delay wins. Go duration. Default "0s": a blocked rollout waits for nothing but
    /// the evidence that the node is dead.
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub delay_after_grace: String,
}

impl Default for RecreateRolloutsSpec {
    fn default() -> Self {
        RecreateRolloutsSpec { enabled: true, delay_after_grace: "0s".into() }
    }
}

impl Default for StuckTerminatingSpec {
    fn default() -> Self {
        StuckTerminatingSpec { enabled: true, delay_after_grace: "30s".into() }
    }
}

/// Actions on dead nodes, each with its own delay after the node was judged dead.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!has(self.assumeOffAfter) || has(self.outOfServiceTaintAfter) || has(self.deleteNodeAfter)",
        "message": "assumeOffAfter only matters with outOfServiceTaintAfter or deleteNodeAfter"
    }
]))]
pub struct NodeActionsSpec {
    /// Cordon the node (spec.unschedulable) this long after it was judged dead, so nothing new
    /// is scheduled there. Go duration. Unset (default): never. A node an admin uncordons during
    /// the outage is not cordoned again.
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub cordon_after: Option<String>,

    /// Add the taint node.kubernetes.io/out-of-service=nodeshutdown:NoExecute this long after the
    /// node was judged dead. This declares the machine off: upstream PodGC then force-deletes
    /// all the node's pods and the attach/detach controller force-detaches its volumes at once.
    /// So it is added only when the node has other fencing evidence (the cloud provider's
    /// shutdown taint), or when assumeOffAfter says a node dead that long is off. Its own taint
    /// never counts as fencing evidence for kube-remediator's own decisions. Go duration.
    /// Unset (default): never.
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub out_of_service_taint_after: Option<String>,

    /// RISK: treat a node dead this long as powered off, and add the out-of-service taint (and
    /// delete the Node, with deleteNodeAfter) without any other fencing evidence. A dead kubelet is not a dead machine: if the machine still runs
    /// its containers (a kubelet crash, a network partition), the node's StatefulSet and
    /// ReadWriteOnce pods get a second writer and data can be corrupted. Set it only where a node
    /// that stops heartbeating for this long is known to be off (e.g. a hardware watchdog or a
    /// fencing agent powers it off sooner). Go duration. Unset (default): never assume.
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub assume_off_after: Option<String>,

    /// Delete the Node object this long after it was judged dead (a machine that never comes
    /// back). Deleting a Node releases every pod bound to it (PodGC deletes them, StatefulSet
    /// and ReadWriteOnce pods included), so it needs the same fencing as the out-of-service
    /// taint: the cloud provider's shutdown taint or an out-of-service taint someone else
    /// applied on the node, or assumeOffAfter passed. Without either the Node is never deleted
    /// (the policy is accepted: the action simply waits for fencing evidence). Never a
    /// control-plane node. Go duration. Unset (default): never.
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub delete_node_after: Option<String>,

    /// How long a node must have been Ready again before kube-remediator removes its own cordon
    /// and out-of-service taint. Go duration. Default "1m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub undo_after: String,
}

impl Default for NodeActionsSpec {
    fn default() -> Self {
        NodeActionsSpec {
            cordon_after: None,
            out_of_service_taint_after: None,
            assume_off_after: None,
            delete_node_after: None,
            undo_after: "1m".into(),
        }
    }
}

/// Storm guards.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct SafetySpec {
    /// The circuit breaker: when more nodes selected by nodeSelector are unhealthy (Ready not
    /// True, or deleted) than this, the policy takes no action and sets condition
    /// CircuitOpen=True, because a network partition or control-plane outage looks like mass
    /// node death. An integer count, or a percentage of selected nodes such as "30%" (rounded
    /// down: "30%" of 3 nodes is 0, so any unhealthy node opens the circuit; use an integer on
    /// small clusters). Acting is allowed while unhealthy <= limit. Default "30%".
    // `nullable: false` keeps kube from marking the field nullable, so an explicit null is pruned
    // and defaulted by the API server instead of reaching us.
    #[schemars(extend("nullable" = false, "x-kubernetes-validations" = [{
        "rule": "type(self) == string ? self.matches('^(100|[1-9]?[0-9])%$') : self >= 0",
        "message": "maxUnhealthyNodes must be a non-negative integer or a percentage from 0% to 100%"
    }]))]
    pub max_unhealthy_nodes: IntOrString,

    /// Global pacing.
    pub rate_limit: RateLimitSpec,

    /// The most pods of one owner (one ReplicaSet, StatefulSet or Job) released in any 60-second
    /// window, so a StatefulSet comes back one member at a time rather than all at once. Bare
    /// pods count only towards rateLimit. Default 5.
    #[schemars(range(min = 1))]
    pub max_pods_per_owner_per_minute: i32,

    /// Once the circuit has opened (this policy's maxUnhealthyNodes, or the operator's
    /// cluster-wide --max-unhealthy-nodes-in-cluster), keep it open after the storm passes
    /// until an admin re-arms it by giving the annotation remediator.io/rearm-circuit a new
    /// value (kubectl annotate --overwrite remediationpolicy NAME
    /// remediator.io/rearm-circuit=$(date +%s)). For clusters where a person should look at
    /// every storm before anything is deleted. Default false.
    pub latch: bool,

    /// How long the circuit stays open after the storm passes (or after a re-arm): nodes come
    /// back from an outage one by one, and while a partition heals the last nodes look like a
    /// few dead ones. Go duration; "0s" closes it at once. Default "1m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub cooldown: String,
}

impl Default for SafetySpec {
    fn default() -> Self {
        SafetySpec {
            max_unhealthy_nodes: IntOrString::String("30%".into()),
            rate_limit: RateLimitSpec::default(),
            max_pods_per_owner_per_minute: 5,
            latch: false,
            cooldown: "1m".into(),
        }
    }
}

/// Global pacing of this policy's actions.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RateLimitSpec {
    /// The most actions (or would-be actions in DryRun) this policy takes in any 60-second
    /// window; the rest wait for a slot, oldest first. At least 1. Default 10.
    #[schemars(range(min = 1))]
    pub actions_per_minute: i32,
}

impl Default for RateLimitSpec {
    fn default() -> Self {
        RateLimitSpec { actions_per_minute: 10 }
    }
}

mod live_node_rules;
mod node_lifecycle;
pub use live_node_rules::{
    FailedByShutdownSpec, FinalizersSpec, LiveNodeStuckSpec, ReadyOnDeadNodeSpec,
    StaleReadinessAction, StaleReadinessSpec,
};
pub use node_lifecycle::{
    APPLIED_BY_US, GRACEFUL_SHUTDOWN_CONDITION, MAINTENANCE_CONDITIONS, MAINTENANCE_PLANNED,
    MaintenanceHandling, NodeLifecycleSpec, OTHER_TOOLS, OUT_OF_SERVICE_APPLIED_BY, OtherTool,
};

mod status;
pub use status::{
    ActionKind, ActionResult, BlockedRolloutStatus, CircuitState, CircuitStatus,
    NodeLeftAloneStatus, ReadyOnDeadNodePodStatus, RecentAction, RemediationPolicyStatus,
    StaleReadyPodStatus, StuckPodStatus,
};

/// The CustomResourceDefinition as YAML, as applied by Helm and `kubectl apply`.
pub fn crd_yaml() -> String {
    // Serializing a CRD (strings, maps, lists) to YAML cannot fail.
    yaml_serde::to_string(&RemediationPolicy::crd()).unwrap_or_default()
}

#[cfg(test)]
pub mod drift_check;
#[cfg(test)]
mod reference;

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn crd_identity() {
        let crd = RemediationPolicy::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("remediationpolicies.remediator.io"));
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["rp".to_string()]));
        assert_eq!(crd.spec.versions.len(), 1);
        assert_eq!(crd.spec.versions[0].name, "v1alpha1");
        assert!(
            crd.spec.versions[0].subresources.as_ref().and_then(|s| s.status.as_ref()).is_some()
        );
    }

    #[test]
    fn crd_yaml_has_printer_columns() {
        let crd = RemediationPolicy::crd();
        let columns: Vec<(String, String)> = crd.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.clone(), c.json_path.clone()))
            .collect();
        let want = [
            ("Mode", ".spec.mode"),
            ("Paused", ".spec.paused"),
            ("Matched Nodes", ".status.matchedNodes"),
            ("Unhealthy", ".status.unhealthyNodes"),
            ("Actions", ".status.actionsTotal"),
            ("Age", ".metadata.creationTimestamp"),
        ];
        let want: Vec<(String, String)> =
            want.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        assert_eq!(columns, want);
    }

    /// Every `(path, rule)` of `x-kubernetes-validations` in a schema, depth first.
    fn cel_rules(value: &serde_json::Value, path: &str, out: &mut Vec<(String, String)>) {
        match value {
            serde_json::Value::Object(map) => {
                for rule in map
                    .get("x-kubernetes-validations")
                    .and_then(|v| v.as_array())
                    .into_iter()
                    .flatten()
                {
                    out.push((
                        path.to_string(),
                        rule["rule"].as_str().unwrap_or_default().to_string(),
                    ));
                }
                for (key, child) in map {
                    if key != "x-kubernetes-validations" {
                        cel_rules(child, &format!("{path}/{key}"), out);
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| cel_rules(v, path, out)),
            _ => {}
        }
    }

    #[test]
    fn crd_schema_has_cel_rules_where_expected() {
        let crd = serde_json::to_value(RemediationPolicy::crd()).expect("CRD as JSON");
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut rules = Vec::new();
        cel_rules(schema, "", &mut rules);
        let spec = "/properties/spec/properties";
        let want = [
            (
                format!("{spec}/deadNode"),
                "!('None' in self.requireFencingFor) || size(self.requireFencingFor) == 1",
            ),
            (
                format!("{spec}/deadNode"),
                "!('All' in self.requireFencingFor) || size(self.requireFencingFor) == 1",
            ),
            (
                format!("{spec}/deadNode"),
                "self.requireFencingFor == ['None'] || self.fencing.outOfServiceTaint || self.fencing.shutdownTaint || self.fencing.nodeDeleted",
            ),
            (
                format!("{spec}/deadNode/properties/leaseStaleFor"),
                "duration(self) >= duration('40s')",
            ),
            (
                format!("{spec}/liveNodeStuck"),
                "!has(self.forceDeleteAfter) || duration(self.forceDeleteAfter) >= duration(self.delayAfterGrace)",
            ),
            (
                format!("{spec}/liveNodeStuck"),
                "!has(self.forceDeleteAfter) || duration(self.forceDeleteAfter) >= duration('5s')",
            ),
            (
                format!("{spec}/nodeActions"),
                "!has(self.assumeOffAfter) || has(self.outOfServiceTaintAfter) || has(self.deleteNodeAfter)",
            ),
            (
                format!("{spec}/readyOnDeadNode"),
                "!has(self.markNotReady) || !self.markNotReady || !has(self.enabled) || self.enabled",
            ),
            (
                format!("{spec}/safety/properties/maxUnhealthyNodes"),
                "type(self) == string ? self.matches('^(100|[1-9]?[0-9])%$') : self >= 0",
            ),
        ];
        let want: Vec<(String, String)> =
            want.into_iter().map(|(p, r)| (p, r.to_string())).collect();
        assert_eq!(rules, want);
    }

    #[test]
    fn crd_yaml_has_patterns_defaults_and_list_types() {
        let yaml = crd_yaml();
        for needle in [
            "pattern: ^([0-9]+(ms|s|m|h))+$",
            "x-kubernetes-int-or-string: true",
            "x-kubernetes-list-type: set",
            "x-kubernetes-list-type: map",
            "default: 30%",
            "default: 5m",
            "default: DryRun",
            "x-kubernetes-validations:",
        ] {
            assert!(yaml.contains(needle), "CRD YAML lacks {needle:?}:\n{yaml}");
        }
        assert_eq!(
            yaml.matches("pattern: ^([0-9]+(ms|s|m|h))+$").count(),
            16,
            "16 duration fields: deadNode 2, the two delayAfterGrace, nodeActions 5, cooldown, \
             liveNodeStuck 2, finalizers.removeAfter, staleReadiness.nodeReadyFor, \
             nodeLifecycle.gracefulShutdownGrace, failedByShutdown.deleteAfter"
        );
    }

    #[test]
    fn max_unhealthy_nodes_is_not_nullable() {
        // A nullable field keeps an explicit null, which IntOrString cannot deserialize.
        let crd = serde_json::to_value(RemediationPolicy::crd()).expect("CRD as JSON");
        let field = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["safety"]["properties"]["maxUnhealthyNodes"];
        assert_eq!(field["nullable"], serde_json::json!(false));
        assert_eq!(field["default"], serde_json::json!("30%"));
    }

    #[test]
    fn empty_spec_gets_documented_defaults() {
        let spec: RemediationPolicySpec =
            serde_json::from_value(serde_json::json!({})).expect("empty spec");
        assert_eq!(spec, RemediationPolicySpec::default());
        assert_eq!(spec.mode, Mode::DryRun);
        assert_eq!(spec.owner_kinds, OwnerKind::ALL.to_vec());
        assert_eq!(spec.dead_node.not_ready_for, "5m");
        assert_eq!(spec.dead_node.lease_stale_for, "2m");
        assert_eq!(
            spec.dead_node.require_fencing_for,
            vec![FencingRequirement::StatefulSet, FencingRequirement::ReadWriteOnce]
        );
        assert!(spec.dead_node.fencing.node_deleted);
        assert_eq!(spec.stuck_terminating.delay_after_grace, "30s");
        assert_eq!(spec.safety.max_unhealthy_nodes, IntOrString::String("30%".into()));
        assert_eq!(spec.safety.rate_limit.actions_per_minute, 10);
        assert_eq!(spec.safety.max_pods_per_owner_per_minute, 5);
    }

    #[test]
    fn partial_nested_objects_keep_other_defaults() {
        let spec: RemediationPolicySpec = serde_json::from_value(serde_json::json!({
            "mode": "Enforce",
            "deadNode": {"notReadyFor": "10m", "fencing": {"nodeDeleted": false}},
            "safety": {"maxUnhealthyNodes": 2}
        }))
        .expect("spec");
        assert_eq!(spec.mode, Mode::Enforce);
        assert_eq!(spec.dead_node.not_ready_for, "10m");
        assert_eq!(spec.dead_node.lease_stale_for, "2m");
        assert!(!spec.dead_node.fencing.node_deleted);
        assert!(spec.dead_node.fencing.out_of_service_taint);
        assert_eq!(spec.safety.max_unhealthy_nodes, IntOrString::Int(2));
        assert_eq!(spec.safety.rate_limit.actions_per_minute, 10);
    }

    #[test]
    fn status_round_trips_with_camel_case() {
        let status = RemediationPolicyStatus {
            observed_generation: Some(3),
            matched_nodes: 4,
            recent_actions: vec![RecentAction {
                time: Time("2026-01-01T00:00:00Z".parse().expect("ts")),
                action: ActionKind::ForceDelete,
                mode: Mode::DryRun,
                namespace: "ns".into(),
                name: "web-0".into(),
                uid: "u1".into(),
                node: "n1".into(),
                owner: Some("StatefulSet/web".into()),
                reason: "node n1 dead".into(),
                result: ActionResult::WouldAct,
                detail: None,
            }],
            ..Default::default()
        };
        let json = serde_json::to_value(&status).expect("serialize");
        assert_eq!(json["observedGeneration"], 3);
        assert_eq!(json["matchedNodes"], 4);
        assert_eq!(json["recentActions"][0]["result"], "WouldAct");
        let back: RemediationPolicyStatus = serde_json::from_value(json).expect("deserialize");
        assert_eq!(back, status);
    }
}
