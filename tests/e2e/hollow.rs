//! The incidents and the faults replayed against real kubelet code: kubemark's hollow kubelets
//! ([`crate::support::hollow`]) instead of kwok or a heartbeat the test plays. The `hk-*` trials
//! run on the production-like control plane (default node-monitor grace period, 50 s on 1.37,
//! which a kubelet reporting every 10 s needs; PodGC on; default tolerations, so the pods that
//! must be evicted carry short ones of their own), beside the node-action tests.
//!
//! - `hk-incident-1`: a Recreate Deployment and a StatefulSet on a hollow node that is
//!   SIGKILLed: the Deployment's pod is released once the node is dead and the rollout runs; the
//!   StatefulSet's pod is held until fencing evidence (the cloud provider's shutdown taint),
//!   then released, and its replacement runs.
//! - `hk-blip`: the kubelet SIGSTOPped past the node-monitor grace period and resumed: the node
//!   lifecycle controller marks its pods not Ready, the kubelet makes them Ready again by
//!   itself, and the stale-readiness rule (Evict) leaves them alone and says so on each pod (a
//!   Normal `RepairedByKubelet` Event: how long it waited and why).
//! - `hk-restart-and-node-deleted`: the kubelet restarted, then its Node deleted while it runs
//!   (the kubelet neither registers it again nor re-creates its Lease, which the garbage
//!   collector deleted with the Node; PodGC deletes its pods), then restarted again (the Node is
//!   back with a new UID): no operator write to the node or its pods (a policy that would
//!   release pods and cordon at once), and the node is alive again to the operator.
//! - `hk-long-stop`: the kubelet SIGSTOPped past `leaseStaleFor` with a Deployment's pod, a
//!   StatefulSet's pod and a pod with a ReadWriteOnce volume on it, then resumed: while it was
//!   away the Deployment's pod was released and the other two held (no fencing); once it is back
//!   the kubelet finishes them itself, and the operator writes nothing more.
//! - `hk-live-finish`: pods deleted on a live hollow node, which its kubelet finishes, under an
//!   eager policy (force delete on live nodes 10 s after the grace period): never touched.
//! - `hk-storm`: three hollow kubelets stopped together (a partition), each with a pod deleted
//!   while it is away: more unhealthy nodes than the policy's `maxUnhealthyNodes`, the circuit
//!   opens and nothing is released; when they come back, the kubelets finish the pods
//!   themselves.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use libtest_mimic::Trial;
use serde_json::json;

use crate::fixtures::{deployment, renewed_since, stateful_set, uid, until};
use crate::prod_e2e;
use crate::support::cluster::Cluster;
use crate::support::env::{HOSTNAME_LABEL, ZONE_LABEL, node_ready_status, pod_is_ready};
use crate::support::hollow::HollowKubelet;
use crate::support::operator::Operator;
use crate::support::{TestEnv, holds_for, wait_for};
use kube_remediator::crd::SHUTDOWN_TAINT;

pub fn trials() -> Vec<Trial> {
    vec![
        prod_e2e!("hk-incident-1", recreate_and_stateful_set_on_a_killed_hollow_node),
        prod_e2e!("hk-blip", a_blip_the_kubelet_repairs_itself_is_left_alone),
        prod_e2e!("hk-restart-and-node-deleted", a_restarted_kubelet_and_a_deleted_node_are_life),
        prod_e2e!("hk-long-stop", a_kubelet_stopped_past_lease_stale_for_then_resumed),
        prod_e2e!("hk-live-finish", a_pod_its_kubelet_finishes_is_never_touched),
        prod_e2e!("hk-storm", hollow_kubelets_stopped_together_open_the_circuit),
    ]
}

