//! The transcoder on frames built from its own messages: the framing, the envelope, each event
//! type and the JSON kube decodes. That the messages' tags are Kubernetes' own is proven
//! against a real API server (`pb-pods-as-json` in the end-to-end tests).

use http::{Method, Request};
use http_body_util::BodyExt;

use super::*;
use crate::adapters::WatchedPod;

fn request(method: Method, uri: &str) -> Request<()> {
    Request::builder().method(method).uri(uri).body(()).expect("a request")
}

#[test]
fn only_the_cluster_wide_pod_watch_and_lists_ask_for_protobuf() {
    let table = [
        (Method::GET, "/api/v1/pods?watch=true&timeoutSeconds=55", Some(WATCH_PROTOBUF)),
        (Method::GET, "/api/v1/pods?timeoutSeconds=55&watch=1", Some(WATCH_PROTOBUF)),
        (Method::GET, "/api/v1/pods?limit=100", Some(LIST_PROTOBUF)),
        (Method::GET, "/api/v1/pods?fieldSelector=spec.nodeName%3Dn", Some(LIST_PROTOBUF)),
        (Method::GET, "/api/v1/pods", Some(LIST_PROTOBUF)),
        (Method::GET, "/api/v1/namespaces/a/pods?watch=true", None),
        (Method::GET, "/api/v1/namespaces/a/pods/p", None),
        (Method::GET, "/api/v1/nodes?watch=true", None),
        (Method::DELETE, "/api/v1/pods?watch=true", None),
        (Method::POST, "/api/v1/pods", None),
    ];
    for (method, uri, want) in table {
        let asked = ask_protobuf(request(method.clone(), uri));
        let accept = asked.headers().get(ACCEPT).map(|v| v.to_str().expect("ascii"));
        assert_eq!(accept, want, "{method} {uri}");
    }
}

/// An object encoded whole: magic, then `runtime.Unknown`.
fn whole(kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown =
        Unknown { type_meta: Some(TypeMeta { api_version: "v1".into(), kind: kind.into() }), raw };
    [MAGIC.to_vec(), unknown.encode_to_vec()].concat()
}

/// One frame of a watch stream.
fn frame(kind: &str, object: Vec<u8>) -> Vec<u8> {
    let event = WatchEvent { kind: kind.into(), object: Some(RawExtension { raw: object }) };
    let bytes = event.encode_to_vec();
    [(bytes.len() as u32).to_be_bytes().to_vec(), bytes].concat()
}

fn time(rfc3339: &str) -> Time {
    let t: jiff::Timestamp = rfc3339.parse().expect("a time");
    Time { seconds: t.as_second(), nanos: 0 }
}

fn held_pod() -> Pod {
    let annotations =
        [(MIRROR_ANNOTATION, "x"), ("unread.example.com/big", "y"), (EXCLUDE_ANNOTATION, "true")];
    Pod {
        metadata: Some(ObjectMeta {
            name: "held".into(),
            namespace: "a".into(),
            uid: "u-1".into(),
            resource_version: "42".into(),
            deletion_timestamp: Some(time("2026-11-28T01:02:03Z")),
            deletion_grace_period_seconds: Some(30),
            labels: [("app".to_string(), "pb".to_string())].into(),
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            owner_references: vec![OwnerReference {
                kind: "StatefulSet".into(),
                name: "web".into(),
                uid: "s-1".into(),
                api_version: "apps/v1".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }],
            finalizers: vec!["example.com/hold".into()],
        }),
        spec: Some(PodSpec {
            volumes: vec![
                Volume {
                    name: "data".into(),
                    source: Some(VolumeSource {
                        persistent_volume_claim: Some(ClaimSource { claim_name: "data-0".into() }),
                        ..Default::default()
                    }),
                },
                Volume {
                    name: "disk".into(),
                    source: Some(VolumeSource { rbd: Some(Present {}), ..Default::default() }),
                },
            ],
            node_name: "n1".into(),
            init_containers: vec![Container {
                name: "sidecar".into(),
                restart_policy: "Always".into(),
            }],
            readiness_gates: vec![ReadinessGate { condition_type: "example.com/gate".into() }],
        }),
        status: Some(PodStatus {
            phase: "Running".into(),
            conditions: vec![PodCondition {
                kind: "Ready".into(),
                status: "False".into(),
                last_transition_time: Some(time("2026-11-28T01:00:00Z")),
                reason: String::new(),
            }],
            reason: String::new(),
            container_statuses: vec![ContainerStatus {
                name: "app".into(),
                state: Some(ContainerState {
                    running: None,
                    terminated: Some(Terminated { exit_code: 137 }),
                }),
                ready: false,
            }],
            init_container_statuses: vec![ContainerStatus {
                name: "sidecar".into(),
                state: Some(ContainerState { running: Some(Present {}), terminated: None }),
                ready: true,
            }],
        }),
    }
}

