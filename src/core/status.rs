//! The status a policy should have, computed from its plan. Condition timestamps only move when
//! a condition's status changes, so an unchanged world yields an equal status and the
//! controller can skip the write.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use std::collections::BTreeMap;

use super::evidence::Suspension;
use super::node_notices::nodes_left_alone;
use super::observed::{CircuitMemory, Observed, WorkloadRef};
use super::plan::Plan;
use super::policy::{InvalidPolicy, ValidatedPolicy};
use crate::crd::{
    ActionResult, BlockedRolloutStatus, CircuitStatus, MAX_RECENT_ACTIONS, NodeLeftAloneStatus,
    ReadyOnDeadNodePodStatus, RecentAction, RemediationPolicyStatus, StaleReadyPodStatus,
    StuckPodStatus,
};

/// Condition type: the policy is valid and evaluated against synced caches.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: too many unhealthy nodes, no action.
pub const CONDITION_CIRCUIT_OPEN: &str = "CircuitOpen";
/// Condition type: `spec.paused`.
pub const CONDITION_PAUSED: &str = "Paused";
/// Condition type: the spec cannot be used.
pub const CONDITION_INVALID: &str = "Invalid";

/// How many held-alive nodes the Ready condition names.
const MAX_HELD_ALIVE_LISTED: usize = 5;

/// What the reconciler got from the policy.
#[derive(Clone, Copy, Debug)]
pub enum Evaluation<'a> {
    /// The spec validated and was planned.
    Planned { policy: &'a ValidatedPolicy, plan: &'a Plan },
    /// The spec did not validate; `paused` is `spec.paused` as written.
    Invalid { invalid: &'a InvalidPolicy, paused: bool },
}

/// `status.stuckOnLiveNodes`: the first [`MAX_RECENT_ACTIONS`] by namespace and name.
fn stuck_on_live_nodes(plan: &Plan) -> Vec<StuckPodStatus> {
    let mut stuck: Vec<StuckPodStatus> = plan
        .stuck
        .iter()
        .map(|s| StuckPodStatus {
            namespace: s.namespace.clone(),
            name: s.name.clone(),
            node: s.node.clone(),
            cause: s.cause.code().to_string(),
            detail: s.cause.detail(),
            since: Time(s.since),
        })
        .collect();
    stuck.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    stuck.truncate(MAX_RECENT_ACTIONS);
    stuck
}

/// The circuit as the status remembers it (`status.circuit`).
pub fn circuit_memory(status: Option<&RemediationPolicyStatus>) -> Option<CircuitMemory> {
    let c = status?.circuit.as_ref()?;
    Some(CircuitMemory {
        state: c.state,
        since: c.since.0,
        until: c.until.as_ref().map(|t| t.0),
        rearm_token: c.rearm_token.clone(),
    })
}

fn circuit_status(memory: &CircuitMemory) -> CircuitStatus {
    CircuitStatus {
        state: memory.state,
        since: Time(memory.since),
        until: memory.until.map(Time),
        rearm_token: memory.rearm_token.clone(),
    }
}

