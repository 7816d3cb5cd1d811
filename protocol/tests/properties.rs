//! Property tests of the codec: every valid message round-trips, and no byte string panics the
//! decoder or makes it allocate past the frame limit.

use bcd_protocol::frame::{decode, decode_frame, encode, FrameError, HEADER_LEN, MAX_FRAME_LEN};
use bcd_protocol::{
    ClientFrame, DomainName, GpuRef, HelloAnswer, HelperError, Operation, OperationKind, Outcome,
    PciAddress, PersistenceNote, Request, Response, SaveFile, ServerFrame,
};
use proptest::prelude::*;

fn pci() -> impl Strategy<Value = PciAddress> {
    (0u32..=0xffff, any::<u8>(), 0u8..32, 0u8..8, any::<bool>()).prop_map(|(d, b, dev, f, wide)| {
        let s = if wide {
            format!("{d:08X}:{b:02X}:{dev:02X}.{f:X}")
        } else {
            format!("{d:04x}:{b:02x}:{dev:02x}.{f:x}")
        };
        s.parse().unwrap()
    })
}

fn domain() -> impl Strategy<Value = DomainName> {
    "[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}"
        .prop_filter("a name, not an id or a UUID", |s| {
            s.parse::<DomainName>().is_ok()
        })
        .prop_map(|s| s.parse().unwrap())
}

fn save_file() -> impl Strategy<Value = SaveFile> {
    proptest::collection::vec("[A-Za-z0-9_][A-Za-z0-9_.+-]{0,15}", 1..6)
        .prop_filter("no dot components", |parts| {
            parts.iter().all(|p| p != "." && p != "..")
        })
        .prop_map(|parts| format!("/{}", parts.join("/")).parse().unwrap())
}

fn operation() -> impl Strategy<Value = Operation> {
    prop_oneof![
        Just(Operation::Ping),
        (pci(), any::<bool>())
            .prop_map(|(gpu, enabled)| Operation::SetPersistence { gpu, enabled }),
        pci().prop_map(|gpu| Operation::ResetGpu { gpu }),
        pci().prop_map(|device| Operation::VfioBind { device }),
        pci().prop_map(|device| Operation::VfioRelease { device }),
        domain().prop_map(|domain| Operation::LibvirtStart { domain }),
        save_file().prop_map(|file| Operation::LibvirtRestore { file }),
        domain().prop_map(|domain| Operation::LibvirtDestroy { domain }),
        domain().prop_map(|domain| Operation::LibvirtDomainGpus { domain }),
        save_file().prop_map(|file| Operation::LibvirtImageGpus { file }),
    ]
}

fn helper_error() -> impl Strategy<Value = HelperError> {
    prop_oneof![
        Just(HelperError::Denied),
        Just(HelperError::Unsupported),
        ".{0,40}".prop_map(|what| HelperError::Invalid { what }),
        ".{0,40}".prop_map(|what| HelperError::Busy { what }),
        any::<u64>().prop_map(|after_s| HelperError::Timeout { after_s }),
        (proptest::option::of(any::<i32>()), ".{0,40}")
            .prop_map(|(exit_code, message)| HelperError::Failed { exit_code, message }),
    ]
}

fn note() -> impl Strategy<Value = PersistenceNote> {
    prop_oneof![
        Just(PersistenceNote::NotTouched),
        any::<bool>().prop_map(|enabled| PersistenceNote::Set { enabled }),
        (any::<bool>(), ".{0,20}")
            .prop_map(|(enabled, message)| PersistenceNote::Failed { enabled, message }),
    ]
}

fn outcome() -> impl Strategy<Value = Outcome> {
    let driver = proptest::option::of("[a-z_-]{1,12}");
    prop_oneof![
        (".{0,10}", ".{0,10}").prop_map(|(helper_version, sandbox)| Outcome::Pong {
            helper_version,
            sandbox
        }),
        (pci(), any::<bool>()).prop_map(|(gpu, enabled)| Outcome::Persistence { gpu, enabled }),
        pci().prop_map(|gpu| Outcome::Reset { gpu }),
        (pci(), driver.clone(), driver, note()).prop_map(
            |(device, driver_before, driver_after, persistence)| {
                Outcome::Vfio {
                    device,
                    driver_before,
                    driver_after,
                    persistence,
                }
            }
        ),
        (
            proptest::collection::vec(pci(), 0..4),
            proptest::collection::vec((pci(), note()), 0..4)
        )
            .prop_map(|(gpus, persistence)| Outcome::Libvirt {
                gpus,
                persistence,
                domain: None,
            }),
    ]
}

fn server_frame() -> impl Strategy<Value = ServerFrame> {
    prop_oneof![
        (
            any::<u32>(),
            ".{0,10}",
            proptest::sample::subsequence(OperationKind::ALL.to_vec(), 0..9)
        )
            .prop_map(
                |(version, helper_version, operations)| ServerFrame::Hello(Ok(HelloAnswer {
                    version,
                    helper_version,
                    operations
                }))
            ),
        helper_error().prop_map(|e| ServerFrame::Hello(Err(e))),
        helper_error().prop_map(ServerFrame::Closing),
        (
            any::<u64>(),
            prop_oneof![outcome().prop_map(Ok), helper_error().prop_map(Err)]
        )
            .prop_map(|(id, result)| ServerFrame::Response(Response { id, result })),
    ]
}

