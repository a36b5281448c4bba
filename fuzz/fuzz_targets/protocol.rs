//! One request line of the sparesd protocol, as any local user can send it.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spares_fuzz as _; // the memory budget (global allocator)

fuzz_target!(|data: &[u8]| {
    let _ = sparesd::protocol::parse_request(data);
});
