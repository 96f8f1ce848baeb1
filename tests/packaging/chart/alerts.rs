//! `chart-alerts`: the alerts tested like code. The PrometheusRule the chart renders (with its
//! default durations) passes `promtool check rules`, and `promtool test rules` runs
//! `alerts.test.yaml` against it: each alert fires on synthetic series when and with the
//! labels, value and text it should, not before, and counts once what two replicas both export.
//! Every alert the chart defines has a test there, and a `runbook_url` naming its page in the
//! manual (`docs/src/runbooks/<alert>.md`), which exists.

use std::collections::BTreeSet;

use anyhow::{Result, ensure};
use serde_json::json;

use super::{DEFAULT_RELEASE, documents, one, promtool};
use crate::support::chart::Helm;
use crate::support::cluster::repo_root;

const TESTS: &str = "tests/packaging/chart/alerts.test.yaml";

pub(super) fn alerts_pass_promtool() -> Result<()> {
    let rendered = Helm::new()?.template(
        DEFAULT_RELEASE,
        DEFAULT_RELEASE,
        &["--set", "prometheusRule.enabled=true"],
    )?;
    let docs = documents(&rendered)?;
    let groups = &one(&docs, "PrometheusRule")?["spec"]["groups"];
    let dir = repo_root().join("target").join("chart-alerts");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("rules.yaml"), yaml_serde::to_string(&json!({ "groups": groups }))?)?;
    let tests = std::fs::read_to_string(repo_root().join(TESTS))?;
    std::fs::write(dir.join("alerts.test.yaml"), &tests)?;

    let defined: BTreeSet<&str> = groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    let tested: BTreeSet<String> = tests
        .lines()
        .filter_map(|l| l.trim().strip_prefix("alertname:").map(|n| n.trim().to_string()))
        .collect();
    let untested: Vec<&&str> = defined.iter().filter(|a| !tested.contains(**a)).collect();
    ensure!(untested.is_empty(), "alerts without a test in {TESTS}: {untested:?}");
    ensure!(defined.len() == 5, "the chart defines {defined:?}");
    runbooks_exist(groups)?;

    promtool(&dir, &["check", "rules", "rules.yaml"])?;
    promtool(&dir, &["test", "rules", "alerts.test.yaml"])
}

/// Every alert's `runbook_url` ends in `/<alert>.md`, and that page is in the manual.
fn runbooks_exist(groups: &serde_json::Value) -> Result<()> {
    let rules = groups.as_array().into_iter().flatten();
    for rule in rules.flat_map(|g| g["rules"].as_array().into_iter().flatten()) {
        let Some(alert) = rule["alert"].as_str() else { continue };
        let url = rule["annotations"]["runbook_url"].as_str().unwrap_or_default();
        let page = format!("{alert}.md");
        ensure!(url.ends_with(&format!("/{page}")), "{alert}: runbook_url {url:?} names no page");
        let path = repo_root().join("docs/src/runbooks").join(&page);
        ensure!(path.is_file(), "{alert}: its runbook {} does not exist", path.display());
    }
    Ok(())
}
