//! The inventory over the fake hosts in `testdata/hosts`: the merge rules, the canonical hash,
//! the passthrough memory, and `bcd hardware`'s output.

use crate::common::processes;

use std::path::{Path, PathBuf};
use std::process::Command;

use bcd::inventory::collect::collect;
use bcd::inventory::document::NvLinkRemote;
use bcd::inventory::memory::GpuMemory;
use bcd::sys::host::Host;

fn hosts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
}

fn host(name: &str) -> Host {
    Host::fake(hosts().join(name))
}

#[tokio::test]
async fn hgx_h100_merges_every_layer() {
    let c = collect(&host("hgx-h100"), None).await;
    assert!(c.snapshot_error.is_none(), "{:?}", c.snapshot_error);
    let s = &c.inventory.gpu;
    assert!(s.cuda_driver_version.is_some());
    assert_eq!(s.gpus.len(), 8);
    for (i, g) in s.gpus.iter().enumerate() {
        assert_eq!(g.index as usize, i, "indices follow bus order");
        assert_eq!(g.architecture.as_deref(), Some("hopper"));
        assert_eq!(g.compute_capability.as_deref(), Some("9.0"));
        assert!(g.numa_node.is_some(), "NUMA node kept from sysfs");
        assert!(g
            .bus_id
            .map(|a| a.nvml_bus_id())
            .as_deref()
            .is_some_and(|b| b.starts_with("00000000:")));
        assert!(g.serial.is_some() && g.vbios.is_some() && g.memory_total_mib.is_some());
    }
    let bus: Vec<_> = s.gpus.iter().map(|g| g.bus_id.unwrap()).collect();
    let mut sorted = bus.clone();
    sorted.sort();
    assert_eq!(bus, sorted);
    let mig_gpu = s
        .gpus
        .iter()
        .find(|g| g.mig.as_ref().is_some_and(|m| m.mode == Some(true)))
        .expect("one GPU in MIG mode");
    let mig = mig_gpu.mig.as_ref().unwrap();
    assert_eq!(mig.devices.len(), 2);
    assert!(mig.devices.iter().all(|d| d
        .uuid
        .as_ref()
        .is_some_and(|u| u.to_string().starts_with("MIG-"))
        && d.profile.is_some()));
    assert!(!mig.profiles.is_empty(), "mig -lgip read for the MIG GPU");
    let linked = &s.gpus[0];
    assert_eq!(linked.nvlinks.len(), 18);
    assert!(linked
        .nvlinks
        .iter()
        .all(|l| matches!(l.remote, Some(NvLinkRemote::NvSwitch(_)))));
    assert_eq!(linked.topology.len(), 7);
    assert!(linked
        .topology
        .keys()
        .all(|peer| s.gpus.iter().any(|g| &g.uuid == peer)));
    assert!(linked.fabric.is_some());
}

