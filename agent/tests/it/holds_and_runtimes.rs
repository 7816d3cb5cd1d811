//! Holds as a node keeps them and as runtimes read them: `bcd node` writing hold specs at
//! start before any collection, rebuilding holds from their specs, removing a crash's temp
//! files, refusing a GPU to two holds through its API; and a real CDI consumer ([`podman`]).

mod podman;
use crate::common::processes;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bcd::cdi::{DeviceCatalog, DeviceId};
use bcd::device::policy::{Placed, Topology};
use bcd::inventory::collect::collect;
use bcd::sys::host::Host;
use processes::{copy_host, repo, wait_for, Reaped, H100, H100_MIG};
use serde_json::Value;

fn fake_host(name: &str) -> Host {
    Host::fake(repo().join("testdata/hosts").join(name))
}

/// The policy's view of a fake host, with `slots` slots per GPU.
async fn topology(host: &str, slots: u32) -> Topology {
    Topology::from_inventory(&collect(&fake_host(host), None).await.inventory, slots)
}

/// The catalog `bcd node` builds for a fake host.
async fn catalog(host: &str) -> DeviceCatalog {
    let collection = collect(&fake_host(host), None).await;
    let mut catalog = DeviceCatalog::from_inventory(&collection.inventory);
    catalog.add_mig_numbers(&collection.snapshot.expect("the fake host answers").listed);
    catalog
}

/// `list` placed on `t`'s GPUs.
fn placed(t: &Topology, list: &[&str]) -> Vec<Placed> {
    list.iter()
        .map(|d| t.place(&d.parse::<DeviceId>().unwrap()).unwrap())
        .collect()
}

fn api(socket: &Path, method: &str, path: &str) -> Result<Value, String> {
    processes::api(socket, method, path, None)
}

/// A node's folders in a scratch folder, with NVIDIA's spec for the 8-GPU host installed.
struct NodeDirs {
    host: PathBuf,
    data: PathBuf,
    cdi: PathBuf,
    api: PathBuf,
}

impl NodeDirs {
    fn new(dir: &Path, host: &str) -> Self {
        let d = Self {
            host: copy_host(dir, host),
            data: dir.join("data"),
            cdi: dir.join("cdi"),
            api: dir.join("bcd.sock"),
        };
        fs::create_dir_all(&d.data).unwrap();
        fs::create_dir_all(&d.cdi).unwrap();
        fs::copy(
            repo().join("testdata/cdi/hgx-h100-uuid.json"),
            d.cdi.join("nvidia.json"),
        )
        .unwrap();
        d
    }

    fn bcd(&self, args: &[&str]) -> Command {
        self.bcd_seeing(args, &self.cdi)
    }

    /// As [`NodeDirs::bcd`], with the client's own `--cdi-dir`.
    fn bcd_seeing(&self, args: &[&str], cdi: &Path) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_bcd"));
        c.args(args)
            .arg("--host")
            .arg(&self.host)
            .arg("--data-dir")
            .arg(&self.data)
            .arg("--cdi-dir")
            .arg(cdi)
            .arg("--api-socket")
            .arg(&self.api)
            .arg("--helper-socket")
            .arg(self.data.join("no-helper.sock"));
        c
    }

    fn start(&self, extra: &[&str]) -> Reaped {
        let mut args = vec!["node", "--api-group", "root"];
        args.extend_from_slice(extra);
        let node = Reaped(self.bcd(&args).stderr(Stdio::null()).spawn().unwrap());
        wait_for("the API socket", Duration::from_secs(10), || {
            api(&self.api, "GET", "/v1/status").is_ok()
        });
        node
    }
}

