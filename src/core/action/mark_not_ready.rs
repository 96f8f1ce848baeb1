//! A pod left Ready=True on a dead node marked not Ready (`readyOnDeadNode.markNotReady`): its
//! Ready condition set False through the status subresource, as the node lifecycle controller
//! does when it sees a node go Unknown, so that its Services' EndpointSlices drop it.

use jiff::Timestamp;

use super::{Act, LastLook, PodTarget, Skip, Target, policy_still_enforces, same_pod};
use crate::core::node::DeathEvidence;
use crate::core::observed::Readiness;
use crate::crd::{ActionKind, FencingSpec};

/// The reason of the Ready condition this operator sets False (the node lifecycle controller's
/// own marking carries none).
pub const NOT_READY_REASON: &str = "NodeDeadByKubeRemediator";

/// A strategic merge patch of the pod's status setting its `Ready` condition False, carrying the
/// UID and resourceVersion of the pod the last look read: it lands on that pod unchanged or not
/// at all. Its threshold is the instant its node became dead by the policy's evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkNotReady {
    pub pod: PodTarget,
    /// The node's Lease `renewTime` the plan judged on: any other value in the last look is a
    /// renewal since the plan, so the kubelet is alive (and reports readiness itself).
    pub lease_renewed: Option<Timestamp>,
    /// The evidence its node is dead, checked again by the safety kernel right before the
    /// request.
    pub death: Option<DeathEvidence>,
}

/// The ledger key of a marking (its [`Act::acted_key`]): `<pod uid>/MarkPodNotReady`, apart from
/// the pod's own key, so that a pod marked not Ready can still be force-deleted later.
pub fn mark_acted_key(uid: &str) -> String {
    format!("{uid}/{}", ActionKind::MarkPodNotReady.as_str())
}

impl MarkNotReady {
    /// The Ready condition's message.
    pub fn message(&self, policy: &str) -> String {
        format!(
            "kube-remediator (policy {policy}): node {} is dead by the policy's evidence and its \
             kubelet cannot report this pod any more",
            self.pod.node
        )
    }
}

impl Act for MarkNotReady {
    fn kind(&self) -> ActionKind {
        ActionKind::MarkPodNotReady
    }

