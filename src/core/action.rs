//! The actions: what the writer carries out (or records, in DryRun), and the last look that
//! decides, from fresh reads right before a request, whether an action still stands.
//!
//! Its own module because actions are the contract between the pure core and the one writer:
//! the rules produce them, the guards ration them, the writer executes them. [`Action`] names
//! every kind the writer knows; each new kind is one more variant here and one more branch there.

use jiff::Timestamp;

use super::node::{DeathEvidence, fencing_evidence, own_taint_aside};
use super::observed::{
    NodeControl, NodeObservation, NodeView, Outage, OwnerKey, Readiness, WorkloadRef,
};
use crate::crd::{
    ActionKind, EXCLUDE_ANNOTATION, FIELD_MANAGER, FencingRequirement, FencingSpec, Mode,
    OUT_OF_SERVICE_TAINT, SHUTDOWN_TAINT,
};

/// A pod force delete: DELETE with `gracePeriodSeconds: 0` and a UID precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForceDelete {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// Why, for Events, logs and status.
    pub reason: String,
    /// The instant the pod became due (latest of node death and `deletionTimestamp + delay`);
    /// rate limiting may act later. Latency is measured from here.
    pub threshold: Timestamp,
    /// The workload whose rollout the pod blocks, told in an Event when it is released.
    pub blocks_rollout: Option<WorkloadRef>,
    /// The node's Lease `renewTime` the plan judged on: any other value in the last look is a
    /// renewal since the plan, so the kubelet is alive.
    pub lease_renewed: Option<Timestamp>,
    /// The fencing the pod needs, which the last look must still find on its node.
    pub fencing_required: Option<FencingRequirement>,
    /// A pod stuck on a live node (liveNodeStuck.forceDeleteAfter): the last look wants its
    /// node still Ready, not dead.
    pub live_node: bool,
    /// The evidence its node is dead (`None` on a live node), checked again by the safety
    /// kernel right before the request.
    pub death: Option<DeathEvidence>,
}

/// The removal of allowlisted finalizers (`finalizers.removable`) from a Terminating pod they
/// hold: a JSON patch that tests the pod's UID and its finalizers as the plan saw them, then sets
/// the rest, so a pod changed since the plan is left alone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoveFinalizers {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// Why, for Events, logs and status.
    pub reason: String,
    /// When it became due.
    pub threshold: Timestamp,
    /// The finalizers removed.
    pub remove: Vec<String>,
    /// Every finalizer of the pod as the plan saw it.
    pub current: Vec<String>,
    /// The evidence its node is dead (`None` on a live node).
    pub death: Option<DeathEvidence>,
}

/// An eviction through the Eviction API of a pod left Ready=False after a node blip
/// (`staleReadiness.action: Evict`), with a UID precondition: PodDisruptionBudgets hold, and a
/// refusal (429) is reported and retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evict {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// Why, for Events, logs and status.
    pub reason: String,
    /// When it became due.
    pub threshold: Timestamp,
    /// The outage of its node the operator watched, which the pod turned not Ready in.
    pub outage: Outage,
    /// When the operator first saw the pod not Ready with everything ready.
    pub stale_seen: Timestamp,
}

impl Evict {
    /// Whether the eviction still stands after the last look (fresh pod, node and policy):
    /// the same pod, not Terminating, still left Ready=False with everything ready (a kubelet
    /// that repaired its pod itself is left to it), on a node still Ready. `Err` says why not.
    pub fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
    ) -> Result<(), String> {
        policy_still_enforces(look.policy, planned_generation, "evicted")?;
        let Some(pod) = look.pod else { return Err("pod already gone".into()) };
        if pod.uid != Some(self.uid.as_str()) {
            return Err("a new pod with the same name replaced it; left alone".into());
        }
        if pod.terminating {
            return Err("the pod is Terminating already".into());
        }
        if !pod.stale {
            return Err("the pod is no longer left Ready=False with everything ready (its \
                        kubelet repaired it, or something in it is not ready); left alone"
                .into());
        }
        match &look.node {
            Some(node) if node.observation.readiness == Readiness::Ready => Ok(()),
            _ => Err("its node is not Ready now; left alone".into()),
        }
    }
}

