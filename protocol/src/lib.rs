//! The protocol between `bcd` (the unprivileged agent) and `bcd-helper` (the root helper).
//!
//! Everything that crosses the trust boundary is defined here: the frames, the operations and
//! their validated argument types, and the typed errors. A value of an argument type
//! ([`GpuUuid`], [`GpuRef`], [`PciAddress`], [`DomainName`], [`SaveFile`],
//! [`MigProfileIds`]) can only be built by
//! parsing, and decoding runs the same parser, so the helper never holds an argument that has
//! not been checked. The codec lives in [`frame`] alone. Beside it, [`time`] is the one UTC
//! calendar both binaries write dates with (pure, no clock read).
//!
//! This crate must never grow I/O beyond reading and writing frames, and never accept a path,
//! a command line or free text that the helper would act on.

pub mod frame;
mod message;
pub mod time;
mod types;

pub use message::{
    ClientFrame, HelloAnswer, HelperError, Operation, OperationKind, Outcome, PersistenceNote,
    Request, Response, ServerFrame, PROTOCOL_VERSION,
};
pub use types::{
    DomainName, GpuRef, GpuUuid, InvalidArgument, MigProfileIds, PciAddress, SaveFile,
    MAX_MIG_PROFILES, MAX_MIG_PROFILE_ID,
};
