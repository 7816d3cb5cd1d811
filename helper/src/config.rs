//! The helper's flags, parsed by hand: a root binary keeps its dependency list short, and
//! these few flags do not need a parser crate.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The `nvidia-smi` the helper runs unless told otherwise.
pub const DEFAULT_NVIDIA_SMI: &str = "/usr/bin/nvidia-smi";
/// The `nvidia-ctk` the helper runs unless told otherwise.
pub const DEFAULT_NVIDIA_CTK: &str = "/usr/bin/nvidia-ctk";
/// The bound on one `nvidia-ctk cdi generate`.
pub const DEFAULT_NVIDIA_CTK_TIMEOUT_S: u64 = 60;
/// The `virsh` the helper runs unless told otherwise.
pub const DEFAULT_VIRSH: &str = "/usr/bin/virsh";
/// libvirt's system connection.
pub const DEFAULT_LIBVIRT_URI: &str = "qemu:///system";
/// Where the kernel shows sysfs.
pub const DEFAULT_SYSFS_ROOT: &str = "/sys";
/// libvirt's managed save folder.
pub const DEFAULT_SAVE_DIR: &str = "/var/lib/libvirt/qemu/save";
/// Quiet seconds after which a socket-activated helper exits.
pub const DEFAULT_IDLE_EXIT_S: u64 = 30;
/// The bound on one `virsh` call.
pub const DEFAULT_VIRSH_TIMEOUT_S: u64 = 60;
/// The bound on one `nvidia-smi` call (the seed's 30 s).
pub const DEFAULT_NVIDIA_SMI_TIMEOUT_S: u64 = 30;
/// How long a driver may take to let go of a function (the seed's 30 s).
pub const DEFAULT_UNBIND_TIMEOUT_S: u64 = 30;
/// Connections served at once; more are answered `Busy`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;
/// The bound on receiving one whole frame once it has started (and on the `Hello`).
pub const DEFAULT_FRAME_TIMEOUT_S: u64 = 5;
/// Connections one uid may hold at once (root's included): the rest stay for others.
pub const DEFAULT_MAX_PER_UID: usize = 8;
/// Where save images are copied before `virsh` reads them.
pub const DEFAULT_STAGING_DIR: &str = "/var/lib/bcd-helper/restore";
/// The user libvirt's QEMU driver gives save images and their folder to (Debian's).
pub const DEFAULT_SAVE_OWNER: &str = "libvirt-qemu";

