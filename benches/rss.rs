//! `cargo bench --bench rss`: whole-process memory, CPU and API load of kube-remediator and of
//! its Go peer side by side, on the same real test control plane, in the same run, measured by
//! the same tool. The control plane is populated with kwok nodes and realistic pods: three
//! containers with env, probes, resources and mounts, five volumes, an owner reference, labels
//! and annotations, and two field managers, so each pod weighs several KB of JSON as in real
//! clusters.
//!
//! Measured, one process at a time (never two at once, so they do not disturb each other), on
//! the empty cluster and again once it is populated, its pods Running and its Leases renewed in
//! time (a sample of each read by name), the API server quiet (at most 2 pod writes a second,
//! as its audit log shows) and settled (every pod streamed no faster than the time before,
//! `measure::settle`): kube-remediator (this crate's release
//! build; with streaming and with paged initial lists on the populated cluster) and the Go peer
//! (`tools/peer`: controller-runtime doing the same job on the same policy, built by
//! `tools/testbin bench`) with full-object informers (`naive`) and with transforms (`tuned`).
//! Each runs as a service account of its own in the namespace `measured`, whose every request
//! the audit log records; see `measure.rs` for what is read and how. Our default is measured
//! once more after the peers (whether the order moved anyone's figures), and a client that only
//! reads times every pod's delivery (streamed list and LIST, protobuf and JSON) before and
//! after the processes: the API server's floor under their ready times. Before and after the
//! processes it also reads every node and pod and counts those kube-remediator keeps a record
//! of (Terminating, left not Ready, failed by a shutdown, Ready on a node not Ready): why a
//! process keeps what it keeps (`measure::census`). Asserts nothing.
//!
//! `KUBE_REMEDIATOR_BENCH_PODS` (default 3000) and `KUBE_REMEDIATOR_BENCH_NODES` (default 100)
//! set the size, `KUBE_REMEDIATOR_BENCH_POD=small` pods of one container instead of three (tier
//! L: 150,000 full pods do not fit this machine's API server, etcd and kwok; above 100,000 pods
//! the control plane is fitted to the machine, see `ClusterOptions::large`);
//! `KUBE_REMEDIATOR_BENCH_POPULATE=etcd` the pods written into etcd as copies of one made through
//! the API, in seconds where the API's write path takes this machine over an hour at tier L
//! (`populate_through_etcd`), and with it `KUBE_REMEDIATOR_BENCH_NOT_READY=N` about N of them
//! Running with Ready=False, as the node controller leaves them (kept by the stale-readiness
//! rule: a partial outage's aftermath);
//! `KUBE_REMEDIATOR_BENCHBIN` a directory holding a built `peer`.
//! `KUBE_REMEDIATOR_BENCH_ONLY=remediator` measures kube-remediator alone (its default lists,
//! on the empty and the populated cluster: the rows a per-node or per-pod slope is read from),
//! builds no peer and writes no result file (the plot compares all three processes).
//! `KUBE_REMEDIATOR_BENCH_ALSO=label=path,...` measures other builds of kube-remediator (or
//! scripts that `exec` one) beside its default on the populated cluster.
//!
//! Each run writes its tier's figures to `target/bench/rss-<nodes>x<pods>.json` and then draws
//! `docs/src/img/rss.svg` (steady RSS per process, one group of bars per cluster) from every such
//! file present; `KUBE_REMEDIATOR_BENCH_PLOT_ONLY=1` only redraws it from the files.

// The benchmark uses a small part of the test support; the end-to-end tests, which include the
// same module without this allowance, keep it free of dead code.
#[path = "../tests/support/mod.rs"]
#[allow(dead_code, unused_imports)]
mod support;

mod measure;
mod plot;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use measure::{MEASURED_NAMESPACE, Measurement, free_addr};
use serde_json::json;
use support::env::TEST_LABEL;
use support::{Cluster, ClusterOptions, TestEnv};

const MIB: f64 = 1024.0 * 1024.0;
/// How long each process runs after it is ready before its memory is read.
const SETTLE: Duration = Duration::from_secs(15);
/// How long the pod churn runs on the populated cluster, after the steady figures are read.
const CHURN: Duration = Duration::from_secs(30);
/// Pods created (and, 5 s later, deleted) per second during the churn: `KUBE_REMEDIATOR_BENCH_CHURN`.
const CHURN_RATE: usize = 20;

fn main() {
    if let Err(e) = support::runtime().block_on(run()) {
        eprintln!("rss benchmark failed: {e:#}");
        std::process::exit(1);
    }
}

