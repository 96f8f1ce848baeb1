//! kube-remediator heals what Kubernetes leaves stuck when a kubelet stops answering.
//!
//! Layout (observe, decide, act):
//! - [`core`]: the pure decision core. No client, no async, no clock: `now` is a parameter.
//! - [`crd`]: the `RemediationPolicy` custom resource types and their generated CRD.
//! - [`adapters`]: turn Kubernetes objects into the core's views.
//! - [`controllers`]: watch the cluster, keep the compact state, run the policy controller.
//! - [`writer`]: the only module that writes to the API server; DryRun records instead.
//! - [`safety`]: the safety kernel every pod and node write passes right before it is sent.
//! - [`leader`]: leader election on a Lease; only the leader acts.
//! - [`clock`]: the operator's own clock, by which all evidence is timed.
//! - [`cli`]: command-line entry points.
//! - [`telemetry`]: logging set-up.
//! - [`error`]: the crate's one error type.

pub mod adapters;
pub mod cli;
pub mod clock;
pub mod controllers;
pub mod core;
pub mod crd;
pub mod error;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod safety;
pub mod telemetry;
pub mod writer;

pub use error::{Error, Result};
