//! Leader election on a `coordination.k8s.io/v1` Lease: every replica keeps its watches and
//! caches synced (hot standby), only the one holding the Lease acts.
//!
//! # Why a module of our own
//!
//! No crate fits kube 5 and what this operator must guarantee. `kubert`'s lease module (the
//! linkerd policy-controller's) and `kube-leader-election` are built on kube 1.x and 4.x.
//! `kube-lease-manager` 0.13 supports kube 5, but: a follower sleeps until the lease it saw
//! expires, so a lease released on shutdown is taken over only a full lease duration later; a
//! holder whose renewals fail keeps reporting itself the leader, past the lease's expiry, until a
//! renewal succeeds; and an expired lease is taken over by an unconditional patch that clears the
//! holder, so two candidates can both believe they lead. What is needed is small: client-go's
//! algorithm, below.
//!
//! # The algorithm (client-go's `leaderelection`, on a Lease)
//!
//! - Every write is a PUT carrying the `resourceVersion` just read (optimistic concurrency): of
//!   two candidates, the second gets 409 Conflict and re-reads. The first replica creates the
//!   Lease (`create`); afterwards only `get` and `update` on that one Lease are used. A leader
//!   renews with one PUT of the Lease as its last write stored it, without reading it first
//!   (client-go's optimistic renewal): a Lease anyone else wrote since is refused with 409, and
//!   after that or any error the next round reads first.
//! - A free Lease (absent, or no holder: released) is taken at once.
//! - A held Lease is taken over once it has not changed for its `leaseDurationSeconds`, as seen
//!   by this replica's monotonic clock since it first saw the current version: the holder's and
//!   the follower's wall clocks never need to agree.
//! - The holder renews every fifth of `renew_deadline` (counted from the instant it sent the
//!   last renewal) and may act until `renew_deadline` (two thirds of the duration) after it *sent*
//!   its last successful renewal: it stops acting a third of the lease duration before anyone
//!   may take over. A holder's request may take until that deadline (a follower's, a third of
//!   the duration), as client-go's renewal may; renewing every fifth of the deadline (2 s of 15)
//!   and with one request each, a holder keeps its term on an API server that turns slow at
//!   once if a renewal is answered within 8 s, and on one that stays slow if each is answered
//!   within 5 s (half the deadline: the next is sent once one is answered). Since the deadline
//!   counts from the sending, a slow answer never lengthens the time the holder may act. The
//!   [`LeaderGuard`] compares that deadline with the clock at each use, so a leader whose
//!   election task is starved or whose renewals hang stops acting on time all the same.
//! - Followers read the Lease every `min(1 s, lease_duration / 3)`, and at the instant it would
//!   expire: a Lease released on shutdown is taken over within about a second, a dead holder's
//!   within the lease duration plus that period after its last renewal.
//! - A holder that finds the Lease taken, or cannot renew before its deadline, has lost it for
//!   good: the guard is already closed, the election ends with [`Ended::Lost`], and the process
//!   exits with a failure so that Kubernetes restarts it as a fresh follower (the linkerd
//!   policy-controller does the same). Nothing of the old term (its in-flight reconciles, its
//!   controller memory) survives into a later one.
//! - On shutdown ([`LeaderElection::release`]) the guard closes first, then the holder clears
//!   `holderIdentity` (again with the `resourceVersion` it read), so a follower takes over
//!   without waiting for the lease to expire.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::metrics::Metrics;
use crate::{Error, Result};

/// Where the service account's namespace is mounted in a pod.
const IN_CLUSTER_NAMESPACE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// The longest a follower waits between two reads of the Lease.
const MAX_RETRY_PERIOD: Duration = Duration::from_secs(1);
/// After a 409 Conflict: re-read almost at once.
const CONFLICT_RETRY: Duration = Duration::from_millis(100);
/// The longest a release on shutdown may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Which Lease, for whom, for how long.
#[derive(Clone, Debug)]
pub struct Config {
    pub namespace: String,
    pub lease: String,
    /// Unique per process: see [`identity`].
    pub identity: String,
    /// How long a Lease that stopped changing stays its holder's.
    pub lease_duration: Duration,
}

