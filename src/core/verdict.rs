//! The verdicts: whether a Terminating pod is released now and, when it is not, why not
//! (descheduler-style: a reason, not a bool).
//!
//! Its own module because every part of the core speaks it: the release gates of the rules and
//! the guards both answer with a [`NotEligible`], the plan carries one [`PodDecision`] per pod,
//! and the status, the metrics and the CLI report their codes and sentences.

use std::fmt;

use jiff::Timestamp;

use super::observed::OwnerKey;
use crate::crd::FencingRequirement;

/// Why a Terminating pod is not released now. Descheduler-style: a reason, not a bool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotEligible {
    /// The watches are not synced: no evidence is trusted.
    CachesNotSynced,
    /// The Lease view stalled or failed (see [`Suspension`](super::evidence::Suspension)): no evidence is trusted.
    EvidenceSuspended { why: String },
    /// `stuckTerminating.enabled` is false.
    RuleDisabled,
    /// The pod is annotated `remediator.io/exclude: "true"`.
    PodExcluded,
    /// The pod's node is annotated `remediator.io/exclude: "true"`.
    NodeExcluded,
    /// Mirror pods belong to the kubelet.
    MirrorPod,
    /// DaemonSet pods belong to their node.
    DaemonSetPod,
    /// The owner kind is not in `ownerKinds` (or not selectable at all).
    OwnerKindNotSelected { kind: String },
    /// The namespace's labels do not match `namespaceSelector`.
    NamespaceNotSelected,
    /// The pod's labels do not match `podSelector`.
    PodNotSelected,
    /// This policy already acted on this pod (see
    /// [`Observed::acted_pods`](super::observed::Observed::acted_pods)).
    AlreadyActed,
    /// The node is not dead; `until` is when it will be if nothing changes.
    NodeNotDead { until: Option<Timestamp>, why: String },
    /// The pod needs fencing evidence and its node has none.
    NeedsFencing { because: FencingRequirement },
    /// `deletionTimestamp + delayAfterGrace` has not passed.
    WithinDelay { until: Timestamp },
    /// Stuck on a live node (liveNodeStuck): reported; `action_at` is when the policy's opt-in
    /// release comes, if it has one.
    StuckOnLiveNode { cause: &'static str, detail: String, action_at: Option<Timestamp> },
    /// Finalizers hold the pod: a force delete would not remove it. `names`: the ones that are
    /// not removable (or, when all are, the removable ones, not due yet).
    HeldByFinalizers { names: Vec<String> },
    /// Its node is in maintenance (a node lifecycle condition; `nodeLifecycle.maintenance`).
    InMaintenance { why: String },
    /// Its node is shutting down gracefully; nothing before `until`
    /// (`nodeLifecycle.gracefulShutdownGrace`).
    ShuttingDown { until: Timestamp, why: String },
    /// `spec.paused`.
    Paused,
    /// Too many unhealthy nodes among the policy's own.
    CircuitOpen { unhealthy: u32, limit: u32 },
    /// Too many unhealthy nodes in the whole cluster (`--max-unhealthy-nodes-in-cluster`).
    ClusterStorm { unhealthy: u32, limit: u32 },
    /// The circuit opened and is latched (`safety.latch`) until an admin re-arms it.
    CircuitLatched,
    /// The storm has passed; the circuit stays open until `until` (`safety.cooldown`).
    CoolingDown { until: Timestamp },
    /// Every node of the pod's zone is unhealthy: a partition, not deaths.
    ZonePartitioned { zone: String, nodes: u32 },
    /// The pod's zone is coming back from a partition; held until `until`.
    ZoneReturning { zone: String, nodes: u32, until: Timestamp },
    /// `rateLimit.actionsPerMinute` is used up until `until`.
    RateLimited { until: Timestamp },
    /// `maxPodsPerOwnerPerMinute` is used up for this owner until `until`.
    OwnerBudget { owner: OwnerKey, until: Timestamp },
    /// The last `failures` attempts failed; the next one comes at `until`.
    BackingOff { failures: u32, until: Timestamp },
}

