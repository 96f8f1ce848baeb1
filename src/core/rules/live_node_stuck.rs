//! `liveNodeStuck` (field incident 3): a pod still Terminating on a node that is Ready, past its
//! deletionTimestamp plus `liveNodeStuck.delayAfterGrace`. The cause is diagnosed
//! ([`crate::core::live_node_cause`]) and reported always; the pod is released only where the policy opts
//! in: a force delete after `forceDeleteAfter` (never while a finalizer holds it: the delete
//! would not remove it), or the removal of allowlisted finalizers (`finalizers.removable`) after
//! `finalizers.removeAfter`.

use jiff::Timestamp;

use super::release_gates::{Gate, finalizer_gate};
use crate::core::duration::{add, format_duration};
use crate::core::live_node_cause::{StuckCause, diagnose};
use crate::core::node::NodeSummary;
use crate::core::observed::{NodeObservation, OwnerKey, PodView};
use crate::core::policy::{LiveNodeStuck, ValidatedPolicy};
use crate::core::verdict::NotEligible;
use crate::crd::FencingRequirement;

/// A pod stuck Terminating on a live node, for the reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    pub cause: StuckCause,
    /// When it became stuck: deletionTimestamp plus `delayAfterGrace`.
    pub since: Timestamp,
}

/// The gate of a selected pod on the live (Ready) `node`, and the stuck pod to report once it is
/// stuck. `deleted_at` is when its grace period ended by the operator's clock (when it first
/// saw the pod Terminating, plus the grace period); `requirement`: the fencing it needs.
#[allow(clippy::too_many_arguments)] // one pure judgement over its inputs, each named
pub fn gate(
    pod: &PodView,
    node: &NodeSummary,
    observation: &NodeObservation,
    policy: &ValidatedPolicy,
    rule: LiveNodeStuck,
    requirement: Option<FencingRequirement>,
    deleted_at: Timestamp,
    now: Timestamp,
) -> (Gate, Option<StuckPod>) {
    let since = add(deleted_at, rule.delay);
    if now < since {
        // Not stuck yet: the kubelet has until deletionTimestamp + delayAfterGrace.
        return (Gate::Blocked(NotEligible::WithinDelay { until: since }, Some(since)), None);
    }
    let cause = diagnose(pod, observation);
    let stuck = StuckPod {
        namespace: pod.namespace.to_string(),
        name: pod.name.clone(),
        uid: pod.uid.to_string(),
        node: node.name.to_string(),
        owner: pod.owner_key(),
        cause: cause.clone(),
        since,
    };
    let reported = |action_at: Option<Timestamp>| NotEligible::StuckOnLiveNode {
        cause: cause.code(),
        detail: cause.detail(),
        action_at,
    };
    let gate = match &cause {
        StuckCause::Finalizers { names } => {
            let due = add(deleted_at, policy.finalizers.remove_after).max(since);
            finalizer_gate(names, policy, due, now, || {
                format!(
                    "stuck Terminating on live node {} since {since}: {}",
                    node.name,
                    cause.detail()
                )
            })
        }
        // A pod that needs fencing is never force-deleted on a live node (it has none: the
        // kubelet may still hold its volume) unless the policy opts in.
        _ if requirement.is_some() && !rule.force_delete_unfenced && node.fenced_by.is_none() => {
            let because = requirement.unwrap_or(FencingRequirement::All);
            Gate::Blocked(NotEligible::NeedsFencing { because }, None)
        }
        _ => match rule.force_delete_after.map(|after| add(deleted_at, after)) {
            Some(due) if now >= due => Gate::Ready {
                threshold: due,
                reason: format!(
                    "stuck Terminating on live node {} since {since}: {}; liveNodeStuck.forceDeleteAfter {} passed at {due}",
                    node.name,
                    cause.detail(),
                    format_duration(rule.force_delete_after.unwrap_or_default()),
                ),
                fencing_required: requirement,
                live_node: true,
            },
            Some(due) => Gate::Blocked(reported(Some(due)), Some(due)),
            None => Gate::Blocked(reported(None), None),
        },
    };
    (gate, Some(stuck))
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;
    use crate::core::node::NodeState;
    use crate::core::observed::{NodeView, fixtures};
    use crate::crd::RemediationPolicySpec;

    fn t(s: i64) -> Timestamp {
        add("2026-01-01T00:10:00Z".parse().expect("ts"), SignedDuration::from_secs(s))
    }

    fn live() -> NodeSummary {
        NodeSummary {
            why: "Ready".into(),
            ..crate::core::observed::fixtures::node_summary("n1", NodeState::Healthy)
        }
    }

    /// Deleted at t(0); report after 60 s; force delete after 120 s when set; finalizers
    /// `a/x` removable after 90 s.
    fn policy(force_delete: bool) -> ValidatedPolicy {
        let mut spec = RemediationPolicySpec::default();
        spec.live_node_stuck.delay_after_grace = "60s".into();
        spec.live_node_stuck.force_delete_after = force_delete.then(|| "120s".to_string());
        spec.finalizers.removable = vec!["a/x".into()];
        spec.finalizers.remove_after = "90s".into();
        crate::core::validate(&spec).expect("valid test policy")
    }

    fn summary(gate: &Gate) -> String {
        match gate {
            Gate::Blocked(reason, deadline) => {
                format!("blocked {} until {:?}", reason.code(), deadline.map(|d| d.to_string()))
            }
            Gate::Ready { threshold, live_node, .. } => {
                format!("force delete at {threshold} live {live_node}")
            }
            Gate::RemoveFinalizers { threshold, remove, .. } => {
                format!("remove {remove:?} at {threshold}")
            }
        }
    }

    type Row = (
        &'static str,
        &'static [&'static str],
        &'static [&'static str],
        bool,
        i64,
        Option<&'static str>,
        String,
    );

    #[test]
    fn report_then_opt_in_release() {
        let s = |x: i64| t(x).to_string();
        // (case, finalizers, running containers, force delete opted in, now, want cause, want gate)
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            ("within the delay", &[], &["app"], true, 59, None, format!("blocked WithinDelay until Some({:?})", s(60))),
            ("stuck, reported only", &[], &["app"], false, 60, Some("ContainersRunning"), "blocked StuckOnLiveNode until None".into()),
            ("stuck, force delete later", &[], &["app"], true, 60, Some("ContainersRunning"), format!("blocked StuckOnLiveNode until Some({:?})", s(120))),
            ("force delete due", &[], &[], true, 120, Some("KubeletNotFinishing"), format!("force delete at {} live true", s(120))),
            ("a finalizer not removable: held, never deleted", &["b/y"], &[], true, 500, Some("Finalizers"), "blocked HeldByFinalizers until None".into()),
            ("removable and another: held", &["a/x", "b/y"], &[], true, 500, Some("Finalizers"), "blocked HeldByFinalizers until None".into()),
            ("removable, not yet", &["a/x"], &[], false, 80, Some("Finalizers"), format!("blocked HeldByFinalizers until Some({:?})", s(90))),
            ("removable, due", &["a/x"], &["app"], false, 90, Some("Finalizers"), format!("remove [\"a/x\"] at {}", s(90))),
        ];
        for (case, finalizers, running, force_delete, now, want_cause, want) in rows {
            let p = policy(force_delete);
            let rule = p.live_node_stuck.expect("rule enabled");
            let pod = PodView {
                finalizers: finalizers.iter().map(|f| f.to_string()).collect(),
                running_containers: running.iter().map(|c| c.to_string()).collect(),
                ..fixtures::pod("p", "n1")
            };
            let obs = NodeView::deleted_unknown("n1").observation;
            let (gate, stuck) = gate(&pod, &live(), &obs, &p, rule, None, t(0), t(now));
            assert_eq!(summary(&gate), want, "{case}");
            assert_eq!(stuck.map(|s| s.cause.code()), want_cause, "{case}");
        }
    }
}
