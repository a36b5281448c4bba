//! Stencil patterns (`5p`, `7p`, `27p`, `star`, `box`, ...) for 1 to 6 dimensions.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spares_fuzz as _; // the memory budget (global allocator)
use topology::Pattern;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for q in 1..=6 {
        if let Ok(p) = Pattern::parse(text, q) {
            let _ = p.offsets();
            assert!(Pattern::parse(&p.to_string(), q).is_ok());
        }
    }
});
