//! A real CDI consumer: Debian's podman (4.3) runs a busybox container with hold specs that
//! bcd's converger wrote, and the test looks inside, through one [`PodmanSandbox`].
//!
//! podman 4.3 reads CDI specs only from `/etc/cdi` and `/var/run/cdi` (the `containers.conf`
//! setting for spec folders is honoured only from podman 5.5), and as root it writes below
//! `/etc`, `/var` (`/var/tmp`, `/var/lib/containers`, `/var/lib/cni`) and `/run` (`libpod`,
//! `runc`, `containers`) whatever its configuration says. So every podman command runs under
//! `unshare -m` in a private mount namespace where:
//! - `/run` is a fresh tmpfs (on Debian `/var/run` is a link to it), so `/var/run/cdi` can be
//!   made there and whatever podman and runc keep in `/run` ends with the command;
//! - `/etc` and `/var` are overlays of themselves whose upper folders are on a tmpfs mounted in
//!   that namespace, so `/etc/cdi` can be made without creating it on the host, and podman's
//!   writes there vanish with the command. The uppers are on a tmpfs rather than in the
//!   sandbox's folder because overlayfs refuses an upper folder on overlayfs (a container's
//!   root file system), and a tmpfs works under any; the probe of that is the first command,
//!   the image import, which fails with the mount's own words;
//! - the sandbox's `etc-cdi` and `run-cdi` folders are bound on `/etc/cdi` and `/var/run/cdi`.
//!
//! Nothing of the host's `/etc`, `/var` or `/run` is created, changed or removed, so tests that
//! run podman at once cannot pull a mount point from under each other. Storage is `vfs` in the
//! sandbox's folder (it outlives each command: the imported image is there for the runs),
//! cgroups `cgroupfs`, events go to a file, the runtime is `runc` (crun refuses hybrid cgroup
//! hosts) and the ulimits are set (podman as root fails `setrlimit` on some hosts otherwise).
//! The vendor spec's device nodes are made real with `mknod` in the sandbox's folder. Skipped
//! without root (mknod, unshare -m), and without podman, runc or busybox (a failure under CI).

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bcd::cdi::spec::{parse_spec, Format};
use bcd::cdi::{converge, read_vendor_specs, Holds};
use bcd_testkit::{require, Peer};
use serde_json::Value;

use super::{catalog, placed, repo, topology, H100, H100_MIG};

/// What a container saw: its NVIDIA device nodes and its environment.
struct Inside {
    nodes: Vec<String>,
    env: Vec<String>,
}

impl Inside {
    /// The GPUs' device nodes the container has (`/dev/nvidia<N>`).
    fn gpus(&self) -> Vec<&String> {
        self.nodes
            .iter()
            .filter(|n| n.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok())
            .collect()
    }
}

/// The folders of the host that the sandbox covers; its own folder must be outside them.
const COVERED: [&str; 3] = ["/etc", "/var", "/run"];

/// A scratch podman in a private mount namespace per command (see the module header): its
/// configuration, storage, and the folders it sees as `/etc/cdi` and `/var/run/cdi`.
struct PodmanSandbox {
    dir: PathBuf,
    podman: PathBuf,
    unshare: PathBuf,
}

impl PodmanSandbox {
    /// A sandbox in `dir` with the busybox image imported; `None` after skipping when podman
    /// cannot run here.
    fn new(dir: &Path) -> Option<Self> {
        if !nix::unistd::geteuid().is_root() {
            bcd_testkit::skip("podman's CDI test needs root (mknod, unshare -m)");
            return None;
        }
        let podman = require(Peer::Podman)?;
        require(Peer::Runc)?;
        require(Peer::Mount)?;
        let unshare = require(Peer::Unshare)?;
        let busybox = require(Peer::Busybox)?;
        let dir = fs::canonicalize(dir).unwrap();
        assert!(
            !COVERED.iter().any(|c| dir.starts_with(c)),
            "the podman sandbox's folder {} is under a folder it covers ({COVERED:?}); set TMPDIR elsewhere",
            dir.display()
        );
        let p = Self {
            dir: dir.clone(),
            podman,
            unshare,
        };
        for sub in [
            "rootfs/bin",
            "graph",
            "run",
            "tmp",
            "etc-cdi",
            "run-cdi",
            "dev",
        ] {
            fs::create_dir_all(dir.join(sub)).unwrap();
        }
        fs::write(
            dir.join("containers.conf"),
            format!(
                "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\nnetns = \"none\"\n\
                 [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\nruntime = \"runc\"\ntmp_dir = \"{}\"\n",
                dir.join("tmp").display()
            ),
        )
        .unwrap();
        fs::write(
            dir.join("storage.conf"),
            format!(
                "[storage]\ndriver = \"vfs\"\nrunroot = \"{}\"\ngraphroot = \"{}\"\n",
                dir.join("run").display(),
                dir.join("graph").display()
            ),
        )
        .unwrap();
        // A busybox-static rootfs, imported locally: there is no registry here.
        fs::copy(busybox, dir.join("rootfs/bin/busybox")).unwrap();
        for applet in ["sh", "find", "env", "sort", "cat"] {
            std::os::unix::fs::symlink("busybox", dir.join("rootfs/bin").join(applet)).unwrap();
        }
        let import = p.sh("tar -C rootfs -c . | podman import - localhost/bcd-busybox >/dev/null");
        assert!(
            import.status.success(),
            "podman import in the sandbox: {}",
            String::from_utf8_lossy(&import.stderr)
        );
        Some(p)
    }

