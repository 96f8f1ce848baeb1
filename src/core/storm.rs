//! The storm guard over time: whether a policy's circuit holds every action at `now`, given the
//! two readings of this instant and what the circuit was before.
//!
//! Two readings open the circuit: the policy's own (`safety.maxUnhealthyNodes` over its
//! selected nodes) and the cluster's (`--max-unhealthy-nodes-in-cluster` over every node the
//! operator sees, one limit for the whole process). The cluster reading is what keeps a narrow
//! policy, whose few nodes are within its own limit, from acting during a cluster-wide outage.
//!
//! Once a reading has opened the circuit, it does not simply close when the reading does:
//! - with `safety.latch`, it stays open (`Latched`) until an admin re-arms it by setting the
//!   policy's annotation `remediator.io/rearm-circuit` to a value it did not have when the
//!   circuit latched (re-arming while the storm still rages does nothing: the latch is taken
//!   with the annotation's value at the end of the storm);
//! - then, or at once without a latch, it stays open for `safety.cooldown` (`CoolingDown`):
//!   nodes come back from a storm one by one, and the first minutes after one are when a
//!   partition that is healing looks most like a few dead nodes.
//!
//! The state is kept in the policy's status (`status.circuit`), so a restart resumes a latch or
//! a cool-down instead of forgetting it.

use jiff::{SignedDuration, Timestamp};

use super::duration::add;
use super::guards::Circuit;
use super::observed::CircuitMemory;
use super::policy::StormSettings;
use super::verdict::NotEligible;
use crate::crd::{CircuitState, REARM_ANNOTATION};

/// How long a Node this operator deleted keeps counting as unhealthy in the storm guard. A
/// failure that spreads slowly (a rack losing power node by node, a bad rollout of a kernel)
/// shows as unhealthy nodes; if deleting them took them out of the count, the guard would never
/// see a storm. Ten minutes is twice the default pod eviction timeout (5 min): by then a new
/// node normally replaces the deleted one, and a failure still spreading shows on the nodes
/// that are left.
pub const OWN_DELETIONS_COUNT_FOR: SignedDuration = SignedDuration::from_secs(600);

/// The storm guard's decision at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Storm {
    /// The policy's own reading.
    pub own: Circuit,
    /// The reading over every node the operator sees.
    pub cluster: Circuit,
    /// The circuit after this evaluation, to remember.
    pub memory: CircuitMemory,
    /// The state before it (`Closed` when nothing was remembered).
    pub previous: CircuitState,
    /// The admin's re-arm released a latch in this evaluation.
    pub rearmed: bool,
}

impl Storm {
    /// Whether every action is held.
    pub fn holds(&self) -> bool {
        self.memory.state != CircuitState::Closed
    }

    /// Why an action is held, for the verdicts; `None` when the circuit is closed.
    pub fn refusal(&self) -> Option<NotEligible> {
        match self.memory.state {
            CircuitState::Closed => None,
            CircuitState::Open if self.own.open => Some(NotEligible::CircuitOpen {
                unhealthy: self.own.unhealthy,
                limit: self.own.limit,
            }),
            CircuitState::Open => Some(NotEligible::ClusterStorm {
                unhealthy: self.cluster.unhealthy,
                limit: self.cluster.limit,
            }),
            CircuitState::Latched => Some(NotEligible::CircuitLatched),
            CircuitState::CoolingDown => Some(NotEligible::CoolingDown {
                until: self.memory.until.unwrap_or(self.memory.since),
            }),
        }
    }

    /// The CircuitOpen condition's reason.
    pub fn reason(&self) -> &'static str {
        match self.memory.state {
            CircuitState::Closed => "WithinLimit",
            CircuitState::Open if self.own.open => "TooManyUnhealthyNodes",
            CircuitState::Open => "ClusterStorm",
            CircuitState::Latched => "Latched",
            CircuitState::CoolingDown => "CoolingDown",
        }
    }

    /// The CircuitOpen condition's message, and the plan's.
    pub fn message(&self) -> String {
        let Storm { own, cluster, memory, .. } = self;
        match memory.state {
            CircuitState::Closed => own.message(),
            CircuitState::Open if own.open => own.message(),
            CircuitState::Open => format!(
                "{}; {}",
                cluster_message(cluster),
                own.message().replace(": no action until it drops", "")
            ),
            CircuitState::Latched => format!(
                "the storm passed at {} and the circuit is latched (safety.latch): no action \
                 until an admin re-arms it: kubectl annotate --overwrite remediationpolicy <name> \
                 {REARM_ANNOTATION}=$(date +%s)",
                memory.since
            ),
            CircuitState::CoolingDown => format!(
                "the storm has passed; cooling down (safety.cooldown) until {}: no action before",
                memory.until.unwrap_or(memory.since)
            ),
        }
    }

    /// When the circuit closes by the passing of time alone (the end of a cool-down).
    pub fn deadline(&self) -> Option<Timestamp> {
        self.memory.until.filter(|_| self.memory.state == CircuitState::CoolingDown)
    }
}

