//! The adapter layer: turns Kubernetes objects into the pure core's views. The controllers (which
//! keep them), the writer (its last look) and the CLI (one-shot listings) all read objects
//! through here. Every field is optional in the API, so nothing here unwraps: a strange object
//! yields a conservative view.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;

use crate::core::rollouts::{ReplicaSetView, WorkloadKind, WorkloadView};
use crate::core::stamp::Stamp;
use crate::core::{
    Lifecycle, ManagedBy, NodeControl, NodeLabels, NodeObservation, NodeRecord, NodeView, OwnerRef,
    PodView, Rare, RareControl, Readiness,
};
use crate::crd::{
    CONTROL_PLANE_LABELS, EXCLUDE_ANNOTATION, GRACEFUL_SHUTDOWN_CONDITION, MAINTENANCE_CONDITIONS,
    MAINTENANCE_PLANNED, NODE_ACTIONS_ANNOTATION, OTHER_TOOLS, OUT_OF_SERVICE_APPLIED_BY,
    REARM_ANNOTATION, RemediationPolicy,
};

mod watched_node;
mod watched_pod;

pub use watched_node::{WatchedLease, WatchedNode};
use watched_pod::WatchedVolume;
pub use watched_pod::{MIRROR_ANNOTATION, WatchedPod};

/// The namespace where kubelets keep their heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The kubelet's Warning Events about a pod (core/v1, field selector on its UID), newest first,
/// each quoted briefly as `Reason: message` (at most 200 characters): what a kubelet that does
/// not finish a pod says it is stuck on (FailedKillPod, a volume that does not unmount, ...).
pub async fn kubelet_warnings(
    client: &kube::Client,
    namespace: &str,
    pod_uid: &str,
) -> kube::Result<Vec<String>> {
    use k8s_openapi::api::core::v1::Event;
    let events: kube::Api<Event> = kube::Api::namespaced(client.clone(), namespace);
    let params = kube::api::ListParams::default()
        .fields(&format!("involvedObject.uid={pod_uid},type=Warning"))
        .limit(50);
    let mut found: Vec<(Option<jiff::Timestamp>, String)> = events
        .list(&params)
        .await?
        .items
        .into_iter()
        .filter(|e| {
            let from = |c: Option<&String>| c.is_some_and(|c| c == "kubelet");
            from(e.reporting_component.as_ref())
                || from(e.source.as_ref().and_then(|s| s.component.as_ref()))
        })
        .map(|e| {
            let when =
                e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0));
            let text = format!(
                "{}: {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default().replace('\n', " ")
            );
            let brief: String = text.chars().take(200).collect();
            (when, brief)
        })
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    Ok(found.into_iter().map(|(_, text)| text).collect())
}

/// The value of the policy's re-arm annotation (`remediator.io/rearm-circuit`), if set.
pub fn rearm_token(policy: &RemediationPolicy) -> Option<String> {
    policy.metadata.annotations.as_ref()?.get(REARM_ANNOTATION).cloned()
}

/// A Lease's `spec.leaseDurationSeconds` as kept: negative as 0, above `u16::MAX` (18 hours) as
/// that.
pub fn lease_duration_s(lease: &Lease) -> Option<u16> {
    let seconds = lease.spec.as_ref()?.lease_duration_seconds?;
    Some(u16::try_from(seconds.max(0)).unwrap_or(u16::MAX))
}

