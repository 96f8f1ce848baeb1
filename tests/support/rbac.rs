//! What kube-remediator asks the API server for ([`NEEDED`]) and must be refused ([`refused`]):
//! `chart-rbac` (packaging) checks the chart's roles against the first, `chart-install` (e2e)
//! asks the API server about both.

use std::collections::BTreeMap;

use super::chart::LEADER_LEASE;

/// Where a grant applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Every namespace, and cluster-scoped objects: the ClusterRole.
    Cluster,
    /// The kubelets' Lease namespace (`kube-node-lease`): a Role there.
    NodeLeases,
    /// The release namespace: a Role there.
    Release,
}

/// Some verbs on one resource, in one scope, and the code that calls them.
struct Need {
    /// Only with this chart value set to true (e.g. `nodeActions.enabled`).
    when: Option<&'static str>,
    scope: Scope,
    group: &'static str,
    /// `resource` or `resource/subresource`.
    resource: &'static str,
    /// Object names the grant is limited to; empty for any.
    names: &'static [&'static str],
    verbs: &'static [&'static str],
    /// The code that calls them (shown when a grant is missing).
    why: &'static str,
}

/// Everything kube-remediator asks the API server for: the single source of truth the chart's
/// ClusterRole and Roles are checked against (`chart-rbac`), and that the installed chart is
/// proven to grant (`chart-install`). A change in what the code calls changes this table, then
/// the chart.
const NEEDED: &[Need] = &[
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "",
        resource: "nodes",
        names: &[],
        verbs: &["get", "list", "watch"],
        why: "the node watch (index/kinds.rs, cli/run.rs preflight); the writer re-reads \
              the pod's node just before a force delete (writer/mod.rs)",
    },
    Need {
        when: Some("nodeActions.enabled"),
        scope: Scope::Cluster,
        group: "",
        resource: "nodes",
        names: &[],
        verbs: &["patch", "delete"],
        why: "node actions (writer/node.rs): cordon, taint and undo are merge patches, a dead \
              node's deletion carries a UID precondition",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "",
        resource: "pods",
        names: &[],
        verbs: &["get", "list", "watch", "delete", "patch"],
        why: "the pod watch; the writer re-reads the pod, then deletes it with grace 0 and a UID \
              precondition, or removes allowlisted finalizers with a JSON patch that tests the \
              UID (writer/finalizers.rs)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "",
        resource: "pods/status",
        names: &[],
        verbs: &["patch"],
        why: "before a force delete, the pod's DisruptionTarget condition (and on a dead node the \
              phase Failed), a strategic merge patch carrying the UID and resourceVersion just \
              read (writer/force_delete.rs)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "",
        resource: "pods/eviction",
        names: &[],
        verbs: &["create"],
        why: "staleReadiness with action Evict evicts pods left Ready=False through the Eviction \
              API, so PodDisruptionBudgets hold (writer/evict.rs)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "",
        resource: "namespaces",
        names: &[],
        verbs: &["list", "watch"],
        why: "namespace labels for namespaceSelector (the namespace watch)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "",
        resource: "persistentvolumeclaims",
        names: &[],
        verbs: &["list", "watch"],
        why: "claim access modes for requireFencingFor: [ReadWriteOnce] (the claim watch)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "apps",
        resource: "deployments",
        names: &[],
        verbs: &["list", "watch"],
        why: "Recreate rollouts blocked by Terminating pods (controllers/rollout_reporter.rs)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "apps",
        resource: "statefulsets",
        names: &[],
        verbs: &["list", "watch"],
        why: "StatefulSets blocked by a Terminating pod (controllers/rollout_reporter.rs)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "apps",
        resource: "replicasets",
        names: &[],
        verbs: &["list", "watch"],
        why: "which Deployment owns a Terminating pod's ReplicaSet, and whether it is scaled down",
    },
    Need {
        when: None,
        scope: Scope::NodeLeases,
        group: "coordination.k8s.io",
        resource: "leases",
        names: &[],
        verbs: &["get", "list", "watch"],
        why: "kubelet heartbeats (renewTime): the Lease watch in kube-node-lease; the writer \
              re-reads the node's Lease just before each action (the last look)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "remediator.io",
        resource: "remediationpolicies",
        names: &[],
        verbs: &["get", "list", "watch"],
        why: "the policy controller's watch (controllers/policy.rs), `plan`, the CRD preflight",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "remediator.io",
        resource: "remediationpolicies/status",
        names: &[],
        verbs: &["patch"],
        why: "Writer::patch_status (merge patch of the status subresource)",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "events.k8s.io",
        resource: "events",
        names: &[],
        verbs: &["create", "patch"],
        why: "kube's events::Recorder: create, then patch a repeated Event into a series",
    },
    Need {
        when: None,
        scope: Scope::Cluster,
        group: "",
        resource: "events",
        names: &[],
        verbs: &["list"],
        why: "the kubelet's Warning Events about a pod stuck on a live node, listed by its UID, \
              quoted in the report and by explain (adapters::kubelet_warnings)",
    },
    Need {
        when: None,
        scope: Scope::Release,
        group: "coordination.k8s.io",
        resource: "leases",
        names: &[],
        verbs: &["create"],
        why: "leader election (src/leader.rs, leaderElection.enabled): the first replica \
              creates the Lease; create cannot be limited to a name",
    },
    Need {
        when: None,
        scope: Scope::Release,
        group: "coordination.k8s.io",
        resource: "leases",
        names: &[LEADER_LEASE],
        verbs: &["get", "update"],
        why: "leader election (src/leader.rs): every round reads the one Lease; renewal, \
              takeover and release are updates (PUT) carrying the resourceVersion just read",
    },
];