#[tokio::test]
async fn the_hash_is_stable_and_ignores_output_order() {
    let first = collect(&host("hgx-h100"), None).await.inventory;
    let again = collect(&host("hgx-h100"), None).await.inventory;
    assert_eq!(first.hash, again.hash);

    // The same host with nvidia-smi printing its GPUs in reverse order.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("hgx-h100");
    let status = Command::new("cp")
        .arg("-a")
        .arg(hosts().join("hgx-h100"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::copy(
        hosts().join("replay-nvidia-smi"),
        dir.path().join("replay-nvidia-smi"),
    )
    .unwrap();
    let qx_path = copy.join("answers/q-x.out");
    let qx = std::fs::read_to_string(&qx_path).unwrap();
    let start = qx.find("<gpu id=").unwrap();
    let end = qx.rfind("</gpu>").unwrap() + "</gpu>".len();
    let mut blocks: Vec<String> = qx[start..end]
        .split("<gpu id=")
        .filter(|b| !b.trim().is_empty())
        .map(|b| format!("<gpu id={}", b.trim_end()))
        .collect();
    blocks.reverse();
    let reordered = format!("{}{}\n{}", &qx[..start], blocks.join("\n"), &qx[end..]);
    std::fs::write(&qx_path, reordered).unwrap();
    let reversed = collect(&Host::fake(&copy), None).await.inventory;
    assert_eq!(reversed.gpu.gpus.len(), 8);
    assert_eq!(
        reversed.hash, first.hash,
        "output order must not change the hash"
    );
}

/// A copy of a fake host whose `-q -x` answer went through `edit`.
fn edited_host(name: &str, edit: impl FnOnce(String) -> String) -> (tempfile::TempDir, Host) {
    let dir = tempfile::tempdir().unwrap();
    let copy = processes::copy_host(dir.path(), name);
    let qx = copy.join("answers/q-x.out");
    let text = std::fs::read_to_string(&qx).unwrap();
    std::fs::write(&qx, edit(text)).unwrap();
    (dir, Host::fake(copy))
}

#[tokio::test]
async fn the_hash_follows_facts_not_usage() {
    let base = collect(&host("hgx-h100"), None).await.inventory.hash;
    let (_d, busy) = edited_host("hgx-h100", |t| {
        t.replace("<gpu_util>97 %</gpu_util>", "<gpu_util>3 %</gpu_util>")
            .replace("<used>45123 MiB</used>", "<used>7 MiB</used>")
            .replace("<gpu_temp>58 C</gpu_temp>", "<gpu_temp>31 C</gpu_temp>")
    });
    assert_eq!(
        collect(&busy, None).await.inventory.hash,
        base,
        "usage never enters the hash"
    );
    let (_d, ecc) = edited_host("hgx-h100", |t| {
        t.replacen(
            "<dram_correctable>0</dram_correctable>",
            "<dram_correctable>1</dram_correctable>",
            1,
        )
    });
    assert_ne!(
        collect(&ecc, None).await.inventory.hash,
        base,
        "an ECC counter is a fact"
    );
    let (_d, mig) = edited_host("hgx-h100", |t| {
        t.replacen(
            "<pending_mig>Disabled</pending_mig>",
            "<pending_mig>Enabled</pending_mig>",
            1,
        )
    });
    assert_ne!(
        collect(&mig, None).await.inventory.hash,
        base,
        "a MIG mode change is a fact"
    );
    let (_d, gone) = edited_host("hgx-h100", |t| {
        let start = t.rfind("<gpu id=").unwrap();
        let end = t.rfind("</gpu>").unwrap() + "</gpu>".len();
        format!("{}{}", &t[..start], &t[end..])
    });
    assert_ne!(
        collect(&gone, None).await.inventory.hash,
        base,
        "a GPU going is a fact"
    );
}

#[tokio::test]
async fn wsl2_gpu_comes_from_nvidia_smi_alone() {
    let c = collect(&host("wsl2"), None).await;
    let s = &c.inventory.gpu;
    assert_eq!(s.gpus.len(), 1);
    let g = &s.gpus[0];
    assert_eq!(g.index, 0);
    assert_eq!(
        g.bus_id.map(|a| a.nvml_bus_id()).as_deref(),
        Some("00000000:F1:00.0")
    );
    assert_eq!(g.numa_node, None);
    assert_eq!(g.serial, None, "serial 0 is no serial");
    assert!(g.topology.is_empty() && g.nvlinks.is_empty());
    assert_eq!(s.driver_version.as_deref(), Some("616.56"));
}

#[tokio::test]
async fn without_nvidia_smi_procfs_is_kept_without_cuda() {
    let h = Host::new(hosts().join("hgx-h100/root"), "/nonexistent/nvidia-smi");
    let c = collect(&h, None).await;
    assert!(c.snapshot_error.as_ref().is_some_and(|e| e.is_no_driver()));
    let s = &c.inventory.gpu;
    assert_eq!(s.gpus.len(), 8);
    assert!(s.cuda_driver_version.is_none());
    assert!(s.driver_version.is_some(), "the kernel module's version");
    assert!(s
        .gpus
        .iter()
        .all(|g| g.name.is_some() && g.numa_node.is_some()));
    assert_ne!(
        c.inventory.hash,
        collect(&host("hgx-h100"), None).await.inventory.hash
    );
}

#[tokio::test]
async fn a_gpu_on_vfio_pci_is_reported_from_the_memory() {
    let dir = tempfile::tempdir().unwrap();
    let memory = GpuMemory::new(dir.path());
    let pt = host("passthrough");
    // Without memory the GPU a VM holds is invisible.
    let plain = collect(&pt, None).await.inventory;
    assert_eq!(plain.gpu.gpus.len(), 1);
    // The node service remembered it when it was still on the driver.
    let mut remembered = plain.gpu.gpus[0].clone();
    remembered.uuid = "GPU-0badc0de-0000-4000-8000-000000000061".parse().unwrap();
    remembered.bus_id = Some("00000000:61:00.0".parse().unwrap());
    memory.remember(&[remembered]).unwrap();
    let c = collect(&pt, Some(&memory)).await;
    assert!(c.memory_error.is_none(), "{:?}", c.memory_error);
    let gpus = &c.inventory.gpu.gpus;
    assert_eq!(gpus.len(), 2);
    assert!(!gpus[0].passed_through);
    assert!(gpus[1].passed_through);
    assert_eq!(gpus[1].index, 1, "after the driver's GPUs");
    assert_eq!(
        gpus[1].bus_id.map(|a| a.nvml_bus_id()).as_deref(),
        Some("00000000:61:00.0")
    );
    assert!(gpus[1].mig.is_none() && gpus[1].nvlinks.is_empty());
    // The collection remembered the driver's GPU too, and kept the passed-through one.
    assert_eq!(memory.load().unwrap().len(), 2);
    assert_eq!(
        memory
            .gpu_address(&"GPU-0badc0de-0000-4000-8000-000000000061".parse().unwrap())
            .unwrap()
            .unwrap()
            .to_string(),
        "0000:61:00.0"
    );
}

// What broke: bcd hardware printed what nvidia-smi said raw, so an ESC, BEL or CR in a GPU's
// name or the driver's version reached the terminal; bcd status and bcd doctor escape them.
#[test]
fn bcd_hardware_escapes_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    for what in ["hgx-h100", "replay-nvidia-smi"] {
        let copied = Command::new("cp")
            .arg("-a")
            .arg(hosts().join(what))
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(copied.success());
    }
    let host = dir.path().join("hgx-h100");
    let qx = host.join("answers/q-x.out");
    let xml = std::fs::read_to_string(&qx).unwrap().replacen(
        "<product_name>NVIDIA H100 80GB HBM3</product_name>",
        "<product_name>NVIDIA H100\u{1b}[2J\u{7}\rfake</product_name>",
        1,
    );
    std::fs::write(&qx, xml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(["hardware", "--host"])
        .arg(&host)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        !text.chars().any(|c| c.is_control() && c != '\n'),
        "{text:?}"
    );
    assert!(text.contains("NVIDIA H100\\x1b[2J\\x07\\x0dfake"), "{text}");
}

// What broke: a failed -q -x read "bcd: nvidia-smi did not answer: nvidia-smi -q -x was killed
// by signal SIGKILL (9) (nvidia-smi did not answer: a GPU may be wedged ...)": the error says
// once what nvidia-smi did, then the hint what to do.
#[test]
fn bcd_hardware_says_what_nvidia_smi_did_once() {
    let dir = tempfile::tempdir().unwrap();
    let smi = dir.path().join("nvidia-smi");
    std::fs::write(
        &smi,
        format!(
            "#!/bin/sh\n[ \"$1 $2\" = \"-q -x\" ] && kill -KILL $$\nexec '{}' '{}' \"$@\"\n",
            hosts().join("replay-nvidia-smi").display(),
            hosts().join("hgx-h100/answers").display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("hardware")
        .arg("--host-root")
        .arg(hosts().join("hgx-h100/root"))
        .arg("--nvidia-smi")
        .arg(&smi)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bcd: nvidia-smi -q -x was killed by signal SIGKILL (9); a GPU may be wedged (Xid 79 or 119): gpu.reset or a reboot recovers it; showing what procfs and sysfs show"),
        "{err}"
    );
    assert!(!err.contains("did not answer"), "{err}");
}

#[test]
fn bcd_hardware_prints_the_inventory_document() {
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(["hardware", "--json", "--host"])
        .arg(hosts().join("hgx-h100"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["hash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(doc["gpu"]["gpus"].as_array().unwrap().len(), 8);
    let text = String::from_utf8(doc.to_string().into_bytes()).unwrap();
    assert!(
        !text.contains("N/A"),
        "absent values are omitted, never N/A"
    );

    // A host with neither a driver nor an NVIDIA GPU on its bus: nothing is wrong.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("hardware")
        .arg("--host-root")
        .arg(empty.path())
        .arg("--nvidia-smi")
        .arg(empty.path().join("no-nvidia-smi"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("nvml: nvidia-smi not found (no NVIDIA driver on this host)"));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no NVIDIA GPU on the PCI bus"),
        "a host without GPUs says so plainly: {out:?}"
    );
}

/// The memory file is rewritten in a loop by a child process that is killed at arbitrary
/// moments; the file must always parse afterwards.
#[test]
fn a_killed_writer_never_leaves_a_torn_memory_file() {
    if let Ok(dir) = std::env::var("BCD_TEST_MEMORY_WRITER") {
        let memory = GpuMemory::new(Path::new(&dir));
        for round in 0u64.. {
            let gpus: Vec<_> = (0..64)
                .map(|i| {
                    let uuid = format!("GPU-{round:08x}-0000-4000-8000-{i:012x}");
                    bcd::inventory::document::Gpu {
                        bus_id: Some(format!("00000000:{i:02X}:00.0").parse().unwrap()),
                        name: Some("x".repeat((round % 50) as usize)),
                        ..bcd::inventory::document::Gpu::new(0, uuid.parse().unwrap())
                    }
                })
                .collect();
            memory.remember(&gpus).unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let memory = GpuMemory::new(dir.path());
    for i in 0..20u64 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "inventory_hosts::a_killed_writer_never_leaves_a_torn_memory_file",
                "--nocapture",
            ])
            .env("BCD_TEST_MEMORY_WRITER", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20 + (i * 37) % 60));
        child.kill().unwrap();
        child.wait().unwrap();
        if memory.path().exists() {
            let known = memory
                .load()
                .expect("the memory file must parse after a SIGKILL");
            assert!(known.len() <= 64);
        }
    }
    assert!(
        memory.path().exists(),
        "the writer got to write at least once"
    );
}

/// Every demo host and the SHA-256 of its whole inventory document as `bcd hardware --json`
/// prints it (the three HGX hosts differ in their kernel log and services, not their GPUs).
/// A change here is a change of the document: say so in the commit.
const GOLDEN: &[(&str, &str)] = &[
    (
        "a100-mig",
        "71a8c216ad78bf9e2c909c4fc5b0aefad85d0a1a1c308a0b6962ae5e64bd0839",
    ),
    (
        "hgx-faults",
        "bf1b58bc4a42ea771204d7d3c485c31e6e373f1c30a340e35b3a6dce5bcc1f6d",
    ),
    (
        "hgx-h100",
        "bf1b58bc4a42ea771204d7d3c485c31e6e373f1c30a340e35b3a6dce5bcc1f6d",
    ),
    (
        "hgx-no-fabric-manager",
        "bf1b58bc4a42ea771204d7d3c485c31e6e373f1c30a340e35b3a6dce5bcc1f6d",
    ),
    (
        "no-driver",
        "2abe9a74cb57059d9664d3048a68ed2797bdda27b2e26279e348365b408c2972",
    ),
    (
        "passthrough",
        "a0611f8b8b61a609cb542cf2cf1bacf840bd5aa25395fb455d5f36a47c1a307d",
    ),
    (
        "r470-old",
        "7f5ec5b9cfbe586bd8c5f23655df3fda75abbf530b1ef23cb34a3db124ea2404",
    ),
    (
        "wedged",
        "05f842ec510a2d390f31b0deba8afc9681a10f4b6cd73b947d4e2605932c9010",
    ),
    (
        "wsl2",
        "42e9f198ba18e3d8c2fd58c69c8d932063331d97ed0d66cca9a6d2090281da6d",
    ),
];

fn document_digest(inventory: &bcd::inventory::document::Inventory) -> String {
    use sha2::Digest;
    let json = serde_json::to_string_pretty(inventory).unwrap();
    format!("{:x}", sha2::Sha256::digest(json.as_bytes()))
}

// Guards refactors of the agent's internal types (typed IDs, conditions): the inventory
// document of every demo host must stay byte-identical.
#[tokio::test]
async fn every_demo_host_keeps_its_inventory_document_byte_identical() {
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(hosts()).unwrap() {
        let path = entry.unwrap().path();
        if !path.join("root").is_dir() {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // The wedged host's nvidia-smi never answers: a short bound gives the same document.
        let h = host(&name);
        let runner = bcd::smi::runner::Runner::new(h.nvidia_smi())
            .with_timeout(std::time::Duration::from_secs(2));
        let c = bcd::inventory::collect::collect_with(&h, None, &runner).await;
        seen.push((name, document_digest(&c.inventory)));
    }
    seen.sort();
    let pinned: Vec<(String, String)> = GOLDEN
        .iter()
        .map(|(h, d)| ((*h).to_owned(), (*d).to_owned()))
        .collect();
    assert_eq!(seen, pinned);
}
