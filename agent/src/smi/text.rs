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
