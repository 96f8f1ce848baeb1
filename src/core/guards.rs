//! The guards every destructive action passes, whatever rule proposed it: the policy not paused,
//! the circuit breaker (too many unhealthy nodes: no action at all), the global rate limit
//! (`rateLimit.actionsPerMinute`) and the per-owner budget (`maxPodsPerOwnerPerMinute`).
//!
//! Its own module so that a new rule cannot forget one and no rule spends them its own way: the
//! plan hands every candidate to one [`Guards`], oldest threshold first. The budgets are
//! sliding windows: at most `limit` actions in any [`RATE_WINDOW`], and the exact instant the
//! next slot frees, so the controller can requeue for it instead of polling.

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};

use super::duration::add;
use super::observed::{OwnerKey, PastAction};
use super::policy::{MaxUnhealthy, ValidatedPolicy};
use super::verdict::NotEligible;

/// The window of `rateLimit.actionsPerMinute` and `maxPodsPerOwnerPerMinute`.
pub const RATE_WINDOW: SignedDuration = SignedDuration::from_secs(60);

/// The actions that still occupy a slot at `now`, and the limit.
///
/// An action at `t` occupies a slot during `[t, t + 60s)`: at exactly `t + 60s` it has freed.
/// Actions dated in the future (clock skew) occupy a slot too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Sorted, oldest first.
    times: Vec<Timestamp>,
    limit: u32,
}

impl Window {
    /// The window at `now` over past action instants.
    pub fn new(past: impl IntoIterator<Item = Timestamp>, now: Timestamp, limit: u32) -> Self {
        let mut times: Vec<Timestamp> =
            past.into_iter().filter(|t| add(*t, RATE_WINDOW) > now).collect();
        times.sort();
        Window { times, limit }
    }

    /// Actions currently in the window.
    pub fn used(&self) -> usize {
        self.times.len()
    }

    /// Whether one more action fits now.
    pub fn has_room(&self) -> bool {
        self.times.len() < self.limit as usize
    }

    /// Records an action at `at`.
    pub fn record(&mut self, at: Timestamp) {
        let i = self.times.partition_point(|t| *t <= at);
        self.times.insert(i, at);
    }

    /// When the next slot frees: `None` if one is free now. With `n` actions in the window and a
    /// limit `l`, `n - l + 1` of them must leave it, the `(n - l)`-th oldest last.
    pub fn next_free(&self) -> Option<Timestamp> {
        let excess = self.times.len().checked_sub(self.limit as usize)?;
        self.times.get(excess).map(|t| add(*t, RATE_WINDOW))
    }
}

/// The storm guard's reading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Circuit {
    pub open: bool,
    pub unhealthy: u32,
    pub limit: u32,
    pub in_scope: u32,
    pub max_unhealthy: MaxUnhealthy,
}

impl Circuit {
    /// Decides the circuit: open when `unhealthy > limit`; exactly at the limit it stays closed.
    pub fn evaluate(unhealthy: u32, in_scope: u32, max_unhealthy: MaxUnhealthy) -> Self {
        let limit = max_unhealthy.limit(in_scope);
        Circuit { open: unhealthy > limit, unhealthy, limit, in_scope, max_unhealthy }
    }

    /// The explanation shown in the CircuitOpen condition and the plan.
    pub fn message(&self) -> String {
        let Circuit { unhealthy, limit, in_scope, max_unhealthy, .. } = self;
        let limit_text = match max_unhealthy {
            MaxUnhealthy::Count(_) => format!("maxUnhealthyNodes {limit}"),
            MaxUnhealthy::Percent(_) => {
                format!("maxUnhealthyNodes {max_unhealthy} of {in_scope} = {limit}")
            }
        };
        if self.open {
            format!(
                "{unhealthy} of {in_scope} selected nodes are unhealthy, more than {limit_text}: no action until it drops"
            )
        } else {
            format!("{unhealthy} of {in_scope} selected nodes are unhealthy, within {limit_text}")
        }
    }
}

