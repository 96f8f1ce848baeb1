//! The Helm chart (`charts/kube-remediator`) and what is generated from it.
//!
//! - `chart-lint`: `helm lint --strict` and `helm template` are clean with the default values and
//!   with every optional feature on (`ci/all-features-values.yaml`), and the rendered objects
//!   hold what the issue asks (restricted pod security, probes, the metrics port, the alerts and
//!   dashboard query only metrics the code exports).
//! - `chart-values-schema`: `values.schema.json` refuses bad values, naming the field.
//! - `chart-plain-manifests`: `deploy/kube-remediator.yaml` is `helm template` with the defaults.
//! - `chart-rbac`: the ClusterRole and Roles grant exactly [`NEEDED`], the table of what the
//!   code calls.
//! - `chart-dockerfile`: the Dockerfile builds what the chart runs (user, port, binary path).
//! - `chart-install`: `helm install` on the test control plane; the operator, run out of cluster
//!   as the chart's ServiceAccount (impersonated), starts and serves its policy, and is refused
//!   Secrets and node deletion.
//!
//! Only `chart-install` needs the control plane; the others only run `helm`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_remediator::adapters::NODE_LEASE_NAMESPACE;
use kube_remediator::crd::RemediationPolicy;
use libtest_mimic::Trial;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::e2e;
use crate::support::cluster::{Cluster, TestBin, repo_root};
use crate::support::env::TEST_LABEL;
use crate::support::operator::{Operator, binary};
use crate::support::{TestEnv, install_crd, shared_cluster, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![
        offline("chart-lint", lint_and_template_are_clean),
        offline("chart-values-schema", values_schema_refuses_bad_values),
        offline("chart-plain-manifests", plain_manifests_are_the_chart_defaults),
        offline("chart-rbac", rbac_is_exactly_what_the_code_needs),
        offline("chart-dockerfile", dockerfile_builds_what_the_chart_runs),
        e2e!("chart-install", installed_chart_grants_enough_and_no_more),
    ]
}

/// A trial that needs `helm` but not the control plane.
fn offline(name: &'static str, body: fn() -> Result<()>) -> Trial {
    Trial::test(name, move || body().map_err(|e| format!("{e:#}").into()))
}

const CHART: &str = "charts/kube-remediator";
/// Every optional feature on, every value changed.
const ALL_FEATURES: &str = "charts/kube-remediator/ci/all-features-values.yaml";
/// The chart's defaults as plain manifests.
const PLAIN_MANIFESTS: &str = "deploy/kube-remediator.yaml";
/// The release name and namespace the plain manifests are rendered for.
const DEFAULT_RELEASE: &str = "kube-remediator";
/// The command that rewrites [`PLAIN_MANIFESTS`].
const REGENERATE: &str = "UPDATE_GENERATED=1 cargo test --test e2e -- chart-plain-manifests";
/// The leader-election Lease's name (in the release namespace).
const LEADER_LEASE: &str = "kube-remediator";

// ----- What the code needs from the API server ---------------------------------------------

/// Where a grant applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    /// Every namespace, and cluster-scoped objects: the ClusterRole.
    Cluster,
    /// The kubelets' Lease namespace (`kube-node-lease`): a Role there.
    NodeLeases,
    /// The release namespace: a Role there.
    Release,
}

