//! Slurm hostlist expressions (topology files, the free-node file, node-down reports).
#![no_main]
use libfuzzer_sys::fuzz_target;
use spares_fuzz as _; // the memory budget (global allocator)
use topology::hostlist;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let counted = hostlist::count(text);
    if let Ok(names) = hostlist::expand(text) {
        // Counting agrees with expanding (job_submit checks budgets with the count).
        assert_eq!(counted.ok(), Some(names.len() as u64));
        // Compression keeps the order: expanding it again gives the same list.
        if names.len() <= 4096 {
            let again = hostlist::expand(&hostlist::compress(&names)).expect("compressed parses");
            assert_eq!(again, names);
        }
    }
});
