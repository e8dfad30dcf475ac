//! The guest CPU's `rep movsb` when the destination lies a few bytes past
//! the source modulo 4 KiB. Linux copies to and from user memory with it
//! on CPUs that have fast short `rep movsb` (FSRM), so every socket read
//! and write goes through it, and some CPUs (the family-25 EPYC of issue
//! 19's guests) run it 25–30 times slower at such distances: large-message
//! figures then depend on where buffers fall in their pages. Recorded with
//! the machine, so that a run says whether its guest has the quirk.

/// Bytes copied per trial: a 16 KiB message.
const LEN: usize = 16 << 10;

/// Copies per trial.
const COPIES: u32 = 64;

/// How much longer a 16 KiB `rep movsb` takes with the destination a few
/// bytes past the source modulo 4 KiB than 2 KiB past it (the better of
/// three trials each): about 1 on most CPUs, 25 or more on those with the
/// quirk. Where the slow window lies differs between CPUs: on the first
/// family-25 EPYC guests 16 bytes was in it, on those of model 17 it is 1
/// to 15 bytes (20 to 30 times slower) and 16 to 31 only 2 to 4 times.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Slowdown {
    /// 16 bytes past.
    pub(crate) at_16: f64,
    /// 8 bytes past.
    pub(crate) at_8: f64,
}

/// This CPU's [`Slowdown`]; `None` off x86-64.
pub(crate) fn slowdown() -> Option<Slowdown> {
    #[cfg(target_arch = "x86_64")]
    {
        let src = vec![1u8; LEN + 8192];
        let mut dst = vec![0u8; LEN + 8192];
        let page = |p: *const u8| (4096 - p as usize % 4096) % 4096;
        let s = page(src.as_ptr()) + 100;
        let d = page(dst.as_ptr()) + 100;
        let mut best = |distance: usize| {
            (0..3)
                .map(|_| {
                    let start = std::time::Instant::now();
                    for _ in 0..COPIES {
                        rep_movsb(&mut dst[d + distance..d + distance + LEN], &src[s..s + LEN]);
                    }
                    start.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let far = best(2048);
        (far > 0.0).then(|| Slowdown {
            at_16: best(16) / far,
            at_8: best(8) / far,
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// `dst.copy_from_slice(src)` with the `rep movsb` instruction itself
/// (a library `memcpy` may pick another way).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
fn rep_movsb(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    // SAFETY: `rep movsb` copies `rcx` bytes from `rsi` to `rdi`, forward
    // (the direction flag is clear at function boundaries by the ABI); both
    // slices are that long and do not overlap (one is borrowed mutably).
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") src.len() => _,
            inout("rsi") src.as_ptr() => _,
            inout("rdi") dst.as_mut_ptr() => _,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn rep_movsb_copies() {
        let src: Vec<u8> = (0..=255).cycle().take(5000).collect();
        let mut dst = vec![0u8; 5000];
        super::rep_movsb(&mut dst, &src);
        assert_eq!(dst, src);
        let slowdown = super::slowdown().unwrap();
        assert!(slowdown.at_16 > 0.0 && slowdown.at_8 > 0.0);
    }
}
