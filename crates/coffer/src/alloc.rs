//! The process's allocator: the system's, asking the kernel to back every
//! block large enough to hold a whole huge page with transparent huge pages
//! (docs/design.md#memory). A restore or a backup fills tens of MiB of fresh
//! buffers (the key derivation's lanes, fetched ranges, packs); faulted in 4 KiB
//! at a time, their pages cost a tenth of a restore's CPU. Nothing else changes:
//! the blocks, their contents and when they are freed are the system
//! allocator's, and where the kernel offers no huge pages the advice is a no-op.

use std::alloc::{GlobalAlloc, Layout, System};

/// The size of a transparent huge page on x86-64 and on arm64 with 4 KiB pages.
const HUGE_PAGE: usize = 2 << 20;

pub struct Allocator;

// SAFETY: every block is the system allocator's, allocated, resized and freed
// by it with the caller's layout; the advice changes neither address nor contents.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as given.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if new_size > layout.size() {
            advise(p, new_size);
        }
        p
    }
}

/// Advises huge pages for the whole huge pages inside the block `p..p + len`.
#[cfg(target_os = "linux")]
fn advise(p: *mut u8, len: usize) {
    if p.is_null() || len < HUGE_PAGE {
        return;
    }
    let start = (p as usize).next_multiple_of(HUGE_PAGE);
    let end = (p as usize + len) / HUGE_PAGE * HUGE_PAGE;
    if end > start {
        // SAFETY: the range lies inside the block just allocated, which this
        // process owns; MADV_HUGEPAGE only marks how it is to be backed. A
        // refusal (no transparent huge pages here) is of no consequence.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_: *mut u8, _: usize) {}

#[cfg(test)]
mod tests {
    use super::HUGE_PAGE;

    /// Whether the kernel offers transparent huge pages to a process that asks.
    fn huge_pages_offered() -> bool {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"))
    }

    /// The `THPeligible` line of the mapping of `/proc/self/smaps` that holds `addr`.
    fn eligible(addr: usize) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
            } else if inside && let Some(v) = line.strip_prefix("THPeligible:") {
                return Some(v.trim() == "1");
            }
        }
        None
    }

    #[test]
    fn large_blocks_keep_their_contents_through_growth_and_are_marked_for_huge_pages() {
        let mut v: Vec<u8> = (0..5 * HUGE_PAGE / 2).map(|i| (i % 251) as u8).collect();
        let len = v.len();
        v.resize(9 * HUGE_PAGE / 2, 7);
        assert!(v[..len].iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "grown, the block kept its bytes");
        assert!(v[len..].iter().all(|&b| b == 7));
        let zeroed = vec![0u64; HUGE_PAGE];
        assert!(zeroed.iter().all(|&w| w == 0));
        if cfg!(target_os = "linux") && huge_pages_offered() {
            for block in [v.as_ptr() as usize, zeroed.as_ptr() as usize] {
                let inner = block.next_multiple_of(HUGE_PAGE);
                assert_eq!(eligible(inner), Some(true), "a large block's whole huge pages are marked");
            }
        }
        let small = vec![1u8; 4096];
        assert_eq!(small.iter().map(|&b| b as usize).sum::<usize>(), 4096);
    }
}
