//! What a plan has to tell people beyond its actions: pods held for want of fencing evidence, and
//! pods stuck Terminating on live nodes with their cause. A StatefulSet or ReadWriteOnce pod on a
//! dead node without fencing evidence is never released (two writers corrupt data), and a pod
//! stuck on a live node is only reported unless the policy opts in; without a word either would
//! look like the operator doing nothing.

use super::observed::OwnerKey;
use super::plan::Plan;
use super::verdict::{NotEligible, Verdict};
use crate::crd::{OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE};

/// A pod held on a dead node because its node has no fencing evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencingNotice {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// What is missing and the command that provides it.
    pub note: String,
    /// The Events' reasons: on the pod, and on its owner.
    pub reasons: (&'static str, &'static str),
}

/// Every pod of `plan` held only for want of fencing evidence.
pub fn needs_fencing(plan: &Plan) -> Vec<FencingNotice> {
    let live = |node: &str| {
        plan.nodes.get(node).is_some_and(|n| n.state == super::node::NodeState::Healthy)
    };
    plan.decisions
        .iter()
        .filter_map(|d| match &d.verdict {
            Verdict::NotEligible(NotEligible::NeedsFencing { because }) => Some((d, because)),
            _ => None,
        })
        .map(|(d, because)| FencingNotice {
            namespace: d.namespace.clone(),
            pod: d.name.clone(),
            uid: d.uid.clone(),
            node: d.node.clone(),
            owner: d.owner.clone(),
            note: if live(&d.node) {
                format!(
                    "pod {}/{} is stuck Terminating on live node {} and is not force-deleted: \
                     {} pods need fencing evidence (requireFencingFor), which a live node has \
                     none of (its kubelet may still hold the volume or run the containers). \
                     Find why the kubelet does not finish it; only if a second writer is \
                     harmless, set liveNodeStuck.forceDeleteUnfenced",
                    d.namespace,
                    d.name,
                    d.node,
                    because.as_str()
                )
            } else {
                format!(
                    "pod {}/{} is held on dead node {}: {} pods need fencing evidence \
                     (requireFencingFor) and the node has none (no {OUT_OF_SERVICE_TAINT} taint \
                     from someone else, no cloud shutdown taint, Node not deleted by someone \
                     else). Once you know the machine is off: kubectl taint node {} \
                     {OUT_OF_SERVICE_TAINT}={OUT_OF_SERVICE_VALUE}:NoExecute",
                    d.namespace,
                    d.name,
                    d.node,
                    because.as_str(),
                    d.node
                )
            },
            reasons: ("NeedsFencing", "PodNeedsFencing"),
        })
        .collect()
}

/// Every pod of `plan` held on a dead node by a finalizer that is not allowlisted: a force
/// delete would not remove it, and nothing of ours will, so it is said once, on the pod and
/// its owner, with what would release it.
pub fn held_by_finalizers(plan: &Plan) -> Vec<FencingNotice> {
    let dead =
        |node: &str| plan.nodes.get(node).is_some_and(|n| n.state == super::node::NodeState::Dead);
    plan.decisions
        .iter()
        .filter_map(|d| match &d.verdict {
            Verdict::NotEligible(NotEligible::HeldByFinalizers { names }) if dead(&d.node) => {
                Some((d, names))
            }
            _ => None,
        })
        .map(|(d, names)| FencingNotice {
            namespace: d.namespace.clone(),
            pod: d.name.clone(),
            uid: d.uid.clone(),
            node: d.node.clone(),
            owner: d.owner.clone(),
            note: format!(
                "pod {}/{} on dead node {} is held by finalizer(s) {}: a force delete would not \
                 remove it. Whoever owns the finalizer must remove it, or, if it is safe to drop, \
                 list it in the policy's finalizers.removable (then it is removed when the pod \
                 would be released)",
                d.namespace,
                d.name,
                d.node,
                names.join(", ")
            ),
            reasons: ("HeldByFinalizer", "PodHeldByFinalizer"),
        })
        .collect()
}

/// A pod reported once per cause: stuck Terminating on a live node (Event reason
/// `StuckTerminating`) or left Ready=False after a node blip (`StaleReadiness`), with what the
/// policy does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNotice {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    /// The Event's reason.
    pub reason: &'static str,
    /// The cause's code (`Finalizers`, `ContainersRunning`, `KubeletNotFinishing`,
    /// `StaleReadiness`): the Event's action.
    pub cause: &'static str,
    /// Whether the kubelet's latest Warning Event about the pod is worth quoting: it says what
    /// the kubelet waits for.
    pub quote_kubelet: bool,
    /// A Warning Event (something is wrong); a Normal one says what was left alone and why.
    pub warning: bool,
    /// The evidence (finalizers, containers, volumes named): a new one is a new notice.
    pub evidence: String,
    /// The whole sentence: the node, since when, the evidence, what the policy does.
    pub note: String,
}

