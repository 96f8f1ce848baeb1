//! `chart-package`: the chart as users get it. `helm package` makes
//! `kube-remediator-<version>.tgz` holding the chart's README, values, schema, generated CRD and
//! templates, and not the test values; its Artifact Hub annotations name the image of
//! values.yaml, the CRD the code generates, and the policies of `deploy/examples/` as the CRD's
//! examples. `chart-install` installs this package.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use kube::CustomResourceExt;
use kube_remediator::crd::RemediationPolicy;
use serde_json::Value;

use crate::support::chart::{CHART, Helm, package};
use crate::support::cluster::repo_root;
use crate::support::command_output;

pub(super) fn package_is_what_users_install() -> Result<()> {
    let dir = repo_root().join("target").join("chart-package");
    let package = package(&Helm::new()?, &dir)?;
    let chart = read_yaml(&repo_root().join(CHART).join("Chart.yaml"))?;
    let version = chart["version"].as_str().unwrap_or_default();
    ensure!(
        package.file_name().and_then(|n| n.to_str())
            == Some(&format!("kube-remediator-{version}.tgz")),
        "helm package made {}",
        package.display()
    );

    let listing = command_output(Command::new("tar").arg("-tzf").arg(&package))?;
    let files: Vec<&str> =
        listing.lines().filter_map(|l| l.strip_prefix("kube-remediator/")).collect();
    for needed in [
        "Chart.yaml",
        "README.md",
        "values.yaml",
        "values.schema.json",
        "crds/remediationpolicies.remediator.io.yaml",
        "templates/deployment.yaml",
        "templates/clusterrole.yaml",
        "templates/admission-guard.yaml",
        "files/dashboard.json",
    ] {
        ensure!(files.contains(&needed), "the package lacks {needed}: {files:?}");
    }
    ensure!(
        !files.iter().any(|f| f.starts_with("ci/")),
        "the package holds the test values: {files:?}"
    );
    let crd = command_output(
        Command::new("tar")
            .arg("-xzOf")
            .arg(&package)
            .arg("kube-remediator/crds/remediationpolicies.remediator.io.yaml"),
    )?;
    ensure!(crd == kube_remediator::crd::crd_yaml(), "the packaged CRD is not the code's");

    // Artifact Hub's annotations (https://artifacthub.io/docs/topics/annotations/helm/).
    let annotations = &chart["annotations"];
    let embedded = |key: &str| -> Result<Value> {
        let text = annotations[key].as_str().with_context(|| format!("Chart.yaml lacks {key}"))?;
        let yaml: yaml_serde::Value =
            yaml_serde::from_str(text).with_context(|| format!("{key} is not YAML"))?;
        Ok(serde_json::to_value(yaml)?)
    };
    ensure!(
        annotations["artifacthub.io/license"] == env!("CARGO_PKG_LICENSE"),
        "licence annotation"
    );
    let values = read_yaml(&repo_root().join(CHART).join("values.yaml"))?;
    let image = format!(
        "{}:{}",
        values["image"]["repository"].as_str().unwrap_or_default(),
        values["image"]["tag"].as_str().unwrap_or_default()
    );
    let images = embedded("artifacthub.io/images")?;
    let named: Vec<&str> =
        images.as_array().into_iter().flatten().filter_map(|i| i["image"].as_str()).collect();
    ensure!(
        named == [image.as_str()],
        "artifacthub.io/images names {named:?}, values.yaml {image}"
    );
    let generated = RemediationPolicy::crd();
    let crds = embedded("artifacthub.io/crds")?;
    let versions: Vec<&str> = generated.spec.versions.iter().map(|v| v.name.as_str()).collect();
    ensure!(
        crds.as_array().map(Vec::len) == Some(1)
            && crds[0]["kind"] == generated.spec.names.kind.as_str()
            && crds[0]["name"] == generated.metadata.name.as_deref().unwrap_or_default()
            && versions.contains(&crds[0]["version"].as_str().unwrap_or_default()),
        "artifacthub.io/crds {crds} is not the generated CRD ({:?}, {versions:?})",
        generated.metadata.name
    );
    let examples: Vec<Value> = ["dry-run-audit", "enforce-stateless"]
        .iter()
        .map(|stem| read_yaml(&repo_root().join("deploy/examples").join(format!("{stem}.yaml"))))
        .collect::<Result<_>>()?;
    ensure!(
        embedded("artifacthub.io/crdsExamples")? == Value::Array(examples),
        "artifacthub.io/crdsExamples differ from deploy/examples/"
    );
    for link in embedded("artifacthub.io/links")?.as_array().into_iter().flatten() {
        ensure!(link["url"].as_str().is_some_and(|u| u.starts_with("https://")), "link {link}");
    }
    // The package itself passes the linter.
    Helm::new()?.run(&["lint", "--strict", &package.display().to_string()])?;
    Ok(())
}

pub(super) fn read_yaml(path: &Path) -> Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let yaml: yaml_serde::Value = yaml_serde::from_str(&text)?;
    Ok(serde_json::to_value(yaml)?)
}
