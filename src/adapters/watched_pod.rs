//! The Pod as the operator's watch decodes it: only the fields its records read. Everything
//! else in a pod's JSON (managedFields, the containers' specs, env, probes, most annotations,
//! ...) is skipped while decoding and never allocated. A realistic pod weighs 7 to 17 KB of
//! JSON, and an initial list decodes hundreds of them at once: decoded in full, 3,000 such pods
//! raised the process's resident memory from 16 MiB to about 200 MiB, most of it transient and
//! kept by the allocator.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::crd::EXCLUDE_ANNOTATION;

/// The annotation the kubelet puts on mirror (static) pods.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The only annotations the records read; the others are skipped while decoding.
const KEPT_ANNOTATIONS: [&str; 2] = [MIRROR_ANNOTATION, EXCLUDE_ANNOTATION];

/// A Pod, with only what [`super::pod_record`] reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WatchedPod {
    #[serde(default, deserialize_with = "slim_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<WatchedPodSpec>,
    #[serde(default)]
    pub status: Option<WatchedPodStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedPodSpec {
    pub node_name: Option<String>,
    pub volumes: Option<Vec<WatchedVolume>>,
    /// The condition types of `spec.readinessGates`.
    pub readiness_gates: Option<Vec<WatchedReadinessGate>>,
    /// Each init container's name and restart policy (`Always`: a native sidecar).
    pub init_containers: Option<Vec<WatchedInitContainer>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedReadinessGate {
    pub condition_type: String,
}

/// An init container as the records read it: its name and restart policy only.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedInitContainer {
    pub name: String,
    pub restart_policy: Option<String>,
}

/// A volume: its claim, if any, and which single-writer inline sources it names (their
/// contents are skipped).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedVolume {
    pub name: String,
    pub persistent_volume_claim: Option<ClaimSource>,
    pub ephemeral: Option<Present>,
    pub aws_elastic_block_store: Option<Present>,
    pub gce_persistent_disk: Option<Present>,
    pub azure_disk: Option<Present>,
    pub cinder: Option<Present>,
    pub rbd: Option<Present>,
    pub iscsi: Option<Present>,
    pub fc: Option<Present>,
    pub vsphere_volume: Option<Present>,
    pub portworx_volume: Option<Present>,
    pub photon_persistent_disk: Option<Present>,
    #[serde(rename = "scaleIO")]
    pub scale_io: Option<Present>,
    pub storageos: Option<Present>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClaimSource {
    pub claim_name: String,
}

/// A field that is there, whatever it holds (skipped while decoding).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Present {}

impl<'de> Deserialize<'de> for Present {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d)?;
        Ok(Present {})
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedPodStatus {
    pub phase: Option<String>,
    /// `status.reason`: why a pod ended (`Terminated` after a graceful node shutdown).
    pub reason: Option<String>,
    pub conditions: Option<Vec<WatchedCondition>>,
    pub container_statuses: Option<Vec<WatchedContainerStatus>>,
    pub init_container_statuses: Option<Vec<WatchedContainerStatus>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: Option<String>,
    pub last_transition_time: Option<Time>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedContainerStatus {
    pub name: String,
    pub ready: bool,
    pub state: Option<WatchedContainerState>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct WatchedContainerState {
    pub running: Option<Present>,
    pub terminated: Option<WatchedTerminated>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WatchedTerminated {
    pub exit_code: i32,
}

impl kube::Resource for WatchedPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<&Pod> for WatchedPod {
    /// The same pod, decoded as the watch decodes it (for a pod read in full, say by `explain`).
    fn from(pod: &Pod) -> Self {
        serde_json::to_value(pod).and_then(serde_json::from_value).unwrap_or_default()
    }
}

/// The metadata fields the records and the watches read; managedFields and the rest are
/// skipped. `A` decodes the annotations: [`KeptAnnotations`] for a pod, every one for a node.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(super) struct SlimMetadata<A> {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    labels: Option<BTreeMap<String, String>>,
    annotations: A,
    owner_references: Option<Vec<OwnerReference>>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    finalizers: Option<Vec<String>>,
}

impl<A: Into<Option<BTreeMap<String, String>>>> From<SlimMetadata<A>> for ObjectMeta {
    fn from(m: SlimMetadata<A>) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            labels: m.labels,
            annotations: m.annotations.into(),
            owner_references: m.owner_references,
            deletion_timestamp: m.deletion_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            finalizers: m.finalizers,
            ..ObjectMeta::default()
        }
    }
}

