//! Per-test isolation on the shared control plane: each test gets its own namespace, its own
//! zone (`topology.kubernetes.io/zone`) with one healthy node that never dies, and node names
//! prefixed with the test's name, so tests run in parallel without seeing each other.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use kube_remediator::crd::{RemediationPolicy, RemediationPolicyStatus};

use super::cluster::ALIVE_LABEL;

pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Every node a test creates carries this label with the test's name.
pub const TEST_LABEL: &str = "remediator.io/test";

/// One test's slice of the cluster.
pub struct TestEnv {
    pub name: String,
    pub namespace: String,
    pub zone: String,
    pub client: kube::Client,
    /// A node of this test's zone that stays alive, so the zone is never fully disrupted.
    pub healthy_node: String,
}

impl TestEnv {
    /// Creates the namespace `name`, the zone `zone-<name>` and its healthy node, and waits
    /// until that node is Ready.
    pub async fn new(client: kube::Client, name: &str) -> Result<TestEnv> {
        let namespace = name.to_string();
        let ns: Namespace = serde_json::from_value(json!({
            "metadata": { "name": namespace, "labels": { TEST_LABEL: name } }
        }))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {namespace}"))?;
        let mut env = TestEnv {
            name: name.to_string(),
            namespace,
            zone: format!("zone-{name}"),
            client,
            healthy_node: String::new(),
        };
        env.healthy_node = env.add_node("healthy").await?;
        Ok(env)
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Typed API for a namespaced kind in this test's namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Creates a kwok-managed node `<test>-<suffix>` in this test's zone and waits until kwok
    /// has made it Ready. Returns its name.
    pub async fn add_node(&self, suffix: &str) -> Result<String> {
        self.add_node_in_zone(suffix, &self.zone).await
    }

    /// Like [`TestEnv::add_node`], in the zone `zone` (a test that needs several zones names
    /// them after itself, e.g. `zone-<test>-a`).
    pub async fn add_node_in_zone(&self, suffix: &str, zone: &str) -> Result<String> {
        self.add_node_with_labels(suffix, &[(ZONE_LABEL, zone)]).await
    }

    /// Creates a Ready node `<test>-<suffix>` that kwok does not manage: this test heartbeats it
    /// (Ready condition and Lease) until the returned guard is dropped, and nothing ever
    /// finalizes its pods, like a live kubelet stuck on an unmount. Returns its name.
    pub async fn add_live_node_without_kubelet(&self, suffix: &str) -> Result<(String, Heartbeat)> {
        let kubelet = TestKubelet {
            ready: "True".into(),
            skew: jiff::SignedDuration::ZERO,
            lease_seconds: 10,
            transition: None,
        };
        self.add_node_with_test_kubelet(suffix, kubelet).await
    }

    /// Creates a node `<test>-<suffix>` that kwok does not manage, whose kubelet (played by this
    /// test until the returned guard is dropped) is alive but its clock runs `skew` off (e.g.
    /// `-300s`: 5 minutes behind). Every 2 s it renews its Lease (kube-node-lease, 40 s) with
    /// `renewTime` = now + `skew`, and reports the Ready condition with status `ready` (`True`,
    /// or `False`: "container runtime is down"), `lastHeartbeatTime` = now + `skew` and a
    /// `lastTransitionTime` fixed at its first heartbeat (+ `skew`). Nothing finalizes its pods.
    /// Waits until the node shows Ready=`ready`; returns its name.
    pub async fn add_skewed_node(
        &self,
        suffix: &str,
        ready: &str,
        skew: jiff::SignedDuration,
    ) -> Result<(String, Heartbeat)> {
        ensure!(ready == "True" || ready == "False", "Ready must be True or False, not {ready}");
        let kubelet = TestKubelet {
            ready: ready.into(),
            skew,
            lease_seconds: 40,
            transition: Some(jiff::Timestamp::now() + skew),
        };
        self.add_node_with_test_kubelet(suffix, kubelet).await
    }

    /// Creates a node kwok does not manage and heartbeats it as `kubelet` says every 2 s.
    /// Errors are ignored and a request that hangs (a stalled control plane) just delays the
    /// next beat, so the heartbeat outlives a stall like a real kubelet's.
    async fn add_node_with_test_kubelet(
        &self,
        suffix: &str,
        kubelet: TestKubelet,
    ) -> Result<(String, Heartbeat)> {
        let (name, node_uid) = self.create_node_without_kubelet(suffix).await?;
        let ready = kubelet.ready.clone();
        let beat = spawn_heartbeat(self.client.clone(), name.clone(), node_uid, kubelet);
        self.wait_node_ready(&name, &ready).await?;
        Ok((name, beat))
    }

    /// Creates node `<test>-<suffix>` in the test's zone, labelled as the test's, with no status
    /// and no kubelet: the test plays it. Returns its name and UID.
    pub async fn create_node_without_kubelet(&self, suffix: &str) -> Result<(String, String)> {
        let name = format!("{}-{suffix}", self.name);
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": {
                    ZONE_LABEL: self.zone,
                    HOSTNAME_LABEL: name,
                    TEST_LABEL: self.name,
                    "kubernetes.io/os": "linux",
                },
            },
            "status": {
                "capacity": { "cpu": "32", "memory": "256Gi", "pods": "110" },
                "allocatable": { "cpu": "32", "memory": "256Gi", "pods": "110" },
            },
        }))?;
        let created = self
            .nodes()
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
        Ok((name, created.metadata.uid.unwrap_or_default()))
    }

    /// Heartbeats again (Ready=True, a renewed 10 s Lease every 2 s) a node this test plays the
    /// kubelet of ([`TestEnv::add_live_node_without_kubelet`]) after it dropped the previous
    /// [`Heartbeat`]: a kubelet that comes back. Statuses of its pods are not resent.
    pub async fn heartbeat_again(&self, node: &str) -> Result<Heartbeat> {
        let uid = self.nodes().get(node).await?.metadata.uid.unwrap_or_default();
        let kubelet = TestKubelet {
            ready: "True".into(),
            skew: jiff::SignedDuration::ZERO,
            lease_seconds: 10,
            transition: None,
        };
        Ok(spawn_heartbeat(self.client.clone(), node.to_string(), uid, kubelet))
    }

    /// Writes the status of pod `name` (on a node this test plays the kubelet of) as a kubelet
    /// would: Running, its one container `app` running and `containers_ready`, and the Ready
    /// condition True when the containers are ready (else False, `ContainersNotReady`).
    pub async fn write_pod_status(&self, name: &str, containers_ready: bool) -> Result<()> {
        let now = jiff::Timestamp::now().to_string();
        let ready = if containers_ready { "True" } else { "False" };
        let reason = if containers_ready { None } else { Some("ContainersNotReady") };
        let status = json!({ "status": {
            "phase": "Running",
            "conditions": [
                { "type": "Ready", "status": ready, "reason": reason, "lastTransitionTime": now },
                { "type": "ContainersReady", "status": ready, "reason": reason, "lastTransitionTime": now },
            ],
            "containerStatuses": [{
                "name": "app", "image": "registry.invalid/app:v1", "imageID": "",
                "ready": containers_ready, "restartCount": 0, "started": true,
                "state": { "running": { "startedAt": now } },
            }],
        }});
        self.pods()
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .with_context(|| format!("writing the status of pod {name}"))?;
        Ok(())
    }

    /// Creates a bare pod `name` bound to `node` (`spec.nodeName` set: no scheduler), labelled
    /// `app=<name>` and with this test's label, with a 1 s termination grace period.
    pub async fn create_bound_pod(&self, name: &str, node: &str) -> Result<Pod> {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": { "name": name, "labels": { "app": name, TEST_LABEL: self.name } },
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
            },
        }))?;
        self.pods()
            .create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name} on {node}"))
    }

    /// Deletes the pod with a grace period of `grace_seconds` (as `kubectl delete` does) and
    /// waits until it is Terminating; returns it. Where no kubelet finalizes it (a dead node,
    /// or one this test heartbeats), it stays Terminating.
    pub async fn delete_gracefully(&self, name: &str, grace_seconds: u32) -> Result<Pod> {
        let params =
            DeleteParams { grace_period_seconds: Some(grace_seconds), ..Default::default() };
        self.pods().delete(name, &params).await.with_context(|| format!("deleting pod {name}"))?;
        self.wait_terminating(name, Duration::from_secs(30)).await
    }

    /// Kills a node the way a powered-off machine dies: kwok stops renewing its Lease and stops
    /// finalizing its pods; kube-controller-manager then marks it Unknown and taints it.
    pub async fn kill_node(&self, node: &str) -> Result<()> {
        let patch = json!({ "metadata": { "labels": { ALIVE_LABEL: null } } });
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("killing node {node}"))?;
        Ok(())
    }

    /// Brings a killed node back: kwok resumes its heartbeats and finishes its pods.
    pub async fn revive_node(&self, node: &str) -> Result<()> {
        let patch = json!({ "metadata": { "labels": { ALIVE_LABEL: "true" } } });
        self.nodes()
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("reviving node {node}"))?;
        Ok(())
    }

    /// When a policy with these windows counts the (killed) node as dead: Ready not True for
    /// `not_ready_for` seconds and its Lease not renewed for `lease_stale_for` seconds, from the
    /// same objects the operator reads. Waits until the node is Unknown first.
    pub async fn dead_at(
        &self,
        node: &str,
        not_ready_for: i64,
        lease_stale_for: i64,
    ) -> Result<jiff::Timestamp> {
        let n = self.wait_node_ready(node, "Unknown").await?;
        let transition = n
            .status
            .and_then(|s| s.conditions)
            .and_then(|cs| cs.into_iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time)
            .context("Ready condition without lastTransitionTime")?
            .0;
        let lease =
            Api::<Lease>::namespaced(self.client.clone(), "kube-node-lease").get(node).await?;
        let renewed = lease.spec.and_then(|s| s.renew_time).context("Lease without renewTime")?.0;
        Ok((transition + jiff::SignedDuration::from_secs(not_ready_for))
            .max(renewed + jiff::SignedDuration::from_secs(lease_stale_for)))
    }

    /// Waits until the node's Ready condition has `status` (`True`, `False`, `Unknown`).
    pub async fn wait_node_ready(&self, node: &str, status: &str) -> Result<Node> {
        let nodes = self.nodes();
        wait_for(&format!("node {node} Ready={status}"), Duration::from_secs(60), || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.get_opt(node).await?;
                Ok(n.filter(|n| node_ready_status(n).as_deref() == Some(status)))
            }
        })
        .await
    }

    /// Waits until the named pod of this test's namespace is Terminating; returns it.
    pub async fn wait_terminating(&self, name: &str, timeout: Duration) -> Result<Pod> {
        let pods = self.pods();
        wait_for(&format!("pod {name} to be Terminating"), timeout, || {
            let pods = pods.clone();
            async move {
                Ok(pods.get_opt(name).await?.filter(|p| p.metadata.deletion_timestamp.is_some()))
            }
        })
        .await
    }

    /// Pods of this test's namespace matching a label selector.
    pub async fn list_pods(&self, selector: &str) -> Result<Vec<Pod>> {
        Ok(self.pods().list(&ListParams::default().labels(selector)).await?.items)
    }

    /// Waits until `count` pods match `selector` and are Running and Ready; returns them.
    pub async fn wait_pods_ready(&self, selector: &str, count: usize) -> Result<Vec<Pod>> {
        wait_for(
            &format!("{count} Running+Ready pods matching {selector} in {}", self.namespace),
            Duration::from_secs(60),
            || async move {
                let pods = self.list_pods(selector).await?;
                let ready: Vec<Pod> = pods
                    .into_iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_is_ready(p))
                    .collect();
                Ok((ready.len() == count).then_some(ready))
            },
        )
        .await
    }

    /// Creates this test's RemediationPolicy (named after the test, labelled for its operator)
    /// after installing the CRD. Unless `spec` says otherwise, the policy selects only this
    /// test's nodes and namespace, so tests running in parallel never see each other's pods.
    pub async fn create_policy(&self, spec: serde_json::Value) -> Result<RemediationPolicy> {
        self.create_named_policy(&self.name, spec).await
    }

    /// Like [`TestEnv::create_policy`], for a second policy of the same test.
    pub async fn create_named_policy(
        &self,
        name: &str,
        mut spec: serde_json::Value,
    ) -> Result<RemediationPolicy> {
        super::crd::install_crd(&self.client).await?;
        let scope = json!({ "matchLabels": { TEST_LABEL: self.name } });
        if let Some(obj) = spec.as_object_mut() {
            obj.entry("nodeSelector").or_insert_with(|| scope.clone());
            obj.entry("namespaceSelector").or_insert_with(|| scope.clone());
        }
        let policy: RemediationPolicy = serde_json::from_value(json!({
            "apiVersion": "remediator.io/v1alpha1",
            "kind": "RemediationPolicy",
            "metadata": { "name": name, "labels": { TEST_LABEL: self.name } },
            "spec": spec,
        }))?;
        self.policies().create(&PostParams::default(), &policy).await.context("creating the policy")
    }

    pub fn policies(&self) -> Api<RemediationPolicy> {
        Api::all(self.client.clone())
    }

    /// Waits until this test's policy status satisfies `check`.
    pub async fn wait_policy<T>(
        &self,
        what: &str,
        timeout: Duration,
        check: impl Fn(&RemediationPolicyStatus) -> Option<T>,
    ) -> Result<T> {
        self.wait_named_policy(&self.name, what, timeout, check).await
    }

    /// Waits until the named policy's status satisfies `check`.
    pub async fn wait_named_policy<T>(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&RemediationPolicyStatus) -> Option<T>,
    ) -> Result<T> {
        let api = self.policies();
        let check = &check;
        wait_for(what, timeout, || {
            let api = api.clone();
            async move { Ok(api.get(name).await?.status.as_ref().and_then(check)) }
        })
        .await
    }

    /// Events about the object of `kind` named `name` with `reason`: a namespaced object of this
    /// test's namespace, or a cluster-scoped one (a policy).
    pub async fn events_about(&self, kind: &str, name: &str, reason: &str) -> Result<Vec<Event>> {
        let events: Api<Event> = Api::all(self.client.clone());
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                let r = e.regarding.as_ref();
                r.and_then(|r| r.kind.as_deref()) == Some(kind)
                    && r.and_then(|r| r.name.as_deref()) == Some(name)
                    && r.and_then(|r| r.namespace.as_deref()).is_none_or(|ns| ns == self.namespace)
                    && e.reason.as_deref() == Some(reason)
            })
            .collect())
    }

    /// Waits until the object of `kind` named `name` has an Event with `reason`; returns them.
    /// The operator writes an action's Event after the action's answer, so a test that saw the
    /// action done waits for its Event rather than reading it once.
    pub async fn wait_event(
        &self,
        kind: &str,
        name: &str,
        reason: &str,
        timeout: Duration,
    ) -> Result<Vec<Event>> {
        wait_for(&format!("a {reason} Event on {kind} {name}"), timeout, || async move {
            let events = self.events_about(kind, name, reason).await?;
            Ok((!events.is_empty()).then_some(events))
        })
        .await
    }

    /// Adds the taint `key[=value]:effect` to the node as an admin would (`kubectl taint`): reads
    /// the node, appends the taint to the others (replacing one with the same key and effect)
    /// and writes it back with the read's resourceVersion, again after a conflict, so a taint
    /// added meanwhile by a controller is never lost.
    pub async fn add_taint(
        &self,
        node: &str,
        key: &str,
        value: Option<&str>,
        effect: &str,
    ) -> Result<()> {
        let nodes = self.nodes();
        for _ in 0..10 {
            let mut n = nodes.get(node).await.with_context(|| format!("reading node {node}"))?;
            let spec = n.spec.get_or_insert_with(Default::default);
            let taints = spec.taints.get_or_insert_with(Vec::new);
            taints.retain(|t| !(t.key == key && t.effect == effect));
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: key.to_string(),
                value: value.map(str::to_string),
                effect: effect.to_string(),
                time_added: None,
            });
            match nodes.replace(node, &PostParams::default(), &n).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e).with_context(|| format!("tainting node {node} {key}")),
            }
        }
        bail!("tainting node {node} with {key}: conflicts on every attempt")
    }

    /// Sets the node's `spec.unschedulable` (cordon / uncordon), as an admin would.
    pub async fn set_unschedulable(&self, node: &str, unschedulable: bool) -> Result<()> {
        let patch = json!({ "spec": { "unschedulable": unschedulable } });
        self.nodes().patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }
}

