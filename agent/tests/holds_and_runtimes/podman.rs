//! A real CDI consumer: Debian's podman (4.3) runs a busybox container with hold specs that
//! bcd's converger wrote, and the test looks inside. podman 4.3 reads specs only from
//! `/etc/cdi` and `/var/run/cdi`, so it runs under `unshare -m` with a scratch folder bound
//! on `/etc/cdi`; the vendor spec's device nodes are made real with `mknod` in a scratch
//! folder. Storage is `vfs`, cgroups `cgroupfs`, events go to a file, the runtime is `runc`
//! (crun refuses hybrid cgroup hosts) and the ulimits are set (podman as root fails
//! `setrlimit` on some hosts otherwise). Skipped, saying why, without podman or root.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use bcd::cdi::spec::{parse_spec, Format};
use bcd::cdi::{converge, read_vendor_specs, Holds};
use serde_json::Value;

use super::{catalog, placed, repo, topology, H100, H100_MIG};

/// What a container saw: its NVIDIA device nodes and its environment.
struct Inside {
    nodes: Vec<String>,
    env: Vec<String>,
}

/// Why podman cannot run here, when it cannot.
fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("podman's CDI test needs root (mknod, unshare -m)".into());
    }
    for tool in ["podman", "runc", "unshare", "mount"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "{tool} is not installed (apt-get install podman runc busybox-static)"
            ));
        }
    }
    if !Path::new("/bin/busybox").exists() {
        return Some("/bin/busybox is missing (apt-get install busybox-static)".into());
    }
    None
}

/// A scratch podman: its configuration, storage and the CDI folder it sees as `/etc/cdi`.
struct Podman {
    dir: PathBuf,
}

impl Podman {
    fn new(dir: &Path) -> Self {
        let p = Self {
            dir: dir.to_path_buf(),
        };
        for sub in ["rootfs/bin", "graph", "run", "tmp", "cdi", "dev"] {
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
        fs::copy("/bin/busybox", dir.join("rootfs/bin/busybox")).unwrap();
        for applet in ["sh", "find", "env", "sort"] {
            std::os::unix::fs::symlink("busybox", dir.join("rootfs/bin").join(applet)).unwrap();
        }
        let import = p
            .command("tar -C rootfs -c . | podman import - localhost/bcd-busybox >/dev/null")
            .output()
            .unwrap();
        assert!(
            import.status.success(),
            "{}",
            String::from_utf8_lossy(&import.stderr)
        );
        p
    }

    fn cdi(&self) -> PathBuf {
        self.dir.join("cdi")
    }

    fn command(&self, script: &str) -> Command {
        let mut c = Command::new("sh");
        c.current_dir(&self.dir)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .args(["-c", script]);
        c
    }

    /// Runs the container with `devices` (`bcd.dev/gpu=<name>`) and reports what it saw.
    fn run(&self, devices: &[&str]) -> Inside {
        let names: Vec<String> = devices.iter().map(|d| format!("bcd.dev/gpu={d}")).collect();
        self.run_names(&names)
    }

    /// Runs the container with fully qualified CDI device names and reports what it saw.
    fn run_names(&self, names: &[String]) -> Inside {
        let flags: String = names.iter().map(|d| format!(" --device {d}")).collect();
        let script = format!(
            "mount --bind {cdi} /etc/cdi && exec podman run --rm --network none{flags} \
             localhost/bcd-busybox /bin/sh -c 'find /dev -name \"nvidia*\" | sort; echo --; env'",
            cdi = self.cdi().display()
        );
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .current_dir(&self.dir)
            .env("CONTAINERS_CONF", self.dir.join("containers.conf"))
            .env("CONTAINERS_STORAGE_CONF", self.dir.join("storage.conf"))
            .output()
            .unwrap();
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
    let bytes = fs::read(repo().join("testdata/cdi/hgx-h100-uuid.json")).unwrap();
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
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let podman = Podman::new(tmp.path());
    let cdi = podman.cdi();
    runnable_vendor_spec(&tmp.path().join("dev"), &cdi.join("nvidia.json"));

    // Holds written by the converger, as bcd node writes them.
    let t = topology("hgx-h100", 4).await;
    let data = tmp.path().join("data");
    fs::create_dir_all(&data).unwrap();
    let mut holds = Holds::load(&data).unwrap();
    let three = [H100[0], H100[1], H100[2]];
    holds
        .apply("three".parse().unwrap(), placed(&t, &three), false, &t)
        .unwrap();
    holds
        .apply(
            "mig".parse().unwrap(),
            placed(&t, &[H100_MIG[0]]),
            false,
            &t,
        )
        .unwrap();
    let slot = format!("{}::2", H100[5]);
    holds
        .apply("slot".parse().unwrap(), placed(&t, &[&slot]), false, &t)
        .unwrap();
    let vendor = read_vendor_specs(std::slice::from_ref(&cdi)).specs;
    let done = converge(&mut holds, &vendor, &catalog("hgx-h100").await, &cdi);
    assert!(
        done.errors.is_empty() && done.unnamed.is_empty(),
        "{done:?}"
    );

    let created_etc_cdi = !Path::new("/etc/cdi").exists();
    if created_etc_cdi {
        fs::create_dir_all("/etc/cdi").unwrap();
    }
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
    if created_etc_cdi {
        let _ = fs::remove_dir("/etc/cdi");
    }
    eprintln!("podman run with two hold devices took {took:?}");
}

// The CDI names a Kubernetes allocation answers (NVIDIA's own where NVIDIA's spec names the
// device) give the container exactly the allocated device nodes: two whole GPUs, a MIG
// device, a slot (its GPU's).
#[tokio::test]
async fn the_cdi_names_of_an_allocation_give_exactly_the_allocated_devices() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let podman = Podman::new(tmp.path());
    let cdi = podman.cdi();
    runnable_vendor_spec(&tmp.path().join("dev"), &cdi.join("nvidia.json"));
    let vendor = read_vendor_specs(std::slice::from_ref(&cdi)).specs;
    let catalog = catalog("hgx-h100").await;
    let names = |devices: &[&str]| -> Vec<String> {
        devices
            .iter()
            .map(|d| bcd::kubelet::devices::cdi_name(&d.parse().unwrap(), &vendor, &catalog))
            .collect()
    };
    let created_etc_cdi = !Path::new("/etc/cdi").exists();
    if created_etc_cdi {
        fs::create_dir_all("/etc/cdi").unwrap();
    }
    let two = names(&[H100[1], H100[6]]);
    assert_eq!(two[0], format!("nvidia.com/gpu={}", H100[1]));
    let inside = podman.run_names(&two);
    let gpus: Vec<&String> = inside
        .nodes
        .iter()
        .filter(|n| n.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok())
        .collect();
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
    let gpus: Vec<&String> = slot
        .nodes
        .iter()
        .filter(|n| n.trim_start_matches("/dev/nvidia").parse::<u32>().is_ok())
        .collect();
    assert_eq!(gpus, ["/dev/nvidia4"], "{:?}", slot.nodes);
    if created_etc_cdi {
        let _ = fs::remove_dir("/etc/cdi");
    }
}
