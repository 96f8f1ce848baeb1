//! kube's client, built as kube builds it (the same TLS, timeouts, retries, authentication and
//! headers) but on connections with `TCP_NODELAY` set, as Go's client does on every connection.
//! Without it (hyper's default), the first request on a new connection could wait for the API
//! server's delayed ACK (40 ms on Linux) behind the TLS handshake's last message: the last
//! look's reads, sent at once, each on a connection of its own, were 40 ms late whenever a new
//! connection was needed.

use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};

/// A client for `config` whose connections send each write at once. A proxy in the
/// configuration is left to kube's own client builder.
pub fn client(config: kube::Config) -> Result<kube::Client, kube::Error> {
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config);
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let https = config.rustls_https_connector_with_connector(http)?;
    let mut connector = TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let http_client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .build::<_, kube::client::Body>(connector);
    let retry = config.default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace))
}
