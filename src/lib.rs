//! kube-remediator heals what Kubernetes leaves stuck when a kubelet stops answering.
//!
//! Layout (observe, decide, act):
//! - [`core`]: the pure decision core. No client, no async, no clock: `now` is a parameter.
//! - [`crd`]: the `RemediationPolicy` custom resource types and their generated CRD.
//! - [`controllers`]: watch the cluster and turn objects into observations.
//! - [`leader`]: leader election on a Lease; only the leader acts.
//! - [`clock`]: the operator's own clock, by which all evidence is timed.
//! - [`cli`]: command-line entry points.
//! - [`telemetry`]: logging set-up.
//! - [`error`]: the crate's one error type.

pub mod cli;
pub mod clock;
pub mod controllers;
pub mod core;
pub mod crd;
pub mod error;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod telemetry;
pub mod writer;

pub use error::{Error, Result};
