//! The actions: what the writer carries out (or records, in DryRun), and the last look that
//! decides, from fresh reads right before a request, whether an action still stands.
//!
//! Its own module because actions are the contract between the pure core and the one writer:
//! the rules produce them, the guards ration them, the writer executes them. An action is one
//! type over a shared target ([`PodTarget`] or [`NodeTarget`]) and one implementation of [`Act`]
//! (its kind, ledger key, last-look recheck, how it is told); what is the same for every action
//! of a kind (Event reasons, log words, how a Pending record resolves) is one row of
//! [`kinds::spec`]. Adding one: `docs/src/development/adding-an-action.md`.

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::observed::OwnerKey;
use crate::crd::{ActionKind, ActionResult, FencingSpec, Mode, RecentAction};

mod delete_shutdown_pod;
mod evict;
mod force_delete;
pub mod kinds;
mod look;
mod mark_not_ready;
mod node;
mod remove_finalizers;
mod skip;

pub use delete_shutdown_pod::DeleteShutdownPod;
pub use evict::Evict;
pub use force_delete::{
    DISRUPTION_REASON, DISRUPTION_TARGET, DisruptionWrite, ForceDelete, PodPhaseNow,
};
pub use kinds::{KindSpec, PodResolution, event_reason};
pub use look::{
    FreshNode, FreshPod, FreshPolicy, LastLook, UndoChanges, lifecycle_still_allows,
    policy_still_enforces, same_pod, same_second, undo_changes,
};
pub use mark_not_ready::{MarkNotReady, NOT_READY_REASON, mark_acted_key};
pub use node::{NodeAction, NodeActionKind, node_acted_key};
pub use remove_finalizers::{RemoveFinalizers, removal_acted_key};
pub use skip::{PolicySkip, Skip};

#[cfg(test)]
pub(crate) mod fixtures {
    use super::LiveDeletion;

    /// A deletion seen at 00:00:00 with 30 s of grace.
    pub fn live_deletion() -> LiveDeletion {
        let at = "2026-01-01T00:00:00Z".parse().expect("ts");
        LiveDeletion { seen: at, deletion: at, grace_s: 30 }
    }
}

/// The pod a pod action is about, and why and since when it is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodTarget {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub node: String,
    /// The owner whose per-owner budget the action spends; `None` for a bare pod.
    pub owner: Option<OwnerKey>,
    /// Why, for Events, logs and status.
    pub reason: String,
    /// The instant the action became due; rate limiting may act later. Latency is measured
    /// from here, and candidates spend the guards oldest threshold first.
    pub threshold: Timestamp,
    /// When the operator saw its node's graceful shutdown begin, by its clock, if it did: the
    /// safety kernel admits no write on a node shutting down before its grace has passed.
    pub shutdown_seen: Option<Timestamp>,
}

/// A pod's deletion as the operator timed it on a live node (`liveNodeStuck`): the time the
/// policy gives the kubelet is counted from `seen` plus `grace_s`, by the operator's clock, and
/// holds only for this deletion: the safety kernel wants the same `deletionTimestamp` and grace
/// period in its fresh read of the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveDeletion {
    /// When the operator saw this deletion, by its clock.
    pub seen: Timestamp,
    /// The pod's `deletionTimestamp`, as the API server wrote it.
    pub deletion: Timestamp,
    /// Its `deletionGracePeriodSeconds` (0 when unset).
    pub grace_s: i64,
}

impl LiveDeletion {
    /// When the grace period of this deletion ended, by the operator's clock.
    pub fn grace_ended(&self) -> Timestamp {
        crate::core::duration::add(self.seen, jiff::SignedDuration::from_secs(self.grace_s.max(0)))
    }
}

/// The node a node action is about, and why and since when it is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeTarget {
    pub name: String,
    pub uid: String,
    /// Why, for Events, logs and status.
    pub reason: String,
    /// The instant it became due.
    pub threshold: Timestamp,
    /// When the operator saw the node's graceful shutdown begin, by its clock (see
    /// [`PodTarget::shutdown_seen`]).
    pub shutdown_seen: Option<Timestamp>,
}

/// What an action is about: a pod or a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target<'a> {
    Pod(&'a PodTarget),
    Node(&'a NodeTarget),
}

impl<'a> Target<'a> {
    /// The pod's namespace; empty for a node.
    pub fn namespace(self) -> &'a str {
        match self {
            Target::Pod(p) => &p.namespace,
            Target::Node(_) => "",
        }
    }

    /// The pod's name, or the node's.
    pub fn name(self) -> &'a str {
        match self {
            Target::Pod(p) => &p.name,
            Target::Node(n) => &n.name,
        }
    }

    /// The UID of the pod, or of the node.
    pub fn uid(self) -> &'a str {
        match self {
            Target::Pod(p) => &p.uid,
            Target::Node(n) => &n.uid,
        }
    }

    /// The pod's node, or the node itself.
    pub fn node(self) -> &'a str {
        match self {
            Target::Pod(p) => &p.node,
            Target::Node(n) => &n.name,
        }
    }

    pub fn owner(self) -> Option<&'a OwnerKey> {
        match self {
            Target::Pod(p) => p.owner.as_ref(),
            Target::Node(_) => None,
        }
    }

    pub fn reason(self) -> &'a str {
        match self {
            Target::Pod(p) => &p.reason,
            Target::Node(n) => &n.reason,
        }
    }

    pub fn threshold(self) -> Timestamp {
        match self {
            Target::Pod(p) => p.threshold,
            Target::Node(n) => n.threshold,
        }
    }

    /// When the operator saw the node's graceful shutdown begin, if it did.
    pub fn shutdown_seen(self) -> Option<Timestamp> {
        match self {
            Target::Pod(p) => p.shutdown_seen,
            Target::Node(n) => n.shutdown_seen,
        }
    }
}

