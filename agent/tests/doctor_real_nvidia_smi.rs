//! `bcd doctor` with NVIDIA's real `nvidia-smi` on a machine without the NVIDIA kernel module:
//! it prints `NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver...`
//! and exits 9, and doctor must show the `gpus` fail line with the `modprobe nvidia` hint.
//!
//! The binary is Debian's `nvidia-smi` package (non-free) with its `libnvidia-ml1`, fetched with
//! `apt-get download` through a private sources list (the machine's Debian mirror, component
//! `non-free`) and private lists and cache folders, so the machine's apt configuration and
//! state are never touched, then unpacked with `dpkg-deb -x` into a temp folder. With
//! `BCD_REAL_NVIDIA_SMI=PATH` that `nvidia-smi` (or a wrapper setting its library path) is
//! used instead. The test skips, saying why, when the machine has the NVIDIA module loaded or
//! the download is impossible (not Debian, no network, no apt).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
}

#[test]
fn real_nvidia_smi_without_the_module_fails_gpus_with_the_modprobe_hint() {
    if Path::new("/proc/driver/nvidia").exists() {
        skip("this machine has the NVIDIA kernel module loaded; the test needs one without it");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let smi = match std::env::var_os("BCD_REAL_NVIDIA_SMI") {
        Some(path) => PathBuf::from(path),
        None => match fetch(dir.path()) {
            Ok(path) => path,
            Err(reason) => {
                skip(&format!(
                    "Debian's nvidia-smi could not be downloaded: {reason}"
                ));
                return;
            }
        },
    };
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("doctor")
        .arg("--host-root")
        .arg("/")
        .arg("--nvidia-smi")
        .arg(&smi)
        .arg("--helper-socket")
        .arg(dir.path().join("no-helper.sock"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
            .to_owned()
    };
    let gpus = line("gpus");
    assert!(gpus.starts_with("fail "), "{gpus}");
    assert!(gpus.contains("exit status 9"), "{gpus}");
    assert!(
        gpus.contains("couldn't communicate with the NVIDIA driver"),
        "{gpus}"
    );
    assert!(gpus.contains("modprobe nvidia"), "{gpus}");
    let nvml = line("nvml");
    assert!(
        nvml.starts_with("fail ") && nvml.contains("modprobe nvidia"),
        "{nvml}"
    );
}

/// Downloads and unpacks the two packages; returns a wrapper that runs `nvidia-smi` with the
/// unpacked `libnvidia-ml.so.1` on its library path.
fn fetch(dir: &Path) -> Result<PathBuf, String> {
    let os_release = std::fs::read_to_string("/etc/os-release").map_err(|e| e.to_string())?;
    let field = |key: &str| {
        os_release
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(|v| v.trim_matches('"').to_owned())
    };
    if field("ID").as_deref() != Some("debian") {
        return Err("this machine is not Debian".into());
    }
    let codename = field("VERSION_CODENAME").ok_or("/etc/os-release has no codename")?;
    if !Path::new(KEYRING).exists() {
        return Err(format!("no Debian archive keyring at {KEYRING}"));
    }
    let mirror = debian_mirror(&codename).unwrap_or_else(|| DEFAULT_MIRROR.to_owned());
    let sources = dir.join("sources.list");
    std::fs::write(
        &sources,
        format!("deb [signed-by={KEYRING}] {mirror} {codename} non-free\n"),
    )
    .map_err(|e| e.to_string())?;
    for sub in [
        "lists/partial",
        "cache/archives/partial",
        "debs",
        "unpacked",
    ] {
        std::fs::create_dir_all(dir.join(sub)).map_err(|e| e.to_string())?;
    }
    let mut options = vec![
        format!("Dir::Etc::sourcelist={}", sources.display()),
        "Dir::Etc::sourceparts=-".to_owned(),
        format!("Dir::State::Lists={}", dir.join("lists").display()),
        format!("Dir::Cache={}", dir.join("cache").display()),
        "Acquire::Retries=0".to_owned(),
        "Acquire::http::Timeout=20".to_owned(),
    ];
    if nix::unistd::geteuid().is_root() {
        // apt would hand the download to the _apt user, who cannot write a private temp folder.
        options.push("APT::Sandbox::User=root".to_owned());
    }
    let apt = |args: &[&str], cwd: &Path| -> Result<(), String> {
        let mut cmd = Command::new("apt-get");
        cmd.current_dir(cwd).arg("-qq");
        for o in &options {
            cmd.arg("-o").arg(o);
        }
        let out = cmd
            .args(args)
            .output()
            .map_err(|e| format!("apt-get: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "apt-get {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    };
    apt(&["update"], dir)?;
    apt(
        &["download", "nvidia-smi", "libnvidia-ml1"],
        &dir.join("debs"),
    )?;
    let unpacked = dir.join("unpacked");
    for deb in std::fs::read_dir(dir.join("debs")).map_err(|e| e.to_string())? {
        let deb = deb.map_err(|e| e.to_string())?.path();
        let status = Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&unpacked)
            .status()
            .map_err(|e| format!("dpkg-deb: {e}"))?;
        if !status.success() {
            return Err(format!("dpkg-deb -x {} failed", deb.display()));
        }
    }
    let files = walk(&unpacked);
    let smi = files
        .iter()
        .find(|p| {
            p.file_name().is_some_and(|n| n == "nvidia-smi")
                && std::fs::metadata(p)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .ok_or("the package has no nvidia-smi program")?;
    let lib_dir = files
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == "libnvidia-ml.so.1"))
        .and_then(|p| p.parent())
        .ok_or("the package has no libnvidia-ml.so.1")?;
    let wrapper = dir.join("nvidia-smi");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nLD_LIBRARY_PATH='{}' exec '{}' \"$@\"\n",
            lib_dir.display(),
            smi.display()
        ),
    )
    .map_err(|e| e.to_string())?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| e.to_string())?;
    Ok(wrapper)
}

/// Every file and link under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => todo.push(path),
                Ok(_) => out.push(path),
                Err(_) => {}
            }
        }
    }
    out.sort();
    out
}

/// The Debian mirror the machine already uses for `codename` (one-line or deb822 sources).
fn debian_mirror(codename: &str) -> Option<String> {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut more: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        more.sort();
        files.extend(more);
    }
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let name = file.to_string_lossy();
        if name.ends_with(".sources") {
            for stanza in text.split("\n\n") {
                let value = |key: &str| {
                    stanza.lines().find_map(|l| {
                        l.strip_prefix(key)
                            .and_then(|r| r.strip_prefix(':'))
                            .map(str::trim)
                    })
                };
                let enabled = value("Enabled").is_none_or(|v| v != "no");
                let types = value("Types").unwrap_or_default();
                let suites = value("Suites").unwrap_or_default();
                if enabled
                    && types.split_whitespace().any(|t| t == "deb")
                    && suites.split_whitespace().any(|s| s == codename)
                {
                    if let Some(uri) = value("URIs").and_then(|u| u.split_whitespace().next()) {
                        return Some(uri.to_owned());
                    }
                }
            }
        } else if name.ends_with(".list") {
            for line in text.lines() {
                let Some(rest) = line.trim().strip_prefix("deb ") else {
                    continue;
                };
                let rest = rest.trim_start();
                // Options come in brackets and may hold spaces: "[arch=amd64 signed-by=...]".
                let rest = match rest.strip_prefix('[') {
                    Some(opts) => opts.split_once(']').map_or("", |(_, r)| r),
                    None => rest,
                };
                let mut words = rest.split_whitespace();
                if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
                    if suite == codename {
                        return Some(uri.to_owned());
                    }
                }
            }
        }
    }
    None
}
