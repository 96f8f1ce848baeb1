//! The spec of incident 3 (pods stuck Terminating on a live node) and of finalizers, which hold a
//! pod on any node: diagnosed and reported always, released only where a policy opts in.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DURATION_PATTERN;

/// Pods stuck Terminating on a live node: Ready, its kubelet renewing its Lease, and yet the pod
/// is still there after its grace period. The cause is diagnosed from what the API shows, most
/// specific first (finalizers left, containers still running, or every container stopped but
/// the kubelet not finishing: a volume unmount or cgroup clean-up), and reported: a Warning Event
/// on the pod when the cause is found or changes, the gauge kube_remediator_live_node_stuck_pods,
/// status.stuckOnLiveNodes and `kube-remediator plan`. Nothing is released unless
/// forceDeleteAfter (or finalizers.removable) says so.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.forceDeleteAfter) || duration(self.forceDeleteAfter) >= duration(self.delayAfterGrace)",
    "message": "forceDeleteAfter must be at least delayAfterGrace: a pod is released only after it is reported stuck"
}, {
    "rule": "!has(self.forceDeleteAfter) || duration(self.forceDeleteAfter) >= duration('5s')",
    "message": "forceDeleteAfter must be at least 5s: a live kubelet finishes a pod within seconds of its grace period, and a force delete sooner races it"
}]))]
pub struct LiveNodeStuckSpec {
    /// Whether this rule runs (diagnose and report). Default true.
    pub enabled: bool,

    /// How long after its deletion plus grace period a pod on a live node counts as stuck and is
    /// reported, counted from when kube-remediator first saw the pod Terminating (by its own
    /// clock, never by the API server's timestamp). Go duration. Default "2m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub delay_after_grace: String,

    /// Opt-in: force delete (grace period 0, UID precondition) a pod stuck on a live node this
    /// long after its deletion plus grace period (by kube-remediator's clock, from when it saw
    /// the pod Terminating), when no finalizer holds it (a finalizer would keep the
    /// pod whatever the delete). The kubelet then stops whatever it still runs. Go duration, at
    /// least delayAfterGrace and at least "5s" (a live kubelet finishes a pod within seconds of
    /// its grace period; a force delete sooner would race it). Unset (default): never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub force_delete_after: Option<String>,

    /// RISK, opt-in: let forceDeleteAfter release pods that need fencing by
    /// deadNode.requireFencingFor (StatefulSet pods and pods with ReadWriteOnce volumes, by
    /// default) on a live node too. A live node has no fencing evidence: its kubelet may still
    /// run the containers or hold the volume, and the replacement would be a second writer.
    /// Default false: such pods are reported, never force-deleted on a live node.
    pub force_delete_unfenced: bool,
}

impl Default for LiveNodeStuckSpec {
    fn default() -> Self {
        LiveNodeStuckSpec {
            enabled: true,
            delay_after_grace: "2m".into(),
            force_delete_after: None,
            force_delete_unfenced: false,
        }
    }
}

/// Finalizers that may be removed from a Terminating pod they hold. A pod a finalizer holds is
/// never force-deleted (the delete would not remove it, and would be recorded as done although
/// the pod stays); it is reported as held by that finalizer, on a live node or a dead one.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct FinalizersSpec {
    /// Exact finalizer names kube-remediator may remove (a JSON patch that first checks the
    /// pod's UID and its current finalizers). Only these are removed; a pod also held by any
    /// other finalizer is left alone and reported. Empty (default): none is ever removed.
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "set"))]
    pub removable: Vec<String>,

    /// On a live node: how long after its deletionTimestamp the removable finalizers are
    /// removed from a stuck pod. On a dead node they are removed when the pod would be released
    /// (dead node, fencing, stuckTerminating's delay), and the pod is force-deleted next.
    /// Go duration. Default "5m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub remove_after: String,
}

impl Default for FinalizersSpec {
    fn default() -> Self {
        FinalizersSpec { removable: Vec::new(), remove_after: "5m".into() }
    }
}