/// Stops a test-driven node heartbeat when dropped.
pub struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The kubelet a test plays for a node kwok does not manage.
#[derive(Clone, Debug)]
struct TestKubelet {
    /// The Ready condition's status: `True` or `False`.
    ready: String,
    /// How far its clock is off ours (negative: behind).
    skew: jiff::SignedDuration,
    /// Its Lease's `leaseDurationSeconds`.
    lease_seconds: u32,
    /// The Ready condition's `lastTransitionTime` (its clock), if it sets one.
    transition: Option<jiff::Timestamp>,
}

/// Heartbeats `node` as `kubelet` says every 2 s until the returned guard is dropped. Errors
/// are ignored and a beat that hangs (a stalled control plane) is given up after 4 s, so the
/// heartbeat outlives a stall like a real kubelet's and a slow answer delays it by one beat at
/// most.
fn spawn_heartbeat(
    client: kube::Client,
    node: String,
    uid: String,
    kubelet: TestKubelet,
) -> Heartbeat {
    Heartbeat(tokio::spawn(async move {
        let mut beats = tokio::time::interval(Duration::from_secs(2));
        beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            beats.tick().await;
            let beat = heartbeat(&client, &node, &uid, &kubelet);
            let _ = tokio::time::timeout(Duration::from_secs(4), beat).await;
        }
    }))
}

