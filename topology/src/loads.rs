//! Link loads kept up to date as ranks move.
//!
//! Recomputing every route after each failure costs the whole job's traffic; moving one rank
//! changes only its own messages and those sent to it. [`LinkLoads`] keeps the load of every
//! directed link, the largest load and a link at it, the links with two messages or more,
//! the total hop count and a histogram of route lengths. A batch of moves takes each affected
//! message from its old route to its new one, and a slide only the messages at the ends of
//! its slid lines.
//!
//! The layout is chosen for the simulator's inner loop (see `docs/simulation.md`, "Speed").
//! On a mesh of up to three dimensions with a symmetric pattern (the stencils), routes come
//! from [`crate::route_tables`]: a slide's message pair with a fixed rank changes by one
//! table entry per step, and a message between moved ranks is moved by its route's entry;
//! the link changes are listed first and applied in one loop (sixteen at a time on AMD's
//! processors with AVX-512, [`Edit::apply`]), and the few messages outside
//! the tables' window are walked after the look-ups. Elsewhere (rings, wider patterns) each
//! node's routing coordinates and routing index sit in one 16-byte record, a slide's message
//! with one moved end changes by that end only (`reroute_step`), one with both ends moved is
//! translated, and any other reroute removes the old route and adds the new one. A slide's
//! cancelling pairs are found from the moved ranks ahead and behind each moved rank, read
//! off the order of the slide's moves. Updates go through separate borrows of the tables
//! ([`Edit`]) so that the running figures stay in registers. The previous engine is kept in
//! [`crate::loads_reference`] as the measure of this one.

use std::sync::Arc;

use crate::grid::{Dir, Grid, MAX_DIMS};
use crate::route_tables::{self, RouteTables, RUN, TABLE_CAP};
use crate::traffic::{self, Pattern, Traffic};

/// Incrementally maintained link loads of one placement under one stencil pattern.
///
/// What never changes (the messages, the node coordinates) is shared between clones, so that
/// copying a map for a decision, or resetting one for the next simulated sample, copies only
/// the loads.
#[derive(Debug, PartialEq, Eq)]
pub struct LinkLoads {
    layout: Arc<Layout>,
    counts: Counts,
    routes: RouteStats,
    /// Per rank: where it stood and its moved neighbours along a slide, while it is in the
    /// batch being applied ([`LinkLoads::begin_batch`]).
    moving: Vec<Moving>,
    batch: Vec<u32>,
    /// The step every rank of the batch takes when the batch is a slide.
    shift: Option<(usize, Dir)>,
    /// The link changes of the batch, when it is moved by the tables.
    changes: Changes,
}

/// `clone_from` reuses the buffers: the simulator resets its map from a kept one for every
/// sample, which allocated each table afresh.
impl Clone for LinkLoads {
    fn clone(&self) -> LinkLoads {
        let LinkLoads {
            layout,
            counts,
            routes,
            moving,
            batch,
            shift,
            changes,
        } = self;
        LinkLoads {
            layout: layout.clone(),
            counts: counts.clone(),
            routes: routes.clone(),
            moving: moving.clone(),
            batch: batch.clone(),
            shift: *shift,
            changes: changes.clone(),
        }
    }

    fn clone_from(&mut self, source: &LinkLoads) {
        let LinkLoads {
            layout,
            counts,
            routes,
            moving,
            batch,
            shift,
            changes: _,
        } = source;
        self.layout.clone_from(layout);
        self.counts.clone_from(counts);
        self.routes.clone_from(routes);
        // Between batches every rank is `STILL`: a table of the same length is already equal.
        if self.moving.len() != moving.len() || !batch.is_empty() || !self.batch.is_empty() {
            self.moving.clone_from(moving);
        }
        self.batch.clone_from(batch);
        self.shift = *shift;
        // The changes are scratch space: this map's own buffers stay.
    }
}

/// A rank of the batch being applied, in one record so that a message's other end is one
/// read. All fields are `NONE` for a rank that does not move.
///
/// Sixteen bytes, aligned: the record is one read (0.6 % of a campaign against twelve).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(16))]
struct Moving {
    /// Its node before the batch.
    old: u32,
    /// In a slide, the moved rank one step ahead of it, and the one one step behind (`NONE`:
    /// none, or not moved; see [`LinkLoads::end_batch`]).
    ahead: u32,
    behind: u32,
}

const STILL: Moving = Moving {
    old: NONE,
    ahead: NONE,
    behind: NONE,
};

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
    /// Every node of the box: coordinates and index on the routing grid, read together.
    nodes: Vec<NodeAt>,
    /// The grid messages are routed on (the box, or the network rings it lies on).
    routing: Grid,
    q: usize,
    /// The routing grid's dimensions, unpacked for the route walk.
    route_dims: [Dim; MAX_DIMS],
    /// Whether no dimension of the routing grid is a ring (nor, then, of the box).
    mesh: bool,
    /// Whether every message has a reverse (x sends to r whenever r sends to x, once per
    /// offset and its opposite), as in the stencils: a batch then handles a moved rank's
    /// messages with a fixed rank in pairs, from its sent messages alone.
    symmetric: bool,
    /// Routes by displacement, on a mesh with a symmetric pattern: a batch then moves most
    /// messages with a table look-up ([`LinkLoads::slide_by_table`]).
    tables: Option<RouteTables>,
    /// The run [`Changes::route`] writes each segment of a route as: [`SEGMENT`] or
    /// [`LONG_SEGMENT`] when the routing grid's longest line fits it, else 0 (as long as
    /// the segment).
    segment: usize,
}

/// One box node: its coordinates (box and routing coordinates are the same) and its index on
/// the routing grid. 16 bytes: one read gives both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C, align(16))]
struct NodeAt {
    coord: [u16; MAX_DIMS],
    at: u32,
}

/// The dimensions in which two nodes' coordinates differ, as a bit mask, without a branch:
/// the coordinates are compared as 16-bit lanes of two words.
#[inline(always)]
fn differing(a: &NodeAt, b: &NodeAt) -> u32 {
    let words = |c: &[u16; MAX_DIMS]| {
        let lo =
            u64::from(c[0]) | u64::from(c[1]) << 16 | u64::from(c[2]) << 32 | u64::from(c[3]) << 48;
        (lo, u64::from(c[4]) | u64::from(c[5]) << 16)
    };
    let ((a0, a1), (b0, b1)) = (words(&a.coord), words(&b.coord));
    const LOW: u64 = 0x7FFF_7FFF_7FFF_7FFF;
    const HIGH: u64 = 0x8000_8000_8000_8000;
    // The top bit of each lane, set when the lane is not zero.
    let nonzero = |x: u64| (((x & LOW) + LOW) | x) & HIGH;
    let (m, n) = (nonzero(a0 ^ b0), nonzero(a1 ^ b1));
    (((m >> 15) & 1)
        | ((m >> 30) & 2)
        | ((m >> 45) & 4)
        | ((m >> 60) & 8)
        | ((n >> 11) & 16)
        | ((n >> 26) & 32)) as u32
}

/// One dimension of a grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Dim {
    extent: u32,
    stride: u32,
    wraps: bool,
}

/// The load of every directed link, the largest load and a link at it, and the links with
/// two messages or more. Each update keeps the figures in registers, with no histogram of
/// loads to copy with every map and no count of the links at the largest load: when the
/// link last raised to the largest load carries less at the end of a batch, the largest
/// load is found again by a scan ([`Counts::settle`]), which few batches need.
///
/// `Default` is only the empty start of a clone.
#[derive(Debug, PartialEq, Eq, Default)]
struct Counts {
    loads: Vec<u32>,
    /// The largest load, raised by the updates and lowered by [`Counts::settle`].
    max_load: u32,
    /// A link that carried `max_load` when it was last found or raised; when it carries less
    /// at the end of a batch, no link may carry it any more ([`Counts::settle`]).
    witness: Witness,
    /// Links with load 2 or more.
    hot: u64,
    /// Per link, whether it has an end outside the box (empty when routes never leave it).
    outside: Vec<bool>,
    /// Outside links that carry a message.
    outside_used: u64,
    /// Link-load updates made so far (`spares bench`).
    updates: UpdateCount,
}

impl Clone for Counts {
    fn clone(&self) -> Counts {
        let mut c = Counts::default();
        c.clone_from(self);
        c
    }

    fn clone_from(&mut self, source: &Counts) {
        let Counts {
            loads,
            max_load,
            witness,
            hot,
            outside,
            outside_used,
            updates,
        } = source;
        self.loads.clone_from(loads);
        self.max_load = *max_load;
        self.witness = *witness;
        self.hot = *hot;
        self.outside.clone_from(outside);
        self.outside_used = *outside_used;
        self.updates = *updates;
    }
}

/// The counts borrowed for a batch of updates, each table on its own. Through `&mut Counts`
/// every store to a load could have changed the other fields as far as the compiler knows,
/// so each update read the tables' addresses and the running figures from memory again;
/// here they stay in registers.
struct Edit<'a> {
    loads: &'a mut [u32],
    outside: &'a [bool],
    counts: Figures<'a>,
    max: u32,
    /// The link last raised to a new largest load in this batch (`NO_LINK`: none).
    raised: usize,
    hot: u64,
    used: u64,
    count: u64,
}

/// Where [`Edit::finish`] writes the running figures back.
struct Figures<'a> {
    max_load: &'a mut u32,
    witness: &'a mut Witness,
    hot: &'a mut u64,
    outside_used: &'a mut u64,
    updates: &'a mut UpdateCount,
}