/// Pods left Ready=False after a node blip (field incident 2; kubernetes/kubernetes#80968): when
/// a node goes Unknown, the node lifecycle controller marks its pods not Ready, and a kubelet that
/// comes back without resending their status leaves them so: every container reports ready, yet
/// the pod is out of its Services' endpoints. Found on nodes Ready again for nodeReadyFor, and
/// reported (a StaleReadiness Event on the pod, the gauge kube_remediator_stale_ready_pods,
/// status.staleReadyPods, `plan`, `explain`); with action Evict, evicted through the Eviction API
/// so PodDisruptionBudgets hold (a refusal is reported and retried), and only pods with a
/// controller that replaces them. A pod whose own containers are not ready (a failing readiness
/// probe) is never touched.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct StaleReadinessSpec {
    /// Whether this rule runs. Default true.
    pub enabled: bool,

    /// Report (default): Events, metric, status only. Evict: also evict the pod through the
    /// Eviction API (PodDisruptionBudgets respected), so its controller replaces it.
    pub action: StaleReadinessAction,

    /// How long the pod's node must have been Ready again (by kube-remediator's own clock)
    /// before its stale pods are reported or evicted: a kubelet that is resending statuses gets
    /// this long to do so. Go duration. Default "1m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub node_ready_for: String,
}

impl Default for StaleReadinessSpec {
    fn default() -> Self {
        StaleReadinessSpec {
            enabled: true,
            action: StaleReadinessAction::Report,
            node_ready_for: "1m".into(),
        }
    }
}

/// What `staleReadiness` does about a stale pod.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum StaleReadinessAction {
    /// Report only.
    Report,
    /// Evict through the Eviction API.
    Evict,
}

/// Pods left Failed by a graceful node shutdown (kubernetes/kubernetes#113278): the kubelet's
/// shutdown manager ends every pod with phase Failed and reason Terminated (Shutdown before
/// Kubernetes 1.22), and turns away pods admitted during the shutdown with reason NodeShutdown.
/// Nothing deletes them but PodGC's terminated-pod-gc-threshold (12500 pods by default), so
/// they linger in every listing. With enabled, such a pod is deleted (a normal DELETE with a UID
/// precondition: it is Failed already, so the API server removes it at once) once
/// kube-remediator has seen it so for deleteAfter, by its own clock. Off by default; it passes
/// the same checks as every action (scope, exclusion, rate limit, DryRun records only). A pod
/// Failed for any other reason is never touched.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct FailedByShutdownSpec {
    /// Whether pods left Failed by a graceful node shutdown are deleted. Default false.
    pub enabled: bool,

    /// How long kube-remediator must have seen the pod Failed by a shutdown (by its own clock,
    /// from when it first saw it so; a restart starts the count again) before it is deleted:
    /// time for people and tools to read its status. Go duration. Default "1h".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub delete_after: String,
}

impl Default for FailedByShutdownSpec {
    fn default() -> Self {
        FailedByShutdownSpec { enabled: false, delete_after: "1h".into() }
    }
}

/// Pods left Ready=True on a dead node (kubernetes/kubernetes#112733, #125618, #135205): the
/// node lifecycle controller marks a node's pods not Ready only when it sees the node's Ready
/// condition go from True to not True itself. A kubelet that reported NotReady before it went
/// silent, or a pod status the kubelet sent that landed after the marking, leaves them Ready:
/// their Services keep sending them traffic until the taint manager evicts them (after their
/// tolerationSeconds, 300 by default). Such a pod on a node dead by this policy's evidence
/// (deadNode) is reported: a ReadyOnDeadNode Event on the pod, the gauge
/// kube_remediator_ready_on_dead_node_pods, status.readyOnDeadNodePods, `plan` and `explain`.
/// With markNotReady, each is also marked not Ready, as the node lifecycle controller does.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.markNotReady) || !self.markNotReady || !has(self.enabled) || self.enabled",
    "message": "readyOnDeadNode.markNotReady needs readyOnDeadNode.enabled",
}]))]
pub struct ReadyOnDeadNodeSpec {
    /// Whether pods left Ready=True on dead nodes are reported. Default true.
    pub enabled: bool,
    /// Mark each such pod not Ready (MarkPodNotReady): its Ready condition set False with reason
    /// NodeDeadByKubeRemediator through the pod's status, as the node lifecycle controller does
    /// when a node goes Unknown, so that its Services' EndpointSlices drop it within seconds.
    /// Once per pod, through the same guards, records and DryRun as every action; a kubelet that
    /// comes back reports the pod's readiness again itself. Default false.
    pub mark_not_ready: bool,
}

impl Default for ReadyOnDeadNodeSpec {
    fn default() -> Self {
        ReadyOnDeadNodeSpec { enabled: true, mark_not_ready: false }
    }
}
