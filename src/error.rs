//! The crate's error type: one variant per operation that failed, carrying its context.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelValue;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can fail in kube-remediator, named after the operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Loading a kubeconfig or in-cluster configuration failed.
    #[error("cannot load Kubernetes client configuration: {0}")]
    LoadConfig(#[source] Box<dyn std::error::Error + Send + Sync>),

    /// Building the HTTP client from the configuration failed.
    #[error("cannot build Kubernetes client: {0}")]
    BuildClient(#[source] kube::Error),

    /// Reading the API server's version failed.
    #[error("cannot read the API server version: {0}")]
    ReadServerVersion(#[source] kube::Error),

    /// Listing objects of a kind failed.
    #[error("cannot list {kind}: {source}")]
    List {
        kind: &'static str,
        #[source]
        source: kube::Error,
    },

    /// The RemediationPolicy CRD is not installed in the cluster.
    #[error(
        "the RemediationPolicy CRD (remediationpolicies.remediator.io) is not installed: apply deploy/crd.yaml or install the Helm chart"
    )]
    CrdMissing,

    /// The operator's identity lacks a permission it needs.
    #[error(
        "permission denied to {verb} {resource}: {message} (see the ClusterRole in deploy/ or the chart)"
    )]
    Forbidden { verb: &'static str, resource: &'static str, message: String },

    /// Reading one object failed.
    #[error("cannot read {kind} {name}: {source}")]
    Get {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },

    /// Deleting a pod failed.
    #[error("cannot delete pod {namespace}/{name}: {source}")]
    DeletePod {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },

    /// Writing a policy's status failed.
    #[error("cannot update the status of RemediationPolicy {name}: {source}")]
    PatchStatus {
        name: String,
        #[source]
        source: kube::Error,
    },

    /// Serving HTTP (metrics and probes) failed.
    #[error("cannot serve HTTP on {addr}: {source}")]
    Serve {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },

    /// Reading or writing the leader-election Lease failed.
    #[error("cannot {verb} the leader Lease {name}: {source}")]
    LeaderLease {
        verb: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },

    /// A mutation was refused because this replica does not hold the leader Lease.
    #[error("not the leader: refused to {operation}")]
    NotLeader { operation: &'static str },

    /// A request did not answer within its deadline.
    #[error("{operation} timed out after {timeout:?}")]
    Timeout { operation: &'static str, timeout: Duration },
}

impl Error {
    /// A short, bounded label for metrics and Event reasons.
    pub fn category(&self) -> ErrorCategory {
        match self {
            Error::LoadConfig(_) | Error::BuildClient(_) => ErrorCategory::Config,
            Error::ReadServerVersion(_) | Error::List { .. } | Error::Get { .. } => {
                ErrorCategory::ApiRead
            }
            Error::CrdMissing => ErrorCategory::CrdMissing,
            Error::Forbidden { .. } => ErrorCategory::Forbidden,
            Error::DeletePod { .. } => ErrorCategory::DeletePod,
            Error::PatchStatus { .. } => ErrorCategory::PatchStatus,
            Error::Serve { .. } => ErrorCategory::Serve,
            Error::LeaderLease { .. } => ErrorCategory::LeaderElection,
            Error::NotLeader { .. } => ErrorCategory::NotLeader,
            Error::Timeout { .. } => ErrorCategory::Timeout,
        }
    }

    /// Whether retrying later may succeed (network trouble, server overload, timeouts).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::LoadConfig(_)
            | Error::BuildClient(_)
            | Error::CrdMissing
            | Error::Forbidden { .. }
            | Error::Serve { .. }
            | Error::NotLeader { .. } => false,
            Error::ReadServerVersion(e)
            | Error::List { source: e, .. }
            | Error::Get { source: e, .. }
            | Error::DeletePod { source: e, .. }
            | Error::PatchStatus { source: e, .. }
            | Error::LeaderLease { source: e, .. } => kube_error_is_transient(e),
            Error::Timeout { .. } => true,
        }
    }
}

/// Server errors (5xx), throttling (429) and transport failures are worth retrying;
/// client errors such as Forbidden or NotFound are not.
fn kube_error_is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code >= 500 || status.code == 429,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// What kind of operation failed: the metrics label and the Event reason of an error.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    strum::IntoStaticStr,
    strum::Display,
    strum::EnumIter,
    EncodeLabelValue,
)]
pub enum ErrorCategory {
    Config,
    ApiRead,
    CrdMissing,
    Forbidden,
    DeletePod,
    PatchStatus,
    Serve,
    LeaderElection,
    NotLeader,
    Timeout,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_transient_config_errors_are_not() {
        let timeout = Error::Timeout { operation: "list nodes", timeout: Duration::from_secs(1) };
        assert!(timeout.is_transient());
        assert_eq!(timeout.category(), ErrorCategory::Timeout);
        assert_eq!(timeout.category().to_string(), "Timeout");
        let config = Error::LoadConfig("no kubeconfig".into());
        assert!(!config.is_transient());
        assert_eq!(config.category(), ErrorCategory::Config);
    }
}
