//! Line handling shared by the text parsers: lossy decoding, numbered lines, and the ANSI
//! escapes some drivers print around table headers.
//!
//! `nvidia-smi` writes ASCII, but a driver, a locale or a broken pipe can hand us anything:
//! every parser decodes lossily so that a stray byte costs one odd character, never a panic.

use std::borrow::Cow;

/// Decodes `nvidia-smi` output; invalid UTF-8 becomes U+FFFD.
pub(crate) fn decode(bytes: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

/// Escapes every control character, `\n` and `\t` too, as [`escape_control`] does the others:
/// for a kernel log record, which is one line however its text was written (the kernel
/// escapes a line feed as `\x0a`; bcd decodes that to match the driver's text, and a raw line
/// feed logged back would forge a second line).
pub fn escape_line(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !c.is_control() => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// Escapes control characters (C0 but `\n` and `\t`, DEL, C1) as `\x1b` / `\u{9b}`, so
/// text `nvidia-smi` printed (an error, a GPU's name) can be shown on a terminal or written to
/// the log without moving the cursor, recolouring the screen or forging a line. Everything a
/// program prints is escaped once, where it enters the agent.
pub fn escape_control(text: &str) -> Cow<'_, str> {
    let odd = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(odd) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !odd(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// Yields `(line_number, line)` with 1-based numbers and any trailing `\r` removed, so CRLF
/// output (Windows builds, captures copied through Windows) reads like LF output.
pub(crate) fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.strip_suffix('\r').unwrap_or(line)))
}

/// Removes ANSI CSI escape sequences (`ESC [ ... final`), as `topo -m` wraps its header row
/// in `ESC[4m` ... `ESC[0m` when it believes it writes to a terminal.
pub(crate) fn strip_ansi(line: &str) -> Cow<'_, str> {
    if !line.contains('\u{1b}') {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameter and intermediate bytes, then one final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crlf_lines_lose_their_carriage_return() {
        let lines: Vec<_> = numbered_lines("a\r\nb\n").collect();
        assert_eq!(lines, vec![(1, "a"), (2, "b"), (3, "")]);
    }

    #[test]
    fn ansi_underline_is_removed() {
        assert_eq!(strip_ansi("\t\u{1b}[4mGPU0\tCPU\u{1b}[0m"), "\tGPU0\tCPU");
        assert_eq!(strip_ansi("no escapes"), "no escapes");
        // A lone escape at the end must not panic or loop.
        assert_eq!(strip_ansi("x\u{1b}"), "x");
        assert_eq!(strip_ansi("x\u{1b}["), "x");
    }
}

#[cfg(test)]
mod escape_tests {
    use super::*;

    // nvidia-smi's raw bytes, ESC included, reached status, the log and doctor's terminal.
    #[test]
    fn control_bytes_are_escaped_and_text_is_kept() {
        assert_eq!(
            escape_control("\u{1b}[2Jgone\u{7}\r\u{9b}x"),
            "\\x1b[2Jgone\\x07\\x0d\\u{9b}x"
        );
        assert!(matches!(escape_control("a\tb\nc °C"), Cow::Borrowed(_)));
    }
}
