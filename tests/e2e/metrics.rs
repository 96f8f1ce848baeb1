//! The operator's live `/metrics`, scraped from a running operator that has recorded an action
//! (a DryRun policy, a pod stuck Terminating on a dead node), checked
//! by the tools that read it: `promtool check metrics` (the exposition parses, and the names,
//! units and types follow Prometheus' conventions), and every metric an alert of the chart's
//! PrometheusRule or a query of its Grafana dashboard names is one the operator declares.
//!
//! The operator serves OpenMetrics 1.0; `promtool check metrics` reads the Prometheus text
//! format 0.0.4, where a counter's `# HELP` and `# TYPE` name its `_total` series and there is
//! no `# UNIT` nor `# EOF`. Fed OpenMetrics as it is, promtool reports every counter with a
//! series as having no help text; the trial rewrites those lines alone.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use libtest_mimic::Trial;

use crate::e2e;
use crate::fixtures::until;
use crate::stuck_terminating::{Scenario, one_pod_on_a_dying_node};
use crate::support::chart::Helm;
use crate::support::cluster::TestBin;
use crate::support::monitoring::{chart_queries, declared_series, metric_names};
use crate::support::{TestEnv, wait_for};

pub fn trials() -> Vec<Trial> {
    vec![e2e!("me-live-metrics", live_metrics_pass_promtool_and_name_what_the_chart_queries)]
}

async fn live_metrics_pass_promtool_and_name_what_the_chart_queries(env: &TestEnv) -> Result<()> {
    // A pod stuck Terminating on a dead node, recorded in DryRun: the policy's gauges, an
    // action and its delay have series, as in a cluster the operator has worked in.
    let Scenario { operator: op, pod_uid, due, .. } =
        one_pod_on_a_dying_node(env, "victim", "DryRun").await?;
    env.wait_policy("a WouldAct record", until(due) + Duration::from_secs(10), |s| {
        s.recent_actions.iter().find(|a| a.uid == pod_uid).map(|_| ())
    })
    .await?;
    let delay = format!("kube_remediator_action_delay_seconds_count{{policy=\"{}\"", env.name);
    let text = wait_for("the action's series on /metrics", Duration::from_secs(10), || async {
        let text = op.metrics().await?;
        Ok(text.contains(&delay).then_some(text))
    })
    .await?;

    let promtool = TestBin::ship_tool("promtool")?;
    let mut child = Command::new(&promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", promtool.display()))?;
    let classic = as_text_format_0_0_4(&text);
    child.stdin.take().context("promtool's stdin")?.write_all(classic.as_bytes())?;
    let out = child.wait_with_output()?;
    ensure!(
        out.status.success(),
        "promtool check metrics on the operator's /metrics:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let declared = declared_series(&text);
    let queries = tokio::task::spawn_blocking(|| chart_queries(&Helm::new()?)).await??;
    ensure!(queries.len() > 10, "the chart's alerts and dashboard send {} queries", queries.len());
    let mut missing = Vec::new();
    for query in &queries {
        for name in metric_names(&query.expr) {
            if !declared.contains(&name) {
                missing.push(format!("{name} (in {}: {})", query.source, query.expr));
            }
        }
    }
    ensure!(
        missing.is_empty(),
        "metrics the chart queries that the live /metrics does not declare:\n{}\n\
         it declares {declared:?}",
        missing.join("\n")
    );
    eprintln!(
        "[{}] /metrics: {} series names, {} chart queries, promtool check metrics clean",
        env.name,
        declared.len(),
        queries.len()
    );
    Ok(())
}

/// An OpenMetrics exposition in the Prometheus text format 0.0.4: a counter family's `# HELP`
/// and `# TYPE` lines name its `_total` series, and `# UNIT` and `# EOF` go. The series lines,
/// and so every name, label and value promtool lints, are left as they are.
fn as_text_format_0_0_4(openmetrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::new();
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ')?;
            counters.contains(name).then(|| format!("{prefix}{name}_total {tail}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}
