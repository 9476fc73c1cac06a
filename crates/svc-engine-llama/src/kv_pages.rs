//! Handing the KV pool's untouched pages back to the kernel.
//!
//! llama.cpp clears a new context's KV buffer to zero (against NaNs in the
//! padding), and that writes every page of it: a pool of 16 × 4,096 cells of
//! SmolLM2-135M is 1.5 GiB resident before the first request. On Linux the
//! engine gives those pages back right after the context is made
//! (`MADV_DONTNEED` on private anonymous memory: a page given back reads as
//! zero again, which is what the clear wrote), so the pool's resident memory
//! follows the cells in use (llama.cpp fills cells from the lowest free one).
//!
//! llama.cpp has no call that gives the buffer's address. It allocates it
//! with `posix_memalign`, which glibc serves for such sizes with a mapping of
//! its own headed by a chunk header (the lead before the aligned start, then
//! the chunk's size with the "mmapped" bit): the buffer is found as the one
//! chunk of the KV buffer's size in the memory mapped while the context was
//! made. Contexts are made one at a time in the process ([`make_context`]
//! holds a lock), nothing but the new context knows the buffer yet, and only
//! pages that are all zero are given back. Where any of this does not hold
//! (another OS or allocator, a cache laid out otherwise, as for
//! sliding-window models) nothing is given back.

#![cfg_attr(
    target_os = "linux",
    expect(
        unsafe_code,
        reason = "reading a buffer llama.cpp made, and madvise on it: no safe API exists"
    )
)]

use std::ops::Range;
use std::sync::Mutex;

/// Made while no other context is being made.
static MAKING: Mutex<()> = Mutex::new(());

/// A chunk may be this much longer than the buffer in it (its header and
/// alignment, rounded up to pages).
const SLACK: usize = 64 * 1024;

/// Smaller buffers are left alone: glibc may serve them from its heap (it
/// always maps one of 32 MiB or more on its own), and they cost little.
const MIN_BYTES: usize = 32 << 20;

/// glibc's flag, in a chunk's size word, for a chunk that is a mapping of
/// its own; the low three bits are flags.
const IS_MMAPPED: u64 = 2;

/// Runs `make` (which creates a llama.cpp context), then gives back the
/// all-zero pages of the buffer of `kv_bytes(&made)` bytes it allocated (see
/// the module's docs). Returns what `make` made and the bytes given back.
pub(crate) fn make_context<T, E>(
    make: impl FnOnce() -> Result<T, E>,
    kv_bytes: impl FnOnce(&T) -> Option<usize>,
) -> (Result<T, E>, u64) {
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let before = anonymous_mappings();
    let made = make();
    let released = match (&made, before) {
        (Ok(value), Some(before)) => kv_bytes(value)
            .filter(|&bytes| bytes >= MIN_BYTES)
            .and_then(|bytes| {
                let after = anonymous_mappings()?;
                let buffer = new_ranges(&before, &after)
                    .into_iter()
                    .find_map(|range| find_chunk(range, bytes))?;
                Some(release_zero_pages(buffer))
            })
            .unwrap_or(0),
        _ => 0,
    };
    (made, released)
}

/// The process's private anonymous read-write mappings, or `None` where they
/// cannot be read.
fn anonymous_mappings() -> Option<Vec<Range<usize>>> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    Some(maps.lines().filter_map(parse_anonymous).collect())
}

/// `start-end rw-p 00000000 00:00 0` with no path: a private anonymous mapping.
fn parse_anonymous(line: &str) -> Option<Range<usize>> {
    let mut fields = line.split_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let _offset = fields.next()?;
    let _device = fields.next()?;
    let inode = fields.next()?;
    if perms != "rw-p" || inode != "0" || fields.next().is_some() {
        return None;
    }
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    (start < end).then_some(start..end)
}

/// The parts of `after` that no range of `before` covers (the kernel merges
/// a new mapping with its neighbours, so a range of `after` may hold old
/// memory too).
fn new_ranges(before: &[Range<usize>], after: &[Range<usize>]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    for range in after {
        let mut parts = vec![range.clone()];
        for old in before
            .iter()
            .filter(|old| old.start < range.end && range.start < old.end)
        {
            parts = parts
                .into_iter()
                .flat_map(|part| {
                    [
                        part.start..old.start.min(part.end),
                        old.end.max(part.start)..part.end,
                    ]
                })
                .filter(|part| part.start < part.end)
                .collect();
        }
        out.extend(parts);
    }
    out
}