/// Some verbs on one resource, in one scope, and the code that calls them.
struct Need {
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
        scope: Scope::Cluster,
        group: "",
        resource: "nodes",
        names: &[],
        verbs: &["get", "list", "watch"],
        why: "the node watch (controllers/watch.rs, cli/run.rs preflight); the writer re-reads \
              the pod's node just before a force delete (writer/mod.rs)",
    },
    Need {
        scope: Scope::Cluster,
        group: "",
        resource: "pods",
        names: &[],
        verbs: &["get", "list", "watch", "delete"],
        why: "the pod watch; the writer re-reads the pod, then deletes it with grace 0 and a UID \
              precondition",
    },
    Need {
        scope: Scope::Cluster,
        group: "",
        resource: "namespaces",
        names: &[],
        verbs: &["list", "watch"],
        why: "namespace labels for namespaceSelector (the namespace watch)",
    },
    Need {
        scope: Scope::Cluster,
        group: "",
        resource: "persistentvolumeclaims",
        names: &[],
        verbs: &["list", "watch"],
        why: "claim access modes for requireFencingFor: [ReadWriteOnce] (the claim watch)",
    },
    Need {
        scope: Scope::Cluster,
        group: "apps",
        resource: "deployments",
        names: &[],
        verbs: &["list", "watch"],
        why: "Recreate rollouts blocked by Terminating pods (controllers/rollouts.rs)",
    },
    Need {
        scope: Scope::Cluster,
        group: "apps",
        resource: "statefulsets",
        names: &[],
        verbs: &["list", "watch"],
        why: "StatefulSets blocked by a Terminating pod (controllers/rollouts.rs)",
    },
    Need {
        scope: Scope::Cluster,
        group: "apps",
        resource: "replicasets",
        names: &[],
        verbs: &["list", "watch"],
        why: "which Deployment owns a Terminating pod's ReplicaSet, and whether it is scaled down",
    },
    Need {
        scope: Scope::NodeLeases,
        group: "coordination.k8s.io",
        resource: "leases",
        names: &[],
        verbs: &["list", "watch"],
        why: "kubelet heartbeats (renewTime): the Lease watch in kube-node-lease",
    },
    Need {
        scope: Scope::Cluster,
        group: "remediator.io",
        resource: "remediationpolicies",
        names: &[],
        verbs: &["get", "list", "watch"],
        why: "the policy controller's watch (controllers/policy.rs), `plan`, the CRD preflight",
    },
    Need {
        scope: Scope::Cluster,
        group: "remediator.io",
        resource: "remediationpolicies/status",
        names: &[],
        verbs: &["patch"],
        why: "Writer::patch_status (merge patch of the status subresource)",
    },
    Need {
        scope: Scope::Cluster,
        group: "events.k8s.io",
        resource: "events",
        names: &[],
        verbs: &["create", "patch"],
        why: "kube's events::Recorder: create, then patch a repeated Event into a series",
    },
    Need {
        scope: Scope::Release,
        group: "coordination.k8s.io",
        resource: "leases",
        names: &[],
        verbs: &["create"],
        why: "leader election (src/leader.rs, leaderElection.enabled): the first replica \
              creates the Lease; create cannot be limited to a name",
    },
    Need {
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
struct Grant {
    scope: Scope,
    group: String,
    resource: String,
    /// Empty for any name.
    name: String,
    verb: String,
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

fn grant(scope: Scope, group: &str, resource: &str, name: &str, verb: &str) -> Grant {
    Grant {
        scope,
        group: group.into(),
        resource: resource.into(),
        name: name.into(),
        verb: verb.into(),
    }
}

/// [`NEEDED`] as single grants, each with why the code needs it; without the leader-election
/// Lease unless `leader_election`.
fn needed(leader_election: bool) -> BTreeMap<Grant, &'static str> {
    NEEDED
        .iter()
        .filter(|n| leader_election || n.scope != Scope::Release)
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
fn refused() -> Vec<Grant> {
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
        // It never changes nodes (cordon, taints and deletion are not in this release).
        g(Cluster, "", "nodes", "", "delete"),
        g(Cluster, "", "nodes", "", "patch"),
        g(Cluster, "", "nodes", "", "update"),
        g(Cluster, "", "nodes/status", "", "patch"),
        // Pods: read and force-delete only.
        g(Cluster, "", "pods", "", "create"),
        g(Cluster, "", "pods", "", "patch"),
        g(Cluster, "", "pods", "", "update"),
        g(Cluster, "", "pods/eviction", "", "create"),
        g(Cluster, "", "pods/exec", "", "create"),
        // Policies are the users' to write; the operator writes only their status.
        g(Cluster, "remediator.io", "remediationpolicies", "", "create"),
        g(Cluster, "remediator.io", "remediationpolicies", "", "update"),
        g(Cluster, "remediator.io", "remediationpolicies", "", "patch"),
        g(Cluster, "remediator.io", "remediationpolicies", "", "delete"),
        g(Cluster, "remediator.io", "remediationpolicies/status", "", "update"),
        // Leases: kubelets' read-only, and only the one leader Lease writable.
        g(Cluster, "coordination.k8s.io", "leases", "", "list"),
        g(NodeLeases, "coordination.k8s.io", "leases", "", "get"),
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

// ----- helm ------------------------------------------------------------------------------------

/// The pinned `helm` of the test binaries, with its own configuration directories so that the
/// user's repositories and plugins play no part.
struct Helm {
    bin: PathBuf,
    home: PathBuf,
}

/// What one `helm` run printed.
struct HelmOutput {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Helm {
    fn new() -> Result<Helm> {
        let bin = TestBin::locate()?.path("helm");
        ensure!(bin.is_file(), "{} is missing; run tools/testbin", bin.display());
        let home = repo_root().join("target").join("helm-home");
        std::fs::create_dir_all(&home)?;
        Ok(Helm { bin, home })
    }

    /// Runs helm in the repository root; never fails on helm's own exit status.
    fn output(&self, args: &[&str]) -> Result<HelmOutput> {
        let out = Command::new(&self.bin)
            .args(args)
            .current_dir(repo_root())
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", self.bin.display()))?;
        Ok(HelmOutput {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }

    /// Runs helm and fails with what it printed unless it succeeds.
    fn run(&self, args: &[&str]) -> Result<HelmOutput> {
        let out = self.output(args)?;
        ensure!(out.success, "helm {} failed:\n{}{}", args.join(" "), out.stdout, out.stderr);
        Ok(out)
    }

    /// `helm template` of the chart; fails on any message on stderr (warnings included).
    fn template(&self, release: &str, namespace: &str, extra: &[&str]) -> Result<String> {
        let mut args = vec!["template", release, CHART, "--namespace", namespace];
        args.extend_from_slice(extra);
        let out = self.run(&args)?;
        ensure!(
            out.stderr.trim().is_empty(),
            "helm {} printed on stderr:\n{}",
            args.join(" "),
            out.stderr
        );
        Ok(out.stdout)
    }
}

/// Runs helm from async code.
async fn helm_async(args: &[&str]) -> Result<HelmOutput> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Helm::new()?.run(&args)
    })
    .await?
}

/// The objects of a multi-document YAML stream, as JSON.
fn documents(yaml: &str) -> Result<Vec<Value>> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_yaml::Value::deserialize(doc).context("parsing helm's output")?;
        if !value.is_null() {
            docs.push(serde_json::to_value(value)?);
        }
    }
    Ok(docs)
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> Result<&'a Value> {
    match of_kind(docs, kind).as_slice() {
        [one] => Ok(one),
        found => bail!("expected one {kind}, rendered {}", found.len()),
    }
}

fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
}

// ----- chart-lint --------------------------------------------------------------------------------

/// Kinds rendered with the default values.
const DEFAULT_KINDS: [&str; 9] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "Deployment",
    "PodDisruptionBudget",
    "RemediationPolicy",
    "Role",
    "RoleBinding",
    "Service",
    "ServiceAccount",
];
/// Kinds only the optional features add.
const OPTIONAL_KINDS: [&str; 3] = ["ConfigMap", "PrometheusRule", "ServiceMonitor"];
/// Cluster-scoped kinds among them (no metadata.namespace).
const CLUSTER_KINDS: [&str; 3] = ["ClusterRole", "ClusterRoleBinding", "RemediationPolicy"];

