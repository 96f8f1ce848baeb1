//! `staleReadiness` (field incident 2, kubernetes/kubernetes#80968): a running pod whose Ready
//! condition is False while every container reports ready, on a node that has been Ready again
//! for `nodeReadyFor` by our own clock. The node lifecycle controller marked it not Ready when
//! the node went Unknown, and a kubelet that came back without resending its status leaves it
//! so: out of its Services' endpoints for good. Reported always; evicted (Eviction API, so
//! PodDisruptionBudgets hold) only with `action: Evict`, and only when a controller will
//! replace it. A pod failing its own readiness (a container, init container, native sidecar or
//! readiness gate not satisfied) is never one of these: the adapter keeps only pods whose
//! every one is.
//!
//! Repair only what the failure did: the pod must have turned not Ready during an outage of
//! its node that the operator watched from its start to its end
//! ([`crate::core::NodeControl::last_outage`]), by its own clock: first seen so
//! ([`crate::core::PodView::stale_seen`]) no earlier than the node left Ready and no later
//! than [`EVENT_SLACK`] after it came back. A pod already not Ready before the outage, or seen
//! only after an operator restart, is left alone.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::release_gates::selected_kind;
use crate::core::action::{Action, Evict, PodTarget};
use crate::core::duration::{add, format_duration};
use crate::core::node::{NodeState, NodeTable};
use crate::core::observed::{NodeView, Observed, Outage, OwnerKey, RepairedPod};
use crate::core::policy::ValidatedPolicy;
use crate::crd::OwnerKind;

/// How long after its node came back a pod's change to not Ready may still reach us and count
/// as the outage's: watch events of two kinds arrive in no fixed order.
pub const EVENT_SLACK: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// Whether a pod first seen left Ready=False at `seen` turned so during `outage`: no earlier
/// than the node left Ready, and no later than [`EVENT_SLACK`] after it came back.
pub fn turned_during(seen: Timestamp, outage: Outage) -> bool {
    seen >= outage.from && seen <= add(outage.to, EVENT_SLACK)
}

/// A pod left Ready=False after a node blip, for the reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StalePod {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// When its Ready condition went False, as written in it.
    pub ready_false_since: Timestamp,
    /// When it was found: its node Ready again for `nodeReadyFor`.
    pub found: Timestamp,
    /// What the policy does about it.
    pub note: String,
}

/// A pod the rule was waiting on that its kubelet made Ready again first, for the reports: how
/// long the rule waited and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairedStale {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// When we saw it Ready again.
    pub repaired_at: Timestamp,
    /// The whole sentence.
    pub note: String,
}

/// What the rule found at one instant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaleFindings {
    pub stale: Vec<StalePod>,
    /// Pods it waited on that their kubelet repaired (within [`crate::core::observed::REPAIRED_KEPT`]).
    pub repaired: Vec<RepairedStale>,
    /// Evictions, waiting for the guards.
    pub candidates: Vec<Action>,
    /// When a pod becomes stale by time alone (its node Ready for long enough).
    pub deadlines: Vec<Timestamp>,
}

