//! The spec of Kubernetes' node lifecycle conditions (KEP-5683, 1.37 alpha, gate
//! `NodeLifecycleConditions`): planned maintenance, a drain and a graceful shutdown are not
//! failures. And the names of the other tools kube-remediator leaves a node to.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::DURATION_PATTERN;

/// Node conditions that, with status True, say the node is in maintenance: no action and no pod
/// release while one holds (unless nodeLifecycle.maintenance is Ignore). `MaintenancePlanned`
/// alone is not among them: maintenance that has not started yet does not make a dead node any
/// less dead.
pub const MAINTENANCE_CONDITIONS: [&str; 3] =
    ["MaintenanceInProgress", "DrainInProgress", "Drained"];
/// Shown, holds nothing: maintenance announced, not started.
pub const MAINTENANCE_PLANNED: &str = "MaintenancePlanned";
/// The kubelet is shutting the node down gracefully (terminating its pods itself).
pub const GRACEFUL_SHUTDOWN_CONDITION: &str = "GracefulNodeShutdownInProgress";

/// The annotation that says who applied a node's out-of-service taint (the convention of
/// OpenShift's two-node fencing, whose Pacemaker writes `pacemaker`).
pub const OUT_OF_SERVICE_APPLIED_BY: &str = "node.kubernetes.io/out-of-service-applied-by";
/// Our value of [`OUT_OF_SERVICE_APPLIED_BY`]: the taint is ours (never evidence for our own
/// decisions, and ours to remove when the node recovers).
pub const APPLIED_BY_US: &str = "kube-remediator";

/// A tool that remediates nodes itself, as recognised by a label or annotation key prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OtherTool {
    /// The key prefix of its labels and annotations.
    pub prefix: &'static str,
    /// Its name, as Events, status, `plan` and `explain` say it.
    pub name: &'static str,
}

/// Tools that remediate nodes themselves (Cluster API's MachineHealthCheck, Karpenter, medik8s'
/// Node Healthcheck and remediators), by the key prefix of their labels and annotations on a
/// Node (e.g. `cluster.x-k8s.io/machine`, `karpenter.sh/nodepool`): node actions leave such
/// nodes to them.
pub const OTHER_TOOLS: [OtherTool; 4] = [
    OtherTool { prefix: "cluster.x-k8s.io/", name: "Cluster API" },
    OtherTool { prefix: "karpenter.sh/", name: "Karpenter" },
    OtherTool { prefix: "remediation.medik8s.io/", name: "medik8s" },
    OtherTool { prefix: "medik8s.io/", name: "medik8s" },
];

/// Kubernetes' node lifecycle conditions (1.37, alpha gate NodeLifecycleConditions), set on a
/// Node by an admin or an authorised controller: planned maintenance, a drain and a graceful
/// shutdown are not failures.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", default)]
pub struct NodeLifecycleSpec {
    /// Respect (default): a node whose condition MaintenanceInProgress, DrainInProgress or
    /// Drained is True is in maintenance, not failing: no node action (cordon, taint, delete,
    /// undo) and no pod release there, reported as InMaintenance (status.nodesLeftAlone, a
    /// NodeLeftAlone Event on the Node once per episode, `plan`, `explain`). MaintenancePlanned
    /// alone holds nothing. Ignore: the conditions are disregarded and the node is judged like
    /// any other.
    pub maintenance: MaintenanceHandling,

    /// How long a node whose condition GracefulNodeShutdownInProgress is True is given to
    /// finish its shutdown (its kubelet terminates its pods itself) before any action on it or
    /// its pods: counted by kube-remediator's own clock from when it first saw the condition
    /// True (never from the condition's lastTransitionTime, another machine's clock; after a
    /// restart, from when it saw it again). Set it to at least the kubelets'
    /// shutdownGracePeriod. Reported as ShuttingDown while it runs. Go duration; "0s" waits for
    /// nothing. Default "2m".
    #[schemars(length(max = 32), pattern(DURATION_PATTERN))]
    pub graceful_shutdown_grace: String,
}

impl Default for NodeLifecycleSpec {
    fn default() -> Self {
        NodeLifecycleSpec {
            maintenance: MaintenanceHandling::Respect,
            graceful_shutdown_grace: "2m".into(),
        }
    }
}

/// What a node in maintenance means to the policy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MaintenanceHandling {
    /// No node action and no pod release on a node in maintenance.
    #[default]
    Respect,
    /// Judge a node in maintenance like any other.
    Ignore,
}