fn size(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn run() -> Result<()> {
    if std::env::var_os("KUBE_REMEDIATOR_BENCH_PLOT_ONLY").is_some() {
        let used = plot::draw(&svg_path())?;
        println!("{} drawn from {used:?}", svg_path().display());
        return Ok(());
    }
    // Built (on first use) before the control plane starts, not beside it.
    let (peer, versions) = if ours_only() {
        (std::path::PathBuf::from("peer-not-measured"), "not measured".to_string())
    } else {
        measure::locate_peer()?
    };
    // Production-like: kubelet Leases of 40 s (renewed every 10 s) and the default grace period
    // and tolerations. With the tests' fast settings, 1,000 kwok nodes on two cores miss
    // heartbeats while the pods are created, and the node lifecycle controller evicts pods
    // during the measurements.
    let mut options = ClusterOptions::production_like();
    if large() {
        eprintln!(
            "[rss] above {LARGE} pods: the control plane fitted to the machine (no kube-scheduler: \
             every pod is bound at creation; kwok with 32 requests in flight; soft Go heap \
             limits), and on the populated cluster kube-remediator (streamed and paged initial \
             lists) and the two peers only"
        );
        options.large = true;
    }
    let cluster = Cluster::start_with(&support::new_run_dir("bench"), options).await?;
    let result = scenario(&cluster, &peer, &versions).await;
    cluster.stop();
    result
}

/// Above this many pods (tier L) the control plane is fitted to the machine
/// (`ClusterOptions::large`), and only kube-remediator (streamed and paged initial lists) and
/// the two peers are measured on the populated cluster: the machine's memory and the run's
/// time.
const LARGE: usize = 100_000;

/// From this many pods (tier M) a process that fails to be measured (not ready within 600 s, or
/// exited) is reported as such, and the run goes on with the next one.
const KEEP_GOING_FROM: usize = 30_000;

fn large() -> bool {
    size("KUBE_REMEDIATOR_BENCH_PODS", 3000) > LARGE
}

/// `KUBE_REMEDIATOR_BENCH_POD=small`: pods of one plain container (about a fifth of the full
/// pod's JSON), for the tier whose full pods the control plane cannot hold on this machine.
fn small_pods() -> bool {
    std::env::var("KUBE_REMEDIATOR_BENCH_POD").is_ok_and(|v| v == "small")
}

/// `KUBE_REMEDIATOR_BENCH_POPULATE=etcd`: the pods written straight into etcd, copies of one pod
/// made through the API (see [`populate_through_etcd`]), instead of 150,000 creations through
/// the API server, which took this machine 77 minutes and kwok 25 more to report them Running.
fn through_etcd() -> bool {
    std::env::var("KUBE_REMEDIATOR_BENCH_POPULATE").is_ok_and(|v| v == "etcd")
}

/// `KUBE_REMEDIATOR_BENCH_NOT_READY=N`, with the population through etcd: about N of the pods,
/// spread evenly, left Ready=False (a partial outage's aftermath, reproducibly, where an
/// overloaded run made one by chance; see [`copy_pod`]).
fn not_ready_pods() -> Option<usize> {
    std::env::var("KUBE_REMEDIATOR_BENCH_NOT_READY").ok().and_then(|n| n.parse().ok())
}

/// `KUBE_REMEDIATOR_BENCH_ONLY=remediator`: kube-remediator alone, with its default lists.
fn ours_only() -> bool {
    std::env::var("KUBE_REMEDIATOR_BENCH_ONLY").is_ok_and(|v| v == "remediator")
}

/// `KUBE_REMEDIATOR_BENCH_ALSO=label=path,...`: other builds of kube-remediator (or scripts
/// that `exec` one), measured after its default on the populated cluster and shown by their
/// label: how a change of build (an allocator, say) weighs on the same cluster, in the same run.
fn other_builds() -> Vec<(String, std::path::PathBuf)> {
    let spec = std::env::var("KUBE_REMEDIATOR_BENCH_ALSO").unwrap_or_default();
    spec.split(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(label, path)| (label.trim().to_string(), std::path::PathBuf::from(path.trim())))
        .collect()
}

/// Where the plot goes.
fn svg_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/src/img/rss.svg")
}

/// One of the measured programs.
#[derive(Clone, Copy)]
enum Contender {
    /// kube-remediator with `--initial-lists` (None: its default, streaming from 1.34).
    Remediator(Option<&'static str>),
    /// kube-remediator, its default lists, with this many policies in scope (the benchmark's
    /// own and copies of it).
    Policies(usize),
    /// The Go peer in this `--mode`.
    Peer(&'static str),
    /// Another build of kube-remediator, the `n`th of `KUBE_REMEDIATOR_BENCH_ALSO`.
    Build(usize),
    /// kube-remediator with its default lists once more, after every other process.
    Again,
}

impl Contender {
    fn label(self) -> String {
        match self {
            Contender::Remediator(None) => "kube-remediator".into(),
            Contender::Remediator(Some(how)) => format!("kube-remediator, {how} lists"),
            Contender::Policies(n) => format!("kube-remediator, {n} policies"),
            Contender::Peer(mode) => format!("Go peer, {mode}"),
            Contender::Build(n) => format!("kube-remediator, {}", other_builds()[n].0),
            Contender::Again => "kube-remediator, streaming lists, again (last)".into(),
        }
    }

    fn slug(self) -> String {
        match self {
            Contender::Remediator(how) => format!("remediator-{}", how.unwrap_or("default")),
            Contender::Policies(n) => format!("remediator-{n}-policies"),
            Contender::Peer(mode) => format!("peer-{mode}"),
            Contender::Build(n) => format!("remediator-build-{n}"),
            Contender::Again => "remediator-again".into(),
        }
    }
}

/// One row of the table.
struct Row {
    contender: Contender,
    cluster: String,
    m: Measurement,
}

async fn scenario(cluster: &Cluster, peer: &Path, versions: &str) -> Result<()> {
    let pods = size("KUBE_REMEDIATOR_BENCH_PODS", 3000);
    let nodes = size("KUBE_REMEDIATOR_BENCH_NODES", 100);
    let client = cluster.client().await?;
    let env = TestEnv::new(client.clone(), "bench-rss").await?;
    measure::prepare(&client).await?;
    // The policy the Go peer implements (see tools/peer/main.go).
    env.create_policy(policy_spec()).await?;
    eprintln!("[rss] the Go peer: {versions}");

    let mut rows = Vec::new();
    let empty = [Contender::Remediator(None), Contender::Peer("naive"), Contender::Peer("tuned")];
    let measured = |c: &Contender| !ours_only() || matches!(c, Contender::Remediator(_));
    for contender in empty.into_iter().filter(measured) {
        let none = None::<std::future::Ready<Result<()>>>;
        rows.push(measure_one(cluster, &client, &env, peer, contender, "empty", none).await?);
    }

    let started = Instant::now();
    let names: Vec<String> = futures::stream::iter(0..nodes)
        .map(|i| {
            let env = &env;
            async move { env.add_node(&format!("n{i:04}")).await }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<_>>()?;
    let nodes_took = started.elapsed().as_secs_f64();
    eprintln!("[rss] {nodes} kwok nodes Ready in {nodes_took:.0}s");
    let owner: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "owner" } }))?;
    let owner = env.api::<ConfigMap>().create(&PostParams::default(), &owner).await?;
    let owner_uid = owner.metadata.uid.context("ConfigMap without uid")?;

