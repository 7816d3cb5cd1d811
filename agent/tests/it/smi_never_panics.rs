//! Property tests: no input makes an `nvidia-smi` text parser panic. Arbitrary bytes, plus
//! strings built from the pieces real answers are made of (commas, tabs, brackets, `GPU`,
//! `MIG`, `Link`, table borders), so the generators reach past the first line's checks.

use bcd::smi::{compute_cap, hint, list, mig, nvlink, probe, samples, topo};
use proptest::prelude::*;

/// Runs every parser on `bytes`; the point is that none panics.
fn run_all(bytes: &[u8]) {
    let _ = list::parse_list(bytes);
    let _ = compute_cap::parse_compute_cap(bytes);
    let _ = topo::parse_topo(bytes);
    let _ = nvlink::parse_status(bytes);
    let _ = nvlink::parse_remote(bytes);
    let _ = mig::parse_profiles(bytes);
    let _ = mig::parse_instances(bytes);
    let _ = samples::parse_samples(bytes);
    let _ = samples::count_compute_apps(bytes);
    let _ = samples::parse_query_gpu_csv(bytes);
    let _ = probe::parse_probe(bytes);
    let text = String::from_utf8_lossy(bytes);
    let _ = samples::refused_field(&text);
    let _ = hint::error_hint(&text);
}

/// Fragments of real answers, glued in random order.
fn fragment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GPU-6513270e-269e-0d37-f2a7-4de452e6b438".to_owned()),
        Just(", ".to_owned()),
        Just(",".to_owned()),
        Just("\n".to_owned()),
        Just("\r\n".to_owned()),
        Just("\t".to_owned()),
        Just("[N/A]".to_owned()),
        Just("[Requested functionality has been deprecated]".to_owned()),
        Just("Enabled".to_owned()),
        Just("GPU 0: NVIDIA H100 (UUID: GPU-1)".to_owned()),
        Just("  MIG 1g.10gb  Device  0: (UUID: MIG-1)".to_owned()),
        Just("\t Link 3: 26.562 GB/s".to_owned()),
        Just(" Link 1: Remote Device SWITCH: Link 2, PCI Bus Id 00000000:05:00.0".to_owned()),
        Just("\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\x1b[0m".to_owned()),
        Just("GPU1\tNV18\t X \tSOC\t0-3".to_owned()),
        Just("|   0  MIG 1g.5gb+me  20  1/1  4.75  No  14  1  0  |".to_owned()),
        Just("|      1     1     1   |".to_owned()),
        Just("+-----+".to_owned()),
        Just("Field \"memory.reserved\" is not a valid field to query.".to_owned()),
        Just("memory.total [MiB]".to_owned()),
        Just("\x1b[".to_owned()),
        Just("(UUID:".to_owned()),
        Just(":".to_owned()),
        Just("/".to_owned()),
        Just("4294967296".to_owned()),
        Just("-1".to_owned()),
        Just("1e309".to_owned()),
        "[ -~]{0,12}",
        any::<char>().prop_map(String::from),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        run_all(&bytes);
    }

    #[test]
    fn answer_shaped_text_never_panics(parts in proptest::collection::vec(fragment(), 0..48)) {
        run_all(parts.concat().as_bytes());
    }

    #[test]
    fn sample_lines_with_arbitrary_cells_never_panic(
        cells in proptest::collection::vec(prop_oneof![fragment(), "[0-9.]{0,8}"], 14)
    ) {
        let line = cells.join(", ");
        let _ = samples::parse_samples(line.as_bytes());
        // A header row of the same width must still read.
        let csv = format!("{}\n{}\n", samples::SAMPLE_FIELDS, line);
        let _ = samples::parse_query_gpu_csv(csv.as_bytes());
    }
}
