//! The Helm chart (`charts/kube-remediator`) and what is generated from it, checked with `helm`,
//! `promtool` and the third-party checkers users run (kube-score, kubernetes-validate).
//!
//! - `chart-lint`: `helm lint --strict` and `helm template` are clean with the default values and
//!   with every optional feature on (`ci/all-features-values.yaml`), and the rendered objects
//!   hold what the issue asks (restricted pod security, probes, the metrics port, the alerts and
//!   dashboard query only metrics the code exports).
//! - `chart-values-schema`: `values.schema.json` refuses bad values, naming the field.
//! - `chart-values-docs`: values.yaml, values.schema.json and the README's values table agree.
//! - `chart-alerts`: the alerts pass `promtool check rules` and their unit tests
//!   (`alerts.test.yaml`, run by `promtool test rules`).
//! - `chart-dashboard`: every query of the Grafana dashboard (panels, variables) has a test in
//!   `dashboard.test.yaml` expecting samples, and `promtool test rules` passes them over its
//!   synthetic series.
//! - `chart-kube-score`: kube-score, every check on, passes on the chart rendered with the
//!   default values and with every feature on, but for the findings we accept, each skipped by
//!   name with its reason.
//! - `chart-kubernetes-schemas`: the rendered chart and `deploy/` validate, strictly, against
//!   the schemas of Kubernetes 1.33 and 1.37 (kubernetes-validate from PyPI, `tools/venv`).
//! - `chart-package`: `helm package` holds what users need, with Artifact Hub annotations in
//!   step with the values, the CRD and its examples.
//! - `chart-plain-manifests`: `deploy/kube-remediator.yaml` is `helm template` with the defaults.
//! - `chart-rbac`: the ClusterRole and Roles grant exactly `NEEDED` (`tests/support/rbac.rs`),
//!   the table of what the code calls.
//! - `chart-dockerfile`: the Dockerfile builds what `tools/image` builds and the chart runs
//!   (build command, user, port, binary path).
//!
//! One file per trial. `chart-install` and `chart-admission-guard`, which install the chart on
//! the control plane, are end-to-end tests (`tests/e2e/chart/`). The pinned `helm` runner and
//! `helm package` and `helm template` are test support (`tests/support/chart.rs`); this file adds
//! the YAML helpers the trials here share.

mod alerts;
mod dashboard;
mod dockerfile;
mod kube_score;
mod lint;
mod package;
mod plain_manifests;
mod rbac;
mod schemas;
mod values_docs;
mod values_schema;

use anyhow::{Context, Result, bail, ensure};
use libtest_mimic::Trial;
use serde_json::Value;

use crate::support::chart::documents;
use crate::support::cluster::TestBin;

use alerts::alerts_pass_promtool;
use dashboard::dashboard_queries_pass_promtool;
use dockerfile::dockerfile_builds_what_the_chart_runs;
use kube_score::kube_score_passes;
use lint::lint_and_template_are_clean;
use package::package_is_what_users_install;
use plain_manifests::plain_manifests_are_the_chart_defaults;
use rbac::rbac_is_exactly_what_the_code_needs;
use schemas::manifests_validate_against_kubernetes_schemas;
use values_docs::values_yaml_schema_and_readme_agree;
use values_schema::values_schema_refuses_bad_values;

pub fn trials() -> Vec<Trial> {
    vec![
        trial("chart-lint", lint_and_template_are_clean),
        trial("chart-values-schema", values_schema_refuses_bad_values),
        trial("chart-values-docs", values_yaml_schema_and_readme_agree),
        trial("chart-alerts", alerts_pass_promtool),
        trial("chart-dashboard", dashboard_queries_pass_promtool),
        trial("chart-kube-score", kube_score_passes),
        trial("chart-kubernetes-schemas", manifests_validate_against_kubernetes_schemas),
        trial("chart-package", package_is_what_users_install),
        trial("chart-plain-manifests", plain_manifests_are_the_chart_defaults),
        trial("chart-rbac", rbac_is_exactly_what_the_code_needs),
        trial("chart-dockerfile", dockerfile_builds_what_the_chart_runs),
    ]
}

fn trial(name: &'static str, body: fn() -> Result<()>) -> Trial {
    Trial::test(name, move || body().map_err(|e| format!("{e:#}").into()))
}

/// The release name and namespace the plain manifests are rendered for.
const DEFAULT_RELEASE: &str = "kube-remediator";

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str) -> Result<&'a Value> {
    match of_kind(docs, kind).as_slice() {
        [one] => Ok(one),
        found => bail!("expected one {kind}, rendered {}", found.len()),
    }
}

pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
}

/// Runs the pinned promtool in `dir`; fails with what it printed unless it succeeds.
fn promtool(dir: &std::path::Path, args: &[&str]) -> Result<()> {
    let promtool = TestBin::ship_tool("promtool")?;
    let out = std::process::Command::new(&promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {}", promtool.display()))?;
    ensure!(
        out.status.success(),
        "promtool {} failed:\n{}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
