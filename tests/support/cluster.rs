//! A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok (simulated kubelets), built from upstream Go modules by
//! `tools/testbin`. Every component binds to loopback on free ports, logs into the run's
//! directory under `target/e2e/`, and is stopped when the [`Cluster`] is stopped or dropped.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::env::wait_for;
use super::pki::Pki;

/// Label that makes kwok manage (heartbeat) a node. Removing it kills the node.
pub const ALIVE_LABEL: &str = "kwok.remediator.io/alive";

/// How long kwok's simulated kubelet Leases last; kwok renews them every quarter of this.
pub const NODE_LEASE_SECONDS: u32 = 10;
/// kube-controller-manager marks a node Unknown after this long without a heartbeat.
pub const NODE_MONITOR_GRACE_SECONDS: u32 = 10;
/// Default NoExecute tolerations for not-ready/unreachable nodes (the upstream default is 300).
pub const DEFAULT_TOLERATION_SECONDS: u32 = 5;
/// The kubelet's default Lease duration (it renews every quarter of it, 10 s), used by the
/// production-like control plane.
pub const KUBELET_LEASE_SECONDS: u32 = 40;

/// How a control plane is configured. [`ClusterOptions::tests`] (the default) makes nodes die
/// fast and keeps PodGC out of the way; [`ClusterOptions::production_like`] runs what users
/// run, for the fault tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterOptions {
    /// Run PodGC (the pod-garbage-collector controller).
    pub pod_gc: bool,
    /// kube-controller-manager's `--node-eviction-rate` and `--secondary-node-eviction-rate`
    /// (nodes per second); `None` keeps the upstream defaults (0.1 and 0.01).
    pub node_eviction_rate: Option<u32>,
    /// kube-controller-manager's `--node-monitor-grace-period` in seconds; `None` keeps the
    /// upstream default.
    pub node_monitor_grace_seconds: Option<u32>,
    /// The API server's default not-ready/unreachable toleration seconds; `None` keeps the
    /// upstream default (300).
    pub default_toleration_seconds: Option<u32>,
    /// kwok's `--node-lease-duration-seconds` (it renews every quarter of it).
    pub node_lease_seconds: u32,
    /// The benchmark's largest tier (150,000 pods on 5,000 nodes), fitted to the development
    /// machine: no kube-scheduler (every pod is bound at creation: it would hold a copy of each
    /// for nothing to schedule), kwok with more requests in flight ([`KWOK_CONFIG`]) and
    /// logging warnings only, and soft limits on the Go heaps of the control plane
    /// ([`go_memory_limit`]). Off everywhere else.
    pub large: bool,
}

impl ClusterOptions {
    /// The shared control plane of the tests: dead nodes are noticed and tainted within
    /// seconds, evicted pods become Terminating 5 s later, and PodGC never races the operator.
    pub fn tests() -> ClusterOptions {
        ClusterOptions {
            pod_gc: false,
            node_eviction_rate: Some(100),
            node_monitor_grace_seconds: Some(NODE_MONITOR_GRACE_SECONDS),
            default_toleration_seconds: Some(DEFAULT_TOLERATION_SECONDS),
            node_lease_seconds: NODE_LEASE_SECONDS,
            large: false,
        }
    }

    /// What users run: PodGC on, the default eviction rates, grace period and tolerations, and
    /// the kubelet's 40 s Lease. Only `--node-monitor-period=1s` stays (it only makes the node
    /// lifecycle controller look more often, not judge differently).
    pub fn production_like() -> ClusterOptions {
        ClusterOptions {
            pod_gc: true,
            node_eviction_rate: None,
            node_monitor_grace_seconds: None,
            default_toleration_seconds: None,
            node_lease_seconds: KUBELET_LEASE_SECONDS,
            large: false,
        }
    }
}

impl Default for ClusterOptions {
    fn default() -> ClusterOptions {
        ClusterOptions::tests()
    }
}

