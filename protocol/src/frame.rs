//! The codec, in one place: a 4-byte big-endian length, then a postcard payload.
//!
//! The length is checked against [`MAX_FRAME_LEN`] before any buffer is allocated. Payloads
//! are decoded with `postcard::take_from_bytes`, and bytes left over after the value are an
//! error (`postcard::from_bytes` would silently ignore them). Argument types validate while
//! they decode, so a frame that decodes holds only valid arguments.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The longest payload a frame may carry: 64 KiB.
pub const MAX_FRAME_LEN: usize = 64 * 1024;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix announces more than [`MAX_FRAME_LEN`].
    #[error("frame of {len} bytes is longer than the {MAX_FRAME_LEN}-byte limit")]
    TooLong {
        /// The announced length.
        len: u64,
    },
    /// A zero-length frame: no message is empty.
    #[error("empty frame")]
    Empty,
    /// The payload does not decode as the expected message.
    #[error("frame does not decode: {0}")]
    Decode(String),
    /// The payload decoded but bytes were left over.
    #[error("frame has {0} trailing bytes after its message")]
    Trailing(usize),
    /// The message does not encode (never happens for the protocol's own types).
    #[error("message does not encode: {0}")]
    Encode(String),
    /// The stream ended inside a frame.
    #[error("the connection closed in the middle of a frame")]
    Truncated,
    /// The stream ended cleanly between frames.
    #[error("the connection closed")]
    Closed,
    /// No complete frame arrived in time.
    #[error("no complete frame within {0}s")]
    Stalled(u64),
    /// The socket failed.
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads a length prefix and checks it before anything is allocated.
///
/// # Errors
/// [`FrameError::Empty`] for 0, [`FrameError::TooLong`] above [`MAX_FRAME_LEN`].
pub fn payload_len(header: [u8; HEADER_LEN]) -> Result<usize, FrameError> {
    let len = u32::from_be_bytes(header);
    if len == 0 {
        return Err(FrameError::Empty);
    }
    let len = usize::try_from(len).map_err(|_| FrameError::TooLong {
        len: u64::from(len),
    })?;
    if len > MAX_FRAME_LEN {
        return Err(FrameError::TooLong { len: len as u64 });
    }
    Ok(len)
}

/// Encodes a message as one whole frame (prefix and payload).
///
/// # Errors
/// [`FrameError::TooLong`] when the payload exceeds [`MAX_FRAME_LEN`].
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, FrameError> {
    let mut out = vec![0u8; HEADER_LEN];
    let out_len = {
        let payload = postcard::to_extend(message, Vec::new())
            .map_err(|e| FrameError::Encode(e.to_string()))?;
        if payload.len() > MAX_FRAME_LEN {
            return Err(FrameError::TooLong {
                len: payload.len() as u64,
            });
        }
        out.extend_from_slice(&payload);
        payload.len()
    };
    out[..HEADER_LEN].copy_from_slice(&(out_len as u32).to_be_bytes());
    Ok(out)
}

/// Decodes one payload (without its prefix) as exactly one message.
///
/// # Errors
/// [`FrameError::Decode`] for bytes that are not a valid message (an invalid argument
/// included), [`FrameError::Trailing`] when bytes are left over.
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, FrameError> {
    if payload.is_empty() {
        return Err(FrameError::Empty);
    }
    if payload.len() > MAX_FRAME_LEN {
        return Err(FrameError::TooLong {
            len: payload.len() as u64,
        });
    }
    crate::types::clear_refusal();
    let (value, rest) = postcard::take_from_bytes::<T>(payload).map_err(|e| {
        // A refused argument says which field broke which rule; postcard alone would only
        // say "Serde Deserialization Error".
        FrameError::Decode(crate::types::take_refusal().unwrap_or_else(|| e.to_string()))
    })?;
    if !rest.is_empty() {
        return Err(FrameError::Trailing(rest.len()));
    }
    Ok(value)
}

