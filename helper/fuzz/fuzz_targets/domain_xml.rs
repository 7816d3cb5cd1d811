//! Feeds arbitrary bytes to the root helper's only parser, the reader of libvirt's domain
//! XML (`helper/src/libvirt/domain_xml.rs`, included as it is): it must return, never panic,
//! stay within its bounds (at most `MAX_HOSTDEVS` addresses, each once), and agree with
//! itself on the same text.
#![no_main]

#[path = "../../src/libvirt/domain_xml.rs"]
mod domain_xml;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(xml) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(found) = domain_xml::pci_hostdevs(xml) {
        assert!(found.len() <= domain_xml::MAX_HOSTDEVS);
        let mut seen = std::collections::BTreeSet::new();
        assert!(found.iter().all(|a| seen.insert(*a)), "an address twice");
        assert_eq!(domain_xml::pci_hostdevs(xml).ok(), Some(found));
    }
    let _ = domain_xml::domain_name(xml);
});
