//! The RemediationPolicy controller: observe, decide, commit, record.
//!
//! Each reconcile reads the policy, the compact cluster state and the policy's
//! [`PolicyHistory`] (with, for the bookkeeping, fresh reads of a few pods and nodes), calls the
//! pure [`decide`](crate::core::decide()), hands the plan, the desired status and the notices to
//! the [writer](crate::writer) in one call, keeps what the writer did in the history, and
//! requeues at the exact instant of the next deadline.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use tokio::sync::{Mutex as AsyncMutex, MutexGuard, OwnedMutexGuard};
use tracing::{debug, info, warn};

use crate::adapters::rearm_token;
use crate::core::ahead::NOTHING_AHEAD;
use crate::core::{
    Acting, ActionOutcome, CONDITION_INVALID, Decision, Evaluation, Gauges, InvalidPolicy, Ledger,
    MaxUnhealthy, Observed, Past, PendingNow, Plan, PodNow, PolicyHistory, REPORTS_BEYOND_BUDGET,
    Reads, StatusWrite, StormInput, ValidatedPolicy, decide, desired_status, validate,
};
use crate::crd::{ActionKind, ActionResult, Mode, RemediationPolicy, RemediationPolicyStatus};
use crate::index::watches::{SharedState, trigger_stream};
use crate::metrics::{CauseLabels, ErrorLabels, Label, Metrics, PolicyLabels, StuckLabels};
use crate::writer::{Commit, Notice, Outcome, Writer};
use crate::{Error, Result};

/// A margin added to requeue delays so the reconcile runs just after a threshold instant (the
/// timer's resolution: it never fires early; a reconcile that still finds the instant ahead
/// only requeues again).
const DEADLINE_MARGIN: Duration = Duration::from_millis(1);
/// How soon to look again while the caches are not synced.
const UNSYNCED_RETRY: Duration = Duration::from_secs(1);

pub struct Context {
    pub state: SharedState,
    pub writer: Writer,
    pub metrics: Arc<Metrics>,
    /// Each policy's history, by name; locked by the policy's reconcile throughout.
    histories: Mutex<HashMap<String, Arc<AsyncMutex<PolicyHistory>>>>,
    /// What the policies in Enforce did, shared; locked by each Enforce reconcile throughout.
    ledger: AsyncMutex<Ledger>,
    /// `--max-unhealthy-nodes-in-cluster`: the storm guard over every node, for every policy.
    cluster_limit: MaxUnhealthy,
    /// The policies that exist, as of the last sweep (`None` before the first).
    live_policies: Mutex<Option<BTreeSet<String>>>,
}

impl Context {
    pub fn new(
        state: SharedState,
        writer: Writer,
        metrics: Arc<Metrics>,
        cluster_limit: MaxUnhealthy,
    ) -> Self {
        Context {
            state,
            writer,
            metrics,
            histories: Mutex::new(HashMap::new()),
            ledger: AsyncMutex::new(Ledger::default()),
            cluster_limit,
            live_policies: Mutex::new(None),
        }
    }

    /// The history of policy `name`, locked.
    async fn history(&self, name: &str) -> OwnedMutexGuard<PolicyHistory> {
        let history = {
            let mut histories = self.histories.lock().unwrap_or_else(|e| e.into_inner());
            histories.entry(name.to_string()).or_default().clone()
        };
        history.lock_owned().await
    }

    /// The shared ledger, locked, in Enforce: policies in Enforce decide one at a time, each
    /// seeing what the others did.
    async fn ledger(&self, mode: Mode) -> Option<MutexGuard<'_, Ledger>> {
        match mode {
            Mode::Enforce => Some(self.ledger.lock().await),
            Mode::DryRun => None,
        }
    }

    /// Forgets the history and the metric series of policy `name`.
    fn forget(&self, name: &str) {
        self.metrics.forget_policy(name);
        self.histories.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }
}

