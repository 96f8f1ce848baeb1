//! `decide(&observed, &policy, &history, &reads, now) -> Decision`: the reconcile's one pure
//! step. The [`plan`](plan()) with everything that goes with it: the desired status (reports
//! that alone changed held until [`REPORTS_EVERY`](super::REPORTS_EVERY)), the notices not sent
//! yet, the gauges, the earlier records to write (unwritten, and Pending or Failed ones resolved
//! by fresh reads), and when to decide again. What the decision leaves in the history is kept by
//! [`PolicyHistory::after_commit`] once the writer has committed it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use jiff::Timestamp;

use super::ahead::{Ahead, ahead};
use super::history::{Decided, EvidenceNews, PolicyHistory};
use super::live_node_cause::StuckCause;
use super::node::NodeState;
use super::node_notices::{NodeNotice, new_node_notices};
use super::observed::{NodeView, Observed};
use super::pending_resolution::{PodNow, node_action_took_effect, resolve_failed, resolve_pending};
use super::plan::{Plan, plan};
use super::pod_notices::{
    BeyondBudget, Budgeted, FencingNotice, PodNotice, held_by_finalizers, needs_fencing,
    ready_on_dead_node, repaired_by_kubelet, stale_ready, stuck_on_live_nodes, within_budget,
};
use super::policy::ValidatedPolicy;
use super::status::{
    Evaluation, blocked_rollouts_in_scope, desired_status, hold_reports, push_recent_actions,
};
use super::storm::transition_notices;
use crate::crd::{RecentAction, RemediationPolicyStatus};

/// What the reconcile read for the decision besides the caches: the policy object's generation
/// and status, and the fresh reads the bookkeeping asks for ([`PolicyHistory::pending_pods`],
/// [`PolicyHistory::pending_nodes`], [`PolicyHistory::failed_to_check`]), never from the
/// caches (which hold only some pods: an absence there is no evidence the pod is gone).
#[derive(Debug, Default)]
pub struct Reads<'a> {
    /// The policy's `metadata.generation`.
    pub generation: Option<i64>,
    /// The status to compare with ([`PolicyHistory::previous_status`]).
    pub previous: Option<&'a RemediationPolicyStatus>,
    /// The pods and nodes of the Pending records, when every read succeeded (`None`: one
    /// failed, and they are resolved by a later reconcile).
    pub pending: Option<PendingNow>,
    /// The pods of failed requests read afresh, by acted key (a read that failed is absent).
    pub failed: BTreeMap<String, PodNow>,
}

/// The pods of the Pending records by UID, and their nodes by name (`None`: no such Node).
#[derive(Debug, Default)]
pub struct PendingNow {
    pub pods: HashMap<String, PodNow>,
    pub nodes: HashMap<String, Option<NodeView>>,
}

/// Everything one reconcile decides.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub plan: Plan,
    /// The status to write (before this reconcile's action records).
    pub status: RemediationPolicyStatus,
    /// The circuit's transitions (opened, latched, re-armed, cooling down, closed): reason and
    /// note.
    pub circuit_notices: Vec<(&'static str, String)>,
    /// Pods newly held for want of fencing or by a finalizer (within the report budget).
    pub fencing_notices: Vec<FencingNotice>,
    /// Pods newly stuck on a live node or left Ready=False, or with new evidence (within the
    /// report budget).
    pub pod_notices: Vec<PodNotice>,
    /// The new notices beyond the report budget ([`super::pod_notices::ReportBudget`]), counted
    /// in one Event on the policy, if any.
    pub reports_beyond_budget: Option<BeyondBudget>,
    /// Dead nodes newly left alone (in maintenance, shutting down, another tool's): once per
    /// node and episode.
    pub node_notices: Vec<NodeNotice>,
    /// What changed in the evidence, to log once.
    pub evidence: EvidenceNews,
    pub gauges: Gauges,
    /// Records whose status write failed, carried into this one.
    pub carried: Vec<RecentAction>,
    /// Records resolved now: Pending ones a previous run left (once per run), Failed ones a
    /// fresh read shows done after all.
    pub resolved: Vec<RecentAction>,
    /// Records ahead of their actions: stored by this decision's status write (already in
    /// `status`, with the withdrawn ones), and the plan's actions whose record is stored.
    pub ahead: Ahead,
    /// When to decide again at the latest: the plan's next deadline (or ahead of it, to record
    /// its actions), or the end of a reports hold. (An action skipped by the commit asks for a
    /// retry of its own.)
    pub wake_at: Option<Timestamp>,
    /// What the history keeps of this decision, whatever the commit does.
    pub decided: Decided,
}

