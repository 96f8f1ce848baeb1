//! What one policy's reconciles remember between them, as plain data: the actions it took (for
//! rate limits and "already acted"), the status it last wrote, the notices already sent, the
//! actions waiting to be tried again, the circuit, and the records still to be written.
//!
//! Pure like the rest of the core: `now` is a parameter. The controller keeps one per policy,
//! reads it to observe and to [`decide`](super::decide()), and hands it the commit's outcomes
//! ([`PolicyHistory::after_commit`]).

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use super::ahead::{RecordKey, record_key};
use super::evidence::Suspension;
use super::guards::RATE_WINDOW;
use super::node::NodeSummary;
use super::observed::{Backoff, CircuitMemory, Observed, OwnerKey, PastAction};
use super::plan::Plan;
use super::pod_notices::{FencingNotice, PodNotice, ReportBudget};
use super::status::{REPORTS_EVERY, circuit_memory};
use crate::crd::{ActionResult, Mode, RecentAction, RemediationPolicyStatus};

#[derive(Debug, Default)]
pub struct PolicyHistory {
    /// The mode the history belongs to: switching DryRun -> Enforce starts afresh, so pods
    /// recorded as would-be actions are then really acted on.
    mode: Option<Mode>,
    recent: Vec<PastAction>,
    acted: BTreeSet<String>,
    /// The last status this controller wrote: the controller's cache may lag behind it.
    last_status: Option<RemediationPolicyStatus>,
    /// When it was written.
    last_written_at: Option<Timestamp>,
    /// Nodes last reported as held alive (not Ready, kubelet answering), to log each once.
    held_alive: BTreeSet<String>,
    /// Why evidence was last suspended, to log each change once.
    suspended: Option<Suspension>,
    /// Pods last reported as held for want of fencing, to report each once.
    fencing_notified: BTreeSet<String>,
    /// Pods stuck on live nodes or left Ready=False already reported, with the evidence.
    pod_notified: BTreeMap<String, String>,
    /// What is left of the budget of Events about pods that report.
    report_budget: ReportBudget,
    /// Failing nodes already reported as left alone in their current episode, with the hold.
    node_notified: BTreeMap<String, &'static str>,
    /// When to decide again because an action was skipped (the last look found the world
    /// changed, a PodDisruptionBudget refused an eviction), if nothing else brings a reconcile
    /// sooner.
    retry_at: Option<Timestamp>,
    /// Actions whose attempts failed in a row, by acted key: retried with a doubling wait.
    failures: BTreeMap<String, Backoff>,
    /// Whether the Pending records a previous run left in the status were resolved.
    pending_resolved: bool,
    /// Records of actions taken whose status write failed: carried into the next one.
    unwritten: Vec<RecentAction>,
    /// The last record of each pod action that failed, by acted key: a request that timed out
    /// may have happened, which a later read finds out.
    failed_records: BTreeMap<String, RecentAction>,
    /// The circuit as the last plan left it, whether or not its status write succeeded: a
    /// latch or a cool-down is not forgotten because a status write failed.
    circuit: Option<CircuitMemory>,
    /// The `Pending` records this run stored ahead of their actions, with the instant each is
    /// due at (see [`super::ahead`]).
    ahead: BTreeMap<RecordKey, Timestamp>,
}

/// How soon a policy decides again after one of its actions was skipped: an eviction a
/// PodDisruptionBudget refused, a last look that found the world changed. A request that failed
/// or timed out is retried after a doubling wait instead ([`Backoff`]).
pub const UNDONE_RETRY: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

/// What the history tells the observation: the past of one mode.
#[derive(Debug, Default)]
pub struct Past {
    /// This policy's recent actions, for the rate limits.
    pub recent: Vec<PastAction>,
    /// The pods (and removals) already acted on.
    pub acted: BTreeSet<String>,
    /// The actions failing now, and when each is attempted again.
    pub backoff: BTreeMap<String, Backoff>,
    /// The circuit to plan from: the last plan's, else the one the status remembers.
    pub circuit: Option<CircuitMemory>,
}