/// Every stale pod on the in-scope, Ready `nodes`.
pub fn stale_pods(
    observed: &Observed,
    nodes: &NodeTable,
    policy: &ValidatedPolicy,
    now: Timestamp,
) -> StaleFindings {
    let mut found = StaleFindings::default();
    let (Some(rule), Some(synced_at)) = (policy.stale_readiness, observed.watch_synced_at) else {
        return found;
    };
    let views: BTreeMap<&str, &NodeView> =
        observed.nodes.iter().map(|n| (&*n.observation.name, &**n)).collect();
    for pod in &observed.pods {
        let (Some(since), None, Some(node_name)) =
            (pod.stale_ready_since.get(), pod.deletion_timestamp.get(), pod.node_name.as_deref())
        else {
            continue;
        };
        let (Some(node), Some(view)) = (nodes.get(node_name), views.get(node_name)) else {
            continue;
        };
        if node.state != NodeState::Healthy {
            continue;
        }
        let Ok(kind) = selected_kind(pod, node, observed, policy) else { continue };
        // It turned not Ready during an outage of its node that we watched.
        let Some(outage) = view.control.rare.last_outage else { continue };
        let during = pod.stale_seen.get().is_some_and(|seen| turned_during(seen, outage));
        if !during {
            continue;
        }
        // Ready again since we saw it so, and never earlier than the evidence window.
        let ready_since = view.control.ready_seen.get().map_or(synced_at, |t| t.max(synced_at));
        let due = add(ready_since, rule.node_ready_for);
        if now < due {
            found.deadlines.push(due);
            continue;
        }
        let why = format!(
            "Ready=False since {since} while every container, sidecar and readiness gate is \
             ready, turned so during the outage of node {node_name} we watched ({} to {}), \
             Ready again for {} (staleReadiness.nodeReadyFor {}): left by a node blip",
            outage.from,
            outage.to,
            format_duration(now.duration_since(ready_since)),
            format_duration(rule.node_ready_for)
        );
        let note = match (rule.evict, kind) {
            (false, _) => "reported only (staleReadiness.action is Report)".to_string(),
            (true, OwnerKind::Bare) => "not evicted: no controller would replace it".to_string(),
            (true, _) => {
                found.candidates.push(Action::Evict(Evict {
                    pod: PodTarget {
                        namespace: pod.namespace.to_string(),
                        name: pod.name.clone(),
                        uid: pod.uid.to_string(),
                        node: node_name.to_string(),
                        owner: pod.owner_key(),
                        reason: why.clone(),
                        threshold: due,
                        shutdown_seen: node.shutdown_seen.get(),
                    },
                    outage,
                    stale_seen: pod.stale_seen.get().unwrap_or(outage.from),
                }));
                "evicted through the Eviction API (PodDisruptionBudgets hold)".to_string()
            }
        };
        found.stale.push(StalePod {
            namespace: pod.namespace.to_string(),
            name: pod.name.clone(),
            uid: pod.uid.to_string(),
            node: node_name.to_string(),
            owner: pod.owner_key(),
            ready_false_since: since,
            found: due,
            note: format!("{why}; {note}"),
        });
    }
    found.repaired = observed
        .repaired
        .iter()
        .filter_map(|r| repaired_while_waiting(r, observed, nodes, &views, policy, synced_at))
        .collect();
    found
}

/// `repaired`, when it is a pod this rule was waiting on (in scope, turned not Ready during an
/// outage of its node we watched) that turned Ready again before the rule's `nodeReadyFor`
/// had passed: the kubelet repaired it, and the rule says how long it waited and why.
fn repaired_while_waiting(
    repaired: &RepairedPod,
    observed: &Observed,
    nodes: &NodeTable,
    views: &BTreeMap<&str, &NodeView>,
    policy: &ValidatedPolicy,
    synced_at: Timestamp,
) -> Option<RepairedStale> {
    let rule = policy.stale_readiness?;
    let pod = &repaired.view;
    let node_name = pod.node_name.as_deref()?;
    let (node, view) = (nodes.get(node_name)?, views.get(node_name)?);
    selected_kind(pod, node, observed, policy).ok()?;
    let outage = view.control.rare.last_outage?;
    let seen = pod.stale_seen.get()?;
    let at = repaired.repaired_at;
    if !turned_during(seen, outage) || at < outage.from {
        return None;
    }
    let waiting_from = outage.to.max(synced_at);
    let due = add(waiting_from, rule.node_ready_for);
    if at >= due {
        return None;
    }
    let node_back = if at > waiting_from {
        format!(
            "{} after its node came back, {} before the rule was due",
            format_duration(at.duration_since(waiting_from)),
            format_duration(due.duration_since(at))
        )
    } else {
        "before its node was seen Ready again".to_string()
    };
    let note = format!(
        "pod {}/{} turned not Ready during the outage of node {node_name} we watched ({} to {}); \
         its kubelet made it Ready again at {at}: {} after we saw it not Ready, {node_back}. \
         Left alone all along: staleReadiness acts only once the node has been Ready for \
         nodeReadyFor ({}) by our clock, so that a kubelet that repairs its own pods after a \
         blip is never raced",
        pod.namespace,
        pod.name,
        outage.from,
        outage.to,
        format_duration(at.duration_since(seen).max(jiff::SignedDuration::ZERO)),
        format_duration(rule.node_ready_for)
    );
    Some(RepairedStale {
        namespace: pod.namespace.to_string(),
        name: pod.name.clone(),
        uid: pod.uid.to_string(),
        node: node_name.to_string(),
        repaired_at: at,
        note,
    })
}

