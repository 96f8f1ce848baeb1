//! The pure decision core: plain data in, decisions out.
//!
//! Nothing here talks to the API server, reads the clock or the environment: `now` is always a
//! parameter, so every function is deterministic and tested with tables.
//!
//! The reconciler's path through it: [`validate`] the spec, [`plan`] against the
//! [`Observed`] cluster, hand [`Plan::actions`] to the writer, write [`desired_status`] when it
//! differs, requeue at [`Plan::next_deadline`].

pub mod budget;
pub mod duration;
pub mod evidence;
pub mod node;
pub mod plan;
pub mod policy;
pub mod rollouts;
pub mod selector;
pub mod status;

pub use budget::{RATE_WINDOW, Window};
pub use duration::{DurationError, format_duration, parse_duration};
pub use evidence::{Drought, EvidenceWindow, Suspension, lease_drought};
pub use node::{
    FencingEvidence, NodeHealth, NodeObservation, NodeState, NodeSummary, NodeView, Readiness,
    assess_node, summarize_node,
};
pub use plan::{
    Action, Circuit, ForceDelete, FreshPod, NotEligible, Observed, OwnerKey, OwnerRef, PastAction,
    Plan, PlanCounts, PodDecision, PodView, Verdict, plan,
};
pub use policy::{FencingNeeds, InvalidPolicy, MaxUnhealthy, ValidatedPolicy, validate};
pub use selector::{Selector, SelectorError};
pub use status::{
    CONDITION_CIRCUIT_OPEN, CONDITION_INVALID, CONDITION_PAUSED, CONDITION_READY, Evaluation,
    blocked_rollouts_in_scope, desired_status, push_recent_actions,
};
