//! `kube-remediator explain pod NAMESPACE/NAME`: why this pod is still Terminating (or still
//! there), what its node looks like, and what each policy will do about it and when. The one
//! command an on-call engineer runs at 3 a.m. Read-only: it reads the pod, takes the same
//! [`snapshot`] as `plan`, and picks out this pod.

use std::process::ExitCode;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;
use kube::api::Api;
use serde_json::{Value, json};

use super::snapshot::{self, PolicyPlan, Snapshot};
use super::table::human;
use super::{ConnectionArgs, StormArgs};
use crate::adapters::kubelet_warnings;
use crate::core::live_node_cause::{StuckCause, diagnose};
use crate::core::{Observed, Plan, Readiness, Verdict, parse_duration};
use crate::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to explain (only pods for now).
    #[arg(value_enum)]
    kind: Kind,

    /// The pod, as NAMESPACE/NAME, or NAME with --namespace.
    target: String,

    /// The pod's namespace, when TARGET is a bare name (default: `default`).
    #[arg(short, long)]
    namespace: Option<String>,

    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,

    /// Only policies matching this label selector.
    #[arg(long)]
    policy_selector: Option<String>,

    /// How long to watch the kubelet Leases first, to see whether the pod's kubelet still
    /// renews (by this machine's clock); `0s` judges from the listed timestamps alone.
    #[arg(long, default_value = "12s", value_parser = parse_observe)]
    observe: SignedDuration,

    #[command(flatten)]
    storm: StormArgs,
}

fn parse_observe(text: &str) -> std::result::Result<SignedDuration, String> {
    parse_duration(text).map_err(|e| format!("{e} (e.g. 12s, 1m)"))
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Kind {
    Pod,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

pub async fn run(conn: &ConnectionArgs, args: Args) -> Result<ExitCode> {
    let Kind::Pod = args.kind;
    let (namespace, name) = match args.target.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (args.namespace.clone().unwrap_or_else(|| "default".into()), args.target.clone()),
    };
    let client = conn.one_shot_client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pod = match pods.get_opt(&name).await {
        Ok(Some(pod)) => pod,
        Ok(None) => {
            eprintln!("error: pod {namespace}/{name} not found (gone already?)");
            return Ok(ExitCode::FAILURE);
        }
        Err(source) => return Err(Error::List { kind: "pods", source }),
    };
    let snap =
        snapshot::take(&client, args.policy_selector.as_deref(), args.observe, args.storm).await?;
    let mut doc = explain(&pod, &snap);
    // What the kubelet said about the pod; a failed read only leaves it out.
    let warnings = kubelet_warnings(&client, &namespace, &pod.uid().unwrap_or_default()).await;
    let warnings: Vec<String> = warnings.unwrap_or_default().into_iter().take(3).collect();
    doc["kubeletWarnings"] = json!(warnings);
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default()),
        Output::Text => print_text(&doc, &snap.note),
    }
    Ok(ExitCode::SUCCESS)
}

/// Everything said about the pod, as a JSON document (the text output prints the same).
fn explain(pod: &Pod, snap: &Snapshot) -> Value {
    let now = snap.now;
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let uid = pod.uid().unwrap_or_default();
    let deletion = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0);
    let terminating = deletion.map(|t| {
        let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
        json!({
            "deletionTimestamp": t.to_string(),
            "gracePeriodSeconds": grace,
            "pastGraceFor": (t <= now).then(|| human(now.duration_since(t))),
            "graceEndsIn": (t > now).then(|| human(t.duration_since(now))),
        })
    });
    let containers: Vec<Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(container)
        .collect();
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| {
            json!({ "status": c.status, "reason": c.reason, "since": c.last_transition_time.as_ref().map(|t| t.0.to_string()) })
        });
    json!({
        "pod": {
            "namespace": pod.namespace().unwrap_or_default(), "name": pod.name_any(), "uid": uid,
            "node": node, "phase": pod.status.as_ref().and_then(|s| s.phase.clone()),
            "finalizers": pod.metadata.finalizers.clone().unwrap_or_default(),
            "containers": containers, "ready": ready,
        },
        "terminating": terminating,
        "node": node_facts(&snap.observed, &node),
        "diagnosis": diagnosis(pod, &snap.observed, &node, now),
        "policies": snap.plans.iter().map(|p| policy_view(p, &uid, &node, deletion.is_some())).collect::<Vec<_>>(),
    })
}

fn container(c: &ContainerStatus) -> Value {
    let state = c.state.as_ref();
    let (state, detail) = match state {
        Some(s) if s.running.is_some() => ("running", None),
        Some(s) if s.terminated.is_some() => {
            let t = s.terminated.as_ref().map(|t| format!("exit code {}", t.exit_code));
            ("terminated", t)
        }
        Some(s) if s.waiting.is_some() => {
            ("waiting", s.waiting.as_ref().and_then(|w| w.reason.clone()))
        }
        _ => ("unknown", None),
    };
    json!({ "name": c.name, "state": state, "detail": detail, "ready": c.ready })
}

