//! Stencil traffic on a map: dimension-order routes over directed links, link loads, and the
//! figures the seeds compare (collisions = the largest link load).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::grid::{Coord, Dir, Grid, MAX_DIMS};
use crate::Error;

/// The two stencil families of the seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// +-1 along each dimension: `5p` in 2D, `7p` in 3D (2q messages a rank).
    Star,
    /// Every offset in {-1,0,1}^q but zero: `9p` in 2D, `27p` in 3D (3^q - 1 messages).
    Box,
}

/// A stencil pattern for a q-dimensional logical grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// Star or box.
    pub family: Family,
    /// Dimensions of the logical grid.
    pub dims: usize,
}

impl Pattern {
    /// The star pattern of q dimensions (`5p`, `7p`, ...).
    pub fn star(dims: usize) -> Pattern {
        Pattern {
            family: Family::Star,
            dims,
        }
    }

    /// Parses `5p`, `7p`, `9p`, `27p` (or any `Np` that is a star or box of q dimensions), or
    /// `star` / `box`, for a network of `dims` dimensions.
    pub fn parse(spec: &str, dims: usize) -> Result<Pattern, Error> {
        let bad = |why: String| Error::Pattern {
            spec: spec.to_string(),
            why,
        };
        let t = spec.trim().to_ascii_lowercase();
        let star_points = 2 * dims + 1;
        let box_points = 3usize.pow(dims as u32);
        let family = match t.as_str() {
            "star" => Family::Star,
            "box" => Family::Box,
            _ => {
                let n: usize = t
                    .strip_suffix('p')
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| bad("use 5p, 7p, 9p, 27p, star or box".into()))?;
                if n == star_points {
                    Family::Star
                } else if n == box_points {
                    Family::Box
                } else {
                    return Err(bad(format!(
                        "a {dims}-dimensional network takes {star_points}p (star) or {box_points}p (box)"
                    )));
                }
            }
        };
        Ok(Pattern { family, dims })
    }

    /// The neighbour offsets of a rank, in a fixed order.
    pub fn offsets(&self) -> Vec<[i32; MAX_DIMS]> {
        let mut out = Vec::new();
        match self.family {
            Family::Star => {
                for d in 0..self.dims {
                    for s in [1, -1] {
                        let mut o = [0; MAX_DIMS];
                        o[d] = s;
                        out.push(o);
                    }
                }
            }
            Family::Box => {
                let n = 3usize.pow(self.dims as u32);
                for mut k in 0..n {
                    let mut o = [0; MAX_DIMS];
                    for od in o.iter_mut().take(self.dims) {
                        *od = (k % 3) as i32 - 1;
                        k /= 3;
                    }
                    if o.iter().any(|&x| x != 0) {
                        out.push(o);
                    }
                }
            }
        }
        out
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let points = match self.family {
            Family::Star => 2 * self.dims + 1,
            Family::Box => 3usize.pow(self.dims as u32),
        };
        write!(f, "{points}p")
    }
}

/// The traffic figures of one map under one pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Traffic {
    /// The largest link load: 1 = no collision, 0 = no traffic.
    pub collisions: u32,
    /// Messages sent (one per rank and neighbour).
    pub messages: u64,
    /// Sum of the route lengths of all messages.
    pub total_hops: u64,
    /// Directed links that carry two or more messages.
    pub hot_links: u64,
    /// The longest route, in hops.
    pub longest_route: u32,
    /// Directed links with an end outside the job's box that carry its messages: where the
    /// box covers only part of a network ring, the shorter way round leaves the box, over
    /// links that other jobs share.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outside_links: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Directed link id: `node * 2q + 2d + slot(dir)`.
#[inline]
pub fn link_id(grid: &Grid, node: u32, d: usize, dir: Dir) -> usize {
    node as usize * 2 * grid.dims() + 2 * d + dir.slot()
}

/// Calls `visit` with every directed link of the dimension-order route from `src` to `dst`
/// (dimension 0 first; rings the shorter way, `+` on a tie). Returns the hop count.
#[inline]
pub fn route(grid: &Grid, src: u32, dst: u32, mut visit: impl FnMut(usize)) -> u32 {
    let a = grid.coord(src);
    let b = grid.coord(dst);
    let mut at = src;
    let mut hops = 0;
    for d in 0..grid.dims() {
        let delta = grid.delta(d, a[d], b[d]);
        let dir = if delta >= 0 { Dir::Plus } else { Dir::Minus };
        for _ in 0..delta.unsigned_abs() {
            visit(link_id(grid, at, d, dir));
            at = grid.step(at, d, dir).expect("routes stay inside the grid");
            hops += 1;
        }
    }
    debug_assert_eq!(at, dst);
    hops
}