/// A count of work done, not part of the state: two loads that agree on every link are equal
/// whatever their histories.
#[derive(Debug, Clone, Copy, Default)]
struct UpdateCount(u64);

impl PartialEq for UpdateCount {
    fn eq(&self, _: &UpdateCount) -> bool {
        true
    }
}

impl Eq for UpdateCount {}

/// A link at the largest load ([`Counts`]), not part of the state: two loads that agree on
/// every link are equal whichever link each found at the largest load.
#[derive(Debug, Clone, Copy, Default)]
struct Witness(usize);

const NO_LINK: usize = usize::MAX;

impl PartialEq for Witness {
    fn eq(&self, _: &Witness) -> bool {
        true
    }
}

impl Eq for Witness {}

/// Message count, total hops and route lengths.
#[derive(Debug, PartialEq, Eq, Default)]
struct RouteStats {
    total_hops: u64,
    /// `route_count[h]`: messages whose route has h hops.
    route_count: Vec<u64>,
    longest: u32,
    messages: u64,
}

impl Clone for RouteStats {
    fn clone(&self) -> RouteStats {
        let mut r = RouteStats::default();
        r.clone_from(self);
        r
    }

    fn clone_from(&mut self, source: &RouteStats) {
        let RouteStats {
            total_hops,
            route_count,
            longest,
            messages,
        } = source;
        self.total_hops = *total_hops;
        self.route_count.clone_from(route_count);
        self.longest = *longest;
        self.messages = *messages;
    }
}

pub(crate) const NONE: u32 = u32::MAX;
/// The entries of `by_offset`'s last row.
const NO_RANK_ROW: u32 = u32::MAX - 1;

