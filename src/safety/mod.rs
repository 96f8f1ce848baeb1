//! The safety kernel: the one place where the invariants of a write are stated, and the last
//! check every mutation of a pod or a node passes right before it is sent.
//!
//! The rules decide; the kernel does not trust them. It is given the action, the fresh reads
//! of its last look (never a cache) and the raw evidence the operator saw (instants by its own
//! clock, a Lease's `renewTime`, an outage it watched), and it asks what must be *present* for
//! the write to be right, never whether anything changed: an absence compares equal to an
//! absence. A write that does not meet an invariant is refused. A refusal is a defect of the
//! rules: the writer then blocks the write, leaves an Event, logs at error level and counts
//! `kube_remediator_safety_refusals_total{invariant}`.
//!
//! The invariants, each positively:
//! 1. [`Invariant::Enforcing`]: the policy planned with is in Enforce, and a fresh read shows
//!    it still is, not paused, at the generation planned with. DryRun mutates nothing.
//! 2. [`Invariant::DeathEvidence`]: a node is dead only on evidence we saw: its Lease present
//!    in the fresh read with the very `renewTime` we watched stop changing, for
//!    `leaseStaleFor` by our clock, and its Ready condition not True for `notReadyFor`, both
//!    inside the evidence window; or its Node object seen deleted by someone else and still
//!    gone in the fresh read. A missing Lease is no evidence.
//! 3. [`Invariant::FreshTarget`]: the pod is the one planned (same UID, still Terminating for a
//!    force delete or a finalizer removal, on the same node), the node the one planned.
//! 4. [`Invariant::Fencing`]: a pod that needs fencing, and every Node deletion, has fencing
//!    evidence from outside the operator in the fresh read (the cloud provider's shutdown
//!    taint, an out-of-service taint that is not ours: neither our record nor its applied-by
//!    annotation names us, the Node deleted by someone else), or
//!    the policy's own acceptance (`assumeOffAfter` passed). Our own writes never count.
//! 5. [`Invariant::UndoOnlyOurs`]: an undo removes a cordon only while our field manager alone
//!    owns `spec.unschedulable`, and a taint only while it is the one our record names and its
//!    applied-by annotation (`node.kubernetes.io/out-of-service-applied-by`) names us.
//! 6. [`Invariant::RepairOnlyTheOutage`]: an eviction of a stale pod needs the outage we
//!    watched, the pod turned not Ready within it, its node Ready for `nodeReadyFor` since, and
//!    a fresh read of the pod still stale (every container, sidecar and gate satisfied).
//! 7. [`Invariant::LiveNode`]: an action on a pod of a live node needs that node Ready in the
//!    fresh read, the deletion we timed (the same `deletionTimestamp` and grace period in the
//!    fresh read of the pod), and the policy's wait passed by our clock since that deletion's
//!    grace period ended (from when we saw it): `forceDeleteAfter` for a force delete,
//!    `delayAfterGrace` and `finalizers.removeAfter` for a finalizer removal.
//! 8. [`Invariant::NodeLifecycle`]: every write on a node or its pods needs the fresh read of the
//!    node to show it not in maintenance (no MaintenanceInProgress, DrainInProgress or Drained
//!    True, unless the policy ignores maintenance), and not shutting down gracefully
//!    (GracefulNodeShutdownInProgress True) unless the action carries the instant we saw the
//!    shutdown begin, `gracefulShutdownGrace` ago by our clock.
//! 9. [`Invariant::FailedByShutdown`]: a delete of a pod left Failed by a graceful node
//!    shutdown needs the policy's `failedByShutdown` enabled, a fresh read of the same pod (UID,
//!    node), not Terminating, still Failed with a shutdown's reason, and our own sighting of it
//!    so at least `deleteAfter` ago.
//! 10. [`Invariant::MarkOnlyTheDead`]: marking a pod not Ready needs the policy's
//!     `readyOnDeadNode.markNotReady`, a fresh read of the same pod (UID, node), not
//!     Terminating, still Ready=True, and its node dead by the evidence we saw (as in 2). No
//!     fencing: the marking stops no container and releases nothing; it only stops traffic.
//!
//! A force delete is two requests: the pod's `DisruptionTarget` condition (and on a dead node
//! the phase `Failed`) through its status, then the DELETE. The kernel admits the action once,
//! on the last look, and both requests need the proof of it (`writer::Admitted`): the status
//! write is never sent to a pod the DELETE would not be allowed on, and it carries the
//! resourceVersion of the pod the kernel was shown, so it lands on that pod unchanged or not at
//! all.
//!
//! What the kernel cannot see, it does not pretend to: the storm guard, the zone guard and the
//! rate limits need the whole cluster and are spent by the plan; the admission policy in the
//! chart is the line after this one.

