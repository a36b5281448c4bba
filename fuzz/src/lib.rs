//! What the fuzz targets share: the memory budget.
//!
//! libFuzzer's `-malloc_limit_mb` needs a sanitizer's allocator hooks, which a stable build
//! without sanitizers does not have, so every target counts its own heap: this allocator
//! keeps the bytes live in Rust allocations and aborts (a crash libFuzzer records with its
//! input) as soon as one input makes them exceed [`BUDGET_BYTES`]. `-rss_limit_mb` still
//! bounds the whole process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Most bytes the parsers may hold at once for one input: 256 MiB, the budget of the issue
/// (a fully named network of `topology::limits::MAX_NODES` nodes takes about 150 MB).
pub const BUDGET_BYTES: usize = 256 << 20;

/// The system allocator, counting live bytes against [`BUDGET_BYTES`].
pub struct Budget;

static LIVE: AtomicUsize = AtomicUsize::new(0);

impl Budget {
    fn take(size: usize) {
        let before = LIVE.fetch_add(size, Ordering::Relaxed);
        if before.saturating_add(size) > BUDGET_BYTES {
            // No allocation here: we are inside the allocator.
            let _ = std::io::stderr()
                .write_all(b"spares-fuzz: memory budget of 256 MiB exceeded by one input\n");
            std::process::abort();
        }
    }
}

// SAFETY: every call is forwarded to `System` unchanged; only a counter is kept besides.
unsafe impl GlobalAlloc for Budget {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::take(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::take(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            Self::take(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Budget = Budget;