/// One kind of action: implemented once per action type.
pub trait Act {
    /// The kind as recorded in the status and the metrics; its row of [`kinds::spec`] holds
    /// its Event reasons, log words and how a Pending record of it resolves.
    fn kind(&self) -> ActionKind;

    /// What it is about.
    fn target(&self) -> Target<'_>;

    /// The key its outcome is remembered by once done (and its failures, while failing), so
    /// that it is not taken (or, in DryRun, recorded) again.
    fn acted_key(&self) -> String {
        self.target().uid().to_string()
    }

    /// Whether the action still stands after the last look (fresh reads of the pod, its node,
    /// the node's Lease and the policy). `planned_generation` is the policy generation the
    /// plan was made with; `fencing` its fencing settings. `Err` says why it is skipped.
    fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        fencing: &FencingSpec,
    ) -> Result<(), Skip>;

    /// What its Events say it does (before the note's detail): by default its reason.
    fn note(&self) -> String {
        self.target().reason().to_string()
    }

    /// Why, as its status record says once it ran: by default its reason.
    fn recorded_reason(&self) -> String {
        self.target().reason().to_string()
    }

    /// What `plan` shows beside the target, under a JSON key (the finalizers removed).
    fn shown(&self) -> Option<(&'static str, &[String])> {
        None
    }
}

/// Something the writer should do (or record, in DryRun).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    ForceDelete(ForceDelete),
    Node(NodeAction),
    RemoveFinalizers(RemoveFinalizers),
    Evict(Evict),
    DeleteShutdownPod(DeleteShutdownPod),
    MarkNotReady(MarkNotReady),
}

impl Action {
    /// The action's one implementation of [`Act`].
    pub fn act(&self) -> &dyn Act {
        match self {
            Action::ForceDelete(a) => a,
            Action::Node(a) => a,
            Action::RemoveFinalizers(a) => a,
            Action::Evict(a) => a,
            Action::DeleteShutdownPod(a) => a,
            Action::MarkNotReady(a) => a,
        }
    }

    pub fn kind(&self) -> ActionKind {
        self.act().kind()
    }

    /// See [`Act::acted_key`].
    pub fn acted_key(&self) -> String {
        self.act().acted_key()
    }

    /// See [`Act::recheck`].
    pub fn recheck(
        &self,
        look: &LastLook<'_>,
        planned_generation: Option<i64>,
        fencing: &FencingSpec,
    ) -> Result<(), Skip> {
        self.act().recheck(look, planned_generation, fencing)
    }

    /// The pod it is about; `None` for a node action.
    pub fn pod(&self) -> Option<&PodTarget> {
        match self.act().target() {
            Target::Pod(pod) => Some(pod),
            Target::Node(_) => None,
        }
    }

    /// Whether it undoes this operator's own changes (never destructive).
    pub fn is_undo(&self) -> bool {
        matches!(self, Action::Node(n) if n.kind == NodeActionKind::Undo)
    }

    /// The UID of the object the action is about: the pod's, or the node's.
    pub fn uid(&self) -> &str {
        self.act().target().uid()
    }

    /// The instant the action became due: candidates spend the guards oldest threshold first.
    pub fn threshold(&self) -> Timestamp {
        self.act().target().threshold()
    }

    /// The owner whose per-owner budget the action spends; `None` for a bare pod or a node.
    pub fn owner(&self) -> Option<&OwnerKey> {
        self.act().target().owner()
    }

    /// The namespace and name of what the action targets: the order among equal thresholds.
    pub fn target(&self) -> (&str, &str) {
        let target = self.act().target();
        (target.namespace(), target.name())
    }

    /// The node the action is about (a pod's node, or the node itself).
    pub fn node(&self) -> &str {
        self.act().target().node()
    }

    /// Why, for Events, logs and status.
    pub fn reason(&self) -> &str {
        self.act().target().reason()
    }

    /// Its status record, made at `at`.
    pub fn record(
        &self,
        at: Timestamp,
        mode: Mode,
        reason: String,
        result: ActionResult,
        detail: Option<String>,
    ) -> RecentAction {
        let (namespace, name) = self.target();
        RecentAction {
            time: Time(at),
            action: self.kind(),
            mode,
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: self.uid().to_string(),
            node: self.node().to_string(),
            owner: self.owner().map(|o| format!("{}/{}", o.kind, o.name)),
            reason,
            result,
            detail,
        }
    }

    /// What its status record is about: the UID of its pod or node, and its kind.
    pub fn record_key(&self) -> (String, ActionKind) {
        (self.uid().to_string(), self.kind())
    }

    /// The record stored before its request is sent (Enforce), which the outcome's replaces.
    pub fn pending_record(&self, at: Timestamp, detail: String) -> RecentAction {
        let reason = self.reason().to_string();
        self.record(at, Mode::Enforce, reason, ActionResult::Pending, Some(detail))
    }
}
