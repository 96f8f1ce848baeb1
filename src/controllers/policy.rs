//! The RemediationPolicy controller: observe, decide, act.
//!
//! Each reconcile reads the policy and the compact cluster state, calls the pure
//! [`plan`](crate::core::plan), hands the plan to the [writer](crate::writer), writes the status
//! only when it changed, and requeues at the exact instant of the next deadline.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

use super::watch::{SharedState, trigger_stream};
use crate::core::{
    CONDITION_CIRCUIT_OPEN, CONDITION_INVALID, Evaluation, NodeState, Observed, OwnerKey,
    PastAction, Plan, RATE_WINDOW, Suspension, blocked_rollouts_in_scope, desired_status, plan,
    push_recent_actions, validate,
};
use crate::crd::{Mode, RemediationPolicy, RemediationPolicyStatus};
use crate::metrics::{ErrorLabels, Metrics, PolicyLabels, StuckLabels};
use crate::writer::Writer;
use crate::{Error, Result};

/// A small margin added to requeue delays so the reconcile runs just after a threshold instant.
const DEADLINE_MARGIN: Duration = Duration::from_millis(5);
/// How soon to look again while the caches are not synced.
const UNSYNCED_RETRY: Duration = Duration::from_secs(1);

/// What the controller remembers about one policy between reconciles.
#[derive(Debug, Default)]
struct PolicyMemory {
    /// The mode the memory belongs to: switching DryRun -> Enforce starts afresh, so pods
    /// recorded as would-be actions are then really acted on.
    mode: Option<Mode>,
    recent: Vec<PastAction>,
    acted: BTreeSet<String>,
    /// The last status this controller wrote: the controller's cache may lag behind it.
    last_status: Option<RemediationPolicyStatus>,
    /// Nodes last reported as held alive (not Ready, kubelet answering), to log each once.
    held_alive: BTreeSet<String>,
    /// Why evidence was last suspended, to log each change once.
    suspended: Option<Suspension>,
}

pub struct Context {
    pub state: SharedState,
    pub writer: Writer,
    pub metrics: Arc<Metrics>,
    memory: Mutex<HashMap<String, PolicyMemory>>,
}

