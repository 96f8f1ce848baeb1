//! The one writer: the only module that sends mutations to the API server (pod deletions,
//! policy status, Events). It is also where DryRun turns an action into a record instead of a
//! request: in DryRun nothing here deletes or patches a pod or a node.
//!
//! Here: [`Writer::commit`] and the dispatch of a plan's actions. Beside it, by concern: the
//! record every action leaves (`outcome.rs`), one file per action's request (`force_delete.rs`,
//! `evict.rs`, `finalizers.rs`, `node.rs`), the last look and its shared reads (`look.rs`),
//! Events (`events.rs`), status writes and Pending records (`status.rs`), and the test builds'
//! hooks (`e2e_hooks.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use futures::future::BoxFuture;
use jiff::Timestamp;
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use tracing::{info, warn};

use crate::Result;
use crate::core::ahead::{RecordKey, records_before_requests};
use crate::core::{
    Action, BeyondBudget, FencingNotice, LastLook, NodeNotice, PodNotice, REPORTS_BEYOND_BUDGET,
    ValidatedPolicy, push_recent_actions,
};
use crate::crd::{
    ActionKind, ActionResult, Mode, RecentAction, RemediationPolicy, RemediationPolicyStatus,
};
use crate::leader::LeaderGuard;
use crate::metrics::{ActionLabels, DelayLabels, Metrics, WriteKind, WriteLabels};

/// The name Events are reported under.
pub const CONTROLLER_NAME: &str = "kube-remediator";
/// Field manager of every patch (status, nodes, pods): the safety kernel reads it back in a
/// node's managedFields to tell our cordon from an admin's.
pub use crate::crd::FIELD_MANAGER;
/// How many actions of one plan run at once.
pub const MAX_IN_FLIGHT: usize = 8;

#[derive(Clone)]
pub struct Writer {
    client: Client,
    recorder: Recorder,
    metrics: Arc<Metrics>,
    /// Checked right before every mutation (DELETE, status patch, Event): a replica that does
    /// not hold the leader Lease sends none.
    leader: LeaderGuard,
    /// Test builds only: hold each force delete before its last look (see
    /// [`Writer::with_e2e_hold_dir`]).
    #[cfg(feature = "e2e-hooks")]
    hold_dir: Option<std::path::PathBuf>,
    /// The last looks' reads sent ahead of the actions due next ([`Writer::look_early`]).
    early: Arc<std::sync::Mutex<look::EarlyReads>>,
}

/// A Warning Event on the policy, published with a reconcile's writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// Everything one reconcile hands to the writer, written together: the notices (policy
/// Events), the plan's actions, and the desired status, which gets the actions' records.
pub struct Commit<'a> {
    pub policy: &'a RemediationPolicy,
    /// The validated spec, or `None` when it is invalid (then nothing is acted on).
    pub validated: Option<&'a ValidatedPolicy>,
    pub actions: &'a [Action],
    pub notices: Vec<Notice>,
    /// Pods newly held for want of fencing: an Event on each and on its owner.
    pub fencing_notices: Vec<FencingNotice>,
    /// Pods newly stuck on a live node or left Ready=False, or with new evidence: an Event on
    /// each.
    pub pod_notices: Vec<PodNotice>,
    /// Dead nodes newly left alone (in maintenance, shutting down, another tool's): an Event
    /// on each.
    pub node_notices: Vec<NodeNotice>,
    /// The new pod notices beyond the report budget: one Event on the policy counts them.
    pub reports_beyond_budget: Option<BeyondBudget>,
    /// The desired status, before this reconcile's action records are added.
    pub status: RemediationPolicyStatus,
    /// Records of earlier actions to add first: ones whose status write failed (their Events
    /// were published), and `Pending` ones a previous run left, resolved (`resolved`: their
    /// Events are published now, the previous run having stopped before).
    pub carried: Vec<RecentAction>,
    pub resolved: Vec<RecentAction>,
    /// The status last written, to skip writing an unchanged one.
    pub previous: Option<&'a RemediationPolicyStatus>,
    /// The actions whose `Pending` record was stored ahead of them (and `previous` holds):
    /// sent without another record first.
    pub recorded_ahead: &'a BTreeSet<RecordKey>,
    /// Force deletes whose `Pending` records `status` stores ahead of them, with their due
    /// instant: once it is written, their last looks' reads go out shortly before that
    /// ([`Writer::look_early`]).
    pub early_looks: &'a [(Timestamp, crate::core::PodTarget)],
}

