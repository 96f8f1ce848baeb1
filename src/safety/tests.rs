//! The kernel's invariants, one table each: what it admits and what it refuses, and why.

use jiff::{SignedDuration, Timestamp};

use super::*;
use crate::core::{
    DeleteShutdownPod, Evict, FreshNode, FreshPod, FreshPolicy, LiveDeletion, MarkNotReady,
    NodeControl, NodeRecord, NodeTarget, NodeView, Outage, validate,
};
use crate::crd::{FencingRequirement, RemediationPolicySpec, StaleReadinessAction};

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).expect("test instant")
}

/// Enforce; notReadyFor 10 s, leaseStaleFor 40 s (the kernel's own clock checks).
fn policy(f: impl FnOnce(&mut RemediationPolicySpec)) -> ValidatedPolicy {
    let mut spec = RemediationPolicySpec { mode: Mode::Enforce, ..Default::default() };
    spec.dead_node.not_ready_for = "10s".into();
    spec.dead_node.lease_stale_for = "40s".into();
    f(&mut spec);
    validate(&spec).expect("valid test policy")
}

/// Dead by what we watched: renewal `r` seen at 0, not Ready since 0, window from -100.
fn watched() -> DeathEvidence {
    DeathEvidence::Watched {
        lease_renewed: t(-5),
        lease_seen: t(0),
        not_ready_since: t(0),
        lease_duration_s: Some(40),
        window_start: t(-100),
    }
}

/// [`watched`], of a kubelet whose Lease declares `seconds`.
fn watched_declaring(seconds: u16) -> DeathEvidence {
    match watched() {
        DeathEvidence::Watched {
            lease_renewed, lease_seen, not_ready_since, window_start, ..
        } => DeathEvidence::Watched {
            lease_renewed,
            lease_seen,
            not_ready_since,
            lease_duration_s: Some(seconds),
            window_start,
        },
        other => other,
    }
}

fn node(readiness: Readiness, taints: &[&str]) -> FreshNode {
    let mut obs = NodeView::unknown("n1").observation;
    obs.readiness = readiness;
    obs.taints = taints.iter().map(|t| t.to_string()).collect();
    FreshNode {
        observation: obs,
        excluded: false,
        control: NodeControl { uid: "node-uid".into(), ..NodeControl::default() },
        cordon_managers: vec![],
        out_of_service_added: None,
    }
}