/// The values of the policy's gauges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gauges {
    pub circuit_open: bool,
    /// Pods held only for want of fencing evidence.
    pub needing_fencing: usize,
    /// Pods left Ready=False after a node blip.
    pub stale_ready: usize,
    /// Pods left Ready=True on dead nodes.
    pub ready_on_dead_node: usize,
    /// Pods stuck Terminating on live nodes, by cause code (every code, zero included).
    pub live_node_stuck: Vec<(&'static str, usize)>,
    /// Pods Terminating past their deletionTimestamp, by the state of their node (every
    /// state, zero included).
    pub stuck_pods: Vec<(NodeState, usize)>,
}

/// Decides at `now`. Pure: same inputs, same decision.
pub fn decide(
    observed: &Observed,
    policy: &ValidatedPolicy,
    history: &PolicyHistory,
    reads: &Reads<'_>,
    now: Timestamp,
) -> Decision {
    let plan = plan(observed, policy, now);
    let fencing = needs_fencing(&plan);
    let gauges = gauges(observed, &plan, fencing.len(), now);
    let held = fencing.into_iter().chain(held_by_finalizers(&plan)).collect();
    let (fencing_notices, fencing_notified) = history.new_fencing_notices(held);
    let pods = stuck_on_live_nodes(&plan)
        .into_iter()
        .chain(stale_ready(&plan))
        .chain(ready_on_dead_node(&plan))
        .chain(repaired_by_kubelet(&plan))
        .collect();
    let (pod_notices, pod_notified) = history.new_pod_notices(pods);
    let Budgeted {
        fencing: fencing_notices,
        pods: pod_notices,
        budget: report_budget,
        beyond: reports_beyond_budget,
    } = within_budget(history.report_budget(), now, fencing_notices, pod_notices);
    let (node_notices, node_notified) = new_node_notices(&plan, observed, history.node_notified());
    let (evidence, held_alive) = history.evidence_news(&plan);
    let earlier = resolve_earlier(history, reads);
    let carried = history.unwritten().to_vec();
    let evaluation = Evaluation::Planned { policy, plan: &plan };
    let mut status = desired_status(evaluation, reads.generation, reads.previous, now);
    status.blocked_rollouts = blocked_rollouts_in_scope(observed, &plan, policy);
    let stored_ahead = history.stored_ahead();
    let ahead = ahead(observed, policy, &plan, stored_ahead, reads.previous, now);
    let written_anyway = !plan.actions.is_empty()
        || !carried.is_empty()
        || !earlier.resolved.is_empty()
        || !ahead.records.is_empty()
        || !ahead.withdrawn.is_empty();
    let reports_held =
        hold_reports_until(&mut status, reads.previous, history, written_anyway, now);
    push_recent_actions(&mut status, ahead.records.iter().chain(&ahead.withdrawn).cloned());
    let wakes = [plan.next_deadline, reports_held, ahead.wake_at];
    Decision {
        circuit_notices: transition_notices(&plan.storm),
        wake_at: wakes.into_iter().flatten().min(),
        decided: Decided {
            circuit: plan.storm.memory.clone(),
            held_alive,
            suspended: plan.suspended.clone(),
            fencing_notified,
            pod_notified,
            report_budget,
            node_notified,
            pending_resolved: earlier.pending_resolved,
            settled: earlier.settled,
            earlier: carried.iter().chain(&earlier.resolved).cloned().collect(),
            ahead_recorded: ahead.recorded.clone(),
            ahead_forgotten: ahead.forgotten.clone(),
        },
        ahead,
        plan,
        status,
        fencing_notices,
        pod_notices,
        reports_beyond_budget,
        node_notices,
        evidence,
        gauges,
        carried,
        resolved: earlier.resolved,
    }
}

/// The earlier records a decision resolves, and the bookkeeping that goes with them.
struct Earlier {
    resolved: Vec<RecentAction>,
    /// The Pending records are resolved (now or before): once per run.
    pending_resolved: bool,
    /// The failed actions settled by a fresh read, by acted key.
    settled: Vec<String>,
}

/// The Pending records a previous run left, resolved by what the fresh reads show (once per
/// run, and only once every read succeeded); then the failed requests a fresh read shows done
/// after all (a Done record replaces the Failed one).
fn resolve_earlier(history: &PolicyHistory, reads: &Reads<'_>) -> Earlier {
    let mut resolved = Vec::new();
    let resolving = reads.pending.as_ref().filter(|_| !history.pending_resolved());
    if let Some(seen) = resolving {
        let pod_now = |uid: &str| seen.pods.get(uid).copied().unwrap_or(PodNow::Present);
        let node_done = |r: &RecentAction| {
            seen.nodes.get(&r.name).is_some_and(|n| node_action_took_effect(r, n.as_ref()))
        };
        resolved = resolve_pending(reads.previous, pod_now, node_done);
    }
    let mut settled = Vec::new();
    for (key, pod_now) in &reads.failed {
        let Some(record) = history.failed_record(key) else { continue };
        resolved.extend(resolve_failed(record, *pod_now));
        settled.push(key.clone());
    }
    Earlier {
        resolved,
        pending_resolved: history.pending_resolved() || resolving.is_some(),
        settled,
    }
}

