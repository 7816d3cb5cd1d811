//! The kernel log's record format (`/dev/kmsg`) and the NVIDIA driver's XID line, as pure
//! parsers: bytes in, types out, no I/O, no clock, no logging.
//!
//! A record is `PRIO,SEQ,TS,FLAGS[,...];MESSAGE\n`, followed by zero or more continuation lines
//! that start with a space and carry `KEY=VALUE` dictionary entries (`SUBSYSTEM=pci`). The kernel
//! escapes unprintable bytes of the message, and the backslash itself, as `\xNN`; a message with
//! an embedded newline therefore arrives as one line holding `\x0a`.
//!
//! An XID matches only when the (unescaped) message *starts* with the driver's text,
//! `NVRM: Xid (PCI:<address>): <number>` (older drivers: `NVRM: Xid (<address>): <number>`),
//! and the record comes from the kernel facility. A process name inside some other line
//! (`foo[1]: NVRM: Xid ...`, or a `name=NVRM: Xid ...` field) can therefore never forge a match.
//! The same holds for the two other events read here ([`parse_event`]): an NVSwitch's
//! `nvidia-nvswitchN: SXid (PCI:<address>): <number>, Fatal|Non-fatal, ...` line, and the
//! driver's "GPU has fallen off the bus" lines that carry no XID.

use std::borrow::Cow;

use bcd_protocol::PciAddress;

/// The prefix every XID message starts with; `PCI:` follows on current drivers.
const XID_PREFIX: &str = "NVRM: Xid (";

/// One kernel log record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// Facility and level as the kernel encodes them: `facility * 8 + level`.
    pub priority: u32,
    /// The record's sequence number; a gap between two reads is records overwritten.
    pub sequence: u64,
    /// Microseconds since boot.
    pub timestamp_us: u64,
    /// `-` for a whole record, `c` for a continued one (kernels before 4.x), `+` for a fragment.
    pub flags: &'a str,
    /// The message with `\xNN` escapes decoded (invalid UTF-8 replaced).
    pub message: Cow<'a, str>,
    /// The continuation lines' `KEY=VALUE` entries, in order.
    pub dictionary: Vec<(&'a str, &'a str)>,
}

impl Record<'_> {
    /// The syslog facility: 0 is the kernel, anything else came from user space.
    pub fn facility(&self) -> u32 {
        self.priority >> 3
    }
}

/// Why bytes are not a kernel log record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KmsgError {
    /// No `;` ends the record's header.
    #[error("a kernel log record has no ';' after its PRIO,SEQ,TS,FLAGS header")]
    NoHeader,
    /// The header has fewer than four fields or one of them is not a number.
    #[error("a kernel log record's header {0:?} is not PRIO,SEQ,TS,FLAGS")]
    BadHeader(String),
    /// The header is not text.
    #[error("a kernel log record's header is not ASCII text")]
    NotText,
}

/// Parses one record: the header line and its continuation lines (a trailing newline is
/// optional).
///
/// Guarantees: never panics on any bytes; the message keeps every byte of the line after `;`
/// (unescaped), and a continuation line without `=` is ignored rather than failing the record.
///
/// # Errors
/// [`KmsgError`] when the header is missing or malformed.
pub(crate) fn parse_record(bytes: &[u8]) -> Result<Record<'_>, KmsgError> {
    let semi = memchr(b';', bytes).ok_or(KmsgError::NoHeader)?;
    let header = std::str::from_utf8(&bytes[..semi]).map_err(|_| KmsgError::NotText)?;
    let bad = || KmsgError::BadHeader(header.chars().take(64).collect());
    let mut fields = header.split(',');
    let priority = number(fields.next()).ok_or_else(bad)?;
    let sequence = number(fields.next()).ok_or_else(bad)?;
    let timestamp_us = number(fields.next()).ok_or_else(bad)?;
    let flags = fields.next().ok_or_else(bad)?;
    let priority = u32::try_from(priority).map_err(|_| bad())?;
    // Later kernels may add fields after FLAGS; they are ignored, as the format asks.

    let rest = &bytes[semi + 1..];
    let (line, mut tail) = match memchr(b'\n', rest) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut dictionary = Vec::new();
    while let Some(stripped) = tail.strip_prefix(b" ") {
        let (entry, next) = match memchr(b'\n', stripped) {
            Some(i) => (&stripped[..i], &stripped[i + 1..]),
            None => (stripped, &[][..]),
        };
        if let Ok(entry) = std::str::from_utf8(entry) {
            if let Some((key, value)) = entry.split_once('=') {
                dictionary.push((key, value));
            }
        }
        tail = next;
    }
    Ok(Record {
        priority,
        sequence,
        timestamp_us,
        flags,
        message: unescape(line),
        dictionary,
    })
}

