//! Measuring a whole controller process on the test control plane, the same way whatever it is
//! written in: started as a service account of its own in the namespace `measured` (whose
//! every request the control plane's audit log records, see `AUDIT_POLICY` in
//! `tests/support/cluster.rs`), ready when its `/readyz` answers 200, memory from
//! `/proc/<pid>/status` (VmRSS, VmHWM), CPU from `/proc/<pid>/stat` (utime + stime), and its
//! LISTs, WATCHes and writes counted in the audit log once it has stopped.

use std::collections::BTreeMap;
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::PostParams;
use kube::config::Kubeconfig;
use serde_json::json;

use crate::support::Cluster;
use crate::support::cluster::{TestBin, free_port};
use crate::support::operator::http_get;

/// The namespace of the measured processes' service accounts; the audit policy names its group.
pub const MEASURED_NAMESPACE: &str = "measured";

/// The Go peer (`tools/peer`): `$KUBE_REMEDIATOR_BENCHBIN/peer` if set, otherwise built (on
/// first use) by `tools/testbin bench`, with its `VERSIONS` file (controller-runtime, client-go).
pub fn locate_peer() -> Result<(PathBuf, String)> {
    let bin = TestBin::locate_set("KUBE_REMEDIATOR_BENCHBIN", &["bench"])?;
    let versions = std::fs::read_to_string(bin.path("VERSIONS")).unwrap_or_default();
    Ok((bin.path("peer"), versions.split_whitespace().collect::<Vec<_>>().join(", ")))
}

/// The namespace `measured` and a binding of its service accounts to cluster-admin.
pub async fn prepare(client: &kube::Client) -> Result<()> {
    let ns: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": MEASURED_NAMESPACE } }))?;
    create_or_keep(&Api::all(client.clone()), &ns).await?;
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "bench-measured-processes" },
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin",
        },
        "subjects": [{
            "apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
            "name": format!("system:serviceaccounts:{MEASURED_NAMESPACE}"),
        }],
    }))?;
    create_or_keep(&Api::all(client.clone()), &binding).await
}

async fn create_or_keep<K>(api: &Api<K>, object: &K) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// A service account `name` of the namespace `measured` and a kubeconfig with a token of it:
/// the identity of one measured process. Returns the kubeconfig and the user name.
pub async fn identity(
    client: &kube::Client,
    cluster: &Cluster,
    name: &str,
) -> Result<(PathBuf, String)> {
    let sa: ServiceAccount = serde_json::from_value(json!({ "metadata": { "name": name } }))?;
    let api = Api::<ServiceAccount>::namespaced(client.clone(), MEASURED_NAMESPACE);
    create_or_keep(&api, &sa).await?;
    let request: TokenRequest =
        serde_json::from_value(json!({ "spec": { "audiences": [], "expirationSeconds": 7200 } }))?;
    let token = api
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .with_context(|| format!("a token for {name}"))?
        .status
        .map(|s| s.token)
        .filter(|token| !token.is_empty())
        .context("a TokenRequest without a token")?;
    let admin = Kubeconfig::read_from(&cluster.kubeconfig)?;
    let endpoint = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .context("the admin kubeconfig has no cluster")?;
    let server = endpoint.server.clone().context("no server in the admin kubeconfig")?;
    let ca = endpoint.certificate_authority.clone().context("no CA in the admin kubeconfig")?;
    let path = cluster.dir.join(format!("measured-{name}.kubeconfig"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: {name}\ncurrent-context: local\n"
        ),
    )?;
    Ok((path, format!("system:serviceaccount:{MEASURED_NAMESPACE}:{name}")))
}

