//! A `RemediationPolicySpec` turned into ready-to-use values: durations parsed, selectors
//! compiled, percentages resolved. Everything the API server's CEL rules check is checked again
//! here (the CRD on a cluster may be older than this binary), plus what only we can tell, such as
//! an unknown selector operator. A spec that fails becomes an `Invalid` condition, never a crash.

use jiff::SignedDuration;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::duration::{format_duration, parse_duration};
use super::selector::Selector;
use crate::crd::{
    FencingRequirement, FencingSpec, MIN_LEASE_STALE_FOR, MaintenanceHandling, Mode, OwnerKind,
    RemediationPolicySpec, StaleReadinessAction,
};

/// The least `liveNodeStuck.forceDeleteAfter`: a live kubelet finishes a pod within seconds of
/// its grace period (0.9-2.2 s for a 1 s grace in `hk-live-finish`); sooner, a force delete
/// races it.
pub const FORCE_DELETE_AFTER_MIN: SignedDuration = SignedDuration::from_secs(5);

/// The storm-guard limit, `safety.maxUnhealthyNodes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnhealthy {
    /// At most this many unhealthy nodes.
    Count(u32),
    /// At most this percentage (0-100) of in-scope nodes, rounded down.
    Percent(u32),
}

impl MaxUnhealthy {
    /// Parses an int-or-string: a non-negative integer, or `"NN%"` with NN in 0..=100.
    pub fn parse(value: &IntOrString) -> Result<Self, String> {
        match value {
            IntOrString::Int(n) => u32::try_from(*n)
                .map(MaxUnhealthy::Count)
                .map_err(|_| format!("{n} is negative; use a count >= 0 or a percentage")),
            IntOrString::String(s) => {
                let digits = s
                    .strip_suffix('%')
                    .ok_or_else(|| format!("{s:?} is not a percentage like \"30%\""))?;
                let valid = !digits.is_empty()
                    && digits.len() <= 3
                    && digits.bytes().all(|b| b.is_ascii_digit());
                match digits.parse::<u32>() {
                    Ok(p) if valid && p <= 100 => Ok(MaxUnhealthy::Percent(p)),
                    _ => Err(format!("{s:?} is not a percentage from 0% to 100%")),
                }
            }
        }
    }

    /// The largest number of unhealthy nodes still allowed among `in_scope` nodes.
    pub fn limit(self, in_scope: u32) -> u32 {
        match self {
            MaxUnhealthy::Count(n) => n,
            // u64 so that 4e9 nodes times 100 cannot overflow; the result is <= in_scope.
            MaxUnhealthy::Percent(p) => {
                u32::try_from(u64::from(in_scope) * u64::from(p) / 100).unwrap_or(u32::MAX)
            }
        }
    }
}

/// `"3"` or `"30%"`, as on the command line.
impl std::str::FromStr for MaxUnhealthy {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text.ends_with('%') {
            MaxUnhealthy::parse(&IntOrString::String(text.to_string()))
        } else {
            text.parse::<u32>().map(MaxUnhealthy::Count).map_err(|_| {
                format!("{text:?} is neither a count (e.g. 10) nor a percentage (e.g. 50%)")
            })
        }
    }
}

impl std::fmt::Display for MaxUnhealthy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxUnhealthy::Count(n) => write!(f, "{n}"),
            MaxUnhealthy::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// Which pods need fencing evidence, from `deadNode.requireFencingFor`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FencingNeeds {
    pub stateful_set: bool,
    pub read_write_once: bool,
    pub all: bool,
}

