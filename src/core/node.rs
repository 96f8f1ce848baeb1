//! Node health from the evidence a kubelet leaves behind: the NodeReady condition and the
//! kubelet's Lease in `kube-node-lease`.
//!
//! Every age is measured by the operator's own clock, from the instant it *saw* the evidence
//! change (a Lease renewal arriving, the Ready condition leaving True), as the node lifecycle
//! controller does. The timestamps inside the objects (`renewTime`, `lastTransitionTime`) are
//! written by other machines whose clocks may run minutes off: they are shown to people and never
//! compared with our clock.
//!
//! The inputs it judges ([`NodeObservation`], [`NodeView`]) live in [`super::observed`]; this
//! module holds the judgement: the node's state, its fencing evidence and why.

use std::borrow::Cow;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use super::duration::{add, format_duration};
use super::observed::{ManagedBy, NodeControl, NodeObservation, NodeView, Readiness};
use super::policy::ValidatedPolicy;
use super::stamp::Stamp;
use crate::crd::{FencingSpec, OUT_OF_SERVICE_TAINT, SHUTDOWN_TAINT};

/// Skews below this are clock noise and left unmentioned.
pub const NOTABLE_SKEW: SignedDuration = SignedDuration::from_secs(30);

/// "(its renewTime is 5m behind ours: clock skew on the node?)", or nothing for a small skew.
/// Rounded to 10 s so that the text stays the same from one renewal to the next.
fn skew_note(skew: Option<SignedDuration>) -> String {
    let Some(skew) = skew.filter(|s| s.abs() >= NOTABLE_SKEW) else { return String::new() };
    let rounded = SignedDuration::from_secs((skew.as_secs() + 5).div_euclid(10) * 10);
    let (amount, side) =
        if rounded.is_negative() { (-rounded, "ahead of") } else { (rounded, "behind") };
    format!(" (its renewTime is {} {side} ours: clock skew on the node?)", format_duration(amount))
}

/// A node's state as far as remediation is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr)]
pub enum NodeState {
    /// `Ready=True`.
    Healthy,
    /// Not Ready, but not (yet) dead by the policy's rules, or caches are not synced.
    Unhealthy,
    /// Dead by the policy's rules, or deleted.
    Dead,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Evidence that a node's machine is really off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FencingEvidence {
    NodeDeleted,
    OutOfServiceTaint,
    ShutdownTaint,
}

impl FencingEvidence {
    pub fn describe(self) -> &'static str {
        match self {
            FencingEvidence::NodeDeleted => "Node object deleted",
            FencingEvidence::OutOfServiceTaint => "taint node.kubernetes.io/out-of-service",
            FencingEvidence::ShutdownTaint => "taint node.cloudprovider.kubernetes.io/shutdown",
        }
    }
}

/// The fencing settings for judging a node: the out-of-service taint this operator added itself
/// (our record names one, or its applied-by annotation names us) is never evidence for its own
/// decisions. One applied by another tool (applied-by `pacemaker`) or an admin is.
pub fn own_taint_aside(fencing: &FencingSpec, control: &NodeControl) -> FencingSpec {
    let mut fencing = fencing.clone();
    if control.taint_may_be_ours() {
        fencing.out_of_service_taint = false;
    }
    fencing
}

/// The first enabled fencing evidence on a node (`deleted`: its Node object is gone): the
/// out-of-service taint counts only with effect `NoExecute` (what PodGC and the attach/detach
/// controller act on), the shutdown taint with any effect.
pub fn fencing_evidence(
    node: &NodeObservation,
    fencing: &FencingSpec,
    deleted: bool,
) -> Option<FencingEvidence> {
    if deleted && fencing.node_deleted {
        Some(FencingEvidence::NodeDeleted)
    } else if fencing.out_of_service_taint && node.has_taint(OUT_OF_SERVICE_TAINT, "NoExecute") {
        Some(FencingEvidence::OutOfServiceTaint)
    } else if fencing.shutdown_taint && node.has_taint_key(SHUTDOWN_TAINT) {
        Some(FencingEvidence::ShutdownTaint)
    } else {
        None
    }
}

/// Why the operator leaves a node alone although it may be failing: its lifecycle conditions
/// (a maintenance, a graceful shutdown) or another tool that manages it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeHold {
    /// A maintenance condition is True (`nodeLifecycle.maintenance: Respect`): no node action,
    /// no pod release.
    InMaintenance { condition: &'static str },
    /// `GracefulNodeShutdownInProgress` is True and its grace runs until `until` (our clock,
    /// from `seen`; `stamp`: dated by the condition's lastTransitionTime, `plan` only): no
    /// node action, no pod release before.
    ShuttingDown { seen: Timestamp, until: Timestamp, stamp: bool },
    /// Another tool manages the node: no node action (its pods are released as anywhere).
    LeftToAnotherTool(ManagedBy),
}

