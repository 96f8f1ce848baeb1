//! The one table of what every action of a kind shares: its Event reasons, the words of its log
//! line, the key a status record of it is remembered by after a restart, and how a record of it
//! left `Pending` (or `Failed`) resolves. Keyed by [`ActionKind`],
//! the key of status records and metrics, so a record alone finds its row; the match is
//! exhaustive, so a new kind does not compile without its row.

use super::{mark_acted_key, removal_acted_key};
use crate::crd::{ActionKind, ActionResult, Mode};

/// What every action of one kind shares.
#[derive(Clone, Copy, Debug)]
pub struct KindSpec {
    /// The Event reasons: done (Enforce), recorded (DryRun), skipped, failed.
    pub done: &'static str,
    pub would: &'static str,
    pub skipped: &'static str,
    pub failed: &'static str,
    /// The log line's message: taken, recorded (DryRun), failed.
    pub acting: &'static str,
    pub would_act: &'static str,
    pub not_done: &'static str,
    /// The "already acted" key of a status record of it, from the record's UID, so that a
    /// restart does not act on the same pod again (the action's own
    /// [`acted_key`](super::Act::acted_key)); `None` for a node action, whose records are
    /// kept by the node's own record.
    pub acted_key: Option<fn(&str) -> String>,
    /// How a record of it left `Pending` or `Failed` resolves from a fresh read of its pod;
    /// `None` for a node action, resolved from the node ([`crate::core::node_action_took_effect`]).
    pub resolution: Option<PodResolution>,
}

/// What a fresh read of the pod shows once a pod action took effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodResolution {
    /// The pod is gone (a force delete; a finalizer removal, which lets it go).
    Gone,
    /// The pod is gone or Terminating (an eviction).
    GoneOrTerminating,
    /// The pod is there, not Terminating, and not Ready (a marking).
    NotReady,
}

/// The row of `kind`.
pub fn spec(kind: ActionKind) -> KindSpec {
    use PodResolution::*;
    let node = |done, would, skipped, failed| KindSpec {
        done,
        would,
        skipped,
        failed,
        acting: "node action",
        would_act: "node action",
        not_done: "node action failed",
        acted_key: None,
        resolution: None,
    };
    match kind {
        ActionKind::ForceDelete => KindSpec {
            done: "ForceDeleted",
            would: "WouldForceDelete",
            skipped: "ForceDeleteSkipped",
            failed: "ForceDeleteFailed",
            acting: "force-delete pod",
            would_act: "would force-delete pod",
            not_done: "action failed",
            acted_key: Some(str::to_string),
            resolution: Some(Gone),
        },
        ActionKind::RemoveFinalizers => KindSpec {
            done: "RemovedFinalizers",
            would: "WouldRemoveFinalizers",
            skipped: "RemoveFinalizersSkipped",
            failed: "RemoveFinalizersFailed",
            acting: "remove finalizers",
            would_act: "would remove finalizers",
            not_done: "action failed",
            acted_key: Some(removal_acted_key),
            resolution: Some(Gone),
        },
        ActionKind::Evict => KindSpec {
            done: "Evicted",
            would: "WouldEvict",
            skipped: "EvictSkipped",
            failed: "EvictFailed",
            acting: "evict pod",
            would_act: "would evict pod",
            not_done: "eviction not done",
            acted_key: Some(str::to_string),
            resolution: Some(GoneOrTerminating),
        },
        ActionKind::DeleteShutdownPod => KindSpec {
            done: "DeletedShutdownPod",
            would: "WouldDeleteShutdownPod",
            skipped: "DeleteShutdownPodSkipped",
            failed: "DeleteShutdownPodFailed",
            acting: "delete pod left Failed by a node shutdown",
            would_act: "would delete pod left Failed by a node shutdown",
            not_done: "action failed",
            acted_key: Some(str::to_string),
            // A Failed pod is removed at once (no finalizer left): gone.
            resolution: Some(Gone),
        },
        ActionKind::MarkPodNotReady => KindSpec {
            done: "MarkedPodNotReady",
            would: "WouldMarkPodNotReady",
            skipped: "MarkPodNotReadySkipped",
            failed: "MarkPodNotReadyFailed",
            acting: "mark pod not Ready",
            would_act: "would mark pod not Ready",
            not_done: "action failed",
            acted_key: Some(mark_acted_key),
            resolution: Some(NotReady),
        },
        ActionKind::Cordon => node("Cordoned", "WouldCordon", "CordonSkipped", "CordonFailed"),
        ActionKind::OutOfServiceTaint => node(
            "TaintedOutOfService",
            "WouldTaintOutOfService",
            "OutOfServiceTaintSkipped",
            "OutOfServiceTaintFailed",
        ),
        ActionKind::DeleteNode => {
            node("DeletedNode", "WouldDeleteNode", "DeleteNodeSkipped", "DeleteNodeFailed")
        }
        ActionKind::UndoNodeActions => node(
            "UndidNodeActions",
            "WouldUndoNodeActions",
            "UndoNodeActionsSkipped",
            "UndoNodeActionsFailed",
        ),
    }
}

