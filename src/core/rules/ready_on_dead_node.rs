//! `readyOnDeadNode` (kubernetes/kubernetes#112733, #125618, #135205): pods left Ready=True on a
//! node dead by the policy's evidence. The node lifecycle controller marks a node's pods not
//! Ready only when it sees the node's Ready condition go from True to something else itself: a
//! kubelet that reported NotReady before it went silent, or a pod status of the kubelet's that
//! landed after the marking, leaves them Ready, and their Services keep sending them traffic
//! until the taint manager evicts them. Reported; with `markNotReady`, each is also marked not
//! Ready ([`MarkNotReady`]), once per pod, through the guards like every action.
//!
//! The operator keeps such pods only while their node is not Ready
//! ([`crate::core::PodView::ready_since`]).

use jiff::Timestamp;

use super::release_gates::selected_kind;
use crate::core::action::{Action, MarkNotReady, PodTarget, mark_acted_key};
use crate::core::node::{NodeState, NodeTable};
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

/// What the rule found at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadyOnDeadFindings {
    /// Every selected pod left Ready=True on a dead in-scope node, for the reports.
    pub pods: Vec<ReadyOnDeadPod>,
    /// With `markNotReady`, the markings not recorded yet, waiting for the guards.
    pub candidates: Vec<Action>,
}

/// Every selected pod left Ready=True on a dead in-scope node, and with `markNotReady` its
/// marking (once per pod: a marking recorded, done or in DryRun, is not proposed again).
pub fn ready_on_dead_nodes(
    observed: &Observed,
    nodes: &NodeTable,
    policy: &ValidatedPolicy,
    now: Timestamp,
) -> ReadyOnDeadFindings {
    let mut found = ReadyOnDeadFindings::default();
    if !policy.ready_on_dead_node || observed.watch_synced_at.is_none() {
        return found;
    }
    for pod in &observed.pods {
        let (Some(ready_since), None, Some(node_name)) =
            (pod.ready_since.get(), pod.deletion_timestamp.get(), pod.node_name.as_deref())
        else {
            continue;
        };
        let Some(node) = nodes.get(node_name).filter(|n| n.state == NodeState::Dead) else {
            continue;
        };
        if selected_kind(pod, node, observed, policy).is_err() {
            continue;
        }
        let note = format!(
            "Ready=True since {ready_since} on node {node_name}, dead ({}): the node lifecycle \
             controller did not mark it not Ready, so its Services still send it traffic",
            node.why
        );
        if policy.mark_not_ready_on_dead_node
            && !observed.acted_pods.contains(&mark_acted_key(&pod.uid))
        {
            found.candidates.push(Action::MarkNotReady(MarkNotReady {
                pod: PodTarget {
                    namespace: pod.namespace.to_string(),
                    name: pod.name.clone(),
                    uid: pod.uid.to_string(),
                    node: node_name.to_string(),
                    owner: pod.owner_key(),
                    reason: format!("{note} (readyOnDeadNode.markNotReady)"),
                    threshold: node.dead_at.get().unwrap_or(now),
                    shutdown_seen: node.shutdown_seen.get(),
                },
                lease_renewed: node.lease_renewed.get(),
                death: node.death.as_deref().cloned(),
            }));
        }
        found.pods.push(ReadyOnDeadPod {
            namespace: pod.namespace.to_string(),
            name: pod.name.clone(),
            uid: pod.uid.to_string(),
            node: node_name.to_string(),
            owner: pod.owner_key(),
            ready_since,
            node_dead_since: node.dead_at.get(),
            note,
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::observed::{NodeView, PodView, fixtures};
    use crate::core::stamp::Stamp;
    use crate::crd::RemediationPolicySpec;

    #[test]
    fn reported_on_dead_nodes_only() {
        type Edit = fn(&mut PodView);
        let none: Edit = |_| {};
        let marked: Edit = none;
        // (case, rule enabled, markNotReady, node state, edit, want reported, want marked)
        #[rustfmt::skip]
        let rows: [(&str, bool, bool, NodeState, Edit, bool, bool); 11] = [
            ("Ready on a dead node", true, false, NodeState::Dead, none, true, false),
            ("Ready on a dead node, markNotReady", true, true, NodeState::Dead, none, true, true),
            ("rule off", false, false, NodeState::Dead, none, false, false),
            ("rule off, markNotReady (refused by validation)", false, true, NodeState::Dead, none, false, false),
            ("node not dead yet", true, true, NodeState::Unhealthy, none, false, false),
            ("node healthy", true, true, NodeState::Healthy, none, false, false),
            ("not Ready (marked by the node lifecycle controller)", true, true, NodeState::Dead, |p| p.ready_since = Stamp::NONE, false, false),
            ("Terminating already", true, true, NodeState::Dead, |p| p.deletion_timestamp = Stamp::from(Timestamp::UNIX_EPOCH), false, false),
            ("excluded", true, true, NodeState::Dead, |p| p.excluded = true, false, false),
            ("marking recorded already (DryRun)", true, true, NodeState::Dead, marked, true, false),
            ("a DaemonSet pod", true, true, NodeState::Dead, |p| p.owner = Some(crate::core::observed::OwnerRef { kind: "DaemonSet".into(), name: "ds".into(), uid: "ds".into() }), false, false),
        ];
        for (i, (case, enabled, mark, state, edit, want, want_marked)) in
            rows.into_iter().enumerate()
        {
            let mut spec = RemediationPolicySpec::default();
            spec.ready_on_dead_node.enabled = enabled;
            spec.ready_on_dead_node.mark_not_ready = mark;
            let policy = match crate::core::validate(&spec) {
                Ok(policy) => policy,
                // The one invalid row: refused, as the API server's CEL rule refuses it.
                Err(_) if !enabled && mark => continue,
                Err(e) => panic!("{case}: invalid test policy: {e:?}"),
            };
            let mut pod = fixtures::pod("p", "n1");
            pod.deletion_timestamp = Stamp::NONE;
            pod.ready_since = Stamp::from(Timestamp::UNIX_EPOCH);
            edit(&mut pod);
            let mut observed = Observed {
                nodes: vec![NodeView::unknown("n1").into()],
                pods: vec![pod.into()],
                watch_synced_at: Some(Timestamp::UNIX_EPOCH),
                ..Default::default()
            };
            if i == 9 {
                observed.acted_pods.insert(mark_acted_key("uid-p"));
            }
            let nodes = NodeTable::new(vec![fixtures::node_summary("n1", state)]);
            let found = ready_on_dead_nodes(&observed, &nodes, &policy, Timestamp::UNIX_EPOCH);
            assert_eq!(!found.pods.is_empty(), want, "{case}");
            assert_eq!(!found.candidates.is_empty(), want_marked, "{case}");
        }
    }
}
