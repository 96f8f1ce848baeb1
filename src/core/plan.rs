//! `plan(&observed, &policy, now) -> Plan`: which pods stuck Terminating on dead nodes to
//! release now, why every other one is not released (yet), and when to look again.
//!
//! The plan is identical in DryRun and Enforce: the writer decides whether an action becomes a
//! request or a record.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use super::budget::{RATE_WINDOW, Window, add};
use super::duration::format_duration;
use super::evidence::Suspension;
use super::node::{NodeObservation, Readiness};
use super::node::{NodeState, NodeSummary, NodeView, summarize_node};
use super::policy::{MaxUnhealthy, ValidatedPolicy};
pub use super::rollouts::WorkloadRef;
use crate::crd::{
    ActionKind, EXCLUDE_ANNOTATION, FencingRequirement, FencingSpec, Mode, OwnerKind,
};

/// A pod's controlling owner reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRef {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// The key of per-owner budgets: one ReplicaSet, StatefulSet or Job.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OwnerKey {
    pub namespace: String,
    pub kind: String,
    pub name: String,
}

impl fmt::Display for OwnerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// What the planner keeps about one pod. The controller only needs to pass Terminating pods
/// (`deletion_timestamp` set); the others are ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `spec.nodeName`; pods never scheduled are ignored.
    pub node_name: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// The labels of the pod's namespace, shared between the pods of one namespace.
    pub namespace_labels: Arc<BTreeMap<String, String>>,
    /// The owner reference with `controller: true`, if any.
    pub owner: Option<OwnerRef>,
    /// `metadata.deletionTimestamp`: deletion time plus grace period.
    pub deletion_timestamp: Option<Timestamp>,
    /// `metadata.deletionGracePeriodSeconds` (informational: already in `deletion_timestamp`).
    pub deletion_grace_seconds: Option<i64>,
    /// A mirror pod of a static pod (annotation `kubernetes.io/config.mirror`).
    pub is_mirror: bool,
    /// Mounts a PVC whose access modes include ReadWriteOnce or ReadWriteOncePod.
    pub has_rwo_volume: bool,
    /// Annotated `remediator.io/exclude: "true"`.
    pub excluded: bool,
    /// `status.phase`, for reports.
    pub phase: Option<String>,
    /// The Recreate Deployment or StatefulSet whose rollout this pod blocks, if any (filled by
    /// the controller from [`crate::core::rollouts::blocked_rollouts`]).
    pub blocks_rollout: Option<WorkloadRef>,
}

impl PodView {
    /// The per-owner budget key; `None` for bare pods.
    pub fn owner_key(&self) -> Option<OwnerKey> {
        self.owner.as_ref().map(|o| OwnerKey {
            namespace: self.namespace.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
        })
    }
}

/// An action this policy already took (or recorded in DryRun), for rate limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PastAction {
    pub at: Timestamp,
    pub owner: Option<OwnerKey>,
}

/// Everything the planner looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Nodes, including tombstones of deleted nodes still referenced by pods (`deleted: true`).
    /// A node referenced by a pod but absent here counts as deleted, with no labels.
    pub nodes: Vec<NodeView>,
    /// Terminating pods (others are ignored).
    pub pods: Vec<PodView>,
    /// The start of the evidence window (see [`crate::core::evidence`]): when the watches last
    /// finished a (re)list or the Lease view last resumed after a stall. `None` while evidence
    /// is not trusted: then no node is dead and nothing is done.
    pub watch_synced_at: Option<Timestamp>,
    /// Why evidence is not trusted, when `watch_synced_at` is `None`.
    pub suspended: Option<Suspension>,
    /// This policy's actions of at least the last 60 s (older ones are ignored), with result
    /// Done, WouldAct or Failed: attempts count towards the rate limits.
    pub recent_actions: Vec<PastAction>,
    /// UIDs of pods this policy already force-deleted (Enforce) or recorded as would-be
    /// force-deleted (DryRun), in the current mode, that are still present. They are not acted on
    /// again, so DryRun reports each pod once and moves on to the next, as Enforce would.
    pub acted_pods: BTreeSet<String>,
}

/// Why a Terminating pod is not released now. Descheduler-style: a reason, not a bool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotEligible {
    /// The watches are not synced: no evidence is trusted.
    CachesNotSynced,
    /// The Lease view stalled or failed (see [`Suspension`]): no evidence is trusted.
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
    /// This policy already acted on this pod (see [`Observed::acted_pods`]).
    AlreadyActed,
    /// The node is not dead; `until` is when it will be if nothing changes.
    NodeNotDead { until: Option<Timestamp>, why: String },
    /// The pod needs fencing evidence and its node has none.
    NeedsFencing { because: FencingRequirement },
    /// `deletionTimestamp + delayAfterGrace` has not passed.
    WithinDelay { until: Timestamp },
    /// `spec.paused`.
    Paused,
    /// Too many unhealthy nodes.
    CircuitOpen { unhealthy: u32, limit: u32 },
    /// `rateLimit.actionsPerMinute` is used up until `until`.
    RateLimited { until: Timestamp },
    /// `maxPodsPerOwnerPerMinute` is used up for this owner until `until`.
    OwnerBudget { owner: OwnerKey, until: Timestamp },
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
            NotEligible::Paused => "Paused",
            NotEligible::CircuitOpen { .. } => "CircuitOpen",
            NotEligible::RateLimited { .. } => "RateLimited",
            NotEligible::OwnerBudget { .. } => "OwnerBudget",
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
            NotEligible::AlreadyActed => write!(f, "already acted on by this policy"),
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
            NotEligible::Paused => write!(f, "policy paused"),
            NotEligible::CircuitOpen { unhealthy, limit } => {
                write!(
                    f,
                    "circuit open: {unhealthy} unhealthy nodes exceed maxUnhealthyNodes ({limit})"
                )
            }
            NotEligible::RateLimited { until } => {
                write!(f, "rateLimit.actionsPerMinute used up; next slot at {until}")
            }
            NotEligible::OwnerBudget { owner, until } => {
                write!(f, "maxPodsPerOwnerPerMinute used up for {owner}; next slot at {until}")
            }
        }
    }
}

/// The verdict on one Terminating pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Released by an action in [`Plan::actions`].
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

/// A pod force delete: DELETE with `gracePeriodSeconds: 0` and a UID precondition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForceDelete {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    pub owner: Option<OwnerKey>,
    /// Why, for Events, logs and status.
    pub reason: String,
    /// The instant the pod became due (latest of node death and `deletionTimestamp + delay`);
    /// rate limiting may act later. Latency is measured from here.
    pub threshold: Timestamp,
    /// The workload whose rollout the pod blocks, told in an Event when it is released.
    pub blocks_rollout: Option<WorkloadRef>,
    /// The node's Lease `renewTime` the plan judged on: any other value in the last look is a
    /// renewal since the plan, so the kubelet is alive.
    pub lease_renewed: Option<Timestamp>,
    /// The fencing the pod needs, which the last look must still find on its node.
    pub fencing_required: Option<FencingRequirement>,
}

/// What a fresh read of a pod says, just before it is force-deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshPod<'a> {
    pub uid: Option<&'a str>,
    pub terminating: bool,
    /// `spec.nodeName` (empty when unset).
    pub node: &'a str,
    /// Annotated `remediator.io/exclude: "true"`.
    pub excluded: bool,
}

/// What a fresh read of the pod's node says (`None` in [`LastLook::node`]: the Node is gone).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreshNode {
    pub observation: NodeObservation,
    pub excluded: bool,
}

/// What a fresh read of the policy says (`None` in [`LastLook::policy`]: it was deleted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreshPolicy {
    pub mode: Mode,
    pub paused: bool,
    pub generation: Option<i64>,
}