impl RemoveFinalizers {
    /// Whether the removal still stands after the last look: the same pod, still Terminating;
    /// on a dead node, the node still not Ready and its Lease as the plan saw it; on a live
    /// node, the node still Ready. `Err` says why not.
    pub fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
    ) -> Result<(), String> {
        policy_still_enforces(look.policy, planned_generation, "removed")?;
        let Some(pod) = look.pod else { return Err("pod already gone".into()) };
        if pod.uid != Some(self.uid.as_str()) {
            return Err("a new pod with the same name replaced it; left alone".into());
        }
        if !pod.terminating {
            return Err("pod is no longer Terminating".into());
        }
        let ready = look.node.as_ref().is_some_and(|n| n.observation.readiness == Readiness::Ready);
        match &self.death {
            None if ready => Ok(()),
            None => Err("the node is no longer Ready: the dead-node rules decide".into()),
            Some(_) if ready => Err("node is Ready again; left alone".into()),
            Some(DeathEvidence::Watched { lease_renewed, .. })
                if look.lease_renewed != Some(*lease_renewed) =>
            {
                Err("the node's Lease was renewed since the plan (or is gone); left alone".into())
            }
            Some(DeathEvidence::Deleted) if look.node.is_some() => {
                Err("a Node of that name exists again; left alone".into())
            }
            Some(_) => Ok(()),
        }
    }

    /// How it is remembered once done: the pod's UID, then the kind (the pod's own force delete,
    /// which may follow on a dead node, is remembered by the UID alone).
    pub fn acted_key(&self) -> String {
        removal_acted_key(&self.uid)
    }

    /// The finalizers left on the pod afterwards.
    pub fn remaining(&self) -> Vec<String> {
        self.current.iter().filter(|f| !self.remove.contains(f)).cloned().collect()
    }
}

/// What a fresh read of a pod says, just before it is force-deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshPod<'a> {
    pub uid: Option<&'a str>,
    pub terminating: bool,
    /// `spec.nodeName` (empty when unset).
    pub node: &'a str,
    /// Annotated `remediator.io/exclude: "true"`.
    pub excluded: bool,
    /// Left Ready=False with every container, init container, sidecar and readiness gate
    /// satisfied, as the watch would judge it now.
    pub stale: bool,
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
/// our taint while it is the one our record names (same `timeAdded`). The rest was changed by
/// someone else since, and is theirs.
pub fn undo_changes(node: &FreshNode) -> UndoChanges {
    let record = &node.control.record;
    let managers = &node.cordon_managers;
    UndoChanges {
        uncordon: record.cordoned.is_some()
            && node.observation.unschedulable
            && !managers.is_empty()
            && managers.iter().all(|m| m == FIELD_MANAGER),
        remove_taint: record.tainted.is_some()
            && same_second(record.tainted, node.out_of_service_added),
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

impl ForceDelete {
    /// Whether the action still stands after the last look. `planned_generation` is the policy
    /// generation the plan was made with; `fencing` its fencing settings. `Err` says why it is
    /// skipped: the pod changed, the policy left Enforce or changed, or the node is no longer
    /// dead by fresh evidence (Ready, a Lease renewed since the plan, excluded, fencing gone).
    pub fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        fencing: &FencingSpec,
    ) -> Result<(), String> {
        let Some(pod) = look.pod else { return Err("pod already gone".into()) };
        if pod.uid != Some(self.uid.as_str()) {
            return Err("a new pod with the same name replaced it; left alone".into());
        }
        if !pod.terminating {
            return Err("pod is no longer Terminating".into());
        }
        if pod.node != self.node {
            return Err(format!("pod moved to node {:?}", pod.node));
        }
        if pod.excluded {
            return Err(format!("pod annotated {EXCLUDE_ANNOTATION}=true; left alone"));
        }
        policy_still_enforces(look.policy, planned_generation, "deleted")?;
        if self.live_node {
            return match &look.node {
                Some(node) if node.excluded => {
                    Err(format!("node annotated {EXCLUDE_ANNOTATION}=true; left alone"))
                }
                Some(node) if node.observation.readiness == Readiness::Ready => Ok(()),
                _ => Err("the node is no longer Ready: the dead-node rules decide".into()),
            };
        }
        if look.lease_renewed != self.lease_renewed {
            let show = |t: Option<Timestamp>| t.map_or("none".to_string(), |t| t.to_string());
            return Err(format!(
                "the node's Lease was renewed since the plan (renewTime {} -> {}): its kubelet is alive; left alone",
                show(self.lease_renewed),
                show(look.lease_renewed)
            ));
        }
        let fenced = match &look.node {
            // Seen deleted when planned, back now: a new Node, whatever it says.
            Some(_) if self.death == Some(DeathEvidence::Deleted) => {
                return Err("a Node of that name exists again; left alone".into());
            }
            Some(node) => {
                if node.observation.readiness == Readiness::Ready {
                    return Err("node is Ready again; left alone".into());
                }
                if node.excluded {
                    return Err(format!("node annotated {EXCLUDE_ANNOTATION}=true; left alone"));
                }
                let fencing = own_taint_aside(fencing, &node.control.record);
                fencing_evidence(&node.observation, &fencing, false)
            }
            None => {
                fencing_evidence(&NodeView::deleted_unknown(&self.node).observation, fencing, true)
            }
        };
        if let (Some(required), None) = (self.fencing_required, fenced) {
            return Err(format!(
                "fencing evidence ({}) no longer on the node; left alone",
                required.as_str()
            ));
        }
        Ok(())
    }
}

/// What a node action does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeActionKind {
    /// Set `spec.unschedulable`.
    Cordon,
    /// Add `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`; `assumed_off`: on the
    /// policy's assumeOffAfter, without other fencing evidence.
    OutOfServiceTaint { assumed_off: bool },
    /// Delete the Node object (which releases all its pods: PodGC deletes them). Only with
    /// fencing evidence from outside the operator, or `assumed_off`: on the policy's
    /// assumeOffAfter.
    DeleteNode { assumed_off: bool },
    /// Remove this operator's own cordon and taint, and its record.
    Undo,
}

