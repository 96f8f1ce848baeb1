//! Unit tests of the election: its decisions, its guard, and an elector against a mock Lease
//! API.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

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
        paused: None,
    }
}

#[tokio::test]
async fn a_leader_that_misses_its_renew_deadline_pauses_until_a_renewal_is_stored() {
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
    assert!(e.guard.may_act() && e.paused.is_none());

    // The deadline passes: paused, not lost; renewals go on every second.
    e.guard.open_until(Instant::now());
    assert_eq!(e.after(error()).expect("no error"), Ok(Duration::from_secs(1)));
    assert!(!e.guard.may_act() && e.metrics.leader.get() == 0);
    assert_eq!(*e.state.borrow(), Leadership::Paused);
    assert_eq!(e.metrics.leader_pauses.get(), 1);
    assert_eq!(e.after(error()).expect("no error"), Ok(Duration::from_secs(1)));
    assert_eq!(e.metrics.leader_pauses.get(), 1, "one pause, however many rounds");

    // A renewal stored (sent now): acting again until a deadline after its sending.
    e.after(Ok(Round::Leading { sent: Instant::now() })).expect("no error").expect("leads");
    assert!(e.guard.may_act() && e.paused.is_none() && e.metrics.leader.get() == 1);
    assert_eq!(*e.state.borrow(), Leadership::Leader);

    // A renewal stored, but answered after its own deadline: it opens nothing.
    let long_ago = Instant::now() - Duration::from_secs(11);
    e.after(Ok(Round::Leading { sent: long_ago })).expect("no error").expect("renews");
    assert!(!e.guard.may_act() && e.paused.is_some());
    assert_eq!(*e.state.borrow(), Leadership::Paused);
    assert_eq!(e.metrics.leader_pauses.get(), 2);

    // Another holder, or a Lease released or deleted, while paused: lost for good.
    let taken = Round::Following { holder: "other".into(), expires_in: Duration::from_secs(15) };
    assert!(matches!(e.after(Ok(taken)), Ok(Err(Ended::Lost(r))) if r.contains("other")));
    assert!(!e.guard.may_act() && e.metrics.leader.get() == 0);
    let mut e = elector();
    e.after(Ok(Round::Leading { sent: Instant::now() })).expect("no error").expect("leads");
    let gone = Round::Gone("the Lease was deleted".into());
    assert!(matches!(e.after(Ok(gone)), Ok(Err(Ended::Lost(r))) if r.contains("deleted")));
    assert!(!e.guard.may_act());

    // Another holder while acting: lost at once.
    let mut e = elector();
    e.after(Ok(Round::Leading { sent: Instant::now() })).expect("no error").expect("leads");
    let taken = Round::Following { holder: "other".into(), expires_in: Duration::from_secs(15) };
    assert!(matches!(e.after(Ok(taken)), Ok(Err(Ended::Lost(r))) if r.contains("other")));
    assert!(!e.guard.may_act());

    // A follower reads again at the instant the holder's Lease would expire.
    let mut e = elector();
    let soon = Round::Following { holder: "other".into(), expires_in: Duration::from_millis(300) };
    assert_eq!(e.after(Ok(soon)).expect("no error"), Ok(Duration::from_millis(300)));
    assert_eq!(*e.state.borrow(), Leadership::Follower { holder: "other".into() });
    assert!(!e.guard.may_act());
    // A missing permission is no reason to retry.
    let forbidden = Error::Forbidden { verb: "get", resource: "leases", message: "no".into() };
    assert!(e.after(Err(forbidden)).is_err());
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

/// A Lease API on a mock service, keeping one Lease with optimistic concurrency: a PUT whose
/// `resourceVersion` is not the stored one is refused with 409, a POST onto a stored Lease too.
/// Each request is answered, and a write stored, when its delay has passed (the next of
/// `script`, else `delay`): a request its client gave up on is still stored then, as an API
/// server stores a write whose answer was lost.
#[derive(Default)]
struct LeaseServer {
    delay: AtomicU64,
    script: Mutex<VecDeque<u64>>,
    stored: Mutex<Option<Lease>>,
    counts: Mutex<BTreeMap<String, u32>>,
}

impl LeaseServer {
    fn new(delay_ms: u64) -> Arc<Self> {
        let server = LeaseServer::default();
        server.delay.store(delay_ms, Ordering::Relaxed);
        Arc::new(server)
    }

    fn client(self: &Arc<Self>) -> Client {
        type Req = http::Request<kube::client::Body>;
        type Resp = http::Response<kube::client::Body>;
        let (service, mut handle) = tower_test::mock::pair::<Req, Resp>();
        let server = self.clone();
        tokio::spawn(async move {
            while let Some((request, send)) = handle.next_request().await {
                let method = request.method().to_string();
                *server.counts.lock().expect("counts").entry(method.clone()).or_insert(0) += 1;
                let body = http_body_util::BodyExt::collect(request.into_body()).await;
                let body = body.map(|b| b.to_bytes()).unwrap_or_default();
                let delay = server.script.lock().expect("script").pop_front();
                let delay = delay.unwrap_or_else(|| server.delay.load(Ordering::Relaxed));
                let server = server.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                    let (code, lease) = server.answer(&method, &body);
                    let bytes = match lease {
                        Some(lease) => serde_json::to_vec(&lease).expect("json"),
                        None => serde_json::to_vec(&serde_json::json!({
                            "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "test", "code": code,
                            "reason": if code == 404 { "NotFound" } else { "Conflict" },
                        }))
                        .expect("json"),
                    };
                    let response = http::Response::builder()
                        .status(code)
                        .body(kube::client::Body::from(bytes))
                        .expect("response");
                    send.send_response(response);
                });
            }
        });
        Client::new(service, "default")
    }

    fn answer(&self, method: &str, body: &[u8]) -> (u16, Option<Lease>) {
        let mut stored = self.stored.lock().expect("the Lease");
        if method == "GET" {
            return match stored.clone() {
                Some(lease) => (200, Some(lease)),
                None => (404, None),
            };
        }
        let mut written: Lease = serde_json::from_slice(body).expect("a Lease");
        let current = stored.as_ref().map(|l| &l.metadata.resource_version);
        let refused = match method {
            "PUT" => current != Some(&written.metadata.resource_version),
            _ => current.is_some(),
        };
        if refused {
            return (409, None);
        }
        written.metadata.resource_version = Some(next_version(stored.as_ref()));
        *stored = Some(written.clone());
        (200, Some(written))
    }

    /// Another candidate's update, stored at once: it takes the Lease (client-go's takeover of
    /// a Lease unchanged for its duration), or it names a holder.
    fn write_holder(&self, holder: &str) {
        let mut stored = self.stored.lock().expect("the Lease");
        let version = next_version(stored.as_ref());
        let lease = stored.as_mut().expect("a Lease to take");
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(holder.to_string());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        lease.metadata.resource_version = Some(version);
    }

    fn spec(&self) -> LeaseSpec {
        let stored = self.stored.lock().expect("the Lease");
        stored.as_ref().and_then(|l| l.spec.clone()).unwrap_or_default()
    }

    fn count(&self, method: &str) -> u32 {
        self.counts.lock().expect("counts").get(method).copied().unwrap_or(0)
    }
}

