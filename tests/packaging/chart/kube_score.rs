//! `chart-kube-score`: kube-score (the pinned `tools/kube-score` module, in `tools/testbin
//! ship`), every check on, its optional ones too (as `kube-score list` names them), passes on the chart rendered with the default
//! values and with every feature on. What it reports that we accept is skipped by the check's
//! name with the reason beside it, and a skip that no longer matches a finding fails too, so the
//! list stays true.

use std::collections::BTreeSet;
use std::process::Command;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::DEFAULT_RELEASE;
use super::lint::ALL_FEATURES;
use crate::support::chart::Helm;
use crate::support::cluster::{TestBin, repo_root};

/// The oldest Kubernetes the chart supports: kube-score's API deprecation checks use it.
const KUBERNETES: &str = "v1.33";

/// kube-score's checks whose findings we accept, by name, and why.
const ACCEPTED: [(&str, &str); 7] = [
    (
        "container-cpu-requests-equal-limits",
        "no CPU limit on purpose (see --ignore-container-cpu-limit below): the pod is \
         Burstable, and CFS throttling would delay actions timed to their deadline",
    ),
    (
        "container-memory-requests-equal-limits",
        "the memory limit is headroom over the request for a relist of a large cluster, \
         not the steady use the request is sized for (docs/src/operations/sizing.md)",
    ),
    ("container-resource-requests-equal-limits", "the two checks above, together"),
    (
        "container-ephemeral-storage-request-and-limit",
        "the root filesystem is read-only and the pod mounts no volume: it writes nothing \
         but its log, which the kubelet rotates",
    ),
    (
        "pod-networkpolicy",
        "the pod listens on its metrics port alone and talks only to the API server, whose \
         address differs per cluster: a NetworkPolicy is the cluster's to write",
    ),
    (
        "container-image-pull-policy",
        "the default IfNotPresent is safe for an image pinned by digest, as the install \
         instructions do (image.digest); pullPolicy is a value for registries that need Always",
    ),
    (
        "deployment-has-host-podantiaffinity",
        "the replicas are spread over nodes by topologySpreadConstraints on \
         kubernetes.io/hostname (kube-score's pod-topology-spread-constraints checks it), \
         which unlike a required anti-affinity also ignores nodes whose taints they do not \
         tolerate, such as a dead node's",
    ),
];

/// The container has a CPU request and no CPU limit, on purpose: CFS throttling would delay
/// actions timed to their deadline (100 ms p99 is the target).
const IGNORE_CPU_LIMIT: &str = "--ignore-container-cpu-limit";

pub(super) fn kube_score_passes() -> Result<()> {
    let kube_score = TestBin::ship_tool("kube-score")?;
    let helm = Helm::new()?;
    let dir = repo_root().join("target").join("chart-kube-score");
    std::fs::create_dir_all(&dir)?;
    let optional = optional_checks(&kube_score)?;
    ensure!(optional.len() >= 4, "kube-score lists optional checks {optional:?}");
    let mut unmatched: BTreeSet<&str> = ACCEPTED.iter().map(|(check, _)| *check).collect();
    for (name, extra) in [("default", vec![]), ("all-features", vec!["--values", ALL_FEATURES])] {
        let rendered = helm.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &extra)?;
        let file = dir.join(format!("{name}.yaml"));
        std::fs::write(&file, rendered)?;
        let score = |extra: &[&str]| {
            let mut cmd = Command::new(&kube_score);
            cmd.args(["score", "--kubernetes-version", KUBERNETES]);
            for check in &optional {
                cmd.args(["--enable-optional-test", check]);
            }
            cmd.args(extra).arg(&file);
            cmd.output().with_context(|| format!("running {}", kube_score.display()))
        };

        // Every accepted check still finds something somewhere: otherwise its skip goes.
        let out = score(&["--output-format", "json", IGNORE_CPU_LIMIT])?;
        let report: Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!("kube-score's JSON: {}", String::from_utf8_lossy(&out.stderr))
        })?;
        for finding in findings(&report) {
            unmatched.remove(finding.as_str());
        }

        let mut args = vec!["--output-format", "ci", "--exit-one-on-warning", IGNORE_CPU_LIMIT];
        for (check, _) in ACCEPTED {
            args.extend(["--ignore-test", check]);
        }
        let out = score(&args)?;
        let printed = String::from_utf8_lossy(&out.stdout);
        let failed: Vec<&str> = printed
            .lines()
            .filter(|l| !l.starts_with("[OK]") && !l.starts_with("[SKIPPED]"))
            .collect();
        ensure!(
            out.status.success() && failed.is_empty(),
            "kube-score on the chart rendered with the {name} values ({}):\n{}\n{}",
            file.display(),
            failed.join("\n"),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    ensure!(
        unmatched.is_empty(),
        "accepted kube-score checks that no longer find anything (remove them from ACCEPTED): \
         {unmatched:?}"
    );
    Ok(())
}

/// The names of the checks that graded some object below OK (a warning or critical).
fn findings(report: &Value) -> BTreeSet<String> {
    let objects = report.as_array().into_iter().flatten();
    let checks = objects.flat_map(|o| o["checks"].as_array().into_iter().flatten());
    checks
        .filter(|c| c["skipped"] != true && c["grade"].as_i64().is_some_and(|g| g < 10))
        .filter_map(|c| c["check"]["id"].as_str().map(String::from))
        .collect()
}

/// The checks kube-score runs only when asked, from `kube-score list` (CSV: name, kind,
/// description, `default` or `optional`).
fn optional_checks(kube_score: &std::path::Path) -> Result<Vec<String>> {
    let out = Command::new(kube_score).arg("list").output()?;
    ensure!(out.status.success(), "kube-score list: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| line.ends_with(",optional"))
        .filter_map(|line| line.split(',').next().map(String::from))
        .collect())
}