#[cfg(test)]
mod tests {
    use crate::core::stamp::Stamp;
    use jiff::SignedDuration;

    use super::*;
    use crate::core::observed::{Outage, fixtures};
    use crate::crd::{RemediationPolicySpec, StaleReadinessAction};

    fn t(s: i64) -> Timestamp {
        add("2026-01-01T00:10:00Z".parse().expect("ts"), SignedDuration::from_secs(s))
    }

    fn summary(state: NodeState) -> crate::core::node::NodeSummary {
        fixtures::node_summary("n1", state)
    }

    #[test]
    fn found_after_the_node_is_ready_long_enough_and_evicted_only_with_a_controller() {
        // (case, evict, node state, node ready seen, owner, now, want found, want eviction, want deadline)
        type Row = (&'static str, bool, NodeState, i64, bool, i64, bool, bool, Option<i64>);
        #[rustfmt::skip]
        let rows: [Row; 6] = [
            ("node Ready 30 s of 60", true, NodeState::Healthy, 0, true, 30, false, false, Some(60)),
            ("node Ready 60 s: evicted", true, NodeState::Healthy, 0, true, 60, true, true, None),
            ("Report only", false, NodeState::Healthy, 0, true, 60, true, false, None),
            ("bare pod: reported, never evicted", true, NodeState::Healthy, 0, false, 60, true, false, None),
            ("node not Ready: not this rule", true, NodeState::Unhealthy, 0, true, 600, false, false, None),
            ("ready seen before the window: counted from the window", true, NodeState::Healthy, -500, true, 60, true, true, None),
        ];
        for (case, evict, state, ready_seen, owned, now, want_found, want_evict, want_deadline) in
            rows
        {
            let policy = policy(evict);
            let mut pod = stale_pod(t(ready_seen - 20));
            if !owned {
                pod.owner = None;
            }
            let node = outage_node(t(ready_seen - 30), t(ready_seen));
            let found = judge(&policy, node, pod, state, t(now));
            assert_eq!(!found.stale.is_empty(), want_found, "{case}");
            assert_eq!(!found.candidates.is_empty(), want_evict, "{case}");
            assert_eq!(found.deadlines.first().copied(), want_deadline.map(t), "{case}");
        }
    }

    fn policy(evict: bool) -> ValidatedPolicy {
        let mut spec = RemediationPolicySpec::default();
        spec.stale_readiness.action =
            if evict { StaleReadinessAction::Evict } else { StaleReadinessAction::Report };
        spec.stale_readiness.node_ready_for = "60s".into();
        crate::core::validate(&spec).expect("valid test policy")
    }

    /// A running pod left Ready=False, first seen so at `seen`.
    fn stale_pod(seen: Timestamp) -> crate::core::observed::PodView {
        let mut pod = fixtures::pod("p", "n1");
        pod.deletion_timestamp = Stamp::NONE;
        pod.stale_ready_since = Stamp::from(t(-100));
        pod.stale_seen = Stamp::from(seen);
        pod
    }

    /// Node n1, out from `from` and Ready again (watched) at `to`.
    fn outage_node(from: Timestamp, to: Timestamp) -> NodeView {
        let mut node = NodeView::unknown("n1");
        node.control.ready_seen = Some(to).into();
        node.control.rare.update(|r| r.last_outage = Some(Outage { from, to }));
        node
    }

    fn judge(
        policy: &ValidatedPolicy,
        node: NodeView,
        pod: crate::core::observed::PodView,
        state: NodeState,
        now: Timestamp,
    ) -> StaleFindings {
        let observed = Observed {
            nodes: vec![node.into()],
            pods: vec![pod.into()],
            watch_synced_at: Some(t(0)),
            ..Default::default()
        };
        let nodes = NodeTable::new(vec![summary(state)]);
        stale_pods(&observed, &nodes, policy, now)
    }

    #[test]
    fn only_pods_that_turned_not_ready_during_an_outage_we_watched() {
        let policy = policy(true);
        // The outage we watched: from -30 to 0; now 60, node Ready 60 s since.
        let table = [
            ("turned during the outage", Some(t(-20)), Some((t(-30), t(0))), true),
            (
                "turned just after it came back (events out of order)",
                Some(t(4)),
                Some((t(-30), t(0))),
                true,
            ),
            (
                "not Ready before the outage (a readiness gate)",
                Some(t(-40)),
                Some((t(-30), t(0))),
                false,
            ),
            ("turned long after the outage", Some(t(30)), Some((t(-30), t(0))), false),
            ("no outage watched (first seen after a restart)", Some(t(-20)), None, false),
            ("never seen turning", None, Some((t(-30), t(0))), false),
        ];
        for (case, seen, outage, want) in table {
            let mut pod = stale_pod(t(0));
            pod.stale_seen = seen.into();
            let mut node = outage_node(t(-30), t(0));
            node.control
                .rare
                .update(|r| r.last_outage = outage.map(|(from, to)| Outage { from, to }));
            let found = judge(&policy, node, pod, NodeState::Healthy, t(60));
            assert_eq!(!found.candidates.is_empty(), want, "{case}");
            assert_eq!(!found.stale.is_empty(), want, "{case}");
        }
    }

    #[test]
    fn a_pod_its_kubelet_repaired_while_the_rule_waited_is_said_so() {
        let policy = policy(true);
        // The outage we watched: from -30 to 0; the rule waits until 60.
        // (case, first seen stale, repaired at, want said, words the note has)
        #[rustfmt::skip]
        let rows: [(&str, i64, i64, bool, &str); 5] = [
            ("repaired 10 s after the node came back", -20, 10, true, "30s after we saw it not Ready, 10s after its node came back, 50s before the rule was due"),
            ("repaired before the node was seen back", -20, -5, true, "before its node was seen Ready again"),
            ("repaired after the rule was due: not waiting any more", -20, 60, false, ""),
            ("not Ready before the outage: never waited on", -40, 10, false, ""),
            ("repaired before the outage began", -20, -31, false, ""),
        ];
        for (case, seen, at, want, words) in rows {
            let repaired =
                crate::core::observed::RepairedPod { view: stale_pod(t(seen)), repaired_at: t(at) };
            let observed = Observed {
                nodes: vec![outage_node(t(-30), t(0)).into()],
                repaired: vec![repaired],
                watch_synced_at: Some(t(-100)),
                ..Default::default()
            };
            let nodes = NodeTable::new(vec![summary(NodeState::Healthy)]);
            let found = stale_pods(&observed, &nodes, &policy, t(at.max(0) + 1));
            assert_eq!(found.repaired.len(), usize::from(want), "{case}");
            assert!(found.candidates.is_empty() && found.stale.is_empty(), "{case}");
            if let Some(r) = found.repaired.first() {
                assert!(r.note.contains(words), "{case}: {}", r.note);
                assert!(r.note.contains("nodeReadyFor (1m)"), "{case}: {}", r.note);
            }
        }
    }
}
