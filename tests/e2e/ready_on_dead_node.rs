//! Pods left Ready=True on a dead node (kubernetes/kubernetes#112733, #125618, #135205), the
//! mirror image of field incident 2.
//!
//! The node lifecycle controller marks a node's pods not Ready only when it sees the node's
//! Ready condition go from True to something else itself. The test plays three kubelets
//! (`add_live_node_without_kubelet`) and reproduces three orders of events on the
//! production-like control plane ([`prod_e2e!`]: kube-controller-manager as users run it):
//! - (a) the kubelet posts NodeReady=False ("container runtime is down"), then goes silent:
//!   the controller sees False become Unknown, never True become something else: its pod stays
//!   Ready=True;
//! - (b) the kubelet goes silent: the controller marks the node Unknown and its pod not Ready
//!   (upstream handles it);
//! - (c) the kubelet goes silent, the controller marks its pod not Ready, then a pod status the
//!   kubelet sent before it died lands (Ready=True): nothing marks it again, it stays Ready=True.
//!
//! With `readyOnDeadNode.markNotReady` (`rd-mark-not-ready`), orders (a) and (c) again: in
//! Enforce the operator marks the pods not Ready and their Service's EndpointSlice drops them
//! (its endpoints not ready), timed from the node's death by our evidence; in DryRun (a second
//! policy over another pod of the same nodes) nothing is written, the `Would…` Event says what
//! would be.
//!
//! A dead node with more such pods than a policy's budget of Events about pods
//! (`rd-report-budget`): the first pods get their Event, the rest are counted in one Event on
//! the policy, and the gauge still counts every one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube_remediator::core::REPORT_EVENTS_BURST;
use libtest_mimic::Trial;
use serde_json::json;

use crate::fixtures::renewed_since;
use crate::prod_e2e;
use crate::support::cluster::Cluster;
use crate::support::env::ZONE_LABEL;
use crate::support::operator::Operator;
use crate::support::{TestEnv, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("rd-orders-reported", pods_left_ready_on_dead_nodes_are_reported),
        prod_e2e!("rd-mark-not-ready", pods_left_ready_on_dead_nodes_are_marked_not_ready),
        prod_e2e!("rd-report-budget", reports_beyond_the_event_budget_are_counted_on_the_policy),
    ]
}

const NOT_READY_FOR: i64 = 10;
const LEASE_STALE_FOR: i64 = 40;

/// The kubelet of `node` posts NodeReady=False ("container runtime is down").
async fn post_not_ready(env: &TestEnv, node: &str) -> Result<()> {
    let now = Timestamp::now().to_string();
    let not_ready = json!({ "status": { "conditions": [{
        "type": "Ready", "status": "False", "reason": "KubeletNotReady",
        "message": "container runtime is down", "lastHeartbeatTime": now, "lastTransitionTime": now,
    }] } });
    env.nodes().patch_status(node, &PatchParams::default(), &Patch::Strategic(&not_ready)).await?;
    Ok(())
}