/// Builds the desired status. `recentActions` and `actionsTotal` are carried over from
/// `previous` (the writer appends to them with [`push_recent_actions`]).
pub fn desired_status(
    evaluation: Evaluation<'_>,
    generation: Option<i64>,
    previous: Option<&RemediationPolicyStatus>,
    now: Timestamp,
) -> RemediationPolicyStatus {
    let cond = |type_: &str, status: bool, reason: &str, message: String| {
        condition(
            type_,
            if status { "True" } else { "False" },
            reason,
            message,
            generation,
            previous,
            now,
        )
    };
    let paused_condition = |paused: bool| {
        if paused {
            cond(
                CONDITION_PAUSED,
                true,
                "PausedBySpec",
                "spec.paused is true: evaluating and reporting only".into(),
            )
        } else {
            cond(CONDITION_PAUSED, false, "NotPaused", "spec.paused is false".into())
        }
    };
    let mut status = RemediationPolicyStatus {
        observed_generation: generation,
        actions_total: previous.map_or(0, |p| p.actions_total),
        recent_actions: previous.map(|p| p.recent_actions.clone()).unwrap_or_default(),
        // An invalid spec keeps the circuit as it was: a latch is not lost to a typo.
        circuit: previous.and_then(|p| p.circuit.clone()),
        ..Default::default()
    };
    match evaluation {
        Evaluation::Invalid { invalid, paused } => {
            status.conditions = vec![
                cond(
                    CONDITION_READY,
                    false,
                    "InvalidSpec",
                    "the spec is invalid, see the Invalid condition".into(),
                ),
                condition(
                    CONDITION_CIRCUIT_OPEN,
                    "Unknown",
                    "InvalidSpec",
                    "not evaluated: the spec is invalid".into(),
                    generation,
                    previous,
                    now,
                ),
                paused_condition(paused),
                cond(CONDITION_INVALID, true, "InvalidSpec", invalid.reason.clone()),
            ];
        }
        Evaluation::Planned { policy, plan } => {
            let (is_ready, reason, message) = readiness(policy, plan);
            let ready = cond(CONDITION_READY, is_ready, reason, message);
            let storm = &plan.storm;
            let circuit =
                cond(CONDITION_CIRCUIT_OPEN, storm.holds(), storm.reason(), storm.message());
            status.circuit = Some(circuit_status(&storm.memory));
            status.conditions = vec![
                ready,
                circuit,
                paused_condition(policy.paused),
                cond(CONDITION_INVALID, false, "Valid", "the spec is valid".into()),
            ];
            let count = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
            status.matched_nodes = count(plan.counts.matched_nodes);
            status.unhealthy_nodes = count(plan.counts.unhealthy_nodes);
            status.dead_nodes = count(plan.counts.dead_nodes);
            status.stuck_pods = count(plan.counts.stuck_pods);
            status.stuck_on_live_nodes = stuck_on_live_nodes(plan);
            status.nodes_left_alone = nodes_left_alone(plan)
                .take(MAX_RECENT_ACTIONS)
                .map(|(node, hold)| NodeLeftAloneStatus {
                    name: node.name.to_string(),
                    reason: hold.code().to_string(),
                    message: hold.describe(&node.name),
                })
                .collect();
            status.stale_ready_pods = plan
                .stale
                .iter()
                .take(MAX_RECENT_ACTIONS)
                .map(|s| StaleReadyPodStatus {
                    namespace: s.namespace.clone(),
                    name: s.name.clone(),
                    node: s.node.clone(),
                    ready_false_since: Some(Time(s.ready_false_since)),
                })
                .collect();
            status.ready_on_dead_node_pods = plan
                .ready_on_dead
                .iter()
                .take(MAX_RECENT_ACTIONS)
                .map(|r| ReadyOnDeadNodePodStatus {
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    node: r.node.clone(),
                    node_dead_since: r.node_dead_since.map(Time),
                })
                .collect();
        }
    }
    status
}

/// The Ready condition of a planned policy: its status, reason and message.
fn readiness(policy: &ValidatedPolicy, plan: &Plan) -> (bool, &'static str, String) {
    match &plan.suspended {
        _ if plan.synced => {
            let mut message =
                format!("evaluated against synced watches in mode {}", policy.mode.as_str());
            let alive: Vec<&str> =
                plan.nodes.iter().filter_map(|n| n.held_alive.as_deref()).collect();
            if !alive.is_empty() {
                message.push_str(&format!(
                    "; {} not-Ready node(s) held alive because their kubelets answer: {}",
                    alive.len(),
                    alive.iter().take(MAX_HELD_ALIVE_LISTED).copied().collect::<Vec<_>>().join("; ")
                ));
                if alive.len() > MAX_HELD_ALIVE_LISTED {
                    message.push_str("; …");
                }
            }
            (true, "Evaluated", message)
        }
        Some(suspension) if *suspension != Suspension::NotSynced => {
            (false, "EvidenceSuspended", format!("no node counts as dead now: {suspension}"))
        }
        _ => (
            false,
            "CachesNotSynced",
            "waiting for the node, Lease and pod watches to sync: no node counts as dead until then"
                .into(),
        ),
    }
}

