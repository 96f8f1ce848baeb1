//! Why the last look skips an action: one variant per reason, whose text (its `Display`) is what
//! the action's Events, log line and status record say.

use std::fmt;

use jiff::Timestamp;

use crate::crd::{EXCLUDE_ANNOTATION, FencingRequirement, Mode};

/// Why an action no longer stands after the last look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The policy read fresh does not stand behind the plan any more.
    Policy(PolicySkip),
    PodGone,
    PodReplaced,
    PodNotTerminating,
    PodTerminatingAlready,
    /// A stale Ready=False pod its kubelet repaired, or with something not ready.
    PodNoLongerStale,
    /// A pod that is no longer Failed with a graceful node shutdown's reason.
    PodNoLongerFailedByShutdown,
    /// A pod to mark not Ready that is not Ready=True any more.
    PodNotReadyAlready,
    PodMoved {
        to: String,
    },
    PodExcluded,
    NodeGone,
    NodeReplaced,
    /// A Node seen deleted when planned exists again.
    NodeBack,
    NodeExcluded,
    NodeReadyAgain,
    /// A live node (the plan wanted it Ready) that is not Ready any more.
    NodeNoLongerReady,
    /// An eviction's node, not Ready now.
    NodeNotReadyNow,
    /// An undo's node, not Ready any more.
    NodeNotReadyForUndo,
    /// The Lease renewed since the plan, or gone (a finalizer removal).
    LeaseRenewed,
    /// The Lease renewed since the plan (a node action).
    LeaseRenewedKubeletAlive,
    /// The Lease's renewTime as planned, and now (a force delete).
    LeaseRenewedFrom {
        planned: Option<Timestamp>,
        now: Option<Timestamp>,
    },
    FencingGone(FencingRequirement),
    ManagedByAnotherTool(String),
    AlreadyCordoned,
    UncordonedByAdmin,
    AlreadyTainted,
    ShutdownTaintGone,
    ControlPlaneNode,
    /// The node read fresh is in maintenance (the condition named).
    NodeInMaintenance(&'static str),
    /// The node read fresh is shutting down gracefully, its grace not passed.
    NodeShuttingDown,
}

