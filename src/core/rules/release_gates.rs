//! The release gates every rule that frees a Terminating pod shares: the exclusions, the owner
//! kind, the selectors, pods already acted on, the node dead, the fencing the pod needs and the
//! delay after its grace period. The rules only say whether they apply and with which delay.
//!
//! Its own module so that no rule can skip a gate and the rule modules stay a few lines each.

use jiff::{SignedDuration, Timestamp};

use crate::core::duration::{add, format_duration};
use crate::core::node::{NodeState, NodeSummary};
use crate::core::observed::{Observed, PodView};
use crate::core::policy::ValidatedPolicy;
use crate::core::verdict::NotEligible;
use crate::crd::{FencingRequirement, OwnerKind};

/// What the rules that apply to a pod ask of its release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// The shortest `delayAfterGrace` of the rules that apply.
    pub delay: SignedDuration,
    /// What the rules add to the reason (e.g. the rollout the pod blocks), each starting "; ".
    pub note: String,
}

/// The outcome of the release gates for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Not eligible, and the instant at which the pod would pass its per-pod gates by time alone.
    Blocked(NotEligible, Option<Timestamp>),
    /// Force delete it.
    Ready {
        threshold: Timestamp,
        reason: String,
        fencing_required: Option<FencingRequirement>,
        /// On a live node (liveNodeStuck), not a dead one.
        live_node: bool,
    },
    /// Remove the allowlisted finalizers `remove` that hold it (`current`: all of them).
    RemoveFinalizers {
        threshold: Timestamp,
        reason: String,
        remove: Vec<String>,
        current: Vec<String>,
    },
}

/// The release gates for a Terminating pod (deleted at `deleted_at`) on an in-scope `node`, most
/// static first.
pub fn gate(
    pod: &PodView,
    node: &NodeSummary,
    observed: &Observed,
    policy: &ValidatedPolicy,
    release: &Release,
    deleted_at: Timestamp,
    now: Timestamp,
) -> Gate {
    let kind = match selected_kind(pod, node, observed, policy) {
        Ok(kind) => kind,
        Err(reason) => return Gate::Blocked(reason, None),
    };
    let due = add(deleted_at, release.delay);
    let requirement = fencing_requirement(pod, kind, policy);
    let fenced = requirement.is_none() || node.fenced_by.is_some();
    if node.state != NodeState::Dead {
        // When the node dies, the pod can go at the later of the two instants (if fenced).
        let ready_at = node.dead_at.get().filter(|_| fenced).map(|t| t.max(due));
        return Gate::Blocked(
            NotEligible::NodeNotDead { until: node.dead_at.get(), why: node.why.to_string() },
            ready_at,
        );
    }
    if let (Some(because), None) = (requirement, node.fenced_by) {
        return Gate::Blocked(NotEligible::NeedsFencing { because }, None);
    }
    if now < due {
        return Gate::Blocked(NotEligible::WithinDelay { until: due }, Some(due));
    }
    let threshold = node.dead_at.get().map_or(due, |t| t.max(due));
    let reason = reason(pod, node, requirement, release, deleted_at, due);
    // A finalizer keeps the pod whatever the delete: release it only by removing allowlisted
    // finalizers (the force delete comes next, once none is left). A Job's own tracking
    // finalizer holds nothing: the Job controller removes it once the pod is Failed, which the
    // force delete's status write makes it.
    if !released_by_owner(&pod.finalizers, kind) {
        return finalizer_gate(&pod.finalizers, policy, threshold, now, || reason);
    }
    Gate::Ready { threshold, reason, fencing_required: requirement, live_node: false }
}

/// The finalizer the Job controller keeps on its pods until it has counted them: it removes it
/// from a pod that is Failed.
pub const JOB_TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";

/// Whether the pod's finalizers let a force delete remove it: none, or only a Job's tracking
/// finalizer on a Job's pod (its controller removes it once the pod is Failed).
pub fn released_by_owner(finalizers: &[String], kind: OwnerKind) -> bool {
    finalizers.iter().all(|f| kind == OwnerKind::Job && f == JOB_TRACKING_FINALIZER)
}

/// The gates that time cannot change: exclusions, owner kind, selectors, acted pods. `Ok` is the
/// pod's owner kind.
pub fn selected_kind(
    pod: &PodView,
    node: &NodeSummary,
    observed: &Observed,
    policy: &ValidatedPolicy,
) -> Result<OwnerKind, NotEligible> {
    if pod.excluded {
        return Err(NotEligible::PodExcluded);
    }
    if node.excluded {
        return Err(NotEligible::NodeExcluded);
    }
    let kind = match owner_class(pod) {
        OwnerClass::Mirror => return Err(NotEligible::MirrorPod),
        OwnerClass::DaemonSet => return Err(NotEligible::DaemonSetPod),
        OwnerClass::Other(kind) => {
            return Err(NotEligible::OwnerKindNotSelected { kind: kind.to_string() });
        }
        OwnerClass::Selectable(kind) if !policy.owner_kinds.contains(&kind) => {
            return Err(NotEligible::OwnerKindNotSelected { kind: kind.as_str().to_string() });
        }
        OwnerClass::Selectable(kind) => kind,
    };
    if !policy.namespace_selector.matches(&pod.namespace_labels) {
        return Err(NotEligible::NamespaceNotSelected);
    }
    if !policy.pod_selector.matches(&pod.labels) {
        return Err(NotEligible::PodNotSelected);
    }
    if observed.acted_pods.contains(pod.uid.as_str()) {
        return Err(NotEligible::AlreadyActed);
    }
    Ok(kind)
}

