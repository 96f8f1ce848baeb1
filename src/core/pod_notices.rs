//! What a plan has to tell people beyond its actions: pods held for want of fencing evidence, and
//! pods stuck Terminating on live nodes with their cause. A StatefulSet or ReadWriteOnce pod on a
//! dead node without fencing evidence is never released (two writers corrupt data), and a pod
//! stuck on a live node is only reported unless the policy opts in; without a word either would
//! look like the operator doing nothing.
//!
//! Each is said once, in an Event about the pod, within a budget ([`ReportBudget`]): a zone's
//! outage leaves tens of thousands of pods to report at once, and an Event each would flood the
//! API server when it is busiest and hold up the policy's actions behind the writes. Beyond the
//! budget one Event on the policy counts the pods not given one; the status, the gauges and
//! `plan` still name or count every one.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::observed::OwnerKey;
use super::plan::Plan;
use super::verdict::{NotEligible, Verdict};
use crate::crd::{OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE};

/// A pod held on a dead node because its node has no fencing evidence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FencingNotice {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// What is missing and the command that provides it.
    pub note: String,
    /// The Events' reasons: on the pod, and on its owner.
    pub reasons: (&'static str, &'static str),
}

/// Every pod of `plan` held only for want of fencing evidence.
pub fn needs_fencing(plan: &Plan) -> Vec<FencingNotice> {
    let live = |node: &str| {
        plan.nodes.get(node).is_some_and(|n| n.state == super::node::NodeState::Healthy)
    };
    plan.decisions
        .iter()
        .filter_map(|d| match &d.verdict {
            Verdict::NotEligible(NotEligible::NeedsFencing { because }) => Some((d, because)),
            _ => None,
        })
        .map(|(d, because)| FencingNotice {
            namespace: d.namespace.clone(),
            pod: d.name.clone(),
            uid: d.uid.clone(),
            node: d.node.clone(),
            owner: d.owner.clone(),
            note: if live(&d.node) {
                format!(
                    "pod {}/{} is stuck Terminating on live node {} and is not force-deleted: \
                     {} pods need fencing evidence (requireFencingFor), which a live node has \
                     none of (its kubelet may still hold the volume or run the containers). \
                     Find why the kubelet does not finish it; only if a second writer is \
                     harmless, set liveNodeStuck.forceDeleteUnfenced",
                    d.namespace,
                    d.name,
                    d.node,
                    because.as_str()
                )
            } else {
                format!(
                    "pod {}/{} is held on dead node {}: {} pods need fencing evidence \
                     (requireFencingFor) and the node has none (no {OUT_OF_SERVICE_TAINT} taint \
                     from someone else, no cloud shutdown taint, Node not deleted by someone \
                     else). Once you know the machine is off: kubectl taint node {} \
                     {OUT_OF_SERVICE_TAINT}={OUT_OF_SERVICE_VALUE}:NoExecute",
                    d.namespace,
                    d.name,
                    d.node,
                    because.as_str(),
                    d.node
                )
            },
            reasons: ("NeedsFencing", "PodNeedsFencing"),
        })
        .collect()
}

/// Every pod of `plan` held on a dead node by a finalizer that is not allowlisted: a force
/// delete would not remove it, and nothing of ours will, so it is said once, on the pod and
/// its owner, with what would release it.
pub fn held_by_finalizers(plan: &Plan) -> Vec<FencingNotice> {
    let dead =
        |node: &str| plan.nodes.get(node).is_some_and(|n| n.state == super::node::NodeState::Dead);
    plan.decisions
        .iter()
        .filter_map(|d| match &d.verdict {
            Verdict::NotEligible(NotEligible::HeldByFinalizers { names }) if dead(&d.node) => {
                Some((d, names))
            }
            _ => None,
        })
        .map(|(d, names)| FencingNotice {
            namespace: d.namespace.clone(),
            pod: d.name.clone(),
            uid: d.uid.clone(),
            node: d.node.clone(),
            owner: d.owner.clone(),
            note: format!(
                "pod {}/{} on dead node {} is held by finalizer(s) {}: a force delete would not \
                 remove it. Whoever owns the finalizer must remove it, or, if it is safe to drop, \
                 list it in the policy's finalizers.removable (then it is removed when the pod \
                 would be released)",
                d.namespace,
                d.name,
                d.node,
                names.join(", ")
            ),
            reasons: ("HeldByFinalizer", "PodHeldByFinalizer"),
        })
        .collect()
}