/// The guards at one instant, spent candidate by candidate.
///
/// Each [`Guards::admit`] asks, in this order: is the policy paused, is the circuit open, is the
/// global rate limit used up, is the owner's budget used up. The first refusal is the verdict; an
/// admission takes a slot in both windows.
#[derive(Clone, Debug)]
pub struct Guards<'a> {
    paused: bool,
    /// Why the storm guard holds every action ([`super::storm::Storm::refusal`]), if it does.
    held: Option<NotEligible>,
    now: Timestamp,
    global: Window,
    per_owner_limit: u32,
    /// Past actions by owner, read when an owner first asks.
    per_owner_past: HashMap<&'a OwnerKey, Vec<Timestamp>>,
    owners: HashMap<OwnerKey, Window>,
    deadlines: Vec<Timestamp>,
}

impl<'a> Guards<'a> {
    /// The guards at `now`, over this policy's `recent` actions.
    /// `recent` are this policy's own actions (its rate limit); `others` those of the other
    /// policies in Enforce, which share the per-owner budgets: two overlapping policies must
    /// not double them.
    pub fn new(
        recent: &'a [PastAction],
        others: &'a [PastAction],
        policy: &ValidatedPolicy,
        held: Option<NotEligible>,
        now: Timestamp,
    ) -> Self {
        let mut per_owner_past: HashMap<&OwnerKey, Vec<Timestamp>> = HashMap::new();
        for past in recent.iter().chain(others) {
            if let Some(owner) = &past.owner {
                per_owner_past.entry(owner).or_default().push(past.at);
            }
        }
        Guards {
            paused: policy.paused,
            held,
            now,
            global: Window::new(recent.iter().map(|a| a.at), now, policy.actions_per_minute),
            per_owner_limit: policy.max_pods_per_owner_per_minute,
            per_owner_past,
            owners: HashMap::new(),
            deadlines: Vec::new(),
        }
    }

    /// Whether one more action on behalf of `owner` (`None`: a bare pod, which only counts
    /// globally) passes now; if so, it takes its slots.
    pub fn admit(&mut self, owner: Option<&OwnerKey>) -> Result<(), NotEligible> {
        match self.refusal(owner) {
            Some(reason) => {
                if let NotEligible::RateLimited { until } | NotEligible::OwnerBudget { until, .. } =
                    &reason
                {
                    self.deadlines.push(*until);
                }
                Err(reason)
            }
            None => {
                self.global.record(self.now);
                Ok(())
            }
        }
    }

    /// The instants at which a refused candidate gets a slot: the plan requeues for the earliest.
    pub fn deadlines(&self) -> &[Timestamp] {
        &self.deadlines
    }

