//! `kube-remediator plan`: what every policy would do right now, like `terraform plan`.
//! One-shot and read-only: it takes a [`snapshot`] of the cluster (listed once, the kubelet
//! Leases watched for `--observe`), which runs the same planner as the operator, and prints the
//! decisions. It never writes anything. What a one-shot look cannot know it says in its output.

use std::process::ExitCode;

use jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use serde_json::json;

use super::snapshot::{self, PolicyPlan, Snapshot};
use super::table::{Table, human};
use super::{ConnectionArgs, StormArgs};
use crate::Result;
use crate::core::{NodeState, Plan, Verdict, nodes_left_alone, parse_duration};
use crate::crd::Mode;

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

    #[command(flatten)]
    storm: StormArgs,
}

fn parse_observe(text: &str) -> std::result::Result<SignedDuration, String> {
    parse_duration(text).map_err(|e| format!("{e} (e.g. 12s, 1m)"))
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Output {
    Table,
    Json,
}

pub async fn run(conn: &ConnectionArgs, args: Args) -> Result<ExitCode> {
    let client = conn.one_shot_client().await?;
    let Snapshot { plans, state, now, note, .. } =
        snapshot::take(&client, args.policy_selector.as_deref(), args.observe, args.storm).await?;
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
        .map(|action| {
            let mut shown = json!({
                "action": action.kind().as_str(), "node": action.node(), "reason": action.reason(),
                "dueSince": action.threshold().to_string(),
            });
            if let Some(pod) = action.pod() {
                shown["namespace"] = json!(pod.namespace);
                shown["pod"] = json!(pod.name);
                shown["uid"] = json!(pod.uid);
            }
            if let Some((key, names)) = action.act().shown() {
                shown[key] = json!(names);
            }
            shown
        })
        .collect();
    let stuck: Vec<_> = plan
        .stuck
        .iter()
        .map(|s| {
            json!({
                "namespace": s.namespace, "pod": s.name, "node": s.node,
                "cause": s.cause.code(), "detail": s.cause.detail(),
                "stuckSince": s.since.to_string(),
            })
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
                "node": &*n.name, "state": n.state.as_str(), "why": n.why,
                "fencedBy": n.fenced_by.map(|f| f.describe()),
                "deadAt": n.dead_at.get().map(|t| t.to_string()),
                "leftAlone": n.hold.as_ref().map(|h| json!({
                    "reason": h.code(), "message": h.describe(&n.name),
                })),
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
        "circuit": { "open": plan.storm.holds(), "state": plan.storm.memory.state,
                     "reason": plan.storm.reason(), "unhealthy": plan.circuit.unhealthy,
                     "limit": plan.circuit.limit, "clusterUnhealthy": plan.storm.cluster.unhealthy,
                     "clusterNodes": plan.storm.cluster.in_scope,
                     "clusterLimit": plan.storm.cluster.limit, "message": plan.storm.message() },
        "counts": { "matchedNodes": plan.counts.matched_nodes, "unhealthyNodes": plan.counts.unhealthy_nodes,
                    "deadNodes": plan.counts.dead_nodes, "stuckPods": plan.counts.stuck_pods },
        "actions": actions,
        "stuckOnLiveNodes": stuck,
        "staleReadyPods": plan.stale.iter().map(|s| json!({
            "namespace": s.namespace, "pod": s.name, "node": s.node,
            "readyFalseSince": s.ready_false_since.to_string(), "note": s.note,
        })).collect::<Vec<_>>(),
        "readyOnDeadNodePods": plan.ready_on_dead.iter().map(|r| json!({
            "namespace": r.namespace, "pod": r.name, "node": r.node,
            "readySince": r.ready_since.to_string(),
            "nodeDeadSince": r.node_dead_since.map(|t| t.to_string()), "note": r.note,
        })).collect::<Vec<_>>(),
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
        let workload =
            if b.recreate { format!("{} (Recreate)", b.workload) } else { b.workload.to_string() };
        for p in &b.pods {
            t.row([
                workload.clone(),
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
    let circuit = if plan.storm.holds() { "OPEN" } else { "closed" };
    println!("  circuit {circuit} ({}): {}", plan.storm.reason(), plan.storm.message());
    let cluster = &plan.storm.cluster;
    println!(
        "  cluster: {} of {} nodes unhealthy, limit {} (--max-unhealthy-nodes-in-cluster {})",
        cluster.unhealthy, cluster.in_scope, cluster.limit, cluster.max_unhealthy
    );

    let mut t = Table::new(["NODE", "STATE", "FENCED BY", "WHY"]);
    for n in plan.nodes.iter().filter(|n| n.state != NodeState::Healthy) {
        let fenced = n.fenced_by.map(|f| f.describe().to_string()).unwrap_or_else(|| "-".into());
        t.row([n.name.to_string(), n.state.as_str().to_string(), fenced, n.why.to_string()]);
    }
    t.print_if_any("  ");
    let mut t = Table::new(["NODE LEFT ALONE", "REASON", "WHY"]);
    for (n, hold) in nodes_left_alone(plan) {
        t.row([n.name.to_string(), hold.code().to_string(), hold.describe(&n.name)]);
    }
    t.print_if_any("  ");

    let verb = if mode == Mode::DryRun { "WOULD (DryRun)" } else { "WILL" };
    if plan.actions.is_empty() {
        println!("  no action now");
    }
    let mut t = Table::new(["ACTION", "POD", "NODE", "DUE FOR", "REASON"]);
    for action in &plan.actions {
        let pod = action.pod().map_or("-".to_string(), |p| format!("{}/{}", p.namespace, p.name));
        t.row([
            format!("{verb} {}", action.kind().as_str()),
            pod,
            action.node().to_string(),
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
    let mut t = Table::new(["LEFT READY=FALSE", "NODE", "SINCE", "WHAT"]);
    for s in &plan.stale {
        t.row([
            format!("{}/{}", s.namespace, s.name),
            s.node.clone(),
            s.ready_false_since.to_string(),
            s.note.clone(),
        ]);
    }
    t.print_if_any("  ");
    let mut t = Table::new(["LEFT READY=TRUE ON A DEAD NODE", "NODE", "READY SINCE", "WHAT"]);
    for r in &plan.ready_on_dead {
        t.row([
            format!("{}/{}", r.namespace, r.name),
            r.node.clone(),
            r.ready_since.to_string(),
            r.note.clone(),
        ]);
    }
    t.print_if_any("  ");
    let mut t = Table::new(["STUCK ON A LIVE NODE", "NODE", "CAUSE", "STUCK FOR", "EVIDENCE"]);
    for s in &plan.stuck {
        t.row([
            format!("{}/{}", s.namespace, s.name),
            s.node.clone(),
            s.cause.code().to_string(),
            human(now.duration_since(s.since)),
            s.cause.detail(),
        ]);
    }
    t.print_if_any("  ");
    if let Some(t) = plan.next_deadline {
        println!("  next decision change in {} ({t})", human(t.duration_since(now)));
    }
}
