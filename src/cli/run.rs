//! `kube-remediator run`: its arguments, handed to the [operator](crate::operator).

use std::net::SocketAddr;
use std::process::ExitCode;

use super::{ConnectionArgs, StormArgs};
use crate::Result;
use crate::index::watches::InitialLists;
use crate::operator::{self, Config};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080", env = "KUBE_REMEDIATOR_METRICS_ADDR")]
    metrics_addr: SocketAddr,

    /// Serve only the RemediationPolicies matching this label selector (e.g. `team=storage`),
    /// to shard policies between operators or canary a new version.
    #[arg(long, env = "KUBE_REMEDIATOR_POLICY_SELECTOR")]
    policy_selector: Option<String>,

    /// Name of this replica in Events (defaults to $POD_NAME, then the host name); with a
    /// random suffix, its identity in the leader Lease.
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,

    /// Elect a leader through a Lease: only the leader acts, the other replicas keep their
    /// caches synced and take over when it goes. `--leader-elect=false` only for a single
    /// replica.
    #[arg(
        long,
        env = "KUBE_REMEDIATOR_LEADER_ELECT",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_name = "BOOL"
    )]
    leader_elect: bool,

    /// Namespace of the leader Lease (default: this pod's namespace, else `default`).
    #[arg(long, env = "KUBE_REMEDIATOR_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,

    /// Name of the leader Lease. Operators that split the policies (`--policy-selector`) need
    /// one each.
    #[arg(long, default_value = "kube-remediator", env = "KUBE_REMEDIATOR_LEADER_ELECTION_LEASE")]
    leader_election_lease: String,

    /// Seconds a leader Lease that stopped being renewed stays its holder's: the longest
    /// failover when a leader dies. The leader stops acting when two thirds of it have passed
    /// since its last renewal was sent (it pauses until a renewal is stored), and renews every
    /// fifth of that (2 s of 15).
    #[arg(
        long,
        default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(3..=300),
        value_name = "SECONDS",
        env = "KUBE_REMEDIATOR_LEASE_DURATION"
    )]
    lease_duration: u64,

    /// How the watches get the cluster's current state: `streaming` (the API server's WatchList,
    /// objects one at a time: the least memory) or `paged` (lists of 100). Without it: streaming
    /// on Kubernetes 1.32 and 1.34 onwards, where the API server streams by default.
    #[arg(long, value_enum, value_name = "HOW", env = "KUBE_REMEDIATOR_INITIAL_LISTS")]
    initial_lists: Option<InitialLists>,

    #[command(flatten)]
    storm: StormArgs,

    /// Test builds only: before the last look of each force delete, create
    /// `<DIR>/<pod uid>.held` and wait until `<DIR>/<pod uid>.release` exists; with
    /// `<DIR>/hold-after-delete` present, also after the DELETE (`.deleted`, then `.after`).
    #[cfg(feature = "e2e-hooks")]
    #[arg(long, hide = true, value_name = "DIR")]
    e2e_hold_dir: Option<std::path::PathBuf>,
}

pub async fn run(conn: &ConnectionArgs, args: Args) -> Result<ExitCode> {
    // The writer's requests time out (--request-timeout) and are not retried inside the
    // client; the watches' clients do not time out reads (but the pods' watch's silence).
    let clients = operator::Clients {
        reads: conn.client().await?,
        pods_watch: conn.pods_watch_client().await?,
        writer: conn.writer_client().await?,
    };
    let config = Config {
        metrics_addr: args.metrics_addr,
        policy_selector: args.policy_selector,
        instance: args.instance,
        leader_elect: args.leader_elect,
        leader_election_namespace: args.leader_election_namespace,
        leader_election_lease: args.leader_election_lease,
        lease_duration: args.lease_duration,
        initial_lists: args.initial_lists,
        max_unhealthy_nodes_in_cluster: args.storm.max_unhealthy_nodes_in_cluster,
        #[cfg(feature = "e2e-hooks")]
        e2e_hold_dir: args.e2e_hold_dir,
    };
    operator::run(clients, config).await
}