/// An Enforce policy that releases pods stuck Terminating on dead nodes at once (dead: 10 s not
/// Ready and 40 s without a Lease renewal), with at most 2 unhealthy nodes; `extra`'s fields
/// are added to it.
fn release_policy(extra: serde_json::Value) -> serde_json::Value {
    let mut spec = json!({
        "mode": "Enforce",
        "deadNode": { "notReadyFor": "10s", "leaseStaleFor": "40s" },
        "stuckTerminating": { "delayAfterGrace": "0s" },
        "safety": { "maxUnhealthyNodes": 2 },
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

/// NoExecute tolerations of `seconds` for an unreachable or not-ready node.
fn tolerations(seconds: i64) -> serde_json::Value {
    json!([
        { "key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds },
        { "key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds },
    ])
}

/// Waits up to `timeout` until the node's Ready condition has `status`.
async fn wait_node(env: &TestEnv, node: &str, status: &str, timeout: Duration) -> Result<()> {
    let nodes = env.nodes();
    wait_for(&format!("node {node} Ready={status}"), timeout, || {
        let nodes = nodes.clone();
        async move {
            let n = nodes.get_opt(node).await?;
            Ok(n.filter(|n| node_ready_status(n).as_deref() == Some(status)).map(|_| ()))
        }
    })
    .await
}

fn node_of(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default()
}

fn ready_condition(pod: &Pod) -> Option<String> {
    let conditions = pod.status.as_ref()?.conditions.as_ref()?;
    conditions.iter().find(|c| c.type_ == "Ready").map(|c| c.status.clone())
}

/// The pod's containers that the kubelet reported running.
fn running_containers(pod: &Pod) -> usize {
    let statuses = pod.status.as_ref().and_then(|s| s.container_statuses.as_ref());
    statuses
        .into_iter()
        .flatten()
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .count()
}

/// Runs the Deployment `d` and a StatefulSet `sts` of one pod (confined to the test's zone) on
/// the hollow node `node`, both tolerating its death 1 s; the healthy kwok node is cordoned
/// until both run. Returns their pods, Ready, with the hollow kubelet's running container.
async fn run_on_hollow_node(
    env: &TestEnv,
    node: &str,
    mut d: Deployment,
    sts: &str,
) -> Result<(Pod, Pod)> {
    let mut sts = stateful_set(sts, 1, json!({ ZONE_LABEL: env.zone }))?;
    for spec in [
        d.spec.as_mut().and_then(|s| s.template.spec.as_mut()),
        sts.spec.as_mut().and_then(|s| s.template.spec.as_mut()),
    ]
    .into_iter()
    .flatten()
    {
        spec.tolerations = Some(serde_json::from_value(tolerations(1))?);
    }
    let selector = |name: Option<&String>| format!("app={}", name.cloned().unwrap_or_default());
    let (d_app, sts_app) =
        (selector(d.metadata.name.as_ref()), selector(sts.metadata.name.as_ref()));
    env.set_unschedulable(&env.healthy_node, true).await?;
    env.api::<Deployment>().create(&PostParams::default(), &d).await?;
    env.api::<StatefulSet>().create(&PostParams::default(), &sts).await?;
    let from_d = env.wait_pods_ready(&d_app, 1).await?.remove(0);
    let from_sts = env.wait_pods_ready(&sts_app, 1).await?.remove(0);
    env.set_unschedulable(&env.healthy_node, false).await?;
    for pod in [&from_d, &from_sts] {
        ensure!(node_of(pod) == node, "{:?} is not on {node}", pod.metadata.name);
        ensure!(running_containers(pod) == 1, "the hollow kubelet reports no running container");
    }
    Ok((from_d, from_sts))
}

/// A bare pod `vol` on `node`, tolerating its death 1 s, with a ReadWriteOnce volume: a claim
/// `data` bound to a hostPath PersistentVolume `<test>-data` (the hollow kubelet's hostPath
/// plugin is a fake: nothing touches the machine's disk). Returns it Ready.
async fn pod_with_rwo_volume(env: &TestEnv, node: &str) -> Result<Pod> {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let pv_name = format!("{}-data", env.name);
    let pv: PersistentVolume = serde_json::from_value(json!({
        "metadata": { "name": pv_name },
        "spec": {
            "capacity": { "storage": "1Gi" },
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": { "path": format!("/kube-remediator-e2e/{pv_name}") },
            "claimRef": { "namespace": env.namespace, "name": "data" },
        },
    }))?;
    kube::Api::<PersistentVolume>::all(env.client.clone())
        .create(&PostParams::default(), &pv)
        .await?;
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": { "name": "data" },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": { "requests": { "storage": "1Gi" } },
        },
    }))?;
    env.api::<PersistentVolumeClaim>().create(&PostParams::default(), &pvc).await?;
    let mut pod = crate::fixtures::bare_pod("vol", node, json!({ "app": "vol" }), json!({}))?;
    if let Some(spec) = pod.spec.as_mut() {
        spec.tolerations = Some(serde_json::from_value(tolerations(1))?);
        spec.volumes = Some(serde_json::from_value(json!([
            { "name": "data", "persistentVolumeClaim": { "claimName": "data" } },
        ]))?);
        if let Some(c) = spec.containers.first_mut() {
            c.volume_mounts =
                Some(serde_json::from_value(json!([{ "name": "data", "mountPath": "/data" }]))?);
        }
    }
    env.pods().create(&PostParams::default(), &pod).await?;
    Ok(env.wait_pods_ready("app=vol", 1).await?.remove(0))
}

/// When the pod's first container was (last) started, as its kubelet reports it.
fn container_started(pod: &Pod) -> Option<Timestamp> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let running = statuses.first()?.state.as_ref()?.running.as_ref()?;
    running.started_at.as_ref().map(|t| t.0)
}

