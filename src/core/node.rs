//! Node health from the evidence a kubelet leaves behind: the NodeReady condition and the
//! kubelet's Lease in `kube-node-lease`.
//!
//! Every age is measured by the operator's own clock, from the instant it *saw* the evidence
//! change (a Lease renewal arriving, the Ready condition leaving True), as the node lifecycle
//! controller does. The timestamps inside the objects (`renewTime`, `lastTransitionTime`) are
//! written by other machines whose clocks may run minutes off: they are shown to people and never
//! compared with our clock.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use super::budget::add;
use super::duration::format_duration;
use super::policy::ValidatedPolicy;
use crate::crd::{FencingSpec, OUT_OF_SERVICE_TAINT, SHUTDOWN_TAINT};

/// The status of a node's `Ready` condition as the node lifecycle controller reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// `Ready=True`: the kubelet reports healthy.
    Ready,
    /// `Ready=False`: the kubelet reports a problem, so it is alive.
    NotReady,
    /// `Ready=Unknown`: the node controller stopped hearing from the kubelet.
    Unknown,
    /// No `Ready` condition yet (a node that never started).
    Missing,
}

impl Readiness {
    /// Parses a condition status (`True`, `False`, `Unknown`); `None` means no condition.
    pub fn from_condition_status(status: Option<&str>) -> Self {
        match status {
            Some("True") => Readiness::Ready,
            Some("False") => Readiness::NotReady,
            Some(_) => Readiness::Unknown,
            None => Readiness::Missing,
        }
    }

    /// The word shown to users.
    pub fn as_str(self) -> &'static str {
        match self {
            Readiness::Ready => "Ready",
            Readiness::NotReady => "NotReady",
            Readiness::Unknown => "Unknown",
            Readiness::Missing => "NoCondition",
        }
    }
}

/// What is known about one node, extracted from its Node object and kubelet Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeObservation {
    pub name: String,
    pub readiness: Readiness,
    /// When the `Ready` condition last changed status, as written in it (by the kubelet or the
    /// node lifecycle controller, on their clocks): shown, never compared with ours.
    pub ready_transition: Option<Timestamp>,
    /// The Lease's `spec.renewTime`, written by the kubelet on its clock: shown, never compared
    /// with ours.
    pub lease_renewed: Option<Timestamp>,
    /// When the operator first saw the node not Ready, by its own clock (`None` while Ready, or
    /// for a one-shot read).
    pub not_ready_seen: Option<Timestamp>,
    /// When the operator last saw the Lease's `renewTime` change, by its own clock (`None`
    /// without a Lease, or for a one-shot read).
    pub lease_seen: Option<Timestamp>,
    /// `spec.unschedulable` (cordoned).
    pub unschedulable: bool,
    /// `key:effect` of each taint.
    pub taints: Vec<String>,
}

impl NodeObservation {
    /// Whether the node carries a taint with this key (any effect).
    pub fn has_taint_key(&self, key: &str) -> bool {
        self.taints.iter().any(|t| t.split_once(':').map_or(t.as_str(), |(k, _)| k) == key)
    }

    /// Whether the node carries a taint with this key and effect.
    pub fn has_taint(&self, key: &str, effect: &str) -> bool {
        self.taints.iter().any(|t| t.split_once(':') == Some((key, effect)))
    }

    /// How far the kubelet's clock runs behind ours (negative: ahead), as seen when its last
    /// renewal arrived: our clock then minus the `renewTime` it wrote.
    pub fn lease_skew(&self) -> Option<SignedDuration> {
        Some(self.lease_seen?.duration_since(self.lease_renewed?))
    }

    /// The first enabled fencing evidence on this node: the out-of-service taint counts only with
    /// effect `NoExecute` (what PodGC and the attach/detach controller act on), the shutdown taint
    /// with any effect.
    pub fn fencing(&self, fencing: &FencingSpec, deleted: bool) -> Option<FencingEvidence> {
        if deleted && fencing.node_deleted {
            Some(FencingEvidence::NodeDeleted)
        } else if fencing.out_of_service_taint && self.has_taint(OUT_OF_SERVICE_TAINT, "NoExecute")
        {
            Some(FencingEvidence::OutOfServiceTaint)
        } else if fencing.shutdown_taint && self.has_taint_key(SHUTDOWN_TAINT) {
            Some(FencingEvidence::ShutdownTaint)
        } else {
            None
        }
    }
}

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

/// What the planner keeps about one node: the observation plus what scoping needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeView {
    pub observation: NodeObservation,
    /// The node's labels (last known, for a deleted node).
    pub labels: BTreeMap<String, String>,
    /// Annotated `remediator.io/exclude: "true"`: its pods are never touched.
    pub excluded: bool,
    /// The Node object is gone (a tombstone kept while pods still reference it).
    pub deleted: bool,
}