fn ready(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

/// The three orders; a policy reports `pa` and `pc` (Event, gauge, status), never `pb`, once
/// their nodes are dead by its evidence.
async fn pods_left_ready_on_dead_nodes_are_reported(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (a, kubelet_a) = env.add_live_node_without_kubelet("a").await?;
    let (b, kubelet_b) = env.add_live_node_without_kubelet("b").await?;
    let (c, kubelet_c) = env.add_live_node_without_kubelet("c").await?;
    for (pod, node) in [("pa", &a), ("pb", &b), ("pc", &c)] {
        env.create_bound_pod(pod, node).await?;
        env.write_pod_status(pod, true).await?;
    }
    env.create_policy(dry_run_in_zone(env)).await?;
    let op = Operator::start(cluster, env).await?;
    let started = Timestamp::now();
    for node in [&a, &b, &c] {
        renewed_since(env, node, started).await?;
    }

    // (a) NotReady posted by the kubelet, then silence.
    drop(kubelet_a);
    post_not_ready(env, &a).await?;
    // (b) silence.
    drop(kubelet_b);
    // (c) silence; once the controller marked the pod not Ready, the kubelet's last pod status
    // lands.
    drop(kubelet_c);
    wait_for("pc marked not Ready", Duration::from_secs(120), || async {
        Ok((ready(&env.pods().get("pc").await?).as_deref() == Some("False")).then_some(()))
    })
    .await?;
    env.write_pod_status("pc", true).await?;
    for node in [&a, &b, &c] {
        env.wait_node_ready(node, "Unknown").await?;
    }
    wait_for("pb marked not Ready", Duration::from_secs(60), || async {
        Ok((ready(&env.pods().get("pb").await?).as_deref() == Some("False")).then_some(()))
    })
    .await?;
    // The upstream gap: pa and pc Ready on nodes the controller itself marked Unknown.
    for pod in ["pa", "pc"] {
        let state = ready(&env.pods().get(pod).await?);
        ensure!(state.as_deref() == Some("True"), "{pod} is Ready={state:?}: no upstream gap");
    }

    // Reported once their nodes are dead by the policy's evidence.
    let reported = env
        .wait_policy("pa and pc reported", Duration::from_secs(150), |s| {
            let names: Vec<&str> =
                s.ready_on_dead_node_pods.iter().map(|p| p.name.as_str()).collect();
            (names.contains(&"pa") && names.contains(&"pc"))
                .then(|| (Timestamp::now(), s.ready_on_dead_node_pods.clone()))
        })
        .await?;
    let (seen_at, pods) = reported;
    ensure!(pods.iter().all(|p| p.name != "pb"), "pb reported: {pods:?}");
    let dead_since = pods
        .iter()
        .filter_map(|p| p.node_dead_since.as_ref().map(|t| t.0))
        .max()
        .context("no nodeDeadSince in the report")?;
    let gauge =
        op.metric("kube_remediator_ready_on_dead_node_pods", &[("policy", &env.name)]).await?;
    ensure!(gauge == Some(2.0), "ready_on_dead_node_pods = {gauge:?}");
    for pod in ["pa", "pc"] {
        let events = env.events_about("Pod", pod, "ReadyOnDeadNode").await?;
        ensure!(!events.is_empty(), "no ReadyOnDeadNode Event on {pod}");
    }
    ensure!(env.events_about("Pod", "pb", "ReadyOnDeadNode").await?.is_empty(), "pb got an Event");
    eprintln!(
        "[{}] upstream left pa (NotReady posted, then silent) and pc (late pod status) Ready=True \
         and marked pb (silent) not Ready; reported at most {:.1}s after the later node was dead \
         by our evidence ({dead_since})",
        env.name,
        seen_at.duration_since(dead_since).as_secs_f64()
    );
    Ok(())
}

/// Orders (a) and (c) under a policy that marks such pods not Ready (pods `ea` and `ec`, in
/// Enforce) and one that only records it (`da` and `dc`, DryRun, on the same nodes): the first
/// two are marked not Ready (our reason) and their EndpointSlice endpoints turn not ready; the
/// other two stay Ready=True with a `WouldMarkPodNotReady` Event and no write.
async fn pods_left_ready_on_dead_nodes_are_marked_not_ready(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    let (a, kubelet_a) = env.add_live_node_without_kubelet("a").await?;
    let (c, kubelet_c) = env.add_live_node_without_kubelet("c").await?;
    let pods = [
        ("ea", &a, "10.77.0.1"),
        ("da", &a, "10.77.0.2"),
        ("ec", &c, "10.77.0.3"),
        ("dc", &c, "10.77.0.4"),
    ];
    for (pod, node, ip) in pods {
        env.create_bound_pod(pod, node).await?;
        env.write_pod_status(pod, true).await?;
        let address = json!({ "status": { "podIP": ip, "podIPs": [{ "ip": ip }] } });
        env.pods().patch_status(pod, &PatchParams::default(), &Patch::Merge(&address)).await?;
    }
    // Both enforced pods behind one Service: the EndpointSlice controller lists them ready.
    let service: Service = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "selector": { "rd": "enforced" }, "ports": [{ "port": 80 }] },
    }))?;
    for pod in ["ea", "ec"] {
        let label = json!({ "metadata": { "labels": { "rd": "enforced" } } });
        env.pods().patch(pod, &PatchParams::default(), &Patch::Merge(&label)).await?;
    }
    env.api::<Service>().create(&PostParams::default(), &service).await?;
    let slices = EndpointHistory::watch(env.client.clone(), &env.namespace, "web");
    wait_for("both endpoints ready", Duration::from_secs(60), || async {
        let ready = |p: &str| slices.ready(p) == Some(true);
        Ok((ready("ea") && ready("ec")).then_some(()))
    })
    .await?;

    let spec = |mode: &str, pods: [&str; 2]| {
        json!({
            "mode": mode,
            "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
            "podSelector": { "matchExpressions": [{ "key": "app", "operator": "In", "values": pods }] },
            "deadNode": {
                "notReadyFor": format!("{NOT_READY_FOR}s"),
                "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
            },
            "readyOnDeadNode": { "markNotReady": true },
            "safety": { "maxUnhealthyNodes": 2 },
        })
    };
    env.create_policy(spec("Enforce", ["ea", "ec"])).await?;
    let dry = format!("{}-dry", env.name);
    env.create_named_policy(&dry, spec("DryRun", ["da", "dc"])).await?;
    let op = Operator::start(cluster, env).await?;
    let started = Timestamp::now();
    for node in [&a, &c] {
        renewed_since(env, node, started).await?;
    }

    // (a) NotReady posted by the kubelet, then silence.
    drop(kubelet_a);
    post_not_ready(env, &a).await?;
    // (c) silence; once the controller marked the pods not Ready, the kubelet's last pod
    // statuses land.
    drop(kubelet_c);
    for pod in ["ec", "dc"] {
        wait_for(&format!("{pod} marked not Ready upstream"), Duration::from_secs(120), || async {
            Ok((ready(&env.pods().get(pod).await?).as_deref() == Some("False")).then_some(()))
        })
        .await?;
        env.write_pod_status(pod, true).await?;
    }

    // Enforce: each marked not Ready by us, once, and dropped by its EndpointSlice.
    for pod in ["ea", "ec"] {
        wait_for(&format!("{pod} marked not Ready by us"), Duration::from_secs(150), || async {
            let p = env.pods().get(pod).await?;
            let ours = p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("NodeDeadByKubeRemediator")
                })
            });
            Ok(ours.then_some(()))
        })
        .await?;
        wait_for(&format!("{pod}'s endpoint not ready"), Duration::from_secs(10), || async {
            Ok((slices.ready(pod) == Some(false)).then_some(()))
        })
        .await?;
        // An action's Event is published once its plan's last action is answered: it may
        // come after the pod shows the marking.
        wait_for(
            &format!("a MarkedPodNotReady Event on {pod}"),
            Duration::from_secs(20),
            || async move {
                let events = env.events_about("Pod", pod, "MarkedPodNotReady").await?;
                Ok((!events.is_empty()).then_some(()))
            },
        )
        .await?;
    }
    // From our status write (the API server's clock) to the EndpointSlice showing the endpoint
    // not ready (seen by the test's watch, on the same machine's clock).
    let mut dropped_after = Vec::new();
    for pod in ["ea", "ec"] {
        let writes = cluster.operator_pod_writes(&env.namespace, Some(pod))?;
        let [status] = writes.as_slice() else {
            bail!("{pod}: the operator's writes are {writes:?}, want one status patch");
        };
        ensure!(
            status.verb == "patch" && status.subresource.as_deref() == Some("status"),
            "{pod}: {status:?}"
        );
        let sent = status.received.context("no audit timestamp")?;
        let dropped = slices.not_ready_since(pod).context("no not-ready endpoint seen")?;
        dropped_after.push(dropped.duration_since(sent).as_secs_f64());
    }
    let labels =
        [("policy", env.name.as_str()), ("action", "MarkPodNotReady"), ("mode", "Enforce")];
    let count = op.metric("kube_remediator_action_delay_seconds_count", &labels).await?;
    let sum = op.metric("kube_remediator_action_delay_seconds_sum", &labels).await?;
    ensure!(count == Some(2.0), "MarkPodNotReady delays counted: {count:?}");
    let delay = sum.unwrap_or_default() / 2.0;
    let slowest = dropped_after.iter().copied().fold(0.0, f64::max);
    eprintln!(
        "[{}] marked not Ready {delay:.3}s (mean) after the node was dead by our evidence; the \
         EndpointSlice showed the endpoint not ready {slowest:.3}s after our write at most: \
         {:.2}s from death to no traffic",
        env.name,
        delay + slowest
    );
    ensure!(delay + slowest <= 2.0, "endpoints dropped {:.2}s after death", delay + slowest);

    // DryRun: recorded, nothing written, still Ready.
    for pod in ["da", "dc"] {
        let events = wait_for(
            &format!("WouldMarkPodNotReady on {pod}"),
            Duration::from_secs(60),
            || async {
                let events = env.events_about("Pod", pod, "WouldMarkPodNotReady").await?;
                Ok((!events.is_empty()).then_some(events))
            },
        )
        .await?;
        ensure!(events.len() == 1, "{pod}: {} WouldMarkPodNotReady Events", events.len());
        let state = ready(&env.pods().get(pod).await?);
        ensure!(state.as_deref() == Some("True"), "{pod} is Ready={state:?} under DryRun");
        let writes = cluster.operator_pod_writes(&env.namespace, Some(pod))?;
        ensure!(writes.is_empty(), "{pod}: the operator wrote {writes:?} in DryRun");
    }
    Ok(())
}