/// Runs the controller until `shutdown` resolves. `policy_selector` restricts which policies
/// this process serves (a label selector; empty for all); `lists` is how its watch gets the
/// policies at start (streamed where the server can, as the other watches).
pub async fn run(
    client: Client,
    ctx: Arc<Context>,
    trigger: tokio::sync::watch::Receiver<u64>,
    policy_selector: Option<String>,
    lists: crate::index::watches::InitialLists,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    // Blocked rollouts are reported whatever the policies say, by the same (leading) process.
    let reporter = tokio::spawn(super::rollout_reporter::run(
        ctx.state.clone(),
        ctx.writer.clone(),
        ctx.metrics.clone(),
        trigger.clone(),
    ));
    let api: Api<RemediationPolicy> = Api::all(client);
    let mut config = crate::index::watches::watch_config(lists);
    if let Some(selector) = policy_selector {
        config = config.labels(&selector);
    }
    let controller = Controller::new(api, config);
    let sweeper = tokio::spawn(forget_deleted(controller.store(), ctx.clone()));
    controller
        .reconcile_all_on(trigger_stream(trigger))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                debug!(error = %e, "reconcile ended with an error");
            }
        })
        .await;
    reporter.abort();
    sweeper.abort();
}

/// How often policies deleted meanwhile are forgotten.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// Forgets, every [`SWEEP_EVERY`], the history and the metric series of policies that are gone:
/// a policy without finalizers is never reconciled once deleted, and its series (its circuit,
/// its stuck pods) would live on and keep alerts firing.
async fn forget_deleted(
    store: kube::runtime::reflector::Store<RemediationPolicy>,
    ctx: Arc<Context>,
) {
    // No reconcile runs before the store has listed, so nothing is in a history to forget
    // before it has either.
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let live: BTreeSet<String> = store.state().iter().map(|p| p.name_any()).collect();
        *ctx.live_policies.lock().unwrap_or_else(|e| e.into_inner()) = Some(live.clone());
        let gone: Vec<String> = {
            let histories = ctx.histories.lock().unwrap_or_else(|e| e.into_inner());
            histories.keys().filter(|name| !live.contains(*name)).cloned().collect()
        };
        for name in gone {
            debug!(policy = %name, "policy deleted: its history and metric series are forgotten");
            ctx.forget(&name);
        }
    }
}

fn error_policy(policy: Arc<RemediationPolicy>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.reconcile_errors.get_or_create(&ErrorLabels { category: error.category() }).inc();
    warn!(policy = %policy.name_any(), error = %error, category = %error.category(), "reconcile failed");
    if error.is_transient() {
        Action::requeue(Duration::from_secs(2))
    } else {
        Action::requeue(Duration::from_secs(30))
    }
}

async fn reconcile(policy: Arc<RemediationPolicy>, ctx: Arc<Context>) -> Result<Action> {
    let started = Instant::now();
    let result = evaluate(&policy, &ctx).await;
    ctx.metrics.reconcile_duration.observe(started.elapsed().as_secs_f64());
    result
}

