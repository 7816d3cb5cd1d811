//! Asking systemd whether a unit runs, without root: `systemctl is-active UNIT`.
//!
//! `is-active` only reads a unit's state, which systemd's D-Bus policy lets any user do (root
//! goes through systemd's private socket instead), so doctor needs no privilege and no D-Bus
//! library for it. The call runs through [`crate::child`]: bounded by [`SYSTEMCTL_TIMEOUT`],
//! its process group killed past it. When `systemctl` is missing, fails without naming a state (no systemd as
//! PID 1, no bus) or does not answer, the state is [`UnitState::Unknown`] with the reason:
//! doctor then says it could not tell rather than guessing.

use std::path::Path;
use std::time::Duration;

use crate::child;

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
