//! `bcd doctor`: the checks an operator runs before trusting a GPU node, one line each.
//!
//! Doctor gathers facts at the edges (one `nvidia-smi` probe, one full snapshot through the
//! inventory collector, procfs, sysfs, `/dev`, `systemctl`, this boot's `faults.json`, the
//! helper's socket) and turns them into [`Check`]s with the pure functions of [`checks`]; each
//! GPU's line is its verdict ([`crate::health::verdict::judge`]), the one `bcd status` and
//! `bcd diag` print. Every message says what is wrong and what to do, in one line. Nothing
//! here changes the host: doctor only reads, asks `systemctl is-active` and pings the helper.
//!
//! Under WSL 2 (`/dev/dxg` without `/dev/nvidiactl`) the host checks after `gpu-host` are
//! skipped: there is no PCI function, kernel module, kernel log or privileged step to check.

pub mod checks;
pub(crate) mod gather;
pub(crate) mod helper;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::health::verdict::{judge, Evidence};
use crate::health::xid::XidPolicy;
use crate::helper_client::{Helper, SocketHelper};
use crate::inventory::collect::collect_with;
use crate::smi::runner::{Runner, QUERY_TIMEOUT};
use crate::smi::snapshot::probe;
use crate::sys::host::Host;

pub use helper::{ping, PingError, PING_TIMEOUT};

/// A check's verdict. Serialised and printed as exactly `ok`, `warn` or `fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// The node works, but something an operator should fix or know.
    Warn,
    /// The node should not be trusted with GPU work until this is fixed.
    Fail,
}

impl Status {
    /// The word printed: `ok`, `warn`, `fail`.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.word())
    }
}

/// One line of doctor's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The verdict.
    pub status: Status,
    /// The check's name (`nvml`, `gpu-bus`, ...; see [`checks::name`]).
    pub name: String,
    /// What was found and, unless the status is `ok`, what to do; always one line.
    pub message: String,
}

impl Check {
    /// A check; the message is folded onto one line (whitespace runs, newlines included,
    /// become one space) and trimmed, since `nvidia-smi` errors span lines.
    pub fn new(status: Status, name: &str, message: impl AsRef<str>) -> Self {
        Self {
            status,
            name: name.to_owned(),
            message: one_line(message.as_ref()),
        }
    }
}

/// One line, its control characters escaped: messages carry what `nvidia-smi` and other
/// programs printed, and are shown on a terminal.
fn one_line(text: &str) -> String {
    crate::smi::escape_control(&text.split_whitespace().collect::<Vec<_>>().join(" ")).into_owned()
}

/// Everything doctor found, in the order it checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether no check failed (warnings pass).
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }

    /// The checks named `name`, in order.
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Check> + 'a {
        self.checks.iter().filter(move |c| c.name == name)
    }

    /// One line per check: status, name, message, in aligned columns.
    pub fn render_text(&self) -> String {
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        self.checks
            .iter()
            .map(|c| format!("{:<4} {:<width$} {}\n", c.status.word(), c.name, c.message))
            .collect()
    }
}

/// Where doctor looks and how long it waits. Tests point every field at fakes.
#[derive(Debug, Clone)]
pub struct DoctorEnv {
    /// The host: `/proc`, `/sys`, `/dev` and the `nvidia-smi` to run.
    pub host: Host,
    /// The data folder whose `faults.json` holds this boot's XIDs for the `gpu` lines'
    /// verdict; `None`: no XIDs are read.
    pub data_dir: Option<PathBuf>,
    /// The node's overrides of the XID catalog, for the verdict.
    pub xid_policy: XidPolicy,
    /// The bound on each `nvidia-smi` query (the probe and every query of the snapshot). A
    /// wedged GPU hangs `nvidia-smi`; the default is the reader's 30 s.
    pub query_timeout: Duration,
    /// How the helper is reached for the `helper` and `gpu-binding` checks.
    pub helper: Arc<dyn Helper>,
    /// The bound on the whole ping.
    pub ping_timeout: Duration,
}

impl DoctorEnv {
    /// The defaults: no data folder, the catalog as it is, the
    /// reader's query bound, and the helper at `helper_socket` pinged within [`PING_TIMEOUT`].
    pub fn new(host: Host, helper_socket: impl Into<PathBuf>) -> Self {
        Self {
            host,
            data_dir: None,
            xid_policy: XidPolicy::default(),
            query_timeout: QUERY_TIMEOUT,
            helper: Arc::new(SocketHelper::new(helper_socket)),
            ping_timeout: PING_TIMEOUT,
        }
    }
}

