//! Request shapes of the writer against a mock API server: every request is checked for its
//! method, path and body, and anything unexpected fails the test.

use std::collections::BTreeSet;
use std::time::Duration;

use http::{Method, Request, Response};
use jiff::Timestamp;
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

use super::*;
use crate::core::ahead::{NOTHING_AHEAD, RecordKey};
use crate::core::{Action, ForceDelete, PodTarget};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn mock() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

const RENEWED: &str = "2026-01-01T00:00:00.000000Z";

fn policy(mode: &str) -> RemediationPolicy {
    serde_json::from_value(json!({
        "apiVersion": "remediator.io/v1alpha1",
        "kind": "RemediationPolicy",
        "metadata": { "name": "p", "uid": "policy-uid", "generation": 1 },
        "spec": { "mode": mode },
    }))
    .expect("valid policy")
}

fn validated(policy: &RemediationPolicy) -> ValidatedPolicy {
    crate::core::validate(&policy.spec).expect("valid spec")
}

/// What the mock API server holds.
#[derive(Clone, Copy)]
struct World {
    pod_uid: &'static str,
    lease_renewed: &'static str,
    policy_mode: &'static str,
    /// The pod carries `DisruptionTarget` True and the phase Failed already (a run that stopped
    /// between its status write and its DELETE).
    disrupted: bool,
    /// `web-0` is Failed with this `status.reason` (not Terminating) rather than Terminating.
    failed: Option<&'static str>,
    /// `web-0` is Running (not Terminating) with this `Ready` condition status.
    ready: Option<&'static str>,
    /// The API server refuses every write of the policy's status (500).
    status_fails: bool,
}

const DEAD: World = World {
    pod_uid: "uid-1",
    lease_renewed: RENEWED,
    policy_mode: "Enforce",
    disrupted: false,
    failed: None,
    ready: None,
    status_fails: false,
};

/// `web-0` as the world holds it.
fn world_pod(world: World) -> Value {
    if let Some(reason) = world.failed {
        return failed_pod(world.pod_uid, reason);
    }
    if let Some(ready) = world.ready {
        let mut pod = pod(world.pod_uid);
        pod["metadata"]["deletionTimestamp"] = Value::Null;
        pod["status"] = json!({ "phase": "Running", "conditions": [
            { "type": "Ready", "status": ready },
            { "type": "ContainersReady", "status": "True" },
        ]});
        return pod;
    }
    let mut pod = pod(world.pod_uid);
    if world.disrupted {
        pod["status"] = json!({ "phase": "Failed", "conditions": [
            { "type": "DisruptionTarget", "status": "True", "reason": "DeletionByKubeRemediator" },
        ]});
    }
    pod
}

fn lease(renewed: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": "n1", "namespace": "kube-node-lease" },
        "spec": { "renewTime": renewed },
    })
}

fn action() -> Action {
    Action::ForceDelete(ForceDelete {
        pod: PodTarget {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "uid-1".into(),
            node: "n1".into(),
            owner: None,
            reason: "node n1 dead".into(),
            threshold: Timestamp::UNIX_EPOCH,
            shutdown_seen: None,
        },
        blocks_rollout: None,
        lease_renewed: Some(RENEWED.parse().expect("ts")),
        fencing_required: None,
        live: None,
        // Watched long ago: dead by the kernel's clock whenever the test runs.
        death: Some(crate::core::DeathEvidence::Watched {
            lease_renewed: RENEWED.parse().expect("ts"),
            lease_seen: Timestamp::UNIX_EPOCH,
            not_ready_since: Timestamp::UNIX_EPOCH,
            lease_duration_s: Some(40),
            window_start: Timestamp::UNIX_EPOCH,
        }),
    })
}

fn pod(uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "web-0", "namespace": "ns", "uid": uid, "resourceVersion": "7",
                      "deletionTimestamp": "2026-01-01T00:00:00Z" },
        "spec": { "nodeName": "n1", "containers": [] },
    })
}

/// `web-<i>` on n1, Terminating; `web-0` has the UID `uid`, the others `uid-<i + 1>`.
fn named_pod(i: usize, uid: &str) -> Value {
    let mut pod = pod(uid);
    pod["metadata"]["name"] = json!(format!("web-{i}"));
    if i > 0 {
        pod["metadata"]["uid"] = json!(format!("uid-{}", i + 1));
    }
    pod
}