/// Everything the helper was told on its command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// `--listen PATH`: bind this socket instead of using socket activation.
    pub listen: Option<PathBuf>,
    /// `--idle-exit`: quiet time after which a socket-activated helper exits; `None`: never.
    pub idle_exit: Option<Duration>,
    /// `--allow-uid`: uids served besides root.
    pub allow_uids: Vec<u32>,
    /// `--allow-group`: primary gids served.
    pub allow_gids: Vec<u32>,
    /// `--audit-log`: the audit file; without it audit lines go to the journal only.
    pub audit_log: Option<PathBuf>,
    /// `--nvidia-smi`.
    pub nvidia_smi: PathBuf,
    /// `--nvidia-smi-timeout`.
    pub nvidia_smi_timeout: Duration,
    /// `--nvidia-ctk`.
    pub nvidia_ctk: PathBuf,
    /// `--nvidia-cdi-spec`: the one file `cdi.nvidia` writes; `None`: that operation is off.
    pub nvidia_cdi_spec: Option<PathBuf>,
    /// `--virsh`.
    pub virsh: PathBuf,
    /// `--libvirt-uri`.
    pub libvirt_uri: String,
    /// `--virsh-timeout`.
    pub virsh_timeout: Duration,
    /// `--sysfs-root`.
    pub sysfs_root: PathBuf,
    /// `--save-dir`.
    pub save_dir: PathBuf,
    /// `--unbind-timeout`.
    pub unbind_timeout: Duration,
    /// `--max-connections`.
    pub max_connections: usize,
    /// `--frame-timeout`.
    pub frame_timeout: Duration,
    /// `--max-connections-per-uid`.
    pub max_per_uid: usize,
    /// `--lock-wait`.
    pub lock_wait: Duration,
    /// `--audit-max-bytes`.
    pub audit_max_bytes: u64,
    /// `--staging-dir`.
    pub staging_dir: PathBuf,
    /// `--lock-dir`: where each PCI function's lock file is (see [`crate::lockfile`]).
    pub lock_dir: PathBuf,
    /// `--save-owner`: owners besides root a save file and its folders may have.
    pub save_owners: Vec<u32>,
    /// `--allow-unconfined`: serve every operation even where Landlock cannot confine.
    pub allow_unconfined: bool,
    /// `--no-sandbox`: skip capability dropping and Landlock (tests and debugging only).
    pub no_sandbox: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: None,
            idle_exit: Some(Duration::from_secs(DEFAULT_IDLE_EXIT_S)),
            allow_uids: Vec::new(),
            allow_gids: Vec::new(),
            audit_log: None,
            nvidia_smi: PathBuf::from(DEFAULT_NVIDIA_SMI),
            nvidia_smi_timeout: Duration::from_secs(DEFAULT_NVIDIA_SMI_TIMEOUT_S),
            nvidia_ctk: PathBuf::from(DEFAULT_NVIDIA_CTK),
            nvidia_cdi_spec: None,
            virsh: PathBuf::from(DEFAULT_VIRSH),
            libvirt_uri: DEFAULT_LIBVIRT_URI.to_owned(),
            virsh_timeout: Duration::from_secs(DEFAULT_VIRSH_TIMEOUT_S),
            sysfs_root: PathBuf::from(DEFAULT_SYSFS_ROOT),
            save_dir: PathBuf::from(DEFAULT_SAVE_DIR),
            unbind_timeout: Duration::from_secs(DEFAULT_UNBIND_TIMEOUT_S),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            frame_timeout: Duration::from_secs(DEFAULT_FRAME_TIMEOUT_S),
            max_per_uid: DEFAULT_MAX_PER_UID,
            lock_wait: crate::ops::DEVICE_LOCK_WAIT,
            audit_max_bytes: crate::audit::DEFAULT_MAX_BYTES,
            staging_dir: PathBuf::from(DEFAULT_STAGING_DIR),
            lock_dir: PathBuf::from(crate::lockfile::DEFAULT_LOCK_DIR),
            save_owners: nix::unistd::User::from_name(DEFAULT_SAVE_OWNER)
                .ok()
                .flatten()
                .map(|u| vec![u.uid.as_raw()])
                .unwrap_or_default(),
            allow_unconfined: false,
            no_sandbox: false,
        }
    }
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Parsed {
    /// Serve with this configuration.
    Run(Box<Config>),
    /// `--help`.
    Help,
    /// `--version`: print [`VERSION_LINE`].
    Version,
}

/// What `--version` prints: the program's name and its version, as `bcd --version` does.
pub const VERSION_LINE: &str = concat!("bcd-helper ", env!("CARGO_PKG_VERSION"));

/// A command line the helper refuses. `Display` is the one sentence printed before exit 2.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UsageError {
    /// A flag nobody knows.
    #[error("bcd-helper: unknown argument {0:?} (see --help)")]
    Unknown(String),
    /// A flag without its value.
    #[error("bcd-helper: {0} needs a value (see --help)")]
    MissingValue(&'static str),
    /// A value that is not what the flag takes.
    #[error("bcd-helper: {flag} takes {takes}, not {value:?}")]
    BadValue {
        /// The flag.
        flag: &'static str,
        /// What it takes.
        takes: &'static str,
        /// What it got.
        value: String,
    },
    /// A program, folder or file given as a relative path.
    #[error("bcd-helper: {flag} must be an absolute path, not {value:?}: a root helper never looks a program or file up relative to where it was started")]
    Relative {
        /// The flag.
        flag: &'static str,
        /// What it got.
        value: String,
    },
}

/// The text `--help` prints.
pub const USAGE: &str = "\
bcd-helper: bcd's root helper. It serves the privileged GPU steps (persistence mode, GPU
reset, MIG mode and instances, vfio-pci bind/release, virsh start/restore/destroy, NVIDIA's
CDI spec) to allowed peers over a Unix socket.