impl Config {
    /// The holder renews this often: a fifth of the renew deadline (2 s of a 15 s Lease, as
    /// client-go's defaults), so that when the API server turns slow at once, a renewal sent on
    /// time may take four fifths of the deadline (8 s) to be answered and still keep the term;
    /// when it stays slow, each may take half of it (the next is sent once one is answered).
    pub fn renew_interval(&self) -> Duration {
        self.renew_deadline() / 5
    }

    /// The holder may act until this long after it sent its last successful renewal.
    pub fn renew_deadline(&self) -> Duration {
        self.lease_duration * 2 / 3
    }

    /// Followers read the Lease this often; errors are retried this often.
    pub fn retry_period(&self) -> Duration {
        (self.lease_duration / 3).min(MAX_RETRY_PERIOD)
    }

    /// A request of a replica that does not lead gives up after this long; a leader's gives up
    /// at its guard's deadline ([`Elector::request_timeout`]).
    fn follower_request_timeout(&self) -> Duration {
        self.lease_duration / 3
    }
}

/// The namespace of the leader Lease when none is given: the pod's own (its service account's),
/// else `default`.
pub fn default_namespace() -> String {
    std::fs::read_to_string(IN_CLUSTER_NAMESPACE)
        .ok()
        .map(|ns| ns.trim().to_string())
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// A holder identity unique to this process: the instance name (pod name) and a random suffix,
/// so that a container restarted in the same pod is a new candidate, not the old holder.
pub fn identity(instance: Option<&str>) -> String {
    // std's RandomState is seeded from the OS's randomness for each process.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    let suffix = hasher.finish() as u32;
    format!("{}-{suffix:08x}", instance.unwrap_or("kube-remediator"))
}

/// What this replica knows about the leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// No answer from the API server yet.
    Unknown,
    /// This replica holds the Lease (or leader election is off).
    Leader,
    /// Another replica holds it.
    Follower { holder: String },
}

impl Leadership {
    /// Leader, or follower of a known holder: what `/readyz` waits for.
    pub fn is_known(&self) -> bool {
        !matches!(self, Leadership::Unknown)
    }

    pub fn is_leader(&self) -> bool {
        matches!(self, Leadership::Leader)
    }
}

/// Why an election ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// This replica led and lost the Lease; it must never act again.
    Lost(String),
    /// Released on shutdown.
    Released,
}

/// Whether this replica may act now. Cheap to clone; checked by the writer right before every
/// mutation.
#[derive(Clone, Debug)]
pub struct LeaderGuard {
    inner: Arc<GuardInner>,
}

#[derive(Debug)]
struct GuardInner {
    base: Instant,
    /// Nanoseconds after `base` until which this replica may act: 0 never, `u64::MAX` always.
    until: AtomicU64,
}

impl LeaderGuard {
    /// Always open: leader election is off, this replica is the only one.
    pub fn always() -> Self {
        Self::with_until(u64::MAX)
    }

    /// Closed until the election opens it.
    pub fn closed() -> Self {
        Self::with_until(0)
    }

    fn with_until(until: u64) -> Self {
        LeaderGuard {
            inner: Arc::new(GuardInner { base: Instant::now(), until: AtomicU64::new(until) }),
        }
    }

    /// Whether this replica holds the leadership right now.
    pub fn may_act(&self) -> bool {
        self.open_at(Instant::now())
    }

    /// Whether the guard is (or was) open at `at`.
    fn open_at(&self, at: Instant) -> bool {
        let until = self.inner.until.load(Ordering::Acquire);
        until == u64::MAX || self.nanos(at) < until
    }

    /// How long the guard stays open from `at`: zero once closed, `None` when always open.
    fn open_for(&self, at: Instant) -> Option<Duration> {
        let until = self.inner.until.load(Ordering::Acquire);
        (until != u64::MAX).then(|| Duration::from_nanos(until.saturating_sub(self.nanos(at))))
    }

    /// Opens the guard until `deadline`.
    fn open_until(&self, deadline: Instant) {
        self.inner.until.store(self.nanos(deadline).max(1), Ordering::Release);
    }

    /// Closes the guard for good (until opened again).
    fn close(&self) {
        self.inner.until.store(0, Ordering::Release);
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.inner.base).as_nanos())
            .unwrap_or(u64::MAX - 1)
    }
}