/// Why a pod is released, for Events, logs and status.
fn reason(
    pod: &PodView,
    node: &NodeSummary,
    requirement: Option<FencingRequirement>,
    release: &Release,
    deleted_at: Timestamp,
    due: Timestamp,
) -> String {
    let grace = pod
        .deletion_grace_seconds
        .map(|s| format!(", grace {}", format_duration(SignedDuration::from_secs(s))));
    let fencing = match (requirement, node.fenced_by) {
        (Some(r), Some(e)) => {
            format!("; fencing required ({}) and present: {}", r.as_str(), e.describe())
        }
        (None, Some(e)) => format!("; fenced: {}", e.describe()),
        (_, None) => "; no fencing required".to_string(),
    };
    format!(
        "Terminating since {deleted_at}{} + delayAfterGrace {} passed at {due}; node {} {}{fencing}{}",
        grace.unwrap_or_default(),
        format_duration(release.delay),
        node.name,
        node.why,
        release.note,
    )
}

/// How a pod's controlling owner relates to `ownerKinds`.
enum OwnerClass<'a> {
    Selectable(OwnerKind),
    DaemonSet,
    Mirror,
    Other(&'a str),
}

fn owner_class(pod: &PodView) -> OwnerClass<'_> {
    if pod.is_mirror {
        return OwnerClass::Mirror;
    }
    match pod.owner.as_ref().map(|o| &*o.kind) {
        None => OwnerClass::Selectable(OwnerKind::Bare),
        Some("ReplicaSet") => OwnerClass::Selectable(OwnerKind::ReplicaSet),
        Some("StatefulSet") => OwnerClass::Selectable(OwnerKind::StatefulSet),
        Some("Job") => OwnerClass::Selectable(OwnerKind::Job),
        Some("DaemonSet") => OwnerClass::DaemonSet,
        // Mirror pods are owned by their Node.
        Some("Node") => OwnerClass::Mirror,
        Some(other) => OwnerClass::Other(other),
    }
}

/// Which fencing requirement applies to a pod, if any.
pub fn fencing_requirement(
    pod: &PodView,
    kind: OwnerKind,
    policy: &ValidatedPolicy,
) -> Option<FencingRequirement> {
    let needs = policy.fencing_needs;
    if needs.all {
        Some(FencingRequirement::All)
    } else if needs.stateful_set && kind == OwnerKind::StatefulSet {
        Some(FencingRequirement::StatefulSet)
    } else if needs.read_write_once && pod.has_rwo_volume {
        Some(FencingRequirement::ReadWriteOnce)
    } else {
        None
    }
}
/// A pod held by the finalizers `names`, releasable from `due`: the allowlisted ones are
/// removed when no other one holds it; otherwise it is reported as held.
pub fn finalizer_gate(
    names: &[String],
    policy: &ValidatedPolicy,
    due: Timestamp,
    now: Timestamp,
    why: impl FnOnce() -> String,
) -> Gate {
    let (removable, others): (Vec<String>, Vec<String>) =
        names.iter().cloned().partition(|f| policy.finalizers.removable.contains(f));
    if removable.is_empty() || !others.is_empty() {
        let held = if others.is_empty() { removable } else { others };
        return Gate::Blocked(NotEligible::HeldByFinalizers { names: held }, None);
    }
    if now < due {
        return Gate::Blocked(NotEligible::HeldByFinalizers { names: removable }, Some(due));
    }
    Gate::RemoveFinalizers {
        threshold: due,
        reason: format!("{}; removable (finalizers.removable)", why()),
        remove: removable,
        current: names.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizers_a_force_delete_gets_past() {
        let job = JOB_TRACKING_FINALIZER.to_string();
        let other = "example.com/keep".to_string();
        let table = [
            ("none", vec![], OwnerKind::ReplicaSet, true),
            ("a Job's pod, its tracking finalizer", vec![job.clone()], OwnerKind::Job, true),
            (
                "a Job's pod, another one too",
                vec![job.clone(), other.clone()],
                OwnerKind::Job,
                false,
            ),
            (
                "the tracking finalizer on a pod no Job owns",
                vec![job.clone()],
                OwnerKind::ReplicaSet,
                false,
            ),
            ("another one", vec![other], OwnerKind::StatefulSet, false),
        ];
        for (case, finalizers, kind, want) in table {
            assert_eq!(released_by_owner(&finalizers, kind), want, "{case}");
        }
    }
}
