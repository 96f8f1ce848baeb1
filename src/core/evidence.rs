//! When the operator's evidence about node liveness can be trusted, and since when.
//!
//! A node is judged dead from the *absence* of something: no Lease renewal seen for
//! `leaseStaleFor`. Absence is only evidence while renewals could have reached us. When etcd or
//! the API server stalls, when the network between us and the API server breaks, or when our
//! own process is paused, every Lease stops changing at once and every node would look dead.
//! The evidence window is the period during which our view of the Leases has been continuous;
//! every age the core computes starts no earlier than the window's start, so a stall of any
//! length restarts every node's clock instead of killing it.
//!
//! The thresholds, and why:
//! - A kubelet renews its Lease every quarter of its 40 s lease duration: every
//!   [`KUBELET_RENEW_PERIOD`] (10 s). While at least one kubelet is alive, a Lease event reaches
//!   us at least that often.
//! - [`LEASE_VIEW_SILENCE`] (15 s = the renewal period plus 5 s for API latency): a Lease watch
//!   silent for longer, in a cluster with nodes, is not a view of the cluster. Evidence is
//!   suspended until events resume, and the window restarts then.
//! - The smallest `leaseStaleFor` a policy may have is 40 s ([`crate::crd::MIN_LEASE_STALE_FOR`]).
//!   A live kubelet's last renewal before a stall is at most 10 s old when the stall begins, and
//!   the stall is noticed 15 s after the last event: a live node has been unseen for at most
//!   25 s when evidence is suspended, well below 40 s, so a stall can never make it dead.
//! - A drought: renewals stop for most of the kubelets that were renewing, but not all (a
//!   degraded etcd that lets a few writes through, a partition between kubelets and the API
//!   server). When more than half of the nodes whose renewals we saw in the last
//!   [`DROUGHT_LOOKBACK`] (40 s) are overdue by [`LEASE_VIEW_SILENCE`], and at least
//!   [`DROUGHT_MIN_NODES`] of them, evidence is suspended; when it ends, the window restarts. A
//!   real mass death ends the drought once the dead nodes age out of the lookback: it delays
//!   their judgement by about 40 s, and the circuit breaker (`maxUnhealthyNodes`) then decides.
//! - A kubelet configured with a longer Lease (`nodeLeaseDurationSeconds` above 40) renews every
//!   quarter of it, and says so in its Lease's `leaseDurationSeconds`: for its node, the drought's
//!   overdue mark and lookback move out by the difference ([`renew_period`]). Read with a fixed
//!   10 s, every such node would look overdue between renewals, and a cluster of them would be
//!   in a drought for good. A shorter Lease changes nothing: the 10 s stay the least.

use jiff::{SignedDuration, Timestamp};

use super::duration::format_duration;

/// How often a kubelet renews its Lease with the default 40 s lease duration.
pub const KUBELET_RENEW_PERIOD: SignedDuration = SignedDuration::from_secs(10);
/// A Lease view silent for longer than this is not a view of the cluster.
pub const LEASE_VIEW_SILENCE: SignedDuration = SignedDuration::from_secs(15);
/// Nodes whose renewal was seen within this lookback count as "were renewing" for droughts.
pub const DROUGHT_LOOKBACK: SignedDuration = SignedDuration::from_secs(40);
/// A drought needs at least this many overdue nodes (fewer is a few nodes dying).
pub const DROUGHT_MIN_NODES: usize = 3;

/// Renewals stopped for most kubelets at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drought {
    /// Nodes renewing within the lookback but not for [`LEASE_VIEW_SILENCE`].
    pub overdue: usize,
    /// Nodes whose renewal was seen within the lookback.
    pub renewing: usize,
}

/// How often a kubelet whose Lease declares `lease_duration_s` (`spec.leaseDurationSeconds`)
/// renews it: a quarter of that, and never less than [`KUBELET_RENEW_PERIOD`].
pub fn renew_period(lease_duration_s: Option<u16>) -> SignedDuration {
    let quarter = SignedDuration::from_secs(i64::from(lease_duration_s.unwrap_or(0)) / 4);
    quarter.max(KUBELET_RENEW_PERIOD)
}

