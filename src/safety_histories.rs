//! Property tests of the decision core and the safety kernel, against a deliberately simple
//! reference of the safety invariants written apart from the planner.
//!
//! A generated history ([`Scenario`]) drives a small *true world* (Nodes, kubelet Leases,
//! pods, who did what) through up to 15 minutes: kubelets renewing every 10 s or dying, the
//! node lifecycle controller marking silent nodes Unknown, PodGC deleting the pods of deleted
//! Nodes, Ready flips, Lease deletion and re-creation, etcd stalls, operator watches that lag,
//! hang or fail and relist, operator restarts, admin cordons and taints (the cloud's shutdown
//! taint, someone else's out-of-service taint), node lifecycle conditions set and cleared
//! (maintenance, graceful shutdown), Nodes deleted by someone else and re-created
//! under a new UID, zones going out together or one by one, pods turning Terminating. The
//! world's objects feed the real [`ClusterState`] through its watch entry points; at every step
//! and at every deadline a plan asks for (and 1 s ahead of one, where [`ahead`] records its
//! actions), the real `plan` decides under an Enforce policy, the actions are recorded
//! `Pending` in the policy's status as the writer does (not again for those recorded ahead),
//! every planned action goes through the real [`admit`] with a last look built by the writer's
//! own `last_look` from the true world at that instant, and the actions the writer would send
//! (recheck and kernel passed) change the world as its requests would.
//!
//! Checked against the reference (plain code over what the watches delivered and what is
//! true, never the planner's helpers):
//! 1. death needs evidence we saw: a Lease that exists now, unchanged since we saw it change
//!    `leaseStaleFor` ago, the node not Ready since we saw it leave for `notReadyFor`, no stall
//!    (a Lease view silent > 15 s) or relist inside those windows; or the Node deleted by
//!    someone else and still gone;
//! 2. no destructive action planned in a zone whose every node (two or more) is unhealthy;
//! 3. a Node deleted only with the shutdown taint, someone else's out-of-service taint, or
//!    `assumeOffAfter` passed since its death;
//! 4. a pod that needs fencing released only with fencing from outside the operator;
//! 5. the kernel admits every action the planner proposes while the operator's view is the
//!    world's (a refusal then is a defect of one of them), and whatever it admits meets 1-4,
//!    6 and 7;
//! 6. no write on a node whose maintenance condition (MaintenanceInProgress) is True, nor on
//!    one whose GracefulNodeShutdownInProgress is True before `gracefulShutdownGrace` has
//!    passed since it turned True (the operator can only see it later, never earlier);
//! 7. a pod left Failed by a graceful node shutdown is deleted only while it is (the same pod,
//!    not Terminating) Failed so, since at least `failedByShutdown.deleteAfter`;
//! 8. a pod is marked not Ready only while it is (the same pod, not Terminating) Ready=True on
//!    a node dead by evidence we saw (as in 1): pods are Ready unless marked, the node
//!    lifecycle controller of this world never marks them, and a late status of the kubelet's
//!    makes a marked pod Ready again;
//! 9. deciding only when the index asks misses nothing: the operator decides when a watch
//!    event the index calls relevant arrives, at a plan's deadline, at a deferred pod's instant
//!    ([`crate::index::state::Change::At`]), after a (re)list or its own writes; a plan made at
//!    any other check (the histories decide at every step) proposes no action the operator's
//!    last decision did not, without counting on the periodic full pass;
//! 10. no request before its `Pending` record is stored: the policy's status (which the API
//!     server refuses to store in one second of every seven, and which outlives a restart)
//!     holds the action's `Pending` record when it is sent, written by its decision or ahead
//!     of its due instant by the real [`ahead`] (this run's bookkeeping of them lost with a
//!     restart); a record ahead is stored at most [`RECORD_AHEAD`] before its due instant, and
//!     is no longer `Pending` once a decision at or after that instant has stored the status;
//!
//! plus: a live-node release needs a Ready node and the policy's wait (`forceDeleteAfter`, or
//! `delayAfterGrace` and `finalizers.removeAfter`) passed since the pod's current
//! `deletionTimestamp` (a kubelet's final DELETE, grace 0, moves it); an undo removes only our
//! own cordon and
//! taint. Two pure pieces get their own properties: the [`EvidenceWindow`] never trusts
//! evidence across a silence or a relist, and [`held_zones`] never holds a zone with a Ready
//! node that was never away (and always holds a zone all out).
//!
//! Running: `cargo test --lib proptests` runs [`DEFAULT_CASES`] cases in all, with a fixed
//! seed (the same cases on every run, on every machine). Longer:
//! `KUBE_REMEDIATOR_PROPTEST_CASES=50000 cargo test --lib proptests`; other cases:
//! `KUBE_REMEDIATOR_PROPTEST_SEED=7`. What the histories do (actions sent, kernel refusals, per
//! policy shape): `cargo test --lib proptests::coverage -- --ignored --nocapture`.
//!
//! When a property fails, proptest shrinks the history and prints it after "minimal failing
//! input: s =" as a Rust literal: paste that `Scenario { .. }` as a new row of the table in
//! [`regressions`], with a name saying what it shows, and `cargo test --lib
//! proptests::regressions` replays it; `KUBE_REMEDIATOR_PROPTEST_TRACE=1` (with
//! `--nocapture`) prints its steps and the actions sent. No failure files are persisted
//! (`failure_persistence: None`): proptest would write seeds into
//! `src/safety/proptest-regressions/`, and a seed stops meaning anything once the generator
//! changes; a named history in the table keeps meaning what it says.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1 as corev1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, MicroTime, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;
use proptest::test_runner::{RngSeed, TestCaseError};

use crate::adapters::{NODE_LEASE_NAMESPACE, WatchedPod, node_record_json};
use crate::core::ahead::{
    Ahead, RECORD_AHEAD, RecordKey, ahead, record_key, records_before_requests,
};
use crate::core::evidence::{Drought, EvidenceWindow};
use crate::core::observed::{
    NodeControl, NodeObservation, NodeView, Outage, Rare, RareControl, Readiness,
};
use crate::core::status::push_recent_actions;
use crate::core::undo_changes;
use crate::core::zones::{ZONE_LABEL, ZoneHold, held_zones};
use crate::core::{
    Acting, Action, CircuitMemory, NodeActionKind, NodeRecord, PastAction, Plan, Skip,
    ValidatedPolicy, plan, validate,
};
use crate::crd::{
    APPLIED_BY_US, ActionResult, FIELD_MANAGER, FencingRequirement, GRACEFUL_SHUTDOWN_CONDITION,
    Mode, NODE_ACTIONS_ANNOTATION, OUT_OF_SERVICE_APPLIED_BY, OUT_OF_SERVICE_TAINT,
    OUT_OF_SERVICE_VALUE, RemediationPolicy, RemediationPolicySpec, RemediationPolicyStatus,
    SHUTDOWN_TAINT,
};
use crate::index::state::{Change, ClusterState, WatchedKind};
use crate::safety::{UndoChanges, Write, admit};
use crate::writer::last_look;

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// The cases of all the properties together, unless `KUBE_REMEDIATOR_PROPTEST_CASES` says.
pub const DEFAULT_CASES: u32 = 2000;

/// The seed unless `KUBE_REMEDIATOR_PROPTEST_SEED` says: the same cases on every run, so a
/// failure in CI is a failure on every machine.
const DEFAULT_SEED: u64 = 20_260_101;

/// A property's configuration, with `per_mille` of the cases.
fn config(per_mille: u32) -> ProptestConfig {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse::<u64>().ok());
    let total = env("KUBE_REMEDIATOR_PROPTEST_CASES").unwrap_or(u64::from(DEFAULT_CASES));
    let cases = u32::try_from(total * u64::from(per_mille) / 1000).unwrap_or(u32::MAX).max(1);
    ProptestConfig {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(env("KUBE_REMEDIATOR_PROPTEST_SEED").unwrap_or(DEFAULT_SEED)),
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Histories: what is generated, printed as Rust
// ---------------------------------------------------------------------------------------------

/// The policy a history is decided with (always Enforce; its notReadyFor and leaseStaleFor are
/// the [`Scenario`]'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// stuckTerminating only (delay 5 s), requireFencingFor by default (StatefulSet,
    /// ReadWriteOnce).
    StuckOnly,
    /// Node actions: cordon at once, taint (with the shutdown taint) after 10 s, delete (with
    /// fencing) after 20 s; undo after 10 s Ready. No assumeOffAfter.
    NodeActions,
    /// Node actions with assumeOffAfter 30 s: taint and delete without other fencing then.
    AssumeOff,
    /// requireFencingFor [All], live-node force deletes (forceDeleteAfter 30 s), removable
    /// finalizers, cordon and delete.
    FenceAllLive,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    ReplicaSet,
    StatefulSet,
    Job,
    Bare,
}

/// A Ready condition's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    True,
    False,
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaintKind {
    /// `node.cloudprovider.kubernetes.io/shutdown:NoSchedule`, by the cloud provider.
    Shutdown,
    /// `node.kubernetes.io/out-of-service=nodeshutdown:NoExecute`, by someone else.
    OutOfService,
    /// An unrelated taint.
    Other,
}

/// One pod of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodSetup {
    pub owner: Owner,
    /// Mounts a ReadWriteOnce claim.
    pub rwo: bool,
    /// Held by the finalizer `example.com/hold` (removable in [`Shape::FenceAllLive`] only).
    pub finalizer: bool,
    /// Its grace period when deleted.
    pub grace_s: u8,
}

/// One node: the kubelet's clock offset, when in each 10 s it renews, and its pods.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeSetup {
    pub skew_ms: i32,
    pub phase_ms: u16,
    pub pods: Vec<PodSetup>,
}

impl fmt::Debug for NodeSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "NodeSetup {{ skew_ms: {}, phase_ms: {}, pods: vec![",
            self.skew_ms, self.phase_ms
        )?;
        for (i, pod) in self.pods.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            write!(f, "{sep}{pod:?}")?;
        }
        write!(f, "] }}")
    }
}

/// What happens at a step. Node, pod and zone numbers wrap around what exists, so a shrunk
/// history stays valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Time passes only.
    Wait,
    /// The kubelet stops (dies) or starts renewing its Lease again.
    Kubelet { node: u8, alive: bool },
    /// Someone sets the node's Ready condition.
    ReadyIs { node: u8, status: Cond },
    /// Someone deletes the node's Lease (an alive kubelet re-creates it at its next renewal).
    DeleteLease { node: u8 },
    /// Someone creates the node's Lease (if missing), renewed now by the kubelet's clock.
    CreateLease { node: u8 },
    /// etcd stalls for `ms`: nothing changes, nothing is delivered, then renewals resume.
    Stall { ms: u32 },
    /// The operator's Node and Lease watches stop delivering (with an error, or silently
    /// hung); the world goes on.
    WatchDown { failed: bool },
    /// They come back: Nodes and Leases are listed again.
    WatchResume,
    /// From now on they deliver each event `ms` late (0: at once).
    WatchLag { ms: u16 },
    /// The operator restarts: a fresh state that lists everything now.
    Restart,
    /// An admin cordons or uncordons the node.
    Cordon { node: u8, on: bool },
    /// Someone adds (overwrites) or removes a taint.
    Taint { node: u8, kind: TaintKind, on: bool },
    /// Someone sets (`on`) or clears a node lifecycle condition: MaintenanceInProgress
    /// (`shutdown` false) or GracefulNodeShutdownInProgress.
    Lifecycle { node: u8, shutdown: bool, on: bool },
    /// Someone else deletes the Node (its Lease goes with it, as the garbage collector does).
    DeleteNode { node: u8 },
    /// A Node of that name is created again (deleting the current one first) with a new UID.
    RecreateNode { node: u8, status: Cond },
    /// Every node of the zone at once: kubelets stop, Ready=Unknown.
    ZoneOut { zone: u8 },
    /// Every node of the zone back: kubelets renew, Ready=True.
    ZoneBack { zone: u8 },
    /// A pod is deleted (gracefully): Terminating.
    PodTerminating { node: u8, pod: u8 },
    /// A pod is gone (its kubelet finished it, or PodGC).
    PodGone { node: u8, pod: u8 },
    /// A Terminating pod's kubelet finished it: its final DELETE (grace 0) moves the
    /// deletionTimestamp to now, and the pod goes unless a finalizer holds it.
    PodFinished { node: u8, pod: u8 },
    /// A gone pod is replaced by one of the same name and a new UID.
    PodReplaced { node: u8, pod: u8 },
    /// A graceful node shutdown ends a running pod: phase Failed, reason Terminated.
    PodShutdown { node: u8, pod: u8 },
    /// A status the kubelet sent earlier lands: the pod is Ready=True again.
    PodReadyAgain { node: u8, pod: u8 },
}