impl NodeActionKind {
    /// The kind as recorded in the status and the metrics.
    pub fn action_kind(self) -> ActionKind {
        match self {
            NodeActionKind::Cordon => ActionKind::Cordon,
            NodeActionKind::OutOfServiceTaint { .. } => ActionKind::OutOfServiceTaint,
            NodeActionKind::DeleteNode { .. } => ActionKind::DeleteNode,
            NodeActionKind::Undo => ActionKind::UndoNodeActions,
        }
    }
}

/// An action on a node (cordon, taint, delete, undo), decided from the same evidence as pod
/// releases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAction {
    pub kind: NodeActionKind,
    pub node: String,
    pub uid: String,
    /// Why, for Events, logs and status.
    pub reason: String,
    /// The instant it became due.
    pub threshold: Timestamp,
    /// The Lease `renewTime` the plan judged on (the last look compares it).
    pub lease_renewed: Option<Timestamp>,
    /// The episode the action belongs to: the instant the node was judged dead (or seen Ready
    /// again, for an undo). A new outage is a new episode.
    pub epoch: Timestamp,
    /// The evidence the node is dead (`None` for an undo).
    pub death: Option<DeathEvidence>,
}

impl NodeAction {
    /// How the action is remembered once taken or recorded, so that it is not taken (or, in
    /// DryRun, recorded) again within the same episode.
    pub fn acted_key(&self) -> String {
        node_acted_key(&self.uid, self.kind, self.epoch)
    }