/// The logical neighbours of every rank under a pattern, as ranks (messages in send order).
/// Messages that leave a non-periodic grid are dropped, and so are messages to oneself.
pub fn neighbours(compute: &[u32], pattern: &Pattern, periodic: bool) -> Vec<Vec<u32>> {
    neighbour_offsets(compute, pattern, periodic)
        .into_iter()
        .map(|ns| ns.into_iter().map(|(n, _)| n).collect())
        .collect()
}

/// [`neighbours`] with the index of each message's offset in [`Pattern::offsets`].
pub fn neighbour_offsets(
    compute: &[u32],
    pattern: &Pattern,
    periodic: bool,
) -> Vec<Vec<(u32, u16)>> {
    let logical = Grid::new(compute, &vec![periodic; compute.len()]).expect("valid compute shape");
    let offsets = pattern.offsets();
    (0..logical.len())
        .map(|rank| {
            let l = logical.coord(rank);
            offsets
                .iter()
                .enumerate()
                .filter_map(|(i, o)| offset(&logical, &l, o).map(|n| (n, i as u16)))
                .filter(|&(n, _)| n != rank)
                .collect()
        })
        .collect()
}

fn offset(g: &Grid, l: &Coord, o: &[i32; MAX_DIMS]) -> Option<u32> {
    let mut c = *l;
    for d in 0..g.dims() {
        let e = i64::from(g.extent(d));
        let x = i64::from(c[d]) + i64::from(o[d]);
        c[d] = if (0..e).contains(&x) {
            x as u32
        } else if g.wraps(d) {
            x.rem_euclid(e) as u32
        } else {
            return None;
        };
    }
    Some(g.index(&c))
}

/// What a periodic stencil does on logical extents of 1 and 2, where a site could be surprised,
/// one sentence per dimension. The rule: one message per offset of the pattern whose target is
/// another rank. On an extent of 2 the + and - offsets reach the same neighbour, so two
/// messages go to it (as a halo exchange sends both faces); on an extent of 1 they reach the
/// rank itself and no message is sent (box offsets across that dimension then repeat the
/// messages of the offsets without it). Non-periodic stencils never repeat a neighbour.
pub fn periodic_notes(compute: &[u32], pattern: &Pattern, periodic: bool) -> Vec<String> {
    if !periodic {
        return Vec::new();
    }
    let mut notes = Vec::new();
    for (d, &e) in compute.iter().enumerate() {
        match e {
            1 => notes.push(format!(
                "periodic {pattern}: the logical grid is 1 wide in dimension {d}, so its +/- messages would go to the rank itself and are not sent{}",
                if pattern.family == Family::Box {
                    "; box offsets across it reach the same neighbours as those without it, and each is a message of its own"
                } else {
                    ""
                }
            )),
            2 => notes.push(format!(
                "periodic {pattern}: the logical grid is 2 wide in dimension {d}, so the + and - messages go to the same neighbour: two messages, one per offset"
            )),
            _ => {}
        }
    }
    notes
}

/// Link loads of every message `rank -> neighbour` routed between the nodes of `rank_node`.
pub fn link_loads(grid: &Grid, rank_node: &[u32], neighbours: &[Vec<u32>]) -> (Vec<u32>, Traffic) {
    let mut loads = vec![0u32; grid.len() as usize * 2 * grid.dims()];
    let mut t = Traffic::default();
    for (rank, ns) in neighbours.iter().enumerate() {
        let src = rank_node[rank];
        for &n in ns {
            let hops = route(grid, src, rank_node[n as usize], |l| loads[l] += 1);
            t.messages += 1;
            t.total_hops += u64::from(hops);
            t.longest_route = t.longest_route.max(hops);
        }
    }
    t.collisions = loads.iter().copied().max().unwrap_or(0);
    t.hot_links = loads.iter().filter(|&&l| l >= 2).count() as u64;
    (loads, t)
}

/// Whether directed link `link` of `routing` has an end outside the box of `box_extents` at
/// the routing grid's low corner.
pub fn link_outside(routing: &Grid, box_extents: &[u32], link: usize) -> bool {
    let q = routing.dims();
    let node = (link / (2 * q)) as u32;
    let (d, slot) = ((link % (2 * q)) / 2, link % 2);
    let c = routing.coord(node);
    if !routing.inside(&c, box_extents) {
        return true;
    }
    let dir = if slot == 0 { Dir::Plus } else { Dir::Minus };
    routing
        .step(node, d, dir)
        .is_some_and(|n| !routing.inside(&routing.coord(n), box_extents))
}