/// What became of one planned action: the writer's outcome, as the history keeps it.
#[derive(Clone, Copy, Debug)]
pub struct ActionOutcome<'a> {
    pub record: &'a RecentAction,
    /// Whether the action counts as taken (Done, or WouldAct in DryRun).
    pub handled: bool,
    /// How it is remembered as taken: the pod's UID, or the node action's key.
    pub acted_key: &'a str,
}

/// How a commit's status write went.
#[derive(Clone, Debug, PartialEq)]
pub enum StatusWrite {
    Written(Box<RemediationPolicyStatus>),
    /// Unchanged, so not written.
    Unchanged,
    /// The write failed: the records it carried wait for the next one.
    Failed,
}

/// What changed in the evidence since the last reconcile, to be logged once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EvidenceNews {
    /// Nodes held alive now that were not before.
    pub newly_held_alive: Vec<NodeSummary>,
    /// `Some(now)` when the suspension changed kind (`Some(None)`: trusted again).
    pub suspension: Option<Option<Suspension>>,
}

/// What a decision leaves in the history whatever its commit does: what was said (notices,
/// evidence logged), the circuit, the bookkeeping of earlier records. Kept by
/// [`PolicyHistory::after_commit`].
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    pub(super) circuit: CircuitMemory,
    pub(super) held_alive: BTreeSet<String>,
    pub(super) suspended: Option<Suspension>,
    pub(super) fencing_notified: BTreeSet<String>,
    pub(super) pod_notified: BTreeMap<String, String>,
    pub(super) report_budget: ReportBudget,
    pub(super) node_notified: BTreeMap<String, &'static str>,
    /// The Pending records are resolved (in this decision or before).
    pub(super) pending_resolved: bool,
    /// Failed actions a fresh read settled, by acted key.
    pub(super) settled: Vec<String>,
    /// The earlier records the commit carries (unwritten, resolved): kept if its write fails.
    pub(super) earlier: Vec<RecentAction>,
    /// Records stored ahead by this decision's status write (with their due instants), and
    /// those it withdraws: kept once the write succeeds.
    pub(super) ahead_recorded: Vec<(RecordKey, Timestamp)>,
    pub(super) ahead_forgotten: Vec<RecordKey>,
}

impl PolicyHistory {
    /// The status to compare with: the last one written, else the one read with the policy.
    pub fn previous_status(
        &self,
        from_policy: Option<&RemediationPolicyStatus>,
    ) -> Option<RemediationPolicyStatus> {
        self.last_status.clone().or_else(|| from_policy.cloned())
    }

    /// The past of `mode` at `now`. A new mode (and a fresh history, after a restart) starts
    /// from the status's records of that mode, so neither a restart nor `plan` forgets what was
    /// done.
    pub fn past(
        &mut self,
        mode: Mode,
        status: Option<&RemediationPolicyStatus>,
        now: Timestamp,
    ) -> Past {
        if self.mode != Some(mode) {
            self.mode = Some(mode);
            self.recent = seed_recent(status, mode, now);
            self.acted = seed_acted(status, mode);
        }
        self.recent.retain(|a| now.duration_since(a.at) < RATE_WINDOW);
        Past {
            recent: self.recent.clone(),
            acted: self.acted.clone(),
            backoff: self.failures.clone(),
            circuit: self.circuit.clone().or_else(|| circuit_memory(status)),
        }
    }

    /// The pods of the status's Pending records (namespace, name, UID) while they are still to
    /// be resolved this run; empty afterwards.
    pub fn pending_pods(
        &self,
        status: Option<&RemediationPolicyStatus>,
    ) -> Vec<(String, String, String)> {
        self.pending(status, true)
            .map(|r| (r.namespace.clone(), r.name.clone(), r.uid.clone()))
            .collect()
    }

