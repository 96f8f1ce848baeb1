//! The writer's node actions: cordon, the out-of-service taint, Node deletion and the undo of
//! this operator's own changes. Each write carries the resourceVersion of the fresh read it was
//! decided on (a node changed meanwhile is left to the next plan), and the record annotation
//! that says what is ours to undo.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use super::{FIELD_MANAGER, Sent, Writer, last_look, our_taint};
use crate::adapters::{node_record_json, node_view};
use crate::core::{
    Action, NodeAction, NodeActionKind, NodeRecord, UndoChanges, ValidatedPolicy, undo_changes,
};
use crate::crd::{
    APPLIED_BY_US, ActionResult, NODE_ACTIONS_ANNOTATION, OUT_OF_SERVICE_APPLIED_BY,
    OUT_OF_SERVICE_TAINT, OUT_OF_SERVICE_VALUE, RemediationPolicy,
};
use crate::metrics::WriteKind;

impl Writer {
    /// The last look (fresh node, Lease and policy), then the write.
    pub(super) async fn act_on_node(
        &self,
        action: &Action,
        na: &NodeAction,
        policy: &RemediationPolicy,
        validated: &ValidatedPolicy,
    ) -> Sent {
        let target = &na.node;
        let (node, lease, fresh_policy) = match self.reread(&target.name, &policy.name_any()).await
        {
            Ok(evidence) => evidence,
            Err(e) => return (ActionResult::Failed, Some(e)),
        };
        let look = last_look(None, node.as_ref(), lease.as_ref(), fresh_policy.as_ref());
        // An undo changes only what is still ours; the record goes in any case.
        let undo = look.node.as_ref().map(undo_changes).filter(|_| na.kind == NodeActionKind::Undo);
        if let Err(not_sent) = self.admits(policy, validated, action, &look, undo).await {
            return not_sent;
        }
        let Some(node) = node else { return (ActionResult::Skipped, Some("node gone".into())) };
        let write = if matches!(na.kind, NodeActionKind::DeleteNode { .. }) {
            WriteKind::DeleteNode
        } else {
            WriteKind::PatchNode
        };
        if !self.may_write(write) {
            return (ActionResult::Failed, Some("not the leader: refused to write".into()));
        }
        let nodes: Api<Node> = Api::all(self.client.clone());
        let sent = match na.kind {
            NodeActionKind::DeleteNode { .. } => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: Some(target.uid.clone()),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                nodes.delete(&target.name, &params).await.map(|_| ())
            }
            _ => {
                let changes = undo.unwrap_or_default();
                let patch = node_patch(na.kind, &node, policy, changes, crate::clock::now());
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..PatchParams::default()
                };
                nodes.patch(&target.name, &params, &Patch::Merge(&patch)).await.map(|_| ())
            }
        };
        match sent {
            Ok(()) => (ActionResult::Done, None),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                (ActionResult::Skipped, Some("node already gone".into()))
            }
            Err(kube::Error::Api(s)) if s.code == 409 => (
                ActionResult::Skipped,
                Some(format!(
                    "the node changed since the last look; the next plan decides: {}",
                    s.message
                )),
            ),
            Err(e) => (ActionResult::Failed, Some(format!("writing node {}: {e}", target.name))),
        }
    }
}