    /// Writes a runnable NVIDIA spec (its device nodes made under `dev`) in the sandbox's
    /// `/etc/cdi`, and the vendor specs bcd reads from there.
    fn nvidia(&self, dev: &Path) -> Vec<bcd::cdi::VendorSpec> {
        let cdi = self.cdi();
        runnable_vendor_spec(dev, &cdi.join("nvidia.json"));
        read_vendor_specs(std::slice::from_ref(&cdi)).specs
    }

    /// The folder the containers see as `/etc/cdi`.
    fn cdi(&self) -> PathBuf {
        self.dir.join("etc-cdi")
    }

    /// The folder the containers see as `/var/run/cdi` (CDI's folder for specs made at run
    /// time, where a DRA driver writes).
    fn run_cdi(&self) -> PathBuf {
        self.dir.join("run-cdi")
    }

    /// Runs `script` with `sh -c` in the sandbox's folder, in a private mount namespace set up
    /// as the module header says, with podman configured to keep its state in the sandbox.
    fn sh(&self, script: &str) -> Output {
        let d = self.dir.display();
        let setup = format!(
            "set -e\n\
             mount -t tmpfs -o mode=0755 bcd-sandbox-run /run\n\
             mkdir -p '{d}/upper'\n\
             mount -t tmpfs -o mode=0755 bcd-sandbox-upper '{d}/upper'\n\
             for top in etc var; do\n\
               mkdir -p \"{d}/upper/$top/upper\" \"{d}/upper/$top/work\"\n\
               mount -t overlay bcd-sandbox-$top -o \"lowerdir=/$top,upperdir={d}/upper/$top/upper,workdir={d}/upper/$top/work\" \"/$top\"\n\
             done\n\
             mkdir -p /etc/cdi /var/run/cdi\n\
             mount --bind '{d}/etc-cdi' /etc/cdi\n\
             mount --bind '{d}/run-cdi' /var/run/cdi\n\
             {script}\n"
        );
        Command::new(&self.unshare)
            .args(["-m", "--propagation", "private", "sh", "-c", &setup])
            .current_dir(&self.dir)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .env("PATH", self.path_with_podman())
            .output()
            .unwrap()
    }

    /// `PATH` with podman's folder first, so the sandbox runs the podman that was required.
    fn path_with_podman(&self) -> std::ffi::OsString {
        let mut paths = vec![self.podman.parent().unwrap().to_path_buf()];
        paths.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        std::env::join_paths(paths).unwrap()
    }

    /// Runs the container with `devices` (`bcd.dev/gpu=<name>`) and reports what it saw.
    fn run(&self, devices: &[&str]) -> Inside {
        let names: Vec<String> = devices.iter().map(|d| format!("bcd.dev/gpu={d}")).collect();
        self.run_names(&names)
    }

