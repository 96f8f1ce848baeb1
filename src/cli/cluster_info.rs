//! `kube-remediator cluster-info`: connectivity check, the server's version and the features the
//! operator depends on, and a node health report.

use std::process::ExitCode;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

use super::ConnectionArgs;
use super::table::{Table, human};
use crate::adapters::{NODE_LEASE_NAMESPACE, node_observation};
use crate::core::{NodeHealth, NodeObservation, assess_node};
use crate::server::{NEWEST_SUPPORTED, OLDEST_SUPPORTED, ServerFeatures, Support};
use crate::{Error, Result};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Output {
    Table,
    Json,
}

pub async fn run(conn: &ConnectionArgs, args: Args) -> Result<ExitCode> {
    let client = conn.one_shot_client().await?;
    let version = client.apiserver_version().await.map_err(Error::ReadServerVersion)?;
    let server = ServerFeatures::for_version(&client, Some(&version)).await;
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::List { kind: "nodes", source })?;
    let leases = Api::<Lease>::namespaced(client, NODE_LEASE_NAMESPACE)
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::List { kind: "leases", source })?;
    let now = jiff::Timestamp::now();
    let report: Vec<(NodeObservation, NodeHealth)> = nodes
        .items
        .iter()
        .map(|node| {
            let lease = leases.items.iter().find(|l| l.metadata.name == node.metadata.name);
            let obs = node_observation(node, lease);
            let health = assess_node(&obs, now);
            (obs, health)
        })
        .collect();

    match args.output {
        Output::Json => {
            let nodes: Vec<_> = report
                .iter()
                .map(|(obs, health)| {
                    serde_json::json!({
                        "name": &*obs.name,
                        "ready": health.readiness.as_str(),
                        "notReadySeconds": health.not_ready_for.map(|d| d.as_secs()),
                        "leaseAgeSeconds": health.lease_age.map(|d| d.as_secs()),
                        "cordoned": obs.unschedulable,
                        "taints": obs.taints,
                    })
                })
                .collect();
            let features: Vec<_> = server
                .report()
                .into_iter()
                .map(|l| serde_json::json!({ "feature": l.feature, "state": l.state, "note": l.note }))
                .collect();
            let doc = serde_json::json!({
                "serverVersion": version.git_version,
                "supported": server.support() == Support::Supported,
                "features": features,
                "nodes": nodes,
            });
            println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        }
        Output::Table => {
            let healthy = report.iter().filter(|(_, h)| h.is_healthy()).count();
            println!(
                "Kubernetes {} ({}; {} nodes: {} Ready, {} not Ready)",
                version.git_version,
                match server.support() {
                    Support::Supported => "supported".to_string(),
                    Support::Older | Support::Newer => format!(
                        "outside the tested range 1.{OLDEST_SUPPORTED} to 1.{NEWEST_SUPPORTED}"
                    ),
                    Support::Unknown => "version not understood".to_string(),
                },
                report.len(),
                healthy,
                report.len() - healthy
            );
            println!();
            let mut features = Table::new(["FEATURE", "ON THIS SERVER", "WHAT THE OPERATOR DOES"]);
            for line in server.report() {
                features.row([line.feature.to_string(), line.state.to_string(), line.note]);
            }
            features.print("");
            if !report.is_empty() {
                println!();
                let mut table = Table::new([
                    "NAME",
                    "READY",
                    "NOT READY FOR",
                    "RENEWTIME AGE*",
                    "CORDONED",
                    "TAINTS",
                ]);
                for (obs, health) in &report {
                    table.row([
                        obs.name.to_string(),
                        health.readiness.as_str().to_string(),
                        health.not_ready_for.map(human).unwrap_or_else(|| "-".into()),
                        health.lease_age.map(human).unwrap_or_else(|| "-".into()),
                        if obs.unschedulable { "yes".into() } else { "no".into() },
                        if obs.taints.is_empty() { "-".into() } else { obs.taints.join(",") },
                    ]);
                }
                table.print("");
                println!(
                    "\n* by the renewTime the kubelet wrote, on its own clock. The operator never \
                     judges by it: it times renewals from when it sees them (see `plan`)."
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
