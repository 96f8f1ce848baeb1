//! The RemediationPolicy controller: observe, decide, act.
//!
//! Each reconcile reads the policy and the compact cluster state, calls the pure
//! [`plan`](crate::core::plan), hands the plan, the desired status and the notices to the
//! [writer](crate::writer) in one call, and requeues at the exact instant of the next deadline.
//! What it remembers between reconciles is kept by [`PolicyMemory`].

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

use super::memory::{EvidenceNews, Ledger, PolicyMemory};
use crate::adapters::rearm_token;
use crate::core::live_node_cause::StuckCause;
use crate::core::{
    Acting, CONDITION_INVALID, Evaluation, InvalidPolicy, MaxUnhealthy, NodeState, Observed, Plan,
    PodNow, StormInput, blocked_rollouts_in_scope, circuit_memory, desired_status,
    held_by_finalizers, hold_counts, needs_fencing, node_action_took_effect, plan, resolve_failed,
    stale_ready, stuck_on_live_nodes, transition_notices, validate,
};
use crate::crd::{ActionKind, ActionResult, Mode, RemediationPolicy, RemediationPolicyStatus};
use crate::index::watches::{SharedState, trigger_stream};
use crate::metrics::{CauseLabels, ErrorLabels, Label, Metrics, PolicyLabels, StuckLabels};
use crate::writer::{Commit, Notice, Writer};
use crate::{Error, Result};

/// A small margin added to requeue delays so the reconcile runs just after a threshold instant.
const DEADLINE_MARGIN: Duration = Duration::from_millis(5);
/// How soon to look again while the caches are not synced.
const UNSYNCED_RETRY: Duration = Duration::from_secs(1);

pub struct Context {
    pub state: SharedState,
    pub writer: Writer,
    pub metrics: Arc<Metrics>,
    memory: Mutex<HashMap<String, PolicyMemory>>,
    /// What the policies in Enforce did, shared; locked by each Enforce reconcile throughout.
    ledger: tokio::sync::Mutex<Ledger>,
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
            memory: Mutex::new(HashMap::new()),
            ledger: tokio::sync::Mutex::new(Ledger::default()),
            cluster_limit,
            live_policies: Mutex::new(None),
        }
    }

    /// Runs `f` on the memory of policy `name`.
    fn remember<T>(&self, name: &str, f: impl FnOnce(&mut PolicyMemory) -> T) -> T {
        let mut memory = self.memory.lock().unwrap_or_else(|e| e.into_inner());
        f(memory.entry(name.to_string()).or_default())
    }

    fn forget(&self, name: &str) {
        self.memory.lock().unwrap_or_else(|e| e.into_inner()).remove(name);
    }
}

