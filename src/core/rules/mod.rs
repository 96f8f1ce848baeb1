//! The rules: one module each, each saying which Terminating pods it applies to and with which
//! `delayAfterGrace`. Here they are composed: for every Terminating pod on an in-scope node, the
//! rules that apply (the shortest delay wins; none: `RuleDisabled`), then the shared release
//! gates ([`release_gates`]), then a verdict and, for an eligible pod, a candidate action.
//!
//! The candidates still have to pass the guards every destructive action shares
//! ([`crate::core::guards`]); the plan spends those, oldest threshold first.

pub mod failed_by_shutdown;
pub mod live_node_stuck;
pub mod node_actions;
pub mod ready_on_dead_node;
pub mod recreate_rollouts;
pub mod release_gates;
pub mod stale_readiness;
pub mod stuck_terminating;

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use self::live_node_stuck::StuckPod;
use self::release_gates::{Gate, Release, fencing_requirement, selected_kind};
use super::action::{Act, Action, ForceDelete, PodTarget, RemoveFinalizers};
use super::evidence::Suspension;
use super::node::{NodeState, NodeSummary, NodeTable};
use super::observed::{NodeObservation, NodeView, Observed, PodView};
use super::policy::ValidatedPolicy;
use super::verdict::{NotEligible, PodDecision, Verdict};

/// Whether a rule applies to a Terminating pod, and with which `delayAfterGrace`.
type PodRule = fn(&PodView, &ValidatedPolicy) -> Option<SignedDuration>;

/// The rules that release Terminating pods.
const POD_RULES: [PodRule; 2] = [stuck_terminating::delay, recreate_rollouts::delay];

/// An eligible pod's action, waiting for the guards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Its pod's index in [`Findings::decisions`], whose verdict a guard may still overturn
    /// (`None` for a node action).
    pub decision: Option<usize>,
    pub action: Action,
}

/// What the rules found at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Findings {
    /// A decision for every Terminating pod on an in-scope node, in the order of the pods.
    pub decisions: Vec<PodDecision>,
    /// The eligible pods' actions.
    pub candidates: Vec<Candidate>,
    /// The future instants at which a verdict changes by time alone.
    pub deadlines: Vec<Timestamp>,
    /// Pods stuck Terminating on live nodes (liveNodeStuck), for the reports.
    pub stuck: Vec<StuckPod>,
}

/// Applies the rules to every Terminating pod of `observed` on one of the in-scope `nodes`.
pub fn release_terminating_pods(
    observed: &Observed,
    nodes: &NodeTable,
    policy: &ValidatedPolicy,
    now: Timestamp,
) -> Findings {
    let mut found = Findings::default();
    let views: BTreeMap<&str, &NodeView> =
        observed.nodes.iter().map(|n| (&*n.observation.name, &**n)).collect();
    for pod in &observed.pods {
        let (Some(deleted_at), Some(node_name)) =
            (pod.deletion_timestamp.get(), pod.node_name.as_deref())
        else {
            continue;
        };
        let Some(node) = nodes.get(node_name) else {
            continue;
        };
        let observation = views.get(node_name).map(|v| &v.observation);
        let (gate, stuck) = pod_gate(pod, node, observation, observed, policy, deleted_at, now);
        found.stuck.extend(stuck);
        let target = |reason, threshold| PodTarget {
            namespace: pod.namespace.to_string(),
            name: pod.name.clone(),
            uid: pod.uid.to_string(),
            node: node_name.to_string(),
            owner: pod.owner_key(),
            reason,
            threshold,
            shutdown_seen: node.shutdown_seen.get(),
        };
        let action = match gate {
            Gate::Blocked(reason, deadline) => {
                found.deadlines.extend(deadline.filter(|t| *t > now));
                Err(reason)
            }
            Gate::Ready { threshold, reason, fencing_required, live_node } => {
                Ok(Action::ForceDelete(ForceDelete {
                    pod: target(reason, threshold),
                    blocks_rollout: pod.blocks_rollout.as_deref().cloned(),
                    lease_renewed: node.lease_renewed.get(),
                    fencing_required,
                    live: pod.live_deletion().filter(|_| live_node),
                    death: node.death.as_deref().cloned().filter(|_| !live_node),
                }))
            }
            Gate::RemoveFinalizers { threshold, reason, remove, current } => {
                let removal = RemoveFinalizers {
                    pod: target(reason, threshold),
                    remove,
                    current,
                    death: node.death.as_deref().cloned(),
                    live: pod.live_deletion().filter(|_| node.death.is_none()),
                };
                // Done (or recorded in DryRun) once per pod, not at every reconcile.
                if observed.acted_pods.contains(&removal.acted_key()) {
                    Err(NotEligible::AlreadyActed)
                } else {
                    Ok(Action::RemoveFinalizers(removal))
                }
            }
        };
        let verdict = match action {
            Ok(action) => {
                found.candidates.push(Candidate { decision: Some(found.decisions.len()), action });
                Verdict::Eligible
            }
            Err(reason) => Verdict::NotEligible(reason),
        };
        found.decisions.push(PodDecision {
            namespace: pod.namespace.to_string(),
            name: pod.name.clone(),
            uid: pod.uid.to_string(),
            node: node_name.to_string(),
            owner: pod.owner_key(),
            verdict,
        });
    }
    found
}

