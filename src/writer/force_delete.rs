//! The writer's force delete of a pod stuck Terminating: the last look (fresh reads shared with
//! the plan's other force deletes on the same node, see [`SharedLooks`]), then a DELETE with
//! grace 0 and a UID precondition.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Preconditions};

use super::{Sent, SharedLooks, Writer, last_look};
use crate::Error;
use crate::core::{Action, ForceDelete, PodTarget, Skip, ValidatedPolicy};
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
        if let Err(not_sent) = self.admits(policy, validated, action, &look, None).await {
            return not_sent;
        }
        let deleted = self.delete_pod(&fd.pod).await;
        #[cfg(feature = "e2e-hooks")]
        self.hold_after_delete(&fd.pod).await;
        deleted
    }

    /// DELETE with grace 0 and a UID precondition, if this replica leads.
    async fn delete_pod(&self, pod: &PodTarget) -> Sent {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
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