/// Runs the controller until `shutdown` resolves. `policy_selector` restricts which policies
/// this process serves (a label selector; empty for all).
pub async fn run(
    client: Client,
    ctx: Arc<Context>,
    trigger: tokio::sync::watch::Receiver<u64>,
    policy_selector: Option<String>,
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
    // A handful of policies: a paged list works on every API server.
    let mut config =
        crate::index::watches::watch_config(crate::index::watches::InitialLists::Paged);
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

/// Forgets, every [`SWEEP_EVERY`], the memory and the metric series of policies that are gone:
/// a policy without finalizers is never reconciled once deleted, and its series (its circuit,
/// its stuck pods) would live on and keep alerts firing.
async fn forget_deleted(
    store: kube::runtime::reflector::Store<RemediationPolicy>,
    ctx: Arc<Context>,
) {
    // No reconcile runs before the store has listed, so nothing is in memory to forget
    // before it has either.
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let live: BTreeSet<String> = store.state().iter().map(|p| p.name_any()).collect();
        *ctx.live_policies.lock().unwrap_or_else(|e| e.into_inner()) = Some(live.clone());
        let gone: Vec<String> = {
            let memory = ctx.memory.lock().unwrap_or_else(|e| e.into_inner());
            memory.keys().filter(|name| !live.contains(*name)).cloned().collect()
        };
        for name in gone {
            debug!(policy = %name, "policy deleted: its memory and metric series are forgotten");
            ctx.metrics.forget_policy(&name);
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

/// One reconcile: observe, decide (the pure core), hand everything to the writer in one call,
/// requeue at the next deadline. `now` is read once.
async fn evaluate(policy: &RemediationPolicy, ctx: &Context) -> Result<Action> {
    let name = policy.name_any();
    if policy.metadata.deletion_timestamp.is_some() {
        ctx.metrics.forget_policy(&name);
        ctx.forget(&name);
        return Ok(Action::await_change());
    }
    let (now, at) = (crate::clock::now(), Instant::now());
    let previous = ctx.remember(&name, |m| m.previous_status(policy.status.as_ref()));
    let validated = match validate(&policy.spec) {
        Ok(v) => v,
        Err(invalid) => return reject(policy, ctx, &invalid, previous.as_ref(), now).await,
    };
    ctx.metrics.policy_invalid.get_or_create(&PolicyLabels { policy: name.clone() }).set(0);

    // Policies in Enforce decide one at a time, each seeing what the others did.
    let mut ledger = match validated.mode {
        Mode::Enforce => Some(ctx.ledger.lock().await),
        Mode::DryRun => None,
    };
    let observed = {
        let (recent, mut acted) =
            ctx.remember(&name, |m| m.history(validated.mode, previous.as_ref(), now));
        let backoff = ctx.remember(&name, |m| m.backoff());
        let mut others = Vec::new();
        if let Some(ledger) = ledger.as_mut() {
            let (theirs, acted_by_any) = ledger.for_policy(&name, now);
            others = theirs;
            acted.extend(acted_by_any);
        }
        let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
        state.refresh_evidence(now);
        let mut observed = state.observe(now, recent, acted);
        observed.others_actions = others;
        observed.backoff = backoff;
        observed.acting = Acting {
            policy: name.clone(),
            live_policies: ctx.live_policies.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        };
        let from_status = circuit_memory(previous.as_ref());
        observed.storm = StormInput {
            cluster_limit: Some(ctx.cluster_limit),
            previous: ctx.remember(&name, |m| m.circuit(from_status)),
            rearm_token: rearm_token(policy),
        };
        observed
    };
    let plan = plan(&observed, &validated, now);
    ctx.remember(&name, |m| m.circuit_after(plan.storm.memory.clone()));
    ctx.remember(&name, |m| log_evidence(&name, m.evidence_news(&plan)));
    let fencing = needs_fencing(&plan);
    ctx.metrics
        .pods_needing_fencing
        .get_or_create(&PolicyLabels { policy: name.clone() })
        .set(i64::try_from(fencing.len()).unwrap_or(i64::MAX));
    let mut held = fencing;
    held.extend(held_by_finalizers(&plan));
    let fencing_notices = ctx.remember(&name, |m| m.new_fencing_notices(held));
    for cause in StuckCause::CODES {
        let count = plan.stuck.iter().filter(|s| s.cause.code() == cause).count();
        ctx.metrics
            .live_node_stuck
            .get_or_create(&CauseLabels { policy: name.clone(), cause })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }
    ctx.metrics
        .stale_ready
        .get_or_create(&PolicyLabels { policy: name.clone() })
        .set(i64::try_from(plan.stale.len()).unwrap_or(i64::MAX));
    let mut notices_now = stuck_on_live_nodes(&plan);
    notices_now.extend(stale_ready(&plan));
    let pod_notices = ctx.remember(&name, |m| m.new_pod_notices(notices_now));
    export_gauges(&ctx.metrics, &name, &plan, &observed, now);

    // Records not yet in the status: those whose write failed, and (once per run) the Pending
    // ones a previous run left, resolved by what the cluster shows now.
    let carried = ctx.remember(&name, |m| m.take_unwritten());
    // Resolved from a fresh read of each pod, never from the cache (which holds only some
    // pods: an absence there is no evidence the pod is gone); a read that fails leaves them
    // for the next reconcile.
    let mut seen = HashMap::new();
    let mut all_read = true;
    for (namespace, pod, uid) in ctx.remember(&name, |m| m.pending_pods(previous.as_ref())) {
        match ctx.writer.pod_now(&namespace, &pod, &uid).await {
            Ok(now) => {
                seen.insert(uid, now);
            }
            Err(e) => {
                warn!(policy = %name, pod = %pod, error = %e, "cannot read a Pending record's pod");
                all_read = false;
            }
        }
    }
    let mut nodes_now = HashMap::new();
    for node in ctx.remember(&name, |m| m.pending_nodes(previous.as_ref())) {
        match ctx.writer.node_now(&node).await {
            Ok(view) => {
                nodes_now.insert(node, view);
            }
            Err(e) => {
                warn!(policy = %name, node = %node, error = %e, "cannot read a Pending record's node");
                all_read = false;
            }
        }
    }
    let mut resolved = if all_read {
        let pod_now = |uid: &str| seen.get(uid).copied().unwrap_or(PodNow::Present);
        let node_done = |r: &crate::crd::RecentAction| {
            nodes_now.get(&r.name).is_some_and(|n| node_action_took_effect(r, n.as_ref()))
        };
        ctx.remember(&name, |m| m.resolve_pending_once(previous.as_ref(), pod_now, node_done))
    } else {
        Vec::new()
    };
    // A failed request (a timeout, say) whose pod left the cache may have happened: a fresh
    // read settles it, and a Done record replaces the Failed one.
    let cached = |uid: &str| observed.pods.iter().any(|p| p.uid == uid);
    for (key, record) in ctx.remember(&name, |m| m.failed_to_check(cached)) {
        let Ok(now) = ctx.writer.pod_now(&record.namespace, &record.name, &record.uid).await else {
            continue;
        };
        resolved.extend(resolve_failed(&record, now));
        ctx.remember(&name, |m| m.failure_settled(&key));
    }
    let earlier: Vec<_> = carried.iter().chain(&resolved).cloned().collect();
    let generation = policy.metadata.generation;
    let evaluation = Evaluation::Planned { policy: &validated, plan: &plan };
    let mut status = desired_status(evaluation, generation, previous.as_ref(), now);
    status.blocked_rollouts = blocked_rollouts_in_scope(&observed, &plan, &validated);
    // Counts that alone changed are written at most every COUNTS_EVERY.
    let counts_held = match (previous.as_ref(), ctx.remember(&name, |m| m.counts_wait_until(now))) {
        (Some(previous), Some(until))
            if plan.actions.is_empty()
                && earlier.is_empty()
                && hold_counts(&mut status, previous) =>
        {
            Some(until)
        }
        _ => None,
    };
    let committed = ctx
        .writer
        .commit(Commit {
            policy,
            validated: Some(&validated),
            actions: &plan.actions,
            notices: circuit_notices(&name, &plan),
            fencing_notices,
            pod_notices,
            status,
            previous: previous.as_ref(),
            carried,
            resolved,
        })
        .await;
    let live = || observed.pods.iter().map(|p| p.uid.as_str());
    let live_and_nodes = live().chain(observed.nodes.iter().map(|n| n.control.uid.as_str()));
    ctx.remember(&name, |m| m.record(&committed.outcomes, live_and_nodes));
    if let Some(ledger) = ledger.as_mut() {
        ledger.record(&name, &committed.outcomes, live());
        // Before the ledger is released, so that no policy in Enforce ever reads a Node we
        // deleted as deleted by someone else (fencing evidence, death without a Lease).
        let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
        for record in committed.outcomes.iter().map(|o| &o.record) {
            // A failed DELETE may have happened (a timeout): counted as ours too.
            let sent = matches!(record.result, ActionResult::Done | ActionResult::Failed);
            if record.action == ActionKind::DeleteNode && sent {
                state.node_deleted_by_us(&record.uid, record.time.0);
            }
        }
    }
    drop(ledger);
    match committed.status {
        Ok(Some(written)) => ctx.remember(&name, |m| m.wrote(written, now)),
        Ok(None) => {}
        Err(e) => {
            // Their Events are out; their records go into the next status write.
            let records =
                earlier.into_iter().chain(committed.outcomes.iter().map(|o| o.record.clone()));
            ctx.remember(&name, |m| m.unwritten(records));
            return Err(e);
        }
    }
    // An action skipped is decided again soon (UNDONE_RETRY), whatever else happens; a failed
    // one when its backoff ends (a deadline of the plan).
    let retry_at = ctx.remember(&name, |m| m.retry_at(now)).into_iter().chain(counts_held).min();
    Ok(next_action(&plan, retry_at, now, at))
}

/// An invalid spec: the Invalid condition, one Event when it becomes invalid, no action.
async fn reject(
    policy: &RemediationPolicy,
    ctx: &Context,
    invalid: &InvalidPolicy,
    previous: Option<&RemediationPolicyStatus>,
    now: Timestamp,
) -> Result<Action> {
    let name = policy.name_any();
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
            status,
            previous,
            carried: Vec::new(),
            resolved: Vec::new(),
        })
        .await;
    if let Some(written) = committed.status? {
        ctx.remember(&name, |m| m.wrote(written, now));
    }
    Ok(Action::await_change())
}

/// The Events for a change of the circuit (opened, latched, re-armed, cooling down, closed).
fn circuit_notices(policy: &str, plan: &Plan) -> Vec<Notice> {
    let notices = transition_notices(&plan.storm);
    for (reason, note) in &notices {
        if plan.storm.holds() {
            warn!(policy, reason, "{note}");
        } else {
            info!(policy, reason, "{note}");
        }
    }
    notices.into_iter().map(|(reason, note)| Notice { reason, action: "Plan", note }).collect()
}

/// Logs, once per change, the nodes held alive although not Ready, and a suspended evidence
/// window.
fn log_evidence(policy: &str, news: EvidenceNews<'_>) {
    for node in news.newly_held_alive {
        info!(policy, node = %node.name, why = %node.why, "node not Ready but held alive: its kubelet answers");
    }
    match news.suspension {
        Some(Some(why)) => warn!(policy, %why, "evidence suspended: no node counts as dead"),
        Some(None) => info!(policy, "evidence trusted again from the start of a new window"),
        None => {}
    }
}

/// Requeue exactly at the next deadline (or at `retry_at`, if sooner) plus a few milliseconds,
/// or wait for a change. `now` is the reconcile's instant, `at` the same instant on the monotonic clock: the time the
/// reconcile took is subtracted.
fn next_action(plan: &Plan, retry_at: Option<Timestamp>, now: Timestamp, at: Instant) -> Action {
    if !plan.synced {
        return Action::requeue(UNSYNCED_RETRY);
    }
    match plan.next_deadline.into_iter().chain(retry_at).min() {
        Some(deadline) => {
            let wait = deadline.duration_since(now).max(SignedDuration::ZERO);
            let wait = Duration::try_from(wait).unwrap_or_default().saturating_sub(at.elapsed())
                + DEADLINE_MARGIN;
            debug!(?wait, %deadline, "requeue at the next deadline");
            Action::requeue(wait)
        }
        None => Action::await_change(),
    }
}

fn condition_true(status: Option<&RemediationPolicyStatus>, type_: &str) -> bool {
    status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Circuit state, and pods Terminating past their deletionTimestamp by the state of their node.
fn export_gauges(
    metrics: &Metrics,
    policy: &str,
    plan: &Plan,
    observed: &Observed,
    now: Timestamp,
) {
    metrics
        .circuit_open
        .get_or_create(&PolicyLabels { policy: policy.to_string() })
        .set(i64::from(plan.storm.holds()));
    let states: HashMap<&str, NodeState> =
        plan.nodes.iter().map(|n| (n.name.as_str(), n.state)).collect();
    let overdue: BTreeSet<&str> = observed
        .pods
        .iter()
        .filter(|p| p.deletion_timestamp.is_some_and(|t| t <= now))
        .map(|p| p.uid.as_str())
        .collect();
    let all = [NodeState::Healthy, NodeState::Unhealthy, NodeState::Dead];
    let mut counts = [0i64; 3];
    for decision in plan.decisions.iter().filter(|d| overdue.contains(d.uid.as_str())) {
        let state = states.get(decision.node.as_str()).copied().unwrap_or(NodeState::Dead);
        if let Some(i) = all.iter().position(|s| *s == state) {
            counts[i] += 1;
        }
    }
    for (state, count) in all.into_iter().zip(counts) {
        metrics
            .stuck_pods
            .get_or_create(&StuckLabels { policy: policy.to_string(), node_state: Label(state) })
            .set(count);
    }
}
