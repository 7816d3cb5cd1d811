//! Hold specs built from NVIDIA's specs: the vendor specs in `testdata/cdi/` (in the shapes
//! `nvidia-ctk cdi generate` writes, for the fake hosts in `testdata/hosts/`) and the real
//! ones in `../shared/fixtures/real/cdi/` when that folder is there. Every spec rendered here
//! is checked against the CDI JSON schema (when `../shared` is there).

use crate::common::cdi_schema;
use crate::common::processes;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bcd::cdi::spec::{parse_spec, Format};
use bcd::cdi::{
    converge, read_vendor_specs, render, DeviceCatalog, DeviceId, HoldId, HoldRequest, Holds,
    Rendered, VendorSpec,
};
use bcd::device::policy::{Placed, Topology};
use bcd::inventory::collect::collect;
use bcd::sys::host::Host;
use processes::{repo, H100, H100_MIG};
use serde_json::Value;

const A100_GPU0: &str = "GPU-5ae30e40-78ba-e5df-4b1a-d79c2d43241b";
const A100_MIG_1_1: &str = "MIG-0972a19e-db10-b80f-9d0a-f9e7ac76cf65";
const WSL_GPU: &str = "GPU-47b7f1f6-b953-1755-a396-404bd55edce2";
const VOID: &str = "NVIDIA_VISIBLE_DEVICES=void";

/// A vendor spec of `testdata/cdi/`.
fn vendor(file: &str) -> VendorSpec {
    let path = repo().join("testdata/cdi").join(file);
    let format = Format::of_file_name(file).unwrap();
    let spec = parse_spec(&fs::read(&path).unwrap(), format).unwrap();
    VendorSpec { path, spec }
}

/// The catalog `bcd cdi render` builds for a fake host: its collected inventory plus the MIG
/// device numbers of `nvidia-smi -L`.
async fn catalog(host: &str) -> DeviceCatalog {
    let host = Host::fake(repo().join("testdata/hosts").join(host));
    let collection = collect(&host, None).await;
    let mut catalog = DeviceCatalog::from_inventory(&collection.inventory);
    catalog.add_mig_numbers(&collection.snapshot.expect("the fake host answers").listed);
    catalog
}

fn ids(list: &[&str]) -> Vec<DeviceId> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn hold(id: &str) -> HoldId {
    id.parse().unwrap()
}

/// The policy's view of a fake host (with `slots` slots per GPU).
async fn topology(host: &str, slots: u32) -> Topology {
    let host = Host::fake(repo().join("testdata/hosts").join(host));
    Topology::from_inventory(&collect(&host, None).await.inventory, slots)
}

/// `list` placed on `t`'s GPUs.
fn placed(t: &Topology, list: &[&str]) -> Vec<Placed> {
    ids(list).iter().map(|d| t.place(d).unwrap()).collect()
}

fn render_hold(
    id: &str,
    devices: &[&str],
    kubernetes: bool,
    vendor: &[VendorSpec],
    catalog: &DeviceCatalog,
) -> Rendered {
    let hold = hold(id);
    let devices = ids(devices);
    let rendered = render(
        HoldRequest {
            hold: &hold,
            devices: &devices,
            kubernetes,
        },
        vendor,
        catalog,
    );
    checked(&rendered);
    rendered
}