    fn refusal(&mut self, owner: Option<&OwnerKey>) -> Option<NotEligible> {
        let now = self.now;
        let next_slot = |w: &Window| w.next_free().unwrap_or_else(|| add(now, RATE_WINDOW));
        if self.paused {
            Some(NotEligible::Paused)
        } else if let Some(held) = &self.held {
            Some(held.clone())
        } else if !self.global.has_room() {
            Some(NotEligible::RateLimited { until: next_slot(&self.global) })
        } else if let Some(owner) = owner {
            let window = self.owners.entry(owner.clone()).or_insert_with(|| {
                let past = self.per_owner_past.get(owner).into_iter().flatten().copied();
                Window::new(past, now, self.per_owner_limit)
            });
            if window.has_room() {
                window.record(now);
                None
            } else {
                Some(NotEligible::OwnerBudget { owner: owner.clone(), until: next_slot(window) })
            }
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RemediationPolicySpec;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("test timestamp")
    }

    #[test]
    fn window_table() {
        let now = ts("2026-01-01T00:10:00Z");
        struct Row {
            case: &'static str,
            past: &'static [&'static str],
            limit: u32,
            used: usize,
            has_room: bool,
            next_free: Option<&'static str>,
        }
        let table = [
            Row { case: "empty", past: &[], limit: 2, used: 0, has_room: true, next_free: None },
            Row {
                case: "one of two",
                past: &["2026-01-01T00:09:30Z"],
                limit: 2,
                used: 1,
                has_room: true,
                next_free: None,
            },
            Row {
                case: "full: oldest frees first",
                past: &["2026-01-01T00:09:45Z", "2026-01-01T00:09:30Z"],
                limit: 2,
                used: 2,
                has_room: false,
                next_free: Some("2026-01-01T00:10:30Z"),
            },
            Row {
                case: "exactly 60s old has left",
                past: &["2026-01-01T00:09:00Z"],
                limit: 1,
                used: 0,
                has_room: true,
                next_free: None,
            },
            Row {
                case: "59.999s old still counts",
                past: &["2026-01-01T00:09:00.001Z"],
                limit: 1,
                used: 1,
                has_room: false,
                next_free: Some("2026-01-01T00:10:00.001Z"),
            },
            Row {
                case: "over the limit (limit lowered): wait for enough to leave",
                past: &["2026-01-01T00:09:10Z", "2026-01-01T00:09:20Z", "2026-01-01T00:09:30Z"],
                limit: 1,
                used: 3,
                has_room: false,
                next_free: Some("2026-01-01T00:10:30Z"),
            },
            Row {
                case: "future action counts",
                past: &["2026-01-01T00:10:05Z"],
                limit: 1,
                used: 1,
                has_room: false,
                next_free: Some("2026-01-01T00:11:05Z"),
            },
        ];
        for r in table {
            let w = Window::new(r.past.iter().map(|s| ts(s)), now, r.limit);
            assert_eq!(w.used(), r.used, "{}", r.case);
            assert_eq!(w.has_room(), r.has_room, "{}", r.case);
            assert_eq!(w.next_free(), r.next_free.map(ts), "{}", r.case);
        }
    }

    #[test]
    fn recording_fills_the_window() {
        let now = ts("2026-01-01T00:10:00Z");
        let mut w = Window::new([ts("2026-01-01T00:09:50Z")], now, 3);
        w.record(now);
        assert!(w.has_room());
        w.record(now);
        assert!(!w.has_room());
        assert_eq!(w.next_free(), Some(ts("2026-01-01T00:10:50Z")));
    }

    #[test]
    fn the_rate_window_is_a_minute() {
        assert_eq!(add(ts("2026-01-01T00:00:00Z"), RATE_WINDOW), ts("2026-01-01T00:01:00Z"));
    }

    #[test]
    fn circuit_table() {
        struct Row {
            case: &'static str,
            unhealthy: u32,
            in_scope: u32,
            max_unhealthy: MaxUnhealthy,
            open: bool,
            limit: u32,
            message: &'static str,
        }
        let table = [
            Row {
                case: "count: at the limit stays closed",
                unhealthy: 2,
                in_scope: 5,
                max_unhealthy: MaxUnhealthy::Count(2),
                open: false,
                limit: 2,
                message: "2 of 5 selected nodes are unhealthy, within maxUnhealthyNodes 2",
            },
            Row {
                case: "count: one over opens",
                unhealthy: 3,
                in_scope: 5,
                max_unhealthy: MaxUnhealthy::Count(2),
                open: true,
                limit: 2,
                message: "3 of 5 selected nodes are unhealthy, more than maxUnhealthyNodes 2: \
                          no action until it drops",
            },
            Row {
                case: "percent rounds down",
                unhealthy: 4,
                in_scope: 13,
                max_unhealthy: MaxUnhealthy::Percent(30),
                open: true,
                limit: 3,
                message: "4 of 13 selected nodes are unhealthy, more than maxUnhealthyNodes 30% \
                          of 13 = 3: no action until it drops",
            },
            Row {
                case: "percent: at the limit stays closed",
                unhealthy: 3,
                in_scope: 10,
                max_unhealthy: MaxUnhealthy::Percent(30),
                open: false,
                limit: 3,
                message: "3 of 10 selected nodes are unhealthy, within maxUnhealthyNodes 30% of \
                          10 = 3",
            },
        ];
        for r in table {
            let c = Circuit::evaluate(r.unhealthy, r.in_scope, r.max_unhealthy);
            assert_eq!((c.open, c.limit), (r.open, r.limit), "{}", r.case);
            assert_eq!(c.message(), r.message, "{}", r.case);
        }
    }

