//! `plan(&observed, &policy, now) -> Plan`: which pods stuck Terminating on dead nodes to
//! release now, why every other one is not released (yet), and when to look again.
//!
//! The plan composes the core: it judges the nodes ([`crate::core::node`]), counts them and
//! evaluates the circuit breaker, runs the rules ([`crate::core::rules`]), spends the guards
//! ([`crate::core::guards`]) on the rules' candidates oldest threshold first, and assembles what
//! the status and the writer need. It decides nothing of its own.
//!
//! The plan is identical in DryRun and Enforce: the writer decides whether an action becomes a
//! request or a record.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

use super::action::Action;
use super::duration::add;
use super::evidence::Suspension;
use super::guards::{Circuit, Guards};
use super::node::{NodeHold, NodeState, NodeTable, sort_by_name_keeping_the_later, summarize_node};
use super::observed::{NodeView, Observed, Readiness};
use super::policy::{MaxUnhealthy, ValidatedPolicy};
use super::rules::failed_by_shutdown::{ShutdownFindings, shutdown_pods};
use super::rules::live_node_stuck::StuckPod;
use super::rules::node_actions::NodeFindings;
use super::rules::ready_on_dead_node::{ReadyOnDeadFindings, ReadyOnDeadPod, ready_on_dead_nodes};
use super::rules::stale_readiness::{RepairedStale, StaleFindings, StalePod, stale_pods};
use super::rules::{Candidate, Findings, release_terminating_pods};
use super::storm::{OWN_DELETIONS_COUNT_FOR, Storm, advance};
use super::verdict::{NotEligible, PodDecision, Verdict};
use super::zones::{ZoneHold, held_zones, zone_of};

/// Counts for the policy's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanCounts {
    /// In-scope nodes (including deleted ones still referenced).
    pub matched_nodes: u32,
    pub unhealthy_nodes: u32,
    pub dead_nodes: u32,
    /// Selected Terminating pods on in-scope nodes whose deletionTimestamp has passed.
    pub stuck_pods: u32,
    /// Pods released by this plan.
    pub eligible_pods: u32,
}

/// The most actions one plan hands to the writer: as many as the status holds records
/// ([`crate::crd::MAX_RECENT_ACTIONS`]), so that each gets its Pending record before its request.
pub const MAX_BATCH: usize = crate::crd::MAX_RECENT_ACTIONS;

/// Everything decided at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Whether evidence was trusted (`watch_synced_at` was set).
    pub synced: bool,
    /// Why evidence was not trusted, when it was not.
    pub suspended: Option<Suspension>,
    /// What to do now, oldest threshold first.
    pub actions: Vec<Action>,
    /// A verdict for every Terminating pod on an in-scope node, by namespace and name.
    pub decisions: Vec<PodDecision>,
    /// Every in-scope node, by name.
    pub nodes: NodeTable,
    /// Pods stuck Terminating on live nodes (liveNodeStuck), diagnosed, by namespace and name.
    pub stuck: Vec<StuckPod>,
    /// Pods left Ready=False after a node blip (staleReadiness).
    pub stale: Vec<StalePod>,
    /// Pods the staleReadiness rule waited on that their kubelet made Ready again first.
    pub repaired: Vec<RepairedStale>,
    /// Pods left Ready=True on dead nodes (readyOnDeadNode).
    pub ready_on_dead: Vec<ReadyOnDeadPod>,
    /// The policy's own reading of the storm guard (`safety.maxUnhealthyNodes`).
    pub circuit: Circuit,
    /// The storm guard over time: the cluster-wide reading, latch and cool-down. Every action
    /// is held while it [`holds`](Storm::holds).
    pub storm: Storm,
    /// The earliest future instant at which the plan changes by the passing of time alone
    /// (a node becoming dead, a delay passing, a grace period ending, a rate-limit slot
    /// freeing): requeue for exactly then. `None`: only a watch event can change it.
    pub next_deadline: Option<Timestamp>,
    pub counts: PlanCounts,
}

/// Decides what to do at `now`. Pure: same inputs, same plan.
pub fn plan(observed: &Observed, policy: &ValidatedPolicy, now: Timestamp) -> Plan {
    let synced_at = observed.watch_synced_at;
    let nodes = in_scope_nodes(observed, policy, now);
    let mut counts = PlanCounts::default();
    let mut deadlines: Vec<Timestamp> = Vec::new();
    for summary in nodes.iter() {
        counts.matched_nodes += 1;
        match summary.state {
            NodeState::Healthy => {}
            NodeState::Unhealthy => counts.unhealthy_nodes += 1,
            NodeState::Dead => {
                counts.unhealthy_nodes += 1;
                counts.dead_nodes += 1;
            }
        }
        deadlines.extend(summary.dead_at.get().filter(|t| *t > now));
        if let Some(NodeHold::ShuttingDown { until, .. }) = summary.hold.as_deref() {
            deadlines.push(*until);
        }
    }
    counts.stuck_pods = count_stuck_pods(observed, &nodes, policy, now, &mut deadlines);
    let circuit =
        Circuit::evaluate(counts.unhealthy_nodes, counts.matched_nodes, policy.max_unhealthy);
    let storm = advance(
        circuit.clone(),
        cluster_reading(observed, now),
        observed.storm.previous.as_ref(),
        policy.storm,
        observed.storm.rearm_token.as_deref(),
        now,
    );
    deadlines.extend(storm.deadline());

    let Findings { mut decisions, mut candidates, deadlines: waits, stuck } =
        release_terminating_pods(observed, &nodes, policy, now);
    deadlines.extend(waits);
    let node_findings = node_actions(observed, &nodes, policy, now);
    deadlines.extend(node_findings.deadlines);
    candidates.extend(
        node_findings.candidates.into_iter().map(|action| Candidate { decision: None, action }),
    );
    let StaleFindings { mut stale, repaired, candidates: evictions, deadlines: stale_deadlines } =
        stale_pods(observed, &nodes, policy, now);
    deadlines.extend(stale_deadlines);
    candidates.extend(evictions.into_iter().map(|action| Candidate { decision: None, action }));
    let ShutdownFindings { candidates: deletes, deadlines: shutdown_deadlines } =
        shutdown_pods(observed, &nodes, policy, now);
    deadlines.extend(shutdown_deadlines);
    candidates.extend(deletes.into_iter().map(|action| Candidate { decision: None, action }));

    let ReadyOnDeadFindings { pods: ready_on_dead, candidates: markings } =
        ready_on_dead_nodes(observed, &nodes, policy, now);
    candidates.extend(markings.into_iter().map(|action| Candidate { decision: None, action }));

    let candidates = held_by_nodes(candidates, &mut decisions, &mut stale, &nodes);
    let (mut actions, waits) =
        spend_guards(candidates, &mut decisions, observed, policy, storm.refusal(), now);
    deadlines.extend(waits);
    held_evictions(&mut stale, &actions);
    // Undoing our own changes needs no storm guard, only a policy that is not paused and a
    // node nothing holds (in maintenance, shutting down).
    if !policy.paused {
        let held = |a: &Action| nodes.get(a.node()).is_some_and(|n| n.hold.is_some());
        actions.extend(node_findings.undo.into_iter().filter(|a| !held(a)));
    }
    // Every action is recorded Pending in the status before its request, and the status holds
    // MAX_BATCH records: a larger batch is cut, and the rest comes at once in the next plan.
    if actions.len() > MAX_BATCH {
        actions.truncate(MAX_BATCH);
        deadlines.push(add(now, SignedDuration::from_millis(1)));
    }

    let released = actions.iter().filter(|a| matches!(a, Action::ForceDelete(_))).count();
    counts.eligible_pods = u32::try_from(released).unwrap_or(u32::MAX);
    decisions.sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
    Plan {
        synced: synced_at.is_some(),
        suspended: if synced_at.is_some() { None } else { observed.suspended.clone() },
        actions,
        decisions,
        nodes,
        stuck,
        stale,
        repaired,
        ready_on_dead,
        circuit,
        storm,
        next_deadline: deadlines.into_iter().filter(|t| *t > now).min(),
        counts,
    }
}

