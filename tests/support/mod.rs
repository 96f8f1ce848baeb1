//! Test support shared by the end-to-end tests, the packaging trials, the demo and the
//! benchmarks: a real control plane on loopback ([`cluster`]), per-test isolation and waiting
//! helpers ([`env`]), hollow kubelets (real kubelet code, [`hollow`]), the PKI ([`pki`]), the installation of the `RemediationPolicy` CRD
//! ([`crd`]), the pinned `helm` and the packaged chart ([`chart`]), the queries of the chart's
//! alerts and dashboard ([`monitoring`]), and the table of what the code asks the API server for
//! ([`rbac`]).

pub mod chart;
pub mod cluster;
pub mod crd;
pub mod env;
pub mod hollow;
pub mod monitoring;
pub mod operator;
pub mod pki;
pub mod proxy;
pub mod rbac;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::LazyLock;

use anyhow::{Result, anyhow};

pub use cluster::{Cluster, ClusterOptions};
pub use crd::install_crd;
pub use env::{TestEnv, holds_for, wait_for};

/// One runtime for the whole test binary; every test thread blocks on it.
static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("cannot build the tokio runtime for the tests")
});

/// The control plane shared by every test of a run, started by the first test that needs it.
static CLUSTER: tokio::sync::OnceCell<Result<Cluster, String>> = tokio::sync::OnceCell::const_new();

/// A production-like control plane of its own for tests that disturb the whole control plane
/// (stalls), started by the first of them; the lock makes its tests run one after another.
struct FaultCluster {
    cluster: tokio::sync::OnceCell<Result<Cluster, String>>,
    lock: tokio::sync::Mutex<()>,
}

impl FaultCluster {
    const fn new() -> FaultCluster {
        FaultCluster {
            cluster: tokio::sync::OnceCell::const_new(),
            lock: tokio::sync::Mutex::const_new(()),
        }
    }
}

/// Which fault control plane a disruptive test runs on. Two of them let the long stalls run in
/// parallel; on each, one test at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultSlot {
    A,
    B,
}

impl FaultSlot {
    fn index(self) -> usize {
        match self {
            FaultSlot::A => 0,
            FaultSlot::B => 1,
        }
    }
}

static FAULT_CLUSTERS: [FaultCluster; 2] = [FaultCluster::new(), FaultCluster::new()];

/// A production-like control plane ([`ClusterOptions::production_like`]) that no test stalls,
/// started by the first test that needs it. Its tests run in parallel, like those of the shared
/// one (the node-action tests: they need PodGC and the production timings, not the control
/// plane to themselves).
static PROD_CLUSTER: tokio::sync::OnceCell<Result<Cluster, String>> =
    tokio::sync::OnceCell::const_new();

/// Stops a child process: SIGTERM, then SIGKILL if it has not exited within `grace`; reaps it.
pub fn stop_child(child: &mut std::process::Child, grace: std::time::Duration) {
    if let Ok(None) = child.try_wait() {
        let pid = child.id().to_string();
        let _ = std::process::Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = std::time::Instant::now() + grace;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `command` and returns what it printed on stdout; fails with its stderr unless it
/// succeeds.
pub fn command_output(command: &mut std::process::Command) -> Result<String> {
    let out = command.output().map_err(|e| anyhow!("running {command:?}: {e}"))?;
    if !out.status.success() {
        return Err(anyhow!("{command:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn runtime() -> &'static tokio::runtime::Runtime {
    &RUNTIME
}

/// A fresh directory for this run under `target/e2e/`, keeping the last few runs' logs.
pub fn new_run_dir(kind: &str) -> PathBuf {
    let base = cluster::repo_root().join("target").join("e2e");
    // A run starts up to four control planes (the shared one, two fault ones and the
    // production-like one).
    prune_old_runs(&base, 8);
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    base.join(format!("{kind}-{stamp}-{}", std::process::id()))
}

fn prune_old_runs(base: &std::path::Path, keep: usize) {
    let Ok(entries) = std::fs::read_dir(base) else { return };
    let mut runs: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    runs.sort_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok());
    let excess = runs.len().saturating_sub(keep);
    for old in runs.into_iter().take(excess) {
        if !old.join("pids").exists() {
            let _ = std::fs::remove_dir_all(old);
        }
    }
}

/// The shared control plane, started on first use. A failed start fails every test with the
/// same message instead of retrying.
pub async fn shared_cluster() -> Result<&'static Cluster> {
    CLUSTER
        .get_or_init(|| async {
            Cluster::start(&new_run_dir("run")).await.map_err(|e| format!("{e:#}"))
        })
        .await
        .as_ref()
        .map_err(|e| anyhow!("the test control plane did not start: {e}"))
}

/// The production-like control plane of `slot` ([`ClusterOptions::production_like`]),
/// started on first use. Hold [`FaultSlot`]'s lock (as [`run_e2e_on_fault_cluster`] does)
/// while disturbing it.
pub async fn fault_cluster(slot: FaultSlot) -> Result<&'static Cluster> {
    let kind = match slot {
        FaultSlot::A => "fault-a",
        FaultSlot::B => "fault-b",
    };
    FAULT_CLUSTERS[slot.index()]
        .cluster
        .get_or_init(|| async {
            Cluster::start_with(&new_run_dir(kind), ClusterOptions::production_like())
                .await
                .map_err(|e| format!("{e:#}"))
        })
        .await
        .as_ref()
        .map_err(|e| anyhow!("the fault control plane {slot:?} did not start: {e}"))
}

/// The production-like control plane that is never stalled ([`ClusterOptions::production_like`]:
/// PodGC on, default eviction rates, grace period and tolerations, 40 s kubelet Leases),
/// started on first use and shared by the tests that run on it in parallel.
pub async fn prod_cluster() -> Result<&'static Cluster> {
    PROD_CLUSTER
        .get_or_init(|| async {
            Cluster::start_with(&new_run_dir("prod"), ClusterOptions::production_like())
                .await
                .map_err(|e| format!("{e:#}"))
        })
        .await
        .as_ref()
        .map_err(|e| anyhow!("the production-like control plane did not start: {e}"))
}

/// Stops every control plane of the run that was started (the shared one, the fault ones and
/// the production-like one). Called by the harness after all tests.
pub fn stop_clusters() {
    let fault = FAULT_CLUSTERS.iter().filter_map(|f| f.cluster.get());
    let others = [CLUSTER.get(), PROD_CLUSTER.get()].into_iter().flatten();
    for cluster in others.chain(fault) {
        if let Ok(cluster) = cluster.as_ref() {
            cluster.stop();
        }
    }
}

/// An end-to-end test body: gets its own [`TestEnv`].
pub type E2eFn = for<'a> fn(&'a TestEnv) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// Runs one end-to-end test: shared cluster, a fresh [`TestEnv`] named `name`, then the body.
/// The namespace and nodes are kept after a failure for inspection (the cluster is thrown away
/// at the end of the run anyway).
pub fn run_e2e(name: &str, body: E2eFn) -> Result<(), libtest_mimic::Failed> {
    runtime()
        .block_on(async {
            let cluster = shared_cluster().await?;
            let env = TestEnv::new(cluster.client().await?, name).await?;
            let result = body(&env).await;
            if let Err(e) = cluster.check_alive() {
                return Err(e.context(format!("{result:?}")));
            }
            result
        })
        .map_err(|e| libtest_mimic::Failed::from(format!("{e:#}")))
}

