//! bcd-testkit: what the tests of every crate of the workspace share. It is a dev-dependency
//! only, knows nothing of bcd's types (the binaries' paths come from the caller), and depends
//! on std and serde alone.
//!
//! - [`peers`]: the one rule for a test whose real peer (podman, prometheus, virsh, ...) is
//!   missing, and for a condition no install can give (a real GPU, Landlock, root): skip on a
//!   developer's machine, fail under `CI` when `run-tests` should have installed the peer, and
//!   record every skip for `run-tests`' summary.
//! - [`pci`]: the fake PCI kernel, a sysfs tree whose driver binding a thread plays.
//! - [`hosts`]: the demo hosts, a copy a test may edit, a `bcd node` sandbox and the root
//!   helper's arguments for it.
//! - [`process`]: children killed at the end, bounded waits, free ports, record files.
//! - [`fake_smi`]: the stateful fake `nvidia-smi` and `nvidia-ctk` for MIG layouts, their
//!   state file and how a test installs them on a host's copy.

pub mod fake_smi;
pub mod hosts;
pub mod pci;
pub mod peers;
pub mod process;

pub use fake_smi::{calls, install_fake_smi, FakeSmiState};
pub use hosts::{copy_host, helper_args, hosts_dir, repo, NodeSandbox};
pub use pci::FakePciKernel;
pub use peers::{built, require, skip, with_private_run, Peer};
pub use process::{append_line, free_port, recorded, wait_for, wait_listening, Reaped};
