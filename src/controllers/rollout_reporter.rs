//! The blocked-rollout reporter: whatever the policies say, every Recreate Deployment or
//! StatefulSet blocked by Terminating pods gets an Event naming the pods and the cause, and the
//! `kube_remediator_blocked_rollouts` gauge counts them. Events are sent when the blocking set
//! changes, not on every pass.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::events::EventType;
use tokio::sync::watch;
use tracing::info;

use crate::core::rollouts::{BlockCause, BlockedRollout, WorkloadKind, WorkloadRef};
use crate::index::watches::SharedState;
use crate::metrics::{BlockedLabels, Label, Metrics};
use crate::writer::Writer;

/// What was last reported for a workload: its blocking pods and their causes.
type Reported = BTreeMap<WorkloadRef, BTreeSet<(String, BlockCause)>>;

/// Runs until the trigger channel closes: re-analyzes on every relevant change and at the
/// instant a blocking pod's grace period ends.
pub async fn run(
    state: SharedState,
    writer: Writer,
    metrics: Arc<Metrics>,
    mut trigger: watch::Receiver<u64>,
) {
    let mut reported = Reported::new();
    loop {
        let now = crate::clock::now();
        // Only from a view that can be trusted: every watch listed, and the Lease view neither
        // silent nor failed (a blind watch, say on a connection the network dropped, would
        // show live nodes as gone and their pods as blocking). Meanwhile the last report stands.
        let analysis = {
            let state = state.read().unwrap_or_else(|e| e.into_inner());
            let trusted = state.synced() && state.evidence_since(now).is_ok();
            trusted.then(|| state.rollout_analysis(now))
        };
        let mut wait = Duration::from_secs(3600);
        if let Some(analysis) = analysis {
            report(&writer, &metrics, &mut reported, &analysis.blocked).await;
            if let Some(next) = analysis.next_change {
                let until = Duration::try_from(next.duration_since(crate::clock::now()))
                    .unwrap_or_default();
                wait = until + Duration::from_millis(5);
            }
        }
        tokio::select! {
            changed = trigger.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The RolloutBlocked Event's note: the pods and why each is still there; for a Recreate
/// strategy, that no new pod comes before all of them are gone.
fn blocked_note(b: &BlockedRollout, pods: &[String]) -> String {
    let recreate = if b.recreate {
        " (strategy Recreate: no pod of the new revision is created until every old one is gone)"
    } else {
        ""
    };
    format!(
        "rollout blocked by {} Terminating pod(s){recreate}: {}. See `kube-remediator plan` for what the policies will do.",
        pods.len(),
        pods.join("; ")
    )
}

async fn report(
    writer: &Writer,
    metrics: &Metrics,
    reported: &mut Reported,
    blocked: &[BlockedRollout],
) {
    // The gauge first: it is up to date by the time anyone reads an Event.
    let mut counts: BTreeMap<(WorkloadKind, BlockCause), i64> = BTreeMap::new();
    for b in blocked {
        // The workload is counted under its most telling cause.
        let cause = b.pods.iter().map(|p| p.cause).filter(|c| *c != BlockCause::InGrace).min();
        *counts.entry((b.workload.kind, cause.unwrap_or(BlockCause::InGrace))).or_default() += 1;
    }
    for kind in [WorkloadKind::Deployment, WorkloadKind::StatefulSet] {
        for cause in [BlockCause::InGrace, BlockCause::NodeUnhealthy, BlockCause::LiveNodeStuck] {
            let n = counts.get(&(kind, cause)).copied().unwrap_or(0);
            metrics
                .blocked_rollouts
                .get_or_create(&BlockedLabels { kind: Label(kind), cause: Label(cause) })
                .set(n);
        }
    }

    let mut now_blocked = Reported::new();
    for b in blocked {
        let set: BTreeSet<(String, BlockCause)> =
            b.pods.iter().map(|p| (p.uid.clone(), p.cause)).collect();
        if reported.get(&b.workload) != Some(&set) {
            let pods: Vec<String> = b
                .pods
                .iter()
                .map(|p| format!("{} on node {} ({})", p.name, p.node, p.cause.describe()))
                .collect();
            let note = blocked_note(b, &pods);
            info!(workload = %b.workload, "{note}");
            writer.workload_event(&b.workload, EventType::Warning, "RolloutBlocked", note).await;
        }
        now_blocked.insert(b.workload.clone(), set);
    }
    for gone in reported.keys().filter(|w| !now_blocked.contains_key(*w)) {
        info!(workload = %gone, "rollout no longer blocked");
        writer
            .workload_event(
                gone,
                EventType::Normal,
                "RolloutUnblocked",
                "no Terminating pod blocks the rollout any more".into(),
            )
            .await;
    }
    *reported = now_blocked;
}
