//! The writer's eviction of a pod left Ready=False after a node blip (`staleReadiness`): the
//! Eviction API with a UID precondition, so PodDisruptionBudgets hold. A refusal by a budget
//! (429) is recorded as skipped (nothing was disrupted, so it spends no budget of ours), names
//! the budget, and waits its backoff (10 s doubling to 5 min) whatever else happens; never a
//! forced delete.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, EvictParams, Preconditions};
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::{Outcome, Writer, pod_reference};
use crate::core::{Action, Evict, ValidatedPolicy};
use crate::crd::{ActionKind, ActionResult, Mode, RecentAction, RemediationPolicy};
use crate::metrics::WriteKind;

impl Writer {
    /// Carries out (Enforce) or records (DryRun) one eviction, with its Event on the pod and on
    /// the policy, log line, metric and status record.
    pub(super) async fn execute_evict(
        &self,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        evict: Evict,
        now: &impl Fn() -> Timestamp,
    ) -> Outcome {
        let kind = ActionKind::Evict;
        let (policy_name, mode) = (&*policy.name_any(), validated.mode);
        let (result, detail) = match mode {
            Mode::DryRun => (ActionResult::WouldAct, None),
            Mode::Enforce => self.evict(&evict, policy, validated).await,
        };
        let at = now();
        self.account(policy_name, mode, kind, result, evict.threshold, at);
        let reason = match (mode, result) {
            (Mode::DryRun, _) => "WouldEvict",
            (Mode::Enforce, ActionResult::Done) => "Evicted",
            (Mode::Enforce, ActionResult::Failed) => "EvictFailed",
            (Mode::Enforce, _) => "EvictSkipped",
        };
        let mut note = format!("[{}] policy {policy_name}: {}", mode.as_str(), evict.reason);
        if let Some(detail) = &detail {
            note.push_str(&format!(" ({detail})"));
        }
        let reference = pod_reference(&evict.namespace, &evict.name, &evict.uid);
        self.event(&reference, EventType::Warning, reason, kind.as_str(), note.clone()).await;
        let policy_note = format!("pod {}/{}: {note}", evict.namespace, evict.name);
        self.policy_event_on(policy, reference, reason, kind.as_str(), policy_note).await;
        let fields = (evict.namespace.as_str(), evict.name.as_str(), evict.node.as_str());
        match result {
            ActionResult::Failed => warn!(
                policy = %policy_name, mode = mode.as_str(), action = kind.as_str(),
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                detail = detail.as_deref().unwrap_or(""), "eviction not done"
            ),
            _ => info!(
                policy = %policy_name, mode = mode.as_str(), action = kind.as_str(),
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                detail = detail.as_deref().unwrap_or(""),
                "{}", if mode == Mode::DryRun { "would evict pod" } else { "evict pod" }
            ),
        }
        Outcome {
            handled: result.counts_as_action(),
            acted_key: evict.uid.clone(),
            record: RecentAction {
                time: Time(at),
                action: kind,
                mode,
                namespace: evict.namespace.clone(),
                name: evict.name.clone(),
                uid: evict.uid.clone(),
                node: evict.node.clone(),
                owner: evict.owner.as_ref().map(|o| format!("{}/{}", o.kind, o.name)),
                reason: evict.reason.clone(),
                result,
                detail,
            },
        }
    }

    /// The last look (fresh pod, node, Lease and policy), the safety kernel, then the
    /// eviction with a UID precondition.
    async fn evict(
        &self,
        evict: &Evict,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> (ActionResult, Option<String>) {
        let reads = match self
            .look_at_pod(&evict.namespace, &evict.name, &evict.node, &policy.name_any())
            .await
        {
            Ok(reads) => reads,
            Err(failed) => return failed,
        };
        let look = reads.look();
        if let Err(skip) = evict.recheck(&look, policy.metadata.generation) {
            return (ActionResult::Skipped, Some(skip));
        }
        let action = Action::Evict(evict.clone());
        if let Err(refused) = self.kernel_admits(policy, validated, &action, &look, None).await {
            return refused;
        }
        if !self.may_write(WriteKind::EvictPod) {
            return (ActionResult::Failed, Some("not the leader: refused to evict".into()));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &evict.namespace);
        let params = EvictParams {
            delete_options: Some(DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(evict.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            }),
            ..EvictParams::default()
        };
        match pods.evict(&evict.name, &params).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 429 => {
                (ActionResult::Skipped, Some(format!("{}; {}", refusal(&s), RETRY_NOTE)))
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some("pod already gone".into()))
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