    /// Whether the action still stands after a fresh read of the node (`None`: gone), its Lease
    /// and the policy. A node action on a dead node needs the node still dead by fresh evidence
    /// (not Ready, no renewal since the plan), not excluded, not taken over by another tool, and
    /// the change not made already; an undo needs the node still Ready.
    pub fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
    ) -> Result<(), String> {
        policy_still_enforces(look.policy, planned_generation, "done")?;
        let Some(node) = &look.node else { return Err("the node is gone".into()) };
        if node.control.uid != self.uid {
            return Err("a new node with the same name replaced it; left alone".into());
        }
        let obs = &node.observation;
        if self.kind == NodeActionKind::Undo {
            return if obs.readiness == Readiness::Ready {
                Ok(())
            } else {
                Err("the node is not Ready any more; our changes stay".into())
            };
        }
        if obs.readiness == Readiness::Ready {
            return Err("node is Ready again; left alone".into());
        }
        if look.lease_renewed != self.lease_renewed {
            return Err(
                "the node's Lease was renewed since the plan: its kubelet is alive; left alone"
                    .into(),
            );
        }
        if node.excluded {
            return Err(format!("node annotated {EXCLUDE_ANNOTATION}=true; left alone"));
        }
        if let Some(marker) = &node.control.managed_by {
            return Err(format!("another tool manages this node ({marker}); left to it"));
        }
        match self.kind {
            NodeActionKind::Cordon if obs.unschedulable => Err("already cordoned".into()),
            NodeActionKind::Cordon if node.control.record.cordoned.is_some() => {
                Err("an admin uncordoned it after we cordoned it; not cordoned again".into())
            }
            NodeActionKind::OutOfServiceTaint { .. }
                if obs.has_taint(OUT_OF_SERVICE_TAINT, "NoExecute") =>
            {
                Err("already tainted out-of-service".into())
            }
            NodeActionKind::OutOfServiceTaint { assumed_off: false }
                if !obs.has_taint_key(SHUTDOWN_TAINT) =>
            {
                Err("the shutdown taint it relied on is gone; not tainted".into())
            }
            NodeActionKind::DeleteNode { .. } if node.control.control_plane => {
                Err("a control-plane node is never deleted".into())
            }
            _ => Ok(()),
        }
    }
}

/// See [`RemoveFinalizers::acted_key`]: `<pod uid>/RemoveFinalizers`.
pub fn removal_acted_key(uid: &str) -> String {
    format!("{uid}/{}", ActionKind::RemoveFinalizers.as_str())
}

/// See [`NodeAction::acted_key`]: `<node uid>/<kind>@<episode>`.
pub fn node_acted_key(uid: &str, kind: NodeActionKind, epoch: Timestamp) -> String {
    format!("{uid}/{}@{epoch}", kind.action_kind().as_str())
}

/// The policy, read fresh, must still be in Enforce, not paused, and unchanged since the plan.
/// `verb` says what did not happen ("nothing deleted").
pub fn policy_still_enforces(
    policy: Option<FreshPolicy>,
    planned_generation: Option<i64>,
    verb: &str,
) -> Result<(), String> {
    let Some(policy) = policy else { return Err("the policy was deleted".into()) };
    if policy.mode != Mode::Enforce {
        return Err(format!("the policy is in {} now; nothing {verb}", policy.mode.as_str()));
    }
    if policy.paused {
        return Err(format!("the policy is paused now; nothing {verb}"));
    }
    if policy.generation != planned_generation {
        return Err("the policy changed since the plan; its next evaluation decides".into());
    }
    Ok(())
}

/// Something the writer should do (or record, in DryRun).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    ForceDelete(ForceDelete),
    Node(NodeAction),
    RemoveFinalizers(RemoveFinalizers),
    Evict(Evict),
}

