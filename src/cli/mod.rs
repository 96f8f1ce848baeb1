//! The command line: `kube-remediator <command>`. Each command lives in its own module.

mod cluster_info;
mod connect;
mod explain;
mod plan;
mod run;
mod snapshot;
mod table;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::telemetry::{self, LogFormat};
use crate::{Error, Result};
pub use connect::PODS_WATCH_SILENCE;
use connect::Purpose;

/// Heals what Kubernetes leaves stuck when a kubelet stops answering: pods Terminating forever on
/// dead nodes, rollouts blocked behind them, NotReady nodes, stale Ready=False pods.
#[derive(Debug, Parser)]
#[command(name = "kube-remediator", version, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub connection: ConnectionArgs,

    /// Log format written to stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "KUBE_REMEDIATOR_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// Log filter in RUST_LOG syntax, e.g. `info` or `info,kube_remediator=debug`.
    #[arg(long, default_value = "info", global = true, env = "RUST_LOG")]
    pub log_level: String,

    #[command(subcommand)]
    pub command: Command,
}

/// How to reach the cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// Path to a kubeconfig file. Without it: $KUBECONFIG as kubectl reads it (a list of files,
    /// merged; empty means unset), ~/.kube/config, then the in-cluster service account.
    #[arg(long, global = true)]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// Give up connecting to the API server, and on any single request other than a watch
    /// (`plan`'s reads; the operator's fresh reads, deletes, patches, status writes and Events),
    /// after this many seconds.
    #[arg(long, global = true, default_value_t = 10, value_name = "SECONDS")]
    pub request_timeout: u64,
}

/// The storm guard over the whole cluster, one limit for every policy.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct StormArgs {
    /// When more of all the nodes this operator sees are unhealthy (Ready False or Unknown)
    /// than this, no policy takes any action, however few of its own nodes are affected: a
    /// cluster-wide outage (a partition, a control-plane failure) looks like mass node death.
    /// A count (e.g. 20) or a percentage of the nodes (rounded down). Each policy's
    /// safety.maxUnhealthyNodes still applies to its own nodes.
    #[arg(
        long,
        default_value = "50%",
        value_name = "COUNT|PERCENT",
        env = "KUBE_REMEDIATOR_MAX_UNHEALTHY_NODES_IN_CLUSTER"
    )]
    pub max_unhealthy_nodes_in_cluster: crate::core::MaxUnhealthy,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: watch the cluster and carry out (Enforce) or record (DryRun) what
    /// every RemediationPolicy decides.
    Run(run::Args),
    /// Print what every RemediationPolicy would do right now (read-only, one-shot).
    Plan(plan::Args),
    /// Explain one pod: why it is still Terminating, what its node looks like, and what each
    /// RemediationPolicy will do about it and when (read-only, one-shot).
    Explain(explain::Args),
    /// Connect to the cluster and report its version (supported or not), the server features
    /// the operator depends on, and the health of every node.
    ClusterInfo(cluster_info::Args),
    /// Print the RemediationPolicy CustomResourceDefinition (YAML), generated from the code.
    Crd,
}

/// An error and its causes, one line each, leaving out a cause the line before already says
/// (errors that print their source themselves would otherwise repeat it).
pub fn error_lines(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut lines = vec![format!("error: {e}")];
    let mut said = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !said.contains(&text) {
            lines.push(format!("  caused by: {text}"));
        }
        said = text;
        source = cause.source();
    }
    lines
}

/// The binary's name as a kubectl plugin: installed (or linked) under this name, it answers
/// `kubectl remediator plan`, `kubectl remediator explain pod ...`.
pub const KUBECTL_PLUGIN: &str = "kubectl-remediator";

