//! The writer's marking of a pod left Ready=True on a dead node (`readyOnDeadNode.markNotReady`):
//! the last look (fresh reads of the pod, its node, the node's Lease and the policy) and the safety
//! kernel, then a strategic merge patch of the pod's status setting its `Ready` condition False,
//! carrying the UID and resourceVersion of the pod the kernel was shown, so it lands on that pod
//! as it was read or not at all. `ContainersReady` is the kubelet's and is left as it is, as the
//! node lifecycle controller leaves it.

use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::{Sent, Writer};
use crate::core::{Action, MarkNotReady, NOT_READY_REASON, Skip, ValidatedPolicy};
use crate::crd::{ActionResult, RemediationPolicy};

impl Writer {
    /// The last look, the safety kernel, then the status patch.
    pub(super) async fn mark_not_ready(
        &self,
        action: &Action,
        mark: &MarkNotReady,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> Sent {
        let (admitted, read) =
            match self.pod_last_look_read(action, &mark.pod, policy, validated).await {
                Ok(admitted) => admitted,
                Err(not_sent) => return not_sent,
            };
        // Admitted on a fresh read of the pod: the kernel saw it, so it is there.
        let Some(read) = read else {
            return (ActionResult::Skipped, Some(Skip::PodGone.to_string()));
        };
        let status = not_ready_status(mark, &policy.name_any());
        let change = ("Ready condition", "not marked");
        self.patch_pod_status(&admitted, &mark.pod, &read, status, change).await
    }
}

/// The status written: the `Ready` condition False with our reason, nothing else.
fn not_ready_status(mark: &MarkNotReady, policy: &str) -> PodStatus {
    let condition = PodCondition {
        type_: "Ready".into(),
        status: "False".into(),
        reason: Some(NOT_READY_REASON.into()),
        message: Some(mark.message(policy)),
        last_transition_time: Some(Time(crate::clock::now())),
        ..PodCondition::default()
    };
    PodStatus { conditions: Some(vec![condition]), ..PodStatus::default() }
}