/// Fresh reads (never from a cache) of everything a force delete stands on, taken right before
/// the request: the pod (`None`: gone), its node, the node's Lease `renewTime`, the policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastLook<'a> {
    pub pod: Option<FreshPod<'a>>,
    pub node: Option<FreshNode>,
    pub lease_renewed: Option<Timestamp>,
    pub policy: Option<FreshPolicy>,
}

impl ForceDelete {
    /// Whether the action still stands after the last look. `planned_generation` is the policy
    /// generation the plan was made with; `fencing` its fencing settings. `Err` says why it is
    /// skipped: the pod changed, the policy left Enforce or changed, or the node is no longer
    /// dead by fresh evidence (Ready, a Lease renewed since the plan, excluded, fencing gone).
    pub fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        fencing: &FencingSpec,
    ) -> Result<(), String> {
        let Some(pod) = look.pod else { return Err("pod already gone".into()) };
        if pod.uid != Some(self.uid.as_str()) {
            return Err("a new pod with the same name replaced it; left alone".into());
        }
        if !pod.terminating {
            return Err("pod is no longer Terminating".into());
        }
        if pod.node != self.node {
            return Err(format!("pod moved to node {:?}", pod.node));
        }
        if pod.excluded {
            return Err(format!("pod annotated {EXCLUDE_ANNOTATION}=true; left alone"));
        }
        let Some(policy) = look.policy else { return Err("the policy was deleted".into()) };
        if policy.mode != Mode::Enforce {
            return Err(format!("the policy is in {} now; nothing deleted", policy.mode.as_str()));
        }
        if policy.paused {
            return Err("the policy is paused now; nothing deleted".into());
        }
        if policy.generation != planned_generation {
            return Err("the policy changed since the plan; its next evaluation decides".into());
        }
        if look.lease_renewed != self.lease_renewed {
            let show = |t: Option<Timestamp>| t.map_or("none".to_string(), |t| t.to_string());
            return Err(format!(
                "the node's Lease was renewed since the plan (renewTime {} -> {}): its kubelet is alive; left alone",
                show(self.lease_renewed),
                show(look.lease_renewed)
            ));
        }
        let fenced = match &look.node {
            Some(node) => {
                if node.observation.readiness == Readiness::Ready {
                    return Err("node is Ready again; left alone".into());
                }
                if node.excluded {
                    return Err(format!("node annotated {EXCLUDE_ANNOTATION}=true; left alone"));
                }
                node.observation.fencing(fencing, false)
            }
            None => NodeView::deleted_unknown(&self.node).observation.fencing(fencing, true),
        };
        if let (Some(required), None) = (self.fencing_required, fenced) {
            return Err(format!(
                "fencing evidence ({}) no longer on the node; left alone",
                required.as_str()
            ));
        }
        Ok(())
    }
}

/// Something the writer should do (or record, in DryRun).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    ForceDelete(ForceDelete),
}

impl Action {
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::ForceDelete(_) => ActionKind::ForceDelete,
        }
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

/// Counts for the policy's status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanCounts {
    /// In-scope nodes (including deleted ones still referenced).
    pub matched_nodes: u32,
    pub unhealthy_nodes: u32,
    pub dead_nodes: u32,
    /// Selected Terminating pods on in-scope nodes whose deletionTimestamp has passed.
    pub stuck_pods: u32,
    /// Pods released by this plan.
    pub eligible_pods: u32,
}

/// Everything decided at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Whether evidence was trusted (`watch_synced_at` was set).
    pub synced: bool,
    /// Why evidence was not trusted, when it was not.
    pub suspended: Option<Suspension>,
    /// What to do now, oldest threshold first.
    pub actions: Vec<Action>,
    /// A verdict for every Terminating pod on an in-scope node, by namespace and name.
    pub decisions: Vec<PodDecision>,
    /// Every in-scope node, by name.
    pub nodes: Vec<NodeSummary>,
    pub circuit: Circuit,
    /// The earliest future instant at which the plan changes by the passing of time alone
    /// (a node becoming dead, a delay passing, a grace period ending, a rate-limit slot
    /// freeing): requeue for exactly then. `None`: only a watch event can change it.
    pub next_deadline: Option<Timestamp>,
    pub counts: PlanCounts,
}

/// How a pod's controlling owner relates to `ownerKinds`.
enum OwnerClass<'a> {
    Selectable(OwnerKind),
    DaemonSet,
    Mirror,
    Other(&'a str),
}

fn owner_class(pod: &PodView) -> OwnerClass<'_> {
    if pod.is_mirror {
        return OwnerClass::Mirror;
    }
    match pod.owner.as_ref().map(|o| o.kind.as_str()) {
        None => OwnerClass::Selectable(OwnerKind::Bare),
        Some("ReplicaSet") => OwnerClass::Selectable(OwnerKind::ReplicaSet),
        Some("StatefulSet") => OwnerClass::Selectable(OwnerKind::StatefulSet),
        Some("Job") => OwnerClass::Selectable(OwnerKind::Job),
        Some("DaemonSet") => OwnerClass::DaemonSet,
        // Mirror pods are owned by their Node.
        Some("Node") => OwnerClass::Mirror,
        Some(other) => OwnerClass::Other(other),
    }
}

/// Which fencing requirement applies to a pod, if any.
fn fencing_requirement(
    pod: &PodView,
    kind: OwnerKind,
    policy: &ValidatedPolicy,
) -> Option<FencingRequirement> {
    let needs = policy.fencing_needs;
    if needs.all {
        Some(FencingRequirement::All)
    } else if needs.stateful_set && kind == OwnerKind::StatefulSet {
        Some(FencingRequirement::StatefulSet)
    } else if needs.read_write_once && pod.has_rwo_volume {
        Some(FencingRequirement::ReadWriteOnce)
    } else {
        None
    }
}

/// A pod that passed every per-pod gate and now competes for budget.
struct Ready {
    decision: usize,
    threshold: Timestamp,
    reason: String,
    fencing_required: Option<FencingRequirement>,
    lease_renewed: Option<Timestamp>,
}