/// A commit's reports, published after its actions.
struct Reports {
    fencing: Vec<FencingNotice>,
    pods: Vec<PodNotice>,
    nodes: Vec<NodeNotice>,
    beyond: Option<BeyondBudget>,
}

/// What a commit did. The outcomes are returned even when the status write failed, so the
/// caller never forgets an action it took.
pub struct Committed {
    pub outcomes: Vec<Outcome>,
    /// The status written (`Ok(None)`: unchanged, not written).
    pub status: Result<Option<RemediationPolicyStatus>>,
}

/// Proof that the safety kernel admitted an action on its last look ([`Writer::admits`]): the
/// requests of a force delete (the pod's status write and the DELETE) each take one, so neither
/// can be sent unless the kernel admitted the delete. Only `admits` makes one.
pub(crate) struct Admitted(());

/// What came of an action's request, and why (the record's result and detail).
pub(crate) type Sent = (ActionResult, Option<String>);

/// What happened to one planned action.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub record: RecentAction,
    /// Whether the action counts as taken (Done, or WouldAct in DryRun).
    pub handled: bool,
    /// How it is remembered as taken: the pod's UID, or the node action's key.
    pub acted_key: String,
}

impl Writer {
    /// `instance` names this replica in Events (e.g. the pod name).
    pub fn new(client: Client, metrics: Arc<Metrics>, instance: Option<String>) -> Self {
        let reporter = Reporter { controller: CONTROLLER_NAME.into(), instance };
        let recorder = Recorder::new(client.clone(), reporter);
        Writer {
            recorder,
            client,
            metrics,
            leader: LeaderGuard::always(),
            #[cfg(feature = "e2e-hooks")]
            hold_dir: None,
            early: Arc::default(),
        }
    }

    /// Mutates only while `leader` is open (by default always: no leader election).
    pub fn with_leader_guard(self, leader: LeaderGuard) -> Self {
        Writer { leader, ..self }
    }

    /// Writes one reconcile's result: the notices on the policy, then the actions (carried out
    /// or recorded), the reports about pods and nodes, and the status with the actions' records,
    /// if it changed.
    pub async fn commit(&self, commit: Commit<'_>) -> Committed {
        let Commit {
            policy,
            validated,
            actions,
            notices,
            fencing_notices,
            pod_notices,
            node_notices,
            reports_beyond_budget,
            mut status,
            previous,
            carried,
            resolved,
            recorded_ahead,
            early_looks,
        } = commit;
        let reports = Reports {
            fencing: fencing_notices,
            pods: pod_notices,
            nodes: node_notices,
            beyond: reports_beyond_budget,
        };
        for record in &resolved {
            self.resolved_events(policy, record).await;
        }
        push_recent_actions(&mut status, carried.into_iter().chain(resolved));
        for notice in notices {
            self.policy_event(
                policy,
                EventType::Warning,
                notice.reason,
                notice.action,
                notice.note,
            )
            .await;
        }
        let outcomes = match validated {
            Some(validated) if !actions.is_empty() => {
                // Every request is recorded before it is sent: an operator stopped between the
                // request and its outcome leaves a Pending record, which its next run resolves.
                let looks = SharedLooks::new(self, policy.name_any(), actions, None);
                let now = crate::clock::now();
                let enforce = validated.mode == Mode::Enforce;
                let write_first =
                    enforce && records_before_requests(&mut status, actions, recorded_ahead, now);
                if enforce && !write_first {
                    // Every record stored ahead: the last looks' reads, the policy's too, at once.
                    let (_, ()) = tokio::join!(looks.policy(), looks.prefetch(actions));
                } else if write_first {
                    let (name, sent) = (policy.name_any(), Instant::now());
                    // The last looks' reads go out meanwhile; no request before the records
                    // are stored.
                    let (written, ()) =
                        tokio::join!(self.write_status(&name, &status), looks.prefetch(actions));
                    match written {
                        // The API server answers with the policy as it stands: the last looks
                        // that start soon after need not read it again.
                        Ok(answer) => looks.set_policy(sent, answer),
                        Err(e) => {
                            warn!(policy = %policy.name_any(), error = %e,
                                "cannot record the actions before taking them: none taken");
                            self.reports(policy, &reports).await;
                            return Committed { outcomes: Vec::new(), status: Err(e) };
                        }
                    }
                }
                self.execute_with(policy, validated, actions, crate::clock::now, looks).await
            }
            _ => Vec::new(),
        };
        push_recent_actions(&mut status, outcomes.iter().map(|o| o.record.clone()));
        // The reports about pods and nodes after the actions (none waits behind them), before
        // the status that lists them.
        self.reports(policy, &reports).await;
        let status = if previous == Some(&status) {
            Ok(None)
        } else {
            let name = policy.name_any();
            match self.patch_status(&name, &status).await {
                Ok(()) => {
                    info!(policy = %name, "status updated");
                    self.looks_early(&name, early_looks);
                    Ok(Some(status))
                }
                Err(e) => Err(e),
            }
        };
        Committed { outcomes, status }
    }