impl NotEligible {
    /// A bounded CamelCase code, for metrics, Events and tables.
    pub fn code(&self) -> &'static str {
        match self {
            NotEligible::CachesNotSynced => "CachesNotSynced",
            NotEligible::EvidenceSuspended { .. } => "EvidenceSuspended",
            NotEligible::RuleDisabled => "RuleDisabled",
            NotEligible::PodExcluded => "PodExcluded",
            NotEligible::NodeExcluded => "NodeExcluded",
            NotEligible::MirrorPod => "MirrorPod",
            NotEligible::DaemonSetPod => "DaemonSetPod",
            NotEligible::OwnerKindNotSelected { .. } => "OwnerKindNotSelected",
            NotEligible::NamespaceNotSelected => "NamespaceNotSelected",
            NotEligible::PodNotSelected => "PodNotSelected",
            NotEligible::AlreadyActed => "AlreadyActed",
            NotEligible::NodeNotDead { .. } => "NodeNotDead",
            NotEligible::NeedsFencing { .. } => "NeedsFencing",
            NotEligible::WithinDelay { .. } => "WithinDelay",
            NotEligible::StuckOnLiveNode { .. } => "StuckOnLiveNode",
            NotEligible::HeldByFinalizers { .. } => "HeldByFinalizers",
            NotEligible::InMaintenance { .. } => "InMaintenance",
            NotEligible::ShuttingDown { .. } => "ShuttingDown",
            NotEligible::Paused => "Paused",
            NotEligible::CircuitOpen { .. } => "CircuitOpen",
            NotEligible::ClusterStorm { .. } => "ClusterStorm",
            NotEligible::CircuitLatched => "CircuitLatched",
            NotEligible::CoolingDown { .. } => "CoolingDown",
            NotEligible::ZonePartitioned { .. } => "ZonePartitioned",
            NotEligible::ZoneReturning { .. } => "ZoneReturning",
            NotEligible::RateLimited { .. } => "RateLimited",
            NotEligible::OwnerBudget { .. } => "OwnerBudget",
            NotEligible::BackingOff { .. } => "BackingOff",
        }
    }
}

impl fmt::Display for NotEligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotEligible::CachesNotSynced => {
                write!(f, "watches not synced yet: no evidence is trusted")
            }
            NotEligible::EvidenceSuspended { why } => write!(f, "{why}"),
            NotEligible::RuleDisabled => write!(
                f,
                "stuckTerminating is disabled in this policy (and recreateRollouts does not apply)"
            ),
            NotEligible::PodExcluded => write!(f, "pod annotated remediator.io/exclude=true"),
            NotEligible::NodeExcluded => write!(f, "node annotated remediator.io/exclude=true"),
            NotEligible::MirrorPod => write!(f, "mirror (static) pods are never touched"),
            NotEligible::DaemonSetPod => write!(f, "DaemonSet pods are never touched"),
            NotEligible::OwnerKindNotSelected { kind } => {
                write!(f, "owner kind {kind} is not in ownerKinds")
            }
            NotEligible::NamespaceNotSelected => {
                write!(f, "namespace not selected by namespaceSelector")
            }
            NotEligible::PodNotSelected => write!(f, "pod not selected by podSelector"),
            NotEligible::AlreadyActed => {
                write!(f, "already acted on (by this policy, or by another one in Enforce)")
            }
            NotEligible::NodeNotDead { until: Some(t), why } => {
                write!(f, "node not dead before {t}: {why}")
            }
            NotEligible::NodeNotDead { until: None, why } => write!(f, "node not dead: {why}"),
            NotEligible::NeedsFencing { because } => {
                let who = match because {
                    FencingRequirement::StatefulSet => "StatefulSet pods",
                    FencingRequirement::ReadWriteOnce => "pods with ReadWriteOnce volumes",
                    _ => "all pods",
                };
                write!(f, "{who} need fencing evidence (requireFencingFor) and the node has none")
            }
            NotEligible::WithinDelay { until } => {
                write!(f, "deletionTimestamp + delayAfterGrace not reached until {until}")
            }
            NotEligible::StuckOnLiveNode { cause, detail, action_at: Some(at) } => {
                write!(f, "stuck on a live node ({cause}): {detail}; released at {at}")
            }
            NotEligible::StuckOnLiveNode { cause, detail, action_at: None } => write!(
                f,
                "stuck on a live node ({cause}): {detail}; reported only (liveNodeStuck.forceDeleteAfter not set)"
            ),
            NotEligible::HeldByFinalizers { names } => write!(
                f,
                "held by finalizer(s) {}: a force delete would not remove it; only finalizers \
                 listed in finalizers.removable are removed",
                names.join(", ")
            ),
            NotEligible::InMaintenance { why } | NotEligible::ShuttingDown { why, .. } => {
                write!(f, "{why}")
            }
            NotEligible::Paused => write!(f, "policy paused"),
            NotEligible::ZonePartitioned { zone, nodes } => write!(
                f,
                "all {nodes} nodes of zone {zone:?} are unhealthy: that looks like a partition, \
                 not deaths (upstream's full disruption); no destructive action there until they \
                 come back"
            ),
            NotEligible::ZoneReturning { zone, nodes, until } => write!(
                f,
                "zone {zone:?} ({nodes} nodes) is coming back from a partition: the nodes still \
                 out are most likely on their way back; no destructive action there before \
                 {until}"
            ),
            NotEligible::CircuitOpen { unhealthy, limit } => {
                write!(
                    f,
                    "circuit open: {unhealthy} unhealthy nodes exceed maxUnhealthyNodes ({limit})"
                )
            }
            NotEligible::ClusterStorm { unhealthy, limit } => write!(
                f,
                "cluster-wide storm: {unhealthy} unhealthy nodes in the cluster exceed \
                 --max-unhealthy-nodes-in-cluster ({limit})"
            ),
            NotEligible::CircuitLatched => write!(
                f,
                "circuit latched (safety.latch) until an admin re-arms it (annotation \
                 remediator.io/rearm-circuit)"
            ),
            NotEligible::CoolingDown { until } => {
                write!(f, "the storm has passed; cooling down (safety.cooldown) until {until}")
            }
            NotEligible::RateLimited { until } => {
                write!(f, "rateLimit.actionsPerMinute used up; next slot at {until}")
            }
            NotEligible::OwnerBudget { owner, until } => {
                write!(f, "maxPodsPerOwnerPerMinute used up for {owner}; next slot at {until}")
            }
            NotEligible::BackingOff { failures, until } => write!(
                f,
                "the last {failures} attempt(s) were not done (failed, or refused or skipped \
                 by the last look); the next one at {until} (the wait doubles from 10 s after \
                 each, up to 5 min)"
            ),
        }
    }
}