fn pod(uid: &'static str, terminating: bool) -> FreshPod<'static> {
    FreshPod {
        uid: Some(uid),
        terminating,
        deletion: terminating.then(|| (t(-30), 30)),
        node: "n1",
        excluded: false,
        stale: !terminating,
        failed_by_shutdown: false,
        ready: false,
    }
}

fn enforcing() -> Option<FreshPolicy> {
    Some(FreshPolicy { mode: Mode::Enforce, paused: false, generation: Some(1) })
}

/// Pod `ns/p` on node `n1`, due at `due`.
fn target(due: i64) -> PodTarget {
    PodTarget {
        namespace: "ns".into(),
        name: "p".into(),
        uid: "pod-uid".into(),
        node: "n1".into(),
        owner: None,
        reason: String::new(),
        threshold: t(due),
        shutdown_seen: None,
    }
}

fn force_delete(fencing: Option<FencingRequirement>, death: Option<DeathEvidence>) -> Action {
    Action::ForceDelete(ForceDelete {
        pod: target(40),
        blocks_rollout: None,
        lease_renewed: Some(t(-5)),
        fencing_required: fencing,
        live: None,
        death,
    })
}

fn node_action(kind: NodeActionKind, death: Option<DeathEvidence>) -> Action {
    Action::Node(NodeAction {
        kind,
        node: NodeTarget {
            name: "n1".into(),
            uid: "node-uid".into(),
            reason: String::new(),
            threshold: t(40),
            shutdown_seen: None,
        },
        lease_renewed: Some(t(-5)),
        epoch: t(40),
        death,
    })
}

/// Checks `action` against `look` at `now` under `policy`.
fn check(
    action: &Action,
    policy: &ValidatedPolicy,
    look: &LastLook<'_>,
    undo: Option<UndoChanges>,
    now: i64,
) -> Result<(), Invariant> {
    let write = Write { action, policy, planned_generation: Some(1), look, undo, now: t(now) };
    admit(&write).map_err(|r| r.invariant)
}

#[test]
fn force_deletes() {
    use Invariant::*;
    let p = policy(|_| {});
    let dead_node = || Some(node(Readiness::Unknown, &[]));
    let look = |pod: Option<FreshPod<'static>>, node: Option<FreshNode>, lease: Option<i64>| {
        LastLook { pod, node, lease_renewed: lease.map(t), policy: enforcing() }
    };
    let shutdown = || Some(node(Readiness::Unknown, &[&format!("{SHUTDOWN_TAINT}:NoSchedule")]));
    let mut ours = node(Readiness::Unknown, &[&format!("{OUT_OF_SERVICE_TAINT}:NoExecute")]);
    ours.control
        .rare
        .update(|r| r.record = NodeRecord { tainted: Some(t(30)), ..NodeRecord::default() });
    let theirs = node(Readiness::Unknown, &[&format!("{OUT_OF_SERVICE_TAINT}:NoExecute")]);
    let applied_by = |who: &str| {
        let mut n = node(Readiness::Unknown, &[&format!("{OUT_OF_SERVICE_TAINT}:NoExecute")]);
        n.control.rare.update(|r| r.out_of_service_applied_by = Some(who.to_string()));
        Some(n)
    };
    let sts = Some(FencingRequirement::StatefulSet);
    #[rustfmt::skip]
    type Row<'a> = (&'static str, Action, LastLook<'a>, i64, Result<(), Invariant>);
    let table: Vec<Row<'_>> = vec![
        (
            "dead by what we watched",
            force_delete(None, Some(watched())),
            look(Some(pod("pod-uid", true)), dead_node(), Some(-5)),
            40,
            Ok(()),
        ),
        (
            "a deleted Lease is no evidence",
            force_delete(None, Some(watched())),
            look(Some(pod("pod-uid", true)), dead_node(), None),
            40,
            Err(DeathEvidence),
        ),
        (
            "a renewal since the plan",
            force_delete(None, Some(watched())),
            look(Some(pod("pod-uid", true)), dead_node(), Some(3)),
            40,
            Err(DeathEvidence),
        ),
        (
            "leaseStaleFor not passed by our clock",
            force_delete(None, Some(watched())),
            look(Some(pod("pod-uid", true)), dead_node(), Some(-5)),
            39,
            Err(DeathEvidence),
        ),
        (
            "a Lease of 2m unrenewed for leaseStaleFor 40s: not yet its own duration",
            force_delete(None, Some(watched_declaring(120))),
            look(Some(pod("pod-uid", true)), dead_node(), Some(-5)),
            119,
            Err(DeathEvidence),
        ),
        (
            "a Lease of 2m unrenewed for 2m",
            force_delete(None, Some(watched_declaring(120))),
            look(Some(pod("pod-uid", true)), dead_node(), Some(-5)),
            120,
            Ok(()),
        ),
        (
            "no evidence carried",
            force_delete(None, None),
            look(Some(pod("pod-uid", true)), dead_node(), Some(-5)),
            40,
            Err(DeathEvidence),
        ),
        (
            "node Ready again",
            force_delete(None, Some(watched())),
            look(Some(pod("pod-uid", true)), Some(node(Readiness::Ready, &[])), Some(-5)),
            40,
            Err(DeathEvidence),
        ),
        (
            "a replacement pod",
            force_delete(None, Some(watched())),
            look(Some(pod("other", true)), dead_node(), Some(-5)),
            40,
            Err(FreshTarget),
        ),
        (
            "a running pod",
            force_delete(None, Some(watched())),
            look(Some(pod("pod-uid", false)), dead_node(), Some(-5)),
            40,
            Err(FreshTarget),
        ),
        (
            "seen deleted and still gone",
            force_delete(None, Some(crate::core::DeathEvidence::Deleted)),
            look(Some(pod("pod-uid", true)), None, None),
            40,
            Ok(()),
        ),
        (
            "seen deleted, re-created since",
            force_delete(None, Some(crate::core::DeathEvidence::Deleted)),
            look(Some(pod("pod-uid", true)), dead_node(), None),
            40,
            Err(DeathEvidence),
        ),
        (
            "StatefulSet pod, no fencing",
            force_delete(sts, Some(watched())),
            look(Some(pod("pod-uid", true)), dead_node(), Some(-5)),
            40,
            Err(Fencing),
        ),
        (
            "StatefulSet pod, our own taint is no fencing",
            force_delete(sts, Some(watched())),
            look(Some(pod("pod-uid", true)), Some(ours), Some(-5)),
            40,
            Err(Fencing),
        ),
        (
            "StatefulSet pod, someone else's taint",
            force_delete(sts, Some(watched())),
            look(Some(pod("pod-uid", true)), Some(theirs), Some(-5)),
            40,
            Ok(()),
        ),
        (
            "StatefulSet pod, a taint applied by us (no record of ours)",
            force_delete(sts, Some(watched())),
            look(Some(pod("pod-uid", true)), applied_by(APPLIED_BY_US), Some(-5)),
            40,
            Err(Fencing),
        ),
        (
            "StatefulSet pod, a taint another tool applied",
            force_delete(sts, Some(watched())),
            look(Some(pod("pod-uid", true)), applied_by("pacemaker"), Some(-5)),
            40,
            Ok(()),
        ),
        (
            "StatefulSet pod, shutdown taint",
            force_delete(sts, Some(watched())),
            look(Some(pod("pod-uid", true)), shutdown(), Some(-5)),
            40,
            Ok(()),
        ),
        (
            "StatefulSet pod, Node deleted by someone else",
            force_delete(sts, Some(crate::core::DeathEvidence::Deleted)),
            look(Some(pod("pod-uid", true)), None, None),
            40,
            Ok(()),
        ),
    ];
    for (case, action, look, now, want) in table {
        assert_eq!(check(&action, &p, &look, None, now), want, "{case}");
    }
}