fn number(field: Option<&str>) -> Option<u64> {
    let field = field?;
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// Decodes the kernel's `\xNN` escapes; a backslash not followed by `x` and two hex digits
/// is kept as it is. Borrows when there is nothing to decode.
pub(crate) fn unescape(line: &[u8]) -> Cow<'_, str> {
    if memchr(b'\\', line).is_none() {
        return String::from_utf8_lossy(line);
    }
    let mut out = Vec::with_capacity(line.len());
    let mut i = 0;
    while i < line.len() {
        if line[i] == b'\\' && line.get(i + 1) == Some(&b'x') {
            if let (Some(hi), Some(lo)) = (
                line.get(i + 2).and_then(|&b| hex_digit(b)),
                line.get(i + 3).and_then(|&b| hex_digit(b)),
            ) {
                out.push(hi << 4 | lo);
                i += 4;
                continue;
            }
        }
        out.push(line[i]);
        i += 1;
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// One XID, as the driver printed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    /// The XID number (79: fallen off the bus, 48: double-bit ECC, ...).
    pub number: u32,
    /// The GPU's PCI function (function 0 when the driver printed none).
    pub address: PciAddress,
    /// The driver's whole line, trimmed.
    pub text: String,
}

impl Xid {
    /// The bus id in NVML's form, as the inventory holds it: `00000000:18:00.0`.
    pub(crate) fn bus_id(&self) -> String {
        self.address.nvml_bus_id()
    }
}

/// Reads the driver's XID line from a record's message.
///
/// Accepts `NVRM: Xid (PCI:dddd:bb:dd): N, ...` and the same with a function
/// (`dddd:bb:dd.f`) or an eight-digit domain (`dddddddd:bb:dd.f`). The number must be followed
/// by `,` or the end of the message. Anything else, including the prefix anywhere but at the
/// very start, gives `None`.
pub(crate) fn parse_xid(message: &str) -> Option<Xid> {
    let rest = message.strip_prefix(XID_PREFIX)?;
    let rest = rest.strip_prefix("PCI:").unwrap_or(rest);
    let (address, rest) = rest.split_once("): ")?;
    let address = parse_address(address)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || digits > 9 {
        return None;
    }
    let after = &rest[digits..];
    if !(after.is_empty() || after.starts_with(',')) {
        return None;
    }
    let number = rest[..digits].parse().ok()?;
    Some(Xid {
        number,
        address,
        text: message.trim().to_owned(),
    })
}

/// A driver's PCI address: four- or eight-digit domain, bus, device, optional function.
fn parse_address(text: &str) -> Option<PciAddress> {
    let mut parts = text.split(':');
    let (domain, bus, dev_fn) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !(domain.len() == 4 || domain.len() == 8) {
        return None;
    }
    let (device, function) = match dev_fn.split_once('.') {
        Some((d, f)) => (d, f),
        None => (dev_fn, "0"),
    };
    // The protocol's parser checks every digit and range; it only takes the kernel's form.
    format!("{domain}:{bus}:{device}.{function}").parse().ok()
}

/// One NVSwitch SXid line that states its severity (the `Data {...}` and `Severity N ...`
/// lines around it repeat the number and are not read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SXid {
    /// The SXid number (20034: LTSSM fault, 22013: minion link interrupt, ...).
    pub number: u32,
    /// The switch's PCI function.
    pub address: PciAddress,
    /// `Fatal` (the switch's links stop: the GPUs on them need a reset) or `Non-fatal`.
    pub fatal: bool,
    /// The driver's whole line, trimmed.
    pub text: String,
}

/// Reads an NVSwitch's SXid line: `nvidia-nvswitchN: SXid (PCI:dddd:bb:dd.f): N, Fatal, ...`
/// or `..., Non-fatal, ...`. Lines without the severity word give `None`.
pub(crate) fn parse_sxid(message: &str) -> Option<SXid> {
    let rest = message.strip_prefix("nvidia-nvswitch")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let rest = rest[digits..].strip_prefix(": SXid (PCI:")?;
    let (address, rest) = rest.split_once("): ")?;
    let address = parse_address(address)?;
    let n = rest.bytes().take_while(u8::is_ascii_digit).count();
    if n == 0 || n > 9 {
        return None;
    }
    let number = rest[..n].parse().ok()?;
    let severity = rest[n..].strip_prefix(", ")?;
    let word = severity.split(',').next()?.trim();
    let fatal = if word.eq_ignore_ascii_case("fatal") {
        true
    } else if word.eq_ignore_ascii_case("non-fatal") || word.eq_ignore_ascii_case("nonfatal") {
        false
    } else {
        return None;
    };
    Some(SXid {
        number,
        address,
        fatal,
        text: message.trim().to_owned(),
    })
}

