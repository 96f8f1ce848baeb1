//! Actions a previous run of the operator recorded as `Pending` (each request is recorded before
//! it is sent) and never recorded the outcome of: it stopped in between. The next run resolves
//! each from what the cluster shows now, once.

use super::action::kinds::{PodResolution, spec};
use super::observed::NodeView;
use crate::crd::{
    ActionKind, ActionResult, OUT_OF_SERVICE_TAINT, RecentAction, RemediationPolicyStatus,
};

/// What became of the pod a pending action was about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodNow {
    /// No longer there.
    Gone,
    /// There, Terminating.
    Terminating,
    /// There, not Terminating, Ready (or with no Ready condition).
    Present,
    /// There, not Terminating, its Ready condition not True.
    NotReady,
}

/// The records that replace the status's Pending ones: Done where the cluster shows the action
/// took effect (the pod gone; for an eviction, the pod gone or Terminating), Skipped otherwise
/// (this run decides again, and records what it does). Node actions are decided again from the
/// node's own record annotation, written with the change itself.
pub fn resolve_pending(
    status: Option<&RemediationPolicyStatus>,
    pod_now: impl Fn(&str) -> PodNow,
    node_done: impl Fn(&RecentAction) -> bool,
) -> Vec<RecentAction> {
    let Some(status) = status else { return Vec::new() };
    status
        .recent_actions
        .iter()
        .filter(|r| r.result == ActionResult::Pending)
        .map(|r| {
            let (result, seen) = match spec(r.action).resolution {
                Some(resolution) if took_effect(resolution, pod_now(&r.uid)) => {
                    let seen = match resolution {
                        PodResolution::Gone => "the pod is gone",
                        PodResolution::GoneOrTerminating => "the pod is evicted",
                        PodResolution::NotReady => "the pod is not Ready",
                    };
                    (ActionResult::Done, seen)
                }
                Some(_) => {
                    (ActionResult::Skipped, "the pod is still there, so this run decides again")
                }
                None if node_done(r) => (ActionResult::Done, "the node shows it done"),
                _ => (
                    ActionResult::Skipped,
                    "the node does not show it done, so this run decides again from the node's \
                     own record (annotation remediator.io/node-actions)",
                ),
            };
            RecentAction {
                result,
                detail: Some(format!(
                    "recorded by a previous run of the operator before its request (sent, or \
                     due soon), which stopped before recording its outcome; {seen}"
                )),
                ..r.clone()
            }
        })
        .collect()
}

/// Whether a pod action took effect, by what a fresh read of its pod shows.
fn took_effect(resolution: PodResolution, now: PodNow) -> bool {
    match resolution {
        PodResolution::Gone => now == PodNow::Gone,
        PodResolution::GoneOrTerminating => matches!(now, PodNow::Gone | PodNow::Terminating),
        PodResolution::NotReady => now == PodNow::NotReady,
    }
}

/// Whether a node action took effect, by a fresh read of its node (`None`: no Node of that
/// name): a Node deleted (gone, or another Node under its name); our cordon or our taint there
/// with our record naming it; an undo whose record is gone.
pub fn node_action_took_effect(record: &RecentAction, node: Option<&NodeView>) -> bool {
    let same = node.filter(|n| n.control.uid == record.uid);
    match (record.action, same) {
        (ActionKind::DeleteNode, None) => true,
        (ActionKind::Cordon, Some(n)) => {
            n.observation.unschedulable && n.control.rare.record.cordoned.is_some()
        }
        (ActionKind::OutOfServiceTaint, Some(n)) => {
            n.observation.has_taint_key(OUT_OF_SERVICE_TAINT)
                && n.control.rare.record.tainted.is_some()
        }
        (ActionKind::UndoNodeActions, Some(n)) => n.control.rare.record.is_empty(),
        _ => false,
    }
}

