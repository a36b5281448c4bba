//! Placing a job box on a network: which origins a box may start at, the first one whose nodes
//! are all usable, the origin of a box given its nodes, and the job's map at an origin.
//!
//! One rule makes every process that looks at the same box agree on its origin: along a ring
//! that the box covers whole, every origin names the same nodes, so the origin is 0 there.
//! Elsewhere the nodes of a box determine its origin (a box shorter than a ring is an arc with
//! one start), so the job_submit plugin (which picks the origin) and every node of the job
//! (which only knows the node list) build the same map.

use std::collections::HashSet;

use crate::grid::{format_shape, Grid, MAX_DIMS};
use crate::map::{MapMeta, SpareMap};
use crate::shape::{AllocationUnit, Plan};
use crate::sliding::{Method, Outcome};
use crate::topofile::Topology;
use crate::traffic::Pattern;
use crate::Error;

/// The origins a box of `extents` may start at on `topology`, lowest first (dimension 0
/// fastest): along a mesh `0..=E-b`; along a ring every coordinate (the box may wrap), or only 0
/// when the box covers the ring; on a block unit only block boundaries; for a placement of
/// Slurm's torus3d only its anchors.
pub fn origins(topology: &Topology, extents: &[u32]) -> Result<Vec<Vec<u32>>, Error> {
    let net = &topology.grid;
    let q = net.dims();
    if extents.len() != q {
        return Err(Error::Invalid(format!(
            "box {} has {} dimensions; the network has {q}",
            format_shape(extents),
            extents.len()
        )));
    }
    let mut per_dim: Vec<Vec<u32>> = Vec::with_capacity(q);
    for d in 0..q {
        let (e, b) = (net.extent(d), extents[d]);
        if b == 0 || b > e {
            return Err(Error::DoesNotFit {
                compute: format_shape(extents),
                spares: "-".into(),
                needed: format_shape(extents),
                network: format_shape(net.extents()),
            });
        }
        // A box of a Slurm torus3d placement starts only at that placement's anchors:
        // Slurm refuses a node list elsewhere.
        if let Some(i) = topology.slurm_placements.iter().position(|p| p == extents) {
            per_dim.push(topology.slurm_anchors[i][d].clone());
            continue;
        }
        let step = match &topology.unit {
            AllocationUnit::Block(bl) => bl.get(d).copied().unwrap_or(1).max(1),
            _ => 1,
        };
        let last = if b == e {
            0
        } else if net.wraps(d) {
            e - 1
        } else {
            e - b
        };
        per_dim.push((0..=last).step_by(step as usize).collect());
    }
    // Odometer over the per-dimension choices, dimension 0 fastest.
    let total: usize = per_dim.iter().map(Vec::len).product();
    let mut out = Vec::with_capacity(total);
    let mut idx = vec![0usize; q];
    for _ in 0..total {
        out.push((0..q).map(|d| per_dim[d][idx[d]]).collect());
        for d in 0..q {
            idx[d] += 1;
            if idx[d] < per_dim[d].len() {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok(out)
}

/// Network nodes of the box at `origin` in box order (dimension 0 fastest), wrapping on rings;
/// `None` if a cell of the box has no node (a hole of the topology).
pub fn box_nodes(topology: &Topology, origin: &[u32], extents: &[u32]) -> Option<Vec<u32>> {
    let net = &topology.grid;
    let cells = Grid::mesh(extents).ok()?;
    (0..cells.len())
        .map(|i| {
            let local = cells.coord(i);
            let mut c = [0; MAX_DIMS];
            for d in 0..net.dims() {
                c[d] = (origin[d] + local[d]) % net.extent(d);
            }
            let n = net.index(&c);
            topology.host(n).map(|_| n)
        })
        .collect()
}

/// The first origin (in [`origins`] order) whose box has a node in every cell and only nodes
/// for which `usable` holds.
///
/// Runs in time linear in the network's size whatever the box (slurmctld calls it for every
/// submission, under its locks): checking each origin's box cell by cell cost origins x box
/// cells, billions of steps for a large box on a busy network.
pub fn find_box(
    topology: &Topology,
    extents: &[u32],
    usable: impl Fn(u32) -> bool,
) -> Result<Option<Vec<u32>>, Error> {
    let candidates = origins(topology, extents)?;
    let blocked = blocked_cells(topology, extents, usable);
    let net = &topology.grid;
    Ok(candidates.into_iter().find(|origin| {
        let c = net
            .checked_coord(origin)
            .expect("origins lie in the network");
        blocked[net.index(&c) as usize] == 0
    }))
}

/// The first origin (in [`origins`] order) whose box has only `usable` nodes (as
/// [`find_box`]) and holds every node of `must_contain` (a job's `--nodelist`). Linear in
/// the network's size, as [`find_box`].
pub fn find_box_containing(
    topology: &Topology,
    extents: &[u32],
    usable: impl Fn(u32) -> bool,
    must_contain: &HashSet<u32>,
) -> Result<Option<Vec<u32>>, Error> {
    if must_contain.is_empty() {
        return find_box(topology, extents, usable);
    }
    let candidates = origins(topology, extents)?;
    let cells: u64 = extents.iter().map(|&e| u64::from(e)).product();
    if must_contain.len() as u64 > cells {
        return Ok(None);
    }
    let blocked = blocked_cells(topology, extents, usable);
    // Cells of each box that are not required nodes: the box holds all of them exactly when
    // that leaves as many cells as there are required nodes.
    let not_required = blocked_cells(topology, extents, |n| must_contain.contains(&n));
    let net = &topology.grid;
    Ok(candidates.into_iter().find(|origin| {
        let c = net
            .checked_coord(origin)
            .expect("origins lie in the network");
        let i = net.index(&c) as usize;
        blocked[i] == 0 && cells - u64::from(not_required[i]) == must_contain.len() as u64
    }))
}

/// A box's origin and its unusable nodes, ascending.
pub type BoxWithUnusable = (Vec<u32>, Vec<u32>);

/// Up to `limit` origins (in [`origins`] order) whose box has a node in every cell, only nodes
/// that are `usable` or `unusable`, between 1 and `max_unusable` of them `unusable`, and every
/// node of `must_contain`; each with its unusable nodes, ascending. Linear in the network's
/// size, as [`find_box`], plus the boxes returned.
pub fn boxes_with_unusable(
    topology: &Topology,
    extents: &[u32],
    usable: impl Fn(u32) -> bool,
    unusable: impl Fn(u32) -> bool,
    max_unusable: u32,
    must_contain: &HashSet<u32>,
    limit: usize,
) -> Result<Vec<BoxWithUnusable>, Error> {
    let candidates = origins(topology, extents)?;
    let cells: u64 = extents.iter().map(|&e| u64::from(e)).product();
    if max_unusable == 0 || limit == 0 || must_contain.len() as u64 > cells {
        return Ok(Vec::new());
    }
    let blocked = blocked_cells(topology, extents, |n| usable(n) || unusable(n));
    // Holes count here too, but a box with holes is blocked already.
    let dead = blocked_cells(topology, extents, |n| !unusable(n));
    let not_required = if must_contain.is_empty() {
        None
    } else {
        Some(blocked_cells(topology, extents, |n| {
            must_contain.contains(&n)
        }))
    };
    let net = &topology.grid;
    let mut out = Vec::new();
    for origin in candidates {
        let c = net
            .checked_coord(&origin)
            .expect("origins lie in the network");
        let i = net.index(&c) as usize;
        let holds_required = not_required
            .as_ref()
            .is_none_or(|nr| cells - u64::from(nr[i]) == must_contain.len() as u64);
        if blocked[i] != 0 || dead[i] == 0 || dead[i] > max_unusable || !holds_required {
            continue;
        }
        let Some(nodes) = box_nodes(topology, &origin, extents) else {
            continue;
        };
        let mut bad: Vec<u32> = nodes.into_iter().filter(|&n| unusable(n)).collect();
        bad.sort_unstable();
        out.push((origin, bad));
        if out.len() >= limit {
            break;
        }
    }
    Ok(out)
}

/// For every network node taken as a box origin, how many cells of the box there are holes or
/// not `usable` (along a mesh dimension the box is cut at the edge; such origins are never
/// candidates). One sliding window per dimension: O(nodes x dimensions).
fn blocked_cells(topology: &Topology, extents: &[u32], usable: impl Fn(u32) -> bool) -> Vec<u32> {
    let net = &topology.grid;
    let mut count: Vec<u32> = (0..net.len())
        .map(|n| u32::from(topology.host(n).is_none() || !usable(n)))
        .collect();
    let mut line: Vec<u32> = Vec::new();
    for d in 0..net.dims() {
        let (e, b, stride) = (net.extent(d), extents[d], net.stride(d));
        let at = |i: u32, x: u32| (i + x * stride) as usize;
        for start in 0..net.len() {
            if (start / stride) % e != 0 {
                continue;
            }
            line.clear();
            line.extend((0..e).map(|x| count[at(start, x)]));
            let value = |x: u32| match (x < e, net.wraps(d)) {
                (true, _) => line[x as usize],
                (false, true) => line[(x % e) as usize],
                (false, false) => 0,
            };
            let mut sum: u32 = (0..b).map(value).sum();
            for x in 0..e {
                count[at(start, x)] = sum;
                sum = sum + value(x + b) - value(x);
            }
        }
    }
    count
}

/// The origin of the box of `extents` whose nodes are exactly `nodes` (any order), if any.
pub fn origin_of(
    topology: &Topology,
    extents: &[u32],
    nodes: &[u32],
) -> Result<Option<Vec<u32>>, Error> {
    let want: HashSet<u32> = nodes.iter().copied().collect();
    let size: u64 = extents.iter().map(|&e| u64::from(e)).product();
    if want.len() as u64 != size || want.len() != nodes.len() {
        return Ok(None);
    }
    find_box(topology, extents, |n| want.contains(&n))
}

/// The extents of the box whose nodes are exactly `nodes`, if they form one ([`origin_of`] then
/// gives its origin): along
/// each dimension the nodes' coordinates must cover a whole ring or one contiguous arc (a
/// segment on a mesh), and every cell of that box must be one of `nodes` ([`origin_of`]).
pub fn box_of(topology: &Topology, nodes: &[u32]) -> Result<Option<Vec<u32>>, Error> {
    let net = &topology.grid;
    if nodes.is_empty() || nodes.iter().any(|&n| n >= net.len()) {
        return Ok(None);
    }
    let mut extents = Vec::with_capacity(net.dims());
    for d in 0..net.dims() {
        let e = net.extent(d);
        let mut seen = vec![false; e as usize];
        for &n in nodes {
            seen[net.coord(n)[d] as usize] = true;
        }
        let covered = seen.iter().filter(|&&s| s).count() as u32;
        // The arc starts after an uncovered coordinate (or at 0 on a mesh or a full ring).
        let start = if covered == e || !net.wraps(d) {
            seen.iter().position(|&s| s).unwrap_or(0) as u32
        } else {
            (0..e)
                .find(|&x| seen[x as usize] && !seen[((x + e - 1) % e) as usize])
                .unwrap_or(0)
        };
        let contiguous = (0..covered).all(|i| {
            let x = if net.wraps(d) {
                (start + i) % e
            } else {
                start + i
            };
            x < e && seen[x as usize]
        });
        if !contiguous {
            return Ok(None);
        }
        extents.push(covered);
    }
    Ok(origin_of(topology, &extents, nodes)?.map(|_| extents))
}

/// Ring flags of a box: a box dimension is a ring only where it covers a whole ring of the
/// network (or where the topology's isolated boxes are tori); elsewhere its slides do not go
/// around, and its messages are routed on the network ([`job_map`]). A box that leaves a
/// mesh dimension is an error.
pub fn box_wrap(topology: &Topology, origin: &[u32], extents: &[u32]) -> Result<Vec<bool>, Error> {
    let net = &topology.grid;
    let q = net.dims();
    if origin.len() != q || extents.len() != q {
        return Err(Error::Invalid(format!(
            "origin and box need {q} entries for the {}-dimensional network",
            q
        )));
    }
    for d in 0..q {
        let (e, o, b) = (net.extent(d), origin[d], extents[d]);
        if o >= e || b > e || (!net.wraps(d) && o + b > e) {
            return Err(Error::Invalid(format!(
                "a {} box at origin {:?} leaves the {} network",
                format_shape(extents),
                origin,
                format_shape(net.extents())
            )));
        }
    }
    Ok(topology.box_links.box_wrap(net, extents))
}

/// The failure-free map of a planned job at `origin`, with the metadata of its map document
/// (host names of the box in box order, from the topology).
pub fn job_map(
    topology: &Topology,
    plan: &Plan,
    origin: &[u32],
    method: Method,
    pattern: Pattern,
    periodic: bool,
) -> Result<(SpareMap, MapMeta), Error> {
    let wrap = box_wrap(topology, origin, &plan.box_extents)?;
    let mut map = SpareMap::from_plan(plan, &wrap)?;
    map.set_rings(&topology.box_links.rings(&topology.grid, &plan.box_extents))?;
    let meta = MapMeta {
        topology: Some(topology.name.clone()),
        origin: origin.to_vec(),
        spares: plan.spares.clone(),
        method,
        pattern,
        periodic,
        hosts: topology.box_hosts(origin, &plan.box_extents),
    };
    Ok((map, meta))
}

/// How the map of a box with dead nodes at start is computed (site policy `initial_map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialMap {
    /// The dead nodes fail one after the other, by the job's method.
    Slide,
    /// As `Slide`, then [`remap`](crate::remap::remap) with this iteration cap and seed 0
    /// (no time limit: every node of the job must compute the same map).
    Remap { iterations: u64 },
}

/// A dead node of a box at start and what its failure did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailure {
    /// Box index of the dead node.
    pub node: u32,
    pub outcome: Outcome,
    /// The largest link load before and after this failure, when asked for.
    pub collisions: Option<(u32, u32)>,
}

/// The map of a job whose box has dead nodes before rank 0 starts.
#[derive(Debug, Clone)]
pub struct StartMap {
    pub map: SpareMap,
    pub meta: MapMeta,
    /// The dead nodes in the order they failed (ascending box index) with their outcomes.
    pub failures: Vec<StartFailure>,
    /// Ranks the re-map moved after the slides (`InitialMap::Remap` only), ascending.
    pub remapped: Option<Vec<u32>>,
}

/// The job's map at `origin` when the network nodes `dead` of its box are dead at start: the
/// failure-free map with those nodes failed by `method` in ascending box index (a fixed order,
/// so every node of the job builds the same map whatever order it was told them in), then
/// re-mapped if `initial` says so. Refused when more nodes are dead than the box has spares,
/// when a dead node is not in the box, or when the method cannot substitute one of them (the
/// spare shape does not cover them). `collisions` asks for each failure's largest link load
/// before and after (link loads kept for the whole box: job_submit's check of a box skips it).
#[allow(clippy::too_many_arguments)]
pub fn job_map_with_dead(
    topology: &Topology,
    plan: &Plan,
    origin: &[u32],
    method: Method,
    pattern: Pattern,
    periodic: bool,
    dead: &[u32],
    initial: InitialMap,
    collisions: bool,
) -> Result<StartMap, Error> {
    // Checked before anything is built: a job can never start with more dead nodes than spares.
    if dead.len() as u64 > plan.spare_nodes {
        return Err(Error::Invalid(format!(
            "{} dead nodes at start, more than the {} spare nodes of spares {}",
            dead.len(),
            plan.spare_nodes,
            plan.spares
        )));
    }
    let (mut map, meta) = job_map(
        topology,
        plan,
        origin,
        method.clone(),
        pattern.clone(),
        periodic,
    )?;
    let in_box = box_nodes(topology, origin, &plan.box_extents)
        .ok_or_else(|| Error::Invalid("the box has a cell without a node".into()))?;
    // Network node -> box index: one pass over the box, whatever the number of dead nodes.
    let box_index: std::collections::HashMap<u32, u32> = in_box
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, i as u32))
        .collect();
    let mut box_dead: Vec<u32> = Vec::with_capacity(dead.len());
    for &n in dead {
        let i = *box_index.get(&n).ok_or_else(|| {
            Error::Invalid(format!(
                "dead node {} is not in the {} box at {:?}",
                topology
                    .host(n)
                    .map_or_else(|| format!("#{n}"), str::to_string),
                format_shape(&plan.box_extents),
                origin
            ))
        })?;
        box_dead.push(i);
    }
    box_dead.sort_unstable();
    box_dead.dedup();
    let track = collisions && !box_dead.is_empty();
    if track || method.zero_rule() == crate::sliding::ZeroRule::LeastLoad {
        map.track_traffic(&pattern, periodic);
    }
    let load = |m: &SpareMap| m.tracked_traffic().map_or(0, |t| t.collisions);
    let mut failures = Vec::with_capacity(box_dead.len());
    for &node in &box_dead {
        let before = load(&map);
        let outcome = crate::sliding::fail(&mut map, node, &method)?;
        if outcome == Outcome::JobLost {
            let name = |b: u32| {
                meta.hosts
                    .as_ref()
                    .map_or_else(|| format!("#{b}"), |h| h[b as usize].clone())
            };
            let names: Vec<String> = box_dead.iter().map(|&b| name(b)).collect();
            return Err(Error::Invalid(format!(
                "spares {} with method {method} cannot substitute dead node {} (dead at start: {})",
                plan.spares,
                name(node),
                names.join(", ")
            )));
        }
        failures.push(StartFailure {
            node,
            outcome,
            collisions: track.then(|| (before, load(&map))),
        });
    }
    map.untrack_traffic();
    let remapped = match initial {
        InitialMap::Slide => None,
        InitialMap::Remap { iterations } if !box_dead.is_empty() => {
            let budget = crate::remap::Budget {
                max_moved: None,
                time_limit: None,
                iterations: Some(iterations),
                seed: 0,
            };
            let r = crate::remap::remap(&map, &pattern, periodic, &budget)?;
            map = r.map;
            Some(r.moved)
        }
        InitialMap::Remap { .. } => Some(Vec::new()),
    };
    Ok(StartMap {
        map,
        meta,
        failures,
        remapped,
    })
}

