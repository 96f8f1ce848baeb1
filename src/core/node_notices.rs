//! What a plan says about the nodes it leaves alone although they fail: in maintenance, shutting
//! down gracefully, or managed by another tool ([`NodeHold`]). Without a word a dead node nobody
//! acts on would look like the operator doing nothing; with a word at every reconcile it would be
//! Event spam. So: one Event per node and episode (the node's current unhealthy period) and
//! hold, a line in the status, `plan` and `explain`.

use std::collections::BTreeMap;

use super::node::{NodeHold, NodeState, NodeSummary};
use super::observed::Observed;
use super::plan::Plan;

/// A failing node the policy leaves alone, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeNotice {
    pub node: String,
    pub uid: String,
    /// The hold's code (`InMaintenance`, `ShuttingDown`, `LeftToAnotherTool`): the Event's
    /// action.
    pub code: &'static str,
    /// The sentence: what holds it and what is not done.
    pub note: String,
}

/// The Event reason of a [`NodeNotice`].
pub const NODE_LEFT_ALONE: &str = "NodeLeftAlone";

/// Every node of `plan` that is not Ready and held, with its hold: what the status lists.
pub fn nodes_left_alone(plan: &Plan) -> impl Iterator<Item = (&NodeSummary, &NodeHold)> {
    plan.nodes
        .iter()
        .filter(|n| n.state != NodeState::Healthy && !n.deleted)
        .filter_map(|n| n.hold.as_deref().map(|h| (n, h)))
}

/// The notices due now: nodes dead by our evidence that a hold keeps from the action they would
/// get, not said yet in this episode (`said`: node name to the hold's code, as remembered), and
/// what to remember: the nodes said, while they stay not Ready under the same hold.
pub fn new_node_notices(
    plan: &Plan,
    observed: &Observed,
    said: &BTreeMap<String, &'static str>,
) -> (Vec<NodeNotice>, BTreeMap<String, &'static str>) {
    let mut notices = Vec::new();
    let mut remembered = BTreeMap::new();
    for (node, hold) in nodes_left_alone(plan) {
        let code = hold.code();
        if said.get(&*node.name) == Some(&code) {
            remembered.insert(node.name.to_string(), code);
            continue;
        }
        if node.state != NodeState::Dead {
            continue;
        }
        let uid = observed
            .nodes
            .iter()
            .find(|v| v.observation.name == node.name)
            .map(|v| v.control.uid.to_string())
            .unwrap_or_default();
        notices.push(NodeNotice {
            node: node.name.to_string(),
            uid,
            code,
            note: format!("{}; dead by our evidence ({})", hold.describe(&node.name), node.why),
        });
        remembered.insert(node.name.to_string(), code);
    }
    (notices, remembered)
}

#[cfg(test)]
mod tests {
    use jiff::{SignedDuration, Timestamp};

    use super::*;
    use crate::core::duration::add;
    use crate::core::observed::{ManagedBy, NodeView, Readiness};

    fn t(sec: i64) -> Timestamp {
        add("2026-01-01T00:00:00Z".parse().expect("ts"), SignedDuration::from_secs(sec))
    }

    /// Karpenter's node `n1`, not Ready and without renewal since t(0): dead at t(300) by the
    /// default policy (notReadyFor 5m, leaseStaleFor 2m).
    fn world(readiness: Readiness) -> Observed {
        let mut n = NodeView::unknown("n1");
        n.control.uid = "uid-n1".into();
        n.control.managed_by =
            Some(ManagedBy { tool: "Karpenter", marker: "karpenter.sh/nodepool".into() });
        let obs = &mut n.observation;
        obs.readiness = readiness;
        obs.lease_renewed = Some(t(0)).into();
        obs.lease_seen = Some(t(0)).into();
        obs.not_ready_seen = (readiness != Readiness::Ready).then_some(t(0)).into();
        Observed { nodes: vec![n.into()], watch_synced_at: Some(t(-100)), ..Default::default() }
    }

    fn said(
        readiness: Readiness,
        at: i64,
        before: &BTreeMap<String, &'static str>,
    ) -> (Vec<NodeNotice>, BTreeMap<String, &'static str>) {
        let policy = crate::core::validate(&Default::default()).expect("default policy");
        let observed = world(readiness);
        let plan = crate::core::plan(&observed, &policy, t(at));
        new_node_notices(&plan, &observed, before)
    }

    #[test]
    fn once_per_node_and_episode() {
        let none = BTreeMap::new();
        // Not dead yet: nothing said, nothing remembered.
        let (notices, remembered) = said(Readiness::Unknown, 200, &none);
        assert_eq!((notices.len(), remembered.len()), (0, 0));
        // Dead: said once, naming the tool, on the node.
        let (notices, remembered) = said(Readiness::Unknown, 300, &none);
        assert_eq!(notices.len(), 1);
        assert_eq!((notices[0].node.as_str(), notices[0].uid.as_str()), ("n1", "uid-n1"));
        assert_eq!(notices[0].code, "LeftToAnotherTool");
        assert!(
            notices[0].note.contains("managed by Karpenter (karpenter.sh/nodepool"),
            "{notices:?}"
        );
        // Later reconciles of the same episode: not again.
        let (again, kept) = said(Readiness::Unknown, 400, &remembered);
        assert!(again.is_empty());
        assert_eq!(kept, remembered);
        // Ready again ends the episode; the next death is said again.
        let (_, forgotten) = said(Readiness::Ready, 500, &kept);
        assert!(forgotten.is_empty());
        let (next, _) = said(Readiness::Unknown, 900, &forgotten);
        assert_eq!(next.len(), 1);
    }
}
