//! Tests of the libvirt operations: the hostdev reader on fixtures, real `virsh` against
//! libvirt's test driver, and save-file refusals with a recording fake `virsh`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::savefile::SavePolicy;

use bcd_protocol::{DomainName, HelperError, PciAddress, SaveFile};

use super::domain_xml::{MAX_HOSTDEVS, MAX_XML_BYTES, MAX_XML_DEPTH};
use super::*;

/// The workspace's `testdata/libvirt/NAME`.
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/libvirt")
        .join(name)
}

fn addrs(list: &[&str]) -> Vec<PciAddress> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn domain(name: &str) -> DomainName {
    name.parse().unwrap()
}

fn save_file(path: &Path) -> SaveFile {
    path.to_str().unwrap().parse().unwrap()
}

/// The `virsh` on `PATH`, or `None` after skipping (a failure under CI).
fn real_virsh() -> Option<PathBuf> {
    bcd_testkit::require(bcd_testkit::Peer::Virsh)
}

/// A [`Libvirt`] on libvirt's test driver loaded from `testdata/libvirt/test-node.xml`.
fn test_driver(virsh: PathBuf, save_dir: &Path) -> Libvirt {
    let node = std::fs::canonicalize(fixture("test-node.xml")).unwrap();
    Libvirt {
        virsh,
        uri: format!("test://{}", node.display()),
        timeout: Duration::from_secs(20),
        saves: saves(save_dir),
        spawn_failure: Arc::new(|program: &str, source: &std::io::Error| {
            format!("could not run {program}: {source}")
        }),
    }
}

/// Save images from `save_dir`, copied to its `.staging` folder (root's, 0700).
fn saves(save_dir: &Path) -> SavePolicy {
    let policy = SavePolicy {
        save_dir: save_dir.to_owned(),
        staging_dir: save_dir.join(".staging"),
        owners: vec![nix::unistd::geteuid().as_raw()],
    };
    policy.prepare_staging().unwrap();
    policy
}

/// A save image in the test driver's own format: its magic with the NUL, the XML's length as
/// a native-endian 32-bit integer, the XML.
fn write_test_driver_save_image(path: &Path, domain_xml: &str) {
    let mut bytes = b"TestGuestMagic\0".to_vec();
    bytes.extend_from_slice(&u32::try_from(domain_xml.len()).unwrap().to_ne_bytes());
    bytes.extend_from_slice(domain_xml.as_bytes());
    std::fs::write(path, bytes).unwrap();
}

const SAVED_DOMAIN_XML: &str = "<domain type='test'><name>saved-vm</name>\
    <memory unit='MiB'>256</memory><vcpu>1</vcpu><os><type arch='x86_64'>hvm</type></os>\
    <devices><hostdev mode='subsystem' type='pci' managed='no'><source>\
    <address domain='0x0000' bus='0x3b' slot='0x00' function='0x0'/></source></hostdev>\
    </devices></domain>";

/// A fake `virsh`: a script that appends its arguments to `ran` and prints `stdout`.
fn recording_virsh(dir: &Path, stdout: &str) -> (PathBuf, PathBuf) {
    let script = dir.join("fake-virsh");
    let ran = dir.join("ran");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$@\" >> '{}'\ncat <<'XML'\n{stdout}\nXML\n",
            ran.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    (script, ran)
}

fn fake(virsh: PathBuf, save_dir: &Path) -> Libvirt {
    Libvirt {
        virsh,
        uri: "test:///default".to_owned(),
        timeout: Duration::from_secs(10),
        saves: saves(save_dir),
        spawn_failure: Arc::new(|program: &str, source: &std::io::Error| {
            format!("could not run {program}: {source}")
        }),
    }
}