fn lint_and_template_are_clean() -> Result<()> {
    let helm = Helm::new()?;
    check_versions()?;
    for (what, extra) in
        [("the default values", vec![]), ("every feature on", vec!["--values", ALL_FEATURES])]
    {
        let mut lint = vec!["lint", "--strict", CHART];
        lint.extend_from_slice(&extra);
        let out = helm.run(&lint).with_context(|| format!("helm lint with {what}"))?;
        let printed = format!("{}{}", out.stdout, out.stderr);
        ensure!(
            !printed.contains("[WARNING]") && !printed.contains("[ERROR]"),
            "helm lint with {what}:\n{printed}"
        );

        let rendered = helm.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &extra)?;
        let docs = documents(&rendered)?;
        check_objects(&docs, !extra.is_empty()).with_context(|| format!("with {what}"))?;
        check_deployment(&docs).with_context(|| format!("with {what}"))?;
        check_monitoring(&docs).with_context(|| format!("with {what}"))?;
    }

    // The defaults themselves.
    let docs = documents(&helm.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &[])?)?;
    let deploy = one(&docs, "Deployment")?;
    let pod = &deploy["spec"]["template"]["spec"];
    ensure!(deploy["spec"]["replicas"] == 2, "replicas: {}", deploy["spec"]["replicas"]);
    ensure!(pod["priorityClassName"] == "system-cluster-critical", "{}", pod["priorityClassName"]);
    ensure!(
        pod["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule",
        "the replicas must be spread over nodes: {}",
        pod["topologySpreadConstraints"]
    );
    let args = strings(&pod["containers"][0]["args"]);
    for arg in [
        "--leader-elect=true".to_string(),
        format!("--leader-election-namespace={DEFAULT_RELEASE}"),
        format!("--leader-election-lease={LEADER_LEASE}"),
    ] {
        ensure!(args.contains(&arg), "{arg} is not passed by default: {args:?}");
    }
    ensure!(
        str_at(pod, "/containers/0/image").ends_with(&format!(":{}", env!("CARGO_PKG_VERSION"))),
        "the default image is not the crate's version: {}",
        pod["containers"][0]["image"]
    );
    let policy = one(&docs, "RemediationPolicy")?;
    ensure!(policy["spec"]["mode"] == "DryRun", "the default policy: {}", policy["spec"]);

    // leaderElection.enabled=false: the flag says so, and no Lease is granted.
    let docs = documents(&helm.template(
        DEFAULT_RELEASE,
        DEFAULT_RELEASE,
        &["--set", "leaderElection.enabled=false"],
    )?)?;
    let args =
        strings(&one(&docs, "Deployment")?["spec"]["template"]["spec"]["containers"][0]["args"]);
    ensure!(args.contains(&"--leader-elect=false".to_string()), "args: {args:?}");
    ensure!(
        !args.iter().any(|a| a.starts_with("--leader-election-")),
        "Lease arguments without leader election: {args:?}"
    );
    ensure!(of_kind(&docs, "Role").len() == 1, "the leader-election Role without leader election");
    Ok(())
}

/// Chart.yaml's appVersion and the default image tag are the crate's version (the chart's own
/// version may move on its own).
fn check_versions() -> Result<()> {
    let read = |file: &str| -> Result<serde_yaml::Value> {
        let path = repo_root().join(CHART).join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(serde_yaml::from_str(&text)?)
    };
    let chart = read("Chart.yaml")?;
    let values = read("values.yaml")?;
    let crate_version = env!("CARGO_PKG_VERSION");
    for (what, value) in [
        ("Chart.yaml appVersion", &chart["appVersion"]),
        ("values.yaml image.tag", &values["image"]["tag"]),
    ] {
        ensure!(
            value.as_str() == Some(crate_version),
            "{what} is {value:?}, the crate's version is {crate_version}"
        );
    }
    Ok(())
}

/// Every object is named, namespaced when it should be, unique, of a known kind.
fn check_objects(docs: &[Value], all_features: bool) -> Result<()> {
    let mut seen = BTreeSet::new();
    for doc in docs {
        let kind = str_at(doc, "/kind");
        let name = str_at(doc, "/metadata/name");
        let namespace = str_at(doc, "/metadata/namespace");
        ensure!(!str_at(doc, "/apiVersion").is_empty() && !kind.is_empty(), "untyped: {doc}");
        ensure!(!name.is_empty(), "a {kind} without a name");
        ensure!(
            DEFAULT_KINDS.contains(&kind) || (all_features && OPTIONAL_KINDS.contains(&kind)),
            "unexpected {kind} {name}"
        );
        ensure!(
            CLUSTER_KINDS.contains(&kind) == namespace.is_empty(),
            "{kind} {name} has namespace {namespace:?}"
        );
        ensure!(seen.insert((kind, namespace, name)), "{kind} {namespace}/{name} rendered twice");
    }
    let kinds: BTreeSet<&str> = docs.iter().map(|d| str_at(d, "/kind")).collect();
    let mut want: BTreeSet<&str> = DEFAULT_KINDS.into_iter().collect();
    if all_features {
        want.extend(OPTIONAL_KINDS);
    }
    ensure!(kinds == want, "rendered kinds {kinds:?}, expected {want:?}");
    Ok(())
}

