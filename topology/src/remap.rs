//! Re-mapping: a new rank -> node bijection onto the alive nodes of a job's box that carries the
//! stencil with fewer collisions than the map it starts from, within a budget of moved ranks.
//!
//! Sliding moves few ranks per failure, but collisions pile up as failures do. When a job
//! relaunches from a checkpoint every rank restarts anyway, so a better map costs only the
//! checkpoint data of the ranks that end on another node. [`remap`] searches for such a map:
//! simulated annealing over moves (a rank to a free node) and swaps (two ranks exchange
//! nodes), proposed where they matter (ranks near the links at the largest load, targets near
//! the rank's logical neighbours), on a tie-aware score (the sum over links of load^4, so that
//! lowering the largest load pays most, then the number of links at it, then the hops), while
//! the best map is kept by the exact objective:
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
    let neighbours = traffic::neighbours(map.compute(), pattern, periodic);
    let mut search = Search::new(&net, &neighbours, map.rank_nodes());
    let lower_bound = lower_bound(&net, &search.out_start, &search.in_start);
    let before = map.traffic(pattern, periodic);
    let start_at_max = search.objective().1;
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
    let degree = |r: usize| {
        (out_start[r + 1] - out_start[r]).max(in_start[r + 1] - in_start[r])
    };
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
    /// Box node of every rank, and rank of every box node (NONE: free or dead).
    node_of: Vec<u32>,
    rank_on: Vec<u32>,
    /// Where each rank starts, and how many ranks are elsewhere now.
    home: Vec<u32>,
    moved: u32,
    loads: Vec<u32>,
    /// Links per load value.
    links_at: Vec<u64>,
    max_load: u32,
    hops: u64,
    /// Sum over links of load^4.
    score: f64,
    best: Vec<u32>,
    best_objective: Objective,
    /// Links at the largest load, refreshed now and then: where moves are proposed.
    hot: Vec<u32>,
    near: Vec<[i32; MAX_DIMS]>,
    far: Vec<[i32; MAX_DIMS]>,
}

#[inline]
fn weight(load: u32) -> f64 {
    let x = f64::from(load);
    (x * x) * (x * x)
}

