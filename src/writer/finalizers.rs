//! The writer's removal of allowlisted finalizers from a Terminating pod (`finalizers.removable`).
//! One JSON patch: it tests the pod's UID and its finalizers as the plan saw them, then sets the
//! rest, so a pod replaced or changed since the plan is left alone (the API server answers 422 and
//! the next plan decides). The policy is read fresh first, as before every write.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{FIELD_MANAGER, Sent, Writer};
use crate::core::{Action, RemoveFinalizers, Skip, ValidatedPolicy};
use crate::crd::{ActionResult, RemediationPolicy};
use crate::metrics::WriteKind;

impl Writer {
    /// The last look (fresh pod, node, Lease and policy), the safety kernel, then the JSON
    /// patch.
    pub(super) async fn remove_finalizers(
        &self,
        action: &Action,
        rf: &RemoveFinalizers,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> Sent {
        let pod = &rf.pod;
        if let Err(not_sent) = self.pod_last_look(action, pod, policy, validated).await {
            return not_sent;
        }
        if !self.may_write(WriteKind::PatchPod) {
            return (ActionResult::Failed, Some("not the leader: refused to patch".into()));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let patch: json_patch::Patch = match serde_json::from_value(json!([
            { "op": "test", "path": "/metadata/uid", "value": pod.uid },
            { "op": "test", "path": "/metadata/finalizers", "value": rf.current },
            { "op": "replace", "path": "/metadata/finalizers", "value": rf.remaining() },
        ])) {
            Ok(patch) => patch,
            Err(e) => return (ActionResult::Failed, Some(format!("building the patch: {e}"))),
        };
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        match pods.patch(&pod.name, &params, &Patch::<()>::Json(patch)).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some(Skip::PodGone.to_string()))
            }
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 409 => (
                ActionResult::Skipped,
                Some(format!(
                    "the pod or its finalizers changed since the plan; the next plan decides: {}",
                    s.message
                )),
            ),
            Err(e) => (ActionResult::Failed, Some(format!("patching the pod's finalizers: {e}"))),
        }
    }
}