/// The Event reason of an action's outcome: `ForceDeleted`, `WouldCordon`, `EvictSkipped`,
/// `DeleteNodeFailed`, and so on.
pub fn event_reason(kind: ActionKind, mode: Mode, result: ActionResult) -> &'static str {
    let spec = spec(kind);
    match (mode, result) {
        (Mode::DryRun, _) => spec.would,
        (Mode::Enforce, ActionResult::Done) => spec.done,
        (Mode::Enforce, ActionResult::Failed) => spec.failed,
        (Mode::Enforce, _) => spec.skipped,
    }
}

/// The log line's message of an action's outcome.
pub fn log_message(kind: ActionKind, mode: Mode, result: ActionResult) -> &'static str {
    let spec = spec(kind);
    match (mode, result) {
        (_, ActionResult::Failed) => spec.not_done,
        (Mode::DryRun, _) => spec.would_act,
        (Mode::Enforce, _) => spec.acting,
    }
}

#[cfg(test)]
mod tests {
    use strum::IntoEnumIterator;

    use super::*;

    #[test]
    fn event_reasons() {
        use ActionResult::*;
        let table = [
            (ActionKind::Cordon, Mode::Enforce, Done, "Cordoned"),
            (ActionKind::Cordon, Mode::DryRun, WouldAct, "WouldCordon"),
            (ActionKind::OutOfServiceTaint, Mode::Enforce, Done, "TaintedOutOfService"),
            (ActionKind::DeleteNode, Mode::Enforce, Skipped, "DeleteNodeSkipped"),
            (ActionKind::UndoNodeActions, Mode::Enforce, Failed, "UndoNodeActionsFailed"),
            (ActionKind::UndoNodeActions, Mode::DryRun, WouldAct, "WouldUndoNodeActions"),
            (ActionKind::ForceDelete, Mode::Enforce, Done, "ForceDeleted"),
            (ActionKind::ForceDelete, Mode::Enforce, Pending, "ForceDeleteSkipped"),
            (ActionKind::Evict, Mode::DryRun, Skipped, "WouldEvict"),
            (ActionKind::RemoveFinalizers, Mode::Enforce, Done, "RemovedFinalizers"),
            (ActionKind::DeleteShutdownPod, Mode::Enforce, Done, "DeletedShutdownPod"),
            (ActionKind::DeleteShutdownPod, Mode::DryRun, WouldAct, "WouldDeleteShutdownPod"),
            (ActionKind::MarkPodNotReady, Mode::Enforce, Done, "MarkedPodNotReady"),
            (ActionKind::MarkPodNotReady, Mode::DryRun, WouldAct, "WouldMarkPodNotReady"),
        ];
        for (kind, mode, result, want) in table {
            assert_eq!(event_reason(kind, mode, result), want);
        }
    }

    /// Skipped and Failed reasons are the kind's name with the outcome, as they always were.
    #[test]
    fn skipped_and_failed_reasons_name_the_kind() {
        for kind in ActionKind::iter() {
            let spec = spec(kind);
            assert_eq!(spec.skipped, format!("{}Skipped", kind.as_str()));
            assert_eq!(spec.failed, format!("{}Failed", kind.as_str()));
        }
    }
}
