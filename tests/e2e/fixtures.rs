//! Workloads the end-to-end tests create.

use anyhow::Result;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// A pod template confined to `node_selector`, with a 1 s termination grace period (0 would
/// make evictions immediate deletions).
pub fn pod_template(app: &str, node_selector: Value) -> Value {
    json!({
        "metadata": { "labels": { "app": app } },
        "spec": {
            "nodeSelector": node_selector,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
        },
    })
}

/// A Deployment of `replicas` pods labelled `app=<name>`.
pub fn deployment(
    name: &str,
    replicas: i32,
    strategy: &str,
    node_selector: Value,
) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "strategy": { "type": strategy },
            "selector": { "matchLabels": { "app": name } },
            "template": pod_template(name, node_selector),
        },
    }))?)
}

/// A StatefulSet of `replicas` pods labelled `app=<name>`.
pub fn stateful_set(name: &str, replicas: i32, node_selector: Value) -> Result<StatefulSet> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": { "matchLabels": { "app": name } },
            "template": pod_template(name, node_selector),
        },
    }))?)
}

/// A bare pod named `name` on `node` (bound directly), with extra annotations and labels.
pub fn bare_pod(name: &str, node: &str, labels: Value, annotations: Value) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels, "annotations": annotations },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
        },
    }))?)
}

/// A pod's UID (empty when it has none).
pub fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// How long until `t` from now (zero once it has passed).
pub fn until(t: jiff::Timestamp) -> std::time::Duration {
    std::time::Duration::try_from(t.duration_since(jiff::Timestamp::now())).unwrap_or_default()
}

/// Whether an instant the operator stamped by its own clock (`stamp`, whole seconds as the API
/// writes it) is `at`, an instant the test derived from the API server's timestamps, or within
/// the second after it: the operator counts from when it saw a change, which is never before
/// the API server made it.
pub fn stamped_after(stamp: jiff::Timestamp, at: jiff::Timestamp) -> bool {
    stamp >= at && stamp.duration_since(at) <= secs(1)
}

/// `s` seconds.
pub fn secs(s: i64) -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(s)
}

/// The operator's own measure of its force deletes under `policy`: how many, and the mean time
/// from each threshold to its request's answer (by its clock, from when it saw the evidence;
/// the test's threshold comes from timestamps of one-second resolution).
pub async fn force_delete_delay(
    op: &crate::support::operator::Operator,
    policy: &str,
) -> anyhow::Result<(f64, f64)> {
    let labels = [("policy", policy), ("action", "ForceDelete"), ("mode", "Enforce")];
    let count = op.metric("kube_remediator_action_delay_seconds_count", &labels).await?;
    let sum = op.metric("kube_remediator_action_delay_seconds_sum", &labels).await?;
    let count = count.unwrap_or(0.0);
    Ok((count, if count > 0.0 { sum.unwrap_or(0.0) / count } else { 0.0 }))
}

/// One version of a pod as a watch delivered it, in order.
#[derive(Clone, Debug)]
pub struct SeenPod {
    pub name: String,
    pub uid: String,
    /// The watch said it was deleted.
    pub deleted: bool,
    pub terminating: bool,
    pub phase: Option<String>,
    /// The `DisruptionTarget` condition's reason, when it is True.
    pub disruption: Option<String>,
    /// Its `controller-revision-hash` label (a StatefulSet's revision).
    pub revision: Option<String>,
    pub created: Option<jiff::Timestamp>,
}

/// Every version of the pods of `namespace` matching `selector`, in the order one watch
/// delivers them (the API server's order), from now until dropped.
pub struct PodHistory {
    seen: std::sync::Arc<std::sync::Mutex<Vec<SeenPod>>>,
    task: tokio::task::JoinHandle<()>,
}

impl PodHistory {
    pub fn watch(client: kube::Client, namespace: &str, selector: &str) -> PodHistory {
        use futures::StreamExt;
        use kube::runtime::watcher;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let api: kube::Api<Pod> = kube::Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(selector);
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut events = watcher(api, config).boxed();
            while let Some(event) = events.next().await {
                let (pod, deleted) = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                let status = pod.status.as_ref();
                let disruption = status
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .find(|c| c.type_ == "DisruptionTarget" && c.status == "True")
                    .map(|c| c.reason.clone().unwrap_or_default());
                let entry = SeenPod {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    uid: uid(&pod),
                    deleted,
                    terminating: pod.metadata.deletion_timestamp.is_some(),
                    phase: status.and_then(|s| s.phase.clone()),
                    disruption,
                    revision: pod
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("controller-revision-hash").cloned()),
                    created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0),
                };
                log.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
            }
        });
        PodHistory { seen, task }
    }

    /// What was seen so far.
    pub fn seen(&self) -> Vec<SeenPod> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The first moment two pods of one name (two UIDs) existed at once, in the watch's order.
    pub fn two_of_one_name(&self) -> Option<String> {
        let mut live: std::collections::HashMap<String, String> = Default::default();
        for p in self.seen() {
            if p.deleted {
                if live.get(&p.name) == Some(&p.uid) {
                    live.remove(&p.name);
                }
                continue;
            }
            match live.get(&p.name) {
                Some(other) if *other != p.uid => {
                    return Some(format!("{} as {} while {other} still existed", p.name, p.uid));
                }
                _ => {
                    live.insert(p.name.clone(), p.uid.clone());
                }
            }
        }
        None
    }
}

impl Drop for PodHistory {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Waits until the kubelet of `node` renewed its Lease after `after`: an operator ready at
/// `after` has seen the node alive by its own clock, and dates its death from a renewal as the
/// objects do.
pub async fn renewed_since(
    env: &crate::support::TestEnv,
    node: &str,
    after: jiff::Timestamp,
) -> Result<()> {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: kube::Api<Lease> = kube::Api::namespaced(env.client.clone(), "kube-node-lease");
    let what = format!("the Lease of {node} renewed after {after}");
    crate::support::wait_for(&what, std::time::Duration::from_secs(30), || {
        let leases = leases.clone();
        async move {
            let lease = leases.get_opt(node).await?;
            let renewed = lease.and_then(|l| l.spec).and_then(|s| s.renew_time).map(|t| t.0);
            Ok(renewed.filter(|r| *r > after).map(|_| ()))
        }
    })
    .await
}
