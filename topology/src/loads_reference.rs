//! The previous incremental link-load engine, kept verbatim as the measure for `spares bench`
//! and the tests (`--engine reference`): the engine of [`crate::loads`] must give the same
//! figures, faster.
//!
//! Link loads kept up to date as ranks move.
//!
//! Recomputing every route after each failure costs the whole job's traffic; moving one rank
//! changes only its own messages and those sent to it. [`ReferenceLoads`] keeps the load of every
//! directed link, counts of loads (so the largest load is known without a scan), the number of
//! hot links, the total hop count and a histogram of route lengths. A batch of moves takes
//! each affected message from its old route to its new one, and a slide only the messages at
//! the ends of its slid lines.

use std::sync::Arc;

use crate::grid::{Dir, Grid, MAX_DIMS};
use crate::traffic::{self, Pattern, Traffic};

/// Incrementally maintained link loads of one placement under one stencil pattern.
///
/// What never changes (the messages, the node coordinates) is shared between clones, so that
/// copying a map for a decision, or resetting one for the next simulated sample, copies only
/// the loads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceLoads {
    layout: Arc<Layout>,
    counts: Counts,
    total_hops: u64,
    /// `route_count[h]`: messages whose route has h hops.
    route_count: Vec<u64>,
    longest: u32,
    messages: u64,
    /// Ranks of the batch being moved ([`ReferenceLoads::begin_batch`]).
    in_batch: Vec<bool>,
    batch: Vec<u32>,
    /// Per message slot (`r * offsets + i`): its new route equals a route that was not
    /// removed, so it is not added either (see [`ReferenceLoads::begin_batch`]).
    skip_add: Vec<bool>,
    /// Per message slot: its old route is some other message's new route; it stays.
    skip_remove: Vec<bool>,
    /// Node of each rank of the batch before the moves.
    old_node: Vec<u32>,
}

/// The messages of a pattern on a compute shape, and the coordinates of the box's nodes.
#[derive(Debug, PartialEq, Eq)]
struct Layout {
    pattern: Pattern,
    periodic: bool,
    /// Messages sent by rank r: `out[out_start[r]..out_start[r + 1]]`.
    out_start: Vec<u32>,
    out: Vec<u32>,
    /// Offset index of each message of `out`.
    out_offset: Vec<u16>,
    /// Messages received by rank r (senders), same layout.
    in_start: Vec<u32>,
    inn: Vec<u32>,
    /// Offsets per rank in the pattern, and `by_offset[r * offsets + i]`: the rank that r
    /// sends to with offset i (`NONE` if no such message).
    offsets: usize,
    by_offset: Vec<u32>,
    /// Coordinates of every node of the box, so that routing needs no division.
    coords: Vec<[u16; MAX_DIMS]>,
    /// The grid messages are routed on (the box, or the network rings it lies on).
    routing: Grid,
}

/// The load of every directed link, and the counts that give the largest one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Counts {
    loads: Vec<u32>,
    /// `load_count[v]`: links whose load is v, for v >= 2.
    load_count: Vec<u64>,
    /// The largest load if it is 2 or more; otherwise 1 (or 0 without messages).
    max_load: u32,
    hot_links: u64,
    /// Per link, whether it has an end outside the box (empty when routes never leave it).
    outside: Vec<bool>,
    /// Outside links that carry a message.
    outside_used: u64,
}

/// Routes up to this many hops are compared link by link with their replacement.
const DIFF_HOPS: usize = 8;

const NONE: u32 = u32::MAX;