impl LinkLoads {
    /// The loads of `rank_node` (box node of every rank) on `grid`, the box, under `pattern`;
    /// messages are routed on `routing` (see [`Grid::routing_grid`]).
    pub fn new(
        grid: &Grid,
        routing: &Grid,
        compute: &[u32],
        rank_node: &[u32],
        pattern: &Pattern,
        periodic: bool,
    ) -> LinkLoads {
        let lists = traffic::neighbour_offsets(compute, pattern, periodic);
        let offsets = pattern.offsets().len();
        let ranks = lists.len();
        let mut out_start = Vec::with_capacity(ranks + 1);
        let mut out = Vec::new();
        let mut out_offset = Vec::new();
        // One more row, of a rank that does not exist: the row of "no rank" in a slide's twin
        // checks, whose entries match neither a rank nor `NONE`.
        let mut by_offset = vec![NONE; ranks * offsets];
        by_offset.extend(std::iter::repeat_n(NO_RANK_ROW, offsets));
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
        let q = grid.dims();
        let links = routing.len() as usize * 2 * q;
        let outside = if routing == grid {
            Vec::new()
        } else {
            (0..links)
                .map(|l| traffic::link_outside(routing, grid.extents(), l))
                .collect()
        };
        let nodes = (0..grid.len())
            .map(|n| {
                let c = grid.coord(n);
                let mut out = NodeAt::default();
                for d in 0..q {
                    out.coord[d] = c[d] as u16;
                }
                out.at = routing.reindex(grid, n);
                out
            })
            .collect::<Vec<NodeAt>>();
        let symmetric = {
            let offs = pattern.offsets();
            let opposite: Vec<Option<usize>> = offs
                .iter()
                .map(|o| {
                    offs.iter()
                        .position(|p| p.iter().zip(o).all(|(a, b)| *a == -*b))
                })
                .collect();
            (0..ranks).all(|r| {
                let sent = out_start[r] as usize..out_start[r + 1] as usize;
                sent.len() == (in_start[r + 1] - in_start[r]) as usize
                    && sent.into_iter().all(|m| {
                        let x = out[m] as usize;
                        opposite[out_offset[m] as usize]
                            .is_some_and(|j| by_offset[x * offsets + j] == r as u32)
                    })
            })
        };
        let dims_of = |g: &Grid| {
            let mut dims = [Dim::default(); MAX_DIMS];
            for (d, dim) in dims.iter_mut().enumerate().take(q) {
                *dim = Dim {
                    extent: g.extent(d),
                    stride: g.stride(d),
                    wraps: g.wraps(d),
                };
            }
            dims
        };
        let mut l = LinkLoads {
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
                nodes,
                routing: *routing,
                q,
                route_dims: dims_of(routing),
                segment: match routing.extents().iter().max().map_or(0, |&e| e as usize) {
                    e if e <= SEGMENT => SEGMENT,
                    e if e <= LONG_SEGMENT => LONG_SEGMENT,
                    _ => 0,
                },
                mesh: (0..q).all(|d| !routing.wraps(d)),
                symmetric,
                tables: symmetric
                    .then(|| RouteTables::new(routing))
                    .flatten()
                    .filter(|t| rank_room(offsets, t) <= ROOM),
            }),
            counts: Counts {
                loads: vec![0; links],
                max_load: 0,
                witness: Witness(0),
                hot: 0,
                outside,
                outside_used: 0,
                updates: UpdateCount::default(),
            },
            routes: RouteStats {
                total_hops: 0,
                // Every length a route on the routing grid can have: no growth per update.
                // At least 256 entries: a slide's loop indexes them by a byte, unchecked.
                route_count: vec![
                    0;
                    (1 + (0..q)
                        .map(|d| if routing.wraps(d) {
                            routing.extent(d) as usize / 2
                        } else {
                            routing.extent(d) as usize - 1
                        })
                        .sum::<usize>())
                    .max(256)
                ],
                longest: 0,
                messages: 0,
            },
            moving: vec![STILL; ranks],
            batch: Vec::new(),
            shift: None,
            changes: Changes::default(),
        };
        l.route_all(rank_node);
        l
    }

    /// Handles every message on its own even when the pattern is symmetric (the path of
    /// patterns that are not), for tests. The layout must not be shared yet.
    #[cfg(test)]
    pub(crate) fn without_pairs(&mut self) {
        let layout = Arc::get_mut(&mut self.layout).expect("loads not cloned yet");
        layout.symmetric = false;
        layout.tables = None;
    }

    /// Walks every route as without tables (the path of rings and wide patterns), for tests.
    /// The layout must not be shared yet.
    #[cfg(test)]
    pub(crate) fn without_tables(&mut self) {
        Arc::get_mut(&mut self.layout)
            .expect("loads not cloned yet")
            .tables = None;
    }

    /// Whether a routing grid's coordinates fit the u16 table.
    pub(crate) fn supports(routing: &Grid) -> bool {
        routing.extents().iter().all(|&e| e <= u32::from(u16::MAX))
    }

    fn route_all(&mut self, rank_node: &[u32]) {
        let layout = &*self.layout;
        let mut edit = self.counts.edit();
        for src in 0..layout.out_start.len() - 1 {
            for i in layout.out_start[src]..layout.out_start[src + 1] {
                let dst = layout.out[i as usize];
                let (a, b) = (rank_node[src], rank_node[dst as usize]);
                add_route(layout, &mut edit, &mut self.routes, a, b);
            }
        }
        edit.finish();
        self.counts.settle();
    }

    /// Starts moving a batch of ranks: notes where they are. `shift` says that the batch is a
    /// slide: every rank moves one step along the same (d, dir).
    pub(crate) fn begin_batch(
        &mut self,
        _grid: &Grid,
        rank_node: &[u32],
        _node_rank: &[u32],
        moves: &[crate::sliding::Move],
        shift: Option<(usize, Dir)>,
    ) {
        self.batch.clear();
        let mut prev: Option<&crate::sliding::Move> = None;
        for m in moves {
            let r = m.rank as usize;
            if self.moving[r].old != NONE {
                continue;
            }
            self.moving[r].old = rank_node[r];
            self.batch.push(m.rank);
            // A slide lists each line's moves farthest first, so the move before this one
            // left the node this one takes: its rank now stands one step ahead of this one,
            // and this one where it stood. (Any other order only finds fewer such pairs.)
            if let Some(p) = prev.filter(|p| shift.is_some() && p.from == m.to) {
                self.moving[r].ahead = p.rank;
                self.moving[p.rank as usize].behind = m.rank;
            }
            prev = Some(m);
        }
        self.shift = shift;
    }

    /// Starts a slide along `shift` whose moves are marked one by one ([`LinkLoads::mark`])
    /// as the map carries them out: [`LinkLoads::begin_batch`] without a list of moves.
    #[inline]
    pub(crate) fn begin_slide(&mut self, shift: (usize, Dir)) {
        self.batch.clear();
        self.shift = Some(shift);
    }

    /// Starts a batch of moves that are not a slide, marked one by one ([`LinkLoads::mark`]
    /// with no rank ahead).
    #[inline]
    pub(crate) fn begin_moves(&mut self) {
        self.batch.clear();
        self.shift = None;
    }

    /// One move of a batch begun by [`LinkLoads::begin_slide`] or
    /// [`LinkLoads::begin_moves`], marked before [`LinkLoads::end_batch`]: `rank` leaves node
    /// `old`, and in a slide `ahead` is the rank that the move before it, on the same line,
    /// took one step ahead (`NONE` for a line's first move, and outside slides). Each rank
    /// moves once in such a batch.
    #[inline(always)]
    pub(crate) fn mark(&mut self, rank: u32, old: u32, ahead: u32) {
        self.moving[rank as usize] = Moving {
            old,
            ahead,
            behind: NONE,
        };
        if ahead != NONE {
            self.moving[ahead as usize].behind = rank;
        }
        self.batch.push(rank);
    }

    /// Ends a batch: moves every message of the moved ranks from its old route to its new
    /// one (links on both routes are left alone). `node_rank` is the rank on each node after
    /// the moves.
    ///
    /// Routes are translation invariant, so in a slide a message between two moved ranks
    /// takes the very route that the message one step ahead of it (between the ranks ahead of
    /// both ends, with the same offset) took before. Such pairs cancel: along a slid line only
    /// the messages at its two ends change, which makes plane slides cheap. The ranks ahead
    /// and behind are found once per moved rank ([`LinkLoads::begin_batch`]), not once per
    /// message.
    pub(crate) fn end_batch(&mut self, rank_node: &[u32], _node_rank: &[u32]) {
        let shift = self.shift.take();
        match shift {
            _ if self.layout.tables.is_none() => self.move_messages(rank_node, shift),
            Some((k, dir)) => self.slide_by_table(rank_node, k, dir),
            None if self.layout.segment == SEGMENT => self.moves_by_table::<SEGMENT>(rank_node),
            None => self.moves_by_table_long(rank_node),
        }
        self.counts.settle();
        self.routes.settle();
        for &r in &self.batch {
            self.moving[r as usize] = STILL;
        }
        self.batch.clear();
    }

    /// [`LinkLoads::end_batch`]'s messages, each route walked.
    fn move_messages(&mut self, rank_node: &[u32], shift: Option<(usize, Dir)>) {
        let layout = &*self.layout;
        let mut edit = self.counts.edit();
        let (counts, routes) = (&mut edit, &mut self.routes);
        let moving = &self.moving;
        // A slide on a routing grid without rings: routes change by their moved end only
        // ([`reroute_step`]), and a message between two moved ranks is translated.
        let step = shift
            .filter(|_| layout.mesh)
            .map(|(k, dir)| (k, dir == Dir::Plus));
        let offsets = layout.offsets;
        for &r in &self.batch {
            let r = r as usize;
            let (old, new) = (moving[r].old, rank_node[r]);
            let (ahead_r, behind_r) = (moving[r].ahead, moving[r].behind);
            for m in layout.out_start[r] as usize..layout.out_start[r + 1] as usize {
                let dst = layout.out[m] as usize;
                let new_dst = rank_node[dst];
                let old_dst = moving[dst].old;
                if old_dst == NONE {
                    // The message to a fixed rank, and with a symmetric pattern its reverse.
                    let pair = layout.symmetric;
                    match step {
                        Some((k, true)) => {
                            reroute_step::<true, true>(layout, counts, routes, old, new_dst, k);
                            if pair {
                                reroute_step::<false, true>(
                                    layout, counts, routes, old, new_dst, k,
                                );
                            }
                        }
                        Some((k, false)) => {
                            reroute_step::<true, false>(layout, counts, routes, old, new_dst, k);
                            if pair {
                                reroute_step::<false, false>(
                                    layout, counts, routes, old, new_dst, k,
                                );
                            }
                        }
                        None => {
                            reroute(layout, counts, routes, (old, new_dst), (new, new_dst));
                            if pair {
                                reroute(layout, counts, routes, (new_dst, old), (new_dst, new));
                            }
                        }
                    }
                    continue;
                }
                if shift.is_none() {
                    reroute(layout, counts, routes, (old, old_dst), (new, new_dst));
                    continue;
                }
                let i = layout.out_offset[m] as usize;
                // Whether the new route is the old route of the message one step ahead (not
                // removed), and whether the old route is the new route of the one behind.
                let twin_ahead = ahead_r != NONE
                    && moving[dst].ahead != NONE
                    && layout.by_offset[ahead_r as usize * offsets + i] == moving[dst].ahead;
                let twin_behind = behind_r != NONE
                    && moving[dst].behind != NONE
                    && layout.by_offset[behind_r as usize * offsets + i] == moving[dst].behind;
                match (twin_ahead, twin_behind) {
                    (true, true) => {}
                    (true, false) => remove_route(layout, counts, routes, old, old_dst),
                    (false, true) => add_route(layout, counts, routes, new, new_dst),
                    (false, false) => match step {
                        Some((k, up)) => translate(layout, counts, old, old_dst, k, up),
                        None => reroute(layout, counts, routes, (old, old_dst), (new, new_dst)),
                    },
                }
            }
            if layout.symmetric {
                continue;
            }
            for m in layout.in_start[r] as usize..layout.in_start[r + 1] as usize {
                let src = layout.inn[m] as usize;
                if moving[src].old == NONE {
                    let from = rank_node[src];
                    match step {
                        Some((k, true)) => {
                            reroute_step::<false, true>(layout, counts, routes, old, from, k)
                        }
                        Some((k, false)) => {
                            reroute_step::<false, false>(layout, counts, routes, old, from, k)
                        }
                        None => reroute(layout, counts, routes, (from, old), (from, new)),
                    }
                }
            }
        }
        edit.finish();
    }

    /// [`LinkLoads::end_batch`]'s messages of a slide along (k, dir) on a mesh with a
    /// symmetric pattern: each message (or pair with a fixed rank) within the tables' window
    /// moves by a table look-up; the rest are walked as in [`LinkLoads::move_messages`]. The
    /// link changes are listed first and applied after.
    fn slide_by_table(&mut self, rank_node: &[u32], k: usize, dir: Dir) {
        let layout = &*self.layout;
        let tables = layout.tables.as_ref().expect("called with tables");
        let (moving, nodes) = (&self.moving[..], &layout.nodes[..]);
        // A node's coordinates as the table's key: the compiler reads the four lanes as one
        // word (a table of keys beside `nodes` only took room in the first cache level).
        let keys = |x: u32| route_tables::key(&nodes[x as usize].coord);
        let up = dir == Dir::Plus;
        let (table, steps, by_offset) =
            (tables.table(), tables.steps(k, up), &layout.by_offset[..]);
        let offsets = layout.offsets;
        let q2 = 2 * layout.q;
        // The row of a rank that is not moved: no offset leads to a moved rank from it.
        // `NONE` (past every rank) selects it, with no branch: whether a moved rank has one
        // ahead or behind follows the slide's shape.
        let no_row = by_offset.len() / offsets - 1;
        let row = |x: u32| {
            let x = (x as usize).min(no_row);
            &by_offset[x * offsets..(x + 1) * offsets]
        };
        // The list and the route figures are plain locals and slices in the loop, so that
        // they stay in registers: through `&mut self` they were stored and loaded again
        // around every write to the list. A rank's lists fit in its room ([`rank_room`]).
        let mut buf = std::mem::take(&mut self.changes.buf);
        let mut len = 0;
        let mut rare = std::mem::take(&mut self.changes.rare);
        rare.clear();
        let routes = &mut self.routes;
        let (mut total_hops, mut longest, mut messages) =
            (routes.total_hops, routes.longest, routes.messages);
        // Every length a route on the grid can have has its entry (sized by `new`), and every
        // hop count of the tables (a byte).
        let route_count: &mut [u64; 256] = (&mut routes.route_count[..256])
            .try_into()
            .expect("route counts padded to 256");
        let routes_by_index = tables.routes();
        let window = tables.window();
        for &r in &self.batch {
            if buf.len() < len + ROOM + RUN {
                buf.resize((len + ROOM + RUN).max(2 * buf.len()), 0);
            }
            let room: &mut [u32; ROOM + RUN] = (&mut buf[len..len + ROOM + RUN])
                .try_into()
                .expect("room for a rank");
            let mut n = 0;
            let Moving { old, ahead, behind } = moving[r as usize];
            let from_key = keys(old);
            // The first entry of every list: removals at the rank's old node's links,
            // additions at its new node's.
            let removed = link_change(nodes[old as usize].at as usize * q2, false);
            let added = link_change(nodes[rank_node[r as usize] as usize].at as usize * q2, true);
            let rows = row(r).iter().zip(row(ahead)).zip(row(behind));
            for (i, ((&dst, &ahead_dst), &behind_dst)) in rows.enumerate() {
                // No message (`NONE`, past every rank) and the bounds in one check.
                let Some(&other) = moving.get(dst as usize) else {
                    continue;
                };
                if other.old == NONE {
                    // The message to a fixed rank and its reverse.
                    let fixed = rank_node[dst as usize];
                    match window.index_of(from_key, keys(fixed)) {
                        Some(index) => {
                            let s = steps[index];
                            n = copy_list(room, n, table, removed, s.start, s.len.into());
                            let (b, a) = (usize::from(s.hops_before), usize::from(s.hops_after));
                            total_hops = total_hops + 2 * a as u64 - 2 * b as u64;
                            route_count[b] -= 2;
                            route_count[a] += 2;
                            longest = longest.max(a as u32);
                        }
                        None => rare.push((r, i as u32)),
                    }
                    continue;
                }
                // Whether the new route is the old route of the message one step ahead (not
                // removed), and whether the old route is the new route of the one behind
                // (the no-row's entries match no rank).
                let twin_ahead = (ahead_dst == other.ahead) & (other.ahead != NONE);
                let twin_behind = (behind_dst == other.behind) & (other.behind != NONE);
                if twin_ahead & twin_behind {
                    continue;
                }
                // Both ends took the same step: the displacement is the same before and after.
                let Some(index) = window.index_of(from_key, keys(other.old)) else {
                    rare.push((r, i as u32));
                    continue;
                };
                let route = routes_by_index[index];
                if !twin_ahead {
                    n = copy_list(room, n, table, added, route.start, route.len.into());
                }
                if !twin_behind {
                    n = copy_list(room, n, table, removed, route.start, route.len.into());
                }
                // One message fewer (its new route is the one ahead's old one), or one more
                // (its old route is the one behind's new one); the longest route is lowered
                // at the end of the batch.
                let hops = u64::from(route.hops[0]);
                let h = usize::from(route.hops[0]);
                if twin_ahead != twin_behind {
                    if twin_ahead {
                        messages -= 1;
                        total_hops -= hops;
                        route_count[h] -= 1;
                    } else {
                        messages += 1;
                        total_hops += hops;
                        route_count[h] += 1;
                        longest = longest.max(h as u32);
                    }
                }
            }
            len += n;
        }
        (routes.total_hops, routes.longest, routes.messages) = (total_hops, longest, messages);
        self.changes.buf = buf;
        self.changes.len = len;
        self.changes.rare = rare;
        if !self.changes.rare.is_empty() {
            self.slide_rare(rank_node, k, up);
        }
        self.counts.edit().apply(self.changes.listed());
    }

    /// [`LinkLoads::slide_by_table`]'s messages outside the tables' window (listed in
    /// `changes.rare` as (rank, offset)), walked. The loads end the same whatever the order
    /// of the changes: each removal is of a route some message has before the batch.
    #[inline(never)]
    fn slide_rare(&mut self, rank_node: &[u32], k: usize, up: bool) {
        let layout = &*self.layout;
        let (changes, routes) = (&mut self.changes, &mut self.routes);
        let rare = std::mem::take(&mut changes.rare);
        let moving = &self.moving;
        let offsets = layout.offsets;
        for &(r, i) in &rare {
            let (r, i) = (r as usize, i as usize);
            let Moving { old, ahead, behind } = moving[r];
            let dst = layout.by_offset[r * offsets + i] as usize;
            let other = moving[dst];
            if other.old == NONE {
                let fixed = rank_node[dst];
                if up {
                    reroute_step::<true, true>(layout, changes, routes, old, fixed, k);
                    reroute_step::<false, true>(layout, changes, routes, old, fixed, k);
                } else {
                    reroute_step::<true, false>(layout, changes, routes, old, fixed, k);
                    reroute_step::<false, false>(layout, changes, routes, old, fixed, k);
                }
                continue;
            }
            let at = |x: u32| {
                if x == NONE {
                    NO_RANK_ROW
                } else {
                    layout.by_offset[x as usize * offsets + i]
                }
            };
            let twin_ahead = (at(ahead) == other.ahead) & (other.ahead != NONE);
            let twin_behind = (at(behind) == other.behind) & (other.behind != NONE);
            match (twin_ahead, twin_behind) {
                (true, true) => {}
                (true, false) => remove_route(layout, changes, routes, old, other.old),
                (false, true) => add_route(layout, changes, routes, rank_node[r], rank_node[dst]),
                (false, false) => translate(layout, changes, old, other.old, k, up),
            }
        }
        changes.rare = rare;
    }

    /// [`LinkLoads::end_batch`]'s messages of moves that are not a slide (0D, a re-map), on
    /// a mesh with a symmetric pattern: each pair with a fixed rank within the tables' window
    /// moves by a table look-up; the rest are walked.
    fn moves_by_table<const SEG: usize>(&mut self, rank_node: &[u32]) {
        let layout = &*self.layout;
        let tables = layout.tables.as_ref().expect("called with tables");
        let (changes, routes) = (&mut self.changes, &mut self.routes);
        changes.clear();
        let moving = &self.moving;
        let q2 = 2 * layout.q;
        for &r in &self.batch {
            let r = r as usize;
            let (old, new) = (moving[r].old, rank_node[r]);
            let (from, to) = (&layout.nodes[old as usize], &layout.nodes[new as usize]);
            for &dst in &layout.out[layout.out_start[r] as usize..layout.out_start[r + 1] as usize]
            {
                let dst = dst as usize;
                let other = rank_node[dst];
                if moving[dst].old != NONE {
                    reroute(
                        layout,
                        changes,
                        routes,
                        (old, moving[dst].old),
                        (new, other),
                    );
                    continue;
                }
                // The message to a fixed rank and its reverse: the old pair out and the new
                // one in, each by its table entry when within the window, else walked (a 0D
                // move's new node is mostly far away, its old one beside the fixed rank).
                let there = &layout.nodes[other as usize].coord;
                match tables.index(&from.coord, there) {
                    Some(i) => {
                        let before = tables.pair(i);
                        let base = from.at as usize * q2;
                        changes.extend(base, tables.table(), before.start, before.len.into(), 0);
                        routes.remove(before.hops[0].into());
                        routes.remove(before.hops[1].into());
                    }
                    None => {
                        routes.remove(changes.route::<SEG>(layout, old, other, 0));
                        routes.remove(changes.route::<SEG>(layout, other, old, 0));
                    }
                }
                match tables.index(&to.coord, there) {
                    Some(j) => {
                        let after = tables.pair(j);
                        let base = to.at as usize * q2;
                        changes.extend(base, tables.table(), after.start, after.len.into(), 1);
                        routes.add(after.hops[0].into());
                        routes.add(after.hops[1].into());
                    }
                    None => {
                        routes.add(changes.route::<SEG>(layout, new, other, 1));
                        routes.add(changes.route::<SEG>(layout, other, new, 1));
                    }
                }
            }
        }
        self.counts.edit().apply(self.changes.listed());
    }

    /// [`LinkLoads::moves_by_table`] on a routing grid with lines longer than [`SEGMENT`],
    /// out of line: one copy per segment run ([`Changes::route`]), and the listing of
    /// shorter lines, inlined in [`LinkLoads::end_batch`], stays as it was (a copy of each
    /// there made the seeds' 12^3 campaign 1 % slower).
    #[inline(never)]
    fn moves_by_table_long(&mut self, rank_node: &[u32]) {
        if self.layout.segment == LONG_SEGMENT {
            self.moves_by_table::<LONG_SEGMENT>(rank_node);
        } else {
            self.moves_by_table::<0>(rank_node);
        }
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
            messages: self.routes.messages,
            total_hops: self.routes.total_hops,
            hot_links: self.counts.hot_links(),
            longest_route: self.routes.longest,
            outside_links: self.counts.outside_used,
        }
    }

    /// Link-load updates (one link's load up or down by one) made since these loads were
    /// built, the initial routes included: the engine's unit of work.
    pub fn updates(&self) -> u64 {
        self.counts.updates.0
    }

    /// The largest link load.
    #[inline]
    pub fn collisions(&self) -> u32 {
        if self.routes.total_hops == 0 {
            0
        } else {
            self.counts.max_load
        }
    }
}

