//! The policy's status: what kube-remediator last concluded, and the record of its actions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use prometheus_client::encoding::EncodeLabelValue;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Mode;

/// What kube-remediator last concluded about this policy.
// Lists are always written, empty ones too: the status is sent as a merge patch, where an omitted
// key keeps the old value (a rollout no longer blocked, a pod no longer stuck would stay listed).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct RemediationPolicyStatus {
    /// The metadata.generation this status was computed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Ready (evaluated against synced caches), CircuitOpen (too many unhealthy nodes: no
    /// action), Paused (spec.paused), Invalid (the spec cannot be used; see message).
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,

    /// Nodes selected by nodeSelector (including deleted nodes still referenced by pods).
    pub matched_nodes: i32,

    /// Selected nodes whose Ready condition is not True, or that were deleted.
    pub unhealthy_nodes: i32,

    /// Selected nodes that are dead by deadNode's rules.
    pub dead_nodes: i32,

    /// Selected pods Terminating past their grace period (deletionTimestamp passed) on selected
    /// nodes, dead or not.
    pub stuck_pods: i32,

    /// Actions taken (Enforce, result Done) or recorded as would-be actions (DryRun, result
    /// WouldAct) since the policy was created.
    pub actions_total: i64,

    /// The latest actions and would-be actions, newest first, at most 20.
    #[schemars(length(max = 20))]
    pub recent_actions: Vec<RecentAction>,

    /// The storm guard over time: whether the circuit is open, latched until re-armed, or
    /// cooling down, and since when. Kept here so that a restart resumes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub circuit: Option<CircuitStatus>,

    /// Pods stuck Terminating on live nodes (liveNodeStuck) or held by finalizers, with the
    /// diagnosed cause, at most 20.
    #[schemars(length(max = 20))]
    pub stuck_on_live_nodes: Vec<StuckPodStatus>,

    /// Pods left Ready=False after a node blip while every container is ready (staleReadiness),
    /// at most 20.
    #[schemars(length(max = 20))]
    pub stale_ready_pods: Vec<StaleReadyPodStatus>,

    /// Nodes not Ready that this policy leaves alone, and why: InMaintenance (a node lifecycle
    /// condition MaintenanceInProgress, DrainInProgress or Drained is True: no node action, no
    /// pod release), ShuttingDown (GracefulNodeShutdownInProgress is True and
    /// nodeLifecycle.gracefulShutdownGrace has not passed: nothing yet), LeftToAnotherTool
    /// (Cluster API, Karpenter or medik8s manages it: no node action). At most 20.
    #[schemars(length(max = 20))]
    pub nodes_left_alone: Vec<NodeLeftAloneStatus>,

    /// Pods left Ready=True on nodes dead by this policy's evidence (readyOnDeadNode): still
    /// in their Services' endpoints. At most 20.
    #[schemars(length(max = 20))]
    pub ready_on_dead_node_pods: Vec<ReadyOnDeadNodePodStatus>,

    /// Recreate Deployments and StatefulSets blocked by Terminating pods on this policy's
    /// nodes, at most 20.
    #[schemars(length(max = 20))]
    pub blocked_rollouts: Vec<BlockedRolloutStatus>,
}

/// The storm guard's state (see the CircuitOpen condition for why).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CircuitStatus {
    /// Closed (actions allowed), Open (too many unhealthy nodes now, in the policy's scope or
    /// the cluster), Latched (the storm passed; safety.latch holds it open until an admin
    /// re-arms it), CoolingDown (the storm passed; open until `until`, safety.cooldown).
    pub state: CircuitState,
    /// When it entered this state.
    pub since: Time,
    /// CoolingDown: when it closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Time>,
    /// Latched: the value of the annotation remediator.io/rearm-circuit when it latched; any
    /// other value re-arms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rearm_token: Option<String>,
}

/// The storm guard's states.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    JsonSchema,
    strum::IntoStaticStr,
)]
pub enum CircuitState {
    Closed,
    Open,
    Latched,
    CoolingDown,
}

/// A pod stuck Terminating and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StuckPodStatus {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// Finalizers, ContainersRunning or KubeletNotFinishing.
    pub cause: String,
    /// The evidence: the finalizers or containers named, the volumes still in use.
    pub detail: String,
    /// When it became stuck: deletionTimestamp plus liveNodeStuck.delayAfterGrace.
    pub since: Time,
}

