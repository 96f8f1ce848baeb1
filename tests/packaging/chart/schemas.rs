//! `chart-kubernetes-schemas`: the chart rendered with the default values and with every
//! feature on, and the plain manifests in `deploy/`, validate against the JSON schemas of
//! Kubernetes 1.33 and 1.37, the oldest and newest versions supported, strictly (a field the
//! schema does not know fails). The validator is `kubernetes-validate` from PyPI, pinned in
//! `tools/kubernetes-validate/requirements.txt` and installed by `tools/venv`: its wheel
//! carries the schemas of every Kubernetes minor version, generated from Kubernetes' own
//! OpenAPI, so nothing is fetched when it runs.
//!
//! Kinds that are not Kubernetes' own have no schema there and are named below with what checks
//! them instead; any other kind without a schema (a misspelt apiVersion) fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

use super::DEFAULT_RELEASE;
use super::lint::ALL_FEATURES;
use crate::support::chart::Helm;
use crate::support::cluster::{repo_root, tool_dir};

/// The oldest and the newest Kubernetes the operator supports.
const VERSIONS: [&str; 2] = ["1.33", "1.37"];

/// Kinds without a schema in Kubernetes', and what checks them instead.
const OTHER_KINDS: [(&str, &str); 3] = [
    (
        "RemediationPolicy remediator.io/v1alpha1",
        "ours: the API server checks it against the CRD in the end-to-end tests (chart-install, pv-*)",
    ),
    (
        "PrometheusRule monitoring.coreos.com/v1",
        "prometheus-operator's: chart-alerts runs promtool on its rules",
    ),
    (
        "ServiceMonitor monitoring.coreos.com/v1",
        "prometheus-operator's: chart-lint checks its port and path",
    ),
];

pub(super) fn manifests_validate_against_kubernetes_schemas() -> Result<()> {
    // tools/venv installs it on first use.
    let validate = tool_dir("venv", &["kubernetes-validate"])?.join("kubernetes-validate");
    let helm = Helm::new()?;
    let dir = repo_root().join("target").join("chart-kubernetes-schemas");
    std::fs::create_dir_all(&dir)?;
    let mut files = Vec::new();
    for (name, extra) in [("default", vec![]), ("all-features", vec!["--values", ALL_FEATURES])] {
        let file = dir.join(format!("chart-{name}.yaml"));
        std::fs::write(&file, helm.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &extra)?)?;
        files.push(file);
    }
    for sub in ["deploy", "deploy/examples"] {
        files.extend(yaml_files(&repo_root().join(sub))?);
    }
    ensure!(files.len() >= 6, "expected the chart's renders and deploy/'s manifests: {files:?}");

    for version in VERSIONS {
        let out = Command::new(&validate)
            .args(["--strict", "--quiet", "--kubernetes-version", version])
            .args(&files)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", validate.display()))?;
        let printed = String::from_utf8_lossy(&out.stdout);
        let problems: Vec<&str> = printed
            .lines()
            .filter(|line| {
                let without_schema = line.starts_with("WARN ")
                    && OTHER_KINDS.iter().any(|(kind, _)| {
                        let (kind, api_version) = kind.split_once(' ').unwrap_or_default();
                        line.contains(&format!("kind {kind} with api version {api_version} "))
                    });
                !line.trim().is_empty() && !without_schema
            })
            .collect();
        ensure!(
            out.status.success() && problems.is_empty(),
            "kubernetes-validate --strict against Kubernetes {version}:\n{}\n{}",
            problems.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The `.yaml` files directly in `dir`, sorted.
fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "yaml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}
