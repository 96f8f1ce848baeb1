//! What the policy controller remembers about one policy between reconciles: the actions it
//! took (for rate limits and "already acted"), the status it last wrote, and what it last
//! logged about the evidence. Its methods are the only bookkeeping the reconcile does.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;

use crate::core::{
    Backoff, CircuitMemory, FencingNotice, NodeSummary, OwnerKey, PastAction, Plan, PodNotice,
    PodNow, RATE_WINDOW, Suspension, resolve_pending,
};
use crate::crd::{ActionResult, Mode, RecentAction, RemediationPolicyStatus};
use crate::writer::Outcome;

#[derive(Debug, Default)]
pub struct PolicyMemory {
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
}

/// How soon a policy decides again after one of its actions was skipped: an eviction a
/// PodDisruptionBudget refused, a last look that found the world changed. A request that failed
/// or timed out is retried after a doubling wait instead ([`Backoff`]).
pub const UNDONE_RETRY: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

/// What changed in the evidence since the last reconcile, to be logged once.
#[derive(Debug, Default)]
pub struct EvidenceNews<'a> {
    /// Nodes held alive now that were not before.
    pub newly_held_alive: Vec<&'a NodeSummary>,
    /// `Some(now)` when the suspension changed kind (`Some(None)`: trusted again).
    pub suspension: Option<Option<&'a Suspension>>,
}

impl PolicyMemory {
    /// The status to compare with: the last one written, else the one read with the policy.
    pub fn previous_status(
        &self,
        from_policy: Option<&RemediationPolicyStatus>,
    ) -> Option<RemediationPolicyStatus> {
        self.last_status.clone().or_else(|| from_policy.cloned())
    }

    /// The history of `mode` at `now`: recent actions (for rate limits) and pods already acted
    /// on. A new mode (and a fresh memory, after a restart) starts from the status's records of
    /// that mode, so neither a restart nor `plan` forgets what was done.
    pub fn history(
        &mut self,
        mode: Mode,
        status: Option<&RemediationPolicyStatus>,
        now: Timestamp,
    ) -> (Vec<PastAction>, BTreeSet<String>) {
        if self.mode != Some(mode) {
            self.mode = Some(mode);
            self.recent = seed_recent(status, mode, now);
            self.acted = seed_acted(status, mode);
        }
        self.recent.retain(|a| now.duration_since(a.at) < RATE_WINDOW);
        (self.recent.clone(), self.acted.clone())
    }

