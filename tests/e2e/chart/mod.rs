//! The Helm chart (`charts/kube-remediator`) and what is generated from it.
//!
//! - `chart-lint`: `helm lint --strict` and `helm template` are clean with the default values and
//!   with every optional feature on (`ci/all-features-values.yaml`), and the rendered objects
//!   hold what the issue asks (restricted pod security, probes, the metrics port, the alerts and
//!   dashboard query only metrics the code exports).
//! - `chart-values-schema`: `values.schema.json` refuses bad values, naming the field.
//! - `chart-values-docs`: values.yaml, values.schema.json and the README's values table agree.
//! - `chart-alerts`: the alerts pass `promtool check rules` and their unit tests
//!   (`alerts.test.yaml`, run by `promtool test rules`).
//! - `chart-package`: `helm package` holds what users need, with Artifact Hub annotations in
//!   step with the values, the CRD and its examples.
//! - `chart-plain-manifests`: `deploy/kube-remediator.yaml` is `helm template` with the defaults.
//! - `chart-rbac`: the ClusterRole and Roles grant exactly [`NEEDED`](rbac::NEEDED), the table
//!   of what the code calls.
//! - `chart-dockerfile`: the Dockerfile builds what `tools/image` builds and the chart runs
//!   (build command, user, port, binary path).
//! - `chart-install`: `helm install` of the packaged chart on the test control plane; the
//!   operator, run out of cluster as the chart's ServiceAccount (impersonated), starts and
//!   serves its policy, and is refused Secrets and node deletion. `tools/test` runs it once more
//!   with the binary from the image and the image's digest set.
//! - `chart-admission-guard`: the chart's admission guard (a ValidatingAdmissionPolicy) refuses
//!   requests forged with the operator's identity (DELETE of a running pod or of a Ready node,
//!   node and pod patches beyond what remediation writes), naming itself, and lets the
//!   operator's real remediations through (force delete, cordon, out-of-service taint, Node
//!   deletion, finalizer removal).
//!
//! Only `chart-install` and `chart-admission-guard` need the control plane; the others only run
//! `helm`.
//!
//! One file per trial: `lint.rs`, `values_schema.rs`, `values_docs.rs`, `alerts.rs`,
//! `package.rs`, `plain_manifests.rs`, `rbac.rs` (with
//! [`NEEDED`](rbac::NEEDED), the table of what the code needs, which `chart-install` checks
//! too), `dockerfile.rs`, `install.rs` and `admission_guard.rs`. This file holds the pinned `helm` runner and the
//! YAML helpers they share.

mod admission_guard;
mod alerts;
mod dockerfile;
mod install;
mod lint;
mod package;
mod plain_manifests;
mod rbac;
mod values_docs;
mod values_schema;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail, ensure};
use libtest_mimic::Trial;
use serde::Deserialize;
use serde_json::Value;

use crate::e2e;
use crate::support::cluster::{TestBin, repo_root};

use admission_guard::the_guard_refuses_forged_writes_and_passes_remediations;
use alerts::alerts_pass_promtool;
use dockerfile::dockerfile_builds_what_the_chart_runs;
use install::installed_chart_grants_enough_and_no_more;
use lint::lint_and_template_are_clean;
use package::package_is_what_users_install;
use plain_manifests::plain_manifests_are_the_chart_defaults;
use rbac::rbac_is_exactly_what_the_code_needs;
use values_docs::values_yaml_schema_and_readme_agree;
use values_schema::values_schema_refuses_bad_values;

pub fn trials() -> Vec<Trial> {
    vec![
        offline("chart-lint", lint_and_template_are_clean),
        offline("chart-values-schema", values_schema_refuses_bad_values),
        offline("chart-values-docs", values_yaml_schema_and_readme_agree),
        offline("chart-alerts", alerts_pass_promtool),
        offline("chart-package", package_is_what_users_install),
        offline("chart-plain-manifests", plain_manifests_are_the_chart_defaults),
        offline("chart-rbac", rbac_is_exactly_what_the_code_needs),
        offline("chart-dockerfile", dockerfile_builds_what_the_chart_runs),
        e2e!("chart-install", installed_chart_grants_enough_and_no_more),
        e2e!("chart-admission-guard", the_guard_refuses_forged_writes_and_passes_remediations),
    ]
}

/// A trial that needs `helm` but not the control plane.
fn offline(name: &'static str, body: fn() -> Result<()>) -> Trial {
    Trial::test(name, move || body().map_err(|e| format!("{e:#}").into()))
}

const CHART: &str = "charts/kube-remediator";
/// The release name and namespace the plain manifests are rendered for.
const DEFAULT_RELEASE: &str = "kube-remediator";
/// The leader-election Lease's name (in the release namespace).
const LEADER_LEASE: &str = "kube-remediator";

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
    for doc in yaml_serde::Deserializer::from_str(yaml) {
        let value = yaml_serde::Value::deserialize(doc).context("parsing helm's output")?;
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

pub(crate) fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(|v| v.as_str().map(String::from)).collect()
}