/// A spec ready for [`plan`](super::plan::plan).
#[derive(Clone, Debug, PartialEq)]
pub struct ValidatedPolicy {
    pub mode: Mode,
    pub paused: bool,
    pub node_selector: Selector,
    pub namespace_selector: Selector,
    pub pod_selector: Selector,
    /// Selected owner kinds (DaemonSet and mirror pods are excluded regardless).
    pub owner_kinds: Vec<OwnerKind>,
    pub not_ready_for: SignedDuration,
    pub lease_stale_for: SignedDuration,
    pub fencing: FencingSpec,
    pub fencing_needs: FencingNeeds,
    /// `stuckTerminating.delayAfterGrace`, `None` when the rule is disabled.
    pub stuck_terminating_delay: Option<SignedDuration>,
    /// `recreateRollouts.delayAfterGrace`, `None` when the rule is disabled.
    pub recreate_rollouts_delay: Option<SignedDuration>,
    pub max_unhealthy: MaxUnhealthy,
    pub actions_per_minute: u32,
    pub max_pods_per_owner_per_minute: u32,
    pub node_actions: NodeActions,
    pub lifecycle: NodeLifecycle,
    pub storm: StormSettings,
    /// `liveNodeStuck`, `None` when the rule is disabled.
    pub live_node_stuck: Option<LiveNodeStuck>,
    pub finalizers: Finalizers,
    /// `staleReadiness`, `None` when the rule is disabled.
    pub stale_readiness: Option<StaleReadiness>,
    /// `failedByShutdown.deleteAfter`, `None` when the rule is disabled.
    pub failed_by_shutdown: Option<SignedDuration>,
    /// `readyOnDeadNode.enabled`.
    pub ready_on_dead_node: bool,
    /// `readyOnDeadNode.markNotReady` (with the report enabled).
    pub mark_not_ready_on_dead_node: bool,
}

/// `nodeLifecycle`: whether a node in maintenance is left alone, and how long a graceful
/// shutdown is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeLifecycle {
    pub respect_maintenance: bool,
    pub shutdown_grace: SignedDuration,
}

/// `staleReadiness`: how long a node must be Ready again, and whether stale pods are evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleReadiness {
    pub node_ready_for: SignedDuration,
    pub evict: bool,
}

/// `liveNodeStuck`: when a pod on a live node counts as stuck, and when it is force-deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveNodeStuck {
    pub delay: SignedDuration,
    pub force_delete_after: Option<SignedDuration>,
    /// `forceDeleteUnfenced`: pods that need fencing may be force-deleted on a live node too.
    pub force_delete_unfenced: bool,
}

/// `finalizers`: which may be removed, and on a live node when.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finalizers {
    pub removable: Vec<String>,
    pub remove_after: SignedDuration,
}

/// `safety.latch` and `safety.cooldown`: the storm guard over time ([`super::storm`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StormSettings {
    pub latch: bool,
    pub cooldown: SignedDuration,
}

/// `nodeActions`: each action's delay after the node was judged dead (`None`: off).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeActions {
    pub cordon_after: Option<SignedDuration>,
    pub out_of_service_taint_after: Option<SignedDuration>,
    /// RISK: dead this long counts as powered off (the taint needs no other fencing evidence).
    pub assume_off_after: Option<SignedDuration>,
    pub delete_node_after: Option<SignedDuration>,
    /// Ready this long again: our own cordon and taint are removed.
    pub undo_after: SignedDuration,
}

impl NodeActions {
    /// Whether any node action is configured (an undo alone is not).
    pub fn any(&self) -> bool {
        self.cordon_after.is_some()
            || self.out_of_service_taint_after.is_some()
            || self.delete_node_after.is_some()
    }
}

/// Why a spec cannot be used; `reason` is shown in the `Invalid` condition.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct InvalidPolicy {
    /// Every problem found, `field: problem`, joined with "; ".
    pub reason: String,
}