/// Reports that alone changed are written at most every [`REPORTS_EVERY`](super::REPORTS_EVERY):
/// puts back the previous reports in `status` and returns until when, unless the status is
/// written anyway (`written_anyway`: actions, or earlier records).
fn hold_reports_until(
    status: &mut RemediationPolicyStatus,
    previous: Option<&RemediationPolicyStatus>,
    history: &PolicyHistory,
    written_anyway: bool,
    now: Timestamp,
) -> Option<Timestamp> {
    let previous = previous.filter(|_| !written_anyway)?;
    let until = history.reports_wait_until(now)?;
    hold_reports(status, previous).then_some(until)
}

/// The circuit, the pods held for fencing and left Ready=False, and the pods stuck Terminating:
/// on live nodes by cause, past their deletionTimestamp by the state of their node.
fn gauges(observed: &Observed, plan: &Plan, needing_fencing: usize, now: Timestamp) -> Gauges {
    let causes = StuckCause::CODES
        .map(|cause| (cause, plan.stuck.iter().filter(|s| s.cause.code() == cause).count()));
    let overdue: BTreeSet<&str> = observed
        .pods
        .iter()
        .filter(|p| p.deletion_timestamp.get().is_some_and(|t| t <= now))
        .map(|p| p.uid.as_str())
        .collect();
    let state_of = |node: &str| plan.nodes.get(node).map_or(NodeState::Dead, |n| n.state);
    let stuck = [NodeState::Healthy, NodeState::Unhealthy, NodeState::Dead].map(|state| {
        let on = |d: &&super::verdict::PodDecision| state_of(&d.node) == state;
        (
            state,
            plan.decisions.iter().filter(|d| overdue.contains(d.uid.as_str())).filter(on).count(),
        )
    });
    Gauges {
        circuit_open: plan.storm.holds(),
        needing_fencing,
        stale_ready: plan.stale.len(),
        ready_on_dead_node: plan.ready_on_dead.len(),
        live_node_stuck: causes.to_vec(),
        stuck_pods: stuck.to_vec(),
    }
}

#[cfg(test)]
mod tests {

    use jiff::SignedDuration;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::core::ahead::RECORD_AHEAD;
    use crate::core::history::tests::record;
    use crate::core::history::{ActionOutcome, StatusWrite};
    use crate::core::observed::fixtures::pod;
    use crate::core::observed::{OwnerRef, PodView, Readiness};
    use crate::core::stamp::Stamp;
    use crate::core::zones::ZONE_LABEL;
    use crate::crd::{ActionKind, ActionResult, CircuitState, Mode, RemediationPolicySpec};

    /// 2026-01-01T00:10:00Z plus `s` seconds: the fixtures' pods are due at 00:08:30.
    fn at(s: i64) -> Timestamp {
        let ten: Timestamp = "2026-01-01T00:10:00Z".parse().expect("ts");
        ten + SignedDuration::from_secs(s)
    }

    /// A node Ready since 00:00, or dead (Unknown, no Lease renewal since 00:00), each in a
    /// zone of its own so that the zone guard holds nothing.
    fn node(name: &str, ready: bool) -> NodeView {
        let mut node = NodeView::unknown(name);
        let o = &mut node.observation;
        let midnight = "2026-01-01T00:00:00Z".parse().expect("ts");
        o.readiness = if ready { Readiness::Ready } else { Readiness::Unknown };
        o.ready_transition = Some(midnight).into();
        o.not_ready_seen = (!ready).then_some(midnight).into();
        (o.lease_renewed, o.lease_seen) = (midnight.into(), midnight.into());
        node.labels = [(ZONE_LABEL, name)].into_iter().collect();
        node.control.uid = format!("uid-{name}").into();
        node
    }

    /// A StatefulSet pod: held on a dead node for want of fencing evidence.
    fn stateful(name: &str, node: &str) -> PodView {
        let owner = OwnerRef { kind: "StatefulSet".into(), name: "db".into(), uid: "db".into() };
        PodView { owner: Some(owner), ..pod(name, node) }
    }