/// Prints what the hollow kubelet costs now: resident memory and CPU time since its start.
fn report_cost(env: &TestEnv, hollow: &HollowKubelet, started: Instant) {
    eprintln!(
        "[{}] hollow kubelet {}: RSS {} MiB, CPU {:.1}s over {:.0}s",
        env.name,
        hollow.name,
        hollow.rss_kib().map_or("?".into(), |k| format!("{:.1}", k as f64 / 1024.0)),
        hollow.cpu_time().unwrap_or_default().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// Field incident 1 with the kubelet's own code: the machine is SIGKILLed with a Recreate
/// Deployment's pod and a StatefulSet's pod running on it (tolerating its death 1 s).
async fn recreate_and_stateful_set_on_a_killed_hollow_node(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const NAME: &str = "[hk-incident-1]";
    let started = Instant::now();
    let mut hollow = HollowKubelet::start(cluster, env, "victim", &[]).await?;
    let victim = hollow.name.clone();
    env.create_policy(release_policy(json!({ "recreateRollouts": { "delayAfterGrace": "0s" } })))
        .await?;
    let _op = Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;
    let ready = Timestamp::now();

    // Both workloads on the hollow node: the Deployment by hostname (its rollout then moves it
    // to the zone), the StatefulSet by zone with the healthy kwok node cordoned meanwhile.
    let d = deployment("legacy", 1, "Recreate", json!({ HOSTNAME_LABEL: victim }))?;
    let (old, web) = run_on_hollow_node(env, &victim, d, "web").await?;
    let (old_name, web_uid) = (old.metadata.name.clone().unwrap_or_default(), uid(&web));
    report_cost(env, &hollow, started);

    renewed_since(env, &victim, ready).await?;
    hollow.kill()?;
    let killed = Timestamp::now();
    env.wait_terminating(&old_name, Duration::from_secs(150)).await?;
    env.wait_terminating("web-0", Duration::from_secs(30)).await?;
    eprintln!(
        "{NAME} both pods Terminating {:.1}s after the SIGKILL",
        Timestamp::now().duration_since(killed).as_secs_f64()
    );
    let rollout = json!({ "spec": { "template": { "spec": {
        "nodeSelector": { HOSTNAME_LABEL: null, ZONE_LABEL: env.zone },
        "containers": [{ "name": "app", "image": "registry.invalid/app:v2" }],
    }}}});
    env.api::<Deployment>()
        .patch("legacy", &PatchParams::default(), &Patch::Strategic(&rollout))
        .await?;

    // The Deployment's pod goes once the node is dead; the new ReplicaSet's pod runs.
    let dead = env.dead_at(&victim, 10, 40).await?;
    eprintln!(
        "{NAME} node dead by the policy's windows {:.1}s after the SIGKILL",
        dead.duration_since(killed).as_secs_f64()
    );
    let v2 = wait_for(
        "a pod of the new template to run",
        until(dead) + Duration::from_secs(30),
        || async {
            let pods = env.list_pods("app=legacy").await?;
            Ok(pods
                .into_iter()
                .find(|p| p.metadata.name.as_deref() != Some(&old_name) && pod_is_ready(p)))
        },
    )
    .await?;
    ensure!(node_of(&v2) == env.healthy_node, "the new pod runs on {}", node_of(&v2));
    let deletes = cluster.await_operator_pod_deletes(&env.namespace, &old_name).await?;
    ensure!(deletes.len() == 1, "{} DELETEs of {old_name}", deletes.len());
    let deleted = deletes[0].received.context("no time")?;
    ensure!(
        deleted >= dead - SignedDuration::from_secs(1),
        "{old_name} released before the node was dead"
    );

    // The StatefulSet's pod needs fencing: held, then released after the shutdown taint.
    holds_for(
        "web-0 held without fencing evidence",
        until(dead + SignedDuration::from_secs(5)),
        || async {
            let pod = env.pods().get_opt("web-0").await?;
            ensure!(
                pod.as_ref().map(uid).as_deref() == Some(web_uid.as_str()),
                "web-0 released without fencing"
            );
            Ok(())
        },
    )
    .await?;
    env.add_taint(&victim, SHUTDOWN_TAINT, None, "NoSchedule").await?;
    let fenced = Timestamp::now();
    let replacement = wait_for("web-0 replaced and Ready", Duration::from_secs(60), || async {
        let pod = env.pods().get_opt("web-0").await?;
        Ok(pod.filter(|p| uid(p) != web_uid && pod_is_ready(p)))
    })
    .await?;
    ensure!(
        node_of(&replacement) == env.healthy_node,
        "web-0 came back on {}",
        node_of(&replacement)
    );
    let writes = cluster.operator_pod_writes(&env.namespace, Some("web-0"))?;
    let shape: Vec<_> =
        writes.iter().map(|w| (w.verb.as_str(), w.subresource.as_deref())).collect();
    ensure!(
        shape == [("patch", Some("status")), ("delete", None)],
        "the operator's writes to web-0: {shape:?}"
    );
    ensure!(
        writes[1].received.context("no time")? >= fenced,
        "web-0 deleted before the fencing evidence"
    );
    eprintln!(
        "{NAME} {old_name} released {:.1}s after the node was dead; web-0 {:.1}s after the fencing evidence",
        deleted.duration_since(dead).as_secs_f64(),
        writes[1].received.context("no time")?.duration_since(fenced).as_secs_f64()
    );
    Ok(())
}

/// Incident 2's blip with the kubelet's own code: SIGSTOP past the node-monitor grace period,
/// then SIGCONT. The node lifecycle controller marks the pods not Ready; the 1.37 kubelet
/// (unlike the 1.15 one of the incident) reports them Ready again by itself. The rule
/// (Evict, its default nodeReadyFor of 1 m) must leave them alone: no eviction, never listed,
/// and a `RepairedByKubelet` Event on each saying how long it waited and why.
async fn a_blip_the_kubelet_repairs_itself_is_left_alone(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const NAME: &str = "[hk-blip]";
    let started = Instant::now();
    let mut hollow = HollowKubelet::start(cluster, env, "blip", &[]).await?;
    let blip = hollow.name.clone();
    let d = deployment("web", 2, "RollingUpdate", json!({ HOSTNAME_LABEL: blip }))?;
    env.api::<Deployment>().create(&PostParams::default(), &d).await?;
    let pods = env.wait_pods_ready("app=web", 2).await?;
    let uids: Vec<String> = pods.iter().map(uid).collect();
    env.create_policy(json!({
        "mode": "Enforce",
        "staleReadiness": { "action": "Evict" },
        "safety": { "maxUnhealthyNodes": 1 },
    }))
    .await?;
    let _op = Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;

    hollow.pause()?;
    let paused = Timestamp::now();
    wait_node(env, &blip, "Unknown", Duration::from_secs(120)).await?;
    let unknown = Timestamp::now();
    wait_for("the web pods marked not Ready", Duration::from_secs(30), || async {
        let pods = env.list_pods("app=web").await?;
        Ok(pods.iter().all(|p| ready_condition(p).as_deref() == Some("False")).then_some(()))
    })
    .await?;
    let resumed = hollow.resume()?;
    env.wait_node_ready(&blip, "True").await?;
    let node_back = Timestamp::now();
    let repaired =
        wait_for("the kubelet to make its pods Ready again", Duration::from_secs(90), || async {
            let pods = env.list_pods("app=web").await?;
            Ok((pods.len() == 2 && pods.iter().all(pod_is_ready)).then(Timestamp::now))
        })
        .await?;
    eprintln!(
        "{NAME} stopped {:.1}s (Unknown after {:.1}s); node Ready {:.1}s and pods Ready {:.1}s after the SIGCONT",
        resumed.duration_since(paused).as_secs_f64(),
        unknown.duration_since(paused).as_secs_f64(),
        node_back.duration_since(resumed).as_secs_f64(),
        repaired.duration_since(resumed).as_secs_f64(),
    );
    // The rule says, on each pod, that it waited and why: a Normal Event.
    for pod in &pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let note = wait_for(
            &format!("a RepairedByKubelet Event on {name}"),
            Duration::from_secs(30),
            || async {
                let events = env.events_about("Pod", &name, "RepairedByKubelet").await?;
                Ok(events.into_iter().find_map(|e| {
                    (e.type_.as_deref() == Some("Normal")).then_some(e.note).flatten()
                }))
            },
        )
        .await?;
        ensure!(
            note.contains("Left alone all along")
                && note.contains("after we saw it not Ready")
                && note.contains("nodeReadyFor (1m)")
                && (note.contains("after its node came back")
                    || note.contains("before its node was seen Ready again")),
            "the Event does not say how long the rule waited and why: {note}"
        );
        eprintln!("{NAME} {name}: {note}");
    }
    // Past the rule's nodeReadyFor (1 m from the node's return by the operator's clock), with a
    // margin: nothing evicted, nothing listed, the same pods.
    holds_for(
        "the repaired pods left alone",
        until(node_back + SignedDuration::from_secs(70)),
        || async {
            let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
            ensure!(
                status.stale_ready_pods.is_empty(),
                "listed as stale: {:?}",
                status.stale_ready_pods
            );
            let now: Vec<String> = env.list_pods("app=web").await?.iter().map(uid).collect();
            ensure!(now.len() == 2 && now.iter().all(|u| uids.contains(u)), "the web pods changed");
            Ok(())
        },
    )
    .await?;
    let writes = cluster.operator_pod_writes(&env.namespace, None)?;
    ensure!(writes.is_empty(), "the operator wrote to pods: {writes:?}");
    report_cost(env, &hollow, started);
    Ok(())
}

/// The Lease of `node`: its renewTime and the UID of the Node that owns it.
async fn lease_of(env: &TestEnv, node: &str) -> Result<Option<(Timestamp, String)>> {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: kube::Api<Lease> = kube::Api::namespaced(env.client.clone(), "kube-node-lease");
    let Some(lease) = leases.get_opt(node).await? else { return Ok(None) };
    let owner = lease.metadata.owner_references.unwrap_or_default().into_iter().next();
    let renewed = lease.spec.and_then(|s| s.renew_time).map(|t| t.0);
    Ok(renewed.map(|r| (r, owner.map(|o| o.uid).unwrap_or_default())))
}

/// A kubelet restart and a Node deleted under a live kubelet, with a policy that would release
/// the node's pods and cordon it as soon as it counted as dead: neither is a death.
async fn a_restarted_kubelet_and_a_deleted_node_are_life(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const NAME: &str = "[hk-restart-and-node-deleted]";
    let started = Instant::now();
    let mut hollow = HollowKubelet::start(cluster, env, "live", &[]).await?;
    let live = hollow.name.clone();
    let mut d = deployment("web", 1, "Recreate", json!({ HOSTNAME_LABEL: live }))?;
    if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.tolerations = Some(serde_json::from_value(tolerations(1))?);
    }
    env.api::<Deployment>().create(&PostParams::default(), &d).await?;
    let pod = env.wait_pods_ready("app=web", 1).await?.remove(0);
    let (pod_name, pod_uid) = (pod.metadata.name.clone().unwrap_or_default(), uid(&pod));
    env.create_policy(release_policy(json!({
        "recreateRollouts": { "delayAfterGrace": "0s" },
        "nodeActions": { "cordonAfter": "0s" },
    })))
    .await?;
    let _op = Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;
    let ready = Timestamp::now();
    renewed_since(env, &live, ready).await?;

    // A kubelet restart: same node, same Lease, renewed again.
    let (before, old_owner) = lease_of(env, &live).await?.context("no Lease")?;
    hollow.restart(cluster)?;
    let restarted = Timestamp::now();
    hollow.wait_ready(env, Duration::from_secs(120)).await?;
    renewed_since(env, &live, restarted).await?;
    let (after, owner) = lease_of(env, &live).await?.context("no Lease")?;
    ensure!(owner == old_owner, "the Lease changed owner over a restart");
    // The restarted kubelet has a new (empty) fake runtime: it syncs the pod again, which
    // shows as its container started after the restart.
    let pod =
        wait_for("the restarted kubelet to run the pod again", Duration::from_secs(90), || async {
            let pod = env.pods().get_opt(&pod_name).await?;
            Ok(pod
                .filter(|p| pod_is_ready(p) && container_started(p).is_some_and(|t| t > restarted)))
        })
        .await?;
    ensure!(uid(&pod) == pod_uid, "the pod was replaced over a kubelet restart");
    eprintln!(
        "{NAME} restart (start {}): Lease renewed {:.1}s after the restart (the last renewal before it {:.1}s earlier); the pod's container started again {:.1}s after it",
        hollow.starts(),
        after.duration_since(restarted).as_secs_f64(),
        restarted.duration_since(before).as_secs_f64(),
        container_started(&pod).map_or(f64::NAN, |t| t.duration_since(restarted).as_secs_f64()),
    );

    // The Node deleted under the running kubelet. The 1.37 kubelet does not register it again
    // (it registers only at its start), and once the garbage collector removed its Lease (owned
    // by the deleted Node) it does not re-create it (a Lease must name its Node as owner); PodGC
    // deletes its pods as orphans.
    let old_uid = env.nodes().get(&live).await?.metadata.uid.unwrap_or_default();
    env.nodes().delete(&live, &Default::default()).await?;
    let deleted = Timestamp::now();
    let lease_gone =
        wait_for("the garbage collector to delete the Lease", Duration::from_secs(60), || async {
            Ok(lease_of(env, &live).await?.is_none().then(Timestamp::now))
        })
        .await?;
    let orphaned =
        wait_for("PodGC to delete the orphaned pod", Duration::from_secs(120), || async {
            let pod = env.pods().get_opt(&pod_name).await?;
            Ok(pod.is_none().then(Timestamp::now))
        })
        .await?;
    ensure!(
        env.nodes().get_opt(&live).await?.is_none(),
        "the kubelet registered its Node again: update this test and the manual"
    );
    let lease = lease_of(env, &live).await?;
    ensure!(lease.is_none(), "the kubelet re-created its Lease without its Node: {lease:?}");
    eprintln!(
        "{NAME} Node deleted: not registered again; its Lease deleted {:.1}s after it and not re-created; the pod deleted by PodGC {:.1}s after it",
        lease_gone.duration_since(deleted).as_secs_f64(),
        orphaned.duration_since(deleted).as_secs_f64(),
    );
    let status = env.policies().get(&env.name).await?.status.unwrap_or_default();
    eprintln!(
        "{NAME} meanwhile the policy counts {} dead and {} unhealthy nodes",
        status.dead_nodes, status.unhealthy_nodes
    );

    // A kubelet restart registers the Node again (a new UID); the Deployment's replacement runs
    // there and the node is alive to the operator.
    hollow.restart(cluster)?;
    let restarted = Timestamp::now();
    hollow.wait_ready(env, Duration::from_secs(120)).await?;
    let new_uid = env.nodes().get(&live).await?.metadata.uid.unwrap_or_default();
    ensure!(new_uid != old_uid, "the Node kept its UID");
    wait_for("a Lease owned by the new Node, renewed", Duration::from_secs(30), || async {
        Ok(lease_of(env, &live).await?.filter(|(r, o)| *o == new_uid && *r > restarted))
    })
    .await?;
    let replacement = env.wait_pods_ready("app=web", 1).await?.remove(0);
    ensure!(node_of(&replacement) == live, "the replacement runs on {}", node_of(&replacement));
    eprintln!(
        "{NAME} restarted: Node registered again and its replacement pod Ready {:.1}s after the restart",
        Timestamp::now().duration_since(restarted).as_secs_f64()
    );
    env.wait_policy("no dead node in the status", Duration::from_secs(30), |s| {
        (s.dead_nodes == 0).then_some(())
    })
    .await?;
    // Past the policy's windows: no write to the node or to pods.
    let replacement_uid = uid(&replacement);
    holds_for("the live node and its pod left alone", Duration::from_secs(45), || async {
        let pod =
            env.pods().get_opt(&replacement.metadata.name.clone().unwrap_or_default()).await?;
        ensure!(pod.as_ref().map(uid) == Some(replacement_uid.clone()), "the pod is gone");
        ensure!(cluster.operator_node_writes(&live)?.is_empty(), "the operator wrote to {live}");
        let writes = cluster.operator_pod_writes(&env.namespace, None)?;
        ensure!(writes.is_empty(), "the operator wrote to pods: {writes:?}");
        Ok(())
    })
    .await?;
    report_cost(env, &hollow, started);
    Ok(())
}

