//! The writer's Events: on pods, nodes, workloads and the policy, through the one recorder; those
//! of actions a previous run took and did not record; and the reports about pods it does not act
//! on (yet): held for want of fencing, stuck on a live node, left Ready=False (one Event per pod
//! and cause, as the controller's memory decides).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use tracing::{debug, info, warn};

use super::{Writer, node};
use crate::adapters::kubelet_warnings;
use crate::core::rollouts::WorkloadRef;
use crate::core::{FencingNotice, PodNotice};
use crate::crd::{ActionResult, RecentAction, RemediationPolicy};
use crate::metrics::{ActionLabels, WriteKind};

/// The reference of an Event about a pod.
pub(crate) fn pod_reference(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: Some(uid.to_string()),
        ..ObjectReference::default()
    }
}

impl Writer {
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
        let reason = node::event_reason(record.action, record.mode, record.result);
        let action = record.action.as_str();
        let (reference, about) = if record.namespace.is_empty() {
            let node = ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(record.name.clone()),
                uid: Some(record.uid.clone()),
                ..ObjectReference::default()
            };
            (node, format!("node {}", record.name))
        } else {
            let pod = pod_reference(&record.namespace, &record.name, &record.uid);
            (pod, format!("pod {}/{}", record.namespace, record.name))
        };
        self.event(&reference, EventType::Warning, &reason, action, note.clone()).await;
        let policy_note = format!("{about}: {note}");
        self.policy_event_on(policy, reference, &reason, action, policy_note).await;
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
        let reference = ObjectReference {
            api_version: Some("apps/v1".into()),
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
        let api_version = match owner.kind.as_str() {
            "Job" => "batch/v1",
            _ => "apps/v1",
        };
        let workload = ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(owner.kind.clone()),
            namespace: Some(owner.namespace.clone()),
            name: Some(owner.name.clone()),
            ..ObjectReference::default()
        };
        self.event(&workload, EventType::Warning, on_owner, "Report", note).await;
    }

    /// A pod stuck on a live node or left Ready=False: a Warning Event on it naming the cause,
    /// the evidence and what the policy does about it.
    /// For a pod whose kubelet does not finish it, the kubelet's latest Warning Event about it
    /// is quoted: what the kubelet says it is waiting for.
    pub(super) async fn pod_notice_event(&self, policy: &str, notice: &PodNotice) {
        let mut note = format!("policy {policy}: {}", notice.note);
        if matches!(notice.cause, "KubeletNotFinishing" | "ContainersRunning")
            && let Some(quote) = latest_kubelet_warning(&self.client, notice).await
        {
            note.push_str(&format!(" The kubelet's latest warning: {quote}"));
        }
        let pod = pod_reference(&notice.namespace, &notice.pod, &notice.uid);
        self.event(&pod, EventType::Warning, notice.reason, notice.cause, note).await;
    }
}