/// A whole history. Its `Debug` is the Rust literal that rebuilds it.
#[derive(Clone, PartialEq, Eq)]
pub struct Scenario {
    pub shape: Shape,
    /// Node `i` is in zone `i % zones`.
    pub zones: u8,
    /// `safety.maxUnhealthyNodes`: a count, or `None` for "100%".
    pub max_unhealthy: Option<u8>,
    /// `deadNode.notReadyFor` and `deadNode.leaseStaleFor`, in seconds.
    pub not_ready_s: u8,
    pub lease_stale_s: u8,
    pub nodes: Vec<NodeSetup>,
    /// Each step: the instant it happens at (milliseconds from the start), and what happens.
    /// Steps are taken in the order of their instants (in the order written for equal ones);
    /// time never goes back, so a step due during a stall happens when the stall ends.
    pub steps: Vec<(u32, Event)>,
}

impl Scenario {
    /// One zone of `shape`, no storm limit, `notReadyFor` 30 s, `leaseStaleFor` 40 s, and no
    /// node or step yet.
    fn one_zone(shape: Shape) -> Scenario {
        Scenario {
            shape,
            zones: 1,
            max_unhealthy: None,
            not_ready_s: 30,
            lease_stale_s: 40,
            nodes: Vec::new(),
            steps: Vec::new(),
        }
    }

    /// The steps in the order they are taken.
    fn timeline(&self) -> Vec<(u32, Event)> {
        let mut steps = self.steps.clone();
        steps.sort_by_key(|(at, _)| *at);
        steps
    }
}

impl fmt::Debug for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Scenario {{")?;
        writeln!(f, "    shape: {:?},", self.shape)?;
        writeln!(f, "    zones: {},", self.zones)?;
        writeln!(f, "    max_unhealthy: {:?},", self.max_unhealthy)?;
        writeln!(f, "    not_ready_s: {},", self.not_ready_s)?;
        writeln!(f, "    lease_stale_s: {},", self.lease_stale_s)?;
        writeln!(f, "    nodes: vec![")?;
        for node in &self.nodes {
            writeln!(f, "        {node:?},")?;
        }
        writeln!(f, "    ],")?;
        writeln!(f, "    steps: vec![")?;
        for step in self.timeline() {
            writeln!(f, "        {step:?},")?;
        }
        writeln!(f, "    ],")?;
        write!(f, "}}")
    }
}

// ---------------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------------

fn pod_setup() -> impl Strategy<Value = PodSetup> {
    let owner = prop_oneof![
        Just(Owner::ReplicaSet),
        Just(Owner::StatefulSet),
        Just(Owner::Job),
        Just(Owner::Bare)
    ];
    (owner, any::<bool>(), prop::bool::weighted(0.2), prop_oneof![Just(0u8), Just(30u8)])
        .prop_map(|(owner, rwo, finalizer, grace_s)| PodSetup { owner, rwo, finalizer, grace_s })
}

fn node_setup() -> impl Strategy<Value = NodeSetup> {
    (-300_000i32..300_000, 0u16..10_000, prop::collection::vec(pod_setup(), 1..=2))
        .prop_map(|(skew_ms, phase_ms, pods)| NodeSetup { skew_ms, phase_ms, pods })
}

fn cond() -> impl Strategy<Value = Cond> {
    prop_oneof![Just(Cond::True), Just(Cond::False), Just(Cond::Unknown)]
}

fn event() -> impl Strategy<Value = Event> {
    let n = || 0u8..5;
    let taint = prop_oneof![
        2 => Just(TaintKind::Shutdown),
        2 => Just(TaintKind::OutOfService),
        1 => Just(TaintKind::Other)
    ];
    prop_oneof![
        4 => Just(Event::Wait),
        8 => (n(), prop::bool::weighted(0.4)).prop_map(|(node, alive)| Event::Kubelet { node, alive }),
        6 => (n(), cond()).prop_map(|(node, status)| Event::ReadyIs { node, status }),
        2 => n().prop_map(|node| Event::DeleteLease { node }),
        1 => n().prop_map(|node| Event::CreateLease { node }),
        1 => (5_000u32..150_000).prop_map(|ms| Event::Stall { ms }),
        1 => any::<bool>().prop_map(|failed| Event::WatchDown { failed }),
        1 => Just(Event::WatchResume),
        2 => prop_oneof![Just(0u16), 1u16..8_000].prop_map(|ms| Event::WatchLag { ms }),
        1 => Just(Event::Restart),
        2 => (n(), any::<bool>()).prop_map(|(node, on)| Event::Cordon { node, on }),
        4 => (n(), taint, prop::bool::weighted(0.7))
            .prop_map(|(node, kind, on)| Event::Taint { node, kind, on }),
        2 => (n(), any::<bool>(), prop::bool::weighted(0.6))
            .prop_map(|(node, shutdown, on)| Event::Lifecycle { node, shutdown, on }),
        1 => n().prop_map(|node| Event::DeleteNode { node }),
        1 => (n(), cond()).prop_map(|(node, status)| Event::RecreateNode { node, status }),
        1 => (0u8..3).prop_map(|zone| Event::ZoneOut { zone }),
        1 => (0u8..3).prop_map(|zone| Event::ZoneBack { zone }),
        7 => (n(), 0u8..2).prop_map(|(node, pod)| Event::PodTerminating { node, pod }),
        1 => (n(), 0u8..2).prop_map(|(node, pod)| Event::PodGone { node, pod }),
        2 => (n(), 0u8..2).prop_map(|(node, pod)| Event::PodFinished { node, pod }),
        1 => (n(), 0u8..2).prop_map(|(node, pod)| Event::PodReplaced { node, pod }),
        2 => (n(), 0u8..2).prop_map(|(node, pod)| Event::PodShutdown { node, pod }),
        1 => (n(), 0u8..2).prop_map(|(node, pod)| Event::PodReadyAgain { node, pod }),
    ]
}

/// Histories last up to 15 minutes: time enough for deaths, node actions, undos and the
/// 10 minutes the storm guard counts the Nodes we deleted.
const HISTORY_MS: u32 = 900_000;

fn scenario(shape: Shape) -> impl Strategy<Value = Scenario> {
    (
        (1u8..=3, prop::option::weighted(0.2, 1u8..4), 20u8..=90, 40u8..=70),
        prop::collection::vec(node_setup(), 2..=5),
        prop::collection::vec((0..HISTORY_MS, event()), 10..70),
    )
        .prop_map(move |((zones, max_unhealthy, not_ready_s, lease_stale_s), nodes, steps)| {
            Scenario { shape, zones, max_unhealthy, not_ready_s, lease_stale_s, nodes, steps }
        })
}

// ---------------------------------------------------------------------------------------------
// The policies
// ---------------------------------------------------------------------------------------------

const ASSUME_OFF_AFTER_MS: u64 = 30_000;

/// A history's `notReadyFor` and `leaseStaleFor`, for the reference.
#[derive(Clone, Copy, Debug)]
struct Durations {
    not_ready_ms: u64,
    lease_stale_ms: u64,
}

/// The removable finalizer of [`Shape::FenceAllLive`] (any other shape: not removable).
const HOLD: &str = "example.com/hold";
const POLICY: &str = "p";
/// `failedByShutdown.deleteAfter` of every shape.
const SHUTDOWN_DELETE_AFTER_MS: u64 = 30_000;

fn policy_spec(scenario: &Scenario) -> RemediationPolicySpec {
    let mut s = RemediationPolicySpec { mode: Mode::Enforce, ..RemediationPolicySpec::default() };
    s.dead_node.not_ready_for = format!("{}s", scenario.not_ready_s);
    s.dead_node.lease_stale_for = format!("{}s", scenario.lease_stale_s.max(40));
    let (shape, max_unhealthy) = (scenario.shape, scenario.max_unhealthy);
    s.stuck_terminating.delay_after_grace = "5s".into();
    s.safety.max_unhealthy_nodes = match max_unhealthy {
        None => IntOrString::String("100%".into()),
        Some(n) => IntOrString::Int(i32::from(n)),
    };
    s.safety.rate_limit.actions_per_minute = 100;
    s.safety.max_pods_per_owner_per_minute = 100;
    s.node_actions.undo_after = "10s".into();
    s.failed_by_shutdown.enabled = true;
    s.failed_by_shutdown.delete_after = format!("{}s", SHUTDOWN_DELETE_AFTER_MS / 1000);
    s.ready_on_dead_node.mark_not_ready = true;
    match shape {
        Shape::StuckOnly => {}
        Shape::NodeActions => {
            s.node_actions.cordon_after = Some("0s".into());
            s.node_actions.out_of_service_taint_after = Some("10s".into());
            s.node_actions.delete_node_after = Some("20s".into());
        }
        Shape::AssumeOff => {
            s.node_actions.cordon_after = Some("5s".into());
            s.node_actions.out_of_service_taint_after = Some("10s".into());
            s.node_actions.assume_off_after = Some("30s".into());
            s.node_actions.delete_node_after = Some("40s".into());
        }
        Shape::FenceAllLive => {
            s.dead_node.require_fencing_for = vec![FencingRequirement::All];
            s.live_node_stuck.delay_after_grace = "20s".into();
            s.live_node_stuck.force_delete_after = Some("30s".into());
            s.finalizers.removable = vec![HOLD.into()];
            s.finalizers.remove_after = "10s".into();
            s.node_actions.cordon_after = Some("0s".into());
            s.node_actions.delete_node_after = Some("20s".into());
        }
    }
    s
}

// ---------------------------------------------------------------------------------------------
// The true world
// ---------------------------------------------------------------------------------------------

/// Silences longer than this are stalls (the kubelet renews every 10 s, plus 5 s of latency).
const SILENCE_MS: u64 = 15_000;
const RENEW_EVERY_MS: u64 = 10_000;
/// The node lifecycle controller's grace before it marks a silent node Unknown.
const NODE_MONITOR_GRACE_MS: u64 = 40_000;
/// PodGC's wait before it deletes the pods of a Node that is gone.
const POD_GC_QUARANTINE_MS: u64 = 40_000;

