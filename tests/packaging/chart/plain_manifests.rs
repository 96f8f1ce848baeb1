//! `chart-plain-manifests`: `deploy/kube-remediator.yaml` is `helm template` with the defaults
//! (`UPDATE_GENERATED=1` rewrites it).

use anyhow::{Context, Result, bail};

use super::DEFAULT_RELEASE;
use crate::support::chart::Helm;
use crate::support::cluster::repo_root;

/// The chart's defaults as plain manifests.
const PLAIN_MANIFESTS: &str = "deploy/kube-remediator.yaml";
/// The command that rewrites [`PLAIN_MANIFESTS`].
const REGENERATE: &str = "UPDATE_GENERATED=1 cargo test --test packaging -- chart-plain-manifests";

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
# Do not edit; tests/packaging/chart/ checks it. After changing the chart, regenerate it with
#   UPDATE_GENERATED=1 cargo test --test packaging -- chart-plain-manifests
";

pub(super) fn plain_manifests_are_the_chart_defaults() -> Result<()> {
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
