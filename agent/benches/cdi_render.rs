//! How long rendering a hold spec takes: a hold of 4 GPUs from the 8-GPU vendor spec
//! `testdata/cdi/hgx-h100-uuid.json` (target: at most 1 ms), next to a baseline measured in
//! the same run: cloning the vendor spec, the least a render that copies edits can cost.
//! Also reported: the same render serialised to the bytes written, and parsing the vendor
//! spec (JSON and YAML), which the converger does once per pass, not per hold.

use std::hint::black_box;
use std::path::PathBuf;

use bcd::cdi::spec::{parse_spec, Format};
use bcd::cdi::vendor::CatalogEntry;
use bcd::cdi::{render, DeviceCatalog, DeviceId, HoldId, HoldRequest, VendorSpec};
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

criterion_group!(benches, bench);
criterion_main!(benches);
