//! The pure decision core: plain data in, decisions out.
//!
//! Nothing here talks to the API server, reads the clock or the environment: `now` is always a
//! parameter, so every function is deterministic and tested with tables.

pub mod node;

pub use node::{NodeHealth, NodeObservation, Readiness, assess_node};