#[test]
fn the_policy_must_enforce_now() {
    let action = force_delete(None, Some(watched()));
    let look = |policy| LastLook {
        pod: Some(pod("pod-uid", true)),
        node: Some(node(Readiness::Unknown, &[])),
        lease_renewed: Some(t(-5)),
        policy,
    };
    let dry = policy(|s| s.mode = Mode::DryRun);
    assert_eq!(check(&action, &dry, &look(enforcing()), None, 40), Err(Invariant::Enforcing));
    let p = policy(|_| {});
    let paused = Some(FreshPolicy { mode: Mode::Enforce, paused: true, generation: Some(1) });
    let changed = Some(FreshPolicy { mode: Mode::Enforce, paused: false, generation: Some(2) });
    let to_dry = Some(FreshPolicy { mode: Mode::DryRun, paused: false, generation: Some(1) });
    for (case, fresh) in
        [("paused", paused), ("changed", changed), ("DryRun now", to_dry), ("deleted", None)]
    {
        assert_eq!(check(&action, &p, &look(fresh), None, 40), Err(Invariant::Enforcing), "{case}");
    }
}

#[test]
fn node_deletions_need_fencing_from_outside() {
    use Invariant::*;
    let delete =
        |assumed_off| node_action(NodeActionKind::DeleteNode { assumed_off }, Some(watched()));
    let look = |node: FreshNode| LastLook {
        pod: None,
        node: Some(node),
        lease_renewed: Some(t(-5)),
        policy: enforcing(),
    };
    let plain = policy(|_| {});
    let assume = policy(|s| {
        s.node_actions.out_of_service_taint_after = Some("10s".into());
        s.node_actions.assume_off_after = Some("60s".into());
    });
    let mut ours = node(Readiness::Unknown, &[&format!("{OUT_OF_SERVICE_TAINT}:NoExecute")]);
    ours.control
        .rare
        .update(|r| r.record = NodeRecord { tainted: Some(t(30)), ..NodeRecord::default() });
    let shutdown = node(Readiness::Unknown, &[&format!("{SHUTDOWN_TAINT}:NoSchedule")]);
    #[rustfmt::skip]
    let table = [
        ("no fencing at all", delete(false), &plain, look(node(Readiness::Unknown, &[])), 40, Err(Fencing)),
        ("only our own taint", delete(false), &plain, look(ours), 40, Err(Fencing)),
        ("the cloud's shutdown taint", delete(false), &plain, look(shutdown), 40, Ok(())),
        ("assumed off before assumeOffAfter", delete(true), &assume, look(node(Readiness::Unknown, &[])), 99, Err(Fencing)),
        ("assumed off after assumeOffAfter", delete(true), &assume, look(node(Readiness::Unknown, &[])), 100, Ok(())),
        ("assumed off without assumeOffAfter", delete(true), &plain, look(node(Readiness::Unknown, &[])), 1000, Err(Fencing)),
        ("a Lease deleted meanwhile", delete(false), &plain, LastLook { lease_renewed: None, ..look(node(Readiness::Unknown, &[&format!("{SHUTDOWN_TAINT}:NoSchedule")])) }, 40, Err(DeathEvidence)),
    ];
    for (case, action, p, look, now, want) in table {
        assert_eq!(check(&action, p, &look, None, now), want, "{case}");
    }
}