// What broke: hold specs were written only after the first collection (30 s on a wedged
// host), the next start after a torn holds.json deleted every spec, and crash temp files
// stayed.
#[test]
fn a_wedged_host_gets_its_hold_specs_at_start_and_a_lost_store_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let d = NodeDirs::new(dir.path(), "wedged");
    fs::write(
        d.data.join("holds.json"),
        format!(r#"{{"holds":[{{"id":"job","devices":["{}"]}}]}}"#, H100[0]),
    )
    .unwrap();
    fs::write(d.cdi.join(".bcd-job.json.tmp-4242"), "{").unwrap();
    fs::write(d.data.join(".holds.json.tmp-4242"), "{").unwrap();
    fs::write(d.cdi.join(".not-ours.tmp-1"), "x").unwrap();
    let started = std::time::Instant::now();
    let node = d.start(&[]);
    let spec = d.cdi.join("bcd-job.json");
    wait_for("the hold's spec", Duration::from_secs(10), || spec.exists());
    assert!(started.elapsed() < Duration::from_secs(10));
    let status = api(&d.api, "GET", "/v1/status").unwrap();
    assert_eq!(status["collections"], 0, "written before any collection");
    let written: Value = serde_json::from_slice(&fs::read(&spec).unwrap()).unwrap();
    assert_eq!(written["devices"][0]["name"], H100[0]);
    assert!(!d.cdi.join(".bcd-job.json.tmp-4242").exists());
    assert!(!d.data.join(".holds.json.tmp-4242").exists());
    assert!(d.cdi.join(".not-ours.tmp-1").exists());
    drop(node);

    // A torn store, then a second start: the holds come back from their specs, and say so.
    fs::write(d.data.join("holds.json"), "{\"holds\": [{\"id\": \"jo").unwrap();
    let first = d.start(&[]);
    let status = api(&d.api, "GET", "/v1/status").unwrap();
    assert!(
        status["problems"].to_string().contains("rebuilt 1 hold(s)"),
        "{status}"
    );
    drop(first);
    let second = d.start(&[]);
    let holds = api(&d.api, "GET", "/v1/holds").unwrap();
    assert_eq!(holds["holds"][0]["id"], "job", "{holds}");
    assert!(
        spec.exists(),
        "the spec of a running job's hold is never deleted"
    );
    drop(second);
}

// What broke: a hold of MIG-mode GPU 3 and a hold of its MIG device were both accepted, and
// `bcd hold apply` printed the client's --cdi-dir, not the path the node wrote.
#[test]
fn the_api_never_gives_a_gpu_to_two_holds_and_apply_prints_the_nodes_path() {
    let dir = tempfile::tempdir().unwrap();
    let d = NodeDirs::new(dir.path(), "hgx-h100");
    let _node = d.start(&["--gpu-slots", "2"]);
    wait_for("a collection", Duration::from_secs(20), || {
        api(&d.api, "GET", "/v1/status").is_ok_and(|s| s["collections"].as_u64() >= Some(1))
    });
    // The client's own --cdi-dir is not the node's.
    let out = d
        .bcd_seeing(
            &["hold", "apply", "whole", H100[3]],
            Path::new("/nonexistent"),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let spec = d.cdi.join("bcd-whole.json");
    assert!(stdout.contains(&spec.display().to_string()), "{stdout}");
    assert!(spec.exists());

    let out = d
        .bcd(&["hold", "apply", "part", H100_MIG[1]])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "a refusal: bcd could not do it");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already held by hold whole"), "{stderr}");
    assert!(!d.cdi.join("bcd-part.json").exists());

    // Slots: two holds may share a GPU through its slots, never with the whole GPU.
    let s0 = format!("{}::0", H100[4]);
    let s1 = format!("{}::1", H100[4]);
    let s2 = format!("{}::2", H100[4]);
    for (id, slot) in [("s0", &s0), ("s1", &s1)] {
        let out = d.bcd(&["hold", "apply", id, slot]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = d.bcd(&["hold", "apply", "all4", H100[4]]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("already held by hold s0"));
    let out = d.bcd(&["hold", "apply", "s2", &s2]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("offers 2 slot(s)"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
