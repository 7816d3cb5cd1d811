//! Reading GPUs through `nvidia-smi`: pure parsers, one per query, the tolerances every
//! driver branch needs, and (at the edges) the bounded child-process runner.

pub mod compute_cap;
pub mod hint;
pub mod list;
pub mod mig;
pub mod nvlink;
pub mod probe;
pub mod runner;
pub mod sampler;
pub mod samples;
pub mod snapshot;
mod text;
pub(crate) use text::{escape_control, escape_line};
pub mod topo;
pub mod value;
pub mod xml;