/// `web-0` on n1, left Failed with `status.reason` `reason`.
fn failed_pod(uid: &str, reason: &str) -> Value {
    let mut pod = pod(uid);
    pod["metadata"]["deletionTimestamp"] = Value::Null;
    pod["status"] = json!({ "phase": "Failed", "reason": reason });
    pod
}

fn dead_node() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node", "metadata": { "name": "n1" },
        "status": { "conditions": [{ "type": "Ready", "status": "Unknown" }] },
    })
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, body: Value) {
    let bytes = serde_json::to_vec(&body).expect("json");
    send.send_response(Response::builder().body(Body::from(bytes)).expect("response"));
}

async fn body_json(req: Request<Body>) -> Value {
    use http_body_util::BodyExt;
    let bytes = req.into_body().collect().await.expect("body").to_bytes();
    serde_json::from_slice(&bytes).unwrap_or(Value::Null)
}

/// Serves the mock: answers the last look's GETs (pod, node, Lease, policy) from `world`,
/// records every request, answers Events with an echo. Returns the requests as (method,
/// path+query, body).
async fn serve(mut handle: Handle, world: World) -> Vec<(Method, String, Value)> {
    let mut seen = Vec::new();
    while let Ok(Some((req, send))) =
        tokio::time::timeout(Duration::from_millis(300), handle.next_request()).await
    {
        let method = req.method().clone();
        let uri = req.uri().to_string();
        let body = body_json(req).await;
        if world.status_fails
            && method == Method::PATCH
            && uri.contains("/remediationpolicies/p/status")
        {
            seen.push((method, uri, body));
            let status = json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "message": "etcdserver: request timed out", "code": 500 });
            let bytes = serde_json::to_vec(&status).expect("json");
            send.send_response(
                Response::builder().status(500).body(Body::from(bytes)).expect("response"),
            );
            continue;
        }
        let reply = match (method.as_str(), uri.as_str()) {
            ("GET", u) if u.starts_with("/api/v1/namespaces/ns/pods/web-0") => world_pod(world),
            ("GET", u) if u.starts_with("/api/v1/pods?") => json!({
                "apiVersion": "v1", "kind": "PodList", "metadata": {},
                "items": (0..5).map(|i| named_pod(i, world.pod_uid)).collect::<Vec<_>>(),
            }),
            ("GET", u) if u.starts_with("/api/v1/nodes/n1") => dead_node(),
            ("GET", u)
                if u.starts_with(
                    "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1",
                ) =>
            {
                lease(world.lease_renewed)
            }
            ("GET", u) if u.starts_with("/apis/remediator.io/v1alpha1/remediationpolicies/p") => {
                serde_json::to_value(policy(world.policy_mode)).expect("json")
            }
            ("DELETE", _) => pod(world.pod_uid),
            ("PATCH", u) if u.starts_with("/api/v1/namespaces/ns/pods/") => pod(world.pod_uid),
            ("PATCH", u)
                if u.starts_with("/apis/remediator.io/v1alpha1/remediationpolicies/p/status") =>
            {
                serde_json::to_value(policy(world.policy_mode)).expect("json")
            }
            (_, u) if u.contains("/events") => body.clone(),
            _ => json!({}),
        };
        seen.push((method, uri, body));
        respond(send, reply);
    }
    seen
}