/// One reconcile: observe, decide (the pure core), commit (everything to the writer in one
/// call), record (what the writer did, into the history), requeue at the next deadline. `now`
/// is read once.
async fn evaluate(policy: &RemediationPolicy, ctx: &Context) -> Result<Action> {
    let name = policy.name_any();
    if policy.metadata.deletion_timestamp.is_some() {
        ctx.forget(&name);
        return Ok(Action::await_change());
    }
    let (now, at) = (crate::clock::now(), Instant::now());
    let mut history = ctx.history(&name).await;
    let validated = match validate(&policy.spec) {
        Ok(v) => v,
        Err(invalid) => return reject(policy, ctx, &mut history, &invalid, now).await,
    };
    let previous = history.previous_status(policy.status.as_ref());
    let mut ledger = ctx.ledger(validated.mode).await;
    let past = history.past(validated.mode, previous.as_ref(), now);
    let observed = observe(policy, ctx, past, ledger.as_deref_mut(), now);
    let reads = Reads {
        generation: policy.metadata.generation,
        previous: previous.as_ref(),
        pending: read_pending(ctx, &name, &history, previous.as_ref()).await,
        failed: read_failed(ctx, &history, &observed).await,
    };
    let decision = decide(&observed, &validated, &history, &reads, now);
    export(&ctx.metrics, &name, &decision.gauges);
    log_news(&name, &decision);
    let committed = ctx.writer.commit(commit(policy, &validated, &decision, &reads)).await;
    let outcomes: Vec<ActionOutcome> = committed.outcomes.iter().map(outcome).collect();
    let (write, failed) = status_write(committed.status);
    let retry_at = history.after_commit(decision.decided, &outcomes, &observed, write, now);
    if let Some(ledger) = ledger.as_mut() {
        record_in_ledger(ctx, ledger, &name, &outcomes, &observed);
    }
    drop(ledger);
    match failed {
        Some(e) => Err(e),
        None => Ok(next_action(&decision.plan, decision.wake_at, retry_at, now, at)),
    }
}

/// Observe: the caches, as this policy's past and (in Enforce) the other policies' actions
/// let it see them.
fn observe(
    policy: &RemediationPolicy,
    ctx: &Context,
    past: Past,
    ledger: Option<&mut Ledger>,
    now: Timestamp,
) -> Observed {
    let name = policy.name_any();
    let (mut acted, mut others) = (past.acted, Vec::new());
    if let Some(ledger) = ledger {
        let (theirs, acted_by_any) = ledger.for_policy(&name, now);
        others = theirs;
        acted.extend(acted_by_any);
    }
    let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
    state.refresh_evidence(now);
    let mut observed = state.observe(now, past.recent, acted);
    observed.others_actions = others;
    observed.backoff = past.backoff;
    observed.acting = Acting {
        policy: name,
        live_policies: ctx.live_policies.lock().unwrap_or_else(|e| e.into_inner()).clone(),
    };
    observed.storm = StormInput {
        cluster_limit: Some(ctx.cluster_limit),
        previous: past.circuit,
        rearm_token: rearm_token(policy),
    };
    observed
}

/// The pods and nodes of the Pending records a previous run left, read afresh (once per run;
/// `None` when a read failed: they are resolved by a later reconcile).
async fn read_pending(
    ctx: &Context,
    name: &str,
    history: &PolicyHistory,
    previous: Option<&RemediationPolicyStatus>,
) -> Option<PendingNow> {
    let mut seen = PendingNow::default();
    let mut all_read = true;
    for (namespace, pod, uid) in history.pending_pods(previous) {
        match ctx.writer.pod_now(&namespace, &pod, &uid).await {
            Ok(now) => {
                seen.pods.insert(uid, now);
            }
            Err(e) => {
                warn!(policy = %name, pod = %pod, error = %e, "cannot read a Pending record's pod");
                all_read = false;
            }
        }
    }
    for node in history.pending_nodes(previous) {
        match ctx.writer.node_now(&node).await {
            Ok(view) => {
                seen.nodes.insert(node, view);
            }
            Err(e) => {
                warn!(policy = %name, node = %node, error = %e, "cannot read a Pending record's node");
                all_read = false;
            }
        }
    }
    all_read.then_some(seen)
}

/// The pods of failed requests (a timeout, say) that left the cache, read afresh: the request
/// may have happened after all. A read that fails leaves them for the next reconcile.
async fn read_failed(
    ctx: &Context,
    history: &PolicyHistory,
    observed: &Observed,
) -> BTreeMap<String, PodNow> {
    let cached = |uid: &str| observed.pods.iter().any(|p| p.uid == uid);
    let mut seen = BTreeMap::new();
    for (key, record) in history.failed_to_check(cached) {
        if let Ok(now) = ctx.writer.pod_now(&record.namespace, &record.name, &record.uid).await {
            seen.insert(key, now);
        }
    }
    seen
}

