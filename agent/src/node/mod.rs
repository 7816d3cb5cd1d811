//! The node service, `bcd node`: it keeps the latest inventory, the GPUs' conditions and the
//! holds, collects on the scheduler's rules, watches XIDs, samples the GPUs for metrics, and
//! answers the API on a Unix socket.

pub mod api;
pub mod attribution;
pub mod client;
pub mod http;
pub mod instance;
pub mod listen;
pub mod metrics;
pub mod notify;
pub mod open;
pub mod otlp;
pub mod readings;
pub mod schema;
pub mod service;
pub mod shared;
pub mod vms;
pub mod watch;