/// The node as the operator sees it: Ready, the Lease renewal seen, taints.
fn node_facts(observed: &Observed, node: &str) -> Value {
    let Some(view) = observed.nodes.iter().find(|n| &*n.observation.name == node) else {
        return json!({ "name": node, "exists": false });
    };
    let obs = &view.observation;
    json!({
        "name": node, "exists": !view.deleted, "ready": obs.readiness.as_str(),
        "leaseRenewTime": obs.lease_renewed.get().map(|t| t.to_string()),
        "unschedulable": obs.unschedulable, "taints": obs.taints,
        "maintenance": view.control.rare.lifecycle.maintenance,
        "maintenancePlanned": view.control.rare.lifecycle.maintenance_planned,
        "gracefulShutdown": view.control.rare.lifecycle.shutting_down,
        "managedBy": view.control.managed_by.as_ref().map(|m| m.to_string()),
        "volumesInUse": obs.volumes_in_use,
    })
}

/// Why a Terminating pod on a Ready node is still there (field incident 3); `null` otherwise.
fn diagnosis(pod: &Pod, observed: &Observed, node: &str, now: Timestamp) -> Value {
    let watched = crate::adapters::WatchedPod::from(pod);
    let Some(record) = crate::adapters::pod_record(&watched) else {
        return ready_on_dead_node(&watched, observed, node);
    };
    if let Some(since) = record.view.stale_ready_since.get() {
        return json!({ "cause": "StaleReadiness", "summary": format!(
            "Ready=False since {since} although every container is ready: the node lifecycle \
             controller marked it not Ready when its node went Unknown, and its kubelet never \
             resent the status (kubernetes/kubernetes#80968); it is out of its Services' endpoints"
        ) });
    }
    if let Some(reason) = &record.view.shutdown_reason {
        return json!({ "cause": "FailedByShutdown", "summary": format!(
            "Failed with reason {reason}: a graceful shutdown of its node ended it, and nothing \
             deletes it but PodGC's terminated-pod-gc-threshold (kubernetes/kubernetes#113278); \
             a policy with failedByShutdown enabled deletes it deleteAfter after seeing it so"
        ) });
    }
    let Some(view) = observed.nodes.iter().find(|n| &*n.observation.name == node) else {
        return json!({ "summary": format!("its node {node} is gone: only a force delete removes the pod") });
    };
    let past_grace = record.view.deletion_timestamp.get().is_some_and(|t| t <= now);
    if view.observation.readiness != Readiness::Ready {
        return json!({ "summary": format!(
            "its node {node} is not Ready ({}): no kubelet confirms the deletion; the policies below say when the node counts as dead",
            view.observation.readiness.as_str()
        ) });
    }
    if !past_grace {
        return json!({ "summary": "its grace period is still running: the kubelet is shutting it down" });
    }
    let cause: StuckCause = diagnose(&record.view, &view.observation);
    json!({ "cause": cause.code(), "summary": cause.detail() })
}

/// A pod Ready=True on a node that is not Ready: what the node lifecycle controller left;
/// `null` otherwise.
fn ready_on_dead_node(
    watched: &crate::adapters::WatchedPod,
    observed: &Observed,
    node: &str,
) -> Value {
    let Some(record) = crate::adapters::ready_pod_record(watched) else { return Value::Null };
    let Some(view) = observed.nodes.iter().find(|n| &*n.observation.name == node) else {
        return Value::Null;
    };
    if view.observation.readiness == Readiness::Ready {
        return Value::Null;
    }
    let since = record.view.ready_since.get().map(|t| t.to_string()).unwrap_or_default();
    json!({ "cause": "ReadyOnDeadNode", "summary": format!(
        "Ready=True since {since} while its node {node} is not Ready ({}): the node lifecycle \
         controller did not mark it not Ready, so its Services still send it traffic \
         (kubernetes/kubernetes#112733); the policies below say whether the node is dead",
        view.observation.readiness.as_str()
    ) })
}