#[test]
fn undo_only_what_is_still_ours() {
    let undo = node_action(NodeActionKind::Undo, None);
    let p = policy(|_| {});
    let ours = |managers: &[&str], added: Option<i64>| {
        let mut n = node(Readiness::Ready, &[]);
        n.control.rare.update(|r| {
            r.record = NodeRecord { policy: None, cordoned: Some(t(10)), tainted: Some(t(20)) }
        });
        n.control.rare.update(|r| r.out_of_service_applied_by = Some(APPLIED_BY_US.into()));
        n.cordon_managers = managers.iter().map(|m| m.to_string()).collect();
        n.out_of_service_added = added.map(t);
        LastLook { pod: None, node: Some(n), lease_renewed: None, policy: enforcing() }
    };
    let applied = |mut look: LastLook<'static>, by: Option<&str>| {
        if let Some(n) = look.node.as_mut() {
            n.control.rare.update(|r| r.out_of_service_applied_by = by.map(str::to_string));
        }
        look
    };
    let both = UndoChanges { uncordon: true, remove_taint: true };
    let cordon = UndoChanges { uncordon: true, remove_taint: false };
    let taint = UndoChanges { uncordon: false, remove_taint: true };
    let refused = Err(Invariant::UndoOnlyOurs);
    #[rustfmt::skip]
    let table = [
        ("both still ours", ours(&[FIELD_MANAGER], Some(20)), both, Ok(())),
        ("an admin cordoned again: theirs", ours(&["kubectl-cordon"], Some(20)), cordon, refused),
        ("shared with an admin", ours(&[FIELD_MANAGER, "kubectl"], Some(20)), cordon, refused),
        ("nobody owns it", ours(&[], Some(20)), cordon, refused),
        ("a taint added at another time", ours(&[FIELD_MANAGER], Some(25)), taint, refused),
        ("no taint time", ours(&[FIELD_MANAGER], None), taint, refused),
        ("nothing to change", ours(&[], None), UndoChanges::default(), Ok(())),
        ("a taint another tool applied since", applied(ours(&[FIELD_MANAGER], Some(20)), Some("pacemaker")), taint, refused),
        ("a taint no one says applied", applied(ours(&[FIELD_MANAGER], Some(20)), None), taint, refused),
    ];
    for (case, look, changes, want) in table {
        assert_eq!(check(&undo, &p, &look, Some(changes), 100), want, "{case}");
    }
    // Never on a node that is not Ready.
    let mut look = ours(&[FIELD_MANAGER], Some(20));
    if let Some(n) = look.node.as_mut() {
        n.observation.readiness = Readiness::Unknown;
    }
    assert_eq!(check(&undo, &p, &look, Some(both), 100), refused);
}