/// The data of the chunk glibc mapped for an allocation of `bytes` bytes
/// within `range`: at the start of a page of it, a header (the bytes from
/// the page to the header, then the chunk's size with [`IS_MMAPPED`]) whose
/// size fits `bytes` and which ends within the range. The headers are read
/// through `/proc/self/mem`, so that memory another thread unmaps meanwhile
/// reads as an error, not a crash.
#[cfg(target_os = "linux")]
fn find_chunk(range: Range<usize>, bytes: usize) -> Option<Range<usize>> {
    use std::os::unix::fs::FileExt as _;
    let page = page_size()?;
    let mem = std::fs::File::open("/proc/self/mem").ok()?;
    let mut head = [0u8; 64];
    let last = range.end.checked_sub(bytes + 16)?;
    let mut at = range.start.next_multiple_of(page);
    while at <= last {
        if mem.read_exact_at(&mut head, at as u64).is_ok() {
            let word = |i: usize| u64::from_ne_bytes(head[i..i + 8].try_into().unwrap_or_default());
            for lead in [0, 16, 32, 48] {
                let header = at + lead;
                let size_word = word(lead + 8);
                let size = (size_word & !7) as usize;
                if word(lead) == lead as u64
                    && size_word & 7 == IS_MMAPPED
                    && size >= bytes + 16
                    && size <= bytes + SLACK
                    && header + size <= range.end
                {
                    return Some(header + 16..header + size);
                }
            }
        }
        at += page;
    }
    None
}

/// Gives back every page within `buffer` that is all zero; returns the
/// bytes given back.
fn release_zero_pages(buffer: Range<usize>) -> u64 {
    let Some(page) = page_size() else {
        return 0;
    };
    let mut released = 0;
    let mut run: Option<usize> = None;
    let mut flush = |run: &mut Option<usize>, end: usize| {
        if let Some(start) = run.take() {
            released += give_back(start..end);
        }
    };
    let mut at = buffer.start.next_multiple_of(page);
    while at + page <= buffer.end {
        if page_is_zero(at, page) {
            run.get_or_insert(at);
        } else {
            flush(&mut run, at);
        }
        at += page;
    }
    flush(&mut run, at);
    released
}

#[cfg(target_os = "linux")]
fn page_size() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).ok().filter(|&p| p >= 4096)
}

/// Whether the `page` bytes at `at`, a page of the new context's KV buffer,
/// are all zero.
#[cfg(target_os = "linux")]
fn page_is_zero(at: usize, page: usize) -> bool {
    // SAFETY: the page lies in the buffer llama.cpp just allocated for the
    // context this thread made (the one chunk of its size mapped meanwhile,
    // contexts being made one at a time), which nothing else uses or frees
    // yet; u64-aligned; the slice is dropped before this returns.
    let words = unsafe { std::slice::from_raw_parts(at as *const u64, page / 8) };
    words.iter().fold(0, |any, w| any | w) == 0
}

/// `MADV_DONTNEED` on whole pages of a private anonymous mapping, all zero:
/// they read as zero again. Returns the bytes given back.
#[cfg(target_os = "linux")]
fn give_back(pages: Range<usize>) -> u64 {
    // SAFETY: the pages are in a mapping of this process and hold only
    // zeros, which is what they read as after this.
    let rc = unsafe {
        libc::madvise(
            pages.start as *mut libc::c_void,
            pages.len(),
            libc::MADV_DONTNEED,
        )
    };
    if rc == 0 { pages.len() as u64 } else { 0 }
}