/// A pod reported once per cause: stuck Terminating on a live node (Event reason
/// `StuckTerminating`) or left Ready=False after a node blip (`StaleReadiness`), with what the
/// policy does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodNotice {
    pub namespace: String,
    pub pod: String,
    pub uid: String,
    /// The Event's reason.
    pub reason: &'static str,
    /// The cause's code (`Finalizers`, `ContainersRunning`, `KubeletNotFinishing`,
    /// `StaleReadiness`): the Event's action.
    pub cause: &'static str,
    /// Whether the kubelet's latest Warning Event about the pod is worth quoting: it says what
    /// the kubelet waits for.
    pub quote_kubelet: bool,
    /// A Warning Event (something is wrong); a Normal one says what was left alone and why.
    pub warning: bool,
    /// The evidence (finalizers, containers, volumes named): a new one is a new notice.
    pub evidence: String,
    /// The whole sentence: the node, since when, the evidence, what the policy does.
    pub note: String,
}

/// Every pod of `plan` stuck on a live node.
pub fn stuck_on_live_nodes(plan: &Plan) -> Vec<PodNotice> {
    plan.stuck
        .iter()
        .map(|s| {
            let verdict = plan.decisions.iter().find(|d| d.uid == s.uid).map(|d| &d.verdict);
            let what = match verdict {
                Some(Verdict::Eligible) => "released now".to_string(),
                Some(Verdict::NotEligible(why)) => why.to_string(),
                None => String::new(),
            };
            PodNotice {
                namespace: s.namespace.clone(),
                pod: s.name.clone(),
                uid: s.uid.clone(),
                reason: "StuckTerminating",
                cause: s.cause.code(),
                quote_kubelet: s.cause.kubelet_explains(),
                warning: true,
                evidence: s.cause.detail(),
                note: format!(
                    "pod {}/{} is stuck Terminating on live node {} since {} ({}): {}. {what}",
                    s.namespace,
                    s.name,
                    s.node,
                    s.since,
                    s.cause.code(),
                    s.cause.detail()
                ),
            }
        })
        .collect()
}

/// Every pod of `plan` left Ready=False after a node blip.
pub fn stale_ready(plan: &Plan) -> Vec<PodNotice> {
    plan.stale
        .iter()
        .map(|s| PodNotice {
            namespace: s.namespace.clone(),
            pod: s.name.clone(),
            uid: s.uid.clone(),
            reason: "StaleReadiness",
            cause: "StaleReadiness",
            quote_kubelet: false,
            warning: true,
            evidence: s.ready_false_since.to_string(),
            note: format!("pod {}/{}: {}", s.namespace, s.name, s.note),
        })
        .collect()
}

/// The Event reason of a pod the staleReadiness rule waited on that its kubelet repaired.
pub const REPAIRED_BY_KUBELET: &str = "RepairedByKubelet";

/// Every pod of `plan` the staleReadiness rule waited on that its kubelet made Ready again
/// first: a Normal Event saying how long the rule waited and why.
pub fn repaired_by_kubelet(plan: &Plan) -> Vec<PodNotice> {
    plan.repaired
        .iter()
        .map(|r| PodNotice {
            namespace: r.namespace.clone(),
            pod: r.name.clone(),
            uid: r.uid.clone(),
            reason: REPAIRED_BY_KUBELET,
            cause: "StaleReadiness",
            quote_kubelet: false,
            warning: false,
            evidence: r.repaired_at.to_string(),
            note: r.note.clone(),
        })
        .collect()
}

/// Every pod of `plan` left Ready=True on a dead node.
pub fn ready_on_dead_node(plan: &Plan) -> Vec<PodNotice> {
    plan.ready_on_dead
        .iter()
        .map(|r| PodNotice {
            namespace: r.namespace.clone(),
            pod: r.name.clone(),
            uid: r.uid.clone(),
            reason: "ReadyOnDeadNode",
            cause: "ReadyOnDeadNode",
            quote_kubelet: false,
            warning: true,
            evidence: r.node.clone(),
            note: format!("pod {}/{}: {}", r.namespace, r.name, r.note),
        })
        .collect()
}

/// Events about pods that report (the notices here, not the records of actions) a policy
/// publishes at most this many at once...
pub const REPORT_EVENTS_BURST: u32 = 100;
/// ...and then one more each this long: 100 a minute.
pub const REPORT_EVENT_EVERY: SignedDuration = SignedDuration::from_millis(600);
/// The reason of the Event on the policy that counts the pods beyond the budget.
pub const REPORTS_BEYOND_BUDGET: &str = "ReportsBeyondBudget";