#[test]
fn evictions_repair_only_what_the_outage_did() {
    use Invariant::*;
    let p = policy(|s| {
        s.stale_readiness.action = StaleReadinessAction::Evict;
        s.stale_readiness.node_ready_for = "60s".into();
    });
    let report = policy(|s| s.stale_readiness.action = StaleReadinessAction::Report);
    let evict = |stale_seen: i64| {
        Action::Evict(Evict {
            pod: target(160),
            outage: Outage { from: t(50), to: t(100) },
            stale_seen: t(stale_seen),
        })
    };
    let look = |stale: bool, ready: Readiness| LastLook {
        pod: Some(FreshPod { stale, ..pod("pod-uid", false) }),
        node: Some(node(ready, &[])),
        lease_renewed: None,
        policy: enforcing(),
    };
    #[rustfmt::skip]
    let table = [
        ("turned during the outage", evict(60), &p, look(true, Readiness::Ready), 160, Ok(())),
        ("before the outage (a readiness gate)", evict(10), &p, look(true, Readiness::Ready), 160, Err(RepairOnlyTheOutage)),
        ("long after it", evict(200), &p, look(true, Readiness::Ready), 300, Err(RepairOnlyTheOutage)),
        ("nodeReadyFor not passed", evict(60), &p, look(true, Readiness::Ready), 159, Err(RepairOnlyTheOutage)),
        ("the fresh pod is not stale (a sidecar not ready)", evict(60), &p, look(false, Readiness::Ready), 160, Err(RepairOnlyTheOutage)),
        ("the node is out again", evict(60), &p, look(true, Readiness::Unknown), 160, Err(LiveNode)),
        ("the policy reports only", evict(60), &report, look(true, Readiness::Ready), 160, Err(RepairOnlyTheOutage)),
    ];
    for (case, action, p, look, now, want) in table {
        assert_eq!(check(&action, p, &look, None, now), want, "{case}");
    }
}

#[test]
fn shutdown_pods_need_the_rule_the_fresh_pod_failed_so_and_our_sighting_for_delete_after() {
    use Invariant::*;
    let p = policy(|s| {
        s.failed_by_shutdown.enabled = true;
        s.failed_by_shutdown.delete_after = "60s".into();
    });
    let off = policy(|s| s.failed_by_shutdown.delete_after = "60s".into());
    let delete = Action::DeleteShutdownPod(DeleteShutdownPod {
        pod: target(60),
        shutdown_reason: "Terminated".into(),
        seen: t(0),
    });
    let failed = FreshPod { failed_by_shutdown: true, stale: false, ..pod("pod-uid", false) };
    let look = |pod: Option<FreshPod<'static>>| LastLook {
        pod,
        node: None,
        lease_renewed: None,
        policy: enforcing(),
    };
    let dry = LastLook {
        policy: Some(FreshPolicy { mode: Mode::DryRun, paused: false, generation: Some(1) }),
        ..look(Some(failed))
    };
    #[rustfmt::skip]
    let table = [
        ("seen Failed by a shutdown for deleteAfter (node gone)", &p, look(Some(failed)), 60, Ok(())),
        ("deleteAfter not passed by our clock", &p, look(Some(failed)), 59, Err(FailedByShutdown)),
        ("the rule is off", &off, look(Some(failed)), 600, Err(FailedByShutdown)),
        ("the fresh pod is not Failed by a shutdown", &p, look(Some(FreshPod { failed_by_shutdown: false, ..failed })), 600, Err(FailedByShutdown)),
        ("no fresh read of the pod", &p, look(None), 600, Err(FreshTarget)),
        ("another pod of that name", &p, look(Some(FreshPod { uid: Some("new"), ..failed })), 600, Err(FreshTarget)),
        ("on another node", &p, look(Some(FreshPod { node: "n2", ..failed })), 600, Err(FreshTarget)),
        ("Terminating already", &p, look(Some(FreshPod { terminating: true, ..failed })), 600, Err(FreshTarget)),
        ("the policy is in DryRun now", &p, dry, 600, Err(Enforcing)),
    ];
    for (case, p, look, now, want) in table {
        assert_eq!(check(&delete, p, &look, None, now), want, "{case}");
    }
}

/// The deletion of [`pod`] (deletionTimestamp at -30, 30 s of grace) as we timed it: seen at
/// -28, so its grace ended at 2 by our clock.
fn timed() -> LiveDeletion {
    LiveDeletion { seen: t(-28), deletion: t(-30), grace_s: 30 }
}

/// The last look at a Terminating pod on a live node: the node `ready`, the pod's `deletion`.
fn live_look(ready: Readiness, deletion: Option<(Timestamp, i64)>) -> LastLook<'static> {
    LastLook {
        pod: Some(FreshPod { deletion, ..pod("pod-uid", true) }),
        node: Some(node(ready, &[])),
        lease_renewed: None,
        policy: enforcing(),
    }
}