fn cluster_message(cluster: &Circuit) -> String {
    format!(
        "{} of {} nodes in the cluster are unhealthy, more than --max-unhealthy-nodes-in-cluster \
         {} = {}: a cluster-wide outage, no action by any policy until it drops",
        cluster.unhealthy, cluster.in_scope, cluster.max_unhealthy, cluster.limit
    )
}

/// Advances the circuit to `now`.
///
/// `rearm_token` is the re-arm annotation's value now. A policy that turned `latch` off is not
/// held by an earlier latch.
pub fn advance(
    own: Circuit,
    cluster: Circuit,
    previous: Option<&CircuitMemory>,
    settings: StormSettings,
    rearm_token: Option<&str>,
    now: Timestamp,
) -> Storm {
    let before = previous.cloned().unwrap_or_else(|| CircuitMemory::closed(now));
    let open_now = own.open || cluster.open;
    let since = |state: CircuitState| if before.state == state { before.since } else { now };
    // The storm has passed: latch, cool down or close.
    let after_storm = || {
        if settings.cooldown > SignedDuration::ZERO {
            CircuitMemory {
                state: CircuitState::CoolingDown,
                since: now,
                until: Some(add(now, settings.cooldown)),
                rearm_token: None,
            }
        } else {
            CircuitMemory::closed(now)
        }
    };
    let mut rearmed = false;
    let memory = match before.state {
        _ if open_now => CircuitMemory {
            state: CircuitState::Open,
            since: since(CircuitState::Open),
            until: None,
            rearm_token: None,
        },
        CircuitState::Open if settings.latch => CircuitMemory {
            state: CircuitState::Latched,
            since: now,
            until: None,
            rearm_token: rearm_token.map(str::to_string),
        },
        CircuitState::Open => after_storm(),
        // Only a new value of the re-arm annotation re-arms: removing it is no re-arm (an
        // absence compares equal to nothing an admin said).
        CircuitState::Latched
            if !settings.latch
                || rearm_token.is_some_and(|t| before.rearm_token.as_deref() != Some(t)) =>
        {
            rearmed = true;
            after_storm()
        }
        CircuitState::Latched => before.clone(),
        CircuitState::CoolingDown if before.until.is_none_or(|until| until <= now) => {
            CircuitMemory::closed(now)
        }
        CircuitState::CoolingDown | CircuitState::Closed => before.clone(),
    };
    Storm { own, cluster, memory, previous: before.state, rearmed }
}

/// The Events for the circuit's change in this evaluation, oldest first: `(reason, note)`. A
/// re-arm that closes the circuit at once says both.
pub fn transition_notices(storm: &Storm) -> Vec<(&'static str, String)> {
    let mut notices = Vec::new();
    if storm.rearmed {
        notices.push(("CircuitRearmed", format!("re-armed by an admin; {}", storm.message())));
    }
    notices.extend(transition_notice(storm, storm.rearmed));
    notices
}