/// The traffic figures of a rank placement under a pattern.
pub fn traffic(
    grid: &Grid,
    compute: &[u32],
    rank_node: &[u32],
    pattern: &Pattern,
    periodic: bool,
) -> Traffic {
    link_loads(grid, rank_node, &neighbours(compute, pattern, periodic)).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_names_follow_the_dimension_count() {
        assert_eq!(Pattern::parse("5p", 2).unwrap().family, Family::Star);
        assert_eq!(Pattern::parse("9p", 2).unwrap().family, Family::Box);
        assert_eq!(Pattern::parse("7p", 3).unwrap().family, Family::Star);
        assert_eq!(Pattern::parse("27p", 3).unwrap().family, Family::Box);
        assert!(Pattern::parse("5p", 3).is_err());
        assert!(Pattern::parse("cross", 3).is_err());
        assert_eq!(Pattern::parse("box", 3).unwrap().offsets().len(), 26);
        assert_eq!(Pattern::parse("star", 5).unwrap().to_string(), "11p");
    }

    #[test]
    fn identity_map_has_no_collision() {
        let g = Grid::mesh(&[5, 4, 3]).unwrap();
        let nodes: Vec<u32> = (0..g.len()).collect();
        let t = traffic(&g, &[5, 4, 3], &nodes, &Pattern::star(3), false);
        assert_eq!(t.collisions, 1);
        assert_eq!(t.longest_route, 1);
        // 2*(4*4*3 + 5*3*3 + 5*4*2) messages between neighbours.
        assert_eq!(t.messages, 2 * (4 * 4 * 3 + 5 * 3 * 3 + 5 * 4 * 2));
        assert_eq!(t.hot_links, 0);
    }

    #[test]
    fn periodic_stencil_on_a_mesh_collides_on_the_way_back() {
        let g = Grid::mesh(&[4]).unwrap();
        let t = traffic(&g, &[4], &[0, 1, 2, 3], &Pattern::star(1), true);
        // The wrap message 3 -> 0 crosses every - link, on top of the neighbour messages.
        assert_eq!(t.collisions, 2);
        assert_eq!(t.longest_route, 3);
        let ring = Grid::new(&[4], &[true]).unwrap();
        let t = traffic(&ring, &[4], &[0, 1, 2, 3], &Pattern::star(1), true);
        assert_eq!(t.collisions, 1);
    }

    #[test]
    fn periodic_extents_of_one_and_two_follow_the_one_message_per_offset_rule() {
        let star = Pattern::star(2);
        // 2 wide in x: + and - reach the same neighbour, two messages; 1 wide in y: none.
        let n = neighbours(&[2, 1], &star, true);
        assert_eq!(n, vec![vec![1, 1], vec![0, 0]]);
        let notes = periodic_notes(&[2, 1], &star, true);
        assert_eq!(notes.len(), 2);
        assert!(notes[0].contains("2 wide in dimension 0"), "{notes:?}");
        assert!(notes[1].contains("1 wide in dimension 1"), "{notes:?}");
        // Box offsets across the 1-wide dimension repeat the neighbour: 8 offsets, 2 of
        // them to itself.
        let boxed = Pattern::parse("9p", 2).unwrap();
        let n = neighbours(&[3, 1], &boxed, true);
        assert_eq!(n[0], vec![2, 1, 2, 1, 2, 1]);
        assert!(periodic_notes(&[3, 1], &boxed, true)[0].contains("box offsets"));
        // Nothing to say without periodicity or on wider grids.
        assert!(periodic_notes(&[2, 1], &star, false).is_empty());
        assert!(periodic_notes(&[3, 3], &star, true).is_empty());
        assert_eq!(neighbours(&[2, 1], &star, false), vec![vec![1], vec![0]]);
    }

    #[test]
    fn routes_go_dimension_zero_first() {
        let g = Grid::mesh(&[3, 3]).unwrap();
        let mut links = Vec::new();
        let hops = route(&g, 0, 8, |l| links.push(l));
        assert_eq!(hops, 4);
        // x+ from 0, x+ from 1, then y+ from 2, y+ from 5.
        assert_eq!(links, vec![0, 4, 2 * 4 + 2, 5 * 4 + 2]);
    }
}
