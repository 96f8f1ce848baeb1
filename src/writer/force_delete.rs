//! The writer's force delete of a pod stuck Terminating: the last look (fresh reads shared with
//! the plan's other force deletes on the same node, see [`SharedLooks`]), the safety kernel, then
//! a DELETE with grace 0 and a UID precondition; its Events once the plan's last action is
//! answered.

use futures::future::{BoxFuture, FutureExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::{Outcome, SharedLooks, Writer, last_look, pod_reference};
use crate::Error;
use crate::core::{Action, ForceDelete, ValidatedPolicy};
use crate::crd::{ActionKind, ActionResult, Mode, RecentAction, RemediationPolicy};
use crate::metrics::WriteKind;

impl Writer {
    /// The action, then (returned, to be awaited by the caller) its Events.
    pub(super) async fn execute_force_delete<'a>(
        &'a self,
        policy: &'a RemediationPolicy,
        validated: &ValidatedPolicy,
        fd: ForceDelete,
        now: &impl Fn() -> Timestamp,
        looks: &SharedLooks<'a>,
    ) -> (Outcome, BoxFuture<'a, ()>) {
        let kind = ActionKind::ForceDelete;
        let (policy_name, mode) = (&*policy.name_any(), validated.mode);
        let (result, detail) = match mode {
            Mode::DryRun => (ActionResult::WouldAct, None),
            Mode::Enforce => self.force_delete(&fd, policy, validated, looks).await,
        };
        let at = now();
        self.account(policy_name, mode, kind, result, fd.threshold, at);
        let workload_note = fd.blocks_rollout.as_ref().map(|workload| {
            let (reason, verb) = match (mode, result) {
                (Mode::DryRun, _) => ("WouldReleaseBlockingPod", "would force-delete"),
                (Mode::Enforce, ActionResult::Done) => ("ReleasedBlockingPod", "force-deleted"),
                (Mode::Enforce, _) => ("ReleaseBlockingPodSkipped", "did not force-delete"),
            };
            let note = format!(
                "[{}] policy {policy_name} {verb} pod {} to unblock this rollout: {}",
                mode.as_str(),
                fd.name,
                fd.reason
            );
            (workload.clone(), reason, note)
        });
        let fields = (fd.namespace.as_str(), fd.name.as_str(), fd.node.as_str());
        match result {
            ActionResult::Failed => warn!(
                policy = %policy_name, mode = mode.as_str(), action = "ForceDelete",
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                reason = %fd.reason, detail = detail.as_deref().unwrap_or(""), "action failed"
            ),
            _ => info!(
                policy = %policy_name, mode = mode.as_str(), action = "ForceDelete",
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                reason = %fd.reason, detail = detail.as_deref().unwrap_or(""),
                "{}", if mode == Mode::DryRun { "would force-delete pod" } else { "force-delete pod" }
            ),
        }
        let events = {
            let (fd, detail) = (fd.clone(), detail.clone());
            async move {
                self.force_delete_events(policy, mode, &fd, result, detail.as_deref()).await;
                if let Some((workload, reason, note)) = workload_note {
                    self.workload_event(&workload, EventType::Warning, reason, note).await;
                }
            }
            .boxed()
        };
        let outcome = Outcome {
            // A skip (the last look found the world changed) or a failure is not handled: the
            // next plan decides again from what it sees then.
            handled: result.counts_as_action(),
            acted_key: fd.uid.clone(),
            record: RecentAction {
                time: Time(at),
                action: ActionKind::ForceDelete,
                mode,
                namespace: fd.namespace.clone(),
                name: fd.name.clone(),
                uid: fd.uid.clone(),
                node: fd.node.clone(),
                owner: fd.owner.as_ref().map(|o| format!("{}/{}", o.kind, o.name)),
                reason: fd.reason.clone(),
                result,
                detail,
            },
        };
        (outcome, events)
    }

    /// The last look, then the request: fresh reads (never from a cache) of the pod, its node,
    /// the node's Lease and the policy, all at once (each shared with the force deletes on the
    /// same node whose last look starts within [`SHARED_LOOK_FOR`]: see [`SharedLooks`]); then,
    /// if the action still stands ([`ForceDelete::recheck`]), a DELETE with grace 0 and a UID
    /// precondition.
    async fn force_delete(
        &self,
        fd: &ForceDelete,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        looks: &SharedLooks<'_>,
    ) -> (ActionResult, Option<String>) {
        #[cfg(feature = "e2e-hooks")]
        self.hold_before_last_look(fd).await;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &fd.namespace);
        let (pod, node, fresh_policy) =
            tokio::join!(looks.pod(fd), looks.node(&fd.node), looks.policy());
        let pod = match pod {
            Ok(None) => return (ActionResult::Skipped, Some("pod already gone".into())),
            Ok(pod) => pod,
            Err(e) => return (ActionResult::Failed, Some(format!("last look: the pod: {e}"))),
        };
        let (node, lease) = match &*node {
            Ok(evidence) => evidence,
            Err(e) => return (ActionResult::Failed, Some(e.clone())),
        };
        let fresh_policy = match &*fresh_policy {
            Ok(policy) => policy,
            Err(e) => return (ActionResult::Failed, Some(e.clone())),
        };
        let look = last_look(pod.as_ref(), node.as_ref(), lease.as_ref(), fresh_policy.as_ref());
        if let Err(skip) = fd.recheck(&look, policy.metadata.generation, &validated.fencing) {
            return (ActionResult::Skipped, Some(skip));
        }
        let action = Action::ForceDelete(fd.clone());
        if let Err(refused) = self.kernel_admits(policy, validated, &action, &look, None).await {
            return refused;
        }
        let deleted = self.delete_pod(&pods, fd).await;
        #[cfg(feature = "e2e-hooks")]
        self.hold_after_delete(fd).await;
        deleted
    }

    /// DELETE with grace 0 and a UID precondition, if this replica leads.
    async fn delete_pod(
        &self,
        pods: &Api<Pod>,
        fd: &ForceDelete,
    ) -> (ActionResult, Option<String>) {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(fd.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if !self.may_write(WriteKind::DeletePod) {
            return (ActionResult::Failed, Some("not the leader: refused to delete".into()));
        }
        match pods.delete(&fd.name, &params).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some("pod already gone".into()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => (
                ActionResult::Skipped,
                Some(format!("UID precondition failed, the pod was replaced: {}", s.message)),
            ),
            Err(e) => {
                let err = Error::DeletePod {
                    namespace: fd.namespace.clone(),
                    name: fd.name.clone(),
                    source: e,
                };
                (ActionResult::Failed, Some(err.to_string()))
            }
        }
    }

    /// The Events of a force delete: on the pod, and on the policy about the pod.
    async fn force_delete_events(
        &self,
        policy: &RemediationPolicy,
        mode: Mode,
        fd: &ForceDelete,
        result: ActionResult,
        detail: Option<&str>,
    ) {
        let reason = match (mode, result) {
            (Mode::DryRun, _) => "WouldForceDelete",
            (Mode::Enforce, ActionResult::Done) => "ForceDeleted",
            (Mode::Enforce, ActionResult::Failed) => "ForceDeleteFailed",
            (Mode::Enforce, _) => "ForceDeleteSkipped",
        };
        let mut note = format!("[{}] policy {}: {}", mode.as_str(), policy.name_any(), fd.reason);
        if let Some(detail) = detail {
            note.push_str(&format!(" ({detail})"));
        }
        let reference = pod_reference(&fd.namespace, &fd.name, &fd.uid);
        let policy_note = format!("pod {}/{}: {note}", fd.namespace, fd.name);
        // Both at once.
        tokio::join!(
            self.event(&reference, EventType::Warning, reason, "ForceDelete", note),
            self.policy_event_on(policy, reference.clone(), reason, "ForceDelete", policy_note),
        );
    }
}
