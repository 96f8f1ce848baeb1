//! The pods' watch in protobuf. The API server sends a streamed list of pods as JSON slower
//! than as protobuf (it writes each event on its own, and JSON costs it more to encode: at
//! 3,600 pods of 14 KB on the test machine 2.5 s streamed against 1.1 s for one protobuf LIST),
//! and it is what our readiness waited for. kube decodes JSON only, so a layer of the client
//! asks for the pods' watch in protobuf and turns each event back into a line of JSON holding
//! only what [`WatchedPod`](crate::adapters::WatchedPod) reads (managedFields,
//! containers and the rest are skipped while decoding, as the JSON decoder skips them).
//!
//! Only the cluster-wide pods' watch and lists (`GET /api/v1/pods`: the watch, its paged lists,
//! the pods of a node not Ready, `plan`'s pages) are asked for in protobuf: every other
//! request, the last look's fresh reads and every write among them, stays JSON. An answer
//! that is not protobuf (an API server or proxy that does not offer it) passes through
//! unchanged.
//!
//! The wire form (Kubernetes' protobuf encoding): a watch stream is a sequence of frames, each
//! a 4-byte big-endian length and a `meta.v1.WatchEvent` { type, object: { raw } }, where `raw`
//! is the object behind the 4-byte magic `k8s\0` as a `runtime.Unknown` { typeMeta, raw }. A
//! `Pod` for ADDED, MODIFIED, DELETED and BOOKMARK, a `Status` for ERROR. A list's answer is one
//! object encoded whole: a `PodList`, or a `Status` for a request that failed.

use std::collections::BTreeMap;

use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{HeaderValue, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, StreamBody};
use prost::Message;
use serde_json::{Map, Value, json};
use tower::BoxError;

use crate::adapters::MIRROR_ANNOTATION;
use crate::crd::EXCLUDE_ANNOTATION;

/// What the pods' watch asks for.
const WATCH_PROTOBUF: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// What a list of pods asks for.
const LIST_PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// Kubernetes' protobuf media type (a watch stream's has `;stream=watch`).
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";
/// The magic in front of every object encoded whole.
const MAGIC: &[u8] = b"k8s\0";
/// The annotation that ends a streamed list (on a BOOKMARK).
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";
/// The only annotations passed on: those the records read, and the end of a streamed list.
const PASSED_ANNOTATIONS: [&str; 3] = [MIRROR_ANNOTATION, EXCLUDE_ANNOTATION, INITIAL_EVENTS_END];
/// The largest frame accepted: a pod is at most the API server's 1.5 MiB request limit, a
/// little more with its status.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// A response body, transcoded or passed through.
pub type ResponseBody = UnsyncBoxBody<Bytes, BoxError>;

/// What `request` asks for in protobuf: for the cluster-wide pods' watch and lists, their
/// media type; `None` for any other request.
fn protobuf_for<B>(request: &Request<B>) -> Option<&'static str> {
    if request.method() != http::Method::GET || request.uri().path() != "/api/v1/pods" {
        return None;
    }
    let query = request.uri().query().unwrap_or_default();
    let watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
    Some(if watch { WATCH_PROTOBUF } else { LIST_PROTOBUF })
}

/// Asks for the pods' watch and lists in protobuf; every other request is left as it is.
pub fn ask_protobuf<B>(mut request: Request<B>) -> Request<B> {
    if let Some(media_type) = protobuf_for(&request) {
        request.headers_mut().insert(ACCEPT, HeaderValue::from_static(media_type));
    }
    request
}

/// Turns a protobuf answer into the JSON kube decodes; any other answer passes through.
pub fn to_json<B>(response: Response<B>) -> Response<ResponseBody>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.replace(' ', ""))
        .unwrap_or_default();
    let (mut parts, body) = response.into_parts();
    let body = body.map_err(Into::into);
    let json_type = HeaderValue::from_static("application/json");
    if content_type.starts_with(WATCH_PROTOBUF) {
        parts.headers.insert(CONTENT_TYPE, json_type);
        parts.headers.remove(http::header::CONTENT_LENGTH);
        let events = watch_lines(body.into_data_stream());
        let frames = events.map(|line| line.map(http_body::Frame::data));
        return Response::from_parts(parts, BodyExt::boxed_unsync(StreamBody::new(frames)));
    }
    if content_type.starts_with(PROTOBUF) {
        // Not a watch stream: a list's page or a Status (a failed request), read whole.
        parts.headers.insert(CONTENT_TYPE, json_type);
        parts.headers.remove(http::header::CONTENT_LENGTH);
        let whole = async move {
            let bytes = body.collect().await?.to_bytes();
            let json = object_json(&bytes).map_err(BoxError::from)?;
            Ok::<_, BoxError>(http_body::Frame::data(Bytes::from(json.to_string())))
        };
        let stream = futures::stream::once(whole);
        return Response::from_parts(parts, BodyExt::boxed_unsync(StreamBody::new(stream)));
    }
    Response::from_parts(parts, BodyExt::boxed_unsync(body))
}