    let started = Instant::now();
    let created = if through_etcd() {
        populate_through_etcd(cluster, &env, &names, &owner_uid, pods).await?
    } else {
        futures::stream::iter(0..pods)
            .map(|i| {
                let (env, node, owner_uid) = (&env, &names[i % names.len()], &owner_uid);
                async move { create_pod(env, i, &format!("app-{i:05}"), node, owner_uid, None).await }
            })
            .buffer_unordered(32)
            .fold(0usize, |n, r| async move {
                if let Err(e) = r {
                    eprintln!("[rss] a pod was not created: {e:#}");
                    return n;
                }
                if (n + 1) % 500 == 0 {
                    eprintln!("[rss] {} pods created", n + 1);
                }
                n + 1
            })
            .await
    };
    let pods_took = started.elapsed().as_secs_f64();
    let list = env.pods().list(&ListParams::default().limit(1)).await?;
    let one = list.items.first().context("no pod")?;
    let bytes = serde_json::to_vec(one)?.len();
    eprintln!(
        "[rss] {created} pods created in {pods_took:.0}s (one weighs {bytes} bytes of JSON with its \
         managedFields)"
    );
    // kwok reports them Running: their status grows to what a kubelet writes. At tier L kwok
    // is minutes behind the creations; no process is measured before it is done, as far as a
    // sample of 150 pods (read one by one: a list of all would load the API server) shows.
    let started = Instant::now();
    let step = (pods / 150).max(1);
    let sample: Vec<String> = (0..pods).step_by(step).map(|i| format!("app-{i:05}")).collect();
    loop {
        tokio::time::sleep(Duration::from_secs(20)).await;
        let left = futures::stream::iter(&sample)
            .map(|name| {
                let env = &env;
                async move {
                    let pod = env.pods().get_opt(name).await.ok().flatten();
                    let phase = pod.and_then(|p| p.status).and_then(|s| s.phase);
                    phase.as_deref() != Some("Running")
                }
            })
            .buffer_unordered(8)
            .filter(|pending| futures::future::ready(*pending))
            .count()
            .await;
        if left == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(1800) {
            eprintln!("[rss] WARNING: pods still not Running after 30 min; measuring anyway");
            break;
        }
        eprintln!(
            "[rss] {left} of {} sampled pods not Running yet ({:.0} s)",
            sample.len(),
            started.elapsed().as_secs_f64()
        );
    }
    let leases_steady = wait_leases_fresh(&client, &names).await?;
    let quiet = wait_quiet(&cluster.audit_log).await?;
    // What the API server gives a client that only reads, before and after the processes; at
    // tier L in protobuf only (what we and the peers ask for): a JSON read of every pod there
    // takes minutes of the API server's two cores and heap, near its limit.
    let probe = |when: &'static str| {
        let client = client.clone();
        async move {
            match measure::probe_pod_reads(&client, !large()).await {
                Ok(reads) => reads.into_iter().map(|r| (when, r)).collect(),
                Err(e) => {
                    eprintln!("[rss] the probe of the pods' reads failed: {e:#}");
                    Vec::new()
                }
            }
        }
    };
    let settling = match measure::settle(&client).await {
        Ok(times) => times,
        Err(e) => {
            eprintln!("[rss] settling failed: {e:#}");
            Vec::new()
        }
    };
    let mut probes: Vec<(&str, measure::ProbedRead)> = probe("before").await;
    let census = |when: &'static str| {
        let client = client.clone();
        async move {
            match measure::census(&client).await {
                Ok(c) => Some((when, c)),
                Err(e) => {
                    eprintln!("[rss] the census of the cluster failed: {e:#}");
                    None
                }
            }
        }
    };
    let mut censuses: Vec<(&str, measure::Census)> = census("before").await.into_iter().collect();
    let one = env.pods().get(&one.metadata.name.clone().unwrap_or_default()).await?;
    let bytes = serde_json::to_vec(&one)?.len();
    let populated = format!("{created} pods on {nodes} nodes");
    let mut contenders = if ours_only() {
        vec![Contender::Remediator(Some("streaming"))]
    } else if large() {
        // Both of our ways to the initial state (the API server, near its heap limit, has not
        // always served a streamed list of every pod), then the peers; the naive one last: it
        // holds every pod whole, and should the machine's memory not suffice for it, the others
        // are measured already.
        vec![
            Contender::Remediator(Some("streaming")),
            Contender::Remediator(Some("paged")),
            Contender::Peer("tuned"),
            Contender::Peer("naive"),
        ]
    } else {
        vec![
            Contender::Remediator(Some("streaming")),
            Contender::Remediator(Some("paged")),
            Contender::Policies(2),
            Contender::Policies(11),
            Contender::Peer("naive"),
            Contender::Peer("tuned"),
            // Ours again, last: whether the order of the runs (the cluster settling) moved
            // anyone's figures.
            Contender::Again,
        ]
    };
    contenders.splice(1..1, (0..other_builds().len()).map(Contender::Build));
    let churn_rate = size("KUBE_REMEDIATOR_BENCH_CHURN", CHURN_RATE);
    let mut failed = Vec::new();
    for contender in contenders {
        let extra = match contender {
            Contender::Policies(n) => n - 1,
            _ => 0,
        };
        for k in 0..extra {
            env.create_named_policy(&format!("{}-extra-{k}", env.name), policy_spec()).await?;
        }
        let churn =
            (churn_rate > 0).then(|| churn(&env, &names, &owner_uid, contender, churn_rate));
        match measure_one(cluster, &client, &env, peer, contender, &populated, churn).await {
            Ok(row) => rows.push(row),
            // From tier M up a process that does not get ready (or exits, as one that loses its
            // leader Lease on a loaded API server does) is a result, not the end of the run:
            // the others are still measured on the same cluster, populated for the best part of
            // an hour.
            Err(e) if pods >= KEEP_GOING_FROM => {
                eprintln!("[rss] {} on {populated}: {e:#}", contender.label());
                failed.push((contender, format!("{e:#}")));
            }
            Err(e) => return Err(e),
        }
        for k in 0..extra {
            env.policies().delete(&format!("{}-extra-{k}", env.name), &Default::default()).await?;
        }
        // The churn's pods are all gone (kwok finishes them behind the churn) before the next
        // process starts, so that none of it spills into the next measurement.
        let selector = format!("churn={}", contender.slug());
        if let Some(e) = support::wait_for(
            &format!("the pods {selector} gone"),
            Duration::from_secs(300),
            || {
                let (selector, env) = (&selector, &env);
                async move { Ok(env.list_pods(selector).await?.is_empty().then_some(())) }
            },
        )
        .await
        .err()
        {
            // At tier M kwok may not keep up: the next process is measured in the churn's wake.
            eprintln!("[rss] WARNING: {e:#}; the next process is measured while they go");
        }
    }

    if !ours_only() {
        probes.extend(probe("after").await);
    }
    censuses.extend(census("after").await);
    println!();
    println!(
        "Populated in {:.0} s ({nodes} nodes Ready in {nodes_took:.0} s, {created} pods created \
         in {pods_took:.0} s); a Running pod weighs {bytes} bytes of JSON. Go peer: {versions}.",
        nodes_took + pods_took
    );
    let settling: Vec<String> = settling.iter().map(|s| format!("{s:.1} s")).collect();
    println!(
        "Before the first process, every pod streamed in protobuf until the API server no longer \
         got faster: {}.",
        settling.join(", ")
    );
    if !leases_steady {
        println!();
        println!(
            "WARNING: kwok did not renew every sampled Lease within {LEASE_FRESH_S} s before the \
             processes were measured: the cluster was not steady (see the [rss] lines)."
        );
    }
    if !quiet {
        println!();
        println!(
            "WARNING: the API server still took more than {QUIET_WRITES_PER_S} pod writes a second \
             when the processes were measured: kwok was still reporting pods (see the [rss] lines)."
        );
    }
    if !probes.is_empty() {
        println!();
        println!(
            "Every pod read by a client that only reads (the API server's floor under every \
             process's ready time), before the processes were measured and after:"
        );
        println!();
        println!("| read | when | seconds | events before the closing bookmark | bytes |");
        println!("| --- | --- | --- | --- | --- |");
        for (when, (read, seconds, events, bytes)) in &probes {
            let events = if read.starts_with("LIST") { "".into() } else { events.to_string() };
            println!("| {read} | {when} | {seconds:.1} s | {events} | {bytes} |");
        }
    }
    if !censuses.is_empty() {
        println!();
        println!(
            "What the cluster held that kube-remediator keeps a record of, before the processes \
             were measured and after (every node and pod read):"
        );
        println!();
        println!(
            "| when | nodes not Ready | pods | Terminating | Failed by a shutdown | left not Ready \
             | Ready on a node not Ready | kept in all |"
        );
        println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
        for (when, c) in &censuses {
            println!(
                "| {when} | {} of {} | {} | {} | {} | {} | {} | {} |",
                c.nodes_not_ready,
                c.nodes,
                c.pods,
                c.terminating,
                c.failed_by_shutdown,
                c.left_not_ready,
                c.ready_on_node_not_ready,
                c.kept()
            );
        }
        for (when, c) in &censuses {
            if !c.not_ready.is_empty() {
                println!();
                println!(
                    "Pods neither Terminating nor Ready, {when}, by phase and Ready condition:"
                );
                for (what, n) in &c.not_ready {
                    println!("- {what}: {n}");
                }
            }
        }
    }
    let deleted = measure::pod_deletes(&cluster.audit_log, "churn-")?;
    if deleted > 0 {
        println!();
        println!(
            "WARNING: {deleted} pods (the churn's not counted) were deleted during the run \
             (evictions?): the cluster was not steady while it was measured."
        );
    }
    println!();
    println!(
        "| process | cluster | ready after | CPU to sync | steady RSS | peak RSS | CPU in the \
         next 15 s | WATCHes | LISTs | writes (of them Lease) | pod writes by others while it \
         synced |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for Row { contender, cluster, m } in &rows {
        println!(
            "| {} | {cluster} | {:.1} s | {:.2} s | {:.1} MiB | {:.1} MiB | {:.2} s | {} | {} | {} ({}) | {} |",
            contender.label(),
            m.ready_s,
            m.cpu_sync_s,
            m.rss as f64 / MIB,
            m.peak as f64 / MIB,
            m.cpu_steady_s,
            m.requests.total_watches(),
            m.requests.total_lists(),
            m.requests.writes,
            m.requests.lease_writes,
            m.pod_writes_syncing,
        );
    }
    for (contender, error) in &failed {
        println!("| {} | {populated} | not measured: {error} | | | | | | | | |", contender.label());
    }
    let steady = |label: &str| {
        rows.iter()
            .find(|r| r.cluster == populated && r.contender.label() == label)
            .map(|r| r.m.rss as f64)
    };
    if let Some(ours) = steady("kube-remediator, streaming lists") {
        for peer in ["Go peer, naive", "Go peer, tuned"] {
            if let Some(theirs) = steady(peer) {
                println!();
                println!(
                    "Steady RSS at {populated}: {peer} / kube-remediator = {:.1}x",
                    theirs / ours
                );
            }
        }
    }
    let churned: Vec<_> = rows.iter().filter_map(|r| r.m.churn.as_ref().map(|c| (r, c))).collect();
    if let Some((_, first)) = churned.first() {
        println!();
        println!(
            "Under churn ({churn_rate} pods created per second for {:.0} s, each deleted 5 s later; \
             pod events = successful pod writes in the audit log meanwhile):",
            first.seconds
        );
        println!();
        println!(
            "| process | pod events | CPU | CPU per 1,000 pod events | RSS after | peak RSS |"
        );
        println!("| --- | --- | --- | --- | --- | --- |");
        for (Row { contender, .. }, c) in &churned {
            println!(
                "| {} | {} | {:.2} s | {:.3} s | {:.1} MiB | {:.1} MiB |",
                contender.label(),
                c.pod_events,
                c.cpu_s,
                c.cpu_per_1000_events(),
                c.rss as f64 / MIB,
                c.peak as f64 / MIB,
            );
        }
    }
    let with = |n: usize| {
        rows.iter().find(|r| match (n, r.contender) {
            (1, Contender::Remediator(Some("streaming"))) => true,
            (n, Contender::Policies(k)) => k == n,
            _ => false,
        })
    };
    if let (Some(one), Some(more)) = (with(1), with(11)) {
        let churn_cpu = |r: &Row| r.m.churn.as_ref().map_or(0.0, |c| c.cpu_per_1000_events());
        println!();
        println!(
            "One more policy costs (1 to 11 policies, per policy): {:.2} MiB steady RSS, {:.3} s CPU \
             to sync, {:.4} s CPU per 1,000 pod events",
            (more.m.rss as f64 - one.m.rss as f64) / MIB / 10.0,
            (more.m.cpu_sync_s - one.m.cpu_sync_s) / 10.0,
            (churn_cpu(more) - churn_cpu(one)) / 10.0,
        );
    }
    if ours_only() {
        println!();
        println!("kube-remediator alone (KUBE_REMEDIATOR_BENCH_ONLY): no result file written.");
        return Ok(());
    }
    let results: Vec<plot::ProcessResult> = rows
        .iter()
        .filter(|r| {
            !matches!(r.contender, Contender::Policies(_) | Contender::Build(_) | Contender::Again)
        })
        .map(|Row { contender, cluster, m }| plot::ProcessResult {
            process: contender.label(),
            cluster: if cluster == "empty" { "empty" } else { "populated" }.into(),
            steady_rss_mib: m.rss as f64 / MIB,
            peak_rss_mib: m.peak as f64 / MIB,
            cpu_sync_s: m.cpu_sync_s,
            ready_s: m.ready_s,
            cpu_next_15s: m.cpu_steady_s,
        })
        .collect();
    let file = plot::write_results(nodes, created, bytes, &results)?;
    let svg = svg_path();
    let used = plot::draw(&svg)?;
    println!();
    println!("Results written to {}; {} drawn from {used:?}.", file.display(), svg.display());
    Ok(())
}

