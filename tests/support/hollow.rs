//! Hollow kubelets: nodes run by the kubelet's own code (kubemark's hollow kubelet,
//! `k8s.io/kubernetes/pkg/kubemark`, over a fake container runtime) beside the kwok nodes of the
//! same control plane. The binary, `hollow-kubelet`, is `tools/kubernetes-1.37/hollow-kubelet`:
//! what `kubemark --morph=kubelet --use-host-image-service=false` runs, with its HTTP server on
//! 127.0.0.1 instead of the 0.0.0.0 kubemark hard-codes; `tools/testbin` builds it from the
//! pinned Kubernetes module. kwok is what we believe a kubelet does; a hollow kubelet is what it
//! does: it registers its Node, renews its Lease, reports node status, runs pods (fake
//! containers, Ready at once) through its pod workers and status manager, and finalizes the pods
//! deleted on it.
//!
//! kwok manages only nodes labelled [`super::cluster::ALIVE_LABEL`]`=true`; a hollow kubelet
//! registers its Node without that label, so kwok leaves it alone.
//!
//! The faults: [`HollowKubelet::kill`] (SIGKILL: the machine is off), [`HollowKubelet::pause`]
//! and [`HollowKubelet::resume`] (SIGSTOP/SIGCONT: a hung kubelet, a partition, a network blip),
//! [`HollowKubelet::restart`] (SIGTERM, then the same command again: same node name, same
//! Lease). Deleting its Node while it runs is the test's own API call.
//!
//! Unlike a real kubelet, a hollow kubelet keeps its containers in its own process (the fake
//! runtime): a restart starts with none, so it re-creates the sandboxes of the pods bound to it,
//! as after a reboot. Its root directory is a fresh temporary directory each time (under the
//! run directory). Its HTTP server listens on 127.0.0.1 on the port it is given; nothing in the
//! tests connects to it (no logs, exec or port-forward). The Node's address is the machine's
//! own (a kubelet refuses a loopback node IP), which nothing connects to either.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::cluster::{Cluster, free_port, signal};
use super::env::{TEST_LABEL, TestEnv, ZONE_LABEL};

/// A hollow kubelet process and the node it runs. Dropping it kills the process (resumed
/// first if paused).
pub struct HollowKubelet {
    /// The node's name: `<test>-<suffix>`.
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    log: PathBuf,
    tmp: PathBuf,
    socket: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// How many times it was started.
    starts: u32,
}

impl HollowKubelet {
    /// Starts a hollow kubelet for the node `<test>-<suffix>` in the test's zone, labelled with
    /// the test's label and `labels`, and waits until its Node is Ready. Its log is
    /// `hollow-<node>.log` in the run directory.
    pub async fn start(
        cluster: &Cluster,
        env: &TestEnv,
        suffix: &str,
        labels: &[(&str, &str)],
    ) -> Result<HollowKubelet> {
        let mut hollow = Self::spawn(cluster, env, suffix, labels)?;
        let started = std::time::Instant::now();
        hollow.wait_ready(env, Duration::from_secs(120)).await?;
        eprintln!(
            "[{}] hollow kubelet {} Ready {:.1}s after its start",
            env.name,
            hollow.name,
            started.elapsed().as_secs_f64()
        );
        Ok(hollow)
    }

    /// Like [`HollowKubelet::start`], without waiting for its Node.
    pub fn spawn(
        cluster: &Cluster,
        env: &TestEnv,
        suffix: &str,
        labels: &[(&str, &str)],
    ) -> Result<HollowKubelet> {
        let program = cluster.bin.path("hollow-kubelet");
        if !program.is_file() {
            bail!("{} is missing; run tools/testbin", program.display());
        }
        let name = format!("{}-{suffix}", env.name);
        let mut node_labels = vec![
            format!("{ZONE_LABEL}={}", env.zone),
            format!("{TEST_LABEL}={}", env.name),
            "type=hollow".to_string(),
        ];
        node_labels.extend(labels.iter().map(|(k, v)| format!("{k}={v}")));
        let port = free_port()?;
        // The fake runtime's socket, short enough for a unix socket path wherever the repository
        // is; removed when the kubelet is dropped (a killed process leaves it behind).
        let socket = std::env::temp_dir().join(format!("kube-remediator-hollow-{port}.sock"));
        let args = vec![
            format!("--name={name}"),
            format!("--kubeconfig={}", cluster.kubeconfig.display()),
            format!("--kubelet-port={port}"),
            format!("--runtime-socket={}", socket.display()),
            format!("--node-labels={}", node_labels.join(",")),
            "--max-pods=30".to_string(),
            "--v=2".to_string(),
        ];
        let tmp = cluster.dir.join(format!("hollow-{name}"));
        std::fs::create_dir_all(&tmp)?;
        let mut hollow = HollowKubelet {
            log: cluster.dir.join(format!("hollow-{name}.log")),
            name,
            program,
            args,
            tmp,
            socket,
            child: None,
            paused: false,
            starts: 0,
        };
        hollow.launch(cluster)?;
        Ok(hollow)
    }