/// The watch events of a protobuf stream, one line of JSON each.
fn watch_lines(
    data: impl Stream<Item = Result<Bytes, BoxError>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, BoxError>> + Send + 'static {
    let data = Box::pin(data);
    futures::stream::unfold(
        (data, BytesMut::new(), false),
        |(mut data, mut buf, ended)| async move {
            if ended {
                return None;
            }
            loop {
                match next_frame(&mut buf) {
                    Ok(Some(frame)) => {
                        let line = event_line(&frame).map_err(BoxError::from);
                        return Some((line, (data, buf, false)));
                    }
                    Ok(None) => {}
                    Err(e) => return Some((Err(e.into()), (data, buf, true))),
                }
                match data.next().await {
                    Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
                    Some(Err(e)) => return Some((Err(e), (data, buf, true))),
                    None if buf.is_empty() => return None,
                    None => {
                        let e =
                            format!("the watch ended inside a frame ({} bytes left)", buf.len());
                        return Some((Err(e.into()), (data, buf, true)));
                    }
                }
            }
        },
    )
}

/// The next whole frame in `buf`, taken out of it; `None` until one is whole.
fn next_frame(buf: &mut BytesMut) -> Result<Option<Bytes>, String> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME {
        return Err(format!("a watch frame of {len} bytes, over {MAX_FRAME}"));
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// One watch event as the line of JSON kube's watch decodes.
fn event_line(frame: &[u8]) -> Result<Bytes, String> {
    let event = WatchEvent::decode(frame).map_err(|e| format!("a watch event: {e}"))?;
    let raw = event.object.map(|o| o.raw).unwrap_or_default();
    let object = object_json(&raw)?;
    let mut line = serde_json::to_vec(&json!({ "type": event.kind, "object": object }))
        .map_err(|e| e.to_string())?;
    line.push(b'\n');
    Ok(Bytes::from(line))
}

/// An object encoded whole (magic, `runtime.Unknown`), as JSON: a Pod, a PodList or a Status.
fn object_json(raw: &[u8]) -> Result<Value, String> {
    let inner = raw.strip_prefix(MAGIC).ok_or("an object without the protobuf magic")?;
    let unknown = Unknown::decode(inner).map_err(|e| format!("an object's envelope: {e}"))?;
    let kind = unknown.type_meta.map(|t| t.kind).unwrap_or_default();
    match kind.as_str() {
        "Pod" => {
            let pod = Pod::decode(unknown.raw.as_slice()).map_err(|e| format!("a pod: {e}"))?;
            Ok(pod_json(&pod))
        }
        "PodList" => {
            let list =
                PodList::decode(unknown.raw.as_slice()).map_err(|e| format!("a pod list: {e}"))?;
            Ok(pod_list_json(&list))
        }
        "Status" => {
            let status =
                Status::decode(unknown.raw.as_slice()).map_err(|e| format!("a status: {e}"))?;
            Ok(status_json(&status))
        }
        other => Err(format!("an object of kind {other:?} in the pods' watch")),
    }
}

/// Puts `value` under `key` unless it is empty (as the API server's JSON omits it).
fn put_str(map: &mut Map<String, Value>, key: &str, value: &str) {
    if !value.is_empty() {
        map.insert(key.into(), Value::String(value.into()));
    }
}

fn time_json(t: &Time) -> Value {
    match jiff::Timestamp::from_second(t.seconds) {
        Ok(ts) => Value::String(ts.to_string()),
        Err(_) => Value::Null,
    }
}

fn pod_json(pod: &Pod) -> Value {
    let mut object = Map::new();
    object.insert("apiVersion".into(), "v1".into());
    object.insert("kind".into(), "Pod".into());
    if let Some(m) = &pod.metadata {
        object.insert("metadata".into(), metadata_json(m));
    }
    if let Some(spec) = &pod.spec {
        object.insert("spec".into(), spec_json(spec));
    }
    if let Some(status) = &pod.status {
        object.insert("status".into(), pod_status_json(status));
    }
    Value::Object(object)
}

fn pod_list_json(list: &PodList) -> Value {
    let mut metadata = Map::new();
    if let Some(m) = &list.metadata {
        put_str(&mut metadata, "resourceVersion", &m.resource_version);
        put_str(&mut metadata, "continue", &m.continue_token);
        if let Some(n) = m.remaining_item_count {
            metadata.insert("remainingItemCount".into(), n.into());
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "PodList",
        "metadata": metadata,
        "items": list.items.iter().map(pod_json).collect::<Vec<_>>(),
    })
}

fn metadata_json(m: &ObjectMeta) -> Value {
    let mut out = Map::new();
    put_str(&mut out, "name", &m.name);
    put_str(&mut out, "namespace", &m.namespace);
    put_str(&mut out, "uid", &m.uid);
    put_str(&mut out, "resourceVersion", &m.resource_version);
    if !m.labels.is_empty() {
        out.insert("labels".into(), json!(m.labels));
    }
    let passed: BTreeMap<&String, &String> =
        m.annotations.iter().filter(|(k, _)| PASSED_ANNOTATIONS.contains(&k.as_str())).collect();
    if !passed.is_empty() {
        out.insert("annotations".into(), json!(passed));
    }
    if !m.owner_references.is_empty() {
        let owners = m.owner_references.iter().map(|o| {
            let mut owner = Map::new();
            owner.insert("apiVersion".into(), o.api_version.clone().into());
            owner.insert("kind".into(), o.kind.clone().into());
            owner.insert("name".into(), o.name.clone().into());
            owner.insert("uid".into(), o.uid.clone().into());
            if let Some(c) = o.controller {
                owner.insert("controller".into(), c.into());
            }
            if let Some(b) = o.block_owner_deletion {
                owner.insert("blockOwnerDeletion".into(), b.into());
            }
            Value::Object(owner)
        });
        out.insert("ownerReferences".into(), Value::Array(owners.collect()));
    }
    if let Some(t) = &m.deletion_timestamp {
        out.insert("deletionTimestamp".into(), time_json(t));
    }
    if let Some(s) = m.deletion_grace_period_seconds {
        out.insert("deletionGracePeriodSeconds".into(), s.into());
    }
    if !m.finalizers.is_empty() {
        out.insert("finalizers".into(), json!(m.finalizers));
    }
    Value::Object(out)
}

fn spec_json(spec: &PodSpec) -> Value {
    let mut out = Map::new();
    put_str(&mut out, "nodeName", &spec.node_name);
    if !spec.volumes.is_empty() {
        out.insert("volumes".into(), spec.volumes.iter().map(volume_json).collect());
    }
    if !spec.readiness_gates.is_empty() {
        let gates =
            spec.readiness_gates.iter().map(|g| json!({ "conditionType": g.condition_type }));
        out.insert("readinessGates".into(), gates.collect());
    }
    if !spec.init_containers.is_empty() {
        let inits = spec.init_containers.iter().map(|c| {
            let mut init = Map::new();
            init.insert("name".into(), c.name.clone().into());
            put_str(&mut init, "restartPolicy", &c.restart_policy);
            Value::Object(init)
        });
        out.insert("initContainers".into(), inits.collect());
    }
    Value::Object(out)
}

fn volume_json(v: &Volume) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), v.name.clone().into());
    let Some(s) = &v.source else { return Value::Object(out) };
    if let Some(claim) = &s.persistent_volume_claim {
        out.insert("persistentVolumeClaim".into(), json!({ "claimName": claim.claim_name }));
    }
    let present = [
        ("ephemeral", s.ephemeral.is_some()),
        ("awsElasticBlockStore", s.aws_elastic_block_store.is_some()),
        ("gcePersistentDisk", s.gce_persistent_disk.is_some()),
        ("azureDisk", s.azure_disk.is_some()),
        ("cinder", s.cinder.is_some()),
        ("rbd", s.rbd.is_some()),
        ("iscsi", s.iscsi.is_some()),
        ("fc", s.fc.is_some()),
        ("vsphereVolume", s.vsphere_volume.is_some()),
        ("portworxVolume", s.portworx_volume.is_some()),
        ("photonPersistentDisk", s.photon_persistent_disk.is_some()),
        ("scaleIO", s.scale_io.is_some()),
        ("storageos", s.storageos.is_some()),
    ];
    for (key, _) in present.iter().filter(|(_, there)| *there) {
        out.insert((*key).into(), json!({}));
    }
    Value::Object(out)
}

