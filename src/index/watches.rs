//! One watch per kind, feeding the compact [`ClusterState`]. A change that can alter a decision
//! bumps the trigger, which makes the policy controller re-plan every policy.

use std::fmt::Debug;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use super::state::{Change, ClusterState, WatchedKind};
use crate::metrics::Metrics;

pub type SharedState = Arc<RwLock<ClusterState>>;

/// What every watch feeds.
#[derive(Clone)]
pub struct WatchCtx {
    pub state: SharedState,
    /// Bumped when a change can alter a decision.
    pub trigger: watch::Sender<u64>,
    pub metrics: Arc<Metrics>,
    /// How each watch gets its initial state.
    pub lists: InitialLists,
    /// Woken when a node left Ready and its pods are to be listed.
    pub node_lists: Arc<tokio::sync::Notify>,
    /// Woken when a pod change deferred its re-plan ([`Change::At`]).
    pub deferred: Arc<tokio::sync::Notify>,
}

/// How a watch gets the current state before following changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum InitialLists {
    /// Streamed by the watch itself (`sendInitialEvents`, the API server's WatchList feature):
    /// objects arrive one at a time, so none of a list's pages is ever held whole.
    Streaming,
    /// Listed in pages of 100 objects, then watched.
    Paged,
}

/// Objects per page of a paged list: a page is read and decoded whole, and a realistic pod
/// weighs 7 to 17 KB of JSON. 500 (the client default) held about 8 MB at once and raised the
/// peak resident memory by 30 MiB at 3,000 pods; 100 by 11 MiB.
pub const PAGE_SIZE: u32 = 100;