/// A running election (or the absence of one): the guard to check before acting, the
/// leadership to watch, and its end.
pub struct LeaderElection {
    guard: LeaderGuard,
    state: watch::Receiver<Leadership>,
    /// Keeps the channel open when there is no election task.
    _state_tx: Option<watch::Sender<Leadership>>,
    release: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<Ended>>>,
}

impl LeaderElection {
    /// No election: this replica leads from the start and for ever.
    pub fn disabled(metrics: &Metrics) -> Self {
        metrics.leader.set(1);
        let (tx, rx) = watch::channel(Leadership::Leader);
        LeaderElection {
            guard: LeaderGuard::always(),
            state: rx,
            _state_tx: Some(tx),
            release: None,
            task: None,
        }
    }

    /// Starts competing for the Lease of `config`.
    pub fn start(client: Client, config: Config, metrics: Arc<Metrics>) -> Self {
        let guard = LeaderGuard::closed();
        metrics.leader.set(0);
        let (tx, rx) = watch::channel(Leadership::Unknown);
        let (release_tx, release_rx) = oneshot::channel();
        info!(
            namespace = %config.namespace, lease = %config.lease, identity = %config.identity,
            lease_duration = ?config.lease_duration, "leader election: competing for the Lease"
        );
        let elector = Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            guard: guard.clone(),
            state: tx,
            metrics,
            observed: None,
            written: None,
            leading: false,
        };
        LeaderElection {
            guard,
            state: rx,
            _state_tx: None,
            release: Some(release_tx),
            task: Some(tokio::spawn(elector.run(release_rx))),
        }
    }

    /// The guard the writer checks before each mutation.
    pub fn guard(&self) -> LeaderGuard {
        self.guard.clone()
    }

    /// The leadership as it changes.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.state.clone()
    }

    /// Resolves when the election ends by itself: the Lease lost (`Ok(Ended::Lost)`) or an error
    /// no retry can fix, such as a missing permission. Never resolves without an election.
    /// Cancel-safe.
    pub async fn ended(&mut self) -> Result<Ended> {
        match self.task.as_mut() {
            Some(task) => {
                let outcome = match task.await {
                    Ok(outcome) => outcome,
                    Err(e) => Ok(Ended::Lost(format!("the leader election task failed: {e}"))),
                };
                self.task = None;
                outcome
            }
            None => std::future::pending().await,
        }
    }

    /// Stops acting at once, then hands the Lease back (if held) so that a follower takes over
    /// without waiting for it to expire. Bounded in time.
    pub async fn release(mut self) {
        self.guard.close();
        if let Some(release) = self.release.take() {
            let _ = release.send(());
        }
        if let Some(task) = self.task.take() {
            match tokio::time::timeout(RELEASE_TIMEOUT + Duration::from_secs(1), task).await {
                Ok(Ok(Ok(_))) => {}
                Ok(Ok(Err(e))) => warn!(error = %e, "leader election ended with an error"),
                Ok(Err(e)) => warn!(error = %e, "the leader election task failed"),
                Err(_) => warn!("releasing the leader Lease timed out"),
            }
        }
    }
}

/// What one round of the election found.
#[derive(Debug)]
enum Round {
    /// This replica holds the Lease; it sent its successful create or update at this instant.
    Leading { sent: Instant },
    /// Another replica holds it, for this long at most unless it renews.
    Following { holder: String, expires_in: Duration },
    /// Someone else wrote the Lease between our read and our write: read again.
    Conflict,
}

/// What to do with the Lease as read.
#[derive(Debug, PartialEq, Eq)]
enum Move {
    Renew,
    TakeOver,
    Follow { holder: String },
}

/// The decision of a round: `expired` says whether the holder's Lease has gone unchanged for its
/// duration (as this replica saw it).
fn decide(spec: &LeaseSpec, identity: &str, expired: bool) -> Move {
    match spec.holder_identity.as_deref() {
        Some(holder) if holder == identity => Move::Renew,
        None | Some("") => Move::TakeOver,
        Some(_) if expired => Move::TakeOver,
        Some(holder) => Move::Follow { holder: holder.to_string() },
    }
}

/// The version of the Lease last seen, and since when (this replica's clock).
#[derive(Debug)]
struct Observed {
    resource_version: String,
    since: Instant,
}