/// Decides what to do at `now`. Pure: same inputs, same plan.
pub fn plan(observed: &Observed, policy: &ValidatedPolicy, now: Timestamp) -> Plan {
    let synced_at = observed.watch_synced_at;
    let mut deadlines: Vec<Timestamp> = Vec::new();

    // Nodes: observed ones, plus those referenced by Terminating pods but gone.
    let mut nodes: BTreeMap<&str, (NodeSummary, bool)> = BTreeMap::new();
    for view in &observed.nodes {
        let in_scope = policy.node_selector.matches(&view.labels);
        nodes.insert(
            &view.observation.name,
            (summarize_node(view, policy, synced_at, now), in_scope),
        );
    }
    for pod in observed.pods.iter().filter(|p| p.deletion_timestamp.is_some()) {
        if let Some(node) = pod.node_name.as_deref()
            && !nodes.contains_key(node)
        {
            let view = NodeView::deleted_unknown(node);
            let in_scope = policy.node_selector.matches(&view.labels);
            nodes.insert(node, (summarize_node(&view, policy, synced_at, now), in_scope));
        }
    }

    let mut counts = PlanCounts::default();
    for (summary, _) in nodes.values().filter(|(_, in_scope)| *in_scope) {
        counts.matched_nodes += 1;
        match summary.state {
            NodeState::Healthy => {}
            NodeState::Unhealthy => counts.unhealthy_nodes += 1,
            NodeState::Dead => {
                counts.unhealthy_nodes += 1;
                counts.dead_nodes += 1;
            }
        }
        deadlines.extend(summary.dead_at.filter(|t| *t > now));
    }
    let circuit =
        Circuit::evaluate(counts.unhealthy_nodes, counts.matched_nodes, policy.max_unhealthy);

    // Per-pod gates.
    let mut decisions: Vec<PodDecision> = Vec::new();
    let mut ready: Vec<Ready> = Vec::new();
    for pod in &observed.pods {
        let (Some(deleted_at), Some(node_name)) =
            (pod.deletion_timestamp, pod.node_name.as_deref())
        else {
            continue;
        };
        let Some((node, true)) = nodes.get(node_name) else {
            continue;
        };
        let selected = policy.namespace_selector.matches(&pod.namespace_labels)
            && policy.pod_selector.matches(&pod.labels);
        if selected {
            if now >= deleted_at {
                counts.stuck_pods += 1;
            } else {
                deadlines.push(deleted_at);
            }
        }
        let gate = pod_gate(pod, node, selected, observed, policy, deleted_at, now);
        let verdict = match gate {
            Gate::Blocked(reason, deadline) => {
                deadlines.extend(deadline.filter(|t| *t > now));
                Verdict::NotEligible(reason)
            }
            Gate::Ready { threshold, reason, fencing_required } => {
                ready.push(Ready {
                    decision: decisions.len(),
                    threshold,
                    reason,
                    fencing_required,
                    lease_renewed: node.lease_renewed,
                });
                // Filled in below.
                Verdict::Eligible
            }
        };
        decisions.push(PodDecision {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: pod.uid.clone(),
            node: node_name.to_string(),
            owner: pod.owner_key(),
            verdict,
        });
    }

    // Policy-wide gates and budgets, oldest threshold first.
    ready.sort_by(|a, b| {
        let (da, db) = (&decisions[a.decision], &decisions[b.decision]);
        (a.threshold, &da.namespace, &da.name).cmp(&(b.threshold, &db.namespace, &db.name))
    });
    let mut global =
        Window::new(observed.recent_actions.iter().map(|a| a.at), now, policy.actions_per_minute);
    let mut per_owner_past: HashMap<&OwnerKey, Vec<Timestamp>> = HashMap::new();
    for past in &observed.recent_actions {
        if let Some(owner) = &past.owner {
            per_owner_past.entry(owner).or_default().push(past.at);
        }
    }
    let mut owners: HashMap<OwnerKey, Window> = HashMap::new();
    let next_slot = |w: &Window| w.next_free().unwrap_or_else(|| add(now, RATE_WINDOW));
    let mut actions = Vec::new();
    for Ready { decision, threshold, reason, fencing_required, lease_renewed } in ready {
        let d = &mut decisions[decision];
        let blocked = if policy.paused {
            Some(NotEligible::Paused)
        } else if circuit.open {
            Some(NotEligible::CircuitOpen { unhealthy: circuit.unhealthy, limit: circuit.limit })
        } else if !global.has_room() {
            Some(NotEligible::RateLimited { until: next_slot(&global) })
        } else if let Some(owner) = &d.owner {
            let window = owners.entry(owner.clone()).or_insert_with(|| {
                let past = per_owner_past.get(owner).into_iter().flatten().copied();
                Window::new(past, now, policy.max_pods_per_owner_per_minute)
            });
            if window.has_room() {
                window.record(now);
                None
            } else {
                Some(NotEligible::OwnerBudget { owner: owner.clone(), until: next_slot(window) })
            }
        } else {
            None
        };
        match blocked {
            Some(reason) => {
                if let NotEligible::RateLimited { until } | NotEligible::OwnerBudget { until, .. } =
                    &reason
                {
                    deadlines.push(*until);
                }
                d.verdict = Verdict::NotEligible(reason);
            }
            None => {
                global.record(now);
                actions.push(Action::ForceDelete(ForceDelete {
                    namespace: d.namespace.clone(),
                    name: d.name.clone(),
                    uid: d.uid.clone(),
                    node: d.node.clone(),
                    owner: d.owner.clone(),
                    reason,
                    threshold,
                    blocks_rollout: observed
                        .pods
                        .iter()
                        .find(|p| p.uid == d.uid)
                        .and_then(|p| p.blocks_rollout.clone()),
                    lease_renewed,
                    fencing_required,
                }));
            }
        }
    }
    counts.eligible_pods = u32::try_from(actions.len()).unwrap_or(u32::MAX);

    decisions.sort_by(|a, b| (&a.namespace, &a.name, &a.uid).cmp(&(&b.namespace, &b.name, &b.uid)));
    Plan {
        synced: synced_at.is_some(),
        suspended: if synced_at.is_some() { None } else { observed.suspended.clone() },
        actions,
        decisions,
        nodes: nodes.into_values().filter(|(_, in_scope)| *in_scope).map(|(s, _)| s).collect(),
        circuit,
        next_deadline: deadlines.into_iter().filter(|t| *t > now).min(),
        counts,
    }
}

enum Gate {
    /// Not eligible, and the instant at which the pod would pass its per-pod gates by time alone.
    Blocked(NotEligible, Option<Timestamp>),
    Ready {
        threshold: Timestamp,
        reason: String,
        fencing_required: Option<FencingRequirement>,
    },
}