/// A condition whose `lastTransitionTime` is carried over when its status did not change.
fn condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    generation: Option<i64>,
    previous: Option<&RemediationPolicyStatus>,
    now: Timestamp,
) -> Condition {
    let before = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let last_transition_time = match before {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => Time(now),
    };
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// Records actions taken (or would-be actions) in the status: newest first, at most
/// [`MAX_RECENT_ACTIONS`], and `actionsTotal` incremented by those with result Done or WouldAct.
/// A record replaces the same action's Pending one (recorded before its request), and a
/// failure the record of the same action's previous failure, so an action failing again and
/// again keeps one entry and never pushes the others out.
pub fn push_recent_actions(
    status: &mut RemediationPolicyStatus,
    records: impl IntoIterator<Item = RecentAction>,
) {
    let mut records: Vec<RecentAction> = records.into_iter().collect();
    // A record carried again after a failed write may be there already.
    records.retain(|new| !status.recent_actions.contains(new));
    let counted = records.iter().filter(|r| r.result.counts_as_action()).count();
    status.actions_total =
        status.actions_total.saturating_add(i64::try_from(counted).unwrap_or(i64::MAX));
    let replaced = |old: &RecentAction| {
        records.iter().any(|new| {
            let same = (new.uid.as_str(), new.action, new.mode)
                == (old.uid.as_str(), old.action, old.mode);
            let replaces = match old.result {
                ActionResult::Pending => true,
                ActionResult::Failed => new.result == ActionResult::Failed,
                _ => false,
            };
            same && replaces
        })
    };
    status.recent_actions.retain(|old| !replaced(old));
    records.append(&mut status.recent_actions);
    // Stable: among equal times, the new records stay ahead of older ones.
    records.sort_by(|a, b| b.time.cmp(&a.time));
    records.truncate(MAX_RECENT_ACTIONS);
    status.recent_actions = records;
}

/// How often a status write may carry changed reports alone: the counts (`matchedNodes`,
/// `unhealthyNodes`, `deadNodes`, `stuckPods`), the lists of what is seen now
/// (`stuckOnLiveNodes`, `staleReadyPods`, `nodesLeftAlone`, `readyOnDeadNodePods`,
/// `blockedRollouts`) and the message of a condition whose status and reason stay. Churn moves
/// `stuckPods` on every pod event; in a storm or a drought the conditions' messages carry counts
/// that move with every decision. A write each time would be a status write per event, exactly
/// when the control plane is struggling.
pub const REPORTS_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// When `desired` differs from `previous` (the status last written) in its reports alone (see
/// [`REPORTS_EVERY`]), puts back the previous reports, so the write can wait, and says so. Any
/// other change (a condition's status or reason, the circuit, a record, the observed
/// generation) is written at once, reports included.
pub fn hold_reports(
    desired: &mut RemediationPolicyStatus,
    previous: &RemediationPolicyStatus,
) -> bool {
    if desired == previous {
        return false;
    }
    let conditions = desired
        .conditions
        .iter()
        .map(|c| {
            let before = previous.conditions.iter().find(|p| p.type_ == c.type_);
            match before {
                Some(p)
                    if (&p.status, &p.reason, p.observed_generation)
                        == (&c.status, &c.reason, c.observed_generation) =>
                {
                    p.clone()
                }
                _ => c.clone(),
            }
        })
        .collect();
    let held = RemediationPolicyStatus {
        matched_nodes: previous.matched_nodes,
        unhealthy_nodes: previous.unhealthy_nodes,
        dead_nodes: previous.dead_nodes,
        stuck_pods: previous.stuck_pods,
        stuck_on_live_nodes: previous.stuck_on_live_nodes.clone(),
        stale_ready_pods: previous.stale_ready_pods.clone(),
        nodes_left_alone: previous.nodes_left_alone.clone(),
        ready_on_dead_node_pods: previous.ready_on_dead_node_pods.clone(),
        blocked_rollouts: previous.blocked_rollouts.clone(),
        conditions,
        ..desired.clone()
    };
    if &held != previous {
        return false;
    }
    *desired = held;
    true
}

/// The blocked rollouts whose blocking pods are on this policy's nodes and in its namespaces.
pub fn blocked_rollouts_in_scope(
    observed: &Observed,
    plan: &Plan,
    policy: &ValidatedPolicy,
) -> Vec<BlockedRolloutStatus> {
    let mut by_workload: BTreeMap<&WorkloadRef, Vec<String>> = BTreeMap::new();
    for pod in &observed.pods {
        let Some(workload) = &pod.blocks_rollout else { continue };
        let node = pod.node_name.as_deref().unwrap_or_default();
        if plan.nodes.contains(node) && policy.namespace_selector.matches(&pod.namespace_labels) {
            by_workload.entry(workload).or_default().push(format!("{} on {node}", pod.name));
        }
    }
    by_workload
        .into_iter()
        .take(MAX_RECENT_ACTIONS)
        .map(|(w, mut pods)| {
            pods.sort();
            BlockedRolloutStatus {
                kind: w.kind.as_str().to_string(),
                namespace: w.namespace.clone(),
                name: w.name.clone(),
                blocking_pods: pods,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_alone_wait_and_any_other_change_carries_them() {
        let ready = |reason: &str, message: &str| Condition {
            type_: CONDITION_READY.into(),
            status: "False".into(),
            reason: reason.into(),
            message: message.into(),
            observed_generation: Some(1),
            last_transition_time: Time(ts("2026-01-01T00:00:00Z")),
        };
        let previous = RemediationPolicyStatus {
            matched_nodes: 10,
            stuck_pods: 3,
            conditions: vec![ready(
                "EvidenceSuspended",
                "2069 of the 3320 kubelets renewing in the last 40s stopped at once",
            )],
            ..RemediationPolicyStatus::default()
        };
        let with = |f: &dyn Fn(&mut RemediationPolicyStatus)| {
            let mut s = previous.clone();
            f(&mut s);
            s
        };
        let table: Vec<(&str, RemediationPolicyStatus, bool)> = vec![
            ("unchanged", previous.clone(), false),
            ("stuckPods alone", with(&|s| s.stuck_pods = 4), true),
            (
                "every count",
                with(&|s| {
                    s.matched_nodes = 11;
                    s.unhealthy_nodes = 1;
                    s.dead_nodes = 1;
                    s.stuck_pods = 0;
                }),
                true,
            ),
            (
                "a listed pod alone",
                with(&|s| {
                    s.stale_ready_pods.push(StaleReadyPodStatus {
                        namespace: "default".into(),
                        name: "web-0".into(),
                        node: "n1".into(),
                        ready_false_since: None,
                    })
                }),
                true,
            ),
            (
                "a condition's message alone (a drought's counts)",
                with(&|s| {
                    s.conditions[0].message =
                        "2070 of the 3320 kubelets renewing in the last 40s stopped at once".into()
                }),
                true,
            ),
            (
                "a condition's reason, and its message",
                with(&|s| s.conditions[0] = ready("CachesNotSynced", "waiting")),
                false,
            ),
            ("a condition's status", with(&|s| s.conditions[0].status = "True".into()), false),
            (
                "a new condition",
                with(&|s| s.conditions.push(ready("Valid", "the spec is valid"))),
                false,
            ),
            (
                "a count and the circuit",
                with(&|s| {
                    s.stuck_pods = 4;
                    s.circuit = Some(CircuitStatus {
                        state: CircuitState::Open,
                        since: Time(ts("2026-01-01T00:00:00Z")),
                        until: None,
                        rearm_token: None,
                    });
                }),
                false,
            ),
            (
                "a count and a record",
                with(&|s| {
                    s.stuck_pods = 4;
                    s.actions_total = 1;
                }),
                false,
            ),
            (
                "a count and the observed generation",
                with(&|s| {
                    s.dead_nodes = 1;
                    s.observed_generation = Some(2);
                }),
                false,
            ),
        ];
        for (case, desired, held) in table {
            let mut status = desired.clone();
            assert_eq!(hold_reports(&mut status, &previous), held, "{case}");
            let expected = if held { previous.clone() } else { desired };
            assert_eq!(status, expected, "{case}");
        }
    }
    use crate::core::guards::Circuit;
    use crate::core::plan::PlanCounts;
    use crate::core::policy::{MaxUnhealthy, StormSettings, validate};
    use crate::core::storm::advance;
    use crate::crd::{ActionKind, ActionResult, CircuitState, Mode, RemediationPolicySpec};

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    fn plan(synced: bool, open: bool, unhealthy: u32) -> Plan {
        let circuit = Circuit::evaluate(
            unhealthy,
            10,
            MaxUnhealthy::Count(if open { unhealthy - 1 } else { unhealthy }),
        );
        let calm = Circuit::evaluate(0, 10, MaxUnhealthy::Count(5));
        let now = ts("2026-01-01T00:00:00Z");
        Plan {
            synced,
            suspended: None,
            actions: vec![],
            decisions: vec![],
            nodes: Default::default(),
            stuck: vec![],
            stale: vec![],
            repaired: vec![],
            ready_on_dead: vec![],
            storm: advance(circuit.clone(), calm, None, StormSettings::default(), None, now),
            circuit,
            next_deadline: None,
            counts: PlanCounts {
                matched_nodes: 10,
                unhealthy_nodes: unhealthy,
                dead_nodes: 1,
                stuck_pods: 2,
                eligible_pods: 0,
            },
        }
    }

    fn conditions(status: &RemediationPolicyStatus) -> Vec<(&str, &str, &str)> {
        status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect()
    }

    fn transition(status: &RemediationPolicyStatus, type_: &str) -> Timestamp {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .expect("condition")
            .last_transition_time
            .0
    }

    fn record(time: &str, name: &str, result: ActionResult) -> RecentAction {
        RecentAction {
            time: Time(ts(time)),
            action: ActionKind::ForceDelete,
            mode: Mode::DryRun,
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            node: "n1".into(),
            owner: None,
            reason: "node dead".into(),
            result,
            detail: None,
        }
    }

    #[test]
    fn conditions_table() {
        let policy = validate(&RemediationPolicySpec::default()).expect("valid");
        let paused =
            validate(&RemediationPolicySpec { paused: true, ..Default::default() }).expect("valid");
        let invalid = InvalidPolicy { reason: "deadNode.notReadyFor: bad".into() };
        let (p_ok, p_unsynced, p_open) =
            (plan(true, false, 1), plan(false, false, 1), plan(true, true, 5));
        type Row<'a> = (&'a str, Evaluation<'a>, Vec<(&'a str, &'a str, &'a str)>);
        let table: Vec<Row> = vec![
            (
                "healthy",
                Evaluation::Planned { policy: &policy, plan: &p_ok },
                vec![
                    ("Ready", "True", "Evaluated"),
                    ("CircuitOpen", "False", "WithinLimit"),
                    ("Paused", "False", "NotPaused"),
                    ("Invalid", "False", "Valid"),
                ],
            ),
            (
                "unsynced",
                Evaluation::Planned { policy: &policy, plan: &p_unsynced },
                vec![
                    ("Ready", "False", "CachesNotSynced"),
                    ("CircuitOpen", "False", "WithinLimit"),
                    ("Paused", "False", "NotPaused"),
                    ("Invalid", "False", "Valid"),
                ],
            ),
            (
                "circuit open and paused",
                Evaluation::Planned { policy: &paused, plan: &p_open },
                vec![
                    ("Ready", "True", "Evaluated"),
                    ("CircuitOpen", "True", "TooManyUnhealthyNodes"),
                    ("Paused", "True", "PausedBySpec"),
                    ("Invalid", "False", "Valid"),
                ],
            ),
            (
                "invalid",
                Evaluation::Invalid { invalid: &invalid, paused: false },
                vec![
                    ("Ready", "False", "InvalidSpec"),
                    ("CircuitOpen", "Unknown", "InvalidSpec"),
                    ("Paused", "False", "NotPaused"),
                    ("Invalid", "True", "InvalidSpec"),
                ],
            ),
        ];
        let now = ts("2026-01-01T00:10:00Z");
        for (case, evaluation, want) in table {
            let status = desired_status(evaluation, Some(7), None, now);
            assert_eq!(conditions(&status), want, "{case}");
            assert_eq!(status.observed_generation, Some(7), "{case}");
            assert!(
                status
                    .conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(7) && c.last_transition_time.0 == now)
            );
        }
    }

    #[test]
    fn counts_and_messages() {
        let policy = validate(&RemediationPolicySpec::default()).expect("valid");
        let p = plan(true, true, 5);
        let status = desired_status(
            Evaluation::Planned { policy: &policy, plan: &p },
            Some(1),
            None,
            ts("2026-01-01T00:00:00Z"),
        );
        assert_eq!(
            (status.matched_nodes, status.unhealthy_nodes, status.dead_nodes, status.stuck_pods),
            (10, 5, 1, 2)
        );
        let circuit =
            status.conditions.iter().find(|c| c.type_ == CONDITION_CIRCUIT_OPEN).expect("circuit");
        assert_eq!(
            circuit.message,
            "5 of 10 selected nodes are unhealthy, more than maxUnhealthyNodes 4: no action until it drops"
        );
        let invalid = InvalidPolicy {
            reason: "safety.maxUnhealthyNodes: \"150%\" is not a percentage".into(),
        };
        let status = desired_status(
            Evaluation::Invalid { invalid: &invalid, paused: true },
            Some(2),
            Some(&status),
            ts("2026-01-01T00:01:00Z"),
        );
        assert_eq!(
            (status.matched_nodes, status.unhealthy_nodes, status.dead_nodes, status.stuck_pods),
            (0, 0, 0, 0)
        );
        let cond =
            status.conditions.iter().find(|c| c.type_ == CONDITION_INVALID).expect("invalid");
        assert_eq!(cond.message, invalid.reason);
    }

    #[test]
    fn unchanged_world_gives_an_equal_status() {
        let policy = validate(&RemediationPolicySpec::default()).expect("valid");
        let p = plan(true, false, 1);
        let mut first = desired_status(
            Evaluation::Planned { policy: &policy, plan: &p },
            Some(3),
            None,
            ts("2026-01-01T00:00:00Z"),
        );
        push_recent_actions(
            &mut first,
            [record("2026-01-01T00:00:00Z", "a", ActionResult::WouldAct)],
        );
        let later = desired_status(
            Evaluation::Planned { policy: &policy, plan: &p },
            Some(3),
            Some(&first),
            ts("2026-01-01T01:00:00Z"),
        );
        assert_eq!(later, first, "no timestamp churn");
    }

    #[test]
    fn only_the_flipped_condition_moves_its_transition_time() {
        let policy = validate(&RemediationPolicySpec::default()).expect("valid");
        let t0 = ts("2026-01-01T00:00:00Z");
        let t1 = ts("2026-01-01T00:05:00Z");
        let closed = plan(true, false, 1);
        let open = plan(true, true, 5);
        let first = desired_status(
            Evaluation::Planned { policy: &policy, plan: &closed },
            Some(1),
            None,
            t0,
        );
        let second = desired_status(
            Evaluation::Planned { policy: &policy, plan: &open },
            Some(1),
            Some(&first),
            t1,
        );
        assert_eq!(transition(&second, CONDITION_CIRCUIT_OPEN), t1);
        for type_ in [CONDITION_READY, CONDITION_PAUSED, CONDITION_INVALID] {
            assert_eq!(transition(&second, type_), t0, "{type_}");
        }
        // A message change alone (different counts, same status) keeps the time too.
        let open_more = plan(true, true, 6);
        let third = desired_status(
            Evaluation::Planned { policy: &policy, plan: &open_more },
            Some(1),
            Some(&second),
            t1,
        );
        assert_eq!(transition(&third, CONDITION_CIRCUIT_OPEN), t1);
        assert_ne!(third, second);
    }

    #[test]
    fn recent_actions_newest_first_bounded_and_counted() {
        let mut status = RemediationPolicyStatus { actions_total: 40, ..Default::default() };
        let old: Vec<RecentAction> = (0..15)
            .map(|i| {
                record(
                    &format!("2026-01-01T00:00:{i:02}Z"),
                    &format!("old{i:02}"),
                    ActionResult::Done,
                )
            })
            .collect();
        push_recent_actions(&mut status, old);
        assert_eq!(status.actions_total, 55);
        assert_eq!(status.recent_actions[0].name, "old14");
        let new = vec![
            record("2026-01-01T00:01:00Z", "new-a", ActionResult::Done),
            record("2026-01-01T00:01:00Z", "new-b", ActionResult::Failed),
            record("2026-01-01T00:01:01Z", "new-c", ActionResult::WouldAct),
            record("2026-01-01T00:01:01Z", "new-d", ActionResult::Skipped),
            record("2026-01-01T00:00:14Z", "same-time-as-old14", ActionResult::Done),
            record("2026-01-01T00:01:02Z", "new-e", ActionResult::Done),
            record("2026-01-01T00:01:03Z", "new-f", ActionResult::Done),
        ];
        push_recent_actions(&mut status, new);
        assert_eq!(status.actions_total, 55 + 5);
        assert_eq!(status.recent_actions.len(), MAX_RECENT_ACTIONS);
        let names: Vec<&str> =
            status.recent_actions.iter().take(8).map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "new-f",
                "new-e",
                "new-c",
                "new-d",
                "new-a",
                "new-b",
                "same-time-as-old14",
                "old14"
            ]
        );
        assert_eq!(status.recent_actions.last().map(|r| r.name.as_str()), Some("old02"));
    }

    #[test]
    fn a_repeated_failure_keeps_one_entry() {
        let mut status = RemediationPolicyStatus::default();
        push_recent_actions(
            &mut status,
            vec![
                record("2026-01-01T00:00:00Z", "refused", ActionResult::Failed),
                record("2026-01-01T00:00:01Z", "other", ActionResult::Done),
            ],
        );
        for i in 1..30 {
            let at = format!("2026-01-01T00:{:02}:{:02}Z", i / 60 + 1, i % 60);
            push_recent_actions(&mut status, vec![record(&at, "refused", ActionResult::Failed)]);
        }
        let names: Vec<(&str, ActionResult)> =
            status.recent_actions.iter().map(|r| (r.name.as_str(), r.result)).collect();
        assert_eq!(names, vec![("refused", ActionResult::Failed), ("other", ActionResult::Done)]);
        assert_eq!(status.recent_actions[0].time, Time(ts("2026-01-01T00:01:29Z")));
        // A success after failures is a record of its own.
        push_recent_actions(
            &mut status,
            vec![record("2026-01-01T00:02:00Z", "refused", ActionResult::Done)],
        );
        assert_eq!(status.recent_actions.len(), 3);
    }

    #[test]
    fn an_outcome_replaces_the_record_made_before_its_request() {
        let mut status = RemediationPolicyStatus::default();
        push_recent_actions(
            &mut status,
            vec![record("2026-01-01T00:00:00Z", "p", ActionResult::Pending)],
        );
        assert_eq!(status.actions_total, 0);
        push_recent_actions(
            &mut status,
            vec![record("2026-01-01T00:00:01Z", "p", ActionResult::Done)],
        );
        let results: Vec<ActionResult> = status.recent_actions.iter().map(|r| r.result).collect();
        assert_eq!(results, vec![ActionResult::Done]);
        assert_eq!(status.actions_total, 1);
        // Carried again after a failed write: not twice.
        let again = status.recent_actions.clone();
        push_recent_actions(&mut status, again);
        assert_eq!((status.recent_actions.len(), status.actions_total), (1, 1));
    }
}