#[test]
fn live_node_force_deletes_need_a_ready_node_fencing_or_the_opt_in_and_our_time() {
    use Invariant::*;
    let live = |fencing, timed: Option<LiveDeletion>| {
        let Action::ForceDelete(fd) = force_delete(fencing, None) else { unreachable!() };
        Action::ForceDelete(ForceDelete { live: timed, ..fd })
    };
    let look = live_look;
    let ours = Some((t(-30), 30));
    let p = policy(|s| s.live_node_stuck.force_delete_after = Some("5m".into()));
    let opted = policy(|s| {
        s.live_node_stuck.force_delete_after = Some("5m".into());
        s.live_node_stuck.force_delete_unfenced = true;
    });
    let reporting = policy(|_| {});
    let sts = Some(FencingRequirement::StatefulSet);
    // forceDeleteAfter (5m) from the end of the grace period by our clock (2): due at 302.
    #[rustfmt::skip]
    let table = [
        ("Ready, 5m after the grace ended", live(None, Some(timed())), &p, look(Readiness::Ready, ours), 302, Ok(())),
        ("a second before", live(None, Some(timed())), &p, look(Readiness::Ready, ours), 301, Err(LiveNode)),
        ("the node is not Ready", live(None, Some(timed())), &p, look(Readiness::Unknown, ours), 302, Err(LiveNode)),
        ("needs fencing", live(sts, Some(timed())), &p, look(Readiness::Ready, ours), 302, Err(Fencing)),
        ("needs fencing, the policy opts in", live(sts, Some(timed())), &opted, look(Readiness::Ready, ours), 302, Ok(())),
        ("the policy does not force delete on live nodes", live(None, Some(timed())), &reporting, look(Readiness::Ready, ours), 900, Err(LiveNode)),
        ("re-deleted with a shorter grace since", live(None, Some(timed())), &p, look(Readiness::Ready, Some((t(100), 0))), 302, Err(LiveNode)),
        ("the same deletionTimestamp, another grace", live(None, Some(timed())), &p, look(Readiness::Ready, Some((t(-30), 0))), 302, Err(LiveNode)),
        ("not Terminating in the fresh read", live(None, Some(timed())), &p, look(Readiness::Ready, None), 302, Err(FreshTarget)),
        // No timed deletion: judged as on a dead node, without its evidence.
        ("a live-node delete without the deletion we timed", live(None, None), &p, look(Readiness::Ready, ours), 302, Err(DeathEvidence)),
    ];
    for (case, action, p, look, now, want) in table {
        let look = match (case, look) {
            ("not Terminating in the fresh read", l) => {
                LastLook { pod: l.pod.map(|p| FreshPod { terminating: false, ..p }), ..l }
            }
            (_, l) => l,
        };
        assert_eq!(check(&action, p, &look, None, now), want, "{case}");
    }
}

#[test]
fn live_node_finalizer_removals_wait_for_the_delay_and_remove_after_by_our_clock() {
    use Invariant::*;
    let removal = |timed: Option<LiveDeletion>| {
        Action::RemoveFinalizers(RemoveFinalizers {
            pod: target(40),
            remove: vec!["example.com/hold".into()],
            current: vec!["example.com/hold".into()],
            death: None,
            live: timed,
        })
    };
    let look = live_look;
    let ours = Some((t(-30), 30));
    // delayAfterGrace 60s, removeAfter 2m: due 2m after the grace ended (2), at 122.
    let p = policy(|s| {
        s.live_node_stuck.delay_after_grace = "60s".into();
        s.finalizers.remove_after = "2m".into();
    });
    // removeAfter shorter than delayAfterGrace: the delay holds, due at 62.
    let short = policy(|s| {
        s.live_node_stuck.delay_after_grace = "60s".into();
        s.finalizers.remove_after = "10s".into();
    });
    #[rustfmt::skip]
    let table = [
        ("both passed", removal(Some(timed())), &p, look(Readiness::Ready, ours), 122, Ok(())),
        ("removeAfter not passed", removal(Some(timed())), &p, look(Readiness::Ready, ours), 121, Err(LiveNode)),
        ("the delay holds past a shorter removeAfter", removal(Some(timed())), &short, look(Readiness::Ready, ours), 61, Err(LiveNode)),
        ("the delay passed", removal(Some(timed())), &short, look(Readiness::Ready, ours), 62, Ok(())),
        ("re-deleted since", removal(Some(timed())), &p, look(Readiness::Ready, Some((t(50), 0))), 122, Err(LiveNode)),
        ("the node is not Ready", removal(Some(timed())), &p, look(Readiness::NotReady, ours), 122, Err(LiveNode)),
        ("no deletion timed", removal(None), &p, look(Readiness::Ready, ours), 122, Err(LiveNode)),
    ];
    for (case, action, p, look, now, want) in table {
        assert_eq!(check(&action, p, &look, None, now), want, "{case}");
    }
}