/// A pod's annotations as its records read them: [`KEPT_ANNOTATIONS`] only.
#[derive(Default)]
pub(super) struct KeptAnnotations(Option<BTreeMap<String, String>>);

impl<'de> Deserialize<'de> for KeptAnnotations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        kept_annotations(d).map(KeptAnnotations)
    }
}

impl From<KeptAnnotations> for Option<BTreeMap<String, String>> {
    fn from(kept: KeptAnnotations) -> Self {
        kept.0
    }
}

fn slim_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    Ok(SlimMetadata::<KeptAnnotations>::deserialize(d)?.into())
}

/// Only [`KEPT_ANNOTATIONS`]; the values of the others (a kubectl last-applied-configuration
/// holds a whole manifest) are skipped.
fn kept_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Kept;
    impl<'de> Visitor<'de> for Kept {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut kept = BTreeMap::new();
            while let Some(key) = map.next_key::<String>()? {
                if KEPT_ANNOTATIONS.contains(&key.as_str()) {
                    kept.insert(key, map.next_value()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Some(kept))
        }
    }
    d.deserialize_any(Kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_the_records_read_and_skips_the_rest() {
        let json = serde_json::json!({
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "42",
                "labels": { "app": "a" },
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}",
                    "remediator.io/exclude": "true",
                    "kubernetes.io/config.mirror": "x",
                },
                "managedFields": [{ "manager": "kubectl", "fieldsV1": { "f:spec": {} } }],
                "ownerReferences": [{ "apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "rs", "uid": "o1", "controller": true }],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "deletionGracePeriodSeconds": 30,
                "finalizers": ["example.com/f"],
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{ "name": "c", "image": "i", "env": [{ "name": "A", "value": "b" }] }],
                "volumes": [
                    { "name": "data", "persistentVolumeClaim": { "claimName": "data-0" } },
                    { "name": "disk", "iscsi": { "targetPortal": "t", "iqn": "q", "lun": 0 } },
                    { "name": "cfg", "configMap": { "name": "c" } },
                ],
            },
            "status": {
                "phase": "Running",
                "conditions": [{ "type": "Ready", "status": "False",
                    "lastTransitionTime": "2026-01-01T00:00:00Z" }],
                "containerStatuses": [{ "name": "c", "ready": true, "restartCount": 0,
                    "image": "i", "imageID": "", "state": { "running": { "startedAt": "2026-01-01T00:00:00Z" } } }],
            },
        });
        let pod: WatchedPod = serde_json::from_value(json.clone()).expect("decodes");
        let meta = &pod.metadata;
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert!(meta.managed_fields.is_none());
        let kept: Vec<&String> = meta.annotations.iter().flat_map(|a| a.keys()).collect();
        assert_eq!(kept, ["kubernetes.io/config.mirror", "remediator.io/exclude"]);
        let volumes = pod.spec.as_ref().and_then(|s| s.volumes.clone()).unwrap_or_default();
        assert_eq!(
            volumes[0].persistent_volume_claim.as_ref().map(|c| c.claim_name.as_str()),
            Some("data-0")
        );
        assert!(volumes[1].iscsi.is_some() && volumes[2].iscsi.is_none());
        let statuses =
            pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
        assert!(
            statuses[0].ready && statuses[0].state.as_ref().is_some_and(|s| s.running.is_some())
        );

        // The same record whether the pod was watched or read in full.
        let full: Pod = serde_json::from_value(json).expect("a Pod");
        assert_eq!(
            super::super::pod_record(&WatchedPod::from(&full)),
            super::super::pod_record(&pod)
        );
        assert!(super::super::pod_record(&pod).is_some());
    }

    #[test]
    fn absent_or_null_parts_decode_to_nothing() {
        let pod: WatchedPod = serde_json::from_value(
            serde_json::json!({ "metadata": { "name": "p", "annotations": null } }),
        )
        .expect("decodes");
        assert!(pod.metadata.annotations.is_none() && pod.spec.is_none() && pod.status.is_none());
    }
}
