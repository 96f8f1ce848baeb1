//! The writer's Events: on pods, nodes, workloads and the policy, through the one recorder; those
//! of actions a previous run took and did not record; and the reports about pods it does not act
//! on (yet): held for want of fencing, stuck on a live node, left Ready=False (one Event per pod
//! and cause, as the controller's memory decides).

use k8s_openapi::Resource as _;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::Writer;
use crate::adapters::kubelet_warnings;
use crate::core::action::kinds::event_reason;
use crate::core::observed::WorkloadKind;
use crate::core::rollouts::WorkloadRef;
use crate::core::{FencingNotice, NODE_LEFT_ALONE, NodeNotice, PodNotice};
use crate::crd::{ActionResult, RecentAction, RemediationPolicy};
use crate::metrics::{ActionLabels, WriteKind};

/// The reference of an Event about a pod.
pub(crate) fn pod_reference(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(Pod::API_VERSION.into()),
        kind: Some(Pod::KIND.into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..ObjectReference::default()
    }
}

/// The reference of an Event about what an action or its record names: a pod, or a node (no
/// namespace).
pub(crate) fn reference(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    if !namespace.is_empty() {
        return pod_reference(namespace, name, uid);
    }
    ObjectReference {
        api_version: Some(Node::API_VERSION.into()),
        kind: Some(Node::KIND.into()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..ObjectReference::default()
    }
}

/// What an action or its record names, as the policy's Events say it: `pod ns/name`, `node n`.
pub(crate) fn about(namespace: &str, name: &str) -> String {
    if namespace.is_empty() { format!("node {name}") } else { format!("pod {namespace}/{name}") }
}

/// The apiVersion of a pod's owner by its kind (ReplicaSet, StatefulSet, Job).
fn owner_api_version(kind: &str) -> &'static str {
    match kind {
        "Job" => Job::API_VERSION,
        "StatefulSet" => StatefulSet::API_VERSION,
        _ => ReplicaSet::API_VERSION,
    }
}

impl Writer {
    /// The Events of one action: on its pod or node, and on the policy about it; both at once.
    pub(super) async fn action_events(
        &self,
        policy: &RemediationPolicy,
        reference: ObjectReference,
        (reason, action): (&str, &str),
        note: String,
        policy_note: String,
    ) {
        tokio::join!(
            self.event(&reference, EventType::Warning, reason, action, note),
            self.policy_event_on(policy, reference.clone(), reason, action, policy_note),
        );
    }

    /// The Events, log line and metric of an action a previous run took and did not record,
    /// found done now ([`crate::core::resolve_pending`]).
    pub(super) async fn resolved_events(&self, policy: &RemediationPolicy, record: &RecentAction) {
        if record.result != ActionResult::Done {
            return;
        }
        let policy_name = policy.name_any();
        self.metrics
            .actions
            .get_or_create(&ActionLabels {
                policy: policy_name.clone(),
                action: record.action,
                mode: record.mode,
                result: record.result,
            })
            .inc();
        let note = format!(
            "[{}] policy {policy_name}: {} ({})",
            record.mode.as_str(),
            record.reason,
            record.detail.as_deref().unwrap_or_default()
        );
        let reason = event_reason(record.action, record.mode, record.result);
        let action = record.action.as_str();
        let reference = reference(&record.namespace, &record.name, &record.uid);
        let policy_note = format!("{}: {note}", about(&record.namespace, &record.name));
        self.action_events(policy, reference, (reason, action), note, policy_note).await;
        info!(
            policy = %policy_name, action, result = record.result.as_str(),
            namespace = %record.namespace, name = %record.name,
            "action of a previous run found done"
        );
    }