proptest! {
    #[test]
    fn every_client_frame_round_trips(id in any::<u64>(), op in operation(), version in any::<u32>()) {
        for frame in [ClientFrame::Request(Request { id, op: op.clone() }), ClientFrame::Hello { version }] {
            let bytes = encode(&frame).unwrap();
            prop_assert!(bytes.len() - HEADER_LEN <= MAX_FRAME_LEN);
            prop_assert_eq!(decode_frame::<ClientFrame>(&bytes).unwrap(), frame);
        }
    }

    #[test]
    fn every_server_frame_round_trips(frame in server_frame()) {
        let bytes = encode(&frame).unwrap();
        prop_assert_eq!(decode_frame::<ServerFrame>(&bytes).unwrap(), frame);
    }

    #[test]
    fn no_payload_panics_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = decode::<ClientFrame>(&bytes);
        let _ = decode::<ServerFrame>(&bytes);
        let _ = decode_frame::<ClientFrame>(&bytes);
    }

    #[test]
    fn mutated_frames_never_panic(op in operation(), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8)) {
        let mut bytes = encode(&ClientFrame::Request(Request { id: 1, op })).unwrap();
        for (at, value) in flips {
            let i = HEADER_LEN + at % (bytes.len() - HEADER_LEN);
            bytes[i] = value;
        }
        let _ = decode_frame::<ClientFrame>(&bytes);
    }

    #[test]
    fn strings_outside_the_safe_sets_never_decode(s in ".{0,80}") {
        let checks: [(bool, bool); 3] = [
            (s.parse::<DomainName>().is_ok(), s.chars().all(|c| c.is_ascii_alphanumeric() || "_-.+".contains(c)) && !s.is_empty() && s.len() <= 64 && !s.starts_with(['-', '.'])),
            (s.parse::<PciAddress>().is_ok(), s.is_ascii()),
            (s.parse::<SaveFile>().is_ok(), s.starts_with('/') && !s.contains("..") && !s.contains('\0')),
        ];
        for (parsed, allowed) in checks {
            prop_assert!(!parsed || allowed, "{:?} parsed but is outside its safe set", s);
        }
    }
}

#[test]
fn a_huge_length_prefix_is_refused_without_allocating() {
    let mut bytes = u32::MAX.to_be_bytes().to_vec();
    bytes.extend_from_slice(&[0; 16]);
    assert!(matches!(
        decode_frame::<ClientFrame>(&bytes),
        Err(FrameError::TooLong { .. })
    ));
}

#[test]
fn injection_in_every_string_field_is_refused() {
    let hostile = [
        ";reboot",
        "$(id)",
        "`id`",
        "-rf",
        "..",
        "../../etc/shadow",
        "a\0b",
        "é",
        "x|y",
        "a b",
        "\n",
    ];
    let long = "a".repeat(5000);
    for s in hostile.iter().copied().chain([long.as_str()]) {
        assert!(s.parse::<DomainName>().is_err(), "domain {s:?}");
        assert!(s.parse::<GpuRef>().is_err(), "gpu {s:?}");
        assert!(s.parse::<PciAddress>().is_err(), "pci {s:?}");
        assert!(
            format!("/save/{s}").parse::<SaveFile>().is_err() || s == "-rf",
            "save {s:?}"
        );
    }
    assert!("/save/-rf".parse::<SaveFile>().is_err());
}

/// Replaces the first occurrence of `from` in an encoded frame by `to` (same length).
fn forge(frame: &ClientFrame, from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut bytes = encode(frame).unwrap();
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .expect("the field is in the frame");
    bytes[at..at + to.len()].copy_from_slice(to.as_bytes());
    bytes
}

// A refused argument used to answer only "frame does not decode: Serde Deserialization Error".
#[test]
fn a_refused_argument_names_its_field_and_rule() {
    let bind = ClientFrame::Request(Request {
        id: 1,
        op: Operation::VfioBind {
            device: "0000:18:00.0".parse().unwrap(),
        },
    });
    let err = decode_frame::<ClientFrame>(&forge(&bind, "0000:18:00.0", "0000:zz:00.0"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("frame does not decode: device: invalid PCI address"),
        "{err}"
    );

    let reset = ClientFrame::Request(Request {
        id: 1,
        op: Operation::ResetGpu {
            gpu: "0000:18:00.0".parse().unwrap(),
        },
    });
    let err = decode_frame::<ClientFrame>(&forge(&reset, "0000:18:00.0", "GPU-18:00.0;"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("gpu: invalid PCI address"), "{err}");

    let start = ClientFrame::Request(Request {
        id: 1,
        op: Operation::LibvirtStart {
            domain: "vmone".parse().unwrap(),
        },
    });
    let err = decode_frame::<ClientFrame>(&forge(&start, "vmone", "12345"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("domain: invalid libvirt domain name"), "{err}");
    assert!(err.contains("all digits"), "{err}");
    // The next decode on this thread does not inherit the refusal.
    let err = decode_frame::<ClientFrame>(&[0, 0, 0, 1, 0xff])
        .unwrap_err()
        .to_string();
    assert!(!err.contains("domain:"), "{err}");
}