/// One heartbeat of a node without kubelet: its Ready condition and a renewed Lease, both
/// stamped with the kubelet's (possibly skewed) clock. The Lease is the kubelet's own: in
/// kube-node-lease, named after the node, held by it and owned by the Node object.
async fn heartbeat(
    client: &kube::Client,
    node: &str,
    node_uid: &str,
    kubelet: &TestKubelet,
) -> Result<()> {
    let now = jiff::Timestamp::now() + kubelet.skew;
    let (reason, message) = if kubelet.ready == "True" {
        ("KubeletReady", "heartbeat from the test")
    } else {
        ("KubeletNotReady", "container runtime is down")
    };
    let mut ready = json!({
        "type": "Ready", "status": kubelet.ready, "reason": reason,
        "message": message, "lastHeartbeatTime": now.to_string(),
    });
    if let Some(transition) = kubelet.transition {
        ready["lastTransitionTime"] = json!(transition.to_string());
    }
    let status = json!({ "status": { "conditions": [ready] } });
    Api::<Node>::all(client.clone())
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&status))
        .await?;
    renew_lease(client, node, node_uid, kubelet.lease_seconds, now).await
}

/// Renews the Lease of `node` (node UID `node_uid`) as its kubelet does, created if it is gone:
/// in kube-node-lease, named after the node, held by it and owned by the Node object, declaring
/// `lease_seconds` (`leaseDurationSeconds`) and stamped `renewed` (the kubelet's clock).
pub async fn renew_lease(
    client: &kube::Client,
    node: &str,
    node_uid: &str,
    lease_seconds: u32,
    renewed: jiff::Timestamp,
) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": node, "namespace": "kube-node-lease",
            "ownerReferences": [{ "apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid }],
        },
        "spec": { "holderIdentity": node, "leaseDurationSeconds": lease_seconds,
                  "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string() },
    });
    leases.patch(node, &PatchParams::apply("e2e-heartbeat").force(), &Patch::Apply(&lease)).await?;
    Ok(())
}

