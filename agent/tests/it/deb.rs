//! The Debian package: `cargo deb` builds it from this build's binaries (no rebuild), its
//! file list and control fields are what an installation needs, and the units it carries pass
//! `systemd-analyze verify` once extracted.

use std::path::{Path, PathBuf};
use std::process::Command;

use bcd_testkit::{built, require, Peer};

/// What `dpkg-deb` prints for one query of the package, or the failure's words.
fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let out = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_package_installs_the_binaries_and_units() {
    if require(Peer::DpkgDeb).is_none() {
        return;
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_bcd"));
    let bin_dir = bin.parent().unwrap();
    if built(&bin_dir.join("bcd-helper")).is_none() {
        return;
    }
    let Some(cargo) = require(Peer::CargoDeb) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // This test's own (debug) binaries, as they are: the package's metadata is what is
    // tested, and a release build here would cost minutes. cargo-deb strips them.
    let out = Command::new(&cargo)
        .arg("deb")
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .args([
            "--no-build",
            "--profile",
            "dev",
            "--fast",
            "--quiet",
            "--output",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo deb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deb = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(deb.is_file(), "cargo deb printed {}", deb.display());

    // The file list: each file where the units and the scripts expect it, with its mode, root's.
    let listing = dpkg_deb(&["-c"], &deb);
    let entry = |path: &str| {
        listing
            .lines()
            .find(|l| l.ends_with(&format!(" .{path}")))
            .unwrap_or_else(|| panic!("{path} is not in the package:\n{listing}"))
            .to_owned()
    };
    for (path, mode) in [
        ("/usr/bin/bcd", "-rwxr-xr-x"),
        ("/usr/libexec/bcd/bcd-helper", "-rwxr-xr-x"),
        ("/usr/lib/systemd/system/bcd.service", "-rw-r--r--"),
        ("/usr/lib/systemd/system/bcd-helper.service", "-rw-r--r--"),
        ("/usr/lib/systemd/system/bcd-helper.socket", "-rw-r--r--"),
        ("/usr/lib/sysusers.d/bcd.conf", "-rw-r--r--"),
        ("/usr/lib/tmpfiles.d/bcd.conf", "-rw-r--r--"),
        ("/etc/default/bcd", "-rw-r--r--"),
        ("/usr/share/man/man1/bcd.1.gz", "-rw-r--r--"),
        ("/usr/share/man/man1/bcd-status.1.gz", "-rw-r--r--"),
        ("/usr/share/man/man1/bcd-node.1.gz", "-rw-r--r--"),
        ("/usr/share/man/man8/bcd-helper.8.gz", "-rw-r--r--"),
        ("/usr/share/bash-completion/completions/bcd", "-rw-r--r--"),
        ("/usr/share/zsh/vendor-completions/_bcd", "-rw-r--r--"),
        (
            "/usr/share/fish/vendor_completions.d/bcd.fish",
            "-rw-r--r--",
        ),
        ("/usr/share/doc/bcd/README.md", "-rw-r--r--"),
        ("/usr/share/doc/bcd/docs/README.md", "-rw-r--r--"),
        ("/usr/share/doc/bcd/docs/quick-start.md", "-rw-r--r--"),
        ("/usr/share/doc/bcd/copyright", "-rw-r--r--"),
    ] {
        let line = entry(path);
        assert!(line.starts_with(mode), "{path} should be {mode}: {line}");
        assert!(
            matches!(line.split_whitespace().nth(1), Some("root/root" | "0/0")),
            "{path} should be root's: {line}"
        );
    }
    let files = listing
        .lines()
        .filter(|l| {
            !l.starts_with('d')
                && !l.contains(" ./usr/share/man/")
                && !l.contains(" ./usr/share/doc/bcd/docs/")
        })
        .count();
    assert_eq!(files, 13, "unexpected files in the package:\n{listing}");
    // Every page of the manual, beside the front page whose links name them.
    let manual = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "md")
        })
        .count();
    let packaged = listing
        .lines()
        .filter(|l| !l.starts_with('d') && l.contains(" ./usr/share/doc/bcd/docs/"))
        .count();
    assert_eq!(
        packaged, manual,
        "the manual's pages in the package:\n{listing}"
    );
    // Every man page, gzipped as Debian has them.
    let pages = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging/man"))
        .unwrap()
        .count();
    let packed = listing
        .lines()
        .filter(|l| l.contains(" ./usr/share/man/") && l.ends_with(".gz"))
        .count();
    assert_eq!(packed, pages, "{listing}");

    // /etc/default/bcd is the administrator's once installed: a conffile, kept on upgrade.
    let conffiles = Command::new("dpkg-deb")
        .arg("-I")
        .arg(&deb)
        .arg("conffiles")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&conffiles.stdout).trim(),
        "/etc/default/bcd"
    );

    // The control fields.
    let fields = dpkg_deb(&["-f"], &deb);
    let field = |name: &str| {
        fields
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_owned))
            .unwrap_or_else(|| panic!("no {name} field:\n{fields}"))
    };
    assert_eq!(field("Package"), "bcd");
    assert_eq!(field("Version"), format!("{}-1", env!("CARGO_PKG_VERSION")));
    assert!(field("Depends").contains("systemd"), "{}", field("Depends"));
    assert!(
        field("Depends").starts_with("libc6 (>= 2."),
        "{}",
        field("Depends")
    );
    assert!(!field("Architecture").is_empty());
    assert!(!field("Maintainer").is_empty());
    assert!(field("Installed-Size").parse::<u64>().unwrap() > 0);
    let control = dpkg_deb(&["-I"], &deb);
    for script in ["postinst", "prerm", "postrm"] {
        assert!(control.contains(script), "no {script}:\n{control}");
    }

    // The extracted units, with their binaries pointed at the extracted ones.
    let root = dir.path().join("root");
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success(), "dpkg-deb -x failed");
    if require(Peer::SystemdAnalyze).is_none() {
        return;
    }
    let system = root.join("usr/lib/systemd/system");
    let bcd = root.join("usr/bin/bcd");
    let helper = root.join("usr/libexec/bcd/bcd-helper");
    let units = ["bcd.service", "bcd-helper.service", "bcd-helper.socket"];
    for unit in units {
        let path = system.join(unit);
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text
            .replace("/usr/libexec/bcd/bcd-helper", &helper.to_string_lossy())
            .replace("/usr/bin/bcd ", &format!("{} ", bcd.display()));
        std::fs::write(&path, text).unwrap();
    }
    // A private /run: systemd-analyze writes /run/systemd/systemd-units-load.
    let Some(mut analyze) = bcd_testkit::with_private_run(Path::new("systemd-analyze")) else {
        return;
    };
    let out = analyze
        .arg("verify")
        .args(units.map(|u| system.join(u)))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && said.trim().is_empty(),
        "systemd-analyze verify: {said}"
    );
}