impl Layout {
    /// Calls `visit` with each directed link of the dimension-order route on the routing grid
    /// between box nodes `src` and `dst` (the rule of [`traffic::route`]); returns the hop
    /// count.
    #[inline(always)]
    fn walk(&self, src: u32, dst: u32, mut visit: impl FnMut(usize)) -> u32 {
        let (a, b) = (&self.nodes[src as usize], &self.nodes[dst as usize]);
        let q2 = 2 * self.q;
        let mut at = a.at as usize;
        let mut hops = 0u32;
        // The dimensions in which the ends differ, found without a branch per dimension
        // (unused dimensions are 0 at both ends): most routes change one or two.
        let mut differ = differing(a, b);
        while differ != 0 {
            let d = differ.trailing_zeros() as usize;
            differ &= differ - 1;
            let (x, y) = (i32::from(a.coord[d]), i32::from(b.coord[d]));
            let Dim {
                extent,
                stride,
                wraps,
            } = self.route_dims[d];
            let e = extent as i32;
            let mut delta = y - x;
            if wraps {
                // The shorter way round; on an exact tie, the positive direction.
                if delta < 0 {
                    delta += e;
                }
                if 2 * delta > e {
                    delta -= e;
                }
            }
            let n = delta.unsigned_abs();
            hops += n;
            let slot = usize::from(delta < 0);
            // The links of a segment are a fixed id step apart, up or down (signed
            // arithmetic: the direction is data, and a branch on it mispredicted). On a
            // ring a segment that passes the end goes on from the other end of the line:
            // two runs, and one call site for `visit` so that it is inlined.
            let stride = stride as isize;
            let step = stride * q2 as isize * (1 - 2 * slot as isize);
            let (before, wrap_to) = if slot == 0 {
                (e - x, 0)
            } else {
                (x + 1, e - 1)
            };
            let wrap_from = (at as isize + (wrap_to - x) as isize * stride) as usize;
            let mut link = (at * q2 + 2 * d + slot) as isize;
            for k in 0..n {
                if k == before as u32 {
                    link = (wrap_from * q2 + 2 * d + slot) as isize;
                }
                visit(link as usize);
                link += step;
            }
            at = (at as isize + (y - x) as isize * stride) as usize;
        }
        hops
    }
}

/// A link change as the lists hold it: the link doubled, plus 1 for one message more (`up`),
/// 0 for one less.
#[inline(always)]
fn link_change(link: usize, up: bool) -> u32 {
    link as u32 * 2 + u32::from(up)
}

/// The room a rank's lists take ([`LinkLoads::slide_by_table`], [`Changes::extend`]), and
/// [`RUN`] more: a constant, so that writing a run needs no bounds check. A slide's rank
/// with a 27-point stencil in three dimensions takes under half of it; the tables are kept
/// only where a rank's lists fit.
const ROOM: usize = 4096;

/// The room a slide's rank may take: two lists per message, each with a run's room.
fn rank_room(offsets: usize, tables: &RouteTables) -> usize {
    offsets * 2 * (tables.longest_list() + RUN)
}