/// A node held ([`NodeHold`]: in maintenance, shutting down, left to another tool) gets no node
/// action, and its pods no action when the hold covers them: a pod's decision says why, a
/// stale pod's note too. Before the guards, so that a held action spends none.
fn held_by_nodes(
    candidates: Vec<Candidate>,
    decisions: &mut [PodDecision],
    stale: &mut [StalePod],
    nodes: &NodeTable,
) -> Vec<Candidate> {
    let mut kept = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        let node = nodes.get(candidate.action.node());
        let hold = node.and_then(|n| n.hold.as_deref().map(|h| (n, h)));
        let Some((node, hold)) =
            hold.filter(|(_, h)| h.holds_pods() || matches!(candidate.action, Action::Node(_)))
        else {
            kept.push(candidate);
            continue;
        };
        let why = hold.describe(&node.name);
        if let Some(d) = candidate.decision {
            decisions[d].verdict = Verdict::NotEligible(match hold {
                NodeHold::ShuttingDown { until, .. } => {
                    NotEligible::ShuttingDown { until: *until, why }
                }
                _ => NotEligible::InMaintenance { why },
            });
        } else if let Action::Evict(e) = &candidate.action
            && let Some(pod) = stale.iter_mut().find(|p| p.uid == e.pod.uid)
        {
            pod.note.push_str(&format!("; held: {why}"));
        }
    }
    kept
}

/// A stale pod whose eviction a guard held says so.
fn held_evictions(stale: &mut [StalePod], actions: &[Action]) {
    for pod in stale.iter_mut().filter(|p| p.note.ends_with("(PodDisruptionBudgets hold)")) {
        let admitted =
            actions.iter().any(|a| matches!(a, Action::Evict(e) if e.pod.uid == pod.uid));
        if !admitted {
            pod.note.push_str("; held now by the guards (circuit, rate limit or owner budget)");
        }
    }
}

/// The cluster-wide reading: nodes whose Ready condition is False or Unknown among every node
/// the operator sees, and the Nodes this operator deleted lately (they count as unhealthy for
/// [`super::storm::OWN_DELETIONS_COUNT_FOR`], so deleting failing nodes does not erode the
/// guard). Left out: tombstones of Nodes deleted by others (gone, not failing) and nodes with no
/// Ready condition yet (they never ran: a scale-up is not a storm). Without a cluster limit it
/// never opens.
fn cluster_reading(observed: &Observed, now: Timestamp) -> Circuit {
    let (mut total, mut unhealthy) = (0u32, 0u32);
    for node in &observed.nodes {
        if node.deleted {
            let recent = |at: Timestamp| now.duration_since(at) < OWN_DELETIONS_COUNT_FOR;
            if node.control.rare.deleted_by_us.is_some_and(recent) {
                total += 1;
                unhealthy += 1;
            }
            continue;
        }
        let readiness = node.observation.readiness;
        if readiness == Readiness::Missing {
            continue;
        }
        total += 1;
        unhealthy += u32::from(readiness != Readiness::Ready);
    }
    let limit = observed.storm.cluster_limit.unwrap_or(MaxUnhealthy::Percent(100));
    Circuit::evaluate(unhealthy, total, limit)
}

/// The candidates through the zone guard and the guards, oldest threshold first: the actions
/// admitted, and the instants at which a guard frees. A pod held gets the guard's verdict; a
/// node action held waits for the next plan (the guard's reason is in the status).
fn spend_guards(
    mut candidates: Vec<Candidate>,
    decisions: &mut [PodDecision],
    observed: &Observed,
    policy: &ValidatedPolicy,
    held: Option<NotEligible>,
    now: Timestamp,
) -> (Vec<Action>, Vec<Timestamp>) {
    if candidates.is_empty() {
        return (Vec::new(), Vec::new());
    }
    candidates.sort_by(|a, b| {
        (a.action.threshold(), a.action.target()).cmp(&(b.action.threshold(), b.action.target()))
    });
    // A zone that looks partitioned gets no destructive action, whatever the guards say.
    let zone_holds = held_zones(&observed.nodes, now);
    let zones: BTreeMap<&str, &str> =
        observed.nodes.iter().map(|n| (&*n.observation.name, zone_of(n))).collect();
    let mut guards =
        Guards::new(&observed.recent_actions, &observed.others_actions, policy, held, now);
    let mut actions = Vec::new();
    let mut retries = Vec::new();
    for Candidate { decision, action } in candidates {
        let backoff = observed.backoff.get(&action.acted_key()).filter(|b| b.until > now);
        let zone = zones.get(action.node()).and_then(|z| zone_holds.get_key_value(*z));
        // An undo is never destructive, and the zone guard does not hold it.
        let zone = zone.filter(|_| !action.is_undo());
        let verdict = match (backoff, zone) {
            // A failing action waits its turn without spending the guards.
            (Some(b), _) => {
                retries.push(b.until);
                Err(NotEligible::BackingOff { failures: b.failures, until: b.until })
            }
            (None, Some((zone, ZoneHold::Partitioned { nodes }))) => {
                Err(NotEligible::ZonePartitioned { zone: zone.clone(), nodes: *nodes })
            }
            (None, Some((zone, ZoneHold::Returning { nodes, until }))) => {
                retries.push(*until);
                Err(NotEligible::ZoneReturning { zone: zone.clone(), nodes: *nodes, until: *until })
            }
            (None, None) => guards.admit(action.owner()),
        };
        match (verdict, decision) {
            (Ok(()), _) => actions.push(action),
            (Err(reason), Some(d)) => decisions[d].verdict = Verdict::NotEligible(reason),
            (Err(_), None) => {}
        }
    }
    retries.extend_from_slice(guards.deadlines());
    (actions, retries)
}

/// `nodeActions` over the in-scope nodes that exist.
fn node_actions(
    observed: &Observed,
    nodes: &NodeTable,
    policy: &ValidatedPolicy,
    now: Timestamp,
) -> NodeFindings {
    let mut found = NodeFindings::default();
    if observed.watch_synced_at.is_none() {
        return found;
    }
    for view in &observed.nodes {
        if let Some(summary) = nodes.get(&view.observation.name) {
            crate::core::rules::node_actions::evaluate(
                view,
                summary,
                policy,
                &observed.acted_pods,
                &observed.acting,
                now,
                &mut found,
            );
        }
    }
    found
}

/// The in-scope nodes, judged at `now`, by name: the observed ones, plus those referenced by
/// Terminating pods but gone.
fn in_scope_nodes(observed: &Observed, policy: &ValidatedPolicy, now: Timestamp) -> NodeTable {
    let synced_at = observed.watch_synced_at;
    // The nodes Terminating pods are on: one of them not observed is unknown, not dead.
    let mut unobserved: BTreeSet<&str> = observed
        .pods
        .iter()
        .filter(|p| p.deletion_timestamp.is_some())
        .filter_map(|p| p.node_name.as_deref())
        .collect();
    for view in &observed.nodes {
        unobserved.remove(&*view.observation.name);
    }
    // Never seen, or gone without our seeing it deleted: unknown, not dead.
    let unknown: Vec<NodeView> = unobserved.into_iter().map(NodeView::unknown).collect();
    // Sorted before they are judged, so that the table is built in order, in place. Of two
    // views with one name (a tombstone after its node), the later is judged.
    let mut views: Vec<&NodeView> = (observed.nodes.iter().map(|v| &**v).chain(&unknown))
        .filter(|view| policy.node_selector.matches(&view.labels))
        .collect();
    sort_by_name_keeping_the_later(&mut views, |v| &v.observation.name);
    let summaries =
        views.into_iter().map(|view| summarize_node(view, policy, synced_at, now)).collect();
    NodeTable::new(summaries)
}

/// Counts the selected Terminating pods on in-scope nodes whose deletionTimestamp has passed;
/// the others' deletionTimestamps are deadlines (the count changes then).
fn count_stuck_pods(
    observed: &Observed,
    nodes: &NodeTable,
    policy: &ValidatedPolicy,
    now: Timestamp,
    deadlines: &mut Vec<Timestamp>,
) -> u32 {
    let mut stuck = 0;
    for pod in &observed.pods {
        let (Some(deleted_at), Some(node)) =
            (pod.deletion_timestamp.get(), pod.node_name.as_deref())
        else {
            continue;
        };
        let selected = nodes.contains(node)
            && policy.namespace_selector.matches(&pod.namespace_labels)
            && policy.pod_selector.matches(&pod.labels);
        if !selected {
            continue;
        }
        if now >= deleted_at {
            stuck += 1;
        } else {
            deadlines.push(deleted_at);
        }
    }
    stuck
}

