//! The Node and the Lease as the operator's watches decode them: only the fields the node
//! records read. A kubelet renews its Lease every 10 s and posts its Node's status every 10 s
//! to 5 min, so at 1,000 nodes these two watches deliver a hundred or more objects a second
//! while nothing else happens; decoded in full, each brought its `managedFields` (a JSON tree
//! per field manager), the node's images, addresses, capacity and system info, allocated and
//! dropped at once. Here they are skipped while decoding, and the rest is the same `Node` and
//! `Lease` the adapters read.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use serde::{Deserialize, Deserializer};

use super::watched_pod::SlimMetadata;

/// A Node, with what [`super::node_view`] reads: name, uid, labels, annotations, finalizers,
/// `spec.unschedulable`, `spec.taints`, `status.conditions` and `status.volumesInUse`.
#[derive(Clone, Debug, Default)]
pub struct WatchedNode(pub Node);

/// A Lease, with its name, uid, `spec.renewTime` and `spec.leaseDurationSeconds`.
#[derive(Clone, Debug, Default)]
pub struct WatchedLease(pub Lease);

/// An object as both decode it: its metadata with every annotation (a node's say which tool
/// manages it), and only the parts of its spec and status that `S` and `T` name.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Slim<S, T> {
    metadata: SlimMetadata<Option<BTreeMap<String, String>>>,
    spec: Option<S>,
    status: Option<T>,
}

impl<'de> Deserialize<'de> for WatchedNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Default, Deserialize)]
        #[serde(default)]
        struct Spec {
            unschedulable: Option<bool>,
            taints: Option<Vec<Taint>>,
        }
        #[derive(Default, Deserialize)]
        #[serde(rename_all = "camelCase", default)]
        struct Status {
            conditions: Option<Vec<NodeCondition>>,
            volumes_in_use: Option<Vec<String>>,
        }
        let slim = Slim::<Spec, Status>::deserialize(d)?;
        Ok(WatchedNode(Node {
            metadata: slim.metadata.into(),
            spec: slim.spec.map(|s| NodeSpec {
                unschedulable: s.unschedulable,
                taints: s.taints,
                ..NodeSpec::default()
            }),
            status: slim.status.map(|s| NodeStatus {
                conditions: s.conditions,
                volumes_in_use: s.volumes_in_use,
                ..NodeStatus::default()
            }),
        }))
    }
}

impl<'de> Deserialize<'de> for WatchedLease {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Default, Deserialize)]
        #[serde(rename_all = "camelCase", default)]
        struct Spec {
            renew_time: Option<MicroTime>,
            lease_duration_seconds: Option<i32>,
        }
        let slim = Slim::<Spec, ()>::deserialize(d)?;
        Ok(WatchedLease(Lease {
            metadata: slim.metadata.into(),
            spec: slim.spec.map(|s| LeaseSpec {
                renew_time: s.renew_time,
                lease_duration_seconds: s.lease_duration_seconds,
                ..LeaseSpec::default()
            }),
        }))
    }
}

/// The `kube::Resource` of a wrapper: the wrapped kind's, with its metadata.
macro_rules! resource_of {
    ($wrapper:ty, $kind:ty, $scope:ty) => {
        impl kube::Resource for $wrapper {
            type DynamicType = ();
            type Scope = $scope;

            fn kind(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::KIND)
            }
            fn group(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::GROUP)
            }
            fn version(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::VERSION)
            }
            fn plural(_: &()) -> Cow<'_, str> {
                Cow::Borrowed(<$kind as k8s_openapi::Resource>::URL_PATH_SEGMENT)
            }
            fn meta(&self) -> &ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }
    };
}

resource_of!(WatchedNode, Node, k8s_openapi::ClusterResourceScope);
resource_of!(WatchedLease, Lease, k8s_openapi::NamespaceResourceScope);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_what_the_records_read_and_skips_the_rest() {
        let node = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "n1", "uid": "u1", "resourceVersion": "7",
                "labels": {"topology.kubernetes.io/zone": "a"},
                "annotations": {"cluster.x-k8s.io/machine": "m1"},
                "finalizers": ["karpenter.sh/termination"],
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {"f:conditions": {}}}}]
            },
            "spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24",
                "taints": [{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "Unknown",
                    "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:05Z"}],
                "volumesInUse": ["kubernetes.io/csi/x^vol-1"],
                "images": [{"names": ["registry.example.com/app:v1"], "sizeBytes": 1}],
                "nodeInfo": {"kubeletVersion": "v1.37.0"}
            }
        });
        let full: Node = serde_json::from_value(node.clone()).expect("a Node");
        let slim: WatchedNode = serde_json::from_value(node).expect("a watched Node");
        // Everything the node records read is the same as from the full object.
        let (mut full_view, mut slim_view) =
            (super::super::node_view(&full), super::super::node_view(&slim.0));
        (full_view.labels, slim_view.labels) = (Default::default(), Default::default());
        assert_eq!(slim_view, full_view);
        assert_eq!(super::super::managed_by(&slim.0), super::super::managed_by(&full));
        assert_eq!(slim.0.metadata.labels, full.metadata.labels);
        // And nothing else was kept.
        assert!(slim.0.metadata.managed_fields.is_none());
        let status = slim.0.status.expect("status");
        assert!(status.images.is_none() && status.node_info.is_none());

        let lease: WatchedLease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "namespace": "kube-node-lease",
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40,
                "renewTime": "2026-01-01T00:00:10.123456Z"}
        }))
        .expect("a watched Lease");
        let spec = lease.0.spec.expect("spec");
        assert_eq!(spec.lease_duration_seconds, Some(40));
        assert!(spec.holder_identity.is_none());
        let renewed = spec.renew_time.map(|t| t.0.to_string());
        assert_eq!(renewed.as_deref(), Some("2026-01-01T00:00:10.123456Z"));
        assert!(lease.0.metadata.managed_fields.is_none());
    }
}
