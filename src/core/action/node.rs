//! An action on a node: cordon, the out-of-service taint, Node deletion, and the undo of this
//! operator's own changes.

use jiff::Timestamp;

use super::{Act, LastLook, NodeTarget, Skip, Target, policy_still_enforces};
use crate::core::node::DeathEvidence;
use crate::core::observed::Readiness;
use crate::crd::{ActionKind, FencingSpec, OUT_OF_SERVICE_TAINT, SHUTDOWN_TAINT};

/// What a node action does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeActionKind {
    /// Set `spec.unschedulable`.
    Cordon,
    /// Add `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`; `assumed_off`: on the
    /// policy's assumeOffAfter, without other fencing evidence.
    OutOfServiceTaint { assumed_off: bool },
    /// Delete the Node object (which releases all its pods: PodGC deletes them). Only with
    /// fencing evidence from outside the operator, or `assumed_off`: on the policy's
    /// assumeOffAfter.
    DeleteNode { assumed_off: bool },
    /// Remove this operator's own cordon and taint, and its record.
    Undo,
}

impl NodeActionKind {
    /// The kind as recorded in the status and the metrics.
    pub fn action_kind(self) -> ActionKind {
        match self {
            NodeActionKind::Cordon => ActionKind::Cordon,
            NodeActionKind::OutOfServiceTaint { .. } => ActionKind::OutOfServiceTaint,
            NodeActionKind::DeleteNode { .. } => ActionKind::DeleteNode,
            NodeActionKind::Undo => ActionKind::UndoNodeActions,
        }
    }
}

/// An action on a node (cordon, taint, delete, undo), decided from the same evidence as pod
/// releases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAction {
    pub kind: NodeActionKind,
    pub node: NodeTarget,
    /// The Lease `renewTime` the plan judged on (the last look compares it).
    pub lease_renewed: Option<Timestamp>,
    /// The episode the action belongs to: the instant the node was judged dead (or seen Ready
    /// again, for an undo). A new outage is a new episode.
    pub epoch: Timestamp,
    /// The evidence the node is dead (`None` for an undo).
    pub death: Option<DeathEvidence>,
}

impl Act for NodeAction {
    fn kind(&self) -> ActionKind {
        self.kind.action_kind()
    }

    fn target(&self) -> Target<'_> {
        Target::Node(&self.node)
    }

    /// Remembered so that it is not taken (or, in DryRun, recorded) again within the same
    /// episode: [`node_acted_key`].
    fn acted_key(&self) -> String {
        node_acted_key(&self.node.uid, self.kind, self.epoch)
    }

    /// A node action on a dead node needs the node (`None` in the look: gone) still dead by
    /// fresh evidence (not Ready, no renewal since the plan), not excluded, not taken over by
    /// another tool, and the change not made already; an undo needs the node still Ready.
    fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        _: &FencingSpec,
    ) -> Result<(), Skip> {
        policy_still_enforces(look.policy, planned_generation, "done")?;
        let Some(node) = &look.node else { return Err(Skip::NodeGone) };
        if node.control.uid != self.node.uid {
            return Err(Skip::NodeReplaced);
        }
        let obs = &node.observation;
        if self.kind == NodeActionKind::Undo {
            return if obs.readiness == Readiness::Ready {
                Ok(())
            } else {
                Err(Skip::NodeNotReadyForUndo)
            };
        }
        if obs.readiness == Readiness::Ready {
            return Err(Skip::NodeReadyAgain);
        }
        if look.lease_renewed != self.lease_renewed {
            return Err(Skip::LeaseRenewedKubeletAlive);
        }
        if node.excluded {
            return Err(Skip::NodeExcluded);
        }
        if let Some(by) = &node.control.managed_by {
            return Err(Skip::ManagedByAnotherTool(by.to_string()));
        }
        match self.kind {
            NodeActionKind::Cordon if obs.unschedulable => Err(Skip::AlreadyCordoned),
            NodeActionKind::Cordon if node.control.rare.record.cordoned.is_some() => {
                Err(Skip::UncordonedByAdmin)
            }
            NodeActionKind::OutOfServiceTaint { .. }
                if obs.has_taint(OUT_OF_SERVICE_TAINT, "NoExecute") =>
            {
                Err(Skip::AlreadyTainted)
            }
            NodeActionKind::OutOfServiceTaint { assumed_off: false }
                if !obs.has_taint_key(SHUTDOWN_TAINT) =>
            {
                Err(Skip::ShutdownTaintGone)
            }
            NodeActionKind::DeleteNode { .. } if node.control.control_plane => {
                Err(Skip::ControlPlaneNode)
            }
            _ => Ok(()),
        }
    }
}

/// The ledger key of a node action (its [`Act::acted_key`]): `<node uid>/<kind>@<episode>`.
pub fn node_acted_key(uid: &str, kind: NodeActionKind, epoch: Timestamp) -> String {
    format!("{uid}/{}@{epoch}", kind.action_kind().as_str())
}
