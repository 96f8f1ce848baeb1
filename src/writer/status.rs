//! The writer's status writes: the policy's status (merge patch of the status subresource), and
//! the `Pending` record of each request, written before it is sent.

use jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};

use super::{FIELD_MANAGER, Writer};
use crate::core::Action;
use crate::crd::{RecentAction, RemediationPolicy, RemediationPolicyStatus};
use crate::metrics::WriteKind;
use crate::{Error, Result};

impl Writer {
    /// Writes a policy's status (merge patch of the status subresource).
    pub async fn patch_status(&self, name: &str, status: &RemediationPolicyStatus) -> Result<()> {
        self.write_status(name, status).await.map(drop)
    }

    /// [`Writer::patch_status`], returning the policy as the API server holds it after the write.
    pub(super) async fn write_status(
        &self,
        name: &str,
        status: &RemediationPolicyStatus,
    ) -> Result<RemediationPolicy> {
        if !self.may_write(WriteKind::PatchStatus) {
            return Err(Error::NotLeader { operation: "write a policy status" });
        }
        let api: Api<RemediationPolicy> = Api::all(self.client.clone());
        let patch = serde_json::json!({ "status": status });
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        api.patch_status(name, &params, &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::PatchStatus { name: name.to_string(), source })
    }
}

/// The record of an action about to be sent (Enforce), replaced by its outcome's.
pub(super) fn pending_record(action: &Action, at: Timestamp) -> RecentAction {
    action.pending_record(at, "being sent: recorded before the request".into())
}