/// What the writer is handed for a decision.
fn commit<'a>(
    policy: &'a RemediationPolicy,
    validated: &'a ValidatedPolicy,
    decision: &'a Decision,
    reads: &Reads<'a>,
) -> Commit<'a> {
    let notices = decision.circuit_notices.iter().cloned();
    Commit {
        policy,
        validated: Some(validated),
        actions: &decision.plan.actions,
        notices: notices.map(|(reason, note)| Notice { reason, action: "Plan", note }).collect(),
        fencing_notices: decision.fencing_notices.clone(),
        pod_notices: decision.pod_notices.clone(),
        node_notices: decision.node_notices.clone(),
        reports_beyond_budget: decision.reports_beyond_budget.clone(),
        status: decision.status.clone(),
        previous: reads.previous,
        carried: decision.carried.clone(),
        resolved: decision.resolved.clone(),
        recorded_ahead: &decision.ahead.stored,
        early_looks: &decision.ahead.early_looks,
    }
}

/// How the status write went, for the history, and its error, for the reconcile.
fn status_write(result: Result<Option<RemediationPolicyStatus>>) -> (StatusWrite, Option<Error>) {
    match result {
        Ok(Some(written)) => (StatusWrite::Written(Box::new(written)), None),
        Ok(None) => (StatusWrite::Unchanged, None),
        Err(e) => (StatusWrite::Failed, Some(e)),
    }
}

fn outcome(outcome: &Outcome) -> ActionOutcome<'_> {
    ActionOutcome {
        record: &outcome.record,
        handled: outcome.handled,
        acted_key: &outcome.acted_key,
    }
}

/// Records a policy's outcomes in the ledger, and the Nodes it deleted in the cluster state:
/// before the ledger is released, so that no policy in Enforce ever reads a Node we deleted as
/// deleted by someone else (fencing evidence, death without a Lease).
fn record_in_ledger(
    ctx: &Context,
    ledger: &mut Ledger,
    name: &str,
    outcomes: &[ActionOutcome],
    observed: &Observed,
) {
    ledger.record(name, outcomes, observed);
    let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
    for record in outcomes.iter().map(|o| o.record) {
        // A failed DELETE may have happened (a timeout): counted as ours too.
        let sent = matches!(record.result, ActionResult::Done | ActionResult::Failed);
        if record.action == ActionKind::DeleteNode && sent {
            state.node_deleted_by_us(&record.uid, record.time.0);
        }
    }
}

/// An invalid spec: the Invalid condition, one Event when it becomes invalid, no action.
async fn reject(
    policy: &RemediationPolicy,
    ctx: &Context,
    history: &mut PolicyHistory,
    invalid: &InvalidPolicy,
    now: Timestamp,
) -> Result<Action> {
    let name = policy.name_any();
    let previous = history.previous_status(policy.status.as_ref());
    let previous = previous.as_ref();
    ctx.metrics.policy_invalid.get_or_create(&PolicyLabels { policy: name.clone() }).set(1);
    let evaluation = Evaluation::Invalid { invalid, paused: policy.spec.paused };
    let status = desired_status(evaluation, policy.metadata.generation, previous, now);
    let mut notices = Vec::new();
    if !condition_true(previous, CONDITION_INVALID) {
        warn!(policy = %name, reason = %invalid.reason, "policy is invalid");
        let note = format!("the spec is invalid and is not acted on: {}", invalid.reason);
        notices.push(Notice { reason: "InvalidSpec", action: "Validate", note });
    }
    let committed = ctx
        .writer
        .commit(Commit {
            policy,
            validated: None,
            actions: &[],
            notices,
            fencing_notices: Vec::new(),
            pod_notices: Vec::new(),
            node_notices: Vec::new(),
            reports_beyond_budget: None,
            status,
            previous,
            carried: Vec::new(),
            resolved: Vec::new(),
            recorded_ahead: &NOTHING_AHEAD,
            early_looks: &[],
        })
        .await;
    if let Some(written) = committed.status? {
        history.wrote(written, now);
    }
    Ok(Action::await_change())
}

