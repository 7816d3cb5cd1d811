//! Feeds arbitrary bytes to the kernel log record and event parsers: they must return, never
//! panic, and an event they find must come from a kernel-facility message that starts with the
//! driver's own text (`NVRM: Xid (`, `nvidia-nvswitchN: SXid (`, `NVRM: GPU ` / `NVRM: The`).

#![no_main]

use bcd::health::kmsg::{parse_event_record, parse_xid_record, Event};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((record, xid)) = parse_xid_record(data) {
        if xid.is_some() {
            assert!(record.message.starts_with("NVRM: Xid ("));
            assert_eq!(record.facility(), 0);
        }
    }
    if let Ok((record, Some(event))) = parse_event_record(data) {
        assert_eq!(record.facility(), 0);
        let prefix = match event {
            Event::Xid(_) => "NVRM: Xid (",
            Event::SXid(_) => "nvidia-nvswitch",
            Event::FellOffTheBus { .. } => "NVRM: ",
        };
        assert!(record.message.starts_with(prefix));
    }
});
