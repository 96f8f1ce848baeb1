//! kube-remediator heals what Kubernetes leaves stuck when a kubelet stops answering.
//!
//! Layout (observe, decide, act):
//! - [`core`]: the pure decision core. No client, no async, no clock: `now` is a parameter.
//! - [`crd`]: the `RemediationPolicy` custom resource types and their generated CRD.
//! - [`adapters`]: turn Kubernetes objects into the core's views.
//! - [`index`]: the watch index: one watch per kind, kept as a compact cluster state.
//! - [`controllers`]: the policy controller and the blocked-rollout reporter.
//! - [`writer`]: the only module that writes to the API server; DryRun records instead.
//! - [`safety`]: the safety kernel every pod and node write passes right before it is sent.
//! - [`leader`]: leader election on a Lease; only the leader acts.
//! - [`server`]: what the API server can do: its version and the features the operator uses.
//! - [`clock`]: the operator's own clock, by which all evidence is timed.
//! - [`operator`]: the operator's wiring: watches, election, controller, probes.
//! - [`cli`]: command-line entry points; they parse arguments and call the rest.
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
pub mod index;
pub mod leader;
pub mod metrics;
pub mod operator;
pub mod safety;
pub mod server;
pub mod telemetry;
pub mod writer;

#[cfg(test)]
mod safety_histories;

pub use error::{Error, Result};