    /// The Events of a commit's reports: pods held for fencing or by a finalizer, pods reported
    /// (stuck on a live node, readiness), dead nodes left alone, and the count of the pods
    /// beyond the report budget.
    async fn reports(&self, policy: &RemediationPolicy, reports: &Reports) {
        let name = policy.name_any();
        for notice in &reports.fencing {
            self.fencing_events(&name, notice).await;
        }
        for notice in &reports.pods {
            self.pod_notice_event(&name, notice).await;
        }
        for notice in &reports.nodes {
            self.node_notice_event(&name, notice).await;
        }
        if let Some(beyond) = &reports.beyond {
            let (namespace, pod, uid) = &beyond.first;
            let first = events::pod_reference(namespace, pod, uid);
            let note = beyond.note.clone();
            self.policy_event_on(policy, first, REPORTS_BEYOND_BUDGET, "Report", note).await;
        }
    }

    /// [`Writer::look_early`] for each due instant of `early_looks`, their records stored.
    fn looks_early(&self, policy: &str, early_looks: &[(Timestamp, crate::core::PodTarget)]) {
        let mut by_due: std::collections::BTreeMap<Timestamp, Vec<crate::core::PodTarget>> =
            Default::default();
        for (due, pod) in early_looks {
            by_due.entry(*due).or_default().push(pod.clone());
        }
        for (due, pods) in by_due {
            self.look_early(policy, due, pods);
        }
    }

    /// Carries out (Enforce) or records (DryRun) a plan's actions, oldest threshold first.
    /// Every action leaves an Event on its pod or node and one on the policy, a log line, a
    /// metric and a status record. A force delete's Events are published once the plan's last
    /// action is answered (before this returns): on a busy API server they would otherwise
    /// delay the DELETEs still due, two Events for each.
    pub async fn execute(
        &self,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        actions: &[Action],
        now: impl Fn() -> Timestamp,
    ) -> Vec<Outcome> {
        let looks = SharedLooks::new(self, policy.name_any(), actions, None);
        self.execute_with(policy, validated, actions, now, looks).await
    }

