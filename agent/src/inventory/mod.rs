//! The inventory: what procfs and sysfs say about the GPUs, merged with what `nvidia-smi`
//! says, in a canonical form with a stable hash; and the memory of GPUs passed through to VMs.

pub(crate) mod arch;
pub mod collect;
pub mod document;
pub mod memory;
pub mod merge;
pub mod procfs;
pub(crate) mod scheduler;
pub mod select;
