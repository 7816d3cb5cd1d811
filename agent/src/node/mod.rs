//! The node service, `bcd node`: it keeps the latest inventory, the GPUs' conditions and the
//! holds, collects on the scheduler's rules, watches XIDs, and answers the API on a Unix socket.

pub mod http;