/// The verdict on one Terminating pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Released by an action in [`Plan::actions`](super::plan::Plan::actions).
    Eligible,
    NotEligible(NotEligible),
}

/// One Terminating pod on an in-scope node and its verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodDecision {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    pub verdict: Verdict,
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use jiff::SignedDuration;

    use super::*;

    /// 2026-01-01T00:MM:SSZ.
    fn t(min: i64, sec: i64) -> Timestamp {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().expect("ts");
        start + SignedDuration::from_secs(min * 60 + sec)
    }
    fn now() -> Timestamp {
        t(10, 0)
    }

    fn rs_owner(name: &str) -> OwnerKey {
        OwnerKey { namespace: "default".into(), kind: "ReplicaSet".into(), name: name.into() }
    }

    #[test]
    fn not_eligible_codes_are_distinct() {
        let owner = rs_owner("x");
        let all = [
            NotEligible::CachesNotSynced,
            NotEligible::RuleDisabled,
            NotEligible::PodExcluded,
            NotEligible::NodeExcluded,
            NotEligible::MirrorPod,
            NotEligible::DaemonSetPod,
            NotEligible::OwnerKindNotSelected { kind: "X".into() },
            NotEligible::NamespaceNotSelected,
            NotEligible::PodNotSelected,
            NotEligible::AlreadyActed,
            NotEligible::NodeNotDead { until: None, why: "Ready".into() },
            NotEligible::NeedsFencing { because: FencingRequirement::All },
            NotEligible::WithinDelay { until: now() },
            NotEligible::StuckOnLiveNode {
                cause: "Finalizers",
                detail: "x".into(),
                action_at: None,
            },
            NotEligible::HeldByFinalizers { names: vec!["a/x".into()] },
            NotEligible::Paused,
            NotEligible::CircuitOpen { unhealthy: 1, limit: 0 },
            NotEligible::ClusterStorm { unhealthy: 1, limit: 0 },
            NotEligible::CircuitLatched,
            NotEligible::CoolingDown { until: now() },
            NotEligible::ZonePartitioned { zone: "a".into(), nodes: 2 },
            NotEligible::ZoneReturning { zone: "a".into(), nodes: 2, until: now() },
            NotEligible::RateLimited { until: now() },
            NotEligible::OwnerBudget { owner, until: now() },
        ];
        let codes: BTreeSet<&str> = all.iter().map(|r| r.code()).collect();
        assert_eq!(codes.len(), all.len());
        assert_eq!(
            NotEligible::NodeNotDead { until: Some(t(11, 0)), why: "Ready=Unknown".into() }
                .to_string(),
            "node not dead before 2026-01-01T00:11:00Z: Ready=Unknown"
        );
    }
}
