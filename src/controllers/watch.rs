//! One watch per kind, feeding the compact [`ClusterState`]. A change that can alter a decision
//! bumps the trigger, which makes the policy controller re-plan every policy.

use std::fmt::Debug;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use kube::Resource;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
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
}

/// How long the API server keeps one watch request open (`timeoutSeconds`) before the watcher
/// opens the next, resuming from the last resourceVersion (no list). The watcher also gives up
/// on a watch silent for this long plus 5 s, even when the server's end never arrives (a
/// connection blackholed by the network): so a hung watch is noticed and replaced within
/// 60 s, where the default (290 s) would leave node deaths unseen for five minutes. The cost
/// is one watch request per kind a minute, about a dozen a minute in all.
pub const WATCH_TIMEOUT_SECS: u32 = 55;

/// The watcher configuration every watch of the operator uses.
pub fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(WATCH_TIMEOUT_SECS)
}

/// Starts one kind's watch: `apply` and `delete` say what its objects do to the state.
pub fn spawn<K>(
    api: Api<K>,
    kind: WatchedKind,
    ctx: WatchCtx,
    apply: fn(&mut ClusterState, &K, Timestamp) -> Change,
    delete: fn(&mut ClusterState, &K) -> Change,
) -> JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let stream = watcher::watcher(api, watch_config()).default_backoff();
    tokio::spawn(consume(stream, kind, ctx, apply, delete))
}

async fn consume<K>(
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>>,
    kind: WatchedKind,
    ctx: WatchCtx,
    apply: fn(&mut ClusterState, &K, Timestamp) -> Change,
    delete: fn(&mut ClusterState, &K) -> Change,
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
                Ok(Event::Delete(obj)) => delete(&mut state, obj),
                Ok(Event::InitDone) => {
                    info!(kind = kind.as_str(), "watch synced");
                    state.list_done(kind, now)
                }
                Err(e) => {
                    warn!(kind = kind.as_str(), error = %e, "watch failed; retrying");
                    state.watch_failed(kind)
                }
            };
            (change, state.synced(), state.node_count(), state.terminating_pod_count())
        };
        ctx.metrics.caches_synced.set(i64::from(synced));
        ctx.metrics.cached_nodes.set(nodes as i64);
        ctx.metrics.cached_terminating_pods.set(pods as i64);
        if change == Change::Relevant {
            ctx.trigger.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// A stream that yields once per burst of trigger bumps (bumps during a reconcile coalesce).
pub fn trigger_stream(rx: watch::Receiver<u64>) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        rx.changed().await.ok()?;
        rx.borrow_and_update();
        Some(((), rx))
    })
}
