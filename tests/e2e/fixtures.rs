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

/// `s` seconds.
pub fn secs(s: i64) -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(s)
}