/// What one measured process did and cost.
#[derive(Clone, Debug, Default)]
pub struct Measurement {
    /// Seconds from its start until `/readyz` answered 200 (every informer or watch synced, and
    /// the leader Lease taken).
    pub ready_s: f64,
    /// CPU seconds (user + system) it had used when it was ready.
    pub cpu_sync_s: f64,
    /// CPU seconds in the 15 s after that.
    pub cpu_steady_s: f64,
    /// VmRSS 15 s after it was ready.
    pub rss: u64,
    /// VmHWM then: the peak resident set since it started.
    pub peak: u64,
    /// `rss` in two parts: anonymous memory (heap, stacks) and pages of files (the program's
    /// code and read-only data, the shared libraries), as `RssAnon` and `RssFile` say.
    pub anon: u64,
    pub file: u64,
    /// kube-remediator only: the pod records its state keeps then (Terminating, or Ready on a
    /// node that is not), as its `/metrics` says; `None` for the peer.
    pub kept_pods: Option<u64>,
    /// kube-remediator only: the pauses of its leadership until it stopped (an API server that
    /// stalled past its renew deadline), as its `/metrics` says; `None` for the peer.
    pub leader_pauses: Option<u64>,
    /// Successful pod writes (kwok's status patches above all) the API server took from start
    /// to ready: a cluster still settling makes every process wait longer for its initial state.
    pub pod_writes_syncing: usize,
    pub requests: Requests,
    /// What a steady churn of pods cost it, measured after `rss` and `peak`.
    pub churn: Option<ChurnCost>,
}

/// A process's cost during a steady churn of pods.
#[derive(Clone, Debug, Default)]
pub struct ChurnCost {
    /// How long the churn ran, in seconds.
    pub seconds: f64,
    /// Pod events every pod watcher received meanwhile: the successful writes of pods (by
    /// anyone) in the audit log, each of which a watch delivers as one event.
    pub pod_events: usize,
    /// CPU seconds the process used meanwhile.
    pub cpu_s: f64,
    /// VmRSS and VmHWM at its end.
    pub rss: u64,
    pub peak: u64,
}

impl ChurnCost {
    /// CPU seconds per 1,000 pod events.
    pub fn cpu_per_1000_events(&self) -> f64 {
        if self.pod_events == 0 { 0.0 } else { self.cpu_s * 1000.0 / self.pod_events as f64 }
    }
}

/// A process's requests as the audit log recorded them.
#[derive(Clone, Debug, Default)]
pub struct Requests {
    /// WATCH requests started, per resource.
    pub watches: BTreeMap<String, usize>,
    /// LIST requests completed, per resource.
    pub lists: BTreeMap<String, usize>,
    /// GETs completed.
    pub gets: usize,
    /// Writes (create, update, patch, delete) completed, of which to Leases.
    pub writes: usize,
    pub lease_writes: usize,
}

impl Requests {
    pub fn total_watches(&self) -> usize {
        self.watches.values().sum()
    }

    pub fn total_lists(&self) -> usize {
        self.lists.values().sum()
    }
}

