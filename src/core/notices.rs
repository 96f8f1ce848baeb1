//! What a plan has to tell people beyond its actions: pods held for want of fencing evidence.
//! A StatefulSet or ReadWriteOnce pod on a dead node without fencing evidence is never released
//! (two writers corrupt data); without a word it would look like the operator doing nothing.

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
}

/// Every pod of `plan` held only for want of fencing evidence.
pub fn needs_fencing(plan: &Plan) -> Vec<FencingNotice> {
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
            note: format!(
                "pod {}/{} is held on dead node {}: {} pods need fencing evidence \
                 (requireFencingFor) and the node has none (no {OUT_OF_SERVICE_TAINT} taint, no \
                 cloud shutdown taint, Node not deleted). Once you know the machine is off: \
                 kubectl taint node {} {OUT_OF_SERVICE_TAINT}={OUT_OF_SERVICE_VALUE}:NoExecute",
                d.namespace,
                d.name,
                d.node,
                because.as_str(),
                d.node
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::guards::Circuit;
    use crate::core::plan::PlanCounts;
    use crate::core::policy::MaxUnhealthy;
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
            nodes: vec![],
            circuit: Circuit::evaluate(0, 1, MaxUnhealthy::Count(1)),
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
