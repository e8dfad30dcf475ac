//! Feeds arbitrary bytes to the frame decoder, split into arbitrary reads,
//! and checks the decoder's contract on every step: no panic, a frame
//! consumes bytes, `None` and errors consume nothing, memory follows the
//! input, and every decoded frame re-encodes to bytes that decode to the
//! same frame. With the split byte odd, runs of plain messages are taken
//! first ([`FrameDecoder::decode_run`]), and each must hold exactly the
//! messages that decoding frame by frame gives.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tram_wire::{Frame, FrameDecoder, Message, decode_exact};

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
        if split % 2 == 1 {
            let snapshot = buf.clone();
            if let Some(run) = dec.decode_run(&mut buf) {
                let (call, mut one_by_one) = (run.call(), snapshot);
                assert!(run.len() > 0);
                for payload in run {
                    let frame = dec.decode(&mut one_by_one).expect("a run's frame decodes");
                    let plain = Frame::Message(Message {
                        call,
                        end_stream: false,
                        metadata: None,
                        payload,
                    });
                    assert_eq!(frame, Some(plain));
                }
                assert_eq!(one_by_one, buf);
                continue;
            }
            assert_eq!(snapshot, buf, "no run, nothing taken");
        }
        let (before, capacity) = (buf.len(), buf.capacity());
        match dec.decode(&mut buf) {
            Ok(Some(frame)) => {
                assert!(buf.len() < before);
                let mut again = BytesMut::new();
                frame.encode(&mut again);
                assert_eq!(again.len(), frame.encoded_len());
                assert_eq!(
                    decode_exact(&again, MAX).expect("re-encoded frame decodes"),
                    frame
                );
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