/// Runs `command` (which serves `/readyz` on `readyz`), waits until it is ready, lets it settle
/// for `settle`, reads its memory and CPU; then, given a `churn`, runs it to its end and reads
/// what it cost; stops the process (SIGTERM) and counts the requests of `user` in the audit log.
/// Its output goes to `log`.
pub async fn measure<F: std::future::Future<Output = Result<()>>>(
    cluster: &Cluster,
    mut command: Command,
    readyz: SocketAddr,
    user: &str,
    log: &Path,
    settle: Duration,
    churn: Option<F>,
) -> Result<Measurement> {
    let out = File::create(log)?;
    let (started, started_at) = (Instant::now(), jiff::Timestamp::now());
    let child = command
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("starting {command:?}"))?;
    let mut process = Measured { child };
    let pid = process.child.id();
    loop {
        if let Some(status) = process.child.try_wait()? {
            bail!("{command:?} exited ({status}); see {}", log.display());
        }
        if let Ok((200, _)) = http_get(readyz, "/readyz").await {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("{command:?} not ready after 600 s; see {}", log.display());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready_s = started.elapsed().as_secs_f64();
    let ready_at = jiff::Timestamp::now();
    let cpu_sync_s = cpu_seconds(pid)?;
    tokio::time::sleep(settle).await;
    still_running(&mut process.child, started, log)?;
    let (rss, peak) = memory(pid)?;
    let (anon, file) = (status_bytes(pid, "RssAnon:")?, status_bytes(pid, "RssFile:")?);
    let kept_pods = match http_get(readyz, "/metrics").await {
        Ok((200, body)) => gauge(&body, "cached_terminating_pods"),
        _ => None,
    };
    let cpu_steady_s = cpu_seconds(pid)? - cpu_sync_s;
    let churn = match churn {
        Some(churn) => {
            let (from, cpu_before, churn_started) =
                (jiff::Timestamp::now(), cpu_seconds(pid)?, Instant::now());
            churn.await?;
            still_running(&mut process.child, started, log)?;
            let seconds = churn_started.elapsed().as_secs_f64();
            let cpu_s = cpu_seconds(pid)? - cpu_before;
            let (rss, peak) = memory(pid)?;
            let pod_events = pod_writes(&cluster.audit_log, from, jiff::Timestamp::now())?;
            Some(ChurnCost { seconds, pod_events, cpu_s, rss, peak })
        }
        None => None,
    };
    let leader_pauses = match http_get(readyz, "/metrics").await {
        Ok((200, body)) => gauge(&body, "leader_pauses_total"),
        _ => None,
    };
    process.stop();
    let requests = requests_of(&cluster.audit_log, user)?;
    let pod_writes_syncing = pod_writes(&cluster.audit_log, started_at, ready_at)?;
    Ok(Measurement {
        ready_s,
        cpu_sync_s,
        cpu_steady_s,
        rss,
        peak,
        anon,
        file,
        kept_pods,
        leader_pauses,
        pod_writes_syncing,
        requests,
        churn,
    })
}

/// Fails if the measured process, ready before, has exited since (an operator that loses its
/// leader Lease exits), saying so rather than that its `/proc` entry has no memory figures.
fn still_running(child: &mut Child, started: Instant, log: &Path) -> Result<()> {
    match child.try_wait()? {
        Some(status) => bail!(
            "exited ({status}) {:.0} s after its start, after it was ready; see {}",
            started.elapsed().as_secs_f64(),
            log.display()
        ),
        None => Ok(()),
    }
}

/// A free loopback address for a process's HTTP endpoints.
pub fn free_addr() -> Result<SocketAddr> {
    Ok(format!("127.0.0.1:{}", free_port()?).parse()?)
}

struct Measured {
    child: Child,
}

impl Measured {
    /// SIGTERM, then SIGKILL if it is still running 10 s later.
    fn stop(&mut self) {
        crate::support::stop_child(&mut self.child, Duration::from_secs(10));
    }
}

impl Drop for Measured {
    fn drop(&mut self) {
        self.stop();
    }
}

/// VmRSS and VmHWM of `pid`, in bytes.
fn memory(pid: u32) -> Result<(u64, u64)> {
    Ok((status_bytes(pid, "VmRSS:")?, status_bytes(pid, "VmHWM:")?))
}

/// One of the sizes `/proc/<pid>/status` gives in KiB (`name` with its colon), in bytes.
fn status_bytes(pid: u32, name: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(name))
        .with_context(|| format!("no {name} in /proc/{pid}/status"))?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("cannot read {line:?}"))?;
    Ok(kib * 1024)
}

