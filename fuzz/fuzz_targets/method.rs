//! Substitution methods (`hybrid`, `3D`, `hybrid(3D+1D+0D):least-load`, ...) for 1 to 6
//! dimensions.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spares_fuzz as _; // the memory budget (global allocator)
use topology::Method;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for q in 1..=6 {
        if let Ok(m) = Method::parse(text, q) {
            let printed = m.to_string();
            assert_eq!(
                Method::parse(&printed, q).expect("printed method parses"),
                m
            );
        }
    }
});