#[cfg(test)]
mod tests {
    use crate::core::stamp::Stamp;
    use std::sync::Arc;

    use jiff::SignedDuration;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    use super::*;
    use crate::core::action::Action;
    use crate::core::duration::add;
    use crate::core::observed::{
        Backoff, CircuitMemory, NodeObservation, OwnerKey, OwnerRef, PastAction, PodView, Readiness,
    };
    use crate::core::verdict::{NotEligible, Verdict};
    use crate::crd::{
        ActionKind, CircuitState, FencingRequirement, OwnerKind, RemediationPolicySpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    /// 2026-01-01T00:MM:SSZ.
    fn t(min: i64, sec: i64) -> Timestamp {
        add("2026-01-01T00:00:00Z".parse().expect("ts"), SignedDuration::from_secs(min * 60 + sec))
    }
    const NOW: (i64, i64) = (10, 0);
    fn now() -> Timestamp {
        t(NOW.0, NOW.1)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// "ready", "dead" (Unknown and no renewal since 00:00) or "dying" (Unknown since 00:06:
    /// dead at 00:11), all labelled zone=a.
    fn node(name: &str, health: &str) -> NodeView {
        let (readiness, transition) = match health {
            "ready" => (Readiness::Ready, t(0, 0)),
            "dead" => (Readiness::Unknown, t(0, 0)),
            "dying" => (Readiness::Unknown, t(6, 0)),
            other => panic!("unknown health {other}"),
        };
        NodeView {
            observation: NodeObservation {
                name: name.into(),
                readiness,
                ready_transition: Some(transition).into(),
                lease_renewed: Some(t(0, 0)).into(),
                not_ready_seen: (readiness != Readiness::Ready).then_some(transition).into(),
                lease_seen: Some(t(0, 0)).into(),
                lease_duration_s: None,
                ready_heartbeat: Stamp::NONE,
                heartbeat_seen: Stamp::NONE,
                seen_from_stamps: false,
                not_ready_from_stamp: false,
                unschedulable: false,
                taints: Box::default(),
                volumes_in_use: Box::default(),
            },
            // A topology zone of its own, so that the zone guard holds nothing here unless a
            // test says so.
            labels: labels(&[("zone", "a"), (super::super::zones::ZONE_LABEL, name)]).into(),
            excluded: false,
            deleted: false,
            control: Default::default(),
        }
    }

    /// A Deployment pod deleted with deletionTimestamp 00:08:00 (due 00:08:30).
    fn pod(name: &str, node: &str) -> PodView {
        PodView {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}").into(),
            node_name: Some(node.into()),
            labels: labels(&[("app", "web")]).into(),
            namespace_labels: Arc::new(labels(&[("kubernetes.io/metadata.name", "default")])),
            owner: Some(OwnerRef {
                kind: "ReplicaSet".into(),
                name: "web-1".into(),
                uid: "rs-uid".into(),
            }),
            deletion_timestamp: Stamp::from(t(8, 0)),
            deletion_grace_seconds: Some(30),
            is_mirror: false,
            has_rwo_volume: false,
            excluded: false,
            phase: Some("Running".into()),
            blocks_rollout: None,
            finalizers: vec![],
            running_containers: Box::default(),
            stale_ready_since: Stamp::NONE,
            stale_seen: Stamp::NONE,
            shutdown_reason: None,
            shutdown_seen: Stamp::NONE,
            ready_since: Stamp::NONE,
            terminating_seen: Stamp::from(t(7, 30)),
        }
    }

    /// The world of `nodes` and `pods`, with the tombstone of `n-gone` (a Node seen deleted by
    /// someone else) when a pod is on it.
    fn observed(mut nodes: Vec<NodeView>, pods: Vec<PodView>) -> Observed {
        if pods.iter().any(|p| p.node_name.as_deref() == Some("n-gone")) {
            let mut gone = NodeView::deleted_unknown("n-gone");
            gone.labels =
                labels(&[("zone", "a"), (super::super::zones::ZONE_LABEL, "n-gone")]).into();
            nodes.push(gone);
        }
        Observed {
            nodes: nodes.into_iter().map(Into::into).collect(),
            pods: pods.into_iter().map(Into::into).collect(),
            watch_synced_at: Some("2025-12-31T23:00:00Z".parse().expect("ts")),
            ..Default::default()
        }
    }

    /// Default policy, except a circuit breaker that never trips unless a test says so.
    fn policy(f: impl FnOnce(&mut RemediationPolicySpec)) -> ValidatedPolicy {
        let mut spec = RemediationPolicySpec::default();
        spec.safety.max_unhealthy_nodes = IntOrString::String("100%".into());
        f(&mut spec);
        crate::core::validate(&spec).expect("valid test policy")
    }

    fn rs_owner(name: &str) -> OwnerKey {
        OwnerKey { namespace: "default".into(), kind: "ReplicaSet".into(), name: name.into() }
    }

    /// The verdict with NodeNotDead's long explanation blanked, for tables.
    fn normalized(v: &Verdict) -> Result<(), NotEligible> {
        match v {
            Verdict::Eligible => Ok(()),
            Verdict::NotEligible(NotEligible::NodeNotDead { until, .. }) => {
                Err(NotEligible::NodeNotDead { until: *until, why: String::new() })
            }
            Verdict::NotEligible(r) => Err(r.clone()),
        }
    }

    fn verdict_of<'a>(plan: &'a Plan, name: &str) -> &'a Verdict {
        &plan.decisions.iter().find(|d| d.name == name).expect("decision for pod").verdict
    }

    type SpecFn = fn(&mut RemediationPolicySpec);
    type PodFn = fn(&mut PodView);
    type ObsFn = fn(&mut Observed);

    #[test]
    fn verdict_table() {
        use NotEligible::*;
        struct Row {
            case: &'static str,
            spec: SpecFn,
            pod: PodFn,
            observed: ObsFn,
            want: Result<(), NotEligible>,
        }
        /// A row that changes nothing in the policy, the pod or the observed cluster.
        fn row(case: &'static str, want: Result<(), NotEligible>) -> Row {
            Row { case, spec: |_| {}, pod: |_| {}, observed: |_| {}, want }
        }
        fn owned_by(p: &mut PodView, kind: &str) {
            p.owner = Some(OwnerRef { kind: kind.into(), name: "o".into(), uid: "o-uid".into() });
        }
        // Nodes: dead "n-dead", "n-ready", "n-dying" (dead at 00:11), "n-oos" (dead, out-of-service
        // taint). The pod is on n-dead unless the pod function moves it.
        let table = [
            row("Deployment pod on a dead node", Ok(())),
            Row { pod: |p| p.owner = None, ..row("bare pod", Ok(())) },
            Row { pod: |p| owned_by(p, "Job"), ..row("Job pod", Ok(())) },
            Row {
                observed: |o| o.watch_synced_at = None,
                ..row("caches not synced", Err(CachesNotSynced))
            },
            Row {
                spec: |s| s.stuck_terminating.enabled = false,
                ..row("rule disabled", Err(RuleDisabled))
            },
            Row { pod: |p| p.excluded = true, ..row("pod excluded", Err(PodExcluded)) },
            Row {
                observed: |o| Arc::make_mut(&mut o.nodes[0]).excluded = true,
                ..row("node excluded", Err(NodeExcluded))
            },
            Row { pod: |p| p.is_mirror = true, ..row("mirror pod", Err(MirrorPod)) },
            Row {
                pod: |p| owned_by(p, "Node"),
                ..row("pod owned by its Node is a mirror pod", Err(MirrorPod))
            },
            Row { pod: |p| owned_by(p, "DaemonSet"), ..row("DaemonSet pod", Err(DaemonSetPod)) },
            Row {
                pod: |p| owned_by(p, "CloneSet"),
                ..row("custom owner kind", Err(OwnerKindNotSelected { kind: "CloneSet".into() }))
            },
            Row {
                spec: |s| s.owner_kinds = vec![OwnerKind::ReplicaSet],
                pod: |p| owned_by(p, "Job"),
                ..row("Job not in ownerKinds", Err(OwnerKindNotSelected { kind: "Job".into() }))
            },
            Row {
                spec: |s| s.owner_kinds = vec![OwnerKind::ReplicaSet],
                pod: |p| p.owner = None,
                ..row("bare not in ownerKinds", Err(OwnerKindNotSelected { kind: "Bare".into() }))
            },
            Row {
                spec: |s| {
                    s.namespace_selector = Some(
                        serde_json::from_value(serde_json::json!({"matchLabels": {"team": "a"}}))
                            .expect("sel"),
                    )
                },
                ..row("namespace not selected", Err(NamespaceNotSelected))
            },
            Row {
                spec: |s| {
                    s.pod_selector = Some(
                        serde_json::from_value(serde_json::json!({"matchLabels": {"app": "db"}}))
                            .expect("sel"),
                    )
                },
                ..row("pod not selected", Err(PodNotSelected))
            },
            Row {
                observed: |o| {
                    o.acted_pods.insert("uid-p".into());
                },
                ..row("already acted", Err(AlreadyActed))
            },
            Row {
                pod: |p| p.node_name = Some("n-ready".into()),
                spec: |s| s.live_node_stuck.enabled = false,
                ..row("node ready", Err(NodeNotDead { until: None, why: String::new() }))
            },
            Row {
                pod: |p| {
                    p.node_name = Some("n-ready".into());
                    p.running_containers = Box::new(["app".into()]);
                },
                ..row(
                    "node ready, stuck past liveNodeStuck's delay: reported",
                    Err(StuckOnLiveNode {
                        cause: "ContainersRunning",
                        detail: "container app still running: the kubelet has not stopped it"
                            .into(),
                        action_at: None,
                    }),
                )
            },
            Row {
                pod: |p| p.finalizers = vec!["example.com/keep".into()],
                ..row(
                    "a finalizer on a dead node: held, not force-deleted",
                    Err(HeldByFinalizers { names: vec!["example.com/keep".into()] }),
                )
            },
            Row {
                spec: |s| {
                    s.finalizers.removable = vec!["example.com/keep".into()];
                    s.finalizers.remove_after = "0s".into();
                },
                pod: |p| p.finalizers = vec!["example.com/keep".into()],
                ..row("an allowlisted finalizer on a dead node: removable", Ok(()))
            },
            Row {
                spec: |s| {
                    s.finalizers.removable = vec!["example.com/keep".into()];
                    s.finalizers.remove_after = "0s".into();
                },
                pod: |p| p.finalizers = vec!["example.com/keep".into()],
                observed: |o| {
                    o.acted_pods.insert(crate::core::removal_acted_key("uid-p"));
                },
                ..row("its removal already done or recorded: not again", Err(AlreadyActed))
            },
            Row {
                observed: |o| {
                    o.backoff.insert("uid-p".into(), Backoff { failures: 2, until: t(10, 30) });
                },
                ..row(
                    "its last attempts failed: waits out its backoff",
                    Err(BackingOff { failures: 2, until: t(10, 30) }),
                )
            },
            Row {
                observed: |o| {
                    o.backoff.insert("uid-p".into(), Backoff { failures: 2, until: t(9, 30) });
                },
                ..row("its backoff is over: attempted again", Ok(()))
            },
            Row {
                pod: |p| p.node_name = Some("n-dying".into()),
                ..row("node dying", Err(NodeNotDead { until: Some(t(11, 0)), why: String::new() }))
            },
            Row {
                pod: |p| owned_by(p, "StatefulSet"),
                ..row(
                    "StatefulSet pod needs fencing",
                    Err(NeedsFencing { because: FencingRequirement::StatefulSet }),
                )
            },
            Row {
                pod: |p| p.has_rwo_volume = true,
                ..row(
                    "RWO pod needs fencing",
                    Err(NeedsFencing { because: FencingRequirement::ReadWriteOnce }),
                )
            },
            Row {
                spec: |s| s.dead_node.require_fencing_for = vec![FencingRequirement::All],
                pod: |p| p.owner = None,
                ..row(
                    "All: every pod needs fencing",
                    Err(NeedsFencing { because: FencingRequirement::All }),
                )
            },
            Row {
                pod: |p| {
                    p.owner = Some(OwnerRef {
                        kind: "StatefulSet".into(),
                        name: "db".into(),
                        uid: "u".into(),
                    });
                    p.node_name = Some("n-oos".into());
                },
                ..row("StatefulSet pod on a fenced node", Ok(()))
            },
            Row {
                pod: |p| {
                    p.owner = Some(OwnerRef {
                        kind: "StatefulSet".into(),
                        name: "db".into(),
                        uid: "u".into(),
                    });
                    p.has_rwo_volume = true;
                    p.node_name = Some("n-gone".into());
                },
                ..row("RWO StatefulSet pod on a deleted node (fenced by deletion)", Ok(()))
            },
            Row {
                spec: |s| s.dead_node.fencing.node_deleted = false,
                pod: |p| {
                    p.has_rwo_volume = true;
                    p.node_name = Some("n-gone".into());
                },
                ..row(
                    "deleted node but deletion is not trusted as fencing",
                    Err(NeedsFencing { because: FencingRequirement::ReadWriteOnce }),
                )
            },
            Row {
                spec: |s| s.dead_node.require_fencing_for = vec![FencingRequirement::None],
                pod: |p| owned_by(p, "StatefulSet"),
                ..row("StatefulSet pod, fencing explicitly not required", Ok(()))
            },
            Row {
                spec: |s| s.dead_node.require_fencing_for = vec![FencingRequirement::ReadWriteOnce],
                pod: |p| owned_by(p, "StatefulSet"),
                ..row("StatefulSet pod, only RWO needs fencing", Ok(()))
            },
            Row {
                pod: |p| p.deletion_timestamp = Stamp::from(t(9, 45)),
                ..row("within delay", Err(WithinDelay { until: t(10, 15) }))
            },
            Row {
                spec: |s| s.stuck_terminating.delay_after_grace = "3m".into(),
                ..row("longer delay", Err(WithinDelay { until: t(11, 0) }))
            },
            Row { spec: |s| s.paused = true, ..row("paused", Err(Paused)) },
            Row {
                spec: |s| s.safety.max_unhealthy_nodes = IntOrString::Int(2),
                ..row("circuit open", Err(CircuitOpen { unhealthy: 3, limit: 2 }))
            },
            Row {
                observed: |o| {
                    o.recent_actions =
                        (0..10).map(|i| PastAction { at: t(9, 20 + i), owner: None }).collect();
                },
                ..row("rate limited", Err(RateLimited { until: t(10, 20) }))
            },
            Row {
                observed: |o| {
                    let owner = Some(OwnerKey {
                        namespace: "default".into(),
                        kind: "ReplicaSet".into(),
                        name: "web-1".into(),
                    });
                    o.recent_actions = (0..5)
                        .map(|i| PastAction { at: t(9, 30 + i), owner: owner.clone() })
                        .collect();
                },
                ..row(
                    "owner budget",
                    Err(OwnerBudget { owner: rs_owner("web-1"), until: t(10, 30) }),
                )
            },
            Row {
                observed: |o| {
                    let owner = Some(rs_owner("other"));
                    o.recent_actions = (0..5)
                        .map(|i| PastAction { at: t(9, 30 + i), owner: owner.clone() })
                        .collect();
                },
                ..row("another owner's budget does not matter", Ok(()))
            },
        ];
        for Row { case, spec: spec_fn, pod: pod_fn, observed: obs_fn, want } in table {
            let p = policy(spec_fn);
            let mut oos = node("n-oos", "dead");
            oos.observation.taints =
                vec!["node.kubernetes.io/out-of-service:NoExecute".into()].into();
            let mut the_pod = pod("p", "n-dead");
            pod_fn(&mut the_pod);
            let mut obs = observed(
                vec![
                    node("n-dead", "dead"),
                    node("n-ready", "ready"),
                    node("n-dying", "dying"),
                    oos,
                ],
                vec![the_pod],
            );
            obs_fn(&mut obs);
            let plan = plan(&obs, &p, now());
            assert_eq!(plan.decisions.len(), 1, "{case}");
            let verdict = &plan.decisions[0].verdict;
            assert_eq!(normalized(verdict), want, "{case}: {verdict:?}");
            assert_eq!(plan.actions.len(), usize::from(want.is_ok()), "{case}");
            if let Verdict::NotEligible(reason) = verdict {
                assert!(!reason.to_string().is_empty() && !reason.code().is_empty(), "{case}");
            }
        }
    }

    #[test]
    fn action_carries_identity_reason_and_threshold() {
        let mut sts = pod("db-0", "n-oos");
        sts.owner =
            Some(OwnerRef { kind: "StatefulSet".into(), name: "db".into(), uid: "sts-uid".into() });
        let mut oos = node("n-oos", "dead");
        oos.observation.taints = vec!["node.kubernetes.io/out-of-service:NoExecute".into()].into();
        let plan = plan(&observed(vec![oos], vec![sts]), &policy(|_| {}), now());
        let [Action::ForceDelete(fd)] = plan.actions.as_slice() else {
            panic!("one action: {plan:?}")
        };
        assert_eq!(
            (
                fd.pod.namespace.as_str(),
                fd.pod.name.as_str(),
                fd.pod.uid.as_str(),
                fd.pod.node.as_str()
            ),
            ("default", "db-0", "uid-db-0", "n-oos")
        );
        assert_eq!(
            fd.pod.owner,
            Some(OwnerKey {
                namespace: "default".into(),
                kind: "StatefulSet".into(),
                name: "db".into()
            })
        );
        // Node dead at 00:05 (notReadyFor from 00:00), pod due at 00:08:30: the later one.
        assert_eq!(fd.pod.threshold, t(8, 30));
        assert!(fd.pod.reason.contains("fencing required (StatefulSet) and present: taint node.kubernetes.io/out-of-service"), "{}", fd.pod.reason);
        assert!(
            fd.pod.reason.contains("delayAfterGrace 30s passed at 2026-01-01T00:08:30Z"),
            "{}",
            fd.pod.reason
        );
        assert_eq!(plan.actions[0].kind(), ActionKind::ForceDelete);
    }

    #[test]
    fn out_of_scope_and_irrelevant_pods_get_no_decision() {
        let mut other_zone = node("n-b", "dead");
        other_zone.labels = labels(&[("zone", "b")]).into();
        let mut not_terminating = pod("alive", "n-a");
        not_terminating.deletion_timestamp = Stamp::NONE;
        let mut unscheduled = pod("pending", "n-a");
        unscheduled.node_name = None;
        let p = policy(|s| {
            s.node_selector = Some(
                serde_json::from_value(serde_json::json!({"matchLabels": {"zone": "a"}}))
                    .expect("sel"),
            );
        });
        let obs = observed(
            vec![node("n-a", "dead"), other_zone],
            vec![
                pod("in-scope", "n-a"),
                pod("other-zone", "n-b"),
                not_terminating,
                unscheduled,
                pod("unknown-node", "n-unknown"),
            ],
        );
        let plan = plan(&obs, &p, now());
        let names: Vec<&str> = plan.decisions.iter().map(|d| d.name.as_str()).collect();
        // A node absent from the cache (never seen) has no labels, so zone=a does not select it.
        assert_eq!(names, vec!["in-scope"]);
        assert_eq!(plan.nodes.iter().map(|n| &*n.name).collect::<Vec<_>>(), vec!["n-a"]);
        assert_eq!(plan.counts.matched_nodes, 1);
    }

    #[test]
    fn circuit_breaker_boundaries() {
        struct Row {
            case: &'static str,
            /// Nodes in scope.
            in_scope: usize,
            /// Dead nodes among them.
            dead: usize,
            /// Dead nodes out of scope.
            dead_outside: usize,
            /// `maxUnhealthyNodes`.
            max: IntOrString,
            want_open: bool,
            want_limit: u32,
        }
        let table = [
            Row {
                case: "percent: at the limit acts",
                in_scope: 10,
                dead: 3,
                dead_outside: 0,
                max: IntOrString::String("30%".into()),
                want_open: false,
                want_limit: 3,
            },
            Row {
                case: "percent: one over does not",
                in_scope: 10,
                dead: 4,
                dead_outside: 0,
                max: IntOrString::String("30%".into()),
                want_open: true,
                want_limit: 3,
            },
            Row {
                case: "percent rounds down",
                in_scope: 13,
                dead: 4,
                dead_outside: 0,
                max: IntOrString::String("30%".into()),
                want_open: true,
                want_limit: 3,
            },
            Row {
                case: "small cluster: 30% of 3 is 0",
                in_scope: 3,
                dead: 1,
                dead_outside: 0,
                max: IntOrString::String("30%".into()),
                want_open: true,
                want_limit: 0,
            },
            Row {
                case: "count: at the limit acts",
                in_scope: 5,
                dead: 2,
                dead_outside: 0,
                max: IntOrString::Int(2),
                want_open: false,
                want_limit: 2,
            },
            Row {
                case: "count: one over does not",
                in_scope: 5,
                dead: 3,
                dead_outside: 0,
                max: IntOrString::Int(2),
                want_open: true,
                want_limit: 2,
            },
            Row {
                case: "zero tolerates nothing",
                in_scope: 5,
                dead: 1,
                dead_outside: 0,
                max: IntOrString::Int(0),
                want_open: true,
                want_limit: 0,
            },
            Row {
                case: "100% never opens",
                in_scope: 4,
                dead: 4,
                dead_outside: 0,
                max: IntOrString::String("100%".into()),
                want_open: false,
                want_limit: 4,
            },
            Row {
                case: "out-of-scope nodes do not count",
                in_scope: 10,
                dead: 3,
                dead_outside: 5,
                max: IntOrString::String("30%".into()),
                want_open: false,
                want_limit: 3,
            },
        ];
        for Row { case, in_scope, dead, dead_outside, max, want_open, want_limit } in table {
            let mut nodes: Vec<NodeView> = (0..in_scope)
                .map(|i| node(&format!("n{i:02}"), if i < dead { "dead" } else { "ready" }))
                .collect();
            for i in 0..dead_outside {
                let mut n = node(&format!("x{i}"), "dead");
                n.labels = labels(&[("zone", "b")]).into();
                nodes.push(n);
            }
            let p = policy(|s| {
                s.safety.max_unhealthy_nodes = max.clone();
                s.node_selector = Some(
                    serde_json::from_value(serde_json::json!({"matchLabels": {"zone": "a"}}))
                        .expect("sel"),
                );
            });
            let plan = plan(&observed(nodes, vec![pod("p", "n00")]), &p, now());
            assert_eq!(plan.circuit.open, want_open, "{case}: {}", plan.circuit.message());
            assert_eq!(plan.circuit.limit, want_limit, "{case}");
            assert_eq!(
                (plan.circuit.unhealthy, plan.circuit.in_scope),
                (dead as u32, in_scope as u32),
                "{case}"
            );
            assert_eq!(plan.actions.is_empty(), want_open, "{case}");
            if want_open {
                assert_eq!(
                    verdict_of(&plan, "p"),
                    &Verdict::NotEligible(NotEligible::CircuitOpen {
                        unhealthy: dead as u32,
                        limit: want_limit
                    }),
                    "{case}"
                );
                assert!(plan.circuit.message().contains("no action until it drops"), "{case}");
            }
        }
    }

    #[test]
    fn unhealthy_but_not_dead_nodes_count_towards_the_circuit() {
        let p = policy(|s| s.safety.max_unhealthy_nodes = IntOrString::Int(1));
        let obs = observed(
            vec![node("n-dead", "dead"), node("n-dying", "dying"), node("n-ok", "ready")],
            vec![pod("p", "n-dead")],
        );
        let plan = plan(&obs, &p, now());
        assert!(plan.circuit.open);
        assert_eq!(
            plan.counts,
            PlanCounts {
                matched_nodes: 3,
                unhealthy_nodes: 2,
                dead_nodes: 1,
                stuck_pods: 1,
                eligible_pods: 0
            }
        );
    }

    /// The cluster-wide storm guard: a narrow policy (one selected node, within its own limit)
    /// takes no action while more nodes than `--max-unhealthy-nodes-in-cluster` are unhealthy
    /// across the cluster; nodes never Ready and deleted ones do not count.
    #[test]
    fn a_cluster_storm_holds_a_narrow_policy() {
        let p = policy(|s| {
            s.safety.max_unhealthy_nodes = IntOrString::Int(1);
            s.safety.cooldown = "0s".into();
            s.node_selector = Some(LabelSelector {
                match_labels: Some(labels(&[("zone", "narrow")])),
                ..Default::default()
            });
        });
        let mut narrow = node("n-dead", "dead");
        narrow.labels = labels(&[("zone", "narrow")]).into();
        let others = |unhealthy: usize, healthy: usize| {
            let sick = (0..unhealthy).map(|i| node(&format!("sick-{i}"), "dead"));
            let fine = (0..healthy).map(|i| node(&format!("fine-{i}"), "ready"));
            sick.chain(fine).collect::<Vec<_>>()
        };
        let with = |mut nodes: Vec<NodeView>, limit: MaxUnhealthy| {
            nodes.push(narrow.clone());
            let mut obs = observed(nodes, vec![pod("p", "n-dead")]);
            obs.storm.cluster_limit = Some(limit);
            obs
        };
        // (case, other nodes, limit, want held, want cluster unhealthy, want cluster nodes)
        let mut never_ready = node("new", "ready");
        never_ready.observation.readiness = Readiness::Missing;
        let mut gone = node("gone", "dead");
        gone.deleted = true;
        let rows = [
            ("3 of 4 unhealthy, limit 2", others(2, 1), MaxUnhealthy::Count(2), true, 3, 4),
            ("2 of 4 unhealthy, limit 2", others(1, 2), MaxUnhealthy::Count(2), false, 2, 4),
            ("3 of 6 is 50%", others(2, 3), MaxUnhealthy::Percent(50), false, 3, 6),
            ("4 of 6 is over 50%", others(3, 2), MaxUnhealthy::Percent(50), true, 4, 6),
            (
                "never Ready and deleted nodes do not count",
                vec![never_ready.clone(), gone.clone(), node("sick", "dead")],
                MaxUnhealthy::Count(2),
                false,
                2,
                2,
            ),
        ];
        for (case, nodes, limit, want_held, want_unhealthy, want_total) in rows {
            let plan = plan(&with(nodes, limit), &p, now());
            assert!(!plan.circuit.open, "{case}: the policy's own reading stays closed");
            assert_eq!(plan.storm.holds(), want_held, "{case}: {}", plan.storm.message());
            let cluster = (plan.storm.cluster.unhealthy, plan.storm.cluster.in_scope);
            assert_eq!(cluster, (want_unhealthy, want_total), "{case}");
            if want_held {
                assert!(plan.actions.is_empty(), "{case}: {:?}", plan.actions);
                assert_eq!(
                    normalized(verdict_of(&plan, "p")),
                    Err(NotEligible::ClusterStorm {
                        unhealthy: want_unhealthy,
                        limit: limit.limit(want_total)
                    }),
                    "{case}"
                );
                assert_eq!(plan.storm.reason(), "ClusterStorm", "{case}");
            } else {
                assert_eq!(plan.actions.len(), 1, "{case}: {:?}", plan.decisions);
            }
        }
    }

    /// A latched circuit remembered in the status holds actions although the storm has passed,
    /// and a cool-down requeues for its end.
    #[test]
    fn latch_and_cooldown_hold_actions_after_the_storm() {
        let obs = |previous: CircuitMemory| {
            let mut o = observed(vec![node("n-dead", "dead")], vec![pod("p", "n-dead")]);
            o.storm.previous = Some(previous);
            o.storm.rearm_token = Some("1".into());
            o
        };
        let latched = CircuitMemory {
            state: CircuitState::Latched,
            since: t(5, 0),
            until: None,
            rearm_token: Some("1".into()),
        };
        let p = policy(|s| s.safety.latch = true);
        let held = plan(&obs(latched.clone()), &p, now());
        assert!(held.actions.is_empty());
        assert_eq!(normalized(verdict_of(&held, "p")), Err(NotEligible::CircuitLatched));

        let mut rearmed = obs(latched);
        rearmed.storm.rearm_token = Some("2".into());
        let cooling = plan(&rearmed, &p, now());
        assert!(cooling.storm.rearmed);
        let until = add(now(), SignedDuration::from_secs(60));
        assert_eq!(normalized(verdict_of(&cooling, "p")), Err(NotEligible::CoolingDown { until }));
        assert_eq!(cooling.next_deadline, Some(until), "requeue at the end of the cool-down");
    }

    /// `n` pods on a dead node, deleted one second apart from 00:08:00, each with its own owner
    /// unless `same_owner`.
    fn many_pods(n: i64, same_owner: bool) -> Vec<PodView> {
        (0..n)
            .map(|i| {
                let mut p = pod(&format!("p{i:02}"), "n-dead");
                p.deletion_timestamp = Stamp::from(t(8, i));
                if !same_owner {
                    p.owner = Some(OwnerRef {
                        kind: "ReplicaSet".into(),
                        name: format!("rs{i:02}").into(),
                        uid: format!("u{i}").into(),
                    });
                }
                p
            })
            .collect()
    }

    fn acted(plan: &Plan) -> Vec<&str> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::ForceDelete(f) => Some(f.pod.name.as_str()),
                Action::Node(_)
                | Action::RemoveFinalizers(_)
                | Action::Evict(_)
                | Action::DeleteShutdownPod(_)
                | Action::MarkNotReady(_) => None,
            })
            .collect()
    }

    #[test]
    fn rate_limit_takes_oldest_first_and_reports_the_next_slot() {
        let p = policy(|_| {});
        // 12 due pods, no history: 10 act now, 2 wait for the first of those 10 to leave the window.
        let mut pods = many_pods(12, false);
        pods.reverse();
        let plan1 = plan(&observed(vec![node("n-dead", "dead")], pods), &p, now());
        assert_eq!(acted(&plan1), (0..10).map(|i| format!("p{i:02}")).collect::<Vec<_>>());
        for name in ["p10", "p11"] {
            assert_eq!(
                verdict_of(&plan1, name),
                &Verdict::NotEligible(NotEligible::RateLimited { until: t(11, 0) })
            );
        }
        assert_eq!(plan1.next_deadline, Some(t(11, 0)));
        assert_eq!(plan1.counts.eligible_pods, 10);

        // 3 actions at 00:09:20 in the window: 7 slots left; the rest wait for 00:10:20.
        let mut obs = observed(vec![node("n-dead", "dead")], many_pods(12, false));
        obs.recent_actions = (0..3).map(|_| PastAction { at: t(9, 20), owner: None }).collect();
        let plan2 = plan(&obs, &p, now());
        assert_eq!(plan2.actions.len(), 7);
        assert_eq!(
            verdict_of(&plan2, "p07"),
            &Verdict::NotEligible(NotEligible::RateLimited { until: t(10, 20) })
        );
        assert_eq!(plan2.next_deadline, Some(t(10, 20)));

        // At 00:10:20 exactly those 3 have left the window (actions at 00:10:00 still count).
        obs.pods.retain(|p| !acted(&plan2).contains(&p.name.as_str()));
        obs.recent_actions.extend((0..7).map(|_| PastAction { at: now(), owner: None }));
        let plan3 = plan(&obs, &p, t(10, 20));
        assert_eq!(acted(&plan3), vec!["p07", "p08", "p09"]);
        assert_eq!(plan3.next_deadline, Some(t(11, 0)));
    }

    #[test]
    fn owner_budget_limits_one_owner_only() {
        let p = policy(|_| {});
        let mut pods = many_pods(7, true);
        let mut other = pod("other", "n-dead");
        other.owner =
            Some(OwnerRef { kind: "ReplicaSet".into(), name: "other".into(), uid: "x".into() });
        other.deletion_timestamp = Stamp::from(t(8, 30));
        pods.push(other);
        let plan = plan(&observed(vec![node("n-dead", "dead")], pods), &p, now());
        assert_eq!(acted(&plan), vec!["p00", "p01", "p02", "p03", "p04", "other"]);
        for name in ["p05", "p06"] {
            assert_eq!(
                verdict_of(&plan, name),
                &Verdict::NotEligible(NotEligible::OwnerBudget {
                    owner: rs_owner("web-1"),
                    until: t(11, 0)
                })
            );
        }
        assert_eq!(plan.next_deadline, Some(t(11, 0)));
    }

    #[test]
    fn owner_budget_counts_history_and_bare_pods_only_count_globally() {
        let p = policy(|s| s.safety.max_pods_per_owner_per_minute = 1);
        let mut obs = observed(vec![node("n-dead", "dead")], many_pods(2, true));
        let mut bare = pod("bare", "n-dead");
        bare.owner = None;
        obs.pods.push(bare.clone().into());
        let mut bare2 = bare;
        bare2.name = "bare2".into();
        bare2.uid = "uid-bare2".into();
        obs.pods.push(bare2.into());
        obs.recent_actions = vec![PastAction { at: t(9, 40), owner: Some(rs_owner("web-1")) }];
        let plan = plan(&obs, &p, now());
        assert_eq!(acted(&plan), vec!["bare", "bare2"]);
        assert_eq!(
            verdict_of(&plan, "p00"),
            &Verdict::NotEligible(NotEligible::OwnerBudget {
                owner: rs_owner("web-1"),
                until: t(10, 40)
            })
        );
        assert_eq!(plan.next_deadline, Some(t(10, 40)));
    }

    #[test]
    fn next_deadline_is_the_exact_threshold() {
        let p = policy(|_| {});
        struct Row {
            case: &'static str,
            /// The node's health (see `node`).
            health: &'static str,
            /// The pod's deletionTimestamp.
            deleted: Timestamp,
            /// When the watches synced, if not long ago.
            synced: Option<Timestamp>,
            /// The next deadline.
            want: Option<Timestamp>,
        }
        let table = [
            Row {
                case: "dead node, delay pending: the delay",
                health: "dead",
                deleted: t(9, 45),
                synced: None,
                want: Some(t(10, 15)),
            },
            Row {
                case: "dying node, delay passed: node death",
                health: "dying",
                deleted: t(8, 0),
                synced: None,
                want: Some(t(11, 0)),
            },
            Row {
                case: "dying node, later grace end comes first",
                health: "dying",
                deleted: t(10, 50),
                synced: None,
                want: Some(t(10, 50)),
            },
            Row {
                case: "ready node, stuck: nothing by time",
                health: "ready",
                deleted: t(8, 0),
                synced: None,
                want: None,
            },
            Row {
                case: "ready node, in grace: the grace end (stuck count)",
                health: "ready",
                deleted: t(10, 5),
                synced: None,
                want: Some(t(10, 5)),
            },
            Row {
                case: "dead and due: acted now, nothing left",
                health: "dead",
                deleted: t(8, 0),
                synced: None,
                want: None,
            },
            Row {
                case: "resynced at 00:09:58: node dies 5m after the sync",
                health: "dead",
                deleted: t(8, 0),
                synced: Some(t(9, 58)),
                want: Some(t(14, 58)),
            },
        ];
        for Row { case, health, deleted, synced, want } in table {
            let mut the_pod = pod("p", "n");
            the_pod.deletion_timestamp = Stamp::from(deleted);
            let mut obs = observed(vec![node("n", health)], vec![the_pod]);
            if synced.is_some() {
                obs.watch_synced_at = synced;
            }
            assert_eq!(plan(&obs, &p, now()).next_deadline, want, "{case}");
        }
    }

    #[test]
    fn pod_becomes_eligible_at_its_threshold_not_a_millisecond_earlier() {
        let p = policy(|_| {});
        let mut the_pod = pod("p", "n");
        the_pod.deletion_timestamp = Stamp::from(t(9, 45));
        let obs = observed(vec![node("n", "dead")], vec![the_pod]);
        let before = plan(&obs, &p, add(t(10, 15), SignedDuration::from_millis(-1)));
        assert!(before.actions.is_empty());
        assert_eq!(before.next_deadline, Some(t(10, 15)));
        let at = plan(&obs, &p, t(10, 15));
        let [Action::ForceDelete(fd)] = at.actions.as_slice() else { panic!("one action") };
        assert_eq!(fd.pod.threshold, t(10, 15));
        assert_eq!(at.next_deadline, None);

        // On a dying node (dead at 00:11) with the delay long passed, the node's death is the
        // threshold.
        let obs = observed(vec![node("n", "dying")], vec![pod("p", "n")]);
        assert_eq!(plan(&obs, &p, now()).next_deadline, Some(t(11, 0)));
        let at = plan(&obs, &p, t(11, 0));
        let [Action::ForceDelete(fd)] = at.actions.as_slice() else { panic!("one action") };
        assert_eq!(fd.pod.threshold, t(11, 0));
    }

    #[test]
    fn caches_not_synced_means_nothing_is_dead_and_nothing_acts() {
        let mut obs = observed(vec![node("n", "dead")], vec![pod("p", "n")]);
        obs.watch_synced_at = None;
        let plan = plan(&obs, &policy(|_| {}), now());
        assert!(!plan.synced);
        assert!(plan.actions.is_empty());
        assert_eq!(plan.counts.dead_nodes, 0);
        assert_eq!(plan.next_deadline, None);
        assert_eq!(verdict_of(&plan, "p"), &Verdict::NotEligible(NotEligible::CachesNotSynced));
    }

    #[test]
    fn paused_keeps_verdicts_and_deadlines_but_no_actions() {
        let mut within = pod("within", "n");
        within.deletion_timestamp = Stamp::from(t(9, 45));
        let obs = observed(vec![node("n", "dead")], vec![pod("due", "n"), within]);
        let plan = plan(&obs, &policy(|s| s.paused = true), now());
        assert!(plan.actions.is_empty());
        assert_eq!(verdict_of(&plan, "due"), &Verdict::NotEligible(NotEligible::Paused));
        assert_eq!(
            verdict_of(&plan, "within"),
            &Verdict::NotEligible(NotEligible::WithinDelay { until: t(10, 15) })
        );
        assert_eq!(plan.next_deadline, Some(t(10, 15)));
    }

    #[test]
    fn dry_run_and_enforce_plan_identically() {
        let mut obs = observed(
            vec![node("n-dead", "dead"), node("n-dying", "dying"), node("n-ready", "ready")],
            many_pods(12, false),
        );
        obs.pods.push(pod("d", "n-dying").into());
        obs.pods.push(pod("r", "n-ready").into());
        let dry = plan(&obs, &policy(|s| s.mode = crate::crd::Mode::DryRun), now());
        let enforce = plan(&obs, &policy(|s| s.mode = crate::crd::Mode::Enforce), now());
        assert_eq!(dry, enforce);
    }

    #[test]
    fn counts_for_status() {
        let mut in_grace = pod("in-grace", "n-ready");
        in_grace.deletion_timestamp = Stamp::from(t(10, 30));
        let mut excluded = pod("excluded", "n-dead");
        excluded.excluded = true;
        let mut other_ns = pod("other-ns", "n-dead");
        other_ns.namespace_labels = Arc::new(labels(&[("team", "b")]));
        let p = policy(|s| {
            s.namespace_selector = Some(
                serde_json::from_value(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}))
                    .expect("sel"),
            );
        });
        let obs = observed(
            vec![node("n-dead", "dead"), node("n-dying", "dying"), node("n-ready", "ready")],
            vec![
                pod("a", "n-dead"),
                pod("b", "n-ready"),
                in_grace,
                excluded,
                other_ns,
                pod("c", "n-gone"),
            ],
        );
        let plan = plan(&obs, &p, now());
        // n-gone is synthesized as a deleted node: matched, unhealthy, dead.
        assert_eq!(
            plan.counts,
            PlanCounts {
                matched_nodes: 4,
                unhealthy_nodes: 3,
                dead_nodes: 2,
                stuck_pods: 4,
                eligible_pods: 2
            }
        );
        assert_eq!(acted(&plan), vec!["a", "c"]);
        assert_eq!(
            plan.decisions.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            vec!["a", "b", "c", "excluded", "in-grace", "other-ns"]
        );
        // The stuck count changes when in-grace's grace ends; n-dying dies at 00:11.
        assert_eq!(plan.next_deadline, Some(t(10, 30)));
    }

    #[test]
    fn recreate_rollouts_rule_applies_to_blocking_pods_only() {
        use crate::core::rollouts::{WorkloadKind, WorkloadRef};
        let blocking = |p: &mut PodView| {
            p.blocks_rollout = Some(Box::new(WorkloadRef {
                kind: WorkloadKind::Deployment,
                namespace: "default".into(),
                name: "web".into(),
                uid: "d".into(),
            }));
        };
        // deletionTimestamp 00:08:00; now is NOW.
        let off = |s: &mut RemediationPolicySpec| s.stuck_terminating.enabled = false;
        struct Row {
            case: &'static str,
            /// What the policy says of stuckTerminating and recreateRollouts.
            spec: SpecFn,
            /// Whether the pod blocks a rollout.
            blocks: bool,
            want: Result<(), NotEligible>,
        }
        let table = [
            Row {
                case: "blocking pod, only recreateRollouts",
                spec: off,
                blocks: true,
                want: Ok(()),
            },
            Row {
                case: "non-blocking pod, only recreateRollouts",
                spec: off,
                blocks: false,
                want: Err(NotEligible::RuleDisabled),
            },
            Row {
                case: "both rules disabled",
                spec: |s| {
                    s.stuck_terminating.enabled = false;
                    s.recreate_rollouts.enabled = false;
                },
                blocks: true,
                want: Err(NotEligible::RuleDisabled),
            },
            Row {
                case: "the shorter delay wins for a blocking pod",
                spec: |s| {
                    s.stuck_terminating.delay_after_grace = "1h".into();
                    s.recreate_rollouts.delay_after_grace = "0s".into();
                },
                blocks: true,
                want: Ok(()),
            },
            Row {
                case: "a non-blocking pod keeps stuckTerminating's delay",
                spec: |s| s.stuck_terminating.delay_after_grace = "1h".into(),
                blocks: false,
                want: Err(NotEligible::WithinDelay { until: t(68, 0) }),
            },
        ];
        for Row { case, spec, blocks, want } in table {
            let mut p = pod("web-1-abc", "n-dead");
            if blocks {
                blocking(&mut p);
            }
            let obs = observed(vec![node("n-dead", "dead"), node("n-ready", "ready")], vec![p]);
            let plan = plan(&obs, &policy(spec), now());
            assert_eq!(normalized(verdict_of(&plan, "web-1-abc")), want, "{case}");
            if want.is_ok() {
                let Action::ForceDelete(fd) = &plan.actions[0] else {
                    panic!("{case}: not a force delete: {:?}", plan.actions[0])
                };
                assert_eq!(fd.blocks_rollout.is_some(), blocks, "{case}");
                assert!(
                    !blocks
                        || fd.pod.reason.contains("blocks the rollout of Deployment default/web"),
                    "{case}"
                );
            }
        }
    }

    #[test]
    fn a_batch_is_cut_to_what_the_status_records_and_the_rest_comes_at_once() {
        let p = policy(|s| {
            s.safety.rate_limit.actions_per_minute = 100;
            s.safety.max_pods_per_owner_per_minute = 100;
        });
        let obs = observed(vec![node("n-dead", "dead")], many_pods(30, false));
        let plan = plan(&obs, &p, now());
        assert_eq!(plan.actions.len(), MAX_BATCH);
        assert_eq!(plan.counts.eligible_pods, MAX_BATCH as u32);
        assert_eq!(plan.next_deadline, Some(add(now(), SignedDuration::from_millis(1))));
    }

    #[test]
    fn nodes_we_deleted_keep_counting_in_the_cluster_storm_guard() {
        let mut ours = NodeView::deleted_unknown("gone-ours");
        ours.control.rare.update(|r| r.deleted_by_us = Some(t(9, 0)));
        let theirs = NodeView::deleted_unknown("gone-theirs");
        let mut obs = observed(vec![node("n-ready", "ready"), ours, theirs], vec![]);
        obs.storm.cluster_limit = Some(MaxUnhealthy::Count(5));
        let plan = plan(&obs, &policy(|_| {}), now());
        assert_eq!((plan.storm.cluster.unhealthy, plan.storm.cluster.in_scope), (1, 2));
    }

    /// A dead node in maintenance or in a graceful shutdown gets nothing (its pods say why);
    /// maintenance only planned, maintenance the policy ignores, a shutdown whose grace has
    /// passed hold nothing; another tool's node gets no node action, its pods go as anywhere.
    #[test]
    fn lifecycle_conditions_and_other_tools_hold_what_they_should() {
        use crate::core::observed::{Lifecycle, ManagedBy};
        type LifecycleFn = fn(&mut Lifecycle);
        struct Row {
            case: &'static str,
            lifecycle: LifecycleFn,
            ignore_maintenance: bool,
            karpenter: bool,
            /// The pod's verdict code ("Act" when released) and the node actions planned.
            want: (&'static str, Vec<&'static str>),
            next: Option<Timestamp>,
        }
        let row = |case, lifecycle: LifecycleFn, want: (&'static str, Vec<&'static str>)| Row {
            case,
            lifecycle,
            ignore_maintenance: false,
            karpenter: false,
            want,
            next: None,
        };
        let released = ("Act", vec!["Cordon"]);
        let table = [
            row("no condition", |_| {}, released.clone()),
            row("maintenance planned only", |l| l.maintenance_planned = true, released.clone()),
            row(
                "MaintenanceInProgress",
                |l| l.maintenance = Some("MaintenanceInProgress"),
                ("InMaintenance", vec![]),
            ),
            row("Drained", |l| l.maintenance = Some("Drained"), ("InMaintenance", vec![])),
            Row {
                ignore_maintenance: true,
                ..row(
                    "maintenance the policy ignores",
                    |l| l.maintenance = Some("DrainInProgress"),
                    released.clone(),
                )
            },
            Row {
                next: Some(t(11, 0)),
                ..row(
                    "shutting down since 00:09: grace until 00:11",
                    |l| {
                        l.shutting_down = true;
                        l.shutdown_seen = Some(t(9, 0));
                    },
                    ("ShuttingDown", vec![]),
                )
            },
            row(
                "shutting down since 00:07: grace over at 00:09",
                |l| {
                    l.shutting_down = true;
                    l.shutdown_seen = Some(t(7, 0));
                },
                released.clone(),
            ),
            Row { karpenter: true, ..row("Karpenter's node", |_| {}, ("Act", vec![])) },
        ];
        for r in table {
            let mut n = node("n-dead", "dead");
            n.control.rare.update(|rare| (r.lifecycle)(&mut rare.lifecycle));
            if r.karpenter {
                n.control.managed_by =
                    Some(ManagedBy { tool: "Karpenter", marker: "karpenter.sh/nodepool".into() });
            }
            let obs = observed(vec![n], vec![pod("p", "n-dead")]);
            let p = policy(|s| {
                s.node_actions.cordon_after = Some("0s".into());
                if r.ignore_maintenance {
                    s.node_lifecycle.maintenance = crate::crd::MaintenanceHandling::Ignore;
                }
            });
            let plan = plan(&obs, &p, now());
            let pod_code = match verdict_of(&plan, "p") {
                Verdict::Eligible => "Act",
                Verdict::NotEligible(why) => why.code(),
            };
            let node_actions: Vec<&str> = plan
                .actions
                .iter()
                .filter(|a| a.pod().is_none())
                .map(|a| a.kind().as_str())
                .collect();
            assert_eq!((pod_code, node_actions), r.want, "{}", r.case);
            if let Some(next) = r.next {
                assert_eq!(plan.next_deadline, Some(next), "{}", r.case);
            }
            // Every action carries the instant the shutdown was seen, for the kernel.
            let seen = obs.nodes[0].control.rare.lifecycle.shutdown_seen;
            for a in &plan.actions {
                assert_eq!(a.act().target().shutdown_seen(), seen, "{}", r.case);
            }
            let held = plan.nodes[0].hold.as_ref().map(|h| h.code());
            let want_held = match r.want.0 {
                "Act" if r.karpenter => Some("LeftToAnotherTool"),
                "Act" => None,
                code => Some(code),
            };
            assert_eq!(held, want_held, "{}", r.case);
        }
    }
}