/// The value of the gauge whose name ends with `name` in a Prometheus text exposition.
fn gauge(exposition: &str, name: &str) -> Option<u64> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(' '))
        .find(|(metric, _)| metric.ends_with(name))
        .and_then(|(_, value)| value.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; the fields after it start at its ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("malformed /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) counted from 1, here from field 3.
    let ticks = |i: usize| -> Result<f64> {
        fields.get(i).and_then(|v| v.parse::<f64>().ok()).context("malformed /proc/<pid>/stat")
    };
    Ok((ticks(11)? + ticks(12)?) / clock_ticks())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 where that fails).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// The requests of `user` in the audit log: a WATCH counts when its response started, the
/// others when they completed.
fn requests_of(audit_log: &Path, user: &str) -> Result<Requests> {
    let text = std::fs::read_to_string(audit_log)?;
    let mut requests = Requests::default();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let s = |ptr: &str| v.pointer(ptr).and_then(|x| x.as_str()).unwrap_or_default();
        if s("/user/username") != user {
            continue;
        }
        let (verb, stage) = (s("/verb"), s("/stage"));
        let resource = s("/objectRef/resource").to_string();
        match (verb, stage) {
            ("watch", "ResponseStarted") => *requests.watches.entry(resource).or_default() += 1,
            ("list", "ResponseComplete") => *requests.lists.entry(resource).or_default() += 1,
            ("get", "ResponseComplete") => requests.gets += 1,
            ("create" | "update" | "patch" | "delete" | "deletecollection", "ResponseComplete") => {
                requests.writes += 1;
                if resource == "leases" {
                    requests.lease_writes += 1;
                }
            }
            _ => {}
        }
    }
    Ok(requests)
}

/// Pods deleted by anyone (evictions by the node lifecycle controller, kwok finishing them),
/// but for those whose name starts with `except` (the churn's), from the audit log: the
/// populated cluster is steady only if this stays 0.
pub fn pod_deletes(audit_log: &Path, except: &str) -> Result<usize> {
    count_audited(audit_log, |v| {
        let s = |ptr| field(v, ptr);
        s("/verb") == "delete"
            && s("/objectRef/resource") == "pods"
            && !s("/objectRef/name").starts_with(except)
    })
}

/// Successful writes of pods (create, update, patch, delete, by anyone, status included) received
/// between `from` and `to`, from the audit log: each is one event to every watcher of pods.
fn pod_writes(audit_log: &Path, from: jiff::Timestamp, to: jiff::Timestamp) -> Result<usize> {
    count_audited(audit_log, |v| {
        let at = field(v, "/requestReceivedTimestamp").parse::<jiff::Timestamp>().ok();
        is_pod_write(v) && at.is_some_and(|at| at >= from && at <= to)
    })
}

/// One read of every pod by [`probe_pod_reads`]: what, seconds, events before the closing
/// bookmark (0 for a LIST), bytes.
pub type ProbedRead = (String, f64, usize, usize);

/// How fast the API server delivers every pod to a client that does nothing but read: the
/// initial state of a streamed list (up to the bookmark that ends it) and a LIST, each in
/// protobuf and, unless `json` is false, in JSON. The floor under any process's time to ready.
pub async fn probe_pod_reads(client: &kube::Client, json: bool) -> Result<Vec<ProbedRead>> {
    let mut out = Vec::new();
    for (label, path, accept) in POD_READS {
        if !json && accept == "application/json" {
            continue;
        }
        out.push(read_every_pod(client, label, path, accept).await?);
    }
    Ok(out)
}

const WATCH_PODS: &str = "/api/v1/pods?watch=true&sendInitialEvents=true&\
                          resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=600";

/// The reads of every pod that [`probe_pod_reads`] times: what, path, `Accept`.
const POD_READS: [(&str, &str, &str); 4] = [
    ("streamed list, protobuf", WATCH_PODS, "application/vnd.kubernetes.protobuf;stream=watch"),
    ("streamed list, JSON", WATCH_PODS, "application/json"),
    ("LIST, protobuf", "/api/v1/pods", "application/vnd.kubernetes.protobuf"),
    ("LIST, JSON", "/api/v1/pods", "application/json"),
];

async fn read_every_pod(
    client: &kube::Client,
    label: &str,
    path: &str,
    accept: &str,
) -> Result<ProbedRead> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(kube::client::Body::empty())?;
    let started = Instant::now();
    let response = client.send(request).await?;
    if !response.status().is_success() {
        bail!("{label}: {}", response.status());
    }
    let (items, bytes) = if path == WATCH_PODS {
        read_initial_events(response.into_body(), accept != "application/json").await?
    } else {
        let body = http_body_util::BodyExt::collect(response.into_body()).await?.to_bytes();
        (0, body.len())
    };
    Ok((label.to_string(), started.elapsed().as_secs_f64(), items, bytes))
}

