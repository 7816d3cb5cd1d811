//! The one read the helper makes of libvirt's XML: the PCI addresses of a domain's (or save
//! image's) `<hostdev type='pci'>` sources, and the domain's name. The only parser in the root
//! process, bounded in bytes, hostdevs and depth; it never expands an entity or honours a
//! DTD. It needs only `bcd-protocol` and `quick-xml`, so the fuzz target includes this file.

use bcd_protocol::{DomainName, HelperError, PciAddress};
use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

/// Most bytes of domain XML read; a real domain is a few KiB.
pub const MAX_XML_BYTES: usize = 1024 * 1024;
/// Most PCI hostdevs one domain may list; more is refused rather than half-handled.
pub const MAX_HOSTDEVS: usize = 64;
/// Deepest element nesting accepted; libvirt's domain XML stays below ten.
pub(super) const MAX_XML_DEPTH: usize = 64;

/// The source address of every `<hostdev type='pci'>` directly under `<domain><devices>`,
/// normalised, in document order, each once.
///
/// Reads only `domain/devices/hostdev[@type='pci']/source/address`: the guest-side
/// `<address type='pci'>` that is a direct child of `<hostdev>`, USB and other hostdevs, and
/// every other element are skipped. A missing `domain` attribute means PCI domain 0, as in
/// libvirt.
///
/// # Errors
/// [`HelperError::Failed`] (no exit code) when the XML is over [`MAX_XML_BYTES`], lists more
/// than [`MAX_HOSTDEVS`] PCI hostdevs, is not well-formed, has a DOCTYPE (libvirt never
/// writes one; entities are never expanded), nests too deep, or has a PCI source address
/// that does not name a PCI function.
pub fn pci_hostdevs(xml: &str) -> Result<Vec<PciAddress>, HelperError> {
    let bad = |why: String| HelperError::Failed {
        exit_code: None,
        message: format!("the domain XML virsh printed cannot be read: {why}"),
    };
    if xml.len() > MAX_XML_BYTES {
        return Err(bad(format!(
            "it is {} bytes, more than the {MAX_XML_BYTES} bcd-helper reads",
            xml.len()
        )));
    }
    let mut reader = Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    // The open elements' names, from the root down.
    let mut path: Vec<Vec<u8>> = Vec::new();
    // Whether the <hostdev> now open under domain/devices is a PCI one.
    let mut pci_hostdev_open = false;
    let mut found: Vec<PciAddress> = Vec::new();
    loop {
        let event = reader
            .read_event()
            .map_err(|e| bad(format!("{e} near byte {}", reader.buffer_position())))?;
        match event {
            Event::Start(e) => {
                if path.len() >= MAX_XML_DEPTH {
                    return Err(bad(format!("elements nest deeper than {MAX_XML_DEPTH}")));
                }
                let name = e.name().as_ref().to_vec();
                visit(&path, &name, &e, &mut pci_hostdev_open, &mut found).map_err(&bad)?;
                path.push(name);
            }
            Event::Empty(e) => {
                let name = e.name().as_ref().to_vec();
                visit(&path, &name, &e, &mut pci_hostdev_open, &mut found).map_err(&bad)?;
                if path.len() == 2 && name == b"hostdev" {
                    pci_hostdev_open = false;
                }
            }
            Event::End(_) => {
                if path.len() == 3 && path[2] == b"hostdev" {
                    pci_hostdev_open = false;
                }
                path.pop();
            }
            Event::DocType(_) => {
                return Err(bad(
                    "it has a DOCTYPE, which libvirt never writes; entities are not expanded"
                        .to_owned(),
                ))
            }
            Event::Eof => break,
            Event::Text(_)
            | Event::CData(_)
            | Event::Comment(_)
            | Event::Decl(_)
            | Event::PI(_) => {}
        }
        if found.len() > MAX_HOSTDEVS {
            return Err(bad(format!(
                "it lists more than {MAX_HOSTDEVS} PCI hostdevs"
            )));
        }
    }
    if !path.is_empty() {
        return Err(bad("it ends before its elements are closed".to_owned()));
    }
    let mut unique = Vec::with_capacity(found.len());
    for a in found {
        if !unique.contains(&a) {
            unique.push(a);
        }
    }
    Ok(unique)
}