impl NodeHold {
    /// The bounded code status, Events and `plan` show.
    pub fn code(&self) -> &'static str {
        match self {
            NodeHold::InMaintenance { .. } => "InMaintenance",
            NodeHold::ShuttingDown { .. } => "ShuttingDown",
            NodeHold::LeftToAnotherTool(_) => "LeftToAnotherTool",
        }
    }

    /// Whether the hold also keeps the node's pods (not only node actions).
    pub fn holds_pods(&self) -> bool {
        !matches!(self, NodeHold::LeftToAnotherTool(_))
    }

    /// The sentence Events, status, `plan` and `explain` show.
    pub fn describe(&self, node: &str) -> String {
        match self {
            NodeHold::InMaintenance { condition } => format!(
                "node {node} is in maintenance ({condition}=True): no node action and no pod \
                 release while it is (nodeLifecycle.maintenance: Respect)"
            ),
            NodeHold::ShuttingDown { seen, until, stamp } => {
                let since = if *stamp { " (by its lastTransitionTime)" } else { "" };
                format!(
                    "node {node} is shutting down gracefully (GracefulNodeShutdownInProgress=True \
                     since {seen}{since}): its kubelet terminates its pods; no node action and \
                     no pod release before its grace ends at {until} \
                     (nodeLifecycle.gracefulShutdownGrace)"
                )
            }
            NodeHold::LeftToAnotherTool(by) => format!(
                "node {node} is managed by {} ({} on the Node): node actions are left to it",
                by.tool, by.marker
            ),
        }
    }
}

/// What holds a node at `now`, most encompassing first: a maintenance (unless the policy
/// ignores it), a graceful shutdown whose grace has not passed, another tool.
pub fn node_hold(view: &NodeView, policy: &ValidatedPolicy, now: Timestamp) -> Option<NodeHold> {
    let lifecycle = &view.control.rare.lifecycle;
    if let Some(condition) = lifecycle.maintenance.filter(|_| policy.lifecycle.respect_maintenance)
    {
        return Some(NodeHold::InMaintenance { condition });
    }
    if lifecycle.shutting_down {
        // Seen by the watch whenever the condition is; without an instant of ours, no end.
        let seen = lifecycle.shutdown_seen.unwrap_or(Timestamp::MAX);
        let until = add(seen, policy.lifecycle.shutdown_grace);
        if now < until {
            let stamp = lifecycle.shutdown_from_stamp;
            return Some(NodeHold::ShuttingDown { seen, until, stamp });
        }
    }
    view.control.managed_by.clone().map(NodeHold::LeftToAnotherTool)
}

/// One node as the planner judged it at an instant. A plan holds one for every in-scope node,
/// so its instants are [`Stamp`]s (8 bytes, not an `Option<Timestamp>`'s 24) and its rare parts
/// boxed: 104 bytes a node, not 160.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSummary {
    /// Shared with the node's record.
    pub name: Arc<str>,
    pub state: NodeState,
    pub excluded: bool,
    pub deleted: bool,
    /// The first enabled fencing evidence found (deleted, then out-of-service, then shutdown).
    pub fenced_by: Option<FencingEvidence>,
    /// The instant the node is or will be dead by the time rules if nothing changes. Unset when
    /// Ready, deleted (dead without a time rule) or while caches are not synced.
    pub dead_at: Stamp,
    /// Why, for humans (a fixed sentence costs no allocation: most nodes are just "Ready").
    pub why: Cow<'static, str>,
    /// The Lease `renewTime` judged on (the kubelet's clock): the last look compares it.
    pub lease_renewed: Stamp,
    /// Set when the node is not Ready but its kubelet keeps renewing its Lease (a renewal seen
    /// after it left Ready): alive, whatever its timestamps say. A sentence without relative
    /// times, stable from one renewal to the next, for the status and the log.
    pub held_alive: Option<Box<str>>,
    /// The evidence of death the planner judged on, carried by every action on the node so
    /// that the safety kernel checks it again, from the raw instants, right before the request.
    /// `None` unless [`NodeState::Dead`]. Boxed, like `hold`: unset on a healthy node, which
    /// then pays a pointer for it, not the evidence's 72 bytes (a plan holds every node's).
    pub death: Option<Box<DeathEvidence>>,
    /// What leaves the node alone now, if anything.
    pub hold: Option<Box<NodeHold>>,
    /// When the operator saw the node's graceful shutdown begin, by its clock: carried by every
    /// action on the node, so that the safety kernel sees its grace has passed.
    pub shutdown_seen: Stamp,
}

/// The in-scope nodes of one plan, judged, sorted by name: looked up by a binary search. One
/// vector, built once per plan and handed to the [`super::plan::Plan`] as it is: at 5,000
/// nodes a map beside the plan's copy held twice the summaries at once, every reconcile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeTable(Vec<NodeSummary>);

impl NodeTable {
    /// The table of `summaries`; of two with one name, the later is kept.
    pub fn new(mut summaries: Vec<NodeSummary>) -> Self {
        sort_by_name_keeping_the_later(&mut summaries, |n| &n.name);
        NodeTable(summaries)
    }

    /// The node called `name`, if in scope.
    pub fn get(&self, name: &str) -> Option<&NodeSummary> {
        self.0.binary_search_by(|n| (*n.name).cmp(name)).ok().map(|i| &self.0[i])
    }

    /// Whether the node called `name` is in scope.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

impl std::ops::Deref for NodeTable {
    type Target = [NodeSummary];