/// Waits until the API server has settled: a freshly populated cluster serves the same pods
/// slower for minutes after it went quiet (at tier M a streamed list took 9.0 s before the
/// processes and 3.7 s after them), and the first process measured paid for it. Reads every
/// pod as a streamed list in protobuf (what every process asks for) until a read is no more
/// than a tenth faster than the one before, at most `MAX_READS` times; returns the seconds of
/// each read.
pub async fn settle(client: &kube::Client) -> Result<Vec<f64>> {
    const MAX_READS: usize = 8;
    let (label, path, accept) = POD_READS[0];
    let mut times: Vec<f64> = Vec::new();
    while times.len() < MAX_READS {
        let (_, seconds, _, _) = read_every_pod(client, label, path, accept).await?;
        eprintln!("[rss] settling: every pod streamed in {seconds:.1} s");
        let settled = times.last().is_some_and(|&before| seconds >= before * 0.9);
        times.push(seconds);
        if settled {
            return Ok(times);
        }
    }
    eprintln!("[rss] WARNING: the API server still got faster after {MAX_READS} reads");
    Ok(times)
}

/// Reads a watch's events up to its first bookmark (the end of its initial events): how many
/// came before it, and the bytes read.
async fn read_initial_events(
    mut body: kube::client::Body,
    protobuf: bool,
) -> Result<(usize, usize)> {
    use http_body_util::BodyExt;
    let (mut buf, mut bytes, mut events) = (Vec::<u8>::new(), 0usize, 0usize);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        bytes += data.len();
        buf.extend_from_slice(&data);
        let mut at = 0;
        loop {
            // Protobuf: each event is a 4-byte big-endian length and a WatchEvent, whose first
            // field is its type. JSON: one event a line.
            let (event, next) = if protobuf {
                let Some(len) = buf.get(at..at + 4) else { break };
                let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
                let Some(event) = buf.get(at + 4..at + 4 + len) else { break };
                (event, at + 4 + len)
            } else {
                let Some(end) = buf[at..].iter().position(|&b| b == b'\n') else { break };
                (&buf[at..at + end], at + end + 1)
            };
            let head = &event[..event.len().min(24)];
            if head.windows(8).any(|w| w == b"BOOKMARK") {
                return Ok((events, bytes));
            }
            events += 1;
            at = next;
        }
        buf.drain(..at);
    }
    bail!("the watch ended before its initial events did ({events} events)")
}

/// Reads the audit log as it grows, each call from where the last one ended.
pub struct AuditTail {
    path: PathBuf,
    offset: u64,
}

impl AuditTail {
    /// From the log's present end on.
    pub fn new(path: &Path) -> Result<Self> {
        Ok(Self { path: path.to_path_buf(), offset: std::fs::metadata(path)?.len() })
    }

    /// Successful pod writes (by anyone) among the entries appended since the last call.
    pub fn pod_writes(&mut self) -> Result<usize> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = File::open(&self.path)?;
        file.seek(SeekFrom::Start(self.offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        // Only whole lines: the API server may be writing the last one.
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.offset += whole as u64;
        Ok(String::from_utf8_lossy(&bytes[..whole])
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|v| field(v, "/stage") == "ResponseComplete" && is_pod_write(v))
            .count())
    }
}

/// A successful write of a pod (create, update, patch, delete, status included).
fn is_pod_write(v: &serde_json::Value) -> bool {
    let code = v.pointer("/responseStatus/code").and_then(|c| c.as_u64()).unwrap_or(0);
    matches!(field(v, "/verb"), "create" | "update" | "patch" | "delete")
        && field(v, "/objectRef/resource") == "pods"
        && (200..300).contains(&code)
}

/// The completed requests in the audit log that `wanted` accepts.
fn count_audited(audit_log: &Path, wanted: impl Fn(&serde_json::Value) -> bool) -> Result<usize> {
    let text = std::fs::read_to_string(audit_log)?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|v| field(v, "/stage") == "ResponseComplete" && wanted(v))
        .count())
}

