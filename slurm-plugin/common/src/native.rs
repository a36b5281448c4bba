//! job_submit under native placement (`placement: native`, Slurm 26.05's `topology/torus3d`):
//! the job is padded to exactly one of the topology.yaml's placements and Slurm places it. No
//! node list is set and no free-node file is read; the job's nodes find the box's origin (which
//! may wrap around the torus) from the nodes Slurm gave it ([`crate::jobmap::build`]).

use topology::grid::format_shape;
use topology::{Method, Plan};

use crate::job_env::option_env_name;
use crate::policy::{Policy, Refusal};

/// The first Slurm release with `topology/torus3d` (26.05, `SLURM_VERSION_NUMBER` 0xMMmmuu).
pub const FIRST_TORUS3D_RELEASE: u32 = 0x1a_05_00;

/// The Slurm this plugin is built for. The unit tests play a 26.05 slurmctld whatever the
/// headers they are built with (the host's 22.05).
#[cfg(not(test))]
const BUILT_FOR: u32 = crate::sys::SLURM_VERSION_NUMBER;
#[cfg(test)]
const BUILT_FOR: u32 = 0x1a_05_05;

/// Whether Slurm release `version` places boxes itself (has `topology/torus3d`).
pub const fn slurm_places_tori(version: u32) -> bool {
    version >= FIRST_TORUS3D_RELEASE
}

/// Whether this job_submit leaves the placement to Slurm: the policy says native and the
/// Slurm it is built for has torus3d. Before 26.05 it pins the box itself (at the
/// placement's anchors), whatever the policy says.
pub fn slurm_places(policy: &Policy) -> bool {
    policy.placement == topology::site_policy::PlacementMode::Native && slurm_places_tori(BUILT_FOR)
}

/// How to change a job Slurm places itself.
#[derive(Debug, Clone, PartialEq)]
pub struct NativePad {
    /// Minimum and maximum node count: the placement's nodes.
    pub nodes: u32,
    /// `spank_job_env` entries: the decided spare shape and compute shape.
    pub decision: Vec<(String, String)>,
    /// One line for slurmctld's log.
    pub summary: String,
    /// What the user reads at submission.
    pub user_message: String,
    /// The partition to set (the policy's `partitions:`, for a job without `--partition`).
    pub partition: Option<String>,
}

/// The padding of a decided plan. Refused when Slurm could answer the node count with a
/// placement of other dimensions than the plan's box: the job's map would not fit the nodes.
pub fn pad(
    policy: &Policy,
    plan: &Plan,
    method: &Method,
    auto_reason: Option<&str>,
) -> Result<NativePad, Refusal> {
    let placements = &policy.topology.slurm_placements;
    if !placements.contains(&plan.box_extents) {
        // The policy's unit is the placements under native placement; a box outside them is
        // a policy bug, said rather than handed to Slurm.
        return Err(Refusal::unavailable(format!(
            "the {} box is no placement of {}",
            format_shape(&plan.box_extents),
            policy.topology.source
        )));
    }
    let nodes = u32::try_from(plan.box_nodes).map_err(|_| {
        Refusal::node_count(format!("a box of {} nodes is too large", plan.box_nodes))
    })?;
    let same_size: Vec<String> = placements
        .iter()
        .filter(|p| *p != &plan.box_extents && placement_nodes(p) == plan.box_nodes)
        .map(|p| format_shape(p))
        .collect();
    if !same_size.is_empty() {
        return Err(Refusal::unavailable(format!(
            "the job's {} box has {nodes} nodes, and Slurm may place {nodes} nodes as {} too (placements of {}), where the job's map would not fit; give a --job-shape whose box has a size of its own, or ask the administrators for placement: pinned",
            format_shape(&plan.box_extents),
            same_size.join(" or "),
            policy.topology.source
        )));
    }
    let name = |o: &str| option_env_name(crate::SPANK_PLUGIN_NAME, o);
    let auto = auto_reason
        .map(|r| format!(" (auto: {r})"))
        .unwrap_or_default();
    Ok(NativePad {
        nodes,
        decision: vec![
            (name("spares"), plan.spares.clone()),
            (name("job-shape"), format_shape(&plan.compute)),
            // Slurm gives whole placements: no node is dead at start. Written empty so a
            // user's own entry never counts (as job_submit does for pinned boxes).
            (name(crate::job_env::DEAD_AT_START), String::new()),
        ],
        summary: format!(
            "spares {}{auto} job-shape {} method {method}: box {} ({nodes} nodes, {} spares), placed by Slurm's torus3d",
            plan.spares,
            format_shape(&plan.compute),
            format_shape(&plan.box_extents),
            plan.spare_nodes,
        ),
        user_message: format!(
            "{}: {} compute nodes as a {} grid, spares {}{auto}: the job gets a {} placement of the {} torus, {nodes} nodes",
            crate::LOG_PREFIX,
            plan.compute_nodes,
            format_shape(&plan.compute),
            plan.spares,
            format_shape(&plan.box_extents),
            policy.topology.name,
        ),
        partition: None,
    })
}