#[tokio::test]
async fn enforce_deletes_with_grace_zero_and_uid_precondition() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, DEAD));
    let writer = Writer::new(client, Arc::new(Metrics::new()), None);
    let p = policy("Enforce");
    let outcomes = writer.execute(&p, &validated(&p), &[action()], Timestamp::now).await;
    let seen = server.await.expect("mock server");

    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].record.result, ActionResult::Done);
    let deletes: Vec<_> = seen.iter().filter(|(m, _, _)| m == Method::DELETE).collect();
    assert_eq!(deletes.len(), 1, "{seen:?}");
    let (_, uri, body) = deletes[0];
    assert!(uri.starts_with("/api/v1/namespaces/ns/pods/web-0"), "{uri}");
    assert_eq!(body["gracePeriodSeconds"], 0, "{body}");
    assert_eq!(body["preconditions"]["uid"], "uid-1", "{body}");
    // Before it, one status write saying why the pod goes (as PodGC does: the phase Failed, no
    // kubelet being there to report it), on the pod exactly as the last look read it.
    let writes: Vec<_> = seen.iter().filter(|(m, _, _)| m != Method::GET).collect();
    let (method, uri, status) = writes[0];
    assert_eq!(
        (method, uri.split('?').next()),
        (&Method::PATCH, Some("/api/v1/namespaces/ns/pods/web-0/status")),
        "{seen:?}"
    );
    assert_eq!(writes[1].0, Method::DELETE, "{seen:?}");
    assert_eq!(status["metadata"]["uid"], "uid-1", "{status}");
    assert_eq!(status["metadata"]["resourceVersion"], "7", "{status}");
    assert_eq!(status["status"]["phase"], "Failed", "{status}");
    let condition = &status["status"]["conditions"][0];
    assert_eq!(condition["type"], "DisruptionTarget", "{status}");
    assert_eq!(condition["status"], "True", "{status}");
    assert_eq!(condition["reason"], "DeletionByKubeRemediator", "{status}");
    assert!(condition["message"].as_str().is_some_and(|m| m.contains("policy p")), "{status}");
    // The pod, its node, the node's Lease and the policy were re-read before the DELETE.
    let first_delete = seen.iter().position(|(m, _, _)| m == Method::DELETE).expect("delete");
    let reads: Vec<&str> = seen[..first_delete]
        .iter()
        .filter(|(m, _, _)| m == Method::GET)
        .map(|(_, u, _)| u.as_str())
        .collect();
    for wanted in [
        "/pods/web-0",
        "/nodes/n1",
        "/namespaces/kube-node-lease/leases/n1",
        "/remediationpolicies/p",
    ] {
        assert!(reads.iter().any(|u| u.contains(wanted)), "{wanted} not read: {reads:?}");
    }
    // Events on the pod and on the policy.
    let events: Vec<_> =
        seen.iter().filter(|(m, u, _)| m == Method::POST && u.contains("/events")).collect();
    assert_eq!(events.len(), 2, "{seen:?}");
    assert_eq!(events[0].2["reason"], "ForceDeleted");
    assert_eq!(events[0].2["regarding"]["uid"], "uid-1");
}

#[tokio::test]
async fn a_pod_that_says_why_it_goes_already_is_only_deleted() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, World { disrupted: true, ..DEAD }));
    let writer = Writer::new(client, Arc::new(Metrics::new()), None);
    let p = policy("Enforce");
    let outcomes = writer.execute(&p, &validated(&p), &[action()], Timestamp::now).await;
    let seen = server.await.expect("mock server");

    assert_eq!(outcomes[0].record.result, ActionResult::Done);
    let writes: Vec<_> =
        seen.iter().filter(|(m, u, _)| m != Method::GET && !u.contains("/events")).collect();
    assert_eq!(writes.len(), 1, "{seen:?}");
    assert_eq!(writes[0].0, Method::DELETE, "{seen:?}");
}

#[tokio::test]
async fn the_last_look_skips_when_anything_changed_since_the_plan() {
    let table = [
        ("a replacement with the same name", World { pod_uid: "uid-2", ..DEAD }, "replaced it"),
        (
            "a Lease renewed since the plan",
            World { lease_renewed: "2026-01-01T00:00:02.000000Z", ..DEAD },
            "its kubelet is alive",
        ),
        ("a policy switched to DryRun", World { policy_mode: "DryRun", ..DEAD }, "in DryRun now"),
    ];
    for (case, world, why) in table {
        let (client, handle) = mock();
        let server = tokio::spawn(serve(handle, world));
        let writer = Writer::new(client, Arc::new(Metrics::new()), None);
        let p = policy("Enforce");
        let outcomes = writer.execute(&p, &validated(&p), &[action()], Timestamp::now).await;
        let seen = server.await.expect("mock server");

        assert_eq!(outcomes[0].record.result, ActionResult::Skipped, "{case}");
        let detail = outcomes[0].record.detail.clone().unwrap_or_default();
        assert!(detail.contains(why), "{case}: {detail}");
        assert!(
            seen.iter().all(|(m, _, _)| m == Method::GET || m == Method::POST),
            "{case}: {seen:?}"
        );
    }
}

