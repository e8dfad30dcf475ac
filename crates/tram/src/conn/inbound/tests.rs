#![allow(clippy::unwrap_used)]

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::io::ReadBuf;

use super::*;
use crate::conn::codec::LengthDelimited;

/// The read chunk (a connection's default buffer size).
const CHUNK: usize = 64 << 10;

/// Hands out its chunks in order, one (or what fits of it) per read:
/// what a peer's writes have delivered by the time of each read.
struct Arrivals(VecDeque<Vec<u8>>);

impl AsyncRead for Arrivals {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut chunk) = self.0.pop_front() {
            let n = chunk.len().min(buf.remaining());
            buf.put_slice(&chunk[..n]);
            if n < chunk.len() {
                self.0.push_front(chunk.split_off(n));
            }
        }
        Poll::Ready(Ok(()))
    }
}

fn frame(len: usize) -> Vec<u8> {
    let mut f = (len as u32).to_be_bytes().to_vec();
    f.resize(4 + len, 7);
    f
}

/// An `Inbound` of length-delimited frames over `arrivals`.
fn reading(arrivals: Vec<Vec<u8>>) -> Inbound<Arrivals, LengthDelimited> {
    Inbound::new(
        Arrivals(arrivals.into()),
        LengthDelimited::new(),
        CHUNK,
        CHUNK,
        1 << 20,
    )
}

/// Reads `n` messages from `arrivals`, each kept until the next has
/// arrived (as a server keeps a request until its answer is written);
/// returns the bytes copied between buffers.
async fn copied_reading(arrivals: Vec<Vec<u8>>, n: usize, len: usize) -> u64 {
    let mut inbound = reading(arrivals);
    let mut kept: Option<Bytes> = None;
    for _ in 0..n {
        let msg = inbound.recv().await.unwrap().unwrap();
        assert_eq!(msg.len(), len);
        kept = Some(msg);
    }
    drop(kept);
    inbound.copied
}

/// Reads land half a page into a buffer, the first one's and those of
/// the buffers taken after it alike: frames of a page each, kept, put
/// every payload 4 bytes past the phase.
#[tokio::test]
async fn reads_start_half_a_page_in() {
    let mut inbound = reading((0..64).map(|_| frame(4092)).collect());
    let mut kept = Vec::new();
    for _ in 0..64 {
        let msg = inbound.recv().await.unwrap().unwrap();
        let phase = readpool::READ_PHASE + 4;
        assert_eq!(msg.as_ptr() as usize % PAGE, phase);
        kept.push(msg);
    }
}

/// A peer whose send buffer is smaller than its messages writes each
/// in two parts: the part read first is completed in place, not copied
/// to a new buffer with every message.
#[tokio::test]
async fn a_message_arriving_in_parts_is_completed_where_it_is() {
    // The first part of every third message leaves less than a quarter
    // chunk of room.
    let len = CHUNK / 4 + 600;
    let mut arrivals = Vec::new();
    for _ in 0..50 {
        let mut f = frame(len);
        let rest = f.split_off(len - 400);
        arrivals.push(f);
        arrivals.push(rest);
    }
    let copied = copied_reading(arrivals, 50, len).await;
    assert_eq!(copied, 0);
}

/// Reads from a socket that holds more than they take double, up to
/// the largest read; reads that a peer's writes never fill stay at the
/// first size.
#[tokio::test]
async fn reads_grow_only_while_the_socket_holds_more() {
    let (len, n) = (4096, 200);
    let backlog: Vec<u8> = (0..n).flat_map(|_| frame(len)).collect();
    let trickle: Vec<Vec<u8>> = (0..n).map(|_| frame(len)).collect();
    for (arrivals, grown) in [(vec![backlog], 4 * CHUNK), (trickle, CHUNK)] {
        let mut inbound = Inbound::new(
            Arrivals(arrivals.into()),
            LengthDelimited::new(),
            CHUNK,
            4 * CHUNK,
            1 << 20,
        );
        for _ in 0..n {
            assert_eq!(inbound.recv().await.unwrap().unwrap().len(), len);
        }
        assert_eq!(inbound.read_chunk, grown);
        assert!(inbound.recv().await.is_none());
    }
}

/// A read that took less than it had room for is told from one that
/// filled its room (the socket holding more).
#[tokio::test]
async fn a_short_read_is_told_from_a_full_one() {
    let mut inbound = reading(vec![frame(100)]);
    assert!(!inbound.read_was_short(), "nothing read yet");
    inbound.recv().await.unwrap().unwrap();
    assert!(inbound.read_was_short());

    // More than a read chunk, delivered at once.
    let backlog: Vec<u8> = (0..200).flat_map(|_| frame(1000)).collect();
    let mut inbound = reading(vec![backlog]);
    inbound.recv().await.unwrap().unwrap();
    assert!(!inbound.read_was_short(), "the read filled its room");
}

/// The decoded count moves by whole messages, header included, while
/// the received count moves by reads.
#[tokio::test]
async fn bytes_decoded_counts_whole_messages_of_a_read() {
    let mut one_read = frame(100);
    one_read.extend(frame(200));
    one_read.extend(&frame(300)[..50]);
    let mut inbound = reading(vec![one_read]);
    assert_eq!(inbound.bytes_decoded(), 0);
    inbound.recv().await.unwrap().unwrap();
    assert_eq!(inbound.bytes_received(), 104 + 204 + 50);
    assert_eq!(inbound.bytes_decoded(), 104);
    inbound.recv().await.unwrap().unwrap();
    assert_eq!(inbound.bytes_decoded(), 104 + 204);
    assert_eq!(inbound.buffered(), 50);
}

/// Whole messages of a third of the read chunk: two leave more than a
/// quarter chunk of room, into which the next is read across the
/// buffer's end. After the first time, the buffer is replaced before
/// that happens.
#[tokio::test]
async fn messages_are_not_read_across_a_buffer_end_again() {
    let len = CHUNK / 3;
    let arrivals = (0..200).map(|_| frame(len)).collect();
    let copied = copied_reading(arrivals, 200, len).await;
    assert!(copied <= (4 + len) as u64, "copied {copied} bytes");
}
