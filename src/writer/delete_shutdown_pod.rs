//! The writer's DELETE of a pod left Failed by a graceful node shutdown (`failedByShutdown`):
//! the last look, then a normal DELETE (no grace period given: the pod is Failed already, so
//! the API server removes it at once) with a UID precondition ([`Writer::delete_pod`]).

use super::{Sent, Writer};
use crate::core::{Action, DeleteShutdownPod, ValidatedPolicy};
use crate::crd::RemediationPolicy;

impl Writer {
    /// The last look (fresh pod, node, Lease and policy), the safety kernel, then the DELETE.
    pub(super) async fn delete_shutdown_pod(
        &self,
        action: &Action,
        delete: &DeleteShutdownPod,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> Sent {
        let pod = &delete.pod;
        let admitted = match self.pod_last_look(action, pod, policy, validated).await {
            Ok(admitted) => admitted,
            Err(not_sent) => return not_sent,
        };
        self.delete_pod(&admitted, pod, None).await
    }
}