/// What is left of a policy's budget of report Events ([`REPORT_EVENTS_BURST`], refilled one
/// each [`REPORT_EVENT_EVERY`]), as the instant from which it is whole again: `None`, whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportBudget {
    whole_at: Option<Timestamp>,
}

impl ReportBudget {
    /// The Events it allows at `now`.
    pub fn left(&self, now: Timestamp) -> u32 {
        let Some(missing) = self.whole_at.map(|at| at.duration_since(now)) else {
            return REPORT_EVENTS_BURST;
        };
        if missing <= SignedDuration::ZERO {
            return REPORT_EVENTS_BURST;
        }
        let every = REPORT_EVENT_EVERY.as_nanos();
        let spent = (missing.as_nanos() + every - 1) / every;
        REPORT_EVENTS_BURST.saturating_sub(u32::try_from(spent).unwrap_or(u32::MAX))
    }

    /// The budget after `events` more at `now` (at most [`ReportBudget::left`]).
    fn spend(self, events: u32, now: Timestamp) -> ReportBudget {
        if events == 0 {
            return self;
        }
        let from = self.whole_at.filter(|at| *at > now).unwrap_or(now);
        ReportBudget {
            whole_at: Some(from + REPORT_EVENT_EVERY * i32::try_from(events).unwrap_or(i32::MAX)),
        }
    }
}

/// The new notices of one decision, cut to the budget.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Budgeted {
    pub fencing: Vec<FencingNotice>,
    pub pods: Vec<PodNotice>,
    /// What is left of the budget.
    pub budget: ReportBudget,
    /// The pods beyond it, if any.
    pub beyond: Option<BeyondBudget>,
}

/// The pods of one decision not given a report Event: one Event on the policy counts them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BeyondBudget {
    /// How many, by reason, and where to find them.
    pub note: String,
    /// The first of them (namespace, name, UID): the Event's related object, which keeps each
    /// decision's Event apart (Events with the same reason on the same object are merged into
    /// one series that keeps the first note).
    pub first: (String, String, String),
}

