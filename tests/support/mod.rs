//! Test support shared by the end-to-end tests and the demo: a real control plane on loopback
//! ([`cluster`]), per-test isolation and waiting helpers ([`env`]), the PKI ([`pki`]), and the
//! installation of the `RemediationPolicy` CRD ([`crd`]).
#![allow(dead_code, unused_imports)]

pub mod cluster;
pub mod crd;
pub mod env;
pub mod operator;
pub mod pki;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::LazyLock;

use anyhow::{Result, anyhow};

pub use cluster::Cluster;
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

pub fn runtime() -> &'static tokio::runtime::Runtime {
    &RUNTIME
}

/// A fresh directory for this run under `target/e2e/`, keeping the last few runs' logs.
pub fn new_run_dir(kind: &str) -> PathBuf {
    let base = cluster::repo_root().join("target").join("e2e");
    prune_old_runs(&base, 4);
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

/// Stops the shared control plane if it was started. Called by the harness after all tests.
pub fn stop_shared_cluster() {
    if let Some(Ok(cluster)) = CLUSTER.get() {
        cluster.stop();
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

/// `e2e!(name, path::to::async_fn)`: a libtest-mimic trial running `async fn(&TestEnv)`.
#[macro_export]
macro_rules! e2e {
    ($name:literal, $body:path) => {
        libtest_mimic::Trial::test($name, || {
            $crate::support::run_e2e($name, |env| Box::pin($body(env)))
        })
    };
}