struct Elector {
    api: Api<Lease>,
    config: Config,
    guard: LeaderGuard,
    state: watch::Sender<Leadership>,
    metrics: Arc<Metrics>,
    observed: Option<Observed>,
    /// The Lease as this replica's last successful write of it stored it: while leading, the
    /// next renewal is one PUT of it (no read first), refused with 409 Conflict if anyone wrote
    /// the Lease since.
    written: Option<Lease>,
    /// Whether this replica has led in this process: once lost, the election ends.
    leading: bool,
}

impl Elector {
    async fn run(mut self, mut release: oneshot::Receiver<()>) -> Result<Ended> {
        loop {
            let round = tokio::select! {
                biased;
                _ = &mut release => return Ok(self.release().await),
                round = self.round() => round,
            };
            let wait = match self.after(round)? {
                Ok(wait) => wait,
                Err(ended) => return Ok(ended),
            };
            tokio::select! {
                biased;
                _ = &mut release => return Ok(self.release().await),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Handles a round's outcome: how long until the next round, or the end of the election.
    fn after(&mut self, round: Result<Round>) -> Result<Result<Duration, Ended>> {
        // A leader whose guard closed before it sent a successful renewal has lost, even if the
        // Lease is still its own: it stopped acting, and a term never resumes.
        let checked_at = match &round {
            Ok(Round::Leading { sent }) => *sent,
            _ => Instant::now(),
        };
        if self.leading && !self.guard.open_at(checked_at) {
            let mut reason =
                format!("could not renew the Lease within {:?}", self.config.renew_deadline());
            if let Err(e) = &round {
                reason.push_str(&format!(": {e}"));
            }
            return Ok(Err(self.lose(reason)));
        }
        match round {
            Ok(Round::Leading { sent }) => {
                self.guard.open_until(sent + self.config.renew_deadline());
                if !self.leading {
                    let (lease, identity) = (&self.config.lease, &self.config.identity);
                    info!(%lease, %identity, "became the leader");
                }
                self.leading = true;
                self.metrics.leader.set(1);
                self.publish(Leadership::Leader);
                // The next renewal is due a renew interval after this one was sent, however
                // long the API server took to answer it.
                Ok(Ok(self.config.renew_interval().saturating_sub(sent.elapsed())))
            }
            Ok(Round::Following { holder, expires_in }) => {
                if self.leading {
                    return Ok(Err(self.lose(format!("the Lease is now held by {holder}"))));
                }
                self.metrics.leader.set(0);
                let changed = self.publish(Leadership::Follower { holder: holder.clone() });
                if changed {
                    info!(lease = %self.config.lease, %holder, "following the leader");
                }
                // Read again at the instant it expires if that comes first.
                Ok(Ok(self.config.retry_period().min(expires_in)))
            }
            Ok(Round::Conflict) => Ok(Ok(CONFLICT_RETRY)),
            Err(e @ Error::Forbidden { .. }) => Err(e),
            Err(e) => {
                let lease = &self.config.lease;
                warn!(error = %e, %lease, "leader election: cannot read or write the Lease");
                Ok(Ok(self.config.retry_period()))
            }
        }
    }

    /// Publishes the leadership; returns whether it changed.
    fn publish(&self, leadership: Leadership) -> bool {
        self.state.send_if_modified(|current| {
            let changed = *current != leadership;
            *current = leadership;
            changed
        })
    }

    fn lose(&mut self, reason: String) -> Ended {
        self.guard.close();
        self.metrics.leader.set(0);
        Ended::Lost(format!("{} ({}/{})", reason, self.config.namespace, self.config.lease))
    }

    /// One round: a leader's renewal of the Lease it last wrote (one PUT), or one read and at
    /// most one write.
    async fn round(&mut self) -> Result<Round> {
        // A leader whose guard has closed has lost (the round's outcome says so): it writes
        // nothing more, not even a renewal that would make the others wait for its Lease.
        if self.leading && !self.guard.may_act() {
            let deadline = self.config.renew_deadline();
            return Err(Error::Timeout { operation: "a leader Lease renewal", timeout: deadline });
        }
        if self.leading
            && let Some(mut lease) = self.written.take()
        {
            let sent = Instant::now();
            if let Some(spec) = lease.spec.as_mut() {
                spec.renew_time = Some(MicroTime(Timestamp::now()));
                spec.lease_duration_seconds = Some(self.duration_seconds());
            }
            return self.write(lease, sent).await;
        }
        let Some(lease) = self.request("read", self.api.get_opt(&self.config.lease)).await? else {
            let sent = Instant::now();
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.lease.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.held(None, 0)),
            };
            return match self
                .request("create", self.api.create(&PostParams::default(), &lease))
                .await
            {
                Ok(created) => {
                    self.observe(&created);
                    self.written = Some(created);
                    Ok(Round::Leading { sent })
                }
                Err(e) if is_conflict(&e) => Ok(Round::Conflict),
                Err(e) => Err(e),
            };
        };
        self.observe(&lease);
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.config.lease_duration);
        let unchanged_for = self.observed.as_ref().map(|o| o.since.elapsed()).unwrap_or_default();
        let spec = match decide(&spec, &self.config.identity, unchanged_for >= duration) {
            Move::Follow { holder } => {
                let expires_in = duration.saturating_sub(unchanged_for);
                return Ok(Round::Following { holder, expires_in });
            }
            Move::Renew => LeaseSpec {
                renew_time: Some(MicroTime(Timestamp::now())),
                lease_duration_seconds: Some(self.duration_seconds()),
                ..spec
            },
            Move::TakeOver => {
                let previous = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
                if let Some(previous) = previous {
                    let lease = &self.config.lease;
                    info!(%lease, %previous, "taking over the expired Lease");
                }
                self.held(Some(&spec), spec.lease_transitions.unwrap_or(0) + 1)
            }
        };
        let sent = Instant::now();
        self.write(Lease { metadata: lease.metadata, spec: Some(spec) }, sent).await
    }