#[test]
fn same_second_needs_both() {
    let a = Some(t(10));
    assert!(same_second(a, Some(t(10))));
    assert!(same_second(Some(t(10) + SignedDuration::from_millis(900)), a));
    assert!(!same_second(a, Some(t(11))));
    assert!(!same_second(None, None));
    assert!(!same_second(a, None));
}

#[test]
fn no_write_on_a_node_in_maintenance_or_shutting_down() {
    use Invariant::*;
    let p = policy(|s| s.node_lifecycle.graceful_shutdown_grace = "30s".into());
    let ignoring = policy(|s| {
        s.node_lifecycle.maintenance = crate::crd::MaintenanceHandling::Ignore;
        s.node_lifecycle.graceful_shutdown_grace = "30s".into();
    });
    let with = |f: &dyn Fn(&mut crate::core::Lifecycle)| {
        let mut n = node(Readiness::Unknown, &[]);
        n.control.rare.update(|r| f(&mut r.lifecycle));
        LastLook {
            pod: Some(pod("pod-uid", true)),
            node: Some(n),
            lease_renewed: Some(t(-5)),
            policy: enforcing(),
        }
    };
    let carried = |seen: Option<i64>, mut action: Action| {
        match &mut action {
            Action::ForceDelete(fd) => fd.pod.shutdown_seen = seen.map(t),
            Action::Node(na) => na.node.shutdown_seen = seen.map(t),
            _ => {}
        }
        action
    };
    let fd = || force_delete(None, Some(watched()));
    let cordon = || node_action(NodeActionKind::Cordon, Some(watched()));
    let maintenance = |c: &'static str| with(&move |l| l.maintenance = Some(c));
    let planned = with(&|l| l.maintenance_planned = true);
    let shutting_down = || with(&|l| l.shutting_down = true);
    #[rustfmt::skip]
    type Row<'a> = (&'static str, Action, &'a ValidatedPolicy, LastLook<'a>, i64, Result<(), Invariant>);
    let table: Vec<Row<'_>> = vec![
        ("no lifecycle condition", fd(), &p, with(&|_| {}), 40, Ok(())),
        ("MaintenancePlanned alone holds nothing", fd(), &p, planned, 40, Ok(())),
        (
            "MaintenanceInProgress: no force delete",
            fd(),
            &p,
            maintenance("MaintenanceInProgress"),
            40,
            Err(NodeLifecycle),
        ),
        (
            "DrainInProgress: no cordon",
            cordon(),
            &p,
            maintenance("DrainInProgress"),
            40,
            Err(NodeLifecycle),
        ),
        ("Drained: no force delete", fd(), &p, maintenance("Drained"), 40, Err(NodeLifecycle)),
        (
            "maintenance ignored by the policy",
            fd(),
            &ignoring,
            maintenance("MaintenanceInProgress"),
            40,
            Ok(()),
        ),
        ("shutting down, no instant carried", fd(), &p, shutting_down(), 1000, Err(NodeLifecycle)),
        (
            "shutting down, grace not passed",
            carried(Some(20), fd()),
            &p,
            shutting_down(),
            49,
            Err(NodeLifecycle),
        ),
        ("shutting down, grace passed", carried(Some(20), fd()), &p, shutting_down(), 50, Ok(())),
        (
            "a node action, grace not passed",
            carried(Some(20), cordon()),
            &p,
            shutting_down(),
            49,
            Err(NodeLifecycle),
        ),
        (
            "a node action, grace passed",
            carried(Some(20), cordon()),
            &p,
            shutting_down(),
            50,
            Ok(()),
        ),
        (
            "the policy ignoring maintenance still waits for a shutdown",
            carried(Some(20), fd()),
            &ignoring,
            shutting_down(),
            49,
            Err(NodeLifecycle),
        ),
    ];
    for (case, action, p, look, now, want) in table {
        assert_eq!(check(&action, p, &look, None, now), want, "{case}");
    }
    // A Node gone from the fresh read has no conditions: the other invariants decide.
    let gone = LastLook {
        pod: Some(pod("pod-uid", true)),
        node: None,
        lease_renewed: None,
        policy: enforcing(),
    };
    assert_eq!(
        check(&force_delete(None, Some(crate::core::DeathEvidence::Deleted)), &p, &gone, None, 40),
        Ok(())
    );
}

