//! `chart-dashboard`: the Grafana dashboard's queries tested like the alerts. Every query the
//! dashboard the chart renders sends (each panel's, each template variable's, with every
//! variable at "All") has a test in `dashboard.test.yaml`, written exactly as sent and expecting
//! at least one sample, and `promtool test rules` evaluates them over that file's synthetic
//! series: a query that does not parse, or returns nothing or something else, fails. A test
//! whose query the dashboard no longer sends fails too.

use std::collections::BTreeSet;

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use super::{DEFAULT_RELEASE, documents, promtool};
use crate::support::chart::Helm;
use crate::support::cluster::repo_root;
use crate::support::monitoring::{dashboard_of, dashboard_queries};

const TESTS: &str = "tests/packaging/chart/dashboard.test.yaml";

pub(super) fn dashboard_queries_pass_promtool() -> Result<()> {
    let on = ["--set", "grafanaDashboard.enabled=true"];
    let docs = documents(&Helm::new()?.template(DEFAULT_RELEASE, DEFAULT_RELEASE, &on)?)?;
    let dashboard = dashboard_of(&docs)?.context("the chart rendered no dashboard")?;
    let queries = dashboard_queries(&dashboard)?;
    ensure!(queries.len() >= 10, "the dashboard sends {} queries", queries.len());

    let text = std::fs::read_to_string(repo_root().join(TESTS))?;
    let file: Value = serde_json::to_value(yaml_serde::from_str::<yaml_serde::Value>(&text)?)?;
    let tests = file["tests"].as_array().into_iter().flatten();
    let expr_tests: Vec<&Value> =
        tests.flat_map(|t| t["promql_expr_test"].as_array().into_iter().flatten()).collect();
    let mut tested = BTreeSet::new();
    for test in &expr_tests {
        let expr = test["expr"].as_str().unwrap_or_default().trim();
        let samples = test["exp_samples"].as_array().map_or(0, Vec::len);
        ensure!(samples > 0, "{TESTS}: the test of {expr:?} expects no sample");
        tested.insert(expr.to_string());
    }
    let sent: BTreeSet<&str> = queries.iter().map(|q| q.expr.as_str()).collect();
    let untested: Vec<String> = queries
        .iter()
        .filter(|q| !tested.contains(&q.expr))
        .map(|q| format!("{}: {}", q.source, q.expr))
        .collect();
    ensure!(
        untested.is_empty(),
        "dashboard queries without a test in {TESTS}:\n{}",
        untested.join("\n")
    );
    let stale: Vec<&String> = tested.iter().filter(|e| !sent.contains(e.as_str())).collect();
    ensure!(stale.is_empty(), "{TESTS} tests queries the dashboard does not send: {stale:?}");

    let dir = repo_root().join("target").join("chart-dashboard");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("dashboard.test.yaml"), &text)?;
    promtool(&dir, &["test", "rules", "dashboard.test.yaml"])
}
