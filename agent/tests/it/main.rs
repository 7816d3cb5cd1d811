//! bcd's integration tests, one binary: each module was a test file of its own, and runs the
//! `bcd` (and `bcd-helper`) binaries or the library against demo hosts, real captures and real
//! peers (`bcd_testkit` says which peers a test needs and skips or fails when one is missing).
//!
//! One binary links the crate once. What separate binaries used to hide is shared now: no test
//! here changes the process's environment, working directory, umask or signal dispositions,
//! or installs a global tracing subscriber (`tracing::subscriber::with_default` is per thread);
//! a test that needs such a change runs this binary again as a child (`--exact` with the
//! module path) and changes it there.

mod common;

mod cdi_specs;
mod deb;
mod demo;
mod device_plugins;
mod docs;
mod doctor;
mod doctor_real_nvidia_smi;
mod dra;
mod env_settings;
mod exit_codes;
mod fake_hosts;
mod health_cli;
mod helper_ping;
mod holds_and_runtimes;
mod inventory_hosts;
mod layers;
mod loop_sampler;
mod mig_layouts;
mod nfd_labels;
mod node_e2e;
mod node_limits;
mod node_logs;
mod node_watch;
mod otlp_export;
mod passthrough;
mod prometheus;
mod qx_never_panics;
mod real_captures;
mod real_qx;
mod recovery;
mod smi_never_panics;
mod snapshot;
mod units;