fn pod_status_json(s: &PodStatus) -> Value {
    let mut out = Map::new();
    put_str(&mut out, "phase", &s.phase);
    put_str(&mut out, "reason", &s.reason);
    if !s.conditions.is_empty() {
        let conditions = s.conditions.iter().map(|c| {
            let mut condition = Map::new();
            condition.insert("type".into(), c.kind.clone().into());
            condition.insert("status".into(), c.status.clone().into());
            put_str(&mut condition, "reason", &c.reason);
            if let Some(t) = &c.last_transition_time {
                condition.insert("lastTransitionTime".into(), time_json(t));
            }
            Value::Object(condition)
        });
        out.insert("conditions".into(), conditions.collect());
    }
    if !s.container_statuses.is_empty() {
        out.insert("containerStatuses".into(), container_statuses(&s.container_statuses));
    }
    if !s.init_container_statuses.is_empty() {
        out.insert("initContainerStatuses".into(), container_statuses(&s.init_container_statuses));
    }
    Value::Object(out)
}

fn container_statuses(statuses: &[ContainerStatus]) -> Value {
    let statuses = statuses.iter().map(|c| {
        let mut status = Map::new();
        status.insert("name".into(), c.name.clone().into());
        status.insert("ready".into(), c.ready.into());
        if let Some(state) = &c.state {
            let mut s = Map::new();
            if state.running.is_some() {
                s.insert("running".into(), json!({}));
            }
            if let Some(t) = &state.terminated {
                s.insert("terminated".into(), json!({ "exitCode": t.exit_code }));
            }
            status.insert("state".into(), Value::Object(s));
        }
        Value::Object(status)
    });
    Value::Array(statuses.collect())
}