/// The kubelet hung (SIGSTOP) past the policy's `leaseStaleFor`, with a Deployment's pod, a
/// StatefulSet's pod and a bare pod with a ReadWriteOnce volume on its node (tolerating its death
/// 1 s), then resumed.
async fn a_kubelet_stopped_past_lease_stale_for_then_resumed(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const NAME: &str = "[hk-long-stop]";
    let started = Instant::now();
    let mut hollow = HollowKubelet::start(cluster, env, "hung", &[]).await?;
    let hung = hollow.name.clone();
    env.create_policy(release_policy(json!({}))).await?;
    let _op = Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;
    let ready = Timestamp::now();
    let d = deployment("app", 1, "RollingUpdate", json!({ ZONE_LABEL: env.zone }))?;
    let (app, db) = run_on_hollow_node(env, &hung, d, "db").await?;
    let (app_name, db_uid) = (app.metadata.name.clone().unwrap_or_default(), uid(&db));
    let vol = pod_with_rwo_volume(env, &hung).await?;
    let vol_uid = uid(&vol);
    renewed_since(env, &hung, ready).await?;

    hollow.pause()?;
    let paused = Timestamp::now();
    env.wait_terminating(&app_name, Duration::from_secs(150)).await?;
    env.wait_terminating("db-0", Duration::from_secs(30)).await?;
    let dead = env.dead_at(&hung, 10, 40).await?;
    // While it is away: the Deployment's pod released once the node is dead, its replacement
    // running elsewhere; the StatefulSet's pod held (no fencing evidence).
    wait_for("the Deployment's pod released", until(dead) + Duration::from_secs(30), || async {
        Ok(env.pods().get_opt(&app_name).await?.is_none().then_some(()))
    })
    .await?;
    env.wait_pods_ready("app=app", 1).await?;
    env.wait_terminating("vol", Duration::from_secs(30)).await?;
    holds_for("db-0 and vol held without fencing evidence", Duration::from_secs(10), || async {
        let pod = env.pods().get_opt("db-0").await?;
        ensure!(pod.as_ref().map(uid).as_deref() == Some(db_uid.as_str()), "db-0 released");
        let pod = env.pods().get_opt("vol").await?;
        ensure!(pod.as_ref().map(uid).as_deref() == Some(vol_uid.as_str()), "vol released");
        Ok(())
    })
    .await?;
    let away = Timestamp::now().duration_since(paused);

    // Back: the kubelet finishes db-0 itself (its final DELETE), the StatefulSet replaces it.
    let resumed = hollow.resume()?;
    let finished = wait_for("the kubelet to finish db-0", Duration::from_secs(90), || async {
        let pod = env.pods().get_opt("db-0").await?;
        Ok(pod.is_none_or(|p| uid(&p) != db_uid).then(Timestamp::now))
    })
    .await?;
    env.wait_pods_ready("app=db", 1).await?;
    wait_for("the kubelet to finish vol", Duration::from_secs(60), || async {
        Ok(env.pods().get_opt("vol").await?.is_none().then_some(()))
    })
    .await?;
    wait_node(env, &hung, "True", Duration::from_secs(60)).await?;
    eprintln!(
        "{NAME} stopped {:.1}s (dead by the policy {:.1}s after the SIGSTOP); db-0 finished by its kubelet {:.1}s after the SIGCONT",
        away.as_secs_f64(),
        dead.duration_since(paused).as_secs_f64(),
        finished.duration_since(resumed).as_secs_f64()
    );
    holds_for("nothing more from the operator", Duration::from_secs(20), || async {
        let writes = cluster.operator_pod_writes(&env.namespace, None)?;
        let after: Vec<_> =
            writes.iter().filter(|w| w.received.is_none_or(|t| t >= resumed)).collect();
        ensure!(after.is_empty(), "the operator wrote after the kubelet was back: {after:?}");
        Ok(())
    })
    .await?;
    let writes = cluster.operator_pod_writes(&env.namespace, None)?;
    ensure!(
        writes.iter().all(|w| w.name.as_deref() == Some(app_name.as_str())),
        "the operator wrote to another pod than {app_name}: {writes:?}"
    );
    ensure!(cluster.operator_node_writes(&hung)?.is_empty(), "the operator wrote to {hung}");
    report_cost(env, &hollow, started);
    Ok(())
}

