//! Boxes with dead nodes at start ("worm-eaten" boxes): when no box of free nodes exists, a
//! site's policy (`max_unusable_nodes_at_start`) may let job_submit pin a box holding a few
//! unusable (down, drained) nodes, provided the job's method substitutes them from the spares.
//! The job gets the box's usable nodes; the decision names the dead ones
//! ([`crate::job_env::DEAD_AT_START`]) and every node of the job builds the map with them
//! failed before rank 0 starts ([`crate::jobmap::build`]).

use std::collections::HashSet;

use topology::placement::{self, InitialMap};
use topology::{hostlist, Method, Pattern, Plan};

use crate::place::{FreeNodes, NodeRequest};
use crate::policy::{Policy, Refusal};

/// Most candidate boxes whose map is built to check that the spares cover their dead nodes:
/// each check costs a map of the box (job_submit runs under slurmctld's locks).
pub const MAX_BOXES_CHECKED: usize = 16;

/// A box with dead nodes at start.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadStartPlacement {
    pub origin: Vec<u32>,
    /// Host names of the box's usable nodes, in box order.
    pub hosts: Vec<String>,
    /// Compressed hostlist of the usable nodes (for `req_nodes`).
    pub hostlist: String,
    /// Compressed hostlist of the dead nodes (the decision's dead-at-start entry).
    pub dead_hostlist: String,
    /// How many nodes are dead.
    pub dead: usize,
}

/// The first box (in origin order) of free, unpinned nodes the request allows and between 1
/// and the policy's `max_unusable_nodes_at_start` unusable ones whose dead nodes `method`
/// substitutes. `Ok(None)` when the policy allows none or no such box exists; `Err` carries
/// why the boxes that exist cannot start (their dead nodes are more than the spares cover).
pub fn place(
    policy: &Policy,
    plan: &Plan,
    method: &Method,
    free: &FreeNodes,
    pinned: &HashSet<u32>,
    request: &NodeRequest,
) -> Result<Option<DeadStartPlacement>, Refusal> {
    let max = policy.max_unusable_nodes_at_start;
    let t = &policy.topology;
    let must = &request.must_contain;
    // A node the user asked for by name must be one the job gets.
    if max == 0 || must.iter().any(|n| free.unusable.contains(n)) {
        return Ok(None);
    }
    let usable = |n: u32| request.allows(n) && free.nodes.contains(&n) && !pinned.contains(&n);
    let unusable = |n: u32| request.allows(n) && free.unusable.contains(&n);
    let candidates = placement::boxes_with_unusable(
        t,
        &plan.box_extents,
        usable,
        unusable,
        max,
        must,
        MAX_BOXES_CHECKED,
    )
    .map_err(|e| Refusal::unavailable(e.to_string()))?;
    let mut why = None;
    for (origin, dead) in candidates {
        let covered = placement::job_map_with_dead(
            t,
            plan,
            &origin,
            method.clone(),
            Pattern::star(t.grid.dims()),
            false,
            &dead,
            // The re-map starts from the slides' map: the slides decide what can start.
            InitialMap::Slide,
            false,
        );
        match covered {
            Ok(_) => {
                let box_hosts = t.box_hosts(&origin, &plan.box_extents).ok_or_else(|| {
                    Refusal::unavailable("the box has a cell without a node".into())
                })?;
                let dead_names: HashSet<&str> = dead.iter().filter_map(|&n| t.host(n)).collect();
                let hosts: Vec<String> = box_hosts
                    .into_iter()
                    .filter(|h| !dead_names.contains(h.as_str()))
                    .collect();
                let mut dead_sorted: Vec<&str> = dead_names.into_iter().collect();
                dead_sorted.sort_unstable();
                return Ok(Some(DeadStartPlacement {
                    origin,
                    hostlist: hostlist::compress(&hosts),
                    hosts,
                    dead_hostlist: hostlist::compress(&dead_sorted),
                    dead: dead.len(),
                }));
            }
            Err(e) => {
                why.get_or_insert(e.to_string());
            }
        }
    }
    match why {
        Some(why) => Err(Refusal::unavailable(why)),
        None => Ok(None),
    }
}