#[cfg(not(target_os = "linux"))]
fn find_chunk(_range: Range<usize>, _bytes: usize) -> Option<Range<usize>> {
    None
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> Option<usize> {
    None
}

#[cfg(not(target_os = "linux"))]
fn page_is_zero(_at: usize, _page: usize) -> bool {
    false
}

#[cfg(not(target_os = "linux"))]
fn give_back(_pages: Range<usize>) -> u64 {
    0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![expect(clippy::unwrap_used, reason = "test code")]

    use super::*;

    #[test]
    fn reads_private_anonymous_mappings_only() {
        assert_eq!(
            parse_anonymous("7f3a00000000-7f3a00400000 rw-p 00000000 00:00 0 "),
            Some(0x7f3a_0000_0000..0x7f3a_0040_0000)
        );
        for other in [
            "7f3a00000000-7f3a00400000 r--p 00000000 00:00 0",
            "7f3a00000000-7f3a00400000 rw-s 00000000 00:01 1234 /dev/zero (deleted)",
            "55d0c0000000-55d0c0021000 rw-p 00000000 00:00 0                          [heap]",
            "7f3a00000000-7f3a00400000 rw-p 00000000 fd:01 4242 /tmp/model.gguf",
        ] {
            assert_eq!(parse_anonymous(other), None, "{other}");
        }
    }

    /// A buffer from the C allocator, as llama.cpp's (`posix_memalign`
    /// with an alignment of 64) or as a plain `malloc`.
    struct Buffer {
        ptr: *mut u8,
        layout: std::alloc::Layout,
    }

    impl Buffer {
        /// Written all over, then zeroed: as llama.cpp's clear leaves the KV buffer.
        fn written(len: usize, align: usize) -> Buffer {
            use std::alloc::GlobalAlloc as _;
            let layout = std::alloc::Layout::from_size_align(len, align).unwrap();
            let ptr = unsafe { std::alloc::System.alloc(layout) };
            assert!(!ptr.is_null());
            let buffer = Buffer { ptr, layout };
            unsafe {
                std::ptr::write_bytes(ptr, 1, len);
                std::ptr::write_bytes(ptr, 0, len);
            }
            buffer
        }

        fn bytes(&self) -> &[u8] {
            unsafe { std::slice::from_raw_parts(self.ptr, self.layout.size()) }
        }

        fn set(&mut self, at: usize, value: u8) {
            assert!(at < self.layout.size());
            unsafe { self.ptr.add(at).write(value) }
        }

        /// Pages of it resident now, by mincore.
        fn resident_pages(&self) -> usize {
            let page = page_size().unwrap();
            let start = (self.ptr as usize).next_multiple_of(page);
            let end = (self.ptr as usize + self.layout.size()) / page * page;
            let mut vec = vec![0u8; (end - start) / page];
            let rc =
                unsafe { libc::mincore(start as *mut libc::c_void, end - start, vec.as_mut_ptr()) };
            assert_eq!(rc, 0);
            vec.iter().filter(|&&b| b & 1 == 1).count()
        }
    }

    impl Drop for Buffer {
        fn drop(&mut self) {
            use std::alloc::GlobalAlloc as _;
            unsafe { std::alloc::System.dealloc(self.ptr, self.layout) }
        }
    }

    #[test]
    fn gives_back_the_zero_pages_of_the_new_buffer_and_keeps_its_contents() {
        const LEN: usize = 48 << 20;
        for align in [64, 1] {
            let (made, released) = make_context(
                || {
                    let mut buffer = Buffer::written(LEN, align);
                    buffer.set(LEN / 2, 7);
                    Ok::<_, ()>(buffer)
                },
                |_| Some(LEN),
            );
            let buffer = made.unwrap();
            assert!(
                released > (LEN as u64) * 99 / 100,
                "released {released} of {LEN} (align {align})"
            );
            assert!(released < LEN as u64);
            let resident = buffer.resident_pages();
            assert!(
                resident <= 1,
                "{resident} pages still resident (align {align})"
            );
            assert_eq!(buffer.bytes()[LEN / 2], 7);
            assert_eq!(buffer.bytes().iter().map(|&b| b as u64).sum::<u64>(), 7);
        }
    }

    #[test]
    fn leaves_buffers_of_another_size_alone() {
        const LEN: usize = 80 << 20;
        let (made, released) =
            make_context(|| Ok::<_, ()>(Buffer::written(LEN, 64)), |_| Some(LEN / 2));
        let buffer = made.unwrap();
        assert_eq!(released, 0);
        assert!(buffer.resident_pages() > LEN / 4096 * 99 / 100);
    }

    #[test]
    fn new_ranges_leave_out_what_was_mapped_before() {
        assert_eq!(
            new_ranges(&[10..20, 30..40], &[0..50, 60..70]),
            vec![0..10, 20..30, 40..50, 60..70]
        );
        let (before, after) = (vec![0..100, 200..300], vec![10..20, 250..260]);
        assert!(new_ranges(&before, &after).is_empty());
    }
}
