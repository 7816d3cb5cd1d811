use std::path::{Path, PathBuf};

use serde_json::Value;

use super::host::{look, Look};
use super::*;
use crate::health::verdict::Reason;
use crate::health::xid::XidPolicy;
use crate::inventory::document::{Fabric, Mig, MigProfile};
use crate::sys::host::Host;

/// GPU Feature Discovery's label regexes (`tests/expected-output.txt`, `-mig-none.txt` and
/// `-mig-mixed.txt` of [`GFD_RELEASE`]), written again in this notation: every `nvidia.com/`
/// line bcd emits must match one of them, unanchored, as GFD's `checkResult` matches its own
/// output. Where GFD writes words as a character class (`[none|mps|time-slicing]`), the words
/// are written here, which is stricter. `gpu.clique` is not in GFD's files (its test mock has
/// no NVLink fabric); its pattern is the `<cluster UUID>.<clique id>` that `imex.go` writes.
const GFD_PATTERNS: &[&str] = &[
    r"nvidia\.com/cuda\.driver\.major=[0-9]+",
    r"nvidia\.com/cuda\.driver\.minor=[0-9]+",
    r"nvidia\.com/cuda\.driver\.rev=[0-9]*",
    r"nvidia\.com/cuda\.runtime\.major=[0-9]+",
    r"nvidia\.com/cuda\.runtime\.minor=[0-9]+",
    r"nvidia\.com/cuda\.driver-version\.major=[0-9]+",
    r"nvidia\.com/cuda\.driver-version\.minor=[0-9]+",
    r"nvidia\.com/cuda\.driver-version\.revision=[0-9]*",
    r"nvidia\.com/cuda\.driver-version\.full=([0-9]+)(.[0-9]+)(.[0-9]+)",
    r"nvidia\.com/cuda\.runtime-version\.major=[0-9]+",
    r"nvidia\.com/cuda\.runtime-version\.minor=[0-9]+",
    r"nvidia\.com/cuda\.runtime-version\.full=([0-9]+)(.[0-9]+)",
    r"nvidia\.com/gpu\.machine=.*",
    r"nvidia\.com/gpu\.count=[0-9]+",
    r"nvidia\.com/gpu\.replicas=[0-9]+",
    r"nvidia\.com/gpu\.sharing-strategy=(none|mps|time-slicing)",
    r"nvidia\.com/gpu\.product=[A-Za-z_-]+",
    r"nvidia\.com/gpu\.memory=[0-9]+",
    r"nvidia\.com/gpu\.family=[a-z]+",
    r"nvidia\.com/gpu\.mode=(unknown|compute|graphics)",
    r"nvidia\.com/mig\.capable=(true|false)",
    r"nvidia\.com/gpu\.compute\.major=[0-9]+",
    r"nvidia\.com/gpu\.compute\.minor=[0-9]+",
    r"nvidia\.com/mig\.strategy=[a-z_-]+",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.product=[A-Za-z_-]+",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.count=[0-9]+",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.replicas=[0-9]+",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.sharing-strategy=(none|mps|time-slicing)",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.memory=[0-9]+",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.multiprocessors=[0-9]+",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.slices\.gi=[0-9]+",
    r"nvidia\.com/mig-[0-9]+g\.[0-9]+gb\.slices\.ci=[0-9]+",
    r"nvidia\.com/mps\.capable=(true|false)",
    r"nvidia\.com/gpu\.clique=[0-9a-f-]+\.[0-9]+",
];

