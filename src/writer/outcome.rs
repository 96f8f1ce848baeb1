//! What every action leaves, whatever its kind, once it is carried out (Enforce) or recorded
//! (DryRun): a metric, a log line, an Event on its pod or node and one on the policy, and a
//! status record. Written once here for every action; the words come from the action's
//! [`Act`] implementation and its kind's row of [`kinds::spec`](crate::core::action::kinds).

use futures::future::{BoxFuture, FutureExt};
use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::events::EventType;
use tracing::{info, warn};

use super::events::about;
use super::{Outcome, Writer, reference};
use crate::core::action::kinds::{event_reason, log_message};
use crate::core::{Act, Action, Target};
use crate::crd::{ActionResult, Mode, RemediationPolicy};

impl Writer {
    /// The metric, log line and status record of one action's outcome, and (returned, to be
    /// awaited by the caller) its Events.
    pub(super) fn outcome<'a>(
        &'a self,
        policy: &'a RemediationPolicy,
        mode: Mode,
        action: &Action,
        result: ActionResult,
        detail: Option<String>,
        at: Timestamp,
    ) -> (Outcome, BoxFuture<'a, ()>) {
        let (act, kind) = (action.act(), action.kind());
        let policy_name = &*policy.name_any();
        self.account(policy_name, mode, kind, result, action.threshold(), at);
        log(policy_name, mode, act, result, detail.as_deref());
        let reason = event_reason(kind, mode, result);
        let mut note = format!("[{}] policy {policy_name}: {}", mode.as_str(), act.note());
        if let Some(detail) = &detail {
            note.push_str(&format!(" ({detail})"));
        }
        let (namespace, name) = action.target();
        let reference = reference(namespace, name, action.uid());
        let policy_note = format!("{}: {note}", about(namespace, name));
        let workload = match action {
            Action::ForceDelete(fd) => fd.rollout_notice(policy_name, mode, result),
            _ => None,
        };
        let events = async move {
            self.action_events(policy, reference, (reason, kind.as_str()), note, policy_note).await;
            if let Some((workload, reason, note)) = workload {
                self.workload_event(&workload, EventType::Warning, reason, note).await;
            }
        }
        .boxed();
        let outcome = Outcome {
            // A skip (the last look found the world changed) or a failure is not handled: the
            // next plan decides again from what it sees then.
            handled: result.counts_as_action(),
            acted_key: action.acted_key(),
            record: action.record(at, mode, act.recorded_reason(), result, detail),
        };
        (outcome, events)
    }
}

/// The log line of an action's outcome: a warning when it failed.
fn log(policy: &str, mode: Mode, act: &dyn Act, result: ActionResult, detail: Option<&str>) {
    let failed = result == ActionResult::Failed;
    let (action, message) = (act.kind().as_str(), log_message(act.kind(), mode, result));
    let (mode, result, detail) = (mode.as_str(), result.as_str(), detail.unwrap_or(""));
    let reason = act.recorded_reason();
    match act.target() {
        Target::Pod(pod) if failed => warn!(
            policy, mode, action, result, namespace = %pod.namespace, pod = %pod.name,
            node = %pod.node, reason, detail, "{message}"
        ),
        Target::Pod(pod) => info!(
            policy, mode, action, result, namespace = %pod.namespace, pod = %pod.name,
            node = %pod.node, reason, detail, "{message}"
        ),
        Target::Node(node) if failed => {
            warn!(policy, mode, action, result, node = %node.name, reason, detail, "{message}")
        }
        Target::Node(node) => {
            info!(policy, mode, action, result, node = %node.name, reason, detail, "{message}")
        }
    }
}