/// The restricted Pod Security Standard, the probes, and one metrics port everywhere.
fn check_deployment(docs: &[Value]) -> Result<()> {
    let deploy = one(docs, "Deployment")?;
    let pod = &deploy["spec"]["template"]["spec"];
    ensure!(pod["securityContext"]["runAsNonRoot"] == true, "pod: {}", pod["securityContext"]);
    ensure!(pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault");
    let containers = pod["containers"].as_array().cloned().unwrap_or_default();
    ensure!(containers.len() == 1, "{} containers", containers.len());
    let c = &containers[0];
    let sc = &c["securityContext"];
    ensure!(sc["allowPrivilegeEscalation"] == false, "container: {sc}");
    ensure!(sc["readOnlyRootFilesystem"] == true, "container: {sc}");
    ensure!(sc["runAsNonRoot"] == true, "container: {sc}");
    ensure!(sc["capabilities"]["drop"] == json!(["ALL"]), "container: {sc}");
    ensure!(sc["capabilities"].get("add").is_none(), "container: {sc}");
    ensure!(sc["seccompProfile"]["type"] == "RuntimeDefault", "container: {sc}");
    ensure!(sc.get("privileged").is_none_or(|p| p == false), "container: {sc}");

    let port = c["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "metrics")
        .and_then(|p| p["containerPort"].as_i64())
        .context("no container port named metrics")?;
    let args = strings(&c["args"]);
    ensure!(args.first().map(String::as_str) == Some("run"), "args: {args:?}");
    ensure!(args.contains(&format!("--metrics-addr=0.0.0.0:{port}")), "args: {args:?}");
    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        ensure!(
            c[probe]["httpGet"]["path"] == path && c[probe]["httpGet"]["port"] == "metrics",
            "{probe}: {}",
            c[probe]
        );
    }
    ensure!(c["resources"]["requests"].is_object(), "no resource requests");
    let spread = &pod["topologySpreadConstraints"][0];
    ensure!(spread["topologyKey"] == "kubernetes.io/hostname", "spread: {spread}");

    let service = one(docs, "Service")?;
    let sp = &service["spec"]["ports"][0];
    ensure!(sp["port"] == port && sp["targetPort"] == "metrics", "Service port: {sp}");
    ensure!(
        service["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"],
        "the Service selects {}, the pods are {}",
        service["spec"]["selector"],
        deploy["spec"]["selector"]["matchLabels"]
    );
    let sa = one(docs, "ServiceAccount")?;
    ensure!(pod["serviceAccountName"] == sa["metadata"]["name"], "{}", pod["serviceAccountName"]);
    Ok(())
}

/// Every metric name in the alerts and the dashboard is one the operator exports, and the
/// alerts are the three the issue asks for.
fn check_monitoring(docs: &[Value]) -> Result<()> {
    let known = exported_series();
    let mut queries = Vec::new();
    if let Some(rule) = of_kind(docs, "PrometheusRule").first() {
        let alerts: Vec<String> = rule["spec"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .map(|r| {
                queries.push(str_at(&r, "/expr").to_string());
                str_at(&r, "/alert").to_string()
            })
            .collect();
        ensure!(
            alerts
                == [
                    "KubeRemediatorPodsStuckTerminating",
                    "KubeRemediatorCircuitOpen",
                    "KubeRemediatorRolloutBlocked"
                ],
            "alerts: {alerts:?}"
        );
    }
    if let Some(map) = of_kind(docs, "ConfigMap").first() {
        let json = str_at(map, "/data/kube-remediator.json");
        let dashboard: Value = serde_json::from_str(json).context("the dashboard is not JSON")?;
        ensure!(dashboard["title"] == "kube-remediator", "dashboard title {}", dashboard["title"]);
        for panel in dashboard["panels"].as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                queries.push(str_at(target, "/expr").to_string());
            }
        }
        ensure!(queries.len() > 3, "the dashboard has no queries");
    }
    for query in &queries {
        for name in metric_names(query) {
            ensure!(
                known.contains(&name),
                "{name} (in {query:?}) is not exported; the operator exports {known:?}"
            );
        }
    }
    Ok(())
}

/// The series names the operator's registry exposes (counters with `_total`, histograms with
/// `_bucket`, `_sum`, `_count`).
fn exported_series() -> BTreeSet<String> {
    use kube_remediator::metrics::{
        ActionLabels, BlockedLabels, DelayLabels, ErrorLabels, Metrics, PolicyLabels, StuckLabels,
    };
    // Families without a series are not encoded: give each one.
    let m = Metrics::new();
    let (p, a, mode) = (String::from("p"), String::from("ForceDelete"), String::from("DryRun"));
    let result = String::from("WouldAct");
    m.actions
        .get_or_create(&ActionLabels {
            policy: p.clone(),
            action: a.clone(),
            mode: mode.clone(),
            result,
        })
        .inc();
    m.action_delay.get_or_create(&DelayLabels { policy: p.clone(), action: a, mode }).observe(0.1);
    m.stuck_pods
        .get_or_create(&StuckLabels { policy: p.clone(), node_state: "Dead".into() })
        .set(1);
    m.circuit_open.get_or_create(&PolicyLabels { policy: p.clone() }).set(0);
    m.policy_invalid.get_or_create(&PolicyLabels { policy: p }).set(0);
    m.reconcile_errors.get_or_create(&ErrorLabels { category: "Kube".into() }).inc();
    m.blocked_rollouts
        .get_or_create(&BlockedLabels { kind: "Deployment".into(), cause: "NodeUnhealthy".into() })
        .set(0);
    let text = m.encode();
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (words.next(), words.next(), words.next(), words.next())
        {
            match kind {
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_string());
                }
            }
        }
    }
    names
}