impl Context {
    pub fn new(state: SharedState, writer: Writer, metrics: Arc<Metrics>) -> Self {
        Context { state, writer, metrics, memory: Mutex::new(HashMap::new()) }
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
    let reporter = tokio::spawn(super::rollouts::run(
        ctx.state.clone(),
        ctx.writer.clone(),
        ctx.metrics.clone(),
        trigger.clone(),
    ));
    let api: Api<RemediationPolicy> = Api::all(client);
    let mut config = watcher::Config::default();
    if let Some(selector) = policy_selector {
        config = config.labels(&selector);
    }
    Controller::new(api, config)
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
}

fn error_policy(policy: Arc<RemediationPolicy>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics
        .reconcile_errors
        .get_or_create(&ErrorLabels { category: error.category().into() })
        .inc();
    warn!(policy = %policy.name_any(), error = %error, category = error.category(), "reconcile failed");
    if error.is_transient() {
        Action::requeue(Duration::from_secs(2))
    } else {
        Action::requeue(Duration::from_secs(30))
    }
}

async fn reconcile(policy: Arc<RemediationPolicy>, ctx: Arc<Context>) -> Result<Action> {
    let name = policy.name_any();
    if policy.metadata.deletion_timestamp.is_some() {
        ctx.metrics.forget_policy(&name);
        ctx.memory.lock().unwrap_or_else(|e| e.into_inner()).remove(&name);
        return Ok(Action::await_change());
    }
    let now = crate::clock::now();
    let generation = policy.metadata.generation;
    let previous = {
        let memory = ctx.memory.lock().unwrap_or_else(|e| e.into_inner());
        memory.get(&name).and_then(|m| m.last_status.clone()).or_else(|| policy.status.clone())
    };
    let policy_labels = PolicyLabels { policy: name.clone() };

    let validated = match validate(&policy.spec) {
        Ok(v) => v,
        Err(invalid) => {
            ctx.metrics.policy_invalid.get_or_create(&policy_labels).set(1);
            let status = desired_status(
                Evaluation::Invalid { invalid: &invalid, paused: policy.spec.paused },
                generation,
                previous.as_ref(),
                now,
            );
            if !condition_true(previous.as_ref(), CONDITION_INVALID) {
                warn!(policy = %name, reason = %invalid.reason, "policy is invalid");
                let note = format!("the spec is invalid and is not acted on: {}", invalid.reason);
                ctx.writer
                    .policy_event(&policy, EventType::Warning, "InvalidSpec", "Validate", note)
                    .await;
            }
            write_status(&ctx, &name, previous.as_ref(), status).await?;
            return Ok(Action::await_change());
        }
    };
    ctx.metrics.policy_invalid.get_or_create(&policy_labels).set(0);

    let observed = {
        let mut memory = ctx.memory.lock().unwrap_or_else(|e| e.into_inner());
        let mem = memory.entry(name.clone()).or_default();
        if mem.mode != Some(validated.mode) {
            *mem = PolicyMemory {
                mode: Some(validated.mode),
                recent: seed_recent(previous.as_ref(), validated.mode, now),
                acted: BTreeSet::new(),
                last_status: mem.last_status.take(),
                held_alive: std::mem::take(&mut mem.held_alive),
                suspended: mem.suspended.take(),
            };
        }
        mem.recent.retain(|a| now.duration_since(a.at) < RATE_WINDOW);
        let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
        state.refresh_evidence(now);
        state.observe(now, mem.recent.clone(), mem.acted.clone())
    };
    let plan = plan(&observed, &validated, now);
    log_evidence(&ctx, &name, &plan);

    let outcomes = ctx.writer.execute(&policy, &validated, &plan.actions, crate::clock::now).await;
    {
        let mut memory = ctx.memory.lock().unwrap_or_else(|e| e.into_inner());
        let mem = memory.entry(name.clone()).or_default();
        let live: BTreeSet<&str> = observed.pods.iter().map(|p| p.uid.as_str()).collect();
        mem.acted.retain(|uid| live.contains(uid.as_str()));
        for outcome in &outcomes {
            mem.recent
                .push(PastAction { at: outcome.record.time.0, owner: owner_key(&outcome.record) });
            if outcome.handled {
                mem.acted.insert(outcome.record.uid.clone());
            }
        }
    }

    export_gauges(&ctx.metrics, &name, &plan, &observed, now);
    if plan.circuit.open && !condition_true(previous.as_ref(), CONDITION_CIRCUIT_OPEN) {
        warn!(policy = %name, "{}", plan.circuit.message());
        ctx.writer
            .policy_event(
                &policy,
                EventType::Warning,
                "CircuitOpen",
                "Plan",
                plan.circuit.message(),
            )
            .await;
    }

    let mut status = desired_status(
        Evaluation::Planned { policy: &validated, plan: &plan },
        generation,
        previous.as_ref(),
        crate::clock::now(),
    );
    push_recent_actions(&mut status, outcomes.into_iter().map(|o| o.record));
    status.blocked_rollouts = blocked_rollouts_in_scope(&observed, &plan, &validated);
    write_status(&ctx, &name, previous.as_ref(), status).await?;

    Ok(next_action(&plan, crate::clock::now()))
}

/// Logs, once per change, the nodes held alive although not Ready, and a suspended evidence
/// window.
fn log_evidence(ctx: &Context, policy: &str, plan: &Plan) {
    let mut memory = ctx.memory.lock().unwrap_or_else(|e| e.into_inner());
    let mem = memory.entry(policy.to_string()).or_default();
    let now_alive: BTreeSet<String> =
        plan.nodes.iter().filter(|n| n.held_alive.is_some()).map(|n| n.name.clone()).collect();
    for node in plan.nodes.iter().filter(|n| !mem.held_alive.contains(&n.name)) {
        if node.held_alive.is_some() {
            info!(policy, node = %node.name, why = %node.why, "node not Ready but held alive: its kubelet answers");
        }
    }
    mem.held_alive = now_alive;
    let kind = |s: &Option<Suspension>| s.as_ref().map(std::mem::discriminant);
    if kind(&plan.suspended) != kind(&mem.suspended) {
        match &plan.suspended {
            Some(why) => warn!(policy, %why, "evidence suspended: no node counts as dead"),
            None => info!(policy, "evidence trusted again from the start of a new window"),
        }
    }
    mem.suspended = plan.suspended.clone();
}

/// Requeue exactly at the next deadline (plus a few milliseconds), or wait for a change.
fn next_action(plan: &Plan, now: Timestamp) -> Action {
    if !plan.synced {
        return Action::requeue(UNSYNCED_RETRY);
    }
    match plan.next_deadline {
        Some(deadline) => {
            let wait = deadline.duration_since(now).max(SignedDuration::ZERO);
            let wait = Duration::try_from(wait).unwrap_or_default() + DEADLINE_MARGIN;
            debug!(?wait, %deadline, "requeue at the next deadline");
            Action::requeue(wait)
        }
        None => Action::await_change(),
    }
}

async fn write_status(
    ctx: &Context,
    name: &str,
    previous: Option<&RemediationPolicyStatus>,
    status: RemediationPolicyStatus,
) -> Result<()> {
    if previous == Some(&status) {
        return Ok(());
    }
    ctx.writer.patch_status(name, &status).await?;
    info!(policy = %name, "status updated");
    let mut memory = ctx.memory.lock().unwrap_or_else(|e| e.into_inner());
    memory.entry(name.to_string()).or_default().last_status = Some(status);
    Ok(())
}

fn condition_true(status: Option<&RemediationPolicyStatus>, type_: &str) -> bool {
    status.is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

/// Rebuilds the rate-limit history of the current mode from the status after a restart.
fn seed_recent(
    status: Option<&RemediationPolicyStatus>,
    mode: Mode,
    now: Timestamp,
) -> Vec<PastAction> {
    status
        .map(|s| {
            s.recent_actions
                .iter()
                .filter(|a| a.mode == mode && now.duration_since(a.time.0) < RATE_WINDOW)
                .map(|a| PastAction { at: a.time.0, owner: owner_key(a) })
                .collect()
        })
        .unwrap_or_default()
}

fn owner_key(record: &crate::crd::RecentAction) -> Option<OwnerKey> {
    let (kind, name) = record.owner.as_deref()?.split_once('/')?;
    Some(OwnerKey {
        namespace: record.namespace.clone(),
        kind: kind.to_string(),
        name: name.to_string(),
    })
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
        .set(i64::from(plan.circuit.open));
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
            .get_or_create(&StuckLabels {
                policy: policy.to_string(),
                node_state: state.as_str().to_string(),
            })
            .set(count);
    }
}
