//! How long `parse_query_xml` takes on a large real document, next to a baseline measured in
//! the same run: a bare quick-xml scan that reads every event of the same bytes and keeps
//! nothing. The parser's cost over the baseline is what it adds.
//!
//! The document is the 8-GPU V100S capture from `../shared/fixtures/real/qx/` when that folder
//! is next to the checkout, else the largest hand-written fixture.

use std::hint::black_box;
use std::path::PathBuf;

use bcd::smi::xml::parse_query_xml;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use quick_xml::events::Event;
use quick_xml::Reader;

const REAL_CAPTURE: &str = "../../shared/fixtures/real/qx/datakit-8x-v100s-pcie-32gb-r460.xml";
const FALLBACK: &[u8] = include_bytes!("../../testdata/smi/qx/h100-r570-fabric.xml");

fn document() -> (String, Vec<u8>) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(REAL_CAPTURE);
    match std::fs::read(&path) {
        Ok(bytes) => ("v100s-8x-r460".into(), bytes),
        Err(_) => {
            eprintln!(
                "notice: {} is absent; using h100-r570-fabric.xml",
                path.display()
            );
            ("h100-r570-fabric".into(), FALLBACK.to_vec())
        }
    }
}

/// Reads every event and keeps nothing: the floor any streaming parser stands on.
fn scan_events(bytes: &[u8]) -> usize {
    let mut reader = Reader::from_reader(bytes);
    reader.config_mut().trim_text(true);
    let mut events = 0;
    loop {
        match reader.read_event() {
            Ok(Event::Eof) | Err(_) => return events,
            Ok(event) => {
                black_box(&event);
                events += 1;
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let (name, bytes) = document();
    let mut group = c.benchmark_group(format!("parse_qx/{name}"));
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    group.bench_function("parse_query_xml", |b| {
        b.iter(|| parse_query_xml(black_box(&bytes)).expect("document parses"))
    });
    group.bench_function("bare quick-xml event scan", |b| {
        b.iter(|| scan_events(black_box(&bytes)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
