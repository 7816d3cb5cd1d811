//! Hostile bytes: malformed frames and forged arguments. Each gets a typed error or a closed
//! connection, never a panic, never a child run, and other clients are served meanwhile.

use crate::common;

use std::time::{Duration, Instant};

use bcd_protocol::frame::{encode, MAX_FRAME_LEN};
use bcd_protocol::{ClientFrame, HelperError, Operation, Request, ServerFrame, PROTOCOL_VERSION};
use common::{fake_program, Helper, RawClient};
use serde::Serialize;

/// Expects `Closing(Invalid)` (or, where the helper cannot answer, a close) and then EOF.
fn expect_refused(c: &mut RawClient, case: &str) -> String {
    let what = match c.recv() {
        Some(ServerFrame::Closing(HelperError::Invalid { what })) => what,
        None => String::new(),
        other => panic!("{case}: unexpected answer {other:?}"),
    };
    assert!(c.closed(), "{case}: the connection stayed open");
    what
}

fn header(len: u32) -> Vec<u8> {
    len.to_be_bytes().to_vec()
}

/// A deterministic byte stream (xorshift), so a failure can be replayed.
fn garbage(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn malformed_frames_are_refused_while_others_are_served() {
    let h = Helper::start(&["--frame-timeout", "1"]);

    // A stalled peer (3 bytes of a header) is pending while another client is served.
    let mut stalled = h.client();
    stalled.send_raw(&[0, 0, 0]);
    let t = Instant::now();
    h.client().request(1, Operation::Ping).unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "ping waited on the stalled peer"
    );
    let what = expect_refused(&mut stalled, "stall");
    assert!(what.contains("no complete frame within 1s"), "{what}");
    assert!(t.elapsed() < Duration::from_secs(4));

    let ping = encode(&ClientFrame::Request(Request {
        id: 9,
        op: Operation::Ping,
    }))
    .unwrap();
    let mut trailing = ping.clone();
    let len = u32::from_be_bytes(trailing[..4].try_into().unwrap()) + 1;
    trailing[..4].copy_from_slice(&len.to_be_bytes());
    trailing.push(0);
    let mut exact = header(MAX_FRAME_LEN as u32);
    exact.extend(std::iter::repeat_n(0xffu8, MAX_FRAME_LEN));
    let mut random = header(100);
    random.extend(garbage(7, 100));
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty frame", header(0), "empty frame"),
        ("64 KiB of garbage", exact, "does not decode"),
        (
            "64 KiB + 1",
            header(MAX_FRAME_LEN as u32 + 1),
            "longer than",
        ),
        ("u32::MAX", header(u32::MAX), "longer than"),
        ("random payload", random, ""),
        ("trailing byte", trailing, "trailing"),
        // Request (1), id 7, operation variant 8: there is no ninth operation.
        (
            "unknown operation",
            vec![0, 0, 0, 3, 1, 7, 8],
            "does not decode",
        ),
        (
            "a second Hello",
            encode(&ClientFrame::Hello {
                version: PROTOCOL_VERSION,
            })
            .unwrap(),
            "Hello",
        ),
    ];
    for (case, bytes, expect) in cases {
        let mut c = h.client();
        c.send_raw(&bytes);
        let what = expect_refused(&mut c, case);
        assert!(what.contains(expect), "{case}: {what}");
    }
    // Pure noise from the first byte, several seeds: refused or closed, never a hang.
    for seed in 1..20 {
        let mut c = h.connect();
        c.send_raw(&garbage(seed, 64));
        let t = Instant::now();
        let _ = c.recv();
        assert!(c.closed());
        assert!(t.elapsed() < Duration::from_secs(3), "seed {seed}");
    }
    // A request before Hello, and Hello of another version.
    let mut c = h.connect();
    c.send(&ClientFrame::Request(Request {
        id: 1,
        op: Operation::Ping,
    }));
    assert!(expect_refused(&mut c, "no hello").contains("Hello"));
    let mut c = h.connect();
    c.send(&ClientFrame::Hello {
        version: PROTOCOL_VERSION + 1,
    });
    assert_eq!(
        c.recv(),
        Some(ServerFrame::Hello(Err(HelperError::Unsupported)))
    );
    assert!(c.closed());

    // Still alive, and the refusals were audited: the first of each kind in full, the rest
    // counted into one summary line per window (so a flood cannot fill the disk).
    h.client().request(2, Operation::Ping).unwrap();
    let audit = h.audit_lines();
    let refused = audit
        .iter()
        .filter(|l| l.contains("\"outcome\":\"invalid\""))
        .count();
    assert!((1..=3).contains(&refused), "{audit:#?}");
    assert!(audit
        .iter()
        .any(|l| l.contains("\"operation\":\"hello\"") && l.contains("unsupported")));
}

/// The protocol's shapes with plain strings where the real types validate, to forge frames.
#[derive(Serialize)]
enum ForgedFrame {
    #[allow(dead_code)]
    Hello {
        version: u32,
    },
    Request {
        id: u64,
        op: ForgedOp,
    },
}