/// The `kube_remediator_...` metric names a query mentions.
fn metric_names(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = query;
    while let Some(at) = rest.find("kube_remediator_") {
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

// ----- chart-values-schema -----------------------------------------------------------------------

fn values_schema_refuses_bad_values() -> Result<()> {
    let helm = Helm::new()?;
    // (arguments, the field the error must name)
    let refused: [(&[&str], &str); 11] = [
        (&["--set", "replicaCount=-1"], "/replicaCount"),
        (&["--set", "replicaCount=two"], "/replicaCount"),
        (&["--set", "image.tag="], "/image/tag"),
        (&["--set", "image.digest=sha256:abc"], "/image/digest"),
        (&["--set", "metrics.port=70000"], "/metrics/port"),
        (&["--set", "defaultPolicy.spec.mode=Audit"], "/defaultPolicy/spec/mode"),
        (&["--set", "defaultPolicy.name=Not_A_Name"], "/defaultPolicy/name"),
        (&["--set-string", "leaderElection.enabled=true"], "/leaderElection/enabled"),
        (&["--set", "log.format=xml"], "/log/format"),
        (&["--set", "serviceMonitor.interval=30"], "/serviceMonitor/interval"),
        // A typo is an error, not a silently ignored value.
        (&["--set", "replicaCont=2"], "replicaCont"),
    ];
    let mut failures = Vec::new();
    for (args, field) in refused {
        let mut all = vec!["template", DEFAULT_RELEASE, CHART];
        all.extend_from_slice(args);
        let out = helm.output(&all)?;
        let shown = args.join(" ");
        if out.success {
            failures.push(format!("{shown}: accepted"));
        } else if !out.stderr.contains("values don't meet the specifications of the schema") {
            failures.push(format!("{shown}: not a schema error: {}", out.stderr.trim()));
        } else if !out.stderr.contains(field) {
            failures.push(format!("{shown}: the error does not name {field}: {}", out.stderr));
        }
    }
    // Values at the limits are accepted.
    let accepted: [&[&str]; 5] = [
        &["--set", "replicaCount=0"],
        &["--set", "image.tag=v1.2.3-rc.1"],
        &["--set", "podDisruptionBudget.maxUnavailable=50%"],
        &["--set", "defaultPolicy.spec.mode=Enforce"],
        &["--set", "defaultPolicy.enabled=false,serviceAccount.create=false"],
    ];
    for args in accepted {
        if let Err(e) = helm.template(DEFAULT_RELEASE, DEFAULT_RELEASE, args) {
            failures.push(format!("{}: refused: {e:#}", args.join(" ")));
        }
    }
    ensure!(failures.is_empty(), "{} problems:\n  {}", failures.len(), failures.join("\n  "));
    Ok(())
}

// ----- chart-plain-manifests ---------------------------------------------------------------------

/// The first lines of [`PLAIN_MANIFESTS`], before helm's output.
const PLAIN_HEADER: &str = "\
# kube-remediator with the Helm chart's default values, for clusters without Helm:
#
#   kubectl create namespace kube-remediator
#   kubectl apply --server-side -f deploy/crd.yaml
#   kubectl wait --for condition=Established crd/remediationpolicies.remediator.io
#   kubectl apply -f deploy/kube-remediator.yaml
#
# Generated: `helm template kube-remediator charts/kube-remediator --namespace kube-remediator`.
# Do not edit; tests/e2e/chart.rs checks it. After changing the chart, regenerate it with
#   UPDATE_GENERATED=1 cargo test --test e2e -- chart-plain-manifests
";

fn plain_manifests_are_the_chart_defaults() -> Result<()> {
    let want =
        format!("{PLAIN_HEADER}{}", Helm::new()?.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &[])?);
    let path = repo_root().join(PLAIN_MANIFESTS);
    let current = std::fs::read_to_string(&path).ok();
    if current.as_deref() == Some(want.as_str()) {
        return Ok(());
    }
    if std::env::var_os("UPDATE_GENERATED").is_some_and(|v| v == "1") {
        std::fs::write(&path, &want).with_context(|| format!("writing {PLAIN_MANIFESTS}"))?;
        return Ok(());
    }
    let Some(current) = current else {
        bail!("{PLAIN_MANIFESTS} is missing; generate it with `{REGENERATE}`");
    };
    let line = current
        .lines()
        .zip(want.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| current.lines().count().min(want.lines().count()));
    bail!(
        "{PLAIN_MANIFESTS} differs from the chart's defaults from line {} on (has {:?}, want \
         {:?}). Regenerate it with `{REGENERATE}` and commit the result.",
        line + 1,
        current.lines().nth(line).unwrap_or("<end of file>"),
        want.lines().nth(line).unwrap_or("<end of file>"),
    )
}

// ----- chart-rbac --------------------------------------------------------------------------------

fn rbac_is_exactly_what_the_code_needs() -> Result<()> {
    let helm = Helm::new()?;
    let namespace = "remediator-system";
    for (leader_election, extra) in [
        (true, vec!["--set", "serviceAccount.name=remediator"]),
        (false, vec!["--set", "leaderElection.enabled=false"]),
    ] {
        let docs = documents(&helm.template("rbac", namespace, &extra)?)?;
        let granted =
            chart_grants(&docs, namespace).with_context(|| format!("with {}", extra.join(" ")))?;
        let want = needed(leader_election);
        let missing: Vec<String> = want
            .iter()
            .filter(|(g, _)| !granted.contains(g))
            .map(|(g, why)| format!("{g} ({why})"))
            .collect();
        let extra_grants: Vec<String> =
            granted.iter().filter(|g| !want.contains_key(g)).map(Grant::to_string).collect();
        ensure!(
            missing.is_empty() && extra_grants.is_empty(),
            "the chart's RBAC ({}) differs from NEEDED in tests/e2e/chart.rs:\n  \
             the code needs, the chart does not grant: {missing:#?}\n  \
             the chart grants, the code does not need: {extra_grants:#?}",
            extra.join(" ")
        );
    }
    Ok(())
}

/// What the rendered ClusterRoles and Roles grant the chart's ServiceAccount, through their
/// bindings. Fails on wildcards, unbound roles, and bindings to anyone else.
fn chart_grants(docs: &[Value], namespace: &str) -> Result<BTreeSet<Grant>> {
    let sa = one(docs, "ServiceAccount")?;
    let sa_name = str_at(sa, "/metadata/name");
    let deploy = one(docs, "Deployment")?;
    ensure!(
        str_at(deploy, "/spec/template/spec/serviceAccountName") == sa_name,
        "the pods do not run as ServiceAccount {sa_name}"
    );
    let want_subject =
        json!([{ "kind": "ServiceAccount", "name": sa_name, "namespace": namespace }]);

    let mut grants = BTreeSet::new();
    let mut bound = BTreeSet::new();
    for (binding_kind, role_kind) in
        [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")]
    {
        for binding in of_kind(docs, binding_kind) {
            let binding_ns = str_at(binding, "/metadata/namespace");
            let name = str_at(binding, "/metadata/name");
            ensure!(
                binding["subjects"] == want_subject,
                "{binding_kind} {name} binds {}, not the ServiceAccount alone",
                binding["subjects"]
            );
            ensure!(
                str_at(binding, "/roleRef/kind") == role_kind,
                "{binding_kind} {name} refers to a {}",
                str_at(binding, "/roleRef/kind")
            );
            let role_name = str_at(binding, "/roleRef/name");
            let role = of_kind(docs, role_kind)
                .into_iter()
                .find(|r| {
                    str_at(r, "/metadata/name") == role_name
                        && str_at(r, "/metadata/namespace") == binding_ns
                })
                .with_context(|| format!("{binding_kind} {name}: no {role_kind} {role_name}"))?;
            bound.insert((role_kind, binding_ns.to_string(), role_name.to_string()));
            let scope = match (role_kind, binding_ns) {
                ("ClusterRole", _) => Scope::Cluster,
                (_, ns) if ns == NODE_LEASE_NAMESPACE => Scope::NodeLeases,
                (_, ns) if ns == namespace => Scope::Release,
                (_, ns) => bail!("Role {role_name} in unexpected namespace {ns:?}"),
            };
            for rule in role["rules"].as_array().into_iter().flatten() {
                ensure!(rule.get("nonResourceURLs").is_none(), "{role_name}: {rule}");
                let names = strings(&rule["resourceNames"]);
                let names = if names.is_empty() { vec![String::new()] } else { names };
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            ensure!(
                                ![&group, &resource, &verb].iter().any(|s| s.contains('*')),
                                "{role_kind} {role_name} has a wildcard: {rule}"
                            );
                            for name in &names {
                                grants.insert(grant(scope, &group, &resource, name, &verb));
                            }
                        }
                    }
                }
            }
        }
    }
    for kind in ["ClusterRole", "Role"] {
        for role in of_kind(docs, kind) {
            let key = (
                kind,
                str_at(role, "/metadata/namespace").to_string(),
                str_at(role, "/metadata/name").to_string(),
            );
            ensure!(bound.contains(&key), "{kind} {} is bound to nobody", key.2);
        }
    }
    Ok(grants)
}

