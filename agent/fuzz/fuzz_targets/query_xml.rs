//! Feeds arbitrary bytes to the `nvidia-smi -q -x` parser: it must return, never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = bcd::smi::xml::parse_query_xml(data);
});