/// The operator's action for an SXid, after NVIDIA's NVSwitch documentation: a fatal SXid
/// stops the switch's links, and the GPUs using them need a reset (on HGX boards, of the
/// whole baseboard: a reboot); a non-fatal one is corrected and only watched.
pub(crate) fn sxid_action(fatal: bool) -> String {
    if fatal {
        "stop the jobs on this board's GPUs, then reboot the node: a fatal NVSwitch error stops its NVLinks".to_owned()
    } else {
        "watch the switch: a non-fatal NVSwitch error was corrected; the GPUs may take work"
            .to_owned()
    }
}

/// Reads the driver's "fallen off the bus" lines that carry no XID:
/// `NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.`, the old
/// `NVRM: GPU at 0000:01:00.0 has fallen off the bus.`, and
/// `NVRM: The NVIDIA GPU 0000:b3:00.0 ... has fallen off the bus ...` (one record of three
/// lines). Gives the GPU's address.
pub(crate) fn parse_fell_off_the_bus(message: &str) -> Option<PciAddress> {
    if !message.contains("fallen off the bus") {
        return None;
    }
    let rest = ["NVRM: GPU at ", "NVRM: The NVIDIA GPU ", "NVRM: GPU "]
        .iter()
        .find_map(|p| message.strip_prefix(p))?;
    let token = rest.split_whitespace().next()?;
    let token = token.strip_prefix("PCI:").unwrap_or(token);
    parse_address(token.strip_suffix(':').unwrap_or(token))
}

/// A kernel log event bcd acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A GPU's XID.
    Xid(Xid),
    /// An NVSwitch's SXid.
    SXid(SXid),
    /// A GPU fell off the bus (no XID on that line).
    FellOffTheBus {
        /// The GPU's PCI function.
        address: PciAddress,
        /// The driver's text, trimmed.
        text: String,
    },
}

/// Reads the event a kernel-facility message carries, if any.
pub(crate) fn parse_event(message: &str) -> Option<Event> {
    if let Some(x) = parse_xid(message) {
        return Some(Event::Xid(x));
    }
    if let Some(s) = parse_sxid(message) {
        return Some(Event::SXid(s));
    }
    parse_fell_off_the_bus(message).map(|address| Event::FellOffTheBus {
        address,
        text: message.trim().to_owned(),
    })
}

/// Parses a record and, when it comes from the kernel facility, the event it carries.
///
/// # Errors
/// [`KmsgError`] when the bytes are not a record.
pub fn parse_event_record(bytes: &[u8]) -> Result<(Record<'_>, Option<Event>), KmsgError> {
    let record = parse_record(bytes)?;
    let event = if record.facility() == 0 {
        parse_event(&record.message)
    } else {
        None
    };
    Ok((record, event))
}