    /// Publishes an Event on a Deployment or StatefulSet.
    pub async fn workload_event(
        &self,
        workload: &WorkloadRef,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let api_version = match workload.kind {
            WorkloadKind::Deployment => Deployment::API_VERSION,
            WorkloadKind::StatefulSet => StatefulSet::API_VERSION,
        };
        let reference = ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(workload.kind.as_str().into()),
            namespace: Some(workload.namespace.clone()),
            name: Some(workload.name.clone()),
            uid: Some(workload.uid.clone()),
            ..ObjectReference::default()
        };
        self.event(&reference, type_, reason, "Report", note).await;
    }

    /// Publishes an Event on the policy.
    pub async fn policy_event(
        &self,
        policy: &RemediationPolicy,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let reference = policy.object_ref(&());
        self.event_about(&reference, None, type_, reason, action, note).await;
    }

    /// Publishes an Event on the policy about one object it acted on (its `related`). Events
    /// with the same reason on the same object are merged into one series that keeps the first
    /// note; naming the pod or node in `related` keeps each action's Event on the policy apart.
    pub async fn policy_event_on(
        &self,
        policy: &RemediationPolicy,
        related: ObjectReference,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let reference = policy.object_ref(&());
        self.event_about(&reference, Some(related), EventType::Warning, reason, action, note).await;
    }

    pub(crate) async fn event(
        &self,
        reference: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.event_about(reference, None, type_, reason, action, note).await;
    }

    async fn event_about(
        &self,
        reference: &ObjectReference,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        mut note: String,
    ) {
        if !self.may_write(WriteKind::Event) {
            debug!(reason, "not the leader: Event not published");
            return;
        }
        // The Events API limits notes to 1 kB.
        if note.len() > 1000 {
            let mut cut = 990;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
            note.push_str(" …");
        }
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&event, reference).await {
            warn!(error = %e, reason, "cannot publish Event");
        }
    }
}

/// The kubelet's latest Warning Event about the notice's pod, quoted briefly; `None` when there
/// is none or the read fails (the report goes out without it).
async fn latest_kubelet_warning(client: &kube::Client, notice: &PodNotice) -> Option<String> {
    kubelet_warnings(client, &notice.namespace, &notice.uid).await.ok()?.into_iter().next()
}

impl Writer {
    /// A pod held for want of fencing, or by a finalizer nobody removes: an Event on it and on
    /// its owner, saying what is missing.
    pub(super) async fn fencing_events(&self, policy: &str, notice: &FencingNotice) {
        let note = format!("policy {policy}: {}", notice.note);
        let pod = pod_reference(&notice.namespace, &notice.pod, &notice.uid);
        let (on_pod, on_owner) = notice.reasons;
        self.event(&pod, EventType::Warning, on_pod, "Report", note.clone()).await;
        let Some(owner) = &notice.owner else { return };
        let workload = ObjectReference {
            api_version: Some(owner_api_version(&owner.kind).into()),
            kind: Some(owner.kind.clone()),
            namespace: Some(owner.namespace.clone()),
            name: Some(owner.name.clone()),
            ..ObjectReference::default()
        };
        self.event(&workload, EventType::Warning, on_owner, "Report", note).await;
    }

    /// A pod stuck on a live node or left Ready=False: a Warning Event on it naming the cause,
    /// the evidence and what the policy does about it. A pod the staleReadiness rule waited on
    /// that its kubelet repaired: a Normal Event saying how long the rule waited and why.
    /// For a pod whose kubelet does not finish it, the kubelet's latest Warning Event about it
    /// is quoted: what the kubelet says it is waiting for.
    pub(super) async fn pod_notice_event(&self, policy: &str, notice: &PodNotice) {
        let mut note = format!("policy {policy}: {}", notice.note);
        if notice.quote_kubelet
            && let Some(quote) = latest_kubelet_warning(&self.client, notice).await
        {
            note.push_str(&format!(" The kubelet's latest warning: {quote}"));
        }
        let pod = pod_reference(&notice.namespace, &notice.pod, &notice.uid);
        let type_ = if notice.warning { EventType::Warning } else { EventType::Normal };
        if !notice.warning {
            info!(policy, pod = %format!("{}/{}", notice.namespace, notice.pod), reason = notice.reason, "{}", notice.note);
        }
        self.event(&pod, type_, notice.reason, notice.cause, note).await;
    }

    /// A dead node left alone (in maintenance, shutting down, another tool's): a Normal Event on
    /// it, reason `NodeLeftAlone`, naming what holds it. Once per node and episode.
    pub(super) async fn node_notice_event(&self, policy: &str, notice: &NodeNotice) {
        let note = format!("policy {policy}: {}", notice.note);
        let node = reference("", &notice.node, &notice.uid);
        self.event(&node, EventType::Normal, NODE_LEFT_ALONE, notice.code, note).await;
        info!(policy, node = %notice.node, hold = notice.code, "dead node left alone");
    }
}