/// Checks a spec and turns it into a [`ValidatedPolicy`], reporting every problem at once.
pub fn validate(spec: &RemediationPolicySpec) -> Result<ValidatedPolicy, InvalidPolicy> {
    let mut problems: Vec<String> = Vec::new();
    let mut duration = |field: &str, value: &str| match parse_duration(value) {
        Ok(d) => Some(d),
        Err(e) => {
            problems.push(format!("{field}: {e}"));
            None
        }
    };
    let not_ready_for = duration("deadNode.notReadyFor", &spec.dead_node.not_ready_for);
    let lease_stale_for = duration("deadNode.leaseStaleFor", &spec.dead_node.lease_stale_for);
    let delay =
        duration("stuckTerminating.delayAfterGrace", &spec.stuck_terminating.delay_after_grace);
    let recreate_delay =
        duration("recreateRollouts.delayAfterGrace", &spec.recreate_rollouts.delay_after_grace);

    let min_lease = parse_duration(MIN_LEASE_STALE_FOR).unwrap_or(SignedDuration::ZERO);
    if let Some(d) = lease_stale_for
        && d < min_lease
    {
        problems.push(format!(
            "deadNode.leaseStaleFor: {} is below the kubelet's {MIN_LEASE_STALE_FOR} lease duration and would flag healthy nodes",
            format_duration(d)
        ));
    }

    let mut selector = |field: &str, sel| match Selector::compile(sel) {
        Ok(s) => s,
        Err(e) => {
            problems.push(format!("{field}: {e}"));
            Selector::everything()
        }
    };
    let node_selector = selector("nodeSelector", spec.node_selector.as_ref());
    let namespace_selector = selector("namespaceSelector", spec.namespace_selector.as_ref());
    let pod_selector = selector("podSelector", spec.pod_selector.as_ref());

    let mut owner_kinds = spec.owner_kinds.clone();
    owner_kinds.sort();
    owner_kinds.dedup();
    if owner_kinds.is_empty() {
        problems.push("ownerKinds: empty, the policy would select no pod".into());
    }
    if spec.ready_on_dead_node.mark_not_ready && !spec.ready_on_dead_node.enabled {
        problems.push("readyOnDeadNode.markNotReady needs readyOnDeadNode.enabled".into());
    }

    let fencing = spec.dead_node.fencing.clone();
    let fencing_needs = fencing_needs(spec, &mut problems);
    let (max_unhealthy, actions_per_minute, max_pods_per_owner_per_minute) =
        safety_limits(spec, &mut problems);
    let node_actions = node_actions(spec, &mut problems);
    let (live_node_stuck, finalizers) = live_node_rules(spec, &mut problems);
    let stale = &spec.stale_readiness;
    let stale_readiness = parse_duration(&stale.node_ready_for)
        .map_err(|e| problems.push(format!("staleReadiness.nodeReadyFor: {e}")))
        .ok()
        .filter(|_| stale.enabled)
        .map(|node_ready_for| StaleReadiness {
            node_ready_for,
            evict: stale.action == StaleReadinessAction::Evict,
        });
    let lifecycle = NodeLifecycle {
        respect_maintenance: spec.node_lifecycle.maintenance == MaintenanceHandling::Respect,
        shutdown_grace: parse_duration(&spec.node_lifecycle.graceful_shutdown_grace)
            .map_err(|e| problems.push(format!("nodeLifecycle.gracefulShutdownGrace: {e}")))
            .unwrap_or(SignedDuration::ZERO),
    };
    let shutdown = &spec.failed_by_shutdown;
    let failed_by_shutdown = parse_duration(&shutdown.delete_after)
        .map_err(|e| problems.push(format!("failedByShutdown.deleteAfter: {e}")))
        .ok()
        .filter(|_| shutdown.enabled);
    let storm = StormSettings {
        latch: spec.safety.latch,
        cooldown: parse_duration(&spec.safety.cooldown)
            .map_err(|e| problems.push(format!("safety.cooldown: {e}")))
            .unwrap_or(SignedDuration::ZERO),
    };

    match (not_ready_for, lease_stale_for, delay, max_unhealthy) {
        (Some(not_ready_for), Some(lease_stale_for), Some(delay), Some(max_unhealthy))
            if problems.is_empty() =>
        {
            Ok(ValidatedPolicy {
                mode: spec.mode,
                paused: spec.paused,
                node_selector,
                namespace_selector,
                pod_selector,
                owner_kinds,
                not_ready_for,
                lease_stale_for,
                fencing,
                fencing_needs,
                stuck_terminating_delay: spec.stuck_terminating.enabled.then_some(delay),
                recreate_rollouts_delay: recreate_delay.filter(|_| spec.recreate_rollouts.enabled),
                max_unhealthy,
                actions_per_minute,
                max_pods_per_owner_per_minute,
                node_actions,
                lifecycle,
                storm,
                live_node_stuck,
                finalizers,
                stale_readiness,
                failed_by_shutdown,
                ready_on_dead_node: spec.ready_on_dead_node.enabled,
                mark_not_ready_on_dead_node: spec.ready_on_dead_node.enabled
                    && spec.ready_on_dead_node.mark_not_ready,
            })
        }
        _ => Err(InvalidPolicy { reason: problems.join("; ") }),
    }
}

