//! The rank-to-node map of one job box, and its JSON document.
//!
//! Nodes of the box are busy (one rank), free (an original spare, a rounding gap or a vacated
//! node) or dead. The map keeps both directions of the assignment and the set of free nodes so
//! that a substitution touches only what it changes.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::grid::{format_coord, Coord, Dir, Grid, MAX_DIMS};
use crate::loads::LinkLoads;
use crate::loads_reference::ReferenceLoads;
use crate::shape::Plan;
use crate::sliding::Method;
use crate::traffic::{self, Pattern, Traffic};
use crate::Error;

pub(crate) const NO_RANK: u32 = u32::MAX;

/// What a node of the box holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Hosts this rank.
    Busy(u32),
    /// Alive and empty.
    Free,
    /// Failed.
    Dead,
}

/// The set of free nodes, with O(1) insert and remove, and each node's coordinates so that
/// 0D's scan for the nearest one needs no division. The coordinates are stored by dimension
/// (`lanes[d][i]`: coordinate d of `nodes[i]`; lanes past the grid's dimensions stay empty)
/// so that the scan reads each as a run of 16-bit values, many per vector instruction.
#[derive(Debug, Default)]
struct FreeSet {
    nodes: Vec<u32>,
    lanes: [Vec<u16>; MAX_DIMS],
    pos: Vec<u32>,
}

/// `clone_from` reuses the buffers ([`SpareMap`]'s clone).
impl Clone for FreeSet {
    fn clone(&self) -> FreeSet {
        let mut f = FreeSet::default();
        f.clone_from(self);
        f
    }

    fn clone_from(&mut self, source: &FreeSet) {
        let FreeSet { nodes, lanes, pos } = source;
        self.nodes.clone_from(nodes);
        for (to, from) in self.lanes.iter_mut().zip(lanes) {
            to.clone_from(from);
        }
        self.pos.clone_from(pos);
    }
}

/// Two free sets are equal when they hold the same nodes, in whatever order.
impl PartialEq for FreeSet {
    fn eq(&self, other: &FreeSet) -> bool {
        self.nodes.len() == other.nodes.len()
            && self
                .nodes
                .iter()
                .all(|&n| other.pos.get(n as usize).is_some_and(|&p| p != NO_RANK))
    }
}

impl Eq for FreeSet {}

impl FreeSet {
    fn with_capacity(n: u32) -> FreeSet {
        FreeSet {
            nodes: Vec::new(),
            lanes: Default::default(),
            pos: vec![NO_RANK; n as usize],
        }
    }
    /// A node's coordinates as the lanes hold them: from the coordinate table where it
    /// exists. Extents above u16 are rare; their coordinates saturate and the scan falls back
    /// to the grid's own (see `free_coords`).
    #[inline]
    fn lane_coords(grid: &Grid, lines: &LineMasks, node: u32) -> [u16; MAX_DIMS] {
        match lines.coords.get(node as usize) {
            Some(&c) => c,
            None => grid
                .coord(node)
                .map(|x| u16::try_from(x).unwrap_or(u16::MAX)),
        }
    }
    fn insert(&mut self, grid: &Grid, lines: &LineMasks, node: u32) {
        if self.pos[node as usize] == NO_RANK {
            self.pos[node as usize] = self.nodes.len() as u32;
            self.nodes.push(node);
            let c = FreeSet::lane_coords(grid, lines, node);
            for (lane, &x) in self.lanes[..grid.dims()].iter_mut().zip(&c) {
                lane.push(x);
            }
        }
    }
    /// Puts alive node `free` in the place of `taken`, which leaves the set: a slid line's
    /// start and end, with no element moved. (No reader of the set depends on its order.)
    fn replace(&mut self, grid: &Grid, lines: &LineMasks, taken: u32, free: u32) {
        let p = self.pos[taken as usize];
        debug_assert!(p != NO_RANK && self.pos[free as usize] == NO_RANK);
        let at = p as usize;
        self.pos[taken as usize] = NO_RANK;
        self.pos[free as usize] = p;
        self.nodes[at] = free;
        let c = FreeSet::lane_coords(grid, lines, free);
        for (lane, &x) in self.lanes[..grid.dims()].iter_mut().zip(&c) {
            lane[at] = x;
        }
    }

    fn contains(&self, node: u32) -> bool {
        self.pos[node as usize] != NO_RANK
    }
    fn remove(&mut self, node: u32) {
        let p = self.pos[node as usize];
        if p != NO_RANK {
            // The last node takes the removed one's place, in every lane alike.
            self.nodes.swap_remove(p as usize);
            for lane in self.lanes.iter_mut().filter(|l| !l.is_empty()) {
                lane.swap_remove(p as usize);
            }
            if let Some(&moved) = self.nodes.get(p as usize) {
                self.pos[moved as usize] = p;
            }
            self.pos[node as usize] = NO_RANK;
        }
    }
}

/// Every line of the box along each dimension as bit masks (bit x = position x on the line),
/// so that a slide's walk to the next free node is a bit scan. Only for extents up to 64;
/// longer lines are walked node by node. (`Default` is only the empty start of a clone.)
#[derive(Debug, PartialEq, Eq, Default)]
pub(crate) struct LineMasks {
    /// Offset of dimension d's lines in `open` and `dead`; `None` for extents over 64.
    base: [Option<usize>; MAX_DIMS],
    /// Non-busy (free or dead) positions.
    open: Vec<u64>,
    /// Dead positions.
    dead: Vec<u64>,
    /// Coordinates of every node of the box, so that line ids and the free set's coordinates
    /// need no division; empty when an extent does not fit 16 bits. Shared between clones.
    coords: Arc<Vec<[u16; MAX_DIMS]>>,
    /// `line_factor[d][e]`: the factor of coordinate e in the id of the line along d through
    /// a node (0 for e = d).
    line_factor: [[u32; MAX_DIMS]; MAX_DIMS],
    /// Per node, the index in `open` and `dead` of its line along each dimension (`q` entries
    /// per node, [`NO_LINE`] past 64), so that a node's lines cost a read each; empty past
    /// [`MAX_LINE_IDS`] entries or without the coordinate table. Shared between clones.
    ids: Arc<Vec<u32>>,
    q: usize,
}

/// `clone_from` reuses the masks' buffers ([`SpareMap`]'s clone).
impl Clone for LineMasks {
    fn clone(&self) -> LineMasks {
        let mut m = LineMasks::default();
        m.clone_from(self);
        m
    }

    fn clone_from(&mut self, source: &LineMasks) {
        let LineMasks {
            base,
            open,
            dead,
            coords,
            line_factor,
            ids,
            q,
        } = source;
        self.base = *base;
        self.open.clone_from(open);
        self.dead.clone_from(dead);
        self.coords.clone_from(coords);
        self.line_factor = *line_factor;
        self.ids.clone_from(ids);
        self.q = *q;
    }
}

/// No line masks along this dimension (an extent past 64).
const NO_LINE: u32 = u32::MAX;
/// The most entries of [`LineMasks::ids`]: 16 MB, a 2^20-node box in up to four dimensions.
const MAX_LINE_IDS: usize = 1 << 22;