/// Whether the renewals seen (per Lease: when we saw its last renewal, by our clock, and its
/// declared `leaseDurationSeconds`) show a drought at `now`.
pub fn lease_drought(
    seen: impl IntoIterator<Item = (Timestamp, Option<u16>)>,
    now: Timestamp,
) -> Option<Drought> {
    let (mut overdue, mut renewing) = (0, 0);
    for (t, declared) in seen {
        let age = now.duration_since(t);
        let longer = renew_period(declared) - KUBELET_RENEW_PERIOD;
        if age < DROUGHT_LOOKBACK + longer {
            renewing += 1;
            if age > LEASE_VIEW_SILENCE + longer {
                overdue += 1;
            }
        }
    }
    (overdue >= DROUGHT_MIN_NODES && overdue * 2 > renewing)
        .then_some(Drought { overdue, renewing })
}

/// Why no evidence is trusted at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Suspension {
    /// A watch has not completed its first list.
    NotSynced,
    /// The Lease watch failed and has not delivered since.
    LeaseWatchFailed,
    /// No Lease event for longer than [`LEASE_VIEW_SILENCE`] (since `last`).
    Silent { last: Timestamp },
    /// Renewals stopped for most kubelets at once.
    Drought(Drought),
}

impl std::fmt::Display for Suspension {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Suspension::NotSynced => write!(f, "watches not synced yet: no evidence is trusted"),
            Suspension::LeaseWatchFailed => {
                write!(f, "the Lease watch failed: no evidence is trusted until it delivers again")
            }
            Suspension::Silent { last } => write!(
                f,
                "no Lease renewal arrived since {last} (more than {}): an API server or etcd stall, \
                 or a broken connection, looks like every node dying; evidence restarts when \
                 renewals resume",
                format_duration(LEASE_VIEW_SILENCE)
            ),
            Suspension::Drought(Drought { overdue, renewing }) => write!(
                f,
                "{overdue} of the {renewing} kubelets renewing in the last {} stopped at once: \
                 treated as a control-plane stall, not deaths; evidence restarts when it ends",
                format_duration(DROUGHT_LOOKBACK)
            ),
        }
    }
}

/// The evidence window: since when the view of the Leases has been continuous.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EvidenceWindow {
    start: Option<Timestamp>,
    lease_broken: bool,
    last_lease_event: Option<Timestamp>,
    drought: Option<Drought>,
}

impl EvidenceWindow {
    /// The window restarts at `now` (never moves back).
    pub fn restart(&mut self, now: Timestamp) {
        self.start = Some(self.start.map_or(now, |t| t.max(now)));
    }

    /// A watch completed a (re)list at `now`: what it replaced may have changed unseen.
    pub fn listed(&mut self, lease_watch: bool, now: Timestamp) {
        if lease_watch {
            self.lease_broken = false;
            self.last_lease_event = Some(now);
        }
        self.restart(now);
    }

    /// The Lease watch reported an error. Returns whether this changed anything.
    pub fn lease_watch_failed(&mut self) -> bool {
        !std::mem::replace(&mut self.lease_broken, true)
    }

    /// A Lease event arrived at `now`. After a failure or a silence the window restarts.
    /// Returns whether it did.
    pub fn lease_event(&mut self, now: Timestamp, have_nodes: bool) -> bool {
        let restart = self.lease_broken || self.silent(now, have_nodes);
        self.lease_broken = false;
        self.last_lease_event = Some(now);
        if restart {
            self.restart(now);
        }
        restart
    }

    /// Records the drought reading at `now`; when a drought ends the window restarts. Returns
    /// whether the reading changed.
    pub fn drought(&mut self, now: Timestamp, drought: Option<Drought>) -> bool {
        let ended = self.drought.is_some() && drought.is_none();
        let changed = self.drought.is_some() != drought.is_some();
        self.drought = drought;
        if ended {
            self.restart(now);
        }
        changed
    }

    fn silent(&self, now: Timestamp, have_nodes: bool) -> bool {
        have_nodes
            && self.last_lease_event.is_some_and(|t| now.duration_since(t) > LEASE_VIEW_SILENCE)
    }