/// Starts `contender` as a service account of its own, measures it ([`measure::measure`]) and
/// stops it; logs what it requested, per resource.
async fn measure_one<F: std::future::Future<Output = Result<()>>>(
    cluster: &Cluster,
    client: &kube::Client,
    env: &TestEnv,
    peer: &Path,
    contender: Contender,
    what: &str,
    churn: Option<F>,
) -> Result<Row> {
    let phase = if what == "empty" { "empty" } else { "populated" };
    let name = format!("{}-{phase}", contender.slug());
    let (kubeconfig, user) = measure::identity(client, cluster, &name).await?;
    let addr = free_addr()?;
    let command = match contender {
        Contender::Remediator(_)
        | Contender::Policies(_)
        | Contender::Build(_)
        | Contender::Again => {
            let (how, binary) = match contender {
                Contender::Remediator(how) => (how, support::operator::binary()),
                Contender::Again => (Some("streaming"), support::operator::binary()),
                Contender::Build(n) => (None, other_builds()[n].1.clone()),
                _ => (None, support::operator::binary()),
            };
            let mut c = Command::new(binary);
            c.args(["run", "--policy-selector"])
                .arg(format!("{TEST_LABEL}={}", env.name))
                .args(["--instance", &format!("bench-{name}")])
                .args(["--leader-election-namespace", MEASURED_NAMESPACE])
                .args(["--leader-election-lease", &name])
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--metrics-addr", &addr.to_string()]);
            if let Some(how) = how {
                c.arg(format!("--initial-lists={how}"));
            }
            c
        }
        Contender::Peer(mode) => {
            let mut c = Command::new(peer);
            c.args(["--mode", mode])
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--probe-addr", &addr.to_string()])
                .args(["--metrics-addr", &free_addr()?.to_string()])
                .args(["--leader-election-namespace", MEASURED_NAMESPACE])
                .args(["--leader-election-lease", &name]);
            c
        }
    };
    let log = cluster.dir.join(format!("measured-{name}.log"));
    let m = measure::measure(cluster, command, addr, &user, &log, SETTLE, churn).await?;
    eprintln!(
        "[rss] {} on {what}: ready in {:.1}s ({:.2} s CPU), RSS {:.1} MiB, peak {:.1} MiB; \
         WATCH {:?}, LIST {:?}, {} GETs, {} writes ({} to Leases)",
        contender.label(),
        m.ready_s,
        m.cpu_sync_s,
        m.rss as f64 / MIB,
        m.peak as f64 / MIB,
        m.requests.watches,
        m.requests.lists,
        m.requests.gets,
        m.requests.writes,
        m.requests.lease_writes,
    );
    eprintln!(
        "[rss] {} on {what}: of the RSS {:.1} MiB anonymous (heap, stacks), {:.1} MiB pages of \
         files (code, libraries){}",
        contender.label(),
        m.anon as f64 / MIB,
        m.file as f64 / MIB,
        m.kept_pods.map(|n| format!("; {n} pod records kept")).unwrap_or_default(),
    );
    if let Some(pauses) = m.leader_pauses.filter(|n| *n > 0) {
        eprintln!(
            "[rss] {}: its leadership paused {pauses} time(s) (renewals of the Lease not stored \
             within the deadline), and resumed",
            contender.label()
        );
    }
    if let Some(c) = &m.churn {
        eprintln!(
            "[rss] {} under churn: {} pod events in {:.0} s, {:.2} s CPU ({:.3} s per 1,000 \
             events), RSS {:.1} MiB, peak {:.1} MiB",
            contender.label(),
            c.pod_events,
            c.seconds,
            c.cpu_s,
            c.cpu_per_1000_events(),
            c.rss as f64 / MIB,
            c.peak as f64 / MIB,
        );
    }
    Ok(Row { contender, cluster: what.to_string(), m })
}