    fn world(nodes: Vec<NodeView>, pods: Vec<PodView>) -> Observed {
        let synced = "2025-12-31T23:00:00Z".parse().expect("ts");
        let nodes = nodes.into_iter().map(Into::into).collect();
        let pods = pods.into_iter().map(Into::into).collect();
        Observed { nodes, pods, watch_synced_at: Some(synced), ..Default::default() }
    }

    /// The default policy, in `mode`, with a circuit that never trips unless `f` says so.
    fn policy(mode: Mode, f: impl FnOnce(&mut RemediationPolicySpec)) -> ValidatedPolicy {
        let mut spec = RemediationPolicySpec { mode, ..Default::default() };
        spec.safety.max_unhealthy_nodes = IntOrString::String("100%".into());
        f(&mut spec);
        crate::core::validate(&spec).expect("valid test policy")
    }

    /// What the controller does: the world as the history lets it see it, then decide.
    fn decide_at(
        history: &mut PolicyHistory,
        world: &Observed,
        policy: &ValidatedPolicy,
        reads: &Reads<'_>,
        now: Timestamp,
    ) -> (Observed, Decision) {
        let past = history.past(policy.mode, reads.previous, now);
        let mut observed = world.clone();
        (observed.recent_actions, observed.acted_pods) = (past.recent, past.acted);
        observed.backoff = past.backoff;
        observed.storm.previous = past.circuit;
        let decision = decide(&observed, policy, history, reads, now);
        (observed, decision)
    }

    /// Decides at `now` with nothing read afresh, and keeps a commit that did nothing and wrote
    /// `write`.
    fn decide_and_commit(
        history: &mut PolicyHistory,
        world: &Observed,
        policy: &ValidatedPolicy,
        now: Timestamp,
        write: impl FnOnce(&Decision) -> StatusWrite,
    ) -> Decision {
        let previous = history.previous_status(None);
        let reads = Reads { previous: previous.as_ref(), ..Default::default() };
        let (observed, decision) = decide_at(history, world, policy, &reads, now);
        let write = write(&decision);
        history.after_commit(decision.decided.clone(), &[], &observed, write, now);
        decision
    }

    /// What the watch index defers ([`crate::index::state::Change::At`]): a pod within its
    /// grace period (by deletionTimestamp and by our sighting) on a Ready node changes nothing
    /// a decision does or says before its grace ends, under any policy: not its actions, its
    /// status, its notices or its gauges. Only the wake-up may come sooner.
    #[test]
    fn a_pod_within_its_grace_on_a_ready_node_changes_nothing_but_the_wake_up() {
        let eager = |spec: &mut RemediationPolicySpec| {
            spec.live_node_stuck.delay_after_grace = "0s".into();
            spec.live_node_stuck.force_delete_after = Some("5s".into());
            spec.live_node_stuck.force_delete_unfenced = true;
            spec.finalizers.removable = vec!["example.com/hold".into()];
            spec.finalizers.remove_after = "0s".into();
            spec.stuck_terminating.delay_after_grace = "0s".into();
        };
        let policies = [
            ("default, Enforce", policy(Mode::Enforce, |_| {})),
            ("eager on live nodes, Enforce", policy(Mode::Enforce, eager)),
            ("eager on live nodes, DryRun", policy(Mode::DryRun, eager)),
        ];
        // Deleted at 00:07:30 with 30 s of grace (deletionTimestamp 00:08:00), on a Ready node,
        // a finalizer and a running container: once its grace ends, every rule has something
        // to say about it. A second ReplicaSet's pod is stuck on a dead node meanwhile.
        let within = |name: &str, owner: &str| {
            let mut p = pod(name, "live");
            p.finalizers = vec!["example.com/hold".into()];
            p.running_containers = Box::new(["app".into()]);
            p.owner =
                Some(OwnerRef { kind: "ReplicaSet".into(), name: owner.into(), uid: owner.into() });
            p
        };
        let stuck = PodView {
            owner: Some(OwnerRef {
                kind: "ReplicaSet".into(),
                name: "other".into(),
                uid: "other".into(),
            }),
            ..pod("stuck", "dead")
        };
        let nodes = || vec![node("live", true), node("dead", false)];
        let without = world(nodes(), vec![stuck.clone()]);
        let with = world(nodes(), vec![stuck.clone(), within("within", "rs-a")]);
        let grace_ends = at(-120);
        // The decisions without and with the pod, at `now`.
        let pair = |policy: &ValidatedPolicy, now: Timestamp| {
            let decide_in = |w: &Observed| {
                decide_at(&mut PolicyHistory::default(), w, policy, &Reads::default(), now).1
            };
            (decide_in(&without), decide_in(&with))
        };
        // Within RECORD_AHEAD of its due instant an action gets its record ahead: that alone
        // may differ then.
        let without_ahead = |decision: &Decision| {
            let mut status = decision.status.clone();
            let ahead =
                |r: &RecentAction| r.detail.as_deref().is_some_and(|d| d.starts_with("due at"));
            status.recent_actions.retain(|r| !ahead(r));
            status
        };
        for (case, policy) in &policies {
            for now in [at(-150), at(-121)] {
                let (alone, both) = pair(policy, now);
                assert_eq!(both.plan.actions, alone.plan.actions, "{case} at {now}: actions");
                assert_eq!(without_ahead(&both), without_ahead(&alone), "{case} at {now}: status");
                assert_eq!(both.fencing_notices, alone.fencing_notices, "{case} at {now}");
                assert_eq!(both.pod_notices, alone.pod_notices, "{case} at {now}");
                assert_eq!(both.node_notices, alone.node_notices, "{case} at {now}");
                assert_eq!(both.gauges, alone.gauges, "{case} at {now}: gauges");
                assert_eq!(both.plan.stuck, alone.plan.stuck, "{case} at {now}");
                assert!(both.wake_at <= alone.wake_at.or(Some(grace_ends)), "{case} at {now}");
            }
            // Control: once its grace and the delays have passed, every policy says something.
            let (alone, both) = pair(policy, at(10));
            let differs =
                both.plan.actions != alone.plan.actions || both.pod_notices != alone.pod_notices;
            assert!(
                differs,
                "{case}: the pod past its grace changes nothing, so the test shows nothing"
            );
        }
    }

