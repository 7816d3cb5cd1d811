//! Fuzzes the CSV readers: the light samples, the compute processes and `--query-gpu` with a
//! header. None may panic on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = bcd::smi::samples::parse_samples(data);
    let _ = bcd::smi::samples::count_compute_apps(data);
    let _ = bcd::smi::samples::parse_query_gpu_csv(data);
    let _ = bcd::smi::compute_cap::parse_compute_cap(data);
});
