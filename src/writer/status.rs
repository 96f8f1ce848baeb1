//! The writer's status writes: the policy's status (merge patch of the status subresource),
//! with the `Pending` record of each request before it is sent
//! ([`crate::core::ahead::records_before_requests`]).

use kube::api::{Api, Patch, PatchParams};

use super::{FIELD_MANAGER, Writer};
use crate::crd::{RemediationPolicy, RemediationPolicyStatus};
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