    fn target(&self) -> Target<'_> {
        Target::Pod(&self.pod)
    }

    fn acted_key(&self) -> String {
        mark_acted_key(&self.pod.uid)
    }

    /// Stands with the same pod on the same node, not Terminating, not excluded, still Ready;
    /// its node still dead by fresh reads (no Lease renewal since the plan, not Ready, not back
    /// after being seen deleted, not excluded).
    fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        _: &FencingSpec,
    ) -> Result<(), Skip> {
        policy_still_enforces(look.policy, planned_generation, "marked not Ready")?;
        let pod = same_pod(look, &self.pod)?;
        if pod.terminating {
            return Err(Skip::PodTerminatingAlready);
        }
        if pod.node != self.pod.node {
            return Err(Skip::PodMoved { to: pod.node.to_string() });
        }
        if pod.excluded {
            return Err(Skip::PodExcluded);
        }
        if !pod.ready {
            return Err(Skip::PodNotReadyAlready);
        }
        if look.lease_renewed != self.lease_renewed {
            return Err(Skip::LeaseRenewedFrom {
                planned: self.lease_renewed,
                now: look.lease_renewed,
            });
        }
        match &look.node {
            Some(_) if self.death == Some(DeathEvidence::Deleted) => Err(Skip::NodeBack),
            Some(node) if node.observation.readiness == Readiness::Ready => {
                Err(Skip::NodeReadyAgain)
            }
            Some(node) if node.excluded => Err(Skip::NodeExcluded),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::action::{FreshNode, FreshPod, FreshPolicy, PolicySkip};
    use crate::core::observed::NodeView;
    use crate::crd::Mode;

    fn ts(s: i64) -> Timestamp {
        Timestamp::from_second(s).expect("ts")
    }

    fn fresh_node(readiness: Readiness) -> FreshNode {
        let mut view = NodeView::unknown("n1");
        view.observation.readiness = readiness;
        FreshNode {
            observation: view.observation,
            excluded: false,
            control: view.control,
            cordon_managers: vec![],
            out_of_service_added: None,
        }
    }

    #[test]
    fn recheck_table() {
        let action = MarkNotReady {
            pod: PodTarget {
                namespace: "ns".into(),
                name: "p".into(),
                uid: "u1".into(),
                node: "n1".into(),
                owner: None,
                reason: "left Ready on a dead node".into(),
                threshold: ts(100),
                shutdown_seen: None,
            },
            lease_renewed: Some(ts(10)),
            death: None,
        };
        let pod = FreshPod {
            uid: Some("u1"),
            terminating: false,
            deletion: None,
            node: "n1",
            excluded: false,
            stale: false,
            failed_by_shutdown: false,
            ready: true,
        };
        let enforce = FreshPolicy { mode: Mode::Enforce, paused: false, generation: Some(1) };
        let good = LastLook {
            pod: Some(pod),
            node: Some(fresh_node(Readiness::Unknown)),
            lease_renewed: Some(ts(10)),
            policy: Some(enforce),
        };
        let excluded = FreshNode { excluded: true, ..fresh_node(Readiness::Unknown) };
        #[rustfmt::skip]
        let table: Vec<(&str, LastLook, Result<(), Skip>)> = vec![
            ("stands", good.clone(), Ok(())),
            ("gone", LastLook { pod: None, ..good.clone() }, Err(Skip::PodGone)),
            ("replaced", LastLook { pod: Some(FreshPod { uid: Some("u2"), ..pod }), ..good.clone() }, Err(Skip::PodReplaced)),
            ("Terminating", LastLook { pod: Some(FreshPod { terminating: true, ..pod }), ..good.clone() }, Err(Skip::PodTerminatingAlready)),
            ("moved", LastLook { pod: Some(FreshPod { node: "n2", ..pod }), ..good.clone() }, Err(Skip::PodMoved { to: "n2".into() })),
            ("excluded", LastLook { pod: Some(FreshPod { excluded: true, ..pod }), ..good.clone() }, Err(Skip::PodExcluded)),
            ("not Ready already", LastLook { pod: Some(FreshPod { ready: false, ..pod }), ..good.clone() }, Err(Skip::PodNotReadyAlready)),
            ("Lease renewed", LastLook { lease_renewed: Some(ts(50)), ..good.clone() }, Err(Skip::LeaseRenewedFrom { planned: Some(ts(10)), now: Some(ts(50)) })),
            ("Lease gone", LastLook { lease_renewed: None, ..good.clone() }, Err(Skip::LeaseRenewedFrom { planned: Some(ts(10)), now: None })),
            ("node Ready again", LastLook { node: Some(fresh_node(Readiness::Ready)), ..good.clone() }, Err(Skip::NodeReadyAgain)),
            ("node excluded", LastLook { node: Some(excluded), ..good.clone() }, Err(Skip::NodeExcluded)),
            ("policy in DryRun now", LastLook { policy: Some(FreshPolicy { mode: Mode::DryRun, ..enforce }), ..good.clone() }, Err(PolicySkip::NotEnforcing { mode: Mode::DryRun, verb: "marked not Ready" }.into())),
        ];
        for (case, look, want) in table {
            assert_eq!(action.recheck(&look, Some(1), &FencingSpec::default()), want, "{case}");
        }
        let deleted = MarkNotReady { death: Some(DeathEvidence::Deleted), ..action };
        assert_eq!(
            deleted.recheck(&good, Some(1), &FencingSpec::default()),
            Err(Skip::NodeBack),
            "a Node seen deleted exists again"
        );
    }
}