/// The text of `<domain><name>` in a domain's XML, if it is a name bcd accepts (a
/// [`DomainName`]); the only other thing this module reads of libvirt's XML.
pub fn domain_name(xml: &str) -> Option<DomainName> {
    if xml.len() > MAX_XML_BYTES {
        return None;
    }
    let mut reader = Reader::from_str(xml);
    let mut depth = 0usize;
    let mut in_name = false;
    loop {
        match reader.read_event().ok()? {
            Event::Start(e) => {
                depth += 1;
                in_name = depth == 2 && e.name().as_ref() == b"name";
                if depth == 1 && e.name().as_ref() != b"domain" {
                    return None;
                }
            }
            Event::Text(t) if in_name => {
                let text = t.unescape().ok()?;
                return text.trim().parse().ok();
            }
            Event::End(_) => {
                depth = depth.saturating_sub(1);
                in_name = false;
            }
            Event::DocType(_) | Event::Eof => return None,
            _ => {}
        }
        if depth > MAX_XML_DEPTH {
            return None;
        }
    }
}

/// Looks at one opening element whose ancestors are `path`.
fn visit(
    path: &[Vec<u8>],
    name: &[u8],
    e: &BytesStart<'_>,
    pci_hostdev_open: &mut bool,
    found: &mut Vec<PciAddress>,
) -> Result<(), String> {
    let under = |expected: &[&[u8]]| {
        path.len() == expected.len() && path.iter().zip(expected).all(|(a, b)| a == b)
    };
    if name == b"hostdev" && under(&[b"domain", b"devices"]) {
        *pci_hostdev_open = attribute(e, b"type")?.as_deref() == Some("pci");
    } else if name == b"address"
        && *pci_hostdev_open
        && under(&[b"domain", b"devices", b"hostdev", b"source"])
    {
        found.push(source_address(e)?);
    }
    Ok(())
}

/// The PCI function named by a `<source><address domain= bus= slot= function=/>`.
fn source_address(e: &BytesStart<'_>) -> Result<PciAddress, String> {
    let number = |key: &'static str, required: bool| -> Result<u32, String> {
        let Some(value) = attribute(e, key.as_bytes())? else {
            return if required {
                Err(format!("a PCI hostdev's source address has no {key}"))
            } else {
                Ok(0)
            };
        };
        let parsed = match value
            .strip_prefix("0x")
            .or_else(|| value.strip_prefix("0X"))
        {
            Some(hex) => u32::from_str_radix(hex, 16),
            None => value.parse::<u32>(),
        };
        parsed.map_err(|_| {
            format!(
                "a PCI hostdev's source address has {key}={:?}, not a number",
                value.chars().take(32).collect::<String>()
            )
        })
    };
    let (domain, bus, slot, function) = (
        number("domain", false)?,
        number("bus", true)?,
        number("slot", true)?,
        number("function", true)?,
    );
    if domain > 0xffff || bus > 0xff || slot > 0xff || function > 0xf {
        return Err(format!(
            "a PCI hostdev's source address {domain:#x}:{bus:#x}:{slot:#x}.{function:#x} is out of range"
        ));
    }
    format!("{domain:04x}:{bus:02x}:{slot:02x}.{function:x}")
        .parse()
        .map_err(|e: bcd_protocol::InvalidArgument| format!("a PCI hostdev's source address: {e}"))
}

/// The unescaped value of attribute `key`, if present. Only XML's five predefined entities
/// and character references are understood; anything else is an error.
fn attribute(e: &BytesStart<'_>, key: &[u8]) -> Result<Option<String>, String> {
    for attr in e.attributes() {
        let attr = attr.map_err(|err| format!("a malformed attribute: {err}"))?;
        if attr.key.as_ref() == key {
            let value = attr
                .unescape_value()
                .map_err(|err| format!("an attribute that cannot be read: {err}"))?;
            return Ok(Some(value.into_owned()));
        }
    }
    Ok(None)
}
