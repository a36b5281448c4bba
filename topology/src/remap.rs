//! Re-mapping: a new rank -> node bijection onto the alive nodes of a job's box that carries the
//! stencil with fewer collisions than the map it starts from, within a budget of moved ranks.
//!
//! Sliding moves few ranks per failure, but collisions pile up as failures do. When a job
//! relaunches from a checkpoint every rank restarts anyway, so a better map costs only the
//! checkpoint data of the ranks that end on another node. [`remap`] searches for such a map by
//! simulated annealing over candidates proposed mostly from the ends of messages that cross
//! the links at the largest load (only those ranks can lower it): a rank to where a logical
//! neighbour would have it, displacing ranks in turn (an ejection chain); a rank to a nearby
//! node (a move if free, a swap if busy); a free node taking a neighbour's rank, whose node
//! takes the next (a chain), or such chains from every free node of a rectangle at once (what
//! undoes a 2D or 3D slide); ranks up to the next free node along a line shifting one step (a
//! slide); and a straight segment rotating by one (a chain with no free node). With any number
//! of moves the search starts from a placement built afresh by recursive bisection when that
//! is better than the given map (after hundreds of failures it is). The annealing's score is
//! the sum over links of load^2 plus a steep penalty for each message above a target one below
//! the best largest load yet, so that the search rearranges freely below the target. Later in
//! the budget the search is guided: links it keeps finding at the largest load cost more each
//! time (a breakout from where plain annealing stalls). The best map is kept by the exact
//! objective:
//!
//! 1. the largest link load (the collisions of [`Traffic`]),
//! 2. the number of directed links carrying that load,
//! 3. the total hops of all messages.
//!
//! Routing is the model's: dimension order on the map's routing grid ([`SpareMap::routing`]),
//! rings the shorter way. The link loads are kept incrementally by an evaluator private to the
//! search: a move or swap re-routes only the messages of the moved ranks.
//!
//! The result is deterministic for a given seed and budget whenever the iteration cap binds (a
//! time limit that binds first makes the result depend on the machine and its load); it is
//! never worse than the start by the objective above, and it carries a lower bound that no
//! placement can beat ([`lower_bound`]).

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::grid::{Grid, MAX_DIMS};
use crate::map::{NodeState, SpareMap};
use crate::sliding::Move;
use crate::traffic::{self, Pattern, Traffic};
use crate::Error;

/// Most messages (ranks times pattern offsets) a re-map routes: its tables grow with them.
/// 2^24 holds a box of 2^20 nodes with a 3D 7-point stencil (6.3 million messages) with room
/// to spare; a 27-point stencil on such a box is refused before anything is allocated.
pub const MAX_MESSAGES: u64 = 1 << 24;

const NONE: u32 = u32::MAX;
/// Annealing temperatures at the start and at the end of the budget (measured on the seeds'
/// 12x12x12 networks: a start of 30 rather than 10 leaves fewer maps stuck one load higher
/// with a link or two at it).
const HOT_T: f64 = 30.0;
const COLD_T: f64 = 0.3;
/// Score of each message over the target load, squared (see [`weight`]).
const PENALTY: f64 = 50.0;
/// Kinds of candidate, in KINDS-ths: ejection chains by implied nodes below P_EJECT, single
/// moves and swaps below P_SINGLE, ejection chains (single or parallel) below
/// P_CHAIN, slides below P_SLIDE, rotations above.
const KINDS: u32 = 20;
const P_EJECT: u32 = 6;
const P_SINGLE: u32 = 10;
const P_CHAIN: u32 = 12;
const P_SLIDE: u32 = 16;
/// Longest slide tried, in nodes.
const MAX_SLIDE: usize = 16;
/// Longest rotation tried, in nodes.
const MAX_ROTATION: usize = 12;
/// Widest rectangle of parallel chains tried, per dimension.
const MAX_SLAB: u32 = 12;
/// Guided search (breakout): from this fraction of the budget on, each refresh of the hot
/// links that finds the search at the best largest load yet marks the links at it, and every
/// message over the target on a link costs GUIDE_WEIGHT more per mark. Plain annealing stalls
/// with a few links at the largest load where displaced regions meet; the marks push it to
/// empty the links it keeps full. Measured on the seeds' 12x12x12 networks, 250,000
/// candidates, seeds 1..20: mean largest load 3.55 -> 3.00 after 50 failures, 4.00 -> 3.20
/// after 100, 5.00 -> 4.00 after 276 (weights 20 to 50 and starts 0.2 to 0.5 do about as well;
/// 150 leaves every map after 276 at 5).
const GUIDE_FROM: f64 = 0.2;
const GUIDE_WEIGHT: f64 = 50.0;

/// Chance that a candidate starts from an end of a message that crossed a link at the largest
/// load (rather than from a rank near such a link, or any rank): only moving those ranks can
/// lower that link's load, and a rank slid far from its neighbours sends messages over links
/// several hops from its node. Measured on the seeds' 12x12x12 networks, 250,000 candidates,
/// seeds 1..8: 0.6 to 0.9 bring 3 to 4 of 8 maps after 50 failures to a largest load of 3
/// (1 of 8 without), and a fifth fewer links at the largest load after 276.
const P_HOT_MESSAGE: f64 = 0.75;

/// What a re-map may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Most ranks that may end on another node than in the starting map (`None`: any).
    pub max_moved: Option<u32>,
    /// Wall-clock time for the search (`None`: no limit). Makes the result depend on the
    /// machine when it binds before `iterations`.
    pub time_limit: Option<Duration>,
    /// Most candidate moves evaluated (`None`: no cap). With a cap the search cools by
    /// iterations, so that a seed and a cap give the same map on every machine.
    pub iterations: Option<u64>,
    /// Seed of the search's random choices.
    pub seed: u64,
}

/// One step of the migration from the starting map to the re-mapped one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A rank moves to a node that is free at that point of the sequence.
    Move(Move),
    /// Ranks that exchange nodes in one step: a cycle of moves with no free node to stage
    /// through (every alive node is busy). Each rank goes to the node the next one leaves;
    /// a relaunch from a checkpoint carries them out at once.
    Exchange(Vec<Move>),
}

/// Why the search stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The iteration cap was reached.
    Iterations,
    /// The time limit was reached.
    Time,
    /// The map reached what no placement can beat (largest load 1 and one hop a message).
    Optimal,
    /// No move was allowed (a budget of 0 moved ranks).
    NothingToDo,
}

impl Stop {
    /// The name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Stop::Iterations => "iterations",
            Stop::Time => "time",
            Stop::Optimal => "optimal",
            Stop::NothingToDo => "nothing_to_do",
        }
    }
}

/// What [`remap`] found.
#[derive(Debug, Clone)]
pub struct Remap {
    /// The re-mapped map (same box, dead nodes, slide counts and routing as the start).
    pub map: SpareMap,
    /// The migration, in an order that never puts two ranks on one node.
    pub steps: Vec<Step>,
    /// Ranks that end on another node than in the start, ascending.
    pub moved: Vec<u32>,
    /// Traffic of the starting map.
    pub before: Traffic,
    /// Traffic of the re-mapped map.
    pub after: Traffic,
    /// Links at the largest load, before and after.
    pub links_at_max: (u64, u64),
    /// A largest link load that no placement of these ranks on these alive nodes can go below
    /// ([`lower_bound`]).
    pub lower_bound: u32,
    /// Candidate moves evaluated.
    pub iterations: u64,
    /// Candidate moves accepted by the annealing.
    pub accepted: u64,
    /// Why the search stopped.
    pub stop: Stop,
}

