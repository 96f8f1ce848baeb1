//! The command line: `kube-remediator <command>`. Each command lives in its own module.

mod cluster_info;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::telemetry::{self, LogFormat};
use crate::{Error, Result};

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
    /// Path to a kubeconfig file. Without it: $KUBECONFIG, ~/.kube/config, then the in-cluster
    /// service account.
    #[arg(long, global = true, env = "KUBECONFIG")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// Kubeconfig context to use instead of the current one.
    #[arg(long, global = true)]
    pub context: Option<String>,

    /// Give up on any single request to the API server after this many seconds.
    #[arg(long, global = true, default_value_t = 10, value_name = "SECONDS")]
    pub request_timeout: u64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Connect to the cluster and report its version and the health of every node.
    ClusterInfo(cluster_info::Args),
}

/// Parses the command line, runs the command, and turns its outcome into an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
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
            Command::ClusterInfo(args) => cluster_info::run(&cli.connection, args).await,
        }
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                eprintln!("  caused by: {cause}");
                source = cause.source();
            }
            ExitCode::FAILURE
        }
    }
}

impl ConnectionArgs {
    /// Builds a client from the kubeconfig (or in-cluster configuration) these options name.
    pub async fn client(&self) -> Result<kube::Client> {
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
        config.read_timeout = Some(timeout);
        kube::Client::try_from(config).map_err(Error::BuildClient)
    }
}