/// Builds the observation of a node from its object and (when found) its kubelet Lease.
pub fn node_observation(node: &Node, lease: Option<&Lease>) -> NodeObservation {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conds| conds.iter().find(|c| c.type_ == "Ready"));
    let spec = node.spec.as_ref();
    NodeObservation {
        name: node.metadata.name.as_deref().unwrap_or_default().into(),
        readiness: Readiness::from_condition_status(ready.map(|c| c.status.as_str())),
        ready_transition: ready.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0).into(),
        lease_renewed: (lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0))
        .into(),
        // One object read at one instant says nothing about when we saw it change.
        not_ready_seen: Stamp::NONE,
        lease_seen: Stamp::NONE,
        lease_duration_s: lease.and_then(lease_duration_s),
        ready_heartbeat: ready.and_then(|c| c.last_heartbeat_time.as_ref()).map(|t| t.0).into(),
        heartbeat_seen: Stamp::NONE,
        seen_from_stamps: false,
        not_ready_from_stamp: false,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .map(|taints| taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect())
            .unwrap_or_default(),
        volumes_in_use: status.and_then(|s| s.volumes_in_use.clone()).unwrap_or_default().into(),
    }
}

/// Whether an object's annotations opt it out of every remediation.
pub fn excluded(annotations: Option<&std::collections::BTreeMap<String, String>>) -> bool {
    annotations.and_then(|a| a.get(EXCLUDE_ANNOTATION)).is_some_and(|v| v == "true")
}

/// The compact view of a node the operator keeps (its Lease is joined in later).
pub fn node_view(node: &Node) -> NodeView {
    let meta = &node.metadata;
    let labels = meta.labels.as_ref();
    let annotations = meta.annotations.as_ref();
    NodeView {
        observation: node_observation(node, None),
        control: NodeControl {
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            control_plane: CONTROL_PLANE_LABELS
                .iter()
                .any(|l| labels.is_some_and(|labels| labels.contains_key(*l))),
            managed_by: managed_by(node),
            ready_seen: Stamp::NONE,
            left_ready_seen: Stamp::NONE,
            rare: Rare::new(RareControl {
                lifecycle: lifecycle(node),
                out_of_service_applied_by: annotations
                    .and_then(|a| a.get(OUT_OF_SERVICE_APPLIED_BY))
                    .cloned(),
                record: annotations
                    .and_then(|a| a.get(NODE_ACTIONS_ANNOTATION))
                    .map(|json| node_record(json))
                    .unwrap_or_default(),
                last_outage: None,
                deleted_by_us: None,
            }),
        },
        labels: labels.map(NodeLabels::from).unwrap_or_default(),
        excluded: excluded(annotations),
        deleted: false,
    }
}

/// The tool that manages the node's remediation, if any: the first label, annotation, taint or
/// finalizer whose key starts with one of [`OTHER_TOOLS`]' prefixes (Cluster API's
/// `cluster.x-k8s.io/machine` annotation, Karpenter's `karpenter.sh/nodepool` label and
/// `karpenter.sh/termination` finalizer, medik8s' `medik8s.io/remediation` taint, ...).
pub fn managed_by(node: &Node) -> Option<ManagedBy> {
    let meta = &node.metadata;
    let keys = meta.labels.iter().flat_map(|l| l.keys());
    let annotations = meta.annotations.iter().flat_map(|a| a.keys());
    let taints = node.spec.iter().flat_map(|s| s.taints.iter().flatten()).map(|t| &t.key);
    let finalizers = meta.finalizers.iter().flatten();
    keys.chain(annotations).chain(taints).chain(finalizers).find_map(|key| {
        OTHER_TOOLS
            .iter()
            .find(|tool| key.starts_with(tool.prefix))
            .map(|tool| ManagedBy { tool: tool.name, marker: key.as_str().into() })
    })
}

/// The node's lifecycle conditions with status True (the instant we saw the shutdown is the
/// watch index's to date).
pub fn lifecycle(node: &Node) -> Lifecycle {
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    let holds = |type_: &str| conditions.iter().find(|c| c.type_ == type_ && c.status == "True");
    let shutdown = holds(GRACEFUL_SHUTDOWN_CONDITION);
    Lifecycle {
        maintenance: MAINTENANCE_CONDITIONS.into_iter().find(|c| holds(c).is_some()),
        maintenance_planned: holds(MAINTENANCE_PLANNED).is_some(),
        shutting_down: shutdown.is_some(),
        shutdown_transition: shutdown.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0),
        shutdown_seen: None,
        shutdown_from_stamp: false,
    }
}

