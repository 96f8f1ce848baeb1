//! `readyOnDeadNode` (kubernetes/kubernetes#112733, #125618, #135205): pods left Ready=True on a
//! node dead by the policy's evidence. The node lifecycle controller marks a node's pods not
//! Ready only when it sees the node's Ready condition go from True to something else itself: a
//! kubelet that reported NotReady before it went silent, or a pod status of the kubelet's that
//! landed after the marking, leaves them Ready, and their Services keep sending them traffic
//! until the taint manager evicts them. Reported, never acted on.
//!
//! The operator keeps such pods only while their node is not Ready
//! ([`crate::core::PodView::ready_since`]).

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::release_gates::selected_kind;
use crate::core::node::{NodeState, NodeSummary};
use crate::core::observed::{Observed, OwnerKey};
use crate::core::policy::ValidatedPolicy;

/// A pod left Ready=True on a dead node, for the reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyOnDeadPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// When its Ready condition went True, as written in it.
    pub ready_since: Timestamp,
    /// When its node became dead by the policy's evidence.
    pub node_dead_since: Option<Timestamp>,
    /// What the report says.
    pub note: String,
}

/// Every selected pod left Ready=True on a dead in-scope node.
pub fn ready_on_dead_nodes(
    observed: &Observed,
    nodes: &BTreeMap<&str, NodeSummary>,
    policy: &ValidatedPolicy,
) -> Vec<ReadyOnDeadPod> {
    if !policy.ready_on_dead_node || observed.watch_synced_at.is_none() {
        return Vec::new();
    }
    let mut found = Vec::new();
    for pod in &observed.pods {
        let (Some(ready_since), None, Some(node_name)) =
            (pod.ready_since, pod.deletion_timestamp, pod.node_name.as_deref())
        else {
            continue;
        };
        let Some(node) = nodes.get(node_name).filter(|n| n.state == NodeState::Dead) else {
            continue;
        };
        if selected_kind(pod, node, observed, policy).is_err() {
            continue;
        }
        found.push(ReadyOnDeadPod {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            node: node_name.to_string(),
            owner: pod.owner_key(),
            ready_since,
            node_dead_since: node.dead_at,
            note: format!(
                "Ready=True since {ready_since} on node {node_name}, dead ({}): the node \
                 lifecycle controller did not mark it not Ready, so its Services still send it \
                 traffic",
                node.why
            ),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observed::{NodeView, PodView, fixtures};
    use crate::crd::RemediationPolicySpec;

    #[test]
    fn reported_on_dead_nodes_only() {
        type Edit = fn(&mut PodView);
        let none: Edit = |_| {};
        // (case, rule enabled, node state, edit, want reported)
        #[rustfmt::skip]
        let rows: [(&str, bool, NodeState, Edit, bool); 7] = [
            ("Ready on a dead node", true, NodeState::Dead, none, true),
            ("rule off", false, NodeState::Dead, none, false),
            ("node not dead yet", true, NodeState::Unhealthy, none, false),
            ("node healthy", true, NodeState::Healthy, none, false),
            ("not Ready (marked by the node lifecycle controller)", true, NodeState::Dead, |p| p.ready_since = None, false),
            ("Terminating already", true, NodeState::Dead, |p| p.deletion_timestamp = Some(Timestamp::UNIX_EPOCH), false),
            ("excluded", true, NodeState::Dead, |p| p.excluded = true, false),
        ];
        for (case, enabled, state, edit, want) in rows {
            let mut spec = RemediationPolicySpec::default();
            spec.ready_on_dead_node.enabled = enabled;
            let policy = crate::core::validate(&spec).expect("valid test policy");
            let mut pod = fixtures::pod("p", "n1");
            pod.deletion_timestamp = None;
            pod.ready_since = Some(Timestamp::UNIX_EPOCH);
            edit(&mut pod);
            let observed = Observed {
                nodes: vec![NodeView::unknown("n1")],
                pods: vec![pod],
                watch_synced_at: Some(Timestamp::UNIX_EPOCH),
                ..Default::default()
            };
            let nodes = BTreeMap::from([("n1", fixtures::node_summary("n1", state))]);
            let found = ready_on_dead_nodes(&observed, &nodes, &policy);
            assert_eq!(!found.is_empty(), want, "{case}");
        }
    }
}
