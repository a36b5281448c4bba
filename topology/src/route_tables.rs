//! Dimension-order routes on a mesh, tabulated by displacement.
//!
//! On a grid without rings a route is translation invariant: the links of the route from node
//! `a` to node `a + Δ` are those of the route from the origin to `Δ`, moved by `a`'s link
//! base. [`RouteTables`] lists, for every displacement within a small window, the route's
//! links relative to its source, the links of a message pair (`x` to `y` and back), and what
//! changes in a pair when `x` takes one step along a dimension. The link-load engine then
//! moves a slid rank's messages with one table look-up and a short run of updates, instead of
//! walking and comparing routes (`docs/research/simulator-engine-rounds.md`, "Fifth round").
//! Displacements outside the window are walked as before.

use crate::grid::{Grid, MAX_DIMS};

/// The widest window: every coordinate difference in `-RADIUS..=RADIUS`. Neighbours of the
/// stencils start one hop apart and drift by a step per slide; wider windows cost memory the
/// engine reads in its inner loop.
const RADIUS: i32 = 4;

/// Tables are followed by this many entries, so that a short list can be read as a run of
/// fixed length.
pub(crate) const RUN: usize = 8;

/// The tables' lists fit in this many entries (followed by [`RUN`] more), a power of two: a
/// list's start masked to it needs no bounds check. Three dimensions at radius 4 take 62,208,
/// whatever the extents (the lists are relative); fewer dimensions, fewer.
pub(crate) const TABLE_CAP: usize = 1 << 16;

/// Tables are built only when the window's displacements number at most this many (q <= 3 at
/// radius 4): the tables stay within the first cache levels.
const MAX_DISPLACEMENTS: usize = 729;

/// Displacement indexes are below this power of two, and the per-displacement tables are
/// padded to it: a look-up by an index masked to it needs no bounds check.
pub(crate) const SLOTS: usize = MAX_DISPLACEMENTS.next_power_of_two();

/// A node's first four coordinates as the 16-bit lanes of one word (one load), the form
/// [`Window::index_of`] takes: tables exist for three dimensions at most, so the
/// fourth coordinate is zero on both sides and its lane stays zero.
#[inline(always)]
pub(crate) fn key(c: &[u16; MAX_DIMS]) -> u64 {
    u64::from(c[0]) | u64::from(c[1]) << 16 | u64::from(c[2]) << 32 | u64::from(c[3]) << 48
}

/// One in each of a [`key`]'s three lanes that coordinates fill.
const LANES: u64 = 0x0000_0001_0001_0001;

/// Links of one route or route pair: `links[start..start + len]`, relative link ids, doubled
/// (a link change is `link * 2 + 1` for one message more, `link * 2` for one less).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Span {
    pub(crate) start: u32,
    pub(crate) len: u16,
    /// Hops of the route (for a pair: of `x` to `y`, then of `y` to `x`).
    pub(crate) hops: [u8; 2],
}

/// What one step of a pair's end `x` changes: `links[start..start + len]` as link changes
/// relative to `x`'s link base before the step (`link * 2 + 1`: one message more, `link * 2`:
/// one less; links on both routes are left out), and the hops of each of the two messages
/// before and after (on a mesh a route and its reverse have the same length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Step {
    pub(crate) start: u32,
    pub(crate) len: u8,
    pub(crate) hops_before: u8,
    pub(crate) hops_after: u8,
}

/// The displacement window of [`RouteTables`], as [`RouteTables::window`] lends it.
#[derive(Clone, Copy)]
pub(crate) struct Window<'a> {
    gather: u64,
    lanes: &'a [u64; SLOTS],
}

