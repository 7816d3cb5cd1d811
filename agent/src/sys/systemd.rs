//! Asking systemd whether a unit runs, without root: `systemctl is-active UNIT`, and the one
//! fact every command asks it for, whether NVIDIA's fabric manager serves the board's
//! NVSwitches ([`fabric_manager`]). The `systemctl` asked is the host's ([`Host::systemctl`]):
//! a demo host's own `bin/systemctl`, so `bcd doctor --host X` and `bcd status --host X`
//! ask the same one.
//!
//! `is-active` only reads a unit's state, which systemd's D-Bus policy lets any user do (root
//! goes through systemd's private socket instead), so doctor needs no privilege and no D-Bus
//! library for it. The call runs through [`crate::sys::child`]: bounded by [`SYSTEMCTL_TIMEOUT`],
//! its process group killed past it. When `systemctl` is missing, fails without naming a state (no systemd as
//! PID 1, no bus) or does not answer, the state is [`UnitState::Unknown`] with the reason:
//! doctor then says it could not tell rather than guessing.

use std::path::Path;
use std::time::Duration;

use super::child;
use super::host::Host;

/// The bound on one `systemctl` call.
pub const SYSTEMCTL_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of each of `systemctl`'s outputs kept: a state word, or a sentence why not.
const MAX_SAID: usize = 4096;

/// NVIDIA's fabric manager, needed on every board with NVSwitches.
pub const FABRIC_MANAGER_UNIT: &str = "nvidia-fabricmanager.service";

/// The states `systemctl is-active` prints (`active`, `inactive`, `failed`, `activating`, ...).
const STATES: &[&str] = &[
    "active",
    "reloading",
    "refreshing",
    "inactive",
    "failed",
    "activating",
    "deactivating",
    "maintenance",
    "unknown",
];

/// What systemd said about a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitState {
    /// The state word `is-active` printed (an unknown unit is `inactive`, or `unknown` on
    /// older systemd).
    Is(String),
    /// systemd could not be asked; why.
    Unknown(String),
}

/// The `systemctl is-active` states in which `nvidia-fabricmanager` serves (or is about to):
/// any other state it prints leaves the board's NVSwitches without a fabric manager.
pub const FABRIC_MANAGER_RUNNING: &[&str] = &["active", "reloading", "refreshing", "activating"];

/// What the host says of its fabric manager: the NVSwitches on its PCI bus, and what systemd
/// says of `nvidia-fabricmanager` (asked only when there are some).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FabricManager {
    /// NVSwitch functions on the PCI bus.
    pub switches: usize,
    /// `systemctl is-active`'s answer; `None` when not asked (no NVSwitch).
    pub state: Option<UnitState>,
}

impl FabricManager {
    /// The NVSwitches left without a fabric manager: `Some(switches)` when there are some and
    /// systemd names a state outside [`FABRIC_MANAGER_RUNNING`]; `None` when there are none or
    /// systemd could not be asked (nothing is known then).
    pub fn down(&self) -> Option<usize> {
        match &self.state {
            Some(UnitState::Is(s))
                if self.switches > 0 && !FABRIC_MANAGER_RUNNING.contains(&s.as_str()) =>
            {
                Some(self.switches)
            }
            _ => None,
        }
    }
}

/// Reads the fact on `host`: its NVSwitch functions, and its `systemctl` asked only when
/// there are some.
pub async fn fabric_manager(host: &Host) -> FabricManager {
    let switches = super::pci::nvswitch_count(host);
    let state = if switches > 0 {
        Some(is_active(host.systemctl(), FABRIC_MANAGER_UNIT).await)
    } else {
        None
    };
    FabricManager { switches, state }
}

/// Runs `SYSTEMCTL is-active UNIT` within [`SYSTEMCTL_TIMEOUT`].
pub async fn is_active(systemctl: &Path, unit: &str) -> UnitState {
    is_active_within(systemctl, unit, SYSTEMCTL_TIMEOUT).await
}

/// [`is_active`] with another bound.
pub async fn is_active_within(systemctl: &Path, unit: &str, bound: Duration) -> UnitState {
    let bounds = child::Bounds {
        time: bound,
        stdout: MAX_SAID,
        stderr: MAX_SAID,
    };
    let (status, stdout, stderr) = match child::run(systemctl, &["is-active", unit], bounds).await {
        Ok(child::Ended::Exited {
            status,
            stdout,
            stderr,
        }) => (status, stdout, stderr),
        Ok(child::Ended::TimedOut) => {
            return UnitState::Unknown(format!(
                "{} is-active {unit} did not answer within {bound:?}",
                systemctl.display()
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return UnitState::Unknown(format!("{} not found", systemctl.display()))
        }
        Err(e) => return UnitState::Unknown(format!("cannot run {}: {e}", systemctl.display())),
    };
    let stdout = String::from_utf8_lossy(&stdout);
    let word = stdout.lines().next().unwrap_or_default().trim();
    if STATES.contains(&word) {
        return UnitState::Is(word.to_owned());
    }
    let stderr = String::from_utf8_lossy(&stderr);
    let said = [stderr.trim(), stdout.trim()]
        .into_iter()
        .find(|t| !t.is_empty())
        .unwrap_or("nothing");
    let said: String = said.chars().take(300).collect();
    UnitState::Unknown(format!(
        "{} is-active {unit} exited with {} and said: {said}",
        systemctl.display(),
        status
            .code()
            .map_or_else(|| "a signal".to_owned(), |c| format!("status {c}"))
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("systemctl");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[tokio::test]
    async fn reads_the_state_word() {
        let dir = tempfile::tempdir().unwrap();
        let fake = script(
            dir.path(),
            "[ \"$1 $2\" = \"is-active nvidia-fabricmanager.service\" ] || exit 9\necho active",
        );
        assert_eq!(
            is_active(&fake, FABRIC_MANAGER_UNIT).await,
            UnitState::Is("active".into())
        );
        let fake = script(dir.path(), "echo inactive; exit 3");
        assert_eq!(
            is_active(&fake, FABRIC_MANAGER_UNIT).await,
            UnitState::Is("inactive".into())
        );
    }

    #[tokio::test]
    async fn cannot_tell_is_said_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let fake = script(
            dir.path(),
            "echo 'System has not been booted with systemd as init system (PID 1). Can'\\''t operate.' >&2; exit 1",
        );
        let UnitState::Unknown(why) = is_active(&fake, FABRIC_MANAGER_UNIT).await else {
            panic!("a failure without a state is not a state");
        };
        assert!(
            why.contains("status 1") && why.contains("not been booted with systemd"),
            "{why}"
        );
        let missing = dir.path().join("no-systemctl");
        let UnitState::Unknown(why) = is_active(&missing, FABRIC_MANAGER_UNIT).await else {
            panic!("missing systemctl");
        };
        assert!(why.ends_with("not found"), "{why}");
    }

    #[tokio::test]
    async fn a_hung_systemctl_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let fake = script(dir.path(), "exec sleep 100");
        let started = std::time::Instant::now();
        let state = is_active_within(&fake, FABRIC_MANAGER_UNIT, Duration::from_millis(200)).await;
        assert!(
            matches!(state, UnitState::Unknown(ref w) if w.contains("did not answer")),
            "{state:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