impl<'a> Search<'a> {
    fn new(net: &'a Net, neighbours: &[Vec<u32>], rank_node: &[u32]) -> Search<'a> {
        let ranks = rank_node.len();
        let mut out_start = Vec::with_capacity(ranks + 1);
        let mut out = Vec::new();
        let mut in_count = vec![0u32; ranks + 1];
        out_start.push(0);
        for ns in neighbours {
            out.extend_from_slice(ns);
            out_start.push(out.len() as u32);
            for &n in ns {
                in_count[n as usize] += 1;
            }
        }
        let mut in_start = vec![0u32; ranks + 1];
        for r in 0..ranks {
            in_start[r + 1] = in_start[r] + in_count[r];
        }
        let mut fill = in_start.clone();
        let mut inn = vec![0u32; out.len()];
        for (src, ns) in neighbours.iter().enumerate() {
            for &n in ns {
                inn[fill[n as usize] as usize] = src as u32;
                fill[n as usize] += 1;
            }
        }
        let mut rank_on = vec![NONE; net.alive.len()];
        for (r, &n) in rank_node.iter().enumerate() {
            rank_on[n as usize] = r as u32;
        }
        let mut s = Search {
            net,
            out_start,
            out,
            in_start,
            inn,
            node_of: rank_node.to_vec(),
            rank_on,
            home: rank_node.to_vec(),
            moved: 0,
            loads: vec![0; net.links],
            links_at: vec![net.links as u64],
            max_load: 0,
            hops: 0,
            score: 0.0,
            best: rank_node.to_vec(),
            best_objective: (0, 0, 0),
            hot: Vec::new(),
            near: ball(net.q, 1),
            far: ball(net.q, 2),
        };
        for r in 0..ranks as u32 {
            s.route_out(r, true);
        }
        s.best_objective = s.objective();
        s
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
        let x = self.loads[link];
        self.loads[link] = x + 1;
        self.links_at[x as usize] -= 1;
        if self.links_at.len() <= x as usize + 1 {
            self.links_at.push(0);
        }
        self.links_at[x as usize + 1] += 1;
        self.max_load = self.max_load.max(x + 1);
        self.score += weight(x + 1) - weight(x);
    }

    #[inline]
    fn remove(&mut self, link: usize) {
        let x = self.loads[link];
        self.loads[link] = x - 1;
        self.links_at[x as usize] -= 1;
        self.links_at[x as usize - 1] += 1;
        if x == self.max_load && self.links_at[x as usize] == 0 {
            self.max_load = x - 1;
        }
        self.score += weight(x - 1) - weight(x);
    }

    /// Routes (`add`) or unroutes the messages `r` sends.
    fn route_out(&mut self, r: u32, add: bool) {
        let (a, b) = (self.out_start[r as usize], self.out_start[r as usize + 1]);
        for i in a..b {
            let n = self.out[i as usize];
            self.route_message(r, n, add);
        }
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

    /// Routes or unroutes every message of `r` (sent and received), except those exchanged
    /// with `skip` (already handled as the other rank's).
    fn route_rank(&mut self, r: u32, skip: u32, add: bool) {
        let ru = r as usize;
        for i in self.out_start[ru]..self.out_start[ru + 1] {
            let n = self.out[i as usize];
            if n != skip {
                self.route_message(r, n, add);
            }
        }
        for i in self.in_start[ru]..self.in_start[ru + 1] {
            let n = self.inn[i as usize];
            if n != skip {
                self.route_message(n, r, add);
            }
        }
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

    /// Puts rank `r` on `node`: a move if the node is free, a swap with its rank otherwise.
    fn relocate(&mut self, r: u32, node: u32) {
        let from = self.node_of[r as usize];
        let other = self.rank_on[node as usize];
        self.route_rank(r, NONE, false);
        if other != NONE {
            self.route_rank(other, r, false);
        }
        self.rank_on[from as usize] = NONE;
        self.set_node(r, node);
        if other != NONE {
            self.set_node(other, from);
        }
        self.route_rank(r, NONE, true);
        if other != NONE {
            self.route_rank(other, r, true);
        }
    }

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
    }

    /// A rank near a link at the largest load (ranks whose messages cross it live near it).
    fn hot_rank(&mut self, rng: &mut ChaCha8Rng) -> Option<u32> {
        while !self.hot.is_empty() {
            let i = rng.gen_range(0..self.hot.len());
            let link = self.hot[i] as usize;
            if self.loads[link] < self.max_load {
                self.hot.swap_remove(i);
                continue;
            }
            let net = self.net;
            let q = net.q;
            let route_node = (link / (2 * q)) as u32;
            // Routing coordinates outside the box: the link lies on the ring past the box.
            let mut rest = route_node;
            let mut c = [0u32; MAX_DIMS];
            for d in 0..q {
                c[d] = rest % net.route_extent[d];
                rest /= net.route_extent[d];
                if c[d] >= net.box_grid.extent(d) {
                    return None;
                }
            }
            let node = net.box_grid.index(&c);
            let pick = rng.gen_range(0..=self.near.len());
            let node = if pick == self.near.len() {
                node
            } else {
                net.offset(node, &self.near[pick])?
            };
            let r = self.rank_on[node as usize];
            return (r != NONE).then_some(r);
        }
        None
    }

    /// A candidate: a rank and the node it would go to (a move, or a swap if busy).
    fn propose(&mut self, rng: &mut ChaCha8Rng) -> Option<(u32, u32)> {
        let ranks = self.node_of.len() as u32;
        let r = if rng.gen_bool(0.7) {
            self.hot_rank(rng)?
        } else {
            rng.gen_range(0..ranks)
        };
        let ru = r as usize;
        let (a, b) = (self.out_start[ru], self.out_start[ru + 1]);
        // Near a logical neighbour's node, or near its own.
        let base = if b > a && rng.gen_bool(0.5) {
            self.node_of[self.out[rng.gen_range(a..b) as usize] as usize]
        } else {
            self.node_of[ru]
        };
        let o = self.far[rng.gen_range(0..self.far.len())];
        let target = self.net.offset(base, &o)?;
        (target != self.node_of[ru] && self.net.alive[target as usize]).then_some((r, target))
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
        // Temperatures on the load^4 score: early, raising one link from 2 to 3 (65) is
        // often accepted; at the end only moves that cost a hop or two.
        let (hot_t, cold_t) = (30.0f64, 0.3f64);
        let mut temperature = hot_t;
        let refresh_every = (self.loads.len() as u64 / 16).max(512);
        let (mut iterations, mut accepted) = (0u64, 0u64);
        self.refresh_hot();
        let stop = loop {
            if iterations >= cap {
                break Stop::Iterations;
            }
            if iterations % 256 == 0 {
                let progress = match (budget.iterations, budget.time_limit) {
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
            }
            iterations += 1;
            let Some((r, target)) = self.propose(&mut rng) else {
                continue;
            };
            let from = self.node_of[r as usize];
            let score = self.score;
            self.relocate(r, target);
            let delta = self.score - score;
            let keep = self.moved <= max_moved
                && (delta <= 0.0 || rng.gen::<f64>() < (-delta / temperature).exp());
            if !keep {
                // A swap undoes itself; a move goes back to the node it left (free now).
                self.relocate(r, from);
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

    #[test]
    fn ball_counts_offsets() {
        assert_eq!(ball(3, 1).len(), 6);
        assert_eq!(ball(3, 2).len(), 6 + 18);
        assert_eq!(ball(2, 2).len(), 12);
    }
}