/// The Event for the change of state, if any; after a re-arm only a close is news.
fn transition_notice(storm: &Storm, rearmed: bool) -> Option<(&'static str, String)> {
    let (before, after) = (storm.previous, storm.memory.state);
    let note = storm.message();
    match after {
        CircuitState::CoolingDown if rearmed => None,
        CircuitState::Open if before != CircuitState::Open => Some(("CircuitOpen", note)),
        CircuitState::Latched if before != CircuitState::Latched => Some(("CircuitLatched", note)),
        CircuitState::CoolingDown if before != CircuitState::CoolingDown => {
            Some(("CircuitCoolingDown", note))
        }
        CircuitState::Closed if before != CircuitState::Closed => Some((
            "CircuitClosed",
            format!("the circuit closed: actions resume; {}", storm.own.message()),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::policy::MaxUnhealthy;
    use CircuitState::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("test timestamp")
    }

    fn reading(unhealthy: u32) -> Circuit {
        Circuit::evaluate(unhealthy, 10, MaxUnhealthy::Count(2))
    }

    fn memory(
        state: CircuitState,
        since: i64,
        until: Option<i64>,
        token: Option<&str>,
    ) -> CircuitMemory {
        CircuitMemory {
            state,
            since: t(since),
            until: until.map(t),
            rearm_token: token.map(str::to_string),
        }
    }

    const LATCH: StormSettings = StormSettings { latch: true, cooldown: SignedDuration::ZERO };
    const COOL: StormSettings =
        StormSettings { latch: false, cooldown: SignedDuration::from_secs(60) };
    const PLAIN: StormSettings = StormSettings { latch: false, cooldown: SignedDuration::ZERO };
    const BOTH: StormSettings =
        StormSettings { latch: true, cooldown: SignedDuration::from_secs(60) };

    #[test]
    fn transitions() {
        type Row = (
            &'static str,
            u32,
            u32,
            Option<CircuitMemory>,
            StormSettings,
            Option<&'static str>,
            i64,
            CircuitMemory,
            bool,
            &'static str,
        );
        // Columns: case, own unhealthy, cluster unhealthy (limits 2), previous, settings,
        // annotation, now, want memory, want rearmed, want reason.
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            ("first look, calm", 0, 0, None, PLAIN, None, 5, memory(Closed, 5, None, None), false, "WithinLimit"),
            ("own limit exceeded", 3, 3, None, PLAIN, None, 5, memory(Open, 5, None, None), false, "TooManyUnhealthyNodes"),
            ("at the limits stays closed", 2, 2, Some(memory(Closed, 0, None, None)), PLAIN, None, 5, memory(Closed, 0, None, None), false, "WithinLimit"),
            ("narrow policy in a cluster storm", 1, 3, Some(memory(Closed, 0, None, None)), PLAIN, None, 5, memory(Open, 5, None, None), false, "ClusterStorm"),
            ("open keeps its since", 0, 3, Some(memory(Open, 1, None, None)), PLAIN, None, 5, memory(Open, 1, None, None), false, "ClusterStorm"),
            ("storm passes, no latch, no cool-down", 0, 0, Some(memory(Open, 1, None, None)), PLAIN, None, 5, memory(Closed, 5, None, None), false, "WithinLimit"),
            ("storm passes into a cool-down", 0, 0, Some(memory(Open, 1, None, None)), COOL, None, 5, memory(CoolingDown, 5, Some(65), None), false, "CoolingDown"),
            ("cooling down", 0, 0, Some(memory(CoolingDown, 5, Some(65), None)), COOL, None, 64, memory(CoolingDown, 5, Some(65), None), false, "CoolingDown"),
            ("cool-down over at its instant", 0, 0, Some(memory(CoolingDown, 5, Some(65), None)), COOL, None, 65, memory(Closed, 65, None, None), false, "WithinLimit"),
            ("a new storm during the cool-down", 0, 3, Some(memory(CoolingDown, 5, Some(65), None)), COOL, None, 30, memory(Open, 30, None, None), false, "ClusterStorm"),
            ("storm passes into the latch", 0, 0, Some(memory(Open, 1, None, None)), LATCH, Some("a"), 5, memory(Latched, 5, None, Some("a")), false, "Latched"),
            ("latched, annotation unchanged", 0, 0, Some(memory(Latched, 5, None, Some("a"))), LATCH, Some("a"), 500, memory(Latched, 5, None, Some("a")), false, "Latched"),
            ("latched, no annotation yet", 0, 0, Some(memory(Latched, 5, None, None)), LATCH, None, 500, memory(Latched, 5, None, None), false, "Latched"),
            ("re-armed with a new value", 0, 0, Some(memory(Latched, 5, None, Some("a"))), LATCH, Some("b"), 500, memory(Closed, 500, None, None), true, "WithinLimit"),
            ("re-armed by a first annotation", 0, 0, Some(memory(Latched, 5, None, None)), LATCH, Some("x"), 500, memory(Closed, 500, None, None), true, "WithinLimit"),
            ("removing the annotation is no re-arm", 0, 0, Some(memory(Latched, 5, None, Some("a"))), LATCH, None, 500, memory(Latched, 5, None, Some("a")), false, "Latched"),
            ("re-armed, then cool-down", 0, 0, Some(memory(Latched, 5, None, Some("a"))), BOTH, Some("b"), 500, memory(CoolingDown, 500, Some(560), None), true, "CoolingDown"),
            ("latch turned off releases", 0, 0, Some(memory(Latched, 5, None, Some("a"))), PLAIN, Some("a"), 500, memory(Closed, 500, None, None), true, "WithinLimit"),
            ("re-arm during the storm does nothing", 3, 3, Some(memory(Open, 1, None, None)), LATCH, Some("b"), 5, memory(Open, 1, None, None), false, "TooManyUnhealthyNodes"),
            ("a storm while latched reopens it", 0, 3, Some(memory(Latched, 5, None, Some("a"))), LATCH, Some("a"), 50, memory(Open, 50, None, None), false, "ClusterStorm"),
        ];
        for (case, own, cluster, previous, settings, token, now, want, want_rearmed, want_reason) in
            rows
        {
            let storm =
                advance(reading(own), reading(cluster), previous.as_ref(), settings, token, t(now));
            assert_eq!(storm.memory, want, "{case}");
            assert_eq!(storm.rearmed, want_rearmed, "{case}");
            assert_eq!(storm.reason(), want_reason, "{case}");
            assert_eq!(storm.holds(), want.state != Closed, "{case}");
            assert_eq!(storm.refusal().is_some(), storm.holds(), "{case}");
        }
    }

    #[test]
    fn cooldown_deadline_is_its_end() {
        let storm =
            advance(reading(0), reading(0), Some(&memory(Open, 0, None, None)), COOL, None, t(10));
        assert_eq!(storm.deadline(), Some(t(70)));
        assert_eq!(storm.refusal(), Some(NotEligible::CoolingDown { until: t(70) }));
        let calm = advance(reading(0), reading(0), None, COOL, None, t(10));
        assert_eq!(calm.deadline(), None);
    }

    #[test]
    fn notices_on_each_change_only() {
        let reasons = |storm: &Storm| -> Vec<&str> {
            transition_notices(storm).into_iter().map(|(reason, _)| reason).collect()
        };
        let open = advance(reading(0), reading(3), None, BOTH, Some("a"), t(1));
        let (reason, note) = transition_notices(&open).pop().expect("a notice");
        assert_eq!(reason, "CircuitOpen");
        assert!(note.contains("3 of 10 nodes in the cluster"), "{note}");
        assert!(note.contains("--max-unhealthy-nodes-in-cluster 2 = 2"), "{note}");
        let still = advance(reading(0), reading(3), Some(&open.memory), BOTH, None, t(2));
        assert!(reasons(&still).is_empty());
        let latched = advance(reading(0), reading(0), Some(&open.memory), BOTH, Some("a"), t(3));
        let (reason, note) = transition_notices(&latched).pop().expect("a notice");
        assert_eq!(reason, "CircuitLatched");
        assert!(note.contains(REARM_ANNOTATION), "{note}");
        assert!(note.contains("the storm passed at"), "{note}");
        let rearmed = advance(reading(0), reading(0), Some(&latched.memory), BOTH, Some("b"), t(4));
        assert_eq!(reasons(&rearmed), ["CircuitRearmed"]);
        let cooling = advance(reading(0), reading(0), Some(&rearmed.memory), BOTH, Some("b"), t(5));
        assert!(reasons(&cooling).is_empty(), "still cooling down");
        let closed = advance(reading(0), reading(0), Some(&rearmed.memory), BOTH, Some("b"), t(64));
        assert_eq!(reasons(&closed), ["CircuitClosed"]);
        // Without a cool-down, the re-arm closes the circuit at once: both are said.
        let at_once =
            advance(reading(0), reading(0), Some(&latched.memory), LATCH, Some("b"), t(4));
        assert_eq!(reasons(&at_once), ["CircuitRearmed", "CircuitClosed"]);
    }
}
