//! `nodeActions`: cordon, taint out-of-service and delete a dead node, each its own delay after
//! the node was judged dead; undo this operator's own cordon and taint once the node has been
//! Ready for `undoAfter`. Node actions do not go through the pod gates: they have their own,
//! here, and then the same guards as every destructive action.
//!
//! What is never done: act on an excluded node or one another tool manages; cordon a node an
//! admin uncordoned after our cordon; taint out-of-service without fencing evidence (the cloud
//! provider's shutdown taint) unless the policy accepts "dead this long means off"; delete a
//! control-plane node; undo anything not in our record.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};

use crate::core::action::{Action, NodeAction, NodeActionKind, NodeTarget, node_acted_key};
use crate::core::duration::{add, format_duration};
use crate::core::node::{NodeState, NodeSummary};
use crate::core::observed::{Acting, NodeView};
use crate::core::policy::ValidatedPolicy;
use crate::crd::{OUT_OF_SERVICE_TAINT, SHUTDOWN_TAINT};

/// What the node rule found at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFindings {
    /// Destructive actions due now (they still have to pass the guards).
    pub candidates: Vec<Action>,
    /// Undo actions due now (restoring what we did needs no guard but `paused`).
    pub undo: Vec<Action>,
    /// The future instants at which an action becomes due by time alone.
    pub deadlines: Vec<Timestamp>,
}

/// Applies `nodeActions` to one in-scope node judged as `summary`.
/// `acted` holds the keys of the actions already taken or recorded ([`NodeAction::acted_key`]):
/// each is taken once per episode.
pub fn evaluate(
    view: &NodeView,
    summary: &NodeSummary,
    policy: &ValidatedPolicy,
    acted: &BTreeSet<String>,
    acting: &Acting,
    now: Timestamp,
    found: &mut NodeFindings,
) {
    if view.deleted || view.excluded || view.control.managed_by.is_some() {
        return;
    }
    match summary.state {
        NodeState::Dead => {
            if let Some(dead_at) = summary.dead_at.get() {
                on_dead_node(view, summary, dead_at, policy, acted, now, found);
            }
        }
        NodeState::Healthy
            if acting.may_undo(&view.control.rare.record, policy.node_actions.any()) =>
        {
            undo(view, policy, acted, now, found)
        }
        NodeState::Healthy => {}
        NodeState::Unhealthy => {}
    }
}

fn on_dead_node(
    view: &NodeView,
    summary: &NodeSummary,
    dead_at: Timestamp,
    policy: &ValidatedPolicy,
    acted: &BTreeSet<String>,
    now: Timestamp,
    found: &mut NodeFindings,
) {
    let (obs, control, a) = (&view.observation, &view.control, &policy.node_actions);
    let mut due = |kind: NodeActionKind, at: Timestamp, why: String| {
        if acted.contains(&node_acted_key(&control.uid, kind, dead_at)) {
            return;
        }
        if now < at {
            found.deadlines.push(at);
            return;
        }
        found.candidates.push(Action::Node(NodeAction {
            kind,
            node: NodeTarget {
                name: obs.name.to_string(),
                uid: control.uid.to_string(),
                reason: format!("{why}; node {} {}", obs.name, summary.why),
                threshold: at,
                shutdown_seen: summary.shutdown_seen.get(),
            },
            lease_renewed: summary.lease_renewed.get(),
            epoch: dead_at,
            death: summary.death.as_deref().cloned(),
        }));
    };
    let after = |d: SignedDuration| format_duration(d);
    // An admin who uncordons a node we cordoned has the last word until it recovers.
    if let Some(d) = a.cordon_after
        && !obs.unschedulable
        && control.rare.record.cordoned.is_none()
    {
        due(NodeActionKind::Cordon, add(dead_at, d), format!("cordonAfter {} passed", after(d)));
    }
    if let Some(d) = a.out_of_service_taint_after
        && !obs.has_taint(OUT_OF_SERVICE_TAINT, "NoExecute")
        && control.rare.record.tainted.is_none()
    {
        let shut_down = policy.fencing.shutdown_taint && obs.has_taint_key(SHUTDOWN_TAINT);
        let taint_at = add(dead_at, d);
        let why = format!("outOfServiceTaintAfter {} passed", after(d));
        match (shut_down, a.assume_off_after) {
            (true, _) => due(
                NodeActionKind::OutOfServiceTaint { assumed_off: false },
                taint_at,
                format!("{why}; fenced: taint {SHUTDOWN_TAINT}"),
            ),
            (false, Some(off)) => due(
                NodeActionKind::OutOfServiceTaint { assumed_off: true },
                taint_at.max(add(dead_at, off)),
                format!("{why}; assumed off: dead longer than assumeOffAfter {}", after(off)),
            ),
            // Without fencing evidence and without the policy's acceptance: never.
            (false, None) => {}
        }
    }
    // Deleting a Node releases every pod bound to it (PodGC deletes them), StatefulSet and
    // ReadWriteOnce pods included: it needs the same fencing as the out-of-service taint.
    if let Some(d) = a.delete_node_after
        && !control.control_plane
    {
        let at = add(dead_at, d);
        let why = format!("deleteNodeAfter {} passed", after(d));
        match (summary.fenced_by, a.assume_off_after) {
            (Some(evidence), _) => due(
                NodeActionKind::DeleteNode { assumed_off: false },
                at,
                format!("{why}; fenced: {}", evidence.describe()),
            ),
            (None, Some(off)) => due(
                NodeActionKind::DeleteNode { assumed_off: true },
                at.max(add(dead_at, off)),
                format!("{why}; assumed off: dead longer than assumeOffAfter {}", after(off)),
            ),
            // Without fencing evidence and without the policy's acceptance: never.
            (None, None) => {}
        }
    }
}

