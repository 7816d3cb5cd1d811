//! The node service, `bcd node`: it keeps the latest inventory, the GPUs' conditions and the
//! holds, collects on the scheduler's rules, watches XIDs, samples the GPUs for metrics, and
//! answers the API on a Unix socket; it applies MIG layouts (`mig_step`) and keeps NVIDIA's CDI
//! spec current (`nvidia_cdi`).

pub mod api;
pub(crate) mod attribution;
pub mod client;
pub mod http;
pub(crate) mod instance;
pub(crate) mod listen;
pub(crate) mod metrics;
pub mod mig_step;
pub(crate) mod notify;
pub(crate) mod nvidia_cdi;
pub(crate) mod open;
pub(crate) mod otlp;
pub(crate) mod readings;
pub(crate) mod remediate;
pub(crate) mod schema;
pub(crate) mod service;
pub mod shared;
pub(crate) mod vms;
pub(crate) mod watch;