// ----- chart-dockerfile --------------------------------------------------------------------------

fn dockerfile_builds_what_the_chart_runs() -> Result<()> {
    let read = |file: &str| {
        std::fs::read_to_string(repo_root().join(file)).with_context(|| format!("reading {file}"))
    };
    let dockerfile = read("Dockerfile")?;
    let instructions: Vec<String> = dockerfile
        .replace("\\\n", " ")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    let with = |keyword: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter_map(|l| l.strip_prefix(keyword).and_then(|rest| rest.strip_prefix(' ')))
            .map(str::trim)
            .collect()
    };

    // The build: the command tools/test runs (KUBE_REMEDIATOR_RELEASE_BUILD=1), on the files it
    // copies, with a Rust at least as new as Cargo.toml's rust-version.
    const BUILD: &str = "cargo build --locked --release --bin kube-remediator";
    ensure!(with("RUN").iter().any(|r| r.contains(BUILD)), "the Dockerfile does not run {BUILD}");
    ensure!(read("tools/test")?.contains(BUILD), "tools/test does not run {BUILD}");
    let copies: Vec<&str> = with("COPY").into_iter().filter(|c| !c.starts_with("--from")).collect();
    ensure!(
        copies == ["Cargo.toml Cargo.lock ./", "src ./src"],
        "the build copies {copies:?}; tools/test copies Cargo.toml, Cargo.lock and src/"
    );
    let rust = with("ARG")
        .into_iter()
        .find_map(|a| a.strip_prefix("RUST_VERSION="))
        .context("no ARG RUST_VERSION=")?;
    let need = env!("CARGO_PKG_RUST_VERSION");
    ensure!(
        version_at_least(rust, need),
        "the Dockerfile builds with Rust {rust}, Cargo.toml's rust-version is {need}"
    );

    // The runtime image: the user, port and binary the chart expects.
    let docs = documents(&Helm::new()?.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &[])?)?;
    let pod = &one(&docs, "Deployment")?["spec"]["template"]["spec"];
    let user =
        format!("{}:{}", pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]);
    ensure!(
        with("USER").last() == Some(&user.as_str()),
        "USER {:?}, the chart runs as {user}",
        with("USER")
    );
    ensure!(user != "0:0" && !user.starts_with("0:"), "the image runs as root");
    let port = pod["containers"][0]["ports"][0]["containerPort"].to_string();
    ensure!(
        with("EXPOSE") == [port.as_str()],
        "EXPOSE {:?}, the chart's port is {port}",
        with("EXPOSE")
    );
    ensure!(
        with("ENTRYPOINT") == [r#"["/usr/local/bin/kube-remediator"]"#],
        "ENTRYPOINT {:?}: the chart passes arguments only, and NOTES.txt runs `kube-remediator \
         plan` from the PATH",
        with("ENTRYPOINT")
    );
    ensure!(
        with("COPY").iter().any(|c| c.ends_with(" /usr/local/bin/kube-remediator")),
        "the binary is not copied to /usr/local/bin"
    );
    let runtime = with("FROM").last().copied().unwrap_or_default();
    ensure!(runtime.contains("distroless") && runtime.contains("nonroot"), "runtime {runtime}");
    Ok(())
}

