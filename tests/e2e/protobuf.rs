//! The pods' watch and lists in protobuf (`src/index/protobuf.rs`): what the operator's client
//! makes of the API server's protobuf must be what the same pods read as JSON would give, field
//! for field, for pods that carry every field the records read.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube_remediator::adapters::{MIRROR_ANNOTATION, WatchedPod};
use kube_remediator::cli::ConnectionArgs;
use libtest_mimic::Trial;
use serde_json::json;

use crate::e2e;
use crate::support::env::TEST_LABEL;
use crate::support::{TestEnv, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![e2e!("pb-pods-as-json", pods_in_protobuf_read_as_in_json)]
}

/// A finalizer nothing removes but this test.
const HOLD: &str = "remediator.io/test-hold";

/// Two pods with every field the records read (an owner, a claim and an inline disk, a
/// readiness gate, a native sidecar, the annotations read and one that is not, a finalizer),
/// on a node that then dies: one Running, one deleted and held Terminating by the finalizer.
/// Read by the operator's own client (the pods' watch, and a list in pages of one, in protobuf,
/// turned into JSON), they must decode as the same pods listed as JSON do.
async fn pods_in_protobuf_read_as_in_json(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    let node = env.add_node("pb").await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.namespace);
    let owner: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "owner" } }))?;
    let owner = config_maps.create(&PostParams::default(), &owner).await?;
    let owner_uid = owner.metadata.uid.context("the owner has no uid")?;
    for name in ["running", "held"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": { "app": "pb", TEST_LABEL: env.name },
                "annotations": { MIRROR_ANNOTATION: "x", "unread.example.com/big": "y".repeat(2000) },
                "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                    "uid": owner_uid, "controller": true, "blockOwnerDeletion": false }],
                "finalizers": [HOLD],
            },
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 30,
                "readinessGates": [{ "conditionType": "example.com/gate" }],
                "initContainers": [
                    { "name": "setup", "image": "registry.invalid/setup:v1" },
                    { "name": "sidecar", "image": "registry.invalid/side:v1", "restartPolicy": "Always" },
                ],
                "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
                "volumes": [
                    { "name": "data", "persistentVolumeClaim": { "claimName": "data-0" } },
                    { "name": "disk", "gcePersistentDisk": { "pdName": "d" } },
                    { "name": "scratch", "emptyDir": {} },
                ],
            },
        }))?;
        env.pods().create(&PostParams::default(), &pod).await?;
    }
    wait_for("both pods to run", Duration::from_secs(60), || async {
        let pods = env.pods().list(&ListParams::default().labels("app=pb")).await?;
        let running = pods.items.iter().filter(|p| {
            let status = p.status.as_ref();
            status.and_then(|s| s.phase.as_deref()) == Some("Running")
                && status.and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| !c.is_empty())
        });
        Ok((running.count() == 2).then_some(()))
    })
    .await?;
    env.kill_node(&node).await?;
    env.wait_node_ready(&node, "Unknown").await?;
    env.delete_gracefully("held", 30).await?;

    // Read both ways until both reads see the same versions (the node controller may update
    // the pods between them).
    let selector = format!("{TEST_LABEL}={}", env.name);
    let args = ConnectionArgs {
        kubeconfig: Some(cluster.kubeconfig.clone()),
        context: None,
        request_timeout: 10,
    };
    let ours: Api<WatchedPod> = Api::all(args.client().await?);
    let plain: Api<WatchedPod> = Api::namespaced(env.client.clone(), &env.namespace);
    let reads = wait_for("reads of the same versions", Duration::from_secs(30), || async {
        // As JSON, through a plain client.
        let listed = plain.list(&ListParams::default().labels(&selector)).await?.items;
        // Through the operator's client: the cluster-wide pods' watch, and a list in
        // pages of one.
        let watched = watched_pods(&ours, &selector).await?;
        let first = ours.list(&ListParams::default().labels(&selector).limit(1)).await?;
        let mut paged = first.items;
        if let Some(token) = first.metadata.continue_.filter(|c| !c.is_empty()) {
            let rest = ListParams::default().labels(&selector).limit(1).continue_token(&token);
            paged.extend(ours.list(&rest).await?.items);
        }
        let versions = |pods: &[WatchedPod]| -> BTreeMap<Option<String>, Option<String>> {
            pods.iter()
                .map(|p| (p.metadata.name.clone(), p.metadata.resource_version.clone()))
                .collect()
        };
        let same = versions(&listed) == versions(&watched) && versions(&listed) == versions(&paged);
        Ok(same.then(|| [by_name(&listed), by_name(&watched), by_name(&paged)]))
    })
    .await?;
    let [as_json, watched, paged] = &reads;
    ensure!(as_json.len() == 2, "listed {:?}", as_json.keys());
    for (name, json_pod) in as_json {
        for (how, read) in [("watched", watched), ("listed", paged)] {
            let pb_pod = read.get(name).with_context(|| format!("{name} not {how}"))?;
            ensure!(
                pb_pod == json_pod,
                "{name} {how} differs:\nprotobuf {pb_pod}\njson     {json_pod}"
            );
        }
    }
    // The pods carry what they were made to carry, so the comparison compared something.
    let held = &as_json["held"];
    for part in [
        "deletion_timestamp: Some",
        "deletion_grace_period_seconds: Some(30)",
        HOLD,
        "claim_name: \"data-0\"",
        "gce_persistent_disk: Some",
        "example.com/gate",
        "restart_policy: Some(\"Always\")",
        MIRROR_ANNOTATION,
        "owner_references: Some",
        "container_statuses: Some",
        "last_transition_time: Some",
    ] {
        ensure!(held.contains(part), "the held pod lacks {part}: {held}");
    }
    ensure!(!held.contains("unread.example.com"), "an annotation not read was kept: {held}");

    // The API server offers the pods' watch in protobuf (what the comparison went through).
    let request = http::Request::get(format!(
        "/api/v1/pods?watch=true&labelSelector={TEST_LABEL}%3D{}&timeoutSeconds=1",
        env.name
    ))
    .header(http::header::ACCEPT, "application/vnd.kubernetes.protobuf;stream=watch")
    .body(Vec::new())?;
    let response = env.client.send(request.map(kube::client::Body::from)).await?;
    let content_type = response.headers().get(http::header::CONTENT_TYPE).cloned();
    ensure!(
        content_type.as_ref().and_then(|v| v.to_str().ok())
            == Some("application/vnd.kubernetes.protobuf;stream=watch"),
        "the API server answered the pods' watch in {content_type:?}"
    );

    // Let the held pod go for the namespace's teardown.
    let release = json!({ "metadata": { "finalizers": null } });
    env.pods().patch("held", &Default::default(), &kube::api::Patch::Merge(&release)).await?;
    eprintln!(
        "[{}] {} pods read alike watched and listed in protobuf and in JSON",
        env.name,
        watched.len()
    );
    Ok(())
}

