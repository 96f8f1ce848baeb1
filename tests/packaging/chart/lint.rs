//! `chart-lint`: `helm lint --strict` and `helm template` are clean with the default values and
//! with every optional feature on (`ci/all-features-values.yaml`), and the rendered objects hold
//! what the issue asks (restricted pod security, probes, the metrics port, the alerts and
//! dashboard query only metrics the code exports).

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use super::{DEFAULT_RELEASE, documents, of_kind, one, str_at, strings};
use crate::support::chart::{CHART, Helm, LEADER_LEASE};
use crate::support::cluster::repo_root;
use crate::support::monitoring::{
    Query, alert_queries, dashboard_of, dashboard_queries, declared_series, metric_names,
};

/// Every optional feature on, every value changed.
pub(super) const ALL_FEATURES: &str = "charts/kube-remediator/ci/all-features-values.yaml";
/// Kinds rendered with the default values.
const DEFAULT_KINDS: [&str; 11] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "Deployment",
    "PodDisruptionBudget",
    "RemediationPolicy",
    "Role",
    "RoleBinding",
    "Service",
    "ServiceAccount",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];
/// Kinds only the optional features add.
const OPTIONAL_KINDS: [&str; 3] = ["ConfigMap", "PrometheusRule", "ServiceMonitor"];
/// Cluster-scoped kinds among them (no metadata.namespace).
const CLUSTER_KINDS: [&str; 5] = [
    "ClusterRole",
    "ClusterRoleBinding",
    "RemediationPolicy",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
];

pub(super) fn lint_and_template_are_clean() -> Result<()> {
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
        check_admission_guard(&docs).with_context(|| format!("with {what}"))?;
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

    // admissionGuard.enabled=false: no admission policy, no binding.
    let docs = documents(&helm.template(
        DEFAULT_RELEASE,
        DEFAULT_RELEASE,
        &["--set", "admissionGuard.enabled=false"],
    )?)?;
    for kind in ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] {
        ensure!(of_kind(&docs, kind).is_empty(), "a {kind} with admissionGuard.enabled=false");
    }
    Ok(())
}

/// The admission guard matches the operator's own ServiceAccount (the one the Deployment runs
/// as, in the release namespace), refuses (Deny, failurePolicy Fail), and its binding names it.
/// What it refuses is shown on an API server by chart-admission-guard.
fn check_admission_guard(docs: &[Value]) -> Result<()> {
    let policy = one(docs, "ValidatingAdmissionPolicy")?;
    let binding = one(docs, "ValidatingAdmissionPolicyBinding")?;
    let name = str_at(policy, "/metadata/name");
    ensure!(str_at(binding, "/spec/policyName") == name, "the binding names another policy");
    ensure!(binding["spec"]["validationActions"] == json!(["Deny"]), "{}", binding["spec"]);
    ensure!(policy["spec"]["failurePolicy"] == "Fail", "{}", policy["spec"]["failurePolicy"]);
    let deploy = one(docs, "Deployment")?;
    let user = format!(
        "system:serviceaccount:{}:{}",
        str_at(deploy, "/metadata/namespace"),
        str_at(deploy, "/spec/template/spec/serviceAccountName")
    );
    let conditions = policy["spec"]["matchConditions"].as_array().cloned().unwrap_or_default();
    ensure!(
        conditions.len() == 1
            && str_at(&conditions[0], "/expression")
                == format!("request.userInfo.username == '{user}'"),
        "the guard does not match exactly {user}: {conditions:?}"
    );
    Ok(())
}

/// Chart.yaml's appVersion and the default image tag are the crate's version (the chart's own
/// version may move on its own).
fn check_versions() -> Result<()> {
    let read = |file: &str| super::package::read_yaml(&repo_root().join(CHART).join(file));
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
/// alerts are the five the runbooks name.
fn check_monitoring(docs: &[Value]) -> Result<()> {
    let known = exported_series();
    let mut queries = alert_queries(docs);
    if !queries.is_empty() {
        let alerts: Vec<&str> =
            queries.iter().filter_map(|q| q.source.strip_prefix("alert ")).collect();
        ensure!(
            alerts
                == [
                    "KubeRemediatorPodsStuckTerminating",
                    "KubeRemediatorCircuitOpen",
                    "KubeRemediatorRolloutBlocked",
                    "KubeRemediatorNoLeader",
                    "KubeRemediatorSafetyRefusal"
                ],
            "alerts: {alerts:?}"
        );
    }
    if let Some(dashboard) = dashboard_of(docs)? {
        ensure!(dashboard["title"] == "kube-remediator", "dashboard title {}", dashboard["title"]);
        let panels = dashboard_queries(&dashboard)?;
        ensure!(panels.len() > 3, "the dashboard has no queries");
        queries.extend(panels);
    }
    for Query { source, expr } in &queries {
        for name in metric_names(expr) {
            ensure!(
                known.contains(&name),
                "{name} (in {source}: {expr:?}) is not exported; the operator exports {known:?}"
            );
        }
    }
    Ok(())
}

/// The series names the operator's registry exposes (counters with `_total`, histograms with
/// `_bucket`, `_sum`, `_count`).
fn exported_series() -> BTreeSet<String> {
    use kube_remediator::core::NodeState;
    use kube_remediator::core::rollouts::{BlockCause, WorkloadKind};
    use kube_remediator::crd::{ActionKind, ActionResult, Mode};
    use kube_remediator::error::ErrorCategory;
    use kube_remediator::metrics::{
        ActionLabels, BlockedLabels, DelayLabels, ErrorLabels, Label, Metrics, PolicyLabels,
        StuckLabels, WriteKind, WriteLabels,
    };
    // Families without a series are not encoded: give each one.
    let m = Metrics::new();
    let (p, a, mode) = (String::from("p"), ActionKind::ForceDelete, Mode::DryRun);
    let result = ActionResult::WouldAct;
    m.actions.get_or_create(&ActionLabels { policy: p.clone(), action: a, mode, result }).inc();
    m.writes_refused_not_leader.get_or_create(&WriteLabels { write: WriteKind::Event }).inc();
    m.reconcile_duration.observe(0.01);
    m.action_delay.get_or_create(&DelayLabels { policy: p.clone(), action: a, mode }).observe(0.1);
    m.stuck_pods
        .get_or_create(&StuckLabels { policy: p.clone(), node_state: Label(NodeState::Dead) })
        .set(1);
    m.circuit_open.get_or_create(&PolicyLabels { policy: p.clone() }).set(0);
    m.policy_invalid.get_or_create(&PolicyLabels { policy: p }).set(0);
    m.reconcile_errors.get_or_create(&ErrorLabels { category: ErrorCategory::ApiRead }).inc();
    m.blocked_rollouts
        .get_or_create(&BlockedLabels {
            kind: Label(WorkloadKind::Deployment),
            cause: Label(BlockCause::NodeUnhealthy),
        })
        .set(0);
    declared_series(&m.encode())
}
