//! Read buffers that messages still held when their connection needed a
//! new one, kept to be read into again once those messages are gone.
//!
//! A connection reads into one buffer and hands out its messages as
//! slices of it; when the buffer runs out of room while some of them are
//! still alive (a handler holding its request, a response not yet
//! written), the connection needs another. A fresh allocation of that size
//! comes back from the allocator as untouched pages, and the kernel's copy
//! into it faults each one in (with messages of some kilobytes, a page
//! fault per call or more; docs/bench-log-2026-11-23.md). Retired buffers
//! wait here instead, and a connection that needs a buffer takes one whose
//! messages have all been dropped.
//!
//! The newest free buffer is taken: the one read into last is the likeliest
//! to be still in the CPU's caches, so the kernel's copy into it does not
//! first fetch each line from memory. (Taken oldest first, a connection
//! with many large messages in flight cycled through every buffer in the
//! pool; docs/bench-log-2026-12-04-early.md, the eighty-fourth session.)
//!
//! The pool is shared by every connection of the process and bounded
//! ([`MAX_POOLED`] buffers of at most [`MAX_POOLED_CAPACITY`] bytes, 10
//! MiB), so an idle connection keeps nothing in it and the memory it can
//! hold is fixed. It is only touched when a connection's buffer runs out
//! of room, once per tens of kilobytes read.
//!
//! Every read buffer starts half a page in ([`READ_PHASE`]), whoever
//! allocated it.

use bytes::{Buf, BufMut, BytesMut};
use parking_lot::Mutex;

use super::DEFAULT_MAX_READ_SIZE;

/// Buffers kept at most, for the whole process.
const MAX_POOLED: usize = 32;

/// Larger buffers (grown for a large frame, or for reads larger than the
/// default) are not kept. A connection's next buffer has room for a read
/// and the start of a message carried over from the last, at most a
/// quarter of a read.
const MAX_POOLED_CAPACITY: usize = DEFAULT_MAX_READ_SIZE + DEFAULT_MAX_READ_SIZE / 4;

/// The pool of the process.
static POOL: Pool = Pool::new();

/// A retired buffer with room for `room` bytes whose messages are all
/// gone, emptied, if the pool has one.
pub(super) fn take(room: usize) -> Option<BytesMut> {
    POOL.take(room)
}

/// Keeps `buf` (whose unread bytes have been copied elsewhere, and which
/// had `room` bytes when it was new) until its messages are gone, unless
/// it is larger than the pool keeps.
pub(super) fn give(buf: BytesMut, room: usize) {
    POOL.give(buf, room);
}

/// Where in a 4 KiB page a read buffer's bytes start.
///
/// Some CPUs (the family-25 AMD EPYC of issue 19's guests among them) run
/// `rep movsb`, which the kernel uses for its copies into user memory,
/// many times slower when the destination lies a few bytes past the
/// source modulo 4 KiB: 25 to 30 times from 1 to 31 bytes on some models;
/// on others 20 to 30 times from 1 to 15 and 2 to 4 times from 16 to 31.
/// A sender's bytes sit in the kernel's page-aligned fragments, and glibc
/// hands out large buffers 16 bytes into a page: read there, a large
/// message sent from a page boundary is copied at that slow rate. Half a
/// page in, the distance is as far from the window as it can be
/// (docs/bench-log.md, the twenty-eighth and eighty-second sessions).
pub(super) const READ_PHASE: usize = 2048;

/// A page: the room a buffer gives up to start at [`READ_PHASE`].
pub(super) const PAGE: usize = 4096;

/// Moves the start of `buf`, empty, to [`READ_PHASE`] within its page and
/// leaves it a page less room than it had: the same room wherever the
/// allocator put it, so that what a connection reads, and when it moves
/// to another buffer, does not depend on addresses.
pub(super) fn to_read_phase(buf: &mut BytesMut) {
    debug_assert!(buf.is_empty());
    let Some(keep) = buf.capacity().checked_sub(PAGE) else {
        return;
    };
    let pad = (READ_PHASE + PAGE - buf.as_ptr() as usize % PAGE) % PAGE;
    buf.put_bytes(0, pad);
    buf.advance(pad);
    // The rest of the page given up, split off and dropped: the buffer
    // keeps its allocation, whole again once reclaimed.
    drop(buf.split_off(keep));
}

/// A new buffer with room for `room` bytes, starting at [`READ_PHASE`].
pub(super) fn with_room(room: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(room + PAGE);
    to_read_phase(&mut buf);
    buf
}

/// Retired buffers, oldest first.
struct Pool(Mutex<Vec<BytesMut>>);

impl Pool {
    const fn new() -> Pool {
        Pool(Mutex::new(Vec::new()))
    }

    /// The newest buffer whose messages are all gone and which has room
    /// for `room` bytes, emptied.
    fn take(&self, room: usize) -> Option<BytesMut> {
        let mut pool = self.0.lock();
        // Succeeds only if nothing else refers to the allocation any more.
        let i = pool.iter_mut().rposition(|buf| buf.try_reclaim(room))?;
        Some(pool.remove(i))
    }