    fn deref(&self) -> &[NodeSummary] {
        &self.0
    }
}

/// Sorts `items` by `name`; of two with one name, the later given is kept. Items already
/// sorted (each name once) are left as they are.
pub(super) fn sort_by_name_keeping_the_later<T>(items: &mut Vec<T>, name: impl Fn(&T) -> &str) {
    if items.is_sorted_by(|a, b| name(a) < name(b)) {
        return;
    }
    // Stable: of equal names the later stays after the earlier, and dedup keeps the first of a
    // run, so reverse first.
    items.reverse();
    items.sort_by(|a, b| name(a).cmp(name(b)));
    items.dedup_by(|later, earlier| name(later) == name(earlier));
}

/// Why a node is dead: the raw evidence the operator saw, not a verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeathEvidence {
    /// The operator watched the node's Lease stop changing and its Ready condition stay not
    /// True, both inside the evidence window, by its own clock.
    Watched {
        /// The Lease's `renewTime` (the kubelet's clock): a fresh read must show this value.
        lease_renewed: Timestamp,
        /// When the operator last saw that renewal arrive (our clock).
        lease_seen: Timestamp,
        /// Since when, by our clock, the node has not been Ready (no earlier than the window).
        not_ready_since: Timestamp,
        /// The Lease's `leaseDurationSeconds` as watched: the gap must be at least as long.
        lease_duration_s: Option<u16>,
        /// The start of the evidence window.
        window_start: Timestamp,
    },
    /// The operator saw the Node object deleted, by someone else.
    Deleted,
}

/// Judges a node at `now` under `policy`.
///
/// A node is dead when it is deleted, or when both hold: `Ready` has not been True for
/// `notReadyFor`, and no Lease renewal has been seen for `leaseStaleFor`. Both are timed by the
/// operator's clock from when it saw the evidence ([`NodeObservation::not_ready_seen`],
/// [`NodeObservation::lease_seen`]), and from no earlier than `evidence_since`, the start of the
/// current evidence window (safety invariant 2): evidence that predates our trustworthy view of
/// the cluster does not count, and with `evidence_since == None` (caches not synced, or the
/// Lease view stalled) no node is dead. A missing condition or Lease counts as "since the window
/// start".
pub fn summarize_node(
    view: &NodeView,
    policy: &ValidatedPolicy,
    evidence_since: Option<Timestamp>,
    now: Timestamp,
) -> NodeSummary {
    let obs = &view.observation;
    // Our own deletion of the Node is no evidence for our own decisions.
    let deleted_by_someone_else = view.deleted && view.control.rare.deleted_by_us.is_none();
    let fenced_by = fencing_evidence(
        obs,
        &own_taint_aside(&policy.fencing, &view.control),
        deleted_by_someone_else,
    );
    let summary =
        |state, dead_at: Option<Timestamp>, why: Cow<'static, str>, held_alive| NodeSummary {
            name: obs.name.clone(),
            state,
            excluded: view.excluded,
            deleted: view.deleted,
            fenced_by,
            // Never earlier than judged: a wake-up for it is not early, a threshold not sooner.
            dead_at: dead_at.map_or(Stamp::NONE, Stamp::at_or_after),
            why,
            lease_renewed: obs.lease_renewed,
            held_alive,
            death: None,
            hold: node_hold(view, policy, now).map(Box::new),
            // Never earlier than seen: the safety kernel's grace from it is not shorter.
            shutdown_seen: view
                .control
                .rare
                .lifecycle
                .shutdown_seen
                .map_or(Stamp::NONE, Stamp::at_or_after),
        };
    let Some(since) = evidence_since else {
        let state = if view.deleted || obs.readiness != Readiness::Ready {
            NodeState::Unhealthy
        } else {
            NodeState::Healthy
        };
        return summary(
            state,
            None,
            "evidence not trusted now: no node counts as dead".into(),
            None,
        );
    };
    if view.deleted && view.control.rare.deleted_by_us.is_some() {
        let why = "its Node object was deleted by this operator: our own write is no evidence \
                   for our own decisions (PodGC releases the pods of a deleted Node)";
        return summary(NodeState::Unhealthy, None, why.into(), None);
    }
    if view.deleted {
        let dead = summary(NodeState::Dead, None, "Node object deleted".into(), None);
        return NodeSummary { death: Some(Box::new(DeathEvidence::Deleted)), ..dead };
    }
    if obs.readiness == Readiness::Ready {
        return summary(NodeState::Healthy, None, "Ready".into(), None);
    }
    // A missing, deleted or never-seen Lease is unknown, never dead: death needs a Lease we
    // watched stop changing.
    let (Some(lease_seen), Some(lease_renewed)) = (obs.lease_seen.get(), obs.lease_renewed.get())
    else {
        let why = format!(
            "Ready={} but no kubelet Lease seen: its liveness is unknown, not dead (a missing, \
             deleted or never-seen Lease is no evidence of death)",
            obs.readiness.as_str()
        );
        return summary(NodeState::Unhealthy, None, why.into(), None);
    };
    let not_ready_since = obs.not_ready_seen.get().unwrap_or(since).max(since);
    // The last sign of life we saw: a Lease renewal, or the kubelet posting the node's status.
    let life_seen = obs.heartbeat_seen.get().map_or(lease_seen, |h| h.max(lease_seen));
    let lease_since = life_seen.max(since);
    let not_ready_due = add(not_ready_since, policy.not_ready_for);
    let lease_due = add(lease_since, stale_for(policy, obs.lease_duration_s));
    let dead_at = not_ready_due.max(lease_due);
    let readiness = obs.readiness.as_str();
    let facts = evidence_facts(obs, since, not_ready_since, now);
    // The kubelet answers (its renewals keep arriving) although the node is not Ready.
    let held_alive = (now < lease_due && life_seen >= not_ready_since).then(|| {
        format!(
            "{}: Ready={readiness} but its kubelet keeps renewing its Lease{}",
            obs.name,
            skew_note(obs.lease_skew())
        )
        .into_boxed_str()
    });
    if now >= dead_at {
        let dead = summary(
            NodeState::Dead,
            Some(dead_at),
            format!("dead since {dead_at}: {facts}").into(),
            None,
        );
        let death = DeathEvidence::Watched {
            lease_renewed,
            lease_seen,
            not_ready_since,
            lease_duration_s: obs.lease_duration_s,
            window_start: since,
        };
        NodeSummary { death: Some(Box::new(death)), ..dead }
    } else {
        let why = if held_alive.is_some() {
            // Not a countdown: each renewal moves it on.
            format!(
                "alive: its kubelet answers; {facts}; dead only if no renewal arrives for {} \
                 (not before {dead_at})",
                stale_for_words(policy, obs.lease_duration_s)
            )
        } else {
            let stale_for = stale_for_words(policy, obs.lease_duration_s);
            format!(
                "{facts}; waiting for {}",
                waits(policy, &stale_for, not_ready_due, lease_due, now)
            )
        };
        summary(NodeState::Unhealthy, Some(dead_at), why.into(), held_alive)
    }
}