/// Why the fresh policy does not stand behind the plan; `verb` says what did not happen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicySkip {
    Deleted,
    NotEnforcing { mode: Mode, verb: &'static str },
    Paused { verb: &'static str },
    Changed,
}

impl From<PolicySkip> for Skip {
    fn from(why: PolicySkip) -> Self {
        Skip::Policy(why)
    }
}

impl fmt::Display for PolicySkip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicySkip::Deleted => f.write_str("the policy was deleted"),
            PolicySkip::NotEnforcing { mode, verb } => {
                write!(f, "the policy is in {} now; nothing {verb}", mode.as_str())
            }
            PolicySkip::Paused { verb } => write!(f, "the policy is paused now; nothing {verb}"),
            PolicySkip::Changed => {
                f.write_str("the policy changed since the plan; its next evaluation decides")
            }
        }
    }
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Skip::Policy(why) => return why.fmt(f),
            Skip::PodGone => "pod already gone",
            Skip::PodReplaced => "a new pod with the same name replaced it; left alone",
            Skip::PodNotTerminating => "pod is no longer Terminating",
            Skip::PodTerminatingAlready => "the pod is Terminating already",
            Skip::PodNoLongerStale => {
                "the pod is no longer left Ready=False with everything ready (its kubelet \
                 repaired it, or something in it is not ready); left alone"
            }
            Skip::PodNoLongerFailedByShutdown => {
                "the pod is no longer Failed by a graceful node shutdown; left alone"
            }
            Skip::PodNotReadyAlready => {
                "the pod is not Ready=True any more (marked by someone else, or reported by its \
                 kubelet); left alone"
            }
            Skip::PodMoved { to } => return write!(f, "pod moved to node {to:?}"),
            Skip::PodExcluded => {
                return write!(f, "pod annotated {EXCLUDE_ANNOTATION}=true; left alone");
            }
            Skip::NodeGone => "the node is gone",
            Skip::NodeReplaced => "a new node with the same name replaced it; left alone",
            Skip::NodeBack => "a Node of that name exists again; left alone",
            Skip::NodeExcluded => {
                return write!(f, "node annotated {EXCLUDE_ANNOTATION}=true; left alone");
            }
            Skip::NodeReadyAgain => "node is Ready again; left alone",
            Skip::NodeNoLongerReady => "the node is no longer Ready: the dead-node rules decide",
            Skip::NodeNotReadyNow => "its node is not Ready now; left alone",
            Skip::NodeNotReadyForUndo => "the node is not Ready any more; our changes stay",
            Skip::LeaseRenewed => {
                "the node's Lease was renewed since the plan (or is gone); left alone"
            }
            Skip::LeaseRenewedKubeletAlive => {
                "the node's Lease was renewed since the plan: its kubelet is alive; left alone"
            }
            Skip::LeaseRenewedFrom { planned, now } => {
                let show = |t: &Option<Timestamp>| t.map_or("none".to_string(), |t| t.to_string());
                return write!(
                    f,
                    "the node's Lease was renewed since the plan (renewTime {} -> {}): its \
                     kubelet is alive; left alone",
                    show(planned),
                    show(now)
                );
            }
            Skip::FencingGone(required) => {
                return write!(
                    f,
                    "fencing evidence ({}) no longer on the node; left alone",
                    required.as_str()
                );
            }
            Skip::ManagedByAnotherTool(marker) => {
                return write!(f, "another tool manages this node ({marker}); left to it");
            }
            Skip::AlreadyCordoned => "already cordoned",
            Skip::UncordonedByAdmin => {
                "an admin uncordoned it after we cordoned it; not cordoned again"
            }
            Skip::AlreadyTainted => "already tainted out-of-service",
            Skip::ShutdownTaintGone => "the shutdown taint it relied on is gone; not tainted",
            Skip::ControlPlaneNode => "a control-plane node is never deleted",
            Skip::NodeInMaintenance(condition) => {
                return write!(f, "the node is in maintenance ({condition}=True); left alone");
            }
            Skip::NodeShuttingDown => {
                "the node is shutting down gracefully and its grace has not passed; left alone"
            }
        };
        f.write_str(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words Events, logs and status records have always shown (the force delete's are
    /// pinned by its recheck table).
    #[test]
    fn skips_read_as_they_always_did() {
        let table = [
            (Skip::PodTerminatingAlready, "the pod is Terminating already"),
            (
                Skip::PodNoLongerStale,
                "the pod is no longer left Ready=False with everything ready (its kubelet \
                 repaired it, or something in it is not ready); left alone",
            ),
            (Skip::NodeNotReadyNow, "its node is not Ready now; left alone"),
            (
                Skip::LeaseRenewed,
                "the node's Lease was renewed since the plan (or is gone); left alone",
            ),
            (
                Skip::LeaseRenewedKubeletAlive,
                "the node's Lease was renewed since the plan: its kubelet is alive; left alone",
            ),
            (Skip::NodeGone, "the node is gone"),
            (Skip::NodeReplaced, "a new node with the same name replaced it; left alone"),
            (Skip::NodeNotReadyForUndo, "the node is not Ready any more; our changes stay"),
            (
                Skip::ManagedByAnotherTool("cluster-api".into()),
                "another tool manages this node (cluster-api); left to it",
            ),
            (Skip::AlreadyCordoned, "already cordoned"),
            (
                Skip::UncordonedByAdmin,
                "an admin uncordoned it after we cordoned it; not cordoned again",
            ),
            (Skip::AlreadyTainted, "already tainted out-of-service"),
            (Skip::ShutdownTaintGone, "the shutdown taint it relied on is gone; not tainted"),
            (Skip::ControlPlaneNode, "a control-plane node is never deleted"),
            (
                PolicySkip::NotEnforcing { mode: Mode::DryRun, verb: "evicted" }.into(),
                "the policy is in DryRun now; nothing evicted",
            ),
            (PolicySkip::Paused { verb: "done" }.into(), "the policy is paused now; nothing done"),
        ];
        for (skip, want) in table {
            assert_eq!(skip.to_string(), want, "{skip:?}");
        }
    }
}