/// The same pod as the API server's JSON would carry it (what the transcoder drops aside).
const HELD_JSON: &str = r#"{
  "apiVersion": "v1", "kind": "Pod",
  "metadata": { "name": "held", "namespace": "a", "uid": "u-1", "resourceVersion": "42",
    "labels": { "app": "pb" },
    "annotations": { "kubernetes.io/config.mirror": "x", "unread.example.com/big": "y",
      "remediator.io/exclude": "true" },
    "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
      "uid": "s-1", "controller": true }],
    "deletionTimestamp": "2026-11-28T01:02:03Z", "deletionGracePeriodSeconds": 30,
    "finalizers": ["example.com/hold"],
    "managedFields": [{ "manager": "kubectl" }] },
  "spec": { "nodeName": "n1",
    "volumes": [{ "name": "data", "persistentVolumeClaim": { "claimName": "data-0" } },
      { "name": "disk", "rbd": { "image": "i" } }],
    "initContainers": [{ "name": "sidecar", "image": "s", "restartPolicy": "Always" }],
    "containers": [{ "name": "app", "image": "a" }],
    "readinessGates": [{ "conditionType": "example.com/gate" }] },
  "status": { "phase": "Running",
    "conditions": [{ "type": "Ready", "status": "False",
      "lastTransitionTime": "2026-11-28T01:00:00Z" }],
    "containerStatuses": [{ "name": "app", "ready": false,
      "state": { "terminated": { "exitCode": 137 } } }],
    "initContainerStatuses": [{ "name": "sidecar", "ready": true,
      "state": { "running": {} } }] }
}"#;

/// A response of the API server with `content_type` and `body` sent in chunks of `chunk` bytes.
fn response(content_type: &str, body: Vec<u8>, chunk: usize) -> Response<ResponseBody> {
    let chunks: Vec<Result<Bytes, BoxError>> =
        body.chunks(chunk).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
    let stream = futures::stream::iter(chunks).map(|c| c.map(http_body::Frame::data));
    let body = BodyExt::boxed_unsync(StreamBody::new(stream));
    Response::builder().header(CONTENT_TYPE, content_type).body(body).expect("a response")
}

async fn body_text(response: Response<ResponseBody>) -> Result<String, BoxError> {
    let bytes = response.into_body().collect().await?.to_bytes();
    Ok(String::from_utf8(bytes.to_vec()).expect("UTF-8"))
}