fn status_json(s: &Status) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), "v1".into());
    out.insert("kind".into(), "Status".into());
    put_str(&mut out, "status", &s.status);
    put_str(&mut out, "message", &s.message);
    put_str(&mut out, "reason", &s.reason);
    out.insert("code".into(), s.code.into());
    Value::Object(out)
}

// The messages, with only the fields read; a decoder skips every other field. Tags from
// Kubernetes' generated.proto (k8s.io/api core/v1, k8s.io/apimachinery meta/v1 and runtime).
// Strings are proto2 `optional` there and always sent; read as plain strings, empty when
// absent, as the JSON's omitted fields read.

#[derive(Clone, PartialEq, Message)]
struct WatchEvent {
    #[prost(string, tag = "1")]
    kind: String,
    #[prost(message, optional, tag = "2")]
    object: Option<RawExtension>,
}

#[derive(Clone, PartialEq, Message)]
struct RawExtension {
    #[prost(bytes = "vec", tag = "1")]
    raw: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct Unknown {
    #[prost(message, optional, tag = "1")]
    type_meta: Option<TypeMeta>,
    #[prost(bytes = "vec", tag = "2")]
    raw: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct TypeMeta {
    #[prost(string, tag = "1")]
    api_version: String,
    #[prost(string, tag = "2")]
    kind: String,
}

#[derive(Clone, PartialEq, Message)]
struct Status {
    #[prost(string, tag = "2")]
    status: String,
    #[prost(string, tag = "3")]
    message: String,
    #[prost(string, tag = "4")]
    reason: String,
    #[prost(int32, tag = "6")]
    code: i32,
}

#[derive(Clone, PartialEq, Message)]
struct Time {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

#[derive(Clone, PartialEq, Message)]
struct ObjectMeta {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "3")]
    namespace: String,
    #[prost(string, tag = "5")]
    uid: String,
    #[prost(string, tag = "6")]
    resource_version: String,
    #[prost(message, optional, tag = "9")]
    deletion_timestamp: Option<Time>,
    #[prost(int64, optional, tag = "10")]
    deletion_grace_period_seconds: Option<i64>,
    #[prost(btree_map = "string, string", tag = "11")]
    labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    annotations: BTreeMap<String, String>,
    #[prost(message, repeated, tag = "13")]
    owner_references: Vec<OwnerReference>,
    #[prost(string, repeated, tag = "14")]
    finalizers: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct OwnerReference {
    #[prost(string, tag = "1")]
    kind: String,
    #[prost(string, tag = "3")]
    name: String,
    #[prost(string, tag = "4")]
    uid: String,
    #[prost(string, tag = "5")]
    api_version: String,
    #[prost(bool, optional, tag = "6")]
    controller: Option<bool>,
    #[prost(bool, optional, tag = "7")]
    block_owner_deletion: Option<bool>,
}

#[derive(Clone, PartialEq, Message)]
struct PodList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ListMeta>,
    #[prost(message, repeated, tag = "2")]
    items: Vec<Pod>,
}

#[derive(Clone, PartialEq, Message)]
struct ListMeta {
    #[prost(string, tag = "2")]
    resource_version: String,
    #[prost(string, tag = "3")]
    continue_token: String,
    #[prost(int64, optional, tag = "4")]
    remaining_item_count: Option<i64>,
}

#[derive(Clone, PartialEq, Message)]
struct Pod {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    spec: Option<PodSpec>,
    #[prost(message, optional, tag = "3")]
    status: Option<PodStatus>,
}

#[derive(Clone, PartialEq, Message)]
struct PodSpec {
    #[prost(message, repeated, tag = "1")]
    volumes: Vec<Volume>,
    #[prost(string, tag = "10")]
    node_name: String,
    #[prost(message, repeated, tag = "20")]
    init_containers: Vec<Container>,
    #[prost(message, repeated, tag = "28")]
    readiness_gates: Vec<ReadinessGate>,
}

#[derive(Clone, PartialEq, Message)]
struct Container {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "24")]
    restart_policy: String,
}