/// The demo hosts whose labels are snapshotted in `testdata/labels/<host>.labels`.
const DEMO_HOSTS: [&str; 4] = ["hgx-h100", "a100-mig", "wsl2", "r470-old"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

async fn look_at(name: &str, gpu_slots: u32) -> Look {
    let data = tempfile::tempdir().unwrap();
    look(
        &Host::fake(repo().join("testdata/hosts").join(name)),
        data.path(),
        &XidPolicy::default(),
        &LabelConfig {
            gpu_slots,
            ..LabelConfig::default()
        },
    )
    .await
}

/// Every `nvidia.com/` line matches one of GFD's patterns; every label is valid.
fn check_gfd_shapes(labels: &Labels) {
    let patterns: Vec<regex::Regex> = GFD_PATTERNS
        .iter()
        .map(|p| regex::Regex::new(p).unwrap())
        .collect();
    for (name, value) in labels.iter() {
        assert!(is_label_name(name), "{name}");
        assert!(is_label_value(value), "{name}={value}");
        if name.starts_with("nvidia.com/") {
            let line = format!("{name}={value}");
            assert!(
                patterns.iter().any(|p| p.is_match(&line)),
                "{line} matches none of GFD's label patterns"
            );
        } else {
            assert!(name.starts_with("bcd.dev/"), "{name}");
        }
    }
}

/// The labels say what the inventory document (`bcd hardware --json`) says.
fn check_against_document(labels: &Labels, doc: &Value) {
    let section = &doc["gpu"];
    let get = |name: &str| labels.get(name).map(str::to_owned);
    let driver = section["driver_version"].as_str().unwrap();
    let parts: Vec<&str> = driver.split('.').collect();
    assert_eq!(get(name::DRIVER_MAJOR).as_deref(), Some(parts[0]));
    assert_eq!(get(name::DRIVER_VERSION_MINOR).as_deref(), Some(parts[1]));
    assert_eq!(
        get(name::DRIVER_VERSION_REVISION).as_deref(),
        Some(parts.get(2).copied().unwrap_or(""))
    );
    assert_eq!(get(name::DRIVER_VERSION_FULL).as_deref(), Some(driver));
    let cuda = section["cuda_driver_version"].as_str().unwrap();
    assert_eq!(get(name::RUNTIME_VERSION_FULL).as_deref(), Some(cuda));
    assert_eq!(get(name::RUNTIME_MAJOR).as_deref(), cuda.split('.').next());
    let gpus: Vec<&Value> = section["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| g.get("passed_through").is_none())
        .collect();
    let product = get("nvidia.com/gpu.product").unwrap();
    let of_model: Vec<&&Value> = gpus
        .iter()
        .filter(|g| sanitise(g["name"].as_str().unwrap()) == product)
        .collect();
    assert_eq!(
        get("nvidia.com/gpu.count"),
        Some(of_model.len().to_string())
    );
    let whole = of_model
        .iter()
        .find(|g| g["mig"]["mode"] != Value::Bool(true))
        .unwrap_or(&of_model[0]);
    assert_eq!(
        get("nvidia.com/gpu.memory"),
        whole["memory_total_mib"].as_u64().map(|m| m.to_string())
    );
    match whole["compute_capability"].as_str() {
        Some(cc) => {
            let (major, minor) = cc.split_once('.').unwrap();
            assert_eq!(get("nvidia.com/gpu.compute.major").as_deref(), Some(major));
            assert_eq!(get("nvidia.com/gpu.compute.minor").as_deref(), Some(minor));
        }
        None => assert_eq!(
            get("nvidia.com/gpu.family").as_deref(),
            whole["architecture"].as_str()
        ),
    }
    let capable = gpus.iter().any(|g| g["mig"].get("mode").is_some());
    assert_eq!(get(name::MIG_CAPABLE), Some(capable.to_string()));
    let mut profiles: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    for gpu in &gpus {
        for device in gpu["mig"]["devices"].as_array().into_iter().flatten() {
            let entry = profiles
                .entry(device["profile"].as_str().unwrap().to_owned())
                .or_insert((0, device["memory_total_mib"].as_u64().unwrap()));
            entry.0 += 1;
        }
    }
    for (profile, (count, memory)) in &profiles {
        assert_eq!(
            get(&format!("nvidia.com/mig-{profile}.count")),
            Some(count.to_string())
        );
        assert_eq!(
            get(&format!("nvidia.com/mig-{profile}.memory")),
            Some(memory.to_string())
        );
    }
    let labelled_profiles = labels
        .iter()
        .filter(|(n, _)| n.starts_with(name::MIG_PREFIX) && n.ends_with(".count"))
        .count();
    assert_eq!(labelled_profiles, profiles.len());
}

#[tokio::test]
async fn each_demo_hosts_labels_are_its_snapshot_and_say_what_its_inventory_says() {
    for host in DEMO_HOSTS {
        let looked = look_at(host, 0).await;
        assert_eq!(looked.nvidia_smi_error, None, "{host}");
        let snapshot = repo().join(format!("testdata/labels/{host}.labels"));
        let expected = std::fs::read_to_string(&snapshot).unwrap();
        assert_eq!(
            looked.labels.lines(),
            expected,
            "{host}: the labels are not {}",
            snapshot.display()
        );
        check_gfd_shapes(&looked.labels);
        let collected = crate::inventory::collect::collect(
            &Host::fake(repo().join("testdata/hosts").join(host)),
            None,
        )
        .await;
        let doc = serde_json::to_value(&collected.inventory).unwrap();
        check_against_document(&looked.labels, &doc);
    }
}

#[tokio::test]
async fn slots_are_time_slicing_replicas_of_the_whole_gpus_only() {
    let hgx = look_at("hgx-h100", 4).await.labels;
    assert_eq!(hgx.get("nvidia.com/gpu.replicas"), Some("4"));
    assert_eq!(
        hgx.get("nvidia.com/gpu.sharing-strategy"),
        Some("time-slicing")
    );
    // A renamed resource (bcd.dev/gpu-slot): no -SHARED suffix.
    assert_eq!(
        hgx.get("nvidia.com/gpu.product"),
        Some("NVIDIA-H100-80GB-HBM3")
    );
    assert_eq!(hgx.get("nvidia.com/gpu.count"), Some("8"));
    assert_eq!(hgx.get("nvidia.com/mig-4g.40gb.replicas"), Some("1"));
    check_gfd_shapes(&hgx);
    let one = look_at("hgx-h100", 1).await.labels;
    assert_eq!(one.get("nvidia.com/gpu.replicas"), Some("1"));
    assert_eq!(one.get("nvidia.com/gpu.sharing-strategy"), Some("none"));
    // Every GPU in MIG mode: GFD labels them without sharing.
    let mig = look_at("a100-mig", 4).await.labels;
    assert_eq!(mig.get("nvidia.com/gpu.replicas"), Some("0"));
    assert_eq!(mig.get("nvidia.com/gpu.sharing-strategy"), Some("none"));
}

#[tokio::test]
async fn the_fabric_label_follows_the_verdicts() {
    let ok = look_at("hgx-h100", 0).await.labels;
    assert_eq!(ok.get(name::FABRIC), Some("ok"));
    assert_eq!(ok.get(name::HEALTHY), Some("8"));
    let no_manager = look_at("hgx-no-fabric-manager", 0).await.labels;
    assert_eq!(no_manager.get(name::FABRIC), Some("down"));
    assert_eq!(no_manager.get(name::HEALTHY), Some("0"));
    let faults = look_at("hgx-faults", 0).await.labels;
    assert_eq!(faults.get(name::FABRIC), Some("down"));
    // No NVSwitch, no fabric cluster: no fabric label.
    assert_eq!(look_at("a100-mig", 0).await.labels.get(name::FABRIC), None);
}

#[tokio::test]
async fn a_host_whose_nvidia_smi_fails_has_labels_from_procfs_and_one_without_gpus_none() {
    let dir = tempfile::tempdir().unwrap();
    let copy = crate::health::status::tests::copy_host(dir.path(), "hgx-h100");
    let answers = copy.join("answers");
    std::fs::remove_file(answers.join("q-x.out")).unwrap();
    std::fs::write(answers.join("q-x.exit"), "15\n").unwrap();
    let data = tempfile::tempdir().unwrap();
    let failed = look(
        &Host::fake(&copy),
        data.path(),
        &XidPolicy::default(),
        &LabelConfig::default(),
    )
    .await;
    assert!(failed.nvidia_smi_error.is_some());
    let labels = &failed.labels;
    check_gfd_shapes(labels);
    assert_eq!(labels.get("nvidia.com/gpu.count"), Some("8"));
    assert_eq!(labels.get(name::HEALTHY), Some("0"));
    assert_eq!(
        labels.get(name::RUNTIME_MAJOR),
        None,
        "only nvidia-smi knows it"
    );
    assert!(look_at("no-driver", 0).await.labels.is_empty());
}

fn gpu(index: u32, name: &str) -> Gpu {
    let uuid = format!("GPU-{index:08x}-0000-0000-0000-000000000000");
    Gpu {
        name: Some(name.into()),
        memory_total_mib: Some(1000 + u64::from(index)),
        compute_capability: Some("8.0".into()),
        ..Gpu::new(index, uuid.parse().unwrap())
    }
}

fn inventory(gpus: Vec<Gpu>) -> Inventory {
    Inventory::new(GpuSection {
        driver_version: Some("570.133.20".into()),
        cuda_driver_version: Some("12.8".into()),
        nvml_version: None,
        gpus,
    })
}

fn labels_of(inv: &Inventory) -> Labels {
    node_labels(
        inv,
        &BTreeMap::new(),
        &HostFacts::default(),
        &LabelConfig::default(),
    )
}

// GFD labels whichever model its map yields last, so its labels flap between passes.
#[test]
fn mixed_models_label_the_model_with_most_gpus_ties_to_the_lowest_index() {
    let tie = inventory(vec![
        gpu(0, "NVIDIA L4"),
        gpu(1, "NVIDIA A10"),
        gpu(2, "NVIDIA A10"),
        gpu(3, "NVIDIA L4"),
    ]);
    let labels = labels_of(&tie);
    assert_eq!(labels.get("nvidia.com/gpu.product"), Some("NVIDIA-L4"));
    assert_eq!(labels.get("nvidia.com/gpu.count"), Some("2"));
    assert_eq!(labels.get("nvidia.com/gpu.memory"), Some("1000"));
    let mut shuffled = tie.clone();
    shuffled.gpu.gpus.reverse();
    for _ in 0..10 {
        assert_eq!(
            labels_of(&shuffled),
            labels,
            "the same GPUs, the same labels"
        );
    }
    let mut more = tie.gpu.gpus.clone();
    more.push(gpu(4, "NVIDIA A10"));
    let labels = labels_of(&inventory(more));
    assert_eq!(labels.get("nvidia.com/gpu.product"), Some("NVIDIA-A10"));
    assert_eq!(labels.get("nvidia.com/gpu.count"), Some("3"));
    assert_eq!(labels.get("nvidia.com/gpu.memory"), Some("1001"));
}

#[test]
fn passed_through_gpus_are_not_the_nodes() {
    let mut away = gpu(1, "NVIDIA L40S");
    away.passed_through = true;
    let labels = labels_of(&inventory(vec![gpu(0, "NVIDIA L40S"), away.clone()]));
    assert_eq!(labels.get("nvidia.com/gpu.count"), Some("1"));
    assert!(labels_of(&inventory(vec![away])).is_empty());
}

#[test]
fn mig_profiles_bcd_offers_no_resource_for_get_no_labels() {
    let mut g = gpu(0, "NVIDIA A100-SXM4-40GB");
    g.mig = Some(Mig {
        mode: Some(true),
        pending_mode: Some(true),
        devices: vec![
            MigDevice {
                profile: Some("1g.5gb+me".into()),
                gi: Some(7),
                ci: Some(0),
                memory_total_mib: Some(4864),
                uuid: None,
            },
            MigDevice {
                profile: Some("1c.3g.20gb".into()),
                gi: Some(2),
                ci: Some(0),
                memory_total_mib: Some(19968),
                uuid: None,
            },
        ],
        profiles: vec![MigProfile {
            name: "3g.20gb".into(),
            id: 9,
            instances_total: Some(2),
            memory_gib: Some(19.5),
            sm: Some(42),
        }],
    });
    let labels = labels_of(&inventory(vec![g]));
    assert!(!labels.iter().any(|(n, _)| n.contains("+me")), "{labels:?}");
    assert_eq!(labels.get("nvidia.com/mig-1c.3g.20gb.count"), Some("1"));
    assert_eq!(labels.get("nvidia.com/mig-1c.3g.20gb.slices.gi"), Some("3"));
    assert_eq!(labels.get("nvidia.com/mig-1c.3g.20gb.slices.ci"), Some("1"));
    // A compute instance's SMs are not its GPU instance profile's.
    assert_eq!(
        labels.get("nvidia.com/mig-1c.3g.20gb.multiprocessors"),
        None
    );
    assert_eq!(
        labels.get("nvidia.com/mig-1c.3g.20gb.product"),
        Some("NVIDIA-A100-SXM4-40GB-MIG-1c.3g.20gb")
    );
    assert_eq!(labels.get(name::MIG_STRATEGY), Some("mixed"));
}

#[test]
fn the_clique_is_labelled_only_when_every_fabric_gpu_agrees() {
    let fabric = |clique| {
        Some(Fabric {
            cluster_uuid: "8de9f472-03b2-0814-5148-024569dd13d6".into(),
            clique_id: Some(clique),
        })
    };
    let (mut a, mut b) = (gpu(0, "NVIDIA H100"), gpu(1, "NVIDIA H100"));
    a.fabric = fabric(7);
    b.fabric = fabric(7);
    let same = labels_of(&inventory(vec![a.clone(), b.clone()]));
    assert_eq!(
        same.get(name::CLIQUE),
        Some("8de9f472-03b2-0814-5148-024569dd13d6.7")
    );
    assert_eq!(same.get(name::FABRIC), Some("ok"));
    b.fabric = fabric(8);
    assert_eq!(labels_of(&inventory(vec![a, b])).get(name::CLIQUE), None);
}

#[test]
fn healthy_counts_the_gpus_that_may_take_work() {
    let inv = inventory(vec![
        gpu(0, "NVIDIA L4"),
        gpu(1, "NVIDIA L4"),
        gpu(2, "NVIDIA L4"),
    ]);
    let verdict = |health, kind: crate::health::verdict::ReasonKind| Verdict {
        health,
        reasons: vec![Reason {
            kind,
            message: String::new(),
            action: String::new(),
            state: health,
        }],
    };
    let verdicts: BTreeMap<GpuUuid, Verdict> = [
        (0, verdict(HealthState::Degraded, kind::THROTTLED)),
        (1, verdict(HealthState::Unhealthy, kind::FABRIC)),
    ]
    .into_iter()
    .map(|(i, v)| (inv.gpu.gpus[i].uuid.clone(), v))
    .collect();
    let labels = node_labels(
        &inv,
        &verdicts,
        &HostFacts::default(),
        &LabelConfig::default(),
    );
    // GPU 2 has no verdict: it takes no work.
    assert_eq!(labels.get(name::HEALTHY), Some("1"));
    assert_eq!(labels.get(name::FABRIC), Some("down"));
}

#[test]
fn while_nvidia_smi_is_silent_the_last_answers_labels_stay() {
    let answered = labels_of(&inventory(vec![gpu(0, "NVIDIA L4")]));
    let mut silent_inventory = inventory(vec![gpu(0, "NVIDIA L4")]);
    silent_inventory.gpu.cuda_driver_version = None;
    silent_inventory.gpu.gpus[0].memory_total_mib = None;
    assert!(!nvidia_smi_answered(&silent_inventory));
    let fresh = labels_of(&silent_inventory);
    assert_eq!(fresh.get("nvidia.com/gpu.memory"), None);
    let held = hold_while_silent(fresh.clone(), false, Some(&answered));
    assert_eq!(held.get("nvidia.com/gpu.memory"), Some("1000"));
    assert_eq!(held.get(name::RUNTIME_MAJOR), Some("12"));
    assert_eq!(held.get(name::HEALTHY), Some("0"));
    // Nothing answered before: what is known now.
    assert_eq!(hold_while_silent(fresh.clone(), false, None), fresh);
    // An answer replaces them.
    assert_eq!(
        hold_while_silent(answered.clone(), true, Some(&fresh)),
        answered
    );
}

#[test]
fn machine_and_mode_come_from_the_host_facts() {
    let mut a = gpu(0, "NVIDIA L4");
    let mut b = gpu(1, "NVIDIA L4");
    a.bus_id = Some("0000:18:00.0".parse().unwrap());
    b.bus_id = Some("0000:2a:00.0".parse().unwrap());
    let inv = inventory(vec![a.clone(), b.clone()]);
    let mut facts = HostFacts {
        machine: Some("  PowerEdge XE9680 (rev. A) \n".into()),
        ..HostFacts::default()
    };
    for bus in [&a, &b] {
        facts.pci_classes.insert(bus.bus_id.unwrap(), 0x030200);
    }
    let labels = node_labels(&inv, &BTreeMap::new(), &facts, &LabelConfig::default());
    assert_eq!(labels.get(name::MACHINE), Some("PowerEdge-XE9680-rev.-A"));
    assert_eq!(labels.get(name::MODE), Some("compute"));
    facts.pci_classes.insert(b.bus_id.unwrap(), 0x030000);
    let mixed = node_labels(&inv, &BTreeMap::new(), &facts, &LabelConfig::default());
    assert_eq!(mixed.get(name::MODE), Some("unknown"));
    let none = labels_of(&inv);
    assert_eq!(none.get(name::MACHINE), Some("unknown"));
    assert_eq!(none.get(name::MODE), Some("unknown"));
}

#[test]
fn the_host_facts_are_read_under_the_hosts_root() {
    let dir = tempfile::tempdir().unwrap();
    let dmi = dir.path().join("root/sys/class/dmi/id");
    std::fs::create_dir_all(&dmi).unwrap();
    std::fs::write(dmi.join("product_name"), "DGX H100\n").unwrap();
    let facts = HostFacts::read(&Host::fake(dir.path()));
    assert_eq!(facts.machine.as_deref(), Some("DGX H100"));
    let hgx = HostFacts::read(&Host::fake(repo().join("testdata/hosts/hgx-h100")));
    assert_eq!(hgx.machine, None);
    assert_eq!(hgx.pci_classes.len(), 8, "the GPUs, not the NVSwitches");
}

#[test]
fn sanitise_and_fit_follow_gfd_and_kubernetes() {
    for (raw, sanitised) in [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("Tesla V100-PCIE-32GB", "Tesla-V100-PCIE-32GB"),
        ("NVIDIA GeForce RTX 5090", "NVIDIA-GeForce-RTX-5090"),
        // A tab is dropped before the words are split, as GFD drops it.
        ("  Quadro  RTX\t8000 ", "Quadro-RTX8000"),
        ("NVIDIA RTX 4000 SFF (Ada)", "NVIDIA-RTX-4000-SFF-Ada"),
        ("Graphics Device™ /x/", "Graphics-Device-x"),
    ] {
        assert_eq!(sanitise(raw), sanitised, "{raw:?}");
    }
    assert_eq!(fit_value("-rev. A-"), Some("rev.-A".into()));
    assert_eq!(fit_value("()"), None);
    let long = fit_value(&"a b ".repeat(40)).unwrap();
    assert!(long.len() <= MAX_VALUE && is_label_value(&long), "{long}");
}

#[test]
fn the_family_map_is_gfds() {
    for ((major, minor), family_name) in [
        ((1, 3), "tesla"),
        ((2, 1), "fermi"),
        ((3, 7), "kepler"),
        ((5, 2), "maxwell"),
        ((6, 0), "pascal"),
        ((7, 0), "volta"),
        ((7, 2), "volta"),
        ((7, 5), "turing"),
        ((8, 0), "ampere"),
        ((8, 6), "ampere"),
        ((8, 9), "ada-lovelace"),
        ((9, 0), "hopper"),
        ((10, 0), "blackwell"),
        ((12, 0), "blackwell"),
        ((13, 0), "rubin"),
        ((11, 0), "undefined"),
        ((4, 0), "undefined"),
    ] {
        assert_eq!(family(major, minor), family_name, "{major}.{minor}");
    }
    for f in FAMILIES {
        assert!(is_label_value(f));
    }
}

#[test]
fn names_and_values_are_checked_as_kubernetes_checks_them() {
    for good in [
        "nvidia.com/gpu.count",
        "nvidia.com/mig-1g.10gb.slices.gi",
        "bcd.dev/fabric",
        &format!("a.b/{}", "x".repeat(63)),
    ] {
        assert!(is_label_name(good), "{good}");
    }
    for bad in [
        "gpu.count",
        "/gpu",
        "nvidia.com/",
        "Nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb+me.count",
        "nvidia.com/-x",
        &format!("a.b/{}", "x".repeat(64)),
    ] {
        assert!(!is_label_name(bad), "{bad}");
    }
    for good in ["", "0", "NVIDIA-H100-80GB-HBM3", "a_b.c-d", &"9".repeat(63)] {
        assert!(is_label_value(good), "{good}");
    }
    for bad in ["-a", "a-", "a b", "a/b", "é", &"9".repeat(64)] {
        assert!(!is_label_value(bad), "{bad}");
    }
    let mut labels = Labels::default();
    assert!(matches!(
        labels.insert("nvidia.com/gpu.product", "x y"),
        Err(LabelError::Value { .. })
    ));
    assert!(labels.is_empty(), "a refused label changes nothing");
}

proptest::proptest! {
    // Whatever nvidia-smi calls a GPU, the labels stay valid.
    #[test]
    fn any_model_name_gives_valid_labels(model in "\\PC{0,80}", machine in "\\PC{0,100}") {
        let mut g = gpu(0, "x");
        g.name = Some(model);
        let facts = HostFacts { machine: Some(machine), ..HostFacts::default() };
        let labels = node_labels(&inventory(vec![g]), &BTreeMap::new(), &facts, &LabelConfig::default());
        for (n, v) in labels.iter() {
            proptest::prop_assert!(is_label_name(n) && is_label_value(v), "{}={}", n, v);
        }
        proptest::prop_assert!(labels.get(name::MACHINE).is_some());
    }
}

// What broke: a reboot orchestrator had no label to select nodes whose GPU only a reboot
// brings back, and the node's MIG layout was in no label.
#[test]
fn reboot_required_and_the_mig_layout_are_labelled_only_when_so() {
    let inv = inventory(vec![gpu(0, "NVIDIA A100-SXM4-80GB")]);
    let plain = labels_of(&inv);
    assert_eq!(plain.get(name::REBOOT_REQUIRED), None);
    assert_eq!(plain.get(name::MIG_CONFIG), None);
    let labels = node_labels(
        &inv,
        &BTreeMap::new(),
        &HostFacts::default(),
        &LabelConfig {
            reboot_required: true,
            mig_layout: Some(("all 3g.40gb".into(), "failed")),
            ..LabelConfig::default()
        },
    );
    assert_eq!(labels.get(name::REBOOT_REQUIRED), Some("true"));
    assert_eq!(labels.get(name::MIG_CONFIG), Some("all-3g.40gb"));
    assert_eq!(labels.get(name::MIG_CONFIG_STATE), Some("failed"));
    assert_eq!(labels.get("nvidia.com/mig.config"), None);
}
