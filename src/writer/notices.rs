//! The writer's reports about pods it does not act on (yet): held for want of fencing, stuck on a
//! live node. One Event per pod and cause, as the controller's memory decides.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;

use super::{Writer, pod_reference};
use crate::adapters::kubelet_warnings;
use crate::core::{FencingNotice, PodNotice};

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