/// The pods the pods' watch sends at its start: a streamed list (until its end's bookmark)
/// where the API server streams lists, else (Kubernetes 1.33, whose WatchList is off by
/// default, refuses `sendInitialEvents`) a watch from resourceVersion 0, which sends every pod
/// there, until it ends at its bound.
async fn watched_pods(api: &Api<WatchedPod>, selector: &str) -> Result<Vec<WatchedPod>> {
    let streamed = WatchParams::streaming_lists().labels(selector).timeout(10);
    let (mut events, streaming) = match api.watch(&streamed, "0").await {
        Ok(events) => (events.boxed(), true),
        Err(kube::Error::Api(refused)) => {
            eprintln!("[pb-pods-as-json] no streamed list ({}): a watch from 0", refused.message);
            let params = WatchParams::default().labels(selector).timeout(3);
            (api.watch(&params, "0").await?.boxed(), false)
        }
        Err(e) => return Err(e.into()),
    };
    let mut watched = BTreeMap::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(15), events.try_next())
        .await
        .context("the watch went silent")??
    {
        match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => {
                watched.insert(pod.metadata.name.clone(), pod);
            }
            WatchEvent::Bookmark(b)
                if b.metadata.annotations.contains_key("k8s.io/initial-events-end") =>
            {
                return Ok(watched.into_values().collect());
            }
            WatchEvent::Bookmark(_) => {}
            other => anyhow::bail!("unexpected event {other:?}"),
        }
    }
    ensure!(!streaming, "the watch ended before its list's end");
    Ok(watched.into_values().collect())
}

/// Each pod's decoded form, by name.
fn by_name(pods: &[WatchedPod]) -> BTreeMap<String, String> {
    pods.iter().map(|p| (p.metadata.name.clone().unwrap_or_default(), format!("{p:?}"))).collect()
}