    #[test]
    fn a_notice_is_sent_once_while_it_holds_and_again_after_it_cleared() {
        let policy = policy(Mode::DryRun, |_| {});
        let mut history = PolicyHistory::default();
        let held = || vec![stateful("db-0", "n-dead")];
        // (case, pods on the dead node, the pods a fencing notice is sent for)
        let table: [(&str, Vec<PodView>, Vec<&str>); 5] = [
            ("held for fencing: said", held(), vec!["db-0"]),
            ("still held: not said again", held(), vec![]),
            (
                "another held too: only it is said",
                [held(), vec![stateful("db-1", "n-dead")]].concat(),
                vec!["db-1"],
            ),
            ("no longer held", vec![], vec![]),
            ("held again: said again", held(), vec!["db-0"]),
        ];
        for (case, pods, want) in table {
            let world = world(vec![node("n-dead", false)], pods);
            let decision =
                decide_and_commit(&mut history, &world, &policy, at(0), |_| StatusWrite::Unchanged);
            let said: Vec<&str> = decision.fencing_notices.iter().map(|n| n.pod.as_str()).collect();
            assert_eq!(said, want, "{case}");
            assert_eq!(
                decision.gauges.needing_fencing,
                world.pods.len(),
                "{case}: the gauge counts every one"
            );
        }
    }

    #[test]
    fn reports_alone_wait_for_reports_every_and_any_other_change_is_written_at_once() {
        let nodes = || vec![node("n1", true), node("n-dead", false)];
        // The status written at 00:10:00, when no pod was stuck.
        let mut written = PolicyHistory::default();
        decide_and_commit(
            &mut written,
            &world(nodes(), vec![]),
            &policy(Mode::DryRun, |_| {}),
            at(0),
            |d| StatusWrite::Written(Box::new(d.status.clone())),
        );
        let status = written.previous_status(None).expect("written");
        // A pod held on the dead node (for want of fencing) changes a count alone; one the
        // policy may release is acted on.
        let held = world(nodes(), vec![stateful("db-0", "n-dead")]);
        let released = world(nodes(), vec![pod("web-0", "n-dead")]);
        // (case, world, paused, seconds after the write, the stuck pods the status says,
        // whether the decision wakes when the hold ends)
        let table = [
            ("a count alone: held", &held, false, 2, 0, true),
            ("a count alone after REPORTS_EVERY: written", &held, false, 5, 1, false),
            ("a count and a condition: written at once", &held, true, 2, 1, false),
            ("a count and an action: written at once", &released, false, 2, 1, false),
        ];
        for (case, world, paused, after, stuck, held) in table {
            let policy = policy(Mode::DryRun, |s| s.paused = paused);
            let mut history = PolicyHistory::default();
            history.wrote(status.clone(), at(0));
            let reads = Reads { previous: Some(&status), ..Default::default() };
            let (_, decision) = decide_at(&mut history, world, &policy, &reads, at(after));
            let got = (decision.status.stuck_pods, decision.wake_at == Some(at(5)));
            assert_eq!(got, (stuck, held), "{case}");
        }
    }