#[derive(Serialize, Clone)]
#[allow(dead_code)]
enum ForgedOp {
    Ping,
    SetPersistence { gpu: String, enabled: bool },
    ResetGpu { gpu: String },
    VfioBind { device: String },
    VfioRelease { device: String },
    LibvirtStart { domain: String },
    LibvirtRestore { file: String },
    LibvirtDestroy { domain: String },
    LibvirtDomainGpus { domain: String },
    LibvirtImageGpus { file: String },
}

#[test]
fn forged_arguments_never_reach_a_program() {
    let dir = tempfile::tempdir().unwrap();
    let smi = fake_program(dir.path(), "nvidia-smi-record", "nvidia-smi");
    let virsh = fake_program(dir.path(), "nvidia-smi-record", "virsh");
    let h = Helper::start_in(
        dir,
        &[
            "--nvidia-smi",
            smi.to_str().unwrap(),
            "--virsh",
            virsh.to_str().unwrap(),
        ],
    );
    let long = "a".repeat(5000);
    let values = [
        "x;reboot",
        "$(reboot)",
        "`id`",
        "-rf",
        "--gpu-reset",
        "..",
        "../../etc/passwd",
        "/var/lib/libvirt/qemu/save/../../../etc/shadow",
        "a\0b",
        "a b",
        "a\nb",
        long.as_str(),
        "dömäin",
        "GPU-12345678-1234-1234-1234-1234567890ab;x",
        "0000:18:00.0 -pm 1",
        "0000:18:00.0/../..",
        "",
    ];
    let mut n = 0;
    for v in values {
        let v = v.to_owned();
        for op in [
            ForgedOp::SetPersistence {
                gpu: v.clone(),
                enabled: true,
            },
            ForgedOp::ResetGpu { gpu: v.clone() },
            ForgedOp::VfioBind { device: v.clone() },
            ForgedOp::VfioRelease { device: v.clone() },
            ForgedOp::LibvirtStart { domain: v.clone() },
            ForgedOp::LibvirtRestore { file: v.clone() },
            ForgedOp::LibvirtDestroy { domain: v.clone() },
            ForgedOp::LibvirtDomainGpus { domain: v.clone() },
            ForgedOp::LibvirtImageGpus { file: v.clone() },
        ] {
            let mut c = h.client();
            c.send_raw(&encode(&ForgedFrame::Request { id: 1, op }).unwrap());
            let what = expect_refused(&mut c, &format!("{v:?}"));
            assert!(what.contains("does not decode"), "{v:?}: {what}");
            // The refusal names the field and its rule.
            assert!(
                ["gpu: ", "device: ", "domain: ", "file: "]
                    .iter()
                    .any(|f| what.contains(f)),
                "{v:?}: {what}"
            );
            n += 1;
        }
    }
    assert!(
        !h.path("calls").exists(),
        "a forged argument reached a program"
    );
    // The same forgery with a valid value is accepted, so the mirror enum is faithful.
    let mut c = h.client();
    c.send_raw(
        &encode(&ForgedFrame::Request {
            id: 3,
            op: ForgedOp::ResetGpu {
                gpu: "0000:18:00.0".into(),
            },
        })
        .unwrap(),
    );
    match c.recv() {
        Some(ServerFrame::Response(r)) => assert!(r.result.is_ok(), "{r:?}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(h.path("calls")).unwrap(),
        "--gpu-reset -i 00000000:18:00.0\n"
    );
    // A GPU named by UUID and the same GPU named by address were two locks; a domain named by
    // its id or UUID was a second (and third) lock for it. Neither name decodes now.
    for op in [
        ForgedOp::ResetGpu {
            gpu: "GPU-12345678-1234-1234-1234-1234567890ab".into(),
        },
        ForgedOp::SetPersistence {
            gpu: "GPU-12345678-1234-1234-1234-1234567890ab".into(),
            enabled: false,
        },
        ForgedOp::LibvirtStart { domain: "1".into() },
        ForgedOp::LibvirtDestroy {
            domain: "6695eb01-f6a4-8304-79aa-97f2502e193f".into(),
        },
    ] {
        let mut c = h.client();
        c.send_raw(&encode(&ForgedFrame::Request { id: 4, op }).unwrap());
        let what = expect_refused(&mut c, "an alias");
        assert!(
            what.contains("gpu: invalid PCI address") || what.contains("domain: invalid"),
            "{what}"
        );
    }
    // n refusals, one of them written in full (the rest are counted), and the reset.
    let audit = h.audit_lines();
    assert!(n > 2);
    assert!(
        audit.iter().any(|l| l.contains("\"operation\":\"frame\"")),
        "{audit:#?}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l.contains("\"operation\":\"gpu.reset\"")),
        "{audit:#?}"
    );
    assert!(audit.len() < n, "refusals are aggregated: {audit:#?}");
}
