//! Turning Kubernetes objects into the pure core's observations. Every field is optional in the
//! API, so nothing here unwraps: a strange object yields a conservative observation.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;

use crate::core::{NodeObservation, Readiness};

/// The namespace where kubelets keep their heartbeat Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Builds the observation of a node from its object and (when found) its kubelet Lease.
pub fn node_observation(node: &Node, lease: Option<&Lease>) -> NodeObservation {
    let status = node.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|conds| conds.iter().find(|c| c.type_ == "Ready"));
    let spec = node.spec.as_ref();
    NodeObservation {
        name: node.metadata.name.clone().unwrap_or_default(),
        readiness: Readiness::from_condition_status(ready.map(|c| c.status.as_str())),
        ready_transition: ready.and_then(|c| c.last_transition_time.as_ref()).map(|t| t.0),
        lease_renewed: lease
            .and_then(|l| l.spec.as_ref())
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0),
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        taints: spec
            .and_then(|s| s.taints.as_ref())
            .map(|taints| taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect())
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_node_gives_a_conservative_observation() {
        let obs = node_observation(&Node::default(), None);
        assert_eq!(obs.readiness, Readiness::Missing);
        assert_eq!(obs.name, "");
        assert!(obs.lease_renewed.is_none());
        assert!(!obs.unschedulable);
    }

    #[test]
    fn reads_ready_condition_lease_and_taints() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1"},
            "spec": {"unschedulable": true, "taints": [
                {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
        }))
        .expect("valid node");
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "namespace": NODE_LEASE_NAMESPACE},
            "spec": {"renewTime": "2026-01-01T00:00:01.500000Z"}
        }))
        .expect("valid lease");
        let obs = node_observation(&node, Some(&lease));
        assert_eq!(obs.name, "n1");
        assert_eq!(obs.readiness, Readiness::Unknown);
        assert_eq!(obs.ready_transition, Some("2026-01-01T00:00:00Z".parse().expect("ts")));
        assert_eq!(obs.lease_renewed, Some("2026-01-01T00:00:01.5Z".parse().expect("ts")));
        assert!(obs.unschedulable);
        assert_eq!(obs.taints, vec!["node.kubernetes.io/unreachable:NoExecute".to_string()]);
    }
}