/// Copies the tabulated links `table[start..start + count]` (relative, doubled, a step's
/// with their direction in the low bit) to `room[n..]`, `first` added to each (the link base
/// doubled, plus 1 for the links of a route to add); returns the end of the list there.
///
/// The table is followed by [`RUN`] more entries ([`RouteTables::table`]): a list of up to
/// `RUN` links is copied as a run of that fixed length, whose end is no branch to
/// mispredict; the entries past `count` are overwritten by the next list. The run is one
/// array expression, which the compiler turns into vector additions where the copy inlines
/// into a long loop (a loop over its slots stayed one scalar addition per link there); a
/// longer list is copied out of line.
#[inline(always)]
fn copy_list(
    room: &mut [u32; ROOM + RUN],
    n: usize,
    table: &[i32; TABLE_CAP + RUN],
    first: u32,
    start: u32,
    count: usize,
) -> usize {
    // Every start is below `TABLE_CAP`: the mask only spares the bounds check.
    let start = start as usize & (TABLE_CAP - 1);
    if count <= RUN {
        let run: &[i32; RUN] = table[start..start + RUN].try_into().expect("a run");
        // The lists end within [`ROOM`]: the mask only spares the bounds check.
        debug_assert!(n < ROOM, "a rank's lists fit in ROOM");
        let n = n & (ROOM - 1);
        let slots: &mut [u32; RUN] = (&mut room[n..n + RUN]).try_into().expect("room for a run");
        // `as u32` and a wrapping addition: the relative link's sign, added.
        *slots = std::array::from_fn(|j| first.wrapping_add(run[j] as u32));
    } else {
        copy_long_list(&mut room[n..n + count], &table[start..start + count], first);
    }
    n + count
}

/// [`copy_list`] of a list longer than [`RUN`] (few: the longest routes of the tables'
/// window).
#[cold]
#[inline(never)]
fn copy_long_list(room: &mut [u32], list: &[i32], first: u32) {
    for (slot, &l) in room.iter_mut().zip(list) {
        *slot = first.wrapping_add(l as u32);
    }
}

/// Adds one message's route.
#[inline]
fn add_route(
    layout: &Layout,
    counts: &mut impl LinkSink,
    routes: &mut RouteStats,
    src: u32,
    dst: u32,
) {
    let hops = layout.walk(src, dst, |l| counts.up(l));
    routes.add(hops);
}

/// Removes one message's route.
#[inline]
fn remove_route(
    layout: &Layout,
    counts: &mut impl LinkSink,
    routes: &mut RouteStats,
    src: u32,
    dst: u32,
) {
    let hops = layout.walk(src, dst, |l| counts.down(l));
    routes.remove(hops);
}

/// Moves one message from its old route to its new one: the old route's links down, the new
/// one's up. Every count is a function of the loads alone, so links on both routes may go
/// down and up again. Comparing the two routes' links to touch only those that differ cost
/// more (instructions and mispredicted branches) than the updates it saved: the loads of a
/// 12x12x12 box stay in the first two cache levels.
#[inline]
fn reroute(
    layout: &Layout,
    counts: &mut impl LinkSink,
    routes: &mut RouteStats,
    old: (u32, u32),
    new: (u32, u32),
) {
    if old == new {
        return;
    }
    let old_hops = layout.walk(old.0, old.1, |l| counts.down(l));
    let new_hops = layout.walk(new.0, new.1, |l| counts.up(l));
    routes.reroute(old_hops, new_hops);
}

/// [`reroute`] for a message one end of which took one step along dimension k (`UP`: +) on a
/// routing grid without rings, from box node `moved`; `fixed` is the other end, the
/// destination when `SOURCE` moved, else the source. A dimension-order route changes only
/// in part: when the source moves, the segments of the dimensions below k shift by one line
/// and the segment along k gains or loses a link; those above k stay. When the destination
/// moves, the segments below k stay, the one along k gains or loses a link and those above
/// k shift by one line. Nothing is listed or compared. One copy per (end, direction): the
/// choices below are then constants, not branches.
#[inline(always)]
fn reroute_step<const SOURCE: bool, const UP: bool>(
    layout: &Layout,
    counts: &mut impl LinkSink,
    routes: &mut RouteStats,
    moved: u32,
    fixed: u32,
    k: usize,
) {
    let (m0, f) = (&layout.nodes[moved as usize], &layout.nodes[fixed as usize]);
    // The old route, from a to b.
    let (a, b) = if SOURCE { (m0, f) } else { (f, m0) };
    let q2 = 2 * layout.q;
    let sk = layout.route_dims[k].stride as usize;
    // Link id offset of a segment moved one line along k.
    let line_step = sk * q2;
    let mut hops_old = 0u32;
    let mut at = a.at as usize;
    let mut differ = differing(a, b);
    while differ & ((1u32 << k) - 1) != 0 {
        let e = differ.trailing_zeros() as usize;
        differ &= differ - 1;
        let delta = i32::from(b.coord[e]) - i32::from(a.coord[e]);
        hops_old += delta.unsigned_abs();
        if SOURCE {
            shift_segment(layout, counts, at, e, delta, line_step, UP);
        }
        at = at.wrapping_add_signed(delta as isize * layout.route_dims[e].stride as isize);
    }
    // The segment along k gains or loses exactly one link, at the moved end: with the other
    // end at y, a source stepping from x towards y drops the link it leaves, one stepping
    // away adds the link back to x (the same for a destination, mirrored). One update and
    // no loop: the segment's length is data, and loops over it mispredicted.
    let (x, y) = (i32::from(a.coord[k]), i32::from(b.coord[k]));
    hops_old += (y - x).unsigned_abs();
    // (position on the line, slot (0: +, 1: -), whether the link is added).
    let (p, slot, add) = match (SOURCE, UP) {
        (true, true) if y > x => (x, 0, false),
        (true, true) => (x + 1, 1, true),
        (true, false) if y < x => (x, 1, false),
        (true, false) => (x - 1, 0, true),
        (false, true) if y >= x => (y, 0, true),
        (false, true) => (y + 1, 1, false),
        (false, false) if y > x => (y - 1, 0, false),
        (false, false) => (y, 1, true),
    };
    let link = (at as isize + (p - x) as isize * sk as isize) as usize * q2 + 2 * k + slot;
    if add {
        counts.up(link);
    } else {
        counts.down(link);
    }
    if !SOURCE {
        // The segments above k, each one line over.
        at = at.wrapping_add_signed((y - x) as isize * sk as isize);
        differ &= !(1u32 << k);
        while differ != 0 {
            let e = differ.trailing_zeros() as usize;
            differ &= differ - 1;
            let delta = i32::from(b.coord[e]) - i32::from(a.coord[e]);
            hops_old += delta.unsigned_abs();
            shift_segment(layout, counts, at, e, delta, line_step, UP);
            at = at.wrapping_add_signed(delta as isize * layout.route_dims[e].stride as isize);
        }
    } else {
        // The segments above k stay: only their length counts.
        differ &= !((2u32 << k) - 1);
        while differ != 0 {
            let e = differ.trailing_zeros() as usize;
            differ &= differ - 1;
            hops_old += (i32::from(b.coord[e]) - i32::from(a.coord[e])).unsigned_abs();
        }
    }
    routes.reroute_by_one(hops_old, add);
}

/// Moves a message both ends of which took one step along dimension k (`up`: +) on a routing
/// grid without rings: its route keeps its shape, each link one line over, and its length.
#[inline]
fn translate(layout: &Layout, counts: &mut impl LinkSink, src: u32, dst: u32, k: usize, up: bool) {
    let line_step = layout.route_dims[k].stride as usize * 2 * layout.q;
    layout.walk(src, dst, |l| {
        counts.down(l);
        counts.up(if up { l + line_step } else { l - line_step });
    });
}

/// Moves the segment of dimension e of a route on a mesh, starting at routing index `at` with
/// `delta` hops, by one line (`line_step` link ids, up or down): each of its links loses a
/// message and the link beside it gains one.
#[inline(always)]
fn shift_segment(
    layout: &Layout,
    counts: &mut impl LinkSink,
    at: usize,
    e: usize,
    delta: i32,
    line_step: usize,
    up: bool,
) {
    let q2 = 2 * layout.q;
    let stride = layout.route_dims[e].stride as usize * q2;
    let n = delta.unsigned_abs() as usize;
    let down = usize::from(delta < 0);
    let mut link = at * q2 + 2 * e + down;
    let step = stride as isize * (1 - 2 * down as isize);
    for _ in 0..n {
        counts.down(link);
        counts.up(if up {
            link + line_step
        } else {
            link - line_step
        });
        link = link.wrapping_add_signed(step);
    }
}

impl RouteStats {
    #[inline]
    fn add(&mut self, hops: u32) {
        let h = hops as usize;
        self.messages += 1;
        self.total_hops += u64::from(hops);
        if h >= self.route_count.len() {
            self.route_count.resize(h + 1, 0);
        }
        self.route_count[h] += 1;
        self.longest = self.longest.max(hops);
    }

    #[inline]
    fn remove(&mut self, hops: u32) {
        self.messages -= 1;
        self.total_hops -= u64::from(hops);
        self.route_count[hops as usize] -= 1;
        self.lower_longest();
    }

    /// One message's route changed from `old` to `new` hops.
    #[inline(always)]
    fn reroute(&mut self, old: u32, new: u32) {
        if old == new {
            return;
        }
        self.total_hops = self.total_hops - u64::from(old) + u64::from(new);
        self.route_count[old as usize] -= 1;
        let h = new as usize;
        if h >= self.route_count.len() {
            self.route_count.resize(h + 1, 0);
        }
        self.route_count[h] += 1;
        if new > self.longest {
            self.longest = new;
        } else {
            self.lower_longest();
        }
    }

    /// Lowers the longest route to the longest some message takes, once per batch.
    #[inline]
    fn settle(&mut self) {
        self.lower_longest();
    }

