//! The queries the chart's monitoring runs, and the metric names in them and in a `/metrics`
//! exposition: the alerts of its PrometheusRule, and the Grafana dashboard's panel and
//! template-variable queries as Grafana sends them. Shared by the packaging trials (`chart-lint`,
//! `chart-dashboard`) and the end-to-end trial that scrapes a running operator (`op-metrics`).

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::chart::{Helm, documents};

/// One query: where it is (an alert, a panel, a variable) and its PromQL.
#[derive(Debug)]
pub struct Query {
    pub source: String,
    pub expr: String,
}

/// The chart rendered with its alerts and dashboard on: every alert's query and the dashboard's.
pub fn chart_queries(helm: &Helm) -> Result<Vec<Query>> {
    let on = ["--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true"];
    let docs = documents(&helm.template("kube-remediator", "kube-remediator", &on)?)?;
    let mut queries = alert_queries(&docs);
    let dashboard = dashboard_of(&docs)?.context("the chart rendered no dashboard")?;
    queries.extend(dashboard_queries(&dashboard)?);
    Ok(queries)
}

/// The `expr` of every rule in the rendered PrometheusRules.
pub fn alert_queries(docs: &[Value]) -> Vec<Query> {
    let rules = docs.iter().filter(|d| d["kind"] == "PrometheusRule");
    let groups = rules.flat_map(|r| r["spec"]["groups"].as_array().into_iter().flatten());
    groups
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .map(|rule| Query {
            source: format!("alert {}", rule["alert"].as_str().unwrap_or("(a recording rule)")),
            expr: rule["expr"].as_str().unwrap_or_default().trim().to_string(),
        })
        .collect()
}

/// The dashboard in the rendered ConfigMap, if the chart rendered one.
pub fn dashboard_of(docs: &[Value]) -> Result<Option<Value>> {
    let Some(map) = docs.iter().find(|d| d["kind"] == "ConfigMap") else { return Ok(None) };
    let json = map["data"]["kube-remediator.json"].as_str().unwrap_or_default();
    Ok(Some(serde_json::from_str(json).context("the dashboard is not JSON")?))
}

/// Every query the dashboard sends, as Grafana sends it with every variable at "All" (its
/// `allValue`): each panel's targets (rows' panels too), and each query variable's, where
/// Grafana's `label_values(metric, label)` is the PromQL `group by (label) (metric)`.
pub fn dashboard_queries(dashboard: &Value) -> Result<Vec<Query>> {
    let variables = dashboard["templating"]["list"].as_array().cloned().unwrap_or_default();
    let mut all_values = Vec::new();
    let mut queries = Vec::new();
    for variable in &variables {
        let name = variable["name"].as_str().unwrap_or_default();
        if variable["type"] != "query" {
            continue;
        }
        let all = variable["allValue"].as_str().unwrap_or(".*");
        all_values.push((name.to_string(), all.to_string()));
        let definition = variable["definition"].as_str().unwrap_or_default();
        let Some(args) = definition.strip_prefix("label_values(").and_then(|a| a.strip_suffix(')'))
        else {
            bail!("variable {name}: {definition:?} is not label_values(metric, label)");
        };
        let (metric, label) = args.rsplit_once(',').context("label_values needs a label")?;
        queries.push(Query {
            source: format!("variable {name}"),
            expr: format!("group by ({}) ({})", label.trim(), metric.trim()),
        });
    }
    let mut panels: Vec<&Value> = dashboard["panels"].as_array().into_iter().flatten().collect();
    while let Some(panel) = panels.pop() {
        panels.extend(panel["panels"].as_array().into_iter().flatten());
        let title = panel["title"].as_str().unwrap_or_default();
        for target in panel["targets"].as_array().into_iter().flatten() {
            let mut expr = target["expr"].as_str().unwrap_or_default().trim().to_string();
            for (name, all) in &all_values {
                expr = expr.replace(&format!("${{{name}}}"), all).replace(&format!("${name}"), all);
            }
            ensure!(!expr.is_empty(), "panel {title:?} has a target without a query");
            ensure!(
                !expr.contains('$'),
                "panel {title:?}: a variable the dashboard lacks in {expr}"
            );
            queries.push(Query { source: format!("panel {title:?}"), expr });
        }
    }
    Ok(queries)
}

/// The `kube_remediator_...` metric names a query mentions.
pub fn metric_names(query: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = query;
    while let Some(at) = rest.find("kube_remediator_") {
        let tail = &rest[at..];
        let end =
            tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The series names an exposition's `# TYPE` lines declare (counters with `_total`, histograms
/// with `_bucket`, `_sum`, `_count`).
pub fn declared_series(exposition: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in exposition.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (words.next(), words.next(), words.next(), words.next())
        {
            match kind {
                "counter" => {
                    names.insert(format!("{name}_total"));
                }
                "histogram" => {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
                _ => {
                    names.insert(name.to_string());
                }
            }
        }
    }
    names
}
