//! How much of a connection's input the server's driver takes in one
//! turn. The answers to a turn's calls are queued while it runs and
//! written together as it ends, so its bounds decide both how long the
//! client waits for the first of them and how they leave the socket.

/// Frames a connection's driver handles per turn. The answers to a turn's
/// calls are written as it ends, so a short turn lets the client work on
/// them while the server handles the next, for one write per turn at most.
/// Measured, not derived (see the bench log): 48 and 64 sent answers in
/// bursts that cost the client more to take in; 24 split the 32 calls of a
/// read at 32 in flight into two writes.
pub(super) const TURN_FRAMES: usize = 32;

/// The turn when a read holds more than [`TURN_FRAMES`] frames after the
/// turn's first (at that one's size): a deep pipeline, whose answers a
/// shorter turn starts writing sooner. Measured, not derived (see the
/// bench log): at 256 calls in flight 24 made more calls than 32 and kept
/// both sides' workers from sleeping, in the guest's slow state too; 16
/// and 20 made fewer.
const DEEP_TURN_FRAMES: usize = 24;

/// Bytes of frames a turn of large messages handles, at most (it ends
/// after the frame that reaches it). Large messages would otherwise make
/// one turn of all that is in flight (32 calls of 64 KiB: two megabytes),
/// written in one go while the client waits, then waited for while the
/// client answers: the two sides take turns instead of overlapping.
/// Measured, not derived (see the bench log).
const TURN_BYTES: u64 = 128 * 1024;

/// The largest TCP segment the kernel builds. A kernel that paces sends
/// itself (BBR without the `fq` qdisc) lets one segment of a write go at
/// once and holds the next back with a timer (`conn::paced`): a turn's
/// answers that fit in one leave at once.
const SEGMENT_BYTES: u64 = crate::conn::paced::SEGMENT_BYTES as u64;

/// A turn's bounds, decided at its first frame (`first` bytes long, with
/// `buffered` bytes read after it): how many frames it takes, and how many
/// bytes of frames, ending after the frame that reaches them.
///
/// Fewer frames when the read holds more than [`TURN_FRAMES`] more of the
/// first one's size. Frames a segment holds two of stop short of one
/// segment (for frames of that size), so that their answers, when of the
/// same size, leave in one; larger frames take up to [`TURN_BYTES`].
pub(super) fn bounds(first: u64, buffered: u64) -> (usize, u64) {
    let frames = if buffered > first * TURN_FRAMES as u64 {
        DEEP_TURN_FRAMES
    } else {
        TURN_FRAMES
    };
    let bytes = if first * 2 <= SEGMENT_BYTES {
        SEGMENT_BYTES - first
    } else {
        TURN_BYTES
    };
    (frames, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The frames of `size` bytes a turn takes, as the driver counts them.
    fn frames_taken(size: u64, buffered: u64) -> u64 {
        let (limit, bytes) = bounds(size, buffered);
        let mut taken = 1;
        while taken < limit as u64 && taken * size < bytes {
            taken += 1;
        }
        taken
    }

    #[test]
    fn frames_a_segment_holds_two_of_end_the_turn_within_one() {
        for size in (8..=SEGMENT_BYTES / 2).step_by(97) {
            let taken = frames_taken(size, u64::MAX);
            assert!(
                taken * size <= SEGMENT_BYTES,
                "{taken} frames of {size} bytes"
            );
            // And the turn is not cut shorter than that: one more frame
            // would reach a segment's size, unless the frame bound came
            // first.
            assert!(
                (taken + 1) * size >= SEGMENT_BYTES || taken == DEEP_TURN_FRAMES as u64,
                "{taken} frames of {size} bytes"
            );
        }
    }

    #[test]
    fn sixteen_kib_echoes_take_three_frames_a_turn() {
        // A 16 KiB payload with the frame's header and the field's tag.
        assert_eq!(frames_taken(16 * 1024 + 8, u64::MAX), 3);
    }

    #[test]
    fn small_frames_are_bounded_by_count() {
        assert_eq!(frames_taken(24, 0), TURN_FRAMES as u64);
        assert_eq!(frames_taken(24, 24 * 1000), DEEP_TURN_FRAMES as u64);
    }

    #[test]
    fn large_frames_take_up_to_the_large_bound() {
        let size = 64 * 1024 + 8;
        assert_eq!(bounds(size, 0).1, TURN_BYTES);
        assert_eq!(frames_taken(size, 0), 2);
        assert_eq!(frames_taken(SEGMENT_BYTES / 2 + 1, 0), 4);
    }
}
