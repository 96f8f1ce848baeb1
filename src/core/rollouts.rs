//! Which Recreate Deployments and StatefulSets are blocked, and by which pods.
//!
//! A Recreate Deployment creates its new ReplicaSet only once no pod of its old ReplicaSets is
//! left running, Terminating ones included; a StatefulSet cannot recreate `web-0` while the old
//! `web-0` is Terminating, and one with `updateStrategy.type: Recreate` (Kubernetes 1.37, alpha
//! gate `StatefulSetRecreateStrategy`) deletes every old pod and creates none of the new
//! revision until all of them are gone, so one pod Terminating on a dead node holds the whole
//! set. This module names the workloads in that state and the pods holding
//! them, with the reason each pod is still there. Pure: `now` and node health are inputs.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;

use jiff::{SignedDuration, Timestamp};

use super::duration::add;
use super::observed::PodView;

/// How long past its deletionTimestamp a Ready node's kubelet gets to finish a pod before the pod
/// counts as stuck there and blocking: a live kubelet finishes within seconds of the grace
/// period (a pod deleted with grace 0 is past it at once, and is not stuck).
pub const LIVE_FINISH_GRACE: SignedDuration = SignedDuration::from_secs(30);
pub use super::observed::{ReplicaSetView, WorkloadKind, WorkloadRef, WorkloadView};

/// Why a blocking pod is still there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr)]
pub enum BlockCause {
    /// Still within its termination grace period: nothing is wrong yet.
    InGrace,
    /// Past its grace on a node that is not Ready (or is gone): the kubelet cannot confirm.
    NodeUnhealthy,
    /// Past its grace on a Ready node: the kubelet is alive but does not finish (finalizers,
    /// volumes, cgroups).
    LiveNodeStuck,
}

impl BlockCause {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn describe(self) -> &'static str {
        match self {
            BlockCause::InGrace => "still within its termination grace period",
            BlockCause::NodeUnhealthy => "its node is not Ready, so no kubelet will confirm it",
            BlockCause::LiveNodeStuck => "its node is Ready but the kubelet does not finish it",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockingPod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub cause: BlockCause,
}

impl fmt::Display for BlockingPod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}: {}", self.name, self.node, self.cause.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedRollout {
    pub workload: WorkloadRef,
    /// Its strategy is Recreate: no new pod at all until every old one is gone (a StatefulSet
    /// with another strategy waits only for the ordinal of each Terminating pod).
    pub recreate: bool,
    /// Every Terminating pod holding it, by name.
    pub pods: Vec<BlockingPod>,
}

/// The analysis at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RolloutAnalysis {
    /// Blocked workloads, by kind, namespace and name.
    pub blocked: Vec<BlockedRollout>,
    /// The next instant a Terminating pod's grace period ends (the analysis can change then).
    pub next_change: Option<Timestamp>,
}

