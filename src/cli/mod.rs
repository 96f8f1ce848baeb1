//! The command line: `kube-remediator <command>`. Each command lives in its own module.

mod cluster_info;
mod plan;
mod run;
mod table;

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

    /// Give up connecting to the API server, and (for one-shot commands such as `plan`) on
    /// any single request, after this many seconds.
    #[arg(long, global = true, default_value_t = 10, value_name = "SECONDS")]
    pub request_timeout: u64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: watch the cluster and carry out (Enforce) or record (DryRun) what
    /// every RemediationPolicy decides.
    Run(run::Args),
    /// Print what every RemediationPolicy would do right now (read-only, one-shot).
    Plan(plan::Args),
    /// Connect to the cluster and report its version and the health of every node.
    ClusterInfo(cluster_info::Args),
    /// Print the RemediationPolicy CustomResourceDefinition (YAML), generated from the code.
    Crd,
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
            Command::Run(args) => run::run(&cli.connection, args).await,
            Command::Plan(args) => plan::run(&cli.connection, args).await,
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
    /// A client for long-running work: connections time out, reads do not (watches stay open
    /// for minutes).
    pub async fn client(&self) -> Result<kube::Client> {
        self.build_client(false).await
    }

    /// A client for one-shot commands: every request times out.
    pub async fn one_shot_client(&self) -> Result<kube::Client> {
        self.build_client(true).await
    }

    /// Builds a client from the kubeconfig (or in-cluster configuration) these options name.
    async fn build_client(&self, read_timeout: bool) -> Result<kube::Client> {
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
        }
        kube::Client::try_from(config).map_err(Error::BuildClient)
    }
}