impl LineMasks {
    fn new(grid: &Grid) -> LineMasks {
        let q = grid.dims();
        let mut base = [None; MAX_DIMS];
        let mut total = 0;
        let mut line_factor = [[0; MAX_DIMS]; MAX_DIMS];
        for d in 0..q {
            if grid.extent(d) <= 64 {
                base[d] = Some(total);
                total += (grid.len() / grid.extent(d)) as usize;
            }
            // The node's index with dimension d's digit taken out: the digits below d keep
            // their strides, those above lose the factor extent(d).
            for e in 0..q {
                line_factor[d][e] = match e.cmp(&d) {
                    std::cmp::Ordering::Less => grid.stride(e),
                    std::cmp::Ordering::Equal => 0,
                    std::cmp::Ordering::Greater => grid.stride(e) / grid.extent(d),
                };
            }
        }
        let coords = if grid.extents().iter().all(|&e| e <= u32::from(u16::MAX)) {
            (0..grid.len())
                .map(|n| {
                    let c = grid.coord(n);
                    let mut short = [0u16; MAX_DIMS];
                    for d in 0..q {
                        short[d] = c[d] as u16;
                    }
                    short
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut masks = LineMasks {
            base,
            open: vec![0; total],
            dead: vec![0; total],
            coords: Arc::new(coords),
            line_factor,
            ids: Arc::new(Vec::new()),
            q,
        };
        if !masks.coords.is_empty() && masks.coords.len() * q <= MAX_LINE_IDS {
            let ids = masks
                .coords
                .iter()
                .flat_map(|c| {
                    (0..q).map(|d| match base[d] {
                        Some(b) => (b + masks.line_id(c, d) as usize) as u32,
                        None => NO_LINE,
                    })
                })
                .collect();
            masks.ids = Arc::new(ids);
        }
        masks
    }

    /// The id of the line along d through a node of coordinates `c`.
    #[inline]
    fn line_id(&self, c: &[u16; MAX_DIMS], d: usize) -> u32 {
        let f = &self.line_factor[d];
        (0..MAX_DIMS).map(|e| u32::from(c[e]) * f[e]).sum()
    }

    /// The line of `node` along d (an index into the masks) and the node's position on it.
    #[inline(always)]
    pub(crate) fn line(&self, grid: &Grid, node: u32, d: usize) -> Option<(usize, u32)> {
        let base = self.base[d]?;
        if let Some(&id) = self.ids.get(node as usize * self.q + d) {
            return Some((id as usize, u32::from(self.coords[node as usize][d])));
        }
        if let Some(c) = self.coords.get(node as usize) {
            return Some((base + self.line_id(c, d) as usize, u32::from(c[d])));
        }
        let stride = grid.stride(d);
        let e = grid.extent(d);
        let pos = (node / stride) % e;
        let id = (node % stride) + (node / (stride * e)) * stride;
        Some((base + id as usize, pos))
    }

    /// A node's coordinates from the table, when the table exists.
    #[inline]
    pub(crate) fn coords(&self, node: u32) -> Option<&[u16; MAX_DIMS]> {
        self.coords.get(node as usize)
    }

    /// How much the id of a line along d grows per unit of coordinate e (e != d).
    #[inline]
    pub(crate) fn line_step(&self, d: usize, e: usize) -> u32 {
        self.line_factor[d][e]
    }

    #[inline]
    pub(crate) fn open(&self, line: usize) -> u64 {
        self.open[line]
    }

    #[inline]
    pub(crate) fn dead(&self, line: usize) -> u64 {
        self.dead[line]
    }

    /// [`LineMasks::set`] for a node that is alive before and after: a rank leaves it
    /// (`open`) or takes it. Only the open masks change: a slide changes two nodes a line.
    #[inline]
    fn set_open(&mut self, grid: &Grid, node: u32, open: bool) {
        self.update::<false>(grid, node, open, false);
    }

    fn set(&mut self, grid: &Grid, node: u32, open: bool, dead: bool) {
        self.update::<true>(grid, node, open, dead);
    }

    /// Sets `node`'s bit in its lines' open masks, and in their dead masks when `DEAD`.
    #[inline(always)]
    fn update<const DEAD: bool>(&mut self, grid: &Grid, node: u32, open: bool, dead: bool) {
        let q = self.q;
        let n = node as usize;
        let (open, dead) = (u64::from(open), u64::from(dead));
        if let (Some(ids), Some(c)) = (self.ids.get(n * q..n * q + q), self.coords.get(n)) {
            // One bounds check per table and dimension, which also skips `NO_LINE` (past every
            // line): the line id read and checked, then indexed twice, cost 0.7 % of a campaign.
            for (&line, &x) in ids.iter().zip(c) {
                let line = line as usize;
                if let Some(o) = self.open.get_mut(line) {
                    *o = (*o & !(1u64 << x)) | (open << x);
                }
                if DEAD {
                    if let Some(dd) = self.dead.get_mut(line) {
                        *dd = (*dd & !(1u64 << x)) | (dead << x);
                    }
                }
            }
            return;
        }
        if let Some(&c) = self.coords.get(n) {
            for d in 0..grid.dims() {
                if let Some(base) = self.base[d] {
                    let line = base + self.line_id(&c, d) as usize;
                    self.put::<DEAD>(line, u32::from(c[d]), open, dead);
                }
            }
            return;
        }
        // One division chain for all dimensions instead of one per dimension.
        let mut rest = node;
        let mut low = 0;
        for d in 0..grid.dims() {
            let e = grid.extent(d);
            let pos = rest % e;
            rest /= e;
            let stride = grid.stride(d);
            // Line id: the node's index with dimension d's digit taken out.
            let id = low + rest * stride;
            low += pos * stride;
            if let Some(base) = self.base[d] {
                self.put::<DEAD>(base + id as usize, pos, open, dead);
            }
        }
    }

    /// [`LineMasks::update`]'s bit at position `pos` of `line`.
    #[inline(always)]
    fn put<const DEAD: bool>(&mut self, line: usize, pos: u32, open: u64, dead: u64) {
        let bit = 1u64 << pos;
        self.open[line] = (self.open[line] & !bit) | (open << pos);
        if DEAD {
            self.dead[line] = (self.dead[line] & !bit) | (dead << pos);
        }
    }
}

/// The placement of a job's ranks on the nodes of its box.
#[derive(Debug, PartialEq, Eq)]
pub struct SpareMap {
    grid: Grid,
    /// The grid messages are routed on and distances measured on: the box, or where the box
    /// covers part of a network ring, that ring (see [`Grid::routing_grid`]).
    routing: Grid,
    compute: Vec<u32>,
    rank_node: Vec<u32>,
    node_rank: Vec<u32>,
    dead: Vec<bool>,
    free: FreeSet,
    lines: LineMasks,
    /// Slides done so far per (dimension, direction): the "as uneven as possible" rule.
    slides: [[u32; 2]; MAX_DIMS],
    /// 0D substitutions so far per spare side (dimension, direction), for `0D:alternate`.
    zero_sides: [[u32; 2]; MAX_DIMS],
    /// Link loads kept up to date as ranks move, when asked for.
    loads: Option<Box<Tracked>>,
    /// Ranks sitting on dead nodes (the job is lost while any is).
    stranded: u32,
}

/// `clone_from` reuses the map's buffers: a simulator resets its map from a kept one for
/// every sample, and a clone allocated about a dozen tables each time.
impl Clone for SpareMap {
    fn clone(&self) -> SpareMap {
        let SpareMap {
            grid,
            routing,
            compute,
            rank_node,
            node_rank,
            dead,
            free,
            lines,
            slides,
            zero_sides,
            loads,
            stranded,
        } = self;
        SpareMap {
            grid: *grid,
            routing: *routing,
            compute: compute.clone(),
            rank_node: rank_node.clone(),
            node_rank: node_rank.clone(),
            dead: dead.clone(),
            free: free.clone(),
            lines: lines.clone(),
            slides: *slides,
            zero_sides: *zero_sides,
            loads: loads.clone(),
            stranded: *stranded,
        }
    }

    fn clone_from(&mut self, source: &SpareMap) {
        let SpareMap {
            grid,
            routing,
            compute,
            rank_node,
            node_rank,
            dead,
            free,
            lines,
            slides,
            zero_sides,
            loads,
            stranded,
        } = source;
        self.grid = *grid;
        self.routing = *routing;
        self.compute.clone_from(compute);
        self.rank_node.clone_from(rank_node);
        self.node_rank.clone_from(node_rank);
        self.dead.clone_from(dead);
        self.free.clone_from(free);
        self.lines.clone_from(lines);
        self.slides = *slides;
        self.zero_sides = *zero_sides;
        self.loads.clone_from(loads);
        self.stranded = *stranded;
    }
}

impl SpareMap {
    /// The failure-free map: rank k on the node of the box at `origin + coord(k, compute)`.
    pub fn new(grid: Grid, compute: &[u32], origin: &[u32]) -> Result<SpareMap, Error> {
        let q = grid.dims();
        if compute.len() != q || origin.len() != q {
            return Err(Error::Map(format!(
                "compute shape and origin need {q} entries for a {q}-dimensional box"
            )));
        }
        for d in 0..q {
            if compute[d] == 0 || origin[d] + compute[d] > grid.extent(d) {
                return Err(Error::Map(format!(
                    "compute extent {} at offset {} does not fit dimension {d} of extent {}",
                    compute[d],
                    origin[d],
                    grid.extent(d)
                )));
            }
        }
        let logical = Grid::mesh(compute)?;
        let rank_node: Vec<u32> = (0..logical.len())
            .map(|k| {
                let l = logical.coord(k);
                let mut c = [0; MAX_DIMS];
                for d in 0..q {
                    c[d] = origin[d] + l[d];
                }
                grid.index(&c)
            })
            .collect();
        SpareMap::from_parts(grid, compute.to_vec(), rank_node, &[], [[0; 2]; MAX_DIMS])
    }

    /// The failure-free map of a plan on a box with these ring flags.
    pub fn from_plan(plan: &Plan, wrap: &[bool]) -> Result<SpareMap, Error> {
        SpareMap::new(
            Grid::new(&plan.box_extents, wrap)?,
            &plan.compute,
            &plan.compute_origin,
        )
    }

    /// A map from its parts, checked: every rank on a distinct alive node of the box.
    pub fn from_parts(
        grid: Grid,
        compute: Vec<u32>,
        rank_node: Vec<u32>,
        dead: &[u32],
        slides: [[u32; 2]; MAX_DIMS],
    ) -> Result<SpareMap, Error> {
        let n = grid.len();
        let ranks: u64 = compute.iter().map(|&c| u64::from(c)).product();
        if rank_node.len() as u64 != ranks {
            return Err(Error::Map(format!(
                "{} ranks listed for a compute shape of {ranks}",
                rank_node.len()
            )));
        }
        let mut map = SpareMap {
            node_rank: vec![NO_RANK; n as usize],
            dead: vec![false; n as usize],
            free: FreeSet::with_capacity(n),
            lines: LineMasks::new(&grid),
            routing: grid,
            grid,
            compute,
            rank_node,
            slides,
            zero_sides: [[0; 2]; MAX_DIMS],
            loads: None,
            stranded: 0,
        };
        for &d in dead {
            if d >= n {
                return Err(Error::Map(format!("dead node {d} is outside the box")));
            }
            map.dead[d as usize] = true;
        }
        for (rank, &node) in map.rank_node.iter().enumerate() {
            if node >= n {
                return Err(Error::Map(format!(
                    "rank {rank} is on node {node}, outside the box"
                )));
            }
            if map.node_rank[node as usize] != NO_RANK {
                return Err(Error::Map(format!(
                    "ranks {} and {rank} are both on node {}",
                    map.node_rank[node as usize],
                    format_coord(&map.grid.coord(node)[..map.grid.dims()])
                )));
            }
            map.node_rank[node as usize] = rank as u32;
            if map.dead[node as usize] {
                map.stranded += 1;
            }
        }
        for node in 0..n {
            let dead = map.dead[node as usize];
            let open = dead || map.node_rank[node as usize] == NO_RANK;
            if open && !dead {
                map.free.insert(&map.grid, &map.lines, node);
            }
            if open {
                map.lines.set(&map.grid, node, open, dead);
            }
        }
        Ok(map)
    }

    /// The job's box.
    pub fn grid(&self) -> &Grid {
        &self.grid
    }

    /// The grid messages are routed on and 0D distances measured on; box coordinates are its
    /// coordinates. The box itself unless [`SpareMap::set_rings`] said otherwise.
    pub fn routing(&self) -> &Grid {
        &self.routing
    }

    /// Length of the network ring each box dimension lies on (0: a mesh), as
    /// [`SpareMap::set_rings`] set it.
    pub fn rings(&self) -> Vec<u32> {
        (0..self.routing.dims())
            .map(|d| {
                if self.routing.wraps(d) {
                    self.routing.extent(d)
                } else {
                    0
                }
            })
            .collect()
    }

    /// The box coordinate of the network coordinate `net` for a box starting at `origin`
    /// (network frame), or an error when that network node is not in the box. Along a ring
    /// the box may wrap round the network's edge.
    pub fn box_coord_of(&self, origin: &[u32], net: &[u32]) -> Result<Coord, Error> {
        let q = self.grid.dims();
        let outside = || {
            Error::UnknownNode(format!(
                "net:{} (the {} box starts at net:{})",
                format_coord(net),
                crate::grid::format_shape(self.grid.extents()),
                format_coord(origin)
            ))
        };
        if net.len() != q || origin.len() != q {
            return Err(Error::Invalid(format!(
                "network coordinate {} needs {q} entries",
                format_coord(net)
            )));
        }
        let rings = self.rings();
        let mut c = [0; MAX_DIMS];
        for d in 0..q {
            let x = if rings[d] > 0 {
                let ring = u64::from(rings[d]);
                if u64::from(net[d]) >= ring {
                    return Err(outside());
                }
                ((u64::from(net[d]) + ring - u64::from(origin[d]) % ring) % ring) as u32
            } else {
                net[d].checked_sub(origin[d]).ok_or_else(outside)?
            };
            if x >= self.grid.extent(d) {
                return Err(outside());
            }
            c[d] = x;
        }
        Ok(c)
    }

    /// Routes messages on the network the box lies in: dimension d of the box lies on a ring
    /// of `rings[d]` nodes (0: a mesh). Where the box covers only part of a ring, the shorter
    /// way round may leave the box, and 0D distances are measured the same way. A box that
    /// covers its rings, or lies on meshes, routes as before.
    pub fn set_rings(&mut self, rings: &[u32]) -> Result<(), Error> {
        let routing = self.grid.routing_grid(rings)?;
        if !LinkLoads::supports(&routing) {
            return Err(Error::Invalid(format!(
                "a network ring of {} nodes is longer than this tool routes (65535)",
                routing.extents().iter().max().copied().unwrap_or(0)
            )));
        }
        if routing != self.routing {
            self.routing = routing;
            if let Some(l) = self.loads.take() {
                let (pattern, periodic) = (l.pattern().clone(), l.periodic());
                match *l {
                    Tracked::Fast(_) => self.track_traffic(&pattern, periodic),
                    Tracked::Reference(_) => self.track_traffic_reference(&pattern, periodic),
                }
            }
        }
        Ok(())
    }

    /// The job's logical grid (compute shape).
    pub fn compute(&self) -> &[u32] {
        &self.compute
    }

    /// Node of every rank.
    pub fn rank_nodes(&self) -> &[u32] {
        &self.rank_node
    }

    /// Node of one rank.
    pub fn node_of(&self, rank: u32) -> u32 {
        self.rank_node[rank as usize]
    }

    /// The rank recorded on a node, [`NO_RANK`] for none. A failed node keeps its rank
    /// until a substitution moves it away: what a slide's walk reads on the nodes it leaves.
    #[inline]
    pub(crate) fn rank_on(&self, node: u32) -> u32 {
        self.node_rank[node as usize]
    }

    /// What a node holds.
    #[inline]
    pub fn state(&self, node: u32) -> NodeState {
        if self.dead[node as usize] {
            NodeState::Dead
        } else {
            match self.node_rank[node as usize] {
                NO_RANK => NodeState::Free,
                r => NodeState::Busy(r),
            }
        }
    }

    /// The free nodes, in no particular order.
    pub fn free_nodes(&self) -> &[u32] {
        &self.free.nodes
    }

    /// The coordinates of [`SpareMap::free_nodes`], in the same order, by dimension
    /// (`[d][i]`: coordinate d of the i-th free node; the grid's dimensions only); `None` when
    /// an extent does not fit 16 bits.
    pub(crate) fn free_coords(&self) -> Option<&[Vec<u16>]> {
        self.grid
            .extents()
            .iter()
            .all(|&e| e <= u32::from(u16::MAX))
            .then_some(&self.free.lanes[..self.grid.dims()])
    }

    /// The dead nodes, ascending.
    pub fn dead_nodes(&self) -> Vec<u32> {
        (0..self.grid.len())
            .filter(|&n| self.dead[n as usize])
            .collect()
    }

    /// Whether some rank sits on a dead node: the job could not be saved.
    pub fn is_lost(&self) -> bool {
        self.stranded > 0
    }

    /// Slides done per dimension, `[+, -]`.
    pub fn slide_counts(&self) -> &[[u32; 2]; MAX_DIMS] {
        &self.slides
    }

    /// Keeps the link loads of `pattern` up to date from now on, so that [`SpareMap::traffic`]
    /// for that pattern takes constant time and moves cost only the moved ranks' messages.
    pub fn track_traffic(&mut self, pattern: &Pattern, periodic: bool) {
        self.track_with(pattern, periodic, false);
    }

    /// [`SpareMap::track_traffic`] with the previous incremental engine
    /// ([`crate::loads_reference`]): the same figures, slower; kept as the measure of the
    /// current engine (`spares bench`, `--engine reference`).
    pub fn track_traffic_reference(&mut self, pattern: &Pattern, periodic: bool) {
        self.track_with(pattern, periodic, true);
    }

    fn track_with(&mut self, pattern: &Pattern, periodic: bool, reference: bool) {
        let same_engine = match self.loads.as_deref() {
            Some(Tracked::Fast(_)) => !reference,
            Some(Tracked::Reference(_)) => reference,
            None => false,
        };
        if same_engine && self.tracks(pattern, periodic) {
            return;
        }
        let (g, r, c, n) = (&self.grid, &self.routing, &self.compute, &self.rank_node);
        self.loads = LinkLoads::supports(r).then(|| {
            Box::new(if reference {
                Tracked::Reference(ReferenceLoads::new(g, r, c, n, pattern, periodic))
            } else {
                Tracked::Fast(LinkLoads::new(g, r, c, n, pattern, periodic))
            })
        });
    }

    /// Stops keeping link loads.
    pub fn untrack_traffic(&mut self) {
        self.loads = None;
    }

    /// Link-load updates made by the tracked loads so far ([`LinkLoads::updates`]); `None`
    /// unless the current engine tracks them.
    pub fn tracked_updates(&self) -> Option<u64> {
        match self.loads.as_deref() {
            Some(Tracked::Fast(l)) => Some(l.updates()),
            _ => None,
        }
    }

    /// The current engine's loads, for tests that steer it.
    #[cfg(test)]
    pub(crate) fn fast_loads_mut(&mut self) -> Option<&mut LinkLoads> {
        match self.loads.as_deref_mut() {
            Some(Tracked::Fast(l)) => Some(l),
            _ => None,
        }
    }

    /// The traffic figures of the tracked link loads, if any (constant time).
    pub fn tracked_traffic(&self) -> Option<Traffic> {
        self.loads.as_deref().map(Tracked::traffic)
    }

    fn tracks(&self, pattern: &Pattern, periodic: bool) -> bool {
        self.loads
            .as_ref()
            .is_some_and(|l| l.pattern() == pattern && l.periodic() == periodic)
    }

    /// 0D substitutions so far per spare side, `[+, -]` per dimension.
    pub fn zero_sides(&self) -> &[[u32; 2]; MAX_DIMS] {
        &self.zero_sides
    }

    pub(crate) fn lines(&self) -> &LineMasks {
        &self.lines
    }

    pub(crate) fn count_zero_side(&mut self, d: usize, dir: Dir) {
        self.zero_sides[d][dir.slot()] += 1;
    }

    /// The traffic figures of the current placement (constant time when tracked).
    pub fn traffic(&self, pattern: &Pattern, periodic: bool) -> Traffic {
        if self.tracks(pattern, periodic) {
            return self.tracked_traffic().expect("tracked");
        }
        self.full_traffic(&traffic::neighbours(&self.compute, pattern, periodic))
    }

    /// The traffic figures recomputed from scratch (the reference for the tracked loads):
    /// every message `rank -> neighbours[rank]` routed on the routing grid.
    pub fn full_traffic(&self, neighbours: &[Vec<u32>]) -> Traffic {
        if self.routing == self.grid {
            return traffic::link_loads(&self.grid, &self.rank_node, neighbours).1;
        }
        let nodes: Vec<u32> = self
            .rank_node
            .iter()
            .map(|&n| self.routing.reindex(&self.grid, n))
            .collect();
        let (loads, mut t) = traffic::link_loads(&self.routing, &nodes, neighbours);
        t.outside_links = loads
            .iter()
            .enumerate()
            .filter(|&(l, &v)| {
                v > 0 && traffic::link_outside(&self.routing, self.grid.extents(), l)
            })
            .count() as u64;
        t
    }

    /// Coordinate of a node of the box.
    pub fn coord(&self, node: u32) -> Coord {
        self.grid.coord(node)
    }

    pub(crate) fn mark_dead(&mut self, node: u32) {
        if self.node_rank[node as usize] != NO_RANK {
            self.stranded += 1;
        }
        self.dead[node as usize] = true;
        self.free.remove(node);
        self.lines.set(&self.grid, node, true, true);
    }

    /// Undoes [`SpareMap::mark_dead`] of a node that holds a rank: the map is again the one
    /// before it. The simulator chooses a second failure's substitution on a map it keeps
    /// for later samples, then revives the node there.
    pub(crate) fn revive(&mut self, node: u32) {
        debug_assert!(self.dead[node as usize]);
        debug_assert_ne!(self.node_rank[node as usize], NO_RANK);
        self.stranded -= 1;
        self.dead[node as usize] = false;
        self.lines.set(&self.grid, node, false, false);
    }

    /// Moves a death from node `was_dead` to node `now_dead`, neither holding a rank: the
    /// first becomes free, the second dead. The simulator's map after a slide of the whole
    /// box is the same for every failed node on the slid plane but for which of them is dead.
    pub(crate) fn move_death(&mut self, was_dead: u32, now_dead: u32) {
        if was_dead == now_dead {
            return;
        }
        debug_assert!(self.dead[was_dead as usize]);
        debug_assert_eq!(self.node_rank[was_dead as usize], NO_RANK);
        debug_assert_eq!(self.state(now_dead), NodeState::Free);
        self.dead[was_dead as usize] = false;
        self.free.insert(&self.grid, &self.lines, was_dead);
        self.lines.set(&self.grid, was_dead, true, false);
        self.mark_dead(now_dead);
    }

    /// Moves a rank to a free node (or back to its dead node, to undo a probe); the node it
    /// leaves becomes free unless dead.
    pub(crate) fn move_rank(&mut self, rank: u32, to: u32) {
        match self.loads.as_deref_mut() {
            // One move (a 0D substitution, or a probe): marked and placed with no list.
            Some(Tracked::Fast(l)) => {
                l.begin_moves();
                l.mark(rank, self.rank_node[rank as usize], crate::loads::NONE);
                self.place_rank(rank, to);
                self.end_marked_moves();
            }
            Some(Tracked::Reference(_)) => {
                let from = self.rank_node[rank as usize];
                self.apply_moves(&[crate::sliding::Move { rank, from, to }], None);
            }
            None => self.place_rank(rank, to),
        }
    }

    /// [`SpareMap::move_rank`] without link loads.
    fn place_rank(&mut self, rank: u32, to: u32) {
        debug_assert!(!matches!(self.state(to), NodeState::Busy(_)));
        let from = self.rank_node[rank as usize];
        if self.node_rank[from as usize] == rank {
            self.node_rank[from as usize] = NO_RANK;
            if self.dead[from as usize] {
                self.stranded -= 1;
            } else {
                self.free.insert(&self.grid, &self.lines, from);
                self.lines.set_open(&self.grid, from, true);
            }
        }
        if self.dead[to as usize] {
            // Only a probe's undo puts a rank back on its dead node.
            self.stranded += 1;
        } else {
            self.free.remove(to);
            self.lines.set_open(&self.grid, to, false);
        }
        self.node_rank[to as usize] = rank;
        self.rank_node[rank as usize] = to;
    }

    /// Whether a slide can be carried out line by line as its moves are found
    /// ([`SpareMap::begin_slide`]): not when the previous engine keeps the link loads, which
    /// reads every move before any rank is placed.
    pub(crate) fn slides_line_by_line(&self) -> bool {
        !matches!(self.loads.as_deref(), Some(Tracked::Reference(_)))
    }

    /// Starts a slide along `shift` carried out line by line ([`SpareMap::shift_line`]),
    /// ended by [`SpareMap::end_marked_moves`].
    pub(crate) fn begin_slide(&mut self, shift: (usize, Dir)) {
        debug_assert!(self.slides_line_by_line());
        if let Some(Tracked::Fast(l)) = self.loads.as_deref_mut() {
            l.begin_slide(shift);
        }
    }

    /// Shifts one line of a slide by one step: the ranks on positions `0..shifted` of the
    /// line (`node_at` gives each position's node, from where the slide starts) move one
    /// position on, farthest first, and are listed in `moves` when `list` says so. Position
    /// 0 is left empty (free unless it is the failed node) and position `shifted`, a free
    /// node, is taken. One pass does what listing the moves, marking them for the link loads
    /// and placing the ranks did in three (4.5 % of a campaign): only the line's two ends
    /// change state.
    #[inline(always)]
    pub(crate) fn shift_line(
        &mut self,
        node_at: impl Fn(u32) -> u32,
        shifted: u32,
        (moves, list): (&mut Vec<crate::sliding::Move>, bool),
    ) {
        let end = node_at(shifted);
        debug_assert_eq!(self.state(end), NodeState::Free);
        let mut loads = match self.loads.as_deref_mut() {
            Some(Tracked::Fast(l)) => Some(l),
            _ => None,
        };
        let (mut to, mut ahead) = (end, crate::loads::NONE);
        for j in (0..shifted).rev() {
            let from = node_at(j);
            let rank = self.node_rank[from as usize];
            debug_assert!(rank != NO_RANK);
            self.node_rank[to as usize] = rank;
            self.rank_node[rank as usize] = to;
            if list {
                moves.push(crate::sliding::Move { rank, from, to });
            }
            if let Some(l) = loads.as_deref_mut() {
                l.mark(rank, from, ahead);
            }
            (to, ahead) = (from, rank);
        }
        // The end is taken, and the start left: free unless it is the failed node.
        self.lines.set_open(&self.grid, end, false);
        let start = to;
        self.node_rank[start as usize] = NO_RANK;
        if self.dead[start as usize] {
            self.stranded -= 1;
            self.free.remove(end);
        } else {
            self.free.replace(&self.grid, &self.lines, end, start);
            self.lines.set_open(&self.grid, start, true);
        }
    }

    /// Ends a batch of moves marked one by one for the link loads as they were made (a slide
    /// begun by [`SpareMap::begin_slide`], or [`SpareMap::move_rank`]'s move): the loads
    /// follow the moves.
    pub(crate) fn end_marked_moves(&mut self) {
        let SpareMap {
            loads,
            rank_node,
            node_rank,
            ..
        } = self;
        if let Some(Tracked::Fast(l)) = loads.as_deref_mut() {
            l.end_batch(rank_node, node_rank);
        }
    }

    /// [`SpareMap::place_rank`] for each move in order, with the free set and the line masks
    /// updated once per node whose state changed: along a slid line every node but the two
    /// ends is vacated and refilled at once.
    fn place_ranks(&mut self, moves: &[crate::sliding::Move], slide: bool) {
        for m in moves {
            let from = self.rank_node[m.rank as usize];
            debug_assert_eq!(from, m.from, "a move starts where its rank is");
            debug_assert!(!matches!(self.state(m.to), NodeState::Busy(_)));
            if self.node_rank[from as usize] == m.rank {
                self.node_rank[from as usize] = NO_RANK;
                if self.dead[from as usize] {
                    self.stranded -= 1;
                }
            }
            if self.dead[m.to as usize] {
                // Only a probe's undo puts a rank back on its dead node.
                self.stranded += 1;
            }
            self.node_rank[m.to as usize] = m.rank;
            self.rank_node[m.rank as usize] = m.to;
        }
        // An alive node is in the free set exactly when its line bits say open. In a slide a
        // node that one move leaves and the move before it takes (moves listed farthest
        // first along each line) stays busy: only each line's two ends change.
        for (j, m) in moves.iter().enumerate() {
            let taken = slide && j > 0 && moves[j - 1].from == m.to;
            let left = slide && moves.get(j + 1).is_some_and(|n| n.to == m.from);
            for node in [(m.from, left), (m.to, taken)]
                .into_iter()
                .filter_map(|(node, stays)| (!stays).then_some(node))
            {
                if self.dead[node as usize] {
                    continue;
                }
                let free = self.node_rank[node as usize] == NO_RANK;
                if free != self.free.contains(node) {
                    if free {
                        self.free.insert(&self.grid, &self.lines, node);
                    } else {
                        self.free.remove(node);
                    }
                    self.lines.set_open(&self.grid, node, free);
                }
            }
        }
    }

    /// Carries out moves in order, updating tracked link loads once for the whole batch;
    /// `shift` says that every move is one step along (d, dir), as in a slide.
    pub(crate) fn apply_moves(
        &mut self,
        moves: &[crate::sliding::Move],
        shift: Option<(usize, Dir)>,
    ) {
        let mut loads = self.loads.take();
        if let Some(l) = loads.as_mut() {
            l.begin_batch(&self.grid, &self.rank_node, &self.node_rank, moves, shift);
        }
        self.place_ranks(moves, shift.is_some());
        if let Some(l) = loads.as_mut() {
            l.end_batch(&self.rank_node, &self.node_rank);
        }
        self.loads = loads;
    }

    /// This map with its ranks on the nodes of `rank_node` instead (checked like
    /// [`SpareMap::from_parts`]), keeping its dead nodes, slide and 0D counts, routing grid and
    /// tracked link loads: what a re-map returns.
    pub(crate) fn with_placement(&self, rank_node: Vec<u32>) -> Result<SpareMap, Error> {
        let mut m = SpareMap::from_parts(
            self.grid,
            self.compute.clone(),
            rank_node,
            &self.dead_nodes(),
            self.slides,
        )?;
        m.zero_sides = self.zero_sides;
        m.routing = self.routing;
        if let Some(l) = self.loads.as_deref() {
            let reference = matches!(l, Tracked::Reference(_));
            m.track_with(l.pattern(), l.periodic(), reference);
        }
        Ok(m)
    }

    pub(crate) fn count_slide(&mut self, d: usize, dir: Dir) {
        self.slides[d][dir.slot()] += 1;
    }
}

/// The link loads a map keeps: the current engine, or the previous one as a reference.
#[derive(Debug, PartialEq, Eq)]
enum Tracked {
    Fast(LinkLoads),
    Reference(ReferenceLoads),
}

/// `clone_from` reuses the current engine's buffers ([`SpareMap`]'s clone).
impl Clone for Tracked {
    fn clone(&self) -> Tracked {
        match self {
            Tracked::Fast(l) => Tracked::Fast(l.clone()),
            Tracked::Reference(l) => Tracked::Reference(l.clone()),
        }
    }

    fn clone_from(&mut self, source: &Tracked) {
        match (self, source) {
            (Tracked::Fast(to), Tracked::Fast(from)) => to.clone_from(from),
            (to, from) => *to = from.clone(),
        }
    }
}

impl Tracked {
    fn pattern(&self) -> &Pattern {
        match self {
            Tracked::Fast(l) => l.pattern(),
            Tracked::Reference(l) => l.pattern(),
        }
    }

    fn periodic(&self) -> bool {
        match self {
            Tracked::Fast(l) => l.periodic(),
            Tracked::Reference(l) => l.periodic(),
        }
    }

    fn traffic(&self) -> Traffic {
        match self {
            Tracked::Fast(l) => l.traffic(),
            Tracked::Reference(l) => l.traffic(),
        }
    }

    fn begin_batch(
        &mut self,
        grid: &Grid,
        rank_node: &[u32],
        node_rank: &[u32],
        moves: &[crate::sliding::Move],
        shift: Option<(usize, Dir)>,
    ) {
        match self {
            Tracked::Fast(l) => l.begin_batch(grid, rank_node, node_rank, moves, shift),
            Tracked::Reference(l) => l.begin_batch(grid, rank_node, node_rank, moves, shift),
        }
    }

    fn end_batch(&mut self, rank_node: &[u32], node_rank: &[u32]) {
        match self {
            Tracked::Fast(l) => l.end_batch(rank_node, node_rank),
            Tracked::Reference(l) => l.end_batch(rank_node),
        }
    }
}

/// What a map document carries beside the placement.
#[derive(Debug, Clone, PartialEq)]
pub struct MapMeta {
    /// Name of the topology the box was cut from.
    pub topology: Option<String>,
    /// Where the box starts in the network.
    pub origin: Vec<u32>,
    /// The spare shape, or `none`.
    pub spares: String,
    /// The substitution method for later failures.
    pub method: Method,
    /// The stencil pattern of the job.
    pub pattern: Pattern,
    /// Whether the stencil wraps around the logical grid.
    pub periodic: bool,
    /// Host names of the box's nodes, by box index (dimension 0 fastest).
    pub hosts: Option<Vec<String>>,
}

impl MapMeta {
    /// Finds a node of the box by host name, or by coordinates such as `3,4,5` or `(3,4,5)`.
    ///
    /// Host names are tried first so that a host called `1` would still be found by name.
    pub fn node_by_name(&self, grid: &Grid, name: &str) -> Result<u32, Error> {
        if let Some(hosts) = &self.hosts {
            if let Some(i) = hosts.iter().position(|h| h == name) {
                return Ok(i as u32);
            }
        }
        if let Some(c) = crate::grid::parse_coord(name) {
            let c = grid
                .checked_coord(&c)
                .map_err(|e| Error::UnknownNode(format!("{name} ({e})")))?;
            return Ok(grid.index(&c));
        }
        Err(Error::UnknownNode(name.to_string()))
    }

    /// A node's name for people: its host name when known, else its coordinates `(x,y,z)`.
    pub fn node_name(&self, grid: &Grid, node: u32) -> String {
        match &self.hosts {
            Some(h) => h[node as usize].clone(),
            None => format_coord(&grid.coord(node)[..grid.dims()]),
        }
    }
}

/// The JSON form of a map: what `spares plan` writes and every other tool reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapDocument {
    /// Format version of this document.
    pub version: u32,
    /// Name of the topology the box was cut from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// Extents of the job box.
    #[serde(rename = "box")]
    pub box_extents: Vec<u32>,
    /// Ring flag of each box dimension.
    pub wrap: Vec<bool>,
    /// Length of the network ring each box dimension lies on (0: a mesh), written when the
    /// box covers only part of a ring: messages are routed on the network, the shorter way
    /// round, which may leave the box. Absent: the box's own links (`wrap`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rings: Vec<u32>,
    /// Where the box starts in the network.
    #[serde(default)]
    pub origin: Vec<u32>,
    /// The job's logical grid.
    pub compute: Vec<u32>,
    /// The spare shape.
    #[serde(default = "none")]
    pub spares: String,
    /// The substitution method.
    #[serde(default = "hybrid")]
    pub method: String,
    /// The stencil pattern.
    pub pattern: String,
    /// Whether the stencil wraps around the logical grid.
    pub periodic: bool,
    /// Host names of the box's nodes in box order (dimension 0 fastest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Node coordinate of every rank, in rank order.
    pub ranks: Vec<Vec<u32>>,
    /// Coordinates of the dead nodes.
    #[serde(default)]
    pub failed: Vec<Vec<u32>>,
    /// Slides so far per dimension, `[+, -]`.
    #[serde(default)]
    pub slides: Vec<[u32; 2]>,
    /// 0D substitutions so far per spare side, `[+, -]` per dimension (for `0D:alternate`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zero_sides: Vec<[u32; 2]>,
    /// The largest link load of this placement.
    pub collisions: u32,
    /// All traffic figures of this placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic: Option<Traffic>,
}

fn none() -> String {
    "none".into()
}
fn hybrid() -> String {
    "hybrid".into()
}

impl MapDocument {
    /// Current format version.
    pub const VERSION: u32 = 1;

    /// The document of a map, with its traffic figures computed.
    pub fn new(map: &SpareMap, meta: &MapMeta) -> MapDocument {
        let grid = map.grid();
        let q = grid.dims();
        let t = map.traffic(&meta.pattern, meta.periodic);
        MapDocument {
            version: Self::VERSION,
            topology: meta.topology.clone(),
            box_extents: grid.extents().to_vec(),
            wrap: grid.wrap().to_vec(),
            rings: if map.routing() == grid {
                Vec::new()
            } else {
                map.rings()
            },
            origin: meta.origin.clone(),
            compute: map.compute().to_vec(),
            spares: meta.spares.clone(),
            method: meta.method.to_string(),
            pattern: meta.pattern.to_string(),
            periodic: meta.periodic,
            hosts: meta.hosts.clone(),
            ranks: map
                .rank_nodes()
                .iter()
                .map(|&n| grid.coord(n)[..q].to_vec())
                .collect(),
            failed: map
                .dead_nodes()
                .iter()
                .map(|&n| grid.coord(n)[..q].to_vec())
                .collect(),
            slides: map.slide_counts()[..q].to_vec(),
            zero_sides: if map.zero_sides().iter().all(|s| *s == [0, 0]) {
                Vec::new()
            } else {
                map.zero_sides()[..q].to_vec()
            },
            collisions: t.collisions,
            traffic: Some(t),
        }
    }

    /// Rebuilds the map and its metadata, checking every field.
    pub fn into_map(self) -> Result<(SpareMap, MapMeta), Error> {
        if self.version != Self::VERSION {
            return Err(Error::Map(format!(
                "document version {} is not supported (this tool reads version {})",
                self.version,
                Self::VERSION
            )));
        }
        // Checks the node count against the limit before any per-node table is allocated
        // (a 1000x1000x1000 box grew sparesd to 19 GB).
        let grid = Grid::new(&self.box_extents, &self.wrap)?;
        let q = grid.dims();
        let ranks = crate::Limits::default().check_nodes("compute", &self.compute)?;
        if self.ranks.len() as u64 != u64::from(ranks) || self.failed.len() > grid.len() as usize {
            return Err(Error::Map(format!(
                "{} ranks and {} failed nodes listed for a compute shape of {ranks} in a box of {}",
                self.ranks.len(),
                self.failed.len(),
                grid.len()
            )));
        }
        let to_node = |what: &str, c: &[u32]| -> Result<u32, Error> {
            grid.checked_coord(c)
                .map(|c| grid.index(&c))
                .map_err(|e| Error::Map(format!("{what}: {e}")))
        };
        let rank_node = self
            .ranks
            .iter()
            .enumerate()
            .map(|(k, c)| to_node(&format!("rank {k}"), c))
            .collect::<Result<Vec<_>, _>>()?;
        let dead = self
            .failed
            .iter()
            .map(|c| to_node("failed node", c))
            .collect::<Result<Vec<_>, _>>()?;
        let mut slides = [[0; 2]; MAX_DIMS];
        if !self.slides.is_empty() && self.slides.len() != q {
            return Err(Error::Map(format!(
                "slides has {} entries for {q} dimensions",
                self.slides.len()
            )));
        }
        slides[..self.slides.len()].copy_from_slice(&self.slides);
        if self.compute.len() != q {
            return Err(Error::Map(format!(
                "compute has {} entries for {q} dimensions",
                self.compute.len()
            )));
        }
        if let Some(h) = &self.hosts {
            if h.len() != grid.len() as usize {
                return Err(Error::Map(format!(
                    "{} host names for a box of {} nodes",
                    h.len(),
                    grid.len()
                )));
            }
        }
        let origin = if self.origin.is_empty() {
            vec![0; q]
        } else {
            self.origin
        };
        if origin.len() != q {
            return Err(Error::Map(format!(
                "origin has {} entries for {q} dimensions",
                origin.len()
            )));
        }
        if !self.zero_sides.is_empty() && self.zero_sides.len() != q {
            return Err(Error::Map(format!(
                "zero_sides has {} entries for {q} dimensions",
                self.zero_sides.len()
            )));
        }
        let mut map = SpareMap::from_parts(grid, self.compute, rank_node, &dead, slides)?;
        map.zero_sides[..self.zero_sides.len()].copy_from_slice(&self.zero_sides);
        if !self.rings.is_empty() {
            map.set_rings(&self.rings)
                .map_err(|e| Error::Map(format!("rings: {e}")))?;
        }
        let meta = MapMeta {
            topology: self.topology,
            origin,
            spares: self.spares,
            method: Method::parse(&self.method, q)?,
            pattern: Pattern::parse(&self.pattern, q)?,
            periodic: self.periodic,
            hosts: self.hosts,
        };
        Ok((map, meta))
    }

    /// Parses a document from JSON.
    pub fn from_json(text: &str) -> Result<MapDocument, Error> {
        crate::Limits::default().check_depth("a map document", text)?;
        serde_json::from_str(text).map_err(|e| Error::Map(format!("not a map document: {e}")))
    }

    /// The document as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("map documents always serialise")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_map_places_rank_k_at_its_logical_coordinate() {
        let g = Grid::mesh(&[4, 4, 2]).unwrap();
        let m = SpareMap::new(g, &[3, 3, 2], &[0, 0, 0]).unwrap();
        assert_eq!(m.rank_nodes().len(), 18);
        assert_eq!(m.node_of(4), g.index(&[1, 1, 0, 0, 0, 0]));
        assert_eq!(m.node_of(9), g.index(&[0, 0, 1, 0, 0, 0]));
        assert_eq!(m.free_nodes().len(), 14);
        assert!(!m.is_lost());
    }

    /// Slides update the free set and the line masks once per node whose state changed
    /// (`place_ranks`); after every failure they equal those of the map rebuilt from its
    /// placement.
    #[test]
    fn free_set_and_line_masks_follow_every_slide() {
        use rand::{Rng, SeedableRng};
        let grid = Grid::new(&[7, 6, 5], &[false, true, false]).unwrap();
        for method in ["hybrid", "1D", "2D", "hybrid(-2D)"] {
            let method = Method::parse(method, 3).unwrap();
            let mut map = SpareMap::new(grid, &[5, 5, 4], &[0, 0, 0]).unwrap();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
            for _ in 0..40 {
                let node = rng.gen_range(0..grid.len());
                if map.state(node) == NodeState::Dead {
                    continue;
                }
                crate::sliding::fail(&mut map, node, &method).unwrap();
                let rebuilt = SpareMap::from_parts(
                    grid,
                    map.compute().to_vec(),
                    map.rank_nodes().to_vec(),
                    &map.dead_nodes(),
                    *map.slide_counts(),
                )
                .unwrap();
                assert_eq!(map, rebuilt);
            }
        }
    }

    /// A busy node marked dead and revived leaves the map as it was: the simulator chooses
    /// second failures on a map it keeps for later samples that way.
    #[test]
    fn a_death_revived_leaves_the_map_as_it_was() {
        use rand::{Rng, SeedableRng};
        let grid = Grid::mesh(&[6, 5, 4]).unwrap();
        let pattern = crate::traffic::Pattern::parse("7p", 3).unwrap();
        let method = Method::parse("hybrid", 3).unwrap();
        let mut map = SpareMap::new(grid, &[5, 4, 3], &[0, 0, 0]).unwrap();
        map.track_traffic(&pattern, false);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut revived = 0;
        while !map.is_lost() && !map.free_nodes().is_empty() {
            let node = rng.gen_range(0..grid.len());
            if let NodeState::Busy(_) = map.state(node) {
                let before = map.clone();
                map.mark_dead(node);
                assert_ne!(map, before);
                map.revive(node);
                assert_eq!(map, before);
                assert_eq!(map.tracked_traffic(), before.tracked_traffic());
                revived += 1;
            }
            if map.state(node) != NodeState::Dead {
                crate::sliding::fail(&mut map, node, &method).unwrap();
            }
        }
        assert!(revived > 10, "{revived}");
    }

    /// A map reset from another with `clone_from` (the simulator's reset for each sample,
    /// which keeps its own buffers) equals that map, link loads included, and goes on as it
    /// does.
    #[test]
    fn a_map_cloned_into_another_equals_it_and_goes_on_alike() {
        use rand::{Rng, SeedableRng};
        let grid = Grid::mesh(&[6, 6, 5]).unwrap();
        let pattern = crate::traffic::Pattern::parse("7p", 3).unwrap();
        let method = Method::parse("hybrid", 3).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut fail_some = |map: &mut SpareMap, count: usize| {
            for _ in 0..count {
                let node = rng.gen_range(0..grid.len());
                if map.state(node) != NodeState::Dead {
                    crate::sliding::fail(map, node, &method).unwrap();
                }
            }
        };
        let mut start = SpareMap::new(grid, &[5, 5, 4], &[0, 0, 0]).unwrap();
        start.track_traffic(&pattern, false);
        let (mut source, mut target) = (start.clone(), start.clone());
        fail_some(&mut source, 8);
        fail_some(&mut target, 20);
        assert_ne!(source, target);
        target.clone_from(&source);
        assert_eq!(target, source);
        assert_eq!(target.tracked_traffic(), source.tracked_traffic());
        for node in [3, 40, 77, 101] {
            if source.state(node) != NodeState::Dead {
                let a = crate::sliding::fail(&mut source, node, &method).unwrap();
                let b = crate::sliding::fail(&mut target, node, &method).unwrap();
                assert_eq!(a, b);
                assert_eq!(target, source);
                assert_eq!(target.tracked_traffic(), source.tracked_traffic());
            }
        }
        // Into a map without link loads, and back to the failure-free one.
        let mut bare = SpareMap::new(grid, &[5, 5, 4], &[0, 0, 0]).unwrap();
        bare.clone_from(&source);
        assert_eq!(bare, source);
        bare.clone_from(&start);
        assert_eq!(bare, start);
    }

    #[test]
    fn documents_round_trip() {
        let g = Grid::new(&[4, 4, 2], &[true, true, false]).unwrap();
        let m = SpareMap::new(g, &[3, 3, 2], &[0, 0, 0]).unwrap();
        let meta = MapMeta {
            topology: Some("t".into()),
            origin: vec![0, 0, 0],
            spares: "3D(2,1)".into(),
            method: Method::parse("hybrid", 3).unwrap(),
            pattern: Pattern::star(3),
            periodic: false,
            hosts: None,
        };
        let doc = MapDocument::new(&m, &meta);
        assert_eq!(doc.collisions, 1);
        let back = MapDocument::from_json(&doc.to_json())
            .unwrap()
            .into_map()
            .unwrap();
        assert_eq!(back.0, m);
        assert_eq!(back.1, meta);
    }

    #[test]
    fn nodes_are_found_by_host_name_or_coordinates() {
        let g = Grid::mesh(&[2, 2]).unwrap();
        let mut meta = MapMeta {
            topology: None,
            origin: vec![0, 0],
            spares: "none".into(),
            method: Method::parse("hybrid", 2).unwrap(),
            pattern: Pattern::star(2),
            periodic: false,
            hosts: None,
        };
        assert_eq!(meta.node_by_name(&g, "1,1"), Ok(3));
        assert_eq!(meta.node_by_name(&g, "(1,0)"), Ok(1));
        assert_eq!(meta.node_name(&g, 2), "(0,1)");
        assert!(matches!(
            meta.node_by_name(&g, "2,0"),
            Err(Error::UnknownNode(_))
        ));
        assert!(matches!(
            meta.node_by_name(&g, "n1"),
            Err(Error::UnknownNode(_))
        ));
        meta.hosts = Some(vec!["n0".into(), "n1".into(), "n2".into(), "n3".into()]);
        assert_eq!(meta.node_by_name(&g, "n2"), Ok(2));
        assert_eq!(meta.node_by_name(&g, "0,1"), Ok(2));
        assert_eq!(meta.node_name(&g, 3), "n3");
        assert!(meta.node_by_name(&g, "n9").is_err());
    }

    #[test]
    fn inconsistent_documents_are_refused() {
        let g = Grid::mesh(&[2, 2]).unwrap();
        let m = SpareMap::new(g, &[2, 1], &[0, 0]).unwrap();
        let meta = MapMeta {
            topology: None,
            origin: vec![0, 0],
            spares: "2D(1,1)".into(),
            method: Method::parse("hybrid", 2).unwrap(),
            pattern: Pattern::star(2),
            periodic: false,
            hosts: None,
        };
        let doc = MapDocument::new(&m, &meta);
        let mut twice = doc.clone();
        twice.ranks[1] = twice.ranks[0].clone();
        assert!(twice.into_map().is_err());
        let mut outside = doc.clone();
        outside.ranks[0] = vec![5, 0];
        assert!(outside.into_map().is_err());
        let mut dead = doc.clone();
        dead.failed = vec![vec![9, 9]];
        assert!(dead.into_map().is_err());
        assert!(MapDocument::from_json("{\"version\":1}").is_err());
    }

    #[test]
    fn documents_over_the_limits_are_refused_before_allocating() {
        // A billion-node box grew sparesd to 19 GB on registration.
        let text = r#"{"version":1,"box":[1000,1000,1000],"wrap":[false,false,false],
            "compute":[1,1,1],"pattern":"7p","periodic":false,"ranks":[[0,0,0]],"collisions":0}"#;
        let e = MapDocument::from_json(text)
            .unwrap()
            .into_map()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1000000000 nodes") && e.contains("limit of 1048576 nodes"),
            "{e}"
        );
        // Ranks that do not match the compute shape are refused before they are converted.
        let text = r#"{"version":1,"box":[2,2],"wrap":[false,false],"compute":[2,1],
            "pattern":"5p","periodic":false,"ranks":[[0,0],[1,0],[0,1]],"collisions":0}"#;
        let e = MapDocument::from_json(text)
            .unwrap()
            .into_map()
            .unwrap_err();
        assert!(e.to_string().contains("3 ranks"), "{e}");
        let deep = format!("{{\"version\":{}", "[".repeat(100_000));
        let e = MapDocument::from_json(&deep).unwrap_err().to_string();
        assert!(e.contains("limit of 32 levels"), "{e}");
    }
}