/// The record annotation as written by [`node_record_json`]. A record that does not parse is
/// treated as empty: nothing is undone on the strength of a record nobody can read.
pub fn node_record(json: &str) -> NodeRecord {
    #[derive(serde::Deserialize)]
    struct Raw {
        policy: Option<String>,
        cordoned: Option<jiff::Timestamp>,
        tainted: Option<jiff::Timestamp>,
    }
    serde_json::from_str::<Raw>(json)
        .map(|r| NodeRecord { policy: r.policy, cordoned: r.cordoned, tainted: r.tainted })
        .unwrap_or_default()
}

/// The record annotation's value.
pub fn node_record_json(record: &NodeRecord) -> String {
    serde_json::json!({
        "policy": record.policy,
        "cordoned": record.cordoned.map(|t| t.to_string()),
        "tainted": record.tainted.map(|t| t.to_string()),
    })
    .to_string()
}

/// A pod as the operator remembers it (PVC names instead of their access modes, which are
/// looked up when the view is assembled; `view.has_rwo_volume` says only whether an inline
/// single-writer volume was found).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    pub view: PodView,
    pub claims: Vec<String>,
}

/// The compact record of a pod, or `None` when the pod is neither Terminating nor left
/// Ready=False with every container ready (the operator keeps nothing about other pods).
pub fn pod_record(pod: &WatchedPod) -> Option<PodRecord> {
    let deletion = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    let shutdown_reason = deletion.is_none().then(|| shutdown_reason(pod)).flatten();
    let stale_ready_since = match (deletion, &shutdown_reason) {
        (None, None) => Some(stale_ready_since(pod)?),
        _ => None,
    };
    Some(record(pod, stale_ready_since, shutdown_reason, None))
}

/// The compact record of a running pod (not Terminating) whose Ready condition is True, kept
/// while its node is not Ready (`readyOnDeadNode`); `None` for any other pod.
pub fn ready_pod_record(pod: &WatchedPod) -> Option<PodRecord> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") {
        return None;
    }
    let ready = status.conditions.as_deref()?.iter().find(|c| c.type_ == "Ready")?;
    if ready.status != "True" {
        return None;
    }
    let since = ready.last_transition_time.as_ref().map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0);
    Some(record(pod, None, None, Some(since)))
}