Usage: bcd-helper [FLAGS]

  --listen PATH             bind PATH (mode 0660) instead of using socket activation
  --idle-exit SECONDS       socket-activated: exit after this long without connections
                            (default 30; 0: never)
  --allow-uid UID|USER      serve this user as well as root (repeatable)
  --allow-group GID|GROUP   serve peers in this group, primary or supplementary
                            (repeatable)
  --audit-log FILE          append JSON lines to FILE: one per request, and one more
                            before an operation that changes something acts (created
                            0600; a regular file owned by root with one link, or it is
                            refused)
  --audit-max-bytes N       past this size only operations are audited, refusals are
                            counted (default 67108864)
  --nvidia-smi PATH         nvidia-smi to run (default /usr/bin/nvidia-smi)
  --nvidia-smi-timeout S    bound on one nvidia-smi call (default 30)
  --nvidia-cdi-spec FILE    the file NVIDIA's CDI spec is generated into on request
                            (.json, .yaml or .yml; e.g. /var/run/cdi/nvidia.yaml;
                            default: none, the operation is off)
  --nvidia-ctk PATH         nvidia-ctk to run for it (default /usr/bin/nvidia-ctk)
  --virsh PATH              virsh to run (default /usr/bin/virsh)
  --libvirt-uri URI         libvirt connection (default qemu:///system)
  --virsh-timeout SECONDS   bound on one virsh call (default 60)
  --sysfs-root DIR          where sysfs is (default /sys)
  --save-dir DIR            the only folder save images are restored from
                            (default /var/lib/libvirt/qemu/save)
  --save-owner UID|USER     besides root, who may own save images and their folders
                            (repeatable; default libvirt-qemu where that user exists)
  --staging-dir DIR         root-only folder save images are copied to before virsh
                            reads them (default /var/lib/bcd-helper/restore)
  --lock-dir DIR            root-only folder of the per-device lock files, which the
                            children of an operation hold, so that a device stays locked
                            while they run, even past a killed helper
                            (default /var/lib/bcd-helper/locks)
  --unbind-timeout SECONDS  how long a driver may take to let go of a function (default 30)
  --max-connections N       connections served at once (default 16)
  --max-connections-per-uid N
                            connections one user may hold (default 8)
  --frame-timeout SECONDS   bound on receiving one frame (default 5)
  --lock-wait SECONDS       how long an operation waits for a device another one holds
                            (default 30; then Busy, saying how many were queued ahead)
  --allow-unconfined        serve privileged operations even when Landlock cannot
                            confine the helper (without it only Ping is served then)
  --no-sandbox              keep all capabilities and skip Landlock (tests only)
  --help                    print this text
  --version                 print the version (bcd-helper X.Y.Z)

Log level: BCD_HELPER_LOG (default info), to standard error.
";

/// Parses the arguments after the program name.
///
/// # Errors
/// A [`UsageError`] naming the first argument refused.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Parsed, UsageError> {
    let mut c = Config::default();
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let flag_name: &'static str = match flag.as_str() {
            "--help" | "-h" => return Ok(Parsed::Help),
            "--version" | "-V" => return Ok(Parsed::Version),
            "--no-sandbox" => {
                c.no_sandbox = true;
                continue;
            }
            "--allow-unconfined" => {
                c.allow_unconfined = true;
                continue;
            }
            "--max-connections-per-uid" => "--max-connections-per-uid",
            "--audit-max-bytes" => "--audit-max-bytes",
            "--staging-dir" => "--staging-dir",
            "--lock-dir" => "--lock-dir",
            "--lock-wait" => "--lock-wait",
            "--save-owner" => "--save-owner",
            "--listen" => "--listen",
            "--idle-exit" => "--idle-exit",
            "--allow-uid" => "--allow-uid",
            "--allow-group" => "--allow-group",
            "--audit-log" => "--audit-log",
            "--nvidia-smi" => "--nvidia-smi",
            "--nvidia-smi-timeout" => "--nvidia-smi-timeout",
            "--nvidia-ctk" => "--nvidia-ctk",
            "--nvidia-cdi-spec" => "--nvidia-cdi-spec",
            "--virsh" => "--virsh",
            "--libvirt-uri" => "--libvirt-uri",
            "--virsh-timeout" => "--virsh-timeout",
            "--sysfs-root" => "--sysfs-root",
            "--save-dir" => "--save-dir",
            "--unbind-timeout" => "--unbind-timeout",
            "--max-connections" => "--max-connections",
            "--frame-timeout" => "--frame-timeout",
            _ => return Err(UsageError::Unknown(flag)),
        };
        let value = args.next().ok_or(UsageError::MissingValue(flag_name))?;
        match flag_name {
            "--listen" => c.listen = Some(absolute(flag_name, &value)?),
            "--idle-exit" => {
                let s = seconds(flag_name, &value, true)?;
                c.idle_exit = (!s.is_zero()).then_some(s);
            }
            "--allow-uid" => c.allow_uids.push(id(flag_name, &value)?),
            "--allow-group" => c.allow_gids.push(id(flag_name, &value)?),
            "--audit-log" => c.audit_log = Some(absolute(flag_name, &value)?),
            "--nvidia-smi" => c.nvidia_smi = absolute(flag_name, &value)?,
            "--nvidia-smi-timeout" => c.nvidia_smi_timeout = seconds(flag_name, &value, false)?,
            "--nvidia-ctk" => c.nvidia_ctk = absolute(flag_name, &value)?,
            "--nvidia-cdi-spec" => {
                let path = absolute(flag_name, &value)?;
                let ext = path.extension().and_then(|e| e.to_str());
                if !matches!(ext, Some("json" | "yaml" | "yml"))
                    || path.parent().is_none_or(|p| p == Path::new("/"))
                {
                    return Err(UsageError::BadValue {
                        flag: flag_name,
                        takes: "a .json, .yaml or .yml file in a CDI folder such as /var/run/cdi",
                        value,
                    });
                }
                c.nvidia_cdi_spec = Some(path);
            }
            "--virsh" => c.virsh = absolute(flag_name, &value)?,
            "--libvirt-uri" => {
                if value.is_empty() || value.starts_with('-') || value.chars().any(char::is_control)
                {
                    return Err(UsageError::BadValue {
                        flag: flag_name,
                        takes: "a libvirt URI such as qemu:///system",
                        value,
                    });
                }
                c.libvirt_uri = value;
            }
            "--virsh-timeout" => c.virsh_timeout = seconds(flag_name, &value, false)?,
            "--sysfs-root" => c.sysfs_root = absolute(flag_name, &value)?,
            "--save-dir" => c.save_dir = absolute(flag_name, &value)?,
            "--unbind-timeout" => c.unbind_timeout = seconds(flag_name, &value, false)?,
            "--max-connections" => c.max_connections = connections(flag_name, value)?,
            "--frame-timeout" => c.frame_timeout = seconds(flag_name, &value, false)?,
            "--max-connections-per-uid" => c.max_per_uid = connections(flag_name, value)?,
            "--audit-max-bytes" => {
                c.audit_max_bytes = value.parse::<u64>().ok().filter(|n| *n >= 4096).ok_or(
                    UsageError::BadValue {
                        flag: flag_name,
                        takes: "a number of bytes, at least 4096",
                        value,
                    },
                )?;
            }
            "--staging-dir" => c.staging_dir = absolute(flag_name, &value)?,
            "--lock-dir" => c.lock_dir = absolute(flag_name, &value)?,
            "--lock-wait" => c.lock_wait = seconds(flag_name, &value, false)?,
            "--save-owner" => c.save_owners.push(id(flag_name, &value)?),
            _ => unreachable!("every flag name above is handled"),
        }
    }
    Ok(Parsed::Run(Box::new(c)))
}