/// Pods deleted on a live hollow node (grace periods of 1 s and 30 s) are finished by its
/// kubelet; an eager policy that force-deletes on live nodes 10 s after the grace period (the
/// kubelet's status sync period) has nothing to do. With `0s` it raced the kubelet: the pod
/// with a 1 s grace period was finished by its kubelet 1.7 s after its delete, and the operator
/// force-deleted it at 1 s (the CRD accepts `0s`; the default is `2m`).
async fn a_pod_its_kubelet_finishes_is_never_touched(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const NAME: &str = "[hk-live-finish]";
    let hollow = HollowKubelet::start(cluster, env, "live", &[]).await?;
    env.create_policy(json!({
        "mode": "Enforce",
        "liveNodeStuck": { "delayAfterGrace": "10s", "forceDeleteAfter": "10s" },
        "stuckTerminating": { "delayAfterGrace": "0s" },
    }))
    .await?;
    let _op = Operator::start_replica(cluster, env, "", &["--leader-elect=false"]).await?;
    for (name, grace) in [("short", 1), ("long", 30)] {
        let mut pod =
            crate::fixtures::bare_pod(name, &hollow.name, json!({ "app": name }), json!({}))?;
        if let Some(spec) = pod.spec.as_mut() {
            spec.termination_grace_period_seconds = Some(grace);
        }
        env.pods().create(&PostParams::default(), &pod).await?;
    }
    env.wait_pods_ready("app=short", 1).await?;
    env.wait_pods_ready("app=long", 1).await?;
    for name in ["short", "long"] {
        let deleted = Timestamp::now();
        env.pods().delete(name, &Default::default()).await?;
        wait_for(&format!("the kubelet to finish {name}"), Duration::from_secs(60), || async {
            Ok(env.pods().get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
        eprintln!(
            "{NAME} pod {name} finished by its kubelet {:.1}s after its delete",
            Timestamp::now().duration_since(deleted).as_secs_f64()
        );
    }
    holds_for("no operator write", Duration::from_secs(5), || async {
        let writes = cluster.operator_pod_writes(&env.namespace, None)?;
        ensure!(writes.is_empty(), "the operator wrote to pods: {writes:?}");
        Ok(())
    })
    .await?;
    ensure!(hollow.pid().is_some(), "the hollow kubelet is not running");
    Ok(())
}

/// Three hollow kubelets of the test's zone stopped together (SIGSTOP: a partition), a pod on
/// each deleted while they are away (Terminating: nobody finishes it). The policy allows 2
/// unhealthy nodes: the circuit opens and no pod is released, past the instant the nodes count
/// as dead. On SIGCONT the kubelets finish their pods themselves.
async fn hollow_kubelets_stopped_together_open_the_circuit(
    cluster: &Cluster,
    env: &TestEnv,
) -> Result<()> {
    const NAME: &str = "[hk-storm]";
    let mut hollows = Vec::new();
    for suffix in ["a", "b", "c"] {
        hollows.push(HollowKubelet::start(cluster, env, suffix, &[]).await?);
    }
    let names: Vec<String> = hollows.iter().map(|h| h.name.clone()).collect();
    let zone = json!({ "nodeSelector": { "matchLabels": { ZONE_LABEL: env.zone } } });
    env.create_policy(release_policy(zone)).await?;
    let extra = ["--leader-elect=false", "--max-unhealthy-nodes-in-cluster=100%"];
    let _op = Operator::start_replica(cluster, env, "", &extra).await?;
    let ready = Timestamp::now();
    for node in &names {
        let pod = crate::fixtures::bare_pod(node, node, json!({ "app": "storm" }), json!({}))?;
        env.pods().create(&PostParams::default(), &pod).await?;
    }
    env.wait_pods_ready("app=storm", 3).await?;
    for node in &names {
        renewed_since(env, node, ready).await?;
    }

    for hollow in &mut hollows {
        hollow.pause()?;
    }
    let paused = Timestamp::now();
    for node in &names {
        wait_node(env, node, "Unknown", Duration::from_secs(120)).await?;
    }
    for node in &names {
        env.delete_gracefully(node, 1).await?;
    }
    let mut dead = paused;
    for node in &names {
        dead = dead.max(env.dead_at(node, 10, 40).await?);
    }
    let open = env
        .wait_policy("the circuit open", until(dead) + Duration::from_secs(30), |s| {
            let c = s.conditions.iter().find(|c| c.type_ == "CircuitOpen")?;
            (c.status == "True").then(|| c.message.clone())
        })
        .await?;
    eprintln!("{NAME} circuit open: {open}");
    holds_for("no pod released in the storm", until(dead) + Duration::from_secs(15), || async {
        let writes = cluster.operator_pod_writes(&env.namespace, None)?;
        ensure!(writes.is_empty(), "the operator wrote to pods: {writes:?}");
        ensure!(env.list_pods("app=storm").await?.len() == 3, "a pod is gone");
        Ok(())
    })
    .await?;

    let mut resumed = Timestamp::now();
    for hollow in &mut hollows {
        resumed = hollow.resume()?;
    }
    let finished =
        wait_for("the kubelets to finish their pods", Duration::from_secs(90), || async {
            Ok(env.list_pods("app=storm").await?.is_empty().then(Timestamp::now))
        })
        .await?;
    let writes = cluster.operator_pod_writes(&env.namespace, None)?;
    ensure!(writes.is_empty(), "the operator wrote to pods: {writes:?}");
    for node in &names {
        ensure!(cluster.operator_node_writes(node)?.is_empty(), "the operator wrote to {node}");
    }
    eprintln!(
        "{NAME} stopped {:.1}s; the kubelets finished their pods {:.1}s after the last SIGCONT; 3 hollow kubelets: {} MiB RSS",
        resumed.duration_since(paused).as_secs_f64(),
        finished.duration_since(resumed).as_secs_f64(),
        hollows.iter().filter_map(HollowKubelet::rss_kib).sum::<u64>() / 1024
    );
    Ok(())
}