/// A pod's endpoint: its latest `ready` condition, and since when it has been false.
type Endpoint = (Option<bool>, Option<Timestamp>);

/// The endpoints of one Service's EndpointSlices as one watch delivers them: for each pod, its
/// latest `ready` condition and since when (the test's clock) it has been false.
struct EndpointHistory {
    seen: Arc<Mutex<HashMap<String, Endpoint>>>,
    task: tokio::task::JoinHandle<()>,
}

impl EndpointHistory {
    fn watch(client: kube::Client, namespace: &str, service: &str) -> EndpointHistory {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let seen: Arc<Mutex<HashMap<String, Endpoint>>> = Arc::default();
        let api: Api<EndpointSlice> = Api::namespaced(client, namespace);
        let config =
            watcher::Config::default().labels(&format!("kubernetes.io/service-name={service}"));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(slice) | watcher::Event::InitApply(slice)) = event
                else {
                    continue;
                };
                let at = Timestamp::now();
                let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                for endpoint in slice.endpoints {
                    let Some(pod) = endpoint.target_ref.and_then(|r| r.name) else { continue };
                    let ready = endpoint.conditions.and_then(|c| c.ready);
                    let entry = log.entry(pod).or_insert((None, None));
                    if ready == Some(false) && entry.0 != Some(false) {
                        entry.1 = Some(at);
                    }
                    entry.0 = ready;
                }
            }
        });
        EndpointHistory { seen, task }
    }

    /// The pod's endpoint's latest `ready` condition.
    fn ready(&self, pod: &str) -> Option<bool> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).get(pod).and_then(|e| e.0)
    }

    /// When the test saw the pod's endpoint turn not ready.
    fn not_ready_since(&self, pod: &str) -> Option<Timestamp> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).get(pod).and_then(|e| e.1)
    }
}