#[test]
fn markings_need_the_opt_in_a_ready_pod_and_death_we_saw() {
    use Invariant::*;
    let p = policy(|s| s.ready_on_dead_node.mark_not_ready = true);
    let off = policy(|_| {});
    let mark = |death: Option<crate::core::DeathEvidence>| {
        Action::MarkNotReady(MarkNotReady { pod: target(40), lease_renewed: Some(t(-5)), death })
    };
    let ready = FreshPod { ready: true, stale: false, ..pod("pod-uid", false) };
    let look = |pod: Option<FreshPod<'static>>, node: Option<FreshNode>, lease: Option<i64>| {
        LastLook { pod, node, lease_renewed: lease.map(t), policy: enforcing() }
    };
    let dead = || Some(node(Readiness::Unknown, &[]));
    let dry = LastLook {
        policy: Some(FreshPolicy { mode: Mode::DryRun, paused: false, generation: Some(1) }),
        ..look(Some(ready), dead(), Some(-5))
    };
    let mut maintenance = node(Readiness::Unknown, &[]);
    maintenance.control.rare.update(|r| r.lifecycle.maintenance = Some("MaintenanceInProgress"));
    #[rustfmt::skip]
    let table = [
        ("a Ready pod on a node dead by what we watched", &p, mark(Some(watched())), look(Some(ready), dead(), Some(-5)), 40, Ok(())),
        ("markNotReady off", &off, mark(Some(watched())), look(Some(ready), dead(), Some(-5)), 40, Err(MarkOnlyTheDead)),
        ("the fresh pod is not Ready", &p, mark(Some(watched())), look(Some(FreshPod { ready: false, ..ready }), dead(), Some(-5)), 40, Err(MarkOnlyTheDead)),
        ("no fresh read of the pod", &p, mark(Some(watched())), look(None, dead(), Some(-5)), 40, Err(FreshTarget)),
        ("another pod of that name", &p, mark(Some(watched())), look(Some(FreshPod { uid: Some("new"), ..ready }), dead(), Some(-5)), 40, Err(FreshTarget)),
        ("on another node", &p, mark(Some(watched())), look(Some(FreshPod { node: "n2", ..ready }), dead(), Some(-5)), 40, Err(FreshTarget)),
        ("Terminating", &p, mark(Some(watched())), look(Some(FreshPod { terminating: true, ..ready }), dead(), Some(-5)), 40, Err(FreshTarget)),
        ("no evidence of death carried", &p, mark(None), look(Some(ready), dead(), Some(-5)), 40, Err(DeathEvidence)),
        ("a deleted Lease is no evidence", &p, mark(Some(watched())), look(Some(ready), dead(), None), 40, Err(DeathEvidence)),
        ("a renewal since the plan", &p, mark(Some(watched())), look(Some(ready), dead(), Some(3)), 40, Err(DeathEvidence)),
        ("leaseStaleFor not passed by our clock", &p, mark(Some(watched())), look(Some(ready), dead(), Some(-5)), 39, Err(DeathEvidence)),
        ("the node Ready in the fresh read", &p, mark(Some(watched())), look(Some(ready), Some(node(Readiness::Ready, &[])), Some(-5)), 40, Err(DeathEvidence)),
        ("the node in maintenance", &p, mark(Some(watched())), look(Some(ready), Some(maintenance), Some(-5)), 40, Err(NodeLifecycle)),
        ("the policy is in DryRun now", &p, mark(Some(watched())), dry, 40, Err(Enforcing)),
    ];
    for (case, p, action, look, now, want) in table {
        assert_eq!(check(&action, p, &look, None, now), want, "{case}");
    }
}