/// `deadNode.requireFencingFor` checked against itself and `deadNode.fencing`.
fn fencing_needs(spec: &RemediationPolicySpec, problems: &mut Vec<String>) -> FencingNeeds {
    let require = &spec.dead_node.require_fencing_for;
    let has = |r| require.contains(&r);
    if require.is_empty() {
        problems.push(
            "deadNode.requireFencingFor: empty; write [None] to release pods without fencing"
                .into(),
        );
    }
    if has(FencingRequirement::None) && require.iter().any(|r| *r != FencingRequirement::None) {
        problems
            .push("deadNode.requireFencingFor: None cannot be combined with other entries".into());
    }
    if has(FencingRequirement::All) && require.iter().any(|r| *r != FencingRequirement::All) {
        problems
            .push("deadNode.requireFencingFor: All already covers every pod, list it alone".into());
    }
    let fencing = &spec.dead_node.fencing;
    let fencing_needs = FencingNeeds {
        stateful_set: has(FencingRequirement::StatefulSet),
        read_write_once: has(FencingRequirement::ReadWriteOnce),
        all: has(FencingRequirement::All),
    };
    let needs_any =
        fencing_needs.stateful_set || fencing_needs.read_write_once || fencing_needs.all;
    if needs_any
        && !(fencing.out_of_service_taint || fencing.shutdown_taint || fencing.node_deleted)
    {
        problems.push(
            "deadNode.requireFencingFor needs at least one kind of fencing evidence enabled in deadNode.fencing".into(),
        );
    }
    fencing_needs
}

/// `nodeActions`: each set delay parsed.
fn node_actions(spec: &RemediationPolicySpec, problems: &mut Vec<String>) -> NodeActions {
    let n = &spec.node_actions;
    let mut parse = |field: &str, value: Option<&String>| {
        let value = value?;
        parse_duration(value).map_err(|e| problems.push(format!("nodeActions.{field}: {e}"))).ok()
    };
    let actions = NodeActions {
        cordon_after: parse("cordonAfter", n.cordon_after.as_ref()),
        out_of_service_taint_after: parse(
            "outOfServiceTaintAfter",
            n.out_of_service_taint_after.as_ref(),
        ),
        assume_off_after: parse("assumeOffAfter", n.assume_off_after.as_ref()),
        delete_node_after: parse("deleteNodeAfter", n.delete_node_after.as_ref()),
        undo_after: parse("undoAfter", Some(&n.undo_after)).unwrap_or(SignedDuration::ZERO),
    };
    if actions.assume_off_after.is_some()
        && n.out_of_service_taint_after.is_none()
        && n.delete_node_after.is_none()
    {
        problems.push(
            "nodeActions.assumeOffAfter only matters with outOfServiceTaintAfter or \
             deleteNodeAfter"
                .into(),
        );
    }
    actions
}