    async fn execute_with<'a>(
        &'a self,
        policy: &'a RemediationPolicy,
        validated: &'a ValidatedPolicy,
        actions: &[Action],
        now: impl Fn() -> Timestamp,
        looks: SharedLooks<'a>,
    ) -> Vec<Outcome> {
        // Up to MAX_IN_FLIGHT actions at once (client-side pacing: kube-rs has no QPS limiter),
        // results kept in plan order; then their records, as many at once.
        let (outcomes, records): (Vec<Outcome>, Vec<Option<BoxFuture<'_, ()>>>) =
            futures::stream::iter(actions.iter().cloned())
                .map(|action| self.execute_one(policy, validated, action, &now, &looks))
                .buffered(MAX_IN_FLIGHT)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .unzip();
        futures::stream::iter(records.into_iter().flatten())
            .buffer_unordered(MAX_IN_FLIGHT)
            .for_each(|()| futures::future::ready(()))
            .await;
        outcomes
    }

    /// One action: its request (Enforce: the last look, the safety kernel, then the request;
    /// DryRun: none), then its record ([`Writer::outcome`]). A force delete's Events are
    /// returned, to be awaited once the plan's last action is answered; the others' are
    /// published before this returns.
    async fn execute_one<'a>(
        &'a self,
        policy: &'a RemediationPolicy,
        validated: &'a ValidatedPolicy,
        action: Action,
        now: &impl Fn() -> Timestamp,
        looks: &SharedLooks<'a>,
    ) -> (Outcome, Option<BoxFuture<'a, ()>>) {
        let (result, detail) = match validated.mode {
            Mode::DryRun => (ActionResult::WouldAct, None),
            Mode::Enforce => self.send(&action, policy, validated, looks).await,
        };
        let (outcome, events) =
            self.outcome(policy, validated.mode, &action, result, detail, now());
        match action {
            Action::ForceDelete(_) => (outcome, Some(events)),
            _ => {
                events.await;
                (outcome, None)
            }
        }
    }

    /// The request of one action, in Enforce: what came of it, and why.
    async fn send(
        &self,
        action: &Action,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        looks: &SharedLooks<'_>,
    ) -> Sent {
        match action {
            Action::ForceDelete(fd) => {
                self.force_delete(action, fd, policy, validated, looks).await
            }
            Action::RemoveFinalizers(rf) => {
                self.remove_finalizers(action, rf, policy, validated).await
            }
            Action::Evict(evict) => self.evict(action, evict, policy, validated).await,
            Action::DeleteShutdownPod(delete) => {
                self.delete_shutdown_pod(action, delete, policy, validated).await
            }
            Action::MarkNotReady(mark) => {
                self.mark_not_ready(action, mark, policy, validated).await
            }
            Action::Node(na) => self.act_on_node(action, na, policy, validated).await,
        }
    }

    /// Whether the action still stands after its last look ([`Action::recheck`]: `Err` says
    /// why it is skipped), and the safety kernel's word on it ([`crate::safety::admit`]). A
    /// refusal is a defect of the rules: it blocks the write, is logged at error level, counted
    /// by invariant and told in an Event on the policy about the object; `Err` is the result
    /// to record (skipped, so the action waits its backoff) and why.
    pub(crate) async fn admits(
        &self,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
        action: &Action,
        look: &LastLook<'_>,
        undo: Option<crate::safety::UndoChanges>,
    ) -> std::result::Result<Admitted, Sent> {
        if let Err(skip) = action.recheck(look, policy.metadata.generation, &validated.fencing) {
            return Err((ActionResult::Skipped, Some(skip.to_string())));
        }
        let now = crate::clock::now();
        let shutdown_seen = action.act().target().shutdown_seen();
        if let Err(skip) =
            crate::core::lifecycle_still_allows(look, shutdown_seen, validated.lifecycle, now)
        {
            return Err((ActionResult::Skipped, Some(skip.to_string())));
        }
        let write = crate::safety::Write {
            action,
            policy: validated,
            planned_generation: policy.metadata.generation,
            look,
            undo,
            now,
        };
        let Err(refusal) = crate::safety::admit(&write) else { return Ok(Admitted(())) };
        let (namespace, name) = action.target();
        tracing::error!(
            policy = %policy.name_any(), action = action.kind().as_str(), namespace, name,
            invariant = refusal.invariant.as_str(), why = %refusal.why,
            "the safety kernel refused a write: a defect of the rules, the write is not sent"
        );
        self.metrics
            .safety_refusals
            .get_or_create(&crate::metrics::InvariantLabels {
                invariant: crate::metrics::Label(refusal.invariant),
            })
            .inc();
        let related = reference(namespace, name, action.uid());
        let note = format!(
            "{} {}{}{name} not sent: {refusal}",
            action.kind().as_str(),
            namespace,
            if namespace.is_empty() { "" } else { "/" }
        );
        self.policy_event_on(policy, related, "SafetyRefused", action.kind().as_str(), note).await;
        Err((ActionResult::Skipped, Some(refusal.to_string())))
    }

    /// Whether this replica may send a write now (it holds the leader Lease); counts refusals.
    pub(crate) fn may_write(&self, write: WriteKind) -> bool {
        let may = self.leader.may_act();
        if !may {
            self.metrics.writes_refused_not_leader.get_or_create(&WriteLabels { write }).inc();
        }
        may
    }

    pub(crate) fn account(
        &self,
        policy: &str,
        mode: Mode,
        action: ActionKind,
        result: ActionResult,
        threshold: Timestamp,
        at: Timestamp,
    ) {
        self.metrics
            .actions
            .get_or_create(&ActionLabels { policy: policy.to_string(), action, mode, result })
            .inc();
        if matches!(result, ActionResult::Done | ActionResult::WouldAct) {
            let delay = at.duration_since(threshold).as_secs_f64().max(0.0);
            self.metrics
                .action_delay
                .get_or_create(&DelayLabels { policy: policy.to_string(), action, mode })
                .observe(delay);
        }
    }
}

mod delete_shutdown_pod;
#[cfg(feature = "e2e-hooks")]
mod e2e_hooks;
mod events;
mod evict;
mod finalizers;
mod force_delete;
mod look;
mod mark_not_ready;
mod node;
mod outcome;
mod status;
#[cfg(test)]
mod tests;

pub(crate) use events::reference;
use look::SharedLooks;
pub use look::{LIST_PODS_FROM, SHARED_LOOK_FOR};
pub(crate) use look::{last_look, our_taint};