impl ReferenceLoads {
    /// The loads of `rank_node` (box node of every rank) on `grid`, the box, under `pattern`;
    /// messages are routed on `routing` (see [`Grid::routing_grid`]).
    pub fn new(
        grid: &Grid,
        routing: &Grid,
        compute: &[u32],
        rank_node: &[u32],
        pattern: &Pattern,
        periodic: bool,
    ) -> ReferenceLoads {
        let lists = traffic::neighbour_offsets(compute, pattern, periodic);
        let offsets = pattern.offsets().len();
        let ranks = lists.len();
        let mut out_start = Vec::with_capacity(ranks + 1);
        let mut out = Vec::new();
        let mut out_offset = Vec::new();
        let mut by_offset = vec![NONE; ranks * offsets];
        let mut in_deg = vec![0u32; ranks + 1];
        out_start.push(0);
        for (r, ns) in lists.iter().enumerate() {
            for &(n, i) in ns {
                out.push(n);
                out_offset.push(i);
                by_offset[r * offsets + i as usize] = n;
                in_deg[n as usize + 1] += 1;
            }
            out_start.push(out.len() as u32);
        }
        for r in 0..ranks {
            in_deg[r + 1] += in_deg[r];
        }
        let in_start = in_deg;
        let mut fill = in_start.clone();
        let mut inn = vec![0u32; out.len()];
        for (src, ns) in lists.iter().enumerate() {
            for &(n, _) in ns {
                inn[fill[n as usize] as usize] = src as u32;
                fill[n as usize] += 1;
            }
        }
        let links = routing.len() as usize * 2 * grid.dims();
        let outside = if routing == grid {
            Vec::new()
        } else {
            (0..links)
                .map(|l| traffic::link_outside(routing, grid.extents(), l))
                .collect()
        };
        let coords = (0..grid.len())
            .map(|n| {
                let c = grid.coord(n);
                let mut out = [0u16; MAX_DIMS];
                for d in 0..grid.dims() {
                    out[d] = c[d] as u16;
                }
                out
            })
            .collect();
        let mut l = ReferenceLoads {
            layout: Arc::new(Layout {
                pattern: pattern.clone(),
                periodic,
                out_start,
                out,
                out_offset,
                in_start,
                inn,
                offsets,
                by_offset,
                coords,
                routing: *routing,
            }),
            counts: Counts {
                loads: vec![0; links],
                load_count: vec![0; 3],
                max_load: 1,
                hot_links: 0,
                outside,
                outside_used: 0,
            },
            total_hops: 0,
            route_count: vec![0],
            longest: 0,
            messages: 0,
            in_batch: vec![false; ranks],
            batch: Vec::new(),
            skip_add: vec![false; ranks * offsets],
            skip_remove: vec![false; ranks * offsets],
            old_node: vec![0; ranks],
        };
        l.route_all(rank_node);
        l
    }

    /// Whether a routing grid's coordinates fit the u16 table.
    #[allow(dead_code)]
    pub(crate) fn supports(routing: &Grid) -> bool {
        routing.extents().iter().all(|&e| e <= u32::from(u16::MAX))
    }

    fn route_all(&mut self, rank_node: &[u32]) {
        for src in 0..self.layout.out_start.len() - 1 {
            for i in self.layout.out_start[src]..self.layout.out_start[src + 1] {
                let dst = self.layout.out[i as usize];
                self.add_route(rank_node[src], rank_node[dst as usize], true);
            }
        }
    }

