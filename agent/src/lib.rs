//! bcd, the unprivileged agent: it reads a node's NVIDIA GPUs through `nvidia-smi`, keeps their
//! inventory, watches their health and hands them to containers and VMs.
//!
//! It never runs a privileged step itself: those go to `bcd-helper` over the typed protocol of
//! `bcd-protocol`. Everything it parses (nvidia-smi output, procfs, sysfs, the kernel log) is
//! untrusted input and is read by pure parsers that return errors, never panic.

pub mod cdi;
pub mod cli;
pub mod commands;
pub mod device;
pub mod doctor;
pub mod document;
pub mod dra;
pub mod health;
pub mod helper_client;
pub mod inventory;
pub mod kubelet;
pub mod labels;
pub mod mig;
pub mod node;
pub mod plugin_socket;
pub(crate) mod prometheus;
pub mod recovery;
pub mod runtime;
pub mod smi;
pub mod source;
pub(crate) mod state;
pub mod sys;
pub mod term;
#[cfg(test)]
mod test_log;
pub(crate) mod utc;