impl Window<'_> {
    /// The index of the displacement from the node of [`key`] `a` to that of `b`, or `None`
    /// outside the window.
    ///
    /// The coordinates are subtracted as 16-bit lanes of one word, each lane biased by
    /// `RADIUS`: inside the window every lane holds `0..=2 * RADIUS`, and one multiplication
    /// weighs and adds them into the index. Whatever the word, the index is below [`SLOTS`];
    /// the word is inside the window exactly when it is the one that index stands for (a
    /// word outside may borrow across lanes and hash to any index): one comparison and a
    /// read, where a check of each lane's range took nine instructions.
    #[inline(always)]
    pub(crate) fn index_of(self, a: u64, b: u64) -> Option<usize> {
        let v = b.wrapping_add(RADIUS as u64 * LANES).wrapping_sub(a);
        let index = (v.wrapping_mul(self.gather) >> 32) as usize & (SLOTS - 1);
        (self.lanes[index] == v).then_some(index)
    }
}

/// Route tables of one mesh routing grid.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct RouteTables {
    q: usize,
    /// The weight of each coordinate difference in a displacement's index, as the factor
    /// that gathers the weighted lanes in bits 32 to 47 ([`Window::index_of`]).
    gather: u64,
    /// Per displacement index, the biased lanes that give it ([`Window::index_of`]), padded
    /// to [`SLOTS`] with those of index 0.
    lanes: Vec<u64>,
    /// The longest list of links: a caller sizes its room for a message from it.
    longest_list: usize,
    /// Per displacement: the route from a node to the node at that displacement.
    route: Vec<Span>,
    /// Per displacement: both routes of a pair, relative to `x`.
    pair: Vec<Span>,
    /// Per dimension and direction, then displacement (`(2k + (0: +, 1: -)) * SLOTS +
    /// index`): what a step of `x` changes in its pair with the fixed `y`. One slide reads
    /// one slot's steps ([`RouteTables::steps`]).
    step: Vec<Step>,
    links: Vec<i32>,
}

