//! An eviction through the Eviction API of a pod left Ready=False after a node blip.

use jiff::Timestamp;

use super::{Act, LastLook, PodTarget, Skip, Target, policy_still_enforces, same_pod};
use crate::core::observed::{Outage, Readiness};
use crate::crd::{ActionKind, FencingSpec};

/// An eviction through the Eviction API of a pod left Ready=False after a node blip
/// (`staleReadiness.action: Evict`), with a UID precondition: PodDisruptionBudgets hold, and a
/// refusal (429) is reported and retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evict {
    pub pod: PodTarget,
    /// The outage of its node the operator watched, which the pod turned not Ready in.
    pub outage: Outage,
    /// When the operator first saw the pod not Ready with everything ready.
    pub stale_seen: Timestamp,
}

impl Act for Evict {
    fn kind(&self) -> ActionKind {
        ActionKind::Evict
    }

    fn target(&self) -> Target<'_> {
        Target::Pod(&self.pod)
    }

    /// Stands with the same pod, not Terminating, still left Ready=False with everything ready
    /// (a kubelet that repaired its pod itself is left to it), on a node still Ready.
    fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        _: &FencingSpec,
    ) -> Result<(), Skip> {
        policy_still_enforces(look.policy, planned_generation, "evicted")?;
        let pod = same_pod(look, &self.pod)?;
        if pod.terminating {
            return Err(Skip::PodTerminatingAlready);
        }
        if !pod.stale {
            return Err(Skip::PodNoLongerStale);
        }
        match &look.node {
            Some(node) if node.observation.readiness == Readiness::Ready => Ok(()),
            _ => Err(Skip::NodeNotReadyNow),
        }
    }
}