/// Whether `pod` runs, is not Terminating and its Ready condition is True.
pub fn pod_is_ready(pod: &WatchedPod) -> bool {
    let status = pod.status.as_ref();
    pod.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The record of `pod`, with what made it kept.
fn record(
    pod: &WatchedPod,
    stale_ready_since: Option<jiff::Timestamp>,
    shutdown_reason: Option<String>,
    ready_since: Option<jiff::Timestamp>,
) -> PodRecord {
    let meta = &pod.metadata;
    let deletion = meta.deletion_timestamp.as_ref().map(|t| t.0);
    let spec = pod.spec.as_ref();
    let owner = meta.owner_references.as_ref().and_then(|refs| {
        refs.iter().find(|r| r.controller == Some(true)).map(|r| OwnerRef {
            kind: r.kind.as_str().into(),
            name: r.name.as_str().into(),
            uid: r.uid.as_str().into(),
        })
    });
    let volumes = spec.and_then(|s| s.volumes.as_deref()).unwrap_or_default();
    let pod_name = meta.name.as_deref().unwrap_or_default();
    // A generic ephemeral volume's claim is named after the pod and the volume.
    let claims = volumes
        .iter()
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(c.claim_name.clone()),
            (None, Some(_)) => Some(format!("{pod_name}-{}", v.name)),
            _ => None,
        })
        .collect();
    PodRecord {
        view: PodView {
            namespace: meta.namespace.as_deref().unwrap_or_default().into(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.as_deref().unwrap_or_default().into(),
            node_name: spec.and_then(|s| s.node_name.as_deref()).map(Arc::from),
            labels: meta.labels.iter().flatten().collect(),
            namespace_labels: Default::default(),
            owner,
            deletion_timestamp: deletion.map_or(Stamp::NONE, Stamp::at_or_after),
            deletion_grace_seconds: meta.deletion_grace_period_seconds,
            is_mirror: meta.annotations.as_ref().is_some_and(|a| a.contains_key(MIRROR_ANNOTATION)),
            has_rwo_volume: volumes.iter().any(single_writer_inline),
            excluded: excluded(meta.annotations.as_ref()),
            phase: pod.status.as_ref().and_then(|s| s.phase.as_deref()).map(Arc::from),
            blocks_rollout: None,
            finalizers: meta.finalizers.clone().unwrap_or_default(),
            // Only a Terminating pod's are read (why it is stuck on a live node).
            running_containers: if deletion.is_some() {
                running_containers(pod).into()
            } else {
                Box::default()
            },
            stale_ready_since: stale_ready_since.into(),
            shutdown_reason,
            // Ours to date: the state fills them in from when it saw the pod.
            stale_seen: Stamp::NONE,
            terminating_seen: Stamp::NONE,
            shutdown_seen: Stamp::NONE,
            ready_since: ready_since.into(),
        },
        claims,
    }
}

/// An inline volume of a kind only one node can write at a time (a cloud or network block
/// device named in the pod itself, not through a claim): such a pod needs fencing like one with
/// a ReadWriteOnce claim.
fn single_writer_inline(v: &WatchedVolume) -> bool {
    v.aws_elastic_block_store.is_some()
        || v.gce_persistent_disk.is_some()
        || v.azure_disk.is_some()
        || v.cinder.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
        || v.fc.is_some()
        || v.vsphere_volume.is_some()
        || v.portworx_volume.is_some()
        || v.photon_persistent_disk.is_some()
        || v.scale_io.is_some()
        || v.storageos.is_some()
}

/// The `status.reason` a kubelet's graceful node shutdown leaves on the pods it ends with phase
/// Failed: `Terminated` (the shutdown manager since Kubernetes 1.22), `Shutdown` (before), and
/// `NodeShutdown` (a pod turned away at admission while the node shuts down).
pub const SHUTDOWN_POD_REASONS: [&str; 3] = ["Terminated", "Shutdown", "NodeShutdown"];

/// For a pod left Failed by a graceful node shutdown: its `status.reason`. `None` for every
/// other pod (a pod Failed for any other reason included).
pub fn shutdown_reason(pod: &WatchedPod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let reason = status.reason.as_deref()?;
    (status.phase.as_deref() == Some("Failed") && SHUTDOWN_POD_REASONS.contains(&reason))
        .then(|| reason.to_string())
}

/// The reasons a kubelet gives a Ready=False condition it computed itself: the kubelet thinks
/// the pod is not ready, so it is no pod a node outage left behind.
const KUBELET_NOT_READY_REASONS: [&str; 3] =
    ["ContainersNotReady", "ReadinessGatesNotReady", "PodCompleted"];

