//! `failedByShutdown` (kubernetes/kubernetes#113278): a graceful node shutdown ends every pod
//! on the node with phase Failed and reason `Terminated` (`Shutdown` before Kubernetes 1.22,
//! `NodeShutdown` for a pod turned away during the shutdown), and nothing deletes them but
//! PodGC's `terminated-pod-gc-threshold` (12500 pods). With the rule enabled, such a pod on an
//! in-scope node is deleted once the operator has seen it so for `deleteAfter`, by its own
//! clock ([`crate::core::PodView::shutdown_seen`]). A pod Failed for any other reason is never
//! one of these: the adapter keeps only those with a shutdown's reason.

use jiff::Timestamp;

use super::release_gates::selected_kind;
use crate::core::action::{Action, DeleteShutdownPod, PodTarget};
use crate::core::duration::{add, format_duration};
use crate::core::node::NodeTable;
use crate::core::observed::Observed;
use crate::core::policy::ValidatedPolicy;

/// What the rule found at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShutdownFindings {
    /// Deletes, waiting for the guards.
    pub candidates: Vec<Action>,
    /// When a pod's `deleteAfter` passes.
    pub deadlines: Vec<Timestamp>,
}

/// Every pod left Failed by a graceful node shutdown on the in-scope `nodes` that is due.
pub fn shutdown_pods(
    observed: &Observed,
    nodes: &NodeTable,
    policy: &ValidatedPolicy,
    now: Timestamp,
) -> ShutdownFindings {
    let mut found = ShutdownFindings::default();
    let (Some(delete_after), Some(_)) = (policy.failed_by_shutdown, observed.watch_synced_at)
    else {
        return found;
    };
    for pod in &observed.pods {
        let (Some(reason), Some(seen), None, Some(node_name)) = (
            pod.shutdown_reason.as_deref(),
            pod.shutdown_seen.get(),
            pod.deletion_timestamp.get(),
            pod.node_name.as_deref(),
        ) else {
            continue;
        };
        let Some(node) = nodes.get(node_name) else { continue };
        if selected_kind(pod, node, observed, policy).is_err() {
            continue;
        }
        let due = add(seen, delete_after);
        if now < due {
            found.deadlines.push(due);
            continue;
        }
        let why = format!(
            "Failed with reason {reason} (a graceful shutdown of node {node_name}), seen so \
             since {seen}, for {} (failedByShutdown.deleteAfter {})",
            format_duration(now.duration_since(seen)),
            format_duration(delete_after)
        );
        found.candidates.push(Action::DeleteShutdownPod(DeleteShutdownPod {
            pod: PodTarget {
                namespace: pod.namespace.to_string(),
                name: pod.name.clone(),
                uid: pod.uid.to_string(),
                node: node_name.to_string(),
                owner: pod.owner_key(),
                reason: why,
                threshold: due,
                shutdown_seen: node.shutdown_seen.get(),
            },
            shutdown_reason: reason.to_string(),
            seen,
        }));
    }
    found
}

#[cfg(test)]
mod tests {
    use crate::core::stamp::Stamp;
    use jiff::SignedDuration;

    use super::*;
    use crate::core::node::NodeState;
    use crate::core::observed::{NodeView, PodView, fixtures};
    use crate::crd::RemediationPolicySpec;

    fn t(s: i64) -> Timestamp {
        add("2026-01-01T00:10:00Z".parse().expect("ts"), SignedDuration::from_secs(s))
    }

    #[test]
    fn deleted_once_seen_failed_by_a_shutdown_for_delete_after() {
        type Edit = fn(&mut PodView, &mut Observed);
        let none: Edit = |_, _| {};
        // (case, enabled, edit, now, want a delete, want a deadline)
        type Row = (&'static str, bool, Edit, i64, bool, Option<i64>);
        #[rustfmt::skip]
        let rows: [Row; 9] = [
            ("seen 30 s of 60", true, none, 30, false, Some(60)),
            ("seen 60 s: deleted", true, none, 60, true, None),
            ("rule off", false, none, 600, false, None),
            ("another reason: not kept as one", true, |p, _| p.shutdown_reason = None, 600, false, None),
            ("being deleted already", true, |p, _| p.deletion_timestamp = Stamp::from(t(0)), 600, false, None),
            ("excluded", true, |p, _| p.excluded = true, 600, false, None),
            ("recorded already (DryRun)", true, |p, o| { o.acted_pods.insert(p.uid.to_string()); }, 600, false, None),
            ("on a node out of scope", true, |p, _| p.node_name = Some("n9".into()), 600, false, None),
            ("evidence not trusted", true, |_, o| o.watch_synced_at = None, 600, false, None),
        ];
        for (case, enabled, edit, now, want_delete, want_deadline) in rows {
            let mut spec = RemediationPolicySpec::default();
            spec.failed_by_shutdown.enabled = enabled;
            spec.failed_by_shutdown.delete_after = "60s".into();
            let policy = crate::core::validate(&spec).expect("valid test policy");
            let mut pod = fixtures::pod("p", "n1");
            pod.deletion_timestamp = Stamp::NONE;
            pod.shutdown_reason = Some("Terminated".into());
            pod.shutdown_seen = Stamp::from(t(0));
            let mut observed = Observed {
                nodes: vec![NodeView::unknown("n1").into()],
                watch_synced_at: Some(t(-100)),
                ..Default::default()
            };
            edit(&mut pod, &mut observed);
            observed.pods.push(pod.into());
            let nodes = NodeTable::new(vec![fixtures::node_summary("n1", NodeState::Healthy)]);
            let found = shutdown_pods(&observed, &nodes, &policy, t(now));
            assert_eq!(!found.candidates.is_empty(), want_delete, "{case}");
            assert_eq!(found.deadlines.first().copied(), want_deadline.map(t), "{case}");
            if let Some(Action::DeleteShutdownPod(d)) = found.candidates.first() {
                assert_eq!((d.pod.threshold, d.seen), (t(60), t(0)), "{case}");
            }
        }
    }
}