fn next_version(lease: Option<&Lease>) -> String {
    let version = lease.and_then(|l| l.metadata.resource_version.as_deref());
    (version.and_then(|v| v.parse::<u64>().ok()).unwrap_or(0) + 1).to_string()
}

fn config(lease_duration: Duration) -> Config {
    Config { namespace: "ns".into(), lease: "l".into(), identity: "me".into(), lease_duration }
}

/// Starts an election on `server` and waits until it leads.
async fn leading(
    server: &Arc<LeaseServer>,
    lease_duration: Duration,
) -> (LeaderElection, Arc<Metrics>) {
    let metrics = Arc::new(Metrics::new());
    let election = LeaderElection::start(server.client(), config(lease_duration), metrics.clone());
    let mut state = election.subscribe();
    tokio::time::timeout(Duration::from_secs(10), state.wait_for(Leadership::is_leader))
        .await
        .expect("leads within 10 s")
        .expect("the election runs");
    (election, metrics)
}

#[tokio::test(start_paused = true)]
async fn a_leader_keeps_the_lease_while_each_answer_takes_a_third_of_its_deadline() {
    // A 4.5 s Lease: a 3 s deadline, renewals every 0.6 s. Once this replica leads, every
    // answer takes 1 s, a third of the deadline: a renewal as a read then a write, sent a
    // renew interval after the last was answered, would miss it.
    let server = LeaseServer::new(10);
    let (mut election, _) = leading(&server, Duration::from_millis(4_500)).await;
    let guard = election.guard();
    server.delay.store(1_000, Ordering::Relaxed);
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
    assert_eq!((server.count("GET"), server.count("POST")), (1, 1));
    assert!(server.count("PUT") >= 6, "{} renewals", server.count("PUT"));
    election.guard.close();
}