    /// Starts moving a batch of ranks: notes where they are, and for a slide (`shift`: every
    /// rank moves one step along the same (d, dir)) which messages cancel out.
    ///
    /// Routes are translation invariant, so a message between two moved ranks takes after a
    /// slide the very route that the message one step behind it along the slide took before.
    /// Such a pair cancels: along a slid line only the messages at its two ends change,
    /// which makes plane slides cheap. `node_rank` is the rank on each node before the moves.
    pub(crate) fn begin_batch(
        &mut self,
        grid: &Grid,
        rank_node: &[u32],
        node_rank: &[u32],
        moves: &[crate::sliding::Move],
        shift: Option<(usize, Dir)>,
    ) {
        self.batch.clear();
        for r in moves.iter().map(|m| m.rank) {
            if !self.in_batch[r as usize] {
                self.in_batch[r as usize] = true;
                self.old_node[r as usize] = rank_node[r as usize];
                self.batch.push(r);
            }
        }
        let Some((d, dir)) = shift else {
            return;
        };
        for bi in 0..self.batch.len() {
            let r = self.batch[bi] as usize;
            let at = rank_node[r];
            for m in self.layout.out_start[r]..self.layout.out_start[r + 1] {
                let dst = self.layout.out[m as usize] as usize;
                if !self.in_batch[dst] {
                    continue;
                }
                let i = self.layout.out_offset[m as usize] as usize;
                let slot = r * self.layout.offsets + i;
                // The message one step ahead: its old route is this one's new route.
                if self.shifted_twin(grid, node_rank, at, rank_node[dst], d, dir, i) {
                    self.skip_add[slot] = true;
                }
                // The message one step behind: its new route is this one's old route.
                if self.shifted_twin(grid, node_rank, at, rank_node[dst], d, opposite(dir), i) {
                    self.skip_remove[slot] = true;
                }
            }
        }
    }

