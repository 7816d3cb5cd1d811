//! One inventory collection on the 8-GPU fake host (`testdata/hosts/hgx-h100`), without the
//! time spent inside `nvidia-smi`: the answers are read once up front, and each iteration
//! reads procfs and sysfs, parses every answer, merges, canonicalises and hashes. The
//! baseline in the same run is the procfs/sysfs read alone.

use std::hint::black_box;
use std::path::PathBuf;

use bcd::inventory::document::Inventory;
use bcd::inventory::merge::merge;
use bcd::inventory::procfs;
use bcd::smi::snapshot::Snapshot;
use bcd::smi::{compute_cap, list, mig, nvlink, topo, xml};
use bcd::sys::host::Host;
use criterion::{criterion_group, criterion_main, Criterion};

fn bench(c: &mut Criterion) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts/hgx-h100");
    let host = Host::fake(&dir);
    let answer =
        |name: &str| std::fs::read(dir.join("answers").join(name)).expect("fake host answer");
    let (qx, l, cc, tm, ns, nr, mg) = (
        answer("q-x.out"),
        answer("L.out"),
        answer("compute-cap.out"),
        answer("topo-m.out"),
        answer("nvlink-s.out"),
        answer("nvlink-R.out"),
        answer("mig-lgip.out"),
    );
    let mut group = c.benchmark_group("collect-hgx-h100");
    group.bench_function("procfs and sysfs only (baseline)", |b| {
        b.iter(|| black_box(procfs::collect(&host)))
    });
    group.bench_function("collection without nvidia-smi time", |b| {
        b.iter(|| {
            let base = procfs::collect(&host);
            let snap = Snapshot {
                xml: xml::parse_query_xml(&qx).unwrap(),
                listed: list::parse_list(&l).unwrap(),
                compute_caps: compute_cap::parse_compute_cap(&cc).unwrap(),
                topology: topo::parse_topo(&tm).unwrap(),
                nvlink_status: nvlink::parse_status(&ns).unwrap(),
                nvlink_remotes: nvlink::parse_remote(&nr).unwrap(),
                mig_profiles: mig::parse_profiles(&mg).unwrap(),
                queries: Vec::new(),
            };
            black_box(Inventory::new(merge(&base, Some(&snap))))
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