#[tokio::test(start_paused = true)]
async fn an_api_server_stalled_past_the_deadline_pauses_the_leader_and_its_answer_resumes_it() {
    // A 15 s Lease (10 s deadline). Once leading, every answer takes 25 s for 40 s: the
    // renewals time out at the deadline, and are stored when answered, late.
    let server = LeaseServer::new(10);
    let (mut election, metrics) = leading(&server, Duration::from_secs(15)).await;
    let (guard, mut state) = (election.guard(), election.subscribe());
    let stalled = Instant::now();
    server.delay.store(25_000, Ordering::Relaxed);
    let paused =
        tokio::time::timeout(Duration::from_secs(11), state.wait_for(|l| *l == Leadership::Paused));
    paused.await.expect("paused within the deadline").expect("the election runs");
    assert!(!guard.may_act() && metrics.leader.get() == 0);
    assert!(
        stalled.elapsed() >= Duration::from_secs(8),
        "paused {:?} after the stall",
        stalled.elapsed()
    );
    // Paused, it goes on renewing, and acts nowhere in the stall.
    while stalled.elapsed() < Duration::from_secs(40) {
        assert!(!guard.may_act(), "acting {:?} into the stall", stalled.elapsed());
        let ended = tokio::time::timeout(Duration::from_millis(100), election.ended()).await;
        assert!(ended.is_err(), "the election ended in the stall: {ended:?}");
    }
    // The API server answers again: the first renewal stored reopens the guard.
    server.delay.store(10, Ordering::Relaxed);
    let resumed =
        tokio::time::timeout(Duration::from_secs(30), state.wait_for(Leadership::is_leader));
    resumed.await.expect("resumed once the API server answers").expect("the election runs");
    assert!(guard.may_act() && metrics.leader.get() == 1);
    assert_eq!(metrics.leader_pauses.get(), 1);
    // The same term: the Lease names this replica, never changed hands.
    let spec = server.spec();
    assert_eq!(spec.holder_identity.as_deref(), Some("me"));
    assert_eq!(spec.lease_transitions, Some(0));
    election.guard.close();
}

#[tokio::test(start_paused = true)]
async fn a_paused_leader_whose_lease_was_taken_exits_and_never_acts_or_writes_it_again() {
    let server = LeaseServer::new(10);
    let (mut election, metrics) = leading(&server, Duration::from_secs(15)).await;
    let guard = election.guard();
    // Stalled: paused; another candidate takes the Lease over once it has not changed for its
    // duration.
    server.delay.store(25_000, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(16)).await;
    assert!(!guard.may_act());
    server.write_holder("rival");
    tokio::time::sleep(Duration::from_secs(14)).await;
    server.delay.store(10, Ordering::Relaxed);
    let ended = tokio::time::timeout(Duration::from_secs(30), election.ended()).await;
    let ended = ended.expect("the election ends once the API server answers");
    assert!(matches!(&ended, Ok(Ended::Lost(r)) if r.contains("rival")), "{ended:?}");
    assert!(!guard.may_act() && metrics.leader.get() == 0);
    // The renewals still in flight were refused: the Lease is the rival's.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(server.spec().holder_identity.as_deref(), Some("rival"));
}

#[tokio::test(start_paused = true)]
async fn a_leader_never_takes_its_lease_back_once_released_or_deleted() {
    for deleted in [false, true] {
        let server = LeaseServer::new(10);
        let (mut election, _) = leading(&server, Duration::from_secs(15)).await;
        let guard = election.guard();
        if deleted {
            *server.stored.lock().expect("the Lease") = None;
        } else {
            server.write_holder("");
        }
        let ended = tokio::time::timeout(Duration::from_secs(10), election.ended()).await;
        let ended = ended.expect("the election ends at the next renewal");
        assert!(matches!(ended, Ok(Ended::Lost(_))), "deleted={deleted}: {ended:?}");
        assert!(!guard.may_act());
        assert_eq!(server.count("POST"), 1, "deleted={deleted}: created again");
        let holder = server.spec().holder_identity;
        assert!(
            holder.as_deref().is_none_or(str::is_empty),
            "deleted={deleted}: held by {holder:?}"
        );
    }
}

/// A rival candidate as client-go's elector behaves, on the same Lease: it reads the Lease
/// every second, takes it over once it has seen it unchanged for its duration, then renews it
/// every 2 s. Reads and writes are stored at once.
struct Rival {
    seen: Option<(String, Instant)>,
    took: Option<Instant>,
    next: Instant,
}