/// A node not Ready that the policy leaves alone.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeLeftAloneStatus {
    pub name: String,
    /// InMaintenance, ShuttingDown or LeftToAnotherTool.
    pub reason: String,
    /// What holds it (the condition, the grace's end, the tool and its marker) and what is not
    /// done.
    pub message: String,
}

/// A pod left Ready=False after a node blip.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StaleReadyPodStatus {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// When its Ready condition went False, as written in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_false_since: Option<Time>,
}

/// A pod left Ready=True on a dead node.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadyOnDeadNodePodStatus {
    pub namespace: String,
    pub name: String,
    pub node: String,
    /// When its node became dead by this policy's evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_dead_since: Option<Time>,
}

/// A workload whose rollout is blocked, and by what.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockedRolloutStatus {
    /// Deployment or StatefulSet.
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The blocking pods as `pod on node: cause`.
    pub blocking_pods: Vec<String>,
}

/// One action taken, or that would have been taken in DryRun.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecentAction {
    /// When the action was taken or recorded.
    pub time: Time,
    /// What was done.
    pub action: ActionKind,
    /// The policy's mode at the time.
    pub mode: Mode,
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's UID (the delete carried it as a precondition).
    pub uid: String,
    /// The node the pod was bound to.
    pub node: String,
    /// The pod's controlling owner as Kind/name, absent for bare pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Why the action was due.
    pub reason: String,
    /// Done (Enforce), WouldAct (DryRun), Skipped (a fresh read showed the action no longer
    /// applied, e.g. the pod was gone or replaced), Failed (the API refused; see detail).
    pub result: ActionResult,
    /// Detail for Skipped and Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// What an action does.
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
    strum::EnumIter,
    EncodeLabelValue,
)]
pub enum ActionKind {
    /// DELETE of the pod with gracePeriodSeconds 0 and a UID precondition.
    ForceDelete,
    /// The node set unschedulable (nodeActions.cordonAfter).
    Cordon,
    /// The taint node.kubernetes.io/out-of-service=nodeshutdown:NoExecute added
    /// (nodeActions.outOfServiceTaintAfter).
    OutOfServiceTaint,
    /// The Node object deleted (nodeActions.deleteNodeAfter).
    DeleteNode,
    /// This operator's own cordon and taint removed from a node Ready again.
    UndoNodeActions,
    /// Allowlisted finalizers removed from a Terminating pod they held (finalizers.removable).
    RemoveFinalizers,
    /// A pod left Ready=False after a node blip evicted (staleReadiness.action Evict).
    Evict,
    /// A pod left Failed by a graceful node shutdown deleted (failedByShutdown): a normal
    /// DELETE with a UID precondition.
    DeleteShutdownPod,
    /// A pod left Ready=True on a dead node marked not Ready (readyOnDeadNode.markNotReady): its
    /// Ready condition set False through the status subresource, conditional on the pod's UID and
    /// resourceVersion.
    MarkPodNotReady,
}

impl ActionKind {
    /// The value as written in the status (also the metrics label).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How an action ended.
#[derive(
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    JsonSchema,
    strum::IntoStaticStr,
    strum::EnumIter,
    EncodeLabelValue,
)]
pub enum ActionResult {
    /// Performed (Enforce).
    Done,
    /// Recorded only (DryRun).
    WouldAct,
    /// Not performed: a fresh read showed it no longer applied.
    Skipped,
    /// The API server refused or did not answer.
    Failed,
    /// Being sent (Enforce): recorded before the request, so that an operator stopped between
    /// the request and its outcome leaves a trace; for an action due at a known instant, up to
    /// 1 s before it (detail `due at ...`), then Skipped if it is no longer due then. The next
    /// run replaces it: Done when the object is gone, Skipped (decided again) when it is still
    /// there.
    Pending,
}

impl ActionResult {
    /// The value as written in the status (also the metrics label).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the attempt spends a slot of the rate limit and the per-owner budget: Done,
    /// WouldAct, Failed and Pending do; Skipped (nothing was sent, or a PodDisruptionBudget
    /// refused the eviction: nothing was disrupted) does not.
    pub fn spends_budget(self) -> bool {
        self != ActionResult::Skipped
    }

    /// Whether the action counts in status.actionsTotal.
    pub fn counts_as_action(self) -> bool {
        matches!(self, ActionResult::Done | ActionResult::WouldAct)
    }
}