/// An audit entry's string field at a JSON pointer ("" when absent).
fn field<'a>(entry: &'a serde_json::Value, pointer: &str) -> &'a str {
    entry.pointer(pointer).and_then(|x| x.as_str()).unwrap_or_default()
}

/// What the cluster holds that kube-remediator keeps a record of, counted by a client that reads
/// every node and pod (pods in pages of 1,000, JSON) and sorts each pod by the operator's own
/// rules (`kube_remediator::adapters::pod_record` and `ready_pod_record`): which pods, and why,
/// when a process keeps more records than a steady cluster should make it.
#[derive(Clone, Debug, Default)]
pub struct Census {
    pub nodes: usize,
    /// Nodes whose Ready condition is not True (False, Unknown or missing).
    pub nodes_not_ready: usize,
    pub pods: usize,
    /// Pods with a deletion timestamp: kept.
    pub terminating: usize,
    /// Pods in phase Failed for a node's shutdown: kept.
    pub failed_by_shutdown: usize,
    /// Pods Running with Ready=False (not for a reason the kubelet gives) while every container
    /// is ready and running, as a node's blip leaves them: kept.
    pub left_not_ready: usize,
    /// Pods Running and Ready on a node that is not Ready (or not there): kept.
    pub ready_on_node_not_ready: usize,
    /// Every pod neither Terminating nor Ready, by phase and the Ready condition's status and
    /// reason (kept or not): what else the cluster holds.
    pub not_ready: BTreeMap<String, usize>,
}

impl Census {
    /// The pods kube-remediator keeps a record of in such a cluster.
    pub fn kept(&self) -> usize {
        self.terminating
            + self.failed_by_shutdown
            + self.left_not_ready
            + self.ready_on_node_not_ready
    }
}

/// Counts [`Census`] from the API server.
pub async fn census(client: &kube::Client) -> Result<Census> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::ListParams;
    use kube_remediator::adapters::{WatchedPod, pod_record, ready_pod_record};
    let mut census = Census::default();
    let nodes = Api::<Node>::all(client.clone()).list(&ListParams::default()).await?;
    let mut ready_nodes = std::collections::HashSet::new();
    for node in &nodes.items {
        let conditions = node.status.as_ref().and_then(|s| s.conditions.as_deref());
        let ready =
            conditions.unwrap_or_default().iter().any(|c| c.type_ == "Ready" && c.status == "True");
        if ready {
            ready_nodes.insert(node.metadata.name.clone().unwrap_or_default());
        }
    }
    census.nodes = nodes.items.len();
    census.nodes_not_ready = census.nodes - ready_nodes.len();
    let pods = Api::<Pod>::all(client.clone());
    let mut params = ListParams::default().limit(1000);
    loop {
        let page = pods.list(&params).await?;
        for pod in &page.items {
            census.pods += 1;
            let watched: WatchedPod = serde_json::from_value(serde_json::to_value(pod)?)?;
            if let Some(record) = pod_record(&watched) {
                let view = &record.view;
                if view.deletion_timestamp.is_some() {
                    census.terminating += 1;
                } else if view.shutdown_reason.is_some() {
                    census.failed_by_shutdown += 1;
                } else {
                    census.left_not_ready += 1;
                }
            }
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if ready_pod_record(&watched).is_some() {
                let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
                if !node.is_some_and(|n| ready_nodes.contains(n)) {
                    census.ready_on_node_not_ready += 1;
                }
                continue;
            }
            let status = pod.status.as_ref();
            let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("no phase");
            let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or_default();
            let key = match conditions.iter().find(|c| c.type_ == "Ready") {
                Some(r) => format!(
                    "{phase}, Ready={} ({})",
                    r.status,
                    r.reason.as_deref().unwrap_or("no reason")
                ),
                None => format!("{phase}, no Ready condition"),
            };
            *census.not_ready.entry(key).or_default() += 1;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => params = params.continue_token(&next),
            None => break,
        }
        if census.pods % 25_000 == 0 {
            eprintln!("[census] {} pods read", census.pods);
        }
    }
    Ok(census)
}