/// Finds the blocked workloads among `workloads`, given the Terminating `pods`, the
/// ReplicaSets by UID and each node's readiness (`Some(true)` Ready, `Some(false)` not Ready,
/// `None` unknown or deleted).
///
/// - A Recreate Deployment is blocked while it wants replicas, not all of them run the current
///   template, and a pod of one of its scaled-down (replicas 0) ReplicaSets is Terminating past
///   its grace period.
/// - A StatefulSet is blocked while one of its pods is Terminating past its grace period (its
///   ordinal cannot be recreated; with the Recreate strategy no pod of the new revision can).
///
/// A blocked workload lists all its Terminating old pods, including those still in grace.
pub fn blocked_rollouts(
    workloads: &[WorkloadView],
    replica_sets: &HashMap<String, ReplicaSetView>,
    pods: &[impl Borrow<PodView>],
    node_ready: impl Fn(&str) -> Option<bool>,
    now: Timestamp,
) -> RolloutAnalysis {
    let by_workload = old_pods_by_workload(replica_sets, pods);
    let mut analysis = RolloutAnalysis::default();
    for w in workloads {
        let Some(old_pods) = by_workload.get(w.uid.as_str()) else { continue };
        let applies = match w.kind {
            WorkloadKind::Deployment => {
                w.recreate && w.replicas > 0 && w.updated_replicas < w.replicas
            }
            WorkloadKind::StatefulSet => true,
        };
        if !applies {
            continue;
        }
        let blocking_from = |p: &PodView| {
            blocking_from(p, node_ready(p.node_name.as_deref().unwrap_or_default()) == Some(true))
        };
        let past_grace = |p: &PodView| blocking_from(p).is_some_and(|t| t <= now);
        for p in old_pods.iter() {
            if let Some(t) = blocking_from(p).filter(|t| *t > now) {
                analysis.next_change = Some(analysis.next_change.map_or(t, |n| n.min(t)));
            }
        }
        if !old_pods.iter().any(|p| past_grace(p)) {
            continue;
        }
        let mut blocking: Vec<BlockingPod> = old_pods
            .iter()
            .map(|p| {
                let node = p.node_name.as_deref().unwrap_or_default().to_string();
                let cause = if !past_grace(p) {
                    BlockCause::InGrace
                } else if node_ready(&node) == Some(true) {
                    BlockCause::LiveNodeStuck
                } else {
                    BlockCause::NodeUnhealthy
                };
                BlockingPod {
                    namespace: p.namespace.to_string(),
                    name: p.name.clone(),
                    uid: p.uid.to_string(),
                    node,
                    cause,
                }
            })
            .collect();
        blocking.sort_by(|a, b| a.name.cmp(&b.name));
        analysis.blocked.push(BlockedRollout {
            workload: WorkloadRef {
                kind: w.kind,
                namespace: w.namespace.clone(),
                name: w.name.clone(),
                uid: w.uid.clone(),
            },
            recreate: w.recreate,
            pods: blocking,
        });
    }
    analysis.blocked.sort_by(|a, b| a.workload.cmp(&b.workload));
    analysis
}

/// The scheduled Terminating pods by the UID of the workload whose rollout they may hold: a
/// StatefulSet's own pods, and a Deployment's pods of scaled-down (replicas 0) ReplicaSets.
fn old_pods_by_workload<'a>(
    replica_sets: &'a HashMap<String, ReplicaSetView>,
    pods: &'a [impl Borrow<PodView>],
) -> HashMap<&'a str, Vec<&'a PodView>> {
    let mut by_workload: HashMap<&str, Vec<&PodView>> = HashMap::new();
    // Only Terminating pods block; the state also keeps pods left Ready=False after a node blip.
    for pod in pods.iter().map(Borrow::borrow).filter(|p| p.deletion_timestamp.is_some()) {
        // A pod never scheduled is deleted at once by the API server: it blocks nothing.
        if pod.node_name.as_deref().is_none_or(str::is_empty) {
            continue;
        }
        let Some(owner) = &pod.owner else { continue };
        let workload_uid = match &*owner.kind {
            "StatefulSet" => Some(&*owner.uid),
            "ReplicaSet" => replica_sets
                .get(&*owner.uid)
                .filter(|rs| rs.replicas == 0)
                .and_then(|rs| rs.deployment_uid.as_deref()),
            _ => None,
        };
        if let Some(uid) = workload_uid {
            by_workload.entry(uid).or_default().push(pod);
        }
    }
    by_workload
}

/// From when `pod`, Terminating, holds a rollout: its deletionTimestamp, and on a Ready node
/// [`LIVE_FINISH_GRACE`] later (the kubelet gets that long past the grace period to finish).
pub fn blocking_from(pod: &PodView, node_ready: bool) -> Option<Timestamp> {
    let margin = if node_ready { LIVE_FINISH_GRACE } else { SignedDuration::ZERO };
    pod.deletion_timestamp.get().map(|t| add(t, margin))
}

