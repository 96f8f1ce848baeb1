//! The controllers: the policy controller reads the [watch index](crate::index), asks the core
//! what each policy decides and hands that to the writer; the rollout reporter tells about
//! blocked rollouts whatever the policies say.

pub mod memory;
pub mod policy;
pub mod rollout_reporter;
