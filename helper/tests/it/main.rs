//! bcd-helper's integration tests, one binary: each module was a test file of its own, and
//! starts the real `bcd-helper` on a socket in a temporary folder (see `common`).
//!
//! No test here changes the process's environment, working directory, umask or signal
//! dispositions; a test that needs another uid or a limit runs this binary (or the helper) as
//! a child and changes it there.

mod common;

mod frames;
mod hostile;
mod libvirt;
mod ops;
mod server;