    /// The start of the window at `now`, or why no evidence is trusted. `synced`: every watch
    /// completed its first list; `have_nodes`: the cluster has nodes (so Leases should renew).
    pub fn since(
        &self,
        now: Timestamp,
        synced: bool,
        have_nodes: bool,
    ) -> Result<Timestamp, Suspension> {
        let Some(start) = self.start.filter(|_| synced) else {
            return Err(Suspension::NotSynced);
        };
        if self.lease_broken {
            return Err(Suspension::LeaseWatchFailed);
        }
        if let Some(last) = self.last_lease_event
            && self.silent(now, have_nodes)
        {
            return Err(Suspension::Silent { last });
        }
        if let Some(drought) = self.drought {
            return Err(Suspension::Drought(drought));
        }
        Ok(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u32) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + i64::from(s)).expect("test instant")
    }

    #[test]
    fn lease_drought_table() {
        struct Row {
            case: &'static str,
            /// Seconds before `now` at which each Lease was last seen renewed.
            ages: &'static [u32],
            want: Option<(usize, usize)>,
        }
        let now = at(1000);
        let table = [
            Row { case: "all fresh", ages: &[1, 2, 3, 4, 5], want: None },
            Row { case: "one node dies", ages: &[20, 1, 2, 3, 4], want: None },
            Row {
                case: "two of three stop: below the minimum count",
                ages: &[20, 20, 1],
                want: None,
            },
            Row { case: "three of four stop at once", ages: &[16, 17, 18, 1], want: Some((3, 4)) },
            Row { case: "exactly half is not most", ages: &[16, 17, 18, 1, 2, 3], want: None },
            Row {
                case: "etcd stall: every renewal overdue",
                ages: &[16, 17, 18, 19, 20],
                want: Some((5, 5)),
            },
            Row {
                case: "long-dead nodes left the lookback",
                ages: &[40, 50, 500, 1, 2],
                want: None,
            },
            Row { case: "at exactly the silence, not overdue", ages: &[15, 15, 15], want: None },
            Row { case: "no Leases", ages: &[], want: None },
        ];
        for r in table {
            let seen = r.ages.iter().map(|a| (at(1000 - a), Some(40)));
            let got = lease_drought(seen, now).map(|d| (d.overdue, d.renewing));
            assert_eq!(got, r.want, "{}", r.case);
        }
    }

    /// Kubelets with longer Leases renew less often: their renewals are read against their own
    /// period (a quarter of `leaseDurationSeconds`, at least 10 s).
    #[test]
    fn lease_drought_reads_each_lease_against_its_own_period() {
        let now = at(1000);
        /// Per Lease: seconds since its renewal, and its leaseDurationSeconds.
        type Leases = &'static [(u32, Option<u16>)];
        /// The drought wanted, as (overdue, renewing).
        type Want = Option<(usize, usize)>;
        let table: &[(&str, Leases, Want)] = &[
            (
                "120 s Leases renewing every 30 s, between renewals: no drought",
                &[(20, Some(120)), (25, Some(120)), (29, Some(120)), (5, Some(120))],
                None,
            ),
            (
                "the same ages on 40 s Leases: a drought",
                &[(20, Some(40)), (25, Some(40)), (29, Some(40)), (5, Some(40))],
                Some((3, 4)),
            ),
            (
                "120 s Leases all stopped 36 s ago: a drought",
                &[(36, Some(120)), (37, Some(120)), (38, Some(120)), (5, Some(120))],
                Some((3, 4)),
            ),
            (
                "no declared duration reads as the kubelet's 40 s",
                &[(20, None), (25, None), (29, None), (5, None)],
                Some((3, 4)),
            ),
            (
                "a shorter Lease is read as 40 s: its 2 s period would flag more",
                &[(8, Some(8)), (9, Some(8)), (10, Some(8)), (5, Some(8))],
                None,
            ),
        ];
        for (case, leases, want) in table {
            let seen = leases.iter().map(|(a, d)| (at(1000 - a), *d));
            let got = lease_drought(seen, now).map(|d| (d.overdue, d.renewing));
            assert_eq!(got, *want, "{case}");
        }
        assert_eq!(renew_period(Some(120)), SignedDuration::from_secs(30));
        assert_eq!(renew_period(None), KUBELET_RENEW_PERIOD);
        assert_eq!(renew_period(Some(u16::MAX)), SignedDuration::from_secs(16383));
    }

    /// One step of a window's history.
    enum Step {
        Listed {
            lease: bool,
            at: u32,
        },
        LeaseEvent {
            at: u32,
        },
        LeaseFailed,
        DroughtReading {
            at: u32,
            on: bool,
        },
        /// Expect `since(at)`: `Ok(start)` or the suspension's variant name.
        Expect {
            at: u32,
            synced: bool,
            want: Result<u32, &'static str>,
        },
    }

    #[test]
    fn evidence_window_histories() {
        use Step::*;
        let dry = Some(super::Drought { overdue: 3, renewing: 4 });
        let histories: &[(&str, &[Step])] = &[
            (
                "fresh start: nothing until the lists complete, then from the last list",
                &[
                    Expect { at: 0, synced: false, want: Err("NotSynced") },
                    Listed { lease: true, at: 1 },
                    Listed { lease: false, at: 3 },
                    Expect { at: 5, synced: true, want: Ok(3) },
                ],
            ),
            (
                "steady renewals keep the window",
                &[
                    Listed { lease: true, at: 0 },
                    LeaseEvent { at: 10 },
                    LeaseEvent { at: 20 },
                    Expect { at: 30, synced: true, want: Ok(0) },
                ],
            ),
            (
                "a 50 s stall: suspended after 15 s, window restarts at the resume",
                &[
                    Listed { lease: true, at: 0 },
                    LeaseEvent { at: 10 },
                    Expect { at: 25, synced: true, want: Ok(0) },
                    Expect { at: 26, synced: true, want: Err("Silent") },
                    Expect { at: 59, synced: true, want: Err("Silent") },
                    LeaseEvent { at: 60 },
                    Expect { at: 61, synced: true, want: Ok(60) },
                ],
            ),
            (
                "a failed Lease watch suspends until it delivers again",
                &[
                    Listed { lease: true, at: 0 },
                    LeaseFailed,
                    Expect { at: 1, synced: true, want: Err("LeaseWatchFailed") },
                    LeaseEvent { at: 4 },
                    Expect { at: 5, synced: true, want: Ok(4) },
                ],
            ),
            (
                "a drought suspends; its end restarts the window",
                &[
                    Listed { lease: true, at: 0 },
                    LeaseEvent { at: 20 },
                    DroughtReading { at: 30, on: true },
                    Expect { at: 30, synced: true, want: Err("Drought") },
                    LeaseEvent { at: 35 },
                    DroughtReading { at: 50, on: false },
                    Expect { at: 50, synced: true, want: Ok(50) },
                ],
            ),
            (
                "the window never moves back",
                &[
                    Listed { lease: true, at: 10 },
                    Listed { lease: false, at: 5 },
                    Expect { at: 11, synced: true, want: Ok(10) },
                ],
            ),
        ];
        for (case, steps) in histories {
            let mut w = EvidenceWindow::default();
            for (i, step) in steps.iter().enumerate() {
                match step {
                    Listed { lease, at: t } => w.listed(*lease, at(*t)),
                    LeaseEvent { at: t } => {
                        w.lease_event(at(*t), true);
                    }
                    LeaseFailed => {
                        w.lease_watch_failed();
                    }
                    DroughtReading { at: t, on } => {
                        w.drought(at(*t), if *on { dry } else { None });
                    }
                    Expect { at: t, synced, want } => {
                        let got = w.since(at(*t), *synced, true).map_err(|s| match s {
                            Suspension::NotSynced => "NotSynced",
                            Suspension::LeaseWatchFailed => "LeaseWatchFailed",
                            Suspension::Silent { .. } => "Silent",
                            Suspension::Drought(_) => "Drought",
                        });
                        assert_eq!(got, want.map(at), "{case}, step {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn no_nodes_no_silence() {
        let mut w = EvidenceWindow::default();
        w.listed(true, at(0));
        assert_eq!(w.since(at(100), true, false), Ok(at(0)));
        assert!(!w.lease_event(at(100), false));
    }
}
