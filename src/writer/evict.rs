//! The writer's eviction of a pod left Ready=False after a node blip (`staleReadiness`): the
//! Eviction API with a UID precondition, so PodDisruptionBudgets hold. A refusal by a budget
//! (429) is recorded as skipped (nothing was disrupted, so it spends no budget of ours), names
//! the budget, and waits its backoff (10 s doubling to 5 min) whatever else happens; never a
//! forced delete.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, EvictParams, Preconditions};

use super::{Sent, Writer};
use crate::core::{Action, Evict, Skip, ValidatedPolicy};
use crate::crd::{ActionResult, RemediationPolicy};
use crate::metrics::WriteKind;

impl Writer {
    /// The last look (fresh pod, node, Lease and policy), the safety kernel, then the
    /// eviction with a UID precondition.
    pub(super) async fn evict(
        &self,
        action: &Action,
        evict: &Evict,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> Sent {
        let pod = &evict.pod;
        if let Err(not_sent) = self.pod_last_look(action, pod, policy, validated).await {
            return not_sent;
        }
        if !self.may_write(WriteKind::EvictPod) {
            return (ActionResult::Failed, Some("not the leader: refused to evict".into()));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let params = EvictParams {
            delete_options: Some(DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(pod.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        };
        match pods.evict(&pod.name, &params).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 429 => {
                (ActionResult::Skipped, Some(format!("{}; {}", refusal(&s), RETRY_NOTE)))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some(Skip::PodGone.to_string()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => (
                ActionResult::Skipped,
                Some(format!("UID precondition failed, the pod was replaced: {}", s.message)),
            ),
            Err(e) => (ActionResult::Failed, Some(format!("evicting the pod: {e}"))),
        }
    }
}

/// How a refused eviction is tried again.
const RETRY_NOTE: &str = "tried again after a backoff (10 s, doubling up to 5 min)";

/// Why the API server refused an eviction (429), naming the PodDisruptionBudget from the
/// answer's causes when it says (`The disruption budget web needs 2 healthy pods and has 2
/// currently`).
fn refusal(status: &kube::core::Status) -> String {
    let budgets: Vec<&str> = status
        .details
        .iter()
        .flat_map(|d| &d.causes)
        .filter(|c| c.reason == "DisruptionBudget")
        .map(|c| c.message.as_str())
        .collect();
    if budgets.is_empty() {
        format!("refused by a PodDisruptionBudget: {}", status.message)
    } else {
        format!("refused by a PodDisruptionBudget: {}", budgets.join("; "))
    }
}