impl Rival {
    /// One step at `now`; returns whether it has just taken the Lease over.
    fn step(&mut self, server: &LeaseServer, now: Instant, duration: Duration) -> bool {
        if now < self.next {
            return false;
        }
        if self.took.is_some() {
            self.next = now + Duration::from_secs(2);
            server.write_holder("rival");
            return false;
        }
        self.next = now + Duration::from_secs(1);
        let stored = server.stored.lock().expect("the Lease").clone();
        let Some(version) = stored.and_then(|l| l.metadata.resource_version) else {
            return false;
        };
        match &self.seen {
            Some((seen, since)) if *seen == version => {
                if now.duration_since(*since) < duration {
                    return false;
                }
                server.write_holder("rival");
                self.took = Some(now);
                true
            }
            _ => {
                self.seen = Some((version, now));
                false
            }
        }
    }
}

/// Runs one history: the leader's requests answered after `delays` (in order, then 10 ms) for
/// 150 s, then every answer within 10 ms for 40 s; with a rival if `rival`. Checks, every
/// 10 ms: the leader never acts once another term has begun; without one, its term never
/// ends and it acts again once the API server answers.
fn run_history(delays: Vec<u64>, rival: bool) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        let duration = Duration::from_secs(15);
        let server = LeaseServer::new(10);
        server.script.lock().expect("script").extend(delays);
        let metrics = Arc::new(Metrics::new());
        let mut election = LeaderElection::start(server.client(), config(duration), metrics);
        let (guard, state) = (election.guard(), election.subscribe());
        let started = Instant::now();
        let (horizon, end) = (Duration::from_secs(150), Duration::from_secs(190));
        let mut them = Rival { seen: None, took: None, next: started };
        let mut ended = None;
        while started.elapsed() < end {
            let now = Instant::now();
            if started.elapsed() >= horizon {
                server.script.lock().expect("script").clear();
            }
            if rival && them.step(&server, now, duration) && guard.may_act() {
                return Err(format!("taken over at {:?} while the leader acted", now - started));
            }
            if them.took.is_some() && guard.may_act() {
                let at = now - started;
                return Err(format!(
                    "acting at {at:?}, in the rival's term (from {:?})",
                    them.took
                ));
            }
            if ended.is_none()
                && let Ok(outcome) =
                    tokio::time::timeout(Duration::from_millis(10), election.ended()).await
            {
                ended = Some(outcome.map_err(|e| e.to_string())?);
            } else if ended.is_some() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let leadership = state.borrow().clone();
        match (them.took, ended) {
            (Some(_), Some(Ended::Lost(_))) => {}
            (Some(_), None) if leadership == (Leadership::Follower { holder: "rival".into() }) => {}
            (Some(_), outcome) => {
                return Err(format!("the rival holds the Lease: {outcome:?}, {leadership:?}"));
            }
            (None, Some(outcome)) => return Err(format!("the term ended alone: {outcome:?}")),
            (None, None) if guard.may_act() && server.spec().lease_transitions == Some(0) => {}
            (None, None) => {
                let spec = server.spec();
                return Err(format!("not acting again: {leadership:?}, the Lease {spec:?}"));
            }
        }
        election.guard.close();
        Ok(())
    })
}

/// A delay, in milliseconds: mostly quick or slow answers, then stalls past the renew
/// deadline and the lease duration, and requests never answered.
fn delay() -> impl proptest::strategy::Strategy<Value = u64> {
    use proptest::prelude::*;
    prop_oneof![
        4 => 0u64..500,
        3 => 500u64..12_000,
        2 => 12_000u64..40_000,
        1 => Just(600_000u64),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config { cases: 64, ..Default::default() })]

    /// Generated histories of a slow, stalling and silent API server, with and without a
    /// rival: the leader pauses, resumes only in its own term, and never acts in another's.
    #[test]
    fn in_generated_histories_a_leader_acts_only_in_its_own_term(
        delays in proptest::collection::vec(delay(), 0..60),
        rival in proptest::prelude::any::<bool>(),
    ) {
        run_history(delays, rival).map_err(proptest::test_runner::TestCaseError::fail)?;
    }
}

#[test]
fn identities_are_unique_per_process_start() {
    let (a, b) = (identity(Some("pod-0")), identity(Some("pod-0")));
    assert!(a.starts_with("pod-0-") && b.starts_with("pod-0-"), "{a} {b}");
    assert_ne!(a, b);
}