    /// Whether the nodes one step from `src` and `dst` along (d, dir) hold two moved ranks
    /// that exchange a message with offset `i`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn shifted_twin(
        &self,
        grid: &Grid,
        node_rank: &[u32],
        src: u32,
        dst: u32,
        d: usize,
        dir: Dir,
        i: usize,
    ) -> bool {
        let (Some(s2), Some(d2)) = (self.step(grid, src, d, dir), self.step(grid, dst, d, dir))
        else {
            return false;
        };
        let (r2, n2) = (node_rank[s2 as usize], node_rank[d2 as usize]);
        r2 != NONE
            && n2 != NONE
            && self.in_batch[r2 as usize]
            && self.in_batch[n2 as usize]
            && self.layout.by_offset[r2 as usize * self.layout.offsets + i] == n2
    }

    /// [`Grid::step`] from the coordinate table, without division.
    #[inline]
    fn step(&self, grid: &Grid, node: u32, d: usize, dir: Dir) -> Option<u32> {
        let x = u32::from(self.layout.coords[node as usize][d]);
        let (e, stride) = (grid.extent(d), grid.stride(d));
        match dir {
            Dir::Plus if x + 1 < e => Some(node + stride),
            Dir::Plus if grid.wraps(d) && e > 1 => Some(node + stride - e * stride),
            Dir::Minus if x > 0 => Some(node - stride),
            Dir::Minus if grid.wraps(d) && e > 1 => Some(node + (e - 1) * stride),
            _ => None,
        }
    }

    /// Ends a batch: moves every message of the moved ranks from its old route to its new
    /// one (links on both routes are left alone).
    pub(crate) fn end_batch(&mut self, rank_node: &[u32]) {
        for bi in 0..self.batch.len() {
            let r = self.batch[bi] as usize;
            let (old, new) = (self.old_node[r], rank_node[r]);
            for m in self.layout.out_start[r]..self.layout.out_start[r + 1] {
                let slot = r * self.layout.offsets + self.layout.out_offset[m as usize] as usize;
                let dst = self.layout.out[m as usize] as usize;
                let old_dst = if self.in_batch[dst] {
                    self.old_node[dst]
                } else {
                    rank_node[dst]
                };
                let (keep_old, keep_new) = (self.skip_remove[slot], self.skip_add[slot]);
                self.skip_remove[slot] = false;
                self.skip_add[slot] = false;
                match (keep_old, keep_new) {
                    (true, true) => {}
                    (true, false) => self.add_route(new, rank_node[dst], true),
                    (false, true) => self.add_route(old, old_dst, false),
                    (false, false) => self.reroute((old, old_dst), (new, rank_node[dst])),
                }
            }
            for m in self.layout.in_start[r]..self.layout.in_start[r + 1] {
                let src = self.layout.inn[m as usize] as usize;
                if !self.in_batch[src] {
                    let from = rank_node[src];
                    self.reroute((from, old), (from, new));
                }
            }
        }
        for &r in &self.batch {
            self.in_batch[r as usize] = false;
        }
        self.batch.clear();
    }

    /// Moves one message from its old route to its new one, touching only the links that
    /// differ (a rank shifted by one keeps most of its routes' links).
    fn reroute(&mut self, old: (u32, u32), new: (u32, u32)) {
        if old == new {
            return;
        }
        let routing = self.layout.routing;
        let coords = &self.layout.coords;
        let mut old_links = [0usize; DIFF_HOPS];
        let mut n_old = 0;
        let old_hops = walk_links(coords, &routing, old.0, old.1, |l| {
            if n_old < DIFF_HOPS {
                old_links[n_old] = l;
            }
            n_old += 1;
        });
        if n_old > DIFF_HOPS {
            self.add_route(old.0, old.1, false);
            self.add_route(new.0, new.1, true);
            return;
        }
        let mut kept = [false; DIFF_HOPS];
        let mut added = [0usize; DIFF_HOPS];
        let mut n_added = 0;
        let mut overflow = false;
        let new_hops = walk_links(coords, &routing, new.0, new.1, |l| {
            match old_links[..n_old].iter().position(|&o| o == l) {
                Some(i) if !kept[i] => kept[i] = true,
                _ if n_added < DIFF_HOPS => {
                    added[n_added] = l;
                    n_added += 1;
                }
                _ => overflow = true,
            }
        });
        if overflow {
            self.add_route(old.0, old.1, false);
            self.add_route(new.0, new.1, true);
            return;
        }
        for &l in &added[..n_added] {
            self.counts.up(l);
        }
        for i in 0..n_old {
            if !kept[i] {
                self.counts.down(old_links[i]);
            }
        }
        self.count_route(old_hops, false);
        self.count_route(new_hops, true);
    }

    /// The pattern these loads are for.
    pub fn pattern(&self) -> &Pattern {
        &self.layout.pattern
    }

    /// Whether the stencil wraps around the logical grid.
    pub fn periodic(&self) -> bool {
        self.layout.periodic
    }

    /// The traffic figures, read in constant time.
    pub fn traffic(&self) -> Traffic {
        Traffic {
            collisions: self.collisions(),
            messages: self.messages,
            total_hops: self.total_hops,
            hot_links: self.counts.hot_links,
            longest_route: self.longest,
            outside_links: self.counts.outside_used,
        }
    }

    /// The largest link load.
    #[inline]
    pub fn collisions(&self) -> u32 {
        if self.total_hops == 0 {
            0
        } else {
            self.counts.max_load
        }
    }

    /// Adds or removes one message's dimension-order route (the rule of [`traffic::route`]).
    #[inline]
    fn add_route(&mut self, src: u32, dst: u32, add: bool) {
        if add {
            self.route::<true>(src, dst)
        } else {
            self.route::<false>(src, dst)
        }
    }

    /// One message's route added (`ADD`) or removed.
    #[inline]
    fn route<const ADD: bool>(&mut self, src: u32, dst: u32) {
        let counts = &mut self.counts;
        let hops = walk_links(&self.layout.coords, &self.layout.routing, src, dst, |l| {
            if ADD {
                counts.up(l)
            } else {
                counts.down(l)
            }
        });
        self.count_route(hops, ADD);
    }

    /// Counts a route of `hops` hops in (or out of) the message figures.
    #[inline]
    fn count_route(&mut self, hops: u32, add: bool) {
        let h = hops as usize;
        if add {
            self.messages += 1;
            self.total_hops += u64::from(hops);
            if h >= self.route_count.len() {
                self.route_count.resize(h + 1, 0);
            }
            self.route_count[h] += 1;
            self.longest = self.longest.max(hops);
        } else {
            self.messages -= 1;
            self.total_hops -= u64::from(hops);
            self.route_count[h] -= 1;
            while self.longest > 0 && self.route_count[self.longest as usize] == 0 {
                self.longest -= 1;
            }
        }
    }
}