/// Whether the dotted version `have` is at least `need` (`1.95` >= `1.89`).
fn version_at_least(have: &str, need: &str) -> bool {
    let parse = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(have) >= parse(need)
}

// ----- chart-install -----------------------------------------------------------------------------

async fn installed_chart_grants_enough_and_no_more(env: &TestEnv) -> Result<()> {
    let cluster = shared_cluster().await?;
    install_crd(&env.client).await?;
    // The pods must pass the "restricted" Pod Security Standard.
    let psa = json!({ "metadata": { "labels": {
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    }}});
    Api::<Namespace>::all(env.client.clone())
        .patch(&env.namespace, &PatchParams::default(), &Patch::Merge(&psa))
        .await?;
    // Two nodes of this test's own, so the spread over nodes shows.
    let second = env.add_node("b").await?;

    let release = env.name.clone();
    let fullname = format!("{release}-kube-remediator");
    let policy = format!("{}-audit", env.name);
    // Nothing here may touch the other tests: the policy has a unique name, selects no node,
    // and only this test's operator serves it; the pods run on this test's nodes.
    let values = json!({
        "policySelector": format!("{TEST_LABEL}={}", env.name),
        "defaultPolicy": {
            "name": policy,
            "labels": { TEST_LABEL: env.name },
            "spec": {
                "mode": "DryRun",
                "nodeSelector": { "matchLabels": { TEST_LABEL: format!("{}-no-such-node", env.name) } },
            },
        },
        "nodeSelector": { TEST_LABEL: env.name },
    });
    let values_file = cluster.dir.join(format!("{}-values.yaml", env.name));
    std::fs::write(&values_file, serde_yaml::to_string(&values)?)?;

    let kubeconfig = cluster.kubeconfig.display().to_string();
    let values_file = values_file.display().to_string();
    let install = helm_async(&[
        "install",
        &release,
        CHART,
        "--namespace",
        &env.namespace,
        "--kubeconfig",
        &kubeconfig,
        "--skip-crds",
        "--values",
        &values_file,
        "--timeout",
        "60s",
    ])
    .await?;
    for needle in ["kubectl get rp", "recentActions", "WouldForceDelete", "kube-remediator plan"] {
        ensure!(install.stdout.contains(needle), "NOTES lack {needle:?}:\n{}", install.stdout);
    }

    wait_deployment_available(env, &release, &fullname, 2).await?;
    let pods = env
        .list_pods(&format!("app.kubernetes.io/instance={release}"))
        .await?
        .into_iter()
        .filter_map(|p: Pod| p.spec.and_then(|s| s.node_name))
        .collect::<BTreeSet<String>>();
    let want: BTreeSet<String> = [env.healthy_node.clone(), second].into();
    ensure!(pods == want, "the two replicas run on {pods:?}, expected one on each of {want:?}");

    // The chart's ServiceAccount, impersonated by the admin.
    let sa = format!("system:serviceaccount:{}:{fullname}", env.namespace);
    let sa_kubeconfig = cluster.dir.join(format!("{}.kubeconfig", env.name));
    write_impersonating_kubeconfig(cluster, &sa, &sa_kubeconfig)?;
    let as_sa = client_for(&sa_kubeconfig).await?;

    // Everything in NEEDED is allowed, nothing in refused() is.
    let mut failures = Vec::new();
    for (g, why) in needed(true) {
        if !allowed(&as_sa, &g, &env.namespace).await? {
            failures.push(format!("refused, but the code needs it: {g} ({why})"));
        }
    }
    for g in refused() {
        if allowed(&as_sa, &g, &env.namespace).await? {
            failures.push(format!("allowed, but must be refused: {g}"));
        }
    }
    // And for real: no Secrets (Helm keeps its releases in this very namespace), no node deletion.
    let no_node = format!("{}-no-such-node", env.name);
    let real = [
        (
            "list secrets",
            code(Api::<Secret>::all(as_sa.clone()).list(&ListParams::default()).await),
        ),
        (
            "list secrets in the release namespace",
            code(
                Api::<Secret>::namespaced(as_sa.clone(), &env.namespace)
                    .list(&ListParams::default())
                    .await,
            ),
        ),
        (
            "delete nodes",
            code(Api::<Node>::all(as_sa.clone()).delete(&no_node, &DeleteParams::default()).await),
        ),
    ];
    for (what, status) in real {
        if status != 403 {
            failures.push(format!("{what} as {sa}: HTTP {status}, expected 403"));
        }
    }
    ensure!(failures.is_empty(), "{} problems:\n  {}", failures.len(), failures.join("\n  "));

    // The operator, with the chart's own arguments, as that ServiceAccount: it passes its
    // preflight, its watches sync (/readyz), and it writes its policy's status.
    let deploy = env.api::<Deployment>().get(&fullname).await?;
    let chart_args = deploy
        .spec
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.args)
        .context("the Deployment's container has no args")?;
    let args: Vec<String> =
        chart_args.into_iter().filter(|a| !a.starts_with("--metrics-addr")).collect();
    let mut operator = Operator::start_with_args(cluster, &env.name, &sa_kubeconfig, &args).await?;
    let policies: Api<RemediationPolicy> = Api::all(env.client.clone());
    wait_for("the operator to write the policy's status", Duration::from_secs(30), || {
        let (policies, policy) = (policies.clone(), policy.clone());
        async move {
            let p = policies.get(&policy).await?;
            let status = p.status.as_ref();
            let ready = status.is_some_and(|s| {
                s.observed_generation == p.metadata.generation
                    && s.conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
            });
            Ok(ready.then_some(()))
        }
    })
    .await
    .with_context(|| format!("see {}", operator.log.display()))?;
    // It took the chart's leader Lease (create, get) in the release namespace, and hands it
    // back (update) on SIGTERM.
    let leader = operator.metric("kube_remediator_leader", &[]).await?;
    ensure!(leader == Some(1.0), "kube_remediator_leader = {leader:?}: the Lease was not taken");
    let status = operator.terminate(Duration::from_secs(10))?;
    ensure!(status.success(), "the operator exited with {status} on SIGTERM");
    let lease =
        Api::<Lease>::namespaced(env.client.clone(), &env.namespace).get(LEADER_LEASE).await?;
    let holder = lease.spec.and_then(|s| s.holder_identity);
    ensure!(holder.is_none(), "the Lease is still held by {holder:?} after SIGTERM");

    // `kube-remediator plan`, which NOTES.txt tells users to run in the pod, works with the
    // same grants.
    let plan = {
        let (kubeconfig, selector) = (sa_kubeconfig.clone(), format!("{TEST_LABEL}={}", env.name));
        tokio::task::spawn_blocking(move || {
            Command::new(binary())
                .args(["plan", "-o", "json", "--policy-selector", &selector, "--kubeconfig"])
                .arg(kubeconfig)
                .output()
        })
        .await??
    };
    ensure!(
        plan.status.success() && String::from_utf8_lossy(&plan.stdout).contains(&policy),
        "kube-remediator plan as {sa} failed ({}):\n{}{}",
        plan.status,
        String::from_utf8_lossy(&plan.stdout),
        String::from_utf8_lossy(&plan.stderr)
    );

    // Uninstalling removes the cluster-scoped objects too.
    helm_async(&[
        "uninstall",
        &release,
        "--namespace",
        &env.namespace,
        "--kubeconfig",
        &kubeconfig,
        "--wait",
    ])
    .await?;
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    ensure!(roles.get_opt(&fullname).await?.is_none(), "ClusterRole {fullname} survived");
    ensure!(policies.get_opt(&policy).await?.is_none(), "policy {policy} survived");
    Ok(())
}