/// Where the control-plane binaries are, and the kwok stage file.
#[derive(Clone, Debug)]
pub struct TestBin {
    pub dir: PathBuf,
}

impl TestBin {
    /// Finds the binaries: `$KUBE_REMEDIATOR_TESTBIN` if set, otherwise runs `tools/testbin`,
    /// which builds whatever is missing (showing its progress) and prints the directory.
    pub fn locate() -> Result<TestBin> {
        Self::locate_set("KUBE_REMEDIATOR_TESTBIN", &[])
    }

    /// One set of `tools/testbin`: the directory in `$variable` if set, otherwise the one
    /// `tools/testbin ARGS` prints (building what is missing). The packaging trials find the
    /// release tools (crane, promtool) with it, the benchmarks the Go peer.
    pub fn locate_set(variable: &str, args: &[&str]) -> Result<TestBin> {
        if let Ok(dir) = std::env::var(variable) {
            return Ok(TestBin { dir: PathBuf::from(dir) });
        }
        Ok(TestBin { dir: tool_dir("testbin", args)? })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The Kubernetes release of this set (`v1.37.2`), from the `VERSIONS` file
    /// `tools/testbin` writes beside the binaries.
    pub fn kubernetes_version(&self) -> Result<String> {
        let versions = std::fs::read_to_string(self.path("VERSIONS"))
            .with_context(|| format!("reading {}", self.path("VERSIONS").display()))?;
        versions
            .lines()
            .find_map(|l| l.strip_prefix("kubernetes="))
            .map(str::to_string)
            .with_context(|| format!("no kubernetes= line in {}", self.path("VERSIONS").display()))
    }

    /// The minor version of this set's Kubernetes (37 for v1.37.2).
    pub fn kubernetes_minor(&self) -> Result<u32> {
        let version = self.kubernetes_version()?;
        version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .with_context(|| format!("cannot read the minor version of {version}"))
    }

    /// The alpha feature gates the tests turn on, where this release has them: the node
    /// lifecycle conditions and StatefulSet `Recreate` (1.37). Older releases refuse gates they
    /// do not know, so none is passed there.
    pub fn feature_gates(&self) -> Result<Option<String>> {
        Ok((self.kubernetes_minor()? >= 37)
            .then(|| "NodeLifecycleConditions=true,StatefulSetRecreateStrategy=true".to_string()))
    }

    /// One of the release tools (crane, promtool, kube-score): from `$KUBE_REMEDIATOR_SHIPBIN`
    /// if set, otherwise from `tools/testbin ship`, which builds them on first use.
    pub fn ship_tool(name: &str) -> Result<PathBuf> {
        let path = Self::locate_set("KUBE_REMEDIATOR_SHIPBIN", &["ship"])?.path(name);
        if !path.is_file() {
            bail!(
                "{} is missing: KUBE_REMEDIATOR_SHIPBIN is older than tools/testbin ship",
                path.display()
            );
        }
        Ok(path)
    }
}

/// Runs `tools/<script> <args>`, which builds or installs tools on first use and prints their
/// directory on its last line of stdout; that directory. Its progress goes to stderr.
pub fn tool_dir(script: &str, args: &[&str]) -> Result<PathBuf> {
    let script = repo_root().join("tools").join(script);
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} {} failed (see its messages above)", script.display(), args.join(" "));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().unwrap_or_default().trim().to_string();
    if dir.is_empty() {
        bail!("{} printed no directory", script.display());
    }
    Ok(PathBuf::from(dir))
}

/// The repository root (where Cargo.toml is).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One audited request.
#[derive(Clone, Debug)]
pub struct AuditEntry {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub subresource: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    /// When the API server received the request (`requestReceivedTimestamp`).
    pub received: Option<jiff::Timestamp>,
    /// The API server's answer (HTTP code), if it answered.
    pub code: Option<i64>,
    /// Whether the request was a dry run (`dryRun` in its URI): nothing was written.
    pub dry_run: bool,
}