    fn launch(&mut self, cluster: &Cluster) -> Result<()> {
        let log = OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(&self.program)
            .args(&self.args)
            // The hollow kubelet makes its root directory (pods, plugins, checkpoints) with the Go
            // temporary directory: keep it in the run directory.
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.program.display()))?;
        cluster.record_pid(child.id());
        self.child = Some(child);
        self.paused = false;
        self.starts += 1;
        Ok(())
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits until the Node shows Ready=True; fails at once if the process exited.
    pub async fn wait_ready(&mut self, env: &TestEnv, timeout: Duration) -> Result<()> {
        let nodes = env.nodes();
        let what = format!("hollow node {} Ready=True", self.name);
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!(
                    "the hollow kubelet {} exited ({status}); see {}",
                    self.name,
                    self.log.display()
                );
            }
            let node = nodes.get_opt(&self.name).await.ok().flatten();
            if node.as_ref().and_then(super::env::node_ready_status).as_deref() == Some("True") {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                bail!("timed out after {timeout:?} waiting for {what}; see {}", self.log.display());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// The machine is off: SIGKILL, no goodbye (no status update, no Lease release).
    pub fn kill(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { bail!("{} is not running", self.name) };
        child.kill().with_context(|| format!("killing the hollow kubelet {}", self.name))?;
        child.wait()?;
        self.paused = false;
        eprintln!("[hollow] {} killed (SIGKILL) at {}", self.name, jiff::Timestamp::now());
        Ok(())
    }

    /// A hung kubelet or a partition: SIGSTOP. Its connections stay open and silent.
    pub fn pause(&mut self) -> Result<()> {
        let pid = self.pid().with_context(|| format!("{} is not running", self.name))?;
        signal(pid, "STOP")?;
        self.paused = true;
        eprintln!("[hollow] {} paused (SIGSTOP) at {}", self.name, jiff::Timestamp::now());
        Ok(())
    }

    /// Lets a paused kubelet run again (SIGCONT); returns when the signal was delivered.
    pub fn resume(&mut self) -> Result<jiff::Timestamp> {
        let pid = self.pid().with_context(|| format!("{} is not running", self.name))?;
        signal(pid, "CONT")?;
        self.paused = false;
        let now = jiff::Timestamp::now();
        eprintln!("[hollow] {} resumed (SIGCONT) at {now}", self.name);
        Ok(now)
    }

    /// A kubelet restart: SIGTERM (SIGKILL after 10 s), then the same command again (same node
    /// name, so the same Node and Lease). Does not wait for the Node.
    pub fn restart(&mut self, cluster: &Cluster) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            if self.paused {
                let _ = signal(child.id(), "CONT");
            }
            super::stop_child(&mut child, Duration::from_secs(10));
        }
        self.launch(cluster)?;
        eprintln!("[hollow] {} restarted at {}", self.name, jiff::Timestamp::now());
        Ok(())
    }

    /// Its resident memory now (VmRSS), in KiB, while it runs.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// Its CPU time so far (user + system), from /proc, while it runs.
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()?)).ok()?;
        // Fields after the command name (which is in parentheses): utime is the 12th, stime
        // the 13th, in clock ticks (100 a second on Linux).
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(Duration::from_millis(ticks * 10))
    }

    /// How many times the process was started (1 + restarts).
    pub fn starts(&self) -> u32 {
        self.starts
    }
}

impl Drop for HollowKubelet {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.paused {
                let _ = signal(child.id(), "CONT");
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.tmp);
        let _ = std::fs::remove_file(&self.socket);
    }
}