/// One pod through the rules: trusted evidence first; on a live node, liveNodeStuck; otherwise
/// the rules that release pods from dead nodes, then the shared release gates. Also the stuck
/// pod to report, if it is one.
fn pod_gate(
    pod: &PodView,
    node: &NodeSummary,
    observation: Option<&NodeObservation>,
    observed: &Observed,
    policy: &ValidatedPolicy,
    deleted_at: Timestamp,
    now: Timestamp,
) -> (Gate, Option<StuckPod>) {
    if let (NodeState::Healthy, Some(rule), Some(observation), Some(_)) =
        (node.state, policy.live_node_stuck, observation, observed.watch_synced_at)
    {
        // Time on a live node is ours: from when we saw the pod's deletion, plus its grace
        // period; never the API server's deletionTimestamp against our clock.
        let Some(live) = pod.live_deletion() else {
            return (Gate::Blocked(NotEligible::CachesNotSynced, None), None);
        };
        let ours = live.grace_ended();
        return match selected_kind(pod, node, observed, policy) {
            Ok(kind) => {
                let requirement = fencing_requirement(pod, kind, policy);
                live_node_stuck::gate(pod, node, observation, policy, rule, requirement, ours, now)
            }
            Err(reason) => (Gate::Blocked(reason, None), None),
        };
    }
    (dead_node_gate(pod, node, observed, policy, deleted_at, now), None)
}

/// A pod through the rules that release pods from dead nodes.
fn dead_node_gate(
    pod: &PodView,
    node: &NodeSummary,
    observed: &Observed,
    policy: &ValidatedPolicy,
    deleted_at: Timestamp,
    now: Timestamp,
) -> Gate {
    if observed.watch_synced_at.is_none() {
        let reason = match &observed.suspended {
            None | Some(Suspension::NotSynced) => NotEligible::CachesNotSynced,
            Some(other) => NotEligible::EvidenceSuspended { why: other.to_string() },
        };
        return Gate::Blocked(reason, None);
    }
    // A pod that blocks a rollout may also be released by recreateRollouts; the shorter
    // delay of the rules that apply wins.
    let Some(delay) = POD_RULES.iter().filter_map(|applies| applies(pod, policy)).min() else {
        return Gate::Blocked(NotEligible::RuleDisabled, None);
    };
    let note = recreate_rollouts::note(pod).unwrap_or_default();
    release_gates::gate(pod, node, observed, policy, &Release { delay, note }, deleted_at, now)
}
