//! The policy's status: what kube-remediator last concluded, and the record of its actions.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use prometheus_client::encoding::EncodeLabelValue;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Mode;

/// What kube-remediator last concluded about this policy.
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

    /// Recreate Deployments and StatefulSets blocked by Terminating pods on this policy's
    /// nodes, at most 20.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20))]
    pub blocked_rollouts: Vec<BlockedRolloutStatus>,
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
    Hash,
    JsonSchema,
    strum::IntoStaticStr,
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
}

impl ActionResult {
    /// The value as written in the status (also the metrics label).
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the action counts in status.actionsTotal.
    pub fn counts_as_action(self) -> bool {
        matches!(self, ActionResult::Done | ActionResult::WouldAct)
    }
}
