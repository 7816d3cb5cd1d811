//! Feeds arbitrary bytes to the frame decoder as the helper reads them: a length prefix, then
//! a payload decoded as the agent's frame, and as the helper's for the agent's side. It must
//! return, never panic, and never accept bytes after the message.
#![no_main]

use bcd_protocol::frame::{decode, decode_frame, encode};
use bcd_protocol::{ClientFrame, ServerFrame};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = decode_frame::<ClientFrame>(data) {
        // Whatever decodes re-encodes to exactly one frame that decodes to the same value.
        let again = encode(&frame).expect("a decoded frame encodes");
        assert_eq!(decode_frame::<ClientFrame>(&again).expect("re-decodes"), frame);
    }
    let _ = decode::<ClientFrame>(data);
    let _ = decode::<ServerFrame>(data);
});