/// What one policy does about the pod.
fn policy_view(p: &PolicyPlan, uid: &str, node: &str, terminating: bool) -> Value {
    let name = p.policy.name_any();
    let mode = p.policy.spec.mode.as_str();
    let plan: &Plan = match &p.outcome {
        Ok(plan) => plan,
        Err(reason) => {
            return json!({ "policy": name, "mode": mode, "covers": false, "says": format!("invalid spec, not acted on: {reason}") });
        }
    };
    let node_view = plan.nodes.iter().find(|n| &*n.name == node);
    let node_state = node_view.map(|n| json!({ "state": n.state.as_str(), "why": n.why }));
    let left_alone = node_view.and_then(|n| {
        n.hold.as_ref().map(|h| json!({ "reason": h.code(), "message": h.describe(&n.name) }))
    });
    let action = plan.actions.iter().find(|a| a.pod().is_some_and(|pod| pod.uid == uid));
    let verb = if mode == "DryRun" { "WOULD (DryRun)" } else { "WILL" };
    let decision = plan.decisions.iter().find(|d| d.uid == uid);
    let (covers, says, code) = match (action, decision) {
        (Some(a), _) => {
            (true, format!("{verb} {} now: {}", a.kind().as_str(), a.reason()), "Act".to_string())
        }
        (None, Some(d)) => match &d.verdict {
            Verdict::NotEligible(why) => (true, why.to_string(), why.code().to_string()),
            Verdict::Eligible => (true, "eligible; waiting for a guard".into(), "Eligible".into()),
        },
        (None, None) if let Some(r) = plan.ready_on_dead.iter().find(|r| r.uid == uid) => {
            let marking = if p.policy.spec.ready_on_dead_node.mark_not_ready {
                "marked not Ready once by this policy (its record says when)"
            } else {
                "reported only: readyOnDeadNode.markNotReady is off"
            };
            (true, format!("{}; {marking}", r.note), "ReadyOnDeadNode".to_string())
        }
        (None, None) if node_view.is_none() => (
            false,
            format!("its node {node} is not selected by nodeSelector"),
            "NotSelected".into(),
        ),
        (None, None) if !terminating => (
            false,
            "the pod is not Terminating: nothing to release".into(),
            "NotTerminating".into(),
        ),
        (None, None) => (false, "no decision about this pod".into(), "None".into()),
    };
    let circuit = plan.storm.holds().then(|| plan.storm.message());
    json!({
        "policy": name, "mode": mode, "covers": covers, "says": says, "code": code,
        "node": node_state, "nodeLeftAlone": left_alone, "circuit": circuit,
        "nextChange": plan.next_deadline.map(|t| t.to_string()),
    })
}

fn print_text(doc: &Value, note: &str) {
    let s = |v: &Value| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string());
    let pod = &doc["pod"];
    println!(
        "pod {}/{} (uid {}) on node {}",
        s(&pod["namespace"]),
        s(&pod["name"]),
        s(&pod["uid"]),
        s(&pod["node"])
    );
    match &doc["terminating"] {
        Value::Null => println!("  not Terminating (phase {})", s(&pod["phase"])),
        t => {
            let when = match (&t["pastGraceFor"], &t["graceEndsIn"]) {
                (Value::String(past), _) => format!("grace period over {past} ago"),
                (_, Value::String(left)) => format!("grace period ends in {left}"),
                _ => String::new(),
            };
            println!(
                "  Terminating: deletionTimestamp {} (grace {}s), {when}",
                s(&t["deletionTimestamp"]),
                t["gracePeriodSeconds"]
            );
        }
    }
    if let Some(finalizers) = pod["finalizers"].as_array().filter(|f| !f.is_empty()) {
        let names: Vec<String> = finalizers.iter().map(s).collect();
        println!("  finalizers: {}", names.join(", "));
    }
    for c in pod["containers"].as_array().into_iter().flatten() {
        let detail = c["detail"].as_str().map(|d| format!(" ({d})")).unwrap_or_default();
        println!("  container {}: {}{detail}, ready {}", s(&c["name"]), s(&c["state"]), c["ready"]);
    }
    if !pod["ready"].is_null() {
        let r = &pod["ready"];
        let reason = r["reason"].as_str().map(|x| format!("reason {x}, ")).unwrap_or_default();
        println!("  condition Ready={} ({reason}since {})", s(&r["status"]), s(&r["since"]));
    }
    let n = &doc["node"];
    if n["exists"] == json!(false) {
        println!("node {}: gone", s(&n["name"]));
    } else {
        let lease = n["leaseRenewTime"].as_str().unwrap_or("none (no Lease)");
        println!("node {}: {}, Lease renewTime {lease}", s(&n["name"]), s(&n["ready"]));
    }
    for warning in doc["kubeletWarnings"].as_array().into_iter().flatten() {
        println!("  kubelet warned: {}", s(warning));
    }
    if let Some(summary) = doc["diagnosis"]["summary"].as_str() {
        match doc["diagnosis"]["cause"].as_str() {
            Some(cause) => println!("diagnosis ({cause}): {summary}"),
            None => println!("diagnosis: {summary}"),
        }
    }
    for p in doc["policies"].as_array().into_iter().flatten() {
        println!("policy {} ({}): {}", s(&p["policy"]), s(&p["mode"]), s(&p["says"]));
        if let Some(node) = p["node"].as_object() {
            let (state, why) = (&node["state"], &node["why"]);
            println!("  node by this policy: {} ({})", s(state), s(why));
        }
        if let Some(reason) = p["nodeLeftAlone"]["reason"].as_str() {
            println!("  node left alone ({reason}): {}", s(&p["nodeLeftAlone"]["message"]));
        }
        if let Some(circuit) = p["circuit"].as_str() {
            println!("  circuit open: {circuit}");
        }
        if let Some(next) = p["nextChange"].as_str() {
            println!("  next change of its decisions at {next}");
        }
    }
    if doc["policies"].as_array().is_none_or(|p| p.is_empty()) {
        println!("no RemediationPolicy: nothing acts on this pod (kubectl get rp)");
    }
    println!("\n{note}");
}