/// How far [`Cluster::audit_writes`] has read the audit log, and what it found there.
#[derive(Default)]
struct AuditTail {
    /// Bytes parsed: up to the end of the last complete line.
    read: u64,
    entries: Vec<AuditEntry>,
}

impl AuditEntry {
    /// The fields tests read of one audit event.
    fn from_json(v: &serde_json::Value) -> AuditEntry {
        let s = |ptr: &str| v.pointer(ptr).and_then(|x| x.as_str()).map(str::to_string);
        AuditEntry {
            user: s("/user/username").unwrap_or_default(),
            verb: s("/verb").unwrap_or_default(),
            resource: s("/objectRef/resource").unwrap_or_default(),
            subresource: s("/objectRef/subresource"),
            namespace: s("/objectRef/namespace"),
            name: s("/objectRef/name"),
            received: s("/requestReceivedTimestamp").and_then(|t| t.parse().ok()),
            code: v.pointer("/responseStatus/code").and_then(|c| c.as_i64()),
            dry_run: s("/requestURI").is_some_and(|uri| uri.contains("dryRun")),
        }
    }

    /// Whether `writes` (the operator's, to one pod) are a release and nothing else: the pod's
    /// status (its `DisruptionTarget` condition), then its DELETE.
    pub fn is_release(writes: &[AuditEntry]) -> bool {
        matches!(writes, [status, delete]
            if status.verb == "patch" && status.subresource.as_deref() == Some("status")
                && delete.verb == "delete" && delete.subresource.is_none())
    }
}

struct Proc {
    name: &'static str,
    child: Child,
}

/// A running control plane. Stop it with [`Cluster::stop`]; dropping it stops it too.
pub struct Cluster {
    /// The run directory: logs, PKI, kubeconfig, audit log.
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    /// Kubeconfig of the operator's own identity ([`super::pki::OPERATOR_USER`]).
    pub operator_kubeconfig: PathBuf,
    /// The API server's audit log (writes only, Metadata level), to prove who changed what.
    pub audit_log: PathBuf,
    pub bin: TestBin,
    /// etcd's client URL (`http://127.0.0.1:PORT`): the benchmark writes its population there,
    /// in the API server's storage layout, where the API's write path would take an hour.
    pub etcd_url: String,
    etcd_data: PathBuf,
    procs: Mutex<Vec<Proc>>,
    /// The audit log read so far, see [`Cluster::audit_writes`].
    audit: Mutex<AuditTail>,
    /// Processes tests start on this control plane and stop themselves (hollow kubelets), kept
    /// in the `pids` file so that a run killed before its clean-up is cleaned by the next one.
    test_pids: Mutex<Vec<u32>>,
}

impl Cluster {
    /// Starts every component with the tests' settings ([`ClusterOptions::tests`]) and waits
    /// until the API server serves, the controller manager has created the default
    /// ServiceAccount, and kwok runs. `dir` receives logs and credentials.
    pub async fn start(dir: &Path) -> Result<Cluster> {
        Self::start_with(dir, ClusterOptions::tests()).await
    }