impl RouteTables {
    /// The tables of `routing` when it has no rings and the window fits the budget.
    pub(crate) fn new(routing: &Grid) -> Option<RouteTables> {
        let q = routing.dims();
        let width = 2 * RADIUS + 1;
        // Link changes are u32 ([`RouteTables`]'s doubled ids).
        let links = u64::from(routing.len()) * 2 * q as u64;
        // `index` packs up to three coordinates below 2^15.
        if q > 3
            || (0..q).any(|d| routing.wraps(d) || routing.extent(d) > 1 << 15)
            || links * 2 > u64::from(u32::MAX)
            || (width as usize).checked_pow(q as u32)? > MAX_DISPLACEMENTS
        {
            return None;
        }
        let mut weight = [0i32; MAX_DIMS];
        let mut w = 1;
        for x in weight.iter_mut().take(q) {
            *x = w;
            w *= width;
        }
        let count = w as usize;
        // Node offset of a displacement on the routing grid, and a link's relative id.
        let stride: Vec<i64> = (0..q).map(|d| i64::from(routing.stride(d))).collect();
        let q2 = 2 * q as i64;
        let node_offset =
            |delta: &[i32]| -> i64 { (0..q).map(|d| i64::from(delta[d]) * stride[d]).sum() };
        // The links of the route from node offset `from` by `delta`, as relative ids.
        let route = |from: i64, delta: &[i32], out: &mut Vec<i64>| -> u8 {
            let mut at = from;
            let mut hops = 0;
            for d in 0..q {
                let slot = i64::from(delta[d] < 0);
                let step = if delta[d] < 0 { -stride[d] } else { stride[d] };
                for _ in 0..delta[d].unsigned_abs() {
                    out.push(at * q2 + 2 * d as i64 + slot);
                    at += step;
                    hops += 1;
                }
            }
            hops
        };
        let displacement = |i: usize| -> [i32; MAX_DIMS] {
            let mut delta = [0i32; MAX_DIMS];
            let mut rest = i as i32;
            for x in delta.iter_mut().take(q) {
                *x = rest % width - RADIUS;
                rest /= width;
            }
            delta
        };
        let neg = |delta: &[i32; MAX_DIMS]| delta.map(|x| -x);
        let mut links = Vec::new();
        // Links doubled, with `up` in the low bit.
        let push = |list: &[i64], up: i64, links: &mut Vec<i32>| -> Option<u32> {
            let start = u32::try_from(links.len()).ok()?;
            for &l in list {
                links.push(i32::try_from(l * 2 + up).ok()?);
            }
            Some(start)
        };
        let mut routes = Vec::with_capacity(count);
        let mut pairs = Vec::with_capacity(count);
        // Per step slot (2k + (0: +, 1: -)) and displacement: the links a step removes and
        // adds, and the hops before and after. Laid out slot by slot below.
        type StepChange = (Vec<i64>, Vec<i64>, u8, u8);
        let mut step_lists: Vec<Vec<StepChange>> = vec![Vec::with_capacity(count); 2 * q];
        let mut list = Vec::new();
        let mut pair_lists = Vec::with_capacity(count);
        for i in 0..count {
            let delta = displacement(i);
            list.clear();
            let h = route(0, &delta, &mut list);
            routes.push(Span {
                start: push(&list, 0, &mut links)?,
                len: list.len() as u16,
                hops: [h, 0],
            });
            // The pair x -> y, y -> x with x at the origin.
            let back = route(node_offset(&delta), &neg(&delta), &mut list);
            pair_lists.push((list.clone(), [h, back]));
            let mut before = list.clone();
            before.sort_unstable();
            for k in 0..q {
                for (slot, s) in [1i32, -1].into_iter().enumerate() {
                    // x steps to s e_k; y stays at delta.
                    let mut moved = [0i32; MAX_DIMS];
                    moved[k] = s;
                    let mut rest = delta;
                    rest[k] -= s;
                    let mut after = Vec::new();
                    let there = route(node_offset(&moved), &rest, &mut after);
                    let back_there = route(node_offset(&delta), &neg(&rest), &mut after);
                    if back != h || back_there != there {
                        // Not a mesh after all: a route and its reverse differ in length.
                        return None;
                    }
                    // The links on one side only (a route has no link twice, so the lists
                    // are sets): sorted, then merged.
                    after.sort_unstable();
                    let (mut downs, mut ups) = (Vec::new(), Vec::new());
                    let (mut i, mut j) = (0, 0);
                    while i < before.len() || j < after.len() {
                        match (before.get(i), after.get(j)) {
                            (Some(b), Some(a)) if b == a => {
                                i += 1;
                                j += 1;
                            }
                            (Some(&b), a) if a.is_none_or(|&a| b < a) => {
                                downs.push(b);
                                i += 1;
                            }
                            (_, a) => {
                                ups.push(*a.expect("before has no link left below it"));
                                j += 1;
                            }
                        }
                    }
                    step_lists[2 * k + slot].push((downs, ups, h, there));
                }
            }
        }
        // Lists of one kind side by side, and a slide's steps (one slot) together: a loop
        // reads the lists of nearby displacements from a few cache lines.
        for (list, hops) in &pair_lists {
            pairs.push(Span {
                start: push(list, 0, &mut links)?,
                len: list.len() as u16,
                hops: *hops,
            });
        }
        let mut steps = Vec::with_capacity(SLOTS * 2 * q);
        for slot in &step_lists {
            for (downs, ups, before, after) in slot {
                let start = push(downs, 0, &mut links)?;
                push(ups, 1, &mut links)?;
                steps.push(Step {
                    start,
                    len: u8::try_from(downs.len() + ups.len()).ok()?,
                    hops_before: *before,
                    hops_after: *after,
                });
            }
            steps.resize(steps.len() + SLOTS - count, Step::default());
        }
        routes.resize(SLOTS, Span::default());
        if links.len() > TABLE_CAP {
            return None;
        }
        links.resize(TABLE_CAP + RUN, 0);
        let longest_list = routes
            .iter()
            .chain(&pairs)
            .map(|s| usize::from(s.len))
            .chain(steps.iter().map(|s| usize::from(s.len)))
            .max()
            .unwrap_or(0);
        // Lane d of a displacement (at bit 16 d, at most 2 RADIUS) times weight d lands at
        // bit 32 when the factor holds weight d at bit 32 - 16 d. The products at bits 0
        // and 16 stay below 2^16 (at most 2 RADIUS times the two largest weights), so no
        // carry reaches bit 32, and the index itself is below 2^16.
        let gather = (weight[0] as u64) << 32 | (weight[1] as u64) << 16 | weight[2] as u64;
        debug_assert!(2 * RADIUS * (weight[1] + weight[2]) < 1 << 16 && w < 1 << 16);
        // The key of the displacement with its three lanes biased, those of missing
        // dimensions (zero) too, as `index_of` biases them.
        let biased = |i: usize| {
            let delta = displacement(i);
            key(&std::array::from_fn(|d| {
                if d < 3 {
                    (delta[d] + RADIUS) as u16
                } else {
                    0
                }
            }))
        };
        let mut lanes: Vec<u64> = (0..count).map(biased).collect();
        lanes.resize(SLOTS, biased(0));
        Some(RouteTables {
            q,
            gather,
            lanes,
            longest_list,
            route: routes,
            pair: pairs,
            step: steps,
            links,
        })
    }