/// Decodes a whole frame held in memory (prefix and payload, nothing after).
///
/// # Errors
/// As [`payload_len`] and [`decode`], and [`FrameError::Truncated`] when the bytes are short.
pub fn decode_frame<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, FrameError> {
    let header: [u8; HEADER_LEN] = bytes
        .get(..HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(FrameError::Truncated)?;
    let len = payload_len(header)?;
    let body = &bytes[HEADER_LEN..];
    match body.len().cmp(&len) {
        std::cmp::Ordering::Less => Err(FrameError::Truncated),
        std::cmp::Ordering::Greater => Err(FrameError::Trailing(body.len() - len)),
        std::cmp::Ordering::Equal => decode(body),
    }
}

#[cfg(feature = "tokio")]
mod io {
    use std::time::Duration;

    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    use super::{decode, encode, payload_len, FrameError, HEADER_LEN};

    /// Reads one frame and decodes it. The whole frame, from its first byte, must arrive
    /// within `deadline`; waiting for the first byte counts too.
    ///
    /// # Errors
    /// [`FrameError::Closed`] when the stream ends before a frame starts, [`FrameError::Stalled`]
    /// when the deadline passes, and the errors of [`decode`].
    ///
    /// # Cancel safety
    /// Not cancel safe: a cancelled read loses the bytes read so far, and the stream must be
    /// dropped.
    pub async fn read_frame<R, T>(reader: &mut R, deadline: Duration) -> Result<T, FrameError>
    where
        R: AsyncRead + Unpin,
        T: DeserializeOwned,
    {
        match tokio::time::timeout(deadline, read_payload(reader)).await {
            Ok(payload) => decode(&payload?),
            Err(_) => Err(FrameError::Stalled(deadline.as_secs().max(1))),
        }
    }

    async fn read_payload<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Vec<u8>, FrameError> {
        let mut header = [0u8; HEADER_LEN];
        let mut got = 0;
        while got < HEADER_LEN {
            let n = reader.read(&mut header[got..]).await?;
            if n == 0 {
                return Err(if got == 0 {
                    FrameError::Closed
                } else {
                    FrameError::Truncated
                });
            }
            got += n;
        }
        let len = payload_len(header)?;
        let mut payload = vec![0u8; len];
        reader
            .read_exact(&mut payload)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => FrameError::Truncated,
                _ => FrameError::Io(e),
            })?;
        Ok(payload)
    }

    /// Encodes and writes one frame, then flushes.
    ///
    /// # Errors
    /// The errors of [`encode`], and [`FrameError::Io`].
    pub async fn write_frame<W, T>(writer: &mut W, message: &T) -> Result<(), FrameError>
    where
        W: AsyncWrite + Unpin,
        T: Serialize,
    {
        let bytes = encode(message)?;
        writer.write_all(&bytes).await?;
        writer.flush().await?;
        Ok(())
    }
}

#[cfg(feature = "tokio")]
pub use io::{read_frame, write_frame};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ClientFrame, Operation, Request};

    #[test]
    fn lengths_are_checked_before_allocation() {
        assert!(matches!(
            payload_len(0u32.to_be_bytes()),
            Err(FrameError::Empty)
        ));
        assert_eq!(
            payload_len((MAX_FRAME_LEN as u32).to_be_bytes()).unwrap(),
            MAX_FRAME_LEN
        );
        assert!(matches!(
            payload_len((MAX_FRAME_LEN as u32 + 1).to_be_bytes()),
            Err(FrameError::TooLong { .. })
        ));
        assert!(matches!(
            payload_len(u32::MAX.to_be_bytes()),
            Err(FrameError::TooLong { .. })
        ));
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let frame = ClientFrame::Request(Request {
            id: 7,
            op: Operation::Ping,
        });
        let mut bytes = encode(&frame).unwrap();
        assert_eq!(decode_frame::<ClientFrame>(&bytes).unwrap(), frame);
        let payload_len = bytes.len() - HEADER_LEN;
        bytes.push(0);
        // Same declared length, one byte after it: trailing.
        assert!(matches!(
            decode_frame::<ClientFrame>(&bytes),
            Err(FrameError::Trailing(1))
        ));
        // Declared length covering the extra byte: the payload itself has a remainder.
        bytes[..HEADER_LEN].copy_from_slice(&(payload_len as u32 + 1).to_be_bytes());
        assert!(matches!(
            decode_frame::<ClientFrame>(&bytes),
            Err(FrameError::Trailing(1))
        ));
    }

    #[test]
    fn an_invalid_argument_fails_decoding() {
        // Hand-build the postcard bytes of a VfioBind with a forged address string.
        #[derive(serde::Serialize)]
        enum Forged {
            #[allow(dead_code)]
            Hello {
                version: u32,
            },
            Request {
                id: u64,
                op: ForgedOp,
            },
        }
        #[derive(serde::Serialize)]
        #[allow(dead_code)]
        enum ForgedOp {
            Ping,
            SetPersistence { gpu: String, enabled: bool },
            ResetGpu { gpu: String },
            VfioBind { device: String },
        }
        let bytes = encode(&Forged::Request {
            id: 1,
            op: ForgedOp::VfioBind {
                device: "0000:18:00.0/../../x".into(),
            },
        })
        .unwrap();
        // postcard keeps no custom message, so the refusal is a plain decode error.
        let err = decode_frame::<ClientFrame>(&bytes).unwrap_err();
        assert!(matches!(err, FrameError::Decode(_)), "{err}");
        let ok = encode(&Forged::Request {
            id: 1,
            op: ForgedOp::VfioBind {
                device: "0000:18:00.0".into(),
            },
        })
        .unwrap();
        assert!(decode_frame::<ClientFrame>(&ok).is_ok());
    }
}