/// For a running pod whose Ready condition is False while everything the kubelet would ask of
/// it is satisfied: every container ready and running, every native sidecar (an init container
/// with `restartPolicy: Always`) ready and running, every other init container finished with
/// exit code 0, every readiness gate's condition True, and a Ready=False not computed by the
/// kubelet. When the condition went False (`Timestamp::UNIX_EPOCH` when it says nothing).
/// `None` otherwise: a pod failing its own readiness is never touched.
fn stale_ready_since(pod: &WatchedPod) -> Option<jiff::Timestamp> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Running") {
        return None;
    }
    let conditions = status.conditions.as_deref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    if ready.status != "False"
        || ready.reason.as_deref().is_some_and(|r| KUBELET_NOT_READY_REASONS.contains(&r))
    {
        return None;
    }
    let running = |c: &watched_pod::WatchedContainerStatus| {
        c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some())
    };
    let containers = status.container_statuses.as_ref().filter(|c| !c.is_empty())?;
    if !containers.iter().all(running) {
        return None;
    }
    let spec = pod.spec.as_ref();
    let init_statuses = status.init_container_statuses.as_deref().unwrap_or_default();
    for init in spec.and_then(|s| s.init_containers.as_deref()).unwrap_or_default() {
        let status = init_statuses.iter().find(|s| s.name == init.name)?;
        let sidecar = init.restart_policy.as_deref() == Some("Always");
        let finished = || {
            status
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0)
        };
        if !(if sidecar { running(status) } else { finished() }) {
            return None;
        }
    }
    for gate in spec.and_then(|s| s.readiness_gates.as_deref()).unwrap_or_default() {
        let met = conditions.iter().any(|c| c.type_ == gate.condition_type && c.status == "True");
        if !met {
            return None;
        }
    }
    Some(ready.last_transition_time.as_ref().map_or(jiff::Timestamp::UNIX_EPOCH, |t| t.0))
}

/// The names of the pod's containers whose status says running.
fn running_containers(pod: &WatchedPod) -> Vec<String> {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    statuses
        .into_iter()
        .flatten()
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .map(|c| c.name.clone())
        .collect()
}

/// The compact view of a Deployment.
pub fn deployment_view(d: &Deployment) -> WorkloadView {
    let spec = d.spec.as_ref();
    WorkloadView {
        kind: WorkloadKind::Deployment,
        namespace: d.metadata.namespace.clone().unwrap_or_default(),
        name: d.metadata.name.clone().unwrap_or_default(),
        uid: d.metadata.uid.clone().unwrap_or_default(),
        recreate: spec
            .and_then(|s| s.strategy.as_ref())
            .and_then(|s| s.type_.as_deref())
            .is_some_and(|t| t == "Recreate"),
        replicas: spec.and_then(|s| s.replicas).unwrap_or(1),
        updated_replicas: d.status.as_ref().and_then(|s| s.updated_replicas).unwrap_or(0),
    }
}

/// The compact view of a StatefulSet.
pub fn stateful_set_view(s: &StatefulSet) -> WorkloadView {
    WorkloadView {
        kind: WorkloadKind::StatefulSet,
        namespace: s.metadata.namespace.clone().unwrap_or_default(),
        name: s.metadata.name.clone().unwrap_or_default(),
        uid: s.metadata.uid.clone().unwrap_or_default(),
        // "Recreate" (Kubernetes 1.37, alpha): a string the v1.33 types carry as it is.
        recreate: s
            .spec
            .as_ref()
            .and_then(|s| s.update_strategy.as_ref())
            .and_then(|u| u.type_.as_deref())
            .is_some_and(|t| t == "Recreate"),
        replicas: s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
        updated_replicas: s.status.as_ref().and_then(|s| s.updated_replicas).unwrap_or(0),
    }
}