/// `liveNodeStuck` and `finalizers`, their durations parsed.
fn live_node_rules(
    spec: &RemediationPolicySpec,
    problems: &mut Vec<String>,
) -> (Option<LiveNodeStuck>, Finalizers) {
    let mut parse = |field: &str, value: &str| {
        parse_duration(value).map_err(|e| problems.push(format!("{field}: {e}"))).ok()
    };
    let live = &spec.live_node_stuck;
    let delay = parse("liveNodeStuck.delayAfterGrace", &live.delay_after_grace);
    let force_delete_after =
        live.force_delete_after.as_deref().and_then(|v| parse("liveNodeStuck.forceDeleteAfter", v));
    let remove_after = parse("finalizers.removeAfter", &spec.finalizers.remove_after);
    if force_delete_after.is_some_and(|after| after < FORCE_DELETE_AFTER_MIN) {
        problems.push(
            "liveNodeStuck.forceDeleteAfter: shorter than 5s: a live kubelet finishes a pod \
             within seconds of its grace period, and a force delete sooner races it"
                .into(),
        );
    }
    if let (Some(delay), Some(after)) = (delay, force_delete_after)
        && after < delay
    {
        problems.push(format!(
            "liveNodeStuck.forceDeleteAfter: {} is shorter than delayAfterGrace {}: a pod would be \
             deleted before it is reported stuck",
            format_duration(after),
            format_duration(delay)
        ));
    }
    if spec.finalizers.removable.iter().any(|f| f.trim().is_empty()) {
        problems.push("finalizers.removable: an empty name".into());
    }
    let live_node_stuck = delay.filter(|_| live.enabled).map(|delay| LiveNodeStuck {
        delay,
        force_delete_after,
        force_delete_unfenced: live.force_delete_unfenced,
    });
    let finalizers = Finalizers {
        removable: spec.finalizers.removable.clone(),
        remove_after: remove_after.unwrap_or(SignedDuration::ZERO),
    };
    (live_node_stuck, finalizers)
}