    #[test]
    fn pending_records_are_resolved_once_per_run_once_every_read_succeeded() {
        let policy = policy(Mode::Enforce, |_| {});
        let pending = |uid: &str| RecentAction {
            namespace: "default".into(),
            ..record(uid, Mode::Enforce, ActionResult::Pending, 0)
        };
        let status = RemediationPolicyStatus {
            recent_actions: vec![pending("uid-gone"), pending("uid-there")],
            ..Default::default()
        };
        let seen = || PendingNow {
            pods: HashMap::from([("uid-gone".to_string(), PodNow::Gone)]),
            nodes: HashMap::new(),
        };
        let mut history = PolicyHistory::default();
        let world = world(vec![node("n1", true)], vec![]);
        // (case, what the fresh reads found, the records resolved with their result, whether
        // the pods are still to be read)
        let table = [
            ("a read failed: nothing yet", None, vec![], true),
            (
                "every read done: each resolved",
                Some(seen()),
                vec![("uid-gone", ActionResult::Done), ("uid-there", ActionResult::Skipped)],
                false,
            ),
            ("once per run: never again", Some(seen()), vec![], false),
        ];
        for (case, pending, want, to_read) in table {
            let reads = Reads { previous: Some(&status), pending, ..Default::default() };
            let (observed, decision) = decide_at(&mut history, &world, &policy, &reads, at(0));
            let got: Vec<(&str, ActionResult)> =
                decision.resolved.iter().map(|r| (r.uid.as_str(), r.result)).collect();
            assert_eq!(got, want, "{case}");
            history.after_commit(decision.decided, &[], &observed, StatusWrite::Unchanged, at(0));
            assert_eq!(!history.pending_pods(Some(&status)).is_empty(), to_read, "{case}");
        }
    }

    #[test]
    fn an_action_not_done_is_decided_again_after_its_wait() {
        let policy = policy(Mode::Enforce, |_| {});
        let world = world(vec![node("n-dead", false)], vec![pod("web-0", "n-dead")]);
        // (case, the outcome's result, the retry after_commit asks for, when the next
        // decision wakes; no other live policy known, so no wake-up ahead to record)
        let table = [
            ("skipped: retried 10 s later", ActionResult::Skipped, Some(at(10)), Some(at(10))),
            (
                "failed: its backoff is the plan's deadline",
                ActionResult::Failed,
                None,
                Some(at(10)),
            ),
            ("done: not again", ActionResult::Done, None, None),
        ];
        for (case, result, want_retry, want_wake) in table {
            let mut history = PolicyHistory::default();
            let reads = Reads::default();
            let (observed, decision) = decide_at(&mut history, &world, &policy, &reads, at(0));
            assert_eq!(decision.plan.actions.len(), 1, "{case}: the pod is released");
            let record = RecentAction {
                time: Time(at(0)),
                namespace: "default".into(),
                ..record("uid-web-0", Mode::Enforce, result, 0)
            };
            let outcome = ActionOutcome {
                record: &record,
                handled: result.counts_as_action(),
                acted_key: "uid-web-0",
            };
            let retry = history.after_commit(
                decision.decided,
                &[outcome],
                &observed,
                StatusWrite::Unchanged,
                at(0),
            );
            assert_eq!(retry, want_retry, "{case}");
            let (_, next) = decide_at(&mut history, &world, &policy, &reads, at(1));
            assert!(next.plan.actions.is_empty(), "{case}: not at once");
            assert_eq!(next.wake_at, want_wake, "{case}");
        }
    }

    #[test]
    fn a_failed_status_write_keeps_the_circuit_and_carries_the_records() {
        // Two dead nodes of two, at most one unhealthy: the circuit opens.
        let policy = policy(Mode::DryRun, |s| {
            s.safety.max_unhealthy_nodes = IntOrString::Int(1);
        });
        let world = world(vec![node("n-a", false), node("n-b", false)], vec![]);
        let mut history = PolicyHistory::default();
        let reads = Reads::default();
        let (observed, decision) = decide_at(&mut history, &world, &policy, &reads, at(0));
        let opened = decision.plan.storm.memory.clone();
        assert_ne!(opened.state, CircuitState::Closed);
        let record = RecentAction {
            action: ActionKind::Cordon,
            ..record("uid-n-a", Mode::DryRun, ActionResult::WouldAct, 0)
        };
        let outcome = ActionOutcome { record: &record, handled: true, acted_key: "cordon" };
        history.after_commit(decision.decided, &[outcome], &observed, StatusWrite::Failed, at(0));
        // The status still says nothing of the circuit: the history does.
        let (_, next) = decide_at(&mut history, &world, &policy, &reads, at(1));
        assert_eq!(next.plan.storm.previous, opened.state);
        assert!(next.circuit_notices.is_empty(), "the opening is not announced twice");
        assert_eq!(next.carried, vec![record]);
    }