#[tokio::test]
async fn dry_run_sends_nothing_but_events() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, DEAD));
    let metrics = Arc::new(Metrics::new());
    let writer = Writer::new(client, metrics.clone(), None);
    let p = policy("DryRun");
    let outcomes = writer.execute(&p, &validated(&p), &[action()], Timestamp::now).await;
    let seen = server.await.expect("mock server");

    assert_eq!(outcomes[0].record.result, ActionResult::WouldAct);
    assert_eq!(outcomes[0].record.mode, Mode::DryRun);
    for (method, uri, _) in &seen {
        assert!(method == Method::POST && uri.contains("/events"), "DryRun sent {method} {uri}");
    }
    assert_eq!(seen.len(), 2, "an Event on the pod and one on the policy: {seen:?}");
    assert!(metrics.encode().contains(r#"mode="DryRun",result="WouldAct"} 1"#));
}

/// A reconcile's commit of `actions` alone, on a policy with no status yet.
fn commit_of<'a>(
    p: &'a RemediationPolicy,
    v: &'a ValidatedPolicy,
    actions: &'a [Action],
) -> Commit<'a> {
    Commit {
        policy: p,
        validated: Some(v),
        actions,
        notices: Vec::new(),
        fencing_notices: Vec::new(),
        pod_notices: Vec::new(),
        node_notices: Vec::new(),
        reports_beyond_budget: None,
        status: RemediationPolicyStatus::default(),
        previous: None,
        carried: Vec::new(),
        resolved: Vec::new(),
        recorded_ahead: &NOTHING_AHEAD,
        early_looks: &[],
    }
}

#[tokio::test]
async fn enforce_records_each_action_before_its_request() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, DEAD));
    let writer = Writer::new(client, Arc::new(Metrics::new()), None);
    let p = policy("Enforce");
    let v = validated(&p);
    let committed = writer.commit(commit_of(&p, &v, &[action()])).await;
    let seen = server.await.expect("mock server");

    assert_eq!(committed.outcomes[0].record.result, ActionResult::Done);
    let status_patches: Vec<(usize, &Value)> = seen
        .iter()
        .enumerate()
        .filter(|(_, (m, u, _))| m == Method::PATCH && u.contains("/remediationpolicies/p/status"))
        .map(|(i, (_, _, body))| (i, body))
        .collect();
    let delete = seen.iter().position(|(m, _, _)| m == Method::DELETE).expect("a DELETE");
    assert_eq!(status_patches.len(), 2, "{seen:?}");
    let result = |body: &Value| body["status"]["recentActions"][0]["result"].clone();
    // Pending before the DELETE, Done (replacing it) after.
    assert!(status_patches[0].0 < delete, "{seen:?}");
    assert_eq!(result(status_patches[0].1), "Pending");
    assert!(status_patches[1].0 > delete, "{seen:?}");
    assert_eq!(result(status_patches[1].1), "Done");
    assert_eq!(status_patches[1].1["status"]["recentActions"].as_array().map(Vec::len), Some(1));
    // The last look took the policy from the answer to the Pending write, sent just before; it
    // read the pod, the node and its Lease.
    let reads: Vec<&str> = seen[..delete]
        .iter()
        .filter(|(m, _, _)| m == Method::GET)
        .map(|(_, u, _)| u.as_str())
        .collect();
    assert!(!reads.iter().any(|u| u.contains("/remediationpolicies/")), "{reads:?}");
    for wanted in ["/pods/web-0", "/nodes/n1", "/leases/n1"] {
        assert!(reads.iter().any(|u| u.contains(wanted)), "{wanted} not read: {reads:?}");
    }
}

