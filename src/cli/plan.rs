//! `kube-remediator plan`: what every policy would do right now, like `terraform plan`.
//! One-shot and read-only: it lists the cluster once, watches the kubelet Leases for a short
//! while (`--observe`), runs the same planner as the operator and prints the decisions. It never
//! writes anything.
//!
//! What a one-shot listing cannot know: the running operator times every piece of evidence by
//! its own clock, from when it saw it change. `plan` sees a Lease change only during `--observe`
//! (longer than a kubelet's 10 s renewal period by default, so a live kubelet shows itself);
//! evidence older than that it can only date by the timestamps in the objects, written by the
//! nodes' own clocks. It says so in its output.

use std::process::ExitCode;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use serde_json::json;

use super::ConnectionArgs;
use super::table::{Table, human};
use crate::adapters::NODE_LEASE_NAMESPACE;
use crate::controllers::kinds::WATCHED;
use crate::controllers::memory::PolicyMemory;
use crate::controllers::state::{ClusterState, WatchedKind};
use crate::core::{Action, NodeState, Observed, Plan, Verdict, parse_duration, plan, validate};
use crate::crd::{Mode, RemediationPolicy};
use crate::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    output: Output,

    /// Only policies matching this label selector.
    #[arg(long)]
    policy_selector: Option<String>,

    /// How long to watch the kubelet Leases before planning, to see which kubelets still renew
    /// (by this machine's clock, whatever their own clocks say). Longer than a kubelet's 10 s
    /// renewal period; `0s` plans from the listed timestamps alone.
    #[arg(long, default_value = "12s", value_parser = parse_observe)]
    observe: SignedDuration,
}