    /// Writes the Lease as this replica holds it, with the `resourceVersion` it carries; `sent`
    /// is the instant the renewal time was taken, just before the request.
    async fn write(&mut self, lease: Lease, sent: Instant) -> Result<Round> {
        let params = PostParams::default();
        let request = self.api.replace(&self.config.lease, &params, &lease);
        match self.request("update", request).await {
            Ok(updated) => {
                self.observe(&updated);
                self.written = Some(updated);
                Ok(Round::Leading { sent })
            }
            // Written by someone else since, or any other error (deleted, refused, a renewal
            // that may have been stored after all): the next round reads the Lease first.
            Err(e) if is_conflict(&e) => Ok(Round::Conflict),
            Err(e) => Err(e),
        }
    }

    /// The spec of a Lease this replica has just acquired.
    fn held(&self, previous: Option<&LeaseSpec>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_duration_seconds: Some(self.duration_seconds()),
            lease_transitions: Some(transitions),
            ..previous.cloned().unwrap_or_default()
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Notes the Lease's version, and since when this replica has seen it.
    fn observe(&mut self, lease: &Lease) {
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|o| o.resource_version != version) {
            self.observed = Some(Observed { resource_version: version, since: Instant::now() });
        }
    }

    /// Closes the guard, then clears the holder if it is still this replica.
    async fn release(&mut self) -> Ended {
        self.guard.close();
        self.metrics.leader.set(0);
        if !self.leading {
            return Ended::Released;
        }
        let released = async {
            let Some(mut lease) = self.api.get_opt(&self.config.lease).await? else {
                return Ok::<_, kube::Error>(false);
            };
            let Some(spec) = lease.spec.as_mut() else { return Ok(false) };
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.acquire_time = None;
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            self.api.replace(&self.config.lease, &PostParams::default(), &lease).await?;
            Ok(true)
        };
        let outcome = tokio::time::timeout(RELEASE_TIMEOUT, released).await;
        let lease = &self.config.lease;
        match outcome {
            Ok(Ok(true)) => info!(%lease, "released the Lease"),
            Ok(Ok(false)) => debug!(%lease, "the Lease was no longer ours to release"),
            Ok(Err(e)) => warn!(error = %e, %lease, "cannot release the Lease: it will expire"),
            Err(_) => warn!(%lease, "releasing the Lease timed out: it will expire"),
        }
        Ended::Released
    }