fn ts(ms: u64) -> Timestamp {
    let t0: Timestamp = "2026-01-01T00:00:00Z".parse().expect("base instant");
    t0 + SignedDuration::from_millis(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// The kubelet's clock: ours plus its skew.
fn node_clock(ms: u64, skew_ms: i64) -> Timestamp {
    ts(ms) + SignedDuration::from_millis(skew_ms)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Actor {
    Us,
    SomeoneElse,
}

#[derive(Clone, Debug)]
struct WTaint {
    kind: TaintKind,
    by: Actor,
    added_ms: u64,
}

#[derive(Clone, Debug)]
struct WNode {
    name: String,
    zone: String,
    skew_ms: i64,
    /// When its kubelet renews next (while alive).
    renew_at: u64,
    exists: bool,
    /// Since when no Node of this name exists.
    gone_since: Option<u64>,
    uid: String,
    generation: u32,
    ready: Cond,
    ready_changed_ms: u64,
    kubelet_alive: bool,
    /// The kubelet's Lease `renewTime` (its clock), if the Lease exists.
    lease: Option<Timestamp>,
    /// When the Lease was last written (our clock): the node lifecycle controller's input.
    lease_written_ms: u64,
    unschedulable: bool,
    /// The field manager owning `spec.unschedulable`.
    cordon_manager: Option<String>,
    taints: Vec<WTaint>,
    record: NodeRecord,
    /// MaintenanceInProgress is True.
    maintenance: bool,
    /// Since when GracefulNodeShutdownInProgress is True, if it is.
    shutting_down_since: Option<u64>,
    /// Who deleted the last Node of this name.
    deleted_by: Option<Actor>,
}

#[derive(Clone, Debug)]
struct WPod {
    node: usize,
    name: String,
    uid: String,
    generation: u32,
    setup: PodSetup,
    exists: bool,
    /// deletionTimestamp, ms.
    deletion_ms: Option<u64>,
    /// deletionGracePeriodSeconds.
    deletion_grace_s: u8,
    finalizers: Vec<String>,
    /// When a graceful node shutdown left it Failed (reason Terminated), ms.
    shutdown_ms: Option<u64>,
    /// Its Ready condition is True (false once marked not Ready).
    ready: bool,
}

#[derive(Clone, Debug)]
struct World {
    nodes: Vec<WNode>,
    pods: Vec<WPod>,
}

impl World {
    fn new(s: &Scenario) -> World {
        let zones = ["a", "b", "c"];
        let nodes = s
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| WNode {
                name: format!("n{i}"),
                zone: zones[i % usize::from(s.zones.clamp(1, 3))].to_string(),
                skew_ms: i64::from(n.skew_ms),
                renew_at: u64::from(n.phase_ms) % RENEW_EVERY_MS,
                exists: true,
                gone_since: None,
                uid: format!("n{i}-uid-1"),
                generation: 1,
                ready: Cond::True,
                ready_changed_ms: 0,
                kubelet_alive: true,
                lease: Some(node_clock(0, i64::from(n.skew_ms))),
                lease_written_ms: 0,
                unschedulable: false,
                cordon_manager: None,
                taints: Vec::new(),
                record: NodeRecord::default(),
                maintenance: false,
                shutting_down_since: None,
                deleted_by: None,
            })
            .collect();
        let pods = s
            .nodes
            .iter()
            .enumerate()
            .flat_map(|(i, n)| {
                n.pods.iter().enumerate().map(move |(j, setup)| WPod {
                    node: i,
                    name: format!("p{i}-{j}"),
                    uid: format!("p{i}-{j}-uid-1"),
                    generation: 1,
                    setup: *setup,
                    exists: true,
                    deletion_ms: None,
                    deletion_grace_s: 0,
                    finalizers: if setup.finalizer { vec![HOLD.into()] } else { vec![] },
                    shutdown_ms: None,
                    ready: true,
                })
            })
            .collect();
        World { nodes, pods }
    }

    fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    fn pod_index(&self, node: u8, pod: u8) -> Option<usize> {
        let node = usize::from(node) % self.nodes.len();
        let on: Vec<usize> = (0..self.pods.len()).filter(|p| self.pods[*p].node == node).collect();
        (!on.is_empty()).then(|| on[usize::from(pod) % on.len()])
    }

    fn node_object(&self, i: usize) -> Option<corev1::Node> {
        let n = &self.nodes[i];
        if !n.exists {
            return None;
        }
        let status = match n.ready {
            Cond::True => "True",
            Cond::False => "False",
            Cond::Unknown => "Unknown",
        };
        let taints = n
            .taints
            .iter()
            .map(|t| {
                let (key, effect, value) = match t.kind {
                    TaintKind::Shutdown => (SHUTDOWN_TAINT, "NoSchedule", None),
                    TaintKind::OutOfService => {
                        (OUT_OF_SERVICE_TAINT, "NoExecute", Some(OUT_OF_SERVICE_VALUE))
                    }
                    TaintKind::Other => ("example.com/maintenance", "NoSchedule", None),
                };
                corev1::Taint {
                    key: key.into(),
                    effect: effect.into(),
                    value: value.map(String::from),
                    time_added: Some(Time(ts(t.added_ms))),
                }
            })
            .collect();
        let mut annotations = BTreeMap::new();
        if n.record != NodeRecord::default() {
            annotations.insert(NODE_ACTIONS_ANNOTATION.into(), node_record_json(&n.record));
        }
        // Our taint says so (the writer sets the annotation with it).
        if n.taints.iter().any(|t| t.kind == TaintKind::OutOfService && t.by == Actor::Us) {
            annotations.insert(OUT_OF_SERVICE_APPLIED_BY.into(), APPLIED_BY_US.into());
        }
        let annotations = (!annotations.is_empty()).then_some(annotations);
        let condition = |type_: &str, since: u64| corev1::NodeCondition {
            type_: type_.into(),
            status: "True".into(),
            last_transition_time: Some(Time(ts(since))),
            ..corev1::NodeCondition::default()
        };
        let mut conditions = vec![corev1::NodeCondition {
            type_: "Ready".into(),
            status: status.into(),
            last_transition_time: Some(Time(ts(n.ready_changed_ms))),
            ..corev1::NodeCondition::default()
        }];
        if n.maintenance {
            conditions.push(condition("MaintenanceInProgress", 0));
        }
        if let Some(since) = n.shutting_down_since {
            conditions.push(condition(GRACEFUL_SHUTDOWN_CONDITION, since));
        }
        let managed_fields = n.cordon_manager.as_ref().map(|m| {
            vec![ManagedFieldsEntry {
                manager: Some(m.clone()),
                fields_v1: Some(FieldsV1(serde_json::json!({"f:spec": {"f:unschedulable": {}}}))),
                ..ManagedFieldsEntry::default()
            }]
        });
        Some(corev1::Node {
            metadata: ObjectMeta {
                name: Some(n.name.clone()),
                uid: Some(n.uid.clone()),
                labels: Some(BTreeMap::from([(ZONE_LABEL.into(), n.zone.clone())])),
                annotations,
                managed_fields,
                ..ObjectMeta::default()
            },
            spec: Some(corev1::NodeSpec {
                unschedulable: Some(n.unschedulable),
                taints: Some(taints),
                ..corev1::NodeSpec::default()
            }),
            status: Some(corev1::NodeStatus {
                conditions: Some(conditions),
                ..corev1::NodeStatus::default()
            }),
        })
    }

    fn lease_object(&self, i: usize) -> Option<Lease> {
        let n = &self.nodes[i];
        n.lease.map(|renewed| Lease {
            metadata: ObjectMeta {
                name: Some(n.name.clone()),
                namespace: Some(NODE_LEASE_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec { renew_time: Some(MicroTime(renewed)), ..LeaseSpec::default() }),
        })
    }

    fn pod_object(&self, p: usize) -> Option<corev1::Pod> {
        let pod = &self.pods[p];
        if !pod.exists {
            return None;
        }
        let owner = |kind: &str, name: &str, api: &str| OwnerReference {
            api_version: api.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            controller: Some(true),
            ..OwnerReference::default()
        };
        let owner_references = match pod.setup.owner {
            Owner::ReplicaSet => Some(vec![owner("ReplicaSet", "web-1", "apps/v1")]),
            Owner::StatefulSet => Some(vec![owner("StatefulSet", "db", "apps/v1")]),
            Owner::Job => Some(vec![owner("Job", "batch", "batch/v1")]),
            Owner::Bare => None,
        };
        let volumes = pod.setup.rwo.then(|| {
            vec![corev1::Volume {
                name: "data".into(),
                persistent_volume_claim: Some(corev1::PersistentVolumeClaimVolumeSource {
                    claim_name: claim_name(&pod.name),
                    ..corev1::PersistentVolumeClaimVolumeSource::default()
                }),
                ..corev1::Volume::default()
            }]
        });
        Some(corev1::Pod {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some("ns".into()),
                uid: Some(pod.uid.clone()),
                owner_references,
                deletion_timestamp: pod.deletion_ms.map(|ms| Time(ts(ms))),
                deletion_grace_period_seconds: pod
                    .deletion_ms
                    .map(|_| i64::from(pod.deletion_grace_s)),
                finalizers: (!pod.finalizers.is_empty()).then(|| pod.finalizers.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(corev1::PodSpec {
                node_name: Some(self.nodes[pod.node].name.clone()),
                volumes,
                ..corev1::PodSpec::default()
            }),
            status: Some(corev1::PodStatus {
                phase: Some(if pod.shutdown_ms.is_some() { "Failed" } else { "Running" }.into()),
                reason: pod.shutdown_ms.map(|_| "Terminated".into()),
                conditions: Some(vec![corev1::PodCondition {
                    type_: "Ready".into(),
                    status: if pod.ready && pod.shutdown_ms.is_none() { "True" } else { "False" }
                        .into(),
                    last_transition_time: Some(Time(ts(0))),
                    ..corev1::PodCondition::default()
                }]),
                ..corev1::PodStatus::default()
            }),
        })
    }

    /// Whether the Node of this name is gone, deleted last by someone else.
    fn deleted_by_someone_else(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        !n.exists && n.deleted_by == Some(Actor::SomeoneElse)
    }

    /// Fencing from outside the operator on the node now: the cloud's shutdown taint, an
    /// out-of-service taint someone else applied, or the Node deleted by someone else.
    fn fenced_from_outside(&self, i: usize) -> bool {
        let n = &self.nodes[i];
        if !n.exists {
            return self.deleted_by_someone_else(i);
        }
        n.taints.iter().any(|t| match t.kind {
            TaintKind::Shutdown => true,
            TaintKind::OutOfService => t.by == Actor::SomeoneElse,
            TaintKind::Other => false,
        })
    }
}

fn claim_name(pod: &str) -> String {
    format!("data-{pod}")
}

fn claim_object(pod: &str) -> corev1::PersistentVolumeClaim {
    corev1::PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(pod)),
            namespace: Some("ns".into()),
            ..ObjectMeta::default()
        },
        spec: Some(corev1::PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            ..corev1::PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

// ---------------------------------------------------------------------------------------------
// The reference: what the operator was shown, in plain code
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct SeenNode {
    uid: String,
    ready: bool,
    /// When we first saw it not Ready (this UID), while it stays so.
    not_ready_since: Option<u64>,
}

#[derive(Clone, Copy, Debug)]
struct SeenLease {
    renewed: Timestamp,
    /// When we saw this `renewTime` arrive.
    changed_at: u64,
}

/// What the operator's watches delivered, and since when that view is continuous.
#[derive(Clone, Debug, Default)]
struct Reference {
    /// The last relist, or the first Lease event after a silence longer than [`SILENCE_MS`].
    trust_from: Option<u64>,
    last_lease_event: Option<u64>,
    nodes: BTreeMap<String, SeenNode>,
    leases: BTreeMap<String, SeenLease>,
}

impl Reference {
    fn lease_view_event(&mut self, now: u64) {
        if self.last_lease_event.is_some_and(|last| now - last > SILENCE_MS) {
            self.trust_from = Some(self.trust_from.map_or(now, |t| t.max(now)));
        }
        self.last_lease_event = Some(now);
    }

    fn lease(&mut self, now: u64, name: &str, renewed: Option<Timestamp>) {
        self.lease_view_event(now);
        match renewed {
            None => {
                self.leases.remove(name);
            }
            Some(renewed) => {
                let changed_at = match self.leases.get(name) {
                    Some(l) if l.renewed == renewed => l.changed_at,
                    _ => now,
                };
                self.leases.insert(name.into(), SeenLease { renewed, changed_at });
            }
        }
    }

    fn node(&mut self, now: u64, name: &str, uid: &str, ready: bool) {
        let before = self.nodes.get(name).filter(|n| n.uid == uid);
        let not_ready_since =
            if ready { None } else { before.and_then(|b| b.not_ready_since).or(Some(now)) };
        self.nodes.insert(name.into(), SeenNode { uid: uid.into(), ready, not_ready_since });
    }

    fn node_deleted(&mut self, name: &str) {
        self.nodes.remove(name);
    }

    /// Nodes and Leases listed again now: a fresh view, from now.
    fn relisted(&mut self, now: u64, world: &World) {
        self.trust_from = Some(self.trust_from.map_or(now, |t| t.max(now)));
        self.last_lease_event = Some(now);
        self.nodes = world
            .nodes
            .iter()
            .filter(|n| n.exists)
            .map(|n| {
                let ready = n.ready == Cond::True;
                let seen = SeenNode {
                    uid: n.uid.clone(),
                    ready,
                    not_ready_since: (!ready).then_some(now),
                };
                (n.name.clone(), seen)
            })
            .collect();
        self.leases = world
            .nodes
            .iter()
            .filter_map(|n| {
                n.lease.map(|renewed| (n.name.clone(), SeenLease { renewed, changed_at: now }))
            })
            .collect();
    }

    /// When node `i` became dead by evidence we saw (invariant 2), if it is: its Lease exists
    /// now and still shows the renewal we saw arrive, its Node (the one we saw) is not Ready,
    /// both for their durations since we saw them, counted from no earlier than the last
    /// relist or stall, and the Lease view is not silent now.
    fn watched_dead(&self, world: &World, i: usize, now: u64, durations: Durations) -> Option<u64> {
        let trust = self.trust_from?;
        if now - self.last_lease_event? > SILENCE_MS {
            return None;
        }
        let node = &world.nodes[i];
        let renewed_now = node.lease?;
        let seen_lease = self.leases.get(&node.name)?;
        if seen_lease.renewed != renewed_now || !node.exists || node.ready == Cond::True {
            return None;
        }
        let seen_node = self.nodes.get(&node.name)?;
        if seen_node.uid != node.uid {
            return None;
        }
        let not_ready_since = seen_node.not_ready_since?;
        let dead_at = (seen_lease.changed_at.max(trust) + durations.lease_stale_ms)
            .max(not_ready_since.max(trust) + durations.not_ready_ms);
        (now >= dead_at).then_some(dead_at)
    }

    /// Whether the zone's seen nodes number two or more and none is Ready.
    fn zone_all_out(&self, world: &World, zone: &str) -> bool {
        let members: Vec<&SeenNode> = self
            .nodes
            .iter()
            .filter(|(name, _)| world.node_index(name).is_some_and(|i| world.nodes[i].zone == zone))
            .map(|(_, n)| n)
            .collect();
        members.len() >= 2 && members.iter().all(|n| !n.ready)
    }
}

// ---------------------------------------------------------------------------------------------
// The run: world, operator, planner, kernel
// ---------------------------------------------------------------------------------------------

struct Run {
    shape: Shape,
    durations: Durations,
    policy: ValidatedPolicy,
    policy_object: RemediationPolicy,
    world: World,
    state: ClusterState,
    reference: Reference,
    /// The operator's Node and Lease watches deliver.
    watching: bool,
    /// How late they deliver, and what they have yet to deliver (with when).
    lag_ms: u64,
    queue: VecDeque<(u64, Delivery)>,
    now: u64,
    recent: Vec<PastAction>,
    acted: BTreeSet<String>,
    storm: Option<CircuitMemory>,
    /// The last plan's next deadline (ms): the operator reconciles again then.
    next_deadline: Option<u64>,
    /// Whether the operator would reconcile at the next check (property 9): a watch event the
    /// index calls relevant arrived since the last one, a list or a restart, an action sent,
    /// or the last plan unsynced.
    asked: bool,
    /// The actions of the last plan the operator would have made (asked, or at a deadline or
    /// a deferred pod's instant), described.
    asked_actions: BTreeSet<String>,
    /// How the index weighed the changes and the checks (`relevant`, `deferred`; checks
    /// `asked`, `not asked`), for the coverage report.
    index: BTreeMap<&'static str, u32>,
    /// The policy's status as the API server holds it (it outlives a restart): where the
    /// `Pending` records are stored before their requests (property 10).
    status: RemediationPolicyStatus,
    /// The records this run stored ahead of their actions, with their due instants: the
    /// history's bookkeeping, lost with a restart.
    stored_ahead: BTreeMap<RecordKey, Timestamp>,
    /// Records ahead stored, actions sent on one, records ahead withdrawn, status writes
    /// refused: for the coverage report.
    ahead_counts: BTreeMap<&'static str, u32>,
    /// Per kind, the actions admitted and sent.
    sent: BTreeMap<&'static str, u32>,
    /// Per invariant, the planned actions the kernel refused (a view behind the world's).
    refused: BTreeMap<&'static str, u32>,
    /// `KUBE_REMEDIATOR_PROPTEST_TRACE=1`: print each step and each action sent (to read a
    /// named history).
    trace: bool,
}

type Checked = Result<(), String>;

/// A Node or Lease watch event, as it was when the change happened.
#[derive(Clone, Debug)]
enum Delivery {
    Node { name: String, object: Option<Box<corev1::Node>> },
    Lease { name: String, renewed: Option<Timestamp> },
}

impl Run {
    fn new(s: &Scenario) -> Run {
        let spec = policy_spec(s);
        let policy = validate(&spec).expect("a valid test policy");
        let mut policy_object = RemediationPolicy::new(POLICY, spec);
        policy_object.metadata.generation = Some(1);
        let mut run = Run {
            shape: s.shape,
            durations: Durations {
                not_ready_ms: 1000 * u64::from(s.not_ready_s),
                lease_stale_ms: 1000 * u64::from(s.lease_stale_s.max(40)),
            },
            policy,
            policy_object,
            world: World::new(s),
            state: ClusterState::new(),
            reference: Reference::default(),
            watching: true,
            lag_ms: 0,
            queue: VecDeque::new(),
            now: 0,
            recent: Vec::new(),
            acted: BTreeSet::new(),
            storm: None,
            next_deadline: None,
            asked: true,
            asked_actions: BTreeSet::new(),
            index: BTreeMap::new(),
            status: RemediationPolicyStatus::default(),
            stored_ahead: BTreeMap::new(),
            ahead_counts: BTreeMap::new(),
            sent: BTreeMap::new(),
            refused: BTreeMap::new(),
            trace: std::env::var_os("KUBE_REMEDIATOR_PROPTEST_TRACE").is_some(),
        };
        run.list_everything();
        run
    }

    // --- delivery: the world's changes to the operator's state and to the reference ----------

    /// Node `i` as it is now, to the Node watch.
    fn deliver_node(&mut self, i: usize) {
        let name = self.world.nodes[i].name.clone();
        self.deliver(Delivery::Node { name, object: self.world.node_object(i).map(Box::new) });
    }

    /// Node `i`'s Lease as it is now, to the Lease watch.
    fn deliver_lease(&mut self, i: usize) {
        let n = &self.world.nodes[i];
        self.deliver(Delivery::Lease { name: n.name.clone(), renewed: n.lease });
    }

    /// A Node or Lease event: dropped while the watches are down, queued while they lag.
    fn deliver(&mut self, delivery: Delivery) {
        if !self.watching {
            return;
        }
        if self.lag_ms == 0 && self.queue.is_empty() {
            return self.take(delivery);
        }
        // A watch keeps its order.
        let at = self.queue.back().map_or(0, |(at, _)| *at).max(self.now + self.lag_ms);
        self.queue.push_back((at, delivery));
    }

    /// The watch delivers an event now: to the operator's state and to the reference.
    fn take(&mut self, delivery: Delivery) {
        let now = ts(self.now);
        match delivery {
            Delivery::Node { name, object: Some(node) } => {
                let change = self.state.apply_node(&node, now);
                self.note(change);
                let ready =
                    node.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                        c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                    });
                let uid = node.metadata.uid.clone().unwrap_or_default();
                self.reference.node(self.now, &name, &uid, ready);
            }
            Delivery::Node { name, object: None } => {
                let change = self.state.delete_node(&name, now);
                self.note(change);
                self.reference.node_deleted(&name);
            }
            Delivery::Lease { name, renewed } => {
                let change = match renewed {
                    Some(renewed) => self.state.apply_lease(&name, Some(renewed), now),
                    None => self.state.delete_lease(&name),
                };
                self.note(change);
                self.reference.lease(self.now, &name, renewed);
            }
        }
    }

    fn deliver_pod(&mut self, p: usize) {
        let change = match self.world.pod_object(p) {
            Some(pod) => self.state.apply_pod(&WatchedPod::from(&pod), ts(self.now)),
            None => self.state.delete_pod(&self.world.pods[p].uid, ts(self.now)),
        };
        self.note(change);
    }

    /// What a watch event asks of the operator: a reconcile of every policy when relevant
    /// (a deferred change asks at its instant, through the state's own bookkeeping).
    fn note(&mut self, change: Change) {
        self.asked |= change == Change::Relevant;
        let counted = match change {
            Change::Relevant => "relevant changes",
            Change::At(_) => "deferred changes",
            Change::None => return,
        };
        *self.index.entry(counted).or_default() += 1;
    }

    /// The operator's LIST of the pods of each node that left Ready (`spec.nodeName=<node>`),
    /// answered from the world at once.
    fn list_pods_of_unready_nodes(&mut self) {
        for node in self.state.take_nodes_to_list() {
            let pods: Vec<WatchedPod> = (0..self.world.pods.len())
                .filter(|&p| self.world.nodes[self.world.pods[p].node].name == node)
                .filter_map(|p| self.world.pod_object(p))
                .map(|pod| WatchedPod::from(&pod))
                .collect();
            let change = self.state.apply_listed_pods(&node, &pods);
            self.note(change);
        }
    }

    fn list_nodes_and_leases(&mut self) {
        self.queue.clear();
        let now = ts(self.now);
        self.state.list_started(WatchedKind::Node);
        for i in 0..self.world.nodes.len() {
            if let Some(node) = self.world.node_object(i) {
                self.state.apply_node(&node, now);
            }
        }
        let change = self.state.list_done(WatchedKind::Node, now);
        self.note(change);
        self.state.list_started(WatchedKind::Lease);
        for n in &self.world.nodes {
            if let Some(renewed) = n.lease {
                self.state.apply_lease(&n.name, Some(renewed), now);
            }
        }
        let change = self.state.list_done(WatchedKind::Lease, now);
        self.note(change);
        self.reference.relisted(self.now, &self.world);
        self.watching = true;
    }

    /// A fresh state lists every kind now (a start or a restart).
    fn list_everything(&mut self) {
        self.state = ClusterState::new();
        // A (re)started operator decides over everything once synced.
        self.asked = true;
        self.list_nodes_and_leases();
        let now = ts(self.now);
        for kind in WatchedKind::ALL {
            if kind.restarts_evidence() {
                continue;
            }
            self.state.list_started(kind);
            match kind {
                WatchedKind::Pod => {
                    for p in 0..self.world.pods.len() {
                        if let Some(pod) = self.world.pod_object(p) {
                            self.state.apply_pod(&WatchedPod::from(&pod), now);
                        }
                    }
                }
                WatchedKind::Namespace => {
                    let ns = corev1::Namespace {
                        metadata: ObjectMeta { name: Some("ns".into()), ..ObjectMeta::default() },
                        ..corev1::Namespace::default()
                    };
                    self.state.apply_namespace(&ns);
                }
                WatchedKind::PersistentVolumeClaim => {
                    for pod in self.world.pods.iter().filter(|p| p.setup.rwo) {
                        self.state.apply_claim(&claim_object(&pod.name));
                    }
                }
                _ => {}
            }
            self.state.list_done(kind, now);
        }
    }

    // --- time ------------------------------------------------------------------------------

    /// When the node lifecycle controller marks node `i` Unknown, if it will.
    fn next_unknown(&self, i: usize) -> Option<u64> {
        let n = &self.world.nodes[i];
        (n.exists && n.ready != Cond::Unknown)
            .then(|| (n.lease_written_ms + NODE_MONITOR_GRACE_MS).max(n.ready_changed_ms + 5_000))
    }

    /// When PodGC acts on pod `p`, if it will: 40 s after its Node is gone it deletes the pod
    /// (grace 0), which a finalizer leaves Terminating.
    fn next_pod_gc(&self, p: usize) -> Option<u64> {
        let pod = &self.world.pods[p];
        let gone_since = self.world.nodes[pod.node].gone_since?;
        let pending = pod.exists && (pod.deletion_ms.is_none() || pod.finalizers.is_empty());
        pending.then_some(gone_since + POD_GC_QUARANTINE_MS)
    }

    /// Time passes until `to`: kubelets renew, the node lifecycle controller marks the silent
    /// nodes Unknown, PodGC deletes the pods of deleted Nodes, each at its instant.
    fn advance(&mut self, to: u64) {
        #[derive(Clone, Copy)]
        enum Due {
            Renew(usize),
            Unknown(usize),
            PodGc(usize),
            Deliver,
        }
        loop {
            let mut due: Vec<(u64, Due)> = Vec::new();
            for (i, n) in self.world.nodes.iter().enumerate() {
                if n.kubelet_alive {
                    due.push((n.renew_at, Due::Renew(i)));
                }
                due.extend(self.next_unknown(i).map(|t| (t, Due::Unknown(i))));
            }
            for p in 0..self.world.pods.len() {
                due.extend(self.next_pod_gc(p).map(|t| (t, Due::PodGc(p))));
            }
            due.extend(self.queue.front().map(|(t, _)| (*t, Due::Deliver)));
            let Some((t, next)) = due.into_iter().min_by_key(|(t, _)| *t) else { break };
            if t > to {
                break;
            }
            self.now = self.now.max(t);
            match next {
                Due::Renew(i) => self.renew(i),
                Due::Unknown(i) => self.set_ready(i, Cond::Unknown),
                Due::Deliver => {
                    if let Some((_, delivery)) = self.queue.pop_front() {
                        self.take(delivery);
                    }
                }
                Due::PodGc(p) => {
                    let pod = &mut self.world.pods[p];
                    if pod.finalizers.is_empty() {
                        pod.exists = false;
                    } else {
                        pod.deletion_ms = Some(self.now);
                        pod.deletion_grace_s = 0;
                    }
                    self.deliver_pod(p);
                }
            }
        }
        self.now = to;
    }

    /// Node `i`'s kubelet renews its Lease (creating it if missing) and, on a node marked
    /// Unknown, reports Ready again.
    fn renew(&mut self, i: usize) {
        let n = &mut self.world.nodes[i];
        n.lease = Some(node_clock(self.now, n.skew_ms));
        n.lease_written_ms = self.now;
        n.renew_at = self.now + RENEW_EVERY_MS;
        self.deliver_lease(i);
        if self.world.nodes[i].exists && self.world.nodes[i].ready == Cond::Unknown {
            self.set_ready(i, Cond::True);
        }
    }

    fn set_ready(&mut self, i: usize, status: Cond) {
        let n = &mut self.world.nodes[i];
        if !n.exists {
            return;
        }
        if n.ready != status {
            n.ready = status;
            n.ready_changed_ms = self.now;
        }
        self.deliver_node(i);
    }

    fn delete_node(&mut self, i: usize, by: Actor) {
        let n = &mut self.world.nodes[i];
        if !n.exists {
            return;
        }
        n.exists = false;
        n.gone_since = Some(self.now);
        n.deleted_by = Some(by);
        let uid = n.uid.clone();
        self.deliver_node(i);
        if by == Actor::Us {
            self.state.node_deleted_by_us(&uid, ts(self.now));
        }
        // The Lease is owned by its Node: the garbage collector deletes it.
        if self.world.nodes[i].lease.take().is_some() {
            self.deliver_lease(i);
        }
    }

    // --- the steps ---------------------------------------------------------------------------

    fn node_of(&self, node: u8) -> usize {
        usize::from(node) % self.world.nodes.len()
    }

    fn zone_nodes(&self, zone: u8) -> Vec<usize> {
        let zones: BTreeSet<&str> = self.world.nodes.iter().map(|n| n.zone.as_str()).collect();
        let zones: Vec<&str> = zones.into_iter().collect();
        let zone = zones[usize::from(zone) % zones.len()];
        (0..self.world.nodes.len()).filter(|i| self.world.nodes[*i].zone == zone).collect()
    }

    /// Time passes until `to`, with a reconcile at each deadline the plans ask for (the
    /// operator requeues at the exact instant), at most a few per step.
    fn reconcile_until(&mut self, to: u64) -> Checked {
        for _ in 0..8 {
            match self.next_deadline.filter(|d| *d > self.now && *d < to) {
                Some(deadline) => {
                    self.advance(deadline);
                    self.check()?;
                }
                None => break,
            }
        }
        self.advance(to.max(self.now));
        Ok(())
    }

    fn step(&mut self, at: u64, event: Event) -> Checked {
        self.reconcile_until(at)?;
        if self.trace {
            eprintln!("{:>8} ms  {event:?}", self.now);
        }
        match event {
            Event::Wait => {}
            Event::Kubelet { node, alive } => {
                let now = self.now;
                let i = self.node_of(node);
                let n = &mut self.world.nodes[i];
                if alive && !n.kubelet_alive {
                    // A kubelet that starts renews its Lease at once.
                    n.renew_at = now + 1_000;
                }
                n.kubelet_alive = alive;
            }
            Event::ReadyIs { node, status } => self.set_ready(self.node_of(node), status),
            Event::DeleteLease { node } => {
                let i = self.node_of(node);
                if self.world.nodes[i].lease.take().is_some() {
                    self.deliver_lease(i);
                }
            }
            Event::CreateLease { node } => {
                let i = self.node_of(node);
                if self.world.nodes[i].lease.is_none() {
                    self.renew_by_someone(i);
                }
            }
            Event::Stall { ms } => {
                // Nothing is written, nothing delivered; the operator decides on its timers.
                self.now += u64::from(ms);
                self.check()?;
                for i in 0..self.world.nodes.len() {
                    if self.world.nodes[i].kubelet_alive {
                        self.renew(i);
                    }
                }
            }
            Event::WatchDown { failed } => {
                if self.watching && failed {
                    let change = self.state.watch_failed(WatchedKind::Node);
                    self.note(change);
                    let change = self.state.watch_failed(WatchedKind::Lease);
                    self.note(change);
                }
                self.watching = false;
                self.queue.clear();
            }
            Event::WatchResume => {
                if !self.watching {
                    self.list_nodes_and_leases();
                }
            }
            Event::WatchLag { ms } => self.lag_ms = u64::from(ms),
            Event::Restart => {
                self.stored_ahead.clear();
                self.list_everything();
            }
            Event::Cordon { node, on } => {
                let i = self.node_of(node);
                let n = &mut self.world.nodes[i];
                if n.exists {
                    n.unschedulable = on;
                    n.cordon_manager = Some("kubectl-cordon".into());
                    self.deliver_node(i);
                }
            }
            Event::Taint { node, kind, on } => self.taint_by_someone(self.node_of(node), kind, on),
            Event::Lifecycle { node, shutdown, on } => {
                let (i, now) = (self.node_of(node), self.now);
                let n = &mut self.world.nodes[i];
                if n.exists {
                    if shutdown {
                        n.shutting_down_since = on.then(|| n.shutting_down_since.unwrap_or(now));
                    } else {
                        n.maintenance = on;
                    }
                    self.deliver_node(i);
                }
            }
            Event::DeleteNode { node } => self.delete_node(self.node_of(node), Actor::SomeoneElse),
            Event::RecreateNode { node, status } => {
                let i = self.node_of(node);
                self.delete_node(i, Actor::SomeoneElse);
                let n = &mut self.world.nodes[i];
                n.generation += 1;
                n.uid = format!("{}-uid-{}", n.name, n.generation);
                n.exists = true;
                n.gone_since = None;
                n.ready = status;
                n.ready_changed_ms = self.now;
                n.unschedulable = false;
                n.cordon_manager = None;
                n.taints.clear();
                n.record = NodeRecord::default();
                n.maintenance = false;
                n.shutting_down_since = None;
                self.deliver_node(i);
            }
            Event::ZoneOut { zone } => {
                for i in self.zone_nodes(zone) {
                    self.world.nodes[i].kubelet_alive = false;
                    self.set_ready(i, Cond::Unknown);
                }
            }
            Event::ZoneBack { zone } => {
                for i in self.zone_nodes(zone) {
                    self.world.nodes[i].kubelet_alive = true;
                    self.renew(i);
                    self.set_ready(i, Cond::True);
                }
            }
            Event::PodTerminating { node, pod } => {
                if let Some(p) = self.world.pod_index(node, pod) {
                    let pod = &mut self.world.pods[p];
                    if pod.exists && pod.deletion_ms.is_none() {
                        // The API server's deletionTimestamp: now plus the grace period.
                        pod.deletion_ms = Some(self.now + 1000 * u64::from(pod.setup.grace_s));
                        pod.deletion_grace_s = pod.setup.grace_s;
                        self.deliver_pod(p);
                    }
                }
            }
            Event::PodGone { node, pod } => {
                if let Some(p) = self.world.pod_index(node, pod)
                    && self.world.pods[p].exists
                {
                    let now = self.now;
                    let pod = &mut self.world.pods[p];
                    if pod.deletion_ms.is_some() && pod.finalizers.is_empty() {
                        // A Terminating pod's final delete (its kubelet's, grace 0): the API
                        // server writes it once more, then removes it.
                        pod.deletion_ms = Some(now);
                        pod.deletion_grace_s = 0;
                        self.deliver_pod(p);
                    }
                    self.world.pods[p].exists = false;
                    self.deliver_pod(p);
                }
            }
            Event::PodFinished { node, pod } => {
                if let Some(p) = self.world.pod_index(node, pod)
                    && self.world.pods[p].exists
                    && self.world.pods[p].deletion_ms.is_some()
                {
                    let now = self.now;
                    let pod = &mut self.world.pods[p];
                    pod.deletion_ms = Some(now);
                    pod.deletion_grace_s = 0;
                    pod.exists = !pod.finalizers.is_empty();
                    self.deliver_pod(p);
                }
            }
            Event::PodReplaced { node, pod } => {
                if let Some(p) = self.world.pod_index(node, pod)
                    && !self.world.pods[p].exists
                {
                    let pod = &mut self.world.pods[p];
                    pod.generation += 1;
                    pod.uid = format!("{}-uid-{}", pod.name, pod.generation);
                    pod.exists = true;
                    pod.deletion_ms = None;
                    pod.shutdown_ms = None;
                    pod.ready = true;
                    pod.finalizers = if pod.setup.finalizer { vec![HOLD.into()] } else { vec![] };
                    self.deliver_pod(p);
                }
            }
            Event::PodReadyAgain { node, pod } => {
                if let Some(p) = self.world.pod_index(node, pod)
                    && self.world.pods[p].exists
                    && !self.world.pods[p].ready
                {
                    self.world.pods[p].ready = true;
                    self.deliver_pod(p);
                }
            }
            Event::PodShutdown { node, pod } => {
                if let Some(p) = self.world.pod_index(node, pod) {
                    let pod = &mut self.world.pods[p];
                    if pod.exists && pod.deletion_ms.is_none() && pod.shutdown_ms.is_none() {
                        pod.shutdown_ms = Some(self.now);
                        self.deliver_pod(p);
                    }
                }
            }
        }
        self.check()
    }

    /// Someone (not the kubelet's renewal loop) writes the Lease now.
    fn renew_by_someone(&mut self, i: usize) {
        let n = &mut self.world.nodes[i];
        n.lease = Some(node_clock(self.now, n.skew_ms));
        n.lease_written_ms = self.now;
        self.deliver_lease(i);
    }

    fn taint_by_someone(&mut self, i: usize, kind: TaintKind, on: bool) {
        let now = self.now;
        let n = &mut self.world.nodes[i];
        if !n.exists {
            return;
        }
        // Overwriting a taint within the second it was added is not modelled: `timeAdded` has
        // a one-second precision, and two writes in one second cannot be told apart.
        if n.taints.iter().any(|t| t.kind == kind && now < t.added_ms + 1000) {
            return;
        }
        n.taints.retain(|t| t.kind != kind);
        if on {
            n.taints.push(WTaint { kind, by: Actor::SomeoneElse, added_ms: now });
        }
        self.deliver_node(i);
    }

    // --- deciding and checking -----------------------------------------------------------------

    /// The fresh reads of an action's last look, from the true world now.
    fn fresh_reads(
        &self,
        action: &Action,
    ) -> (Option<corev1::Pod>, Option<corev1::Node>, Option<Lease>) {
        let i = self.world.node_index(action.node());
        let pod = match action {
            Action::Node(_) => None,
            _ => {
                let (namespace, name) = action.target();
                self.world
                    .pods
                    .iter()
                    .position(|p| p.name == name && namespace == "ns")
                    .and_then(|p| self.world.pod_object(p))
            }
        };
        let node = i.and_then(|i| self.world.node_object(i));
        let lease = i.and_then(|i| self.world.lease_object(i));
        (pod, node, lease)
    }

    /// The kernel's word on `action` with a last look read now; with what an undo changes.
    fn kernel(&self, action: &Action) -> (Result<(), crate::safety::Refusal>, Option<UndoChanges>) {
        let (pod, node, lease) = self.fresh_reads(action);
        let look =
            last_look(pod.as_ref(), node.as_ref(), lease.as_ref(), Some(&self.policy_object));
        let undo = match action {
            Action::Node(na) if na.kind == NodeActionKind::Undo => {
                look.node.as_ref().map(undo_changes)
            }
            _ => None,
        };
        let write = Write {
            action,
            policy: &self.policy,
            planned_generation: Some(1),
            look: &look,
            undo,
            now: ts(self.now),
        };
        (admit(&write), undo)
    }

    /// The writer's own recheck of the last look (a skip, not a refusal).
    fn recheck(&self, action: &Action) -> Result<(), Skip> {
        let (pod, node, lease) = self.fresh_reads(action);
        let look =
            last_look(pod.as_ref(), node.as_ref(), lease.as_ref(), Some(&self.policy_object));
        action.recheck(&look, Some(1), &self.policy.fencing)
    }

    /// One reconcile at `now`: observe, plan, check every action, send what passes.
    fn check(&mut self) -> Checked {
        let now = ts(self.now);
        self.list_pods_of_unready_nodes();
        // Whether the operator, deciding only when the index asks, would decide now: before
        // the evidence is refreshed, which only a reconcile does.
        let deferred_due = self.state.take_due_deferred(now);
        let deadline_due = self.next_deadline.is_some_and(|d| d <= self.now);
        let asked = std::mem::take(&mut self.asked) || deferred_due || deadline_due;
        self.state.refresh_evidence(now);
        let mut observed = self.state.observe(now, self.recent.clone(), self.acted.clone());
        observed.acting =
            Acting { policy: POLICY.into(), live_policies: Some(BTreeSet::from([POLICY.into()])) };
        observed.storm.previous = self.storm.clone();
        let plan = plan(&observed, &self.policy, now);
        self.index_property(asked, &plan)?;
        self.storm = Some(plan.storm.memory.clone());
        let ahead =
            ahead(&observed, &self.policy, &plan, &self.stored_ahead, Some(&self.status), now);
        self.ahead_property(&ahead, now)?;
        let wake_at = plan.next_deadline.into_iter().chain(ahead.wake_at).min();
        self.next_deadline = wake_at.map(|d| {
            let ms = (d.duration_since(ts(0)).as_nanos() + 999_999) / 1_000_000;
            u64::try_from(ms).unwrap_or(u64::MAX)
        });
        for action in &plan.actions {
            self.zone_property(action)?;
        }
        // The last looks of the plan's instant: with a view that is the world's, the kernel
        // must admit what the planner proposes (property 5).
        for action in &plan.actions {
            match self.kernel(action) {
                (Ok(()), undo) => self.admitted_properties(action, undo)?,
                (Err(refusal), _) if self.watching && self.queue.is_empty() => {
                    return Err(format!(
                        "property 5: the kernel refused what the planner proposed with a view \
                         equal to the world's: {refusal}\naction: {}",
                        describe(action)
                    ));
                }
                (Err(refusal), _) => {
                    *self.refused.entry(refusal.invariant.as_str()).or_default() += 1;
                }
            }
        }
        // Then as the writer goes: the records first (those stored ahead are not written
        // again), then one action after the other, each with its own last look.
        let mut status = self.status.clone();
        push_recent_actions(&mut status, ahead.records.iter().chain(&ahead.withdrawn).cloned());
        if records_before_requests(&mut status, &plan.actions, &ahead.stored, now)
            && !self.store_status(&status)
        {
            // None taken, nothing kept: the reconcile fails and is retried, and the next
            // decision records them again.
            self.asked = true;
            return Ok(());
        }
        let mut outcomes = Vec::new();
        for action in &plan.actions {
            let sent = self.recheck(action).is_ok() && self.kernel(action).0.is_ok();
            if sent {
                self.record_property(action)?;
                if ahead.stored.contains(&action.record_key()) {
                    *self.ahead_counts.entry("sent on a record ahead").or_default() += 1;
                }
                let (_, undo) = self.kernel(action);
                self.admitted_properties(action, undo)?;
                self.send(action, undo.unwrap_or_default());
                // The operator records what it did and hears of its own writes.
                self.asked = true;
            }
            let result = if sent { ActionResult::Done } else { ActionResult::Skipped };
            outcomes.push(action.record(now, Mode::Enforce, action.reason().into(), result, None));
        }
        // The history as `PolicyHistory::after_commit` keeps it.
        for outcome in &outcomes {
            self.stored_ahead.remove(&record_key(outcome));
        }
        push_recent_actions(&mut status, outcomes);
        if self.store_status(&status) {
            self.stored_ahead.extend(ahead.recorded.iter().cloned());
            for key in &ahead.forgotten {
                self.stored_ahead.remove(key);
            }
            self.withdrawn_property(now)?;
        }
        Ok(())
    }

    /// The policy's status write: refused by the API server in one second of every seven
    /// (whatever else happens), stored otherwise. Returns whether it was stored.
    fn store_status(&mut self, status: &RemediationPolicyStatus) -> bool {
        if (self.now / 1000) % 7 == 3 {
            *self.ahead_counts.entry("status writes refused").or_default() += 1;
            return false;
        }
        self.status = status.clone();
        true
    }

    /// Property 10, for a decision's records ahead: each stored at most [`RECORD_AHEAD`]
    /// before its due instant, never at or after it; and the records it counts as stored
    /// ahead (sent without another) are this run's and still in the status as stored.
    fn ahead_property(&mut self, ahead: &Ahead, now: Timestamp) -> Checked {
        for (key, due) in &ahead.recorded {
            let early = due.duration_since(now);
            if early <= SignedDuration::ZERO || early > RECORD_AHEAD {
                return Err(format!(
                    "property 10: a record stored ahead {early} before its due instant {due}:                      {key:?}"
                ));
            }
        }
        *self.ahead_counts.entry("recorded ahead").or_default() += ahead.recorded.len() as u32;
        *self.ahead_counts.entry("withdrawn").or_default() += ahead.withdrawn.len() as u32;
        for key in &ahead.stored {
            if !self.stored_ahead.contains_key(key) {
                return Err(format!(
                    "property 10: an action counted as recorded ahead that this run did not                      record (a restart, or another run's record): {key:?}"
                ));
            }
        }
        Ok(())
    }

    /// Property 10, before any request: the status as stored holds the action's `Pending`
    /// record, whether this decision wrote it or one stored it ahead.
    fn record_property(&self, action: &Action) -> Checked {
        let key = action.record_key();
        let held = self.status.recent_actions.iter().any(|r| {
            record_key(r) == key && r.result == ActionResult::Pending && r.mode == Mode::Enforce
        });
        if held {
            return Ok(());
        }
        Err(format!(
            "property 10: a request sent without its Pending record stored\naction: {}",
            describe(action)
        ))
    }

    /// Property 10, after a decision's status is stored: no record this run stored ahead is
    /// still `Pending` in it past its due instant (its action was sent, or it was withdrawn).
    fn withdrawn_property(&self, now: Timestamp) -> Checked {
        for (key, due) in &self.stored_ahead {
            let pending = self
                .status
                .recent_actions
                .iter()
                .any(|r| record_key(r) == *key && r.result == ActionResult::Pending);
            if *due <= now && pending {
                return Err(format!(
                    "property 10: a record stored ahead still Pending at {now}, past its due \
                     instant {due}, and still kept as stored ahead: {key:?}"
                ));
            }
        }
        Ok(())
    }

    /// Property 9: deciding only when the index asks misses nothing. A plan made where the
    /// operator would not have decided (no relevant watch event, no deadline, no deferred
    /// pod's instant since its last decision) proposes no action that decision did not.
    fn index_property(&mut self, asked: bool, plan: &Plan) -> Checked {
        let actions: BTreeSet<String> = plan.actions.iter().map(describe).collect();
        if !plan.synced {
            self.asked = true;
        }
        let counted = if asked { "checks asked" } else { "checks not asked" };
        *self.index.entry(counted).or_default() += 1;
        if asked {
            self.asked_actions = actions;
            return Ok(());
        }
        match actions.difference(&self.asked_actions).next() {
            Some(new) => Err(format!(
                "property 9: an action planned where the operator, deciding only when the index \
                 asks, would not have decided (no relevant event, no deadline, no deferred \
                 instant since its last decision): {new}\nits last decision planned: {:?}",
                self.asked_actions
            )),
            None => Ok(()),
        }
    }

    /// Property 2, on every planned action: none destructive in a zone all out.
    fn zone_property(&self, action: &Action) -> Checked {
        let Some(i) = self.world.node_index(action.node()) else { return Ok(()) };
        let zone = &self.world.nodes[i].zone;
        if !action.is_undo() && self.reference.zone_all_out(&self.world, zone) {
            return Err(format!(
                "property 2: a destructive action planned in zone {zone:?}, whose every node is \
                 unhealthy\naction: {}",
                describe(action)
            ));
        }
        Ok(())
    }

    /// Properties 1, 3 and 4 (and a Ready node for live-node releases, only our own changes
    /// undone) for an action the kernel admits now.
    fn admitted_properties(&self, action: &Action, undo: Option<UndoChanges>) -> Checked {
        let fail = |property: &str| Err(format!("{property}\naction: {}", describe(action)));
        let Some(i) = self.world.node_index(action.node()) else {
            return fail("an action admitted on a node the world never had");
        };
        let node = &self.world.nodes[i];
        if node.exists && node.maintenance {
            return fail("property 6: a write admitted on a node in maintenance");
        }
        let grace = u64::try_from(self.policy.lifecycle.shutdown_grace.as_millis()).unwrap_or(0);
        if node.exists && node.shutting_down_since.is_some_and(|since| self.now < since + grace) {
            return fail(
                "property 6: a write admitted on a node shutting down gracefully before \
                 gracefulShutdownGrace passed since it began",
            );
        }
        let on_dead_node = match action {
            Action::ForceDelete(fd) => fd.live.is_none(),
            Action::Node(na) => na.kind != NodeActionKind::Undo,
            Action::RemoveFinalizers(rf) => rf.death.is_some(),
            Action::MarkNotReady(_) => true,
            Action::Evict(_) | Action::DeleteShutdownPod(_) => false,
        };
        let dead_at = self.reference.watched_dead(&self.world, i, self.now, self.durations);
        if on_dead_node && dead_at.is_none() && !self.world.deleted_by_someone_else(i) {
            return fail(
                "property 1: admitted on a node not dead by evidence we saw (no Lease unchanged \
                 for leaseStaleFor and not Ready for notReadyFor inside the window, and not \
                 deleted by someone else)",
            );
        }
        let live_release = match action {
            Action::ForceDelete(fd) => fd.live.is_some(),
            Action::RemoveFinalizers(rf) => rf.death.is_none(),
            _ => false,
        };
        if live_release && !(node.exists && node.ready == Cond::True) {
            return fail("a live-node release admitted on a node that is not Ready");
        }
        if live_release {
            let rule = self.policy.live_node_stuck;
            let (wait, uid) = match action {
                Action::ForceDelete(fd) => (rule.and_then(|r| r.force_delete_after), &fd.pod.uid),
                Action::RemoveFinalizers(rf) => {
                    (rule.map(|r| r.delay.max(self.policy.finalizers.remove_after)), &rf.pod.uid)
                }
                _ => (None, &String::new()),
            };
            let deletion = self.world.pods.iter().find(|p| p.uid == *uid && p.exists);
            let due = deletion
                .and_then(|p| p.deletion_ms)
                .zip(wait)
                .map(|(at, wait)| at + u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
            if due.is_none_or(|due| self.now < due) {
                return fail(
                    "a live-node release admitted before the policy's wait passed since the \
                     pod's current deletionTimestamp",
                );
            }
        }
        if let Action::Node(na) = action
            && matches!(na.kind, NodeActionKind::DeleteNode { .. })
        {
            let fenced = node.exists && self.world.fenced_from_outside(i);
            let assumed_off = self.shape == Shape::AssumeOff
                && dead_at.is_some_and(|dead| self.now >= dead + ASSUME_OFF_AFTER_MS);
            if !fenced && !assumed_off {
                return fail(
                    "property 3: a Node deleted without the shutdown taint, someone else's \
                     out-of-service taint, or assumeOffAfter passed",
                );
            }
        }
        if let Action::DeleteShutdownPod(d) = action {
            let pod = self.world.pods.iter().find(|p| p.uid == d.pod.uid && p.exists);
            let failed_long_enough = pod.is_some_and(|p| {
                p.deletion_ms.is_none()
                    && p.shutdown_ms.is_some_and(|at| at + SHUTDOWN_DELETE_AFTER_MS <= self.now)
            });
            if !failed_long_enough {
                return fail(
                    "property 7: a pod deleted that is not (the same pod) Failed by a shutdown, \
                     not Terminating, for deleteAfter",
                );
            }
        }
        if let Action::MarkNotReady(m) = action {
            let pod = self.world.pods.iter().find(|p| p.uid == m.pod.uid && p.exists);
            let ready = pod.is_some_and(|p| {
                p.deletion_ms.is_none() && p.shutdown_ms.is_none() && p.ready && p.node == i
            });
            if !ready {
                return fail(
                    "property 8: a pod marked not Ready that is not (the same pod) Ready=True, \
                     not Terminating, on that node",
                );
            }
        }
        if let Action::ForceDelete(fd) = action {
            let pod = self.world.pods.iter().find(|p| p.uid == fd.pod.uid);
            let needs_fencing = pod.is_some_and(|p| {
                self.shape == Shape::FenceAllLive
                    || p.setup.owner == Owner::StatefulSet
                    || p.setup.rwo
            });
            if needs_fencing && !self.world.fenced_from_outside(i) {
                return fail(
                    "property 4: a pod that needs fencing released without fencing from outside \
                     the operator",
                );
            }
        }
        if let Some(changes) = undo {
            if changes.uncordon && node.cordon_manager.as_deref() != Some(FIELD_MANAGER) {
                return fail("an undo admitted to remove a cordon that is not ours");
            }
            let theirs = node
                .taints
                .iter()
                .any(|t| t.kind == TaintKind::OutOfService && t.by == Actor::SomeoneElse);
            if changes.remove_taint && theirs {
                return fail("an undo admitted to remove an out-of-service taint not ours");
            }
        }
        Ok(())
    }

    /// The admitted action's request, as the world takes it.
    fn send(&mut self, action: &Action, undo: UndoChanges) {
        let now = self.now;
        if self.trace {
            eprintln!("{now:>8} ms    sent {}", describe(action));
        }
        *self.sent.entry(action.kind().as_str()).or_default() += 1;
        self.acted.insert(action.acted_key());
        self.recent.push(PastAction { at: ts(now), owner: action.owner().cloned() });
        self.recent.retain(|a| ts(now).duration_since(a.at) < SignedDuration::from_secs(120));
        match action {
            Action::ForceDelete(fd) => {
                if let Some(p) =
                    self.world.pods.iter().position(|p| p.uid == fd.pod.uid && p.exists)
                {
                    self.world.pods[p].exists = false;
                    self.deliver_pod(p);
                }
            }
            Action::RemoveFinalizers(rf) => {
                if let Some(p) =
                    self.world.pods.iter().position(|p| p.uid == rf.pod.uid && p.exists)
                {
                    self.world.pods[p].finalizers.retain(|f| !rf.remove.contains(f));
                    self.deliver_pod(p);
                }
            }
            Action::Evict(_) => {}
            Action::MarkNotReady(m) => {
                if let Some(p) = self.world.pods.iter().position(|p| p.uid == m.pod.uid && p.exists)
                {
                    self.world.pods[p].ready = false;
                    self.deliver_pod(p);
                }
            }
            Action::DeleteShutdownPod(d) => {
                if let Some(p) = self.world.pods.iter().position(|p| p.uid == d.pod.uid && p.exists)
                {
                    self.world.pods[p].exists = false;
                    self.deliver_pod(p);
                }
            }
            Action::Node(na) => {
                let Some(i) = self.world.node_index(&na.node.name) else { return };
                if !self.world.nodes[i].exists || self.world.nodes[i].uid != na.node.uid {
                    return;
                }
                let n = &mut self.world.nodes[i];
                match na.kind {
                    NodeActionKind::Cordon => {
                        n.unschedulable = true;
                        n.cordon_manager = Some(FIELD_MANAGER.into());
                        n.record.policy = Some(POLICY.into());
                        n.record.cordoned = Some(ts(now));
                    }
                    NodeActionKind::OutOfServiceTaint { .. } => {
                        n.taints.retain(|t| t.kind != TaintKind::OutOfService);
                        n.taints.push(WTaint {
                            kind: TaintKind::OutOfService,
                            by: Actor::Us,
                            added_ms: now,
                        });
                        n.record.policy = Some(POLICY.into());
                        n.record.tainted = Some(ts(now));
                    }
                    NodeActionKind::DeleteNode { .. } => {
                        self.delete_node(i, Actor::Us);
                        return;
                    }
                    NodeActionKind::Undo => {
                        if undo.uncordon {
                            n.unschedulable = false;
                            n.cordon_manager = Some(FIELD_MANAGER.into());
                        }
                        if undo.remove_taint {
                            n.taints.retain(|t| t.kind != TaintKind::OutOfService);
                        }
                        n.record = NodeRecord::default();
                    }
                }
                self.deliver_node(i);
            }
        }
    }
}

fn describe(action: &Action) -> String {
    let (namespace, name) = action.target();
    let death = match action {
        Action::ForceDelete(fd) => format!("{:?}, live node {:?}", fd.death, fd.live),
        Action::Node(na) => format!("{:?}, epoch {}", na.death, na.epoch),
        Action::RemoveFinalizers(rf) => format!("{:?}", rf.death),
        Action::Evict(_) => String::new(),
        Action::DeleteShutdownPod(d) => format!("{}, seen {}", d.shutdown_reason, d.seen),
        Action::MarkNotReady(m) => format!("{:?}", m.death),
    };
    format!(
        "{} {namespace}/{name} on {} ({}); {}",
        action.kind().as_str(),
        action.node(),
        action.uid(),
        death
    )
}

/// Runs a history; `Err` names the property it broke, the step and the instant.
fn run(s: &Scenario) -> Result<Run, String> {
    let mut run = Run::new(s);
    run.check().map_err(|e| format!("{e}\nat the start"))?;
    for (at, event) in s.timeline() {
        run.step(u64::from(at), event)
            .map_err(|e| format!("{e}\nat the step ({at}, {event:?}), {} ms", run.now))?;
    }
    Ok(run)
}

fn check_history(s: &Scenario) -> Result<(), TestCaseError> {
    run(s).map(|_| ()).map_err(TestCaseError::fail)
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn histories_stuck_terminating(s in scenario(Shape::StuckOnly)) {
        check_history(&s)?;
    }
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn histories_node_actions(s in scenario(Shape::NodeActions)) {
        check_history(&s)?;
    }
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn histories_assume_off(s in scenario(Shape::AssumeOff)) {
        check_history(&s)?;
    }
}

proptest! {
    #![proptest_config(config(200))]

    #[test]
    fn histories_fence_all_and_live_nodes(s in scenario(Shape::FenceAllLive)) {
        check_history(&s)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Pure pieces
// ---------------------------------------------------------------------------------------------

/// What happens to an evidence window.
#[derive(Clone, Copy, Debug)]
enum WindowOp {
    /// A watch completed a (re)list (of Leases, or of Nodes).
    Listed {
        lease: bool,
    },
    LeaseEvent,
    LeaseWatchFailed,
    Drought {
        on: bool,
    },
    Query,
}

fn window_op() -> impl Strategy<Value = WindowOp> {
    prop_oneof![
        1 => any::<bool>().prop_map(|lease| WindowOp::Listed { lease }),
        8 => Just(WindowOp::LeaseEvent),
        1 => Just(WindowOp::LeaseWatchFailed),
        1 => any::<bool>().prop_map(|on| WindowOp::Drought { on }),
        6 => Just(WindowOp::Query),
    ]
}

/// Checks `since` against the window's history: trusted only with no Lease-view silence
/// longer than 15 s inside the window nor now, no relist, failure or drought inside it.
fn window_history(ops: &[(u32, WindowOp)]) -> Result<(), TestCaseError> {
    let mut w = EvidenceWindow::default();
    let mut now = 0u64;
    // The reference: instants of Lease-view events (events and Lease lists), of every list,
    // of the last failure and drought end; whether a drought is on.
    let (mut lease_view, mut lists) = (Vec::<u64>::new(), Vec::<u64>::new());
    let (mut failed_at, mut drought_on, mut drought_end) = (None::<u64>, false, None::<u64>);
    let mut lease_listed = false;
    for (after, op) in ops {
        now += u64::from(*after);
        match *op {
            WindowOp::Listed { lease } => {
                w.listed(lease, ts(now));
                lists.push(now);
                if lease {
                    lease_view.push(now);
                    failed_at = None;
                    lease_listed = true;
                }
            }
            WindowOp::LeaseEvent => {
                w.lease_event(ts(now), true);
                lease_view.push(now);
                failed_at = None;
            }
            WindowOp::LeaseWatchFailed => {
                w.lease_watch_failed();
                failed_at = Some(now);
            }
            WindowOp::Drought { on } => {
                let reading = on.then_some(Drought { overdue: 3, renewing: 4 });
                w.drought(ts(now), reading);
                if drought_on && !on {
                    drought_end = Some(now);
                }
                drought_on = on;
            }
            WindowOp::Query => {
                // Synced: every watch listed, the Lease watch among them.
                let synced = lease_listed;
                let Ok(start) = w.since(ts(now), synced, true) else { continue };
                let start = u64::try_from(start.duration_since(ts(0)).as_millis()).unwrap_or(0);
                prop_assert!(start <= now, "the window starts after now");
                prop_assert!(lists.iter().all(|l| *l <= start), "trusted across a relist");
                prop_assert!(failed_at.is_none(), "trusted after a failure, before an event");
                prop_assert!(!drought_on, "trusted in a drought");
                prop_assert!(
                    drought_end.is_none_or(|end| end <= start),
                    "trusted across a drought"
                );
                let last = lease_view.last().copied();
                prop_assert!(
                    last.is_some_and(|l| now - l <= SILENCE_MS),
                    "trusted while the Lease view is silent"
                );
                for pair in lease_view.windows(2) {
                    if pair[1] > start {
                        prop_assert!(
                            pair[1] - pair[0] <= SILENCE_MS,
                            "trusted across a silence from {} to {} ms (window from {start})",
                            pair[0],
                            pair[1]
                        );
                    }
                }
            }
        }
    }
    Ok(())
}

/// A node for [`held_zones`]: its zone (3: unlabelled), readiness, deleted, and the outage
/// it came back from (offsets from now, in seconds).
type ZoneNode = (u8, u8, bool, Option<(u16, u16)>);

fn zone_node() -> impl Strategy<Value = ZoneNode> {
    (0u8..4, 0u8..4, prop::bool::weighted(0.1), prop::option::of((0u16..600, 0u16..300)))
}

fn zone_history(nodes: &[ZoneNode]) -> Result<(), TestCaseError> {
    let now = 10_000_000u64;
    let views: Vec<NodeView> = nodes
        .iter()
        .enumerate()
        .map(|(i, (zone, readiness, deleted, outage))| {
            let mut view = NodeView::unknown(&format!("n{i}"));
            if *zone < 3 {
                view.labels.insert(ZONE_LABEL, format!("z{zone}"));
            }
            view.deleted = *deleted;
            view.observation = NodeObservation {
                readiness: match readiness {
                    0 => Readiness::Ready,
                    1 => Readiness::NotReady,
                    2 => Readiness::Unknown,
                    _ => Readiness::Missing,
                },
                ..view.observation
            };
            let last_outage = outage.map(|(ago, lasted)| {
                let to = now - u64::from(ago) * 1000;
                Outage { from: ts(to - u64::from(lasted) * 1000), to: ts(to) }
            });
            view.control = NodeControl {
                rare: Rare::new(RareControl { last_outage, ..RareControl::default() }),
                ..NodeControl::default()
            };
            view
        })
        .collect();
    let held = held_zones(&views, ts(now));
    let zone_name = |z: u8| if z < 3 { format!("z{z}") } else { String::new() };
    for z in 0u8..4 {
        let name = zone_name(z);
        let members: Vec<&ZoneNode> =
            nodes.iter().filter(|n| n.0 == z && !n.2 && n.1 != 3).collect();
        let ready_never_away = members.iter().any(|n| n.1 == 0 && n.3.is_none());
        let all_out = members.len() >= 2 && members.iter().all(|n| n.1 != 0);
        match held.get(&name) {
            Some(hold) => {
                prop_assert!(members.len() >= 2, "zone {name:?} held with < 2 members");
                prop_assert!(!ready_never_away, "zone {name:?} held with a Ready node never away");
                if let ZoneHold::Returning { until, .. } = hold {
                    prop_assert!(*until > ts(now), "zone {name:?} held until the past");
                }
            }
            None => prop_assert!(!all_out, "zone {name:?} all out but not held"),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn evidence_window_never_trusts_across_a_silence(
        ops in prop::collection::vec((prop_oneof![3 => 0u32..10_000, 1 => 10_000u32..40_000], window_op()), 1..60)
    ) {
        window_history(&ops)?;
    }
}

proptest! {
    #![proptest_config(config(100))]

    #[test]
    fn held_zones_never_hold_a_zone_with_a_ready_node_never_away(
        nodes in prop::collection::vec(zone_node(), 0..10)
    ) {
        zone_history(&nodes)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Named histories: failures found, pasted here, replayed on every run
// ---------------------------------------------------------------------------------------------

mod regressions {
    use super::Cond::*;
    use super::Event::*;
    use super::Owner::*;
    use super::Shape::*;
    use super::TaintKind::*;
    use super::{NodeSetup, PodSetup, Scenario, run};

    /// A named history, and the kinds of the actions it must send (`None`: a pasted failure,
    /// which must only keep every property from now on).
    type Row = (&'static str, Scenario, Option<&'static [&'static str]>);

    /// Histories worth keeping, by what they show. A shrunk failure prints as a `Scenario`
    /// literal: add it here as `("what it shows", Scenario { .. }, None)`.
    fn table() -> Vec<Row> {
        let pod = |owner, rwo| PodSetup { owner, rwo, finalizer: false, grace_s: 30 };
        let node = |pods| NodeSetup { skew_ms: 0, phase_ms: 1000, pods };
        vec![
            (
                "a dead kubelet on a not Ready node: its pod released, its StatefulSet pod \
                 only once the cloud's shutdown taint fences it",
                Scenario {
                    shape: NodeActions,
                    zones: 1,
                    max_unhealthy: None,
                    not_ready_s: 30,
                    lease_stale_s: 40,
                    nodes: vec![
                        node(vec![pod(ReplicaSet, false), pod(StatefulSet, false)]),
                        node(vec![pod(Bare, false)]),
                        node(vec![pod(Bare, true)]),
                    ],
                    steps: vec![
                        (5_000, Kubelet { node: 0, alive: false }),
                        (6_000, ReadyIs { node: 0, status: Unknown }),
                        (7_000, PodTerminating { node: 0, pod: 0 }),
                        (8_000, PodTerminating { node: 0, pod: 1 }),
                        (68_000, Wait),
                        (73_000, Taint { node: 0, kind: Shutdown, on: true }),
                        (103_000, Wait),
                    ],
                },
                Some(&["Cordon", "DeleteNode", "ForceDelete", "OutOfServiceTaint"]),
            ),
            (
                "an etcd stall, a not Ready node whose kubelet renews, a deleted Lease, a \
                 restart and a hung watch are no deaths",
                Scenario {
                    shape: AssumeOff,
                    zones: 2,
                    max_unhealthy: None,
                    not_ready_s: 30,
                    lease_stale_s: 40,
                    nodes: vec![
                        node(vec![pod(ReplicaSet, false)]),
                        node(vec![pod(Job, false)]),
                        node(vec![pod(Bare, false)]),
                    ],
                    steps: vec![
                        (1_000, ReadyIs { node: 1, status: False }),
                        (2_000, PodTerminating { node: 1, pod: 0 }),
                        (3_000, Stall { ms: 120_000 }),
                        (124_000, DeleteLease { node: 1 }),
                        (125_000, Kubelet { node: 1, alive: false }),
                        (215_000, Restart),
                        (305_000, WatchDown { failed: false }),
                        (325_000, WatchResume),
                        (385_000, Wait),
                    ],
                },
                Some(&[]),
            ),
            (
                "pods left Failed by a graceful shutdown: deleted deleteAfter after we saw them \
                 so, not before, and not again after a restart restarted their count; one \
                 replaced under its name before its turn is not hit",
                Scenario {
                    shape: StuckOnly,
                    zones: 1,
                    max_unhealthy: None,
                    not_ready_s: 30,
                    lease_stale_s: 40,
                    nodes: vec![node(vec![pod(ReplicaSet, false), pod(Bare, false)]), node(vec![])],
                    steps: vec![
                        (1_000, PodShutdown { node: 0, pod: 0 }),
                        (2_000, PodShutdown { node: 0, pod: 1 }),
                        (20_000, Restart),
                        (25_000, PodGone { node: 0, pod: 1 }),
                        (26_000, PodReplaced { node: 0, pod: 1 }),
                        (45_000, Wait),
                        (60_000, Wait),
                    ],
                },
                Some(&["DeleteShutdownPod"]),
            ),
            (
                "a pod held by a finalizer on a live node, finished by its kubelet 10 s into its \
                 30 s grace (a final DELETE, grace 0): time is counted from that DELETE, and \
                 its finalizer removed delayAfterGrace after it, not after the first deletion",
                Scenario {
                    nodes: vec![node(vec![PodSetup { finalizer: true, ..pod(Bare, false) }])],
                    steps: vec![
                        (1_000, PodTerminating { node: 0, pod: 0 }),
                        (11_000, PodFinished { node: 0, pod: 0 }),
                        (25_000, Wait),
                        (45_000, Wait),
                    ],
                    ..Scenario::one_zone(FenceAllLive)
                },
                Some(&["RemoveFinalizers"]),
            ),
        ]
    }

    /// Found by `histories_fence_all_and_live_nodes` (fixed in 91af0af): ten minutes
    /// (`OWN_DELETIONS_COUNT_FOR`) after the operator deleted a Node, `ClusterState` forgot the
    /// deletion was its own while a Terminating pod still referenced the tombstone, and the plan
    /// read it as "deleted by someone else": dead, and fenced. Its pod held by a finalizer was
    /// then released (finalizers removed, then force-deleted under requireFencingFor All) on the
    /// strength of the operator's own write.
    #[test]
    fn our_own_node_deletion_is_never_evidence() {
        let scenario = Scenario {
            shape: FenceAllLive,
            zones: 1,
            max_unhealthy: None,
            not_ready_s: 30,
            lease_stale_s: 40,
            nodes: vec![
                NodeSetup {
                    skew_ms: 0,
                    phase_ms: 0,
                    pods: vec![PodSetup {
                        owner: StatefulSet,
                        rwo: true,
                        finalizer: true,
                        grace_s: 30,
                    }],
                },
                NodeSetup {
                    skew_ms: 0,
                    phase_ms: 0,
                    pods: vec![PodSetup {
                        owner: ReplicaSet,
                        rwo: false,
                        finalizer: false,
                        grace_s: 30,
                    }],
                },
            ],
            steps: vec![
                // n0's kubelet stops; the cloud provider reports the machine shut down.
                (0, Kubelet { node: 0, alive: false }),
                (40_000, Taint { node: 0, kind: Shutdown, on: true }),
                // Dead since 70 s: cordoned, then deleted by us at 90 s (fenced by the taint).
                (90_000, Wait),
                // PodGC left its pod Terminating at 130 s, held by its finalizer.
                (200_000, Wait),
                // 10 minutes after our deletion.
                (700_000, Wait),
            ],
        };
        if let Err(e) = run(&scenario) {
            panic!("{e}\n{scenario:?}");
        }
    }

    #[test]
    fn regressions() {
        for (name, scenario, want) in table() {
            let sent = match run(&scenario) {
                Ok(run) => run.sent,
                Err(e) => panic!("{name}: {e}\n{scenario:?}"),
            };
            if let Some(want) = want {
                let got: Vec<&str> = sent.keys().copied().collect();
                assert_eq!(got, want, "{name}: the kinds of actions sent");
            }
        }
    }
}

/// How much the generated histories do, per shape: `cargo test --lib proptests::coverage --
/// --ignored --nocapture`. Histories that never act would test nothing.
#[test]
#[ignore = "a report, not a test"]
fn coverage() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    for shape in [Shape::StuckOnly, Shape::NodeActions, Shape::AssumeOff, Shape::FenceAllLive] {
        let mut runner = TestRunner::new(config(200));
        let strategy = scenario(shape);
        let (mut sent, mut refused, mut index, mut records_ahead) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let (mut cases, mut failed) = (0, 0);
        for _ in 0..runner.config().cases {
            let s = strategy.new_tree(&mut runner).expect("a history").current();
            cases += 1;
            match run(&s) {
                Ok(run) => {
                    for (kind, n) in run.sent {
                        *sent.entry(kind).or_insert(0) += n;
                    }
                    for (invariant, n) in run.refused {
                        *refused.entry(invariant).or_insert(0) += n;
                    }
                    for (what, n) in run.index {
                        *index.entry(what).or_insert(0) += n;
                    }
                    for (what, n) in run.ahead_counts {
                        *records_ahead.entry(what).or_insert(0) += n;
                    }
                }
                Err(_) => failed += 1,
            }
        }
        eprintln!(
            "{shape:?}: {cases} histories ({failed} failing): sent {sent:?}; refused {refused:?}; \
             index {index:?}; records ahead {records_ahead:?}"
        );
    }
}