#[tokio::test]
async fn a_watch_in_protobuf_reads_as_the_same_pods_in_json() {
    let bookmark_pod = Pod {
        metadata: Some(ObjectMeta {
            resource_version: "43".into(),
            annotations: [(INITIAL_EVENTS_END.to_string(), "true".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let status = Status {
        status: "Failure".into(),
        message: "too old resource version".into(),
        reason: "Expired".into(),
        code: 410,
    };
    let stream = [
        frame("ADDED", whole("Pod", held_pod().encode_to_vec())),
        frame("BOOKMARK", whole("Pod", bookmark_pod.encode_to_vec())),
        frame("ERROR", whole("Status", status.encode_to_vec())),
    ]
    .concat();
    // Whole, and in pieces smaller than a frame's length.
    for chunk in [stream.len(), 3, 1000] {
        let json = to_json(response(WATCH_PROTOBUF, stream.clone(), chunk));
        assert_eq!(json.headers()[CONTENT_TYPE], "application/json");
        let text = body_text(json).await.expect("a body");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");

        let added: kube::api::WatchEvent<WatchedPod> =
            serde_json::from_str(lines[0]).expect("an event");
        let kube::api::WatchEvent::Added(pod) = added else { panic!("{}", lines[0]) };
        let from_json: WatchedPod = serde_json::from_str(HELD_JSON).expect("a pod");
        assert_eq!(format!("{pod:?}"), format!("{from_json:?}"));
        assert!(!lines[0].contains("unread.example.com"), "{}", lines[0]);

        let bookmark: kube::api::WatchEvent<WatchedPod> =
            serde_json::from_str(lines[1]).expect("an event");
        let kube::api::WatchEvent::Bookmark(b) = bookmark else { panic!("{}", lines[1]) };
        assert_eq!(b.metadata.resource_version, "43");
        assert!(b.metadata.annotations.contains_key(INITIAL_EVENTS_END));

        let error: kube::api::WatchEvent<WatchedPod> =
            serde_json::from_str(lines[2]).expect("an event");
        let kube::api::WatchEvent::Error(e) = error else { panic!("{}", lines[2]) };
        assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
    }
}

#[tokio::test]
async fn a_page_of_pods_in_protobuf_reads_as_the_same_page_in_json() {
    let list = PodList {
        metadata: Some(ListMeta {
            resource_version: "44".into(),
            continue_token: "next".into(),
            remaining_item_count: Some(7),
        }),
        items: vec![held_pod(), Pod::default()],
    };
    let json = to_json(response(PROTOBUF, whole("PodList", list.encode_to_vec()), 11));
    assert_eq!(json.headers()[CONTENT_TYPE], "application/json");
    let text = body_text(json).await.expect("a body");
    let page: kube::core::ObjectList<WatchedPod> = serde_json::from_str(&text).expect("a list");
    assert_eq!(page.metadata.resource_version.as_deref(), Some("44"));
    assert_eq!(page.metadata.continue_.as_deref(), Some("next"));
    assert_eq!(page.metadata.remaining_item_count, Some(7));
    assert_eq!(page.items.len(), 2);
    let from_json: WatchedPod = serde_json::from_str(HELD_JSON).expect("a pod");
    assert_eq!(format!("{:?}", page.items[0]), format!("{from_json:?}"));
}

#[tokio::test]
async fn a_failed_request_in_protobuf_reads_as_its_status_in_json() {
    let status = Status {
        status: "Failure".into(),
        message: "pods is forbidden".into(),
        reason: "Forbidden".into(),
        code: 403,
    };
    let json = to_json(response(PROTOBUF, whole("Status", status.encode_to_vec()), 7));
    let text = body_text(json).await.expect("a body");
    let read: kube::core::Status = serde_json::from_str(&text).expect("a Status");
    assert_eq!((read.code, read.reason.as_str()), (403, "Forbidden"));
}

#[tokio::test]
async fn json_passes_through_and_broken_protobuf_fails_the_watch() {
    let line = b"{\"type\":\"ADDED\",\"object\":{}}\n".to_vec();
    let passed = body_text(to_json(response("application/json", line.clone(), 5))).await;
    assert_eq!(passed.expect("a body").as_bytes(), line);

    // Cut inside a frame, a frame too long, an object without the magic.
    let whole_frame = frame("ADDED", whole("Pod", held_pod().encode_to_vec()));
    let cut = whole_frame[..whole_frame.len() - 1].to_vec();
    let too_long = [u32::MAX.to_be_bytes().to_vec(), vec![0; 8]].concat();
    let no_magic = frame("ADDED", held_pod().encode_to_vec());
    for broken in [cut, too_long, no_magic] {
        let read = body_text(to_json(response(WATCH_PROTOBUF, broken, 64))).await;
        assert!(read.is_err(), "read {read:?}");
    }
}