/// Re-maps the ranks of `map` for `pattern` (`periodic`: the stencil wraps round the logical
/// grid) within `budget`. The result is never worse than `map` by the objective of the module
/// documentation; with a budget of 0 moved ranks it is `map` itself.
pub fn remap(
    map: &SpareMap,
    pattern: &Pattern,
    periodic: bool,
    budget: &Budget,
) -> Result<Remap, Error> {
    if budget.time_limit.is_none() && budget.iterations.is_none() {
        return Err(Error::Invalid(
            "a re-map needs an iteration cap or a time limit (or both)".into(),
        ));
    }
    if map.is_lost() {
        return Err(Error::Invalid(
            "a rank sits on a dead node: the job is lost, there is nothing to re-map".into(),
        ));
    }
    let started = Instant::now();
    let net = Net::new(map)?;
    let ranks = map.rank_nodes().len() as u64;
    let messages = ranks.saturating_mul(pattern.offsets().len() as u64);
    if messages > MAX_MESSAGES {
        return Err(Error::Limit {
            what: format!("a re-map of {ranks} ranks with pattern {pattern}"),
            value: messages,
            limit: MAX_MESSAGES,
            unit: "messages",
        });
    }
    let messages = traffic::neighbour_offsets(map.compute(), pattern, periodic);
    let mut search = Search::new(&net, &messages, &pattern.offsets(), map.rank_nodes());

    let lower_bound = lower_bound(&net, &search.out_start, &search.in_start);
    let before = map.traffic(pattern, periodic);
    let start_objective = search.objective();
    let start_at_max = start_objective.1;
    if budget.max_moved.is_none() {
        // With any number of moves, a map built afresh may be a better start than one that
        // many slides have displaced (after hundreds of failures it is). It is taken only when
        // better, so that the result is never worse than the given map.
        let fresh = bisection(&net, map.compute());
        let mut s = Search::new(&net, &messages, &pattern.offsets(), &fresh);
        if s.objective() < start_objective {
            s.rehome(map.rank_nodes());
            search = s;
        }
    }
    let (stop, iterations, accepted) =
        search.run(budget, started, lower_bound, &mut |_: &Search| {});
    let best = std::mem::take(&mut search.best);
    let steps = pipeline(&net, map.rank_nodes(), &best);
    let moved: Vec<u32> = (0..best.len() as u32)
        .filter(|&r| best[r as usize] != map.rank_nodes()[r as usize])
        .collect();
    let after_at_max = search.best_objective.1;
    let new_map = map.with_placement(best)?;
    let after = new_map.traffic(pattern, periodic);
    Ok(Remap {
        map: new_map,
        steps,
        moved,
        before,
        after,
        links_at_max: (start_at_max, after_at_max),
        lower_bound,
        iterations,
        accepted,
        stop,
    })
}

/// A largest link load that no bijection of the ranks onto the alive nodes can go below: the
/// messages a rank sends leave its node over that node's outgoing links (and those it
/// receives arrive over as many incoming ones), so a rank of d messages on a node of k links
/// puts at least ceil(d / k) on one of them. A largest load L is then possible only if, for
/// every t, the ranks that need t or more links under L are no more than the alive nodes that
/// have t or more (nodes on a mesh's faces have fewer). The bound is the least such L: cheap,
/// correct, and weak (1 or 2 on the seeds' networks): it proves a map optimal only when the
/// map reaches it.
fn lower_bound(net: &Net, out_start: &[u32], in_start: &[u32]) -> u32 {
    let q = net.q;
    let ranks = out_start.len() - 1;
    let degree = |r: usize| (out_start[r + 1] - out_start[r]).max(in_start[r + 1] - in_start[r]);
    let max_degree = (0..ranks).map(degree).max().unwrap_or(0);
    if max_degree == 0 {
        return 0;
    }
    // Alive nodes with at least t links, t = 0..=2q.
    let mut nodes_with = vec![0u64; 2 * q + 1];
    for n in 0..net.alive.len() {
        if net.alive[n] {
            nodes_with[net.links_of(n as u32)] += 1;
        }
    }
    for t in (0..2 * q).rev() {
        nodes_with[t] += nodes_with[t + 1];
    }
    for load in 1..=max_degree {
        let mut needing = vec![0u64; 2 * q + 2];
        for r in 0..ranks {
            let need = degree(r).div_ceil(load) as usize;
            needing[need.min(2 * q + 1)] += 1;
        }
        for t in (0..2 * q + 1).rev() {
            needing[t] += needing[t + 1];
        }
        if needing[2 * q + 1] == 0 && (1..=2 * q).all(|t| needing[t] <= nodes_with[t]) {
            return load;
        }
    }
    max_degree
}

/// A placement of the compute grid on the alive nodes by recursive bisection: the ranks are
/// halved across their longest dimension, the alive nodes are cut across the same dimension in
/// proportion (so that free nodes spread evenly), and each half is placed in its part.
fn bisection(net: &Net, compute: &[u32]) -> Vec<u32> {
    let logical = Grid::mesh(compute).expect("valid compute shape");
    let ranks = logical.len() as usize;
    let mut nodes: Vec<u32> = (0..net.alive.len() as u32)
        .filter(|&n| net.alive[n as usize])
        .collect();
    let mut out = vec![NONE; ranks];
    let q = net.q;
    let lo = [0u32; MAX_DIMS];
    let mut hi = [0u32; MAX_DIMS];
    hi[..q].copy_from_slice(&compute[..q]);
    fn split(
        net: &Net,
        logical: &Grid,
        lo: [u32; MAX_DIMS],
        hi: [u32; MAX_DIMS],
        nodes: &mut [u32],
        out: &mut [u32],
    ) {
        let q = net.q;
        let count: u64 = (0..q).map(|d| u64::from(hi[d] - lo[d])).product();
        if count == 0 {
            return;
        }
        if count == 1 {
            // Of the nodes left, the one nearest the middle of the part.
            out[logical.index(&lo) as usize] = nodes[nodes.len() / 2];
            return;
        }
        let d = (0..q)
            .max_by_key(|&d| (hi[d] - lo[d], std::cmp::Reverse(d)))
            .unwrap();
        let mid = lo[d] + (hi[d] - lo[d]) / 2;
        let left = count / u64::from(hi[d] - lo[d]) * u64::from(mid - lo[d]);
        let cut = ((nodes.len() as u64 * left + count / 2) / count) as usize;
        let cut = cut.clamp(left as usize, nodes.len() - (count - left) as usize);
        let key = |n: &u32| {
            let c = &net.coords[*n as usize];
            let mut k = u64::from(c[d]);
            for e in 0..q {
                if e != d {
                    k = k * 4096 + u64::from(c[e]);
                }
            }
            k
        };
        nodes.select_nth_unstable_by_key(cut, key);
        let (a, b) = nodes.split_at_mut(cut);
        let mut mid_hi = hi;
        mid_hi[d] = mid;
        let mut mid_lo = lo;
        mid_lo[d] = mid;
        split(net, logical, lo, mid_hi, a, out);
        split(net, logical, mid_lo, hi, b, out);
    }
    split(net, &logical, lo, hi, &mut nodes, &mut out);
    out
}

/// The box and routing grid, flattened for the search's inner loop.
struct Net {
    q: usize,
    /// Routing grid: extents, rings, strides.
    route_extent: [u32; MAX_DIMS],
    route_wrap: [bool; MAX_DIMS],
    route_stride: [u32; MAX_DIMS],
    /// The box.
    box_grid: Grid,
    /// Coordinates of every node of the box (box and routing coordinates are the same).
    coords: Vec<[u32; MAX_DIMS]>,
    /// Routing index of every node of the box.
    route_index: Vec<u32>,
    alive: Vec<bool>,
    /// Directed links of the routing grid.
    links: usize,
}

impl Net {
    fn new(map: &SpareMap) -> Result<Net, Error> {
        let (grid, routing) = (*map.grid(), *map.routing());
        let q = grid.dims();
        let mut net = Net {
            q,
            route_extent: [0; MAX_DIMS],
            route_wrap: [false; MAX_DIMS],
            route_stride: [0; MAX_DIMS],
            box_grid: grid,
            coords: Vec::with_capacity(grid.len() as usize),
            route_index: Vec::with_capacity(grid.len() as usize),
            alive: Vec::with_capacity(grid.len() as usize),
            // The routing grid holds at most MAX_NODES nodes (Grid::new), 2q links each.
            links: routing.len() as usize * 2 * q,
        };
        for d in 0..q {
            net.route_extent[d] = routing.extent(d);
            net.route_wrap[d] = routing.wraps(d);
            net.route_stride[d] = routing.stride(d);
        }
        for n in 0..grid.len() {
            let c = grid.coord(n);
            let mut short = [0; MAX_DIMS];
            short[..q].copy_from_slice(&c[..q]);
            net.coords.push(short);
            net.route_index.push(routing.reindex(&grid, n));
            net.alive.push(map.state(n) != NodeState::Dead);
        }
        Ok(net)
    }

    /// Outgoing links of a box node in the routing grid.
    fn links_of(&self, node: u32) -> usize {
        let c = &self.coords[node as usize];
        (0..self.q)
            .map(|d| {
                let e = self.route_extent[d];
                if e == 1 {
                    0
                } else if self.route_wrap[d] {
                    // A ring of 2 has one neighbour but a link each way round.
                    2
                } else {
                    usize::from(c[d] > 0) + usize::from(c[d] + 1 < e)
                }
            })
            .sum()
    }

