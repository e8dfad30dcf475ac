//! Property tests for the decoder: random input never panics, never makes the
//! decoder wait on bytes that can never form a frame, and never allocates
//! beyond the limit; every frame survives an encode/decode round trip, split
//! at any point.
#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use tram_wire::{
    Bind, Call, Cancel, Code, Credit, End, Frame, FrameDecoder, GoAway, Message, Metadata, Ping,
    Reason, Settings,
};

/// Records the largest single allocation, to show that what the peer
/// announces never sizes an allocation.
struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MAX: u32 = 64 * 1024;

/// Feeds `input` to a decoder in chunks, as a socket would, and checks each
/// step: a frame consumes bytes, `None` consumes nothing, an error ends it.
fn drive(input: &[u8], chunk: usize) -> (usize, bool) {
    let mut dec = FrameDecoder::new(MAX);
    let mut buf = BytesMut::new();
    let mut frames = 0;
    let mut fed = 0;
    loop {
        let (before, capacity) = (buf.len(), buf.capacity());
        match dec.decode(&mut buf) {
            Ok(Some(_)) => {
                assert!(buf.len() < before, "a frame consumes bytes");
                frames += 1;
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "waiting consumes nothing");
                // Waiting allocates nothing: what a header announces
                // never sizes an allocation.
                assert_eq!(buf.capacity(), capacity);
                if fed == input.len() {
                    return (frames, false);
                }
                let n = chunk.min(input.len() - fed);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            Err(_) => {
                assert_eq!(buf.len(), before, "an error consumes nothing");
                assert_eq!(buf.capacity(), capacity);
                return (frames, true);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn random_bytes_end_in_frame_none_or_error(input in proptest::collection::vec(any::<u8>(), 0..512),
                                               chunk in 1usize..64) {
        drive(&input, chunk);
    }

    #[test]
    fn frames_round_trip_split_anywhere(frames in proptest::collection::vec(frame(), 1..8),
                                        chunk in 1usize..40) {
        let mut wire = BytesMut::new();
        for f in &frames {
            f.encode(&mut wire);
        }
        let mut dec = FrameDecoder::new(MAX);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        for piece in wire.chunks(chunk) {
            buf.extend_from_slice(piece);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                out.push(f);
            }
        }
        prop_assert!(buf.is_empty());
        prop_assert_eq!(out, frames);
    }

    #[test]
    fn corrupting_a_valid_frame_never_panics(f in frame(), pos in any::<prop::sample::Index>(),
                                             byte in any::<u8>()) {
        let mut wire = BytesMut::new();
        f.encode(&mut wire);
        let i = pos.index(wire.len());
        wire[i] = byte;
        drive(&wire, 7);
    }
}

#[test]
fn hostile_headers_allocate_nothing_near_their_claim() {
    LARGEST.store(0, Ordering::Relaxed);
    // 64 bytes of 0xFF: rejected on the first byte.
    assert!(drive(&[0xff; 64], 64).1);
    // A MESSAGE header announcing 4 GiB: rejected as soon as it is read.
    let mut big = vec![0x30];
    tram_wire::varint::put(&mut big, 4 << 30);
    assert!(drive(&big, 3).1);
    // A header announcing exactly the maximum, then silence: waits, and
    // allocates nothing for it.
    let mut max = vec![0x30];
    tram_wire::varint::put(&mut max, u64::from(MAX));
    assert!(!drive(&max, 64).1);
    let mut huge = FrameDecoder::new(tram_wire::MAX_MAX_FRAME_SIZE);
    let mut buf = BytesMut::from(&[0x30, 0x80, 0x80, 0x80, 0x80, 0x04][..]); // 1 GiB
    assert_eq!(huge.decode(&mut buf), Ok(None));
    let largest = LARGEST.load(Ordering::Relaxed);
    // Other tests in this binary allocate concurrently; none comes close
    // to a mebibyte, let alone the gibibytes claimed above.
    assert!(largest < 1 << 20, "largest allocation was {largest} bytes");
}

// --- strategies -------------------------------------------------------------

fn bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn metadata() -> impl Strategy<Value = Metadata> {
    let key = "[a-z0-9_.-]{1,12}";
    let ascii = (key, "[ -~]{0,16}").prop_map(|(k, v)| (k, v.into_bytes(), false));
    let binary = (key, proptest::collection::vec(any::<u8>(), 0..16))
        .prop_map(|(k, v)| (format!("{k}-bin"), v, true));
    proptest::collection::vec(prop_oneof![ascii, binary], 0..4).prop_map(|entries| {
        let mut b = Metadata::builder();
        for (k, v, bin) in entries {
            if bin {
                b.binary(&k, &v).unwrap();
            } else if !k.ends_with("-bin") {
                b.ascii(&k, std::str::from_utf8(&v).unwrap()).unwrap();
            }
        }
        b.build()
    })
}

fn code() -> impl Strategy<Value = Code> {
    (0u64..17).prop_map(|n| Code::from_u64(n).unwrap())
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        (
            16384u32..=1 << 30,
            any::<u32>(),
            0u32..=i32::MAX as u32,
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(a, b, c, d, e)| Frame::Settings(Settings {
                max_frame_size: a,
                max_concurrent_calls: b,
                initial_credit: c,
                max_metadata_size: d,
                max_bound_methods: e,
            })),
        (any::<u32>(), "\\PC{1,40}").prop_map(|(method, name)| Frame::Bind(Bind { method, name })),
        (
            any::<u32>(),
            any::<u32>(),
            any::<bool>(),
            proptest::option::of(any::<u64>()),
            proptest::option::of(metadata()),
            proptest::option::of(bytes(300)),
        )
            .prop_map(
                |(call, method, end_stream, timeout_micros, metadata, message)| {
                    Frame::Call(Call {
                        call,
                        method,
                        end_stream,
                        timeout_micros,
                        metadata,
                        message,
                    })
                }
            ),
        (
            any::<u32>(),
            any::<bool>(),
            proptest::option::of(metadata()),
            bytes(300)
        )
            .prop_map(|(call, end_stream, metadata, payload)| {
                Frame::Message(Message {
                    call,
                    end_stream,
                    metadata,
                    payload,
                })
            }),
        (
            any::<u32>(),
            code(),
            proptest::option::of("\\PC{0,30}"),
            proptest::option::of(bytes(40)),
            proptest::option::of(metadata()),
        )
            .prop_map(|(call, code, message, details, trailers)| {
                Frame::End(End {
                    call,
                    code,
                    message,
                    details,
                    trailers,
                })
            }),
        (any::<u32>(), code()).prop_map(|(call, code)| Frame::Cancel(Cancel { call, code })),
        (any::<u32>(), 1u32..=i32::MAX as u32)
            .prop_map(|(call, n)| Frame::Credit(Credit { call, n })),
        (any::<bool>(), any::<[u8; 8]>())
            .prop_map(|(ack, payload)| Frame::Ping(Ping { ack, payload })),
        (any::<u64>(), any::<u32>(), "\\PC{0,30}").prop_map(|(last_call_seq, r, message)| {
            Frame::GoAway(GoAway {
                last_call_seq,
                reason: Reason(r),
                message,
            })
        }),
    ]
}

/// Found by cargo-fuzz: a 114 KiB frame fed 7 bytes at a time, where an
/// earlier partial-frame reserve met `BytesMut`'s doubling. The decoder now
/// never grows the buffer; `drive` checks it.
#[test]
fn fuzz_regression_partial_frame_growth() {
    // A second crash of the same kind: SETTINGS frames, then one announcing
    // 794 KB, fed 140 bytes at a time.
    let mut second = vec![0u8; 27];
    second.extend_from_slice(&[0xbd, 0xbd, 0x30]);
    second.resize(230, 0xbd);
    drive(&second, 140);

    let input = hex::decode(
        "3081800731090788 04eefb8b07000000 0000009b8374ff40 ffffffffffffffff".replace(' ', ""),
    )
    .unwrap();
    let mut input = input;
    input.resize(200_000, 0);
    drive(&input, 7);
}