/// The status of a node's Ready condition, if it has one.
pub fn node_ready_status(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status.clone())
}

/// Whether the pod is Running with condition Ready=True.
pub fn pod_is_ready(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else { return false };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .as_ref()
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls `check` every 250 ms until it yields `Some`, failing after `timeout` with `what`.
/// Errors from `check` are retried (the API may be briefly unavailable) and the last one is
/// reported on timeout.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            match last_error {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what} (last error: {e:#})")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Checks every 250 ms for `duration` that `check` keeps returning `Ok(())`; the first
/// violation fails with its message. This is how a test proves something does *not* happen
/// within a bounded window.
pub async fn holds_for<F, Fut>(what: &str, duration: Duration, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let deadline = Instant::now() + duration;
    while Instant::now() < deadline {
        check().await.with_context(|| format!("expected {what} for {duration:?}"))?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(())
}

impl TestEnv {
    /// Creates a kwok-managed node `<test>-<suffix>` with this test's label, the kwok alive
    /// label and `labels` (and no zone label unless `labels` has one), and waits until kwok has
    /// made it Ready. Returns its name. For nodes a test labels its own way, e.g. with only the
    /// deprecated zone label `failure-domain.beta.kubernetes.io/zone`.
    pub async fn add_node_with_labels(
        &self,
        suffix: &str,
        labels: &[(&str, &str)],
    ) -> Result<String> {
        let name = format!("{}-{suffix}", self.name);
        let mut all = serde_json::Map::new();
        for (key, value) in [
            (ALIVE_LABEL, "true"),
            (HOSTNAME_LABEL, name.as_str()),
            (TEST_LABEL, self.name.as_str()),
            ("kubernetes.io/os", "linux"),
            ("type", "kwok"),
        ]
        .into_iter()
        .chain(labels.iter().copied())
        {
            all.insert(key.to_string(), json!(value));
        }
        let node: Node = serde_json::from_value(json!({
            "metadata": {
                "name": name,
                "labels": all,
                "annotations": { "kwok.x-k8s.io/node": "fake" },
            },
            "status": {
                "capacity": { "cpu": "32", "memory": "256Gi", "pods": "110" },
                "allocatable": { "cpu": "32", "memory": "256Gi", "pods": "110" },
            },
        }))?;
        self.nodes()
            .create(&PostParams::default(), &node)
            .await
            .with_context(|| format!("creating node {name}"))?;
        self.wait_node_ready(&name, "True").await?;
        Ok(name)
    }

    /// Waits until the node is Ready and carries no taint of the node lifecycle controller's
    /// (`node.kubernetes.io/...`): a node created without conditions may be tainted not-ready
    /// until the controller's pass after the Ready heartbeat (seconds, under load), and a test
    /// that counts on the scheduler placing pods there (a spread with `nodeTaintsPolicy:
    /// Honor`) must wait for it.
    pub async fn wait_node_schedulable(&self, node: &str) -> Result<Node> {
        let nodes = self.nodes();
        wait_for(&format!("node {node} Ready and untainted"), Duration::from_secs(60), || {
            let nodes = nodes.clone();
            async move {
                let n = nodes.get_opt(node).await?;
                Ok(n.filter(|n| {
                    let tainted =
                        n.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some_and(|t| {
                            t.iter().any(|t| t.key.starts_with("node.kubernetes.io/"))
                        });
                    node_ready_status(n).as_deref() == Some("True") && !tainted
                }))
            }
        })
        .await
    }
}
