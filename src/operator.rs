//! The operator's wiring, as `kube-remediator run` starts it. Watches nodes, kubelet Leases, pods, namespaces, claims
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

use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use tracing::{error, info, warn};

use crate::controllers::policy::{self, Context};
use crate::crd::RemediationPolicy;
use crate::http::{self, Health};
use crate::index::kinds::{WATCHED, spawn_watches};
use crate::index::state::ClusterState;
use crate::index::watches::InitialLists;
use crate::leader::{self, Ended, LeaderElection, Leadership};
use crate::metrics::Metrics;
use crate::server::ServerFeatures;
use crate::writer::Writer;
use crate::{Error, Result};

/// What `kube-remediator run` was told (see its `--help` for each).
#[derive(Debug)]
pub struct Config {
    pub metrics_addr: SocketAddr,
    pub policy_selector: Option<String>,
    pub instance: Option<String>,
    pub leader_elect: bool,
    pub leader_election_namespace: Option<String>,
    pub leader_election_lease: String,
    pub lease_duration: u64,
    /// `None`: chosen by the API server's version.
    pub initial_lists: Option<InitialLists>,
    pub max_unhealthy_nodes_in_cluster: crate::core::MaxUnhealthy,
    /// Test builds only: where the e2e tests hold the writer (see `run --help` of a test build).
    #[cfg(feature = "e2e-hooks")]
    pub e2e_hold_dir: Option<std::path::PathBuf>,
}

/// The operator's API clients, each on connections of its own (`cli::connect`).
pub struct Clients {
    /// Every read but the pods' watch and the writer's (the other watches, the pods of a node
    /// not Ready, the policies), and the leader Lease.
    pub reads: Client,
    /// The pods' watch alone, on HTTP/1.1 (`cli::connect::Purpose::PodsWatch`).
    pub pods_watch: Client,
    /// The writer's fresh reads and writes (the status and Events too): every request times
    /// out.
    pub writer: Client,
}