/// The evidence a not-Ready node is judged on, for humans: since when it is not Ready and when
/// its last Lease renewal was seen, each counted from no earlier than the window start `since`.
fn evidence_facts(
    obs: &NodeObservation,
    since: Timestamp,
    not_ready_since: Timestamp,
    now: Timestamp,
) -> String {
    let readiness = obs.readiness.as_str();
    let window = |t: Option<Timestamp>| match t {
        Some(t) if t >= since => String::new(),
        _ => format!(" (counted from the evidence window start at {since})"),
    };
    let stamp = if obs.not_ready_from_stamp { " (by its lastTransitionTime)" } else { "" };
    let ready_fact = format!(
        "Ready={readiness} since {not_ready_since}{stamp}{}",
        window(obs.not_ready_seen.get())
    );
    let skew = skew_note(obs.lease_skew());
    let lease_fact = match obs.lease_seen.get() {
        Some(seen) if obs.seen_from_stamps => format!(
            "Lease renewTime {} old by this machine's clock (no renewal seen while watching)",
            format_duration(now.duration_since(seen).max(SignedDuration::ZERO))
        ),
        Some(seen) if seen >= since => format!(
            "Lease renewal seen {} ago by our clock{skew}",
            format_duration(now.duration_since(seen).max(SignedDuration::ZERO))
        ),
        Some(_) => format!("Lease not renewed{}{skew}", window(None)),
        None => format!("no Lease renewal seen{}", window(None)),
    };
    format!("{ready_fact}, {lease_fact}")
}

/// How long no Lease renewal must be seen for a node to count as dead: `leaseStaleFor`, or the
/// Lease's own `leaseDurationSeconds` (`declared`) when that is longer. A kubelet declaring a
/// longer Lease renews less often (every quarter of it): a gap shorter than its own Lease is no
/// evidence that it stopped.
pub fn stale_for(policy: &ValidatedPolicy, declared: Option<u16>) -> SignedDuration {
    policy.lease_stale_for.max(SignedDuration::from_secs(i64::from(declared.unwrap_or(0))))
}

/// [`stale_for`] in words: `leaseStaleFor 2m`, or `the Lease's own 3m (longer than
/// leaseStaleFor 2m)`.
fn stale_for_words(policy: &ValidatedPolicy, declared: Option<u16>) -> String {
    let wait = stale_for(policy, declared);
    let configured = format_duration(policy.lease_stale_for);
    if wait > policy.lease_stale_for {
        format!(
            "the Lease's own {} (longer than leaseStaleFor {configured})",
            format_duration(wait)
        )
    } else {
        format!("leaseStaleFor {configured}")
    }
}

/// What a node not dead yet waits for: the time rules still running at `now`, joined by "and".
fn waits(
    policy: &ValidatedPolicy,
    stale_for: &str,
    not_ready_due: Timestamp,
    lease_due: Timestamp,
    now: Timestamp,
) -> String {
    let mut waits = Vec::new();
    if now < not_ready_due {
        waits.push(format!(
            "notReadyFor {} until {not_ready_due}",
            format_duration(policy.not_ready_for)
        ));
    }
    if now < lease_due {
        waits.push(format!("{stale_for} until {lease_due}"));
    }
    waits.join(" and ")
}