/// A pod action recorded `Failed` (a request that timed out, say) whose pod a later fresh read
/// shows `now`: `Done` when the action took effect after all (the pod gone; for an eviction,
/// gone or Terminating), replacing the `Failed` record; `None` while it did not.
pub fn resolve_failed(record: &RecentAction, now: PodNow) -> Option<RecentAction> {
    let happened = spec(record.action).resolution.is_some_and(|r| took_effect(r, now));
    happened.then(|| RecentAction {
        result: ActionResult::Done,
        detail: Some(
            "recorded Failed when sent (no answer, or an error), and a later read shows it \
             took effect"
                .into(),
        ),
        ..record.clone()
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::crd::Mode;

    fn record(uid: &str, action: ActionKind, result: ActionResult) -> RecentAction {
        RecentAction {
            time: Time("2026-01-01T00:00:00Z".parse().expect("ts")),
            action,
            mode: Mode::Enforce,
            namespace: "ns".into(),
            name: uid.into(),
            uid: uid.into(),
            node: "n1".into(),
            owner: None,
            reason: "node dead".into(),
            result,
            detail: None,
        }
    }

    #[test]
    fn pending_records_resolve_by_what_the_cluster_shows() {
        use ActionKind::*;
        use ActionResult::*;
        struct Row {
            case: &'static str,
            action: ActionKind,
            now: PodNow,
            want: ActionResult,
        }
        let rows = [
            Row {
                case: "force delete, pod gone",
                action: ForceDelete,
                now: PodNow::Gone,
                want: Done,
            },
            Row {
                case: "force delete, pod still Terminating",
                action: ForceDelete,
                now: PodNow::Terminating,
                want: Skipped,
            },
            Row {
                case: "eviction, pod Terminating",
                action: Evict,
                now: PodNow::Terminating,
                want: Done,
            },
            Row {
                case: "eviction, pod untouched",
                action: Evict,
                now: PodNow::Present,
                want: Skipped,
            },
            Row {
                case: "finalizers, pod gone",
                action: RemoveFinalizers,
                now: PodNow::Gone,
                want: Done,
            },
            Row {
                case: "cordon the node does not show: decided again",
                action: Cordon,
                now: PodNow::Gone,
                want: Skipped,
            },
        ];
        for Row { case, action, now, want } in rows {
            let status = RemediationPolicyStatus {
                recent_actions: vec![
                    record("p", action, Pending),
                    record("other", ForceDelete, Done),
                ],
                ..Default::default()
            };
            let resolved = resolve_pending(Some(&status), |_| now, |_| false);
            assert_eq!(resolved.len(), 1, "{case}");
            assert_eq!((resolved[0].uid.as_str(), resolved[0].result), ("p", want), "{case}");
            let detail = resolved[0].detail.clone().unwrap_or_default();
            assert!(detail.starts_with("recorded by a previous run"), "{case}: {detail}");
        }
        assert!(resolve_pending(None, |_| PodNow::Gone, |_| true).is_empty());
    }
}

#[cfg(test)]
mod failed_tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::crd::Mode;

    #[test]
    fn a_failed_request_that_happened_is_done() {
        let record = |action| RecentAction {
            time: Time("2026-01-01T00:00:00Z".parse().expect("ts")),
            action,
            mode: Mode::Enforce,
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u".into(),
            node: "n1".into(),
            owner: None,
            reason: String::new(),
            result: ActionResult::Failed,
            detail: None,
        };
        use ActionKind::*;
        let table = [
            (ForceDelete, PodNow::Gone, true),
            (ForceDelete, PodNow::Terminating, false),
            (Evict, PodNow::Terminating, true),
            (Evict, PodNow::Present, false),
            (RemoveFinalizers, PodNow::Gone, true),
        ];
        for (action, now, want) in table {
            let got = resolve_failed(&record(action), now);
            assert_eq!(got.as_ref().map(|r| r.result), want.then_some(ActionResult::Done));
        }
    }

    #[test]
    fn node_actions_resolve_from_what_the_node_shows() {
        use crate::core::observed::NodeRecord;
        let record = |action| RecentAction { uid: "node-uid".into(), ..record_of(action) };
        let node = |f: &dyn Fn(&mut NodeView)| {
            let mut n = NodeView::unknown("n1");
            n.control.uid = "node-uid".into();
            f(&mut n);
            n
        };
        let ours =
            NodeRecord { policy: None, cordoned: Some(jiff::Timestamp::UNIX_EPOCH), tainted: None };
        let cordoned = node(&|n| {
            n.observation.unschedulable = true;
            n.control.rare.update(|r| r.record = ours.clone());
        });
        let replaced = node(&|n| n.control.uid = "new".into());
        let plain = node(&|_| {});
        use ActionKind::*;
        let table: Vec<(&str, ActionKind, Option<&NodeView>, bool)> = vec![
            ("deleted: gone", DeleteNode, None, true),
            ("deleted: another Node under the name", DeleteNode, Some(&replaced), true),
            ("delete not done", DeleteNode, Some(&plain), false),
            ("our cordon there", Cordon, Some(&cordoned), true),
            ("no cordon", Cordon, Some(&plain), false),
            ("undo: our record gone", UndoNodeActions, Some(&plain), true),
            ("undo: our record still there", UndoNodeActions, Some(&cordoned), false),
        ];
        for (case, action, node, want) in table {
            assert_eq!(node_action_took_effect(&record(action), node), want, "{case}");
        }
    }

    fn record_of(action: ActionKind) -> RecentAction {
        RecentAction {
            time: Time("2026-01-01T00:00:00Z".parse().expect("ts")),
            action,
            mode: Mode::Enforce,
            namespace: String::new(),
            name: "n1".into(),
            uid: "u".into(),
            node: "n1".into(),
            owner: None,
            reason: String::new(),
            result: ActionResult::Pending,
            detail: None,
        }
    }
}