use jiff::Timestamp;

use crate::core::duration::add;
use crate::core::node::stale_for;
use crate::core::rules::stale_readiness::turned_during;
use crate::core::{
    Action, DeathEvidence, DeleteShutdownPod, Evict, ForceDelete, FreshNode, LastLook,
    LiveDeletion, MarkNotReady, NodeAction, NodeActionKind, PodTarget, Readiness, RemoveFinalizers,
    ValidatedPolicy,
};
use crate::crd::{APPLIED_BY_US, FIELD_MANAGER, Mode, OUT_OF_SERVICE_TAINT, SHUTDOWN_TAINT};

/// Which invariant a write failed: the metric label and the Event's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::EnumIter)]
pub enum Invariant {
    Enforcing,
    DeathEvidence,
    FreshTarget,
    Fencing,
    UndoOnlyOurs,
    RepairOnlyTheOutage,
    LiveNode,
    NodeLifecycle,
    FailedByShutdown,
    MarkOnlyTheDead,
}

impl Invariant {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A write the kernel refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub invariant: Invariant,
    pub why: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused by the safety kernel ({}): {}", self.invariant.as_str(), self.why)
    }
}

pub use crate::core::{UndoChanges, same_second};

/// Everything the kernel is shown about one write.
#[derive(Clone, Debug)]
pub struct Write<'a> {
    pub action: &'a Action,
    pub policy: &'a ValidatedPolicy,
    /// The generation of the policy the plan was made with.
    pub planned_generation: Option<i64>,
    /// The fresh reads of the last look.
    pub look: &'a LastLook<'a>,
    /// For an undo, what it is about to change.
    pub undo: Option<UndoChanges>,
    /// The operator's clock now.
    pub now: Timestamp,
}

fn refuse(invariant: Invariant, why: impl Into<String>) -> Result<(), Refusal> {
    Err(Refusal { invariant, why: why.into() })
}

/// Admits the write, or says which invariant it breaks.
pub fn admit(write: &Write<'_>) -> Result<(), Refusal> {
    enforcing(write)?;
    node_lifecycle(write)?;
    match write.action {
        Action::ForceDelete(fd) => force_delete(write, fd),
        Action::RemoveFinalizers(rf) => remove_finalizers(write, rf),
        Action::Evict(evict) => eviction(write, evict),
        Action::DeleteShutdownPod(delete) => shutdown_pod(write, delete),
        Action::MarkNotReady(mark) => mark_not_ready(write, mark),
        Action::Node(na) => node_action(write, na),
    }
}

fn enforcing(write: &Write<'_>) -> Result<(), Refusal> {
    if write.policy.mode != Mode::Enforce {
        return refuse(Invariant::Enforcing, "the policy planned with is not in Enforce");
    }
    match write.look.policy {
        Some(p) if p.mode == Mode::Enforce && !p.paused => {}
        Some(_) => return refuse(Invariant::Enforcing, "the policy is not enforcing now"),
        None => return refuse(Invariant::Enforcing, "no fresh read of the policy"),
    }
    if write.look.policy.map(|p| p.generation) != Some(write.planned_generation) {
        return refuse(Invariant::Enforcing, "the policy changed since the plan");
    }
    Ok(())
}

/// The fresh read of the node shows it neither in maintenance nor shutting down gracefully, or
/// the action carries the instant we saw its shutdown begin, the grace ago. A Node gone from
/// the fresh read has no conditions: the other invariants decide.
fn node_lifecycle(write: &Write<'_>) -> Result<(), Refusal> {
    let Some(node) = &write.look.node else { return Ok(()) };
    let (lifecycle, settings) = (&node.control.rare.lifecycle, write.policy.lifecycle);
    if let Some(condition) = lifecycle.maintenance.filter(|_| settings.respect_maintenance) {
        return refuse(
            Invariant::NodeLifecycle,
            format!("the node read fresh is in maintenance ({condition}=True)"),
        );
    }
    if !lifecycle.shutting_down {
        return Ok(());
    }
    match write.action.act().target().shutdown_seen() {
        Some(seen) if write.now >= add(seen, settings.shutdown_grace) => Ok(()),
        Some(_) => refuse(
            Invariant::NodeLifecycle,
            "the node read fresh is shutting down gracefully and gracefulShutdownGrace has not \
             passed since we saw it begin",
        ),
        None => refuse(
            Invariant::NodeLifecycle,
            "the node read fresh is shutting down gracefully and the plan carried no instant \
             when we saw it begin",
        ),
    }
}

