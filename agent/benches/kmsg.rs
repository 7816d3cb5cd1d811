//! How many kernel log records a second `parse_xid_record` reads: records that are not XIDs
//! (the kernel log's usual traffic, target ≥ 1,000,000/s on one core) and XID records (target
//! ≥ 200,000/s). The records are the hand-written ones of `testdata/kmsg/`.

use std::hint::black_box;

use bcd::health::kmsg::parse_xid_record;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const XIDS: &str = include_str!("../../testdata/kmsg/xids.txt");

/// The fixture's records (continuation lines joined to theirs), split by whether they match.
fn records() -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let mut all: Vec<String> = Vec::new();
    for line in XIDS.lines() {
        match all.last_mut() {
            Some(last) if line.starts_with(' ') => {
                last.push('\n');
                last.push_str(line);
            }
            _ => all.push(line.to_owned()),
        }
    }
    let (matching, other): (Vec<_>, Vec<_>) = all
        .into_iter()
        .map(String::into_bytes)
        .partition(|r| matches!(parse_xid_record(r), Ok((_, Some(_)))));
    (matching, other)
}

fn bench(c: &mut Criterion) {
    let (matching, other) = records();
    let mut group = c.benchmark_group("kmsg");
    for (name, set) in [("non-matching", &other), ("matching", &matching)] {
        group.throughput(Throughput::Elements(set.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| {
                for r in set {
                    let _ = black_box(parse_xid_record(black_box(r)));
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
