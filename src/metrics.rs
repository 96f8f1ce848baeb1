//! Prometheus metrics. Labels are bounded (policy, action, mode, result, node state, error
//! category): never object names.

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::core::NodeState;
use crate::core::rollouts::{BlockCause, WorkloadKind};
use crate::crd::{ActionKind, ActionResult, Mode};
use crate::error::ErrorCategory;
use crate::safety::Invariant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub policy: String,
    pub action: ActionKind,
    pub mode: Mode,
    pub result: ActionResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DelayLabels {
    pub policy: String,
    pub action: ActionKind,
    pub mode: Mode,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StuckLabels {
    pub policy: String,
    pub node_state: Label<NodeState>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CauseLabels {
    pub policy: String,
    /// A [`crate::core::live_node_cause::StuckCause`] code.
    pub cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvariantLabels {
    pub invariant: Label<Invariant>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BlockedLabels {
    pub kind: Label<WorkloadKind>,
    pub cause: Label<BlockCause>,
}

/// A label value from one of the core's enums, which stay free of the metrics crate: encoded
/// by the name their `strum` derive gives them.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Label<T>(pub T);

impl<T: Copy + Into<&'static str>> EncodeLabelValue for Label<T> {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelValueEncoder<'_>,
    ) -> Result<(), std::fmt::Error> {
        let name: &'static str = self.0.into();
        EncodeLabelValue::encode(&name, encoder)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub category: ErrorCategory,
}

/// A write the writer refused to send because this replica does not hold the leader Lease.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
pub enum WriteKind {
    DeletePod,
    PatchPod,
    PatchPodStatus,
    EvictPod,
    PatchNode,
    DeleteNode,
    PatchStatus,
    Event,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub write: WriteKind,
}

type DelayHistogram = Family<DelayLabels, Histogram, fn() -> Histogram>;

/// Every metric the operator exports, registered once per process.
pub struct Metrics {
    registry: Registry,
    /// Actions taken (Enforce) or recorded (DryRun), by result.
    pub actions: Family<ActionLabels, Counter>,
    /// Time from an action's threshold instant to the action.
    pub action_delay: DelayHistogram,
    /// Pods Terminating past their deletionTimestamp on the policy's nodes, by node state.
    pub stuck_pods: Family<StuckLabels, Gauge>,
    /// 1 while the policy's circuit breaker is open (too many unhealthy nodes).
    pub circuit_open: Family<PolicyLabels, Gauge>,
    /// 1 while the policy's spec is invalid.
    pub policy_invalid: Family<PolicyLabels, Gauge>,
    /// Pods on dead nodes held because their node lacks fencing evidence.
    pub pods_needing_fencing: Family<PolicyLabels, Gauge>,
    /// Pods stuck Terminating on live nodes, by diagnosed cause.
    pub live_node_stuck: Family<CauseLabels, Gauge>,
    /// Pods left Ready=False after a node blip.
    pub stale_ready: Family<PolicyLabels, Gauge>,
    /// Pods left Ready=True on dead nodes.
    pub ready_on_dead_node: Family<PolicyLabels, Gauge>,
    /// Reconcile failures by error category.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// How long each policy reconcile took, from reading the state to writing the status.
    pub reconcile_duration: Histogram,
    /// Writes not sent because this replica did not hold the leader Lease at that instant.
    pub writes_refused_not_leader: Family<WriteLabels, Counter>,
    /// Writes the safety kernel refused, by invariant: each one a defect of the rules.
    pub safety_refusals: Family<InvariantLabels, Counter>,
    /// Recreate Deployments and StatefulSets blocked by Terminating pods, by kind and cause.
    pub blocked_rollouts: Family<BlockedLabels, Gauge>,
    /// Nodes and Terminating pods in the operator's compact cache.
    pub cached_nodes: Gauge,
    pub cached_terminating_pods: Gauge,
    /// Whether every watch has completed its initial list (1) or not (0).
    pub caches_synced: Gauge,
    /// 1 while this replica holds the leader Lease (or leader election is off) and may act.
    pub leader: Gauge,
    /// Pauses of this replica's leadership: it led, no renewal of the Lease was stored within
    /// the renew deadline, and it stopped acting until a renewal proved the Lease still its own.
    pub leader_pauses: Counter,
    /// The process's resident memory now and at its peak (Linux: VmRSS and VmHWM of
    /// /proc/self/status), read at each scrape.
    pub resident_memory: Gauge,
    pub peak_resident_memory: Gauge,
}

/// VmRSS and VmHWM, in bytes, from the text of /proc/<pid>/status (they are in kB there).
fn memory_from_proc_status(status: &str) -> (Option<i64>, Option<i64>) {
    let field = |name: &str| {
        status.lines().find_map(|l| {
            let kb = l.strip_prefix(name)?.trim().strip_suffix("kB")?.trim();
            kb.parse::<i64>().ok().map(|kb| kb * 1024)
        })
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn delay_histogram() -> Histogram {
    Histogram::new([0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let m = Metrics {
            actions: Family::default(),
            action_delay: Family::new_with_constructor(delay_histogram as fn() -> Histogram),
            stuck_pods: Family::default(),
            circuit_open: Family::default(),
            policy_invalid: Family::default(),
            pods_needing_fencing: Family::default(),
            live_node_stuck: Family::default(),
            stale_ready: Family::default(),
            ready_on_dead_node: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
            ]),
            writes_refused_not_leader: Family::default(),
            safety_refusals: Family::default(),
            blocked_rollouts: Family::default(),
            cached_nodes: Gauge::default(),
            cached_terminating_pods: Gauge::default(),
            caches_synced: Gauge::default(),
            leader: Gauge::default(),
            leader_pauses: Counter::default(),
            resident_memory: Gauge::default(),
            peak_resident_memory: Gauge::default(),
            registry: Registry::default(),
        };
        // Every invariant's series exists from the start, at 0, so that an alert on its
        // increase sees the first refusal.
        for invariant in <Invariant as strum::IntoEnumIterator>::iter() {
            drop(m.safety_refusals.get_or_create(&InvariantLabels { invariant: Label(invariant) }));
        }
        // Likewise every error category's: the dashboard's error rate reads 0, not "No data",
        // until the first error.
        for category in <ErrorCategory as strum::IntoEnumIterator>::iter() {
            drop(m.reconcile_errors.get_or_create(&ErrorLabels { category }));
        }
        Metrics { registry: m.register(), ..m }
    }

    /// A registry holding every metric, with its help text.
    fn register(&self) -> Registry {
        let mut r = Registry::with_prefix("kube_remediator");
        let m = self;
        r.register(
            "actions",
            "Remediation actions by policy, action, mode (DryRun records, Enforce acts) and result",
            m.actions.clone(),
        );
        r.register(
            "action_delay_seconds",
            "Seconds from the instant an action became due (its threshold) to the action",
            m.action_delay.clone(),
        );
        r.register(
            "stuck_terminating_pods",
            "Pods Terminating past their deletionTimestamp on a policy's nodes, by node state",
            m.stuck_pods.clone(),
        );
        r.register(
            "circuit_open",
            "1 while a policy takes no destructive action because too many nodes are unhealthy",
            m.circuit_open.clone(),
        );
        r.register(
            "pods_needing_fencing",
            "Pods on a policy's dead nodes held because their node lacks fencing evidence",
            m.pods_needing_fencing.clone(),
        );
        r.register(
            "live_node_stuck_pods",
            "Pods stuck Terminating on a policy's live (Ready) nodes, by diagnosed cause",
            m.live_node_stuck.clone(),
        );
        r.register(
            "stale_ready_pods",
            "Pods on a policy's nodes left Ready=False after a node blip while every container is ready",
            m.stale_ready.clone(),
        );
        r.register(
            "ready_on_dead_node_pods",
            "Pods on a policy's dead nodes left Ready=True, still in their Services' endpoints",
            m.ready_on_dead_node.clone(),
        );
        r.register(
            "policy_invalid",
            "1 while a policy's spec is invalid",
            m.policy_invalid.clone(),
        );
        r.register(
            "reconcile_errors",
            "Reconcile failures by error category",
            m.reconcile_errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Seconds each policy reconcile took, from reading the state to writing the status",
            m.reconcile_duration.clone(),
        );
        r.register(
            "writes_refused_not_leader",
            "Writes not sent because this replica did not hold the leader Lease, by kind of write",
            m.writes_refused_not_leader.clone(),
        );
        r.register(
            "safety_refusals",
            "Writes the safety kernel refused right before sending them, by invariant (each one \
             a defect of the rules: see the Event SafetyRefused)",
            m.safety_refusals.clone(),
        );
        r.register(
            "blocked_rollouts",
            "Recreate Deployments and StatefulSets blocked by Terminating pods, by kind and cause",
            m.blocked_rollouts.clone(),
        );
        r.register("cached_nodes", "Nodes in the operator's compact cache", m.cached_nodes.clone());
        r.register(
            "cached_terminating_pods",
            "Terminating pods in the operator's compact cache",
            m.cached_terminating_pods.clone(),
        );
        r.register(
            "caches_synced",
            "1 once every watch has completed its initial list",
            m.caches_synced.clone(),
        );
        r.register(
            "leader",
            "1 while this replica holds the leader Lease (or leader election is off) and may act",
            m.leader.clone(),
        );
        r.register(
            "leader_pauses",
            "Times this replica, leading, stopped acting because no renewal of the leader Lease \
             was stored within the renew deadline (until a renewal proved the Lease still its own)",
            m.leader_pauses.clone(),
        );
        r.register(
            "resident_memory_bytes",
            "The process's resident memory (VmRSS), read at each scrape",
            m.resident_memory.clone(),
        );
        r.register(
            "peak_resident_memory_bytes",
            "The process's peak resident memory since it started (VmHWM), read at each scrape",
            m.peak_resident_memory.clone(),
        );
        r
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        if let Ok(status) = std::fs::read_to_string("/proc/self/status") {
            let (rss, peak) = memory_from_proc_status(&status);
            self.resident_memory.set(rss.unwrap_or(0));
            self.peak_resident_memory.set(peak.unwrap_or(0));
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Drops every series of a policy that no longer exists.
    pub fn forget_policy(&self, policy: &str) {
        self.circuit_open.remove(&PolicyLabels { policy: policy.to_string() });
        self.policy_invalid.remove(&PolicyLabels { policy: policy.to_string() });
        self.pods_needing_fencing.remove(&PolicyLabels { policy: policy.to_string() });
        self.stale_ready.remove(&PolicyLabels { policy: policy.to_string() });
        self.ready_on_dead_node.remove(&PolicyLabels { policy: policy.to_string() });
        for cause in crate::core::live_node_cause::StuckCause::CODES {
            self.live_node_stuck.remove(&CauseLabels { policy: policy.to_string(), cause });
        }
        for state in [NodeState::Healthy, NodeState::Unhealthy, NodeState::Dead] {
            self.stuck_pods
                .remove(&StuckLabels { policy: policy.to_string(), node_state: Label(state) });
        }
        use strum::IntoEnumIterator;
        for (action, mode) in ActionKind::iter().flat_map(|a| Mode::iter().map(move |m| (a, m))) {
            let policy = policy.to_string();
            self.action_delay.remove(&DelayLabels { policy: policy.clone(), action, mode });
            for result in ActionResult::iter() {
                let labels = ActionLabels { policy: policy.clone(), action, mode, result };
                self.actions.remove(&labels);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_policy_leaves_no_series() {
        let m = Metrics::new();
        for policy in ["gone", "kept"] {
            let labels = |action, result| ActionLabels {
                policy: policy.into(),
                action,
                mode: Mode::Enforce,
                result,
            };
            m.actions.get_or_create(&labels(ActionKind::Evict, ActionResult::Skipped)).inc();
            m.actions.get_or_create(&labels(ActionKind::ForceDelete, ActionResult::Done)).inc();
            let delay = DelayLabels {
                policy: policy.into(),
                action: ActionKind::Cordon,
                mode: Mode::DryRun,
            };
            m.action_delay.get_or_create(&delay).observe(0.1);
            m.circuit_open.get_or_create(&PolicyLabels { policy: policy.into() }).set(1);
            m.stale_ready.get_or_create(&PolicyLabels { policy: policy.into() }).set(2);
            let cause = CauseLabels { policy: policy.into(), cause: "Finalizers" };
            m.live_node_stuck.get_or_create(&cause).set(1);
        }
        m.forget_policy("gone");
        let text = m.encode();
        assert!(!text.contains("policy=\"gone\""), "{text}");
        assert!(text.contains("policy=\"kept\""), "{text}");
    }

    #[test]
    fn encodes_labelled_series_with_prefix() {
        let m = Metrics::new();
        m.actions
            .get_or_create(&ActionLabels {
                policy: "p".into(),
                action: ActionKind::ForceDelete,
                mode: Mode::DryRun,
                result: ActionResult::WouldAct,
            })
            .inc();
        m.action_delay
            .get_or_create(&DelayLabels {
                policy: "p".into(),
                action: ActionKind::ForceDelete,
                mode: Mode::DryRun,
            })
            .observe(0.03);
        let text = m.encode();
        assert!(
            text.contains(
                r#"kube_remediator_actions_total{policy="p",action="ForceDelete",mode="DryRun",result="WouldAct"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains("kube_remediator_action_delay_seconds_bucket"), "{text}");
        m.blocked_rollouts
            .get_or_create(&BlockedLabels {
                kind: Label(WorkloadKind::Deployment),
                cause: Label(BlockCause::NodeUnhealthy),
            })
            .set(2);
        let text = m.encode();
        assert!(
            text.contains(
                r#"kube_remediator_blocked_rollouts{kind="Deployment",cause="NodeUnhealthy"} 2"#
            ),
            "{text}"
        );
        m.writes_refused_not_leader
            .get_or_create(&WriteLabels { write: WriteKind::DeletePod })
            .inc();
        m.reconcile_errors.get_or_create(&ErrorLabels { category: ErrorCategory::Timeout }).inc();
        let text = m.encode();
        assert!(
            text.contains(
                r#"kube_remediator_writes_refused_not_leader_total{write="DeletePod"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"kube_remediator_reconcile_errors_total{category="Timeout"} 1"#),
            "{text}"
        );
        assert!(text.contains("# EOF"), "{text}");
    }

    #[test]
    fn bounded_counters_exist_at_zero_from_the_start() {
        let text = Metrics::new().encode();
        for series in [
            r#"kube_remediator_reconcile_errors_total{category="ApiRead"} 0"#,
            r#"kube_remediator_reconcile_errors_total{category="Timeout"} 0"#,
            r#"kube_remediator_safety_refusals_total{invariant="Enforcing"} 0"#,
        ] {
            assert!(text.contains(series), "no {series} in:\n{text}");
        }
    }

    #[test]
    fn memory_is_read_from_proc_status() {
        let status = "Name:\tkube-remediator\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(memory_from_proc_status(status), (Some(10 << 20), Some(20 << 20)));
        assert_eq!(memory_from_proc_status("Name:\tx\n"), (None, None));
        let live = Metrics::new().encode();
        assert!(live.contains("kube_remediator_resident_memory_bytes "), "{live}");
    }
}
