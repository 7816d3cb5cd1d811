//! libvirt start/restore/destroy with persistence around them, against a fake `virsh` and a
//! fake sysfs. The `virsh` side is the libvirt module's; while that module is the placeholder
//! (every call `Unsupported`), these tests say so and stop.

use crate::common;

use bcd_protocol::{Operation, Outcome, PciAddress, PersistenceNote};
use common::{fake_program, FakePciKernel, Helper};

fn pci(s: &str) -> PciAddress {
    s.parse().unwrap()
}

fn libvirt_helper() -> (Helper, FakePciKernel) {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let virsh = fake_program(dir.path(), "virsh-record", "virsh");
    let xml = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/helper/domain-with-gpu.xml");
    std::fs::copy(xml, dir.path().join("domain.xml")).unwrap();
    let save = dir.path().join("save");
    std::fs::create_dir(&save).unwrap();
    std::fs::write(save.join("vm1.save"), "image").unwrap();
    let mut sysfs = FakePciKernel::new(&dir.path().join("sys"));
    sysfs.add_function("0000:18:00.0", "0x10de", "0x030200", Some("nvidia"));
    sysfs.add_function("0000:18:00.1", "0x10de", "0x040300", Some("snd_hda_intel"));
    sysfs.add_function("0000:19:00.0", "0x8086", "0x020000", Some("ixgbe"));
    sysfs.start_kernel();
    let root = sysfs.root.display().to_string();
    let h = Helper::start_in(
        dir,
        &[
            "--sysfs-root",
            &root,
            "--nvidia-smi",
            smi.to_str().unwrap(),
            "--virsh",
            virsh.to_str().unwrap(),
            "--libvirt-uri",
            "test:///default",
            "--save-dir",
            save.to_str().unwrap(),
        ],
    );
    (h, sysfs)
}

#[test]
fn start_restore_and_destroy_turn_persistence_off_and_on_for_the_domains_gpus_only() {
    let (h, _sysfs) = libvirt_helper();
    let mut c = h.client();
    let domain = "vm1".parse().unwrap();
    let out = c.request(1, Operation::LibvirtStart { domain }).unwrap();
    let gpu = pci("0000:18:00.0");
    assert_eq!(
        out,
        Outcome::Libvirt {
            gpus: vec![gpu],
            persistence: vec![(gpu, PersistenceNote::Set { enabled: false })],
            domain: Some("vm1".parse().unwrap()),
        }
    );
    let file = h.path("save/vm1.save").to_str().unwrap().parse().unwrap();
    // A restore says which domain the image restores (its XML's <name>): the agent labels the
    // domain's GPUs with it.
    let Outcome::Libvirt { domain, .. } = c.request(2, Operation::LibvirtRestore { file }).unwrap()
    else {
        panic!("not a libvirt outcome")
    };
    assert_eq!(domain, Some("vm1".parse().unwrap()));
    let out = c
        .request(
            3,
            Operation::LibvirtDestroy {
                domain: "vm1".parse().unwrap(),
            },
        )
        .unwrap();
    assert_eq!(
        out,
        Outcome::Libvirt {
            gpus: vec![gpu],
            persistence: vec![(gpu, PersistenceNote::Set { enabled: true })],
            domain: Some("vm1".parse().unwrap()),
        }
    );
    let calls = std::fs::read_to_string(h.path("calls")).unwrap();
    assert_eq!(
        calls,
        "-i 00000000:18:00.0 -pm 0\n-i 00000000:18:00.0 -pm 0\n-i 00000000:18:00.0 -pm 1\n"
    );
    let virsh = std::fs::read_to_string(h.path("virsh-calls")).unwrap();
    assert!(
        virsh.contains("start") && virsh.contains("restore") && virsh.contains("destroy"),
        "{virsh}"
    );
}
