//! The last look in the core's terms: what fresh reads (never from a cache) of a pod, its node,
//! the node's Lease and the policy say right before a request; and what an undo may change.

use jiff::Timestamp;

use super::PodTarget;
use super::skip::{PolicySkip, Skip};
use crate::core::duration::add;
use crate::core::observed::{NodeControl, NodeObservation};
use crate::core::policy::NodeLifecycle;
use crate::crd::{APPLIED_BY_US, FIELD_MANAGER, Mode};

/// What a fresh read of a pod says, just before it is force-deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshPod<'a> {
    pub uid: Option<&'a str>,
    pub terminating: bool,
    /// Its `deletionTimestamp` and `deletionGracePeriodSeconds` (0 when unset), if Terminating.
    pub deletion: Option<(Timestamp, i64)>,
    /// `spec.nodeName` (empty when unset).
    pub node: &'a str,
    /// Annotated `remediator.io/exclude: "true"`.
    pub excluded: bool,
    /// Left Ready=False with every container, init container, sidecar and readiness gate
    /// satisfied, as the watch would judge it now.
    pub stale: bool,
    /// Failed with a graceful node shutdown's `status.reason`, as the watch would judge it now.
    pub failed_by_shutdown: bool,
    /// Its `Ready` condition is True.
    pub ready: bool,
}

/// What a fresh read of the pod's node says (`None` in [`LastLook::node`]: the Node is gone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreshNode {
    pub observation: NodeObservation,
    pub excluded: bool,
    pub control: NodeControl,
    /// The field managers that own `spec.unschedulable` (its managedFields): a cordon is ours
    /// to undo only while ours alone.
    pub cordon_managers: Vec<String>,
    /// The out-of-service taint's `timeAdded`, if the node has one with our value and effect:
    /// it is ours to undo only while it is the one our record names.
    pub out_of_service_added: Option<Timestamp>,
}

/// What an undo is about to change on the node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UndoChanges {
    /// Set `spec.unschedulable` to false.
    pub uncordon: bool,
    /// Remove the out-of-service taint.
    pub remove_taint: bool,
}

/// What an undo may change on the node as freshly read: our cordon while our field manager
/// alone owns `spec.unschedulable` (an admin who uncordoned and cordoned again owns it now),
/// our taint while it is the one our record names (same `timeAdded`) and its applied-by
/// annotation names us (`node.kubernetes.io/out-of-service-applied-by: kube-remediator`). The
/// rest was changed by someone else since, and is theirs.
pub fn undo_changes(node: &FreshNode) -> UndoChanges {
    let record = &node.control.rare.record;
    let managers = &node.cordon_managers;
    UndoChanges {
        uncordon: record.cordoned.is_some()
            && node.observation.unschedulable
            && !managers.is_empty()
            && managers.iter().all(|m| m == FIELD_MANAGER),
        remove_taint: record.tainted.is_some()
            && same_second(record.tainted, node.out_of_service_added)
            && node.control.rare.out_of_service_applied_by.as_deref() == Some(APPLIED_BY_US),
    }
}

/// Two instants equal to the second (a taint's `timeAdded` has whole seconds), both present.
pub fn same_second(a: Option<Timestamp>, b: Option<Timestamp>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.duration_since(b).abs() < jiff::SignedDuration::from_secs(1),
        _ => false,
    }
}

/// What a fresh read of the policy says (`None` in [`LastLook::policy`]: it was deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshPolicy {
    pub mode: Mode,
    pub paused: bool,
    pub generation: Option<i64>,
}

/// Fresh reads (never from a cache) of everything a force delete stands on, taken right before
/// the request: the pod (`None`: gone), its node, the node's Lease `renewTime`, the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastLook<'a> {
    pub pod: Option<FreshPod<'a>>,
    pub node: Option<FreshNode>,
    pub lease_renewed: Option<Timestamp>,
    pub policy: Option<FreshPolicy>,
}

/// The policy, read fresh, must still be in Enforce, not paused, and unchanged since the plan.
/// `verb` says what did not happen ("nothing deleted").
pub fn policy_still_enforces(
    policy: Option<FreshPolicy>,
    planned_generation: Option<i64>,
    verb: &'static str,
) -> Result<(), PolicySkip> {
    let Some(policy) = policy else { return Err(PolicySkip::Deleted) };
    if policy.mode != Mode::Enforce {
        return Err(PolicySkip::NotEnforcing { mode: policy.mode, verb });
    }
    if policy.paused {
        return Err(PolicySkip::Paused { verb });
    }
    if policy.generation != planned_generation {
        return Err(PolicySkip::Changed);
    }
    Ok(())
}

/// The node of the last look neither in maintenance (unless the policy ignores it) nor in a
/// graceful shutdown whose grace has not passed since `shutdown_seen` (the instant the plan saw
/// it begin, by our clock): a node that entered either since the plan is left alone.
pub fn lifecycle_still_allows(
    look: &LastLook<'_>,
    shutdown_seen: Option<Timestamp>,
    settings: NodeLifecycle,
    now: Timestamp,
) -> Result<(), Skip> {
    let Some(node) = &look.node else { return Ok(()) };
    let lifecycle = &node.control.rare.lifecycle;
    if let Some(condition) = lifecycle.maintenance.filter(|_| settings.respect_maintenance) {
        return Err(Skip::NodeInMaintenance(condition));
    }
    let grace_passed = shutdown_seen.is_some_and(|seen| now >= add(seen, settings.shutdown_grace));
    if lifecycle.shutting_down && !grace_passed {
        return Err(Skip::NodeShuttingDown);
    }
    Ok(())
}

/// The pod of the last look, if it is the one planned (`Err`: gone, or replaced by a pod of the
/// same name).
pub fn same_pod<'a>(look: &LastLook<'a>, target: &PodTarget) -> Result<FreshPod<'a>, Skip> {
    let Some(pod) = look.pod else { return Err(Skip::PodGone) };
    if pod.uid != Some(target.uid.as_str()) {
        return Err(Skip::PodReplaced);
    }
    Ok(pod)
}
