//! The controllers: they watch the cluster, keep what the [adapters](crate::adapters) make of
//! it, and hand the core's decisions to the writer.

pub mod kinds;
pub mod memory;
pub mod policy;
pub mod rollouts;
pub mod state;
pub mod watch;
