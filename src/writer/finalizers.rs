//! The writer's removal of allowlisted finalizers from a Terminating pod (`finalizers.removable`).
//! One JSON patch: it tests the pod's UID and its finalizers as the plan saw them, then sets the
//! rest, so a pod replaced or changed since the plan is left alone (the API server answers 422 and
//! the next plan decides). The policy is read fresh first, as before every write.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{info, warn};

use super::{FIELD_MANAGER, Outcome, Writer, pod_reference};
use crate::core::{Action, RemoveFinalizers, ValidatedPolicy};
use crate::crd::{ActionKind, ActionResult, Mode, RecentAction, RemediationPolicy};
use crate::metrics::WriteKind;

impl Writer {
    /// Carries out (Enforce) or records (DryRun) one removal, with its Event on the pod and on
    /// the policy, log line, metric and status record.
    pub(super) async fn execute_remove_finalizers(
        &self,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        rf: RemoveFinalizers,
        now: &impl Fn() -> Timestamp,
    ) -> Outcome {
        let kind = ActionKind::RemoveFinalizers;
        let (policy_name, mode) = (&*policy.name_any(), validated.mode);
        let (result, detail) = match mode {
            Mode::DryRun => (ActionResult::WouldAct, None),
            Mode::Enforce => self.remove_finalizers(&rf, policy, validated).await,
        };
        let at = now();
        self.account(policy_name, mode, kind, result, rf.threshold, at);
        let reason = match (mode, result) {
            (Mode::DryRun, _) => "WouldRemoveFinalizers",
            (Mode::Enforce, ActionResult::Done) => "RemovedFinalizers",
            (Mode::Enforce, ActionResult::Failed) => "RemoveFinalizersFailed",
            (Mode::Enforce, _) => "RemoveFinalizersSkipped",
        };
        let mut note = format!(
            "[{}] policy {policy_name}: finalizer(s) {}: {}",
            mode.as_str(),
            rf.remove.join(", "),
            rf.reason
        );
        if let Some(detail) = &detail {
            note.push_str(&format!(" ({detail})"));
        }
        let reference = pod_reference(&rf.namespace, &rf.name, &rf.uid);
        self.event(&reference, EventType::Warning, reason, kind.as_str(), note.clone()).await;
        let policy_note = format!("pod {}/{}: {note}", rf.namespace, rf.name);
        self.policy_event_on(policy, reference, reason, kind.as_str(), policy_note).await;
        let fields = (rf.namespace.as_str(), rf.name.as_str(), rf.node.as_str());
        let removed = rf.remove.join(",");
        match result {
            ActionResult::Failed => warn!(
                policy = %policy_name, mode = mode.as_str(), action = kind.as_str(),
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                finalizers = %removed, detail = detail.as_deref().unwrap_or(""), "action failed"
            ),
            _ => info!(
                policy = %policy_name, mode = mode.as_str(), action = kind.as_str(),
                result = result.as_str(), namespace = fields.0, pod = fields.1, node = fields.2,
                finalizers = %removed, detail = detail.as_deref().unwrap_or(""),
                "{}", if mode == Mode::DryRun { "would remove finalizers" } else { "remove finalizers" }
            ),
        }
        Outcome {
            handled: result.counts_as_action(),
            acted_key: rf.acted_key(),
            record: RecentAction {
                time: Time(at),
                action: kind,
                mode,
                namespace: rf.namespace.clone(),
                name: rf.name.clone(),
                uid: rf.uid.clone(),
                node: rf.node.clone(),
                owner: rf.owner.as_ref().map(|o| format!("{}/{}", o.kind, o.name)),
                reason: format!("removed {}: {}", rf.remove.join(", "), rf.reason),
                result,
                detail,
            },
        }
    }

    /// The last look (fresh pod, node, Lease and policy), the safety kernel, then the JSON
    /// patch.
    async fn remove_finalizers(
        &self,
        rf: &RemoveFinalizers,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> (ActionResult, Option<String>) {
        let reads =
            match self.look_at_pod(&rf.namespace, &rf.name, &rf.node, &policy.name_any()).await {
                Ok(reads) => reads,
                Err(failed) => return failed,
            };
        let look = reads.look();
        if let Err(skip) = rf.recheck(&look, policy.metadata.generation) {
            return (ActionResult::Skipped, Some(skip));
        }
        let action = Action::RemoveFinalizers(rf.clone());
        if let Err(refused) = self.kernel_admits(policy, validated, &action, &look, None).await {
            return refused;
        }
        if !self.may_write(WriteKind::PatchPod) {
            return (ActionResult::Failed, Some("not the leader: refused to patch".into()));
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &rf.namespace);
        let patch: json_patch::Patch = match serde_json::from_value(json!([
            { "op": "test", "path": "/metadata/uid", "value": rf.uid },
            { "op": "test", "path": "/metadata/finalizers", "value": rf.current },
            { "op": "replace", "path": "/metadata/finalizers", "value": rf.remaining() },
        ])) {
            Ok(patch) => patch,
            Err(e) => return (ActionResult::Failed, Some(format!("building the patch: {e}"))),
        };
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..PatchParams::default() };
        match pods.patch(&rf.name, &params, &Patch::<()>::Json(patch)).await {
            Ok(_) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some("pod already gone".into()))
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