    /// How long a request may take: a leader's, until its guard closes (a renewal answered
    /// later cannot keep the term anyway, and one answered in time, however slowly, does: the
    /// guard's deadline counts from the instant the renewal was sent, so a slow answer never
    /// lengthens the term); another replica's, a third of the lease duration.
    fn request_timeout(&self) -> Duration {
        match self.guard.open_for(Instant::now()) {
            Some(open) if self.leading => open.max(Duration::from_millis(1)),
            _ => self.config.follower_request_timeout(),
        }
    }

    /// One request, bounded in time, its error named after the operation.
    async fn request<T>(
        &self,
        verb: &'static str,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<T> {
        let timeout = self.request_timeout();
        match tokio::time::timeout(timeout, request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(kube::Error::Api(s))) if s.code == 403 => {
                let verb = match verb {
                    "read" => "get",
                    other => other,
                };
                Err(Error::Forbidden { verb, resource: "leases", message: s.message })
            }
            Ok(Err(source)) => {
                Err(Error::LeaderLease { verb, name: self.config.lease.clone(), source })
            }
            Err(_) => Err(Error::Timeout { operation: "a leader Lease request", timeout }),
        }
    }
}

fn is_conflict(e: &Error) -> bool {
    matches!(e, Error::LeaderLease { source: kube::Error::Api(s), .. } if s.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>) -> LeaseSpec {
        LeaseSpec { holder_identity: holder.map(String::from), ..LeaseSpec::default() }
    }

    #[test]
    fn decide_renews_its_own_takes_free_or_expired_follows_live() {
        let cases = [
            (spec(Some("me")), false, Move::Renew),
            (spec(Some("me")), true, Move::Renew),
            (spec(None), false, Move::TakeOver),
            (spec(Some("")), false, Move::TakeOver),
            (spec(Some("other")), true, Move::TakeOver),
            (spec(Some("other")), false, Move::Follow { holder: "other".into() }),
        ];
        for (spec, expired, want) in cases {
            assert_eq!(decide(&spec, "me", expired), want, "{spec:?} expired={expired}");
        }
    }

    #[test]
    fn the_holder_stops_acting_a_third_of_the_duration_before_anyone_may_take_over() {
        let config = Config {
            namespace: "ns".into(),
            lease: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
        };
        assert_eq!(config.renew_interval(), Duration::from_secs(2));
        assert_eq!(config.renew_deadline(), Duration::from_secs(10));
        assert_eq!(config.retry_period(), Duration::from_secs(1));
        assert!(config.renew_deadline() < config.lease_duration);
        let short = Config { lease_duration: Duration::from_secs(2), ..config };
        assert!(short.retry_period() < Duration::from_secs(1));
    }

    #[test]
    fn the_guard_closes_by_itself_at_its_deadline() {
        let guard = LeaderGuard::closed();
        assert!(!guard.may_act());
        std::thread::sleep(Duration::from_millis(2));
        guard.open_until(Instant::now() + Duration::from_secs(60));
        assert!(guard.may_act());
        guard.open_until(Instant::now() - Duration::from_millis(1));
        assert!(!guard.may_act(), "a past deadline");
        guard.open_until(Instant::now() + Duration::from_secs(60));
        guard.close();
        assert!(!guard.may_act());
        assert!(LeaderGuard::always().may_act());
    }

    /// An elector whose client is never used.
    fn elector() -> Elector {
        type Req = http::Request<kube::client::Body>;
        type Resp = http::Response<kube::client::Body>;
        let (service, _handle) = tower_test::mock::pair::<Req, Resp>();
        let (state, _) = watch::channel(Leadership::Unknown);
        Elector {
            api: Api::namespaced(Client::new(service, "default"), "ns"),
            config: Config {
                namespace: "ns".into(),
                lease: "l".into(),
                identity: "me".into(),
                lease_duration: Duration::from_secs(15),
            },
            guard: LeaderGuard::closed(),
            state,
            metrics: Arc::new(Metrics::new()),
            observed: None,
            written: None,
            leading: false,
        }
    }

    #[tokio::test]
    async fn a_leader_that_misses_its_renew_deadline_has_lost_for_good() {
        // Leads, renews in time: the guard stays open a renew deadline past the renewal.
        let mut e = elector();
        let sent = Instant::now();
        let next = e.after(Ok(Round::Leading { sent })).expect("no error");
        assert!(
            next.as_ref()
                .is_ok_and(|n| *n <= Duration::from_secs(2) && *n > Duration::from_millis(1_900)),
            "the next renewal 2 s after this one was sent: {next:?}"
        );
        assert!(e.guard.may_act() && e.metrics.leader.get() == 1);
        assert_eq!(*e.state.borrow(), Leadership::Leader);

        // Errors within the deadline: still leading, retrying every second.
        let error =
            || Err(Error::Timeout { operation: "a leader Lease request", timeout: Duration::ZERO });
        assert_eq!(e.after(error()).expect("no error"), Ok(Duration::from_secs(1)));
        assert!(e.guard.may_act());

        // The deadline passes: lost, whatever the next round says, even a successful renewal
        // sent after it.
        e.guard.open_until(Instant::now());
        let late = Instant::now() + Duration::from_millis(1);
        assert!(matches!(e.after(Ok(Round::Leading { sent: late })), Ok(Err(Ended::Lost(_)))));
        assert!(!e.guard.may_act() && e.metrics.leader.get() == 0);

        // Another holder while leading: lost at once.
        let mut e = elector();
        e.after(Ok(Round::Leading { sent: Instant::now() })).expect("no error").expect("leads");
        let taken =
            Round::Following { holder: "other".into(), expires_in: Duration::from_secs(15) };
        assert!(matches!(e.after(Ok(taken)), Ok(Err(Ended::Lost(r))) if r.contains("other")));
        assert!(!e.guard.may_act());

        // A follower reads again at the instant the holder's Lease would expire.
        let mut e = elector();
        let soon =
            Round::Following { holder: "other".into(), expires_in: Duration::from_millis(300) };
        assert_eq!(e.after(Ok(soon)).expect("no error"), Ok(Duration::from_millis(300)));
        assert_eq!(*e.state.borrow(), Leadership::Follower { holder: "other".into() });
        assert!(!e.guard.may_act());
        // A missing permission is no reason to retry.
        let forbidden = Error::Forbidden { verb: "get", resource: "leases", message: "no".into() };
        assert!(e.after(Err(forbidden)).is_err());
    }

    #[tokio::test]
    async fn a_leader_past_its_deadline_writes_nothing_more() {
        // Its client's other end is gone: a request would fail as a request, not as this.
        let mut e = elector();
        e.leading = true;
        let round = e.round().await;
        assert!(
            matches!(round, Err(Error::Timeout { operation: "a leader Lease renewal", .. })),
            "{round:?}"
        );
        assert!(matches!(e.after(round), Ok(Err(Ended::Lost(_)))));
    }

    #[tokio::test]
    async fn a_writer_without_the_lease_sends_nothing() {
        use crate::crd::{RemediationPolicy, RemediationPolicyStatus};
        use crate::writer::Writer;
        use kube::runtime::events::EventType;

        type Req = http::Request<kube::client::Body>;
        type Resp = http::Response<kube::client::Body>;
        let (service, mut handle) = tower_test::mock::pair::<Req, Resp>();
        let client = Client::new(service, "default");
        let writer = Writer::new(client, Arc::new(Metrics::new()), None)
            .with_leader_guard(LeaderGuard::closed());
        let policy: RemediationPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "remediator.io/v1alpha1",
            "kind": "RemediationPolicy",
            "metadata": { "name": "p", "uid": "policy-uid" },
            "spec": {},
        }))
        .expect("valid policy");

        let status = writer.patch_status("p", &RemediationPolicyStatus::default()).await;
        assert!(matches!(status, Err(Error::NotLeader { .. })), "{status:?}");
        writer.policy_event(&policy, EventType::Normal, "Test", "Test", "note".into()).await;
        let request = tokio::time::timeout(Duration::from_millis(200), handle.next_request()).await;
        assert!(
            !matches!(request, Ok(Some(_))),
            "a follower's writer sent {:?}",
            request.ok().flatten().map(|(r, _)| r.uri().to_string())
        );
    }

    type Counts = Arc<std::sync::Mutex<std::collections::BTreeMap<String, u32>>>;

    /// A Lease API on a mock service that answers every request the milliseconds in `delay`
    /// after it arrives, keeping one Lease with optimistic concurrency. Returns the count of
    /// requests by verb.
    fn slow_lease_api(delay: Arc<AtomicU64>) -> (Client, Counts) {
        type Req = http::Request<kube::client::Body>;
        type Resp = http::Response<kube::client::Body>;
        let (service, mut handle) = tower_test::mock::pair::<Req, Resp>();
        let counts = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
        let seen = counts.clone();
        tokio::spawn(async move {
            let stored: Arc<std::sync::Mutex<Option<Lease>>> = Arc::default();
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().to_string();
                *seen.lock().expect("counts").entry(method.clone()).or_insert(0) += 1;
                let body = http_body_util::BodyExt::collect(request.into_body()).await;
                let body = body.map(|b| b.to_bytes()).unwrap_or_default();
                let stored = stored.clone();
                let delay = Duration::from_millis(delay.load(Ordering::Relaxed));
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let mut stored = stored.lock().expect("the Lease");
                    let next_version = |l: &Option<Lease>| {
                        let v = l.as_ref().and_then(|l| l.metadata.resource_version.clone());
                        (v.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1).to_string()
                    };
                    let (code, lease) = match method.as_str() {
                        "GET" => (if stored.is_some() { 200 } else { 404 }, stored.clone()),
                        _ => {
                            let mut written: Lease =
                                serde_json::from_slice(&body).expect("a Lease");
                            let current = stored.as_ref().map(|l| &l.metadata.resource_version);
                            if method == "PUT"
                                && current != Some(&written.metadata.resource_version)
                            {
                                (409, None)
                            } else {
                                written.metadata.resource_version = Some(next_version(&stored));
                                *stored = Some(written.clone());
                                (200, Some(written))
                            }
                        }
                    };
                    let bytes = match lease {
                        Some(lease) if code == 200 => serde_json::to_vec(&lease).expect("json"),
                        _ => serde_json::to_vec(&serde_json::json!({
                            "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "test", "code": code,
                            "reason": if code == 404 { "NotFound" } else { "Conflict" },
                        }))
                        .expect("json"),
                    };
                    send.send_response(
                        http::Response::builder()
                            .status(code)
                            .body(kube::client::Body::from(bytes))
                            .expect("response"),
                    );
                });
            }
        });
        (Client::new(service, "default"), counts)
    }

    #[tokio::test]
    async fn a_leader_keeps_the_lease_while_each_answer_takes_a_third_of_its_deadline() {
        // A 4.5 s Lease: a 3 s deadline, renewals every 0.6 s. Once this replica leads, every
        // answer takes 1 s, a third of the deadline: a renewal as a read then a write, sent a
        // renew interval after the last was answered, would miss it.
        let delay = Arc::new(AtomicU64::new(10));
        let (client, counts) = slow_lease_api(delay.clone());
        let config = Config {
            namespace: "ns".into(),
            lease: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_millis(4_500),
        };
        let mut election = LeaderElection::start(client, config, Arc::new(Metrics::new()));
        let guard = election.guard();
        let mut state = election.subscribe();
        tokio::time::timeout(Duration::from_secs(10), state.wait_for(|l| *l == Leadership::Leader))
            .await
            .expect("leads within 10 s")
            .expect("the election runs");
        delay.store(1_000, Ordering::Relaxed);
        // For 7.5 s (two and a half deadlines): the guard never closes and the election goes
        // on.
        let until = Instant::now() + Duration::from_millis(7_500);
        while Instant::now() < until {
            assert!(guard.may_act(), "the guard closed on a slow API server");
            let ended = tokio::time::timeout(Duration::from_millis(100), election.ended()).await;
            assert!(ended.is_err(), "the election ended: {ended:?}");
        }
        // Renewed by one PUT each, without a read first: a read (the first round's) and a
        // create, then about one PUT per second.
        let counts = counts.lock().expect("counts").clone();
        assert_eq!(counts.get("GET"), Some(&1), "{counts:?}");
        assert_eq!(counts.get("POST"), Some(&1), "{counts:?}");
        assert!(counts.get("PUT").is_some_and(|n| *n >= 6), "{counts:?}");
        election.guard.close();
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        let (a, b) = (identity(Some("pod-0")), identity(Some("pod-0")));
        assert!(a.starts_with("pod-0-") && b.starts_with("pod-0-"), "{a} {b}");
        assert_ne!(a, b);
    }
}
