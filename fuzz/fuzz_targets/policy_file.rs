//! The site policy file, with its topology read from a fixed directory, then the decision on a
//! few jobs.
#![no_main]
use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use slurm_plugin_common::job_env::SparesOptions;
use slurm_plugin_common::policy::Policy;
use spares_fuzz as _; // the memory budget (global allocator)

/// A directory holding the 4x4x2 test torus, as `torus.yaml`.
fn site() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("spares-fuzz-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("torus.yaml"),
            "name: torus-4x4x2\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\n",
        )
        .unwrap();
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(policy) = Policy::parse(text, &site().join("policy.yaml")) else {
        return;
    };
    for env in [
        [
            "_SLURM_SPANK_OPTION_spares_spares=3D(2,1)",
            "_SLURM_SPANK_OPTION_spares_job_shape=3x3x2",
        ],
        [
            "_SLURM_SPANK_OPTION_spares_spares=auto",
            "_SLURM_SPANK_OPTION_spares_job_shape=2x2x2",
        ],
        ["_SLURM_SPANK_OPTION_spares_job_shape=1x1x1", "X=1"],
    ] {
        if let Ok(req) = SparesOptions::from_env(env).validate() {
            let _ = policy.decide(&req);
        }
    }
});