/// The per-pod gates, most static first.
fn pod_gate(
    pod: &PodView,
    node: &NodeSummary,
    selected: bool,
    observed: &Observed,
    policy: &ValidatedPolicy,
    deleted_at: Timestamp,
    now: Timestamp,
) -> Gate {
    let blocked = |reason| Gate::Blocked(reason, None);
    if observed.watch_synced_at.is_none() {
        return blocked(match &observed.suspended {
            None | Some(Suspension::NotSynced) => NotEligible::CachesNotSynced,
            Some(other) => NotEligible::EvidenceSuspended { why: other.to_string() },
        });
    }
    // A pod that blocks a rollout may also be released by recreateRollouts; the shorter
    // delay of the rules that apply wins.
    let recreate = pod.blocks_rollout.as_ref().and(policy.recreate_rollouts_delay);
    let delay = match (policy.stuck_terminating_delay, recreate) {
        (Some(a), Some(b)) => a.min(b),
        (Some(d), None) | (None, Some(d)) => d,
        (None, None) => return blocked(NotEligible::RuleDisabled),
    };
    if pod.excluded {
        return blocked(NotEligible::PodExcluded);
    }
    if node.excluded {
        return blocked(NotEligible::NodeExcluded);
    }
    let kind = match owner_class(pod) {
        OwnerClass::Mirror => return blocked(NotEligible::MirrorPod),
        OwnerClass::DaemonSet => return blocked(NotEligible::DaemonSetPod),
        OwnerClass::Other(kind) => {
            return blocked(NotEligible::OwnerKindNotSelected { kind: kind.to_string() });
        }
        OwnerClass::Selectable(kind) if !policy.owner_kinds.contains(&kind) => {
            return blocked(NotEligible::OwnerKindNotSelected { kind: kind.as_str().to_string() });
        }
        OwnerClass::Selectable(kind) => kind,
    };
    if !policy.namespace_selector.matches(&pod.namespace_labels) {
        return blocked(NotEligible::NamespaceNotSelected);
    }
    if !selected {
        return blocked(NotEligible::PodNotSelected);
    }
    if observed.acted_pods.contains(&pod.uid) {
        return blocked(NotEligible::AlreadyActed);
    }

    let due = add(deleted_at, delay);
    let requirement = fencing_requirement(pod, kind, policy);
    let fenced = requirement.is_none() || node.fenced_by.is_some();
    if node.state != NodeState::Dead {
        // When the node dies, the pod can go at the later of the two instants (if fenced).
        let ready_at = node.dead_at.filter(|_| fenced).map(|t| t.max(due));
        return Gate::Blocked(
            NotEligible::NodeNotDead { until: node.dead_at, why: node.why.clone() },
            ready_at,
        );
    }
    if let (Some(because), None) = (requirement, node.fenced_by) {
        return blocked(NotEligible::NeedsFencing { because });
    }
    if now < due {
        return Gate::Blocked(NotEligible::WithinDelay { until: due }, Some(due));
    }
    let threshold = node.dead_at.map_or(due, |t| t.max(due));
    let grace = pod
        .deletion_grace_seconds
        .map(|s| format!(", grace {}", format_duration(SignedDuration::from_secs(s))));
    let fencing = match (requirement, node.fenced_by) {
        (Some(r), Some(e)) => {
            format!("; fencing required ({}) and present: {}", r.as_str(), e.describe())
        }
        (None, Some(e)) => format!("; fenced: {}", e.describe()),
        (_, None) => "; no fencing required".to_string(),
    };
    let blocking = pod
        .blocks_rollout
        .as_ref()
        .map(|w| format!("; blocks the rollout of {w}"))
        .unwrap_or_default();
    let reason = format!(
        "Terminating since {deleted_at}{} + delayAfterGrace {} passed at {due}; node {} {}{fencing}{blocking}",
        grace.unwrap_or_default(),
        format_duration(delay),
        node.name,
        node.why,
    );
    Gate::Ready { threshold, reason, fencing_required: requirement }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::node::{NodeObservation, Readiness};
    use crate::crd::RemediationPolicySpec;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    /// 2026-01-01T00:MM:SSZ.
    fn t(min: i64, sec: i64) -> Timestamp {
        add("2026-01-01T00:00:00Z".parse().expect("ts"), SignedDuration::from_secs(min * 60 + sec))
    }
    const NOW: (i64, i64) = (10, 0);
    fn now() -> Timestamp {
        t(NOW.0, NOW.1)
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// "ready", "dead" (Unknown and no renewal since 00:00) or "dying" (Unknown since 00:06:
    /// dead at 00:11), all labelled zone=a.
    fn node(name: &str, health: &str) -> NodeView {
        let (readiness, transition) = match health {
            "ready" => (Readiness::Ready, t(0, 0)),
            "dead" => (Readiness::Unknown, t(0, 0)),
            "dying" => (Readiness::Unknown, t(6, 0)),
            other => panic!("unknown health {other}"),
        };
        NodeView {
            observation: NodeObservation {
                name: name.into(),
                readiness,
                ready_transition: Some(transition),
                lease_renewed: Some(t(0, 0)),
                not_ready_seen: (readiness != Readiness::Ready).then_some(transition),
                lease_seen: Some(t(0, 0)),
                unschedulable: false,
                taints: vec![],
            },
            labels: labels(&[("zone", "a")]),
            excluded: false,
            deleted: false,
        }
    }

    /// A Deployment pod deleted with deletionTimestamp 00:08:00 (due 00:08:30).
    fn pod(name: &str, node: &str) -> PodView {
        PodView {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            node_name: Some(node.into()),
            labels: labels(&[("app", "web")]),
            namespace_labels: Arc::new(labels(&[("kubernetes.io/metadata.name", "default")])),
            owner: Some(OwnerRef {
                kind: "ReplicaSet".into(),
                name: "web-1".into(),
                uid: "rs-uid".into(),
            }),
            deletion_timestamp: Some(t(8, 0)),
            deletion_grace_seconds: Some(30),
            is_mirror: false,
            has_rwo_volume: false,
            excluded: false,
            phase: Some("Running".into()),
            blocks_rollout: None,
        }
    }

    fn observed(nodes: Vec<NodeView>, pods: Vec<PodView>) -> Observed {
        Observed {
            nodes,
            pods,
            watch_synced_at: Some("2025-12-31T23:00:00Z".parse().expect("ts")),
            ..Default::default()
        }
    }

    /// Default policy, except a circuit breaker that never trips unless a test says so.
    fn policy(f: impl FnOnce(&mut RemediationPolicySpec)) -> ValidatedPolicy {
        let mut spec = RemediationPolicySpec::default();
        spec.safety.max_unhealthy_nodes = IntOrString::String("100%".into());
        f(&mut spec);
        crate::core::validate(&spec).expect("valid test policy")
    }

    fn rs_owner(name: &str) -> OwnerKey {
        OwnerKey { namespace: "default".into(), kind: "ReplicaSet".into(), name: name.into() }
    }

    /// The verdict with NodeNotDead's long explanation blanked, for tables.
    fn normalized(v: &Verdict) -> Result<(), NotEligible> {
        match v {
            Verdict::Eligible => Ok(()),
            Verdict::NotEligible(NotEligible::NodeNotDead { until, .. }) => {
                Err(NotEligible::NodeNotDead { until: *until, why: String::new() })
            }
            Verdict::NotEligible(r) => Err(r.clone()),
        }
    }

    fn verdict_of<'a>(plan: &'a Plan, name: &str) -> &'a Verdict {
        &plan.decisions.iter().find(|d| d.name == name).expect("decision for pod").verdict
    }

    type SpecFn = fn(&mut RemediationPolicySpec);
    type PodFn = fn(&mut PodView);
    type ObsFn = fn(&mut Observed);
    type VerdictRow = (&'static str, SpecFn, PodFn, ObsFn, Result<(), NotEligible>);

    #[test]
    fn verdict_table() {
        use NotEligible::*;
        let nothing = |_: &mut RemediationPolicySpec| {};
        let same = |_: &mut PodView| {};
        let as_is = |_: &mut Observed| {};
        fn owned_by(p: &mut PodView, kind: &str) {
            p.owner = Some(OwnerRef { kind: kind.into(), name: "o".into(), uid: "o-uid".into() });
        }
        // Nodes: dead "n-dead", "n-ready", "n-dying" (dead at 00:11), "n-oos" (dead, out-of-service
        // taint). The pod is on n-dead unless the pod function moves it.
        let table: Vec<VerdictRow> = vec![
            ("Deployment pod on a dead node", nothing, same, as_is, Ok(())),
            ("bare pod", nothing, |p| p.owner = None, as_is, Ok(())),
            ("Job pod", nothing, |p| owned_by(p, "Job"), as_is, Ok(())),
            (
                "caches not synced",
                nothing,
                same,
                |o| o.watch_synced_at = None,
                Err(CachesNotSynced),
            ),
            (
                "rule disabled",
                |s| s.stuck_terminating.enabled = false,
                same,
                as_is,
                Err(RuleDisabled),
            ),
            ("pod excluded", nothing, |p| p.excluded = true, as_is, Err(PodExcluded)),
            ("node excluded", nothing, same, |o| o.nodes[0].excluded = true, Err(NodeExcluded)),
            ("mirror pod", nothing, |p| p.is_mirror = true, as_is, Err(MirrorPod)),
            (
                "pod owned by its Node is a mirror pod",
                nothing,
                |p| owned_by(p, "Node"),
                as_is,
                Err(MirrorPod),
            ),
            ("DaemonSet pod", nothing, |p| owned_by(p, "DaemonSet"), as_is, Err(DaemonSetPod)),
            (
                "custom owner kind",
                nothing,
                |p| owned_by(p, "CloneSet"),
                as_is,
                Err(OwnerKindNotSelected { kind: "CloneSet".into() }),
            ),
            (
                "Job not in ownerKinds",
                |s| s.owner_kinds = vec![OwnerKind::ReplicaSet],
                |p| owned_by(p, "Job"),
                as_is,
                Err(OwnerKindNotSelected { kind: "Job".into() }),
            ),
            (
                "bare not in ownerKinds",
                |s| s.owner_kinds = vec![OwnerKind::ReplicaSet],
                |p| p.owner = None,
                as_is,
                Err(OwnerKindNotSelected { kind: "Bare".into() }),
            ),
            (
                "namespace not selected",
                |s| {
                    s.namespace_selector = Some(
                        serde_json::from_value(serde_json::json!({"matchLabels": {"team": "a"}}))
                            .expect("sel"),
                    )
                },
                same,
                as_is,
                Err(NamespaceNotSelected),
            ),
            (
                "pod not selected",
                |s| {
                    s.pod_selector = Some(
                        serde_json::from_value(serde_json::json!({"matchLabels": {"app": "db"}}))
                            .expect("sel"),
                    )
                },
                same,
                as_is,
                Err(PodNotSelected),
            ),
            (
                "already acted",
                nothing,
                same,
                |o| {
                    o.acted_pods.insert("uid-p".into());
                },
                Err(AlreadyActed),
            ),
            (
                "node ready",
                nothing,
                |p| p.node_name = Some("n-ready".into()),
                as_is,
                Err(NodeNotDead { until: None, why: String::new() }),
            ),
            (
                "node dying",
                nothing,
                |p| p.node_name = Some("n-dying".into()),
                as_is,
                Err(NodeNotDead { until: Some(t(11, 0)), why: String::new() }),
            ),
            (
                "StatefulSet pod needs fencing",
                nothing,
                |p| owned_by(p, "StatefulSet"),
                as_is,
                Err(NeedsFencing { because: FencingRequirement::StatefulSet }),
            ),
            (
                "RWO pod needs fencing",
                nothing,
                |p| p.has_rwo_volume = true,
                as_is,
                Err(NeedsFencing { because: FencingRequirement::ReadWriteOnce }),
            ),
            (
                "All: every pod needs fencing",
                |s| s.dead_node.require_fencing_for = vec![FencingRequirement::All],
                |p| p.owner = None,
                as_is,
                Err(NeedsFencing { because: FencingRequirement::All }),
            ),
            (
                "StatefulSet pod on a fenced node",
                nothing,
                |p| {
                    p.owner = Some(OwnerRef {
                        kind: "StatefulSet".into(),
                        name: "db".into(),
                        uid: "u".into(),
                    });
                    p.node_name = Some("n-oos".into());
                },
                as_is,
                Ok(()),
            ),
            (
                "RWO StatefulSet pod on a deleted node (fenced by deletion)",
                nothing,
                |p| {
                    p.owner = Some(OwnerRef {
                        kind: "StatefulSet".into(),
                        name: "db".into(),
                        uid: "u".into(),
                    });
                    p.has_rwo_volume = true;
                    p.node_name = Some("n-gone".into());
                },
                as_is,
                Ok(()),
            ),
            (
                "deleted node but deletion is not trusted as fencing",
                |s| s.dead_node.fencing.node_deleted = false,
                |p| {
                    p.has_rwo_volume = true;
                    p.node_name = Some("n-gone".into());
                },
                as_is,
                Err(NeedsFencing { because: FencingRequirement::ReadWriteOnce }),
            ),
            (
                "StatefulSet pod, fencing explicitly not required",
                |s| s.dead_node.require_fencing_for = vec![FencingRequirement::None],
                |p| owned_by(p, "StatefulSet"),
                as_is,
                Ok(()),
            ),
            (
                "StatefulSet pod, only RWO needs fencing",
                |s| s.dead_node.require_fencing_for = vec![FencingRequirement::ReadWriteOnce],
                |p| owned_by(p, "StatefulSet"),
                as_is,
                Ok(()),
            ),
            (
                "within delay",
                nothing,
                |p| p.deletion_timestamp = Some(t(9, 45)),
                as_is,
                Err(WithinDelay { until: t(10, 15) }),
            ),
            (
                "longer delay",
                |s| s.stuck_terminating.delay_after_grace = "3m".into(),
                same,
                as_is,
                Err(WithinDelay { until: t(11, 0) }),
            ),
            ("paused", |s| s.paused = true, same, as_is, Err(Paused)),
            (
                "circuit open",
                |s| s.safety.max_unhealthy_nodes = IntOrString::Int(2),
                same,
                as_is,
                Err(CircuitOpen { unhealthy: 3, limit: 2 }),
            ),
            (
                "rate limited",
                nothing,
                same,
                |o| {
                    o.recent_actions =
                        (0..10).map(|i| PastAction { at: t(9, 20 + i), owner: None }).collect();
                },
                Err(RateLimited { until: t(10, 20) }),
            ),
            (
                "owner budget",
                nothing,
                same,
                |o| {
                    let owner = Some(OwnerKey {
                        namespace: "default".into(),
                        kind: "ReplicaSet".into(),
                        name: "web-1".into(),
                    });
                    o.recent_actions = (0..5)
                        .map(|i| PastAction { at: t(9, 30 + i), owner: owner.clone() })
                        .collect();
                },
                Err(OwnerBudget { owner: rs_owner("web-1"), until: t(10, 30) }),
            ),
            (
                "another owner's budget does not matter",
                nothing,
                same,
                |o| {
                    let owner = Some(rs_owner("other"));
                    o.recent_actions = (0..5)
                        .map(|i| PastAction { at: t(9, 30 + i), owner: owner.clone() })
                        .collect();
                },
                Ok(()),
            ),
        ];
        for (case, spec_fn, pod_fn, obs_fn, want) in table {
            let p = policy(spec_fn);
            let mut oos = node("n-oos", "dead");
            oos.observation.taints = vec!["node.kubernetes.io/out-of-service:NoExecute".into()];
            let mut the_pod = pod("p", "n-dead");
            pod_fn(&mut the_pod);
            let mut obs = observed(
                vec![
                    node("n-dead", "dead"),
                    node("n-ready", "ready"),
                    node("n-dying", "dying"),
                    oos,
                ],
                vec![the_pod],
            );
            obs_fn(&mut obs);
            let plan = plan(&obs, &p, now());
            assert_eq!(plan.decisions.len(), 1, "{case}");
            let verdict = &plan.decisions[0].verdict;
            assert_eq!(normalized(verdict), want, "{case}: {verdict:?}");
            assert_eq!(plan.actions.len(), usize::from(want.is_ok()), "{case}");
            if let Verdict::NotEligible(reason) = verdict {
                assert!(!reason.to_string().is_empty() && !reason.code().is_empty(), "{case}");
            }
        }
    }

    #[test]
    fn action_carries_identity_reason_and_threshold() {
        let mut sts = pod("db-0", "n-oos");
        sts.owner =
            Some(OwnerRef { kind: "StatefulSet".into(), name: "db".into(), uid: "sts-uid".into() });
        let mut oos = node("n-oos", "dead");
        oos.observation.taints = vec!["node.kubernetes.io/out-of-service:NoExecute".into()];
        let plan = plan(&observed(vec![oos], vec![sts]), &policy(|_| {}), now());
        let [Action::ForceDelete(fd)] = plan.actions.as_slice() else {
            panic!("one action: {plan:?}")
        };
        assert_eq!(
            (fd.namespace.as_str(), fd.name.as_str(), fd.uid.as_str(), fd.node.as_str()),
            ("default", "db-0", "uid-db-0", "n-oos")
        );
        assert_eq!(
            fd.owner,
            Some(OwnerKey {
                namespace: "default".into(),
                kind: "StatefulSet".into(),
                name: "db".into()
            })
        );
        // Node dead at 00:05 (notReadyFor from 00:00), pod due at 00:08:30: the later one.
        assert_eq!(fd.threshold, t(8, 30));
        assert!(fd.reason.contains("fencing required (StatefulSet) and present: taint node.kubernetes.io/out-of-service"), "{}", fd.reason);
        assert!(
            fd.reason.contains("delayAfterGrace 30s passed at 2026-01-01T00:08:30Z"),
            "{}",
            fd.reason
        );
        assert_eq!(plan.actions[0].kind(), ActionKind::ForceDelete);
    }

    #[test]
    fn out_of_scope_and_irrelevant_pods_get_no_decision() {
        let mut other_zone = node("n-b", "dead");
        other_zone.labels = labels(&[("zone", "b")]);
        let mut not_terminating = pod("alive", "n-a");
        not_terminating.deletion_timestamp = None;
        let mut unscheduled = pod("pending", "n-a");
        unscheduled.node_name = None;
        let p = policy(|s| {
            s.node_selector = Some(
                serde_json::from_value(serde_json::json!({"matchLabels": {"zone": "a"}}))
                    .expect("sel"),
            );
        });
        let obs = observed(
            vec![node("n-a", "dead"), other_zone],
            vec![
                pod("in-scope", "n-a"),
                pod("other-zone", "n-b"),
                not_terminating,
                unscheduled,
                pod("gone-node", "n-gone"),
            ],
        );
        let plan = plan(&obs, &p, now());
        let names: Vec<&str> = plan.decisions.iter().map(|d| d.name.as_str()).collect();
        // A node absent from the cache has no labels, so zone=a does not select it.
        assert_eq!(names, vec!["in-scope"]);
        assert_eq!(plan.nodes.iter().map(|n| n.name.as_str()).collect::<Vec<_>>(), vec!["n-a"]);
        assert_eq!(plan.counts.matched_nodes, 1);
    }

    #[test]
    fn circuit_breaker_boundaries() {
        // (case, nodes in scope, dead among them, dead out of scope, maxUnhealthyNodes, open, limit)
        let table = [
            ("percent: at the limit acts", 10, 3, 0, IntOrString::String("30%".into()), false, 3),
            ("percent: one over does not", 10, 4, 0, IntOrString::String("30%".into()), true, 3),
            ("percent rounds down", 13, 4, 0, IntOrString::String("30%".into()), true, 3),
            ("small cluster: 30% of 3 is 0", 3, 1, 0, IntOrString::String("30%".into()), true, 0),
            ("count: at the limit acts", 5, 2, 0, IntOrString::Int(2), false, 2),
            ("count: one over does not", 5, 3, 0, IntOrString::Int(2), true, 2),
            ("zero tolerates nothing", 5, 1, 0, IntOrString::Int(0), true, 0),
            ("100% never opens", 4, 4, 0, IntOrString::String("100%".into()), false, 4),
            (
                "out-of-scope nodes do not count",
                10,
                3,
                5,
                IntOrString::String("30%".into()),
                false,
                3,
            ),
        ];
        for (case, in_scope, dead, dead_outside, max, want_open, want_limit) in table {
            let mut nodes: Vec<NodeView> = (0..in_scope)
                .map(|i| node(&format!("n{i:02}"), if i < dead { "dead" } else { "ready" }))
                .collect();
            for i in 0..dead_outside {
                let mut n = node(&format!("x{i}"), "dead");
                n.labels = labels(&[("zone", "b")]);
                nodes.push(n);
            }
            let p = policy(|s| {
                s.safety.max_unhealthy_nodes = max.clone();
                s.node_selector = Some(
                    serde_json::from_value(serde_json::json!({"matchLabels": {"zone": "a"}}))
                        .expect("sel"),
                );
            });
            let plan = plan(&observed(nodes, vec![pod("p", "n00")]), &p, now());
            assert_eq!(plan.circuit.open, want_open, "{case}: {}", plan.circuit.message());
            assert_eq!(plan.circuit.limit, want_limit, "{case}");
            assert_eq!(
                (plan.circuit.unhealthy, plan.circuit.in_scope),
                (dead as u32, in_scope as u32),
                "{case}"
            );
            assert_eq!(plan.actions.is_empty(), want_open, "{case}");
            if want_open {
                assert_eq!(
                    verdict_of(&plan, "p"),
                    &Verdict::NotEligible(NotEligible::CircuitOpen {
                        unhealthy: dead as u32,
                        limit: want_limit
                    }),
                    "{case}"
                );
                assert!(plan.circuit.message().contains("no action until it drops"), "{case}");
            }
        }
    }

    #[test]
    fn unhealthy_but_not_dead_nodes_count_towards_the_circuit() {
        let p = policy(|s| s.safety.max_unhealthy_nodes = IntOrString::Int(1));
        let obs = observed(
            vec![node("n-dead", "dead"), node("n-dying", "dying"), node("n-ok", "ready")],
            vec![pod("p", "n-dead")],
        );
        let plan = plan(&obs, &p, now());
        assert!(plan.circuit.open);
        assert_eq!(
            plan.counts,
            PlanCounts {
                matched_nodes: 3,
                unhealthy_nodes: 2,
                dead_nodes: 1,
                stuck_pods: 1,
                eligible_pods: 0
            }
        );
    }

    /// `n` pods on a dead node, deleted one second apart from 00:08:00, each with its own owner
    /// unless `same_owner`.
    fn many_pods(n: i64, same_owner: bool) -> Vec<PodView> {
        (0..n)
            .map(|i| {
                let mut p = pod(&format!("p{i:02}"), "n-dead");
                p.deletion_timestamp = Some(t(8, i));
                if !same_owner {
                    p.owner = Some(OwnerRef {
                        kind: "ReplicaSet".into(),
                        name: format!("rs{i:02}"),
                        uid: format!("u{i}"),
                    });
                }
                p
            })
            .collect()
    }

    fn acted(plan: &Plan) -> Vec<&str> {
        plan.actions.iter().map(|Action::ForceDelete(f)| f.name.as_str()).collect()
    }

    #[test]
    fn rate_limit_takes_oldest_first_and_reports_the_next_slot() {
        let p = policy(|_| {});
        // 12 due pods, no history: 10 act now, 2 wait for the first of those 10 to leave the window.
        let mut pods = many_pods(12, false);
        pods.reverse();
        let plan1 = plan(&observed(vec![node("n-dead", "dead")], pods), &p, now());
        assert_eq!(acted(&plan1), (0..10).map(|i| format!("p{i:02}")).collect::<Vec<_>>());
        for name in ["p10", "p11"] {
            assert_eq!(
                verdict_of(&plan1, name),
                &Verdict::NotEligible(NotEligible::RateLimited { until: t(11, 0) })
            );
        }
        assert_eq!(plan1.next_deadline, Some(t(11, 0)));
        assert_eq!(plan1.counts.eligible_pods, 10);

        // 3 actions at 00:09:20 in the window: 7 slots left; the rest wait for 00:10:20.
        let mut obs = observed(vec![node("n-dead", "dead")], many_pods(12, false));
        obs.recent_actions = (0..3).map(|_| PastAction { at: t(9, 20), owner: None }).collect();
        let plan2 = plan(&obs, &p, now());
        assert_eq!(plan2.actions.len(), 7);
        assert_eq!(
            verdict_of(&plan2, "p07"),
            &Verdict::NotEligible(NotEligible::RateLimited { until: t(10, 20) })
        );
        assert_eq!(plan2.next_deadline, Some(t(10, 20)));

        // At 00:10:20 exactly those 3 have left the window (actions at 00:10:00 still count).
        obs.pods.retain(|p| !acted(&plan2).contains(&p.name.as_str()));
        obs.recent_actions.extend((0..7).map(|_| PastAction { at: now(), owner: None }));
        let plan3 = plan(&obs, &p, t(10, 20));
        assert_eq!(acted(&plan3), vec!["p07", "p08", "p09"]);
        assert_eq!(plan3.next_deadline, Some(t(11, 0)));
    }

    #[test]
    fn owner_budget_limits_one_owner_only() {
        let p = policy(|_| {});
        let mut pods = many_pods(7, true);
        let mut other = pod("other", "n-dead");
        other.owner =
            Some(OwnerRef { kind: "ReplicaSet".into(), name: "other".into(), uid: "x".into() });
        other.deletion_timestamp = Some(t(8, 30));
        pods.push(other);
        let plan = plan(&observed(vec![node("n-dead", "dead")], pods), &p, now());
        assert_eq!(acted(&plan), vec!["p00", "p01", "p02", "p03", "p04", "other"]);
        for name in ["p05", "p06"] {
            assert_eq!(
                verdict_of(&plan, name),
                &Verdict::NotEligible(NotEligible::OwnerBudget {
                    owner: rs_owner("web-1"),
                    until: t(11, 0)
                })
            );
        }
        assert_eq!(plan.next_deadline, Some(t(11, 0)));
    }

    #[test]
    fn owner_budget_counts_history_and_bare_pods_only_count_globally() {
        let p = policy(|s| s.safety.max_pods_per_owner_per_minute = 1);
        let mut obs = observed(vec![node("n-dead", "dead")], many_pods(2, true));
        let mut bare = pod("bare", "n-dead");
        bare.owner = None;
        obs.pods.push(bare.clone());
        let mut bare2 = bare;
        bare2.name = "bare2".into();
        bare2.uid = "uid-bare2".into();
        obs.pods.push(bare2);
        obs.recent_actions = vec![PastAction { at: t(9, 40), owner: Some(rs_owner("web-1")) }];
        let plan = plan(&obs, &p, now());
        assert_eq!(acted(&plan), vec!["bare", "bare2"]);
        assert_eq!(
            verdict_of(&plan, "p00"),
            &Verdict::NotEligible(NotEligible::OwnerBudget {
                owner: rs_owner("web-1"),
                until: t(10, 40)
            })
        );
        assert_eq!(plan.next_deadline, Some(t(10, 40)));
    }

    #[test]
    fn next_deadline_is_the_exact_threshold() {
        let p = policy(|_| {});
        // (case, node health, deletionTimestamp, synced at, next deadline)
        let table = [
            ("dead node, delay pending: the delay", "dead", t(9, 45), None, Some(t(10, 15))),
            ("dying node, delay passed: node death", "dying", t(8, 0), None, Some(t(11, 0))),
            ("dying node, later grace end comes first", "dying", t(10, 50), None, Some(t(10, 50))),
            ("ready node, stuck: nothing by time", "ready", t(8, 0), None, None),
            (
                "ready node, in grace: the grace end (stuck count)",
                "ready",
                t(10, 5),
                None,
                Some(t(10, 5)),
            ),
            ("dead and due: acted now, nothing left", "dead", t(8, 0), None, None),
            (
                "resynced at 00:09:58: node dies 5m after the sync",
                "dead",
                t(8, 0),
                Some(t(9, 58)),
                Some(t(14, 58)),
            ),
        ];
        for (case, health, deleted, synced, want) in table {
            let mut the_pod = pod("p", "n");
            the_pod.deletion_timestamp = Some(deleted);
            let mut obs = observed(vec![node("n", health)], vec![the_pod]);
            if synced.is_some() {
                obs.watch_synced_at = synced;
            }
            assert_eq!(plan(&obs, &p, now()).next_deadline, want, "{case}");
        }
    }

    #[test]
    fn pod_becomes_eligible_at_its_threshold_not_a_millisecond_earlier() {
        let p = policy(|_| {});
        let mut the_pod = pod("p", "n");
        the_pod.deletion_timestamp = Some(t(9, 45));
        let obs = observed(vec![node("n", "dead")], vec![the_pod]);
        let before = plan(&obs, &p, add(t(10, 15), SignedDuration::from_millis(-1)));
        assert!(before.actions.is_empty());
        assert_eq!(before.next_deadline, Some(t(10, 15)));
        let at = plan(&obs, &p, t(10, 15));
        let [Action::ForceDelete(fd)] = at.actions.as_slice() else { panic!("one action") };
        assert_eq!(fd.threshold, t(10, 15));
        assert_eq!(at.next_deadline, None);

        // On a dying node (dead at 00:11) with the delay long passed, the node's death is the
        // threshold.
        let obs = observed(vec![node("n", "dying")], vec![pod("p", "n")]);
        assert_eq!(plan(&obs, &p, now()).next_deadline, Some(t(11, 0)));
        let at = plan(&obs, &p, t(11, 0));
        let [Action::ForceDelete(fd)] = at.actions.as_slice() else { panic!("one action") };
        assert_eq!(fd.threshold, t(11, 0));
    }

    #[test]
    fn caches_not_synced_means_nothing_is_dead_and_nothing_acts() {
        let mut obs = observed(vec![node("n", "dead")], vec![pod("p", "n")]);
        obs.watch_synced_at = None;
        let plan = plan(&obs, &policy(|_| {}), now());
        assert!(!plan.synced);
        assert!(plan.actions.is_empty());
        assert_eq!(plan.counts.dead_nodes, 0);
        assert_eq!(plan.next_deadline, None);
        assert_eq!(verdict_of(&plan, "p"), &Verdict::NotEligible(NotEligible::CachesNotSynced));
    }

    #[test]
    fn paused_keeps_verdicts_and_deadlines_but_no_actions() {
        let mut within = pod("within", "n");
        within.deletion_timestamp = Some(t(9, 45));
        let obs = observed(vec![node("n", "dead")], vec![pod("due", "n"), within]);
        let plan = plan(&obs, &policy(|s| s.paused = true), now());
        assert!(plan.actions.is_empty());
        assert_eq!(verdict_of(&plan, "due"), &Verdict::NotEligible(NotEligible::Paused));
        assert_eq!(
            verdict_of(&plan, "within"),
            &Verdict::NotEligible(NotEligible::WithinDelay { until: t(10, 15) })
        );
        assert_eq!(plan.next_deadline, Some(t(10, 15)));
    }

    #[test]
    fn dry_run_and_enforce_plan_identically() {
        let mut obs = observed(
            vec![node("n-dead", "dead"), node("n-dying", "dying"), node("n-ready", "ready")],
            many_pods(12, false),
        );
        obs.pods.push(pod("d", "n-dying"));
        obs.pods.push(pod("r", "n-ready"));
        let dry = plan(&obs, &policy(|s| s.mode = crate::crd::Mode::DryRun), now());
        let enforce = plan(&obs, &policy(|s| s.mode = crate::crd::Mode::Enforce), now());
        assert_eq!(dry, enforce);
    }

    #[test]
    fn counts_for_status() {
        let mut in_grace = pod("in-grace", "n-ready");
        in_grace.deletion_timestamp = Some(t(10, 30));
        let mut excluded = pod("excluded", "n-dead");
        excluded.excluded = true;
        let mut other_ns = pod("other-ns", "n-dead");
        other_ns.namespace_labels = Arc::new(labels(&[("team", "b")]));
        let p = policy(|s| {
            s.namespace_selector = Some(
                serde_json::from_value(serde_json::json!({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}))
                    .expect("sel"),
            );
        });
        let obs = observed(
            vec![node("n-dead", "dead"), node("n-dying", "dying"), node("n-ready", "ready")],
            vec![
                pod("a", "n-dead"),
                pod("b", "n-ready"),
                in_grace,
                excluded,
                other_ns,
                pod("c", "n-gone"),
            ],
        );
        let plan = plan(&obs, &p, now());
        // n-gone is synthesized as a deleted node: matched, unhealthy, dead.
        assert_eq!(
            plan.counts,
            PlanCounts {
                matched_nodes: 4,
                unhealthy_nodes: 3,
                dead_nodes: 2,
                stuck_pods: 4,
                eligible_pods: 2
            }
        );
        assert_eq!(acted(&plan), vec!["a", "c"]);
        assert_eq!(
            plan.decisions.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            vec!["a", "b", "c", "excluded", "in-grace", "other-ns"]
        );
        // The stuck count changes when in-grace's grace ends; n-dying dies at 00:11.
        assert_eq!(plan.next_deadline, Some(t(10, 30)));
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
            NotEligible::Paused,
            NotEligible::CircuitOpen { unhealthy: 1, limit: 0 },
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

    #[test]
    fn recreate_rollouts_rule_applies_to_blocking_pods_only() {
        use crate::core::rollouts::{WorkloadKind, WorkloadRef};
        let blocking = |p: &mut PodView| {
            p.blocks_rollout = Some(WorkloadRef {
                kind: WorkloadKind::Deployment,
                namespace: "default".into(),
                name: "web".into(),
                uid: "d".into(),
            });
        };
        // deletionTimestamp 00:08:00; now is NOW. (case, stuckTerminating, recreate delay,
        // blocks a rollout, expected verdict)
        let off = |s: &mut RemediationPolicySpec| s.stuck_terminating.enabled = false;
        let table: Vec<(&str, SpecFn, bool, Result<(), NotEligible>)> = vec![
            ("blocking pod, only recreateRollouts", off, true, Ok(())),
            ("non-blocking pod, only recreateRollouts", off, false, Err(NotEligible::RuleDisabled)),
            (
                "both rules disabled",
                |s| {
                    s.stuck_terminating.enabled = false;
                    s.recreate_rollouts.enabled = false;
                },
                true,
                Err(NotEligible::RuleDisabled),
            ),
            (
                "the shorter delay wins for a blocking pod",
                |s| {
                    s.stuck_terminating.delay_after_grace = "1h".into();
                    s.recreate_rollouts.delay_after_grace = "0s".into();
                },
                true,
                Ok(()),
            ),
            (
                "a non-blocking pod keeps stuckTerminating's delay",
                |s| s.stuck_terminating.delay_after_grace = "1h".into(),
                false,
                Err(NotEligible::WithinDelay { until: t(68, 0) }),
            ),
        ];
        for (case, spec, blocks, want) in table {
            let mut p = pod("web-1-abc", "n-dead");
            if blocks {
                blocking(&mut p);
            }
            let obs = observed(vec![node("n-dead", "dead"), node("n-ready", "ready")], vec![p]);
            let plan = plan(&obs, &policy(spec), now());
            assert_eq!(normalized(verdict_of(&plan, "web-1-abc")), want, "{case}");
            if want.is_ok() {
                let Action::ForceDelete(fd) = &plan.actions[0];
                assert_eq!(fd.blocks_rollout.is_some(), blocks, "{case}");
                assert!(
                    !blocks || fd.reason.contains("blocks the rollout of Deployment default/web"),
                    "{case}"
                );
            }
        }
    }

    #[test]
    fn recheck_table() {
        let renewed = Some(t(0, 0));
        let fd = ForceDelete {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "u1".into(),
            node: "n1".into(),
            owner: None,
            reason: String::new(),
            threshold: now(),
            blocks_rollout: None,
            lease_renewed: renewed,
            fencing_required: None,
        };
        let fenced =
            ForceDelete { fencing_required: Some(FencingRequirement::StatefulSet), ..fd.clone() };
        let pod = FreshPod { uid: Some("u1"), terminating: true, node: "n1", excluded: false };
        let dead = FreshNode { observation: node("n1", "dead").observation, excluded: false };
        let enforce = FreshPolicy { mode: Mode::Enforce, paused: false, generation: Some(3) };
        let good = LastLook {
            pod: Some(pod),
            node: Some(dead.clone()),
            lease_renewed: renewed,
            policy: Some(enforce),
        };
        let oos = {
            let mut n = dead.clone();
            n.observation.taints = vec!["node.kubernetes.io/out-of-service:NoExecute".into()];
            n
        };
        struct Row {
            case: &'static str,
            action: ForceDelete,
            look: LastLook<'static>,
            want: Result<(), &'static str>,
        }
        let row = |case, look, want| Row { case, action: fd.clone(), look, want };
        let table = vec![
            row("still applies", good.clone(), Ok(())),
            row("gone", LastLook { pod: None, ..good.clone() }, Err("pod already gone")),
            row(
                "replaced by a pod with the same name",
                LastLook { pod: Some(FreshPod { uid: Some("u2"), ..pod }), ..good.clone() },
                Err("a new pod with the same name replaced it; left alone"),
            ),
            row(
                "no longer Terminating",
                LastLook { pod: Some(FreshPod { terminating: false, ..pod }), ..good.clone() },
                Err("pod is no longer Terminating"),
            ),
            row(
                "moved",
                LastLook { pod: Some(FreshPod { node: "n2", ..pod }), ..good.clone() },
                Err("pod moved to node \"n2\""),
            ),
            row(
                "pod excluded since the plan",
                LastLook { pod: Some(FreshPod { excluded: true, ..pod }), ..good.clone() },
                Err("pod annotated remediator.io/exclude=true; left alone"),
            ),
            row(
                "policy switched to DryRun",
                LastLook {
                    policy: Some(FreshPolicy {
                        mode: Mode::DryRun,
                        generation: Some(4),
                        ..enforce
                    }),
                    ..good.clone()
                },
                Err("the policy is in DryRun now; nothing deleted"),
            ),
            row(
                "policy paused",
                LastLook {
                    policy: Some(FreshPolicy { paused: true, generation: Some(4), ..enforce }),
                    ..good.clone()
                },
                Err("the policy is paused now; nothing deleted"),
            ),
            row(
                "policy changed otherwise",
                LastLook {
                    policy: Some(FreshPolicy { generation: Some(4), ..enforce }),
                    ..good.clone()
                },
                Err("the policy changed since the plan; its next evaluation decides"),
            ),
            row(
                "policy deleted",
                LastLook { policy: None, ..good.clone() },
                Err("the policy was deleted"),
            ),
            row(
                "Lease renewed since the plan",
                LastLook { lease_renewed: Some(t(0, 1)), ..good.clone() },
                Err(
                    "the node's Lease was renewed since the plan (renewTime 2026-01-01T00:00:00Z -> \
                     2026-01-01T00:00:01Z): its kubelet is alive; left alone",
                ),
            ),
            row(
                "Lease appeared since the plan",
                LastLook { lease_renewed: None, ..good.clone() },
                Err(
                    "the node's Lease was renewed since the plan (renewTime 2026-01-01T00:00:00Z -> \
                     none): its kubelet is alive; left alone",
                ),
            ),
            row(
                "node Ready again",
                LastLook {
                    node: Some(FreshNode {
                        observation: node("n1", "ready").observation,
                        excluded: false,
                    }),
                    ..good.clone()
                },
                Err("node is Ready again; left alone"),
            ),
            row(
                "node excluded since the plan",
                LastLook {
                    node: Some(FreshNode { excluded: true, ..dead.clone() }),
                    ..good.clone()
                },
                Err("node annotated remediator.io/exclude=true; left alone"),
            ),
            row("node deleted: still dead", LastLook { node: None, ..good.clone() }, Ok(())),
            Row {
                case: "fencing still there",
                action: fenced.clone(),
                look: LastLook { node: Some(oos.clone()), ..good.clone() },
                want: Ok(()),
            },
            Row {
                case: "fencing gone since the plan",
                action: fenced.clone(),
                look: good.clone(),
                want: Err("fencing evidence (StatefulSet) no longer on the node; left alone"),
            },
            Row {
                case: "node deleted counts as fencing",
                action: fenced.clone(),
                look: LastLook { node: None, ..good.clone() },
                want: Ok(()),
            },
        ];
        let fencing = crate::crd::FencingSpec::default();
        for r in table {
            assert_eq!(
                r.action.recheck(&r.look, Some(3), &fencing),
                r.want.map_err(String::from),
                "{}",
                r.case
            );
        }
    }
}