fn absolute(flag: &'static str, value: &str) -> Result<PathBuf, UsageError> {
    if !Path::new(value).is_absolute() {
        return Err(UsageError::Relative {
            flag,
            value: value.to_owned(),
        });
    }
    Ok(PathBuf::from(value))
}

/// A number of connections, 1 to 4096.
fn connections(flag: &'static str, value: String) -> Result<usize, UsageError> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=4096).contains(n))
        .ok_or(UsageError::BadValue {
            flag,
            takes: "a number from 1 to 4096",
            value,
        })
}

/// Largest number of seconds any flag takes: a day. Bigger values are typos.
const MAX_SECONDS: u64 = 86_400;

fn seconds(flag: &'static str, value: &str, zero_ok: bool) -> Result<Duration, UsageError> {
    value
        .parse::<u64>()
        .ok()
        .filter(|s| *s <= MAX_SECONDS && (zero_ok || *s > 0))
        .map(Duration::from_secs)
        .ok_or(UsageError::BadValue {
            flag,
            takes: if zero_ok {
                "whole seconds from 0 to 86400"
            } else {
                "whole seconds from 1 to 86400"
            },
            value: value.to_owned(),
        })
}

/// A uid or gid, numeric or by name (`bcd`), resolved once at start-up from the system's user
/// database, so the unit can say `--allow-group bcd` whatever gid sysusers gave it.
fn id(flag: &'static str, value: &str) -> Result<u32, UsageError> {
    let by_name = || -> Option<u32> {
        if flag == "--allow-uid" || flag == "--save-owner" {
            nix::unistd::User::from_name(value)
                .ok()
                .flatten()
                .map(|u| u.uid.as_raw())
        } else {
            nix::unistd::Group::from_name(value)
                .ok()
                .flatten()
                .map(|g| g.gid.as_raw())
        }
    };
    value
        .parse::<u32>()
        .ok()
        .or_else(by_name)
        .filter(|n| *n != u32::MAX)
        .ok_or(UsageError::BadValue {
            flag,
            takes: "a numeric id or an existing user or group name",
            value: value.to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_and_flags() {
        let Parsed::Run(c) = parse(args(&[
            "--listen",
            "/run/x.sock",
            "--allow-uid",
            "990",
            "--allow-group",
            "991",
            "--idle-exit",
            "0",
        ]))
        .unwrap() else {
            panic!("not run")
        };
        assert_eq!(c.listen.as_deref(), Some(Path::new("/run/x.sock")));
        assert_eq!(c.allow_uids, [990]);
        assert_eq!(c.allow_gids, [991]);
        assert_eq!(c.idle_exit, None);
        assert_eq!(c.nvidia_smi, Path::new(DEFAULT_NVIDIA_SMI));
    }

    #[test]
    fn ids_may_be_names_from_the_user_database() {
        let Parsed::Run(c) =
            parse(args(&["--allow-uid", "root", "--allow-group", "root"])).unwrap()
        else {
            panic!("not run")
        };
        assert_eq!(
            (c.allow_uids.as_slice(), c.allow_gids.as_slice()),
            (&[0][..], &[0][..])
        );
        assert!(matches!(
            parse(args(&["--allow-group", "no-such-group-bcd"])),
            Err(UsageError::BadValue { .. })
        ));
    }

    #[test]
    fn version_is_accepted_and_listed_in_help() {
        assert!(matches!(parse(args(&["--version"])), Ok(Parsed::Version)));
        assert!(matches!(
            parse(args(&["--no-sandbox", "--version"])),
            Ok(Parsed::Version)
        ));
        assert_eq!(
            VERSION_LINE,
            format!("bcd-helper {}", env!("CARGO_PKG_VERSION"))
        );
        assert!(USAGE.contains("\n  --version "), "{USAGE}");
    }

    #[test]
    fn relative_programs_and_bad_values_are_refused() {
        let err = parse(args(&["--nvidia-smi", "nvidia-smi"])).unwrap_err();
        assert!(matches!(err, UsageError::Relative { .. }), "{err}");
        assert!(err.to_string().contains("absolute"));
        assert!(matches!(
            parse(args(&["--unbind-timeout", "0"])),
            Err(UsageError::BadValue { .. })
        ));
        assert!(matches!(
            parse(args(&["--listen"])),
            Err(UsageError::MissingValue("--listen"))
        ));
        assert!(matches!(
            parse(args(&["--frobnicate"])),
            Err(UsageError::Unknown(_))
        ));
    }
}