impl Action {
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::ForceDelete(_) => ActionKind::ForceDelete,
            Action::Node(n) => n.kind.action_kind(),
            Action::RemoveFinalizers(_) => ActionKind::RemoveFinalizers,
            Action::Evict(_) => ActionKind::Evict,
        }
    }

    /// The key its outcome is remembered by once done (and its failures, while failing): the
    /// pod's UID for a force delete or an eviction, [`RemoveFinalizers::acted_key`],
    /// [`NodeAction::acted_key`].
    pub fn acted_key(&self) -> String {
        match self {
            Action::ForceDelete(fd) => fd.uid.clone(),
            Action::Node(n) => n.acted_key(),
            Action::RemoveFinalizers(rf) => rf.acted_key(),
            Action::Evict(e) => e.uid.clone(),
        }
    }

    /// Whether it undoes this operator's own changes (never destructive).
    pub fn is_undo(&self) -> bool {
        matches!(self, Action::Node(n) if n.kind == NodeActionKind::Undo)
    }

    /// The UID of the object the action is about: the pod's, or the node's.
    pub fn uid(&self) -> &str {
        match self {
            Action::ForceDelete(fd) => &fd.uid,
            Action::Node(n) => &n.uid,
            Action::RemoveFinalizers(rf) => &rf.uid,
            Action::Evict(e) => &e.uid,
        }
    }

    /// The instant the action became due: candidates spend the guards oldest threshold first.
    pub fn threshold(&self) -> Timestamp {
        match self {
            Action::ForceDelete(fd) => fd.threshold,
            Action::Node(n) => n.threshold,
            Action::RemoveFinalizers(rf) => rf.threshold,
            Action::Evict(e) => e.threshold,
        }
    }

    /// The owner whose per-owner budget the action spends; `None` for a bare pod or a node.
    pub fn owner(&self) -> Option<&OwnerKey> {
        match self {
            Action::ForceDelete(fd) => fd.owner.as_ref(),
            Action::Node(_) => None,
            Action::RemoveFinalizers(rf) => rf.owner.as_ref(),
            Action::Evict(e) => e.owner.as_ref(),
        }
    }

    /// The namespace and name of what the action targets: the order among equal thresholds.
    pub fn target(&self) -> (&str, &str) {
        match self {
            Action::ForceDelete(fd) => (&fd.namespace, &fd.name),
            Action::Node(n) => ("", &n.node),
            Action::RemoveFinalizers(rf) => (&rf.namespace, &rf.name),
            Action::Evict(e) => (&e.namespace, &e.name),
        }
    }

    /// The node the action is about (a pod's node, or the node itself).
    pub fn node(&self) -> &str {
        match self {
            Action::ForceDelete(fd) => &fd.node,
            Action::Node(n) => &n.node,
            Action::RemoveFinalizers(rf) => &rf.node,
            Action::Evict(e) => &e.node,
        }
    }

    /// Why, for Events, logs and status.
    pub fn reason(&self) -> &str {
        match self {
            Action::ForceDelete(fd) => &fd.reason,
            Action::Node(n) => &n.reason,
            Action::RemoveFinalizers(rf) => &rf.reason,
            Action::Evict(e) => &e.reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;

    use super::*;

    /// 2026-01-01T00:MM:SSZ.
    fn t(min: i64, sec: i64) -> Timestamp {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        start + SignedDuration::from_secs(min * 60 + sec)
    }
    fn now() -> Timestamp {
        t(10, 0)
    }

    /// Node `name` as a fresh read sees it: "ready", or "dead" (Unknown since 00:00).
    fn node(name: &str, health: &str) -> NodeView {
        let readiness = match health {
            "ready" => Readiness::Ready,
            "dead" => Readiness::Unknown,
            other => panic!("unknown health {other}"),
        };
        NodeView {
            observation: NodeObservation {
                name: name.into(),
                readiness,
                ready_transition: Some(t(0, 0)),
                lease_renewed: Some(t(0, 0)),
                not_ready_seen: (readiness != Readiness::Ready).then_some(t(0, 0)),
                lease_seen: Some(t(0, 0)),
                ready_heartbeat: None,
                heartbeat_seen: None,
                seen_from_stamps: false,
                not_ready_from_stamp: false,
                unschedulable: false,
                taints: vec![],
                volumes_in_use: vec![],
            },
            labels: Default::default(),
            excluded: false,
            deleted: false,
            control: Default::default(),
        }
    }

    #[test]
    fn recheck_table() {
        let renewed = Some(t(0, 0));
        let fd = ForceDelete {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "u1".into(),
            node: "n1".into(),
            owner: None,
            reason: String::new(),
            threshold: now(),
            blocks_rollout: None,
            lease_renewed: renewed,
            fencing_required: None,
            live_node: false,
            death: None,
        };
        let fenced =
            ForceDelete { fencing_required: Some(FencingRequirement::StatefulSet), ..fd.clone() };
        let pod = FreshPod {
            uid: Some("u1"),
            terminating: true,
            node: "n1",
            excluded: false,
            stale: false,
        };
        let dead = FreshNode {
            observation: node("n1", "dead").observation,
            excluded: false,
            control: Default::default(),
            cordon_managers: vec![],
            out_of_service_added: None,
        };
        let enforce = FreshPolicy { mode: Mode::Enforce, paused: false, generation: Some(3) };
        let good = LastLook {
            pod: Some(pod),
            node: Some(dead.clone()),
            lease_renewed: renewed,
            policy: Some(enforce),
        };
        let oos = {
            let mut n = dead.clone();
            n.observation.taints = vec!["node.kubernetes.io/out-of-service:NoExecute".into()];
            n
        };
        struct Row {
            case: &'static str,
            action: ForceDelete,
            look: LastLook<'static>,
            want: Result<(), &'static str>,
        }
        let row = |case, look, want| Row { case, action: fd.clone(), look, want };
        let table = vec![
            row("still applies", good.clone(), Ok(())),
            row("gone", LastLook { pod: None, ..good.clone() }, Err("pod already gone")),
            row(
                "replaced by a pod with the same name",
                LastLook { pod: Some(FreshPod { uid: Some("u2"), ..pod }), ..good.clone() },
                Err("a new pod with the same name replaced it; left alone"),
            ),
            row(
                "no longer Terminating",
                LastLook { pod: Some(FreshPod { terminating: false, ..pod }), ..good.clone() },
                Err("pod is no longer Terminating"),
            ),
            row(
                "moved",
                LastLook { pod: Some(FreshPod { node: "n2", ..pod }), ..good.clone() },
                Err("pod moved to node \"n2\""),
            ),
            row(
                "pod excluded since the plan",
                LastLook { pod: Some(FreshPod { excluded: true, ..pod }), ..good.clone() },
                Err("pod annotated remediator.io/exclude=true; left alone"),
            ),
            row(
                "policy switched to DryRun",
                LastLook {
                    policy: Some(FreshPolicy {
                        mode: Mode::DryRun,
                        generation: Some(4),
                        ..enforce
                    }),
                    ..good.clone()
                },
                Err("the policy is in DryRun now; nothing deleted"),
            ),
            row(
                "policy paused",
                LastLook {
                    policy: Some(FreshPolicy { paused: true, generation: Some(4), ..enforce }),
                    ..good.clone()
                },
                Err("the policy is paused now; nothing deleted"),
            ),
            row(
                "policy changed otherwise",
                LastLook {
                    policy: Some(FreshPolicy { generation: Some(4), ..enforce }),
                    ..good.clone()
                },
                Err("the policy changed since the plan; its next evaluation decides"),
            ),
            row(
                "policy deleted",
                LastLook { policy: None, ..good.clone() },
                Err("the policy was deleted"),
            ),
            row(
                "Lease renewed since the plan",
                LastLook { lease_renewed: Some(t(0, 1)), ..good.clone() },
                Err(
                    "the node's Lease was renewed since the plan (renewTime 2026-01-01T00:00:00Z -> \
                     2026-01-01T00:00:01Z): its kubelet is alive; left alone",
                ),
            ),
            row(
                "Lease appeared since the plan",
                LastLook { lease_renewed: None, ..good.clone() },
                Err(
                    "the node's Lease was renewed since the plan (renewTime 2026-01-01T00:00:00Z -> \
                     none): its kubelet is alive; left alone",
                ),
            ),
            row(
                "node Ready again",
                LastLook {
                    node: Some(FreshNode {
                        observation: node("n1", "ready").observation,
                        excluded: false,
                        control: Default::default(),
                        cordon_managers: vec![],
                        out_of_service_added: None,
                    }),
                    ..good.clone()
                },
                Err("node is Ready again; left alone"),
            ),
            row(
                "node excluded since the plan",
                LastLook {
                    node: Some(FreshNode { excluded: true, ..dead.clone() }),
                    ..good.clone()
                },
                Err("node annotated remediator.io/exclude=true; left alone"),
            ),
            row("node deleted: still dead", LastLook { node: None, ..good.clone() }, Ok(())),
            Row {
                case: "fencing still there",
                action: fenced.clone(),
                look: LastLook { node: Some(oos.clone()), ..good.clone() },
                want: Ok(()),
            },
            Row {
                case: "fencing gone since the plan",
                action: fenced.clone(),
                look: good.clone(),
                want: Err("fencing evidence (StatefulSet) no longer on the node; left alone"),
            },
            Row {
                case: "node deleted counts as fencing",
                action: fenced.clone(),
                look: LastLook { node: None, ..good.clone() },
                want: Ok(()),
            },
        ];
        let fencing = crate::crd::FencingSpec::default();
        for r in table {
            assert_eq!(
                r.action.recheck(&r.look, Some(3), &fencing),
                r.want.map_err(String::from),
                "{}",
                r.case
            );
        }
    }
}