/// The pod of the fresh read is the one planned: same UID, on its node, and (`terminating`)
/// Terminating.
fn same_pod(write: &Write<'_>, target: &PodTarget, terminating: bool) -> Result<(), Refusal> {
    let Some(pod) = write.look.pod else {
        return refuse(Invariant::FreshTarget, "no fresh read of the pod");
    };
    if pod.uid != Some(target.uid.as_str()) {
        return refuse(Invariant::FreshTarget, "the pod read fresh has another UID");
    }
    if pod.node != target.node {
        return refuse(Invariant::FreshTarget, "the pod read fresh is on another node");
    }
    if pod.terminating != terminating {
        let want = if terminating { "Terminating" } else { "not Terminating" };
        return refuse(Invariant::FreshTarget, format!("the pod read fresh is not {want}"));
    }
    Ok(())
}

/// The node is dead by the evidence we saw, and the fresh reads still show it.
fn dead(write: &Write<'_>, death: Option<&DeathEvidence>) -> Result<(), Refusal> {
    let (policy, look, now) = (write.policy, write.look, write.now);
    match death {
        None => refuse(Invariant::DeathEvidence, "no evidence of death was carried"),
        Some(DeathEvidence::Deleted) => match &look.node {
            None => Ok(()),
            Some(_) => refuse(Invariant::DeathEvidence, "a Node of that name exists again"),
        },
        Some(DeathEvidence::Watched {
            lease_renewed,
            lease_seen,
            not_ready_since,
            lease_duration_s,
            window_start,
        }) => {
            if look.lease_renewed != Some(*lease_renewed) {
                return refuse(
                    Invariant::DeathEvidence,
                    "the fresh read does not show the Lease renewal we watched stop (gone, \
                     or renewed since): no evidence of death",
                );
            }
            let stale_from = (*lease_seen).max(*window_start);
            let not_ready_from = (*not_ready_since).max(*window_start);
            if now < add(stale_from, stale_for(policy, *lease_duration_s)) {
                return refuse(
                    Invariant::DeathEvidence,
                    "leaseStaleFor (or the Lease's own duration, when longer) has not passed",
                );
            }
            if now < add(not_ready_from, policy.not_ready_for) {
                return refuse(Invariant::DeathEvidence, "notReadyFor has not passed");
            }
            match &look.node {
                Some(node) if node.observation.readiness != Readiness::Ready => Ok(()),
                Some(_) => refuse(Invariant::DeathEvidence, "the node is Ready"),
                None => refuse(Invariant::DeathEvidence, "the Node is gone from the fresh read"),
            }
        }
    }
}

