//! The removal of allowlisted finalizers (`finalizers.removable`) from a Terminating pod they
//! hold.

use super::{
    Act, LastLook, LiveDeletion, PodTarget, Skip, Target, policy_still_enforces, same_pod,
};
use crate::core::node::DeathEvidence;
use crate::core::observed::Readiness;
use crate::crd::{ActionKind, FencingSpec};

/// The removal of allowlisted finalizers from a Terminating pod they hold: a JSON patch that
/// tests the pod's UID and its finalizers as the plan saw them, then sets the rest, so a pod
/// changed since the plan is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoveFinalizers {
    pub pod: PodTarget,
    /// The finalizers removed.
    pub remove: Vec<String>,
    /// Every finalizer of the pod as the plan saw it.
    pub current: Vec<String>,
    /// The evidence its node is dead (`None` on a live node).
    pub death: Option<DeathEvidence>,
    /// On a live node (`liveNodeStuck`), its deletion as we timed it.
    pub live: Option<LiveDeletion>,
}

impl Act for RemoveFinalizers {
    fn kind(&self) -> ActionKind {
        ActionKind::RemoveFinalizers
    }

    fn target(&self) -> Target<'_> {
        Target::Pod(&self.pod)
    }

    /// The pod's UID, then the kind (the pod's own force delete, which may follow on a dead
    /// node, is remembered by the UID alone).
    fn acted_key(&self) -> String {
        removal_acted_key(&self.pod.uid)
    }

    /// Stands with the same pod, still Terminating; on a dead node, the node still not Ready
    /// and its Lease as the plan saw it; on a live node, the node still Ready.
    fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        _: &FencingSpec,
    ) -> Result<(), Skip> {
        policy_still_enforces(look.policy, planned_generation, "removed")?;
        let pod = same_pod(look, &self.pod)?;
        if !pod.terminating {
            return Err(Skip::PodNotTerminating);
        }
        let ready = look.node.as_ref().is_some_and(|n| n.observation.readiness == Readiness::Ready);
        match &self.death {
            None if ready => Ok(()),
            None => Err(Skip::NodeNoLongerReady),
            Some(_) if ready => Err(Skip::NodeReadyAgain),
            Some(DeathEvidence::Watched { lease_renewed, .. })
                if look.lease_renewed != Some(*lease_renewed) =>
            {
                Err(Skip::LeaseRenewed)
            }
            Some(DeathEvidence::Deleted) if look.node.is_some() => Err(Skip::NodeBack),
            Some(_) => Ok(()),
        }
    }

    fn note(&self) -> String {
        format!("finalizer(s) {}: {}", self.remove.join(", "), self.pod.reason)
    }

    fn recorded_reason(&self) -> String {
        format!("removed {}: {}", self.remove.join(", "), self.pod.reason)
    }

    fn shown(&self) -> Option<(&'static str, &[String])> {
        Some(("finalizers", &self.remove))
    }
}

impl RemoveFinalizers {
    /// The finalizers left on the pod afterwards.
    pub fn remaining(&self) -> Vec<String> {
        self.current.iter().filter(|f| !self.remove.contains(f)).cloned().collect()
    }
}

/// The ledger key of a finalizer removal (its [`Act::acted_key`]): `<pod uid>/RemoveFinalizers`.
pub fn removal_acted_key(uid: &str) -> String {
    format!("{uid}/{}", ActionKind::RemoveFinalizers.as_str())
}