/// `safety`: the storm-guard limit (`None` when it does not parse), `actionsPerMinute` and
/// `maxPodsPerOwnerPerMinute` (1 when below 1, with a problem).
fn safety_limits(
    spec: &RemediationPolicySpec,
    problems: &mut Vec<String>,
) -> (Option<MaxUnhealthy>, u32, u32) {
    let max_unhealthy = MaxUnhealthy::parse(&spec.safety.max_unhealthy_nodes)
        .map_err(|e| problems.push(format!("safety.maxUnhealthyNodes: {e}")))
        .ok();
    let mut at_least_one = |field: &str, n: i32| match u32::try_from(n) {
        Ok(n) if n >= 1 => n,
        _ => {
            problems.push(format!("{field}: {n} must be at least 1"));
            1
        }
    };
    let actions_per_minute = at_least_one(
        "safety.rateLimit.actionsPerMinute",
        spec.safety.rate_limit.actions_per_minute,
    );
    let max_pods_per_owner_per_minute =
        at_least_one("safety.maxPodsPerOwnerPerMinute", spec.safety.max_pods_per_owner_per_minute);
    (max_unhealthy, actions_per_minute, max_pods_per_owner_per_minute)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_unhealthy_parse_table() {
        let table = [
            (IntOrString::Int(0), Ok(MaxUnhealthy::Count(0))),
            (IntOrString::Int(3), Ok(MaxUnhealthy::Count(3))),
            (IntOrString::Int(-1), Err(())),
            (IntOrString::String("0%".into()), Ok(MaxUnhealthy::Percent(0))),
            (IntOrString::String("30%".into()), Ok(MaxUnhealthy::Percent(30))),
            (IntOrString::String("100%".into()), Ok(MaxUnhealthy::Percent(100))),
            (IntOrString::String("101%".into()), Err(())),
            (IntOrString::String("1000%".into()), Err(())),
            (IntOrString::String("%".into()), Err(())),
            (IntOrString::String("-5%".into()), Err(())),
            (IntOrString::String("+5%".into()), Err(())),
            (IntOrString::String("5".into()), Err(())),
            (IntOrString::String("5.5%".into()), Err(())),
        ];
        for (input, want) in table {
            assert_eq!(MaxUnhealthy::parse(&input).map_err(|_| ()), want, "{input:?}");
        }
    }

    #[test]
    fn max_unhealthy_from_the_command_line() {
        for (text, want) in [
            ("0", Ok(MaxUnhealthy::Count(0))),
            ("12", Ok(MaxUnhealthy::Count(12))),
            ("50%", Ok(MaxUnhealthy::Percent(50))),
            ("100%", Ok(MaxUnhealthy::Percent(100))),
        ] {
            assert_eq!(text.parse::<MaxUnhealthy>(), want, "{text}");
        }
        for bad in ["-1", "101%", "ten", "", "5.5"] {
            assert!(bad.parse::<MaxUnhealthy>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn max_unhealthy_limit_rounds_down() {
        let table = [
            (MaxUnhealthy::Count(2), 0, 2),
            (MaxUnhealthy::Count(2), 100, 2),
            (MaxUnhealthy::Percent(30), 0, 0),
            (MaxUnhealthy::Percent(30), 3, 0),
            (MaxUnhealthy::Percent(30), 4, 1),
            (MaxUnhealthy::Percent(30), 10, 3),
            (MaxUnhealthy::Percent(30), 13, 3),
            (MaxUnhealthy::Percent(50), 5, 2),
            (MaxUnhealthy::Percent(100), 7, 7),
            (MaxUnhealthy::Percent(0), 1000, 0),
            (MaxUnhealthy::Percent(100), u32::MAX, u32::MAX),
        ];
        for (max, in_scope, want) in table {
            assert_eq!(max.limit(in_scope), want, "{max} of {in_scope}");
        }
    }

    fn spec(patch: serde_json::Value) -> RemediationPolicySpec {
        serde_json::from_value(patch).expect("spec")
    }

    #[test]
    fn defaults_validate() {
        let p = validate(&RemediationPolicySpec::default()).expect("defaults are valid");
        assert_eq!(p.mode, Mode::DryRun);
        assert_eq!(p.not_ready_for, SignedDuration::from_secs(300));
        assert_eq!(p.lease_stale_for, SignedDuration::from_secs(120));
        assert_eq!(p.stuck_terminating_delay, Some(SignedDuration::from_secs(30)));
        assert_eq!(
            p.fencing_needs,
            FencingNeeds { stateful_set: true, read_write_once: true, all: false }
        );
        assert_eq!(p.max_unhealthy, MaxUnhealthy::Percent(30));
        assert_eq!((p.actions_per_minute, p.max_pods_per_owner_per_minute), (10, 5));
        assert!(p.node_selector.selects_all());
    }

    #[test]
    fn validate_table() {
        use serde_json::json;
        // (case, spec, Ok(()) or Err(substring of the reason))
        let table: Vec<(&str, serde_json::Value, Result<(), &str>)> = vec![
            ("enforce", json!({"mode": "Enforce"}), Ok(())),
            ("None alone", json!({"deadNode": {"requireFencingFor": ["None"]}}), Ok(())),
            ("All alone", json!({"deadNode": {"requireFencingFor": ["All"]}}), Ok(())),
            (
                "no fencing evidence but nothing needs it",
                json!({"deadNode": {"requireFencingFor": ["None"],
                    "fencing": {"outOfServiceTaint": false, "shutdownTaint": false, "nodeDeleted": false}}}),
                Ok(()),
            ),
            (
                "disabled rule keeps validating",
                json!({"stuckTerminating": {"enabled": false}}),
                Ok(()),
            ),
            ("lease at the minimum", json!({"deadNode": {"leaseStaleFor": "40s"}}), Ok(())),
            (
                "bad duration",
                json!({"deadNode": {"notReadyFor": "5 minutes"}}),
                Err("deadNode.notReadyFor: duration"),
            ),
            (
                "bad delay",
                json!({"stuckTerminating": {"delayAfterGrace": "1d"}}),
                Err("stuckTerminating.delayAfterGrace"),
            ),
            (
                "lease too short",
                json!({"deadNode": {"leaseStaleFor": "39s"}}),
                Err("below the kubelet's 40s"),
            ),
            (
                "None combined",
                json!({"deadNode": {"requireFencingFor": ["None", "StatefulSet"]}}),
                Err("None cannot be combined"),
            ),
            (
                "All combined",
                json!({"deadNode": {"requireFencingFor": ["All", "None"]}}),
                Err("list it alone"),
            ),
            (
                "empty requirement",
                json!({"deadNode": {"requireFencingFor": []}}),
                Err("write [None]"),
            ),
            (
                "fencing needed but no evidence enabled",
                json!({"deadNode": {"fencing": {"outOfServiceTaint": false, "shutdownTaint": false, "nodeDeleted": false}}}),
                Err("at least one kind of fencing evidence"),
            ),
            ("no owner kinds", json!({"ownerKinds": []}), Err("ownerKinds: empty")),
            (
                "percent over 100",
                json!({"safety": {"maxUnhealthyNodes": "150%"}}),
                Err("safety.maxUnhealthyNodes"),
            ),
            ("negative count", json!({"safety": {"maxUnhealthyNodes": -1}}), Err("is negative")),
            (
                "zero rate",
                json!({"safety": {"rateLimit": {"actionsPerMinute": 0}}}),
                Err("actionsPerMinute: 0 must be"),
            ),
            (
                "zero owner budget",
                json!({"safety": {"maxPodsPerOwnerPerMinute": 0}}),
                Err("maxPodsPerOwnerPerMinute"),
            ),
            (
                "unknown selector operator",
                json!({"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Equals", "values": ["b"]}]}}),
                Err("nodeSelector: matchExpressions[0]"),
            ),
            (
                "In without values",
                json!({"podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
                Err(
                    "podSelector: matchExpressions[0] (key \"a\"): operator In needs at least one value",
                ),
            ),
        ];
        for (case, patch, want) in table {
            match (validate(&spec(patch)), want) {
                (Ok(_), Ok(())) => {}
                (Err(e), Err(needle)) => {
                    assert!(e.reason.contains(needle), "{case}: {:?} lacks {needle:?}", e.reason)
                }
                (got, want) => panic!("{case}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let e = validate(&spec(serde_json::json!({
            "deadNode": {"notReadyFor": "x", "leaseStaleFor": "y"},
            "safety": {"maxUnhealthyNodes": "x%"}
        })))
        .expect_err("invalid");
        assert_eq!(e.reason.matches("; ").count(), 2, "{}", e.reason);
    }

    #[test]
    fn disabled_rule_has_no_delay_and_owner_kinds_dedup() {
        let p = validate(&spec(serde_json::json!({
            "stuckTerminating": {"enabled": false},
            "ownerKinds": ["Job", "Bare", "Job"]
        })))
        .expect("valid");
        assert_eq!(p.stuck_terminating_delay, None);
        assert_eq!(p.owner_kinds, vec![OwnerKind::Job, OwnerKind::Bare]);
    }

    #[test]
    fn example_policies_are_valid() {
        for file in crate::crd::drift_check::EXAMPLES {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
            let policy: crate::crd::RemediationPolicy = yaml_serde::from_str(&text)
                .unwrap_or_else(|e| panic!("{file} is not a RemediationPolicy: {e}"));
            assert_eq!(policy.metadata.namespace, None, "{file}: policies are cluster-scoped");
            assert!(policy.metadata.name.is_some(), "{file} has no metadata.name");
            if let Err(e) = validate(&policy.spec) {
                panic!("{file} is not a valid policy: {e}");
            }
        }
    }
}
