//! The plugins' handling of a job's `spank_job_env` (one `KEY=VALUE` a line, as a user sets it
//! through the submit API): option extraction, syntax check, and the decision of a fixed site
//! policy (the 4x4x2 test torus with an auto table).
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use slurm_plugin_common::job_env::SparesOptions;
use slurm_plugin_common::policy::Policy;
use spares_fuzz as _; // the memory budget (global allocator)

fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("spares-fuzz-env-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("torus.yaml"),
            "name: torus-4x4x2\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\n",
        )
        .unwrap();
        let text = "topology: torus.yaml\ndefault_spares: auto\n\
            auto:\n  - {up_to_nodes: 4, spares: '3D(1,1)'}\n  - {spares: '3D(2,1)'}\n\
            max_fraction: 0.6\n";
        Policy::parse(text, &dir.join("policy.yaml")).expect("the fixed policy parses")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let opts = SparesOptions::from_env(text.lines());
    let _ = opts.summary();
    if let Ok(req) = opts.validate() {
        let _ = policy().decide(&req);
    }
});