    /// The nodes of the status's Pending node actions (by name) while they are still to be
    /// resolved this run.
    pub fn pending_nodes(&self, status: Option<&RemediationPolicyStatus>) -> Vec<String> {
        let mut nodes: Vec<String> = self.pending(status, false).map(|r| r.name.clone()).collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// The status's Pending records of pod (or node) actions, while not yet resolved this run.
    fn pending<'a>(
        &self,
        status: Option<&'a RemediationPolicyStatus>,
        pods: bool,
    ) -> impl Iterator<Item = &'a RecentAction> {
        status
            .filter(|_| !self.pending_resolved)
            .into_iter()
            .flat_map(|s| &s.recent_actions)
            .filter(move |r| r.result == ActionResult::Pending && r.namespace.is_empty() != pods)
    }

    /// The `Pending` records this run stored ahead of their actions, by key, with their due
    /// instants.
    pub fn stored_ahead(&self) -> &BTreeMap<RecordKey, Timestamp> {
        &self.ahead
    }

    /// The failed pod actions whose pod the cache no longer holds (`cached`: whether it holds a
    /// UID; asked only while there are failed actions): a fresh read says whether they
    /// happened after all.
    pub fn failed_to_check(&self, cached: impl Fn(&str) -> bool) -> Vec<(String, RecentAction)> {
        self.failed_records
            .iter()
            .filter(|(_, r)| !cached(&r.uid))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect()
    }

    /// Keeps what the commit of a decision did, and returns when to decide again for an action
    /// not done (a skip: [`UNDONE_RETRY`] after it), if that is still ahead of `now`.
    /// `observed` is what the decision saw: what is no longer there (pods, and the nodes of
    /// node actions, by UID) is forgotten.
    pub fn after_commit(
        &mut self,
        decided: Decided,
        outcomes: &[ActionOutcome<'_>],
        observed: &Observed,
        write: StatusWrite,
        now: Timestamp,
    ) -> Option<Timestamp> {
        let Decided {
            circuit,
            held_alive,
            suspended,
            fencing_notified,
            pod_notified,
            report_budget,
            node_notified,
            ahead_recorded,
            ahead_forgotten,
            ..
        } = decided;
        self.circuit = Some(circuit);
        (self.held_alive, self.suspended) = (held_alive, suspended);
        (self.fencing_notified, self.pod_notified) = (fencing_notified, pod_notified);
        self.report_budget = report_budget;
        self.node_notified = node_notified;
        self.pending_resolved |= decided.pending_resolved;
        for key in &decided.settled {
            self.failed_records.remove(key);
            self.failures.remove(key);
        }
        let pods = observed.pods.iter().map(|p| p.uid.as_str());
        self.record(outcomes, pods.chain(observed.nodes.iter().map(|n| n.control.uid.as_str())));
        self.unwritten = Vec::new();
        // An action sent replaces its record with its outcome's (written now or carried).
        let sent = outcomes.iter().filter(|o| o.record.mode == Mode::Enforce);
        for outcome in sent {
            self.ahead.remove(&record_key(outcome.record));
        }
        if !matches!(write, StatusWrite::Failed) {
            self.ahead.extend(ahead_recorded);
            for key in &ahead_forgotten {
                self.ahead.remove(key);
            }
        }
        match write {
            StatusWrite::Written(status) => self.wrote(*status, now),
            StatusWrite::Unchanged => {}
            // Their Events are out; their records go into the next status write.
            StatusWrite::Failed => {
                let taken = outcomes.iter().map(|o| o.record.clone());
                self.unwritten = decided.earlier.into_iter().chain(taken).collect();
            }
        }
        self.retry_at = self.retry_at.filter(|t| *t > now);
        self.retry_at
    }

    /// Records what the writer did. What is no longer present (`live`: pods, and the nodes of
    /// node actions, by UID) is forgotten.
    fn record<'a>(&mut self, outcomes: &[ActionOutcome<'_>], live: impl Iterator<Item = &'a str>) {
        // What is live matters only to what is remembered of earlier actions.
        let live: BTreeSet<&str> = if self.acted.is_empty() && self.failures.is_empty() {
            BTreeSet::new()
        } else {
            live.collect()
        };
        self.acted.retain(|key| live.contains(key.split('/').next().unwrap_or_default()));
        for outcome in outcomes.iter().filter(|o| o.record.result.spends_budget()) {
            self.recent
                .push(PastAction { at: outcome.record.time.0, owner: owner_key(outcome.record) });
            if outcome.handled {
                self.acted.insert(outcome.acted_key.to_string());
            }
        }
        self.failures.retain(|key, _| live.contains(key.split('/').next().unwrap_or_default()));
        // An action not done (failed, or skipped: refused by a budget, or the last look found the
        // world changed) waits its backoff whatever else triggers a reconcile, so that neither
        // its own record's status write nor other watch events bring it back at once.
        for outcome in outcomes {
            let key = outcome.acted_key;
            if outcome.record.result == ActionResult::Failed && !outcome.record.namespace.is_empty()
            {
                self.failed_records.insert(key.to_string(), outcome.record.clone());
            } else {
                self.failed_records.remove(key);
            }
            if outcome.handled {
                self.failures.remove(key);
            } else {
                let failures = self.failures.get(key).map_or(0, |b| b.failures) + 1;
                self.failures
                    .insert(key.to_string(), Backoff::after(failures, outcome.record.time.0));
            }
        }
        let skipped = outcomes
            .iter()
            .filter(|o| !o.handled && o.record.result != ActionResult::Failed)
            .map(|o| o.record.time.0)
            .max();
        if let Some(at) = skipped {
            self.retry_at = Some(at + UNDONE_RETRY);
        }
    }

    /// Remembers the status just written, at `now`.
    pub fn wrote(&mut self, status: RemediationPolicyStatus, now: Timestamp) {
        self.last_status = Some(status);
        self.last_written_at = Some(now);
    }

    /// Whether the Pending records a previous run left are resolved.
    pub(super) fn pending_resolved(&self) -> bool {
        self.pending_resolved
    }

    /// The last record of the failed action `key`, while it is checked.
    pub(super) fn failed_record(&self, key: &str) -> Option<&RecentAction> {
        self.failed_records.get(key)
    }

    /// The records whose status write failed, still to be written.
    pub(super) fn unwritten(&self) -> &[RecentAction] {
        &self.unwritten
    }

    /// Until when a status whose reports alone changed waits ([`REPORTS_EVERY`] after the last
    /// write); `None` once that has passed, or before any write.
    pub(super) fn reports_wait_until(&self, now: Timestamp) -> Option<Timestamp> {
        self.last_written_at.map(|at| at + REPORTS_EVERY).filter(|until| *until > now)
    }

    /// The notices about pods that newly need fencing (each pod is reported once while it
    /// keeps needing it), and the pods to remember as reported.
    pub(super) fn new_fencing_notices(
        &self,
        notices: Vec<FencingNotice>,
    ) -> (Vec<FencingNotice>, BTreeSet<String>) {
        let now: BTreeSet<String> = notices.iter().map(|n| n.uid.clone()).collect();
        let fresh =
            notices.into_iter().filter(|n| !self.fencing_notified.contains(&n.uid)).collect();
        (fresh, now)
    }

    /// The notices about pods newly stuck on a live node or left Ready=False, or whose evidence
    /// changed (one Event per cause, not per reconcile), and the pods to remember as reported.
    pub(super) fn new_pod_notices(
        &self,
        notices: Vec<PodNotice>,
    ) -> (Vec<PodNotice>, BTreeMap<String, String>) {
        let now: BTreeMap<String, String> =
            notices.iter().map(|n| (n.uid.clone(), n.evidence.clone())).collect();
        let fresh = notices
            .into_iter()
            .filter(|n| self.pod_notified.get(&n.uid) != Some(&n.evidence))
            .collect();
        (fresh, now)
    }

    /// What is left of the budget of Events about pods that report.
    pub(super) fn report_budget(&self) -> ReportBudget {
        self.report_budget
    }

    /// The failing nodes already reported as left alone, with the hold said.
    pub(super) fn node_notified(&self) -> &BTreeMap<String, &'static str> {
        &self.node_notified
    }

    /// What is new about the evidence in `plan`, and the nodes held alive to remember.
    pub(super) fn evidence_news(&self, plan: &Plan) -> (EvidenceNews, BTreeSet<String>) {
        let newly_held_alive = plan
            .nodes
            .iter()
            .filter(|n| n.held_alive.is_some() && !self.held_alive.contains(&*n.name))
            .cloned()
            .collect();
        let held_alive = plan
            .nodes
            .iter()
            .filter(|n| n.held_alive.is_some())
            .map(|n| n.name.to_string())
            .collect();
        let kind = |s: Option<&Suspension>| s.map(std::mem::discriminant);
        let changed = kind(plan.suspended.as_ref()) != kind(self.suspended.as_ref());
        let news =
            EvidenceNews { newly_held_alive, suspension: changed.then(|| plan.suspended.clone()) };
        (news, held_alive)
    }
}