impl InitialLists {
    /// Streaming where the API server streams by default: Kubernetes 1.32, and 1.34 onwards
    /// (the WatchList feature was off by default in 1.33 and before 1.32); paged elsewhere and
    /// where the version is unknown. `minor` is that of a 1.x server.
    pub fn for_server(minor: Option<u32>) -> InitialLists {
        match minor {
            Some(32) => InitialLists::Streaming,
            Some(m) if m >= 34 => InitialLists::Streaming,
            _ => InitialLists::Paged,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// How long the API server keeps one watch request open (`timeoutSeconds`) before the watcher
/// opens the next, resuming from the last resourceVersion (no list). The watcher also gives up
/// on a watch silent for this long plus 5 s, even when the server's end never arrives (a
/// connection blackholed by the network): so a hung watch is noticed and replaced within
/// 60 s, where the default (290 s) would leave node deaths unseen for five minutes. The cost
/// is one watch request per kind a minute, about a dozen a minute in all.
pub const WATCH_TIMEOUT_SECS: u32 = 55;

/// The longest bound a streamed list is given ([`next_bound`]): client-go's watches ask for 5
/// to 10 minutes.
pub const LONGEST_WATCH_TIMEOUT_SECS: u32 = 600;

/// The watcher configuration every watch of the operator starts with.
pub fn watch_config(lists: InitialLists) -> watcher::Config {
    bounded_config(lists, WATCH_TIMEOUT_SECS)
}

fn bounded_config(lists: InitialLists, timeout_secs: u32) -> watcher::Config {
    let config = watcher::Config::default().timeout(timeout_secs).page_size(PAGE_SIZE);
    match lists {
        InitialLists::Streaming => config.streaming_lists(),
        InitialLists::Paged => config,
    }
}

/// The bound a kind's watch starts with. The pods' streamed list starts under the longest
/// bound: it is the one list that can outlast a short bound (150,000 pods streamed alone in 18
/// to 80 s on this machine's API server, longer beside other readers), and a list cut by its
/// bound starts over from its first pod, which cost the eleventh tier L run 55 + 110 + 220 s of
/// lists cut short before the fourth ended. Every other kind starts under
/// [`WATCH_TIMEOUT_SECS`]: Nodes and Leases are the evidence of a node's death, and a silent
/// view of them is noticed within a minute. The pods' watch has its own HTTP/1.1 connection,
/// given up after 90 s without a byte (`cli::connect::PODS_WATCH_SILENCE`; a watch gets a
/// bookmark about every minute): what a silent one misses meanwhile is pods to act on, never a
/// reason to act (every write's last look reads its pod and node afresh). Paged lists are not
/// one watch request: no bound cuts them.
pub fn first_bound(kind: WatchedKind, lists: InitialLists) -> u32 {
    match (kind, lists) {
        (WatchedKind::Pod, InitialLists::Streaming) => LONGEST_WATCH_TIMEOUT_SECS,
        _ => WATCH_TIMEOUT_SECS,
    }
}

/// The bound a watch asks for after its streamed list was cut by `bound`: a streamed list is
/// one watch request, which the API server ends at its bound even before the list's end, and
/// the next one streams the whole list again. At 150,000 pods the list takes longer than 55 s,
/// so the pod watch never synced (its list started over every minute); doubled at each cut, up
/// to [`LONGEST_WATCH_TIMEOUT_SECS`]. `None`: already there.
pub fn next_bound(bound: u32) -> Option<u32> {
    (bound < LONGEST_WATCH_TIMEOUT_SECS).then(|| (bound * 2).min(LONGEST_WATCH_TIMEOUT_SECS))
}

/// Starts one kind's watch: `apply` and `delete` say what its objects do to the state.
///
/// A watch whose streamed list is cut by its bound starts again with a longer one
/// ([`next_bound`]) and keeps it afterwards, a watch request then lasting that long: the
/// watcher cannot resume a watch from a resourceVersion under a new bound. It starts at
/// [`first_bound`] and is only longer where the list needs it; a dead connection is still
/// noticed within 15 s on HTTP/2 (its pings, `cli::connect`), the pods' on HTTP/1.1 after 90 s
/// of silence.
pub fn spawn<K>(
    api: Api<K>,
    kind: WatchedKind,
    ctx: WatchCtx,
    apply: fn(&mut ClusterState, &K, Timestamp) -> Change,
    delete: fn(&mut ClusterState, &K, Timestamp) -> Change,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    tokio::spawn(async move {
        let mut bound = first_bound(kind, ctx.lists);
        loop {
            let stream = watcher::watcher(api.clone(), bounded_config(ctx.lists, bound));
            let Some(next) =
                consume(stream.default_backoff(), kind, &ctx, apply, delete, bound).await
            else {
                return;
            };
            warn!(
                kind = kind.as_str(),
                bound_secs = bound,
                next_secs = next,
                "the streamed list was cut by the watch's bound before its end; streaming it \
                 again under a longer bound"
            );
            bound = next;
        }
    })
}

/// Feeds the state from one watcher until its stream ends (never, but for a shutdown: `None`)
/// or, with streamed lists, until a list is cut by `bound` before its end while a longer bound
/// is left: the watcher would start it again, which the caller does instead under the longer
/// bound returned.
async fn consume<K: Resource>(
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    kind: WatchedKind,
    ctx: &WatchCtx,
    apply: fn(&mut ClusterState, &K, Timestamp) -> Change,
    delete: fn(&mut ClusterState, &K, Timestamp) -> Change,
    bound: u32,
) -> Option<u32> {
    let mut stream = std::pin::pin!(stream);
    // When the list in progress started: none between lists, nor after a watch request failed
    // to start (the time the watcher then waits is not the list's).
    let mut listing_since: Option<tokio::time::Instant> = None;
    while let Some(event) = stream.next().await {
        match &event {
            Ok(Event::Init) => {
                let streamed = ctx.lists == InitialLists::Streaming;
                if let Some(since) = listing_since.filter(|_| streamed)
                    && cut_by_bound(since.elapsed(), bound)
                    && let Some(next) = next_bound(bound)
                {
                    return Some(next);
                }
                listing_since = Some(tokio::time::Instant::now());
            }
            Ok(Event::InitDone) | Err(watcher::Error::WatchStartFailed(_)) => listing_since = None,
            _ => {}
        }
        let now = crate::clock::now();
        let (change, synced, nodes, pods) = {
            let mut state = ctx.state.write().unwrap_or_else(|e| e.into_inner());
            let change = match &event {
                Ok(Event::Init) => {
                    debug!(kind = kind.as_str(), "listing");
                    state.list_started(kind);
                    Change::None
                }
                Ok(Event::InitApply(obj)) | Ok(Event::Apply(obj)) => apply(&mut state, obj, now),
                Ok(Event::Delete(obj)) => delete(&mut state, obj, now),
                Ok(Event::InitDone) => {
                    info!(kind = kind.as_str(), "watch synced");
                    state.list_done(kind, now)
                }
                Err(e) => {
                    warn!(kind = kind.as_str(), error = %e, "watch failed; retrying");
                    state.watch_failed(kind)
                }
            };
            if state.wants_node_lists() {
                ctx.node_lists.notify_one();
            }
            (change, state.synced(), state.node_count(), state.terminating_pod_count())
        };
        ctx.metrics.caches_synced.set(i64::from(synced));
        ctx.metrics.cached_nodes.set(nodes as i64);
        ctx.metrics.cached_terminating_pods.set(pods as i64);
        match change {
            Change::Relevant => {
                if let Ok(Event::Apply(obj) | Event::Delete(obj)) = &event {
                    debug!(kind = kind.as_str(), object = %obj.name_any(), "re-plan asked");
                }
                ctx.trigger.send_modify(|n| *n = n.wrapping_add(1));
            }
            Change::At(_) => ctx.deferred.notify_one(),
            Change::None => {}
        }
    }
    None
}

/// Whether a list that started `elapsed` ago and started over was cut by the watch's `bound`
/// (the API server ends a watch request at its bound, to the second) rather than by a failure.
fn cut_by_bound(elapsed: std::time::Duration, bound: u32) -> bool {
    elapsed + std::time::Duration::from_secs(1) >= std::time::Duration::from_secs(bound.into())
}

/// Bumps the trigger when the earliest deferred pod change is due ([`Change::At`]): a pod
/// still within its grace period on a Ready node re-plans nothing until then, and nothing at
/// all once gone.
pub async fn trigger_deferred(ctx: WatchCtx) {
    loop {
        let next = ctx.state.read().unwrap_or_else(|e| e.into_inner()).next_deferred();
        let Some(at) = next else {
            ctx.deferred.notified().await;
            continue;
        };
        let wait = at.duration_since(crate::clock::now()).max(jiff::SignedDuration::ZERO);
        let wait = std::time::Duration::try_from(wait).unwrap_or_default();
        tokio::select! {
            () = tokio::time::sleep(wait) => {
                let now = crate::clock::now();
                let due = ctx.state.write().unwrap_or_else(|e| e.into_inner()).take_due_deferred(now);
                if due {
                    debug!(%at, "deferred pod changes due: re-plan");
                    ctx.trigger.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
            () = ctx.deferred.notified() => {}
        }
    }
}

/// The least time between two reconciles of every policy that watch events ask for. Under pod
/// churn every pod that starts or ends Terminating asks for one, and each decides over every
/// node: without a gap their CPU grew with the cluster (1.2 s per 1,000 pod events at 1,000
/// nodes). Deadlines (a pod due, a node dying) do not wait for it: each policy requeues itself
/// at its next deadline.
pub const TRIGGER_GAP: std::time::Duration = std::time::Duration::from_millis(100);

/// A stream that yields once per burst of trigger bumps: at once after a quiet spell, then at
/// most once per [`TRIGGER_GAP`] (bumps meanwhile, and during a reconcile, coalesce).
pub fn trigger_stream(rx: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(
        (rx, None),
        |(mut rx, last): (_, Option<tokio::time::Instant>)| async move {
            rx.changed().await.ok()?;
            if let Some(last) = last {
                tokio::time::sleep_until(last + TRIGGER_GAP).await;
            }
            rx.borrow_and_update();
            Some(((), (rx, Some(tokio::time::Instant::now()))))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paged_lists_help_states_the_page_size() {
        // `run --help` says "pages of 100 objects" (the doc of `InitialLists::Paged`).
        assert_eq!(PAGE_SIZE, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn triggers_yield_at_once_then_at_most_once_per_gap() {
        let (tx, rx) = watch::channel(0u64);
        let mut triggers = std::pin::pin!(trigger_stream(rx));
        let started = tokio::time::Instant::now();
        tx.send_modify(|n| *n += 1);
        triggers.next().await.expect("a trigger");
        assert_eq!(started.elapsed(), std::time::Duration::ZERO, "the first waits for nothing");
        // A burst right after: one trigger, TRIGGER_GAP after the first.
        for _ in 0..50 {
            tx.send_modify(|n| *n += 1);
        }
        triggers.next().await.expect("a trigger");
        assert_eq!(started.elapsed(), TRIGGER_GAP);
        // After a quiet spell longer than the gap: at once again.
        tokio::time::sleep(3 * TRIGGER_GAP).await;
        let quiet = tokio::time::Instant::now();
        tx.send_modify(|n| *n += 1);
        triggers.next().await.expect("a trigger");
        assert_eq!(quiet.elapsed(), std::time::Duration::ZERO);
        // Nothing pending: no trigger.
        let next = tokio::time::timeout(10 * TRIGGER_GAP, triggers.next()).await;
        assert!(next.is_err(), "a trigger without a bump");
    }

    #[test]
    fn bounds_double_up_to_the_longest() {
        let mut bounds = vec![WATCH_TIMEOUT_SECS];
        while let Some(next) = next_bound(*bounds.last().expect("a bound")) {
            bounds.push(next);
        }
        assert_eq!(bounds, [55, 110, 220, 440, 600]);
        assert!(cut_by_bound(std::time::Duration::from_secs(55), 55));
        assert!(cut_by_bound(std::time::Duration::from_millis(54_200), 55), "to the second");
        assert!(!cut_by_bound(std::time::Duration::from_secs(30), 55), "ended early: failed");
    }

    #[test]
    fn only_the_pods_streamed_list_starts_under_the_longest_bound() {
        for kind in WatchedKind::ALL {
            for lists in [InitialLists::Streaming, InitialLists::Paged] {
                let long = kind == WatchedKind::Pod && lists == InitialLists::Streaming;
                let want = if long { LONGEST_WATCH_TIMEOUT_SECS } else { WATCH_TIMEOUT_SECS };
                assert_eq!(first_bound(kind, lists), want, "{} {}", kind.as_str(), lists.as_str());
            }
        }
        assert_eq!(next_bound(first_bound(WatchedKind::Pod, InitialLists::Streaming)), None);
    }

    type Handle = tower_test::mock::Handle<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >;

    /// A streamed Namespace watch against a mock API server, with nothing else running.
    fn namespace_watch(lists: InitialLists) -> (Handle, JoinHandle<()>) {
        let (service, handle) = tower_test::mock::pair();
        let client = kube::Client::new(service, "default");
        let ctx = WatchCtx {
            state: Arc::new(RwLock::new(ClusterState::new())),
            trigger: watch::channel(0).0,
            metrics: Arc::new(Metrics::new()),
            lists,
            node_lists: Arc::new(tokio::sync::Notify::new()),
            deferred: Arc::new(tokio::sync::Notify::new()),
        };
        let task = spawn::<k8s_openapi::api::core::v1::Namespace>(
            Api::all(client),
            WatchedKind::Namespace,
            ctx,
            |state, ns, _| state.apply_namespace(ns),
            |state, ns, _| state.delete_namespace(&ns.name_any()),
        );
        (handle, task)
    }

    /// The next watch request's `timeoutSeconds`, checked to be a streamed list's start; the
    /// API server's answer is one namespace, then the end of the request, `after` its start.
    async fn answer_streamed_list(handle: &mut Handle, after: std::time::Duration) -> String {
        let (request, respond) = handle.next_request().await.expect("a watch request");
        let query = request.uri().query().unwrap_or_default().to_string();
        assert!(query.contains("watch=true"), "{query}");
        assert!(query.contains("sendInitialEvents=true"), "not a streamed list: {query}");
        let timeout = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("timeoutSeconds="))
            .expect("a timeoutSeconds")
            .to_string();
        tokio::time::sleep(after).await;
        let event = serde_json::json!({ "type": "ADDED", "object": {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": "a", "resourceVersion": "7" },
        }});
        respond.send_response(
            http::Response::builder()
                .body(kube::client::Body::from(format!("{event}\n").into_bytes()))
                .expect("a response"),
        );
        timeout
    }

    #[tokio::test(start_paused = true)]
    async fn a_streamed_list_cut_by_its_bound_streams_again_under_a_longer_one() {
        let (mut handle, task) = namespace_watch(InitialLists::Streaming);
        // Each list's request is answered when its predecessor has lasted its bound: the API
        // server ends a streamed list at the bound, before its end. The request that follows
        // a cut, the watcher's own, still asks for the old bound: it is dropped when answered,
        // and the next request asks for the doubled one.
        let mut asked = vec![answer_streamed_list(&mut handle, std::time::Duration::ZERO).await];
        for _ in 0..10 {
            let bound: u64 = asked.last().expect("a bound").parse().expect("seconds");
            let lasted = std::time::Duration::from_secs(bound);
            asked.push(answer_streamed_list(&mut handle, lasted).await);
        }
        let want = ["55", "55", "110", "110", "220", "220", "440", "440", "600", "600", "600"];
        assert_eq!(asked, want);
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_streamed_list_that_ends_early_keeps_its_bound() {
        let (mut handle, task) = namespace_watch(InitialLists::Streaming);
        let mut asked = vec![answer_streamed_list(&mut handle, std::time::Duration::ZERO).await];
        for _ in 0..3 {
            // Ended 20 s into a 55 s bound: a failure, not a list too long for its bound.
            asked.push(answer_streamed_list(&mut handle, std::time::Duration::from_secs(20)).await);
        }
        assert_eq!(asked, ["55", "55", "55", "55"]);
        task.abort();
    }

    #[test]
    fn lists_stream_where_the_api_server_streams_by_default() {
        let table = [
            ("1", "31", InitialLists::Paged),
            ("1", "32", InitialLists::Streaming),
            ("1", "33", InitialLists::Paged),
            ("1", "34", InitialLists::Streaming),
            ("1", "36+", InitialLists::Streaming),
            ("1", "", InitialLists::Paged),
            ("2", "0", InitialLists::Paged),
        ];
        for (major, minor, want) in table {
            let minor_of_1x = crate::server::parse_minor(major, minor);
            assert_eq!(InitialLists::for_server(minor_of_1x), want, "{major}.{minor}");
        }
    }
}