/// Fencing evidence from outside the operator, in the fresh read (or the Node deleted by
/// someone else).
fn fenced_from_outside(write: &Write<'_>, death: Option<&DeathEvidence>) -> Option<&'static str> {
    let fencing = &write.policy.fencing;
    match &write.look.node {
        None if fencing.node_deleted && death == Some(&DeathEvidence::Deleted) => {
            Some("the Node deleted by someone else")
        }
        None => None,
        Some(node) => {
            let obs = &node.observation;
            if fencing.shutdown_taint && obs.has_taint_key(SHUTDOWN_TAINT) {
                return Some("the cloud provider's shutdown taint");
            }
            let oos = obs.has_taint(OUT_OF_SERVICE_TAINT, "NoExecute");
            (fencing.out_of_service_taint && oos && !our_taint(node))
                .then_some("an out-of-service taint someone else applied")
        }
    }
}

/// Whether the node's out-of-service taint may be ours (no evidence): our record names one, or
/// its applied-by annotation names us. A record of ours with no matching taint time still
/// counts as ours: never evidence for us.
fn our_taint(node: &FreshNode) -> bool {
    node.control.taint_may_be_ours()
}

fn force_delete(write: &Write<'_>, fd: &ForceDelete) -> Result<(), Refusal> {
    same_pod(write, &fd.pod, true)?;
    if let Some(live) = &fd.live {
        let wait = write.policy.live_node_stuck.and_then(|r| r.force_delete_after);
        let Some(wait) = wait else {
            return refuse(
                Invariant::LiveNode,
                "a force delete on a live node without the policy's liveNodeStuck.forceDeleteAfter",
            );
        };
        live_time(write, live, wait, "liveNodeStuck.forceDeleteAfter")?;
        return match &write.look.node {
            Some(node) if node.observation.readiness == Readiness::Ready => {
                if fd.fencing_required.is_some()
                    && !write.policy.live_node_stuck.is_some_and(|r| r.force_delete_unfenced)
                    && fenced_from_outside(write, None).is_none()
                {
                    return refuse(
                        Invariant::Fencing,
                        "a pod that needs fencing on a live node, without the policy's \
                         liveNodeStuck.forceDeleteUnfenced",
                    );
                }
                Ok(())
            }
            _ => refuse(Invariant::LiveNode, "the live node is not Ready in the fresh read"),
        };
    }
    dead(write, fd.death.as_ref())?;
    if fd.fencing_required.is_some() && fenced_from_outside(write, fd.death.as_ref()).is_none() {
        return refuse(
            Invariant::Fencing,
            "the pod needs fencing and the fresh read shows none from outside the operator",
        );
    }
    Ok(())
}

fn remove_finalizers(write: &Write<'_>, rf: &RemoveFinalizers) -> Result<(), Refusal> {
    same_pod(write, &rf.pod, true)?;
    if let Some(death) = &rf.death {
        return dead(write, Some(death));
    }
    let (Some(rule), Some(live)) = (write.policy.live_node_stuck, &rf.live) else {
        return refuse(
            Invariant::LiveNode,
            "a finalizer removal on a live node without liveNodeStuck or the deletion we timed",
        );
    };
    let wait = rule.delay.max(write.policy.finalizers.remove_after);
    live_time(write, live, wait, "liveNodeStuck.delayAfterGrace and finalizers.removeAfter")?;
    match &write.look.node {
        Some(node) if node.observation.readiness == Readiness::Ready => Ok(()),
        _ => refuse(Invariant::LiveNode, "the live node is not Ready in the fresh read"),
    }
}

/// Time on a live node: the fresh read shows the very deletion we timed (its deletionTimestamp
/// and grace period: a DELETE with a shorter grace since makes another), and `wait` has passed
/// by our clock since its grace period ended, counted from when we saw it.
fn live_time(
    write: &Write<'_>,
    live: &LiveDeletion,
    wait: jiff::SignedDuration,
    what: &str,
) -> Result<(), Refusal> {
    let fresh = write.look.pod.and_then(|p| p.deletion);
    if fresh != Some((live.deletion, live.grace_s)) {
        return refuse(
            Invariant::LiveNode,
            "the pod read fresh is not under the deletion we timed (its deletionTimestamp or \
             grace period changed)",
        );
    }
    if write.now < add(live.grace_ended(), wait) {
        return refuse(
            Invariant::LiveNode,
            format!("{what} has not passed by our clock since the pod's grace period ended"),
        );
    }
    Ok(())
}

fn eviction(write: &Write<'_>, evict: &Evict) -> Result<(), Refusal> {
    same_pod(write, &evict.pod, false)?;
    let Some(rule) = write.policy.stale_readiness.filter(|r| r.evict) else {
        return refuse(Invariant::RepairOnlyTheOutage, "the policy does not evict stale pods");
    };
    let outage = evict.outage;
    if !turned_during(evict.stale_seen, outage) {
        return refuse(
            Invariant::RepairOnlyTheOutage,
            "the pod did not turn not Ready during the outage we watched",
        );
    }
    if write.now < add(outage.to, rule.node_ready_for) {
        return refuse(Invariant::RepairOnlyTheOutage, "the node is not Ready for nodeReadyFor");
    }
    if !write.look.pod.is_some_and(|p| p.stale) {
        return refuse(
            Invariant::RepairOnlyTheOutage,
            "the pod read fresh is not stale (a container, sidecar or readiness gate is not \
             ready, or it is Ready)",
        );
    }
    match &write.look.node {
        Some(node) if node.observation.readiness == Readiness::Ready => Ok(()),
        _ => refuse(Invariant::LiveNode, "the node is not Ready in the fresh read"),
    }
}

fn shutdown_pod(write: &Write<'_>, delete: &DeleteShutdownPod) -> Result<(), Refusal> {
    let Some(delete_after) = write.policy.failed_by_shutdown else {
        return refuse(
            Invariant::FailedByShutdown,
            "the policy does not delete pods left Failed by a shutdown",
        );
    };
    same_pod(write, &delete.pod, false)?;
    if !write.look.pod.is_some_and(|p| p.failed_by_shutdown) {
        return refuse(
            Invariant::FailedByShutdown,
            "the pod read fresh is not Failed with a graceful node shutdown's reason",
        );
    }
    if write.now < add(delete.seen, delete_after) {
        return refuse(
            Invariant::FailedByShutdown,
            "we have not seen the pod Failed by a shutdown for deleteAfter",
        );
    }
    Ok(())
}

fn mark_not_ready(write: &Write<'_>, mark: &MarkNotReady) -> Result<(), Refusal> {
    if !write.policy.mark_not_ready_on_dead_node {
        return refuse(
            Invariant::MarkOnlyTheDead,
            "the policy does not mark pods not Ready (readyOnDeadNode.markNotReady)",
        );
    }
    same_pod(write, &mark.pod, false)?;
    if !write.look.pod.is_some_and(|p| p.ready) {
        return refuse(Invariant::MarkOnlyTheDead, "the pod read fresh is not Ready=True");
    }
    dead(write, mark.death.as_ref())
}

fn node_action(write: &Write<'_>, na: &NodeAction) -> Result<(), Refusal> {
    let Some(node) = &write.look.node else {
        return refuse(Invariant::FreshTarget, "no fresh read of the node");
    };
    if node.control.uid != na.node.uid {
        return refuse(Invariant::FreshTarget, "the node read fresh has another UID");
    }
    if na.kind == NodeActionKind::Undo {
        return undo(write, node);
    }
    dead(write, na.death.as_ref())?;
    let assumed_off = |write: &Write<'_>| {
        write
            .policy
            .node_actions
            .assume_off_after
            .is_some_and(|off| write.now >= add(na.epoch, off))
    };
    match na.kind {
        NodeActionKind::OutOfServiceTaint { assumed_off: true }
        | NodeActionKind::DeleteNode { assumed_off: true }
            if !assumed_off(write) =>
        {
            refuse(Invariant::Fencing, "assumeOffAfter has not passed (or is not set)")
        }
        NodeActionKind::OutOfServiceTaint { assumed_off: false }
            if !(write.policy.fencing.shutdown_taint
                && node.observation.has_taint_key(SHUTDOWN_TAINT)) =>
        {
            refuse(Invariant::Fencing, "no shutdown taint on the node in the fresh read")
        }
        NodeActionKind::DeleteNode { assumed_off: false }
            if fenced_from_outside(write, na.death.as_ref()).is_none() =>
        {
            refuse(
                Invariant::Fencing,
                "deleting a Node releases all its pods: no fencing from outside the operator",
            )
        }
        _ => Ok(()),
    }
}

fn undo(write: &Write<'_>, node: &FreshNode) -> Result<(), Refusal> {
    let changes = write.undo.unwrap_or_default();
    if node.observation.readiness != Readiness::Ready {
        return refuse(Invariant::UndoOnlyOurs, "the node is not Ready: our changes stay");
    }
    let record = &node.control.rare.record;
    let cordon_ours = record.cordoned.is_some()
        && !node.cordon_managers.is_empty()
        && node.cordon_managers.iter().all(|m| m == FIELD_MANAGER);
    if changes.uncordon && !cordon_ours {
        return refuse(
            Invariant::UndoOnlyOurs,
            "the cordon is not ours alone (another manager owns spec.unschedulable)",
        );
    }
    if changes.remove_taint && !same_second(record.tainted, node.out_of_service_added) {
        return refuse(
            Invariant::UndoOnlyOurs,
            "the out-of-service taint is not the one our record names",
        );
    }
    if changes.remove_taint
        && node.control.rare.out_of_service_applied_by.as_deref() != Some(APPLIED_BY_US)
    {
        return refuse(
            Invariant::UndoOnlyOurs,
            "the out-of-service taint's applied-by annotation does not name us",
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
