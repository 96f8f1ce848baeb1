//! The Helm chart (`charts/kube-remediator`) as the tests drive it: the pinned `helm` of the test
//! binaries with configuration directories of its own, and `helm package`, which makes the chart
//! as users get it, and `helm template`. Shared by the packaging trials (`tests/packaging/chart/`)
//! and the end-to-end trials that install the chart or read its monitoring (`tests/e2e/`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

use super::cluster::{TestBin, repo_root};

pub const CHART: &str = "charts/kube-remediator";
/// The leader-election Lease's name (in the release namespace).
pub const LEADER_LEASE: &str = "kube-remediator";

/// The pinned `helm` of the test binaries, with its own configuration directories so that the
/// user's repositories and plugins play no part.
pub struct Helm {
    bin: PathBuf,
    home: PathBuf,
}

/// What one `helm` run printed.
pub struct HelmOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Helm {
    pub fn new() -> Result<Helm> {
        let bin = TestBin::locate()?.path("helm");
        ensure!(bin.is_file(), "{} is missing; run tools/testbin", bin.display());
        let home = repo_root().join("target").join("helm-home");
        std::fs::create_dir_all(&home)?;
        Ok(Helm { bin, home })
    }

    /// Runs helm in the repository root; never fails on helm's own exit status.
    pub fn output(&self, args: &[&str]) -> Result<HelmOutput> {
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
    pub fn run(&self, args: &[&str]) -> Result<HelmOutput> {
        let out = self.output(args)?;
        ensure!(out.success, "helm {} failed:\n{}{}", args.join(" "), out.stdout, out.stderr);
        Ok(out)
    }

    /// `helm template` of the chart; fails on any message on stderr (warnings included).
    pub fn template(&self, release: &str, namespace: &str, extra: &[&str]) -> Result<String> {
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

/// The objects of a multi-document YAML stream (helm's output), as JSON.
pub fn documents(yaml: &str) -> Result<Vec<serde_json::Value>> {
    use serde::Deserialize;
    let mut docs = Vec::new();
    for doc in yaml_serde::Deserializer::from_str(yaml) {
        let value = yaml_serde::Value::deserialize(doc).context("parsing helm's output")?;
        if !value.is_null() {
            docs.push(serde_json::to_value(value)?);
        }
    }
    Ok(docs)
}

/// Runs helm from async code.
pub async fn helm_async(args: &[&str]) -> Result<HelmOutput> {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Helm::new()?.run(&args)
    })
    .await?
}

/// `helm package` of the chart into `dir`; the package's path.
pub fn package(helm: &Helm, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let out = helm.run(&["package", CHART, "--destination", &dir.display().to_string()])?;
    let path = out
        .stdout
        .lines()
        .find_map(|l| l.split_once("saved it to: ").map(|(_, p)| PathBuf::from(p.trim())))
        .with_context(|| format!("helm package said {}", out.stdout))?;
    ensure!(path.is_file(), "{} is missing", path.display());
    Ok(path)
}
