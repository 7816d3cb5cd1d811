//! The helper's own cost: a `Ping` round trip, a `SetPersistence` whose `nvidia-smi` exits at
//! once, and, as the baseline measured in the same run, the bare spawn and wait of that same
//! program. The helper's overhead on a child operation is the difference of the last two.
//! After the runs the helper's resident memory (`VmRSS`, `VmHWM`) is printed.
//!
//! Run: `cargo bench -p bcd-helper --bench roundtrip`. Medians are in
//! `target/criterion/<name>/new/estimates.json`.

#[path = "../tests/it/common/mod.rs"]
#[allow(dead_code)] // the bench starts a helper and talks to it; the tests use the rest
mod common;

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use bcd_protocol::{Operation, PciAddress};
use criterion::{criterion_group, criterion_main, Criterion};

fn roundtrip(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let smi = common::fake_program(dir.path(), "exit-0", "nvidia-smi");
    let h = common::Helper::start_in(dir, &["--nvidia-smi", smi.to_str().unwrap()]);
    let mut client = h.client();
    let gpu: PciAddress = "0000:18:00.0".parse().unwrap();
    let mut id = 0u64;

    let mut g = c.benchmark_group("helper");
    g.sample_size(100).measurement_time(Duration::from_secs(5));
    g.bench_function("ping", |b| {
        b.iter(|| {
            id += 1;
            client.request(id, Operation::Ping).unwrap()
        })
    });
    g.bench_function("set_persistence_exit0", |b| {
        b.iter(|| {
            id += 1;
            client
                .request(id, Operation::SetPersistence { gpu, enabled: true })
                .unwrap()
        })
    });
    // The same child as the helper runs it: cleared environment, own process group, pipes.
    g.bench_function("bare_child_exit0", |b| {
        b.iter(|| {
            Command::new(&smi)
                .args(["-i", "00000000:18:00.0", "-pm", "1"])
                .env_clear()
                .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
                .stdin(Stdio::null())
                .process_group(0)
                .output()
                .unwrap()
        })
    });
    g.finish();

    let status = std::fs::read_to_string(format!("/proc/{}/status", h.child.id())).unwrap();
    for line in status.lines() {
        if line.starts_with("VmRSS") || line.starts_with("VmHWM") {
            eprintln!("bcd-helper {line}");
        }
    }
}

criterion_group!(benches, roundtrip);
criterion_main!(benches);