fn parse_observe(text: &str) -> std::result::Result<SignedDuration, String> {
    parse_duration(text).map_err(|e| format!("{e} (e.g. 12s, 1m)"))
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Output {
    Table,
    Json,
}

/// One policy's result.
struct PolicyPlan {
    policy: RemediationPolicy,
    outcome: std::result::Result<Plan, String>,
}

pub async fn run(conn: &ConnectionArgs, args: Args) -> Result<ExitCode> {
    let client = conn.one_shot_client().await?;
    let mut lp = ListParams::default();
    if let Some(selector) = &args.policy_selector {
        lp = lp.labels(selector);
    }
    let policies = match Api::<RemediationPolicy>::all(client.clone()).list(&lp).await {
        Ok(list) => list.items,
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::CrdMissing),
        Err(source) => return Err(Error::List { kind: "remediationpolicies", source }),
    };

    let now = crate::clock::now();
    let mut state = ClusterState::new();
    let mut lease_version = String::new();
    for kind in WATCHED {
        let resource = kind.kind().as_str();
        let version = kind
            .load(client.clone(), &mut state, now)
            .await
            .map_err(|source| Error::List { kind: resource, source })?;
        if kind.kind() == WatchedKind::Lease {
            lease_version = version;
        }
    }
    let leases = Api::<Lease>::namespaced(client.clone(), NODE_LEASE_NAMESPACE);
    let listed_at = now;
    observe_renewals(&mut state, &leases, &lease_version, args.observe).await?;
    let now = crate::clock::now();
    let observed = one_shot_observed(&state, listed_at, now);
    let note = evidence_note(args.observe);

    let mut plans = Vec::new();
    for policy in policies {
        let outcome = validate(&policy.spec).map_err(|e| e.reason).map(|validated| {
            // The same history the operator starts from: the policy's recorded actions. In
            // DryRun a pod already recorded is still shown as what the policy would do: the
            // audit reader wants every would-be action, not only the ones not reported yet.
            let (recent_actions, mut acted_pods) =
                PolicyMemory::default().history(validated.mode, policy.status.as_ref(), now);
            if validated.mode == Mode::DryRun {
                acted_pods.clear();
            }
            let observed = Observed { recent_actions, acted_pods, ..observed.clone() };
            plan(&observed, &validated, now)
        });
        plans.push(PolicyPlan { policy, outcome });
    }

    let blocked = state.rollout_analysis(now).blocked;
    match args.output {
        Output::Json => {
            let doc: Vec<_> = plans.iter().map(|p| to_json(p, now, &note)).collect();
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        Output::Table => {
            println!("{note}\n");
            print_tables(&plans, now);
            print_blocked(&blocked);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn renew_time(lease: &Lease) -> Option<Timestamp> {
    lease.spec.as_ref().and_then(|s| s.renew_time.as_ref()).map(|t| t.0)
}

/// Watches the Leases from the listed version for `observe`: each renewal arriving is seen,
/// by our clock, when it arrives.
async fn observe_renewals(
    state: &mut ClusterState,
    leases: &Api<Lease>,
    version: &str,
    observe: SignedDuration,
) -> Result<()> {
    let Ok(observe) = std::time::Duration::try_from(observe) else { return Ok(()) };
    if observe.is_zero() {
        return Ok(());
    }
    let watch_error = |source| Error::List { kind: "leases", source };
    let params =
        WatchParams::default().timeout(u32::try_from(observe.as_secs() + 1).unwrap_or(300));
    let stream = leases.watch(&params, version).await.map_err(watch_error)?;
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + observe;
    while let Ok(next) = tokio::time::timeout_at(deadline, stream.next()).await {
        match next {
            Some(Ok(WatchEvent::Added(l) | WatchEvent::Modified(l))) => {
                state.apply_lease(&l.name_any(), renew_time(&l), crate::clock::now());
            }
            Some(Ok(_)) => {}
            // An expired version or a broken stream: plan with what was seen so far.
            Some(Err(_)) | None => break,
        }
    }
    Ok(())
}

/// The planner's input for a one-shot run. Evidence seen changing during the observation is
/// timed by our clock; older evidence can only be dated by the timestamps in the objects (the
/// nodes' and the node controller's clocks), never later than the listing.
fn one_shot_observed(state: &ClusterState, listed_at: Timestamp, now: Timestamp) -> Observed {
    let mut observed = state.observe(now, Vec::new(), Default::default());
    for node in &mut observed.nodes {
        let obs = &mut node.observation;
        if obs.lease_seen.is_some_and(|seen| seen <= listed_at) {
            obs.lease_seen = obs.lease_renewed.map(|t| t.min(listed_at));
            obs.seen_from_stamps = true;
        }
        if obs.not_ready_seen.is_some_and(|seen| seen <= listed_at)
            && let Some(transition) = obs.ready_transition
        {
            obs.not_ready_seen = Some(transition.min(listed_at));
            obs.not_ready_from_stamp = true;
        }
    }
    observed.watch_synced_at = Some(Timestamp::MIN);
    observed.suspended = None;
    observed
}

/// What this run could and could not see, said plainly.
fn evidence_note(observe: SignedDuration) -> String {
    format!(
        "Evidence: kubelet Leases watched for {}; a renewal seen meanwhile is timed by this \
         machine's clock. Older evidence is dated by the timestamps in the objects (the nodes' \
         own clocks), which the running operator never does: it times everything from when it \
         saw it change, and trusts nothing older than its own start. Rate limits and pods already \
         force-deleted (Enforce) come from each policy's status.recentActions (its last 20 \
         records), where the operator remembers every action since it started; in DryRun every \
         would-be action is shown, also those already recorded.",
        crate::core::format_duration(observe)
    )
}

fn to_json(p: &PolicyPlan, now: Timestamp, note: &str) -> serde_json::Value {
    let name = p.policy.name_any();
    let mode = p.policy.spec.mode.as_str();
    let plan = match &p.outcome {
        Err(reason) => {
            return json!({ "policy": name, "mode": mode, "valid": false, "invalidReason": reason });
        }
        Ok(plan) => plan,
    };
    let actions: Vec<_> = plan
        .actions
        .iter()
        .map(|action| match action {
            Action::ForceDelete(fd) => json!({
                "action": "ForceDelete", "namespace": fd.namespace, "pod": fd.name, "uid": fd.uid,
                "node": fd.node, "reason": fd.reason, "dueSince": fd.threshold.to_string(),
            }),
            Action::Node(na) => json!({
                "action": action.kind().as_str(), "node": na.node, "reason": na.reason,
                "dueSince": na.threshold.to_string(),
            }),
        })
        .collect();
    let waiting: Vec<_> = plan
        .decisions
        .iter()
        .filter_map(|d| match &d.verdict {
            Verdict::Eligible => None,
            Verdict::NotEligible(why) => Some(json!({
                "namespace": d.namespace, "pod": d.name, "node": d.node,
                "code": why.code(), "reason": why.to_string(),
            })),
        })
        .collect();
    let nodes: Vec<_> = plan
        .nodes
        .iter()
        .filter(|n| n.state.as_str() != "Healthy")
        .map(|n| {
            json!({
                "node": n.name, "state": n.state.as_str(), "why": n.why,
                "fencedBy": n.fenced_by.map(|f| f.describe()),
                "deadAt": n.dead_at.map(|t| t.to_string()),
            })
        })
        .collect();
    json!({
        "policy": name,
        "mode": mode,
        "paused": p.policy.spec.paused,
        "valid": true,
        "evaluatedAt": now.to_string(),
        "evidence": note,
        "circuit": { "open": plan.circuit.open, "unhealthy": plan.circuit.unhealthy,
                     "limit": plan.circuit.limit, "message": plan.circuit.message() },
        "counts": { "matchedNodes": plan.counts.matched_nodes, "unhealthyNodes": plan.counts.unhealthy_nodes,
                    "deadNodes": plan.counts.dead_nodes, "stuckPods": plan.counts.stuck_pods },
        "actions": actions,
        "notActing": waiting,
        "unhealthyNodes": nodes,
        "nextDeadline": plan.next_deadline.map(|t| t.to_string()),
    })
}

/// Blocked Recreate rollouts and StatefulSets, whatever the policies say.
fn print_blocked(blocked: &[crate::core::rollouts::BlockedRollout]) {
    if blocked.is_empty() {
        return;
    }
    println!();
    println!("Blocked rollouts:");
    let mut t = Table::new(["WORKLOAD", "BLOCKING POD", "NODE", "CAUSE"]);
    for b in blocked {
        for p in &b.pods {
            t.row([
                b.workload.to_string(),
                p.name.clone(),
                p.node.clone(),
                p.cause.describe().to_string(),
            ]);
        }
    }
    t.print("  ");
}

fn print_tables(plans: &[PolicyPlan], now: Timestamp) {
    if plans.is_empty() {
        println!("No RemediationPolicy found: nothing would be done.");
        return;
    }
    for (i, p) in plans.iter().enumerate() {
        if i > 0 {
            println!();
        }
        let name = p.policy.name_any();
        let mode = p.policy.spec.mode.as_str();
        match &p.outcome {
            Err(reason) => println!("Policy {name} ({mode}): INVALID, not acted on: {reason}"),
            Ok(plan) => print_plan(p, plan, now),
        }
    }
}

/// One valid policy's plan: summary, unhealthy nodes, actions, pods left alone.
fn print_plan(p: &PolicyPlan, plan: &Plan, now: Timestamp) {
    let (name, mode) = (p.policy.name_any(), p.policy.spec.mode);
    let paused = if p.policy.spec.paused { ", paused" } else { "" };
    let c = &plan.counts;
    println!(
        "Policy {name} ({}{paused}): {} nodes matched, {} unhealthy, {} dead; {} pods stuck Terminating",
        mode.as_str(),
        c.matched_nodes,
        c.unhealthy_nodes,
        c.dead_nodes,
        c.stuck_pods
    );
    let circuit = if plan.circuit.open { "OPEN" } else { "closed" };
    println!("  circuit {circuit}: {}", plan.circuit.message());

    let mut t = Table::new(["NODE", "STATE", "FENCED BY", "WHY"]);
    for n in plan.nodes.iter().filter(|n| n.state != NodeState::Healthy) {
        let fenced = n.fenced_by.map(|f| f.describe().to_string()).unwrap_or_else(|| "-".into());
        t.row([n.name.clone(), n.state.as_str().to_string(), fenced, n.why.clone()]);
    }
    t.print_if_any("  ");

    let verb = if mode == Mode::DryRun { "WOULD (DryRun)" } else { "WILL" };
    if plan.actions.is_empty() {
        println!("  no action now");
    }
    let mut t = Table::new(["ACTION", "POD", "NODE", "DUE FOR", "REASON"]);
    for action in &plan.actions {
        let (pod, node) = match action {
            Action::ForceDelete(fd) => (format!("{}/{}", fd.namespace, fd.name), fd.node.clone()),
            Action::Node(na) => ("-".to_string(), na.node.clone()),
        };
        t.row([
            format!("{verb} {}", action.kind().as_str()),
            pod,
            node,
            human(now.duration_since(action.threshold())),
            action.reason().to_string(),
        ]);
    }
    t.print_if_any("  ");

    let mut t = Table::new(["NOT ACTING ON", "NODE", "WHY NOT"]);
    for d in &plan.decisions {
        if let Verdict::NotEligible(why) = &d.verdict {
            t.row([format!("{}/{}", d.namespace, d.name), d.node.clone(), why.to_string()]);
        }
    }
    t.print_if_any("  ");
    if let Some(t) = plan.next_deadline {
        println!("  next decision change in {} ({t})", human(t.duration_since(now)));
    }
}
