//! The writer's marking of a pod left Ready=True on a dead node (`readyOnDeadNode.markNotReady`):
//! the last look (fresh reads of the pod, its node, the node's Lease and the policy) and the safety
//! kernel, then a strategic merge patch of the pod's status setting its `Ready` condition False,
//! carrying the UID and resourceVersion of the pod the kernel was shown, so it lands on that pod
//! as it was read or not at all. `ContainersReady` is the kubelet's and is left as it is, as the
//! node lifecycle controller leaves it.

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};

use super::{FIELD_MANAGER, Sent, Writer};
use crate::core::{Action, MarkNotReady, NOT_READY_REASON, Skip, ValidatedPolicy};
use crate::crd::{ActionResult, RemediationPolicy};
use crate::metrics::WriteKind;

impl Writer {
    /// The last look, the safety kernel, then the status patch.
    pub(super) async fn mark_not_ready(
        &self,
        action: &Action,
        mark: &MarkNotReady,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> Sent {
        let (_admitted, read) =
            match self.pod_last_look_read(action, &mark.pod, policy, validated).await {
                Ok(admitted) => admitted,
                Err(not_sent) => return not_sent,
            };
        // Admitted on a fresh read of the pod: the kernel saw it, so it is there.
        let Some(read) = read else {
            return (ActionResult::Skipped, Some(Skip::PodGone.to_string()));
        };
        if !self.may_write(WriteKind::PatchPodStatus) {
            return (
                ActionResult::Failed,
                Some("not the leader: refused to write the pod's status".into()),
            );
        }
        let patch = not_ready_patch(mark, &read, &policy.name_any());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &mark.pod.namespace);
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        match pods.patch_status(&mark.pod.name, &params, &Patch::Strategic(&patch)).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some(Skip::PodGone.to_string()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => (
                ActionResult::Skipped,
                Some(format!(
                    "the pod changed since the last look (not marked); the next plan decides: {}",
                    s.message
                )),
            ),
            Err(e) => {
                (ActionResult::Failed, Some(format!("writing the pod's Ready condition: {e}")))
            }
        }
    }
}

/// The status patch: the `Ready` condition False with our reason, on the pod as read.
pub(super) fn not_ready_patch(mark: &MarkNotReady, read: &Pod, policy: &str) -> Pod {
    let condition = PodCondition {
        type_: "Ready".into(),
        status: "False".into(),
        reason: Some(NOT_READY_REASON.into()),
        message: Some(mark.message(policy)),
        last_transition_time: Some(Time(crate::clock::now())),
        ..PodCondition::default()
    };
    Pod {
        metadata: ObjectMeta {
            uid: read.metadata.uid.clone(),
            resource_version: read.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        },
        status: Some(PodStatus { conditions: Some(vec![condition]), ..PodStatus::default() }),
        ..Pod::default()
    }
}
