//! Runs the kube-remediator binary against the test control plane as its own user
//! ([`super::pki::OPERATOR_USER`]), serving only the policies labelled with one test's name.

use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
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

/// A running operator process; killed on drop.
pub struct Operator {
    child: Child,
    pub metrics_addr: SocketAddr,
    pub log: PathBuf,
}

impl Operator {
    /// Starts `kube-remediator run` for the policies of `env`'s test and waits until it is
    /// ready (every watch synced).
    pub async fn start(cluster: &Cluster, env: &TestEnv) -> Result<Operator> {
        let args: Vec<String> = [
            "run",
            "--policy-selector",
            &format!("{TEST_LABEL}={}", env.name),
            "--instance",
            &format!("e2e-{}", env.name),
            "--log-level",
            "info,kube_remediator=debug",
        ]
        .map(String::from)
        .to_vec();
        Self::start_with_args(cluster, &env.name, &cluster.operator_kubeconfig, &args).await
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
        let mut op = Operator { child, metrics_addr, log };
        let ready = wait_for("the operator to be ready", Duration::from_secs(30), || {
            let addr = op.metrics_addr;
            async move { Ok(http_get(addr, "/readyz").await.ok().filter(|(code, _)| *code == 200)) }
        })
        .await;
        if let Err(e) = ready {
            if let Some(status) = op.child.try_wait()? {
                bail!("the operator exited ({status}); see {}", op.log.display());
            }
            return Err(e.context(format!("see {}", op.log.display())));
        }
        Ok(op)
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

    /// Kills the process (also done on drop).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
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
