//! Runs the kube-remediator binary against the test control plane as its own user
//! ([`super::pki::OPERATOR_USER`]), serving only the policies labelled with one test's name.
//! Each test's operators elect their leader on a Lease of their own, named after the test in
//! its namespace: a single operator takes it at once, and the tests never see each other's.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::cluster::{Cluster, free_port};
use super::env::{TEST_LABEL, TestEnv};
use super::wait_for;

/// The binary under test: `$KUBE_REMEDIATOR_BIN` if set; cargo's build of it for integration
/// tests; otherwise (the demo) the one next to the running program in the target directory.
pub fn binary() -> PathBuf {
    if let Ok(path) = std::env::var("KUBE_REMEDIATOR_BIN") {
        return PathBuf::from(path);
    }
    if let Some(path) = option_env!("CARGO_BIN_EXE_kube-remediator") {
        return PathBuf::from(path);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().and_then(|d| d.parent()).map(|d| d.join("kube-remediator")))
        .unwrap_or_else(|| PathBuf::from("kube-remediator"))
}

/// Where `tools/image` wrote the image (`$KUBE_REMEDIATOR_IMAGE`, set by `tools/test`), if this
/// run is to check it.
pub fn image_dir() -> Option<PathBuf> {
    std::env::var_os("KUBE_REMEDIATOR_IMAGE").filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// A running operator process; killed on drop.
pub struct Operator {
    child: Child,
    pub metrics_addr: SocketAddr,
    pub log: PathBuf,
}

impl Operator {
    /// Starts `kube-remediator run` for the policies of `env`'s test and waits until it is
    /// ready (every watch synced, and the leader Lease of the test taken).
    pub async fn start(cluster: &Cluster, env: &TestEnv) -> Result<Operator> {
        Self::start_replica(cluster, env, "", &[]).await
    }

    /// Like [`Operator::start`], for one of several replicas of the test's operator: they share
    /// the test's leader Lease, `replica` names this one (its `--instance` is
    /// `e2e-<test>-<replica>`, its log `operator-<test>-<replica>.log`), and `extra` are more
    /// arguments of `run`. Waits until it is ready: a follower is ready too.
    pub async fn start_replica(
        cluster: &Cluster,
        env: &TestEnv,
        replica: &str,
        extra: &[&str],
    ) -> Result<Operator> {
        let (name, args) = replica_args(env, replica, extra);
        Self::start_with_args(cluster, &name, &cluster.operator_kubeconfig, &args).await
    }

    /// Like [`Operator::start`], with the operator's identity reaching the API server through
    /// `kubeconfig` (a fault proxy's, say), and `extra` arguments of `run`.
    pub async fn start_through(
        cluster: &Cluster,
        env: &TestEnv,
        kubeconfig: &std::path::Path,
        extra: &[&str],
    ) -> Result<Operator> {
        let (name, args) = replica_args(env, "", extra);
        Self::start_with_args(cluster, &name, kubeconfig, &args).await
    }

    /// Like [`Operator::start_replica`], without waiting until it is ready: a container the
    /// kubelet (re)starts while the control plane may not answer.
    pub fn spawn_replica(
        cluster: &Cluster,
        env: &TestEnv,
        replica: &str,
        extra: &[&str],
    ) -> Result<Operator> {
        let (name, args) = replica_args(env, replica, extra);
        Self::spawn_with_args(cluster, &name, &cluster.operator_kubeconfig, &args)
    }

    /// Starts `kube-remediator` with `args` (a subcommand and its options, say a Deployment's
    /// container args without their `--metrics-addr`) as the identity of `kubeconfig`, serving
    /// its HTTP endpoints on a free loopback port, and waits until it is ready. Its output goes
    /// to `operator-<log_name>.log` in the run directory.
    pub async fn start_with_args(
        cluster: &Cluster,
        log_name: &str,
        kubeconfig: &std::path::Path,
        args: &[String],
    ) -> Result<Operator> {
        let mut op = Self::spawn_with_args(cluster, log_name, kubeconfig, args)?;
        op.wait_ready(Duration::from_secs(30)).await?;
        Ok(op)
    }

    /// Like [`Operator::start_with_args`], without waiting until it is ready.
    pub fn spawn_with_args(
        cluster: &Cluster,
        log_name: &str,
        kubeconfig: &std::path::Path,
        args: &[String],
    ) -> Result<Operator> {
        let metrics_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let log = cluster.dir.join(format!("operator-{log_name}.log"));
        let out = File::create(&log)?;
        let child = Command::new(binary())
            .args(args)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--metrics-addr")
            .arg(metrics_addr.to_string())
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", binary().display()))?;
        Ok(Operator { child, metrics_addr, log })
    }

    /// Waits until `/readyz` answers 200 (every watch synced, and the leader known); fails at
    /// once if the process exits.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let addr = self.metrics_addr;
        let ready = wait_for("the operator to be ready", timeout, || async move {
            Ok(http_get(addr, "/readyz").await.ok().filter(|(code, _)| *code == 200))
        })
        .await;
        if let Err(e) = ready {
            if let Some(status) = self.child.try_wait()? {
                bail!("the operator exited ({status}); see {}", self.log.display());
            }
            return Err(e.context(format!("see {}", self.log.display())));
        }
        Ok(())
    }

    /// The Prometheus text exposition.
    pub async fn metrics(&self) -> Result<String> {
        let (code, body) = http_get(self.metrics_addr, "/metrics").await?;
        if code != 200 {
            bail!("/metrics answered {code}");
        }
        Ok(body)
    }

    /// The value of one series, e.g. `kube_remediator_actions_total{policy="p",...}`, matching
    /// every given `label="value"` pair; `None` when absent.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Result<Option<f64>> {
        let text = self.metrics().await?;
        Ok(find_metric(&text, name, labels))
    }

    /// Stops the process as Kubernetes does (also done on drop): SIGTERM, so that it hands
    /// its leader Lease over, then SIGKILL if it is still running 5 s later.
    pub fn stop(&mut self) {
        if self.terminate(Duration::from_secs(5)).is_err() {
            self.kill();
        }
    }

    /// Kills the process at once (SIGKILL): no release of anything, like a node that dies.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit; returns its status.
    pub fn terminate(&mut self, timeout: Duration) -> Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status()?;
        ensure!(sent.success(), "kill -TERM {pid} failed");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() >= deadline {
                bail!("the operator did not exit within {timeout:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The exit status if the process has exited.
    pub fn exited(&mut self) -> Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The name (`<test>` or `<test>-<replica>`) and `run` arguments of a replica of `env`'s
/// operator. The cluster-wide storm guard is off (`--max-unhealthy-nodes-in-cluster=100%`)
/// unless `extra` sets it: a shared control plane carries many tests' outages at once, and each
/// test's operator sees every node. The guard's own tests (`st-cluster-storm`) set it.
fn replica_args(env: &TestEnv, replica: &str, extra: &[&str]) -> (String, Vec<String>) {
    let name =
        if replica.is_empty() { env.name.clone() } else { format!("{}-{replica}", env.name) };
    let mut args: Vec<String> = [
        "run",
        "--policy-selector",
        &format!("{TEST_LABEL}={}", env.name),
        "--instance",
        &format!("e2e-{name}"),
        "--leader-election-namespace",
        &env.namespace,
        "--leader-election-lease",
        &env.name,
        "--log-level",
        "info,kube_remediator=debug",
    ]
    .map(String::from)
    .to_vec();
    const CLUSTER_LIMIT: &str = "--max-unhealthy-nodes-in-cluster";
    if !extra.iter().any(|a| a.starts_with(CLUSTER_LIMIT)) {
        args.push(format!("{CLUSTER_LIMIT}=100%"));
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    (name, args)
}

/// Finds a sample by metric name and labels in a Prometheus text exposition.
pub fn find_metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
        if metric != name {
            return None;
        }
        let all = labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")));
        if all { value.parse().ok() } else { None }
    })
}

/// A minimal HTTP/1.0 GET on loopback: (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response)).await??;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, body.to_string()))
}
