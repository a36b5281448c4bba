//! The free-node file (version 2 and 1) and a job's `--partition`, `--exclude` and
//! `--nodelist` as job_submit reads them, then the placement of a 2x1x1 box: the first three
//! lines of the input are the job's texts (empty: not given), the rest is the file.
#![no_main]
use std::collections::HashSet;
use std::sync::OnceLock;
use std::time::SystemTime;

use libfuzzer_sys::fuzz_target;
use slurm_plugin_common::ffi::UserText;
use slurm_plugin_common::place::{self, NodeRequest};
use slurm_plugin_common::policy::Policy;
use spares_fuzz as _; // the memory budget (global allocator)
use topology::{Plan, SpareShape};

fn policy() -> &'static Policy {
    static POLICY: OnceLock<Policy> = OnceLock::new();
    POLICY.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("spares-fuzz-free-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("torus.yaml"),
            "name: torus-4x4x2\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\n",
        )
        .unwrap();
        let text = "topology: torus.yaml\nmax_fraction: 0.6\non_no_placement: wait\n";
        Policy::parse(text, &dir.join("policy.yaml")).expect("the fixed policy parses")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut parts = text.splitn(4, '\n');
    let mut field = || {
        parts
            .next()
            .filter(|s| !s.is_empty())
            .map(|s| UserText::Text(s.to_string()))
    };
    let (partition, exclude, nodelist) = (field(), field(), field());
    let file = parts.next().unwrap_or("");
    let p = policy();
    let free = place::parse_free_nodes(file, "fuzz", &p.topology, SystemTime::UNIX_EPOCH).ok();
    if let Some(f) = &free {
        for n in &f.nodes {
            assert!(
                !f.busy.contains(n) && !f.unusable.contains(n),
                "one state a node"
            );
        }
    }
    let Ok(request) = NodeRequest::from_job(
        p,
        free.as_ref(),
        partition.as_ref(),
        exclude.as_ref(),
        nodelist.as_ref(),
    ) else {
        return;
    };
    let spares = SpareShape::parse("3D(1,1)").unwrap();
    let plan = Plan::for_compute(
        &[1, 1, 1],
        Some(&spares),
        &p.topology.unit,
        p.topology.grid.extents(),
    )
    .unwrap();
    if let Ok(placed) = place::place(
        p,
        &plan,
        free.as_ref().map(|f| &f.nodes),
        &HashSet::new(),
        &request,
    ) {
        // The box honours the request.
        let nodes: HashSet<u32> = placed
            .hosts
            .iter()
            .filter_map(|h| p.topology.node(h))
            .collect();
        assert!(
            request.must_contain.is_subset(&nodes),
            "the box holds --nodelist"
        );
        assert!(
            nodes.iter().all(|&n| request.allows(n)),
            "the box keeps to the request"
        );
    }
});