/// The cluster is quiet when the API server takes at most this many pod writes a second.
const QUIET_WRITES_PER_S: usize = 2;

/// Waits until the API server takes at most [`QUIET_WRITES_PER_S`] pod writes a second over 20 s
/// (at most 15 minutes), as its audit log shows: kwok reports the last pods Running and Ready
/// well after a sample of them is, and every process measured before it is done waits for its
/// initial state behind kwok's writes. False if the cluster did not get quiet.
async fn wait_quiet(audit_log: &Path) -> Result<bool> {
    const WINDOW: Duration = Duration::from_secs(20);
    let (started, mut tail) = (Instant::now(), measure::AuditTail::new(audit_log)?);
    loop {
        tokio::time::sleep(WINDOW).await;
        let writes = tail.pod_writes()?;
        if writes <= QUIET_WRITES_PER_S * WINDOW.as_secs() as usize {
            eprintln!("[rss] the cluster is quiet: {writes} pod writes in the last 20 s");
            return Ok(true);
        }
        if started.elapsed() > Duration::from_secs(900) {
            eprintln!("[rss] WARNING: {writes} pod writes in the last 20 s after 15 minutes");
            return Ok(false);
        }
        eprintln!(
            "[rss] {writes} pod writes in the last 20 s ({:.0} s); waiting for a quiet cluster",
            started.elapsed().as_secs_f64()
        );
    }
}