    /// `world` as the one live policy, `p`, sees it.
    fn alone(mut world: Observed) -> Observed {
        world.acting.policy = "p".into();
        world.acting.live_policies = Some(["p".to_string()].into());
        world
    }

    /// A dead node's pod due at 00:08:30 (`at(-90)`): its record is stored up to RECORD_AHEAD
    /// before that instant (a wake-up is asked for then), and at the instant the action is
    /// sent without another; in DryRun there is no record ahead.
    #[test]
    fn an_action_due_at_a_known_instant_is_recorded_ahead_and_then_sent_without_another() {
        let due = at(-90);
        let world = alone(world(vec![node("dead", false)], vec![pod("p", "dead")]));
        let key = ("uid-p".to_string(), ActionKind::ForceDelete);
        let written = |d: &Decision| StatusWrite::Written(Box::new(d.status.clone()));
        let ahead_records = |d: &Decision| {
            let ahead =
                |r: &&RecentAction| r.detail.as_deref().is_some_and(|t| t.starts_with("due at"));
            d.status.recent_actions.iter().filter(ahead).cloned().collect::<Vec<_>>()
        };

        let enforce = policy(Mode::Enforce, |_| {});
        let mut history = PolicyHistory::default();
        let early = decide_and_commit(&mut history, &world, &enforce, at(-100), written);
        assert!(early.plan.actions.is_empty() && early.ahead.records.is_empty());
        assert_eq!(early.wake_at, Some(due - RECORD_AHEAD), "woken to record ahead");

        let ahead_of = decide_and_commit(&mut history, &world, &enforce, at(-91), written);
        assert!(ahead_of.plan.actions.is_empty(), "not due yet");
        let records = ahead_records(&ahead_of);
        assert_eq!(records.len(), 1, "{:?}", ahead_of.status.recent_actions);
        assert_eq!((records[0].uid.as_str(), records[0].result), ("uid-p", ActionResult::Pending));
        assert_eq!(ahead_of.ahead.recorded, vec![(key.clone(), due)]);
        assert_eq!(ahead_of.wake_at, Some(due));

        // Decided again before the instant (another pod's event, say): nothing written again.
        let again = decide_and_commit(
            &mut history,
            &world,
            &enforce,
            at(-90) - SignedDuration::from_millis(500),
            written,
        );
        assert!(again.ahead.records.is_empty() && again.ahead.withdrawn.is_empty());
        assert_eq!(again.status, ahead_of.status, "nothing new to write");

        let at_due = decide_and_commit(&mut history, &world, &enforce, due, written);
        assert_eq!(at_due.plan.actions.len(), 1);
        assert_eq!(at_due.ahead.stored, [key.clone()].into_iter().collect(), "no record first");

        // A write that failed stored nothing: at the instant the action is recorded first.
        let mut failed = PolicyHistory::default();
        decide_and_commit(&mut failed, &world, &enforce, at(-91), |_| StatusWrite::Failed);
        let at_due = decide_and_commit(&mut failed, &world, &enforce, due, written);
        assert_eq!(at_due.plan.actions.len(), 1);
        assert!(at_due.ahead.stored.is_empty(), "recorded first: the ahead write failed");

        // A retry after a failure: no record ahead beside its Failed one.
        let mut failing = PolicyHistory::default();
        let failed_record = RecentAction {
            time: Time(at(-100)),
            namespace: "default".into(),
            action: ActionKind::ForceDelete,
            ..record("uid-p", Mode::Enforce, ActionResult::Failed, 0)
        };
        let mut failed_status = ahead_of.status.clone();
        failed_status.recent_actions = vec![failed_record];
        failing.wrote(failed_status, at(-100));
        let retry = decide_and_commit(&mut failing, &world, &enforce, at(-91), written);
        assert!(retry.ahead.records.is_empty(), "{:?}", retry.ahead.records);

        // With another live policy, no record ahead: each is recorded at its instant.
        let mut shared = world.clone();
        shared.acting.live_policies = Some(["p".to_string(), "q".to_string()].into());
        let two =
            decide_and_commit(&mut PolicyHistory::default(), &shared, &enforce, at(-91), written);
        assert!(two.ahead.records.is_empty(), "another live policy");

        let dry_run = policy(Mode::DryRun, |_| {});
        let dry =
            decide_and_commit(&mut PolicyHistory::default(), &world, &dry_run, at(-91), written);
        assert!(dry.ahead.records.is_empty() && ahead_records(&dry).is_empty(), "DryRun");
    }

