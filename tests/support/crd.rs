//! Installs the `RemediationPolicy` CRD on the test control plane, the way `kubectl apply
//! --server-side` or Helm would, from the Rust types themselves.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::{CustomResourceExt, ResourceExt};
use kube_remediator::crd::RemediationPolicy;

use super::wait_for;

/// The field manager of the tests' server-side apply of the CRD.
pub const FIELD_MANAGER: &str = "kube-remediator-e2e";

/// Applies the `RemediationPolicy` CRD (server-side apply, forced) and waits until the API
/// server reports it Established.
///
/// Idempotent and safe to call from several tests at once: every caller applies the same object
/// with the same field manager, so the apply is a no-op after the first one. Two applies racing
/// to create the object can make the loser see a 409 (AlreadyExists or a conflict): it is
/// retried, and is then an update like any other. Any other error fails at once.
pub async fn install_crd(client: &kube::Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = RemediationPolicy::crd();
    let name = crd.name_any();
    let params = PatchParams::apply(FIELD_MANAGER).force();

    // Errors other than a lost creation race (an invalid CRD, say) fail at once.
    let mut attempts = 0;
    loop {
        match crds.patch(&name, &params, &Patch::Apply(&crd)).await {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 409 && attempts < 20 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("applying CRD {name}")),
        }
    }

    wait_for(&format!("CRD {name} to be Established"), Duration::from_secs(30), || {
        let (crds, name) = (&crds, &name);
        async move {
            let crd = crds.get(name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        }
    })
    .await
}
