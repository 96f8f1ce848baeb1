//! The watch index: one watch per kind the operator reads ([`kinds`]), the watch loops that
//! feed it ([`watches`]), and the compact cluster state they keep ([`state`]), which the
//! [adapters](crate::adapters) turn into the core's views. The policy controller, `plan`,
//! `explain` and the rollout reporter all read it; nothing here decides or writes.

pub mod intern;
pub mod kinds;
pub mod protobuf;
pub mod state;
pub mod watches;