pub async fn run(clients: Clients, config: Config) -> Result<ExitCode> {
    let Clients { reads: client, pods_watch, writer: writer_client } = clients;
    preflight(&client).await?;

    let metrics = Arc::new(Metrics::new());
    let state = Arc::new(RwLock::new(ClusterState::new()));
    let (trigger_tx, trigger_rx) = tokio::sync::watch::channel(0u64);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);

    let server = ServerFeatures::detect(&client).await;
    server.log();
    let lists = config.initial_lists.unwrap_or_else(|| server.initial_lists());
    info!(
        initial_lists = lists.as_str(),
        "watches get the current state by {} lists",
        lists.as_str()
    );
    let watches = spawn_watches(
        client.clone(),
        pods_watch,
        state.clone(),
        trigger_tx,
        metrics.clone(),
        lists,
    );

    let instance = config.instance.clone().or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname").ok().map(|h| h.trim().to_string())
    });
    let mut election = start_election(&config, client.clone(), instance.as_deref(), &metrics);

    // Readiness is read from the caches and the leadership when probed.
    let health = Arc::new(Health { state: state.clone(), leadership: election.subscribe() });
    let http_task = {
        let mut stop = stop_rx.clone();
        tokio::spawn(http::serve(config.metrics_addr, metrics.clone(), health, async move {
            let _ = stop.wait_for(|s| *s).await;
        }))
    };

    let writer =
        Writer::new(writer_client, metrics.clone(), instance).with_leader_guard(election.guard());
    #[cfg(feature = "e2e-hooks")]
    let writer = writer.with_e2e_hold_dir(config.e2e_hold_dir);
    let cluster_limit = config.max_unhealthy_nodes_in_cluster;
    let ctx = Arc::new(Context::new(state, writer, metrics, cluster_limit));
    info!(selector = config.policy_selector.as_deref().unwrap_or(""), "kube-remediator started");
    let mut controller = tokio::spawn(controller_when_leading(
        client,
        ctx,
        trigger_rx,
        config.policy_selector,
        lists,
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
    config: &Config,
    client: Client,
    instance: Option<&str>,
    metrics: &Arc<Metrics>,
) -> LeaderElection {
    if !config.leader_elect {
        info!("leader election is off: this replica acts alone");
        return LeaderElection::disabled(metrics);
    }
    let config = leader::Config {
        namespace: config
            .leader_election_namespace
            .clone()
            .unwrap_or_else(leader::default_namespace),
        lease: config.leader_election_lease.clone(),
        identity: leader::identity(instance),
        lease_duration: Duration::from_secs(config.lease_duration),
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
    lists: InitialLists,
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
    let trigger = with_resumes(trigger, leadership);
    policy::run(client, ctx, trigger, policy_selector, lists, async move {
        let _ = stop.wait_for(|s| *s).await;
    })
    .await;
}

/// The controller's trigger: the watches' (a change that may matter), and each end of a pause
/// of the leadership, so that what the pause held back is decided again at once (a write the
/// writer refused while paused is otherwise retried at its reconcile's next requeue). Closes
/// with the watches'.
fn with_resumes(
    mut watches: tokio::sync::watch::Receiver<u64>,
    mut leadership: tokio::sync::watch::Receiver<Leadership>,
) -> tokio::sync::watch::Receiver<u64> {
    let (tx, rx) = tokio::sync::watch::channel(0u64);
    tokio::spawn(async move {
        let (mut paused, mut electing) = (false, true);
        loop {
            tokio::select! {
                changed = watches.changed() => if changed.is_err() { return },
                changed = leadership.changed(), if electing => {
                    // Once the election is over (the process is exiting) only the watches count.
                    electing = changed.is_ok();
                    let now = leadership.borrow_and_update().clone();
                    let resumed = electing && paused && now.is_leader();
                    paused = now == Leadership::Paused;
                    if !resumed {
                        continue;
                    }
                }
            }
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    });
    rx
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
/// allowed, so a missing CRD or RBAC rule is one clear error instead of endless retries. It lists
/// nothing where it can help it: the CRD from discovery, each permission from an access review
/// (all at once), so the watches' initial state is the only read of each kind.
pub async fn preflight(client: &Client) -> Result<()> {
    let group = format!("{}/{}", RemediationPolicy::group(&()), RemediationPolicy::version(&()));
    let plural = RemediationPolicy::plural(&());
    match client.list_api_group_resources(&group).await {
        Ok(served) if served.resources.iter().any(|r| r.name == plural) => {}
        Ok(_) => return Err(Error::CrdMissing),
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::CrdMissing),
        Err(e) => return Err(Error::List { kind: "remediationpolicies", source: e }),
    }
    let policies = async {
        let api = Api::<RemediationPolicy>::all(client.clone());
        may_list(api, RemediationPolicy::group(&()).into_owned(), plural.to_string(), None).await
    };
    let kinds = WATCHED.iter().map(|kind| kind.check_list(client.clone()));
    let (policies, kinds) = tokio::join!(policies, futures::future::join_all(kinds));
    let resources = std::iter::once("remediationpolicies")
        .chain(WATCHED.iter().map(|kind| kind.kind().as_str()));
    for (resource, allowed) in resources.zip(std::iter::once(policies).chain(kinds)) {
        match allowed {
            Ok(Ok(())) => {}
            Ok(Err(message)) => return Err(Error::Forbidden { verb: "list", resource, message }),
            Err(e) => return Err(classify("list", resource, e)),
        }
    }
    Ok(())
}

/// Whether this identity may list the `resource` of `group` that `api` reads (in `namespace`,
/// or cluster-wide), by a SelfSubjectAccessReview, which every authenticated identity may
/// create; where the API server refuses the review itself, by a LIST of one object's metadata.
/// `Ok(Err(why))`: it may not.
pub async fn may_list<K>(
    api: Api<K>,
    group: String,
    resource: String,
    namespace: Option<&'static str>,
) -> std::result::Result<std::result::Result<(), String>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use k8s_openapi::api::authorization::v1::{
        ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some("list".into()),
                group: Some(group.clone()),
                resource: Some(resource.clone()),
                namespace: namespace.map(str::to_string),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let reviews: Api<SelfSubjectAccessReview> = Api::all(api.clone().into_client());
    let answer = match reviews.create(&Default::default(), &review).await {
        Ok(answer) => answer.status.unwrap_or_default(),
        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => {
            return match api.list_metadata(&ListParams::default().limit(1)).await {
                Ok(_) => Ok(Ok(())),
                Err(kube::Error::Api(s)) if s.code == 403 => Ok(Err(s.message)),
                Err(e) => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    if answer.allowed {
        return Ok(Ok(()));
    }
    let scope = namespace.map_or("at the cluster scope".into(), |ns| format!("in namespace {ns}"));
    let why = answer.reason.filter(|r| !r.is_empty()).map(|r| format!(": {r}")).unwrap_or_default();
    Ok(Err(format!(
        "this identity cannot list resource {resource:?} in API group {group:?} {scope}{why}"
    )))
}

fn classify(verb: &'static str, resource: &'static str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(s) if s.code == 403 => {
            Error::Forbidden { verb, resource, message: s.message }
        }
        source => Error::List { kind: resource, source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the trigger fires within 50 ms.
    async fn fired(trigger: &mut tokio::sync::watch::Receiver<u64>) -> bool {
        tokio::time::timeout(Duration::from_millis(50), trigger.changed()).await.is_ok()
    }

    #[tokio::test]
    async fn the_controller_is_triggered_by_the_watches_and_by_each_resume() {
        let (watches, watches_rx) = tokio::sync::watch::channel(0u64);
        let (leadership, leadership_rx) = tokio::sync::watch::channel(Leadership::Leader);
        let mut trigger = with_resumes(watches_rx, leadership_rx);
        watches.send_modify(|n| *n += 1);
        assert!(fired(&mut trigger).await, "a change the watches saw");
        let steps = [
            (Leadership::Paused, false),
            (Leadership::Leader, true),
            (Leadership::Leader, false),
            (Leadership::Follower { holder: "other".into() }, false),
            (Leadership::Leader, false),
        ];
        for (now, fires) in steps {
            leadership.send_replace(now.clone());
            assert_eq!(fired(&mut trigger).await, fires, "{now:?}");
        }
        // The election over: the watches still trigger, and closing them closes the trigger.
        drop(leadership);
        watches.send_modify(|n| *n += 1);
        assert!(fired(&mut trigger).await, "a change after the election");
        drop(watches);
        let closed = tokio::time::timeout(Duration::from_millis(50), trigger.changed()).await;
        assert!(matches!(closed, Ok(Err(_))), "{closed:?}");
    }
}