/// Parses the command line (naming itself `kubectl remediator` when run as the kubectl plugin),
/// runs the command, and turns its outcome into an exit code.
pub fn main() -> ExitCode {
    let invoked = std::env::args_os().next().map(std::path::PathBuf::from);
    let as_plugin = invoked
        .as_deref()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with(KUBECTL_PLUGIN));
    let mut command = <Cli as clap::CommandFactory>::command();
    if as_plugin {
        command = command.name(KUBECTL_PLUGIN).bin_name("kubectl remediator");
    }
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    telemetry::init(cli.log_format, &cli.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(&cli.connection, args).await,
            Command::Plan(args) => plan::run(&cli.connection, args).await,
            Command::Explain(args) => explain::run(&cli.connection, args).await,
            Command::ClusterInfo(args) => cluster_info::run(&cli.connection, args).await,
            Command::Crd => {
                print!("{}", crate::crd::crd_yaml());
                Ok(ExitCode::SUCCESS)
            }
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            for line in error_lines(&e) {
                eprintln!("{line}");
            }
            ExitCode::FAILURE
        }
    }
}

impl ConnectionArgs {
    /// A client for long-running work: connections time out, reads do not (watches stay open
    /// for minutes).
    pub async fn client(&self) -> Result<kube::Client> {
        self.build_client(false, true, Purpose::Reads).await
    }

    /// The operator's pods' watch's client: on HTTP/1.1, a connection of its own
    /// ([`Purpose::PodsWatch`]).
    pub async fn pods_watch_client(&self) -> Result<kube::Client> {
        self.build_client(false, true, Purpose::PodsWatch).await
    }

    /// A client for one-shot commands: every request times out.
    pub async fn one_shot_client(&self) -> Result<kube::Client> {
        self.build_client(true, true, Purpose::Reads).await
    }

    /// The operator's writer's client (its fresh reads and writes, never a watch): every request
    /// times out, so that one hung request cannot hold the policies in Enforce, which decide one
    /// at a time, for longer than that; and an answer 429 comes back at once instead of being
    /// retried with backoff inside the client (kube's default retries 429, 503 and 504 up to 15
    /// times): an eviction a PodDisruptionBudget refuses is answered 429, and the policy decides
    /// again 10 s later.
    pub async fn writer_client(&self) -> Result<kube::Client> {
        self.build_client(true, false, Purpose::Requests).await
    }

    /// Builds a client from the kubeconfig (or in-cluster configuration) these options name.
    async fn build_client(
        &self,
        read_timeout: bool,
        retry: bool,
        purpose: Purpose,
    ) -> Result<kube::Client> {
        let options = KubeConfigOptions { context: self.context.clone(), ..Default::default() };
        let mut config = match &self.kubeconfig {
            Some(path) => {
                let kubeconfig =
                    Kubeconfig::read_from(path).map_err(|e| Error::LoadConfig(Box::new(e)))?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| Error::LoadConfig(Box::new(e)))?
            }
            None if self.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| Error::LoadConfig(Box::new(e)))?,
            None => kube::Config::infer().await.map_err(|e| Error::LoadConfig(Box::new(e)))?,
        };
        let timeout = Duration::from_secs(self.request_timeout.max(1));
        config.connect_timeout = Some(timeout);
        if read_timeout {
            config.read_timeout = Some(timeout);
            // The timeout counts from when a request is sent, not from when its pooled
            // connection went idle: otherwise a request on a connection idle for 9 s of a 10 s
            // timeout would fail after 1 s.
            config.reset_reader_on_write = true;
        }
        config.default_retry = retry;
        connect::client(config, purpose).map_err(Error::BuildClient)
    }
}

#[cfg(test)]
mod tests {
    /// An error whose message includes its source's, over one that does not.
    #[derive(Debug, thiserror::Error)]
    #[error("reading the kubeconfig: {0}")]
    struct Repeats(#[source] Inner);

    #[derive(Debug, thiserror::Error)]
    #[error("file not found")]
    struct Inner(#[source] std::io::Error);

    #[test]
    fn error_lines_do_not_repeat_a_cause() {
        let e = Repeats(Inner(std::io::Error::other("os error 2")));
        assert_eq!(
            super::error_lines(&e),
            ["error: reading the kubeconfig: file not found", "  caused by: os error 2"]
        );
    }
}
