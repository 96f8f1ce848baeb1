//! The writer's force delete of a pod stuck Terminating: the last look (fresh reads shared with
//! the plan's other force deletes on the same node, see [`SharedLooks`]); once the safety kernel
//! admits it, the pod's `DisruptionTarget` condition (and on a dead node the phase `Failed`), as
//! PodGC writes them, through the status subresource and conditional on the resourceVersion the
//! last look read; then a DELETE with grace 0 and a UID precondition. Two writes per pod at
//! most, one when the pod carries the condition (and a terminal phase) already.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use super::{Admitted, FIELD_MANAGER, Sent, SharedLooks, Writer, last_look};
use crate::Error;
use crate::core::{
    Action, DISRUPTION_REASON, DISRUPTION_TARGET, DisruptionWrite, ForceDelete, PodPhaseNow,
    PodTarget, Skip, ValidatedPolicy,
};
use crate::crd::{ActionResult, RemediationPolicy};
use crate::metrics::WriteKind;

impl Writer {
    /// The last look, then the request: fresh reads (never from a cache) of the pod, its node,
    /// the node's Lease and the policy, all at once (each shared with the force deletes on the
    /// same node whose last look starts within [`super::SHARED_LOOK_FOR`]); then, if the action
    /// still stands and the safety kernel admits it ([`Writer::admits`]), a DELETE with grace 0
    /// and a UID precondition.
    pub(super) async fn force_delete(
        &self,
        action: &Action,
        fd: &ForceDelete,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        looks: &SharedLooks<'_>,
    ) -> Sent {
        #[cfg(feature = "e2e-hooks")]
        self.hold_before_last_look(&fd.pod).await;
        let (pod, node, fresh_policy) =
            tokio::join!(looks.pod(&fd.pod), looks.node(&fd.pod.node), looks.policy());
        let pod = match pod {
            Ok(None) => return (ActionResult::Skipped, Some(Skip::PodGone.to_string())),
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
        let admitted = match self.admits(policy, validated, action, &look, None).await {
            Ok(admitted) => admitted,
            Err(not_sent) => return not_sent,
        };
        // Admitted on a fresh read of the pod (the kernel checked its UID): say why it goes.
        if let Some(pod) = &pod
            && let Some(write) = fd.disruption_write(phase_now(pod))
            && let Err(not_sent) =
                self.mark_disruption(&admitted, fd, pod, write, &policy.name_any()).await
        {
            return not_sent;
        }
        let deleted = self.delete_pod(&admitted, &fd.pod, Some(0)).await;
        #[cfg(feature = "e2e-hooks")]
        self.hold_after_delete(&fd.pod).await;
        deleted
    }

    /// The status write before the DELETE: a strategic merge patch of the status subresource
    /// carrying the UID and resourceVersion of the pod the kernel admitted, so it lands on that
    /// pod as it was read or not at all (409). `Err` is the result to record: the DELETE is then
    /// not sent either, and the next plan decides.
    async fn mark_disruption(
        &self,
        admitted: &Admitted,
        fd: &ForceDelete,
        read: &Pod,
        write: DisruptionWrite,
        policy: &str,
    ) -> std::result::Result<(), Sent> {
        let condition = PodCondition {
            type_: DISRUPTION_TARGET.into(),
            status: "True".into(),
            reason: Some(DISRUPTION_REASON.into()),
            message: Some(fd.disruption_message(policy)),
            last_transition_time: Some(Time(crate::clock::now())),
            ..PodCondition::default()
        };
        let status = PodStatus {
            phase: write.fail.then(|| "Failed".into()),
            conditions: write.condition.then(|| vec![condition]),
            ..PodStatus::default()
        };
        let change = ("DisruptionTarget condition", "DisruptionTarget not written, not deleted");
        match self.patch_pod_status(admitted, &fd.pod, read, status, change).await {
            (ActionResult::Done, _) => Ok(()),
            not_done => Err(not_done),
        }
    }

    /// A strategic merge patch of the status subresource of the pod the kernel admitted,
    /// carrying its UID and resourceVersion as read, so it lands on that pod as it was read or
    /// not at all (409), if this replica leads. `change`: what it writes ("Ready condition") and
    /// what is left undone when the pod changed meanwhile.
    pub(super) async fn patch_pod_status(
        &self,
        _admitted: &Admitted,
        pod: &PodTarget,
        read: &Pod,
        status: PodStatus,
        (what, undone): (&str, &str),
    ) -> Sent {
        let patch = Pod {
            metadata: ObjectMeta {
                uid: read.metadata.uid.clone(),
                resource_version: read.metadata.resource_version.clone(),
                ..ObjectMeta::default()
            },
            status: Some(status),
            ..Pod::default()
        };
        if !self.may_write(WriteKind::PatchPodStatus) {
            return (
                ActionResult::Failed,
                Some("not the leader: refused to write the pod's status".into()),
            );
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        match pods.patch_status(&pod.name, &params, &Patch::Strategic(&patch)).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some(Skip::PodGone.to_string()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => (
                ActionResult::Skipped,
                Some(format!(
                    "the pod changed since the last look ({undone}); the next plan decides: {}",
                    s.message
                )),
            ),
            Err(e) => (ActionResult::Failed, Some(format!("writing the pod's {what}: {e}"))),
        }
    }

    /// DELETE with a UID precondition, if this replica leads: with grace 0 (a force delete),
    /// or with none given (`None`: the pod's own, which the API server makes 0 for a pod
    /// already Failed or Succeeded).
    pub(super) async fn delete_pod(
        &self,
        _admitted: &Admitted,
        pod: &PodTarget,
        grace_seconds: Option<u32>,
    ) -> Sent {
        let params = DeleteParams {
            grace_period_seconds: grace_seconds,
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        if !self.may_write(WriteKind::DeletePod) {
            return (ActionResult::Failed, Some("not the leader: refused to delete".into()));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        match pods.delete(&pod.name, &params).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some(Skip::PodGone.to_string()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => (
                ActionResult::Skipped,
                Some(format!("UID precondition failed, the pod was replaced: {}", s.message)),
            ),
            Err(e) => {
                let err = Error::DeletePod {
                    namespace: pod.namespace.clone(),
                    name: pod.name.clone(),
                    source: e,
                };
                (ActionResult::Failed, Some(err.to_string()))
            }
        }
    }
}

/// The pod's phase and whether it carries `DisruptionTarget` True, as read.
fn phase_now(pod: &Pod) -> PodPhaseNow<'_> {
    let status = pod.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
    PodPhaseNow {
        phase: status.and_then(|s| s.phase.as_deref()),
        disruption_target: conditions
            .iter()
            .any(|c| c.type_ == DISRUPTION_TARGET && c.status == "True"),
    }
}