/// The new notices within `budget` at `now`, the pods held for fencing or by a finalizer first
/// (they say what a person must do); the others are not given an Event, and are counted in one
/// note. The history remembers every one as said, within the budget or not.
pub fn within_budget(
    budget: ReportBudget,
    now: Timestamp,
    fencing: Vec<FencingNotice>,
    pods: Vec<PodNotice>,
) -> Budgeted {
    let left = budget.left(now) as usize;
    let fencing_kept = fencing.len().min(left);
    let pods_kept = pods.len().min(left - fencing_kept);
    let mut beyond: BTreeMap<&'static str, usize> = BTreeMap::new();
    for notice in &fencing[fencing_kept..] {
        *beyond.entry(notice.reasons.0).or_default() += 1;
    }
    for notice in &pods[pods_kept..] {
        *beyond.entry(notice.reason).or_default() += 1;
    }
    let spent = u32::try_from(fencing_kept + pods_kept).unwrap_or(u32::MAX);
    let first = fencing[fencing_kept..]
        .first()
        .map(|n| (&n.namespace, &n.pod, &n.uid))
        .or_else(|| pods[pods_kept..].first().map(|n| (&n.namespace, &n.pod, &n.uid)))
        .map(|(namespace, pod, uid)| (namespace.clone(), pod.clone(), uid.clone()));
    let beyond = first.map(|first| {
        let total: usize = beyond.values().sum();
        let by_reason: Vec<String> =
            beyond.iter().map(|(reason, n)| format!("{reason} {n}")).collect();
        let note = format!(
            "{total} more pods to report than the policy's Events about pods allow \
             ({REPORT_EVENTS_BURST} at once, then one each {:.1} s): {}, from pod {}/{} on. \
             None of them is given an Event of its own; `kubectl remediator plan` lists them, \
             the status and the kube_remediator_* gauges count them",
            REPORT_EVENT_EVERY.as_secs_f64(),
            by_reason.join(", "),
            first.0,
            first.1
        );
        BeyondBudget { note, first }
    });
    Budgeted {
        fencing: fencing.into_iter().take(fencing_kept).collect(),
        pods: pods.into_iter().take(pods_kept).collect(),
        budget: budget.spend(spent, now),
        beyond,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::guards::Circuit;
    use crate::core::plan::PlanCounts;
    use crate::core::policy::{MaxUnhealthy, StormSettings};
    use crate::core::storm::advance;
    use crate::core::verdict::PodDecision;
    use crate::crd::FencingRequirement;

    #[test]
    fn names_the_missing_evidence_and_the_command() {
        let decision = |name: &str, verdict| PodDecision {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("u-{name}"),
            node: "n1".into(),
            owner: None,
            verdict,
        };
        let plan = Plan {
            synced: true,
            suspended: None,
            actions: vec![],
            decisions: vec![
                decision(
                    "web-0",
                    Verdict::NotEligible(NotEligible::NeedsFencing {
                        because: FencingRequirement::StatefulSet,
                    }),
                ),
                decision("other", Verdict::NotEligible(NotEligible::PodExcluded)),
                decision("gone", Verdict::Eligible),
            ],
            nodes: Default::default(),
            stuck: vec![],
            stale: vec![],
            repaired: vec![],
            ready_on_dead: vec![],
            circuit: Circuit::evaluate(0, 1, MaxUnhealthy::Count(1)),
            storm: advance(
                Circuit::evaluate(0, 1, MaxUnhealthy::Count(1)),
                Circuit::evaluate(0, 1, MaxUnhealthy::Count(1)),
                None,
                StormSettings::default(),
                None,
                "2026-01-01T00:00:00Z".parse().expect("test timestamp"),
            ),
            next_deadline: None,
            counts: PlanCounts::default(),
        };
        let notices = needs_fencing(&plan);
        assert_eq!(notices.len(), 1);
        assert_eq!(notices[0].pod, "web-0");
        assert!(
            notices[0].note.contains("StatefulSet pods need fencing evidence"),
            "{}",
            notices[0].note
        );
        assert!(
            notices[0].note.ends_with(
                "kubectl taint node n1 node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
            ),
            "{}",
            notices[0].note
        );
    }

    fn pod_notice(i: usize, reason: &'static str) -> PodNotice {
        PodNotice {
            namespace: "ns".into(),
            pod: format!("p{i}"),
            uid: format!("u{i}"),
            reason,
            cause: reason,
            quote_kubelet: false,
            warning: true,
            evidence: "n1".into(),
            note: String::new(),
        }
    }

    fn fencing_notice(i: usize) -> FencingNotice {
        FencingNotice {
            namespace: "ns".into(),
            pod: format!("f{i}"),
            uid: format!("fu{i}"),
            node: "n1".into(),
            owner: None,
            note: String::new(),
            reasons: ("NeedsFencing", "PodNeedsFencing"),
        }
    }

    #[test]
    fn the_budget_allows_a_burst_then_one_each_period() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("test timestamp");
        let at = |ms: i64| t0 + SignedDuration::from_millis(ms);
        let whole = ReportBudget::default();
        let all = whole.spend(REPORT_EVENTS_BURST, t0);
        // (case, budget, instant, Events left)
        let cases = [
            ("never spent", whole, t0, REPORT_EVENTS_BURST),
            ("all spent, at once", all, t0, 0),
            ("all spent, one period less a millisecond later", all, at(599), 0),
            ("all spent, one period later", all, at(600), 1),
            ("all spent, ten periods later", all, at(6_000), 10),
            ("all spent, a minute later: whole", all, at(60_000), REPORT_EVENTS_BURST),
            (
                "all spent, an hour later: no more than whole",
                all,
                at(3_600_000),
                REPORT_EVENTS_BURST,
            ),
            ("ten spent", whole.spend(10, t0), t0, REPORT_EVENTS_BURST - 10),
            ("none spent", whole.spend(0, t0), t0, REPORT_EVENTS_BURST),
            ("spent twice", whole.spend(60, t0).spend(40, at(1_200)), at(1_200), 2),
        ];
        for (case, budget, now, left) in cases {
            assert_eq!(budget.left(now), left, "{case}");
        }
    }

    proptest::proptest! {
        /// Generated histories of decisions (a gap since the last, new fencing and pod
        /// notices): no notice is lost (each given an Event or counted once in the note of
        /// its decision), and in no window are more Events published than the burst and one
        /// each period since the window began.
        #[test]
        fn budget_histories_lose_nothing_and_never_exceed_the_rate(
            decisions in proptest::collection::vec((0u64..5_000, 0usize..40, 0usize..150), 1..60)
        ) {
            let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("test timestamp");
            let mut budget = ReportBudget::default();
            let mut at_ms = 0u64;
            // (instant in ms, Events published)
            let mut published: Vec<(u64, usize)> = Vec::new();
            for (gap, f, p) in decisions {
                at_ms += gap;
                let now = t0 + SignedDuration::from_millis(at_ms as i64);
                let left = budget.left(now) as usize;
                let cut = within_budget(
                    budget,
                    now,
                    (0..f).map(fencing_notice).collect(),
                    (0..p).map(|i| pod_notice(i, "ReadyOnDeadNode")).collect(),
                );
                let given = cut.fencing.len() + cut.pods.len();
                let counted = cut.beyond.as_ref().map_or(0, |b| {
                    let total: usize = b.note.split(' ').next().and_then(|n| n.parse().ok())
                        .expect("the note begins with its count");
                    total
                });
                proptest::prop_assert_eq!(given + counted, f + p, "a notice lost at {} ms", at_ms);
                proptest::prop_assert_eq!(given, (f + p).min(left), "budget unused at {} ms", at_ms);
                proptest::prop_assert!(cut.fencing.len() == f.min(left), "fencing not first");
                budget = cut.budget;
                published.push((at_ms, given));
            }
            let every = REPORT_EVENT_EVERY.as_millis() as u64;
            for (i, (from, _)) in published.iter().enumerate() {
                let mut sum = 0;
                for (to, given) in &published[i..] {
                    sum += given;
                    let allowed = REPORT_EVENTS_BURST as usize + ((to - from) / every) as usize;
                    proptest::prop_assert!(
                        sum <= allowed,
                        "{} Events from {} ms to {} ms, {} allowed", sum, from, to, allowed
                    );
                }
            }
        }
    }

    #[test]
    fn notices_beyond_the_budget_are_counted_in_one_note_fencing_first() {
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("test timestamp");
        let burst = REPORT_EVENTS_BURST as usize;
        let pods = |n: usize| (0..n).map(|i| pod_notice(i, "ReadyOnDeadNode")).collect::<Vec<_>>();
        let fencing = |n: usize| (0..n).map(fencing_notice).collect::<Vec<_>>();
        // (case, fencing notices, pod notices, Events left, kept fencing, kept pods, note says)
        let cases = [
            ("within", 3, 5, REPORT_EVENTS_BURST, 3, 5, None),
            ("exactly the budget", 0, burst, REPORT_EVENTS_BURST, 0, burst, None),
            ("one over", 0, burst + 1, REPORT_EVENTS_BURST, 0, burst, Some("1 more pods")),
            (
                "a zone's outage",
                30,
                50_000,
                REPORT_EVENTS_BURST,
                30,
                burst - 30,
                Some(
                    "49930 more pods to report than the policy's Events about pods allow (100 at once, then one each 0.6 s): ReadyOnDeadNode 49930, from pod ns/p70 on.",
                ),
            ),
            (
                "fencing alone beyond",
                burst + 2,
                3,
                REPORT_EVENTS_BURST,
                burst,
                0,
                Some(
                    "5 more pods to report than the policy's Events about pods allow (100 at once, then one each 0.6 s): NeedsFencing 2, ReadyOnDeadNode 3, from pod ns/f100 on.",
                ),
            ),
            (
                "budget spent",
                1,
                1,
                0,
                0,
                0,
                Some("NeedsFencing 1, ReadyOnDeadNode 1, from pod ns/f0 on."),
            ),
        ];
        for (case, f, p, left, kept_f, kept_p, says) in cases {
            let budget = ReportBudget::default().spend(REPORT_EVENTS_BURST - left, t0);
            let cut = within_budget(budget, t0, fencing(f), pods(p));
            assert_eq!((cut.fencing.len(), cut.pods.len()), (kept_f, kept_p), "{case}");
            assert_eq!(cut.budget.left(t0), left - (kept_f + kept_p) as u32, "{case}");
            match (says, &cut.beyond) {
                (None, None) => {}
                (Some(says), Some(beyond)) => {
                    assert!(beyond.note.contains(says), "{case}: {}", beyond.note);
                    let first = &beyond.first.1;
                    let kept = |n: &str| cut.pods.iter().any(|p| p.pod == n);
                    let kept_fencing = |n: &str| cut.fencing.iter().any(|p| p.pod == n);
                    assert!(!kept(first) && !kept_fencing(first), "{case}: {first} was given one");
                    assert!(beyond.note.contains(&format!("from pod ns/{first} on")), "{case}");
                }
                (says, beyond) => panic!("{case}: expected {says:?}, got {beyond:?}"),
            }
            // The first ones are kept, in order.
            assert!(cut.pods.iter().enumerate().all(|(i, n)| n.pod == format!("p{i}")), "{case}");
        }
    }
}