/// The assessed health of one node at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHealth {
    pub readiness: Readiness,
    /// How long the node has been anything but Ready (None while Ready or when unknown).
    pub not_ready_for: Option<SignedDuration>,
    /// How long ago the kubelet last renewed its Lease (None without a Lease).
    pub lease_age: Option<SignedDuration>,
}

impl NodeHealth {
    /// A node is healthy when it is Ready.
    pub fn is_healthy(&self) -> bool {
        self.readiness == Readiness::Ready
    }
}

/// Assesses a node at `now`. Timestamps in the future (clock skew) count as zero age.
pub fn assess_node(node: &NodeObservation, now: Timestamp) -> NodeHealth {
    let age = |t: Timestamp| now.duration_since(t).max(SignedDuration::ZERO);
    NodeHealth {
        readiness: node.readiness,
        not_ready_for: match node.readiness {
            Readiness::Ready | Readiness::Missing => None,
            Readiness::NotReady | Readiness::Unknown => node.ready_transition.get().map(age),
        },
        lease_age: node.lease_renewed.get().map(age),
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::core::observed::fixtures;
    use crate::core::stamp::Stamp;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    #[test]
    fn a_node_summary_stays_small() {
        // What a plan holds for every node in scope (benchmarks: "What a node costs"): the
        // evidence of death and the hold, unset on a healthy node, are one pointer each, and
        // the instants a Stamp each.
        let size = std::mem::size_of::<NodeSummary>();
        assert!(size <= 104, "NodeSummary grew to {size} bytes");
    }

    #[test]
    fn assess_node_table() {
        let now = ts("2026-01-01T00:10:00Z");
        let node = |readiness, transition: Option<&str>, lease: Option<&str>| NodeObservation {
            name: "n".into(),
            readiness,
            ready_transition: transition.map(ts).into(),
            lease_renewed: lease.map(ts).into(),
            not_ready_seen: Stamp::NONE,
            lease_seen: Stamp::NONE,
            lease_duration_s: None,
            ready_heartbeat: Stamp::NONE,
            heartbeat_seen: Stamp::NONE,
            seen_from_stamps: false,
            not_ready_from_stamp: false,
            unschedulable: false,
            taints: Box::default(),
            volumes_in_use: Box::default(),
        };
        let secs = |s| Some(SignedDuration::from_secs(s));
        struct Row {
            case: &'static str,
            node: NodeObservation,
            healthy: bool,
            not_ready_for: Option<SignedDuration>,
            lease_age: Option<SignedDuration>,
        }
        let table = [
            Row {
                case: "ready with fresh lease",
                node: node(
                    Readiness::Ready,
                    Some("2026-01-01T00:00:00Z"),
                    Some("2026-01-01T00:09:58Z"),
                ),
                healthy: true,
                not_ready_for: None,
                lease_age: secs(2),
            },
            Row {
                case: "unknown for five minutes",
                node: node(
                    Readiness::Unknown,
                    Some("2026-01-01T00:05:00Z"),
                    Some("2026-01-01T00:04:20Z"),
                ),
                healthy: false,
                not_ready_for: secs(300),
                lease_age: secs(340),
            },
            Row {
                case: "not ready without lease",
                node: node(Readiness::NotReady, Some("2026-01-01T00:09:00Z"), None),
                healthy: false,
                not_ready_for: secs(60),
                lease_age: None,
            },
            Row {
                case: "lease renewed in the future (skew) counts as zero",
                node: node(Readiness::Ready, None, Some("2026-01-01T00:10:05Z")),
                healthy: true,
                not_ready_for: None,
                lease_age: secs(0),
            },
            Row {
                case: "no condition yet",
                node: node(Readiness::Missing, None, None),
                healthy: false,
                not_ready_for: None,
                lease_age: None,
            },
        ];
        for Row { case, node: obs, healthy, not_ready_for, lease_age } in table {
            let health = assess_node(&obs, now);
            assert_eq!(health.is_healthy(), healthy, "{case}");
            assert_eq!(health.not_ready_for, not_ready_for, "{case}");
            assert_eq!(health.lease_age, lease_age, "{case}");
        }
    }

    fn policy(f: impl FnOnce(&mut crate::crd::RemediationPolicySpec)) -> ValidatedPolicy {
        let mut spec = crate::crd::RemediationPolicySpec::default();
        f(&mut spec);
        crate::core::validate(&spec).expect("valid test policy")
    }

    #[test]
    fn summarize_node_table() {
        // Policy: notReadyFor 5m, leaseStaleFor 2m. Now 00:10:00.
        let now = ts("2026-01-01T00:10:00Z");
        let long_ago = Some(ts("2025-12-31T00:00:00Z"));
        let at = |s: &str| Some(ts(&format!("2026-01-01T{s}Z")));
        struct Row {
            case: &'static str,
            readiness: Readiness,
            transition: Option<Timestamp>,
            lease: Option<Timestamp>,
            taints: &'static [&'static str],
            deleted: bool,
            synced: Option<Timestamp>,
            /// The kubelet's own `renewTime` when it differs from when we saw the renewal.
            renew_time: Option<Timestamp>,
            /// The Lease's `leaseDurationSeconds`.
            declared: Option<u16>,
            want: (NodeState, Option<Timestamp>, Option<FencingEvidence>),
        }
        let row = |case, readiness, transition, lease, want| Row {
            case,
            readiness,
            transition,
            lease,
            taints: &[],
            deleted: false,
            synced: long_ago,
            renew_time: None,
            declared: Some(40),
            want,
        };
        use FencingEvidence::*;
        use NodeState::*;
        use Readiness::{Missing, NotReady, Ready as IsReady, Unknown};
        let table = [
            row(
                "ready, fresh lease",
                IsReady,
                at("00:00:00"),
                at("00:09:55"),
                (Healthy, None, None),
            ),
            row(
                "ready wins over a stale lease",
                IsReady,
                at("00:00:00"),
                at("00:00:00"),
                (Healthy, None, None),
            ),
            row(
                "both conditions long held",
                Unknown,
                at("00:04:00"),
                at("00:07:00"),
                (Dead, at("00:09:00"), None),
            ),
            row(
                "Ready=False counts as not ready",
                NotReady,
                at("00:01:00"),
                at("00:01:00"),
                (Dead, at("00:06:00"), None),
            ),
            row(
                "not ready long enough, lease fresh",
                Unknown,
                at("00:04:00"),
                at("00:09:00"),
                (Unhealthy, at("00:11:00"), None),
            ),
            row(
                "lease stale, not ready too recent",
                Unknown,
                at("00:06:00"),
                at("00:03:00"),
                (Unhealthy, at("00:11:00"), None),
            ),
            row(
                "exactly at the threshold",
                Unknown,
                at("00:05:00"),
                at("00:08:00"),
                (Dead, at("00:10:00"), None),
            ),
            row(
                "1 ms before the threshold",
                Unknown,
                at("00:05:00.001"),
                at("00:08:00"),
                (Unhealthy, at("00:10:00.001"), None),
            ),
            row(
                "no condition, no lease: unknown, not dead",
                Missing,
                None,
                None,
                (Unhealthy, None, None),
            ),
            row(
                "not Ready for long, Lease deleted: unknown, not dead",
                Unknown,
                at("00:00:00"),
                None,
                (Unhealthy, None, None),
            ),
            Row {
                case: "watch resynced 2m ago: old evidence starts at the sync",
                synced: at("00:08:00"),
                ..row("", Unknown, long_ago, long_ago, (Unhealthy, at("00:13:00"), None))
            },
            Row {
                case: "watch resynced 5m ago: dead once both windows passed since the sync",
                synced: at("00:05:00"),
                ..row("", Unknown, long_ago, long_ago, (Dead, at("00:10:00"), None))
            },
            Row {
                case: "caches not synced: nothing is dead",
                synced: None,
                ..row("", Unknown, long_ago, long_ago, (Unhealthy, None, None))
            },
            Row {
                case: "caches not synced, ready",
                synced: None,
                ..row("", IsReady, long_ago, at("00:09:59"), (Healthy, None, None))
            },
            Row {
                case: "deleted: dead and fenced",
                deleted: true,
                ..row("", Unknown, at("00:09:00"), at("00:09:00"), (Dead, None, Some(NodeDeleted)))
            },
            Row {
                case: "deleted while unsynced: not dead",
                deleted: true,
                synced: None,
                ..row("", Unknown, None, None, (Unhealthy, None, Some(NodeDeleted)))
            },
            Row {
                case: "out-of-service taint fences",
                taints: &["node.kubernetes.io/out-of-service:NoExecute"],
                ..row(
                    "",
                    Unknown,
                    at("00:00:00"),
                    at("00:00:00"),
                    (Dead, at("00:05:00"), Some(OutOfServiceTaint)),
                )
            },
            Row {
                case: "shutdown taint fences",
                taints: &["node.cloudprovider.kubernetes.io/shutdown:NoSchedule"],
                ..row(
                    "",
                    Unknown,
                    at("00:00:00"),
                    at("00:00:00"),
                    (Dead, at("00:05:00"), Some(ShutdownTaint)),
                )
            },
            Row {
                case: "fencing reported on a node not dead yet",
                taints: &["node.kubernetes.io/out-of-service:NoExecute"],
                ..row(
                    "",
                    Unknown,
                    at("00:09:00"),
                    at("00:00:00"),
                    (Unhealthy, at("00:14:00"), Some(OutOfServiceTaint)),
                )
            },
            Row {
                case: "kubelet clock 5m behind, renewal seen 5s ago: alive",
                renew_time: at("00:04:55"),
                ..row(
                    "",
                    NotReady,
                    at("00:00:00"),
                    at("00:09:55"),
                    (Unhealthy, at("00:11:55"), None),
                )
            },
            Row {
                case: "a Lease of 3m: no renewal for leaseStaleFor 2m is not enough",
                declared: Some(180),
                ..row(
                    "",
                    Unknown,
                    at("00:00:00"),
                    at("00:07:00.001"),
                    (Unhealthy, at("00:10:00.001"), None),
                )
            },
            Row {
                case: "a Lease of 3m unrenewed for 3m: dead",
                declared: Some(180),
                ..row("", Unknown, at("00:00:00"), at("00:07:00"), (Dead, at("00:10:00"), None))
            },
            Row {
                case: "no duration declared: leaseStaleFor alone",
                declared: None,
                ..row("", Unknown, at("00:00:00"), at("00:07:00"), (Dead, at("00:09:00"), None))
            },
            Row {
                case: "kubelet clock 5m ahead, no renewal seen for 3m: dead by our clock",
                renew_time: at("00:12:00"),
                ..row("", Unknown, at("00:00:00"), at("00:07:00"), (Dead, at("00:09:00"), None))
            },
            Row {
                case: "out-of-service taint without NoExecute does not fence",
                taints: &["node.kubernetes.io/out-of-service:NoSchedule"],
                ..row("", Unknown, at("00:00:00"), at("00:00:00"), (Dead, at("00:05:00"), None))
            },
            Row {
                case: "other taints do not fence",
                taints: &["node.kubernetes.io/unreachable:NoExecute"],
                ..row("", Unknown, at("00:00:00"), at("00:00:00"), (Dead, at("00:05:00"), None))
            },
        ];
        let p = policy(|_| {});
        for r in table {
            let view = NodeView {
                observation: NodeObservation {
                    name: "n1".into(),
                    readiness: r.readiness,
                    ready_transition: r.transition.into(),
                    lease_renewed: r.renew_time.or(r.lease).into(),
                    // Seen when they happened, unless a row says otherwise.
                    not_ready_seen: r.transition.filter(|_| r.readiness != IsReady).into(),
                    lease_seen: r.lease.into(),
                    lease_duration_s: r.declared,
                    ready_heartbeat: Stamp::NONE,
                    heartbeat_seen: Stamp::NONE,
                    seen_from_stamps: false,
                    not_ready_from_stamp: false,
                    unschedulable: false,
                    taints: r.taints.iter().map(|t| t.to_string()).collect(),
                    volumes_in_use: Box::default(),
                },
                labels: Default::default(),
                excluded: false,
                deleted: r.deleted,
                control: Default::default(),
            };
            let got = summarize_node(&view, &p, r.synced, now);
            assert_eq!(
                (got.state, got.dead_at.get(), got.fenced_by),
                r.want,
                "{}: {}",
                r.case,
                got.why
            );
            assert!(!got.why.is_empty(), "{}", r.case);
        }
    }

    #[test]
    fn disabled_fencing_evidence_is_ignored() {
        let now = ts("2026-01-01T00:10:00Z");
        let p = policy(|s| {
            s.dead_node.fencing.node_deleted = false;
            s.dead_node.fencing.out_of_service_taint = false;
            s.dead_node.fencing.shutdown_taint = false;
            s.dead_node.require_fencing_for = vec![crate::crd::FencingRequirement::None];
        });
        let mut view = NodeView::deleted_unknown("gone");
        view.observation.taints = vec![
            format!("{OUT_OF_SERVICE_TAINT}:NoExecute"),
            format!("{SHUTDOWN_TAINT}:NoSchedule"),
        ]
        .into();
        let got = summarize_node(&view, &p, Some(now), now);
        assert_eq!((got.state, got.fenced_by), (NodeState::Dead, None));
    }

    #[test]
    fn why_explains_the_wait() {
        let now = ts("2026-01-01T00:10:00Z");
        let mut view = NodeView::deleted_unknown("n1");
        view.deleted = false;
        view.observation.readiness = Readiness::Unknown;
        view.observation.ready_transition = Some(ts("2026-01-01T00:08:59Z")).into();
        view.observation.not_ready_seen = Some(ts("2026-01-01T00:09:00Z")).into();
        view.observation.lease_renewed = Some(ts("2026-01-01T00:08:30Z")).into();
        view.observation.lease_seen = Some(ts("2026-01-01T00:08:30.010Z")).into();
        let got = summarize_node(&view, &policy(|_| {}), Some(ts("2026-01-01T00:00:00Z")), now);
        assert_eq!(
            got.why,
            "Ready=Unknown since 2026-01-01T00:09:00Z, Lease renewal seen 1m29.990s ago by our clock; \
             waiting for notReadyFor 5m until 2026-01-01T00:14:00Z and leaseStaleFor 2m until \
             2026-01-01T00:10:30.01Z"
        );
        assert_eq!(got.held_alive, None, "the last renewal came before the node left Ready");
    }

    #[test]
    fn a_skewed_kubelet_that_renews_is_held_alive_and_says_why() {
        // Ready=False (runtime down) since 00:05 by our clock; the kubelet renews every 2 s with
        // a clock 5 min behind ours.
        let now = ts("2026-01-01T00:10:00Z");
        let mut view = NodeView::deleted_unknown("n1");
        view.deleted = false;
        view.observation.readiness = Readiness::NotReady;
        view.observation.ready_transition = Some(ts("2026-01-01T00:00:00Z")).into();
        view.observation.not_ready_seen = Some(ts("2026-01-01T00:05:00Z")).into();
        view.observation.lease_renewed = Some(ts("2026-01-01T00:04:58.003Z")).into();
        view.observation.lease_seen = Some(ts("2026-01-01T00:09:58Z")).into();
        let got = summarize_node(&view, &policy(|_| {}), Some(ts("2026-01-01T00:00:00Z")), now);
        assert_eq!(got.state, NodeState::Unhealthy);
        assert_eq!(
            got.held_alive.as_deref(),
            Some(
                "n1: Ready=NotReady but its kubelet keeps renewing its Lease (its renewTime is 5m \
                 behind ours: clock skew on the node?)"
            )
        );
        assert!(got.why.starts_with("alive: its kubelet answers; "), "{}", got.why);
        assert!(got.why.contains("Lease renewal seen 2s ago by our clock"), "{}", got.why);

        // The same sentence one renewal later (jitter of a few ms): the status does not churn.
        view.observation.lease_renewed = Some(ts("2026-01-01T00:05:00.001Z")).into();
        view.observation.lease_seen = Some(ts("2026-01-01T00:10:00Z")).into();
        let later = summarize_node(&view, &policy(|_| {}), Some(ts("2026-01-01T00:00:00Z")), now);
        assert_eq!(later.held_alive, got.held_alive);
    }

    #[test]
    fn a_status_heartbeat_we_saw_is_a_sign_of_life() {
        // Not Ready since 00:00, its Lease last renewed (seen) at 00:01: dead by 00:05 by the
        // Lease alone; but the kubelet posted the node's status at 00:09:30.
        let now = ts("2026-01-01T00:10:00Z");
        let mut view = NodeView::unknown("n1");
        view.observation.readiness = Readiness::NotReady;
        view.observation.not_ready_seen = Some(ts("2026-01-01T00:00:00Z")).into();
        view.observation.lease_renewed = Some(ts("2026-01-01T00:01:00Z")).into();
        view.observation.lease_seen = Some(ts("2026-01-01T00:01:00Z")).into();
        let p = policy(|_| {});
        let since = Some(ts("2025-12-31T00:00:00Z"));
        assert_eq!(summarize_node(&view, &p, since, now).state, NodeState::Dead);
        view.observation.heartbeat_seen = Some(ts("2026-01-01T00:09:30Z")).into();
        let alive = summarize_node(&view, &p, since, now);
        assert_eq!(alive.state, NodeState::Unhealthy);
        assert_eq!(alive.dead_at, Some(ts("2026-01-01T00:11:30Z")));
        assert!(alive.held_alive.is_some(), "{}", alive.why);
    }

    #[test]
    fn plan_words_evidence_dated_from_stamps_as_such() {
        let now = ts("2026-01-01T00:10:00Z");
        let mut view = NodeView::deleted_unknown("n1");
        view.deleted = false;
        view.observation.readiness = Readiness::Unknown;
        view.observation.not_ready_seen = Some(ts("2026-01-01T00:00:00Z")).into();
        view.observation.lease_renewed = Some(ts("2026-01-01T00:09:00Z")).into();
        view.observation.lease_seen = Some(ts("2026-01-01T00:09:00Z")).into();
        view.observation.seen_from_stamps = true;
        let got = summarize_node(&view, &policy(|_| {}), Some(Timestamp::MIN), now);
        assert!(
            got.why.contains(
                "Lease renewTime 1m old by this machine's clock (no renewal seen while watching)"
            ),
            "{}",
            got.why
        );
        assert!(!got.why.contains("by our clock"), "{}", got.why);
    }

    #[test]
    fn skew_note_table() {
        let secs = |s| Some(SignedDuration::from_secs(s));
        let table = [
            (None, ""),
            (secs(0), ""),
            (secs(29), ""),
            (secs(-29), ""),
            (secs(30), " (its renewTime is 30s behind ours: clock skew on the node?)"),
            (secs(304), " (its renewTime is 5m behind ours: clock skew on the node?)"),
            (secs(-306), " (its renewTime is 5m10s ahead of ours: clock skew on the node?)"),
        ];
        for (skew, want) in table {
            assert_eq!(skew_note(skew), want, "{skew:?}");
        }
    }

    #[test]
    fn a_node_table_is_sorted_by_name_and_keeps_the_later_of_one_name() {
        let summary = |name: &str, state| fixtures::node_summary(name, state);
        let table = NodeTable::new(vec![
            summary("n-c", NodeState::Healthy),
            summary("n-a", NodeState::Healthy),
            summary("n-b", NodeState::Healthy),
            summary("n-a", NodeState::Dead),
        ]);
        let names: Vec<&str> = table.iter().map(|n| &*n.name).collect();
        assert_eq!(names, ["n-a", "n-b", "n-c"]);
        assert_eq!(table.get("n-a").map(|n| n.state), Some(NodeState::Dead), "the later kept");
        assert_eq!(table.get("n-c").map(|n| n.state), Some(NodeState::Healthy));
        assert!(table.get("n-d").is_none() && !table.contains("n-0") && table.contains("n-b"));
        // Already sorted: taken as it is.
        let sorted =
            NodeTable::new(vec![summary("a", NodeState::Dead), summary("b", NodeState::Dead)]);
        assert_eq!(sorted.get("b").map(|n| &*n.name), Some("b"));
        assert!(NodeTable::default().get("a").is_none());
    }
}