/// An action whose `Pending` record was stored ahead of its due instant is sent without another
/// record first: its last look's reads (the policy's too) go out at once, then the DELETE, then
/// the status with its outcome. An action without one is recorded first, as always.
#[tokio::test]
async fn an_action_recorded_ahead_is_sent_without_another_record() {
    let p = policy("Enforce");
    let v = validated(&p);
    for (case, ahead, records_first) in
        [("recorded ahead", true, false), ("control: not recorded ahead", false, true)]
    {
        let (client, handle) = mock();
        let server = tokio::spawn(serve(handle, DEAD));
        let writer = Writer::new(client, Arc::new(Metrics::new()), None);
        let actions = [action()];
        let stored: BTreeSet<RecordKey> =
            actions.iter().filter(|_| ahead).map(|a| (a.uid().to_string(), a.kind())).collect();
        let commit = Commit { recorded_ahead: &stored, ..commit_of(&p, &v, &actions) };
        let committed = writer.commit(commit).await;
        let seen = server.await.expect("mock server");
        assert_eq!(committed.outcomes[0].record.result, ActionResult::Done, "{case}");
        let delete = seen.iter().position(|(m, _, _)| m == Method::DELETE).expect("a DELETE");
        let status_write =
            |(m, u, _): &(Method, String, Value)| m == Method::PATCH && u.contains("/p/status");
        let before = seen[..delete].iter().filter(|r| status_write(r)).count();
        let after = seen[delete..].iter().filter(|r| status_write(r)).count();
        assert_eq!((before > 0, after), (records_first, 1), "{case}: {seen:?}");
        let policy_read = |(m, u, _): &(Method, String, Value)| {
            m == Method::GET && u.contains("/remediationpolicies/p")
        };
        // Without a write to answer with the policy, the last look reads it.
        assert_eq!(seen[..delete].iter().any(policy_read), ahead, "{case}: {seen:?}");
    }
}

/// Once the status storing a force delete's record ahead is written, its last look's reads go
/// out LOOK_EARLY before it is due, and the plan made at the due instant uses them (no read of
/// its own) while they are younger than SHARED_LOOK_FOR; older, it reads afresh.
#[tokio::test]
async fn reads_sent_early_serve_the_look_at_the_due_instant_while_young() {
    let p = policy("Enforce");
    let v = validated(&p);
    let target = match action() {
        Action::ForceDelete(fd) => fd.pod,
        _ => unreachable!("a force delete"),
    };
    let lead = Duration::from_millis(80);
    for (case, late, reads_each) in [
        ("at the due instant", Duration::ZERO, 1),
        ("control: the look later than SHARED_LOOK_FOR", SHARED_LOOK_FOR + lead, 2),
    ] {
        let (client, handle) = mock();
        let server = tokio::spawn(serve(handle, DEAD));
        let writer = Writer::new(client, Arc::new(Metrics::new()), None);
        let due = crate::clock::now() + jiff::SignedDuration::try_from(lead).expect("lead");
        let early = [(due, target.clone())];
        let committed =
            writer.commit(Commit { early_looks: &early, ..commit_of(&p, &v, &[]) }).await;
        assert!(matches!(committed.status, Ok(Some(_))), "{case}: the status is written");
        tokio::time::sleep(lead + late).await;
        let outcomes = writer.execute(&p, &v, &[action()], Timestamp::now).await;
        drop(writer);
        let seen = server.await.expect("mock server");
        assert_eq!(outcomes[0].record.result, ActionResult::Done, "{case}: {outcomes:?}");
        let delete = seen.iter().position(|(m, _, _)| m == Method::DELETE).expect("a DELETE");
        for wanted in ["/pods/web-0", "/nodes/n1", "/leases/n1", "/remediationpolicies/p"] {
            let reads = seen[..delete]
                .iter()
                .filter(|(m, u, _)| {
                    m == Method::GET && u.contains(wanted) && !u.contains("/status")
                })
                .count();
            assert_eq!(reads, reads_each, "{case}: {wanted} read {reads} times: {seen:?}");
        }
    }
}