    /// Records what the writer did. What is no longer present (pods, and the nodes of node
    /// actions, by UID) is forgotten.
    pub fn record<'a>(&mut self, outcomes: &[Outcome], live: impl Iterator<Item = &'a str>) {
        let live: BTreeSet<&str> = live.collect();
        self.acted.retain(|key| live.contains(key.split('/').next().unwrap_or_default()));
        for outcome in outcomes.iter().filter(|o| o.record.result.spends_budget()) {
            self.recent
                .push(PastAction { at: outcome.record.time.0, owner: owner_key(&outcome.record) });
            if outcome.handled {
                self.acted.insert(outcome.acted_key.clone());
            }
        }
        self.failures.retain(|key, _| live.contains(key.split('/').next().unwrap_or_default()));
        // An action not done (failed, or skipped: refused by a budget, or the last look found the
        // world changed) waits its backoff whatever else triggers a reconcile, so that neither
        // its own record's status write nor other watch events bring it back at once.
        for outcome in outcomes {
            let key = &outcome.acted_key;
            if outcome.record.result == ActionResult::Failed && !outcome.record.namespace.is_empty()
            {
                self.failed_records.insert(key.clone(), outcome.record.clone());
            } else {
                self.failed_records.remove(key);
            }
            if outcome.handled {
                self.failures.remove(key);
            } else {
                let failures = self.failures.get(key).map_or(0, |b| b.failures) + 1;
                self.failures.insert(key.clone(), Backoff::after(failures, outcome.record.time.0));
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

    /// The first time it is asked (once per run of the operator), the status's Pending records
    /// resolved by `pod_now` ([`resolve_pending`]); afterwards nothing.
    pub fn resolve_pending_once(
        &mut self,
        status: Option<&RemediationPolicyStatus>,
        pod_now: impl Fn(&str) -> PodNow,
        node_done: impl Fn(&RecentAction) -> bool,
    ) -> Vec<RecentAction> {
        if std::mem::replace(&mut self.pending_resolved, true) {
            return Vec::new();
        }
        resolve_pending(status, pod_now, node_done)
    }

    /// The nodes of the status's Pending node actions (by name) while they are still to be
    /// resolved this run.
    pub fn pending_nodes(&self, status: Option<&RemediationPolicyStatus>) -> Vec<String> {
        if self.pending_resolved {
            return Vec::new();
        }
        let mut nodes: Vec<String> = status
            .into_iter()
            .flat_map(|s| &s.recent_actions)
            .filter(|r| r.result == ActionResult::Pending && r.namespace.is_empty())
            .map(|r| r.name.clone())
            .collect();
        nodes.sort();
        nodes.dedup();
        nodes
    }

    /// The circuit to plan from: the last plan's, else the one the status remembers.
    pub fn circuit(&self, from_status: Option<CircuitMemory>) -> Option<CircuitMemory> {
        self.circuit.clone().or(from_status)
    }

    /// Remembers the circuit a plan left.
    pub fn circuit_after(&mut self, circuit: CircuitMemory) {
        self.circuit = Some(circuit);
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

    /// A failed action a fresh read settled (done after all, or moot): not checked again, and
    /// no longer backing off.
    pub fn failure_settled(&mut self, key: &str) {
        self.failed_records.remove(key);
        self.failures.remove(key);
    }

    /// The pods of the status's Pending records (namespace, name, UID) while they are still to
    /// be resolved this run; empty afterwards.
    pub fn pending_pods(
        &self,
        status: Option<&RemediationPolicyStatus>,
    ) -> Vec<(String, String, String)> {
        if self.pending_resolved {
            return Vec::new();
        }
        status
            .into_iter()
            .flat_map(|s| &s.recent_actions)
            .filter(|r| r.result == ActionResult::Pending && !r.namespace.is_empty())
            .map(|r| (r.namespace.clone(), r.name.clone(), r.uid.clone()))
            .collect()
    }

    /// Keeps records the status write just failed to carry, for the next write.
    pub fn unwritten(&mut self, records: impl IntoIterator<Item = RecentAction>) {
        self.unwritten.extend(records);
    }

    /// The records still to be written, which the caller now carries.
    pub fn take_unwritten(&mut self) -> Vec<RecentAction> {
        std::mem::take(&mut self.unwritten)
    }

    /// The actions failing now, and when each is attempted again.
    pub fn backoff(&self) -> BTreeMap<String, Backoff> {
        self.failures.clone()
    }

    /// When to decide again for an action not done, if that is still ahead of `now`.
    pub fn retry_at(&mut self, now: Timestamp) -> Option<Timestamp> {
        self.retry_at = self.retry_at.filter(|t| *t > now);
        self.retry_at
    }

    /// Remembers the status just written, at `now`.
    pub fn wrote(&mut self, status: RemediationPolicyStatus, now: Timestamp) {
        self.last_status = Some(status);
        self.last_written_at = Some(now);
    }

    /// Until when a status whose counts alone changed waits ([`crate::core::COUNTS_EVERY`]
    /// after the last write); `None` once that has passed, or before any write.
    pub fn counts_wait_until(&self, now: Timestamp) -> Option<Timestamp> {
        self.last_written_at.map(|at| at + crate::core::COUNTS_EVERY).filter(|until| *until > now)
    }

    /// The notices about pods that newly need fencing (each pod is reported once while it
    /// keeps needing it), and remembers them.
    pub fn new_fencing_notices(&mut self, notices: Vec<FencingNotice>) -> Vec<FencingNotice> {
        let now: BTreeSet<String> = notices.iter().map(|n| n.uid.clone()).collect();
        let fresh =
            notices.into_iter().filter(|n| !self.fencing_notified.contains(&n.uid)).collect();
        self.fencing_notified = now;
        fresh
    }

    /// The notices about pods newly stuck on a live node or left Ready=False, or whose evidence
    /// changed (one Event per cause, not per reconcile), and remembers them.
    pub fn new_pod_notices(&mut self, notices: Vec<PodNotice>) -> Vec<PodNotice> {
        let now: BTreeMap<String, String> =
            notices.iter().map(|n| (n.uid.clone(), n.evidence.clone())).collect();
        let fresh = notices
            .into_iter()
            .filter(|n| self.pod_notified.get(&n.uid) != Some(&n.evidence))
            .collect();
        self.pod_notified = now;
        fresh
    }

    /// What is new about the evidence in `plan`, and remembers it.
    pub fn evidence_news<'a>(&mut self, plan: &'a Plan) -> EvidenceNews<'a> {
        let newly_held_alive = plan
            .nodes
            .iter()
            .filter(|n| n.held_alive.is_some() && !self.held_alive.contains(&n.name))
            .collect();
        self.held_alive =
            plan.nodes.iter().filter(|n| n.held_alive.is_some()).map(|n| n.name.clone()).collect();
        let kind = |s: Option<&Suspension>| s.map(std::mem::discriminant);
        let changed = kind(plan.suspended.as_ref()) != kind(self.suspended.as_ref());
        self.suspended = plan.suspended.clone();
        EvidenceNews { newly_held_alive, suspension: changed.then_some(plan.suspended.as_ref()) }
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
    use crate::core::removal_acted_key;
    use crate::crd::ActionKind;
    status
        .map(|s| {
            s.recent_actions
                .iter()
                .filter(|a| a.mode == mode && a.result.counts_as_action())
                .filter_map(|a| match a.action {
                    ActionKind::ForceDelete | ActionKind::Evict => Some(a.uid.clone()),
                    ActionKind::RemoveFinalizers => Some(removal_acted_key(&a.uid)),
                    _ => None,
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

/// What every policy in Enforce did, shared by all of them: the per-owner budgets are one
/// budget whatever number of policies select a pod, and a pod one policy acted on is not acted
/// on again by another. Held (a lock) from observing to recording by each Enforce reconcile, so
/// two overlapping policies never decide on the same pod at the same time.
#[derive(Debug, Default)]
pub struct Ledger {
    /// Recent actions, with the policy that took them.
    actions: Vec<(String, PastAction)>,
    /// Pods acted on, by UID (forgotten once gone).
    acted: BTreeSet<String>,
}

impl Ledger {
    /// The other policies' actions of the last minute, and every pod acted on.
    pub fn for_policy(
        &mut self,
        policy: &str,
        now: Timestamp,
    ) -> (Vec<PastAction>, BTreeSet<String>) {
        self.actions.retain(|(_, a)| now.duration_since(a.at) < RATE_WINDOW);
        let others =
            self.actions.iter().filter(|(p, _)| p != policy).map(|(_, a)| a.clone()).collect();
        (others, self.acted.clone())
    }

    /// Records a policy's outcomes in Enforce. Pods no longer present are forgotten.
    pub fn record<'a>(
        &mut self,
        policy: &str,
        outcomes: &[Outcome],
        live_pods: impl Iterator<Item = &'a str>,
    ) {
        let live: BTreeSet<&str> = live_pods.collect();
        self.acted.retain(|key| live.contains(key.split('/').next().unwrap_or_default()));
        for outcome in outcomes.iter().filter(|o| o.record.result.spends_budget()) {
            let action =
                PastAction { at: outcome.record.time.0, owner: owner_key(&outcome.record) };
            self.actions.push((policy.to_string(), action));
            // Every pod action, once, whichever policy took it: one eviction per pod across
            // every policy, as one force delete.
            let pod_action = !outcome.record.namespace.is_empty();
            if outcome.handled && pod_action {
                self.acted.insert(outcome.acted_key.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{ActionKind, ActionResult};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("test instant")
    }

    fn record(uid: &str, mode: Mode, result: ActionResult, t: i64) -> RecentAction {
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

    #[test]
    fn a_fresh_memory_starts_from_the_status_of_its_mode() {
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
        let mut memory = PolicyMemory::default();
        let (recent, acted) = memory.history(Mode::Enforce, Some(&status), at(100));
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
        let (recent, acted) = memory.history(Mode::DryRun, Some(&status), at(100));
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
        let (_, acted) = PolicyMemory::default().history(Mode::DryRun, Some(&status), at(100));
        // A removal is keyed apart from the pod's own force delete, which may still follow on a
        // dead node; node actions are keyed by their episode, which no record holds.
        let want: BTreeSet<String> =
            [crate::core::removal_acted_key("held"), "stale".into()].into();
        assert_eq!(acted, want);
    }

    #[test]
    fn failed_attempts_wait_twice_as_long_each_time_until_done() {
        let outcome = |result: ActionResult, t: i64| Outcome {
            handled: result.counts_as_action(),
            acted_key: "pod-uid".into(),
            record: RecentAction { result, ..record("pod-uid", Mode::Enforce, result, t) },
        };
        let mut memory = PolicyMemory::default();
        let waits: Vec<i64> = [0, 10, 30, 70, 150, 310, 610, 910]
            .into_iter()
            .map(|t| {
                memory.record(&[outcome(ActionResult::Failed, t)], ["pod-uid"].into_iter());
                let backoff = memory.backoff()["pod-uid"];
                backoff.until.duration_since(at(t)).as_secs()
            })
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
        // A failure does not ask for the 10 s retry of a skip: its backoff is the plan's deadline.
        assert_eq!(memory.retry_at(at(0)), None);
        memory.record(&[outcome(ActionResult::Done, 1000)], ["pod-uid"].into_iter());
        assert!(memory.backoff().is_empty());
        // Forgotten once the pod is gone.
        memory.record(&[outcome(ActionResult::Failed, 1100)], ["pod-uid"].into_iter());
        memory.record(&[], std::iter::empty());
        assert!(memory.backoff().is_empty());
    }

    #[test]
    fn a_refused_or_skipped_action_waits_its_backoff_too() {
        // A PodDisruptionBudget refuses the eviction every time: each refusal is a skip, and
        // the action waits 10 s, 20 s, 40 s, ... whatever else brings a reconcile.
        let skipped = |t: i64| Outcome {
            handled: false,
            acted_key: "pod-uid".into(),
            record: RecentAction {
                action: ActionKind::Evict,
                ..record("pod-uid", Mode::Enforce, ActionResult::Skipped, t)
            },
        };
        let mut memory = PolicyMemory::default();
        let waits: Vec<i64> = [0, 10, 30]
            .into_iter()
            .map(|t| {
                memory.record(&[skipped(t)], ["pod-uid"].into_iter());
                memory.backoff()["pod-uid"].until.duration_since(at(t)).as_secs()
            })
            .collect();
        assert_eq!(waits, [10, 20, 40]);
    }

    #[test]
    fn the_circuit_outlives_a_failed_status_write() {
        use crate::crd::CircuitState;
        let mut memory = PolicyMemory::default();
        let closed = CircuitMemory::closed(at(0));
        // Nothing remembered yet: the status decides.
        assert_eq!(memory.circuit(Some(closed.clone())), Some(closed.clone()));
        // The plan latched the circuit; its status write failed, so the status still says
        // Closed: the latch is what the next plan starts from.
        let latched = CircuitMemory {
            state: CircuitState::Latched,
            since: at(5),
            until: None,
            rearm_token: None,
        };
        memory.circuit_after(latched.clone());
        assert_eq!(memory.circuit(Some(closed)), Some(latched));
    }
}
