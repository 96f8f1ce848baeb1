//! `kube-remediator run`: the operator. Watches nodes, kubelet Leases, pods, namespaces, claims
//! and RemediationPolicies, and carries out (Enforce) or records (DryRun) what each policy
//! decides.
//!
//! With leader election (the default) every replica runs the watches, so a follower's caches are
//! synced when it takes over, but only the holder of the leader Lease runs the policy controller,
//! and the writer refuses every mutation while this replica does not hold it. A leader that loses
//! the Lease exits with a failure, and Kubernetes restarts it as a follower; SIGTERM releases the
//! Lease, so that a follower takes over at once, and exits 0.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams};
use tracing::{error, info, warn};

use super::{ConnectionArgs, StormArgs};
use crate::controllers::kinds::{WATCHED, spawn_watches};
use crate::controllers::policy::{self, Context};
use crate::controllers::state::ClusterState;
use crate::controllers::watch::InitialLists;
use crate::crd::RemediationPolicy;
use crate::http::{self, Health};
use crate::leader::{self, Ended, LeaderElection, Leadership};
use crate::metrics::Metrics;
use crate::writer::Writer;
use crate::{Error, Result};

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
    /// failover when a leader dies. The leader renews every third of it.
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
    let client = conn.client().await?;
    preflight(&client).await?;

    let metrics = Arc::new(Metrics::new());
    let state = Arc::new(RwLock::new(ClusterState::new()));
    let (trigger_tx, trigger_rx) = tokio::sync::watch::channel(0u64);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let lists = match args.initial_lists {
        Some(lists) => lists,
        None => match client.apiserver_version().await {
            Ok(v) => InitialLists::for_server(&v.major, &v.minor),
            Err(e) => {
                warn!(error = %e, "cannot read the API server's version: paged lists");
                InitialLists::Paged
            }
        },
    };
    info!(
        initial_lists = lists.as_str(),
        "watches get the current state by {} lists",
        lists.as_str()
    );
    let watches = spawn_watches(client.clone(), state.clone(), trigger_tx, metrics.clone(), lists);

    let instance = args.instance.clone().or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string())
    });
    let mut election = start_election(&args, client.clone(), instance.as_deref(), &metrics);

    // Readiness is read from the caches and the leadership when probed.
    let health = Arc::new(Health { state: state.clone(), leadership: election.subscribe() });
    let http_task = {
        let mut stop = stop_rx.clone();
        tokio::spawn(http::serve(args.metrics_addr, metrics.clone(), health, async move {
            let _ = stop.wait_for(|s| *s).await;
        }))
    };

    // The writer's requests time out (--request-timeout) and are not retried inside the
    // client; the watches' client does not time out reads.
    let writer_client = conn.writer_client().await?;
    let writer =
        Writer::new(writer_client, metrics.clone(), instance).with_leader_guard(election.guard());
    #[cfg(feature = "e2e-hooks")]
    let writer = writer.with_e2e_hold_dir(args.e2e_hold_dir);
    let cluster_limit = args.storm.max_unhealthy_nodes_in_cluster;
    let ctx = Arc::new(Context::new(state, writer, metrics, cluster_limit));
    info!(selector = args.policy_selector.as_deref().unwrap_or(""), "kube-remediator started");
    let mut controller = tokio::spawn(controller_when_leading(
        client,
        ctx,
        trigger_rx,
        args.policy_selector,
        election.subscribe(),
        stop_rx.clone(),
    ));
    let mut controller_done = false;

    let code = tokio::select! {
        biased;
        ended = election.ended() => match ended? {
            // The guard is closed already: this process never acts again. Kubernetes restarts
            // it as a follower with fresh state.
            Ended::Lost(reason) => {
                error!(%reason, "lost the leader Lease: exiting, to be restarted as a follower");
                return Ok(ExitCode::FAILURE);
            }
            Ended::Released => ExitCode::SUCCESS,
        },
        _ = shutdown_signal() => {
            info!("shutting down");
            ExitCode::SUCCESS
        }
        result = &mut controller => {
            controller_done = true;
            warn!("the policy controller stopped");
            if result.is_err() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
        }
        result = http_task => match result {
            Ok(Err(e)) => return Err(e),
            _ => {
                warn!("the HTTP server stopped");
                ExitCode::SUCCESS
            }
        },
    };
    // Let running reconciles finish while the Lease is still held, then hand it over.
    let _ = stop_tx.send(true);
    if !controller_done && tokio::time::timeout(SHUTDOWN_GRACE, &mut controller).await.is_err() {
        warn!("the policy controller did not stop within {SHUTDOWN_GRACE:?}");
    }
    election.release().await;
    for w in watches {
        w.abort();
    }
    Ok(code)
}

fn start_election(
    args: &Args,
    client: Client,
    instance: Option<&str>,
    metrics: &Arc<Metrics>,
) -> LeaderElection {
    if !args.leader_elect {
        info!("leader election is off: this replica acts alone");
        return LeaderElection::disabled(metrics);
    }
    let config = leader::Config {
        namespace: args.leader_election_namespace.clone().unwrap_or_else(leader::default_namespace),
        lease: args.leader_election_lease.clone(),
        identity: leader::identity(instance),
        lease_duration: Duration::from_secs(args.lease_duration),
    };
    LeaderElection::start(client, config, metrics.clone())
}

/// A follower stands by with its caches synced; the policy controller runs once it leads,
/// until `stop`.
async fn controller_when_leading(
    client: Client,
    ctx: Arc<Context>,
    trigger: tokio::sync::watch::Receiver<u64>,
    policy_selector: Option<String>,
    mut leadership: tokio::sync::watch::Receiver<Leadership>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let leads = tokio::select! {
        led = leadership.wait_for(Leadership::is_leader) => led.is_ok(),
        _ = stop.wait_for(|s| *s) => return,
    };
    if !leads {
        // The election ended without this replica leading: `run` handles that.
        let _ = stop.wait_for(|s| *s).await;
        return;
    }
    info!("leading: starting the policy controller");
    policy::run(client, ctx, trigger, policy_selector, async move {
        let _ = stop.wait_for(|s| *s).await;
    })
    .await;
}

/// How long running reconciles may take to finish on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Checks at start-up that the CRD is installed and that every list the operator needs is
/// allowed, so a missing CRD or RBAC rule is one clear error instead of endless retries.
pub async fn preflight(client: &Client) -> Result<()> {
    let lp = ListParams::default().limit(1);
    match Api::<RemediationPolicy>::all(client.clone()).list(&lp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::CrdMissing),
        Err(e) => return Err(classify("list", "remediationpolicies", e)),
    }
    for kind in WATCHED {
        let resource = kind.kind().as_str();
        kind.check_list(client.clone()).await.map_err(|e| classify("list", resource, e))?;
    }
    Ok(())
}

fn classify(verb: &'static str, resource: &'static str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => {
            Error::Forbidden { verb, resource, message: s.message }
        }
        source => Error::List { kind: resource, source },
    }
}