/// Runs every check. Never fails: what cannot be read becomes a check's message.
pub async fn run(env: &DoctorEnv) -> Report {
    let host = &env.host;
    let runner = Runner::new(host.nvidia_smi()).with_timeout(env.query_timeout);
    let wsl = gather::is_paravirtual_gpu(host);
    // The helper is pinged while nvidia-smi works: both are bounded, neither waits on the other.
    let ping = async {
        if wsl {
            None
        } else {
            Some(ping(env.helper.as_ref(), env.ping_timeout).await)
        }
    };
    let (probed, collection, ping) =
        tokio::join!(probe(&runner), collect_with(host, None, &runner), ping);

    let pci = crate::sys::pci::functions(host);
    // Asked once, of the host's systemctl: the same answer makes the fabric-manager line and
    // the GPUs' verdict.
    let fabric = crate::sys::systemd::fabric_manager(host).await;
    let xids = env.data_dir.as_deref().map(|dir| {
        crate::health::faults::read_boot_id(host)
            .and_then(|boot| crate::health::faults::read_with_history(dir, &boot))
    });
    let (conditions, history) = match &xids {
        Some(Ok((c, h))) => (c.as_slice(), h.as_slice()),
        _ => (&[][..], &[][..]),
    };

    let mut report = Report::default();
    let out = &mut report.checks;
    out.push(checks::nvml(&probed));
    out.push(checks::hardware(&collection));
    let xml = collection.snapshot.as_ref().map(|s| &s.xml);
    let no_driver = collection
        .snapshot_error
        .as_ref()
        .is_some_and(|e| e.is_no_driver());
    if !no_driver {
        let inventory = &collection.inventory;
        let driver = xml.map(crate::health::status::driver_readings);
        let silent = collection.snapshot_error.as_ref().map(ToString::to_string);
        let links = crate::health::pcie::link_widths(host, inventory);
        let evidence = Evidence::new(conditions)
            .with_board(&inventory.gpu.gpus)
            .with_history(history)
            .with_policy(&env.xid_policy)
            .with_driver(driver.as_ref(), silent.as_deref())
            .with_fabric_manager_down(fabric.down())
            .with_links(&links);
        let mut gpus: Vec<_> = inventory
            .gpu
            .gpus
            .iter()
            .filter(|g| !g.passed_through)
            .collect();
        gpus.sort_by_key(|g| g.index);
        for g in gpus {
            let reported = xml.and_then(|x| {
                x.gpus.iter().find(|x| {
                    x.uuid
                        .as_deref()
                        .and_then(|u| u.parse::<bcd_protocol::GpuUuid>().ok())
                        .is_some_and(|u| u == g.uuid)
                })
            });
            out.push(checks::gpu(g, reported, &judge(g, &evidence)));
        }
    }
    if let Some(xml) = xml {
        out.extend(checks::mig_mode(&xml.gpus));
    }
    out.extend(checks::gpus(collection.snapshot_error.as_ref()));
    if wsl {
        out.push(checks::gpu_host());
        return report;
    }
    out.push(checks::nouveau(
        std::fs::read_to_string(host.path("/proc/modules")).as_deref(),
    ));
    let seen = checks::SmiView::of(&collection);
    out.push(checks::gpu_bus(&pci, seen));
    if let Some(xml) = xml {
        out.extend(checks::persistence(&xml.gpus));
    }
    if let Some(state) = &fabric.state {
        out.push(checks::fabric_manager(fabric.switches, state));
    }
    let mig_capable = collection
        .inventory
        .gpu
        .gpus
        .iter()
        .any(|g| g.mig.as_ref().is_some_and(|m| m.mode.is_some()));
    if mig_capable {
        let systemctl = host.systemctl();
        let (manager, refresh) = tokio::join!(
            crate::sys::systemd::is_active(systemctl, checks::MIG_MANAGER_UNIT),
            crate::sys::systemd::is_active(systemctl, checks::CDI_REFRESH_UNIT)
        );
        out.extend(checks::mig_layouts(&manager));
        let ctk = host.nvidia_smi().with_file_name("nvidia-ctk");
        let ctk = if host.nvidia_smi().is_absolute() {
            ctk
        } else {
            std::path::PathBuf::from("/usr/bin/nvidia-ctk")
        };
        out.push(checks::nvidia_cdi(
            ctk.exists().then_some(ctk.as_path()),
            &refresh,
        ));
    }
    let module_version = std::fs::read_to_string(host.path("/proc/driver/nvidia/version"))
        .ok()
        .and_then(|t| crate::inventory::procfs::parse_module_version(&t));
    let smi_version = xml
        .and_then(|x| x.driver_version.clone())
        .or_else(|| probed.as_ref().ok().map(|p| p.driver_version.clone()));
    out.extend(checks::driver_version(
        module_version.as_deref(),
        smi_version.as_deref(),
    ));
    out.push(checks::kmsg(
        gather::open_kmsg(host),
        gather::dmesg_restrict(host),
    ));
    if let Some(Err(e)) = &xids {
        out.push(checks::xid_record(e));
    }
    if let Some(ping) = ping {
        let location = env.helper.socket().display().to_string();
        out.push(checks::helper(&location, &ping));
        let gpus = checks::gpu_count(&pci, seen);
        out.extend(checks::gpu_binding(gpus, &ping));
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_status_words_exact() {
        let c = Check::new(Status::Fail, "gpus", "  a\nb\t c \n");
        assert_eq!(c.message, "a b c");
        // nvidia-smi's raw ESC bytes reached doctor's terminal output.
        let c = Check::new(
            Status::Fail,
            "nvml",
            "nvidia-smi: \u{1b}[31mfailed\u{1b}[0m",
        );
        assert_eq!(c.message, "nvidia-smi: \\x1b[31mfailed\\x1b[0m");
        assert_eq!(
            [Status::Ok, Status::Warn, Status::Fail].map(Status::word),
            ["ok", "warn", "fail"]
        );
    }

    #[test]
    fn report_renders_text_and_json() {
        let report = Report {
            checks: vec![
                Check::new(Status::Ok, "nvml", "driver 1.2, 1 GPUs"),
                Check::new(Status::Warn, "gpu-bus", "x"),
            ],
        };
        assert!(report.passed());
        assert_eq!(
            report.render_text(),
            "ok   nvml    driver 1.2, 1 GPUs\nwarn gpu-bus x\n"
        );
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["checks"][1]["status"], "warn");
        assert_eq!(v["checks"][0]["name"], "nvml");
        assert_eq!(v["checks"][0]["message"], "driver 1.2, 1 GPUs");
        let failing = Report {
            checks: vec![Check::new(Status::Fail, "nouveau", "x")],
        };
        assert!(!failing.passed());
    }
}
