//! How long rendering a hold spec takes: a hold of 4 GPUs from the 8-GPU vendor spec
//! `testdata/cdi/hgx-h100-uuid.json` (target: at most 1 ms), next to a baseline measured in
//! the same run: cloning the vendor spec, the least a render that copies edits can cost.
//! Also reported: the same render serialised to the bytes written, and parsing the vendor
//! spec (JSON and YAML), which the converger does once per pass, not per hold.
//!
//! Holds end to end, in a temporary folder: a hold applied (checked by the policy, saved to
//! `holds.json`) until its spec is written (rendered and written atomically), over 100
//! holds; and one converger pass over 1,000 holds whose specs are already written (each
//! rendered and compared with the file), next to the baseline of reading those 1,000 files.

use std::hint::black_box;
use std::path::PathBuf;

use bcd::cdi::spec::{parse_spec, Format};
use bcd::cdi::vendor::CatalogEntry;
use bcd::cdi::{converge, render, DeviceCatalog, DeviceId, HoldId, HoldRequest, Holds, VendorSpec};
use bcd::device::policy::{Placed, Topology};
use criterion::{criterion_group, criterion_main, Criterion};

const JSON: &[u8] = include_bytes!("../../testdata/cdi/hgx-h100-uuid.json");
const YAML: &[u8] = include_bytes!("../../testdata/cdi/hgx-h100-uuid.yaml");
const HELD: [&str; 4] = [
    "GPU-a4303385-f265-4ffc-ad1b-b0bef156d59a",
    "GPU-30e15e2f-5971-0b16-04be-39a46d1071ce",
    "GPU-8032961a-3b38-ab58-6c00-1b9ef125ea99",
    "GPU-70823a7e-f12c-9777-a04d-fa2e9a8cf5b8",
];

fn bench(c: &mut Criterion) {
    let vendor = vec![VendorSpec {
        path: PathBuf::from("nvidia.json"),
        spec: parse_spec(JSON, Format::Json).unwrap(),
    }];
    let devices: Vec<DeviceId> = HELD.iter().map(|s| s.parse().unwrap()).collect();
    let catalog = DeviceCatalog {
        entries: devices
            .iter()
            .enumerate()
            .map(|(i, id)| CatalogEntry {
                id: id.clone(),
                gpu_index: i as u32,
                mig_index: None,
                gi_ci: None,
            })
            .collect(),
    };
    let hold: HoldId = "bench".parse().unwrap();
    let request = HoldRequest {
        hold: &hold,
        devices: &devices,
        kubernetes: false,
    };
    let mut group = c.benchmark_group("cdi");
    group.bench_function("baseline: clone the 8-GPU vendor spec", |b| {
        b.iter(|| black_box(&vendor[0].spec).clone())
    });
    group.bench_function("render 4 of 8 GPUs", |b| {
        b.iter(|| render(black_box(request), black_box(&vendor), black_box(&catalog)))
    });
    group.bench_function("render 4 of 8 GPUs + JSON bytes", |b| {
        b.iter(|| render(black_box(request), black_box(&vendor), black_box(&catalog)).to_json())
    });
    group.bench_function("parse the 8-GPU vendor spec (JSON)", |b| {
        b.iter(|| parse_spec(black_box(JSON), Format::Json).unwrap())
    });
    group.bench_function("parse the 8-GPU vendor spec (YAML)", |b| {
        b.iter(|| parse_spec(black_box(YAML), Format::Yaml).unwrap())
    });
    group.finish();
}

/// A GPU UUID for made-up GPU `n`.
fn made_up(n: usize) -> DeviceId {
    format!("GPU-{n:08x}-0000-4000-8000-000000000000")
        .parse()
        .unwrap()
}

fn holds_bench(c: &mut Criterion) {
    let vendor = vec![VendorSpec {
        path: PathBuf::from("nvidia.json"),
        spec: parse_spec(JSON, Format::Json).unwrap(),
    }];
    let catalog = DeviceCatalog::default();
    let topology = Topology::default();
    let place = |d: DeviceId| Placed {
        gpu: d.gpu(),
        device: d,
    };
    let mut group = c.benchmark_group("holds");
    group.sample_size(20);
    // Hold apply -> spec written, as the node service does it (the policy's check, holds.json
    // saved, then a converger pass), for 100 holds one after another; each timed alone, the
    // median printed. Criterion's own loop cannot keep the store growing by one a step.
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let mut holds = Holds::load(dir.path()).unwrap();
        let mut took = Vec::with_capacity(100);
        for n in 0..100 {
            let id: HoldId = format!("h{n}").parse().unwrap();
            let started = std::time::Instant::now();
            holds
                .apply(
                    id,
                    vec![place(made_up(n))],
                    bcd::cdi::HoldOwner::Operator,
                    &topology,
                )
                .unwrap();
            let done = converge(&mut holds, &vendor, &catalog, dir.path());
            took.push(started.elapsed());
            assert_eq!(done.written.len(), 1);
        }
        took.sort();
        println!(
            "holds/apply -> spec written, round {round}: median {:?} over 100 holds (min {:?}, max {:?})",
            took[50], took[0], took[99]
        );
    }
    // One pass over 1,000 holds whose specs are already there.
    let dir = tempfile::tempdir().unwrap();
    let mut holds = Holds::load(dir.path()).unwrap();
    for n in 0..1000 {
        let id: HoldId = format!("h{n}").parse().unwrap();
        holds
            .apply(
                id,
                vec![place(made_up(n))],
                bcd::cdi::HoldOwner::Operator,
                &topology,
            )
            .unwrap();
    }
    converge(&mut holds, &vendor, &catalog, dir.path());
    group.bench_function("baseline: read the 1,000 hold specs", |b| {
        b.iter(|| {
            for n in 0..1000 {
                black_box(std::fs::read(dir.path().join(format!("bcd-h{n}.json"))).unwrap());
            }
        })
    });
    group.bench_function("converger pass over 1,000 holds", |b| {
        b.iter(|| {
            let done = converge(&mut holds, &vendor, &catalog, dir.path());
            assert_eq!(done.unchanged.len(), 1000);
        })
    });
    group.finish();
}

criterion_group!(benches, bench, holds_bench);
criterion_main!(benches);