    /// Runs the container with fully qualified CDI device names and reports what it saw.
    fn run_names(&self, names: &[String]) -> Inside {
        let flags: String = names.iter().map(|d| format!(" --device {d}")).collect();
        let out = self.sh(&format!(
            "exec podman run --rm --network none{flags} localhost/bcd-busybox \
             /bin/sh -c 'find /dev -name \"nvidia*\" | sort; echo --; env'"
        ));
        assert!(
            out.status.success(),
            "podman run{flags}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (nodes, env) = text.split_once("--\n").unwrap();
        Inside {
            nodes: nodes.lines().map(str::to_owned).collect(),
            env: env.lines().map(str::to_owned).collect(),
        }
    }
}

/// NVIDIA's spec for the 8-GPU fake host, made runnable here: its device nodes are real
/// nodes (the spec's major and minor) under `dev`, and the hooks and library mounts, which
/// need the driver's files, are left out.
fn runnable_vendor_spec(dev: &Path, to: &Path) {
    runnable_spec(&repo().join("testdata/cdi/hgx-h100-uuid.json"), dev, to);
}

/// [`runnable_vendor_spec`] of the NVIDIA spec at `from`.
fn runnable_spec(from: &Path, dev: &Path, to: &Path) {
    fs::create_dir_all(dev).unwrap();
    let bytes = fs::read(from).unwrap();
    let mut spec: Value = serde_json::from_slice(&bytes).unwrap();
    let (common, devices) = {
        let obj = spec.as_object_mut().unwrap();
        let mut common = obj.remove("containerEdits").unwrap();
        let mut devices = obj.remove("devices").unwrap();
        for e in std::iter::once(&mut common).chain(
            devices
                .as_array_mut()
                .unwrap()
                .iter_mut()
                .map(|d| &mut d["containerEdits"]),
        ) {
            let e = e.as_object_mut().unwrap();
            e.remove("hooks");
            e.remove("mounts");
            for node in e
                .get_mut("deviceNodes")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let path = node["path"].as_str().unwrap().to_owned();
                let host = dev.join(path.trim_start_matches("/dev/").replace('/', "_"));
                let major = node["major"].as_u64().unwrap_or(0);
                let minor = node["minor"].as_u64().unwrap_or(0);
                let exists =
                    fs::symlink_metadata(&host).is_ok_and(|m| m.file_type().is_char_device());
                if !exists {
                    nix::sys::stat::mknod(
                        &host,
                        nix::sys::stat::SFlag::S_IFCHR,
                        nix::sys::stat::Mode::from_bits_truncate(0o666),
                        nix::sys::stat::makedev(major, minor),
                    )
                    .unwrap();
                }
                node["hostPath"] = Value::String(host.display().to_string());
            }
        }
        (common, devices)
    };
    spec["containerEdits"] = common;
    spec["devices"] = devices;
    let text = serde_json::to_vec_pretty(&spec).unwrap();
    parse_spec(&text, Format::Json).expect("still a CDI spec");
    fs::write(to, text).unwrap();
}