/// Logs the circuit's transitions (opened, latched, re-armed, cooling down, closed), and, once
/// per change, the nodes held alive although not Ready and a suspended evidence window.
fn log_news(policy: &str, decision: &Decision) {
    for (reason, note) in &decision.circuit_notices {
        if decision.plan.storm.holds() {
            warn!(policy, reason, "{note}");
        } else {
            info!(policy, reason, "{note}");
        }
    }
    if let Some(beyond) = &decision.reports_beyond_budget {
        warn!(policy, reason = REPORTS_BEYOND_BUDGET, "{}", beyond.note);
    }
    for node in &decision.evidence.newly_held_alive {
        info!(policy, node = %node.name, why = %node.why, "node not Ready but held alive: its kubelet answers");
    }
    match &decision.evidence.suspension {
        Some(Some(why)) => warn!(policy, %why, "evidence suspended: no node counts as dead"),
        Some(None) => info!(policy, "evidence trusted again from the start of a new window"),
        None => {}
    }
}

/// The longest a policy goes without deciding. Every reconcile decides over everything the
/// state holds; watch events ask for one only when they can change a decision, and a pod
/// within its grace period on a Ready node asks for one only when its grace ends (the index
/// defers it, [`crate::index::state::Change::At`]). This pass is the safety net under that
/// bookkeeping: whatever a lost timer or a mistaken deferral would leave unplanned is planned
/// within a minute, and the gauges are never older.
pub const FULL_PASS_EVERY: Duration = Duration::from_secs(60);

/// Requeue exactly at the decision's wake-up time (or at `retry_at`, if sooner) plus a few
/// milliseconds, and no later than [`FULL_PASS_EVERY`]. `now` is the reconcile's instant, `at`
/// the same instant on the monotonic clock: the time the reconcile took is subtracted.
fn next_action(
    plan: &Plan,
    wake_at: Option<Timestamp>,
    retry_at: Option<Timestamp>,
    now: Timestamp,
    at: Instant,
) -> Action {
    if !plan.synced {
        return Action::requeue(UNSYNCED_RETRY);
    }
    match wake_at.into_iter().chain(retry_at).min() {
        Some(deadline) => {
            let wait = deadline.duration_since(now).max(SignedDuration::ZERO);
            let wait = Duration::try_from(wait).unwrap_or_default().saturating_sub(at.elapsed())
                + DEADLINE_MARGIN;
            debug!(?wait, %deadline, "requeue at the next deadline");
            Action::requeue(wait.min(FULL_PASS_EVERY))
        }
        None => Action::requeue(FULL_PASS_EVERY),
    }
}

fn condition_true(status: Option<&RemediationPolicyStatus>, type_: &str) -> bool {
    status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// The decision's gauges: the one place a reconcile sets them.
fn export(metrics: &Metrics, policy: &str, gauges: &Gauges) {
    let labels = PolicyLabels { policy: policy.to_string() };
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    metrics.policy_invalid.get_or_create(&labels).set(0);
    metrics.circuit_open.get_or_create(&labels).set(i64::from(gauges.circuit_open));
    metrics.pods_needing_fencing.get_or_create(&labels).set(count(gauges.needing_fencing));
    metrics.stale_ready.get_or_create(&labels).set(count(gauges.stale_ready));
    metrics.ready_on_dead_node.get_or_create(&labels).set(count(gauges.ready_on_dead_node));
    for &(cause, n) in &gauges.live_node_stuck {
        let labels = CauseLabels { policy: policy.to_string(), cause };
        metrics.live_node_stuck.get_or_create(&labels).set(count(n));
    }
    for &(state, n) in &gauges.stuck_pods {
        let labels = StuckLabels { policy: policy.to_string(), node_state: Label(state) };
        metrics.stuck_pods.get_or_create(&labels).set(count(n));
    }
}
