//! The pure decision core: plain data in, decisions out.
//!
//! Nothing here talks to the API server, reads the clock or the environment: `now` is always a
//! parameter, so every function is deterministic and tested with tables.
//!
//! The reconciler's path through it: [`validate`] the spec, [`decide`](decide()) against the
//! [`Observed`] cluster and the policy's [`PolicyHistory`] (the [`plan`](plan()), the
//! [`desired_status`], the notices, the gauges), hand the decision to the writer, keep what it
//! did in the history ([`PolicyHistory::after_commit`]), requeue at [`Decision::wake_at`].
//!
//! By concept, from the bottom up (no module imports one above it):
//! - the inputs: [`observed`] (pods, nodes, workloads, past actions; their instants in
//!   [`stamp`]s, their UIDs in [`uid`]s), [`policy`] (the validated spec), [`evidence`] (since
//!   when evidence is trusted);
//! - the judgements of the inputs: [`node`] (alive, dying, dead, fenced), [`rollouts`] (which
//!   rollouts Terminating pods block), [`live_node_cause`] (why a pod is stuck on a live node);
//! - the vocabulary of decisions: [`verdict`] (why a pod is or is not released), [`action`] (what
//!   the writer does, and the last look before it does);
//! - [`guards`]: the circuit breaker, rate limit and per-owner budget every action passes;
//!   [`storm`]: the circuit over time (latch, cool-down) and the cluster-wide reading;
//! - [`rules`]: one module per rule, over shared release gates, yielding verdicts and candidate
//!   actions;
//! - [`plan`](mod@plan): composes the rules and spends the guards; [`status`] reports the plan;
//!   [`pod_notices`] says what it holds and why; [`pending_resolution`] settles the records of
//!   actions whose outcome is unknown; [`ahead`] stores the records of actions due at a known
//!   instant before it comes;
//! - [`history`]: what one policy remembers between reconciles (actions taken, status written,
//!   notices sent, retries, the circuit); [`ledger`]: what every policy in Enforce did;
//! - [`decide`](mod@decide): the reconcile's one pure step, the plan with its bookkeeping
//!   (desired status, notices not sent yet, gauges, records resolved and carried, requeue).

pub mod action;
pub mod ahead;
pub mod decide;
pub mod duration;
pub mod evidence;
pub mod guards;
pub mod history;
pub mod labels;
pub mod ledger;
pub mod live_node_cause;
pub mod node;
pub mod node_notices;
pub mod observed;
pub mod pending_resolution;
pub mod plan;
pub mod pod_notices;
pub mod policy;
pub mod quiet;
pub mod rollouts;
pub mod rules;
pub mod selector;
pub mod stamp;
pub mod status;
pub mod storm;
pub mod uid;
pub mod verdict;
pub mod zones;

pub use action::{
    Act, Action, DISRUPTION_REASON, DISRUPTION_TARGET, DeleteShutdownPod, DisruptionWrite, Evict,
    ForceDelete, FreshNode, FreshPod, FreshPolicy, LastLook, LiveDeletion, MarkNotReady,
    NOT_READY_REASON, NodeAction, NodeActionKind, NodeTarget, PodPhaseNow, PodTarget,
    RemoveFinalizers, Skip, Target, UndoChanges, lifecycle_still_allows, policy_still_enforces,
    removal_acted_key, same_second, undo_changes,
};
pub use decide::{Decision, Gauges, PendingNow, Reads, decide};
pub use duration::{DurationError, format_duration, parse_duration};
pub use evidence::{Drought, EvidenceWindow, Suspension, lease_drought};
pub use guards::{Circuit, Guards, RATE_WINDOW, Window};
pub use history::{
    ActionOutcome, Decided, EvidenceNews, Past, PolicyHistory, StatusWrite, UNDONE_RETRY, owner_key,
};
pub use labels::{LabelLookup, Labels, NodeLabels};
pub use ledger::Ledger;
pub use node::{
    DeathEvidence, FencingEvidence, NodeHealth, NodeHold, NodeState, NodeSummary, NodeTable,
    assess_node, fencing_evidence, node_hold, summarize_node,
};
pub use node_notices::{NODE_LEFT_ALONE, NodeNotice, new_node_notices, nodes_left_alone};
pub use observed::{
    Acting, Backoff, CircuitMemory, Lifecycle, ManagedBy, NodeControl, NodeObservation, NodeRecord,
    NodeView, Observed, Outage, OwnerKey, OwnerRef, PastAction, PodView, Rare, RareControl,
    Readiness, StormInput,
};
pub use pending_resolution::{PodNow, node_action_took_effect, resolve_failed, resolve_pending};
pub use plan::{Plan, PlanCounts, plan};
pub use pod_notices::{
    BeyondBudget, FencingNotice, PodNotice, REPAIRED_BY_KUBELET, REPORT_EVENTS_BURST,
    REPORTS_BEYOND_BUDGET, held_by_finalizers, needs_fencing, ready_on_dead_node,
    repaired_by_kubelet, stale_ready, stuck_on_live_nodes,
};
pub use policy::{
    FencingNeeds, Finalizers, InvalidPolicy, LiveNodeStuck, MaxUnhealthy, NodeActions,
    NodeLifecycle, StormSettings, ValidatedPolicy, validate,
};
pub use selector::{Selector, SelectorError};
pub use status::{
    CONDITION_CIRCUIT_OPEN, CONDITION_INVALID, CONDITION_PAUSED, CONDITION_READY, Evaluation,
    REPORTS_EVERY, blocked_rollouts_in_scope, circuit_memory, desired_status, hold_reports,
    push_recent_actions,
};
pub use storm::{OWN_DELETIONS_COUNT_FOR, Storm, transition_notices};
pub use verdict::{NotEligible, PodDecision, Verdict};