/// Every pod of `plan` stuck on a live node.
pub fn stuck_on_live_nodes(plan: &Plan) -> Vec<PodNotice> {
    plan.stuck
        .iter()
        .map(|s| {
            let verdict = plan.decisions.iter().find(|d| d.uid == s.uid).map(|d| &d.verdict);
            let what = match verdict {
                Some(Verdict::Eligible) => "released now".to_string(),
                Some(Verdict::NotEligible(why)) => why.to_string(),
                None => String::new(),
            };
            PodNotice {
                namespace: s.namespace.clone(),
                pod: s.name.clone(),
                uid: s.uid.clone(),
                reason: "StuckTerminating",
                cause: s.cause.code(),
                quote_kubelet: s.cause.kubelet_explains(),
                warning: true,
                evidence: s.cause.detail(),
                note: format!(
                    "pod {}/{} is stuck Terminating on live node {} since {} ({}): {}. {what}",
                    s.namespace,
                    s.name,
                    s.node,
                    s.since,
                    s.cause.code(),
                    s.cause.detail()
                ),
            }
        })
        .collect()
}

/// Every pod of `plan` left Ready=False after a node blip.
pub fn stale_ready(plan: &Plan) -> Vec<PodNotice> {
    plan.stale
        .iter()
        .map(|s| PodNotice {
            namespace: s.namespace.clone(),
            pod: s.name.clone(),
            uid: s.uid.clone(),
            reason: "StaleReadiness",
            cause: "StaleReadiness",
            quote_kubelet: false,
            warning: true,
            evidence: s.ready_false_since.to_string(),
            note: format!("pod {}/{}: {}", s.namespace, s.name, s.note),
        })
        .collect()
}

/// The Event reason of a pod the staleReadiness rule waited on that its kubelet repaired.
pub const REPAIRED_BY_KUBELET: &str = "RepairedByKubelet";

/// Every pod of `plan` the staleReadiness rule waited on that its kubelet made Ready again
/// first: a Normal Event saying how long the rule waited and why.
pub fn repaired_by_kubelet(plan: &Plan) -> Vec<PodNotice> {
    plan.repaired
        .iter()
        .map(|r| PodNotice {
            namespace: r.namespace.clone(),
            pod: r.name.clone(),
            uid: r.uid.clone(),
            reason: REPAIRED_BY_KUBELET,
            cause: "StaleReadiness",
            quote_kubelet: false,
            warning: false,
            evidence: r.repaired_at.to_string(),
            note: r.note.clone(),
        })
        .collect()
}

/// Every pod of `plan` left Ready=True on a dead node.
pub fn ready_on_dead_node(plan: &Plan) -> Vec<PodNotice> {
    plan.ready_on_dead
        .iter()
        .map(|r| PodNotice {
            namespace: r.namespace.clone(),
            pod: r.name.clone(),
            uid: r.uid.clone(),
            reason: "ReadyOnDeadNode",
            cause: "ReadyOnDeadNode",
            quote_kubelet: false,
            warning: true,
            evidence: r.node.clone(),
            note: format!("pod {}/{}: {}", r.namespace, r.name, r.note),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::guards::Circuit;
    use crate::core::plan::PlanCounts;
    use crate::core::policy::{MaxUnhealthy, StormSettings};
    use crate::core::storm::advance;
    use crate::core::verdict::PodDecision;
    use crate::crd::FencingRequirement;

    #[test]
    fn names_the_missing_evidence_and_the_command() {
        let decision = |name: &str, verdict| PodDecision {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("u-{name}"),
            node: "n1".into(),
            owner: None,
            verdict,
        };
        let plan = Plan {
            synced: true,
            suspended: None,
            actions: vec![],
            decisions: vec![
                decision(
                    "web-0",
                    Verdict::NotEligible(NotEligible::NeedsFencing {
                        because: FencingRequirement::StatefulSet,
                    }),
                ),
                decision("other", Verdict::NotEligible(NotEligible::PodExcluded)),
                decision("gone", Verdict::Eligible),
            ],
            nodes: Default::default(),
            stuck: vec![],
            stale: vec![],
            repaired: vec![],
            ready_on_dead: vec![],
            circuit: Circuit::evaluate(0, 1, MaxUnhealthy::Count(1)),
            storm: advance(
                Circuit::evaluate(0, 1, MaxUnhealthy::Count(1)),
                Circuit::evaluate(0, 1, MaxUnhealthy::Count(1)),
                None,
                StormSettings::default(),
                None,
                "2026-01-01T00:00:00Z".parse().expect("test timestamp"),
            ),
            next_deadline: None,
            counts: PlanCounts::default(),
        };
        let notices = needs_fencing(&plan);
        assert_eq!(notices.len(), 1);
        assert_eq!(notices[0].pod, "web-0");
        assert!(
            notices[0].note.contains("StatefulSet pods need fencing evidence"),
            "{}",
            notices[0].note
        );
        assert!(
            notices[0].note.ends_with(
                "kubectl taint node n1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
            ),
            "{}",
            notices[0].note
        );
    }
}
