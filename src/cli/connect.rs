//! kube's client, built as kube builds it (the same TLS, timeouts, retries, authentication and
//! headers) but speaking HTTP/2 where the API server offers it, as Go's client does, and on
//! connections with `TCP_NODELAY` set; the pods' watch alone on HTTP/1.1 ([`Purpose`]).
//!
//! - HTTP/2 (offered by ALPN beside HTTP/1.1): every request of a client shares one connection
//!   (on HTTP/1.1 each open watch and each of the last look's parallel reads held one of its
//!   own; the reads now leave at once, though the time to remediation measured no faster: the
//!   API server's answers dominate it). A shared connection has one more way to fail: a
//!   half-open connection would take every request with it, new ones too (they would be sent on
//!   it). So the connection is
//!   pinged every [`PING_EVERY`], idle or not, and closed when a ping is not answered within
//!   [`PING_TIMEOUT`]: its requests fail, and the next ones open a new connection.
//! - Flow-control windows of our choosing: what the API server may send ahead of our reading is
//!   held in our memory, not the kernel's socket buffer as on HTTP/1.1. The watches' client gets
//!   client-go's 4 MiB a stream, the writer's a sixteenth of it.
//! - The pods' watch on HTTP/1.1, on a connection of its own ([`Purpose::PodsWatch`]): its
//!   streamed list is the one long read (150,000 pods at tier L), and the API server writes a
//!   stream slower over HTTP/2 (at 30,000 pods of 16.7 KB, curl read the list in 22.5 s over
//!   HTTP/1.1 and 30.5 s over HTTP/2; our process, every read on HTTP/1.1, was ready in 32.8 s
//!   against 39.5, on about a tenth less CPU). What that connection gives up is the pings: a
//!   silent one is noticed after [`PODS_WATCH_SILENCE`] without a byte instead (the API server
//!   sends a watch a bookmark about every minute).
//! - `TCP_NODELAY`: without it (hyper's default), the first request on a new connection could
//!   wait for the API server's delayed ACK (40 ms on Linux) behind the TLS handshake's last
//!   message.

use std::time::Duration;

use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::timeout::TimeoutLayer;
use tower::{BoxError, ServiceBuilder};

/// How often an HTTP/2 connection is pinged, idle or not: more often than a request client's
/// read timeout (`--request-timeout`, 10 s by default), so an idle connection is not closed by it.
const PING_EVERY: Duration = Duration::from_secs(5);
/// How long a ping may go unanswered before its connection is closed as dead.
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the pods' watch connection may go without a byte before its watch fails and is
/// replaced (resumed from the last version it saw, no list). The API server's watch cache sends
/// every watch a bookmark about every minute, even when nothing changes (Kubernetes 1.33 to
/// 1.37), and a streamed list sends objects as fast as it can: 90 s of silence is a connection
/// or an API server gone silent, which HTTP/2's pings would have caught within 15 s.
pub const PODS_WATCH_SILENCE: Duration = Duration::from_secs(90);

/// What a client is for, which decides how it talks to the API server: HTTP/2 with flow-control
/// windows sized for it (what the API server may send on a connection before we read it, on
/// each stream, one request's answer, and on all of them together), or HTTP/1.1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Lists and every watch but the pods': 4 MiB a stream (client-go's), 8 MiB a connection,
    /// so that a stream that fills its window leaves as much to the others. At 5,000 nodes and
    /// 150,000 pods, 256 KiB a stream made the pods' streamed list slower than the Go peers'
    /// (34.7 s against 26.2 with 2 MiB, on one cluster; 195 s against 82 on a loaded one, where
    /// the API server closed the watch as too slow to read and its version expired before the
    /// end, so every pod was listed twice). Bounded, unlike hyper's adaptive window (up to 16
    /// MiB a stream, never shrunk).
    Reads,
    /// The operator's pods' watch alone: HTTP/1.1, its connection its own (the kernel's socket
    /// buffer its window), failed after [`PODS_WATCH_SILENCE`] without a byte.
    PodsWatch,
    /// For single objects (the writer's fresh reads and writes): 256 KiB a stream, 1 MiB a
    /// connection.
    Requests,
}

impl Purpose {
    /// The stream's window and the connection's, in bytes, on HTTP/2.
    fn windows(self) -> (u32, u32) {
        match self {
            Purpose::Reads | Purpose::PodsWatch => (4 << 20, 8 << 20),
            Purpose::Requests => (256 << 10, 1 << 20),
        }
    }
}

/// A client for `config` and `purpose`, whose connections send each write at once: on HTTP/2
/// where offered, but for [`Purpose::PodsWatch`]. A proxy in the configuration is left to
/// kube's own client builder.
pub fn client(mut config: kube::Config, purpose: Purpose) -> Result<kube::Client, kube::Error> {
    let (stream_window, connection_window) = purpose.windows();
    if purpose == Purpose::PodsWatch {
        // A silent connection fails the watch's read; the timer restarts at each byte read,
        // and when a request is written (a pooled connection's idle time is not the next
        // watch's).
        config.read_timeout = Some(PODS_WATCH_SILENCE);
        config.reset_reader_on_write = true;
    }
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let mut tls = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(|e| kube::Error::Service(format!("tls-server-name {name:?}: {e}").into()))?;
        tls = tls.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let https = match purpose {
        Purpose::PodsWatch => tls.enable_http1().wrap_connector(http),
        Purpose::Reads | Purpose::Requests => {
            tls.enable_http1().enable_http2().wrap_connector(http)
        }
    };
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_EVERY)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .http2_keep_alive_while_idle(true)
        .http2_initial_stream_window_size(stream_window)
        .http2_initial_connection_window_size(connection_window)
        .build::<_, kube::client::Body>(connector);
    let retry = config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry()));
    // On a shared HTTP/2 connection the read timeout no longer bounds one request (every ping
    // written restarts it): each request gives up on its own after it, counted from when it is
    // sent, until its answer's head arrives; a body that stops is the read timeout's and the
    // pings' to end.
    let timeout = config.read_timeout.map(TimeoutLayer::new);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(timeout)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_request(crate::index::protobuf::ask_protobuf)
        .map_response(crate::index::protobuf::to_json)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace))
}