/// Waits until the release's Deployment has `count` available replicas; fails at once when its
/// ReplicaSet cannot create pods (Pod Security admission refusing them, say).
async fn wait_deployment_available(
    env: &TestEnv,
    release: &str,
    name: &str,
    count: i32,
) -> Result<()> {
    let deployments = env.api::<Deployment>();
    let replica_sets = env.api::<ReplicaSet>();
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={release}"));
    let outcome = wait_for(
        &format!("Deployment {name} to have {count} available replicas"),
        Duration::from_secs(60),
        || {
            let (deployments, replica_sets, lp) = (&deployments, &replica_sets, &lp);
            async move {
                for rs in replica_sets.list(lp).await?.items {
                    let failure = rs
                        .status
                        .and_then(|s| s.conditions)
                        .into_iter()
                        .flatten()
                        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True");
                    if let Some(c) = failure {
                        return Ok(Some(Err(c.message.unwrap_or_default())));
                    }
                }
                let d = deployments.get(name).await?;
                let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
                Ok((available == count).then_some(Ok(())))
            }
        },
    )
    .await?;
    outcome.map_err(|message| anyhow::anyhow!("the operator's pods were refused: {message}"))
}

/// The admin kubeconfig with `as: <user>`: every request is made as `user` (kube-rs sends the
/// Impersonate-User header for it).
fn write_impersonating_kubeconfig(cluster: &Cluster, user: &str, path: &Path) -> Result<()> {
    let mut kubeconfig = Kubeconfig::read_from(&cluster.kubeconfig)?;
    for named in &mut kubeconfig.auth_infos {
        if let Some(auth) = named.auth_info.as_mut() {
            auth.impersonate = Some(user.to_string());
        }
    }
    std::fs::write(path, serde_yaml::to_string(&kubeconfig)?)?;
    Ok(())
}

async fn client_for(kubeconfig: &Path) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Whether the client's user may do `g`, by a SelfSubjectAccessReview.
async fn allowed(client: &kube::Client, g: &Grant, release_namespace: &str) -> Result<bool> {
    let (resource, subresource) = match g.resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (g.resource.clone(), None),
    };
    let namespace = match g.scope {
        Scope::Cluster => None,
        Scope::NodeLeases => Some(NODE_LEASE_NAMESPACE.to_string()),
        Scope::Release => Some(release_namespace.to_string()),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(g.group.clone()),
                resource: Some(resource),
                subresource,
                verb: Some(g.verb.clone()),
                namespace,
                name: (!g.name.is_empty()).then(|| g.name.clone()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .with_context(|| format!("SelfSubjectAccessReview of {g}"))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The HTTP status of an API call: 200 when it succeeded, 0 when it failed without an answer.
fn code<T>(result: kube::Result<T>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(_) => 0,
    }
}
