//! Feeds arbitrary bytes to the kernel log record and XID parsers: they must return, never
//! panic, and an XID they find must come from a message that starts with the driver's prefix.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((record, xid)) = bcd::health::kmsg::parse_xid_record(data) {
        if xid.is_some() {
            assert!(record.message.starts_with("NVRM: Xid (PCI:"));
            assert_eq!(record.facility(), 0);
        }
    }
});