/// One verb on one resource (and name) in one scope.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Grant {
    pub scope: Scope,
    pub group: String,
    pub resource: String,
    /// Empty for any name.
    pub name: String,
    pub verb: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() { "core" } else { &self.group };
        write!(f, "{:?}: {} {group}/{}", self.scope, self.verb, self.resource)?;
        if !self.name.is_empty() {
            write!(f, " named {}", self.name)?;
        }
        Ok(())
    }
}

pub fn grant(scope: Scope, group: &str, resource: &str, name: &str, verb: &str) -> Grant {
    Grant {
        scope,
        group: group.into(),
        resource: resource.into(),
        name: name.into(),
        verb: verb.into(),
    }
}

/// [`NEEDED`] as single grants, each with why the code needs it; without the leader-election
/// Lease unless `leader_election`, and with the needs of the chart values in `enabled` only.
pub fn needed(leader_election: bool, enabled: &[&str]) -> BTreeMap<Grant, &'static str> {
    NEEDED
        .iter()
        .filter(|n| leader_election || n.scope != Scope::Release)
        .filter(|n| n.when.is_none_or(|value| enabled.contains(&value)))
        .flat_map(|n| {
            let names: Vec<&str> = if n.names.is_empty() { vec![""] } else { n.names.to_vec() };
            names.into_iter().flat_map(move |name| {
                n.verbs
                    .iter()
                    .map(move |verb| (grant(n.scope, n.group, n.resource, name, verb), n.why))
            })
        })
        .collect()
}

/// Requests kube-remediator must be refused (`chart-install` asks the API server).
pub fn refused() -> Vec<Grant> {
    use Scope::*;
    let g = grant;
    vec![
        // It never reads Secrets, least of all Helm's release Secrets in its own namespace.
        g(Cluster, "", "secrets", "", "list"),
        g(Cluster, "", "secrets", "", "get"),
        g(Cluster, "", "secrets", "", "watch"),
        g(Release, "", "secrets", "", "list"),
        g(Release, "", "secrets", "", "get"),
        g(Release, "", "configmaps", "", "get"),
        // It never changes nodes unless nodeActions.enabled (chart-install uses the defaults).
        g(Cluster, "", "nodes", "", "delete"),
        g(Cluster, "", "nodes", "", "patch"),
        g(Cluster, "", "nodes", "", "update"),
        g(Cluster, "", "nodes/status", "", "patch"),
        // Pods: read, force-delete and remove allowlisted finalizers only.
        g(Cluster, "", "pods", "", "create"),
        g(Cluster, "", "pods", "", "update"),
        g(Cluster, "", "pods/exec", "", "create"),
        // Policies are the users' to write; the operator writes only their status.
        g(Cluster, "remediator.io", "remediationpolicies", "", "create"),
        g(Cluster, "remediator.io", "remediationpolicies", "", "update"),
        g(Cluster, "remediator.io", "remediationpolicies", "", "patch"),
        g(Cluster, "remediator.io", "remediationpolicies", "", "delete"),
        g(Cluster, "remediator.io", "remediationpolicies/status", "", "update"),
        // Leases: kubelets' read-only, and only the one leader Lease writable.
        g(Cluster, "coordination.k8s.io", "leases", "", "list"),
        g(NodeLeases, "coordination.k8s.io", "leases", "", "update"),
        g(NodeLeases, "coordination.k8s.io", "leases", "", "patch"),
        g(NodeLeases, "coordination.k8s.io", "leases", "", "delete"),
        g(Release, "coordination.k8s.io", "leases", "", "list"),
        g(Release, "coordination.k8s.io", "leases", "", "delete"),
        g(Release, "coordination.k8s.io", "leases", "someone-else", "update"),
        g(Release, "coordination.k8s.io", "leases", LEADER_LEASE, "patch"),
        g(Release, "coordination.k8s.io", "leases", LEADER_LEASE, "delete"),
        g(Release, "coordination.k8s.io", "leases", LEADER_LEASE, "watch"),
        // Events: events.k8s.io only, never deleted.
        g(Cluster, "events.k8s.io", "events", "", "delete"),
        g(Cluster, "", "events", "", "create"),
        // No way to become someone else.
        g(Cluster, "", "serviceaccounts/token", "", "create"),
        g(Cluster, "", "users", "", "impersonate"),
        g(Cluster, "rbac.authorization.k8s.io", "clusterroles", "", "bind"),
        g(Cluster, "rbac.authorization.k8s.io", "clusterroles", "", "escalate"),
        g(Cluster, "apps", "deployments", "", "update"),
    ]
}