#[tokio::test]
async fn force_deletes_on_one_node_share_their_reads_and_send_events_after_the_deletes() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, DEAD));
    let writer = Writer::new(client, Arc::new(Metrics::new()), None);
    let p = policy("Enforce");
    let actions: Vec<Action> = (0..5)
        .map(|i| match action() {
            Action::ForceDelete(fd) => Action::ForceDelete(ForceDelete {
                pod: PodTarget {
                    name: format!("web-{i}"),
                    uid: format!("uid-{}", i + 1),
                    ..fd.pod
                },
                ..fd
            }),
            other => other,
        })
        .collect();
    let outcomes = writer.execute(&p, &validated(&p), &actions, Timestamp::now).await;
    let seen = server.await.expect("mock server");

    let results: Vec<_> = outcomes.iter().map(|o| o.record.result).collect();
    assert_eq!(results, vec![ActionResult::Done; 5], "{outcomes:?}");
    let count =
        |what: &dyn Fn(&Method, &str) -> bool| seen.iter().filter(|(m, u, _)| what(m, u)).count();
    // One LIST of the node's pods instead of five GETs; the node, its Lease and the policy read
    // once for all five (the mock answers within SHARED_LOOK_FOR).
    assert_eq!(
        count(&|m, u| m == Method::GET
            && u.starts_with("/api/v1/pods?")
            && u.contains("fieldSelector=spec.nodeName%3Dn1")),
        1,
        "{seen:?}"
    );
    assert_eq!(count(&|m, u| m == Method::GET && u.contains("/namespaces/ns/pods/")), 0);
    for read in ["/nodes/n1", "/leases/n1", "/remediationpolicies/p"] {
        assert_eq!(count(&|m, u| m == Method::GET && u.contains(read)), 1, "{read}: {seen:?}");
    }
    assert_eq!(count(&|m, _| m == Method::DELETE), 5, "{seen:?}");
    assert_eq!(count(&|m, u| m == Method::PATCH && u.contains("/pods/")), 5, "{seen:?}");
    // Every Event (two per pod) after the last DELETE.
    let last_delete = seen.iter().rposition(|(m, _, _)| m == Method::DELETE).expect("a DELETE");
    let events: Vec<usize> = seen
        .iter()
        .enumerate()
        .filter(|(_, (m, u, _))| m == Method::POST && u.contains("/events"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(events.len(), 10, "{seen:?}");
    assert!(events.iter().all(|&i| i > last_delete), "{seen:?}");
}

/// A pod left Failed by a graceful shutdown, seen so long ago: the rule's policy and a pod
/// still Failed so in the fresh read get a normal DELETE (no grace period given) with a UID
/// precondition; a pod Failed for another reason in the fresh read gets none.
#[tokio::test]
async fn a_shutdown_pod_is_deleted_normally_with_a_uid_precondition() {
    let delete = Action::DeleteShutdownPod(crate::core::DeleteShutdownPod {
        pod: PodTarget {
            namespace: "ns".into(),
            name: "web-0".into(),
            uid: "uid-1".into(),
            node: "n1".into(),
            owner: None,
            reason: "Failed with reason Terminated".into(),
            threshold: Timestamp::UNIX_EPOCH,
            shutdown_seen: None,
        },
        shutdown_reason: "Terminated".into(),
        seen: Timestamp::UNIX_EPOCH,
    });
    let mut p = policy("Enforce");
    p.spec.failed_by_shutdown.enabled = true;
    for (case, reason, want, deletes) in [
        ("still Failed by the shutdown", "Terminated", ActionResult::Done, 1),
        ("Failed for another reason now", "Evicted", ActionResult::Skipped, 0),
    ] {
        let (client, handle) = mock();
        let world = World { failed: Some(reason), ..DEAD };
        let server = tokio::spawn(serve(handle, world));
        let writer = Writer::new(client, Arc::new(Metrics::new()), None);
        let outcomes =
            writer.execute(&p, &validated(&p), std::slice::from_ref(&delete), Timestamp::now).await;
        let seen = server.await.expect("mock server");
        assert_eq!(outcomes[0].record.result, want, "{case}: {outcomes:?}");
        let sent: Vec<_> = seen.iter().filter(|(m, _, _)| m == Method::DELETE).collect();
        assert_eq!(sent.len(), deletes, "{case}: {seen:?}");
        if let Some((_, uri, body)) = sent.first() {
            assert!(uri.starts_with("/api/v1/namespaces/ns/pods/web-0"), "{uri}");
            assert_eq!(body["preconditions"]["uid"], "uid-1", "{body}");
            assert!(body.get("gracePeriodSeconds").is_none(), "a normal delete: {body}");
        }
    }
}

/// A pod left Ready=True on a dead node is marked not Ready by one strategic merge patch of its
/// status: the Ready condition False with our reason, carrying the UID and resourceVersion of
/// the pod the last look read, nothing else (ContainersReady stays the kubelet's); a pod not
/// Ready in the fresh read gets no request.
#[tokio::test]
async fn a_pod_left_ready_is_marked_not_ready_through_its_status_on_the_pod_as_read() {
    let Action::ForceDelete(fd) = action() else { panic!("a force delete") };
    let mark = Action::MarkNotReady(crate::core::MarkNotReady {
        pod: PodTarget { reason: "left Ready on dead node n1".into(), ..fd.pod },
        lease_renewed: fd.lease_renewed,
        death: fd.death,
    });
    let mut p = policy("Enforce");
    p.spec.ready_on_dead_node.mark_not_ready = true;
    for (case, ready, want, patches) in [
        ("Ready in the fresh read", "True", ActionResult::Done, 1),
        ("not Ready in the fresh read", "False", ActionResult::Skipped, 0),
    ] {
        let (client, handle) = mock();
        let world = World { ready: Some(ready), ..DEAD };
        let server = tokio::spawn(serve(handle, world));
        let writer = Writer::new(client, Arc::new(Metrics::new()), None);
        let outcomes =
            writer.execute(&p, &validated(&p), std::slice::from_ref(&mark), Timestamp::now).await;
        let seen = server.await.expect("mock server");
        assert_eq!(outcomes[0].record.result, want, "{case}: {outcomes:?}");
        assert!(!seen.iter().any(|(m, _, _)| m == Method::DELETE), "{case}: {seen:?}");
        let sent: Vec<_> = seen
            .iter()
            .filter(|(m, u, _)| m == Method::PATCH && u.starts_with("/api/v1/namespaces/ns/pods/"))
            .collect();
        assert_eq!(sent.len(), patches, "{case}: {seen:?}");
        if let Some((_, uri, body)) = sent.first() {
            assert!(uri.starts_with("/api/v1/namespaces/ns/pods/web-0/status"), "{uri}");
            assert_eq!(body["metadata"]["uid"], "uid-1", "{body}");
            assert_eq!(body["metadata"]["resourceVersion"], "7", "{body}");
            let conditions = body["status"]["conditions"].as_array().expect("conditions");
            assert_eq!(conditions.len(), 1, "{body}");
            assert_eq!(conditions[0]["type"], "Ready", "{body}");
            assert_eq!(conditions[0]["status"], "False", "{body}");
            assert_eq!(conditions[0]["reason"], crate::core::NOT_READY_REASON, "{body}");
            assert!(body["status"].get("phase").is_none(), "the phase stays: {body}");
        }
    }
}

/// The last looks' reads go out while the `Pending` records are written, but no request: when
/// the records cannot be stored, nothing is sent and nothing is recorded.
#[tokio::test]
async fn nothing_is_sent_when_the_pending_records_cannot_be_written() {
    let (client, handle) = mock();
    let server = tokio::spawn(serve(handle, World { status_fails: true, ..DEAD }));
    let writer = Writer::new(client, Arc::new(Metrics::new()), None);
    let p = policy("Enforce");
    let v = validated(&p);
    let committed = writer.commit(commit_of(&p, &v, &[action()])).await;
    let seen = server.await.expect("mock server");
    assert!(committed.outcomes.is_empty(), "{:?}", committed.outcomes);
    assert!(committed.status.is_err(), "the status write failed");
    let writes: Vec<_> = seen
        .iter()
        .filter(|(m, u, _)| m != Method::GET && !u.contains("/remediationpolicies/p/status"))
        .collect();
    assert!(writes.is_empty(), "sent without a record: {writes:?}");
    // The reads went out meanwhile.
    assert!(seen.iter().any(|(m, u, _)| m == Method::GET && u.contains("/pods/web-0")), "{seen:?}");
}