    /// A record stored ahead whose action does not come at its instant (the pod went) is
    /// replaced by a Skipped one, once, and then forgotten.
    #[test]
    fn a_record_ahead_whose_action_does_not_come_is_withdrawn() {
        let due = at(-90);
        let with = alone(world(vec![node("dead", false)], vec![pod("p", "dead")]));
        let without = alone(world(vec![node("dead", false)], vec![]));
        let written = |d: &Decision| StatusWrite::Written(Box::new(d.status.clone()));
        let enforce = policy(Mode::Enforce, |_| {});
        let mut history = PolicyHistory::default();
        decide_and_commit(&mut history, &with, &enforce, at(-91), written);
        // Gone before its instant: kept until then (a wake-up asked for), withdrawn at it.
        let before = decide_and_commit(
            &mut history,
            &without,
            &enforce,
            at(-90) - SignedDuration::from_millis(300),
            written,
        );
        assert!(before.ahead.withdrawn.is_empty());
        assert_eq!(before.wake_at, Some(due));
        let record = |d: &Decision| {
            d.status.recent_actions.iter().find(|r| r.uid == "uid-p").cloned().expect("a record")
        };
        assert_eq!(record(&before).result, ActionResult::Pending);
        let at_due = decide_and_commit(&mut history, &without, &enforce, due, written);
        assert_eq!(at_due.ahead.withdrawn.len(), 1);
        let withdrawn = record(&at_due);
        assert_eq!(withdrawn.result, ActionResult::Skipped, "{withdrawn:?}");
        assert!(withdrawn.detail.as_deref().is_some_and(|d| d.contains("never sent")));
        assert_eq!(at_due.status.recent_actions.iter().filter(|r| r.uid == "uid-p").count(), 1);
        let later = decide_and_commit(&mut history, &without, &enforce, at(-80), written);
        assert!(later.ahead.withdrawn.is_empty(), "withdrawn once");
        assert_eq!(record(&later).result, ActionResult::Skipped);

        // Switched to DryRun within the second: the pod is still due, but nothing sends it.
        let mut switched = PolicyHistory::default();
        decide_and_commit(&mut switched, &with, &enforce, at(-91), written);
        let dry_run = policy(Mode::DryRun, |_| {});
        let at_due = decide_and_commit(&mut switched, &with, &dry_run, due, written);
        assert_eq!(at_due.ahead.withdrawn.len(), 1, "{:?}", at_due.ahead);
        assert!(at_due.ahead.stored.is_empty());
    }

    /// A dead node with more pods left Ready=True than the report budget: the first decision
    /// gives the budget's worth an Event and counts the rest; the history remembers them all,
    /// and what the budget regained goes to the pods reported later.
    #[test]
    fn reports_beyond_the_budget_are_counted_once_and_the_budget_refills() {
        let burst = crate::core::REPORT_EVENTS_BURST as usize;
        let ready = |i: usize| PodView {
            deletion_timestamp: Stamp::NONE,
            terminating_seen: Stamp::NONE,
            ready_since: Stamp::from(at(-3_600)),
            ..pod(&format!("r{i:03}"), "dead")
        };
        let pods = |n: usize| (0..n).map(ready).collect::<Vec<_>>();
        let dry_run = policy(Mode::DryRun, |_| {});
        let mut history = PolicyHistory::default();
        let unchanged = |_: &Decision| StatusWrite::Unchanged;

        let first = world(vec![node("dead", false)], pods(burst + 50));
        let outage = decide_and_commit(&mut history, &first, &dry_run, at(0), unchanged);
        assert_eq!(outage.gauges.ready_on_dead_node, burst + 50);
        assert_eq!(outage.pod_notices.len(), burst);
        let beyond = outage.reports_beyond_budget.as_ref().expect("the rest counted");
        assert!(beyond.note.starts_with("50 more pods to report"), "{}", beyond.note);
        assert_eq!(beyond.first.1, format!("r{burst:03}"));

        // Six seconds later: nothing new, nothing said; one new pod gets one of the ten Events
        // the budget regained.
        let again = decide_and_commit(&mut history, &first, &dry_run, at(6), unchanged);
        assert!(again.pod_notices.is_empty() && again.reports_beyond_budget.is_none());
        let more = world(vec![node("dead", false)], pods(burst + 51));
        let later = decide_and_commit(&mut history, &more, &dry_run, at(6), unchanged);
        let said: Vec<&str> = later.pod_notices.iter().map(|n| n.pod.as_str()).collect();
        assert_eq!(said, [format!("r{:03}", burst + 50)]);
        assert!(later.reports_beyond_budget.is_none());
    }
}
