//! Property tests: no input makes `parse_query_xml` panic.

use bcd::smi::xml::parse_query_xml;
use proptest::prelude::*;

/// Real-shaped documents to mutate: the hand-written fixtures.
const SEEDS: &[&[u8]] = &[
    include_bytes!("../../../testdata/smi/qx/h100-r570-fabric.xml"),
    include_bytes!("../../../testdata/smi/qx/r616-deprecated.xml"),
    include_bytes!("../../../testdata/smi/qx/a100-mig.xml"),
    include_bytes!("../../../testdata/smi/qx/crlf-no-declaration.xml"),
    include_bytes!("../../../testdata/smi/qx/hostile-entity.xml"),
];

/// Fragments that stress the parser when spliced anywhere into a document.
const SPLICES: &[&[u8]] = &[
    b"<gpu id=\"0000:01:00.0\">",
    b"</gpu>",
    b"<mig_device>",
    b"<process_info/>",
    b"</nvidia_smi_log>",
    b"&xxe;",
    b"&#xFFFFFFFF;",
    b"<![CDATA[N/A]]>",
    b"<!--",
    b"\xff\xfe",
    b"18446744073709551615 MiB",
    b"<total>99999999999999999999999 MiB</total>",
];

/// One edit to a document.
#[derive(Debug, Clone)]
enum Edit {
    Truncate(usize),
    Flip(usize, u8),
    Delete(usize, usize),
    Splice(usize, usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        any::<usize>().prop_map(Edit::Truncate),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Edit::Flip(at, b)),
        (any::<usize>(), 0usize..64).prop_map(|(at, n)| Edit::Delete(at, n)),
        (any::<usize>(), 0..SPLICES.len()).prop_map(|(at, s)| Edit::Splice(at, s)),
    ]
}

fn apply(doc: &mut Vec<u8>, edit: &Edit) {
    let len = doc.len().max(1);
    match *edit {
        Edit::Truncate(at) => doc.truncate(at % len),
        Edit::Flip(at, b) => {
            if !doc.is_empty() {
                doc[at % len] = b;
            }
        }
        Edit::Delete(at, n) => {
            let start = (at % len).min(doc.len());
            let end = (start + n).min(doc.len());
            doc.drain(start..end);
        }
        Edit::Splice(at, s) => {
            let at = (at % len).min(doc.len());
            doc.splice(at..at, SPLICES[s].iter().copied());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = parse_query_xml(&bytes);
    }

    #[test]
    fn mutated_documents_never_panic(
        seed in 0..SEEDS.len(),
        edits in proptest::collection::vec(edit(), 1..8),
    ) {
        let mut doc = SEEDS[seed].to_vec();
        for e in &edits {
            apply(&mut doc, e);
        }
        let _ = parse_query_xml(&doc);
    }
}