    /// One message's route grew (`grew`) or shrank by one hop from `old`: the longest route
    /// moves by one at most, so no scan.
    #[inline(always)]
    fn reroute_by_one(&mut self, old: u32, grew: bool) {
        let new = if grew { old + 1 } else { old - 1 };
        self.total_hops = self.total_hops - u64::from(old) + u64::from(new);
        self.route_count[old as usize] -= 1;
        let h = new as usize;
        if h >= self.route_count.len() {
            self.route_count.resize(h + 1, 0);
        }
        self.route_count[h] += 1;
        self.longest = self.longest.max(new);
        self.longest -= u32::from(self.route_count[self.longest as usize] == 0);
    }

    #[inline]
    fn lower_longest(&mut self) {
        while self.longest > 0 && self.route_count[self.longest as usize] == 0 {
            self.longest -= 1;
        }
    }
}

/// Where a route walk's link updates go: the loads themselves ([`Edit`]), or a list of
/// changes applied later in one tight loop ([`Changes`]).
trait LinkSink {
    fn up(&mut self, link: usize);
    fn down(&mut self, link: usize);
}

impl LinkSink for Edit<'_> {
    #[inline(always)]
    fn up(&mut self, link: usize) {
        Edit::up(self, link);
    }
    #[inline(always)]
    fn down(&mut self, link: usize) {
        Edit::down(self, link);
    }
}

/// A batch's link changes, each `link * 2 + 1` (one more message) or `link * 2` (one less):
/// finding them and applying them are two loops, so that neither keeps the other's state in
/// registers. The buffer only grows; `len` entries are in use.
#[derive(Debug, Default)]
struct Changes {
    buf: Vec<u32>,
    len: usize,
    /// A slide's messages to walk after its table look-ups, as (rank, offset).
    rare: Vec<(u32, u32)>,
}

/// Scratch space, not state: a copy starts empty, and any two are equal.
impl Clone for Changes {
    fn clone(&self) -> Changes {
        Changes::default()
    }
}

impl PartialEq for Changes {
    fn eq(&self, _: &Changes) -> bool {
        true
    }
}

impl Eq for Changes {}

impl LinkSink for Changes {
    #[inline(always)]
    fn up(&mut self, link: usize) {
        self.room(1)[0] = link_change(link, true);
        self.len += 1;
    }
    #[inline(always)]
    fn down(&mut self, link: usize) {
        self.room(1)[0] = link_change(link, false);
        self.len += 1;
    }
}

impl Changes {
    /// Lists the links of the dimension-order route from box node `src` to `dst` on a
    /// routing grid without rings (`up`: 1 for a route to add); returns its hop count. Each
    /// dimension's segment is written as a run of `SEG` entries whatever its length (the
    /// layout's [`Layout::segment`]; 0: as long as the segment), and every dimension is
    /// taken, so neither a segment's length nor which dimensions differ is a branch to
    /// mispredict (a 0D move's routes to its far new node).
    #[inline(always)]
    fn route<const SEG: usize>(&mut self, layout: &Layout, src: u32, dst: u32, up: u32) -> u32 {
        debug_assert!(
            layout.mesh,
            "a segment of a ring may pass the end of its line"
        );
        let (a, b) = (&layout.nodes[src as usize], &layout.nodes[dst as usize]);
        let q2 = 2 * layout.q;
        let mut at = a.at as usize;
        let mut hops = 0;
        for d in 0..layout.q {
            let Dim { stride, .. } = layout.route_dims[d];
            let delta = i32::from(b.coord[d]) - i32::from(a.coord[d]);
            let n = delta.unsigned_abs() as usize;
            let slot = usize::from(delta < 0);
            let first = link_change(at * q2 + 2 * d + slot, up == 1);
            let step = (stride as usize * q2 * 2) as u32;
            let step = if delta < 0 { step.wrapping_neg() } else { step };
            let fill = |entries: &mut [u32]| {
                for (i, entry) in entries.iter_mut().enumerate() {
                    *entry = first.wrapping_add(step.wrapping_mul(i as u32));
                }
            };
            if SEG > 0 {
                let run: &mut [u32; SEG] = self.room(SEG).try_into().expect("a run");
                fill(run);
            } else {
                fill(self.room(n));
            }
            self.len += n;
            hops += n as u32;
            at = at.wrapping_add_signed(delta as isize * stride as isize);
        }
        hops
    }

    fn clear(&mut self) {
        self.len = 0;
    }

    /// The changes listed.
    fn listed(&self) -> &[u32] {
        &self.buf[..self.len]
    }

    /// The next `n` free entries, grown when needed (one check per run of entries instead of
    /// one per entry).
    #[inline(always)]
    fn room(&mut self, n: usize) -> &mut [u32] {
        self.reserve(n);
        &mut self.buf[self.len..self.len + n]
    }

    /// Grows the buffer, when needed, so that `n` more entries fit.
    #[inline(always)]
    fn reserve(&mut self, n: usize) {
        if self.len + n > self.buf.len() {
            self.buf.resize((self.len + n).max(2 * self.buf.len()), 0);
        }
    }

    /// Adds the tabulated links `table[start..start + len]` at link base `base` ([`copy_list`];
    /// `up`: 1 for the links of a route to add).
    #[inline(always)]
    fn extend(
        &mut self,
        base: usize,
        table: &[i32; TABLE_CAP + RUN],
        start: u32,
        len: usize,
        up: u32,
    ) {
        // A list's room, as a slide's rank takes it.
        self.reserve(ROOM + RUN);
        let first = link_change(base, up == 1);
        let room: &mut [u32; ROOM + RUN] = (&mut self.buf[self.len..self.len + ROOM + RUN])
            .try_into()
            .expect("room reserved");
        self.len += copy_list(room, 0, table, first, start, len);
    }
}

impl Counts {
    /// Borrows the tables for a batch of updates; [`Edit::finish`] writes the figures back.
    fn edit(&mut self) -> Edit<'_> {
        Edit {
            max: self.max_load,
            raised: NO_LINK,
            hot: self.hot,
            used: self.outside_used,
            count: self.updates.0,
            loads: &mut self.loads,
            outside: &self.outside,
            counts: Figures {
                max_load: &mut self.max_load,
                witness: &mut self.witness,
                hot: &mut self.hot,
                outside_used: &mut self.outside_used,
                updates: &mut self.updates,
            },
        }
    }

    /// Finds the largest load again, once per batch, when the link that had it carries less
    /// (`max_load` is then only a bound: loads rise only through [`Edit::change`], which
    /// raises it).
    #[inline]
    fn settle(&mut self) {
        let max = self.max_load;
        if self.loads.get(self.witness.0) != Some(&max) {
            (self.max_load, self.witness.0) = largest(&self.loads, max);
        }
    }

    /// Links that carry two messages or more.
    fn hot_links(&self) -> u64 {
        self.hot
    }
}

/// How many link changes the current engine applies at once on this processor: 16 where
/// groups pay (`groups`), else 1 (`spares bench` reports it).
pub fn changes_applied_at_once() -> usize {
    #[cfg(target_arch = "x86_64")]
    if groups().is_some() {
        return GROUP;
    }
    1
}

/// Link changes [`Edit::apply_groups`] applies at once: one AVX-512 vector of u32.
#[cfg(target_arch = "x86_64")]
const GROUP: usize = 16;

/// The run [`Changes::route`] writes a segment as, on lines this long or shorter.
const SEGMENT: usize = 16;

/// The run of lines longer than [`SEGMENT`] and up to this long (the seeds' 24^3 box); a
/// segment of a longer line is written as long as it is.
const LONG_SEGMENT: usize = 32;

/// The AVX-512 instructions [`Edit::apply_groups`] and [`largest_in_vectors`] need, when
/// this processor has them (looked up once).
#[cfg(target_arch = "x86_64")]
fn avx512() -> Option<pulp::x86::V4> {
    static AVX512: std::sync::OnceLock<Option<pulp::x86::V4>> = std::sync::OnceLock::new();
    *AVX512.get_or_init(pulp::x86::V4::try_new)
}

/// AVX-512 where [`Edit::apply`] takes groups of [`GROUP`] changes: on AMD's processors
/// only. Their cores (Zen 4 and 5) detect a group's conflicts (`vpconflictd`) in a few
/// operations, and the groups ran the campaign 2.8 % faster there; Intel's cores take a long
/// sequence for it, and on an Intel Xeon the campaign took 11 % less time one change at a
/// time (`docs/research/simulator-engine-rounds.md`, "Thirty-second round").
#[cfg(target_arch = "x86_64")]
fn groups() -> Option<pulp::x86::V4> {
    static GROUPS: std::sync::OnceLock<Option<pulp::x86::V4>> = std::sync::OnceLock::new();
    *GROUPS.get_or_init(|| {
        let amd = raw_cpuid::CpuId::new()
            .get_vendor_info()
            .is_some_and(|v| v.as_str() == "AuthenticAMD");
        avx512().filter(|_| amd)
    })
}

/// The largest of `loads` and the first link that carries it; no load is above `bound`.
/// Sixteen loads at a time where the processor has AVX-512 ([`largest_in_vectors`]): when
/// a batch lowers the link that carried the largest load, this scan of every link is what
/// settling the batch costs.
fn largest(loads: &[u32], bound: u32) -> (u32, usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = avx512() {
        return simd.vectorize(|| largest_in_vectors(simd, loads, bound));
    }
    largest_in_blocks(loads, bound)
}