    /// The index of the displacement from `a` to `b` (coordinates on the routing grid), or
    /// `None` outside the window.
    #[inline(always)]
    pub(crate) fn index(&self, a: &[u16; MAX_DIMS], b: &[u16; MAX_DIMS]) -> Option<usize> {
        self.window().index_of(key(a), key(b))
    }

    /// What [`Window::index_of`] reads, borrowed once by a loop that looks up many pairs (the
    /// factor and the table's address then stay in registers).
    #[inline(always)]
    pub(crate) fn window(&self) -> Window<'_> {
        Window {
            gather: self.gather,
            lanes: self.lanes[..].try_into().expect("lanes padded to SLOTS"),
        }
    }

    #[cfg(test)]
    pub(crate) fn route(&self, index: usize) -> Span {
        self.route[index]
    }

    /// Every route by displacement index ([`RouteTables::route`]), padded to [`SLOTS`].
    #[inline(always)]
    pub(crate) fn routes(&self) -> &[Span; SLOTS] {
        self.route[..].try_into().expect("routes padded to SLOTS")
    }

    #[inline(always)]
    pub(crate) fn pair(&self, index: usize) -> Span {
        self.pair[index]
    }

    /// What a step of `x` along dimension k (`up`: +) changes in its pair with `y`, `y` at
    /// displacement `index` from `x`'s node before the step.
    #[cfg(test)]
    pub(crate) fn step(&self, index: usize, k: usize, up: bool) -> Step {
        self.steps(k, up)[index]
    }

    /// The steps along dimension k (`up`: +) of every displacement, by index, for a loop that
    /// takes that step many times.
    #[inline(always)]
    pub(crate) fn steps(&self, k: usize, up: bool) -> &[Step; SLOTS] {
        let slot = 2 * k + usize::from(!up);
        self.step[slot * SLOTS..(slot + 1) * SLOTS]
            .try_into()
            .expect("steps padded to SLOTS")
    }

    /// The most links any route, pair or step lists.
    pub(crate) fn longest_list(&self) -> usize {
        self.longest_list
    }

    /// Every list, padded to [`TABLE_CAP`] entries and followed by [`RUN`] more.
    #[inline(always)]
    pub(crate) fn table(&self) -> &[i32; TABLE_CAP + RUN] {
        self.links[..]
            .try_into()
            .expect("lists padded to TABLE_CAP + RUN")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The links of the dimension-order route between two nodes, walked node by node.
    fn walked(g: &Grid, a: u32, b: u32) -> Vec<i64> {
        let q = g.dims();
        let (ca, cb) = (g.coord(a), g.coord(b));
        let mut at = ca;
        let mut out = Vec::new();
        for d in 0..q {
            while at[d] != cb[d] {
                let up = cb[d] > at[d];
                out.push(i64::from(g.index(&at)) * 2 * q as i64 + 2 * d as i64 + i64::from(!up));
                if up {
                    at[d] += 1;
                } else {
                    at[d] -= 1;
                }
            }
        }
        out
    }

    /// Absolute link ids of tabulated changes from node `base`, and whether each adds.
    fn changes(t: &RouteTables, g: &Grid, base: u32, start: u32, len: usize) -> Vec<(i64, bool)> {
        let q2 = 2 * g.dims() as i64;
        t.table()[start as usize..start as usize + len]
            .iter()
            .map(|&l| {
                let c = i64::from(base) * q2 * 2 + i64::from(l);
                (c >> 1, c & 1 == 1)
            })
            .collect()
    }

    fn absolute(t: &RouteTables, g: &Grid, base: u32, start: u32, len: usize) -> Vec<i64> {
        changes(t, g, base, start, len)
            .into_iter()
            .map(|(l, up)| {
                assert!(!up, "routes are listed as removals");
                l
            })
            .collect()
    }

    fn sorted(mut v: Vec<i64>) -> Vec<i64> {
        v.sort_unstable();
        v
    }

    #[test]
    fn tabulated_routes_are_the_walked_routes() {
        for extents in [vec![12u32], vec![9, 7], vec![12, 12, 12], vec![6, 10, 5]] {
            let g = Grid::new(&extents, &vec![false; extents.len()]).unwrap();
            let t = RouteTables::new(&g).expect("a mesh within the budget");
            let mut checked = 0;
            for a in 0..g.len() {
                for b in 0..g.len() {
                    let (ca, cb) = (coords(&g, a), coords(&g, b));
                    let within = (0..g.dims())
                        .all(|d| (i32::from(ca[d]) - i32::from(cb[d])).abs() <= RADIUS);
                    let Some(i) = t.index(&ca, &cb) else {
                        assert!(!within, "{ca:?} to {cb:?} is inside the window");
                        continue;
                    };
                    assert!(within, "{ca:?} to {cb:?} is outside the window");
                    let r = t.route(i);
                    assert_eq!(absolute(&t, &g, a, r.start, r.len.into()), walked(&g, a, b));
                    assert_eq!(r.hops[0] as usize, walked(&g, a, b).len());
                    let p = t.pair(i);
                    let mut both = walked(&g, a, b);
                    both.extend(walked(&g, b, a));
                    assert_eq!(
                        sorted(absolute(&t, &g, a, p.start, p.len.into())),
                        sorted(both)
                    );
                    checked += 1;
                }
            }
            assert!(checked > g.len() as usize, "the window covers neighbours");
        }
    }

    #[test]
    fn only_words_inside_the_window_have_an_index() {
        // Any two words, not only keys of nodes: a word that borrows across lanes, or that
        // hashes to a padding slot, has none.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let t = RouteTables::new(&Grid::new(&[12, 12, 12], &[false; 3]).unwrap()).unwrap();
        let w = t.window();
        let lanes = |v: u64| [0, 16, 32, 48].map(|s| (v >> s) & 0xFFFF);
        // The three lanes' bias, as `index_of` adds it.
        let bias = RADIUS as u64 * LANES;
        let mut found = 0;
        for round in 0..200_000 {
            let a: u64 = rng.gen();
            // Half the words a few steps away in each lane, so that some fall inside.
            let b = if round % 2 == 0 {
                rng.gen()
            } else {
                (0..4).fold(a, |b, d| {
                    let step = rng.gen_range(-6i64..=6) << (16 * d);
                    b.wrapping_add_signed(step)
                })
            };
            let v = b.wrapping_add(bias).wrapping_sub(a);
            let inside = lanes(v)[..3].iter().all(|&l| l <= 2 * RADIUS as u64) && lanes(v)[3] == 0;
            assert_eq!(w.index_of(a, b).is_some(), inside, "{a:#x} to {b:#x}");
            found += usize::from(inside);
        }
        assert!(found > 1_000, "{found} words inside");
        // The word of all ones, from two words of coordinates.
        assert!(w.index_of(bias + 1, 0).is_none());
    }

    #[test]
    fn a_step_changes_exactly_the_links_that_differ() {
        let g = Grid::new(&[7, 6, 5], &[false; 3]).unwrap();
        let t = RouteTables::new(&g).unwrap();
        let q = g.dims();
        let mut checked = 0;
        for x in 0..g.len() {
            for y in 0..g.len() {
                let Some(i) = t.index(&coords(&g, x), &coords(&g, y)) else {
                    continue;
                };
                if x == y {
                    continue;
                }
                for k in 0..q {
                    for up in [true, false] {
                        let dir = if up {
                            crate::Dir::Plus
                        } else {
                            crate::Dir::Minus
                        };
                        let Some(x2) = g.step(x, k, dir) else {
                            continue;
                        };
                        if x2 == y {
                            continue;
                        }
                        let s = t.step(i, k, up);
                        let mut before = walked(&g, x, y);
                        before.extend(walked(&g, y, x));
                        let mut after = walked(&g, x2, y);
                        after.extend(walked(&g, y, x2));
                        let all = changes(&t, &g, x, s.start, s.len.into());
                        let downs: Vec<i64> = all.iter().filter(|c| !c.1).map(|c| c.0).collect();
                        let ups: Vec<i64> = all.iter().filter(|c| c.1).map(|c| c.0).collect();
                        // Before, less the downs, plus the ups, is after.
                        let mut result: Vec<i64> = before
                            .iter()
                            .filter(|l| !downs.contains(l))
                            .copied()
                            .collect();
                        assert_eq!(result.len() + downs.len(), before.len());
                        result.extend(ups.iter().copied());
                        assert_eq!(sorted(result), sorted(after.clone()));
                        assert_eq!(usize::from(s.hops_after), walked(&g, x2, y).len());
                        assert_eq!(usize::from(s.hops_after), walked(&g, y, x2).len());
                        assert_eq!(usize::from(s.hops_before), walked(&g, x, y).len());
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn three_dimensional_lists_fit_the_masked_table() {
        // Every list's end, whatever the mesh's extents: the lists are relative.
        for extents in [[12, 12, 12], [9, 9, 9], [40, 30, 20]] {
            let g = Grid::new(&extents, &[false; 3]).unwrap();
            let t = RouteTables::new(&g).expect("tables for a 3D mesh");
            let end = t
                .route
                .iter()
                .chain(&t.pair)
                .map(|s| s.start as usize + usize::from(s.len))
                .chain(t.step.iter().map(|s| s.start as usize + usize::from(s.len)))
                .max()
                .unwrap();
            assert_eq!(end, 62_208);
            assert!(end <= TABLE_CAP);
            assert_eq!(t.table().len(), TABLE_CAP + RUN);
        }
    }

    #[test]
    fn rings_and_large_windows_have_no_tables() {
        assert!(RouteTables::new(&Grid::new(&[8, 8], &[true, false]).unwrap()).is_none());
        assert!(RouteTables::new(&Grid::new(&[4; 4], &[false; 4]).unwrap()).is_none());
    }

    fn coords(g: &Grid, n: u32) -> [u16; MAX_DIMS] {
        let c = g.coord(n);
        let mut out = [0u16; MAX_DIMS];
        for d in 0..g.dims() {
            out[d] = c[d] as u16;
        }
        out
    }
}