/// The merge patch of a cordon, taint or undo, conditional on the resourceVersion read in the
/// last look, with the record of what is ours.
fn node_patch(
    kind: NodeActionKind,
    node: &Node,
    policy: &RemediationPolicy,
    undo: UndoChanges,
    now: Timestamp,
) -> serde_json::Value {
    let view = node_view(node);
    let mut record =
        NodeRecord { policy: Some(policy.name_any()), ..view.control.rare.record.clone() };
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    // Who applied the taint: ours with the taint, gone with it; never another tool's.
    let mut applied_by = None;
    let (spec, annotation) = match kind {
        NodeActionKind::Cordon => {
            record.cordoned = Some(now);
            (json!({ "unschedulable": true }), json!(node_record_json(&record)))
        }
        NodeActionKind::OutOfServiceTaint { .. } => {
            record.tainted = Some(now);
            let mut taints = taints;
            taints.push(Taint {
                key: OUT_OF_SERVICE_TAINT.into(),
                value: Some(OUT_OF_SERVICE_VALUE.into()),
                effect: "NoExecute".into(),
                time_added: Some(Time(now)),
            });
            applied_by = Some(json!(APPLIED_BY_US));
            (json!({ "taints": taints }), json!(node_record_json(&record)))
        }
        NodeActionKind::Undo | NodeActionKind::DeleteNode { .. } => {
            let mut spec = serde_json::Map::new();
            if undo.uncordon {
                spec.insert("unschedulable".into(), json!(false));
            }
            if undo.remove_taint {
                let kept: Vec<&Taint> = taints.iter().filter(|t| !our_taint(t)).collect();
                spec.insert("taints".into(), json!(kept));
                applied_by = Some(serde_json::Value::Null);
            }
            (serde_json::Value::Object(spec), serde_json::Value::Null)
        }
    };
    let mut annotations = json!({ NODE_ACTIONS_ANNOTATION: annotation });
    if let Some(value) = applied_by {
        annotations[OUT_OF_SERVICE_APPLIED_BY] = value;
    }
    json!({
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "annotations": annotations,
        },
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: serde_json::Value) -> Node {
        serde_json::from_value(json).expect("node")
    }

    fn policy() -> RemediationPolicy {
        serde_json::from_value(json!({
            "apiVersion": "remediator.io/v1alpha1", "kind": "RemediationPolicy",
            "metadata": {"name": "p"}, "spec": {}
        }))
        .expect("policy")
    }

    #[test]
    fn patches_record_what_is_ours_and_undo_removes_only_that() {
        let now: Timestamp = "2026-01-01T00:01:00Z".parse().expect("ts");
        let admin_taint = json!({"key": "example.com/maintenance", "effect": "NoSchedule"});
        let n = node(json!({
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "7"},
            "spec": {"taints": [admin_taint]}
        }));
        let none = UndoChanges::default();
        let cordon = node_patch(NodeActionKind::Cordon, &n, &policy(), none, now);
        assert_eq!(cordon["spec"], json!({"unschedulable": true}));
        assert_eq!(cordon["metadata"]["resourceVersion"], "7");
        let record = cordon["metadata"]["annotations"][NODE_ACTIONS_ANNOTATION].as_str();
        assert_eq!(
            crate::adapters::node_record(record.unwrap_or_default()).cordoned,
            Some(now),
            "{cordon}"
        );

        let taint = node_patch(
            NodeActionKind::OutOfServiceTaint { assumed_off: true },
            &n,
            &policy(),
            none,
            now,
        );
        let taints = taint["spec"]["taints"].as_array().cloned().unwrap_or_default();
        assert_eq!(taints.len(), 2, "the admin's taint is kept: {taint}");
        assert_eq!(taints[1]["key"], OUT_OF_SERVICE_TAINT);
        assert_eq!(taints[1]["value"], OUT_OF_SERVICE_VALUE);
        assert_eq!(taints[1]["effect"], "NoExecute");
        assert_eq!(taint["metadata"]["annotations"][OUT_OF_SERVICE_APPLIED_BY], APPLIED_BY_US);
        assert!(cordon["metadata"]["annotations"].get(OUT_OF_SERVICE_APPLIED_BY).is_none());

        // Undo on a node we cordoned and tainted, both still ours (our field manager owns the
        // cordon, the taint is the one our record names): both come off, the admin's taint
        // stays, the record goes.
        let added = "2026-01-01T00:01:00Z";
        let ours = json!({"key": OUT_OF_SERVICE_TAINT, "value": OUT_OF_SERVICE_VALUE,
                          "effect": "NoExecute", "timeAdded": added});
        let record = node_record_json(&NodeRecord {
            policy: Some("p".into()),
            cordoned: Some(now),
            tainted: Some(now),
        });
        let managed = |manager: &str| {
            json!([{ "manager": manager, "operation": "Update", "apiVersion": "v1",
                     "fieldsType": "FieldsV1",
                     "fieldsV1": { "f:spec": { "f:unschedulable": {} } } }])
        };
        let tainted = node(json!({
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "9",
                         "annotations": {NODE_ACTIONS_ANNOTATION: record,
                                         OUT_OF_SERVICE_APPLIED_BY: APPLIED_BY_US},
                         "managedFields": managed(FIELD_MANAGER)},
            "spec": {"unschedulable": true, "taints": [admin_taint, ours]}
        }));
        let changes = |n: &Node| {
            let look = last_look(None, Some(n), None, None);
            look.node.as_ref().map(undo_changes).unwrap_or_default()
        };
        assert_eq!(changes(&tainted), UndoChanges { uncordon: true, remove_taint: true });
        let undo = node_patch(NodeActionKind::Undo, &tainted, &policy(), changes(&tainted), now);
        assert_eq!(undo["spec"]["unschedulable"], false);
        assert_eq!(undo["spec"]["taints"], json!([admin_taint]));
        assert!(undo["metadata"]["annotations"][NODE_ACTIONS_ANNOTATION].is_null());
        let applied_by = undo["metadata"]["annotations"].get(OUT_OF_SERVICE_APPLIED_BY);
        assert_eq!(applied_by, Some(&serde_json::Value::Null), "removed with the taint: {undo}");

        // Another tool (OpenShift's Pacemaker) applied the taint since: never ours to remove,
        // nor its annotation.
        let mut pacemaker = tainted.clone();
        if let Some(a) = pacemaker.metadata.annotations.as_mut() {
            a.insert(OUT_OF_SERVICE_APPLIED_BY.into(), "pacemaker".into());
        }
        assert_eq!(changes(&pacemaker), UndoChanges { uncordon: true, remove_taint: false });
        let undo =
            node_patch(NodeActionKind::Undo, &pacemaker, &policy(), changes(&pacemaker), now);
        assert!(undo["spec"].get("taints").is_none(), "{undo}");
        assert!(undo["metadata"]["annotations"].get(OUT_OF_SERVICE_APPLIED_BY).is_none());

        // An admin uncordoned it and cordoned it again (their manager owns the field now), and
        // re-added the taint at another time: neither is ours any more; only the record goes.
        let mut retaken = tainted.clone();
        retaken.metadata.managed_fields =
            serde_json::from_value(managed("kubectl-cordon")).expect("managed fields");
        if let Some(t) =
            retaken.spec.as_mut().and_then(|s| s.taints.as_mut()).and_then(|t| t.get_mut(1))
        {
            t.time_added = Some(Time("2026-01-01T00:09:00Z".parse().expect("ts")));
        }
        assert_eq!(changes(&retaken), UndoChanges::default());
        let undo = node_patch(NodeActionKind::Undo, &retaken, &policy(), changes(&retaken), now);
        assert_eq!(undo["spec"], json!({}), "{undo}");
        assert!(undo["metadata"]["annotations"][NODE_ACTIONS_ANNOTATION].is_null());

        // An admin's cordon (no record of ours) is never undone.
        let admin = node(json!({
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "3"},
            "spec": {"unschedulable": true, "taints": [ours]}
        }));
        assert_eq!(changes(&admin), UndoChanges::default());
    }
}