/// [`largest`] in one pass of block maxima, then a search in the block that holds the
/// largest: the scan for the maximum and the scan for its position were two passes, the
/// second one element at a time. A block that reaches `bound` ends the search, as no later
/// one can beat it.
fn largest_in_blocks(loads: &[u32], bound: u32) -> (u32, usize) {
    const BLOCK: usize = 64;
    // A load is below 2^30 (at most 2^20 ranks send at most 728 messages each): as i32 the
    // block maxima vectorise with the baseline's signed comparisons.
    let block_max = |block: &[u32]| block.iter().fold(0i32, |m, &v| m.max(v as i32)) as u32;
    let (mut max, mut at) = (0, 0);
    for (b, block) in loads.chunks(BLOCK).enumerate() {
        let m = block_max(block);
        if m > max {
            (max, at) = (m, b * BLOCK);
            if m >= bound {
                break;
            }
        }
    }
    let first = loads[at..].iter().position(|&v| v == max).unwrap_or(0);
    (max, at + first)
}

/// [`largest`] with AVX-512: the maximum over blocks of four vectors (a block with a load at
/// `bound` ends it, as no load is above), then the first vector that holds it.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn largest_in_vectors(simd: pulp::x86::V4, loads: &[u32], bound: u32) -> (u32, usize) {
    use std::arch::x86_64::__m512i;
    let f = simd.avx512f;
    let vector = |v: &[u32]| -> __m512i {
        let v: [u32; GROUP] = v.try_into().expect("a whole vector");
        pulp::cast(v)
    };
    let at_bound = f._mm512_set1_epi32(bound as i32);
    let mut max = f._mm512_setzero_si512();
    let mut blocks = loads.chunks_exact(4 * GROUP);
    let mut reached = false;
    for block in &mut blocks {
        let (a, b) = block.split_at(2 * GROUP);
        let m = f._mm512_max_epu32(
            f._mm512_max_epu32(vector(&a[..GROUP]), vector(&a[GROUP..])),
            f._mm512_max_epu32(vector(&b[..GROUP]), vector(&b[GROUP..])),
        );
        max = f._mm512_max_epu32(max, m);
        if f._mm512_cmpge_epu32_mask(m, at_bound) != 0 {
            reached = true;
            break;
        }
    }
    let lanes: [u32; GROUP] = pulp::cast(max);
    let mut top = lanes.iter().copied().max().unwrap_or(0);
    if !reached {
        top = blocks.remainder().iter().fold(top, |m, &v| m.max(v));
    }
    let wanted = f._mm512_set1_epi32(top as i32);
    let mut vectors = loads.chunks_exact(GROUP);
    for (i, v) in (&mut vectors).enumerate() {
        let hits = f._mm512_cmpeq_epi32_mask(vector(v), wanted);
        if hits != 0 {
            return (top, i * GROUP + hits.trailing_zeros() as usize);
        }
    }
    let start = loads.len() - vectors.remainder().len();
    let first = vectors.remainder().iter().position(|&v| v == top);
    (top, first.map_or(0, |p| start + p))
}

/// A link's load after one change: one message more (`up` 1) or one less (`up` 0), with no
/// branch on the direction.
#[inline(always)]
fn load_after(before: u32, up: u32) -> u32 {
    debug_assert!(
        before > 0 || up == 1,
        "removing a message that was never routed"
    );
    before.wrapping_add(2 * up).wrapping_sub(1)
}