/// What every written spec must be: valid against the CDI schema, kind `bcd.dev/gpu`, no
/// device with empty edits; no env var naming devices in the common edits or a held
/// device's (the common edits say `void`); the last device named after the hold, naming
/// them all. Returns the JSON.
fn checked(rendered: &Rendered) -> Value {
    let json: Value = serde_json::from_slice(&rendered.to_json()).unwrap();
    if let Some(schema) = cdi_schema::CdiSchema::load() {
        let violations = schema.violations(&json);
        assert!(violations.is_empty(), "{violations:#?}\n{json:#}");
    }
    assert_eq!(json["kind"], "bcd.dev/gpu");
    let visible = |edits: &Value| -> Vec<String> {
        edits["env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|e| e.starts_with("NVIDIA_VISIBLE_DEVICES="))
            .map(str::to_owned)
            .collect()
    };
    let common = visible(&json["containerEdits"]);
    assert!(common.is_empty() || common == [VOID], "{json:#}");
    let devices = json["devices"].as_array().unwrap();
    let (whole, held) = devices.split_last().unwrap();
    for d in held {
        assert!(visible(&d["containerEdits"]).is_empty(), "{d}");
    }
    let ids: Vec<String> = held
        .iter()
        .map(|d| {
            DeviceId::from_cdi_name(d["name"].as_str().unwrap())
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        visible(&whole["containerEdits"]),
        [format!("NVIDIA_VISIBLE_DEVICES={}", ids.join(","))]
    );
    for d in devices {
        let edits = d["containerEdits"].as_object().unwrap();
        assert!(
            !edits.is_empty(),
            "CDI refuses a device with empty edits: {d}"
        );
    }
    json
}

/// Every string in a JSON value.
fn strings(v: &Value) -> BTreeSet<String> {
    fn walk(v: &Value, out: &mut BTreeSet<String>) {
        match v {
            Value::String(s) => {
                out.insert(s.clone());
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Object(o) => o.values().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut out);
    out
}

fn vendor_device<'a>(v: &'a VendorSpec, name: &str) -> &'a bcd::cdi::spec::Device {
    v.spec.devices.iter().find(|d| d.name == name).unwrap()
}

fn env_of(json: &Value) -> Vec<String> {
    json["containerEdits"]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_owned())
        .collect()
}

fn node_paths(device: &Value) -> Vec<String> {
    device["containerEdits"]["deviceNodes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|n| n["path"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_hold_of_gpu_0_on_an_8_gpu_host_carries_nothing_of_gpus_1_to_7() {
    let v = vendor("hgx-h100-uuid.json");
    let cat = catalog("hgx-h100").await;
    let r = render_hold("job", &[H100[0]], false, std::slice::from_ref(&v), &cat);
    assert!(r.unnamed.is_empty());
    let json = checked(&r);
    // Exactly GPU 0's edits, and the device named after the hold.
    assert_eq!(r.spec.devices.len(), 2);
    assert_eq!(r.spec.devices[1].name, "job");
    assert_eq!(r.spec.devices[0].name, H100[0]);
    assert_eq!(
        r.spec.devices[0].container_edits,
        vendor_device(&v, H100[0]).container_edits
    );
    // Nothing that only another GPU's (or MIG device's, or `all`'s) edits carry.
    let ours: BTreeSet<String> =
        strings(&serde_json::to_value(vendor_device(&v, H100[0])).unwrap())
            .union(&strings(
                &serde_json::to_value(&v.spec.container_edits).unwrap(),
            ))
            .cloned()
            .collect();
    let found = strings(&json);
    for other in H100[1..].iter().chain(&H100_MIG).chain(&["all"]) {
        let theirs = strings(&serde_json::to_value(vendor_device(&v, other)).unwrap());
        for s in theirs.difference(&ours) {
            assert!(
                !found.contains(s),
                "{s:?} of {other} leaked into the hold of GPU 0"
            );
        }
    }
    for n in 1..8 {
        assert!(!found.contains(&format!("/dev/nvidia{n}")));
    }
    assert_eq!(
        env_of(&json),
        [
            "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib/x86_64-linux-gnu".to_owned(),
            VOID.to_owned()
        ]
    );
    // The common edits are the vendor's, once.
    assert_eq!(
        r.spec.container_edits.device_nodes,
        v.spec.container_edits.device_nodes
    );
    assert_eq!(r.spec.container_edits.mounts, v.spec.container_edits.mounts);
    assert_eq!(r.spec.container_edits.hooks, v.spec.container_edits.hooks);
    assert_eq!(json["cdiVersion"], "0.5.0", "hostPath needs 0.5.0");
}

// What broke: NVIDIA_VISIBLE_DEVICES in the common edits named every device of the hold, so
// a container that asked for two of three was told all three.
#[tokio::test]
async fn a_subset_of_a_hold_is_told_only_its_own_devices() {
    let v = vendor("hgx-h100-uuid.json");
    let cat = catalog("hgx-h100").await;
    let r = render_hold("three", &[H100[0], H100[1], H100[2]], false, &[v], &cat);
    let json = checked(&r);
    // Asking for devices 0 and 1 applies the common edits and theirs: none names device 2.
    let asked: Vec<Value> = vec![
        json["containerEdits"].clone(),
        json["devices"][0]["containerEdits"].clone(),
        json["devices"][1]["containerEdits"].clone(),
    ];
    let seen: BTreeSet<String> = asked.iter().flat_map(strings).collect();
    assert!(
        !seen
            .iter()
            .any(|s| s.contains(H100[2]) || s.contains("/dev/nvidia2")),
        "{seen:#?}"
    );
    assert!(seen.contains(VOID));
}

#[tokio::test]
async fn a_slot_carries_its_gpus_edits_and_is_named_by_its_slot_id() {
    let v = vendor("hgx-h100-index.yaml");
    let cat = catalog("hgx-h100").await;
    let slot = format!("{}::1", H100[4]);
    let r = render_hold("s", &[&slot], false, std::slice::from_ref(&v), &cat);
    assert!(r.unnamed.is_empty());
    let json = checked(&r);
    assert_eq!(json["devices"][0]["name"], slot.as_str());
    assert_eq!(
        r.spec.devices[0].container_edits,
        vendor_device(&v, "4").container_edits
    );
}

#[tokio::test]
async fn json_and_yaml_vendor_specs_give_the_same_hold_spec() {
    let cat = catalog("hgx-h100").await;
    let devices = [H100[1], H100_MIG[1], H100[6], H100[7]];
    let from_json = render_hold("a", &devices, false, &[vendor("hgx-h100-uuid.json")], &cat);
    let from_yaml = render_hold("a", &devices, false, &[vendor("hgx-h100-uuid.yaml")], &cat);
    assert_eq!(from_json.to_json(), from_yaml.to_json());
}

#[tokio::test]
async fn a_mig_device_gets_its_own_caps_nodes_and_its_gpus_node_only() {
    let cat = catalog("hgx-h100").await;
    for file in ["hgx-h100-uuid.json", "hgx-h100-index.yaml"] {
        let r = render_hold("m", &[H100_MIG[1]], false, &[vendor(file)], &cat);
        assert!(r.unnamed.is_empty(), "{file}: {:?}", r.unnamed);
        let json = checked(&r);
        // Device 1 is GI 2 on GPU 3: caps minors 3 + 3*135 + 2*9 = 426 and 427.
        assert_eq!(
            node_paths(&json["devices"][0]),
            [
                "/dev/nvidia3",
                "/dev/nvidia-caps/nvidia-cap426",
                "/dev/nvidia-caps/nvidia-cap427"
            ],
            "{file}"
        );
        assert!(!strings(&json).contains("/dev/nvidia-caps/nvidia-cap417"));
    }
}

#[tokio::test]
async fn index_names_resolve_through_the_inventory() {
    let v = vendor("hgx-h100-index.yaml");
    let cat = catalog("hgx-h100").await;
    let r = render_hold(
        "idx",
        &[H100[2], H100[5]],
        false,
        std::slice::from_ref(&v),
        &cat,
    );
    assert!(r.unnamed.is_empty());
    assert_eq!(
        r.spec.devices[0].container_edits,
        vendor_device(&v, "2").container_edits
    );
    assert_eq!(
        r.spec.devices[1].container_edits,
        vendor_device(&v, "5").container_edits
    );
    let json = checked(&r);
    assert_eq!(env_of(&json).last().unwrap(), VOID);
    assert_eq!(
        json["devices"][2]["containerEdits"]["env"],
        serde_json::json!([
            "BCD_HOLD=idx",
            format!("NVIDIA_VISIBLE_DEVICES={},{}", H100[2], H100[5])
        ])
    );
}

#[tokio::test]
async fn a_spec_that_names_uuids_is_never_matched_by_index() {
    // A GPU the UUID spec does not name must not get index "0"'s nodes: they may be another
    // GPU's after a swap.
    let cat = catalog("a100-mig").await;
    let mut v = vendor("a100-mig-additional-gids.yaml");
    v.spec.devices.retain(|d| d.name != A100_GPU0);
    let r = render_hold("swap", &[A100_GPU0], false, &[v], &cat);
    assert_eq!(r.unnamed, ids(&[A100_GPU0]));
    assert!(r.spec.devices[0].container_edits.device_nodes.is_empty());
}

#[tokio::test]
async fn additional_gids_keep_the_vendors_0_7_0_and_force_it_when_the_vendor_understates() {
    let cat = catalog("a100-mig").await;
    let v = vendor("a100-mig-additional-gids.yaml");
    let r = render_hold(
        "g",
        &[A100_GPU0, A100_MIG_1_1],
        false,
        std::slice::from_ref(&v),
        &cat,
    );
    let json = checked(&r);
    assert_eq!(json["cdiVersion"], "0.7.0");
    assert_eq!(
        json["devices"][0]["containerEdits"]["additionalGids"][0],
        44
    );
    assert_eq!(
        node_paths(&json["devices"][1]),
        [
            "/dev/nvidia1",
            "/dev/nvidia-caps/nvidia-cap237",
            "/dev/nvidia-caps/nvidia-cap238"
        ]
    );
    // A vendor spec that claims 0.5.0 but uses additionalGids: the hold spec still says 0.7.0.
    let mut understated = v.clone();
    understated.spec.cdi_version = "0.5.0".into();
    let r = render_hold("g", &[A100_GPU0], false, &[understated], &cat);
    assert_eq!(r.spec.cdi_version, "0.7.0");
    // A later vendor version is not copied: the fields decide.
    let mut later = v;
    later.spec.cdi_version = "1.0.0".into();
    let r = render_hold("g", &[A100_GPU0], false, &[later], &cat);
    assert_eq!(r.spec.cdi_version, "0.7.0");
    assert_eq!(r.version_forced_by, Some("additionalGids"));
}

// What broke: the hold spec's cdiVersion rose to the vendor's (0.6.0 on current toolkits),
// which Debian 12's podman 4.3 refuses ("unresolvable CDI devices").
#[tokio::test]
async fn a_hold_spec_asks_for_the_lowest_cdi_version_its_fields_need() {
    let cat = catalog("hgx-h100").await;
    let mut v = vendor("hgx-h100-uuid.json");
    v.spec.cdi_version = "0.6.0".into();
    let r = render_hold("low", &[H100[2]], false, &[v.clone()], &cat);
    assert_eq!(r.spec.cdi_version, "0.5.0", "hostPath is all it needs");
    assert_eq!(r.version_forced_by, None);
    // A field bcd does not know keeps the vendor's version: what it needs is unknown.
    v.spec.devices.iter_mut().for_each(|d| {
        d.container_edits
            .extra
            .insert("futureEdit".into(), serde_json::json!(1));
    });
    let r = render_hold("low", &[H100[2]], false, &[v], &cat);
    assert_eq!(r.spec.cdi_version, "0.6.0");
    assert!(r.version_forced_by.is_some());
}

#[tokio::test]
async fn on_wsl_the_all_device_stands_for_each_gpu() {
    let v = vendor("wsl2-all.yaml");
    let cat = catalog("wsl2").await;
    let r = render_hold("w", &[WSL_GPU], false, std::slice::from_ref(&v), &cat);
    assert!(r.unnamed.is_empty());
    let json = checked(&r);
    assert_eq!(node_paths(&json["devices"][0]), ["/dev/dxg"]);
    assert!(strings(&json).contains("/usr/lib/wsl/lib/libdxcore.so"));
    assert_eq!(json["cdiVersion"], "0.3.0", "nothing in it needs more");
    // Two GPUs (a catalog does not matter for `all`): each carries /dev/dxg.
    let second = "GPU-00000000-1111-2222-3333-444444444444";
    let r = render_hold(
        "w2",
        &[WSL_GPU, second],
        false,
        &[v],
        &DeviceCatalog::default(),
    );
    let json = checked(&r);
    assert_eq!(node_paths(&json["devices"][1]), ["/dev/dxg"]);
}

#[tokio::test]
async fn a_management_all_device_never_stands_for_a_gpu() {
    // An `all` that holds /dev/nvidia0 is every GPU, not one.
    let cat = catalog("hgx-h100").await;
    let mut v = vendor("hgx-h100-index.yaml");
    v.spec.devices.retain(|d| d.name == "all");
    let r = render_hold("m", &[H100[0]], false, &[v], &cat);
    assert_eq!(r.unnamed, ids(&[H100[0]]));
    assert!(!strings(&checked(&r)).contains("/dev/nvidia1"));
}

#[tokio::test]
async fn a_stale_vendor_spec_gives_what_it_has_and_names_the_missing_devices() {
    let cat = catalog("hgx-h100").await;
    let mut v = vendor("hgx-h100-uuid.json");
    v.spec.devices.retain(|d| d.name != H100[4]);
    let r = render_hold("s", &[H100[3], H100[4]], false, &[v.clone()], &cat);
    assert_eq!(r.unnamed, ids(&[H100[4]]));
    let json = checked(&r);
    assert_eq!(node_paths(&json["devices"][0])[0], "/dev/nvidia3");
    assert_eq!(
        json["devices"][1]["containerEdits"],
        serde_json::json!({"env": ["BCD_HOLD=s"]})
    );
    // The common edits are still NVIDIA's.
    assert_eq!(r.spec.container_edits.mounts, v.spec.container_edits.mounts);
}

#[tokio::test]
async fn no_vendor_spec_leaves_only_nvidia_visible_devices() {
    let cat = catalog("hgx-h100").await;
    let r = render_hold("n", &[H100[0], H100_MIG[0]], false, &[], &cat);
    assert!(r.unnamed.is_empty(), "nothing to be stale against");
    let json = checked(&r);
    assert_eq!(json["containerEdits"], serde_json::json!({ "env": [VOID] }));
    assert_eq!(json["cdiVersion"], "0.3.0");
    assert_eq!(json["devices"][1]["name"], H100_MIG[0]);
    assert_eq!(
        json["devices"][2]["containerEdits"]["env"],
        serde_json::json!([
            "BCD_HOLD=n",
            format!("NVIDIA_VISIBLE_DEVICES={},{}", H100[0], H100_MIG[0])
        ])
    );
}

#[tokio::test]
async fn a_kubernetes_binding_carries_no_vendor_edits() {
    let cat = catalog("hgx-h100").await;
    let v = vendor("hgx-h100-uuid.json");
    let r = render_hold("k8s", &[H100[0], H100[1]], true, &[v], &cat);
    assert!(r.unnamed.is_empty());
    assert!(r.vendor.is_none());
    let json = checked(&r);
    assert_eq!(
        json["containerEdits"],
        Value::Null,
        "its plugin sets the variable"
    );
    assert_eq!(
        json["devices"][2]["containerEdits"],
        serde_json::json!({"env": ["BCD_HOLD=k8s", format!("NVIDIA_VISIBLE_DEVICES={},{}", H100[0], H100[1])]})
    );
    assert!(!strings(&json).iter().any(|s| s.starts_with("/dev/")));
}

#[tokio::test]
async fn of_two_vendor_specs_the_one_naming_the_held_devices_is_used() {
    let cat = catalog("hgx-h100").await;
    let mut stale = vendor("hgx-h100-uuid.json");
    stale.spec.devices.retain(|d| d.name != H100[7]);
    let fresh = vendor("hgx-h100-uuid.yaml");
    let r = render_hold(
        "two",
        &[H100[6], H100[7]],
        false,
        &[stale, fresh.clone()],
        &cat,
    );
    assert!(r.unnamed.is_empty());
    assert_eq!(r.vendor.as_deref(), Some(fresh.path.as_path()));
}

/// Writes `files` of `testdata/cdi/` into `dir` under new names.
fn install(dir: &Path, files: &[(&str, &str)]) {
    fs::create_dir_all(dir).unwrap();
    for (from, to) in files {
        fs::copy(repo().join("testdata/cdi").join(from), dir.join(to)).unwrap();
    }
}

#[test]
fn vendor_specs_are_read_from_both_folders_skipping_bcd_files_other_kinds_and_bad_specs() {
    let tmp = tempfile::tempdir().unwrap();
    let etc = tmp.path().join("etc/cdi");
    let run = tmp.path().join("var/run/cdi");
    install(
        &etc,
        &[
            ("hgx-h100-uuid.json", "nvidia.json"),
            ("hgx-h100-uuid.json", "bcd-job.json"),
            ("hostile/imex-channels.json", "nvidia-imex.json"),
            ("hostile/bad-version.json", "broken.json"),
            ("hostile/alias-bomb.yaml", "bomb.yaml"),
            ("wsl2-all.yaml", "notes.txt"),
        ],
    );
    install(&run, &[("hgx-h100-index.yaml", "nvidia.yaml")]);
    fs::write(etc.join("huge.json"), vec![b' '; (4 << 20) + 10]).unwrap();
    let missing = tmp.path().join("nowhere");
    let read = read_vendor_specs(&[etc.clone(), run.clone(), missing]);
    let paths: Vec<_> = read.specs.iter().map(|s| s.path.clone()).collect();
    assert_eq!(paths, [etc.join("nvidia.json"), run.join("nvidia.yaml")]);
    let problems: Vec<String> = read.problems.iter().map(ToString::to_string).collect();
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems
        .iter()
        .any(|p| p.contains("bomb.yaml") && p.contains("repetition limit")));
    assert!(problems
        .iter()
        .any(|p| p.contains("broken.json") && p.contains("\"latest\"")));
    assert!(problems
        .iter()
        .any(|p| p.contains("huge.json") && p.contains("over bcd's limit")));
}

/// A `tracing` writer into a shared buffer, to read what the converger logged.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

#[tokio::test]
async fn the_converger_writes_holds_removes_orphans_and_reconciles_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let cdi = tmp.path().join("cdi");
    fs::create_dir_all(&data).unwrap();
    install(&cdi, &[("hgx-h100-uuid.json", "nvidia.json")]);
    // Not ours, or not a hold's: never touched.
    fs::write(cdi.join("bcd-notes.txt"), "x").unwrap();
    fs::write(cdi.join("bcd-Upper.json"), "{}").unwrap();
    fs::write(cdi.join("other-vendor.json"), "{}").unwrap();
    // A spec of a hold the store does not know: perhaps the only record of a running job's
    // hold, so it is reported and left alone.
    fs::write(cdi.join("bcd-gone.json"), "{}").unwrap();

    let cat = catalog("hgx-h100").await;
    let vendor = read_vendor_specs(std::slice::from_ref(&cdi)).specs;
    let t = topology("hgx-h100", 0).await;
    let mut holds = Holds::load(&data).unwrap();
    holds
        .apply(
            hold("train"),
            placed(&t, &[H100[0], H100[1]]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
    holds
        .apply(
            hold("infer"),
            placed(&t, &[H100_MIG[0]]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
    // A device of another hold is refused, naming the holder.
    let err = holds
        .apply(
            hold("greedy"),
            placed(&t, &[H100[1]]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("already held by hold train"),
        "{err}"
    );
    assert_eq!(mode(&data.join("holds.json")), 0o600);

    let done = converge(&mut holds, &vendor, &cat, &cdi);
    assert!(done.errors.is_empty(), "{:?}", done.errors);
    assert_eq!(done.written.len(), 2);
    assert!(done.removed.is_empty());
    assert_eq!(done.strangers, [cdi.join("bcd-gone.json")]);
    assert_eq!(
        names(&cdi),
        [
            "bcd-Upper.json",
            "bcd-gone.json",
            "bcd-infer.json",
            "bcd-notes.txt",
            "bcd-train.json",
            "nvidia.json",
            "other-vendor.json"
        ]
        .map(String::from)
        .into()
    );
    let train = cdi.join("bcd-train.json");
    assert_eq!(mode(&train), 0o644);
    let written: Value = serde_json::from_slice(&fs::read(&train).unwrap()).unwrap();
    if let Some(schema) = cdi_schema::CdiSchema::load() {
        assert!(schema.violations(&written).is_empty());
    }
    assert_eq!(written["devices"][1]["name"], H100[1]);

    // Nothing changed: nothing rewritten.
    let again = converge(&mut holds, &vendor, &cat, &cdi);
    assert!(again.written.is_empty() && again.removed.is_empty());
    assert_eq!(again.unchanged.len(), 2);

    // A restart: the store is read back, a lost spec is written again.
    fs::remove_file(&train).unwrap();
    drop(holds);
    let mut holds = Holds::load(&data).unwrap();
    let restarted = converge(&mut holds, &vendor, &cat, &cdi);
    assert_eq!(restarted.written, std::slice::from_ref(&train));

    // Release removes the spec.
    holds.release(&hold("train")).unwrap().unwrap();
    let released = converge(&mut holds, &vendor, &cat, &cdi);
    assert_eq!(released.removed, std::slice::from_ref(&train));
    assert!(!train.exists());
    assert_eq!(holds.released().count(), 0, "seen gone, forgotten");
    assert!(
        cdi.join("bcd-gone.json").exists(),
        "never released here: kept"
    );
    // The device is free for another hold now.
    holds
        .apply(
            hold("greedy"),
            placed(&t, &[H100[1]]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
}

#[tokio::test]
async fn the_converger_logs_held_devices_nvidias_spec_does_not_name() {
    let tmp = tempfile::tempdir().unwrap();
    let cat = catalog("hgx-h100").await;
    let mut v = vendor("hgx-h100-uuid.json");
    v.spec.devices.retain(|d| d.name != H100[5]);
    let t = topology("hgx-h100", 0).await;
    let mut holds = Holds::load(tmp.path()).unwrap();
    holds
        .apply(
            hold("stale"),
            placed(&t, &[H100[5]]),
            bcd::cdi::HoldOwner::Operator,
            &t,
        )
        .unwrap();
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let done = tracing::subscriber::with_default(subscriber, || {
        converge(&mut holds, &[v], &cat, tmp.path())
    });
    assert_eq!(done.unnamed, [(hold("stale"), ids(&[H100[5]]))]);
    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        log.contains("NVIDIA's CDI spec does not name held devices"),
        "{log}"
    );
    assert!(log.contains(H100[5]), "{log}");
    assert!(
        tmp.path().join("bcd-stale.json").exists(),
        "written with what there is"
    );
}

/// A made-up UUID for the `n`th made-up device.
fn made_up(prefix: &str, n: usize) -> DeviceId {
    format!("{prefix}-{n:08x}-0000-4000-8000-000000000000")
        .parse()
        .unwrap()
}

/// What a hold of one device named in `spec` needs: the device id, and a catalog that maps
/// it to the spec's index name when the spec does not name UUIDs.
fn targets_of(spec: &bcd::cdi::spec::Spec) -> Vec<(DeviceId, String, DeviceCatalog)> {
    let mut out = Vec::new();
    let only_all = spec.devices.len() == 1 && spec.devices[0].name == "all";
    // A spec that names UUIDs is matched by UUID only (its index names are tested elsewhere).
    let by_uuid = bcd::cdi::vendor::names_uuids(spec);
    let mut migs = 0;
    for (n, d) in spec.devices.iter().enumerate() {
        let name = d.name.as_str();
        let entry = |id: DeviceId, gpu_index: u32, gi_ci| bcd::cdi::vendor::CatalogEntry {
            id,
            gpu_index,
            mig_index: None,
            gi_ci,
        };
        let (id, catalog) = if name.starts_with("GPU-") || name.starts_with("MIG-") {
            (name.parse().unwrap(), DeviceCatalog::default())
        } else if by_uuid {
            continue;
        } else if let Some(i) = name
            .strip_prefix("gpu")
            .or(Some(name))
            .and_then(|i| i.parse::<u32>().ok())
        {
            let id = made_up("GPU", n);
            let catalog = DeviceCatalog {
                entries: vec![entry(id.clone(), i, None)],
            };
            (id, catalog)
        } else if let Some(rest) = name.strip_prefix("mig-gpu") {
            // NVIDIA's DRA prototype: mig-gpu<i>-gi<g>-ci<c>; a few are enough.
            migs += 1;
            if migs > 3 {
                continue;
            }
            let nums: Vec<u32> = rest
                .split(['-', 'g', 'i', 'c'])
                .filter_map(|x| x.parse().ok())
                .collect();
            let id = made_up("MIG", n);
            let catalog = DeviceCatalog {
                entries: vec![entry(id.clone(), nums[0], Some((nums[1], nums[2])))],
            };
            (id, catalog)
        } else if only_all {
            (WSL_GPU.parse().unwrap(), DeviceCatalog::default())
        } else {
            continue;
        };
        out.push((id, name.to_owned(), catalog));
    }
    out
}

/// The real specs of `../shared/fixtures/real/cdi/`: every one parses; those of kind
/// `nvidia.com/gpu` are read as vendor specs; and, read as a vendor spec whatever its kind
/// (the toolkit's goldens use `example.com/device`), a hold of each device it names (a
/// GPU for WSL's `all`) renders a valid spec that keeps exactly that device's edits and the
/// vendor's version or later.
#[test]
fn real_nvidia_specs_render_valid_hold_specs() {
    let dir = repo().join("../shared/fixtures/real/cdi");
    if !dir.is_dir() {
        bcd_testkit::skip(
            "the real CDI specs (../shared/fixtures/real/cdi) are not beside this checkout",
        );
        return;
    }
    let read = read_vendor_specs(std::slice::from_ref(&dir));
    assert!(read.problems.is_empty(), "{:?}", read.problems);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let gpu_kind = read.specs.len();
    assert!(gpu_kind >= 5, "{gpu_kind}");
    let mut held = 0;
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        let spec = parse_spec(
            &fs::read(&path).unwrap(),
            Format::of_file_name(&name).unwrap(),
        )
        .unwrap_or_else(|e| panic!("{name} {e}"));
        let v = VendorSpec { path, spec };
        let vendor_version: bcd::cdi::spec::CdiVersion = v.spec.cdi_version.parse().unwrap();
        for (id, vendor_name, catalog) in targets_of(&v.spec) {
            let rendered = render_hold(
                "real",
                &[id.to_string().as_str()],
                false,
                std::slice::from_ref(&v),
                &catalog,
            );
            let version: bcd::cdi::spec::CdiVersion = rendered.spec.cdi_version.parse().unwrap();
            let needed = bcd::cdi::spec::minimum_version(&rendered.spec);
            assert!(version >= needed, "{name}");
            assert!(version <= needed.max(vendor_version), "{name}");
            let vendor_dev = vendor_device(&v, &vendor_name);
            let per_gpu_all = vendor_name == "all"
                && vendor_dev.container_edits.device_nodes.iter().any(|n| {
                    n.path
                        .trim_start_matches("/dev/nvidia")
                        .parse::<u32>()
                        .is_ok()
                });
            if per_gpu_all {
                // A management spec's `all` holds /dev/nvidia0: it must not stand in.
                assert_eq!(rendered.unnamed, [id], "{name}");
            } else {
                assert!(rendered.unnamed.is_empty(), "{name}: {vendor_name}");
                assert_eq!(
                    rendered.spec.devices[0].container_edits, vendor_dev.container_edits,
                    "{name}: {vendor_name}"
                );
            }
            held += 1;
        }
    }
    assert!(held >= 12, "{held}");
}

#[test]
fn bcd_cdi_render_prints_the_spec_and_writes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    install(tmp.path(), &[("hgx-h100-index.yaml", "nvidia.yaml")]);
    let before = names(tmp.path());
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(["cdi", "render", "job-1", H100[3], H100_MIG[0], "--host"])
        .arg(repo().join("testdata/hosts/hgx-h100"))
        .arg("--cdi-dir")
        .arg(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["devices"][0]["name"], H100[3]);
    assert_eq!(
        node_paths(&json["devices"][1]),
        [
            "/dev/nvidia3",
            "/dev/nvidia-caps/nvidia-cap417",
            "/dev/nvidia-caps/nvidia-cap418"
        ]
    );
    assert_eq!(names(tmp.path()), before, "render writes nothing");

    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(["cdi", "render", "../etc", H100[0]])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not a safe name"));
}

// What broke: bcd cdi render said what NVIDIA's spec lacks as tracing lines (timestamps,
// levels, module paths, key=value fields) where an operator reads a sentence.
#[test]
fn bcd_cdi_render_says_its_warnings_as_sentences() {
    let tmp = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_bcd"))
        .args(["cdi", "render", "job-1", H100[3], "--host"])
        .arg(repo().join("testdata/hosts/hgx-h100"))
        .arg("--cdi-dir")
        .arg(tmp.path())
        .env_remove("BCD_LOG")
        .output()
        .unwrap();
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].starts_with("bcd: warning: no NVIDIA CDI spec was found, so hold job-1's spec has no device nodes for "),
        "{stderr}"
    );
    assert!(lines[0].contains("nvidia-ctk cdi generate"), "{stderr}");
    assert!(!stderr.contains("WARN"), "{stderr}");
}

#[test]
fn the_schema_checker_is_not_vacuous() {
    let Some(schema) = cdi_schema::CdiSchema::load() else {
        return;
    };
    let bad = serde_json::json!({
        "cdiVersion": "0.5.0",
        "kind": "bcd.dev/gpu",
        "devices": [{"name": "x"}, {"name": "y", "containerEdits": {
            "deviceNodes": [{"major": 1}], "additionalGids": [-1],
            "mounts": [{"hostPath": "/a"}], "hooks": [{"hookName": 3, "path": "/h"}]}}],
        "annotations": {"a": 1}
    });
    let v = schema.violations(&bad);
    for want in [
        "$.devices[0]: missing containerEdits",
        "$.devices[1].containerEdits.deviceNodes[0]: missing path",
        "$.devices[1].containerEdits.additionalGids[0]: -1 < 0",
        "$.devices[1].containerEdits.mounts[0]: missing containerPath",
        "$.devices[1].containerEdits.hooks[0].hookName: not string: 3",
        "$.annotations.a: not string: 1",
    ] {
        assert!(v.iter().any(|x| x == want), "{want} not in {v:#?}");
    }
}