/// Rebuilds the rate-limit history of `mode` from the status's records.
fn seed_recent(
    status: Option<&RemediationPolicyStatus>,
    mode: Mode,
    now: Timestamp,
) -> Vec<PastAction> {
    status
        .map(|s| {
            s.recent_actions
                .iter()
                .filter(|a| a.mode == mode && now.duration_since(a.time.0) < RATE_WINDOW)
                .filter(|a| a.result.spends_budget())
                .map(|a| PastAction { at: a.time.0, owner: owner_key(a) })
                .collect()
        })
        .unwrap_or_default()
}

/// The pod actions the status records as taken in `mode` (done, or recorded in DryRun), by the
/// keys the writer's outcomes carry. Node actions are keyed by the episode, which no record
/// holds: the node's own record annotation says what was done to it.
fn seed_acted(status: Option<&RemediationPolicyStatus>, mode: Mode) -> BTreeSet<String> {
    status
        .map(|s| {
            s.recent_actions
                .iter()
                .filter(|a| a.mode == mode && a.result.counts_as_action())
                .filter_map(|a| {
                    super::action::kinds::spec(a.action).acted_key.map(|key| key(&a.uid))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The per-owner budget key of a recorded action (`owner` is `Kind/name`).
pub fn owner_key(record: &RecentAction) -> Option<OwnerKey> {
    let (kind, name) = record.owner.as_deref()?.split_once('/')?;
    Some(OwnerKey {
        namespace: record.namespace.clone(),
        kind: kind.to_string(),
        name: name.to_string(),
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::crd::ActionKind;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    pub fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("test instant")
    }

    pub fn record(uid: &str, mode: Mode, result: ActionResult, t: i64) -> RecentAction {
        RecentAction {
            time: Time(at(t)),
            action: ActionKind::ForceDelete,
            mode,
            namespace: "ns".into(),
            name: uid.into(),
            uid: uid.into(),
            node: "n1".into(),
            owner: Some("ReplicaSet/web-1".into()),
            reason: String::new(),
            result,
            detail: None,
        }
    }

    fn outcome(record: &RecentAction) -> ActionOutcome<'_> {
        ActionOutcome { record, handled: record.result.counts_as_action(), acted_key: &record.uid }
    }

    #[test]
    fn a_fresh_history_starts_from_the_status_of_its_mode() {
        let status = RemediationPolicyStatus {
            recent_actions: vec![
                record("done", Mode::Enforce, ActionResult::Done, 50),
                record("skipped", Mode::Enforce, ActionResult::Skipped, 50),
                record("failed", Mode::Enforce, ActionResult::Failed, 50),
                record("old", Mode::Enforce, ActionResult::Done, 0),
                record("would", Mode::DryRun, ActionResult::WouldAct, 50),
            ],
            ..Default::default()
        };
        let mut history = PolicyHistory::default();
        let Past { recent, acted, .. } = history.past(Mode::Enforce, Some(&status), at(100));
        // Rate limits count every attempt of the last minute sent in this mode (done or
        // failed); a skip sent nothing.
        assert_eq!(recent.len(), 2);
        assert_eq!(
            recent[0].owner,
            Some(OwnerKey {
                namespace: "ns".into(),
                kind: "ReplicaSet".into(),
                name: "web-1".into()
            })
        );
        // Acted on: done (or recorded in DryRun), whatever its age; never skipped or failed.
        let want: BTreeSet<String> = ["done", "old"].map(String::from).into();
        assert_eq!(acted, want);

        // Switching mode starts afresh from that mode's records.
        let Past { recent, acted, .. } = history.past(Mode::DryRun, Some(&status), at(100));
        assert_eq!((recent.len(), acted.len()), (1, 1));
    }

    #[test]
    fn recorded_pod_actions_are_remembered_by_the_writer_keys() {
        let with_kind = |uid: &str, action: ActionKind| RecentAction {
            action,
            ..record(uid, Mode::DryRun, ActionResult::WouldAct, 50)
        };
        let status = RemediationPolicyStatus {
            recent_actions: vec![
                with_kind("held", ActionKind::RemoveFinalizers),
                with_kind("stale", ActionKind::Evict),
                with_kind("node-uid", ActionKind::Cordon),
            ],
            ..Default::default()
        };
        let past = PolicyHistory::default().past(Mode::DryRun, Some(&status), at(100));
        // A removal is keyed apart from the pod's own force delete, which may still follow on a
        // dead node; node actions are keyed by their episode, which no record holds.
        let want: BTreeSet<String> =
            [crate::core::removal_acted_key("held"), "stale".into()].into();
        assert_eq!(past.acted, want);
    }

    #[test]
    fn failed_attempts_wait_twice_as_long_each_time_until_done() {
        let failed = |t: i64| record("pod-uid", Mode::Enforce, ActionResult::Failed, t);
        let mut history = PolicyHistory::default();
        let waits: Vec<i64> = [0, 10, 30, 70, 150, 310, 610, 910]
            .into_iter()
            .map(|t| {
                history.record(&[outcome(&failed(t))], ["pod-uid"].into_iter());
                let backoff = history.failures["pod-uid"];
                backoff.until.duration_since(at(t)).as_secs()
            })
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
        // A failure does not ask for the 10 s retry of a skip: its backoff is the plan's deadline.
        assert_eq!(history.retry_at, None);
        let done = record("pod-uid", Mode::Enforce, ActionResult::Done, 1000);
        history.record(&[outcome(&done)], ["pod-uid"].into_iter());
        assert!(history.failures.is_empty());
        // Forgotten once the pod is gone.
        history.record(&[outcome(&failed(1100))], ["pod-uid"].into_iter());
        history.record(&[], std::iter::empty());
        assert!(history.failures.is_empty());
    }

    #[test]
    fn a_refused_or_skipped_action_waits_its_backoff_too() {
        // A PodDisruptionBudget refuses the eviction every time: each refusal is a skip, and
        // the action waits 10 s, 20 s, 40 s, ... whatever else brings a reconcile.
        let skipped = |t: i64| RecentAction {
            action: ActionKind::Evict,
            ..record("pod-uid", Mode::Enforce, ActionResult::Skipped, t)
        };
        let mut history = PolicyHistory::default();
        let waits: Vec<i64> = [0, 10, 30]
            .into_iter()
            .map(|t| {
                history.record(&[outcome(&skipped(t))], ["pod-uid"].into_iter());
                history.failures["pod-uid"].until.duration_since(at(t)).as_secs()
            })
            .collect();
        assert_eq!(waits, [10, 20, 40]);
    }

    #[test]
    fn a_pod_notice_is_sent_again_when_its_evidence_changes() {
        let notice = |uid: &str, evidence: &str| PodNotice {
            namespace: "ns".into(),
            pod: uid.into(),
            uid: uid.into(),
            reason: "StuckTerminating",
            cause: "Finalizers",
            quote_kubelet: false,
            warning: true,
            evidence: evidence.into(),
            note: String::new(),
        };
        let mut history = PolicyHistory::default();
        // (case, notices the plan makes, the pods sent a notice)
        let table: [(&str, Vec<PodNotice>, Vec<&str>); 5] = [
            ("new", vec![notice("a", "f1")], vec!["a"]),
            ("same evidence", vec![notice("a", "f1"), notice("b", "f1")], vec!["b"]),
            ("a's evidence changed", vec![notice("a", "f2"), notice("b", "f1")], vec!["a"]),
            ("b cleared", vec![notice("a", "f2")], vec![]),
            ("b back", vec![notice("a", "f2"), notice("b", "f1")], vec!["b"]),
        ];
        for (case, notices, want) in table {
            let (fresh, remembered) = history.new_pod_notices(notices);
            let sent: Vec<&str> = fresh.iter().map(|n| n.uid.as_str()).collect();
            assert_eq!(sent, want, "{case}");
            history.pod_notified = remembered;
        }
    }
}
