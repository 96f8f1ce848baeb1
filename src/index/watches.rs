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
    /// Listed in pages of [`PAGE_SIZE`] objects, then watched.
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

/// The watcher configuration every watch of the operator uses.
pub fn watch_config(lists: InitialLists) -> watcher::Config {
    let config = watcher::Config::default().timeout(WATCH_TIMEOUT_SECS).page_size(PAGE_SIZE);
    match lists {
        InitialLists::Streaming => config.streaming_lists(),
        InitialLists::Paged => config,
    }
}

/// Starts one kind's watch: `apply` and `delete` say what its objects do to the state.
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
    let stream = watcher::watcher(api, watch_config(ctx.lists)).default_backoff();
    tokio::spawn(consume(stream, kind, ctx, apply, delete))
}

async fn consume<K: Resource>(
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    kind: WatchedKind,
    ctx: WatchCtx,
    apply: fn(&mut ClusterState, &K, Timestamp) -> Change,
    delete: fn(&mut ClusterState, &K, Timestamp) -> Change,
) {
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
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