#[derive(Clone, PartialEq, Message)]
struct ReadinessGate {
    #[prost(string, tag = "1")]
    condition_type: String,
}

#[derive(Clone, PartialEq, Message)]
struct Volume {
    #[prost(string, tag = "1")]
    name: String,
    /// Inline in the JSON, a message of its own in protobuf.
    #[prost(message, optional, tag = "2")]
    source: Option<VolumeSource>,
}

/// A message whose contents are skipped: only whether it is there.
#[derive(Clone, PartialEq, Message)]
struct Present {}

#[derive(Clone, PartialEq, Message)]
struct VolumeSource {
    #[prost(message, optional, tag = "3")]
    gce_persistent_disk: Option<Present>,
    #[prost(message, optional, tag = "4")]
    aws_elastic_block_store: Option<Present>,
    #[prost(message, optional, tag = "8")]
    iscsi: Option<Present>,
    #[prost(message, optional, tag = "10")]
    persistent_volume_claim: Option<ClaimSource>,
    #[prost(message, optional, tag = "11")]
    rbd: Option<Present>,
    #[prost(message, optional, tag = "13")]
    cinder: Option<Present>,
    #[prost(message, optional, tag = "17")]
    fc: Option<Present>,
    #[prost(message, optional, tag = "20")]
    vsphere_volume: Option<Present>,
    #[prost(message, optional, tag = "22")]
    azure_disk: Option<Present>,
    #[prost(message, optional, tag = "23")]
    photon_persistent_disk: Option<Present>,
    #[prost(message, optional, tag = "24")]
    portworx_volume: Option<Present>,
    #[prost(message, optional, tag = "25")]
    scale_io: Option<Present>,
    #[prost(message, optional, tag = "27")]
    storageos: Option<Present>,
    #[prost(message, optional, tag = "29")]
    ephemeral: Option<Present>,
}

#[derive(Clone, PartialEq, Message)]
struct ClaimSource {
    #[prost(string, tag = "1")]
    claim_name: String,
}

#[derive(Clone, PartialEq, Message)]
struct PodStatus {
    #[prost(string, tag = "1")]
    phase: String,
    #[prost(message, repeated, tag = "2")]
    conditions: Vec<PodCondition>,
    #[prost(string, tag = "4")]
    reason: String,
    #[prost(message, repeated, tag = "8")]
    container_statuses: Vec<ContainerStatus>,
    #[prost(message, repeated, tag = "10")]
    init_container_statuses: Vec<ContainerStatus>,
}

#[derive(Clone, PartialEq, Message)]
struct PodCondition {
    #[prost(string, tag = "1")]
    kind: String,
    #[prost(string, tag = "2")]
    status: String,
    #[prost(message, optional, tag = "4")]
    last_transition_time: Option<Time>,
    #[prost(string, tag = "5")]
    reason: String,
}

#[derive(Clone, PartialEq, Message)]
struct ContainerStatus {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(message, optional, tag = "2")]
    state: Option<ContainerState>,
    #[prost(bool, tag = "4")]
    ready: bool,
}

#[derive(Clone, PartialEq, Message)]
struct ContainerState {
    #[prost(message, optional, tag = "2")]
    running: Option<Present>,
    #[prost(message, optional, tag = "3")]
    terminated: Option<Terminated>,
}

#[derive(Clone, PartialEq, Message)]
struct Terminated {
    #[prost(int32, tag = "1")]
    exit_code: i32,
}

#[cfg(test)]
mod tests;