/// Our own cordon and taint come off once the node has been Ready for `undoAfter`.
fn undo(
    view: &NodeView,
    policy: &ValidatedPolicy,
    acted: &BTreeSet<String>,
    now: Timestamp,
    found: &mut NodeFindings,
) {
    let control = &view.control;
    if control.rare.record.is_empty() {
        return;
    }
    let Some(ready_since) = control.ready_seen.get() else { return };
    if acted.contains(&node_acted_key(&control.uid, NodeActionKind::Undo, ready_since)) {
        return;
    }
    let at = add(ready_since, policy.node_actions.undo_after);
    if now < at {
        found.deadlines.push(at);
        return;
    }
    found.undo.push(Action::Node(NodeAction {
        kind: NodeActionKind::Undo,
        node: NodeTarget {
            name: view.observation.name.to_string(),
            uid: control.uid.to_string(),
            reason: format!(
                "Ready again since {ready_since} for undoAfter {}: our own cordon and taint come \
                 off",
                format_duration(policy.node_actions.undo_after)
            ),
            threshold: at,
            shutdown_seen: control.rare.lifecycle.shutdown_seen,
        },
        lease_renewed: view.observation.lease_renewed.get(),
        epoch: ready_since,
        death: None,
    }));
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::stamp::Stamp;

    #[test]
    fn each_action_once_per_episode() {
        let p = policy(false);
        let node = dead_node();
        let summary = summarize_node(&node, &p, Some(t(-100)), t(60));
        let mut acted = BTreeSet::new();
        let mut found = NodeFindings::default();
        evaluate(&node, &summary, &p, &acted, &Acting::default(), t(60), &mut found);
        assert_eq!(kinds(&found.candidates), vec!["Cordon"]);
        // Recorded (say in DryRun, where the node does not change): not again.
        acted.insert(found.candidates[0].acted_key());
        let mut again = NodeFindings::default();
        evaluate(&node, &summary, &p, &acted, &Acting::default(), t(61), &mut again);
        assert!(again.candidates.is_empty(), "{again:?}");
        // A new outage (dead at another instant) is a new episode.
        let mut later = dead_node();
        later.observation.not_ready_seen = Some(t(500)).into();
        later.observation.lease_seen = Some(t(500)).into();
        let summary = summarize_node(&later, &p, Some(t(-100)), t(560));
        let mut next = NodeFindings::default();
        evaluate(&later, &summary, &p, &acted, &Acting::default(), t(560), &mut next);
        assert_eq!(kinds(&next.candidates), vec!["Cordon"]);
    }
    use crate::core::node::summarize_node;
    use crate::core::observed::{NodeControl, NodeObservation, NodeRecord, Readiness};

    fn t(sec: i64) -> Timestamp {
        add("2026-01-01T00:00:00Z".parse().expect("ts"), SignedDuration::from_secs(sec))
    }

    /// Node actions after 10 s (cordon), 20 s (taint), 60 s (delete); undo after 10 s.
    fn policy(assume_off: bool) -> ValidatedPolicy {
        let mut spec = crate::crd::RemediationPolicySpec::default();
        spec.dead_node.not_ready_for = "10s".into();
        spec.dead_node.lease_stale_for = "40s".into();
        spec.node_actions.cordon_after = Some("10s".into());
        spec.node_actions.out_of_service_taint_after = Some("20s".into());
        spec.node_actions.delete_node_after = Some("60s".into());
        spec.node_actions.undo_after = "10s".into();
        if assume_off {
            spec.node_actions.assume_off_after = Some("30s".into());
        }
        crate::core::validate(&spec).expect("valid test policy")
    }

    /// A node whose kubelet stopped at t(0): dead at t(40).
    fn dead_node() -> NodeView {
        NodeView {
            observation: NodeObservation {
                name: "n1".into(),
                readiness: Readiness::Unknown,
                ready_transition: Some(t(0)).into(),
                lease_renewed: Some(t(0)).into(),
                not_ready_seen: Some(t(0)).into(),
                lease_seen: Some(t(0)).into(),
                lease_duration_s: None,
                ready_heartbeat: Stamp::NONE,
                heartbeat_seen: Stamp::NONE,
                seen_from_stamps: false,
                not_ready_from_stamp: false,
                unschedulable: false,
                taints: Box::default(),
                volumes_in_use: Box::default(),
            },
            labels: Default::default(),
            excluded: false,
            deleted: false,
            control: NodeControl { uid: "u1".into(), ..Default::default() },
        }
    }

    struct Row {
        case: &'static str,
        node: NodeView,
        assume_off: bool,
        at: i64,
        /// The kinds due now, and the next deadline.
        want: (Vec<&'static str>, Option<i64>),
    }

    fn kinds(actions: &[Action]) -> Vec<&'static str> {
        actions.iter().map(|a| a.kind().as_str()).collect()
    }

    #[test]
    fn node_actions_table() {
        let with = |f: &dyn Fn(&mut NodeView)| {
            let mut n = dead_node();
            f(&mut n);
            n
        };
        let shutdown = |n: &mut NodeView| {
            n.observation.taints = vec![format!("{SHUTDOWN_TAINT}:NoSchedule")].into();
        };
        let table = [
            Row {
                case: "not dead yet",
                node: dead_node(),
                assume_off: false,
                at: 39,
                want: (vec![], None),
            },
            Row {
                case: "dead, cordon not due",
                node: dead_node(),
                assume_off: false,
                at: 45,
                want: (vec![], Some(50)),
            },
            Row {
                case: "cordon due; no fencing: never tainted, never deleted",
                node: dead_node(),
                assume_off: false,
                at: 50,
                want: (vec!["Cordon"], None),
            },
            Row {
                case: "deleteNodeAfter passed, no fencing, no assumeOffAfter: never deleted",
                node: dead_node(),
                assume_off: false,
                at: 200,
                want: (vec!["Cordon"], None),
            },
            Row {
                case: "our own taint is no fencing for deleting the Node",
                node: with(&|n| {
                    n.observation.unschedulable = true;
                    n.observation.taints = vec![format!("{OUT_OF_SERVICE_TAINT}:NoExecute")].into();
                    n.control.rare.update(|r| r.record.cordoned = Some(t(50)));
                    n.control.rare.update(|r| r.record.tainted = Some(t(60)));
                }),
                assume_off: false,
                at: 200,
                want: (vec![], None),
            },
            Row {
                case: "assumed off: delete after deleteNodeAfter",
                node: with(&|n| {
                    n.observation.unschedulable = true;
                    n.control.rare.update(|r| r.record.cordoned = Some(t(50)));
                    n.control.rare.update(|r| r.record.tainted = Some(t(70)));
                    n.observation.taints = vec![format!("{OUT_OF_SERVICE_TAINT}:NoExecute")].into();
                }),
                assume_off: true,
                at: 100,
                want: (vec!["DeleteNode"], None),
            },
            Row {
                case: "shutdown taint fences: taint at dead + 20 s",
                node: with(&shutdown),
                assume_off: false,
                at: 60,
                want: (vec!["Cordon", "OutOfServiceTaint"], Some(100)),
            },
            Row {
                case: "assumed off: taint at the later of 20 s and 30 s",
                node: dead_node(),
                assume_off: true,
                at: 60,
                want: (vec!["Cordon"], Some(70)),
            },
            Row {
                case: "assumed off, past both",
                node: dead_node(),
                assume_off: true,
                at: 70,
                want: (vec!["Cordon", "OutOfServiceTaint"], Some(100)),
            },
            Row {
                case: "admin uncordoned after our cordon: not again",
                node: with(&|n| n.control.rare.update(|r| r.record.cordoned = Some(t(50)))),
                assume_off: false,
                at: 60,
                want: (vec![], None),
            },
            Row {
                case: "already cordoned and tainted (by anyone): only delete left",
                node: with(&|n| {
                    n.observation.unschedulable = true;
                    n.observation.taints = vec![format!("{OUT_OF_SERVICE_TAINT}:NoExecute")].into();
                }),
                assume_off: true,
                at: 100,
                want: (vec!["DeleteNode"], None),
            },
            Row {
                case: "control plane: never deleted",
                node: with(&|n| n.control.control_plane = true),
                assume_off: false,
                at: 100,
                want: (vec!["Cordon"], None),
            },
            Row {
                case: "another tool manages it",
                node: with(&|n| {
                    n.control.managed_by = Some(crate::core::observed::ManagedBy {
                        tool: "Cluster API",
                        marker: "cluster.x-k8s.io/machine".into(),
                    })
                }),
                assume_off: true,
                at: 100,
                want: (vec![], None),
            },
            Row {
                case: "excluded",
                node: with(&|n| n.excluded = true),
                assume_off: true,
                at: 100,
                want: (vec![], None),
            },
        ];
        for r in table {
            let p = policy(r.assume_off);
            let summary = summarize_node(&r.node, &p, Some(t(-100)), t(r.at));
            let mut found = NodeFindings::default();
            evaluate(
                &r.node,
                &summary,
                &p,
                &BTreeSet::new(),
                &Acting::default(),
                t(r.at),
                &mut found,
            );
            let next = found.deadlines.iter().min().map(|d| d.duration_since(t(0)).as_secs());
            assert_eq!((kinds(&found.candidates), next), r.want, "{}: {}", r.case, summary.why);
            assert!(found.undo.is_empty(), "{}", r.case);
        }
    }

    #[test]
    fn undo_only_what_we_recorded_after_undo_after() {
        let p = policy(false);
        let mut node = dead_node();
        node.observation.readiness = Readiness::Ready;
        node.observation.not_ready_seen = Stamp::NONE;
        node.control.ready_seen = Some(t(100)).into();
        let judge = |n: &NodeView, at| {
            let summary = summarize_node(n, &p, Some(t(-100)), t(at));
            let mut found = NodeFindings::default();
            evaluate(n, &summary, &p, &BTreeSet::new(), &Acting::default(), t(at), &mut found);
            found
        };
        // Nothing recorded: nothing to undo, whatever the node carries.
        assert_eq!(judge(&node, 200), NodeFindings::default());
        node.control.rare.update(|r| {
            r.record = NodeRecord { policy: None, cordoned: Some(t(50)), tainted: None }
        });
        let early = judge(&node, 105);
        assert_eq!((early.undo.len(), early.deadlines.clone()), (0, vec![t(110)]));
        let due = judge(&node, 110);
        assert_eq!(kinds(&due.undo), vec!["UndoNodeActions"]);
        assert!(due.candidates.is_empty());
    }
}