fn placement_nodes(p: &[u32]) -> u64 {
    p.iter().map(|&x| u64::from(x)).product()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::policy::tests::policy_dir;

    /// A policy directory whose topology is Slurm's topology.yaml of the 4x4x2 torus with
    /// `placements` (e.g. "[{dims: {x: 2, y: 2, z: 1}}]"), and a policy of `body`.
    pub fn torus3d_dir(name: &str, placements: &str, body: &str) -> tempfile::TempDir {
        let dir = policy_dir(name, "");
        std::fs::write(
            dir.path().join("topology.yaml"),
            format!(
                "- topology: torus\n  cluster_default: true\n  torus3d:\n    toruses:\n      - name: pod1\n        dims: {{x: 4, y: 4, z: 2}}\n        nodes: node[01-32]\n        placements: {placements}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("policy.yaml"),
            format!("topology: topology.yaml\n{body}"),
        )
        .unwrap();
        dir
    }

    /// configs/slurm-torus3d.yaml's placements.
    pub const TEST_PLACEMENTS: &str =
        "[{dims: {x: 2, y: 2, z: 1}}, {dims: {x: 2, y: 2, z: 2}}, {dims: {x: 4, y: 4, z: 2}}]";

    fn plan_of(p: &Policy, spares: &str, compute: &[u32]) -> Plan {
        let s = topology::SpareShape::parse(spares).unwrap();
        Plan::for_compute(
            compute,
            Some(&s),
            &p.topology.unit,
            p.topology.grid.extents(),
        )
        .unwrap()
    }

    #[test]
    fn only_slurm_26_05_and_later_place_boxes_themselves() {
        // A 22.05 or 24.11 slurmctld has no torus3d: it would hand out any nodes, so the
        // plugin pins even under placement: native.
        assert!(!slurm_places_tori(0x16_05_08));
        assert!(!slurm_places_tori(0x18_0b_05));
        assert!(slurm_places_tori(0x1a_05_05));
        assert!(slurm_places_tori(0x1b_05_00));
    }

    #[test]
    fn a_node_count_two_placements_share_is_refused() {
        let dir = torus3d_dir(
            "native-same-size",
            "[{dims: {x: 2, y: 2, z: 2}}, {dims: {x: 4, y: 2, z: 1}}]",
            "",
        );
        let p = Policy::load(&dir.path().join("policy.yaml")).unwrap();
        let plan = plan_of(&p, "3D(1,1)", &[1, 2, 2]);
        assert_eq!(plan.box_extents, vec![2, 2, 2]);
        let e = pad(&p, &plan, &p.default_method, None).unwrap_err();
        assert!(
            e.0.contains("Slurm may place 8 nodes as 4x2x1 too"),
            "{}",
            e.0
        );
    }

    fn spank(entries: &[&str]) -> Vec<String> {
        entries
            .iter()
            .map(|e| format!("_SLURM_SPANK_OPTION_spares_{e}"))
            .collect()
    }

    #[test]
    fn job_submit_pads_to_the_placement_and_sets_no_node_list() {
        use crate::place::Pins;
        use crate::submit::{decide, Change, JobRequest};
        use std::time::SystemTime;
        // A free-node file that says nothing is free: native placement must not read it.
        let dir = torus3d_dir(
            "native-submit",
            TEST_PLACEMENTS,
            "max_fraction: 0.6\non_no_placement: reject\nfree_nodes_file: free\n",
        );
        std::fs::write(dir.path().join("free"), "\n").unwrap();
        let job = JobRequest {
            spank_env: spank(&["spares=3D(1,1)", "job_shape=1x2x2"]),
            ..Default::default()
        };
        let mut pins = Pins::new();
        let policy = dir.path().join("policy.yaml");
        for _ in 0..3 {
            // The same box again and again: Slurm packs them, no pin piles up.
            let c = decide(&policy, &job, &mut pins, SystemTime::now()).unwrap();
            let Change::PadNative(pad) = c else {
                panic!("{c:?}")
            };
            assert_eq!(pad.nodes, 8);
            assert_eq!(
                pad.decision,
                vec![
                    ("_SLURM_SPANK_OPTION_spares_spares".into(), "3D(1,1)".into()),
                    (
                        "_SLURM_SPANK_OPTION_spares_job_shape".into(),
                        "1x2x2".into()
                    ),
                    (
                        "_SLURM_SPANK_OPTION_spares_dead_at_start".into(),
                        String::new()
                    ),
                ]
            );
            assert_eq!(
                pad.user_message,
                "spares: 4 compute nodes as a 1x2x2 grid, spares 3D(1,1): the job gets a 2x2x2 placement of the pod1 torus, 8 nodes"
            );
        }
        assert!(pins.busy(None).is_empty());
        // The site's partition for jobs with spares: set when the job names none.
        std::fs::write(
            &policy,
            "topology: topology.yaml\nmax_fraction: 0.6\npartitions: [torus]\n",
        )
        .unwrap();
        let c = decide(&policy, &job, &mut pins, SystemTime::now()).unwrap();
        let Change::PadNative(pad) = c else {
            panic!("{c:?}")
        };
        assert_eq!(pad.partition.as_deref(), Some("torus"));
        assert!(
            pad.user_message.ends_with("8 nodes, in partition torus"),
            "{pad:?}"
        );
        let mut flat = job.clone();
        flat.partition = Some(crate::ffi::UserText::Text("flat".into()));
        let m = decide(&policy, &flat, &mut pins, SystemTime::now())
            .unwrap_err()
            .to_string();
        assert!(m.contains("jobs with spares run in partition torus"), "{m}");
        // -N alone with auto: a placement too.
        let job = JobRequest {
            spank_env: spank(&["spares=auto"]),
            min_nodes: Some(2),
            ..Default::default()
        };
        let c = decide(&policy, &job, &mut pins, SystemTime::now()).unwrap();
        let Change::PadNative(pad) = c else {
            panic!("{c:?}")
        };
        assert!([4, 8, 32].contains(&pad.nodes), "{pad:?}");
        // A box that is no placement within the band: refused, naming them.
        let job = JobRequest {
            spank_env: spank(&["spares=3D(1,1)", "job_shape=3x3x1"]),
            ..Default::default()
        };
        let e = decide(&policy, &job, &mut pins, SystemTime::now()).unwrap_err();
        assert_eq!(
            e.code() as u32,
            crate::sys::ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE
        );
        let m = e.to_string();
        assert!(
            m.starts_with("spares: --spares=3D(1,1) with --job-shape=3x3x1 gives a 4x4x2 box")
                && m.contains("2x2x1 (4 nodes), 2x2x2 (8 nodes), 4x4x2 (32 nodes); try -N 2 --spares=3D(1,1) without --job-shape"),
            "{m}"
        );
    }

    #[test]
    fn the_nodes_find_a_wrapped_placement_from_the_nodes_slurm_gave() {
        use crate::jobmap::build;
        use crate::spec::{parse_job_shape, parse_spares};
        let dir = torus3d_dir(
            "native-wrap",
            "[{dims: {x: 2, y: 2, z: 2}}, {dims: {x: 3, y: 3, z: 2}}]",
            "",
        );
        let p = Policy::load(&dir.path().join("policy.yaml")).unwrap();
        let req = crate::job_env::SparesRequest {
            spares: Some(parse_spares("3D(1,1)").unwrap()),
            job_shape: Some(parse_job_shape("2x3x2").unwrap()),
            spare_method: None,
        };
        // The 3x3x2 placement at anchor (2,3,0) wraps in x (2,3,0) and y (3,0,1).
        // node = 1 + x + 4y + 16z.
        let node = |x: u32, y: u32, z: u32| format!("node{:02}", 1 + x + 4 * y + 16 * z);
        let mut names = Vec::new();
        for z in 0..2 {
            for y in [3, 0, 1] {
                for x in [2, 3, 0] {
                    names.push(node(x, y, z));
                }
            }
        }
        let nodes = topology::hostlist::compress(&names);
        let m = build(&p, &req, 9, &nodes, None, &node(2, 3, 0))
            .unwrap()
            .unwrap();
        assert_eq!(m.doc.origin, vec![2, 3, 0]);
        // 3D(1,1) adds its layer along x: the compute grid is box x 0..2, i.e. network x 2
        // and 3; ranks x fastest from the origin.
        assert_eq!(
            &m.rank_hosts[..3],
            [node(2, 3, 0), node(3, 3, 0), node(2, 0, 0)]
        );
        assert_eq!(m.role, crate::jobmap::Role::Compute(0));
        let spare = build(&p, &req, 9, &nodes, None, &node(0, 0, 1))
            .unwrap()
            .unwrap();
        assert_eq!(spare.role, crate::jobmap::Role::Spare);
        // Slurm lists the nodes in name order; any order gives the same map.
        names.reverse();
        let again = build(&p, &req, 9, &names.join(","), None, &node(2, 3, 0))
            .unwrap()
            .unwrap();
        assert_eq!(again.doc, m.doc);
    }

    #[test]
    fn a_pinned_box_on_a_torus3d_topology_starts_at_an_anchor() {
        use crate::place::place;
        use std::collections::HashSet;
        // placement: pinned (Slurm 22.05/24.11 sharing the topology.yaml, or a site's choice):
        // the 2x2x2 placement's anchors are x, y in {0, 2}; with (0,0,0) busy the box must
        // go to (2,0,0), not to (1,0,0), where Slurm 26.05 refuses the node list.
        let dir = torus3d_dir(
            "pinned-anchor",
            TEST_PLACEMENTS,
            "placement: pinned\non_no_placement: reject\n",
        );
        let p = Policy::load(&dir.path().join("policy.yaml")).unwrap();
        let plan = plan_of(&p, "3D(1,1)", &[1, 2, 2]);
        let busy: HashSet<u32> = [0].into_iter().collect();
        let placed = place(&p, &plan, None, &busy, &Default::default()).unwrap();
        assert_eq!(placed.origin, vec![2, 0, 0]);
        assert_eq!(placed.hostlist, "node[03-04,07-08,19-20,23-24]");
    }
}