    fn owner(name: &str) -> OwnerKey {
        OwnerKey { namespace: "default".into(), kind: "ReplicaSet".into(), name: name.into() }
    }

    #[test]
    fn guards_table() {
        // Now is 00:10:00; the default limits: 10 actions per minute, 5 per owner.
        let now = ts("2026-01-01T00:10:00Z");
        let at = |s: &str| ts(&format!("2026-01-01T{s}Z"));
        let past = |n: usize, from: &str, owner: Option<OwnerKey>| -> Vec<PastAction> {
            vec![PastAction { at: at(from), owner }; n]
        };
        struct Row {
            case: &'static str,
            paused: bool,
            unhealthy: u32,
            recent: Vec<PastAction>,
            /// Who asks, in order (`None`: a bare pod).
            asks: Vec<Option<OwnerKey>>,
            want: Vec<Result<(), NotEligible>>,
            deadlines: Vec<Timestamp>,
        }
        let row = |case, asks: Vec<Option<OwnerKey>>, want| Row {
            case,
            paused: false,
            unhealthy: 0,
            recent: vec![],
            asks,
            want,
            deadlines: vec![],
        };
        let web = || Some(owner("web"));
        let table = [
            row("nothing in the way", vec![web(), None], vec![Ok(()), Ok(())]),
            Row {
                case: "paused comes first",
                paused: true,
                unhealthy: 3,
                ..row("", vec![web()], vec![Err(NotEligible::Paused)])
            },
            Row {
                case: "then the circuit",
                unhealthy: 3,
                recent: past(10, "00:09:30", None),
                ..row(
                    "",
                    vec![web()],
                    vec![Err(NotEligible::CircuitOpen { unhealthy: 3, limit: 2 })],
                )
            },
            Row {
                case: "then the global rate limit, until the oldest slot frees",
                recent: past(9, "00:09:30", None),
                deadlines: vec![at("00:10:30"), at("00:10:30")],
                ..row(
                    "",
                    vec![None, web(), None],
                    vec![
                        Ok(()),
                        Err(NotEligible::RateLimited { until: at("00:10:30") }),
                        Err(NotEligible::RateLimited { until: at("00:10:30") }),
                    ],
                )
            },
            Row {
                case: "then the owner's budget, counting its history; others and bare pods pass",
                recent: past(4, "00:09:40", web()),
                deadlines: vec![at("00:10:40")],
                ..row(
                    "",
                    vec![web(), web(), Some(owner("other")), None],
                    vec![
                        Ok(()),
                        Err(NotEligible::OwnerBudget {
                            owner: owner("web"),
                            until: at("00:10:40"),
                        }),
                        Ok(()),
                        Ok(()),
                    ],
                )
            },
            Row {
                case: "admissions made now free their slots a minute from now",
                deadlines: vec![at("00:11:00")],
                ..row(
                    "",
                    vec![web(); 6],
                    vec![
                        Ok(()),
                        Ok(()),
                        Ok(()),
                        Ok(()),
                        Ok(()),
                        Err(NotEligible::OwnerBudget {
                            owner: owner("web"),
                            until: at("00:11:00"),
                        }),
                    ],
                )
            },
        ];
        let mut spec = RemediationPolicySpec::default();
        spec.safety.max_unhealthy_nodes =
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2);
        let policy = crate::core::validate(&spec).expect("valid test policy");
        for r in table {
            let policy = ValidatedPolicy { paused: r.paused, ..policy.clone() };
            let circuit = Circuit::evaluate(r.unhealthy, 10, policy.max_unhealthy);
            let held = circuit.open.then_some(NotEligible::CircuitOpen {
                unhealthy: circuit.unhealthy,
                limit: circuit.limit,
            });
            let mut guards = Guards::new(&r.recent, &[], &policy, held, now);
            let got: Vec<_> = r.asks.iter().map(|o| guards.admit(o.as_ref())).collect();
            assert_eq!(got, r.want, "{}", r.case);
            assert_eq!(guards.deadlines(), r.deadlines.as_slice(), "{}", r.case);
        }
    }
}