    /// Like [`Cluster::start`], configured by `options`.
    pub async fn start_with(dir: &Path, options: ClusterOptions) -> Result<Cluster> {
        // Free ports are picked before the components bind them, and an outgoing connection
        // can take one in between (seen: etcd's peer port, with three control planes starting
        // at once). A start that fails is retried, on new ports.
        let mut attempt = 1;
        loop {
            match Self::start_once(dir, options.clone()).await {
                Ok(cluster) => return Ok(cluster),
                Err(e) if attempt < 3 => {
                    eprintln!(
                        "[cluster] start failed (attempt {attempt}): {e:#}; again on new ports"
                    );
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_once(dir: &Path, options: ClusterOptions) -> Result<Cluster> {
        let started = Instant::now();
        let bin = TestBin::locate()?;
        for name in ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"]
        {
            if !bin.path(name).is_file() {
                bail!("{} is missing; run tools/testbin", bin.path(name).display());
            }
        }
        std::fs::create_dir_all(dir)?;
        kill_stale_runs(dir.parent().unwrap_or(dir));
        let pki = Pki::write(&dir.join("pki"))?;

        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let apiserver_port = free_port()?;
        let server = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, pki.kubeconfig(&server))?;
        let operator_kubeconfig = dir.join("operator.kubeconfig");
        std::fs::write(&operator_kubeconfig, pki.operator_kubeconfig(&server))?;
        let audit_policy = dir.join("audit-policy.yaml");
        std::fs::write(&audit_policy, AUDIT_POLICY)?;
        let audit_log = dir.join("audit.log");
        // etcd's data lives on tmpfs when there is one: it is throw-away and fsync-free anyway.
        let tmpfs = Path::new("/dev/shm");
        let etcd_base = if tmpfs.is_dir() { tmpfs.to_path_buf() } else { dir.to_path_buf() };
        let etcd_data = etcd_base.join(format!(
            "kube-remediator-etcd-{}-{}",
            std::process::id(),
            apiserver_port
        ));

        let cluster = Cluster {
            dir: dir.to_path_buf(),
            kubeconfig: kubeconfig.clone(),
            operator_kubeconfig,
            audit_log: audit_log.clone(),
            bin: bin.clone(),
            etcd_url: format!("http://127.0.0.1:{etcd_client}"),
            etcd_data: etcd_data.clone(),
            procs: Mutex::new(Vec::new()),
            audit: Mutex::new(AuditTail::default()),
            test_pids: Mutex::new(Vec::new()),
        };

        cluster.spawn_with(
            "etcd",
            &[
                "--name=test".into(),
                format!("--data-dir={}", etcd_data.display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=test=http://127.0.0.1:{etcd_peer}"),
                "--unsafe-no-fsync".into(),
                // Above the default 2 GiB: the benchmark's largest tier stores 150,000 pods and
                // their history between two compactions. Space on tmpfs is taken only as used.
                "--quota-backend-bytes=8589934592".into(),
                "--log-level=warn".into(),
            ],
            options.large,
        )?;

        let p = |path: &Path| path.display().to_string();
        let mut apiserver_args: Vec<String> = vec![
            format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={apiserver_port}"),
            format!("--tls-cert-file={}", p(&pki.serving_cert)),
            format!("--tls-private-key-file={}", p(&pki.serving_key)),
            format!("--client-ca-file={}", p(&pki.ca_cert)),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            format!("--service-account-key-file={}", p(&pki.service_account_pub)),
            format!("--service-account-signing-key-file={}", p(&pki.service_account_key)),
            "--service-cluster-ip-range=10.96.0.0/16".into(),
            "--authorization-mode=Node,RBAC".into(),
            // The kubernetes Service's endpoints would point at loopback, which the API
            // rejects; nothing in the tests needs them.
            "--endpoint-reconciler-type=none".into(),
            format!("--audit-policy-file={}", p(&audit_policy)),
            format!("--audit-log-path={}", p(&audit_log)),
            "--audit-log-maxsize=1000".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ];
        if let Some(seconds) = options.default_toleration_seconds {
            apiserver_args.extend([
                format!("--default-not-ready-toleration-seconds={seconds}"),
                format!("--default-unreachable-toleration-seconds={seconds}"),
            ]);
        }
        let feature_gates = bin.feature_gates()?;
        if let Some(gates) = &feature_gates {
            apiserver_args.push(format!("--feature-gates={gates}"));
        }
        cluster.spawn_with("kube-apiserver", &apiserver_args, options.large)?;

        let client = cluster.client().await?;
        // A component that exited (etcd that could not bind its port, say) ends the wait at once.
        wait_for("the API server to serve the default namespace", Duration::from_secs(90), || {
            let client = client.clone();
            let exited = cluster.check_alive().err();
            async move {
                if let Some(e) = exited {
                    return Ok(Some(Err(e)));
                }
                Ok(Api::<Namespace>::all(client).get_opt("default").await?.map(|_| Ok(())))
            }
        })
        .await??;

        let kc = p(&kubeconfig);
        // What kube-controller-manager and kube-scheduler are both given: the admin kubeconfig
        // for everything, a serving port of their own on loopback, no leader election.
        let component_args = || -> Result<Vec<String>> {
            Ok(vec![
                format!("--kubeconfig={kc}"),
                format!("--authentication-kubeconfig={kc}"),
                format!("--authorization-kubeconfig={kc}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()?),
                "--leader-elect=false".into(),
                "--profiling=false".into(),
                "--v=1".into(),
            ])
        };
        let mut kcm_args = component_args()?;
        kcm_args.extend([
            "--node-monitor-period=1s".into(),
            format!("--root-ca-file={}", p(&pki.ca_cert)),
            format!("--service-account-private-key-file={}", p(&pki.service_account_key)),
        ]);
        if let Some(seconds) = options.node_monitor_grace_seconds {
            kcm_args.push(format!("--node-monitor-grace-period={seconds}s"));
        }
        if let Some(rate) = options.node_eviction_rate {
            // E.g. taint dead nodes at once instead of one node per zone every 10 s.
            kcm_args.push(format!("--node-eviction-rate={rate}"));
            kcm_args.push(format!("--secondary-node-eviction-rate={rate}"));
        }
        if !options.pod_gc {
            // PodGC force-deletes pods of deleted or out-of-service nodes; the tests must show
            // what kube-remediator does, not race PodGC.
            kcm_args.push("--controllers=*,-pod-garbage-collector-controller".into());
        }
        if let Some(gates) = &feature_gates {
            kcm_args.push(format!("--feature-gates={gates}"));
        }
        cluster.spawn_with("kube-controller-manager", &kcm_args, options.large)?;
        if !options.large {
            cluster.spawn("kube-scheduler", &component_args()?)?;
        }
        let mut kwok_args = vec![
            format!("--kubeconfig={kc}"),
            format!("--config={}", p(&bin.path("kwok-stages.yaml"))),
        ];
        if options.large {
            let kwok_config = dir.join("kwok-config.yaml");
            std::fs::write(&kwok_config, KWOK_CONFIG)?;
            kwok_args.push(format!("--config={}", p(&kwok_config)));
            // kwok logs every Lease it renews at INFO: 500 lines a second at 5,000 nodes, on the
            // two cores its renewals share with the API server (the sixth run of tier L).
            kwok_args.push("--v=WARN".into());
        }
        kwok_args.extend([
            "--manage-all-nodes=false".into(),
            format!("--manage-nodes-with-label-selector={ALIVE_LABEL}=true"),
            format!("--node-lease-duration-seconds={}", options.node_lease_seconds),
            format!("--server-address=127.0.0.1:{}", free_port()?),
            "--node-ip=127.0.0.1".into(),
            // Room for 262,144 pod IPs: a /16 holds 65,536, and at tier L (150,000 pods) kwok
            // then gave pods two IPs of one family, which the API server refuses: the status
            // of 89,708 pods was refused at least once (the sixth run of tier L).
            "--cidr=10.244.0.0/14".into(),
        ]);
        cluster.spawn_with("kwok", &kwok_args, options.large)?;

        wait_for(
            "kube-controller-manager to create the default ServiceAccount",
            Duration::from_secs(90),
            || {
                let client = client.clone();
                async move {
                    let sa = Api::<ServiceAccount>::namespaced(client, "default");
                    Ok(sa.get_opt("default").await?.map(|_| ()))
                }
            },
        )
        .await?;
        cluster.check_alive()?;
        eprintln!(
            "[cluster] control plane ready at {server} in {:.1}s ({}; etcd at {}; logs: {})",
            started.elapsed().as_secs_f64(),
            if options == ClusterOptions::tests() { "test settings" } else { "production-like" },
            cluster.etcd_url,
            dir.display()
        );
        Ok(cluster)
    }

    /// An admin client (system:masters).
    pub async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// Every write the API server audited (Metadata level), oldest first. The API server only
    /// appends to its log (its size limit is far above a run's), so each call parses only the
    /// lines written since the last: tests call this in loops, on a log that grows to tens of
    /// megabytes over the suite, and parsing it whole each time kept the tests' two runtime
    /// threads busy long enough to delay the heartbeats tests play for their nodes.
    pub fn audit_writes(&self) -> Result<Vec<AuditEntry>> {
        let mut tail = self.audit.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = File::open(&self.audit_log)
            .with_context(|| format!("opening {}", self.audit_log.display()))?;
        file.seek(SeekFrom::Start(tail.read))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        // A line still being written waits for the next call.
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let parsed = bytes[..complete]
            .split(|&b| b == b'\n')
            .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
            .map(|v| AuditEntry::from_json(&v));
        tail.entries.extend(parsed);
        tail.read += complete as u64;
        Ok(tail.entries.clone())
    }

    /// The DELETEs of the pod `namespace/name` sent by the operator's user
    /// ([`super::pki::OPERATOR_USER`]), oldest first, whatever their outcome.
    pub fn operator_pod_deletes(&self, namespace: &str, name: &str) -> Result<Vec<AuditEntry>> {
        Ok(self
            .audit_writes()?
            .into_iter()
            .filter(|e| {
                e.user == super::pki::OPERATOR_USER
                    && e.verb == "delete"
                    && e.resource == "pods"
                    && e.subresource.is_none()
                    && e.namespace.as_deref() == Some(namespace)
                    && e.name.as_deref() == Some(name)
            })
            .collect())
    }

    /// Like [`Cluster::operator_pod_deletes`] where a DELETE is expected (the pod is gone, say):
    /// waits up to 10 s for the first to reach the audit log. The API server writes a request's
    /// audit entry after it has answered, so a client can see the pod gone before the entry.
    pub async fn await_operator_pod_deletes(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<AuditEntry>> {
        let what = format!("the operator's DELETE of {namespace}/{name} in the audit log");
        wait_for(&what, Duration::from_secs(10), || async {
            let deletes = self.operator_pod_deletes(namespace, name)?;
            Ok((!deletes.is_empty()).then_some(deletes))
        })
        .await
    }

    /// The writes of the operator's user ([`super::pki::OPERATOR_USER`]) to the pods of
    /// `namespace` (only the pod `name` if given; any verb, any subresource), oldest first,
    /// whatever their outcome.
    pub fn operator_pod_writes(
        &self,
        namespace: &str,
        name: Option<&str>,
    ) -> Result<Vec<AuditEntry>> {
        Ok(self
            .audit_writes()?
            .into_iter()
            .filter(|e| {
                e.user == super::pki::OPERATOR_USER
                    && e.resource == "pods"
                    && e.namespace.as_deref() == Some(namespace)
                    && name.is_none_or(|n| e.name.as_deref() == Some(n))
            })
            .collect())
    }

    /// The writes of the operator's user ([`super::pki::OPERATOR_USER`]) to the Node `name`
    /// (any verb, any subresource), oldest first, whatever their outcome.
    pub fn operator_node_writes(&self, name: &str) -> Result<Vec<AuditEntry>> {
        Ok(self
            .audit_writes()?
            .into_iter()
            .filter(|e| {
                e.user == super::pki::OPERATOR_USER
                    && e.resource == "nodes"
                    && e.name.as_deref() == Some(name)
            })
            .collect())
    }

    /// Stalls a component (`etcd`, `kube-apiserver`, ...) with SIGSTOP, as a process that stops
    /// being scheduled (a VM paused, a disk that hangs fsync): its sockets stay open and
    /// silent. It runs again when the returned [`Stall`] is resumed or dropped.
    pub fn stall(&self, component: &str) -> Result<Stall> {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        let proc = procs
            .iter_mut()
            .find(|p| p.name == component)
            .with_context(|| format!("no component named {component}"))?;
        if let Some(status) = proc.child.try_wait()? {
            bail!("cannot stall {component}: it exited ({status})");
        }
        let pid = proc.child.id();
        signal(pid, "STOP")?;
        let stall = Stall { component: proc.name, pid, since: Instant::now(), resumed: false };
        eprintln!(
            "[cluster] {component} (pid {pid}) stalled (SIGSTOP) at {}",
            jiff::Timestamp::now()
        );
        Ok(stall)
    }

    /// Fails when a component has exited, naming it and pointing at its log.
    pub fn check_alive(&self) -> Result<()> {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        for proc in procs.iter_mut() {
            if let Some(status) = proc.child.try_wait()? {
                bail!(
                    "{} exited ({status}); see {}",
                    proc.name,
                    self.dir.join(format!("{}.log", proc.name)).display()
                );
            }
        }
        Ok(())
    }

    /// Stops every component (newest first) and removes etcd's data. Idempotent.
    pub fn stop(&self) {
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(mut proc) = procs.pop() {
            let pid = proc.child.id().to_string();
            // A stalled component would not act on SIGTERM before SIGCONT.
            let _ = Command::new("kill").args(["-CONT", &pid]).status();
            super::stop_child(&mut proc.child, Duration::from_secs(5));
        }
        let _ = std::fs::remove_dir_all(&self.etcd_data);
        let _ = std::fs::remove_file(self.dir.join("pids"));
    }

    fn spawn(&self, name: &'static str, args: &[String]) -> Result<()> {
        self.spawn_with(name, args, false)
    }

    /// [`Cluster::spawn`], with a soft heap limit ([`go_memory_limit`]) where `limited`.
    fn spawn_with(&self, name: &'static str, args: &[String], limited: bool) -> Result<()> {
        let log = File::create(self.dir.join(format!("{name}.log")))?;
        let mut command = Command::new(self.bin.path(name));
        if limited {
            command.env("GOMEMLIMIT", go_memory_limit(name));
        }
        let child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        self.procs.lock().unwrap_or_else(|e| e.into_inner()).push(Proc { name, child });
        self.write_pids()
    }

    /// Adds `pid`, a process a test started on this control plane (a hollow kubelet), to the
    /// `pids` file, so that the next run kills it if this one dies before its clean-up.
    pub fn record_pid(&self, pid: u32) {
        self.test_pids.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
        if let Err(e) = self.write_pids() {
            eprintln!("[cluster] cannot record pid {pid}: {e:#}");
        }
    }

    /// Records the pids so a run killed before its clean-up can be cleaned by the next one.
    fn write_pids(&self) -> Result<()> {
        let procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        let tests = self.test_pids.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = vec![format!("owner {}", std::process::id())];
        lines.extend(procs.iter().map(|p| p.child.id().to_string()));
        lines.extend(tests.iter().map(u32::to_string));
        std::fs::write(self.dir.join("pids"), lines.join("\n"))?;
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A component stopped by [`Cluster::stall`]. [`Stall::resume`] sends SIGCONT; dropping an
/// unresumed stall does too, so a failing test never leaves etcd stopped.
pub struct Stall {
    component: &'static str,
    pid: u32,
    since: Instant,
    resumed: bool,
}

impl Stall {
    /// Lets the component run again (SIGCONT); returns the instant it was resumed (just after
    /// the signal was delivered).
    pub fn resume(mut self) -> Result<jiff::Timestamp> {
        self.resumed = true;
        self.cont()
    }

    fn cont(&self) -> Result<jiff::Timestamp> {
        signal(self.pid, "CONT")?;
        let now = jiff::Timestamp::now();
        eprintln!(
            "[cluster] {} (pid {}) resumed (SIGCONT) at {now} after {:.1}s",
            self.component,
            self.pid,
            self.since.elapsed().as_secs_f64()
        );
        Ok(now)
    }
}

impl Drop for Stall {
    fn drop(&mut self) {
        if !self.resumed
            && let Err(e) = self.cont()
        {
            eprintln!("[cluster] cannot resume {} (pid {}): {e:#}", self.component, self.pid);
        }
    }
}

/// Sends `SIG<name>` to `pid` with kill(1) (the crate forbids `unsafe`, so no libc).
pub fn signal(pid: u32, name: &str) -> Result<()> {
    let status = Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .with_context(|| format!("running kill -{name} {pid}"))?;
    if !status.success() {
        bail!("kill -{name} {pid} failed ({status})");
    }
    Ok(())
}

/// Kills components left behind by earlier runs under `runs_dir` whose owning process died
/// before it could clean up (their `pids` file survives), checking each process is still one of
/// ours. Runs whose owner is alive (a demo next to a test run) are left alone.
fn kill_stale_runs(runs_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(runs_dir) else { return };
    for entry in entries.flatten() {
        let pids_file = entry.path().join("pids");
        let Ok(pids) = std::fs::read_to_string(&pids_file) else { continue };
        let owner = pids.lines().next().and_then(|l| l.strip_prefix("owner ")).unwrap_or("");
        if !owner.is_empty() && Path::new(&format!("/proc/{owner}")).exists() {
            continue;
        }
        for pid in pids.lines().skip(1).map(str::trim).filter(|p| !p.is_empty()) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains("kube-remediator")
                || cmdline.contains(&*entry.path().to_string_lossy())
            {
                let _ = Command::new("kill").args(["-KILL", pid]).status();
            }
        }
        let _ = std::fs::remove_file(pids_file);
    }
}

/// A free TCP port on 127.0.0.1 (bound, then released for the component to take).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// kwok's own settings. Its default of 4 pod stages and 4 Lease renewals in flight at once
/// keeps up with the tests, but at the benchmark's largest tier, where the API server answers
/// in a few hundred milliseconds, it made only 10 to 25 pods Running a second, hours behind
/// 150,000 pods. A configuration given is not completed with kwok's defaults: the options the
/// flags above do not set are given here, at kwok's defaults but for those two.
const KWOK_CONFIG: &str = r#"apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 32
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 32
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: true
  enableProfilingHandler: true
  enableContentionProfiling: false
"#;

/// A soft limit on a control-plane component's Go heap (`GOMEMLIMIT`), set at the benchmark's
/// largest tier only: its garbage collector works harder near it rather than let the heap grow
/// to twice what is live. Without them, 150,000 pods on 5,000 nodes needed more memory than the
/// development machine's 24 GiB, the measured processes not counted, mostly for the copies of
/// every pod that the API server's watch cache, kwok and the controller-manager hold. The API
/// server's is 11 GiB (it held 10.0 GiB with 150,000 pods of 5 KB served for an hour): the
/// control plane may take about 19 GiB of the 24, leaving room for the measured processes (the
/// naive peer's 3.5 GiB the largest, measured last).
fn go_memory_limit(component: &str) -> &'static str {
    match component {
        "kube-apiserver" => "11GiB",
        "kwok" => "5GiB",
        "kube-controller-manager" => "3GiB",
        _ => "2GiB",
    }
}

/// Writes at Metadata level (who, what, when), reads and kwok's heartbeats not at all. The first
/// rule records every request, reads too, of the service accounts of the namespace `measured`,
/// as which `benches/rss.rs` runs the processes it measures, to count their LISTs and
/// WATCHes; no test uses that namespace.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  userGroups: ["system:serviceaccounts:measured"]
- level: None
  verbs: ["get", "list", "watch"]
- level: None
  resources:
  - group: "coordination.k8s.io"
    resources: ["leases"]
- level: None
  resources:
  - group: ""
    resources: ["nodes/status"]
- level: Metadata
"#;