#[tokio::test]
async fn podman_gives_a_container_exactly_the_devices_it_asked_for() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(podman) = PodmanSandbox::new(tmp.path()) else {
        return;
    };
    let cdi = podman.cdi();
    runnable_vendor_spec(&tmp.path().join("dev"), &cdi.join("nvidia.json"));

    // Holds written by the converger, as bcd node writes them.
    let t = topology("hgx-h100", 4).await;
    let data = tmp.path().join("data");
    fs::create_dir_all(&data).unwrap();
    let mut holds = Holds::load(&data).unwrap();
    let three = [H100[0], H100[1], H100[2]];
    holds
        .apply(
            "three".parse().unwrap(),
            placed(&t, &three),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
    holds
        .apply(
            "mig".parse().unwrap(),
            placed(&t, &[H100_MIG[0]]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
    let slot = format!("{}::2", H100[5]);
    holds
        .apply(
            "slot".parse().unwrap(),
            placed(&t, &[&slot]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
    let vendor = read_vendor_specs(std::slice::from_ref(&cdi)).specs;
    let done = converge(&mut holds, &vendor, &catalog("hgx-h100").await, &cdi);
    assert!(
        done.errors.is_empty() && done.unnamed.is_empty(),
        "{done:?}"
    );

    let started = std::time::Instant::now();
    // Two of the hold's three devices: only those two, and no variable naming any.
    let two = podman.run(&[H100[0], H100[1]]);
    let took = started.elapsed();
    assert!(
        two.nodes.contains(&"/dev/nvidia0".to_owned()),
        "{:?}",
        two.nodes
    );
    assert!(
        two.nodes.contains(&"/dev/nvidia1".to_owned()),
        "{:?}",
        two.nodes
    );
    assert!(
        !two.nodes.contains(&"/dev/nvidia2".to_owned()),
        "{:?}",
        two.nodes
    );
    assert!(
        two.nodes.contains(&"/dev/nvidiactl".to_owned()),
        "the common edits"
    );
    assert!(
        two.env.contains(&"NVIDIA_VISIBLE_DEVICES=void".to_owned()),
        "{:?}",
        two.env
    );
    assert!(
        !two.env.iter().any(|e| e.contains(H100[2])),
        "{:?}",
        two.env
    );

    // The whole hold, by its name: all three, and the variable naming them.
    let all = podman.run(&["three"]);
    for n in 0..3 {
        assert!(
            all.nodes.contains(&format!("/dev/nvidia{n}")),
            "{:?}",
            all.nodes
        );
    }
    assert!(!all.nodes.contains(&"/dev/nvidia3".to_owned()));
    assert!(
        all.env
            .contains(&format!("NVIDIA_VISIBLE_DEVICES={}", three.join(","))),
        "{:?}",
        all.env
    );

    // A MIG device: its GPU's node and its own caps, no other GPU's node.
    let mig = podman.run(&[H100_MIG[0]]);
    assert!(
        mig.nodes.contains(&"/dev/nvidia3".to_owned()),
        "{:?}",
        mig.nodes
    );
    assert!(mig.nodes.iter().any(|n| n.starts_with("/dev/nvidia-caps/")));
    assert!(!mig.nodes.contains(&"/dev/nvidia0".to_owned()));

    // A slot (its id holds "::", which CDI's names allow): its GPU's node only.
    let s = podman.run(&[&slot]);
    assert!(
        s.nodes.contains(&"/dev/nvidia5".to_owned()),
        "{:?}",
        s.nodes
    );
    assert!(!s.nodes.contains(&"/dev/nvidia0".to_owned()));
    eprintln!("podman run with two hold devices took {took:?}");
}

// What broke: a MIG device a layout had just created was in no spec a container runtime could
// use until someone regenerated NVIDIA's spec by hand. Here the layout's steps run on the
// stateful fake nvidia-smi as the helper runs them (destroy, create), NVIDIA's spec is written
// by the fake nvidia-ctk as the helper's regeneration writes it, and a hold of the new device
// runs in podman with exactly that instance's caps nodes.
#[tokio::test]
async fn a_mig_device_a_layout_created_runs_in_podman_with_exactly_its_caps_nodes() {
    let tmp = tempfile::tempdir().unwrap();
    let bins = PathBuf::from(env!("CARGO_BIN_EXE_bcd"))
        .parent()
        .unwrap()
        .to_path_buf();
    for name in ["bcd-fake-nvidia-smi", "bcd-fake-nvidia-ctk"] {
        if bcd_testkit::built(&bins.join(name)).is_none() {
            return;
        }
    }
    let Some(podman) = PodmanSandbox::new(tmp.path()) else {
        return;
    };
    let host = bcd_testkit::copy_host(tmp.path(), "a100-mig");
    bcd_testkit::install_fake_smi(&host, &bcd_testkit::fake_smi::a100_mig_state(), &bins);
    let smi = |args: &[&str]| {
        let out = Command::new(host.join("bin/nvidia-smi"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "nvidia-smi {args:?}: {out:?}");
    };
    smi(&["mig", "-i", "00000000:07:00.0", "-dci"]);
    smi(&["mig", "-i", "00000000:07:00.0", "-dgi"]);
    smi(&["mig", "-i", "00000000:07:00.0", "-cgi", "14,19", "-C"]);
    let generated = tmp.path().join("generated.json");
    let ctk = Command::new(host.join("bin/nvidia-ctk"))
        .args([
            "cdi",
            "generate",
            "--device-name-strategy=uuid",
            "--format=json",
        ])
        .arg(format!("--output={}", generated.display()))
        .output()
        .unwrap();
    assert!(ctk.status.success(), "{ctk:?}");
    let cdi = podman.cdi();
    runnable_spec(
        &generated,
        &tmp.path().join("dev"),
        &cdi.join("nvidia.json"),
    );

    let fake = bcd::sys::host::Host::fake(&host);
    let collection = bcd::inventory::collect::collect(&fake, None).await;
    let t = bcd::device::policy::Topology::from_inventory(&collection.inventory, 0);
    let mut catalog = bcd::cdi::DeviceCatalog::from_inventory(&collection.inventory);
    catalog.add_mig_numbers(&collection.snapshot.expect("the fake answers").listed);
    let gpu0 = collection
        .inventory
        .gpu
        .gpus
        .iter()
        .find(|g| g.index == 0)
        .unwrap();
    let new_mig = gpu0
        .mig
        .as_ref()
        .unwrap()
        .devices
        .iter()
        .find(|d| d.profile.as_deref() == Some("2g.20gb"))
        .and_then(|d| d.uuid.clone())
        .expect("the new 2g.20gb instance")
        .to_string();
    let data = tmp.path().join("data");
    fs::create_dir_all(&data).unwrap();
    let mut holds = Holds::load(&data).unwrap();
    holds
        .apply(
            "job-1".parse().unwrap(),
            placed(&t, &[&new_mig]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
    let vendor = read_vendor_specs(std::slice::from_ref(&cdi)).specs;
    let done = converge(&mut holds, &vendor, &catalog, &cdi);
    assert!(
        done.errors.is_empty() && done.unnamed.is_empty(),
        "{done:?}"
    );

    // Exactly the caps nodes NVIDIA's spec gives that instance, and GPU 0's node only.
    let spec: Value = serde_json::from_slice(&fs::read(&generated).unwrap()).unwrap();
    let mut want: Vec<String> = spec["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == new_mig.as_str())
        .unwrap()["containerEdits"]["deviceNodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["path"].as_str().unwrap().to_owned())
        .filter(|p| p.starts_with("/dev/nvidia-caps/"))
        .collect();
    want.sort();
    assert_eq!(
        want.len(),
        2,
        "its GPU instance's and compute instance's: {want:?}"
    );
    let inside = podman.run(&[&new_mig]);
    let mut caps: Vec<String> = inside
        .nodes
        .iter()
        .filter(|n| n.starts_with("/dev/nvidia-caps/"))
        .cloned()
        .collect();
    caps.sort();
    assert_eq!(caps, want, "{:?}", inside.nodes);
    assert_eq!(inside.gpus(), ["/dev/nvidia0"], "{:?}", inside.nodes);
}

// The CDI names a Kubernetes allocation answers (NVIDIA's own where NVIDIA's spec names the
// device) give the container exactly the allocated device nodes: two whole GPUs, a MIG
// device, a slot (its GPU's).
#[tokio::test]
async fn the_cdi_names_of_an_allocation_give_exactly_the_allocated_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(podman) = PodmanSandbox::new(tmp.path()) else {
        return;
    };
    let vendor = podman.nvidia(&tmp.path().join("dev"));
    let catalog = catalog("hgx-h100").await;
    let names = |devices: &[&str]| -> Vec<String> {
        devices
            .iter()
            .map(|d| bcd::kubelet::devices::cdi_name(&d.parse().unwrap(), &vendor, &catalog))
            .collect()
    };
    let two = names(&[H100[1], H100[6]]);
    assert_eq!(two[0], format!("nvidia.com/gpu={}", H100[1]));
    let inside = podman.run_names(&two);
    let gpus = inside.gpus();
    assert_eq!(gpus, ["/dev/nvidia1", "/dev/nvidia6"], "{:?}", inside.nodes);
    let mig = podman.run_names(&names(&[H100_MIG[1]]));
    assert!(
        mig.nodes.contains(&"/dev/nvidia3".to_owned()),
        "{:?}",
        mig.nodes
    );
    assert!(mig.nodes.iter().any(|n| n.starts_with("/dev/nvidia-caps/")));
    assert!(!mig.nodes.contains(&"/dev/nvidia0".to_owned()));
    let slot = podman.run_names(&names(&[&format!("{}::1", H100[4])]));
    let gpus = slot.gpus();
    assert_eq!(gpus, ["/dev/nvidia4"], "{:?}", slot.nodes);
}

// A prepared DRA claim's transient spec, in /var/run/cdi, gives the container exactly the
// claim's device nodes through its CDI id (a share of a shared GPU too, through its slot),
// and NVIDIA_VISIBLE_DEVICES=void (podman 4.3 reads the spec's cdiVersion 0.5.0 and the class
// without dots).
#[tokio::test]
async fn a_prepared_dra_claims_cdi_id_gives_exactly_its_device() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(podman) = PodmanSandbox::new(tmp.path()) else {
        return;
    };
    let vendor = podman.nvidia(&tmp.path().join("dev"));
    let catalog = catalog("hgx-h100").await;
    let uid = "0b6f3c1e-2d4a-4e8b-9c1d-5e6f7a8b9c0d";
    let hold = bcd::dra::prepare::hold_id(uid).unwrap();
    // A share of a shared GPU is held as a slot and named by it (`<device>-<slot>`).
    let devices = [
        (H100[6].parse().unwrap(), "gpu-6".to_owned()),
        (H100_MIG[1].parse().unwrap(), "gpu-3-mig-2-0".to_owned()),
        (
            format!("{}::1", H100[5]).parse().unwrap(),
            "gpu-5-shared-1".to_owned(),
        ),
    ];
    let spec = bcd::dra::prepare::claim_spec(uid, &hold, &devices, &vendor, &catalog);
    let path = bcd::dra::prepare::spec_path(&podman.run_cdi(), uid);
    fs::write(&path, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
    let inside = podman.run_names(&[bcd::dra::prepare::cdi_id(uid, "gpu-6")]);
    let gpus = inside.gpus();
    assert_eq!(gpus, ["/dev/nvidia6"], "{:?}", inside.nodes);
    assert!(
        inside
            .env
            .contains(&"NVIDIA_VISIBLE_DEVICES=void".to_owned()),
        "{:?}",
        inside.env
    );
    let share = podman.run_names(&[bcd::dra::prepare::cdi_id(uid, "gpu-5-shared-1")]);
    let gpus = share.gpus();
    assert_eq!(gpus, ["/dev/nvidia5"], "a share's slot: {:?}", share.nodes);
    let mig = podman.run_names(&[bcd::dra::prepare::cdi_id(uid, "gpu-3-mig-2-0")]);
    assert!(
        mig.nodes.contains(&"/dev/nvidia3".to_owned()),
        "{:?}",
        mig.nodes
    );
    assert!(
        !mig.nodes.contains(&"/dev/nvidia6".to_owned()),
        "{:?}",
        mig.nodes
    );
}

/// A spec of kind `bcd.test/<kind>` with one device, `probe`, that only sets `<var>=1`.
fn probe_spec(to: &Path, kind: &str, var: &str) {
    let spec = serde_json::json!({
        "cdiVersion": "0.5.0",
        "kind": format!("bcd.test/{kind}"),
        "devices": [{ "name": "probe", "containerEdits": { "env": [format!("{var}=1")] } }],
    });
    fs::write(to, serde_json::to_vec_pretty(&spec).unwrap()).unwrap();
}

// Two podman tests made /etc/cdi when it was missing and removed it when they ended, so the
// first to end pulled the mount point from under the other (1 green run in 8 where /etc/cdi
// did not exist). Each podman command now sees /etc/cdi and /var/run/cdi in a mount namespace
// of its own, and the host's folders are neither made nor removed.
#[test]
fn podman_runs_at_once_need_no_etc_cdi_on_the_host_and_leave_it_as_it_was() {
    let host_had = || {
        (
            Path::new("/etc/cdi").exists(),
            Path::new("/var/run/cdi").exists(),
        )
    };
    let before = host_had();
    let tmp = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut sandboxes = Vec::new();
    for dir in &tmp {
        let Some(sandbox) = PodmanSandbox::new(dir.path()) else {
            return;
        };
        probe_spec(&sandbox.cdi().join("etc.json"), "etc", "FROM_ETC_CDI");
        probe_spec(
            &sandbox.run_cdi().join("run.json"),
            "run",
            "FROM_VAR_RUN_CDI",
        );
        sandboxes.push(sandbox);
    }
    let names = [
        "bcd.test/etc=probe".to_owned(),
        "bcd.test/run=probe".to_owned(),
    ];
    std::thread::scope(|scope| {
        let runs: Vec<_> = sandboxes
            .iter()
            .map(|sandbox| {
                scope.spawn(|| {
                    (0..3)
                        .map(|_| sandbox.run_names(&names).env)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for run in runs {
            for env in run.join().unwrap() {
                assert!(env.contains(&"FROM_ETC_CDI=1".to_owned()), "{env:?}");
                assert!(env.contains(&"FROM_VAR_RUN_CDI=1".to_owned()), "{env:?}");
            }
        }
    });
    assert_eq!(
        host_had(),
        before,
        "(/etc/cdi, /var/run/cdi) on the host changed"
    );
}