/// Parses a record and, when it is the kernel's XID line, the XID.
///
/// Only the kernel facility counts: a line user space wrote to `/dev/kmsg` has another
/// facility and can never raise an XID.
///
/// # Errors
/// [`KmsgError`] when the bytes are not a record.
pub fn parse_xid_record(bytes: &[u8]) -> Result<(Record<'_>, Option<Xid>), KmsgError> {
    let record = parse_record(bytes)?;
    let xid = if record.facility() == 0 {
        parse_xid(&record.message)
    } else {
        None
    };
    Ok((record, xid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/kmsg/");
        std::fs::read_to_string(format!("{path}{name}")).unwrap()
    }

    /// The records of a fixture file: a header line and the continuation lines after it.
    pub(crate) fn records(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for line in text.lines() {
            if line.starts_with(' ') {
                if let Some(last) = out.last_mut() {
                    last.push('\n');
                    last.push_str(line);
                }
            } else if !line.is_empty() && !line.starts_with('#') {
                out.push(line.to_owned());
            }
        }
        out
    }

    #[test]
    fn a_record_has_its_header_message_and_dictionary() {
        let text = fixture("continuation.txt");
        let recs = records(&text);
        let r = parse_record(recs[0].as_bytes()).unwrap();
        assert_eq!((r.priority, r.sequence, r.timestamp_us), (6, 1204, 7312349));
        assert_eq!(r.flags, "-");
        assert_eq!(r.facility(), 0);
        assert_eq!(r.priority & 7, 6, "the log level");
        assert!(
            r.message.starts_with("nvidia 0000:18:00.0:"),
            "{}",
            r.message
        );
        assert_eq!(
            r.dictionary,
            vec![("SUBSYSTEM", "pci"), ("DEVICE", "+pci:0000:18:00.0")]
        );
    }

    #[test]
    fn extra_header_fields_are_ignored() {
        let r = parse_record(b"4,1227,437812449,c,1,-;NVRM: Xid (PCI:0000:01:00): 43, x").unwrap();
        assert_eq!(r.flags, "c");
        assert_eq!(parse_xid(&r.message).unwrap().number, 43);
    }

    #[test]
    fn malformed_headers_are_errors() {
        assert_eq!(parse_record(b"no header here"), Err(KmsgError::NoHeader));
        assert!(matches!(
            parse_record(b"6,x,1,-;msg"),
            Err(KmsgError::BadHeader(_))
        ));
        assert!(matches!(
            parse_record(b"6,1,2;msg"),
            Err(KmsgError::BadHeader(_))
        ));
        assert!(matches!(
            parse_record(b"99999999999,1,2,-;msg"),
            Err(KmsgError::BadHeader(_))
        ));
        assert_eq!(parse_record(b"6,\xff,1,-;m"), Err(KmsgError::NotText));
    }

    #[test]
    fn escapes_are_decoded() {
        let r = parse_record(br"6,1,2,-;first\x0asecond \x5cx41 \xZZ \x").unwrap();
        assert_eq!(r.message, "first\nsecond \\x41 \\xZZ \\x");
        assert!(matches!(
            parse_record(b"6,1,2,-;plain").unwrap().message,
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn the_three_address_forms_widen_to_nvml() {
        for (line, bus) in [
            (
                "NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.",
                "00000000:18:00.0",
            ),
            (
                "NVRM: Xid (PCI:0000:18:00.0): 79, pid=1",
                "00000000:18:00.0",
            ),
            (
                "NVRM: Xid (PCI:00000000:AB:00.0): 48, pid='<unknown>'",
                "00000000:AB:00.0",
            ),
            (
                "NVRM: Xid (PCI:0018:01:00): 149, NETIR Fatal",
                "00000018:01:00.0",
            ),
            ("NVRM: Xid (PCI:0000:01:00): 32", "00000000:01:00.0"),
        ] {
            let xid = parse_xid(line).unwrap_or_else(|| panic!("{line}"));
            assert_eq!(xid.bus_id(), bus, "{line}");
            assert_eq!(xid.text, line);
        }
    }

    #[test]
    fn xids_from_the_fixture_parse_and_forgeries_do_not() {
        let text = fixture("xids.txt");
        let mut found = Vec::new();
        for rec in records(&text) {
            let (_, xid) = parse_xid_record(rec.as_bytes()).unwrap();
            if let Some(x) = xid {
                found.push((x.number, x.bus_id()));
            }
        }
        assert_eq!(
            found,
            vec![
                (79, "00000000:18:00.0".to_owned()),
                (48, "00000000:2A:00.0".to_owned()),
                (13, "00000000:3A:00.0".to_owned()),
                (13, "00000000:DB:00.0".to_owned()),
                (94, "00000000:99:00.0".to_owned()),
                (63, "00000000:DB:00.0".to_owned()),
            ]
        );
    }

    // What broke: the older driver form without `PCI:`, NVSwitch SXid lines and "fallen off
    // the bus" lines without an XID were all missed.
    #[test]
    fn the_old_xid_form_sxids_and_fallen_off_the_bus_lines_are_read() {
        let x =
            parse_xid("NVRM: Xid (0000:18:00): 79, pid=1, GPU has fallen off the bus.").unwrap();
        assert_eq!((x.number, x.bus_id().as_str()), (79, "00000000:18:00.0"));
        assert_eq!(
            parse_xid("NVRM: Xid PCI:0000:01:00: 43, pid=1814139, malformed"),
            None
        );
        let s = parse_sxid(
            "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
        )
        .unwrap();
        assert_eq!(
            (s.number, s.fatal, s.address.to_string().as_str()),
            (20034, true, "0000:06:00.0")
        );
        let s = parse_sxid("nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ interrupt").unwrap();
        assert!(!s.fatal);
        for companion in [
            "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b}",
            "nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44",
            "python: nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Fatal, forged",
        ] {
            assert_eq!(parse_sxid(companion), None, "{companion}");
        }
        for (line, bus) in [
            ("NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.", "0000:91:00.0"),
            ("NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "0000:01:00.0"),
            (
                "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this system has\nNVRM: fallen off the bus and is not responding to commands.",
                "0000:b3:00.0",
            ),
        ] {
            assert_eq!(
                parse_fell_off_the_bus(line).map(|a| a.to_string()).as_deref(),
                Some(bus),
                "{line}"
            );
        }
        assert_eq!(
            parse_fell_off_the_bus("NVRM: GPU at PCI:0000:01:00: GPU-1234"),
            None
        );
        // Only the kernel facility counts, for every event.
        let (_, e) =
            parse_event_record(b"12,1,1,-;NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.")
                .unwrap();
        assert_eq!(e, None);
        let (_, e) = parse_event_record(
            b"3,1,1,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 63",
        )
        .unwrap();
        assert!(matches!(e, Some(Event::SXid(SXid { fatal: true, .. }))));
    }

    #[test]
    fn forged_lines_never_match() {
        for line in [
            "6,10,1,-;python[123]: NVRM: Xid (PCI:0000:18:00): 79, forged",
            "4,12,1,-; NVRM: Xid (PCI:0000:18:00): 79, leading space",
            "4,13,1,-;x\\x0aNVRM: Xid (PCI:0000:18:00): 79, after an escaped newline",
            "12,14,1,-;NVRM: Xid (PCI:0000:18:00): 79, written by user space",
            "4,15,1,c;NVRM: Xid PCI:0000:01:00: 43, pid=1814139, malformed",
            "4,16,1,-;NVRM: Xid (PCI:0000:18:00): 79x, not a number",
            "4,17,1,-;NVRM: Xid (PCI:0000:18:00:00): 79, too many parts",
            "4,18,1,-;NVRM: Xid (PCI:000:18:00): 79, short domain",
            "4,19,1,-;NVRM: Xid (PCI:0000:18:20): 79, device above 1f",
        ] {
            let (_, xid) = parse_xid_record(line.as_bytes()).unwrap();
            assert_eq!(xid, None, "{line}");
        }
        // A real XID 13 on 18:00 whose process name spells another XID: only the first counts.
        let (_, xid) = parse_xid_record(
            b"4,11,1,-;NVRM: Xid (PCI:0000:18:00): 13, pid=9, name=NVRM: Xid (PCI:0000:2a:00): 79",
        )
        .unwrap();
        let xid = xid.unwrap();
        assert_eq!(
            (xid.number, xid.bus_id().as_str()),
            (13, "00000000:18:00.0")
        );
    }

    /// Every real XID line of the shared captures parses with its number and bus; the one
    /// malformed record DCGM's test feeds in (no parentheses) must not.
    #[test]
    fn real_xid_lines_conform() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/real/xid");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            bcd_testkit::skip(
                "the real XID lines (../shared/fixtures/real/xid) are not beside this checkout",
            );
            return;
        };
        let mut parsed = 0;
        for entry in entries.flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            for line in text.lines() {
                // Captures carry dmesg, syslog and Markdown prefixes; the message starts at NVRM.
                let Some(at) = line.find("NVRM: Xid ") else {
                    continue;
                };
                let message = &line[at..];
                let xid = parse_xid(message);
                if message.starts_with("NVRM: Xid PCI:") {
                    assert_eq!(xid, None, "{line}");
                    continue;
                }
                let xid = xid.unwrap_or_else(|| panic!("{}: {line}", entry.path().display()));
                // Number and bus as the line spells them.
                let inner = &message[XID_PREFIX.len()..];
                let (addr, rest) = inner.split_once("): ").unwrap();
                assert_eq!(
                    xid.number.to_string(),
                    rest.split(',').next().unwrap().trim()
                );
                assert!(
                    xid.bus_id()
                        .to_lowercase()
                        .ends_with(&format!("{}.0", &addr[4..])),
                    "{} vs {addr}",
                    xid.bus_id()
                );
                parsed += 1;
            }
        }
        assert!(parsed > 600, "only {parsed} real XID lines found");
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_panic_the_parser(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = parse_xid_record(&bytes);
        }

        #[test]
        fn no_xid_shaped_text_panics(tail in "[0-9a-fA-F:.()x, ]{0,40}") {
            let line = format!("4,1,1,-;NVRM: Xid (PCI:{tail}");
            let _ = parse_xid_record(line.as_bytes());
        }
    }
}
