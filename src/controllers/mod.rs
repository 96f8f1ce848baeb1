//! The controllers: they watch the cluster, turn objects into the core's observations, and hand
//! the core's decisions to the writer.

pub mod observe;
pub mod policy;
pub mod rollouts;
pub mod state;
pub mod watch;