/// A Lease renewed this long ago or less is fresh: kubelets renew every 10 s, and
/// kube-remediator suspends its evidence when most renewals are overdue by 15 s (a drought).
const LEASE_FRESH_S: i64 = 15;

/// Waits until kwok renews the nodes' Leases in time, as far as a sample of 150 Leases read one
/// by one shows three times in a row, 10 s apart (at most 15 minutes). Until then the cluster
/// is not steady: a process measured on it sees a drought (most renewals late at once), or
/// nodes dying. Returns whether it became steady.
async fn wait_leases_fresh(client: &kube::Client, names: &[String]) -> Result<bool> {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases = kube::Api::<Lease>::namespaced(client.clone(), "kube-node-lease");
    let step = (names.len() / 150).max(1);
    let sample: Vec<&String> = names.iter().step_by(step).collect();
    let started = Instant::now();
    let mut in_a_row = 0;
    while in_a_row < 3 {
        let now = jiff::Timestamp::now();
        let ages: Vec<i64> = futures::stream::iter(&sample)
            .map(|name| {
                let leases = &leases;
                async move {
                    let lease = leases.get_opt(name).await.ok().flatten();
                    let renewed = lease.and_then(|l| l.spec).and_then(|s| s.renew_time);
                    renewed.map_or(i64::MAX, |t| now.duration_since(t.0).as_secs())
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        let late = ages.iter().filter(|a| **a > LEASE_FRESH_S).count();
        let oldest = ages.iter().copied().max().unwrap_or(0);
        in_a_row = if late == 0 { in_a_row + 1 } else { 0 };
        eprintln!(
            "[rss] Leases: {late} of {} sampled renewed more than {LEASE_FRESH_S} s ago (the \
             oldest {oldest} s; {:.0} s)",
            sample.len(),
            started.elapsed().as_secs_f64()
        );
        if in_a_row < 3 && started.elapsed() > Duration::from_secs(900) {
            eprintln!("[rss] WARNING: Leases still renewed late after 15 min; measuring anyway");
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    Ok(true)
}

/// The policy every contender enforces (see tools/peer/main.go).
fn policy_spec() -> serde_json::Value {
    json!({
        "mode": "Enforce",
        "deadNode": { "notReadyFor": "40s", "leaseStaleFor": "40s", "requireFencingFor": ["None"] },
        "stuckTerminating": { "delayAfterGrace": "30s" },
    })
}

/// For [`CHURN`]: `rate` pods a second created on the nodes in turn (as the populated cluster's
/// pods, labelled `churn=<contender>`), each deleted 5 s after it was created (kwok then
/// finishes it).
async fn churn(
    env: &TestEnv,
    nodes: &[String],
    owner_uid: &str,
    contender: Contender,
    rate: usize,
) -> Result<()> {
    let slug = contender.slug();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
    let keep = 5 * rate;
    let ticks = CHURN.as_secs() as usize * rate;
    let requests = futures::stream::FuturesUnordered::new();
    for i in 0..ticks {
        tick.tick().await;
        let name = format!("churn-{slug}-{i:05}");
        let (node, slug) = (&nodes[i % nodes.len()], &slug);
        requests.push(
            async move {
                create_pod(env, i, &name, node, owner_uid, Some(slug)).await?;
                tokio::time::sleep(Duration::from_secs(keep as u64 / rate as u64)).await;
                env.pods().delete(&name, &Default::default()).await?;
                anyhow::Ok(())
            }
            .boxed(),
        );
    }
    let failed = requests.filter(|r| futures::future::ready(r.is_err())).count().await;
    if failed > 0 {
        eprintln!("[rss] {failed} churn pods failed to be created or deleted");
    }
    Ok(())
}

/// Populates the cluster through etcd: the first pod is created through the API as every pod is
/// otherwise (admission's defaults, two field managers) and reported Running by kwok; the others
/// are copies of what the API server then returns, each with its own name, uid, app, image, node
/// and pod IP, written in JSON under the API server's keys (`/registry/pods/<namespace>/<name>`,
/// which its storage decodes as it decodes its own protobuf), up to 100 to an etcd transaction. The API
/// server's watch cache receives them from etcd's watch as it receives its own writes; kwok
/// leaves them alone (they have their pod IP, its sign that a pod is Running). Nothing measured
/// runs meanwhile: the processes read the same objects as after creations through the API.
/// Returns how many pods the API server lists.
async fn populate_through_etcd(
    cluster: &Cluster,
    env: &TestEnv,
    nodes: &[String],
    owner_uid: &str,
    pods: usize,
) -> Result<usize> {
    use base64::Engine as _;
    use http_body_util::BodyExt as _;
    let first = "app-00000";
    create_pod(env, 0, first, &nodes[0], owner_uid, None).await?;
    // Read as the API server wrote it, every field kept (a typed Pod drops those it lacks).
    let path = format!("/api/v1/namespaces/{}/pods/{first}", env.namespace);
    let template = support::env::wait_for(
        "kwok to report the first pod Running",
        Duration::from_secs(300),
        || async {
            let request = http::Request::get(path.as_str()).body(Vec::new())?;
            let pod: serde_json::Value =
                serde_json::from_str(&env.client.request_text(request).await?)?;
            Ok(pod.pointer("/status/podIP").is_some_and(|ip| ip.is_string()).then_some(pod))
        },
    )
    .await?;
    let template_app = template
        .pointer("/metadata/labels/app")
        .and_then(|a| a.as_str())
        .context("the first pod has no app label")?
        .to_string();
    let not_ready = not_ready_pods().map(|n| n.min(pods));
    let copy = |i: usize| -> Result<(String, Vec<u8>)> {
        let node = &nodes[i % nodes.len()];
        let left_not_ready = not_ready.is_some_and(|n| i * n / pods != (i - 1) * n / pods);
        let name = format!("app-{i:05}");
        let pod = copy_pod(&template, &template_app, i, &name, node, left_not_ready)?;
        Ok((format!("/registry/pods/{}/{name}", env.namespace), serde_json::to_vec(&pod)?))
    };
    let http = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let txn_url = format!("{}/v3/kv/txn", cluster.etcd_url);
    let b64 = base64::engine::general_purpose::STANDARD;
    // etcd takes at most 128 operations and 1.5 MiB a request (its defaults); base64 adds a third.
    let per_txn = (700_000 / serde_json::to_vec(&template)?.len()).clamp(1, 100);
    let batches = (1..pods).step_by(per_txn).map(|start| start..(start + per_txn).min(pods));
    let started = Instant::now();
    let written = futures::stream::iter(batches)
        .map(|batch| {
            let (http, txn_url, copy, b64) = (&http, &txn_url, &copy, &b64);
            async move {
                let mut puts = Vec::with_capacity(batch.len());
                for i in batch {
                    let (key, value) = copy(i)?;
                    puts.push(json!({ "requestPut": { "key": b64.encode(key), "value": b64.encode(value) } }));
                }
                let count = puts.len();
                let body = serde_json::to_vec(&json!({ "success": puts }))?;
                let request = http::Request::post(txn_url.as_str())
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
                let response = http.request(request).await?;
                let status = response.status();
                let answer = response.into_body().collect().await?.to_bytes();
                if !status.is_success() {
                    anyhow::bail!("etcd refused a transaction: {status} {}", String::from_utf8_lossy(&answer));
                }
                Ok(count)
            }
        })
        .buffer_unordered(4)
        .try_fold(0usize, |n, k| async move {
            let n = n + k;
            if n / 10_000 != (n - k) / 10_000 {
                eprintln!("[rss] {} pods written to etcd ({:.0} s)", n + 1, started.elapsed().as_secs_f64());
            }
            Ok(n)
        })
        .await?;
    // The API server lists from its watch cache once that has caught up with etcd.
    let listed = loop {
        let list = env.pods().list(&ListParams::default().limit(1)).await?;
        let listed = list.items.len() + list.metadata.remaining_item_count.unwrap_or(0) as usize;
        if listed > written || started.elapsed() > Duration::from_secs(900) {
            break listed;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    eprintln!(
        "[rss] {written} copies of {first} written to etcd; the API server lists {listed} pods ({:.0} s)",
        started.elapsed().as_secs_f64()
    );
    Ok(listed)
}

/// Copy `i` of `template` (the first pod, of the app `template_app`, as the API server returns
/// it), named `name`: its own uid, app, image, node and pod IP; `left_not_ready`: its Ready condition
/// False with no reason, its containers still ready, what the node controller leaves on a pod
/// whose node stopped renewing its Lease and came back (it sets that condition alone), and what
/// the stale-readiness rule keeps a record of.
fn copy_pod(
    template: &serde_json::Value,
    template_app: &str,
    i: usize,
    name: &str,
    node: &str,
    left_not_ready: bool,
) -> Result<serde_json::Value> {
    let mut pod = template.clone();
    let app = format!("shop-{}", i % 30);
    let meta = pod["metadata"].as_object_mut().context("no metadata")?;
    meta.remove("resourceVersion");
    meta.insert("name".into(), json!(name));
    meta.insert("uid".into(), json!(format!("b3e1c0de-0000-4000-8000-{i:012x}")));
    pod["metadata"]["labels"]["app"] = json!(app);
    pod["spec"]["nodeName"] = json!(node);
    for list in ["/spec/containers", "/status/containerStatuses"] {
        for c in pod.pointer_mut(list).and_then(|l| l.as_array_mut()).into_iter().flatten() {
            if let Some(image) = c["image"].as_str() {
                c["image"] =
                    json!(image.replace(&format!("/{template_app}/"), &format!("/{app}/")));
            }
        }
    }
    let ip = format!("10.{}.{}.{}", 64 + (i >> 16), (i >> 8) & 255, i & 255);
    pod["status"]["podIP"] = json!(ip);
    pod["status"]["podIPs"] = json!([{ "ip": ip }]);
    if left_not_ready {
        let conditions = pod.pointer_mut("/status/conditions").and_then(|c| c.as_array_mut());
        for c in conditions.into_iter().flatten().filter(|c| c["type"] == "Ready") {
            c["status"] = json!("False");
        }
    }
    Ok(pod)
}

/// A pod as real workloads have them, bound to `node`, then labelled by a second field manager
/// (a churn pod also `churn=<churn>`).
async fn create_pod(
    env: &TestEnv,
    i: usize,
    name: &str,
    node: &str,
    owner_uid: &str,
    churn: Option<&str>,
) -> Result<()> {
    let app = format!("shop-{}", i % 30);
    let small = small_pods();
    let env_vars: Vec<_> = (0..12)
        .map(|k| json!({ "name": format!("SETTING_{k}"), "value": format!("value-{k}-for-{app}-in-production") }))
        .collect();
    let container = |n: &str, port: i32| {
        json!({
            "name": n,
            "image": format!("registry.example.com/{app}/{n}:v1.2.3"),
            "command": ["/bin/server"],
            "args": ["--listen", format!(":{port}"), "--log-level=info", "--config=/etc/app/config.yaml"],
            "env": env_vars,
            "envFrom": [{ "configMapRef": { "name": format!("{app}-config") } }],
            "ports": [{ "name": "http", "containerPort": port, "protocol": "TCP" }],
            "resources": {
                "requests": { "cpu": "100m", "memory": "128Mi" },
                "limits": { "cpu": "500m", "memory": "512Mi" },
            },
            "livenessProbe": { "httpGet": { "path": "/healthz", "port": port }, "periodSeconds": 10 },
            "readinessProbe": { "httpGet": { "path": "/readyz", "port": port }, "periodSeconds": 5 },
            "volumeMounts": [
                { "name": "config", "mountPath": "/etc/app" },
                { "name": "secrets", "mountPath": "/etc/secrets", "readOnly": true },
                { "name": "cache", "mountPath": "/var/cache/app" },
                { "name": "token", "mountPath": "/var/run/secrets/tokens", "readOnly": true },
            ],
        })
    };
    let mut volumes = vec![
        json!({ "name": "config", "configMap": { "name": format!("{app}-config") } }),
        json!({ "name": "secrets", "secret": { "secretName": format!("{app}-secrets") } }),
        json!({ "name": "cache", "emptyDir": { "sizeLimit": "1Gi" } }),
        json!({ "name": "token", "projected": { "sources": [{ "serviceAccountToken": {
            "path": "token", "expirationSeconds": 3600, "audience": "vault" } }] } }),
        json!({ "name": "scratch", "emptyDir": {} }),
    ];
    let containers = if small {
        // One container with its image, port, resources and readiness probe, and no volume:
        // about a fifth of the full pod, most of it what every pod has (metadata, status,
        // field managers).
        let mut app_container = container("app", 8080);
        if let Some(fields) = app_container.as_object_mut() {
            for field in ["command", "args", "env", "envFrom", "livenessProbe", "volumeMounts"] {
                fields.remove(field);
            }
        }
        volumes.clear();
        vec![app_container]
    } else {
        vec![container("app", 8080), container("sidecar", 9090), container("metrics", 9100)]
    };
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": { "app": app, "tier": "backend", "version": "v1", "pod-template-hash": "7b79559df9" },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
                "example.com/team": "payments",
            },
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": containers,
            "volumes": volumes,
            "tolerations": [
                { "key": "dedicated", "operator": "Equal", "value": "backend", "effect": "NoSchedule" },
            ],
        },
    }))?;
    let mut pod = pod;
    if let Some(churn) = churn {
        pod.metadata.labels.get_or_insert_default().insert("churn".into(), churn.into());
    }
    let pods = env.pods();
    let create = PostParams { field_manager: Some("bench-deployer".into()), ..Default::default() };
    pods.create(&create, &pod).await?;
    let label = json!({ "metadata": { "labels": { "example.com/audited": "true" } } });
    let patch = PatchParams { field_manager: Some("bench-labeler".into()), ..Default::default() };
    pods.patch(name, &patch, &Patch::Merge(&label)).await?;
    Ok(())
}