#[cfg(test)]
mod tests {
    use crate::core::stamp::Stamp;
    use std::sync::Arc;

    use super::*;
    use crate::core::OwnerRef;

    fn t(s: u64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s as i64).expect("timestamp")
    }

    fn pod(name: &str, owner_kind: &str, owner_uid: &str, node: &str, deleted: u64) -> PodView {
        PodView {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}").into(),
            node_name: Some(node.into()),
            labels: Default::default(),
            namespace_labels: Arc::default(),
            owner: Some(OwnerRef {
                kind: owner_kind.into(),
                name: "x".into(),
                uid: owner_uid.into(),
            }),
            deletion_timestamp: Stamp::from(t(deleted)),
            deletion_grace_seconds: Some(30),
            is_mirror: false,
            has_rwo_volume: false,
            excluded: false,
            phase: Some("Running".into()),
            blocks_rollout: None,
            finalizers: vec![],
            running_containers: Box::default(),
            stale_ready_since: Stamp::NONE,
            stale_seen: Stamp::NONE,
            shutdown_reason: None,
            shutdown_seen: Stamp::NONE,
            ready_since: Stamp::NONE,
            terminating_seen: Stamp::NONE,
        }
    }

    fn deployment(recreate: bool, replicas: i32, updated: i32) -> WorkloadView {
        WorkloadView {
            kind: WorkloadKind::Deployment,
            namespace: "ns".into(),
            name: "legacy".into(),
            uid: "d1".into(),
            recreate,
            replicas,
            updated_replicas: updated,
        }
    }

    fn sts_recreate() -> WorkloadView {
        WorkloadView { recreate: true, ..sts() }
    }

    fn sts() -> WorkloadView {
        WorkloadView {
            kind: WorkloadKind::StatefulSet,
            namespace: "ns".into(),
            name: "web".into(),
            uid: "s1".into(),
            recreate: false,
            replicas: 1,
            updated_replicas: 0,
        }
    }

    fn replica_sets() -> HashMap<String, ReplicaSetView> {
        [("old", 0), ("new", 1)]
            .into_iter()
            .map(|(uid, replicas)| {
                let rs =
                    ReplicaSetView { uid: uid.into(), deployment_uid: Some("d1".into()), replicas };
                (uid.to_string(), rs)
            })
            .collect()
    }

    fn ready(node: &str) -> Option<bool> {
        match node {
            "live" => Some(true),
            "dead" => Some(false),
            _ => None,
        }
    }

    #[test]
    fn blocked_rollouts_table() {
        let now = t(100);
        struct Row {
            case: &'static str,
            workload: WorkloadView,
            pods: Vec<PodView>,
            /// The causes of its blocking pods (empty: not blocked).
            causes: Vec<BlockCause>,
            /// When the analysis changes by time alone.
            next: Option<Timestamp>,
        }
        let table = [
            Row {
                case: "Recreate, old pod past grace on a dead node",
                workload: deployment(true, 1, 0),
                pods: vec![pod("a", "ReplicaSet", "old", "dead", 50)],
                causes: vec![BlockCause::NodeUnhealthy],
                next: None,
            },
            Row {
                case: "Recreate, old pod still in grace: not blocked yet, changes at its deadline",
                workload: deployment(true, 1, 0),
                pods: vec![pod("a", "ReplicaSet", "old", "dead", 150)],
                causes: vec![],
                next: Some(t(150)),
            },
            Row {
                case: "Recreate, deleted with grace 0 on a live node 10 s ago: its kubelet is finishing it",
                workload: deployment(true, 1, 0),
                pods: vec![pod("a", "ReplicaSet", "old", "live", 90)],
                causes: vec![],
                next: Some(t(120)),
            },
            Row {
                case: "Recreate, one past grace on a live node, one in grace",
                workload: deployment(true, 2, 0),
                pods: vec![
                    pod("a", "ReplicaSet", "old", "live", 50),
                    pod("b", "ReplicaSet", "old", "dead", 120),
                ],
                causes: vec![BlockCause::LiveNodeStuck, BlockCause::InGrace],
                next: Some(t(120)),
            },
            Row {
                case: "Recreate, node deleted",
                workload: deployment(true, 1, 0),
                pods: vec![pod("a", "ReplicaSet", "old", "gone", 50)],
                causes: vec![BlockCause::NodeUnhealthy],
                next: None,
            },
            Row {
                case: "RollingUpdate is never blocked this way",
                workload: deployment(false, 1, 0),
                pods: vec![pod("a", "ReplicaSet", "old", "dead", 50)],
                causes: vec![],
                next: None,
            },
            Row {
                case: "rollout complete (updated == replicas)",
                workload: deployment(true, 1, 1),
                pods: vec![pod("a", "ReplicaSet", "old", "dead", 50)],
                causes: vec![],
                next: None,
            },
            Row {
                case: "scaled to zero",
                workload: deployment(true, 0, 0),
                pods: vec![pod("a", "ReplicaSet", "old", "dead", 50)],
                causes: vec![],
                next: None,
            },
            Row {
                case: "a Terminating pod of the current ReplicaSet does not block Recreate",
                workload: deployment(true, 1, 0),
                pods: vec![pod("a", "ReplicaSet", "new", "dead", 50)],
                causes: vec![],
                next: None,
            },
            Row {
                case: "a pod never scheduled blocks nothing",
                workload: deployment(true, 1, 0),
                pods: vec![pod("a", "ReplicaSet", "old", "", 50)],
                causes: vec![],
                next: None,
            },
            Row {
                case: "StatefulSet pod past grace",
                workload: sts(),
                pods: vec![pod("web-0", "StatefulSet", "s1", "dead", 50)],
                causes: vec![BlockCause::NodeUnhealthy],
                next: None,
            },
            Row {
                case: "StatefulSet Recreate: every old pod, in grace ones too",
                workload: sts_recreate(),
                pods: vec![
                    pod("web-0", "StatefulSet", "s1", "dead", 50),
                    pod("web-1", "StatefulSet", "s1", "live", 95),
                ],
                causes: vec![BlockCause::NodeUnhealthy, BlockCause::InGrace],
                next: Some(t(125)),
            },
            Row {
                case: "StatefulSet Recreate, its only Terminating pod in grace: not yet",
                workload: sts_recreate(),
                pods: vec![pod("web-1", "StatefulSet", "s1", "dead", 150)],
                causes: vec![],
                next: Some(t(150)),
            },
            Row {
                case: "pod of another StatefulSet",
                workload: sts(),
                pods: vec![pod("other-0", "StatefulSet", "s2", "dead", 50)],
                causes: vec![],
                next: None,
            },
        ];
        for Row { case, workload, pods, causes, next } in table {
            let workload_recreate = workload.recreate;
            let got = blocked_rollouts(&[workload], &replica_sets(), &pods, ready, now);
            let got_causes: Vec<BlockCause> =
                got.blocked.iter().flat_map(|b| b.pods.iter().map(|p| p.cause)).collect();
            assert_eq!(got_causes, causes, "{case}");
            assert_eq!(got.next_change, next, "{case}");
            let recreate = got.blocked.iter().all(|b| b.recreate == workload_recreate);
            assert!(recreate, "{case}: the strategy is carried");
        }
    }

    #[test]
    fn blocking_pod_reads_well() {
        let p = BlockingPod {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "u".into(),
            node: "n1".into(),
            cause: BlockCause::NodeUnhealthy,
        };
        assert_eq!(p.to_string(), "web-0 on n1: NodeUnhealthy");
        let w = WorkloadRef {
            kind: WorkloadKind::StatefulSet,
            namespace: "ns".into(),
            name: "web".into(),
            uid: "s".into(),
        };
        assert_eq!(w.to_string(), "StatefulSet ns/web");
    }
}