impl Edit<'_> {
    /// One message more (`up`) or less on `link`. Without a branch on the load: most links
    /// carry zero, one or two messages in no predictable order, and a mispredicted branch
    /// per update cost more than the few arithmetic instructions that replace it. The one
    /// branch, a new largest load, is rare.
    #[inline(always)]
    fn change(&mut self, link: usize, up: bool) {
        let v = self.loads[link];
        let after = load_after(v, u32::from(up));
        self.loads[link] = after;
        if !self.outside.is_empty() {
            let outside = u64::from(self.outside[link]);
            self.used = self.used + outside * u64::from(after == 1 && v == 0)
                - outside * u64::from(after == 0);
        }
        self.hot = self.hot + u64::from(after >= 2) - u64::from(v >= 2);
        if after > self.max {
            self.max = after;
            self.raised = link;
        }
    }

    /// One more message on `link`.
    #[inline(always)]
    fn up(&mut self, link: usize) {
        self.count += 1;
        self.change(link, true);
    }

    /// One message less on `link`.
    #[inline(always)]
    fn down(&mut self, link: usize) {
        self.count += 1;
        self.change(link, false);
    }

    /// Applies a list of link changes ([`Changes`]) and writes the running figures back:
    /// sixteen at a time where that pays ([`groups`], [`Edit::apply_in_groups`]), else one
    /// by one.
    fn apply(self, changes: &[u32]) {
        // Outside links are counted one change at a time.
        #[cfg(target_arch = "x86_64")]
        if let Some(simd) = groups().filter(|_| self.outside.is_empty()) {
            return self.apply_in_groups(simd, changes);
        }
        self.apply_one_by_one(changes);
    }

    /// [`Edit::apply`] in whole groups of [`GROUP`] changes ([`Edit::apply_groups`]), the
    /// rest one by one, on a box whose routes never leave it.
    #[cfg(target_arch = "x86_64")]
    fn apply_in_groups(mut self, simd: pulp::x86::V4, changes: &[u32]) {
        let whole = changes.len() / GROUP * GROUP;
        simd.vectorize(|| self.apply_groups(simd, &changes[..whole]));
        self.count += whole as u64;
        self.apply_one_by_one(&changes[whole..]);
    }

    /// [`Edit::apply`] one change at a time. The direction is data, not a branch.
    fn apply_one_by_one(mut self, changes: &[u32]) {
        if self.outside.is_empty() {
            self.apply_inside(changes);
        } else {
            for &c in changes {
                self.change((c >> 1) as usize, c & 1 == 1);
            }
        }
        self.count += changes.len() as u64;
        self.finish();
    }

    /// [`Edit::apply_one_by_one`] on a box whose routes never leave it. The links gained
    /// and lost at two messages or more, and the largest load after any change, are three
    /// running figures that do not wait on each other (one instruction each per change,
    /// against two dependent ones for [`Edit::change`]'s count of links at two or more);
    /// the link at a new largest load is looked for after the loop, in the few batches
    /// that raise it. 5 % less time than [`Edit::change`] per change on the seeds'
    /// campaign (`docs/research/simulator-engine-rounds.md`, "Thirty-second round").
    fn apply_inside(&mut self, changes: &[u32]) {
        let loads = &mut *self.loads;
        let (mut gained, mut lost) = (0u64, 0u64);
        let mut top = self.max;
        for &c in changes {
            let link = (c >> 1) as usize;
            let before = loads[link];
            let after = load_after(before, c & 1);
            loads[link] = after;
            gained += u64::from(after >= 2);
            lost += u64::from(before >= 2);
            top = top.max(after);
        }
        self.hot = self.hot + gained - lost;
        if top > self.max {
            self.max = top;
            // A link that still carries it, if any: else the largest load is only a bound,
            // and `Counts::settle` finds it again.
            if let Some(&c) = changes.iter().find(|&&c| loads[(c >> 1) as usize] == top) {
                self.raised = (c >> 1) as usize;
            }
        }
    }

    /// [`Edit::apply`] in groups of [`GROUP`] changes, on a box whose routes never leave it.
    /// The group's loads are read first; each change's load after it is the load before the
    /// group plus the changes to its link up to its own (the lanes on one link are chained by
    /// their conflict masks and summed by pointer jumping); the loads are written back in
    /// order, so the last change to a link leaves its final load. The links with two messages
    /// or more, and the largest load, come from the loads before and after every change, as
    /// one change at a time finds them, with a mask and a bit count per group: one change at
    /// a time, that count alone cost 5 to 6 % of a campaign (four of the loop's sixteen
    /// instructions).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn apply_groups(&mut self, simd: pulp::x86::V4, changes: &[u32]) {
        use std::arch::x86_64::__m512i;
        let (f, cd) = (simd.avx512f, simd.avx512cd);
        let (one, two, none) = (
            f._mm512_set1_epi32(1),
            f._mm512_set1_epi32(2),
            f._mm512_set1_epi32(-1),
        );
        // Lane i's sum gains the sum of lane `earlier[i]` and takes that lane's earlier one,
        // for the lanes with one: after r steps a lane holds the sum of the last 2^r changes
        // to its link up to its own.
        let jump = |sum: &mut __m512i, earlier: &mut __m512i| {
            let chained = f._mm512_cmpgt_epi32_mask(*earlier, none);
            let theirs = f._mm512_permutexvar_epi32(*earlier, *sum);
            *sum = f._mm512_mask_add_epi32(*sum, chained, *sum, theirs);
            *earlier = f._mm512_mask_permutexvar_epi32(*earlier, chained, *earlier, *earlier);
        };
        let mut hot = self.hot;
        for group in changes.chunks_exact(GROUP) {
            let group: [u32; GROUP] = group.try_into().expect("a whole group");
            let c: __m512i = pulp::cast(group);
            let link = f._mm512_srli_epi32::<1>(c);
            // +1 for a message more, -1 for one less.
            let delta =
                f._mm512_sub_epi32(f._mm512_slli_epi32::<1>(f._mm512_and_si512(c, one)), one);
            // The nearest earlier lane on the same link: the highest bit of the conflict
            // mask (31 less its leading zeros; -1 for none).
            let conflicts = cd._mm512_conflict_epi32(link);
            let mut earlier =
                f._mm512_sub_epi32(f._mm512_set1_epi32(31), cd._mm512_lzcnt_epi32(conflicts));
            let mut sum = delta;
            // Two steps cover runs of up to four changes to one link in a group, the most
            // there mostly are; four cover all sixteen.
            jump(&mut sum, &mut earlier);
            jump(&mut sum, &mut earlier);
            if f._mm512_cmpgt_epi32_mask(earlier, none) != 0 {
                jump(&mut sum, &mut earlier);
                jump(&mut sum, &mut earlier);
            }
            let mut loads = [0u32; GROUP];
            for (load, &c) in loads.iter_mut().zip(&group) {
                *load = self.loads[(c >> 1) as usize];
            }
            let after = f._mm512_add_epi32(pulp::cast(loads), sum);
            let before = f._mm512_sub_epi32(after, delta);
            hot = hot + u64::from(f._mm512_cmpge_epi32_mask(after, two).count_ones())
                - u64::from(f._mm512_cmpge_epi32_mask(before, two).count_ones());
            let above = f._mm512_cmpgt_epu32_mask(after, f._mm512_set1_epi32(self.max as i32));
            let after: [u32; GROUP] = pulp::cast(after);
            for (&load, &c) in after.iter().zip(&group) {
                self.loads[(c >> 1) as usize] = load;
            }
            if above != 0 {
                for (i, (&load, &c)) in after.iter().zip(&group).enumerate() {
                    if above >> i & 1 == 1 && load > self.max {
                        self.max = load;
                        self.raised = (c >> 1) as usize;
                    }
                }
            }
        }
        self.hot = hot;
    }

    /// Writes the running figures back.
    fn finish(self) {
        *self.counts.max_load = self.max;
        if self.raised != NO_LINK {
            self.counts.witness.0 = self.raised;
        }
        *self.counts.hot = self.hot;
        *self.counts.outside_used = self.used;
        self.counts.updates.0 = self.count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sliding::{fail, Method};
    use crate::SpareMap;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn largest_finds_the_first_link_at_the_largest_load() {
        let mut rng = ChaCha8Rng::seed_from_u64(15);
        // Lengths around the block size, with and without a partial last block.
        for len in [0, 1, 63, 64, 65, 128, 200, 10_368] {
            for _ in 0..40 {
                let top = rng.gen_range(1..8);
                let mut loads: Vec<u32> = (0..len).map(|_| rng.gen_range(0..top)).collect();
                if len > 0 && rng.gen_bool(0.3) {
                    // The largest load only in the last link (in the partial block, if any).
                    loads[len - 1] = top + 1;
                }
                let max = loads.iter().copied().max().unwrap_or(0);
                let first = loads.iter().position(|&v| v == max).unwrap_or(0);
                // Any bound at or above the largest load gives the same answer.
                for bound in [max, max + 1, 1 << 30] {
                    assert_eq!(
                        largest(&loads, bound),
                        (max, first),
                        "{len} links, bound {bound}"
                    );
                    assert_eq!(
                        largest_in_blocks(&loads, bound),
                        (max, first),
                        "{len} links, bound {bound}, without AVX-512"
                    );
                }
            }
        }
    }

    /// Counts over `loads` as a campaign keeps them, with no outside links.
    fn counts_of(loads: Vec<u32>) -> Counts {
        let (max_load, witness) = largest(&loads, u32::MAX);
        Counts {
            hot: loads.iter().filter(|&&v| v >= 2).count() as u64,
            loads,
            max_load,
            witness: Witness(witness),
            outside: Vec::new(),
            outside_used: 0,
            updates: UpdateCount::default(),
        }
    }

    #[test]
    fn every_way_of_applying_changes_gives_the_same_figures() {
        // Groups of sixteen (wherever the processor has AVX-512, whichever way `apply`
        // takes), the loop for boxes whose routes stay inside, and the change-by-change
        // loop that also counts outside links. Few links make long runs of changes to one
        // link within a group (up to all sixteen), many links make runs of one.
        let mut rng = ChaCha8Rng::seed_from_u64(21);
        for round in 0..2_000 {
            let links = [1, 2, 5, 40, 1_000][round % 5];
            let start: Vec<u32> = (0..links).map(|_| rng.gen_range(0..4)).collect();
            let mut load = start.clone();
            let mut changes = Vec::new();
            for _ in 0..rng.gen_range(0..120) {
                let l = rng.gen_range(0..links);
                // A message less only where one is: the loads never go below zero.
                let up = load[l] == 0 || rng.gen_bool(0.5);
                load[l] = if up { load[l] + 1 } else { load[l] - 1 };
                changes.push((l as u32) << 1 | u32::from(up));
            }
            let mut applied = Vec::new();
            #[cfg(target_arch = "x86_64")]
            if let Some(simd) = avx512() {
                let mut counts = counts_of(start.clone());
                counts.edit().apply_in_groups(simd, &changes);
                applied.push(("in groups", counts));
            }
            let mut counts = counts_of(start.clone());
            counts.edit().apply_one_by_one(&changes);
            applied.push(("one by one", counts));
            let mut counts = counts_of(start);
            counts.outside = vec![false; links];
            counts.edit().apply_one_by_one(&changes);
            applied.push(("one by one, outside links counted", counts));
            let max = load.iter().copied().max().unwrap_or(0);
            for (how, mut counts) in applied {
                counts.settle();
                assert_eq!(counts.loads, load, "{how}");
                assert_eq!(
                    counts.hot,
                    load.iter().filter(|&&v| v >= 2).count() as u64,
                    "{how}: links with two messages or more"
                );
                assert_eq!(counts.max_load, max, "{how}");
                assert_eq!(
                    counts.loads[counts.witness.0], max,
                    "{how}: a link at the largest load"
                );
                assert_eq!(counts.updates.0, changes.len() as u64, "{how}");
            }
        }
    }

    #[test]
    fn incremental_loads_equal_a_full_recomputation() {
        // (box, box rings, network rings (empty: the box's own links), compute, pattern, periodic)
        for (extents, wrap, rings, compute, pattern, periodic) in [
            (
                vec![8, 8, 6],
                vec![false; 3],
                vec![],
                vec![7, 7, 6],
                "7p",
                false,
            ),
            (
                vec![6, 6, 4],
                vec![true; 3],
                vec![],
                vec![5, 5, 4],
                "27p",
                true,
            ),
            (
                vec![10, 9],
                vec![true, false],
                vec![],
                vec![9, 8],
                "9p",
                false,
            ),
            // The widest stencil the tables take: a slide's rank lists its 26 pairs' changes
            // in [`ROOM`] entries.
            (
                vec![6, 5, 4],
                vec![false; 3],
                vec![],
                vec![5, 4, 4],
                "27p",
                false,
            ),
            // A line longer than a segment's run: 0D routes to far nodes listed by a loop.
            (
                vec![20, 4, 3],
                vec![false; 3],
                vec![],
                vec![14, 4, 3],
                "7p",
                false,
            ),
            // 728 offsets: more than a byte holds (offset numbers were once stored in u8).
            (
                vec![3, 2, 2, 2, 2, 2],
                vec![false; 6],
                vec![],
                vec![2, 2, 2, 2, 2, 2],
                "box",
                false,
            ),
            (
                vec![3, 3, 2, 2, 2, 2],
                vec![true; 6],
                vec![],
                vec![2, 3, 2, 2, 2, 2],
                "box",
                true,
            ),
            // Boxes that cover part of their network rings: routes may leave the box.
            (
                vec![7, 6, 4],
                vec![false, false, true],
                vec![9, 8, 4],
                vec![6, 5, 4],
                "7p",
                true,
            ),
            (
                vec![5, 4],
                vec![false; 2],
                vec![8, 0],
                vec![4, 3],
                "9p",
                false,
            ),
            (
                vec![4, 3, 2],
                vec![false; 3],
                vec![6, 5, 3],
                vec![3, 3, 2],
                "27p",
                true,
            ),
        ] {
            let grid = Grid::new(&extents, &wrap).unwrap();
            let pattern = Pattern::parse(pattern, grid.dims()).unwrap();
            let origin = vec![0; grid.dims()];
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            // Each method three times: routes from the tables where the routing grid is a
            // mesh, every route walked with messages to a fixed rank in pairs (the stencils
            // are symmetric), and one by one as for a pattern that is not.
            for (method, tables, pairs) in ["hybrid", "0D", "1D"]
                .into_iter()
                .flat_map(|m| [(m, true, true), (m, false, true), (m, false, false)])
            {
                let method = Method::parse(method, grid.dims()).unwrap();
                let mut map = SpareMap::new(grid, &compute, &origin).unwrap();
                if !rings.is_empty() {
                    map.set_rings(&rings).unwrap();
                }
                map.track_traffic(&pattern, periodic);
                let loads = map.fast_loads_mut().unwrap();
                assert!(loads.layout.symmetric, "the stencils are symmetric");
                assert_eq!(
                    loads.layout.tables.is_some(),
                    rings.is_empty() && !wrap.contains(&true) && grid.dims() <= 3,
                    "tables on meshes of up to three dimensions"
                );
                if !tables {
                    loads.without_tables();
                }
                if !pairs {
                    loads.without_pairs();
                }
                let mut plain = map.clone();
                plain.untrack_traffic();
                let neighbours = traffic::neighbours(&compute, &pattern, periodic);
                for _ in 0..30 {
                    let node = rng.gen_range(0..grid.len());
                    if map.state(node) == crate::NodeState::Dead {
                        continue;
                    }
                    let a = fail(&mut map, node, &method).unwrap();
                    let b = fail(&mut plain, node, &method).unwrap();
                    assert_eq!(a, b);
                    assert_eq!(
                        map.traffic(&pattern, periodic),
                        plain.full_traffic(&neighbours)
                    );
                }
            }
        }
    }
}