/// The compact view of a ReplicaSet: its controlling Deployment and desired replicas.
pub fn replica_set_view(rs: &ReplicaSet) -> ReplicaSetView {
    ReplicaSetView {
        uid: rs.metadata.uid.clone().unwrap_or_default(),
        deployment_uid: rs.metadata.owner_references.as_ref().and_then(|refs| {
            refs.iter()
                .find(|r| r.controller == Some(true) && r.kind == "Deployment")
                .map(|r| r.uid.clone())
        }),
        // An absent replicas field means 1, never 0: an RS is "old" only when scaled to 0.
        replicas: rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_node_gives_a_conservative_observation() {
        let obs = node_observation(&Node::default(), None);
        assert_eq!(obs.readiness, Readiness::Missing);
        assert_eq!(&*obs.name, "");
        assert!(obs.lease_renewed.is_none());
        assert!(!obs.unschedulable);
    }

    #[test]
    fn reads_ready_condition_lease_and_taints() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .expect("valid node");
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "namespace": NODE_LEASE_NAMESPACE},
            "spec": {"renewTime": "2026-01-01T00:00:01.500000Z"}
        }))
        .expect("valid lease");
        let obs = node_observation(&node, Some(&lease));
        assert_eq!(&*obs.name, "n1");
        assert_eq!(obs.readiness, Readiness::Unknown);
        assert_eq!(obs.ready_transition, Some("2026-01-01T00:00:00Z".parse().expect("ts")));
        assert_eq!(obs.lease_renewed, Some("2026-01-01T00:00:01.5Z".parse().expect("ts")));
        assert!(obs.unschedulable);
        assert_eq!(*obs.taints, ["node.kubernetes.io/unreachable:NoExecute".to_string()]);
    }

    #[test]
    fn workload_views() {
        let d: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "legacy", "namespace": "ns", "uid": "d1"},
            "spec": {"replicas": 2, "strategy": {"type": "Recreate"}, "selector": {},
                     "template": {}},
            "status": {"updatedReplicas": 1}
        }))
        .expect("valid deployment");
        let v = deployment_view(&d);
        assert!(v.recreate);
        assert_eq!((v.replicas, v.updated_replicas), (2, 1));
        let rs: ReplicaSet = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "legacy-1", "namespace": "ns", "uid": "r1", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "legacy", "uid": "d1", "controller": true}]},
            "spec": {"replicas": 0, "selector": {}}
        }))
        .expect("valid replicaset");
        let v = replica_set_view(&rs);
        assert_eq!((v.deployment_uid.as_deref(), v.replicas), (Some("d1"), 0));
        for (strategy, recreate) in
            [("Recreate", true), ("RollingUpdate", false), ("OnDelete", false)]
        {
            let s: StatefulSet = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "web", "namespace": "ns", "uid": "s1"},
                "spec": {"updateStrategy": {"type": strategy}, "selector": {}, "template": {},
                         "serviceName": "web"}
            }))
            .expect("valid statefulset");
            assert_eq!(stateful_set_view(&s).recreate, recreate, "{strategy}");
        }
    }

    #[test]
    fn pod_records_only_terminating_pods() {
        let running: WatchedPod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}
        }))
        .expect("valid pod");
        assert!(pod_record(&running).is_none());

        let terminating: WatchedPod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-0", "namespace": "ns", "uid": "u2",
                "deletionTimestamp": "2026-01-01T00:00:30Z", "deletionGracePeriodSeconds": 30,
                "annotations": {"remediator.io/exclude": "true"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Other", "name": "x", "uid": "o0"},
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "o1", "controller": true}
                ]
            },
            "spec": {"nodeName": "n1", "containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                {"name": "tmp", "emptyDir": {}}
            ]}
        }))
        .expect("valid pod");
        let record = pod_record(&terminating).expect("terminating pods are recorded");
        assert_eq!(record.claims, vec!["data-web-0".to_string()]);
        let view = record.view;
        assert_eq!(view.node_name.as_deref(), Some("n1"));
        assert_eq!(view.owner.map(|o| o.kind), Some("StatefulSet".into()));
        assert_eq!(view.deletion_grace_seconds, Some(30));
        assert!(view.excluded);
        assert!(!view.is_mirror);
        assert!(!view.has_rwo_volume, "a claim's access modes are looked up later");
    }

    #[test]
    fn single_writer_volumes_need_fencing_whatever_their_kind() {
        let with = |volume: serde_json::Value| -> PodRecord {
            let pod: WatchedPod = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "db-0", "namespace": "ns", "uid": "u",
                             "deletionTimestamp": "2026-01-01T00:00:30Z"},
                "spec": {"nodeName": "n1", "containers": [], "volumes": [volume]}
            }))
            .expect("valid pod");
            pod_record(&pod).expect("terminating")
        };
        // (volume, inline single writer, claims looked up)
        let table = [
            (
                serde_json::json!({"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1"}}),
                true,
                vec![],
            ),
            (
                serde_json::json!({"name": "d", "gcePersistentDisk": {"pdName": "disk"}}),
                true,
                vec![],
            ),
            (
                serde_json::json!({"name": "d", "rbd": {"monitors": ["m"], "image": "i"}}),
                true,
                vec![],
            ),
            (
                serde_json::json!({"name": "d", "iscsi": {"targetPortal": "t", "iqn": "q", "lun": 0}}),
                true,
                vec![],
            ),
            (serde_json::json!({"name": "d", "nfs": {"server": "s", "path": "/"}}), false, vec![]),
            (serde_json::json!({"name": "d", "emptyDir": {}}), false, vec![]),
            (
                serde_json::json!({"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {
                    "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}),
                false,
                vec!["db-0-scratch".to_string()],
            ),
        ];
        for (volume, inline, claims) in table {
            let record = with(volume.clone());
            assert_eq!(record.view.has_rwo_volume, inline, "{volume}");
            assert_eq!(record.claims, claims, "{volume}");
        }
    }

    /// A running pod with Ready=False (reason `reason`), its container `app` ready, and what
    /// `extra` adds to its spec and status.
    fn pod(reason: Option<&str>, extra: impl FnOnce(&mut serde_json::Value)) -> WatchedPod {
        let mut json = serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"nodeName": "n1"},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "False", "reason": reason,
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "containerStatuses": [{"name": "app", "ready": true,
                                       "state": {"running": {}}}],
            },
        });
        extra(&mut json);
        serde_json::from_value(json).expect("pod")
    }

    #[test]
    fn stale_only_when_everything_the_kubelet_asks_is_satisfied() {
        use serde_json::json;
        type Extra = fn(&mut serde_json::Value);
        let none: Extra = |_| {};
        let gate: Extra = |p| p["spec"]["readinessGates"] = json!([{"conditionType": "lb/ok"}]);
        let gate_met: Extra = |p| {
            p["spec"]["readinessGates"] = json!([{"conditionType": "lb/ok"}]);
            p["status"]["conditions"]
                .as_array_mut()
                .expect("conditions")
                .push(json!({"type": "lb/ok", "status": "True"}));
        };
        let sidecar = |ready: bool| {
            move |p: &mut serde_json::Value| {
                p["spec"]["initContainers"] = json!([{"name": "proxy", "restartPolicy": "Always"}]);
                p["status"]["initContainerStatuses"] =
                    json!([{"name": "proxy", "ready": ready, "state": {"running": {}}}]);
            }
        };
        let init = |exit: i32| {
            move |p: &mut serde_json::Value| {
                p["spec"]["initContainers"] = json!([{"name": "setup"}]);
                p["status"]["initContainerStatuses"] = json!([{"name": "setup", "ready": false,
                    "state": {"terminated": {"exitCode": exit}}}]);
            }
        };
        let table: Vec<(&str, WatchedPod, bool)> = vec![
            ("marked by the node lifecycle controller", pod(None, none), true),
            ("the kubelet says containers not ready", pod(Some("ContainersNotReady"), none), false),
            ("a readiness gate not met", pod(None, gate), false),
            ("the gate reason", pod(Some("ReadinessGatesNotReady"), gate_met), false),
            ("a readiness gate met", pod(None, gate_met), true),
            ("a native sidecar ready", pod(None, sidecar(true)), true),
            ("a native sidecar failing its probe", pod(None, sidecar(false)), false),
            ("an init container done", pod(None, init(0)), true),
            ("an init container failed", pod(None, init(1)), false),
        ];
        for (case, pod, want) in table {
            assert_eq!(stale_ready_since(&pod).is_some(), want, "{case}");
        }
    }

    #[test]
    fn other_tools_and_lifecycle_conditions_from_the_node() {
        let node = |v: serde_json::Value| -> Node { serde_json::from_value(v).expect("node") };
        let tool = |v| managed_by(&node(v)).map(|m| (m.tool, m.marker));
        let table = [
            ("nothing", serde_json::json!({"metadata": {"labels": {"zone": "a"}}}), None),
            (
                "Cluster API's annotation",
                serde_json::json!({"metadata": {"annotations": {"cluster.x-k8s.io/machine": "m"}}}),
                Some(("Cluster API", "cluster.x-k8s.io/machine")),
            ),
            (
                "Karpenter's label",
                serde_json::json!({"metadata": {"labels": {"karpenter.sh/nodepool": "p"}}}),
                Some(("Karpenter", "karpenter.sh/nodepool")),
            ),
            (
                "Karpenter's finalizer",
                serde_json::json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}}),
                Some(("Karpenter", "karpenter.sh/termination")),
            ),
            (
                "medik8s' taint",
                serde_json::json!({"spec": {"taints": [
                    {"key": "medik8s.io/remediation", "effect": "NoExecute"}]}}),
                Some(("medik8s", "medik8s.io/remediation")),
            ),
        ];
        for (case, json, want) in table {
            let got = tool(json);
            assert_eq!(got.as_ref().map(|(t, m)| (*t, &**m)), want, "{case}");
        }
        let conditions = |c: serde_json::Value| {
            lifecycle(&node(serde_json::json!({"status": {"conditions": c}})))
        };
        let at = "2026-01-01T00:00:00Z";
        let l = conditions(serde_json::json!([
            {"type": "MaintenancePlanned", "status": "True"},
            {"type": "DrainInProgress", "status": "False"},
            {"type": "Drained", "status": "True"},
            {"type": "GracefulNodeShutdownInProgress", "status": "True", "lastTransitionTime": at},
        ]));
        assert_eq!(l.maintenance, Some("Drained"));
        assert!(l.maintenance_planned && l.shutting_down);
        assert_eq!(l.shutdown_transition, Some(at.parse().expect("ts")));
        assert_eq!(l.shutdown_seen, None, "ours to date, never the condition's");
        let planned =
            conditions(serde_json::json!([{"type": "MaintenancePlanned", "status": "True"}]));
        assert_eq!((planned.maintenance, planned.shutting_down), (None, false));
    }

    #[test]
    fn only_pods_a_graceful_shutdown_failed_are_kept_as_such() {
        use serde_json::json;
        // (case, phase, reason, terminating, want)
        let table = [
            ("shutdown manager", "Failed", Some("Terminated"), false, Some("Terminated")),
            ("before Kubernetes 1.22", "Failed", Some("Shutdown"), false, Some("Shutdown")),
            (
                "turned away at admission",
                "Failed",
                Some("NodeShutdown"),
                false,
                Some("NodeShutdown"),
            ),
            ("evicted for pressure", "Failed", Some("Evicted"), false, None),
            ("failed on its own", "Failed", None, false, None),
            ("succeeded before the shutdown", "Succeeded", Some("Terminated"), false, None),
            ("being deleted already", "Failed", Some("Terminated"), true, None),
        ];
        for (case, phase, reason, terminating, want) in table {
            let mut json = json!({
                "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                "spec": {"nodeName": "n1"},
                "status": {"phase": phase, "reason": reason},
            });
            if terminating {
                json["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            let pod: WatchedPod = serde_json::from_value(json).expect("pod");
            let record = pod_record(&pod);
            let kept = record.as_ref().and_then(|r| r.view.shutdown_reason.as_deref());
            assert_eq!(kept, want, "{case}");
            assert_eq!(record.is_some(), want.is_some() || terminating, "{case}");
        }
    }
}