    /// Keeps `buf`, whose allocation had `room` bytes; when the pool is
    /// full, the oldest buffer makes way (its allocation is freed once its
    /// messages are gone).
    fn give(&self, mut buf: BytesMut, room: usize) {
        if room > MAX_POOLED_CAPACITY {
            return;
        }
        buf.clear();
        let mut pool = self.0.lock();
        let oldest = (pool.len() == MAX_POOLED).then(|| pool.remove(0));
        pool.push(buf);
        drop(pool);
        // Out of the lock: the last reference frees the allocation.
        drop(oldest);
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    /// A buffer is taken again only once the messages sliced from it are
    /// gone, and then empty, with its whole capacity.
    #[test]
    fn a_buffer_is_reused_once_its_messages_are_dropped() {
        let pool = Pool::new();
        let mut buf = BytesMut::with_capacity(1 << 10);
        buf.extend_from_slice(&[7; 600]);
        let message: Bytes = buf.split_to(600).freeze();
        let start = message.as_ptr();
        buf.extend_from_slice(&[8; 10]);
        pool.give(buf, 1 << 10);
        assert!(pool.take(1 << 10).is_none(), "a message still refers to it");
        drop(message);
        let again = pool.take(1 << 10).unwrap();
        assert!(again.is_empty());
        assert!(again.capacity() >= 1 << 10);
        assert_eq!(again.as_ptr(), start, "the same allocation, from its start");
        assert!(pool.take(1).is_none());
    }

    /// Buffers that were made large are not kept, however little of them
    /// is left; one for the default largest read is.
    #[test]
    fn buffers_are_kept_by_the_size_they_were_made() {
        let pool = Pool::new();
        let mut grown = BytesMut::with_capacity(MAX_POOLED_CAPACITY + PAGE);
        grown.extend_from_slice(&vec![1; MAX_POOLED_CAPACITY]);
        drop(grown.split_to(MAX_POOLED_CAPACITY));
        assert!(grown.capacity() <= PAGE, "what is left of it is small");
        pool.give(grown, MAX_POOLED_CAPACITY + PAGE);
        assert!(pool.take(1).is_none());
        let read = with_room(DEFAULT_MAX_READ_SIZE);
        let room = read.capacity();
        pool.give(read, room);
        assert!(pool.take(1).is_some());
    }

    /// The newest free buffer is taken first; a buffer still referred to
    /// is passed over for an older one.
    #[test]
    fn the_newest_free_buffer_is_taken() {
        let pool = Pool::new();
        let (older, newer) = (BytesMut::with_capacity(64), BytesMut::with_capacity(64));
        let (older_at, newer_at) = (older.as_ptr(), newer.as_ptr());
        pool.give(older, 64);
        pool.give(newer, 64);
        assert_eq!(pool.take(64).unwrap().as_ptr(), newer_at);
        let mut held = pool.take(64).unwrap();
        assert_eq!(held.as_ptr(), older_at);
        held.extend_from_slice(&[5; 8]);
        let message = held.split_to(8).freeze();
        pool.give(held, 64);
        pool.give(BytesMut::with_capacity(64), 64);
        let free = pool.take(64).unwrap();
        assert_ne!(free.as_ptr(), older_at);
        assert!(pool.take(64).is_none(), "the older one is still held");
        drop(message);
        assert_eq!(pool.take(64).unwrap().as_ptr(), older_at);
    }

    /// The pool holds at most `MAX_POOLED`; a buffer given to a full pool
    /// takes the oldest one's place.
    #[test]
    fn the_pool_is_bounded_and_lets_the_oldest_go() {
        let pool = Pool::new();
        // A message of the first keeps its allocation alive, so that no
        // later buffer can be given its address.
        let mut first = BytesMut::with_capacity(64);
        first.extend_from_slice(&[3; 8]);
        let _message = first.split_to(8).freeze();
        let first_at = first.as_ptr();
        pool.give(first, 64);
        for _ in 0..MAX_POOLED + 10 {
            pool.give(BytesMut::with_capacity(64), 64);
        }
        let kept = std::mem::take(&mut *pool.0.lock());
        assert_eq!(kept.len(), MAX_POOLED);
        assert!(kept.iter().all(|b| b.as_ptr() != first_at));
    }

    #[test]
    fn a_buffer_moved_to_the_read_phase_keeps_all_but_a_page_of_room() {
        for cap in [PAGE, 64 << 10, 256 << 10] {
            let mut buf = BytesMut::with_capacity(cap + PAGE);
            to_read_phase(&mut buf);
            assert_eq!(buf.as_ptr() as usize % PAGE, READ_PHASE);
            assert!(buf.is_empty());
            assert_eq!(buf.capacity(), cap);
            buf.extend_from_slice(&[7; 100]);
            assert_eq!(buf[..], [7; 100]);
            // Reclaimed, it has its whole allocation again, and moves to
            // the same room.
            buf.clear();
            assert!(buf.try_reclaim(cap + PAGE));
            to_read_phase(&mut buf);
            assert_eq!(buf.as_ptr() as usize % PAGE, READ_PHASE);
            assert_eq!(buf.capacity(), cap);
        }
    }
}
