//! PLACEHOLDER, replaced at merge by the real module (written in another branch): capability
//! dropping, `no_new_privs` and Landlock. Only the agreed interface is here; it enforces
//! nothing and says so in its report.
#![allow(dead_code)] // the placeholder ignores what the real module uses

use std::path::PathBuf;

/// What the sandbox managed to apply.
#[derive(Debug, Default)]
pub struct SandboxReport {
    /// `"full"`, `"partial"` or `"none: reason"`.
    pub landlock: String,
    /// The capabilities kept.
    pub capabilities: Vec<String>,
}

/// What the operations touch.
#[derive(Debug, Clone, Default)]
pub struct SandboxPaths {
    /// Programs run.
    pub exec: Vec<PathBuf>,
    /// Read and written.
    pub read_write: Vec<PathBuf>,
    /// Read only.
    pub read: Vec<PathBuf>,
    /// Device nodes.
    pub devices: Vec<PathBuf>,
}

/// Placeholder: applies nothing.
pub fn enforce(_paths: &SandboxPaths) -> SandboxReport {
    SandboxReport::default()
}
