//! bcd-testkit: what the tests of every crate of the workspace share. It is a dev-dependency
//! only, knows nothing of bcd's types, and depends on std alone.
//!
//! - [`peers`]: the one rule for a test whose real peer (podman, prometheus, virsh, ...) is
//!   missing, and for a condition no install can give (a real GPU, Landlock, root): skip on a
//!   developer's machine, fail under `CI` when `run-tests` should have installed the peer, and
//!   record every skip for `run-tests`' summary.

pub mod peers;

pub use peers::{built, require, skip, with_private_run, Peer};
