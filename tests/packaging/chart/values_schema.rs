//! `chart-values-schema`: `values.schema.json` refuses bad values, naming the field, and accepts
//! values at the limits.

use anyhow::{Result, ensure};

use super::DEFAULT_RELEASE;
use crate::support::chart::{CHART, Helm};

pub(super) fn values_schema_refuses_bad_values() -> Result<()> {
    let helm = Helm::new()?;
    // (arguments, the field the error must name)
    let refused: [(&[&str], &str); 12] = [
        (&["--set", "replicaCount=-1"], "/replicaCount"),
        (&["--set", "replicaCount=two"], "/replicaCount"),
        (&["--set", "image.tag="], "/image/tag"),
        (&["--set", "image.digest=sha256:abc"], "/image/digest"),
        (&["--set", "metrics.port=70000"], "/metrics/port"),
        (&["--set", "defaultPolicy.spec.mode=Audit"], "/defaultPolicy/spec/mode"),
        (&["--set", "defaultPolicy.name=Not_A_Name"], "/defaultPolicy/name"),
        (&["--set-string", "leaderElection.enabled=true"], "/leaderElection/enabled"),
        (&["--set-string", "admissionGuard.enabled=false"], "/admissionGuard/enabled"),
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
