//! The plugins' option values (`--spares`, `--job-shape`, `--spare-method`) as users type them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use slurm_plugin_common::options::{validate, Opt};
use slurm_plugin_common::spec;
use spares_fuzz as _; // the memory budget (global allocator)

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    for opt in [Opt::Spares, Opt::JobShape, Opt::SpareMethod] {
        let _ = validate(opt, value);
    }
    if let Ok(spares) = spec::parse_spares(value) {
        // What the plugin logs and passes on must parse back to the same value.
        let again = spec::parse_spares(&spares.to_string()).expect("printed spares parse");
        assert_eq!(again, spares);
    }
    if let Ok(m) = spec::parse_spare_method(value) {
        let _ = m.to_string();
    }
});
