//! Feeds arbitrary bytes to the frame decoder, split into arbitrary reads,
//! and checks the decoder's contract on every step: no panic, a frame
//! consumes bytes, `None` and errors consume nothing, memory follows the
//! input, and every decoded frame re-encodes to bytes that decode to the
//! same frame.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tram_wire::{FrameDecoder, decode_exact};

const MAX: u32 = 1 << 20;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the read size, so splits are explored too.
    let Some((&split, input)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(split).max(1);
    let mut dec = FrameDecoder::new(MAX);
    let mut buf = BytesMut::new();
    let mut fed = 0;
    loop {
        let (before, capacity) = (buf.len(), buf.capacity());
        match dec.decode(&mut buf) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before);
                let mut again = BytesMut::new();
                frame.encode(&mut again);
                assert_eq!(again.len(), frame.encoded_len());
                assert_eq!(decode_exact(&again, MAX).expect("re-encoded frame decodes"), frame);
            }
            Ok(None) => {
                assert_eq!(buf.len(), before);
                // Waiting allocates nothing: what a header announces
                // never sizes an allocation.
                assert_eq!(buf.capacity(), capacity);
                if fed == input.len() {
                    return;
                }
                let n = chunk.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            Err(_) => {
                assert_eq!(buf.len(), before);
                assert_eq!(buf.capacity(), capacity);
                return;
            }
        }
    }
});
