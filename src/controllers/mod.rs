//! The controllers: the policy controller observes the [watch index](crate::index) and the
//! policy's [history](crate::core::history), asks the core what the policy
//! [decides](crate::core::decide()), hands that to the writer and keeps what it did in the
//! history; the rollout reporter tells about blocked rollouts whatever the policies say.

pub mod policy;
pub mod rollout_reporter;