    /// Calls `visit` with the link id of every hop of the dimension-order route from box node
    /// `a` to box node `b` (ids as [`traffic::link_id`] on the routing grid); returns the hops.
    #[inline]
    fn route(&self, a: u32, b: u32, mut visit: impl FnMut(usize)) -> u32 {
        let (ca, cb) = (&self.coords[a as usize], &self.coords[b as usize]);
        let mut at = self.route_index[a as usize] as usize;
        let q2 = 2 * self.q;
        let mut hops = 0;
        for d in 0..self.q {
            let (x, y) = (ca[d], cb[d]);
            if x == y {
                continue;
            }
            let e = self.route_extent[d];
            // The rule of Grid::delta: rings the shorter way, + on a tie.
            let (steps, plus) = if self.route_wrap[d] {
                let fwd = (y + e - x) % e;
                if fwd <= e - fwd {
                    (fwd, true)
                } else {
                    (e - fwd, false)
                }
            } else if y > x {
                (y - x, true)
            } else {
                (x - y, false)
            };
            let s = self.route_stride[d] as usize;
            let wrap_jump = (e as usize - 1) * s;
            let mut pos = x;
            let slot = if plus { 0 } else { 1 };
            for _ in 0..steps {
                visit(at * q2 + 2 * d + slot);
                if plus {
                    if pos + 1 == e {
                        at -= wrap_jump;
                        pos = 0;
                    } else {
                        at += s;
                        pos += 1;
                    }
                } else if pos == 0 {
                    at += wrap_jump;
                    pos = e - 1;
                } else {
                    at -= s;
                    pos -= 1;
                }
            }
            hops += steps;
        }
        hops
    }

    /// The box node at `c + offset`, if inside the box (box rings wrap).
    #[inline]
    fn offset(&self, node: u32, offset: &[i32; MAX_DIMS]) -> Option<u32> {
        let c = &self.coords[node as usize];
        let mut out = [0u32; MAX_DIMS];
        for d in 0..self.q {
            let e = i64::from(self.box_grid.extent(d));
            let x = i64::from(c[d]) + i64::from(offset[d]);
            out[d] = if (0..e).contains(&x) {
                x as u32
            } else if self.box_grid.wraps(d) {
                x.rem_euclid(e) as u32
            } else {
                return None;
            };
        }
        Some(self.box_grid.index(&out))
    }
}

/// Offsets of L1 length 1..=radius in q dimensions.
fn ball(q: usize, radius: i32) -> Vec<[i32; MAX_DIMS]> {
    let mut out = Vec::new();
    let mut o = [0i32; MAX_DIMS];
    fn walk(
        q: usize,
        d: usize,
        left: i32,
        o: &mut [i32; MAX_DIMS],
        out: &mut Vec<[i32; MAX_DIMS]>,
    ) {
        if d == q {
            if o.iter().any(|&x| x != 0) {
                out.push(*o);
            }
            return;
        }
        for x in -left..=left {
            o[d] = x;
            walk(q, d + 1, left - x.abs(), o, out);
        }
        o[d] = 0;
    }
    walk(q, 0, radius, &mut o, &mut out);
    out
}

/// The exact objective: largest load, links at it, total hops (smaller is better).
type Objective = (u32, u64, u64);

/// The annealing state: placement, link loads, and the best placement seen.
struct Search<'a> {
    net: &'a Net,
    /// Messages `rank -> out[i]` for i in `out_start[rank]..out_start[rank + 1]`.
    out_start: Vec<u32>,
    out: Vec<u32>,
    /// Messages `inn[i] -> rank` for i in `in_start[rank]..in_start[rank + 1]`.
    in_start: Vec<u32>,
    inn: Vec<u32>,
    /// Offset index (into `offsets`) of every message of `out` and of `inn`.
    out_off: Vec<u16>,
    in_off: Vec<u16>,
    /// The pattern's offsets, and their opposites.
    offsets: Vec<[i32; MAX_DIMS]>,
    back: Vec<[i32; MAX_DIMS]>,
    /// Box node of every rank, and rank of every box node (NONE: free or dead).
    node_of: Vec<u32>,
    rank_on: Vec<u32>,
    /// Alive nodes without a rank, and where each is in that list (NONE: not free).
    free: Vec<u32>,
    free_at: Vec<u32>,
    /// Where each rank starts, and how many ranks are elsewhere now.
    home: Vec<u32>,
    moved: u32,
    loads: Vec<u32>,
    /// Links per load value.
    links_at: Vec<u64>,
    max_load: u32,
    hops: u64,
    /// Sum over links of [`weight`].
    score: f64,
    /// What one more message adds to [`weight`] at each load (`links_at.len()` entries).
    rise: Vec<f64>,
    /// Target load and penalty of [`weight`].
    tau: u32,
    penalty: f64,
    /// Guided search: how often each link was found at the largest load while the search
    /// stalled there since the target last dropped ([`Search::penalize_hot`]).
    guide: Vec<u32>,
    /// Link updates (`link * 2 + added`) and relocations `(rank, node it left)` of the
    /// candidate being tried, to take it back without routing again.
    link_log: Vec<u32>,
    place_log: Vec<(u32, u32)>,
    /// Ranks whose messages the candidate being tried has taken off their links
    /// ([`Search::detach`]), as a list and a flag per rank.
    detached_list: Vec<u32>,
    detached: Vec<bool>,
    best: Vec<u32>,
    best_objective: Objective,
    /// Links at the largest load, refreshed now and then: where candidates are proposed.
    hot: Vec<u32>,
    /// Both ends of every message that crossed a link at the largest load at the last refresh
    /// (a rank may be listed more than once: the more such messages, the likelier its pick).
    hot_ranks: Vec<u32>,
    near: Vec<[i32; MAX_DIMS]>,
    far: Vec<[i32; MAX_DIMS]>,
    /// Unit steps: (dimension, +1 or -1) as offsets.
    unit: Vec<[i32; MAX_DIMS]>,
}

/// A link's part of the score: load^2 (balance and hops), plus a steep penalty for every
/// message over the target load `tau` (one below the best largest load yet), so that the
/// search may rearrange freely below the target and pays only for what still exceeds it.
#[inline]
fn weight(load: u32, tau: u32, penalty: f64) -> f64 {
    let x = f64::from(load);
    let over = f64::from(load.saturating_sub(tau));
    x * x + penalty * over * over
}

