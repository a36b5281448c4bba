//! Topology files: this project's YAML and Slurm's topology.yaml (torus3d), and the `unit:`
//! syntax a policy shares with them.
#![no_main]
use libfuzzer_sys::fuzz_target;
use spares_fuzz as _; // the memory budget (global allocator)
use topology::Topology;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(t) = Topology::from_yaml(text, "fuzz.yaml", None) {
        let q = t.grid.dims();
        let _ = t.fully_named();
        let _ = t.box_hosts(&vec![0; q], &vec![1; q]);
        let _ = topology::placement::origins(&t, &vec![1; q]);
    }
    let _ = Topology::from_yaml(text, "fuzz.yaml", Some("pod1"));
});