impl Counts {
    #[inline]
    fn up(&mut self, link: usize) {
        let v = self.loads[link] as usize;
        self.loads[link] += 1;
        if v == 0 && !self.outside.is_empty() && self.outside[link] {
            self.outside_used += 1;
        }
        // Loads 0 and 1 are not counted: most links carry one message or none, and the
        // largest load only needs the counts from 2 up.
        if v >= 2 {
            self.load_count[v] -= 1;
        }
        if v >= 1 {
            if v + 1 >= self.load_count.len() {
                self.load_count.resize(v + 2, 0);
            }
            self.load_count[v + 1] += 1;
            if v + 1 > self.max_load as usize {
                self.max_load = (v + 1) as u32;
            }
            if v == 1 {
                self.hot_links += 1;
            }
        }
    }

    #[inline]
    fn down(&mut self, link: usize) {
        let v = self.loads[link] as usize;
        debug_assert!(v > 0, "removing a message that was never routed");
        self.loads[link] -= 1;
        if v == 1 && !self.outside.is_empty() && self.outside[link] {
            self.outside_used -= 1;
        }
        if v >= 2 {
            self.load_count[v] -= 1;
            if v >= 3 {
                self.load_count[v - 1] += 1;
            } else {
                self.hot_links -= 1;
            }
            if v == self.max_load as usize && self.load_count[v] == 0 {
                self.max_load -= 1;
            }
        }
    }
}

/// Calls `visit` with each directed link of the dimension-order route on `grid` (the routing
/// grid) between box nodes `src` and `dst` (the rule of [`traffic::route`]), from the
/// coordinate table; returns the hop count.
#[inline]
fn walk_links(
    coords: &[[u16; MAX_DIMS]],
    grid: &Grid,
    src: u32,
    dst: u32,
    mut visit: impl FnMut(usize),
) -> u32 {
    let q = grid.dims();
    let a = coords[src as usize];
    let b = coords[dst as usize];
    // The source's index on the routing grid (the box's own index when they are the same).
    let mut at: usize = (0..q)
        .map(|d| usize::from(a[d]) * grid.stride(d) as usize)
        .sum();
    let mut hops = 0u32;
    for d in 0..q {
        if a[d] == b[d] {
            continue;
        }
        let delta = if grid.wraps(d) {
            grid.delta(d, u32::from(a[d]), u32::from(b[d]))
        } else {
            i64::from(b[d]) - i64::from(a[d])
        };
        let e = grid.extent(d) as usize;
        let stride = grid.stride(d) as usize;
        let (slot, n) = if delta > 0 {
            (0, delta as usize)
        } else {
            (1, (-delta) as usize)
        };
        let mut x = a[d] as usize;
        let crosses_wrap = if slot == 0 { x + n >= e } else { x < n };
        if !crosses_wrap {
            // The common case: consecutive links of one line, a fixed id step apart.
            let link0 = at * 2 * q + 2 * d + slot;
            let hop = stride * 2 * q;
            for k in 0..n {
                visit(if slot == 0 {
                    link0 + k * hop
                } else {
                    link0 - k * hop
                });
            }
            at = if slot == 0 {
                at + n * stride
            } else {
                at - n * stride
            };
        } else {
            for _ in 0..n {
                visit(at * 2 * q + 2 * d + slot);
                if slot == 0 {
                    if x + 1 == e {
                        at -= x * stride;
                        x = 0;
                    } else {
                        at += stride;
                        x += 1;
                    }
                } else if x == 0 {
                    at += (e - 1) * stride;
                    x = e - 1;
                } else {
                    at -= stride;
                    x -= 1;
                }
            }
        }
        hops += n as u32;
    }
    hops
}

fn opposite(dir: Dir) -> Dir {
    match dir {
        Dir::Plus => Dir::Minus,
        Dir::Minus => Dir::Plus,
    }
}