impl NodeView {
    /// A node known only by name because pods reference it but no Node object exists.
    pub fn deleted_unknown(name: &str) -> Self {
        NodeView {
            observation: NodeObservation {
                name: name.to_string(),
                readiness: Readiness::Missing,
                ready_transition: None,
                lease_renewed: None,
                not_ready_seen: None,
                lease_seen: None,
                unschedulable: false,
                taints: Vec::new(),
            },
            labels: BTreeMap::new(),
            excluded: false,
            deleted: true,
        }
    }
}

/// A node's state as far as remediation is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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
        match self {
            NodeState::Healthy => "Healthy",
            NodeState::Unhealthy => "Unhealthy",
            NodeState::Dead => "Dead",
        }
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

/// One node as the planner judged it at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSummary {
    pub name: String,
    pub state: NodeState,
    pub excluded: bool,
    pub deleted: bool,
    /// The first enabled fencing evidence found (deleted, then out-of-service, then shutdown).
    pub fenced_by: Option<FencingEvidence>,
    /// The instant the node is or will be dead by the time rules if nothing changes. `None` when
    /// Ready, deleted (dead without a time rule) or while caches are not synced.
    pub dead_at: Option<Timestamp>,
    /// Why, for humans.
    pub why: String,
    /// The Lease `renewTime` judged on (the kubelet's clock): the last look compares it.
    pub lease_renewed: Option<Timestamp>,
    /// Set when the node is not Ready but its kubelet keeps renewing its Lease (a renewal seen
    /// after it left Ready): alive, whatever its timestamps say. A sentence without relative
    /// times, stable from one renewal to the next, for the status and the log.
    pub held_alive: Option<String>,
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
    let fenced_by = obs.fencing(&policy.fencing, view.deleted);
    let summary = |state, dead_at, why: String, held_alive| NodeSummary {
        name: obs.name.clone(),
        state,
        excluded: view.excluded,
        deleted: view.deleted,
        fenced_by,
        dead_at,
        why,
        lease_renewed: obs.lease_renewed,
        held_alive,
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
    if view.deleted {
        return summary(NodeState::Dead, None, "Node object deleted".into(), None);
    }
    if obs.readiness == Readiness::Ready {
        return summary(NodeState::Healthy, None, "Ready".into(), None);
    }
    let not_ready_since = obs.not_ready_seen.unwrap_or(since).max(since);
    let lease_since = obs.lease_seen.unwrap_or(since).max(since);
    let not_ready_due = add(not_ready_since, policy.not_ready_for);
    let lease_due = add(lease_since, policy.lease_stale_for);
    let dead_at = not_ready_due.max(lease_due);
    let readiness = obs.readiness.as_str();
    let window = |t: Option<Timestamp>| match t {
        Some(t) if t >= since => String::new(),
        _ => format!(" (counted from the evidence window start at {since})"),
    };
    let ready_fact =
        format!("Ready={readiness} since {not_ready_since}{}", window(obs.not_ready_seen));
    let skew = skew_note(obs.lease_skew());
    let lease_fact = match obs.lease_seen {
        Some(seen) if seen >= since => format!(
            "Lease renewal seen {} ago by our clock{skew}",
            format_duration(now.duration_since(seen).max(SignedDuration::ZERO))
        ),
        Some(_) => format!("Lease not renewed{}{skew}", window(None)),
        None => format!("no Lease renewal seen{}", window(None)),
    };
    let facts = format!("{ready_fact}, {lease_fact}");
    // The kubelet answers (its renewals keep arriving) although the node is not Ready.
    let held_alive = (now < lease_due && obs.lease_seen.is_some_and(|s| s >= not_ready_since))
        .then(|| {
            format!(
                "{}: Ready={readiness} but its kubelet keeps renewing its Lease{}",
                obs.name,
                skew_note(obs.lease_skew())
            )
        });
    if now >= dead_at {
        summary(NodeState::Dead, Some(dead_at), format!("dead since {dead_at}: {facts}"), None)
    } else {
        let mut waits = Vec::new();
        if now < not_ready_due {
            waits.push(format!(
                "notReadyFor {} until {not_ready_due}",
                format_duration(policy.not_ready_for)
            ));
        }
        if now < lease_due {
            waits.push(format!(
                "leaseStaleFor {} until {lease_due}",
                format_duration(policy.lease_stale_for)
            ));
        }
        let alive = if held_alive.is_some() { "alive: its kubelet answers; " } else { "" };
        summary(
            NodeState::Unhealthy,
            Some(dead_at),
            format!("{alive}{facts}; waiting for {}", waits.join(" and ")),
            held_alive,
        )
    }
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
            Readiness::NotReady | Readiness::Unknown => node.ready_transition.map(age),
        },
        lease_age: node.lease_renewed.map(age),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    #[test]
    fn readiness_from_condition_status() {
        let table = [
            (Some("True"), Readiness::Ready),
            (Some("False"), Readiness::NotReady),
            (Some("Unknown"), Readiness::Unknown),
            (Some("garbage"), Readiness::Unknown),
            (None, Readiness::Missing),
        ];
        for (status, want) in table {
            assert_eq!(Readiness::from_condition_status(status), want, "status {status:?}");
        }
    }

    #[test]
    fn assess_node_table() {
        let now = ts("2026-01-01T00:10:00Z");
        let node = |readiness, transition: Option<&str>, lease: Option<&str>| NodeObservation {
            name: "n".into(),
            readiness,
            ready_transition: transition.map(ts),
            lease_renewed: lease.map(ts),
            not_ready_seen: None,
            lease_seen: None,
            unschedulable: false,
            taints: vec![],
        };
        let secs = |s| Some(SignedDuration::from_secs(s));
        let table = [
            // (case, node, healthy, not_ready_for, lease_age)
            (
                "ready with fresh lease",
                node(Readiness::Ready, Some("2026-01-01T00:00:00Z"), Some("2026-01-01T00:09:58Z")),
                true,
                None,
                secs(2),
            ),
            (
                "unknown for five minutes",
                node(
                    Readiness::Unknown,
                    Some("2026-01-01T00:05:00Z"),
                    Some("2026-01-01T00:04:20Z"),
                ),
                false,
                secs(300),
                secs(340),
            ),
            (
                "not ready without lease",
                node(Readiness::NotReady, Some("2026-01-01T00:09:00Z"), None),
                false,
                secs(60),
                None,
            ),
            (
                "lease renewed in the future (skew) counts as zero",
                node(Readiness::Ready, None, Some("2026-01-01T00:10:05Z")),
                true,
                None,
                secs(0),
            ),
            ("no condition yet", node(Readiness::Missing, None, None), false, None, None),
        ];
        for (case, obs, healthy, not_ready_for, lease_age) in table {
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
    fn has_taint_key_ignores_effect() {
        let mut obs = NodeView::deleted_unknown("n").observation;
        obs.taints = vec!["node.kubernetes.io/out-of-service:NoExecute".into(), "bare-key".into()];
        assert!(obs.has_taint_key(OUT_OF_SERVICE_TAINT));
        assert!(obs.has_taint_key("bare-key"));
        assert!(!obs.has_taint_key("node.kubernetes.io"));
        assert!(!obs.has_taint_key(SHUTDOWN_TAINT));
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
                "no condition, no lease: since the sync",
                Missing,
                None,
                None,
                (Dead, Some(ts("2025-12-31T00:05:00Z")), None),
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
                    ready_transition: r.transition,
                    lease_renewed: r.renew_time.or(r.lease),
                    // Seen when they happened, unless a row says otherwise.
                    not_ready_seen: r.transition.filter(|_| r.readiness != IsReady),
                    lease_seen: r.lease,
                    unschedulable: false,
                    taints: r.taints.iter().map(|t| t.to_string()).collect(),
                },
                labels: BTreeMap::new(),
                excluded: false,
                deleted: r.deleted,
            };
            let got = summarize_node(&view, &p, r.synced, now);
            assert_eq!((got.state, got.dead_at, got.fenced_by), r.want, "{}: {}", r.case, got.why);
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
        ];
        let got = summarize_node(&view, &p, Some(now), now);
        assert_eq!((got.state, got.fenced_by), (NodeState::Dead, None));
    }

    #[test]
    fn why_explains_the_wait() {
        let now = ts("2026-01-01T00:10:00Z");
        let mut view = NodeView::deleted_unknown("n1");
        view.deleted = false;
        view.observation.readiness = Readiness::Unknown;
        view.observation.ready_transition = Some(ts("2026-01-01T00:08:59Z"));
        view.observation.not_ready_seen = Some(ts("2026-01-01T00:09:00Z"));
        view.observation.lease_renewed = Some(ts("2026-01-01T00:08:30Z"));
        view.observation.lease_seen = Some(ts("2026-01-01T00:08:30.010Z"));
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
        view.observation.ready_transition = Some(ts("2026-01-01T00:00:00Z"));
        view.observation.not_ready_seen = Some(ts("2026-01-01T00:05:00Z"));
        view.observation.lease_renewed = Some(ts("2026-01-01T00:04:58.003Z"));
        view.observation.lease_seen = Some(ts("2026-01-01T00:09:58Z"));
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
        view.observation.lease_renewed = Some(ts("2026-01-01T00:05:00.001Z"));
        view.observation.lease_seen = Some(ts("2026-01-01T00:10:00Z"));
        let later = summarize_node(&view, &policy(|_| {}), Some(ts("2026-01-01T00:00:00Z")), now);
        assert_eq!(later.held_alive, got.held_alive);
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
}