impl Drop for EndpointHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// More pods left Ready=True on one dead node (order (a)) than the report budget allows at
/// once: as many get a `ReadyOnDeadNode` Event as the budget allows, none twice, and the rest
/// are counted in `ReportsBeyondBudget` Events on the policy; the gauge counts every one.
async fn reports_beyond_the_event_budget_are_counted_on_the_policy(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    use futures::StreamExt;
    const OVER: usize = 20;
    let pods = REPORT_EVENTS_BURST as usize + OVER;
    let (a, kubelet_a) = env.add_live_node_without_kubelet("a").await?;
    let created: Vec<Result<()>> = futures::stream::iter(0..pods)
        .map(|i| {
            let a = &a;
            async move {
                let name = format!("p{i:03}");
                env.create_bound_pod(&name, a).await?;
                env.write_pod_status(&name, true).await
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    created.into_iter().collect::<Result<()>>()?;
    env.create_policy(dry_run_in_zone(env)).await?;
    let op = Operator::start(cluster, env).await?;
    renewed_since(env, &a, Timestamp::now()).await?;
    drop(kubelet_a);
    post_not_ready(env, &a).await?;

    // Every pod counted; the pods beyond the budget counted on the policy.
    let labels = [("policy", env.name.as_str())];
    wait_for("every pod counted", Duration::from_secs(150), || async {
        let gauge = op.metric("kube_remediator_ready_on_dead_node_pods", &labels).await?;
        Ok((gauge == Some(pods as f64)).then_some(()))
    })
    .await?;
    let beyond =
        wait_for("the pods beyond the budget counted", Duration::from_secs(30), || async {
            let events =
                env.events_about("RemediationPolicy", &env.name, "ReportsBeyondBudget").await?;
            let counted: usize = events.iter().map(|e| counted_beyond(e.note.as_deref())).sum();
            Ok((counted > 0).then_some(counted))
        })
        .await?;
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let mut given: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ReadyOnDeadNode"))
        .filter_map(|e| e.regarding.and_then(|r| r.name))
        .collect();
    let events_given = given.len();
    given.sort();
    given.dedup();
    ensure!(given.len() == events_given, "a pod given two ReadyOnDeadNode Events: {given:?}");
    ensure!(
        given.len() >= REPORT_EVENTS_BURST as usize,
        "{} pods given an Event: the budget allows {REPORT_EVENTS_BURST} at once",
        given.len()
    );
    ensure!(
        given.len() + beyond == pods,
        "{} pods given an Event and {beyond} counted beyond the budget, of {pods}",
        given.len()
    );
    eprintln!(
        "[{}] {pods} pods left Ready on a dead node: {} given an Event, {beyond} counted on the \
         policy",
        env.name,
        given.len()
    );
    Ok(())
}

/// The pods a `ReportsBeyondBudget` note counts ("N more pods to report ...").
fn counted_beyond(note: Option<&str>) -> usize {
    let Some(note) = note else { return 0 };
    let Some(at) = note.find(" more pods to report") else { return 0 };
    let number = note[..at].rsplit(' ').next().unwrap_or_default();
    number.parse().unwrap_or(0)
}

/// A DryRun policy for the test's zone, with the test's dead-node thresholds and room for its
/// three nodes to be unhealthy at once.
fn dry_run_in_zone(env: &TestEnv) -> serde_json::Value {
    json!({
        "mode": "DryRun",
        "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } },
        "deadNode": {
            "notReadyFor": format!("{NOT_READY_FOR}s"),
            "leaseStaleFor": format!("{LEASE_STALE_FOR}s"),
        },
        "safety": { "maxUnhealthyNodes": 3 },
    })
}