/// Host names of the compute nodes in rank order (the lines of a `SLURM_HOSTFILE` for
/// `srun --distribution=arbitrary`); `None` when the map has no host names.
pub fn rank_hosts(map: &SpareMap, meta: &MapMeta) -> Option<Vec<String>> {
    let hosts = meta.hosts.as_ref()?;
    Some(
        map.rank_nodes()
            .iter()
            .map(|&n| hosts[n as usize].clone())
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::SpareShape;

    fn torus() -> Topology {
        Topology::from_yaml(
            "name: t\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\n",
            "t.yaml",
            None,
        )
        .unwrap()
    }

    fn nodes(t: &Topology, names: &[&str]) -> Vec<u32> {
        names.iter().map(|n| t.node(n).unwrap()).collect()
    }

    #[test]
    fn box_of_finds_boxes_and_nothing_else() {
        let t = torus();
        let b = |names: &[&str]| box_of(&t, &nodes(&t, names)).unwrap();
        let hosts = |h: &str| hostlist_nodes(&t, h);
        // The lower layer: 4x4x1 at the origin.
        let lower = hosts("node[01-16]");
        assert_eq!(box_of(&t, &lower).unwrap(), Some(vec![4, 4, 1]));
        // A 2x1x1 box wrapping around the x ring: x = 3, 0.
        assert_eq!(b(&["node04", "node01"]), Some(vec![2, 1, 1]));
        let wrapped = nodes(&t, &["node04", "node01"]);
        assert_eq!(
            origin_of(&t, &[2, 1, 1], &wrapped).unwrap(),
            Some(vec![3, 0, 0])
        );
        // Two nodes that are no box (a gap along x), and a box with a missing cell.
        assert_eq!(b(&["node01", "node03"]), None);
        assert_eq!(b(&["node01", "node02", "node05"]), None);
        assert_eq!(b(&[]), None);
    }

    fn hostlist_nodes(t: &Topology, expr: &str) -> Vec<u32> {
        crate::hostlist::expand(expr)
            .unwrap()
            .iter()
            .map(|n| t.node(n).unwrap())
            .collect()
    }

    #[test]
    fn boxes_hold_the_nodes_they_must_contain() {
        let t = torus();
        let all = |_| true;
        let want = |names: &[&str]| -> HashSet<u32> { nodes(&t, names).into_iter().collect() };
        // node06 is (1,1,0): the first 2x2x1 box holding it starts at (0,0,0); node05
        // (0,1,0) with node08 (3,1,0) needs a box that wraps around x from (3,0,0) or (3,1,0).
        let o = find_box_containing(&t, &[2, 2, 1], all, &want(&["node06"])).unwrap();
        assert_eq!(o, Some(vec![0, 0, 0]));
        let o = find_box_containing(&t, &[2, 2, 1], all, &want(&["node05", "node08"])).unwrap();
        assert_eq!(o, Some(vec![3, 0, 0]));
        // Usable nodes still rule: node01 (0,0,0) and node04 (3,0,0) out, so y starts at 1.
        let out = want(&["node01", "node04"]);
        let o = find_box_containing(
            &t,
            &[2, 2, 1],
            |n| !out.contains(&n),
            &want(&["node05", "node08"]),
        )
        .unwrap();
        assert_eq!(o, Some(vec![3, 1, 0]));
        // Too far apart for the box, or more nodes than it has: none.
        let far = want(&["node01", "node11"]);
        assert_eq!(
            find_box_containing(&t, &[2, 2, 1], all, &far).unwrap(),
            None
        );
        let many = want(&["node01", "node02", "node03", "node05", "node06"]);
        assert_eq!(
            find_box_containing(&t, &[2, 2, 1], all, &many).unwrap(),
            None
        );
        // Nothing to contain: find_box.
        assert_eq!(
            find_box_containing(&t, &[2, 2, 1], all, &HashSet::new()).unwrap(),
            find_box(&t, &[2, 2, 1], all).unwrap()
        );
    }

    #[test]
    fn a_box_covering_a_ring_starts_at_zero_there() {
        let t = torus();
        let o = origins(&t, &[4, 4, 2]).unwrap();
        assert_eq!(o, vec![vec![0, 0, 0]]);
        let o = origins(&t, &[2, 4, 1]).unwrap();
        // x: any of 4 (ring, box shorter), y: 0 (covered), z: any of 2.
        assert_eq!(o.len(), 8);
        assert_eq!(o[0], vec![0, 0, 0]);
        assert_eq!(o[1], vec![1, 0, 0]);
        assert_eq!(o[4], vec![0, 0, 1]);
        assert!(origins(&t, &[5, 1, 1]).is_err());
        assert!(origins(&t, &[1, 1]).is_err());
    }

    #[test]
    fn meshes_do_not_wrap_and_blocks_start_on_boundaries() {
        let mut t = Topology::from_yaml(
            "name: m\nextents: [6, 2]\nlinks: mesh\nnodes: m[00-11]\n",
            "m.yaml",
            None,
        )
        .unwrap();
        assert_eq!(origins(&t, &[4, 1]).unwrap().len(), 3 * 2);
        t.unit = AllocationUnit::Block(vec![2, 1]);
        let o = origins(&t, &[4, 1]).unwrap();
        assert_eq!(o, vec![vec![0, 0], vec![2, 0], vec![0, 1], vec![2, 1]]);
    }

    #[test]
    fn the_first_free_box_is_found_and_busy_nodes_are_avoided() {
        let t = torus();
        let busy: HashSet<u32> = nodes(&t, &["node01", "node06"]).into_iter().collect();
        // 2x1x1 boxes: (0,0,0) holds node01; (1,0,0) is node02,node03: free.
        let o = find_box(&t, &[2, 1, 1], |n| !busy.contains(&n)).unwrap();
        assert_eq!(o, Some(vec![1, 0, 0]));
        // A box that wraps: 2x1x1 at x=3 is node04,node01.
        let b = box_nodes(&t, &[3, 0, 0], &[2, 1, 1]).unwrap();
        assert_eq!(b, nodes(&t, &["node04", "node01"]));
        // The whole torus is not free.
        assert_eq!(
            find_box(&t, &[4, 4, 2], |n| !busy.contains(&n)).unwrap(),
            None
        );
        assert_eq!(
            find_box(&t, &[4, 4, 2], |_| true).unwrap(),
            Some(vec![0, 0, 0])
        );
    }

    /// The first usable origin by checking every cell of every candidate box.
    fn find_box_cell_by_cell(
        t: &Topology,
        extents: &[u32],
        usable: impl Fn(u32) -> bool,
    ) -> Option<Vec<u32>> {
        origins(t, extents).unwrap().into_iter().find(|o| {
            box_nodes(t, o, extents).is_some_and(|nodes| nodes.iter().all(|&n| usable(n)))
        })
    }

    #[test]
    fn the_sliding_window_search_agrees_with_checking_every_cell() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for round in 0..300 {
            let q = rng.gen_range(1..=3);
            let ext: Vec<u32> = (0..q).map(|_| rng.gen_range(1..=6)).collect();
            let links: Vec<&str> = (0..q)
                .map(|_| if rng.gen_bool(0.5) { "ring" } else { "mesh" })
                .collect();
            let n: u32 = ext.iter().product();
            let text = format!(
                "extents: {ext:?}\nlinks: [{}]\nnodes: n[1-{n}]\n",
                links.join(", ")
            );
            let mut t = Topology::from_yaml(&text, "r.yaml", None).unwrap();
            if round % 3 == 0 {
                let block: Vec<u32> = ext.iter().map(|&e| rng.gen_range(1..=e)).collect();
                t.unit = AllocationUnit::Block(block);
            }
            let busy: HashSet<u32> = (0..n).filter(|_| rng.gen_bool(0.15)).collect();
            let b: Vec<u32> = ext.iter().map(|&e| rng.gen_range(1..=e)).collect();
            let usable = |x: u32| !busy.contains(&x);
            assert_eq!(
                find_box(&t, &b, usable).unwrap(),
                find_box_cell_by_cell(&t, &b, usable),
                "{text} box {b:?} busy {busy:?}"
            );
        }
    }

    #[test]
    fn the_search_looks_at_each_node_once_whatever_the_box() {
        // Checking every cell of every origin asked about each node once per box holding it:
        // 48^3 x 47^3 steps for a 47x47x47 box, seconds under slurmctld's locks.
        let t = Topology::from_yaml(
            "extents: [12, 12, 12]\nlinks: ring\nnodes: n[1-1728]\n",
            "k.yaml",
            None,
        )
        .unwrap();
        let calls = std::cell::Cell::new(0u64);
        // The busy node (10,10,10) is near the end of the first eleven boxes.
        let busy = t.grid.index(&t.grid.checked_coord(&[10, 10, 10]).unwrap());
        let found = find_box(&t, &[11, 11, 11], |n| {
            calls.set(calls.get() + 1);
            n != busy
        })
        .unwrap();
        assert_eq!(found, Some(vec![11, 0, 0]));
        // Once per node (cell by cell: 15,807 calls here).
        assert_eq!(calls.get(), 1728);
    }

    #[test]
    fn a_box_is_found_again_from_its_nodes() {
        let t = torus();
        for origin in origins(&t, &[3, 2, 1]).unwrap() {
            let mut n = box_nodes(&t, &origin, &[3, 2, 1]).unwrap();
            n.reverse(); // any order
            assert_eq!(origin_of(&t, &[3, 2, 1], &n).unwrap(), Some(origin));
        }
        let all: Vec<u32> = (0..32).collect();
        assert_eq!(
            origin_of(&t, &[4, 4, 2], &all).unwrap(),
            Some(vec![0, 0, 0])
        );
        // Not a box, or the wrong size.
        let n = nodes(&t, &["node01", "node03"]);
        assert_eq!(origin_of(&t, &[2, 1, 1], &n).unwrap(), None);
        assert_eq!(origin_of(&t, &[3, 1, 1], &n).unwrap(), None);
    }

    #[test]
    fn the_map_of_the_test_job_matches_the_spec() {
        // --spares=3D(2,1) --job-shape=3x3x2 on the 4x4x2 torus: the 3x3x2 corner computes,
        // the other 14 nodes are spares, rank 0 on node01, x fastest.
        let t = torus();
        let shape = SpareShape::parse("3D(2,1)").unwrap();
        let plan = Plan::for_compute(&[3, 3, 2], Some(&shape), &t.unit, t.grid.extents()).unwrap();
        assert_eq!(plan.box_extents, vec![4, 4, 2]);
        let origin = find_box(&t, &plan.box_extents, |_| true).unwrap().unwrap();
        let (map, meta) = job_map(
            &t,
            &plan,
            &origin,
            Method::hybrid(3),
            Pattern::star(3),
            false,
        )
        .unwrap();
        assert_eq!(map.grid().wrap(), &[true, true, true]);
        let hosts = rank_hosts(&map, &meta).unwrap();
        assert_eq!(hosts.len(), 18);
        assert_eq!(&hosts[..4], ["node01", "node02", "node03", "node05"]);
        assert_eq!(hosts[9], "node17");
        assert_eq!(map.free_nodes().len(), 14);
        // A box that wraps in x is a mesh there.
        let w = box_wrap(&t, &[3, 0, 0], &[2, 4, 2]).unwrap();
        assert_eq!(w, vec![false, true, true]);
        assert!(box_wrap(&t, &[4, 0, 0], &[1, 1, 1]).is_err());
    }

    #[test]
    fn dead_nodes_at_start_fail_in_box_order_by_the_job_s_method() {
        // The test job (3D(2,1) on 3x3x2, the whole 4x4x2 torus) with node06 (rank 4) and
        // node20 dead: the map equals the failure-free map after fail(node06), fail(node20),
        // whatever order the nodes are named in.
        let t = torus();
        let plan = plan_on(&t, &[3, 3, 2], "3D(2,1)");
        let origin = [0, 0, 0];
        let dead = nodes(&t, &["node20", "node06"]);
        let built = |dead: &[u32]| {
            job_map_with_dead(
                &t,
                &plan,
                &origin,
                Method::hybrid(3),
                Pattern::star(3),
                false,
                dead,
                InitialMap::Slide,
                true,
            )
            .unwrap()
        };
        let start = built(&dead);
        let (mut want, _) = job_map(
            &t,
            &plan,
            &origin,
            Method::hybrid(3),
            Pattern::star(3),
            false,
        )
        .unwrap();
        let mut sorted = dead.clone();
        sorted.sort_unstable();
        let load = |m: &SpareMap| m.traffic(&Pattern::star(3), false).collisions;
        assert_eq!(start.failures[0].collisions.map(|c| c.0), Some(load(&want)));
        for &n in &sorted {
            crate::sliding::fail(&mut want, n, &Method::hybrid(3)).unwrap();
        }
        assert_eq!(start.failures[1].collisions.map(|c| c.1), Some(load(&want)));
        assert_eq!(start.map.rank_nodes(), want.rank_nodes());
        assert_eq!(start.map.dead_nodes(), sorted);
        assert_eq!(
            start.failures.iter().map(|f| f.node).collect::<Vec<_>>(),
            sorted
        );
        assert!(start.failures[0]
            .outcome
            .moves()
            .iter()
            .any(|m| m.rank == 4));
        assert_eq!(built(&sorted).map.rank_nodes(), start.map.rank_nodes());
        assert!(start.remapped.is_none());
        // No dead node: the failure-free map.
        assert_eq!(built(&[]).map.rank_nodes(), {
            let (m, _) = job_map(
                &t,
                &plan,
                &origin,
                Method::hybrid(3),
                Pattern::star(3),
                false,
            )
            .unwrap();
            m.rank_nodes().to_vec()
        });
    }

    #[test]
    fn a_start_the_spares_cannot_cover_is_refused() {
        let t = torus();
        let plan = plan_on(&t, &[3, 3, 2], "3D(2,1)");
        let try_dead = |names: &[&str], method: &str| {
            job_map_with_dead(
                &t,
                &plan,
                &[0, 0, 0],
                Method::parse(method, 3).unwrap(),
                Pattern::star(3),
                false,
                &nodes(&t, names),
                InitialMap::Slide,
                false,
            )
            .map(|s| s.map.dead_nodes().len())
            .map_err(|e| e.to_string())
        };
        // More dead nodes than spares: refused before any map is built.
        let all: Vec<String> = (1..=15).map(|i| format!("node{i:02}")).collect();
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        let e = try_dead(&all, "hybrid").unwrap_err();
        assert_eq!(
            e,
            "15 dead nodes at start, more than the 14 spare nodes of spares 3D(2,1)"
        );
        assert_eq!(try_dead(&["node01", "node02"], "hybrid"), Ok(2));
        // 3D(1,1): one spare plane x=3 (a 4x3x2 box); node01 and node02 (ranks 0 and 1) share
        // the one spare of their x line, node04, and 1D slides only along lines.
        let thin = plan_on(&t, &[3, 3, 2], "3D(1,1)");
        let e = job_map_with_dead(
            &t,
            &thin,
            &[0, 0, 0],
            Method::parse("1D", 3).unwrap(),
            Pattern::star(3),
            false,
            &nodes(&t, &["node02", "node01"]),
            InitialMap::Slide,
            false,
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            e,
            "spares 3D(1,1) with method 1D cannot substitute dead node node02 (dead at start: node01, node02)"
        );
        let other = Topology::from_yaml(
            "name: big\nextents: [8, 4, 2]\nlinks: ring\nnodes: n[01-64]\n",
            "b.yaml",
            None,
        )
        .unwrap();
        let e = job_map_with_dead(
            &other,
            &plan,
            &[0, 0, 0],
            Method::hybrid(3),
            Pattern::star(3),
            false,
            &[other.node("n05").unwrap()],
            InitialMap::Slide,
            false,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("dead node n05 is not in the 4x4x2 box"),
            "{e}"
        );
    }

    #[test]
    fn a_remapped_start_is_never_worse_than_the_slides_and_the_same_on_every_node() {
        let t = Topology::from_yaml(
            "name: m\nextents: [6, 6, 4]\nlinks: mesh\nnodes: n[001-144]\n",
            "m.yaml",
            None,
        )
        .unwrap();
        let plan = plan_on(&t, &[5, 5, 3], "3D(1,1)");
        let dead = nodes(&t, &["n008", "n015", "n050", "n087"]);
        let build = |initial| {
            job_map_with_dead(
                &t,
                &plan,
                &[0, 0, 0],
                Method::hybrid(3),
                Pattern::star(3),
                false,
                &dead,
                initial,
                false,
            )
            .unwrap()
        };
        let slid = build(InitialMap::Slide);
        let remap = InitialMap::Remap { iterations: 20_000 };
        let a = build(remap);
        let b = build(remap);
        assert_eq!(a.map.rank_nodes(), b.map.rank_nodes());
        assert_eq!(a.map.dead_nodes(), slid.map.dead_nodes());
        let load = |m: &SpareMap| m.traffic(&Pattern::star(3), false).collisions;
        assert!(load(&a.map) <= load(&slid.map));
        // A bijection onto alive nodes.
        let mut used: Vec<u32> = a.map.rank_nodes().to_vec();
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), 75);
        assert!(used.iter().all(|n| !slid.map.dead_nodes().contains(n)));
        let moved = a.remapped.as_ref().unwrap();
        let differ = (0..75u32)
            .filter(|&r| a.map.node_of(r) != slid.map.node_of(r))
            .collect::<Vec<_>>();
        assert_eq!(moved, &differ);
    }

    #[test]
    fn boxes_with_a_few_unusable_nodes_are_listed_in_origin_order() {
        let t = torus();
        let set = |names: &[&str]| -> HashSet<u32> { nodes(&t, names).into_iter().collect() };
        let down = set(&["node01", "node03"]);
        let busy = set(&["node06"]);
        let usable = |n: u32| !down.contains(&n) && !busy.contains(&n);
        let unusable = |n: u32| down.contains(&n);
        let list = |max, must: &HashSet<u32>, limit| {
            boxes_with_unusable(&t, &[2, 1, 1], usable, unusable, max, must, limit).unwrap()
        };
        // 2x1x1 boxes of row y=0: (0,0,0) node01,02; (1,0,0) node02,03; (2,0,0) node03,04;
        // (3,0,0) node04,node01. Each holds one down node.
        let found = list(1, &HashSet::new(), 10);
        assert_eq!(
            found,
            vec![
                (vec![0, 0, 0], nodes(&t, &["node01"])),
                (vec![1, 0, 0], nodes(&t, &["node03"])),
                (vec![2, 0, 0], nodes(&t, &["node03"])),
                (vec![3, 0, 0], nodes(&t, &["node01"])),
            ]
        );
        assert_eq!(list(1, &HashSet::new(), 2).len(), 2);
        assert!(list(0, &HashSet::new(), 10).is_empty());
        // A box must hold --nodelist; busy nodes are never taken.
        assert_eq!(
            list(1, &set(&["node04"]), 10),
            vec![
                (vec![2, 0, 0], nodes(&t, &["node03"])),
                (vec![3, 0, 0], nodes(&t, &["node01"])),
            ]
        );
        let b =
            boxes_with_unusable(&t, &[2, 2, 1], usable, unusable, 2, &HashSet::new(), 1).unwrap();
        // (0,0,0) holds busy node06; (1,0,0): node02,03,06,07: busy; (2,0,0): node03,04,07,08.
        assert_eq!(b, vec![(vec![2, 0, 0], nodes(&t, &["node03"]))]);
    }

    fn plan_on(t: &Topology, compute: &[u32], spares: &str) -> Plan {
        let shape = SpareShape::parse(spares).unwrap();
        Plan::for_compute(compute, Some(&shape), &t.unit, t.grid.extents()).unwrap()
    }

    #[test]
    fn messages_are_routed_on_the_network_rings_a_box_covers_in_part() {
        // 3D(1,1) on 2x3x1: a 3x3x1 box of the 4x4x2 torus. It covers 3 of the 4 nodes of
        // the x and y rings and 1 of the 2 of the z ring: every dimension is routed on its
        // ring, the shorter way, which may leave the box.
        let t = torus();
        let plan = plan_on(&t, &[2, 3, 1], "3D(1,1)");
        assert_eq!(plan.box_extents, vec![3, 3, 1]);
        let (map, _) = job_map(
            &t,
            &plan,
            &[0, 0, 0],
            Method::hybrid(3),
            Pattern::star(3),
            false,
        )
        .unwrap();
        assert_eq!(map.grid().wrap(), &[false, false, false]);
        assert_eq!(map.rings(), vec![4, 4, 2]);
        assert_eq!(map.routing().extents(), &[4, 4, 2]);
        // Non-periodic messages stay inside; the periodic one from y=2 to y=0 is 2 hops either
        // way round the ring of 4 and takes + on the tie, through y=3, out of the box.
        assert_eq!(map.traffic(&Pattern::star(3), false).outside_links, 0);
        let periodic = map.traffic(&Pattern::star(3), true);
        assert_eq!(
            periodic.outside_links,
            2 * 2,
            "two ranks at y=2, two links each"
        );
        assert_eq!(periodic.longest_route, 2);
        // The same box cut anywhere on the torus, even wrapped round it, routes alike.
        let (wrapped, _) = job_map(
            &t,
            &plan,
            &[3, 2, 1],
            Method::hybrid(3),
            Pattern::star(3),
            false,
        )
        .unwrap();
        assert_eq!(
            wrapped.traffic(&Pattern::star(3), true),
            map.traffic(&Pattern::star(3), true)
        );
    }

    #[test]
    fn a_box_equal_to_the_network_routes_as_before() {
        let t = torus();
        let plan = plan_on(&t, &[3, 3, 2], "3D(2,1)");
        let (map, _) = job_map(
            &t,
            &plan,
            &[0, 0, 0],
            Method::hybrid(3),
            Pattern::star(3),
            false,
        )
        .unwrap();
        assert_eq!(map.routing(), map.grid());
        let plain = SpareMap::from_plan(&plan, &[true, true, true]).unwrap();
        assert_eq!(map, plain);
        for periodic in [false, true] {
            assert_eq!(
                map.traffic(&Pattern::star(3), periodic),
                plain.traffic(&Pattern::star(3), periodic)
            );
        }
    }

    #[test]
    fn isolated_partitions_are_their_own_torus_or_mesh() {
        for (links, wrap, rings) in [
            ("torus", [true, true, true], [3, 3, 1]),
            ("mesh", [false, false, false], [0, 0, 0]),
        ] {
            let t = Topology::from_yaml(
                &format!(
                    "name: bgq\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\nbox_links: {links}\n"
                ),
                "bgq.yaml",
                None,
            )
            .unwrap();
            let plan = plan_on(&t, &[2, 3, 1], "3D(1,1)");
            let (map, _) = job_map(
                &t,
                &plan,
                &[1, 0, 0],
                Method::hybrid(3),
                Pattern::star(3),
                false,
            )
            .unwrap();
            assert_eq!(map.grid().wrap(), &wrap, "{links}");
            assert_eq!(map.rings(), rings, "{links}");
            assert_eq!(
                map.routing(),
                map.grid(),
                "{links}: routes never leave the box"
            );
        }
        let e = Topology::from_yaml(
            "extents: [4]\nlinks: ring\nnodes: n[1-4]\nbox_links: wires\n",
            "x.yaml",
            None,
        )
        .unwrap_err();
        assert!(e.to_string().contains("box_links"), "{e}");
    }
}
