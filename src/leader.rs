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
//! - A holder that cannot renew before its deadline **pauses**: the guard has closed on time by
//!   itself, and the holder goes on sending renewals of the Lease as its last write stored it. A
//!   renewal stored with that `resourceVersion` is the evidence that nobody wrote the Lease since
//!   (a takeover is a write, so a follower that took over would have changed it and the
//!   renewal would be refused with 409): the term never had a rival, and the guard opens again
//!   until `renew_deadline` after that renewal's sending, as for any renewal. After an answer
//!   that says nothing (a timeout: the renewal may have been stored), the holder reads the
//!   Lease and renews only one that still names it. An API server that stalls for longer than
//!   the deadline so pauses the holder instead of ending its term, and the replicas keep their
//!   leader when it answers again.
//! - A holder that finds the Lease taken (a renewal refused and a read that names another
//!   holder), released or deleted has lost it for good: the guard is already closed, the
//!   election ends with [`Ended::Lost`], and the process exits with a failure so that
//!   Kubernetes restarts it as a fresh follower (the linkerd policy-controller does the same).
//!   A leader never takes a Lease over, even a free one: nothing of its term (its in-flight
//!   reconciles, its controller memory) survives into another one.
//! - On shutdown ([`LeaderElection::release`]) the guard closes first, then the holder clears
//!   `holderIdentity` (again with the `resourceVersion` it read), so a follower takes over
//!   without waiting for the lease to expire.

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
// Tokio's clock (the system's monotonic clock, pausable in tests): the guard's deadlines.
use tokio::time::Instant;
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
    /// This replica held the Lease and could not renew it in time: it does not act until a
    /// renewal proves the Lease still its own (then `Leader` again), or exits.
    Paused,
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
            paused: None,
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
    /// This replica led and the Lease, as read, is no longer its own: taken, released or
    /// deleted.
    Gone(String),
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
    /// Since when a leader's guard has been closed for want of a stored renewal (a pause).
    paused: Option<Instant>,
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
        let next = match round {
            Ok(Round::Leading { sent }) => {
                // Stored with the version this replica last wrote or just read naming it: the
                // Lease had no other holder since. The guard opens until the deadline counted
                // from the sending (not at all if that has passed: the pause goes on).
                self.guard.open_until(sent + self.config.renew_deadline());
                if !self.leading {
                    let (lease, identity) = (&self.config.lease, &self.config.identity);
                    info!(%lease, %identity, "became the leader");
                }
                self.leading = true;
                // The next renewal is due a renew interval after this one was sent, however
                // long the API server took to answer it.
                self.config.renew_interval().saturating_sub(sent.elapsed())
            }
            Ok(Round::Following { holder, .. }) if self.leading => {
                return Ok(Err(self.lose(format!("the Lease is now held by {holder}"))));
            }
            Ok(Round::Gone(reason)) => return Ok(Err(self.lose(reason))),
            Ok(Round::Following { holder, expires_in }) => {
                self.metrics.leader.set(0);
                let changed = self.publish(Leadership::Follower { holder: holder.clone() });
                if changed {
                    info!(lease = %self.config.lease, %holder, "following the leader");
                }
                // Read again at the instant it expires if that comes first.
                self.config.retry_period().min(expires_in)
            }
            Ok(Round::Conflict) => CONFLICT_RETRY,
            Err(e @ Error::Forbidden { .. }) => return Err(e),
            Err(e) => {
                let lease = &self.config.lease;
                warn!(error = %e, %lease, "leader election: cannot read or write the Lease");
                self.config.retry_period()
            }
        };
        if self.leading {
            self.pause_or_resume();
        }
        Ok(Ok(next))
    }

    /// A leader's standing after a round, as its guard says now: acting (`Leader`), or paused
    /// since its guard closed (it has closed on time by itself; this reports it).
    fn pause_or_resume(&mut self) {
        let lease = &self.config.lease;
        if self.guard.may_act() {
            if let Some(since) = self.paused.take() {
                let paused_for = since.elapsed();
                info!(%lease, ?paused_for, "resumed: a renewal proved the Lease still this replica's");
            }
            self.metrics.leader.set(1);
            self.publish(Leadership::Leader);
        } else if self.paused.is_none() {
            self.paused = Some(Instant::now());
            self.metrics.leader.set(0);
            self.metrics.leader_pauses.inc();
            self.publish(Leadership::Paused);
            warn!(
                %lease, deadline = ?self.config.renew_deadline(),
                "paused: no renewal of the Lease stored within the deadline; acting stops until \
                 one proves the Lease still this replica's"
            );
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
        // A leader, paused or not, renews the Lease as its last write stored it: stored only if
        // nobody wrote it since.
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
            if self.leading {
                return Ok(Round::Gone("the Lease was deleted".into()));
            }
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
            // A leader renews only a Lease that names it: one released, or taken over and now
            // expired, had another term in between.
            Move::TakeOver if self.leading => {
                let holder = spec.holder_identity.as_deref().unwrap_or_default();
                let holder = if holder.is_empty() { "no one (released)" } else { holder };
                return Ok(Round::Gone(format!("the Lease is now held by {holder}")));
            }
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

    /// How long a request may take: an acting leader's, until its guard closes (then the round
    /// ends and the pause is told at once; a renewal answered later could not have kept the
    /// guard open, and one answered in time, however slowly, does: the deadline counts from
    /// the sending, so a slow answer never lengthens the term); a paused leader's, the renew
    /// deadline (a renewal answered later cannot open the guard); another replica's, a third
    /// of the lease duration.
    fn request_timeout(&self) -> Duration {
        match self.guard.open_for(Instant::now()) {
            Some(open) if self.leading && !open.is_zero() => open,
            _ if self.leading => self.config.renew_deadline(),
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
mod tests;