/// An end-to-end test body that disturbs its control plane: gets the cluster and its own
/// [`TestEnv`] on it.
pub type FaultE2eFn =
    for<'a> fn(&'a Cluster, &'a TestEnv) -> Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// Runs one end-to-end test on the fault control plane of `slot`, alone on it (the other tests
/// of the slot wait for its lock): a fresh [`TestEnv`] named `name`, then the body. Afterwards
/// every component must still run.
pub fn run_e2e_on_fault_cluster(
    slot: FaultSlot,
    name: &str,
    body: FaultE2eFn,
) -> Result<(), libtest_mimic::Failed> {
    runtime()
        .block_on(async {
            let _alone = FAULT_CLUSTERS[slot.index()].lock.lock().await;
            let cluster = fault_cluster(slot).await?;
            eprintln!("[{name}] runs alone on fault control plane {slot:?}");
            // A namespace name has no dots ("fa-etcd-stall-1.25x").
            let env = TestEnv::new(cluster.client().await?, &name.replace('.', "-")).await?;
            let result = body(cluster, &env).await;
            if let Err(e) = cluster.check_alive() {
                return Err(e.context(format!("{result:?}")));
            }
            result
        })
        .map_err(|e| libtest_mimic::Failed::from(format!("{e:#}")))
}

/// Runs one end-to-end test on the production-like control plane ([`prod_cluster`]), in parallel
/// with the other tests there: a fresh [`TestEnv`] named `name`, then the body. Afterwards every
/// component must still run.
pub fn run_e2e_on_prod_cluster(name: &str, body: FaultE2eFn) -> Result<(), libtest_mimic::Failed> {
    runtime()
        .block_on(async {
            let cluster = prod_cluster().await?;
            let env = TestEnv::new(cluster.client().await?, name).await?;
            let result = body(cluster, &env).await;
            if let Err(e) = cluster.check_alive() {
                return Err(e.context(format!("{result:?}")));
            }
            result
        })
        .map_err(|e| libtest_mimic::Failed::from(format!("{e:#}")))
}

/// `prod_e2e!(name, path::to::async_fn)`: a libtest-mimic trial running
/// `async fn(&Cluster, &TestEnv)` on the production-like control plane ([`prod_cluster`]),
/// beside the other trials there.
#[macro_export]
macro_rules! prod_e2e {
    ($name:literal, $body:path) => {
        libtest_mimic::Trial::test($name, || {
            $crate::support::run_e2e_on_prod_cluster($name, |cluster, env| {
                Box::pin($body(cluster, env))
            })
        })
    };
}

/// `fault_e2e!(slot, name, path::to::async_fn)`: a libtest-mimic trial running
/// `async fn(&Cluster, &TestEnv)` alone on the fault control plane `FaultSlot::<slot>`.
#[macro_export]
macro_rules! fault_e2e {
    ($slot:ident, $name:literal, $body:path) => {
        libtest_mimic::Trial::test($name, || {
            $crate::support::run_e2e_on_fault_cluster(
                $crate::support::FaultSlot::$slot,
                $name,
                |cluster, env| Box::pin($body(cluster, env)),
            )
        })
    };
}

/// `e2e!(name, path::to::async_fn)`: a libtest-mimic trial running `async fn(&TestEnv)`.
#[macro_export]
macro_rules! e2e {
    ($name:literal, $body:path) => {
        libtest_mimic::Trial::test($name, || {
            $crate::support::run_e2e($name, |env| Box::pin($body(env)))
        })
    };
}