impl<'a> Search<'a> {
    /// The search from `rank_node`, for the messages `rank -> (neighbour, offset index)` of
    /// [`traffic::neighbour_offsets`] and the pattern's `offsets`.
    fn new(
        net: &'a Net,
        messages: &[Vec<(u32, u16)>],
        offsets: &[[i32; MAX_DIMS]],
        rank_node: &[u32],
    ) -> Search<'a> {
        let ranks = rank_node.len();
        let mut out_start = Vec::with_capacity(ranks + 1);
        let mut out = Vec::new();
        let mut out_off = Vec::new();
        let mut in_count = vec![0u32; ranks + 1];
        out_start.push(0);
        for ms in messages {
            for &(n, o) in ms {
                out.push(n);
                out_off.push(o);
                in_count[n as usize] += 1;
            }
            out_start.push(out.len() as u32);
        }
        let mut in_start = vec![0u32; ranks + 1];
        for r in 0..ranks {
            in_start[r + 1] = in_start[r] + in_count[r];
        }
        let mut fill = in_start.clone();
        let mut inn = vec![0u32; out.len()];
        let mut in_off = vec![0u16; out.len()];
        for (src, ms) in messages.iter().enumerate() {
            for &(n, o) in ms {
                inn[fill[n as usize] as usize] = src as u32;
                in_off[fill[n as usize] as usize] = o;
                fill[n as usize] += 1;
            }
        }
        let mut back = offsets.to_vec();
        for o in back.iter_mut() {
            for x in o.iter_mut() {
                *x = -*x;
            }
        }
        let nodes = net.alive.len();
        let mut rank_on = vec![NONE; nodes];
        for (r, &n) in rank_node.iter().enumerate() {
            rank_on[n as usize] = r as u32;
        }
        let mut free = Vec::new();
        let mut free_at = vec![NONE; nodes];
        for n in 0..nodes {
            if net.alive[n] && rank_on[n] == NONE {
                free_at[n] = free.len() as u32;
                free.push(n as u32);
            }
        }
        let unit = ball(net.q, 1);
        let mut s = Search {
            net,
            out_start,
            out,
            in_start,
            inn,
            out_off,
            in_off,
            offsets: offsets.to_vec(),
            back,
            node_of: rank_node.to_vec(),
            rank_on,
            free,
            free_at,
            home: rank_node.to_vec(),
            moved: 0,
            loads: vec![0; net.links],
            links_at: vec![net.links as u64],
            max_load: 0,
            hops: 0,
            score: 0.0,
            rise: vec![1.0],
            tau: u32::MAX,
            penalty: 0.0,
            guide: vec![0; net.links],
            link_log: Vec::new(),
            place_log: Vec::new(),
            detached_list: Vec::new(),
            detached: vec![false; ranks],
            best: rank_node.to_vec(),
            best_objective: (0, 0, 0),
            hot: Vec::new(),
            hot_ranks: Vec::new(),
            near: unit.clone(),
            far: ball(net.q, 2),
            unit,
        };
        for r in 0..ranks as u32 {
            let (a, b) = (s.out_start[r as usize], s.out_start[r as usize + 1]);
            for i in a..b {
                s.route_message(r, s.out[i as usize], true);
            }
        }
        s.link_log.clear();
        s.best_objective = s.objective();
        s.set_target(s.max_load.saturating_sub(1).max(1), PENALTY);
        s
    }

    /// Counts moved ranks against `home` instead of the placement the search started from.
    fn rehome(&mut self, home: &[u32]) {
        self.home.copy_from_slice(home);
        self.moved = self
            .node_of
            .iter()
            .zip(home)
            .filter(|(a, b)| a != b)
            .count() as u32;
    }

    /// Sets the target load of the score and recomputes it.
    fn set_target(&mut self, tau: u32, penalty: f64) {
        self.tau = tau;
        self.penalty = penalty;
        self.rise = (0..self.links_at.len() as u32)
            .map(|x| weight(x + 1, tau, penalty) - weight(x, tau, penalty))
            .collect();
        self.guide.iter_mut().for_each(|g| *g = 0);
        self.score = self
            .links_at
            .iter()
            .enumerate()
            .map(|(x, &n)| n as f64 * weight(x as u32, tau, penalty))
            .sum();
    }

    /// Guided search: the links at the largest load weigh more from now on, so that the
    /// annealing is pushed to empty those it keeps full.
    fn penalize_hot(&mut self) {
        for &l in &self.hot {
            let load = self.loads[l as usize];
            if load > self.tau && load == self.max_load {
                self.guide[l as usize] += 1;
                self.score += GUIDE_WEIGHT * f64::from(load - self.tau);
            }
        }
    }

    fn objective(&self) -> Objective {
        (
            self.max_load,
            self.links_at[self.max_load as usize],
            self.hops,
        )
    }

    #[inline]
    fn add(&mut self, link: usize) {
        let x = self.loads[link] as usize;
        self.loads[link] = x as u32 + 1;
        if self.links_at.len() <= x + 1 {
            self.grow_loads();
        }
        self.links_at[x] -= 1;
        self.links_at[x + 1] += 1;
        self.max_load = self.max_load.max(x as u32 + 1);
        self.score += self.rise[x];
        if x as u32 >= self.tau {
            self.score += GUIDE_WEIGHT * f64::from(self.guide[link]);
        }
        self.link_log.push(link as u32 * 2 + 1);
    }

    /// Room for one more load value in `links_at` and `rise`.
    #[cold]
    fn grow_loads(&mut self) {
        self.links_at.push(0);
        let x = self.rise.len() as u32;
        self.rise
            .push(weight(x + 1, self.tau, self.penalty) - weight(x, self.tau, self.penalty));
    }

    #[inline]
    fn remove(&mut self, link: usize) {
        let x = self.loads[link] as usize;
        self.loads[link] = x as u32 - 1;
        self.links_at[x] -= 1;
        self.links_at[x - 1] += 1;
        if x as u32 == self.max_load && self.links_at[x] == 0 {
            self.max_load = x as u32 - 1;
        }
        self.score -= self.rise[x - 1];
        if x as u32 > self.tau {
            self.score -= GUIDE_WEIGHT * f64::from(self.guide[link]);
        }
        self.link_log.push(link as u32 * 2);
    }

    fn route_message(&mut self, src: u32, dst: u32, add: bool) {
        let net = self.net;
        let (a, b) = (self.node_of[src as usize], self.node_of[dst as usize]);
        let hops = if add {
            net.route(a, b, |l| self.add(l))
        } else {
            net.route(a, b, |l| self.remove(l))
        };
        if add {
            self.hops += u64::from(hops);
        } else {
            self.hops -= u64::from(hops);
        }
    }

    /// Takes the messages of `r` (sent and received) off their links, except those exchanged
    /// with ranks already detached (taken off with those), so that a candidate that moves a
    /// rank several times (a rotation swaps its first node's rank along the segment) routes
    /// each of its messages once: [`Search::attach`] routes them from where the ranks end.
    fn detach(&mut self, r: u32) {
        let ru = r as usize;
        if self.detached[ru] {
            return;
        }
        for i in self.out_start[ru]..self.out_start[ru + 1] {
            let n = self.out[i as usize];
            if !self.detached[n as usize] {
                self.route_message(r, n, false);
            }
        }
        for i in self.in_start[ru]..self.in_start[ru + 1] {
            let n = self.inn[i as usize];
            if !self.detached[n as usize] {
                self.route_message(n, r, false);
            }
        }
        self.detached[ru] = true;
        self.detached_list.push(r);
    }

    /// Routes the messages of every detached rank from its node now: a message between two
    /// detached ranks once, as its sender's.
    fn attach(&mut self) {
        let list = std::mem::take(&mut self.detached_list);
        for &r in &list {
            let ru = r as usize;
            for i in self.out_start[ru]..self.out_start[ru + 1] {
                self.route_message(r, self.out[i as usize], true);
            }
            for i in self.in_start[ru]..self.in_start[ru + 1] {
                let n = self.inn[i as usize];
                if !self.detached[n as usize] {
                    self.route_message(n, r, true);
                }
            }
        }
        for &r in &list {
            self.detached[r as usize] = false;
        }
        self.detached_list = list;
        self.detached_list.clear();
    }

    fn set_node(&mut self, r: u32, node: u32) {
        let old = self.node_of[r as usize];
        if old == self.home[r as usize] {
            self.moved += 1;
        }
        if node == self.home[r as usize] {
            self.moved -= 1;
        }
        self.node_of[r as usize] = node;
        self.rank_on[node as usize] = r;
    }

    fn free_insert(&mut self, node: u32) {
        self.free_at[node as usize] = self.free.len() as u32;
        self.free.push(node);
    }

    fn free_remove(&mut self, node: u32) {
        let at = self.free_at[node as usize];
        let last = self.free.pop().expect("the node is in the free list");
        if last != node {
            self.free[at as usize] = last;
            self.free_at[last as usize] = at;
        }
        self.free_at[node as usize] = NONE;
    }

    /// Puts rank `r` on `node` without routing: a move if the node is free, a swap with its
    /// rank otherwise. Returns the other rank (NONE for a move).
    fn place(&mut self, r: u32, node: u32) -> u32 {
        let from = self.node_of[r as usize];
        let other = self.rank_on[node as usize];
        self.rank_on[from as usize] = NONE;
        self.set_node(r, node);
        if other != NONE {
            self.set_node(other, from);
        } else {
            self.free_remove(node);
            self.free_insert(from);
        }
        self.place_log.push((r, from));
        other
    }

    /// [`Search::place`] with the messages of the ranks involved detached: a candidate ends
    /// with [`Search::attach`], which routes them again. Until then the placement is the
    /// candidate's but the loads and the score are not.
    fn relocate(&mut self, r: u32, node: u32) {
        if self.node_of[r as usize] == node {
            return;
        }
        let other = self.rank_on[node as usize];
        self.detach(r);
        if other != NONE {
            self.detach(other);
        }
        self.place(r, node);
    }

    /// Starts a candidate: what [`Search::undo`] returns to.
    fn begin(&mut self) -> (u32, u64, f64) {
        self.link_log.clear();
        self.place_log.clear();
        (self.max_load, self.hops, self.score)
    }

    /// Takes back the candidate begun with `saved`: link loads from the log, placements in
    /// reverse.
    fn undo(&mut self, saved: (u32, u64, f64)) {
        for i in (0..self.link_log.len()).rev() {
            let e = self.link_log[i];
            let link = (e / 2) as usize;
            let x = self.loads[link];
            let back = if e & 1 == 1 { x - 1 } else { x + 1 };
            self.loads[link] = back;
            self.links_at[x as usize] -= 1;
            self.links_at[back as usize] += 1;
        }
        (self.max_load, self.hops, self.score) = saved;
        while let Some((r, from)) = self.place_log.pop() {
            self.place(r, from);
            // That placement logged itself: drop it.
            self.place_log.pop();
        }
    }

    /// Lists the links at the largest load and the ends of the messages that cross them. Routing
    /// every message costs about as much as a few dozen candidates, and is done once every few
    /// hundred.
    fn refresh_hot(&mut self) {
        self.hot.clear();
        let max = self.max_load;
        self.hot.extend(
            self.loads
                .iter()
                .enumerate()
                .filter(|&(_, &l)| l == max)
                .map(|(i, _)| i as u32),
        );
        self.hot_ranks.clear();
        let net = self.net;
        for r in 0..self.node_of.len() {
            for i in self.out_start[r]..self.out_start[r + 1] {
                let n = self.out[i as usize];
                let mut crosses = false;
                let loads = &self.loads;
                net.route(self.node_of[r], self.node_of[n as usize], |l| {
                    crosses |= loads[l] == max
                });
                if crosses {
                    self.hot_ranks.push(r as u32);
                    self.hot_ranks.push(n);
                }
            }
        }
    }

    /// A node at an end of a link at the largest load (ranks whose messages cross it are near).
    fn hot_node(&mut self, rng: &mut ChaCha8Rng) -> Option<u32> {
        while !self.hot.is_empty() {
            let i = rng.gen_range(0..self.hot.len());
            let link = self.hot[i] as usize;
            if self.loads[link] < self.max_load {
                self.hot.swap_remove(i);
                continue;
            }
            let net = self.net;
            let q = net.q;
            let mut rest = (link / (2 * q)) as u32;
            let mut c = [0u32; MAX_DIMS];
            for d in 0..q {
                c[d] = rest % net.route_extent[d];
                rest /= net.route_extent[d];
                // Past the box on its ring: no rank there.
                if c[d] >= net.box_grid.extent(d) {
                    return None;
                }
            }
            return Some(net.box_grid.index(&c));
        }
        None
    }

    /// A rank whose message crossed a link at the largest load, a rank near such a link, or
    /// any rank.
    fn pick_rank(&mut self, rng: &mut ChaCha8Rng) -> Option<u32> {
        if !self.hot_ranks.is_empty() && rng.gen_bool(P_HOT_MESSAGE) {
            return Some(self.hot_ranks[rng.gen_range(0..self.hot_ranks.len())]);
        }
        if rng.gen_bool(0.7) {
            let node = self.hot_node(rng)?;
            let pick = rng.gen_range(0..=self.near.len());
            let node = if pick == self.near.len() {
                node
            } else {
                self.net.offset(node, &self.near[pick])?
            };
            let r = self.rank_on[node as usize];
            (r != NONE).then_some(r)
        } else {
            Some(rng.gen_range(0..self.node_of.len() as u32))
        }
    }

    /// Where a logical neighbour of `r`, drawn at random, would have it if the map were the
    /// identity around that neighbour.
    fn implied_node(&self, r: u32, rng: &mut ChaCha8Rng) -> Option<u32> {
        let ru = r as usize;
        let outs = (self.out_start[ru + 1] - self.out_start[ru]) as usize;
        let ins = (self.in_start[ru + 1] - self.in_start[ru]) as usize;
        if outs + ins == 0 {
            return None;
        }
        let i = rng.gen_range(0..outs + ins);
        if i < outs {
            // r -> n with offset o: n = r + o, so r = n - o.
            let m = self.out_start[ru] as usize + i;
            let n = self.out[m];
            self.net.offset(
                self.node_of[n as usize],
                &self.back[self.out_off[m] as usize],
            )
        } else {
            // n -> r with offset o: r = n + o.
            let m = self.in_start[ru] as usize + i - outs;
            let n = self.inn[m];
            self.net.offset(
                self.node_of[n as usize],
                &self.offsets[self.in_off[m] as usize],
            )
        }
    }

    /// An ejection chain by implied nodes: a rank goes where a neighbour would have it; the
    /// rank it displaces goes where one of its own neighbours would have it; and so on.
    fn try_eject(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let Some(mut r) = self.pick_rank(rng) else {
            return false;
        };
        let length = rng.gen_range(1..=4);
        let mut done = 0;
        for _ in 0..length {
            let Some(target) = self.implied_node(r, rng) else {
                break;
            };
            if target == self.node_of[r as usize] || !self.net.alive[target as usize] {
                break;
            }
            let displaced = self.rank_on[target as usize];
            self.relocate(r, target);
            done += 1;
            if displaced == NONE {
                break;
            }
            r = displaced;
        }
        done > 0
    }

    /// One rank to a node near a logical neighbour's node or its own (a swap if busy).
    fn try_single(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let Some(r) = self.pick_rank(rng) else {
            return false;
        };
        let ru = r as usize;
        let (a, b) = (self.out_start[ru], self.out_start[ru + 1]);
        let base = if b > a && rng.gen_bool(0.5) {
            self.node_of[self.out[rng.gen_range(a..b) as usize] as usize]
        } else {
            self.node_of[ru]
        };
        let o = self.far[rng.gen_range(0..self.far.len())];
        match self.net.offset(base, &o) {
            Some(t) if t != self.node_of[ru] && self.net.alive[t as usize] => {
                self.relocate(r, t);
                true
            }
            _ => false,
        }
    }

    /// An ejection chain: a free node takes the rank of a neighbouring node, whose node takes
    /// the next, and so on (mostly straight on, as a slide does): the hole walks away.
    fn try_chain(&mut self, rng: &mut ChaCha8Rng) -> bool {
        if self.free.is_empty() {
            return false;
        }
        // A hole near a hot link if there is one, else any.
        let mut hole = self.free[rng.gen_range(0..self.free.len())];
        if rng.gen_bool(0.5) {
            if let Some(n) = self.hot_node(rng) {
                let o = self.far[rng.gen_range(0..self.far.len())];
                if let Some(t) = self.net.offset(n, &o) {
                    if self.free_at[t as usize] != NONE {
                        hole = t;
                    }
                }
            }
        }
        let length = rng.gen_range(1..=12);
        let mut dir = rng.gen_range(0..self.unit.len());
        let mut done = 0;
        for _ in 0..length {
            if done > 0 && rng.gen_bool(0.15) {
                dir = rng.gen_range(0..self.unit.len());
            }
            let Some(n) = self.net.offset(hole, &self.unit[dir]) else {
                break;
            };
            let r = self.rank_on[n as usize];
            if !self.net.alive[n as usize] || r == NONE {
                break;
            }
            self.relocate(r, hole);
            hole = n;
            done += 1;
        }
        done > 0
    }

    /// Parallel chains: the straight chain of [`Search::try_chain`] from every free node of a
    /// rectangle across it (up to two other dimensions), at once: what undoes a 2D or 3D
    /// slide, whose slab local moves cannot shift back one line at a time.
    fn try_slab(&mut self, rng: &mut ChaCha8Rng) -> bool {
        if self.free.is_empty() || self.net.q < 2 {
            return false;
        }
        let hole = self.free[rng.gen_range(0..self.free.len())];
        let q = self.net.q;
        let d = rng.gen_range(0..q);
        let mut along = [0i32; MAX_DIMS];
        along[d] = if rng.gen_bool(0.5) { 1 } else { -1 };
        // One or two dimensions across, each with a width and a side.
        let mut across: Vec<([i32; MAX_DIMS], u32)> = Vec::new();
        for _ in 0..rng.gen_range(1..=2usize.min(q - 1)) {
            let e = rng.gen_range(0..q);
            if e == d || across.iter().any(|(o, _)| o[e] != 0) {
                continue;
            }
            let mut o = [0i32; MAX_DIMS];
            o[e] = if rng.gen_bool(0.5) { 1 } else { -1 };
            across.push((o, rng.gen_range(1..=MAX_SLAB)));
        }
        let length = rng.gen_range(1..=MAX_SLIDE as u32);
        let (w1, w2) = (
            across.first().map_or(1, |a| a.1),
            across.get(1).map_or(1, |a| a.1),
        );
        let mut done = 0;
        let mut row_start = Some(hole);
        for _ in 0..w2 {
            let Some(rs) = row_start else { break };
            let mut start = Some(rs);
            for _ in 0..w1 {
                let Some(mut h) = start else { break };
                start = across.first().and_then(|(o, _)| self.net.offset(h, o));
                if self.rank_on[h as usize] != NONE || !self.net.alive[h as usize] {
                    continue;
                }
                for _ in 0..length {
                    let Some(n) = self.net.offset(h, &along) else {
                        break;
                    };
                    let r = self.rank_on[n as usize];
                    if !self.net.alive[n as usize] || r == NONE {
                        break;
                    }
                    self.relocate(r, h);
                    h = n;
                    done += 1;
                }
            }
            row_start = across.get(1).and_then(|(o, _)| self.net.offset(rs, o));
        }
        done > 0
    }

    /// A slide: from a node near a hot link, the ranks up to the first free node along a line
    /// each move one step towards it (as a 1D slide does), leaving that node free.
    fn try_slide(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let Some(r) = self.pick_rank(rng) else {
            return false;
        };
        let start = self.node_of[r as usize];
        let o = self.unit[rng.gen_range(0..self.unit.len())];
        let mut path = [0u32; MAX_SLIDE];
        path[0] = start;
        let mut len = 1;
        let hole = loop {
            if len == MAX_SLIDE {
                return false;
            }
            let Some(n) = self.net.offset(path[len - 1], &o) else {
                return false;
            };
            if n == start || !self.net.alive[n as usize] {
                return false;
            }
            if self.rank_on[n as usize] == NONE {
                break n;
            }
            path[len] = n;
            len += 1;
        };
        // Pipelined: the rank next to the free node goes first.
        let mut to = hole;
        for i in (0..len).rev() {
            let rank = self.rank_on[path[i] as usize];
            self.relocate(rank, to);
            to = path[i];
        }
        true
    }

    /// A rotation: the ranks of a straight segment each take the next one's node, the last the
    /// first's (what a chain is when no node is free), or the other way round ([`Search::bubble`]):
    /// what turns a rank put far away back into a slide.
    fn try_rotation(&mut self, rng: &mut ChaCha8Rng) -> bool {
        let Some(r) = self.pick_rank(rng) else {
            return false;
        };
        let first = self.node_of[r as usize];
        let o = self.unit[rng.gen_range(0..self.unit.len())];
        let length = rng.gen_range(2..=MAX_ROTATION);
        if rng.gen_bool(0.5) {
            return self.bubble(r, &o, length);
        }
        let mut at = first;
        let mut done = 0;
        for _ in 1..length {
            let Some(n) = self.net.offset(at, &o) else {
                break;
            };
            // Round a ring back to the start: the rotation is complete.
            if n == first || !self.net.alive[n as usize] {
                break;
            }
            // The rank on the first node goes to n; n's rank comes to the first node.
            let on_first = self.rank_on[first as usize];
            self.relocate(on_first, n);
            at = n;
            done += 1;
            if self.rank_on[first as usize] == NONE {
                // n was free: the segment moved on by one and left a hole.
                break;
            }
        }
        done > 0
    }

    /// The other sense of rotation: rank `r` walks up to `length - 1` steps along `o`, each
    /// rank it passes taking one step back (a slide undone), until a free node takes it.
    fn bubble(&mut self, r: u32, o: &[i32; MAX_DIMS], length: usize) -> bool {
        let first = self.node_of[r as usize];
        let mut done = 0;
        for _ in 1..length {
            let Some(n) = self.net.offset(self.node_of[r as usize], o) else {
                break;
            };
            if n == first || !self.net.alive[n as usize] {
                break;
            }
            let free = self.rank_on[n as usize] == NONE;
            self.relocate(r, n);
            done += 1;
            if free {
                break;
            }
        }
        done > 0
    }

    /// Anneals until the budget is spent; `on_accept` sees the state after every accepted
    /// candidate (tests compare it with a full recomputation).
    fn run(
        &mut self,
        budget: &Budget,
        started: Instant,
        lower_bound: u32,
        on_accept: &mut dyn FnMut(&Search),
    ) -> (Stop, u64, u64) {
        let ranks = self.node_of.len();
        let messages = self.out.len() as u64;
        let optimal = |o: &Objective| o.0 <= lower_bound.max(1) && o.2 <= messages;
        if optimal(&self.best_objective) {
            return (Stop::Optimal, 0, 0);
        }
        if budget.max_moved == Some(0) || ranks == 0 {
            return (Stop::NothingToDo, 0, 0);
        }
        let max_moved = budget.max_moved.unwrap_or(u32::MAX);
        let cap = budget.iterations.unwrap_or(u64::MAX);
        let deadline = budget.time_limit.map(|t| started + t);
        let mut rng = ChaCha8Rng::seed_from_u64(budget.seed);
        // Temperatures of the score (load^2 per link): early, moving a rank so that a few of
        // its messages take a hop more is often accepted; at the end hardly ever.
        let (hot_t, cold_t) = (HOT_T, COLD_T);
        let mut temperature = hot_t;
        // Fraction of the budget spent, as of the last temperature update.
        let mut progress = 0.0;
        let refresh_every = (self.loads.len() as u64 / 16).max(512);
        let (mut iterations, mut accepted) = (0u64, 0u64);
        self.refresh_hot();
        let stop = loop {
            if iterations >= cap {
                break Stop::Iterations;
            }
            if iterations % 256 == 0 {
                progress = match (budget.iterations, budget.time_limit) {
                    (Some(c), _) => iterations as f64 / c as f64,
                    (None, Some(t)) => started.elapsed().as_secs_f64() / t.as_secs_f64(),
                    (None, None) => 1.0,
                };
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    break Stop::Time;
                }
                temperature = hot_t * (cold_t / hot_t).powf(progress.min(1.0));
            }
            if iterations % refresh_every == 0 {
                self.refresh_hot();
                if progress >= GUIDE_FROM && self.max_load >= self.best_objective.0 {
                    self.penalize_hot();
                }
            }
            iterations += 1;
            let saved = self.begin();
            let mut kind = rng.gen_range(0..KINDS);
            if self.free.is_empty() && (P_SINGLE..P_SLIDE).contains(&kind) {
                // Chains and slides need a free node: rotate instead.
                kind = P_SLIDE;
            }
            let tried = if kind < P_EJECT {
                self.try_eject(&mut rng)
            } else if kind < P_SINGLE {
                self.try_single(&mut rng)
            } else if kind < P_CHAIN {
                if rng.gen_bool(0.5) {
                    self.try_slab(&mut rng)
                } else {
                    self.try_chain(&mut rng)
                }
            } else if kind < P_SLIDE {
                self.try_slide(&mut rng)
            } else {
                self.try_rotation(&mut rng)
            };
            self.attach();
            if !tried {
                continue;
            }
            let delta = self.score - saved.2;
            let keep = self.moved <= max_moved
                && (delta <= 0.0 || rng.gen::<f64>() < (-delta / temperature).exp());
            if !keep {
                self.undo(saved);
                continue;
            }
            accepted += 1;
            on_accept(self);
            let now = self.objective();
            if now < self.best_objective {
                self.best_objective = now;
                self.best.copy_from_slice(&self.node_of);
                if optimal(&now) {
                    break Stop::Optimal;
                }
                if now.0 <= self.tau {
                    // The target is reached: aim one lower.
                    self.set_target(now.0.saturating_sub(1).max(1), PENALTY);
                }
            }
        };
        (stop, iterations, accepted)
    }
}

