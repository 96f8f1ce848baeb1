//! Decide only what changed: which pod changes no decision can depend on yet. Every rolling
//! update and scale-down makes pods that start Terminating on a Ready node, and their kubelet
//! finishes most of them within their grace period. Until that period ends no rule acts on such
//! a pod (every rule acts on a Terminating pod only past its grace period on a live node, or on
//! a node that is not Ready), no count or report includes it, and no blocked rollout lists it
//! unless another pod of its workload blocks the rollout already. The watch index asks for no
//! decision about such a pod until then, and none at all if it is gone by then
//! ([`crate::index::state::Change::At`]).

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use super::duration::add;
use super::observed::{PodView, ReplicaSetView};
use super::rollouts::blocking_from;

/// How long a pod's final delete may take to remove it ([`is_final_delete`]): the API server
/// removes it in the same request, and its watch event follows within milliseconds.
pub const FINAL_DELETE_SETTLE: SignedDuration = SignedDuration::from_secs(1);

/// Whether `pod` shows its final delete: its grace period cut to 0 and no finalizer. A kubelet
/// sends it once the pod's containers have stopped (so does `kubectl delete --force`); the API
/// server then writes the pod once more, with `deletionGracePeriodSeconds: 0`, and removes it in
/// the same request, so watchers see that update and, right after, the removal. Read as the
/// end of its grace period, the update would ask for a decision about a pod about to be gone
/// (each pod a kubelet finishes would ask for two); it asks for one only if the pod is still
/// there [`FINAL_DELETE_SETTLE`] later. A finalizer keeps the pod: then it is past its grace
/// period like any other.
fn is_final_delete(pod: &PodView) -> bool {
    pod.deletion_grace_seconds == Some(0) && pod.finalizers.is_empty()
}

/// Until when no decision, report or count can depend on `pod`, at `now`: the end of its
/// grace period by the API server's deletionTimestamp or by our own sighting of it Terminating,
/// whichever comes first, or [`FINAL_DELETE_SETTLE`] from `now` at its final delete. `None`
/// when something may depend on it now: it is not Terminating, is also kept for another reason
/// (left Ready=False, failed by a shutdown), its node is not Ready (`node_ready`), its grace
/// period has ended, or one of `pods` of the same workload holds a rollout already.
pub fn quiet_until<'a>(
    pod: &PodView,
    node_ready: impl Fn(&str) -> bool,
    pods: impl IntoIterator<Item = &'a PodView>,
    replica_sets: &HashMap<String, ReplicaSetView>,
    now: Timestamp,
) -> Option<Timestamp> {
    let deleted_at = pod.deletion_timestamp.get()?;
    if pod.stale_ready_since.is_some() || pod.shutdown_reason.is_some() {
        return None;
    }
    if !node_ready(pod.node_name.as_deref()?) {
        return None;
    }
    let until = if is_final_delete(pod) {
        add(now, FINAL_DELETE_SETTLE)
    } else {
        deleted_at.min(pod.live_deletion()?.grace_ended())
    };
    if until <= now {
        return None;
    }
    if let Some(workload) = workload_of(pod, replica_sets) {
        let holds_now = |other: &PodView| {
            let ready = other.node_name.as_deref().is_some_and(&node_ready);
            blocking_from(other, ready).is_some_and(|t| t <= now)
        };
        let sibling_holds = pods.into_iter().any(|other| {
            other.uid != pod.uid
                && workload_of(other, replica_sets) == Some(workload)
                && holds_now(other)
        });
        if sibling_holds {
            return None;
        }
    }
    Some(until)
}

/// The UID of the Deployment or StatefulSet `pod` belongs to, as far as `replica_sets` know (a
/// ReplicaSet's own UID when its Deployment is not known). Wider than what a blocked rollout
/// counts (only scaled-down ReplicaSets of known Deployments): a ReplicaSet not scaled down or
/// not seen yet may be by the time the pod's grace ends.
fn workload_of<'a>(
    pod: &'a PodView,
    replica_sets: &'a HashMap<String, ReplicaSetView>,
) -> Option<&'a str> {
    let owner = pod.owner.as_ref()?;
    match &*owner.kind {
        "StatefulSet" => Some(&*owner.uid),
        "ReplicaSet" => Some(
            replica_sets
                .get(&*owner.uid)
                .and_then(|rs| rs.deployment_uid.as_deref())
                .unwrap_or(&*owner.uid),
        ),
        _ => None,
    }
}