fn invalid_what(result: Result<impl std::fmt::Debug, HelperError>) -> String {
    match result {
        Err(HelperError::Invalid { what }) => what,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

// ---- the hostdev reader ----

#[test]
fn real_domain_xml_gives_every_pci_source_address() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real/libvirt");
    if !dir.is_dir() {
        bcd_testkit::skip(
            "the real domain XML (../shared/fixtures/real/libvirt) is not beside this checkout",
        );
        return;
    }
    let read = |name: &str| pci_hostdevs(&std::fs::read_to_string(dir.join(name)).unwrap());
    // Two GPU functions with ROM files; the USB hostdev and guest-side addresses are not read.
    assert_eq!(
        read("alamputraaf-win10-laptop-nvidia-rom-usb-hostdev.xml").unwrap(),
        addrs(&["0000:01:00.0", "0000:01:00.1"])
    );
    // Eight PCI hostdevs, among them four functions of one GPU.
    assert_eq!(
        read("bryansteiner-win10-rtx3080-4fn-hostdev.xml").unwrap(),
        addrs(&[
            "0000:04:00.0",
            "0000:07:00.0",
            "0000:07:00.1",
            "0000:07:00.3",
            "0000:0d:00.0",
            "0000:0d:00.1",
            "0000:0d:00.2",
            "0000:0d:00.3",
        ])
    );
}

#[test]
fn only_pci_hostdev_sources_are_read() {
    let xml = std::fs::read_to_string(fixture("guest-address-first.xml")).unwrap();
    assert_eq!(
        pci_hostdevs(&xml).unwrap(),
        addrs(&["0000:41:00.0", "0000:41:00.1"])
    );
}

#[test]
fn a_doctype_with_entities_is_refused() {
    let xml = std::fs::read_to_string(fixture("hostile-entity.xml")).unwrap();
    match pci_hostdevs(&xml) {
        Err(HelperError::Failed {
            exit_code: None,
            message,
        }) => assert!(message.contains("DOCTYPE"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn an_undeclared_entity_in_an_address_is_refused() {
    let xml = "<domain><devices><hostdev type='pci'><source>\
        <address domain='0x0000' bus='&bus;' slot='0x00' function='0x0'/>\
        </source></hostdev></devices></domain>";
    assert!(pci_hostdevs(xml).is_err());
}

#[test]
fn the_reader_is_bounded() {
    let one = "<hostdev mode='subsystem' type='pci'><source>\
        <address domain='0x0000' bus='0x18' slot='0x00' function='0x0'/></source></hostdev>";
    // Many entries of one address still count: the bound is on what is listed.
    let listed = |n: usize| format!("<domain><devices>{}</devices></domain>", one.repeat(n));
    assert_eq!(pci_hostdevs(&listed(MAX_HOSTDEVS)).unwrap().len(), 1);
    assert!(pci_hostdevs(&listed(MAX_HOSTDEVS + 1)).is_err());

    let padded = format!(
        "<domain><description>{}</description></domain>",
        "x".repeat(MAX_XML_BYTES)
    );
    assert!(pci_hostdevs(&padded).is_err());

    let deep = format!(
        "{}{}",
        "<a>".repeat(MAX_XML_DEPTH + 1),
        "</a>".repeat(MAX_XML_DEPTH + 1)
    );
    assert!(pci_hostdevs(&deep).is_err());
}

#[test]
fn malformed_or_impossible_addresses_are_refused() {
    for xml in [
        "<domain><devices><hostdev type='pci'><source></domain>",
        "<domain><devices>",
        "<domain><devices><hostdev type='pci'><source><address bus='0x18' slot='0x00'/></source></hostdev></devices></domain>",
        "<domain><devices><hostdev type='pci'><source><address bus='0xzz' slot='0x00' function='0x0'/></source></hostdev></devices></domain>",
        "<domain><devices><hostdev type='pci'><source><address bus='0x100' slot='0x00' function='0x0'/></source></hostdev></devices></domain>",
        "<domain><devices><hostdev type='pci'><source><address bus='0x18' slot='0x20' function='0x0'/></source></hostdev></devices></domain>",
        "<domain><devices><hostdev type='pci'><source><address bus='0x18' slot='0x00' function='0x8'/></source></hostdev></devices></domain>",
        "<domain><devices><hostdev type='pci'><source><address domain='0x10000' bus='0x18' slot='0x00' function='0x0'/></source></hostdev></devices></domain>",
    ] {
        assert!(pci_hostdevs(xml).is_err(), "accepted {xml}");
    }
}

#[test]
fn a_domain_without_hostdevs_has_none() {
    assert_eq!(
        pci_hostdevs("<domain><devices><disk/></devices></domain>").unwrap(),
        vec![]
    );
}

// ---- real virsh, libvirt's test driver ----

#[tokio::test]
async fn the_test_drivers_domain_lists_its_two_pci_hostdevs() {
    let Some(virsh) = real_virsh() else { return };
    let save_dir = tempfile::tempdir().unwrap();
    let lv = test_driver(virsh, save_dir.path());
    assert_eq!(
        lv.domain_hostdevs(&domain("gpu-vm")).await.unwrap(),
        addrs(&["0000:18:00.0", "0000:18:00.1"])
    );
}

#[tokio::test]
async fn start_and_destroy_succeed_on_the_test_driver() {
    let Some(virsh) = real_virsh() else { return };
    let save_dir = tempfile::tempdir().unwrap();
    let lv = test_driver(virsh, save_dir.path());
    lv.start(&domain("gpu-vm"), &[]).await.unwrap();
    lv.destroy(&domain("running-vm"), &[]).await.unwrap();
}

#[tokio::test]
async fn an_unknown_domain_fails_with_virshs_words() {
    let Some(virsh) = real_virsh() else { return };
    let save_dir = tempfile::tempdir().unwrap();
    let lv = test_driver(virsh, save_dir.path());
    for result in [
        lv.start(&domain("nope"), &[]).await,
        lv.destroy(&domain("nope"), &[]).await,
        lv.domain_hostdevs(&domain("nope")).await.map(drop),
    ] {
        match result {
            Err(HelperError::Failed {
                exit_code: Some(code),
                message,
            }) => {
                assert_ne!(code, 0);
                assert!(message.contains("failed to get domain 'nope'"), "{message}");
            }
            other => panic!("expected Failed, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_save_image_is_read_and_restored_on_the_test_driver() {
    let Some(virsh) = real_virsh() else { return };
    let save_dir = tempfile::tempdir().unwrap();
    let image = save_dir.path().join("saved-vm.save");
    write_test_driver_save_image(&image, SAVED_DOMAIN_XML);
    let lv = test_driver(virsh, save_dir.path());
    let staged = lv.saves.stage(&save_file(&image)).unwrap();
    assert_eq!(
        lv.save_image_devices(&staged).await.unwrap().0,
        addrs(&["0000:3b:00.0"])
    );
    lv.restore(&staged, &[]).await.unwrap();
}

// ---- fake virsh: arguments, missing binary, timeout ----

#[tokio::test]
async fn virsh_gets_the_uri_first_and_the_domain_after_its_option() {
    let dir = tempfile::tempdir().unwrap();
    let save_dir = tempfile::tempdir().unwrap();
    let image = save_dir.path().join("a.save");
    std::fs::write(&image, b"image").unwrap();
    let (script, ran) = recording_virsh(dir.path(), "<domain/>");
    let lv = fake(script, save_dir.path());
    lv.start(&domain("vm-1"), &[]).await.unwrap();
    lv.destroy(&domain("vm-1"), &[]).await.unwrap();
    let staged = lv.saves.stage(&save_file(&image)).unwrap();
    lv.restore(&staged, &[]).await.unwrap();
    lv.domain_hostdevs(&domain("vm-1")).await.unwrap();
    lv.save_image_devices(&staged).await.unwrap();
    // virsh sees the checked copy, never the path the agent named.
    let image = staged.path().display();
    assert_eq!(
        std::fs::read_to_string(ran).unwrap(),
        format!(
            "-c test:///default start --domain vm-1\n\
             -c test:///default destroy --domain vm-1\n\
             -c test:///default restore {image}\n\
             -c test:///default dumpxml --domain vm-1\n\
             -c test:///default save-image-dumpxml {image}\n"
        )
    );
}

#[tokio::test]
async fn a_missing_virsh_says_which_package_to_install() {
    let dir = tempfile::tempdir().unwrap();
    let lv = fake(dir.path().join("no-virsh-here"), dir.path());
    match lv.start(&domain("vm"), &[]).await {
        Err(HelperError::Failed {
            exit_code: None,
            message,
        }) => {
            assert!(message.contains("virsh not found at"), "{message}");
            assert!(message.contains("no-virsh-here"), "{message}");
            assert!(message.contains("install libvirt-clients"), "{message}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test]
async fn a_hung_virsh_is_a_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("slow-virsh");
    std::fs::write(&script, "#!/bin/sh\nsleep 30\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut lv = fake(script, dir.path());
    lv.timeout = Duration::from_millis(300);
    match lv.destroy(&domain("vm"), &[]).await {
        Err(HelperError::Timeout { after_s }) => assert_eq!(after_s, 1),
        other => panic!("expected Timeout, got {other:?}"),
    }
}

// ---- save files the helper refuses; virsh never runs ----

/// Runs both save-file operations on `file` and returns the refusal, checking virsh never ran.
async fn refused(file: &Path, save_dir: &Path) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (script, ran) = recording_virsh(dir.path(), "<domain/>");
    let lv = fake(script, save_dir);
    let file = save_file(file);
    let what = invalid_what(lv.saves.stage(&file));
    assert!(!ran.exists(), "virsh ran for a refused file: {what}");
    assert!(what.contains("only regular files under"), "{what}");
    what
}

#[tokio::test]
async fn a_symbolic_link_is_refused() {
    let save_dir = tempfile::tempdir().unwrap();
    let target = save_dir.path().join("real.save");
    std::fs::write(&target, b"image").unwrap();
    let link = save_dir.path().join("link.save");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let what = refused(&link, save_dir.path()).await;
    assert!(what.contains("symbolic link"), "{what}");
}

#[tokio::test]
async fn a_file_outside_the_save_folder_is_refused() {
    let save_dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let file = elsewhere.path().join("x.save");
    std::fs::write(&file, b"image").unwrap();
    let what = refused(&file, save_dir.path()).await;
    assert!(what.contains("is not in the save folder"), "{what}");
}

#[tokio::test]
async fn a_directory_a_missing_file_and_a_fifo_are_refused() {
    let save_dir = tempfile::tempdir().unwrap();
    let sub = save_dir.path().join("sub.save");
    std::fs::create_dir(&sub).unwrap();
    assert!(refused(&sub, save_dir.path())
        .await
        .contains("not a regular file"));

    let missing = save_dir.path().join("missing.save");
    assert!(refused(&missing, save_dir.path())
        .await
        .contains("does not exist"));

    let fifo = save_dir.path().join("fifo.save");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    assert!(refused(&fifo, save_dir.path())
        .await
        .contains("not a regular file"));
}

#[tokio::test]
async fn a_folder_reached_through_a_symbolic_link_is_refused() {
    let save_dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("x.save"), b"image").unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), save_dir.path().join("linked")).unwrap();
    let what = refused(&save_dir.path().join("linked/x.save"), save_dir.path()).await;
    assert!(what.contains("symbolic link"), "{what}");
}

#[test]
fn a_dot_dot_path_is_refused_before_the_helper_sees_it() {
    assert!("/var/lib/libvirt/qemu/save/../../../../etc/shadow"
        .parse::<SaveFile>()
        .is_err());
}

#[test]
fn the_domain_name_is_read_from_the_xml_and_only_a_safe_one_is_kept() {
    assert_eq!(
        domain_name("<domain type='kvm'><name>win11</name><devices/></domain>"),
        Some("win11".parse().unwrap())
    );
    // A <name> deeper down (a disk's, a device's) is not the domain's.
    assert_eq!(
        domain_name("<domain><devices><name>x</name></devices></domain>"),
        None
    );
    for hostile in ["1", "a b", "-c", "$(id)"] {
        let xml = format!("<domain><name>{hostile}</name></domain>");
        assert_eq!(domain_name(&xml), None, "{hostile}");
    }
    assert_eq!(domain_name("<notdomain><name>x</name></notdomain>"), None);
    assert_eq!(domain_name("not xml"), None);
}