/// The migration from `start` to `end` (box nodes of every rank) as steps that never put two
/// ranks on one node: each chain of moves ending on a node free at the start goes from that
/// end backwards; each cycle stages its first rank on a node free in both maps, or is one
/// [`Step::Exchange`] where there is none.
fn pipeline(net: &Net, start: &[u32], end: &[u32]) -> Vec<Step> {
    let nodes = net.alive.len();
    let mut rank_from = vec![NONE; nodes];
    for (r, &n) in start.iter().enumerate() {
        rank_from[n as usize] = r as u32;
    }
    // The moved rank that ends on each node.
    let mut arriving = vec![NONE; nodes];
    let mut end_busy = vec![false; nodes];
    for (r, &n) in end.iter().enumerate() {
        end_busy[n as usize] = true;
        if start[r] != n {
            arriving[n as usize] = r as u32;
        }
    }
    let mut done = vec![false; start.len()];
    let mut steps = Vec::new();
    let step = |r: u32, from: u32, to: u32| Step::Move(Move { rank: r, from, to });
    // Chains: a moved rank whose target nobody leaves, then the rank that ends where it was,
    // and so on.
    for r in 0..start.len() {
        if start[r] == end[r] || rank_from[end[r] as usize] != NONE {
            continue;
        }
        let mut at = r as u32;
        loop {
            let a = at as usize;
            done[a] = true;
            steps.push(step(at, start[a], end[a]));
            let next = arriving[start[a] as usize];
            if next == NONE {
                break;
            }
            at = next;
        }
    }
    let staging = (0..nodes as u32).find(|&n| {
        // After the chains every node that no rank ends on is free.
        net.alive[n as usize] && !end_busy[n as usize]
    });
    for r in 0..start.len() {
        if done[r] || start[r] == end[r] {
            continue;
        }
        // The cycle through r, in the order each rank's target is left by the next.
        let mut cycle = vec![r as u32];
        done[r] = true;
        let mut at = rank_from[end[r] as usize];
        while at != r as u32 {
            done[at as usize] = true;
            cycle.push(at);
            at = rank_from[end[at as usize] as usize];
        }
        match staging {
            Some(t) => {
                let first = cycle[0];
                steps.push(step(first, start[first as usize], t));
                // Now the first rank's node is free: the rank that ends there goes first.
                for &c in cycle[1..].iter().rev() {
                    steps.push(step(c, start[c as usize], end[c as usize]));
                }
                steps.push(step(first, t, end[first as usize]));
            }
            None => steps.push(Step::Exchange(
                cycle
                    .iter()
                    .map(|&c| Move {
                        rank: c,
                        from: start[c as usize],
                        to: end[c as usize],
                    })
                    .collect(),
            )),
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sliding::{fail, Method};

    fn failed_map(extents: &[u32], compute: &[u32], wrap: &[bool], dead: &[u32]) -> SpareMap {
        let grid = Grid::new(extents, wrap).unwrap();
        let mut map = SpareMap::new(grid, compute, &vec![0; extents.len()]).unwrap();
        let method = Method::parse("hybrid", extents.len()).unwrap();
        for &n in dead {
            fail(&mut map, n, &method).unwrap();
        }
        map
    }

    fn budget(iterations: u64, seed: u64) -> Budget {
        Budget {
            max_moved: None,
            time_limit: None,
            iterations: Some(iterations),
            seed,
        }
    }

    /// The search's loads, largest load, links at it and hops recomputed from scratch.
    fn check_against_full(s: &Search, map: &SpareMap, neighbours: &[Vec<u32>]) {
        let routing = map.routing();
        let nodes: Vec<u32> = s
            .node_of
            .iter()
            .map(|&n| routing.reindex(map.grid(), n))
            .collect();
        let (loads, t) = traffic::link_loads(routing, &nodes, neighbours);
        assert_eq!(
            s.loads, loads,
            "incremental loads differ from a full recomputation"
        );
        let at_max = loads.iter().filter(|&&l| l == t.collisions).count() as u64;
        assert_eq!(s.objective(), (t.collisions, at_max, t.total_hops));
        for (r, &n) in s.node_of.iter().enumerate() {
            assert_eq!(s.rank_on[n as usize], r as u32);
            assert!(s.net.alive[n as usize]);
        }
        let free = (0..s.rank_on.len())
            .filter(|&n| s.net.alive[n] && s.rank_on[n] == NONE)
            .count();
        assert_eq!(s.free.len(), free);
        let moved = s
            .node_of
            .iter()
            .zip(&s.home)
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(s.moved as usize, moved);
        // The annealing score kept by the table of rises is the sum of the links' weights.
        let score: f64 = loads
            .iter()
            .zip(&s.guide)
            .map(|(&l, &g)| {
                weight(l, s.tau, s.penalty)
                    + GUIDE_WEIGHT * f64::from(g) * f64::from(l.saturating_sub(s.tau))
            })
            .sum();
        assert!(
            (s.score - score).abs() <= 1e-6 * score.max(1.0),
            "score {} against {score}",
            s.score
        );
    }

    fn incremental_equals_full(map: &SpareMap, pattern: &Pattern, periodic: bool) {
        let net = Net::new(map).unwrap();
        let neighbours = traffic::neighbours(map.compute(), pattern, periodic);
        let messages = traffic::neighbour_offsets(map.compute(), pattern, periodic);
        let mut s = Search::new(&net, &messages, &pattern.offsets(), map.rank_nodes());
        check_against_full(&s, map, &neighbours);
        let mut checked = 0u64;
        let (stop, _, accepted) = s.run(&budget(20_000, 7), Instant::now(), 1, &mut |s| {
            check_against_full(s, map, &neighbours);
            checked += 1;
        });
        assert_eq!(stop, Stop::Iterations);
        assert!(accepted > 20, "only {accepted} candidates accepted");
        assert_eq!(checked, accepted);
        // The state after the last candidate (maybe taken back) is consistent too.
        check_against_full(&s, map, &neighbours);
    }

    #[test]
    fn incremental_loads_equal_a_full_recomputation_after_every_accepted_candidate() {
        let map = failed_map(&[6, 6, 4], &[5, 5, 4], &[false; 3], &[7, 20, 44, 90, 100]);
        incremental_equals_full(&map, &Pattern::star(3), false);
        incremental_equals_full(&map, &Pattern::parse("27p", 3).unwrap(), false);
        // Rings, a periodic stencil, and a box on part of a network ring.
        let map = failed_map(&[6, 5, 4], &[5, 5, 3], &[true, false, true], &[3, 31, 77]);
        incremental_equals_full(&map, &Pattern::star(3), true);
        let mut map = failed_map(&[5, 6], &[4, 5], &[false, false], &[8, 13]);
        map.set_rings(&[9, 0]).unwrap();
        incremental_equals_full(&map, &Pattern::star(2), true);
        let map = failed_map(&[6, 6, 4], &[5, 5, 4], &[true; 3], &[0, 9, 50, 77, 101]);
        incremental_equals_full(&map, &Pattern::star(3), true);
        // No free node left: rotations and swaps only.
        let map = failed_map(
            &[5, 5, 3],
            &[4, 4, 3],
            &[false; 3],
            &(0..27).map(|i| i * 2 + 1).collect::<Vec<_>>(),
        );
        incremental_equals_full(&map, &Pattern::star(3), false);
    }

    /// Carries out the steps on an occupancy table, checking that no step puts two ranks on
    /// one node (an exchange moves its ranks at once onto the nodes its ranks leave).
    fn apply_steps(map: &SpareMap, steps: &[Step]) -> Vec<u32> {
        let mut rank_node = map.rank_nodes().to_vec();
        let mut on: Vec<Option<u32>> = vec![None; map.grid().len() as usize];
        for (r, &n) in rank_node.iter().enumerate() {
            on[n as usize] = Some(r as u32);
        }
        for step in steps {
            let moves = match step {
                Step::Move(m) => std::slice::from_ref(m),
                Step::Exchange(ms) => {
                    let left: Vec<u32> = ms.iter().map(|m| m.from).collect();
                    for m in ms {
                        assert!(
                            left.contains(&m.to),
                            "an exchange only takes nodes it frees"
                        );
                    }
                    ms.as_slice()
                }
            };
            for m in moves {
                assert_eq!(
                    rank_node[m.rank as usize], m.from,
                    "a move starts where its rank is"
                );
                assert_eq!(on[m.from as usize], Some(m.rank));
                on[m.from as usize] = None;
            }
            for m in moves {
                assert_eq!(
                    on[m.to as usize], None,
                    "step {step:?} puts two ranks on a node"
                );
                assert_ne!(map.state(m.to), NodeState::Dead);
                on[m.to as usize] = Some(m.rank);
                rank_node[m.rank as usize] = m.to;
            }
        }
        rank_node
    }

    fn objective_of(map: &SpareMap, pattern: &Pattern, periodic: bool) -> Objective {
        let net = Net::new(map).unwrap();
        let messages = traffic::neighbour_offsets(map.compute(), pattern, periodic);
        Search::new(&net, &messages, &pattern.offsets(), map.rank_nodes()).objective()
    }

    /// Checks everything a re-map promises about its result.
    fn check_remap(map: &SpareMap, pattern: &Pattern, periodic: bool, b: &Budget) -> Remap {
        let r = remap(map, pattern, periodic, b).unwrap();
        // A bijection onto alive nodes (from_parts refuses two ranks on a node).
        for &n in r.map.rank_nodes() {
            assert_ne!(r.map.state(n), NodeState::Dead);
        }
        assert_eq!(r.map.dead_nodes(), map.dead_nodes());
        assert_eq!(r.map.routing(), map.routing());
        // Never worse, by the exact objective.
        let (before, after) = (
            objective_of(map, pattern, periodic),
            objective_of(&r.map, pattern, periodic),
        );
        assert!(after <= before, "{after:?} is worse than {before:?}");
        assert_eq!(r.before, map.traffic(pattern, periodic));
        assert_eq!(r.after, r.map.traffic(pattern, periodic));
        assert_eq!(
            (r.before.collisions, r.after.collisions),
            (before.0, after.0)
        );
        assert!(r.lower_bound <= r.after.collisions);
        // The moved ranks and the steps agree with the maps.
        let moved: Vec<u32> = (0..map.rank_nodes().len() as u32)
            .filter(|&k| map.node_of(k) != r.map.node_of(k))
            .collect();
        assert_eq!(r.moved, moved);
        if let Some(k) = b.max_moved {
            assert!(
                r.moved.len() as u32 <= k,
                "{} ranks moved, budget {k}",
                r.moved.len()
            );
        }
        assert_eq!(apply_steps(map, &r.steps), r.map.rank_nodes());
        r
    }

    fn seeds_map() -> SpareMap {
        // 8x8x8 with 3D(2,1)-like spare planes (compute 7x7x8), 40 failures by hybrid.
        let dead: Vec<u32> = (0..40).map(|i| (i * 131 + 17) % 512).collect();
        failed_map(&[8, 8, 8], &[7, 7, 8], &[false; 3], &dead)
    }

    #[test]
    fn remap_lowers_collisions_and_keeps_its_promises() {
        let map = seeds_map();
        let star = Pattern::star(3);
        let r = check_remap(&map, &star, false, &budget(200_000, 1));
        assert!(
            r.after.collisions < r.before.collisions,
            "{} -> {}",
            r.before.collisions,
            r.after.collisions
        );
        assert!(!r.steps.is_empty());
        assert_eq!(r.stop, Stop::Iterations);
        assert_eq!(r.iterations, 200_000);
    }

    #[test]
    fn the_move_budget_is_respected_and_zero_returns_the_start() {
        let map = seeds_map();
        let star = Pattern::star(3);
        for k in [1, 5, 20] {
            let b = Budget {
                max_moved: Some(k),
                ..budget(50_000, 3)
            };
            check_remap(&map, &star, false, &b);
        }
        let b = Budget {
            max_moved: Some(0),
            ..budget(50_000, 3)
        };
        let r = check_remap(&map, &star, false, &b);
        assert_eq!(r.map, map);
        assert!(r.steps.is_empty() && r.moved.is_empty());
        assert_eq!(r.stop, Stop::NothingToDo);
    }

    #[test]
    fn same_seed_and_iteration_cap_give_the_same_map() {
        let map = seeds_map();
        let star = Pattern::star(3);
        let a = remap(&map, &star, false, &budget(30_000, 11)).unwrap();
        let b = remap(&map, &star, false, &budget(30_000, 11)).unwrap();
        assert_eq!(a.map, b.map);
        assert_eq!(a.steps, b.steps);
        // A time limit that does not bind changes nothing.
        let c = Budget {
            time_limit: Some(Duration::from_secs(3600)),
            ..budget(30_000, 11)
        };
        assert_eq!(remap(&map, &star, false, &c).unwrap().map, a.map);
        let d = remap(&map, &star, false, &budget(30_000, 12)).unwrap();
        assert_ne!(d.map, a.map, "another seed searches elsewhere");
    }

    #[test]
    fn tori_periodic_stencils_and_partial_rings_are_remapped_under_their_routing() {
        // A 6x6x4 torus box (the box covers its rings), periodic 7p.
        let map = failed_map(&[6, 6, 4], &[5, 5, 4], &[true; 3], &[0, 9, 50, 77, 101]);
        let r = check_remap(&map, &Pattern::star(3), true, &budget(50_000, 5));
        assert!(r.after.collisions <= r.before.collisions);
        // A box on part of a network ring: messages may leave the box the shorter way.
        let mut map = failed_map(&[6, 5], &[5, 4], &[false, false], &[3, 8, 14]);
        map.set_rings(&[10, 0]).unwrap();
        let r = check_remap(&map, &Pattern::star(2), true, &budget(50_000, 5));
        assert_eq!(r.map.rings(), vec![10, 0]);
        // Box stencils too.
        let map = failed_map(&[6, 6, 4], &[5, 5, 4], &[false; 3], &[7, 20, 44]);
        check_remap(
            &map,
            &Pattern::parse("27p", 3).unwrap(),
            false,
            &budget(20_000, 5),
        );
    }

    #[test]
    fn cycles_stage_through_a_free_node_or_are_one_exchange() {
        let map = failed_map(&[3, 2], &[2, 2], &[false, false], &[]);
        let net = Net::new(&map).unwrap();
        let start = map.rank_nodes().to_vec();
        // Ranks 0 and 1 swap, ranks 2 -> 3's node, 3 -> the free node 2.
        let end = vec![start[1], start[0], start[3], 2];
        let steps = pipeline(&net, &start, &end);
        let mut expected_end = map.clone();
        expected_end = expected_end.with_placement(end.clone()).unwrap();
        assert_eq!(apply_steps(&map, &steps), expected_end.rank_nodes());
        // The chain first, from its free end; then the swap through a node free in both.
        assert_eq!(
            steps[0],
            Step::Move(Move {
                rank: 3,
                from: start[3],
                to: 2
            })
        );
        assert_eq!(steps.len(), 2 + 3);
        // With every alive node busy, the swap is one exchange.
        let full = failed_map(&[2, 2], &[2, 2], &[false, false], &[]);
        let net = Net::new(&full).unwrap();
        let start = full.rank_nodes().to_vec();
        let end = vec![start[1], start[0], start[2], start[3]];
        let steps = pipeline(&net, &start, &end);
        assert_eq!(steps.len(), 1);
        assert!(matches!(&steps[0], Step::Exchange(ms) if ms.len() == 2));
        apply_steps(&full, &steps);
    }

    #[test]
    fn a_budget_without_iterations_or_time_and_lost_jobs_are_refused() {
        let map = seeds_map();
        let b = Budget {
            iterations: None,
            ..budget(0, 1)
        };
        assert!(remap(&map, &Pattern::star(3), false, &b).is_err());
        // A rank on a dead node: nothing to re-map.
        let grid = Grid::mesh(&[3, 2]).unwrap();
        let lost =
            SpareMap::from_parts(grid, vec![2, 2], vec![0, 1, 3, 4], &[4], [[0; 2]; MAX_DIMS])
                .unwrap();
        let err = remap(&lost, &Pattern::star(2), false, &budget(10, 1)).unwrap_err();
        assert!(err.to_string().contains("job is lost"), "{err}");
    }

    #[test]
    fn the_lower_bound_counts_links_per_node() {
        // A 1D job that fills its mesh: the end ranks send 1 message over 1 link, the others
        // 2 over 2: nothing forces a load above 1.
        let map = failed_map(&[4], &[4], &[false], &[]);
        let net = Net::new(&map).unwrap();
        let star = Pattern::star(1);
        let n = traffic::neighbour_offsets(map.compute(), &star, false);
        let s = Search::new(&net, &n, &star.offsets(), map.rank_nodes());
        assert_eq!(lower_bound(&net, &s.out_start, &s.in_start), 1);
        // Periodic: every rank sends 2 messages but the end nodes have 1 link: load 2.
        let n = traffic::neighbour_offsets(map.compute(), &star, true);
        let s = Search::new(&net, &n, &star.offsets(), map.rank_nodes());
        assert_eq!(lower_bound(&net, &s.out_start, &s.in_start), 2);
        assert_eq!(s.objective().0, 2, "and the identity reaches it");
    }

    /// Every alive node busy after hybrid used all spares: 8x8x8, compute 7x7x8, 120 dead.
    fn full_map() -> SpareMap {
        let dead: Vec<u32> = (0..120).map(|i| (i * 131 + 17) % 512).collect();
        failed_map(&[8, 8, 8], &[7, 7, 8], &[false; 3], &dead)
    }

    #[test]
    fn bisection_places_every_rank_on_its_own_alive_node() {
        let maps = [
            seeds_map(),
            full_map(),
            failed_map(&[6, 6, 4], &[5, 5, 4], &[true; 3], &[0, 9, 50, 77, 101]),
            failed_map(&[5, 6], &[4, 5], &[false, false], &[8, 13]),
            failed_map(&[7], &[5], &[false], &[3]),
        ];
        for map in &maps {
            let net = Net::new(map).unwrap();
            let placement = bisection(&net, map.compute());
            assert_eq!(placement.len(), map.rank_nodes().len());
            let mut seen = vec![false; net.alive.len()];
            for &n in &placement {
                assert!(net.alive[n as usize], "rank on dead or missing node {n}");
                assert!(!seen[n as usize], "two ranks on node {n}");
                seen[n as usize] = true;
            }
        }
    }

    #[test]
    fn with_any_number_of_moves_a_displaced_full_map_starts_afresh() {
        // After every spare is used, hybrid's slides leave ranks far from their neighbours;
        // the bisection placement is better before any candidate is tried (the search from
        // the slid map alone cannot get there in one candidate).
        let map = full_map();
        let star = Pattern::star(3);
        let r = check_remap(&map, &star, false, &budget(1, 1));
        assert!(
            r.after.collisions < r.before.collisions,
            "{} -> {}",
            r.before.collisions,
            r.after.collisions
        );
        assert!(r.moved.len() > map.rank_nodes().len() / 2);
        // A move budget keeps the search near the given map.
        let b = Budget {
            max_moved: Some(10),
            ..budget(1, 1)
        };
        let r = check_remap(&map, &star, false, &b);
        assert!(r.moved.len() <= 10);
        // The search from the fresh start keeps its loads and its count of moved ranks
        // (against the given map) right after every accepted candidate.
        let net = Net::new(&map).unwrap();
        let neighbours = traffic::neighbours(map.compute(), &star, false);
        let messages = traffic::neighbour_offsets(map.compute(), &star, false);
        let fresh = bisection(&net, map.compute());
        let mut s = Search::new(&net, &messages, &star.offsets(), &fresh);
        s.rehome(map.rank_nodes());
        check_against_full(&s, &map, &neighbours);
        let (_, _, accepted) = s.run(&budget(5_000, 3), Instant::now(), 1, &mut |s| {
            check_against_full(s, &map, &neighbours)
        });
        assert!(accepted > 20, "only {accepted} candidates accepted");
    }

    #[test]
    fn ball_counts_offsets() {
        assert_eq!(ball(3, 1).len(), 6);
        assert_eq!(ball(3, 2).len(), 6 + 18);
        assert_eq!(ball(2, 2).len(), 12);
    }
}
