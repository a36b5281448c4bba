//! Substitution of failed nodes: 0D, kD sliding for k = 1..q, and hybrids, exactly as
//! `shared/docs/sliding-spec.md` defines them.
//!
//! A substitution returns the moves `(rank, from, to)` in pipeline order: carried out one after
//! another, no move ever puts two ranks on one node (on each slid line the rank nearest the free
//! node goes first, as in the journal seed's pipelined migration).

use std::cmp::Reverse;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::grid::{format_coord, Coord, Dir, Grid, MAX_DIMS};
use crate::map::{LineMasks, NodeState, SpareMap, NO_RANK};
use crate::Error;

/// How a job's failed nodes are substituted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    spec: MethodSpec,
    /// Degrees tried in order; 0 is 0D.
    degrees: Vec<usize>,
    /// How 0D picks its free node.
    zero: ZeroRule,
}

/// How 0D sliding picks the free node for a failed rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ZeroRule {
    /// The spec's rule: the nearest free node; ties to more shared coordinates, then the
    /// lowest index.
    #[default]
    Nearest,
    /// The journal seed's "alternating sides" (section 2.2.1): the nearest free node of the
    /// spare side (dimension and direction of the largest offset) used least by earlier 0D
    /// substitutions; ties by the spec's rule.
    Alternate,
    /// This project's collision-aware rule: among the nearest free node of each side, the one
    /// that leaves the smallest largest link load (then the fewest hops, then the spec's rule).
    /// Needs the map's link loads ([`SpareMap::track_traffic`]).
    LeastLoad,
}

impl ZeroRule {
    fn parse(s: &str) -> Option<ZeroRule> {
        match s.trim().to_ascii_lowercase().as_str() {
            "nearest" => Some(ZeroRule::Nearest),
            "alternate" => Some(ZeroRule::Alternate),
            "least-load" => Some(ZeroRule::LeastLoad),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ZeroRule::Nearest => "nearest",
            ZeroRule::Alternate => "alternate",
            ZeroRule::LeastLoad => "least-load",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum MethodSpec {
    Single(usize),
    All,
    Without(Vec<usize>),
    List(Vec<usize>),
}

impl Method {
    /// Parses `0D`, `2D`, `hybrid`, `hybrid(all)`, `hybrid(-2D)` or `hybrid(3D+1D+0D)` for a
    /// network of `q` dimensions, optionally followed by the 0D rule: `0D:alternate`,
    /// `hybrid:least-load`, `hybrid(3D+0D):nearest`.
    pub fn parse(spec: &str, q: usize) -> Result<Method, Error> {
        let bad = |why: String| Error::Method {
            spec: spec.to_string(),
            why,
        };
        let (body, zero) = match spec.rsplit_once(':') {
            Some((body, rule)) => {
                // `hybrid(3D+0D:least-load)` puts the rule inside the parenthesis.
                let (rule, close) = match rule.trim().strip_suffix(')') {
                    Some(r) => (r, ")"),
                    None => (rule, ""),
                };
                let zero = ZeroRule::parse(rule).ok_or_else(|| {
                    bad(format!(
                        "'{}' is not a 0D rule: use nearest, alternate or least-load",
                        rule.trim()
                    ))
                })?;
                (format!("{body}{close}"), zero)
            }
            None => (spec.to_string(), ZeroRule::Nearest),
        };
        let mut m = Method::parse_degrees(&body, spec, q)?;
        if zero != ZeroRule::Nearest && !m.degrees.contains(&0) {
            return Err(bad(format!(
                "a 0D rule ({}) is given but the method never uses 0D",
                zero.name()
            )));
        }
        m.zero = zero;
        Ok(m)
    }

    fn parse_degrees(body: &str, spec: &str, q: usize) -> Result<Method, Error> {
        let bad = |why: String| Error::Method {
            spec: spec.to_string(),
            why,
        };
        let degree = |t: &str| -> Result<usize, Error> {
            let k: usize = t
                .trim()
                .strip_suffix(['D', 'd'])
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| bad(format!("'{t}' is not a degree such as 0D or 2D")))?;
            if k > q {
                return Err(bad(format!(
                    "{k}D sliding needs a network of at least {k} dimensions; this one has {q}"
                )));
            }
            Ok(k)
        };
        let t = body.trim();
        let lower = t.to_ascii_lowercase();
        let ms = if lower == "hybrid" || lower == "hybrid(all)" {
            MethodSpec::All
        } else if let Some(inner) = lower
            .strip_prefix("hybrid(")
            .and_then(|r| r.strip_suffix(')'))
        {
            if let Some(excl) = inner.strip_prefix('-') {
                let mut out = Vec::new();
                for part in excl.split('-') {
                    out.push(degree(part)?);
                }
                MethodSpec::Without(out)
            } else {
                let mut out = Vec::new();
                for part in inner.split('+') {
                    let k = degree(part)?;
                    if out.contains(&k) {
                        return Err(bad(format!("{k}D is named twice")));
                    }
                    out.push(k);
                }
                MethodSpec::List(out)
            }
        } else if lower.starts_with("hybrid") {
            return Err(bad(
                "write hybrid, hybrid(all), hybrid(-2D) or hybrid(3D+1D+0D)".into(),
            ));
        } else {
            MethodSpec::Single(degree(t)?)
        };
        let degrees: Vec<usize> = match &ms {
            MethodSpec::Single(k) => vec![*k],
            MethodSpec::All => (0..=q).rev().collect(),
            MethodSpec::Without(x) => (0..=q).rev().filter(|k| !x.contains(k)).collect(),
            MethodSpec::List(l) => l.clone(),
        };
        if degrees.is_empty() {
            return Err(bad("leaves no method to try".into()));
        }
        Ok(Method {
            spec: ms,
            degrees,
            zero: ZeroRule::Nearest,
        })
    }

    /// The hybrid of every degree, qD down to 0D.
    pub fn hybrid(q: usize) -> Method {
        Method {
            spec: MethodSpec::All,
            degrees: (0..=q).rev().collect(),
            zero: ZeroRule::Nearest,
        }
    }

    /// The degrees tried, in order (0 = 0D).
    pub fn degrees(&self) -> &[usize] {
        &self.degrees
    }

    /// How 0D picks its free node.
    pub fn zero_rule(&self) -> ZeroRule {
        self.zero
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[usize], sep: &str| {
            v.iter()
                .map(|k| format!("{k}D"))
                .collect::<Vec<_>>()
                .join(sep)
        };
        match &self.spec {
            MethodSpec::Single(k) => write!(f, "{k}D")?,
            MethodSpec::All => write!(f, "hybrid")?,
            MethodSpec::Without(x) => write!(f, "hybrid(-{})", list(x, "-"))?,
            MethodSpec::List(l) => write!(f, "hybrid({})", list(l, "+"))?,
        }
        if self.zero != ZeroRule::Nearest {
            write!(f, ":{}", self.zero.name())?;
        }
        Ok(())
    }
}

/// One rank's move, in node indices of the box. `from` may be the failed node itself: that
/// rank restarts from its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The rank that moves.
    pub rank: u32,
    /// The node it leaves.
    pub from: u32,
    /// The node it goes to.
    pub to: u32,
}

/// A kD slide: dimension, direction, and the k-1 other dimensions of the slid slab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slide {
    /// Dimension along which ranks shift.
    pub dim: usize,
    /// Direction of the shift.
    pub dir: Dir,
    /// The other dimensions of the slab H (k-1 of them).
    pub plane: Vec<usize>,
}

impl fmt::Display for Slide {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "along dim {} {}", self.dim, self.dir.sign())?;
        if !self.plane.is_empty() {
            let p: Vec<String> = self.plane.iter().map(|d| d.to_string()).collect();
            write!(f, ", slab over dims {}", p.join(","))?;
        }
        Ok(())
    }
}

/// What a failure did to the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A free node (spare or vacated) died; no rank moves.
    FreeNodeDied,
    /// The failed node's rank and maybe others moved.
    Substituted {
        /// Degree of the method used (0 = 0D).
        degree: usize,
        /// The slide, for k >= 1.
        slide: Option<Slide>,
        /// The moves, in pipeline order.
        moves: Vec<Move>,
    },
    /// No method applies: the job is lost (the failed rank stays on its dead node).
    JobLost,
}

impl Outcome {
    /// The moves of this outcome (none unless substituted).
    pub fn moves(&self) -> &[Move] {
        match self {
            Outcome::Substituted { moves, .. } => moves,
            _ => &[],
        }
    }

    /// The outcome's name, the same in `spares --json`, the sparesd protocol, `sparesctl`,
    /// `spares-run` and the docs: `substituted`, `free_node_died` or `no_spare_left`.
    pub fn name(&self) -> &'static str {
        match self {
            Outcome::Substituted { .. } => "substituted",
            Outcome::FreeNodeDied => "free_node_died",
            Outcome::JobLost => "no_spare_left",
        }
    }

    /// The method that substituted, as `2D` (none unless substituted).
    pub fn method_used(&self) -> Option<String> {
        match self {
            Outcome::Substituted { degree, .. } => Some(format!("{degree}D")),
            _ => None,
        }
    }

    /// The slide, for a kD substitution with k >= 1.
    pub fn slide(&self) -> Option<&Slide> {
        match self {
            Outcome::Substituted { slide, .. } => slide.as_ref(),
            _ => None,
        }
    }
}

/// Handles the failure of `node` (a box index) with `method`.
///
/// A failed node that is already dead is an error and leaves the map unchanged. Once the job
/// is lost, further failures only mark nodes dead.
pub fn fail(map: &mut SpareMap, node: u32, method: &Method) -> Result<Outcome, Error> {
    let mut scratch = Scratch::default();
    Ok(match fail_with(map, node, method, &mut scratch)? {
        Handled::FreeNodeDied => Outcome::FreeNodeDied,
        Handled::JobLost => Outcome::JobLost,
        Handled::Substituted { degree, slide } => Outcome::Substituted {
            degree,
            slide: slide.map(|(dim, dir, plane)| Slide {
                dim,
                dir,
                plane: plane_dims(plane),
            }),
            moves: scratch.moves,
        },
    })
}

/// Buffers [`fail_with`] reuses: the moves of the last substitution and a slid line's path,
/// so that a simulator's millions of failures allocate nothing.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// The moves of the last substitution, in pipeline order.
    pub(crate) moves: Vec<Move>,
    /// Whether a slide carried out line by line leaves its moves out of `moves`: a
    /// simulator reads only the map after it.
    unlisted_slides: bool,
    path: Vec<u32>,
    hints: SlabHints,
}

impl Scratch {
    /// Buffers for a caller that reads the map after each failure, never its slides' moves.
    pub(crate) fn without_slide_moves() -> Scratch {
        Scratch {
            unlisted_slides: true,
            ..Scratch::default()
        }
    }
}

/// Per candidate slide (dimension, direction, slab), the slab coordinates of the line that
/// last blocked it. The slide search checks that line first: a slab blocked once is mostly
/// blocked again, by the same dead node, and one line then settles it. Only a hint: any
/// value gives the same answer.
#[derive(Debug, Default)]
struct SlabHints(Vec<[u8; MAX_DIMS]>);

impl SlabHints {
    fn get(&mut self, d: usize, dir: Dir, plane: u8) -> &mut [u8; MAX_DIMS] {
        if self.0.is_empty() {
            self.0 = vec![[0; MAX_DIMS]; (MAX_DIMS * 2) << MAX_DIMS];
        }
        &mut self.0[((d * 2 + dir.slot()) << MAX_DIMS) + usize::from(plane)]
    }
}

/// What a failure did, its moves left in the [`Scratch`]: an [`Outcome`] without allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handled {
    FreeNodeDied,
    /// The degree used, and for k >= 1 the slide (dimension, direction, slab as a bit mask).
    Substituted {
        degree: usize,
        slide: Option<(usize, Dir, u8)>,
    },
    JobLost,
}

/// [`fail`] with reused buffers; the moves are in `scratch.moves` afterwards.
pub(crate) fn fail_with(
    map: &mut SpareMap,
    node: u32,
    method: &Method,
    scratch: &mut Scratch,
) -> Result<Handled, Error> {
    let choice = choose(map, node, method, scratch)?;
    Ok(carry_out(map, node, choice, scratch))
}

/// What a failure does, chosen by [`choose`] and done by [`carry_out`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    FreeNodeDied,
    JobLost,
    /// 0D: the failed rank goes to free node `to`.
    ZeroD {
        rank: u32,
        to: u32,
    },
    /// A kD slide (dimension, direction, slab as a bit mask) with k >= 1.
    Slide {
        degree: usize,
        rank: u32,
        slide: (usize, Dir, u8),
    },
}

/// The first half of [`fail_with`]: marks `node` dead and chooses what happens to its rank,
/// moving no rank. A simulator that has already seen the slide chosen can then take the map
/// it led to instead of carrying it out again.
pub(crate) fn choose(
    map: &mut SpareMap,
    node: u32,
    method: &Method,
    scratch: &mut Scratch,
) -> Result<Choice, Error> {
    let grid = *map.grid();
    if node >= grid.len() {
        return Err(Error::UnknownNode(format!("#{node}")));
    }
    if method.zero == ZeroRule::LeastLoad && map.tracked_traffic().is_none() {
        // Checked before anything changes: an error leaves the map as it was.
        return Err(Error::Method {
            spec: method.to_string(),
            why: "0D:least-load weighs link loads: track the map's traffic pattern first".into(),
        });
    }
    let rank = match map.state(node) {
        NodeState::Dead => {
            return Err(Error::AlreadyFailed(format_coord(
                &grid.coord(node)[..grid.dims()],
            )))
        }
        NodeState::Free => {
            map.mark_dead(node);
            return Ok(Choice::FreeNodeDied);
        }
        NodeState::Busy(rank) => rank,
    };
    let lost_before = map.is_lost();
    map.mark_dead(node);
    if lost_before {
        return Ok(Choice::JobLost);
    }
    // Every slab of a (d, dir) slide holds the failed node's own line: walk it once (and not
    // at all for a method that never slides).
    let slides = method.degrees().iter().any(|&k| k > 0);
    let failed = Failed::new(map, node, slides);
    for &k in method.degrees() {
        if k == 0 {
            if let Some(to) = zero_d_target(map, &failed, rank, method.zero)? {
                return Ok(Choice::ZeroD { rank, to });
            }
        } else if let Some(slide) = best_slide_in(map, &failed, k, &mut scratch.hints) {
            return Ok(Choice::Slide {
                degree: k,
                rank,
                slide,
            });
        }
    }
    Ok(Choice::JobLost)
}

/// The second half of [`fail_with`]: moves the ranks as `choice` (made by [`choose`] for the
/// failure of `node` on this map) says.
pub(crate) fn carry_out(
    map: &mut SpareMap,
    node: u32,
    choice: Choice,
    scratch: &mut Scratch,
) -> Handled {
    match choice {
        Choice::FreeNodeDied => Handled::FreeNodeDied,
        Choice::JobLost => Handled::JobLost,
        Choice::ZeroD { rank, to } => {
            scratch.moves.clear();
            scratch.moves.push(Move {
                rank,
                from: node,
                to,
            });
            map.move_rank(rank, to);
            Handled::Substituted {
                degree: 0,
                slide: None,
            }
        }
        Choice::Slide {
            degree,
            rank,
            slide,
        } => {
            apply_slide(map, node, rank, slide, scratch);
            map.count_slide(slide.0, slide.1);
            Handled::Substituted {
                degree,
                slide: Some(slide),
            }
        }
    }
}

/// 0D: the free node nearest to `f`; ties go to the node sharing more coordinates with `f`,
/// then to the lowest index.
pub fn nearest_free(map: &SpareMap, f: u32) -> Option<u32> {
    nearest_free_from(map, f, &map.grid().coord(f))
}

/// [`nearest_free`] for a failed node whose coordinates `fc` are known (a failure's search
/// has them from the coordinate table, without the divisions of [`Grid::coord`]).
fn nearest_free_from(map: &SpareMap, f: u32, fc: &Coord) -> Option<u32> {
    // One pass over the free nodes: this scan is all of 0D's cost (4,500 free nodes on a 48^3
    // box with 3D(2,1)). Sharing more coordinates with f is differing in fewer, so the key
    // (distance, differing dimensions, index) is the rule's.
    match map.free_coords() {
        Some(coords) => nearest_in_coords(map.routing(), fc, map.free_nodes(), coords),
        None => nearest_by_grid(map, f),
    }
}

/// [`nearest_free`] with every coordinate from the grid (extents past 16 bits).
fn nearest_by_grid(map: &SpareMap, f: u32) -> Option<u32> {
    let grid = map.grid();
    // Distances are hops on the network: on a ring the box covers in part, the shorter way
    // may leave the box.
    let routing = map.routing();
    let fc = grid.coord(f);
    let mut best: Option<(u32, u32, u32)> = None;
    for &t in map.free_nodes() {
        let tc = grid.coord(t);
        let (mut dist, mut differ) = (0u32, 0u32);
        for d in 0..grid.dims() {
            let h = routing.delta(d, fc[d], tc[d]).unsigned_abs() as u32;
            dist += h;
            differ += u32::from(h != 0);
        }
        let key = (dist, differ, t);
        if !matches!(best, Some(b) if b <= key) {
            best = Some(key);
        }
    }
    best.map(|b| b.2)
}

/// [`nearest_free`] over the free set's stored coordinates (`lanes[d][i]`: coordinate d of
/// `nodes[i]`): one pass with the key (distance, differing dimensions, index) packed in one
/// word, the dimension count a constant of each copy.
fn nearest_in_coords(routing: &Grid, fc: &Coord, nodes: &[u32], lanes: &[Vec<u16>]) -> Option<u32> {
    if let Some(nearest) = nearest_on_mesh(routing, fc, nodes, lanes) {
        return nearest;
    }
    match routing.dims() {
        1 => nearest_in::<1>(routing, fc, nodes, lanes),
        2 => nearest_in::<2>(routing, fc, nodes, lanes),
        3 => nearest_in::<3>(routing, fc, nodes, lanes),
        4 => nearest_in::<4>(routing, fc, nodes, lanes),
        5 => nearest_in::<5>(routing, fc, nodes, lanes),
        _ => nearest_in::<MAX_DIMS>(routing, fc, nodes, lanes),
    }
}

/// [`nearest_in_coords`] on a mesh whose distances fit 12 bits, `None` when it does not
/// apply. The key of a free node without its index, distance * 8 + differing dimensions,
/// fits 16 bits: [`nearest_on_mesh_in`] computes it for many nodes per vector instruction.
fn nearest_on_mesh(
    routing: &Grid,
    fc: &Coord,
    nodes: &[u32],
    lanes: &[Vec<u16>],
) -> Option<Option<u32>> {
    let q = routing.dims();
    let span: u32 = (0..q).map(|d| routing.extent(d) - 1).sum();
    if span >= 1 << 12 || (0..q).any(|d| routing.wraps(d)) || lanes.len() != q {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(simd) = avx2() {
        return Some(nearest_by_vectors(simd, q, fc, nodes, lanes));
    }
    Some(nearest_by_blocks(q, fc, nodes, lanes))
}

/// AVX2, when this processor has it (looked up once).
#[cfg(target_arch = "x86_64")]
fn avx2() -> Option<pulp::x86::V3> {
    static AVX2: std::sync::OnceLock<Option<pulp::x86::V3>> = std::sync::OnceLock::new();
    *AVX2.get_or_init(pulp::x86::V3::try_new)
}

/// [`nearest_on_mesh`] by blocks of [`BLOCK`] keys, on any processor.
fn nearest_by_blocks(q: usize, fc: &Coord, nodes: &[u32], lanes: &[Vec<u16>]) -> Option<u32> {
    match q {
        1 => nearest_on_mesh_in::<1>(fc, nodes, lanes),
        2 => nearest_on_mesh_in::<2>(fc, nodes, lanes),
        3 => nearest_on_mesh_in::<3>(fc, nodes, lanes),
        4 => nearest_on_mesh_in::<4>(fc, nodes, lanes),
        5 => nearest_on_mesh_in::<5>(fc, nodes, lanes),
        _ => nearest_on_mesh_in::<MAX_DIMS>(fc, nodes, lanes),
    }
}

/// [`nearest_on_mesh`] with AVX2: 16 keys an instruction, where a block of
/// [`nearest_on_mesh_in`] takes two 128-bit vectors, and a vector's least key sought only
/// when one of its keys is not above the best so far, where each block's is. The scan was
/// 6.4 % of the seeds' 24^3 campaign and 3.9 % of the 12^3 one; this takes about 40 % off.
#[cfg(target_arch = "x86_64")]
fn nearest_by_vectors(
    simd: pulp::x86::V3,
    q: usize,
    fc: &Coord,
    nodes: &[u32],
    lanes: &[Vec<u16>],
) -> Option<u32> {
    match q {
        1 => simd.vectorize(|| nearest_in_vectors::<1>(simd, fc, nodes, lanes)),
        2 => simd.vectorize(|| nearest_in_vectors::<2>(simd, fc, nodes, lanes)),
        3 => simd.vectorize(|| nearest_in_vectors::<3>(simd, fc, nodes, lanes)),
        4 => simd.vectorize(|| nearest_in_vectors::<4>(simd, fc, nodes, lanes)),
        5 => simd.vectorize(|| nearest_in_vectors::<5>(simd, fc, nodes, lanes)),
        _ => simd.vectorize(|| nearest_in_vectors::<MAX_DIMS>(simd, fc, nodes, lanes)),
    }
}

/// Free nodes per vector of [`nearest_in_vectors`]: 16 keys of 16 bits.
#[cfg(target_arch = "x86_64")]
const WIDE: usize = 16;

/// [`nearest_by_vectors`] on `Q` dimensions.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn nearest_in_vectors<const Q: usize>(
    simd: pulp::x86::V3,
    fc: &Coord,
    nodes: &[u32],
    lanes: &[Vec<u16>],
) -> Option<u32> {
    use std::arch::x86_64::__m256i;
    let (avx, avx2) = (simd.avx, simd.avx2);
    let n = nodes.len();
    let cols: [&[u16]; Q] = std::array::from_fn(|d| &lanes[d][..n]);
    let mut at = [avx._mm256_setzero_si256(); Q];
    for d in 0..Q {
        at[d] = avx._mm256_set1_epi16(fc[d] as i16);
    }
    let zero = avx._mm256_setzero_si256();
    // One per dimension, less one per dimension where the coordinates agree (the
    // comparison's lanes are -1 there): the differing dimensions.
    let dims = avx._mm256_set1_epi16(Q as i16);
    // (key without the index, index): the best so far.
    let mut best = (u16::MAX, u32::MAX);
    let mut start = 0;
    // No closure holds a vector instruction: a closure is compiled without the processor
    // features of the function it sits in, and its intrinsics become calls.
    while start < n {
        // The last vector ends at the last node: when it overlaps the one before, its
        // lanes before `start` are left out below (and on a set of fewer nodes than a
        // vector, the lanes past them).
        let (from, skip) = if start + WIDE <= n || n < WIDE {
            (start, 0)
        } else {
            (n - WIDE, start + WIDE - n)
        };
        let len = (n - from).min(WIDE);
        let mut block = [[0u16; WIDE]; Q];
        for (lane, col) in block.iter_mut().zip(&cols) {
            if len == WIDE {
                *lane = col[from..from + WIDE]
                    .try_into()
                    .expect("a vector's length");
            } else {
                lane[..len].copy_from_slice(&col[from..]);
            }
        }
        // The key without the index, as in `block_keys`: distance x 8 + differing
        // dimensions.
        let mut key = dims;
        for d in 0..Q {
            let c: __m256i = pulp::cast(block[d]);
            let h = avx2._mm256_or_si256(
                avx2._mm256_subs_epu16(c, at[d]),
                avx2._mm256_subs_epu16(at[d], c),
            );
            key = avx2._mm256_add_epi16(key, avx2._mm256_slli_epi16::<3>(h));
            key = avx2._mm256_add_epi16(key, avx2._mm256_cmpeq_epi16(h, zero));
        }
        // The lanes left out get the largest key.
        if len < WIDE || skip > 0 {
            let lane = avx._mm256_setr_epi16(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            let out = avx2._mm256_or_si256(
                avx2._mm256_cmpgt_epi16(avx._mm256_set1_epi16(skip as i16), lane),
                avx2._mm256_cmpgt_epi16(lane, avx._mm256_set1_epi16(len as i16 - 1)),
            );
            key = avx2._mm256_or_si256(key, out);
        }
        // Only a vector with a key not above the best can hold a better node. Its least
        // key (`phminposuw` on the lesser of its halves) becomes the best if it is less,
        // and on a tie the lowest index among the lanes at it wins.
        let best_key = avx._mm256_set1_epi16(best.0 as i16);
        let at_most = avx2._mm256_cmpeq_epi16(avx2._mm256_min_epu16(key, best_key), key);
        if avx2._mm256_movemask_epi8(at_most) != 0 {
            let halves = simd.sse4_1._mm_min_epu16(
                avx._mm256_castsi256_si128(key),
                avx2._mm256_extracti128_si256::<1>(key),
            );
            let least =
                simd.sse2
                    ._mm_cvtsi128_si32(simd.sse4_1._mm_minpos_epu16(halves)) as u16;
            // Not above the best, as a lane is: the new best key, or a tie with it.
            debug_assert!(least <= best.0);
            if least < best.0 {
                best = (least, u32::MAX);
            }
            let ties = avx2._mm256_cmpeq_epi16(key, avx._mm256_set1_epi16(least as i16));
            // The byte mask has two bits a lane: the low one is kept.
            let mut at = avx2._mm256_movemask_epi8(ties) as u32 & 0x5555_5555;
            while at != 0 {
                let i = at.trailing_zeros() as usize / 2;
                at &= at - 1;
                best.1 = best.1.min(nodes[from + i]);
            }
        }
        start = from + len;
    }
    (best.1 != u32::MAX).then_some(best.1)
}

/// [`nearest_on_mesh`] on `Q` dimensions. The free nodes are scanned in blocks of
/// [`BLOCK`] ([`block_keys`]), and the indexes of the nodes at a block's least key are
/// compared only when it is not above the best so far (mostly in the first blocks).
#[inline(always)]
fn nearest_on_mesh_in<const Q: usize>(
    fc: &Coord,
    nodes: &[u32],
    lanes: &[Vec<u16>],
) -> Option<u32> {
    let n = nodes.len();
    let cols: [&[u16]; Q] = std::array::from_fn(|d| &lanes[d][..n]);
    let at: [u16; Q] = std::array::from_fn(|d| fc[d] as u16);
    // (key without the index, index): the best so far.
    let mut best = (u16::MAX, u32::MAX);
    let mut take = |keys: &[u16], nodes: &[u32]| {
        let least = keys.iter().fold(u16::MAX, |m, &k| m.min(k));
        if least <= best.0 {
            let index = keys
                .iter()
                .zip(nodes)
                .filter(|(&k, _)| k == least)
                .fold(u32::MAX, |m, (_, &t)| m.min(t));
            best = if least < best.0 {
                (least, index)
            } else {
                (least, best.1.min(index))
            };
        }
    };
    let mut start = 0;
    while start + BLOCK <= n {
        let block = std::array::from_fn(|d| {
            cols[d][start..start + BLOCK]
                .try_into()
                .expect("a block's length")
        });
        take(&block_keys(block, &at), &nodes[start..start + BLOCK]);
        start += BLOCK;
    }
    // The last nodes as a block of their own, its lanes past them unused.
    let rest = n - start;
    if rest > 0 {
        let mut tail = [[0u16; BLOCK]; Q];
        for (lane, col) in tail.iter_mut().zip(&cols) {
            lane[..rest].copy_from_slice(&col[start..]);
        }
        let keys = block_keys(std::array::from_fn(|d| &tail[d]), &at);
        take(&keys[..rest], &nodes[start..]);
    }
    (best.1 != u32::MAX).then_some(best.1)
}

/// The keys without the index (distance x 8 + differing dimensions) of a block of free
/// nodes, from their coordinates by dimension and those of the failed node, `at`: loops of
/// fixed length, which the compiler turns into 16-bit vector operations.
#[inline(always)]
fn block_keys<const Q: usize>(block: [&[u16; BLOCK]; Q], at: &[u16; Q]) -> [u16; BLOCK] {
    let mut dist = [0u16; BLOCK];
    let mut differ = [0u16; BLOCK];
    for (c, &f) in block.iter().zip(at) {
        for l in 0..BLOCK {
            // |c - f| without a branch or a sign (saturating differences, one of them 0).
            let h = c[l].saturating_sub(f) | f.saturating_sub(c[l]);
            dist[l] += h;
            differ[l] += u16::from(h != 0);
        }
    }
    let mut keys = [0u16; BLOCK];
    for l in 0..BLOCK {
        keys[l] = dist[l] * 8 + differ[l];
    }
    keys
}

/// Free nodes per block of [`nearest_on_mesh_in`]: two 128-bit vectors of 16-bit keys.
const BLOCK: usize = 16;

fn nearest_in<const Q: usize>(
    routing: &Grid,
    fc: &Coord,
    nodes: &[u32],
    lanes: &[Vec<u16>],
) -> Option<u32> {
    // Per dimension: f's coordinate, and the ring length (a distance no route reaches on a
    // mesh), so that a hop count is min(|delta|, ring - |delta|) either way.
    let mut at = [0i32; Q];
    let mut ring = [i32::MAX / 2; Q];
    for d in 0..Q {
        at[d] = fc[d] as i32;
        if routing.wraps(d) {
            ring[d] = routing.extent(d) as i32;
        }
    }
    let cols: [&[u16]; Q] = std::array::from_fn(|d| &lanes[d][..nodes.len()]);
    let mut best = u64::MAX;
    for (i, &t) in nodes.iter().enumerate() {
        let (mut dist, mut differ) = (0u32, 0u32);
        for d in 0..Q {
            let a = (i32::from(cols[d][i]) - at[d]).abs();
            let h = a.min(ring[d] - a) as u32;
            dist += h;
            differ += u32::from(h != 0);
        }
        let key = u64::from(dist) << 40 | u64::from(differ) << 32 | u64::from(t);
        if key < best {
            best = key;
        }
    }
    (best != u64::MAX).then_some(best as u32)
}

/// The spec's 0D order: distance, more shared coordinates, lowest index.
type ZeroKey = (u32, Reverse<usize>, u32);

#[inline]
fn zero_key(map: &SpareMap, fc: &Coord, t: u32) -> ZeroKey {
    let tc = map.grid().coord(t);
    let shared = (0..map.grid().dims()).filter(|&d| tc[d] == fc[d]).count();
    (map.routing().distance(fc, &tc), Reverse(shared), t)
}

/// The spare side of `t` seen from `fc`: the dimension of the largest offset (lowest on a
/// tie) and its direction.
fn side(grid: &Grid, fc: &Coord, t: u32) -> (usize, Dir) {
    let tc = grid.coord(t);
    let mut best = (0, Dir::Plus, 0);
    for d in 0..grid.dims() {
        let delta = grid.delta(d, fc[d], tc[d]);
        if delta.unsigned_abs() > best.2 {
            let dir = if delta > 0 { Dir::Plus } else { Dir::Minus };
            best = (d, dir, delta.unsigned_abs());
        }
    }
    (best.0, best.1)
}

/// The nearest free node on each spare side, by the spec's 0D order.
fn nearest_per_side(map: &SpareMap, f: u32) -> Vec<((usize, Dir), u32)> {
    let grid = map.grid();
    let fc = grid.coord(f);
    let mut best: [[Option<ZeroKey>; 2]; MAX_DIMS] = [[None; 2]; MAX_DIMS];
    for &t in map.free_nodes() {
        let (d, dir) = side(grid, &fc, t);
        let key = zero_key(map, &fc, t);
        let slot = &mut best[d][dir.slot()];
        if slot.is_none_or(|b| key < b) {
            *slot = Some(key);
        }
    }
    let mut out = Vec::new();
    for d in 0..grid.dims() {
        for dir in Dir::BOTH {
            if let Some(k) = best[d][dir.slot()] {
                out.push(((d, dir), k.2));
            }
        }
    }
    out
}

/// The free node 0D sends the failed rank (still on its dead node `f`) to, by `rule`.
fn zero_d_target(
    map: &mut SpareMap,
    failed: &Failed,
    rank: u32,
    rule: ZeroRule,
) -> Result<Option<u32>, Error> {
    let (f, fc) = (failed.node, failed.coord);
    match rule {
        ZeroRule::Nearest => Ok(nearest_free_from(map, f, &fc)),
        ZeroRule::Alternate => {
            let sides = nearest_per_side(map, f);
            let pick = sides
                .iter()
                .min_by_key(|((d, dir), t)| {
                    (map.zero_sides()[*d][dir.slot()], zero_key(map, &fc, *t))
                })
                .copied();
            Ok(pick.map(|((d, dir), t)| {
                map.count_zero_side(d, dir);
                t
            }))
        }
        ZeroRule::LeastLoad => {
            let mut best: Option<((u32, u64, ZeroKey), u32)> = None;
            for (_, t) in nearest_per_side(map, f) {
                // Probe: move, read the loads, move back.
                map.move_rank(rank, t);
                let traffic = map.tracked_traffic().expect("tracked");
                map.move_rank(rank, f);
                let key = (
                    traffic.collisions,
                    traffic.total_hops,
                    zero_key(map, &fc, t),
                );
                if best.as_ref().is_none_or(|(b, _)| key < *b) {
                    best = Some((key, t));
                }
            }
            Ok(best.map(|(_, t)| t))
        }
    }
}

/// Walks from `start` along `d` in `dir` over busy nodes to the first free node; returns that
/// node and the number of ranks that shift, or `None` when a dead node, the box edge or the
/// start itself comes first.
#[inline]
fn walk(map: &SpareMap, grid: &Grid, start: u32, d: usize, dir: Dir) -> Option<(u32, u32)> {
    let lines = map.lines();
    let Some((line, p)) = lines.line(grid, start, d) else {
        return walk_nodes(map, grid, start, d, dir);
    };
    let (pos, shifted) = walk_bits(
        lines.open(line),
        lines.dead(line),
        p,
        grid.extent(d),
        grid.wraps(d),
        dir,
    )?;
    let stride = grid.stride(d);
    Some((start - p * stride + pos * stride, shifted))
}

/// [`walk`] on one line's masks (`open`: non-busy positions, `dead`: dead ones) from
/// position `p` on a line of extent `e`: the free position reached and the ranks shifted.
/// Bit scans replace the node-by-node walk.
#[inline]
fn walk_bits(open: u64, dead: u64, p: u32, e: u32, wrap: bool, dir: Dir) -> Option<(u32, u32)> {
    let (free, pos, shifted) = walk_bits_flat(open, dead, p, e, wrap, dir);
    free.then_some((pos, shifted))
}

/// [`walk_bits`] as plain values: whether the walk reaches a free position, that position
/// and the ranks shifted (both meaningless when it does not), for callers that combine the
/// outcome arithmetically instead of branching on it.
#[inline(always)]
fn walk_bits_flat(open: u64, dead: u64, p: u32, e: u32, wrap: bool, dir: Dir) -> (bool, u32, u32) {
    // Selections rather than branches: which side holds the first non-busy position, and
    // whether it is dead, follow the failures in no pattern a predictor learns. Dead
    // positions are non-busy ones, so the first non-busy bit that is not dead is free.
    let below = open & ((1u64 << p) - 1);
    let above = open & !(2u64 << p).wrapping_sub(1);
    let wrapped = 0u64.wrapping_sub(u64::from(wrap));
    let (bit, pos, shifted) = match dir {
        Dir::Plus => {
            let side = if above != 0 { above } else { below & wrapped };
            let bit = side & side.wrapping_neg();
            let pos = bit.trailing_zeros();
            (
                bit,
                pos,
                if pos > p {
                    pos - p
                } else {
                    (pos + e).wrapping_sub(p)
                },
            )
        }
        Dir::Minus => {
            let side = if below != 0 { below } else { above & wrapped };
            let bit = (1u64 << 63).checked_shr(side.leading_zeros()).unwrap_or(0);
            let pos = 63u32.wrapping_sub(side.leading_zeros());
            (
                bit,
                pos,
                if pos < p {
                    p.wrapping_sub(pos)
                } else {
                    (p + e).wrapping_sub(pos)
                },
            )
        }
    };
    (bit & !dead != 0, pos, shifted)
}

/// The node-by-node walk, for lines longer than 64.
fn walk_nodes(map: &SpareMap, grid: &Grid, start: u32, d: usize, dir: Dir) -> Option<(u32, u32)> {
    let mut at = start;
    let mut shifted = 0;
    loop {
        at = grid.step(at, d, dir)?;
        shifted += 1;
        if at == start {
            return None;
        }
        match map.state(at) {
            NodeState::Free => return Some((at, shifted)),
            NodeState::Dead => return None,
            NodeState::Busy(_) => {}
        }
    }
}

/// Visits every node of the slab H through `f` spanned by the dimensions of `plane`.
fn for_each_in_slab(
    grid: &Grid,
    f: u32,
    plane: &[usize],
    mut visit: impl FnMut(u32) -> bool,
) -> bool {
    let mut c: Coord = grid.coord(f);
    for &p in plane {
        c[p] = 0;
    }
    loop {
        if !visit(grid.index(&c)) {
            return false;
        }
        // Odometer over the plane's dimensions.
        let mut i = 0;
        loop {
            if i == plane.len() {
                return true;
            }
            let p = plane[i];
            c[p] += 1;
            if c[p] < grid.extent(p) {
                break;
            }
            c[p] = 0;
            i += 1;
        }
    }
}

/// Ranks shifted by a candidate slide (slab dimensions as a bit mask), or `None` when it is
/// not feasible. The slide search calls [`slab_cost`] itself, through its copies per slab
/// dimension count ([`best_slide_of`]), and comes here only for a line longer than 64.
fn slide_cost(
    map: &SpareMap,
    grid: &Grid,
    failed: &Failed,
    (d, dir, plane): (usize, Dir, u8),
    hint: &mut [u8; MAX_DIMS],
) -> Option<u32> {
    let f = failed.node;
    if let Some(own) = failed.line[d] {
        return slide_cost_lines(map, grid, &failed.coord, own, (d, dir, plane), hint);
    }
    let mut moved = 0;
    let (dims, n) = plane_array(plane);
    let feasible = for_each_in_slab(grid, f, &dims[..n], |h| {
        if h != f && !matches!(map.state(h), NodeState::Busy(_)) {
            return true;
        }
        match walk(map, grid, h, d, dir) {
            Some((_, n)) => {
                moved += n;
                true
            }
            None => false,
        }
    });
    feasible.then_some(moved)
}

/// [`slide_cost`] over the line masks: the slab's lines along d are visited by their ids
/// (each plane dimension adds a fixed step to the id), with no node index, coordinate or
/// state look-up per line. `own` is f's line along d and f's position on it; every line of
/// the slab holds the slab's nodes at that same position. The line at `hint` (slab
/// coordinates) is checked first, and a line that blocks the slide is left there.
fn slide_cost_lines(
    map: &SpareMap,
    grid: &Grid,
    fc: &Coord,
    own: (usize, u32),
    (d, dir, plane): (usize, Dir, u8),
    hint: &mut [u8; MAX_DIMS],
) -> Option<u32> {
    let slab = (map.lines(), grid, fc, own, d, dir);
    // One copy per plane dimension count: the steps, extents and slab coordinates then sit
    // in registers and the odometer is unrolled (a slab check that the hint settles cost
    // about 200 instructions with them in arrays of run-time length).
    match plane.count_ones() {
        0 => slab_cost::<0>(slab, [], hint),
        1 => slab_cost::<1>(slab, plane_dims_of(plane), hint),
        2 => slab_cost::<2>(slab, plane_dims_of(plane), hint),
        3 => slab_cost::<3>(slab, plane_dims_of(plane), hint),
        4 => slab_cost::<4>(slab, plane_dims_of(plane), hint),
        _ => slab_cost::<{ MAX_DIMS - 1 }>(slab, plane_dims_of(plane), hint),
    }
}

/// [`slide_cost_lines`] for a slab of `N` plane dimensions.
#[inline(always)]
fn slab_cost<const N: usize>(
    (lines, grid, fc, (line_f, p), d, dir): (&LineMasks, &Grid, &Coord, (usize, u32), usize, Dir),
    dims: [usize; N],
    hint: &mut [u8; MAX_DIMS],
) -> Option<u32> {
    let mut step = [0usize; N];
    let mut extent = [0u32; N];
    let mut line = line_f;
    for i in 0..N {
        step[i] = lines.line_step(d, dims[i]) as usize;
        extent[i] = grid.extent(dims[i]);
        line -= fc[dims[i]] as usize * step[i];
    }
    let (e, wrap) = (grid.extent(d), grid.wraps(d));
    // Whether the slab's line `l` keeps the slide from happening, and the ranks it shifts.
    // A free or dead node at p leaves its line alone; f's own line slides. Both are worked
    // out without a branch: which lines hold a rank at p follows the failures in no pattern
    // a predictor learns.
    let walk = |l: usize| {
        let open = lines.open(l);
        let slides = l == line_f || (open >> p) & 1 == 0;
        let (free, _, shifted) = walk_bits_flat(open, lines.dead(l), p, e, wrap, dir);
        (slides & !free, shifted * u32::from(slides))
    };
    if (0..N).all(|i| u32::from(hint[i]) < extent[i]) {
        let at_hint = line
            + (0..N)
                .map(|i| usize::from(hint[i]) * step[i])
                .sum::<usize>();
        if walk(at_hint).0 {
            return None;
        }
    }
    let mut at = [0u32; N];
    let mut moved = 0;
    loop {
        let (blocks, shifted) = walk(line);
        if blocks {
            for i in 0..N {
                // A hint only: a coordinate past 255 is cut, and checked before use.
                hint[i] = at[i] as u8;
            }
            return None;
        }
        moved += shifted;
        // Odometer over the plane's dimensions.
        let mut i = 0;
        loop {
            if i == N {
                return Some(moved);
            }
            at[i] += 1;
            line += step[i];
            if at[i] < extent[i] {
                break;
            }
            line -= at[i] as usize * step[i];
            at[i] = 0;
            i += 1;
        }
    }
}

/// The dimensions of a plane bit mask, ascending.
fn plane_dims(plane: u8) -> Vec<usize> {
    let (dims, n) = plane_array(plane);
    dims[..n].to_vec()
}

/// [`plane_dims`] without allocating, for the slide search: the dimensions and their count.
fn plane_array(plane: u8) -> ([usize; MAX_DIMS], usize) {
    let mut dims = [0; MAX_DIMS];
    let mut n = 0;
    // The set bits, lowest first, without a branch per dimension.
    let mut rest = plane;
    while rest != 0 {
        dims[n] = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        n += 1;
    }
    (dims, n)
}

/// The `N` dimensions of a plane bit mask of `N` set bits, ascending: [`plane_array`] with a
/// loop of fixed length, for the copies of the slide code made per slab dimension count (the
/// loop over the set bits mispredicted when 3D, 2D and 1D slabs alternate).
#[inline(always)]
fn plane_dims_of<const N: usize>(plane: u8) -> [usize; N] {
    debug_assert_eq!(plane.count_ones() as usize, N);
    let mut rest = plane;
    std::array::from_fn(|_| {
        let d = rest.trailing_zeros() as usize;
        rest &= rest.wrapping_sub(1);
        d
    })
}

/// The (k-1)-subsets of the dimensions other than `d` as bit masks, in the lexicographic
/// order of their sorted dimension lists (the spec's last tie-break). Read from a table built
/// at compile time: this runs for every candidate direction of every failure, and generating
/// the combinations there cost about 2 % of a campaign.
fn planes(q: usize, d: usize, k: usize) -> impl Iterator<Item = u8> + Clone {
    let (masks, n) = &PLANES[q][d][k];
    masks[..usize::from(*n)].iter().copied()
}

/// At most C(5, 2) = 10 slabs: the other dimensions number MAX_DIMS - 1 = 5 at most.
type Slabs = ([u8; 10], u8);

/// [`planes`] for every q, d < q and k <= q (other entries empty).
const PLANES: [[[Slabs; MAX_DIMS + 1]; MAX_DIMS]; MAX_DIMS + 1] = {
    let mut table = [[[([0u8; 10], 0u8); MAX_DIMS + 1]; MAX_DIMS]; MAX_DIMS + 1];
    let mut q = 1;
    while q <= MAX_DIMS {
        let mut d = 0;
        while d < q {
            let mut k = 1;
            while k <= q {
                table[q][d][k] = slabs(q, d, k);
                k += 1;
            }
            d += 1;
        }
        q += 1;
    }
    table
};

/// One entry of [`PLANES`]: combinations of an ascending list, generated in the usual order,
/// come out lexicographic.
const fn slabs(q: usize, d: usize, k: usize) -> Slabs {
    let mut others = [0usize; MAX_DIMS];
    let mut m = 0;
    let mut e = 0;
    while e < q {
        if e != d {
            others[m] = e;
            m += 1;
        }
        e += 1;
    }
    let r = k - 1;
    let mut masks = [0u8; 10];
    let mut n = 0;
    // Positions in `others` of the chosen dimensions, ascending.
    let mut idx = [0usize; MAX_DIMS];
    let mut i = 0;
    while i < r {
        idx[i] = i;
        i += 1;
    }
    let mut more = r <= m;
    while more {
        let mut mask = 0u8;
        let mut i = 0;
        while i < r {
            mask |= 1 << others[idx[i]];
            i += 1;
        }
        masks[n] = mask;
        n += 1;
        // The next combination: raise the last position that can rise, reset those after it.
        more = false;
        let mut i = r;
        while i > 0 {
            i -= 1;
            if idx[i] < m - r + i {
                idx[i] += 1;
                let mut j = i + 1;
                while j < r {
                    idx[j] = idx[j - 1] + 1;
                    j += 1;
                }
                more = true;
                break;
            }
        }
    }
    (masks, n as u8)
}

/// The kD slide for a failure at `f`, chosen by the spec's order: the (dimension, direction)
/// used most by earlier slides, then the fewest moved ranks, then the lowest dimension, `+`
/// before `-`, then the slab's dimensions in lexicographic order.
pub fn best_slide(map: &SpareMap, f: u32, k: usize) -> Option<Slide> {
    let failed = Failed::new(map, f, true);
    best_slide_in(map, &failed, k, &mut SlabHints::default()).map(|(dim, dir, plane)| Slide {
        dim,
        dir,
        plane: plane_dims(plane),
    })
}

/// The failed node as the slide search sees it, worked out once per failure: its
/// coordinates, its line along each dimension (mask index and position; `None` past 64), and
/// the ways its own line can slide (every slab of a (d, dir) slide holds that line, so a
/// blocked one rules out every slab of that (d, dir)).
struct Failed {
    node: u32,
    coord: Coord,
    line: [Option<(usize, u32)>; MAX_DIMS],
    /// Bit `2 d + dir.slot()`: the own line can slide along d in dir. The search visits the
    /// set bits, lowest first (the spec's order), instead of testing each way: which ways
    /// are open follows the failures in no pattern a predictor learns.
    ways: u32,
    /// Per way (index `2 d + dir.slot()`), the ranks its own line shifts when open: a 1D
    /// slide's cost, with no second walk.
    shifted: [u32; 2 * MAX_DIMS],
}

impl Failed {
    /// `slides`: whether the method slides at all (else the own lines are not walked).
    fn new(map: &SpareMap, node: u32, slides: bool) -> Failed {
        // One copy per dimension count, its loops unrolled: this runs once per failure.
        match map.grid().dims() {
            1 => Failed::with_dims::<1>(map, node, slides),
            2 => Failed::with_dims::<2>(map, node, slides),
            3 => Failed::with_dims::<3>(map, node, slides),
            4 => Failed::with_dims::<4>(map, node, slides),
            5 => Failed::with_dims::<5>(map, node, slides),
            _ => Failed::with_dims::<MAX_DIMS>(map, node, slides),
        }
    }

    /// [`Failed::new`] on a grid of `Q` dimensions.
    #[inline(always)]
    fn with_dims<const Q: usize>(map: &SpareMap, node: u32, slides: bool) -> Failed {
        let grid = map.grid();
        let lines = map.lines();
        // From the table, without division, where it exists.
        let coord = match lines.coords(node) {
            Some(c) => {
                let mut fc = Coord::default();
                for d in 0..Q {
                    fc[d] = u32::from(c[d]);
                }
                fc
            }
            None => grid.coord(node),
        };
        let mut failed = Failed {
            node,
            coord,
            line: [None; MAX_DIMS],
            ways: 0,
            shifted: [0; 2 * MAX_DIMS],
        };
        if !slides {
            return failed;
        }
        for d in 0..Q {
            failed.line[d] = lines.line(grid, node, d);
            for dir in Dir::BOTH {
                // Without a branch on the outcome where the masks exist: which ways are open
                // follows the failures in no pattern a predictor learns.
                let (free, shifted) = match failed.line[d] {
                    Some((l, p)) => {
                        let (free, _, shifted) = walk_bits_flat(
                            lines.open(l),
                            lines.dead(l),
                            p,
                            grid.extent(d),
                            grid.wraps(d),
                            dir,
                        );
                        (free, shifted * u32::from(free))
                    }
                    None => walk_nodes(map, grid, node, d, dir).map_or((false, 0), |w| (true, w.1)),
                };
                let way = 2 * d + dir.slot();
                failed.ways |= u32::from(free) << way;
                failed.shifted[way] = shifted;
            }
        }
        failed
    }
}

/// [`best_slide`] for a failure worked out by [`Failed::new`].
fn best_slide_in(
    map: &SpareMap,
    failed: &Failed,
    k: usize,
    hints: &mut SlabHints,
) -> Option<(usize, Dir, u8)> {
    let q = map.grid().dims();
    if k == 0 || k > q {
        return None;
    }
    // One copy per slab dimension count (k - 1): a slab's dimensions then come as an array
    // of fixed length, with no loop over the plane's bits and no dispatch on their count per
    // check (the 3D and 2D searches of a failure alternate, which the predictor missed).
    match k - 1 {
        0 => best_slide_of::<0>(map, failed, k, hints),
        1 => best_slide_of::<1>(map, failed, k, hints),
        2 => best_slide_of::<2>(map, failed, k, hints),
        3 => best_slide_of::<3>(map, failed, k, hints),
        4 => best_slide_of::<4>(map, failed, k, hints),
        _ => best_slide_of::<{ MAX_DIMS - 1 }>(map, failed, k, hints),
    }
}

/// [`best_slide_in`] for slabs of `N` = k - 1 dimensions besides the slide's.
fn best_slide_of<const N: usize>(
    map: &SpareMap,
    failed: &Failed,
    k: usize,
    hints: &mut SlabHints,
) -> Option<(usize, Dir, u8)> {
    let grid = map.grid();
    let q = grid.dims();
    // Key (most used, fewest moved) and the slide (dimension, direction, plane mask).
    type Candidate = ((Reverse<u32>, u32), (usize, Dir, u8));
    let mut best: Option<Candidate> = None;
    let mut ways = failed.ways;
    while ways != 0 {
        let way = ways.trailing_zeros() as usize;
        ways &= ways - 1;
        let (d, dir) = (way / 2, Dir::BOTH[way % 2]);
        let used = map.slide_counts()[d][dir.slot()];
        if best.as_ref().is_some_and(|(b, _)| Reverse(used) > b.0) {
            // A (d, dir) used less than the best found cannot win.
            continue;
        }
        for plane in planes(q, d, k) {
            let cost = if N == 0 {
                // A 1D slide is the own line's, whose walk `Failed` made.
                Some(failed.shifted[way])
            } else if let Some(own) = failed.line[d] {
                let slab = (map.lines(), grid, &failed.coord, own, d, dir);
                slab_cost::<N>(slab, plane_dims_of(plane), hints.get(d, dir, plane))
            } else {
                slide_cost(map, grid, failed, (d, dir, plane), hints.get(d, dir, plane))
            };
            if let Some(moved) = cost {
                let key = (Reverse(used), moved);
                if best.as_ref().is_none_or(|(b, _)| key < *b) {
                    best = Some((key, (d, dir, plane)));
                }
            }
        }
    }
    best.map(|(_, slide)| slide)
}

/// Carries out a feasible slide (dimension, direction, slab mask); its moves, in pipeline
/// order, are left in `scratch.moves`.
fn apply_slide(
    map: &mut SpareMap,
    f: u32,
    failed_rank: u32,
    (dim, dir, plane): (usize, Dir, u8),
    scratch: &mut Scratch,
) {
    let grid = *map.grid();
    let Scratch {
        moves,
        path,
        unlisted_slides,
        ..
    } = scratch;
    moves.clear();
    if map.slides_line_by_line() {
        // Each line carried out as its moves are found (a batch begun and not ended leaves
        // nothing behind: the moves below begin their own).
        map.begin_slide((dim, dir));
        let list = !*unlisted_slides;
        let way = (dim, dir);
        if slide_moves_by_lines::<true>(map, &grid, f, failed_rank, way, plane, (moves, list)) {
            map.end_marked_moves();
            return;
        }
    }
    if !slide_moves_by_lines::<false>(map, &grid, f, failed_rank, (dim, dir), plane, (moves, true))
    {
        let (dims, n) = plane_array(plane);
        slide_moves_by_nodes(
            map,
            &grid,
            f,
            failed_rank,
            (dim, dir),
            &dims[..n],
            (moves, path),
        );
    }
    map.apply_moves(moves, Some((dim, dir)));
}

/// [`apply_slide`]'s moves, node by node (lines longer than 64). The moves follow from the
/// state before the slide: each line shifts by one towards its first free node.
fn slide_moves_by_nodes(
    map: &SpareMap,
    grid: &Grid,
    f: u32,
    failed_rank: u32,
    (dim, dir): (usize, Dir),
    plane: &[usize],
    (moves, path): (&mut Vec<Move>, &mut Vec<u32>),
) {
    for_each_in_slab(grid, f, plane, |start| {
        if start != f && !matches!(map.state(start), NodeState::Busy(_)) {
            return true;
        }
        path.clear();
        path.push(start);
        let mut at = start;
        loop {
            at = grid.step(at, dim, dir).expect("feasible slide");
            path.push(at);
            if map.state(at) == NodeState::Free {
                break;
            }
        }
        // Farthest rank first: each move goes to a node that is already empty.
        for w in path.windows(2).rev() {
            let from = w[0];
            let rank = match map.state(from) {
                NodeState::Busy(r) => r,
                // The failed node: its rank restarts on the next node of the line.
                _ => failed_rank,
            };
            moves.push(Move {
                rank,
                from,
                to: w[1],
            });
        }
        true
    });
}

/// [`apply_slide`]'s moves from the line masks and the node coordinates, with no division
/// per node: each line of the slab along `dim` that slides is scanned to its free node, and
/// its moves are listed farthest first (with `CARRY`, each line is also carried out as soon
/// as it is scanned, [`SpareMap::shift_line`], and its moves listed only when asked).
/// Returns false, changing and listing nothing, when the lines along `dim` have no masks
/// (extents over 64) or the nodes no coordinate table.
fn slide_moves_by_lines<const CARRY: bool>(
    map: &mut SpareMap,
    grid: &Grid,
    f: u32,
    failed_rank: u32,
    way: (usize, Dir),
    plane: u8,
    moves: (&mut Vec<Move>, bool),
) -> bool {
    let lines = map.lines();
    let (Some(own), Some(fc)) = (lines.line(grid, f, way.0), lines.coords(f)) else {
        return false;
    };
    let fc = *fc;
    let slide = (map, grid, f, failed_rank, way, own, &fc);
    // One copy per plane dimension count, as for the slab check (`slab_cost`).
    match plane.count_ones() {
        0 => slab_moves::<0, CARRY>(slide, [], moves),
        1 => slab_moves::<1, CARRY>(slide, plane_dims_of(plane), moves),
        2 => slab_moves::<2, CARRY>(slide, plane_dims_of(plane), moves),
        3 => slab_moves::<3, CARRY>(slide, plane_dims_of(plane), moves),
        4 => slab_moves::<4, CARRY>(slide, plane_dims_of(plane), moves),
        _ => slab_moves::<{ MAX_DIMS - 1 }, CARRY>(slide, plane_dims_of(plane), moves),
    }
    true
}

/// What [`slab_moves`] slides: the map, the failed node and its rank, the way, the failed
/// node's own line along it and its position there, and its coordinates.
type SlabSlide<'a> = (
    &'a mut SpareMap,
    &'a Grid,
    u32,
    u32,
    (usize, Dir),
    (usize, u32),
    &'a [u16; MAX_DIMS],
);

/// [`slide_moves_by_lines`] for a slab of `N` plane dimensions.
#[inline(always)]
fn slab_moves<const N: usize, const CARRY: bool>(
    (map, grid, f, failed_rank, (dim, dir), (line_f, p), fc): SlabSlide<'_>,
    plane: [usize; N],
    (moves, list): (&mut Vec<Move>, bool),
) {
    let lines = map.lines();
    let (e, wrap) = (grid.extent(dim), grid.wraps(dim));
    let stride = grid.stride(dim);
    // The slab's first line (plane coordinates zero), and per plane dimension the steps of
    // the line id and of the node index.
    let (mut line, mut node) = (line_f, f - p * stride);
    let mut line_step = [0usize; N];
    let mut node_step = [0u32; N];
    let mut extent = [0u32; N];
    for (i, &x) in plane.iter().enumerate() {
        line_step[i] = lines.line_step(dim, x) as usize;
        node_step[i] = grid.stride(x);
        extent[i] = grid.extent(x);
        line -= usize::from(fc[x]) * line_step[i];
        node -= u32::from(fc[x]) * node_step[i];
    }
    let mut at = [0u32; N];
    loop {
        let lines = map.lines();
        let open = lines.open(line);
        // A free or dead node at p leaves its line alone; f's own line slides.
        if line == line_f || (open >> p) & 1 == 0 {
            let (_, shifted) =
                walk_bits(open, lines.dead(line), p, e, wrap, dir).expect("feasible slide");
            // Position p + j along the slide, as a node (node: the line's position 0).
            // (j < e: a walk never comes back to p.)
            let node_at = |j: u32| {
                let x = match dir {
                    Dir::Plus if p + j >= e => p + j - e,
                    Dir::Plus => p + j,
                    Dir::Minus if j > p => p + e - j,
                    Dir::Minus => p - j,
                };
                node + x * stride
            };
            if CARRY {
                map.shift_line(node_at, shifted, (moves, list));
            } else {
                for j in (0..shifted).rev() {
                    let from = node_at(j);
                    // Every node a slide leaves holds a rank: a busy one, or the failed node,
                    // whose rank is still recorded there and restarts on the next node.
                    let rank = map.rank_on(from);
                    debug_assert!(rank != NO_RANK && (from == f) == (rank == failed_rank));
                    moves.push(Move {
                        rank,
                        from,
                        to: node_at(j + 1),
                    });
                }
            }
        }
        // Odometer over the plane's dimensions.
        let mut i = 0;
        loop {
            if i == N {
                return;
            }
            at[i] += 1;
            line += line_step[i];
            node += node_step[i];
            if at[i] < extent[i] {
                break;
            }
            line -= at[i] as usize * line_step[i];
            node -= at[i] * node_step[i];
            at[i] = 0;
            i += 1;
        }
    }
}

/// Replays moves on a map, checking that each goes from the rank's node to a free node.
pub fn replay(map: &mut SpareMap, moves: &[Move]) -> Result<(), Error> {
    for (i, m) in moves.iter().enumerate() {
        if map.node_of(m.rank) != m.from {
            return Err(Error::Map(format!(
                "move {i}: rank {} is not on node {}",
                m.rank, m.from
            )));
        }
        if map.state(m.to) != NodeState::Free {
            return Err(Error::Map(format!("move {i}: node {} is not free", m.to)));
        }
        map.move_rank(m.rank, m.to);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traffic::Pattern;

    fn map2d(box_: [u32; 2], compute: [u32; 2]) -> SpareMap {
        SpareMap::new(Grid::mesh(&box_).unwrap(), &compute, &[0, 0]).unwrap()
    }

    fn node(m: &SpareMap, c: &[u32]) -> u32 {
        m.grid().index(&m.grid().checked_coord(c).unwrap())
    }

    /// Maps after random failures on meshes, tori and a box on part of its rings.
    fn random_states() -> Vec<SpareMap> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let mut out = Vec::new();
        for (extents, wrap, rings, compute) in [
            (vec![8u32, 7, 6], vec![false; 3], vec![], vec![7u32, 6, 6]),
            (vec![6, 6, 4], vec![true; 3], vec![], vec![5, 5, 4]),
            (
                vec![7, 6, 4],
                vec![false, false, true],
                vec![9, 8, 4],
                vec![6, 5, 4],
            ),
            (vec![9, 5], vec![true, false], vec![], vec![8, 4]),
            // Slabs of up to five dimensions besides the slide's (one search copy each).
            (vec![4, 4, 3, 3], vec![false; 4], vec![], vec![3, 4, 3, 2]),
            (
                vec![3, 2, 2, 2, 2, 3],
                vec![false; 6],
                vec![],
                vec![2, 2, 2, 2, 2, 2],
            ),
        ] {
            let grid = Grid::new(&extents, &wrap).unwrap();
            let mut map = SpareMap::new(grid, &compute, &vec![0; grid.dims()]).unwrap();
            if !rings.is_empty() {
                map.set_rings(&rings).unwrap();
            }
            let method = Method::parse("hybrid", grid.dims()).unwrap();
            for _ in 0..grid.len() / 6 {
                let node = rng.gen_range(0..grid.len());
                if map.state(node) != NodeState::Dead {
                    fail(&mut map, node, &method).unwrap();
                    out.push(map.clone());
                }
            }
        }
        out
    }

    #[test]
    fn bit_walks_are_position_by_position_walks() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        // A walk along one line: over busy positions to the first non-busy one, which must
        // not be dead; around the ring when the line wraps.
        let naive = |open: u64, dead: u64, p: u32, e: u32, wrap: bool, dir: Dir| {
            let mut at = p;
            for shifted in 1..e {
                at = match dir {
                    Dir::Plus if at + 1 < e => at + 1,
                    Dir::Plus if wrap => 0,
                    Dir::Minus if at > 0 => at - 1,
                    Dir::Minus if wrap => e - 1,
                    _ => return None,
                };
                if (open >> at) & 1 == 1 {
                    return ((dead >> at) & 1 == 0).then_some((at, shifted));
                }
            }
            None
        };
        for e in [1u32, 2, 3, 12, 63, 64] {
            let line = if e == 64 { u64::MAX } else { (1u64 << e) - 1 };
            for _ in 0..300 {
                let open = rng.gen::<u64>() & rng.gen::<u64>() & line;
                let dead = open & rng.gen::<u64>() & rng.gen::<u64>();
                for p in 0..e {
                    for wrap in [false, true] {
                        for dir in Dir::BOTH {
                            assert_eq!(
                                walk_bits(open, dead, p, e, wrap, dir),
                                naive(open, dead, p, e, wrap, dir),
                                "open {open:#x} dead {dead:#x} p {p} e {e} wrap {wrap} {dir:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_nearest_free_node_from_stored_coordinates_is_the_grids() {
        let mut checked = 0;
        for map in random_states() {
            for f in 0..map.grid().len() {
                assert_eq!(nearest_free(&map, f), nearest_by_grid(&map, f));
                checked += 1;
            }
        }
        assert!(checked > 1000);
    }

    /// The blocked scan of [`nearest_on_mesh`] against the grid's, on meshes of one to six
    /// dimensions, with free sets of every size around a block's (ties included: a box
    /// holds many free nodes at the same distance).
    #[test]
    fn the_nearest_free_node_on_a_mesh_of_any_dimension_count_is_the_grids() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut sizes = std::collections::BTreeSet::new();
        for (extents, compute) in [
            (vec![40u32], vec![30u32]),
            (vec![9, 7], vec![6, 5]),
            (vec![6, 5, 4], vec![4, 4, 3]),
            (vec![5, 4, 3, 3], vec![4, 3, 2, 3]),
            (vec![3, 3, 2, 2, 3], vec![2, 3, 2, 1, 2]),
            (vec![2, 3, 2, 2, 2, 3], vec![2, 2, 1, 2, 2, 2]),
        ] {
            let grid = Grid::new(&extents, &vec![false; extents.len()]).unwrap();
            let mut map = SpareMap::new(grid, &compute, &vec![0; grid.dims()]).unwrap();
            loop {
                let coords = map.free_coords().unwrap();
                assert!(nearest_on_mesh(map.routing(), &Coord::default(), &[], coords).is_some());
                sizes.insert(map.free_nodes().len());
                for f in 0..grid.len() {
                    let expected = nearest_by_grid(&map, f);
                    assert_eq!(nearest_free(&map, f), expected, "{extents:?}");
                    // Both scans, whichever this processor takes.
                    let (fc, free) = (grid.coord(f), map.free_nodes());
                    let q = grid.dims();
                    assert_eq!(nearest_by_blocks(q, &fc, free, coords), expected);
                    #[cfg(target_arch = "x86_64")]
                    if let Some(simd) = avx2() {
                        assert_eq!(nearest_by_vectors(simd, q, &fc, free, coords), expected);
                    }
                }
                // Fewer free nodes, in another order (a removal moves the last one).
                let free = map.free_nodes().to_vec();
                if free.is_empty() {
                    break;
                }
                for _ in 0..=free.len() / 8 {
                    let t = free[rng.gen_range(0..free.len())];
                    if map.state(t) == NodeState::Free {
                        map.mark_dead(t);
                    }
                }
            }
        }
        // Below, at and above a block (and a vector) of 16, and several of them.
        assert!((1..=15).all(|n| sizes.contains(&n)) && sizes.iter().any(|&n| n > 48));
    }

    /// Calls `visit` with every feasible slide (dimension, direction, slab) of the failure of
    /// every `every`-th busy node of each state: the map with that node marked dead, the node
    /// and its rank. Returns how many it visited.
    fn for_each_feasible_slide(
        states: Vec<SpareMap>,
        every: usize,
        mut visit: impl FnMut(&SpareMap, u32, u32, (usize, Dir, u8)),
    ) -> usize {
        let mut visited = 0;
        for state in states {
            let grid = *state.grid();
            for f in (0..grid.len()).step_by(every) {
                let NodeState::Busy(rank) = state.state(f) else {
                    continue;
                };
                let mut map = state.clone();
                map.mark_dead(f);
                for d in 0..grid.dims() {
                    for dir in Dir::BOTH {
                        for k in 1..=grid.dims() {
                            for plane in planes(grid.dims(), d, k) {
                                let failed = Failed::new(&map, f, true);
                                let mut hint = [0; MAX_DIMS];
                                let slide = (d, dir, plane);
                                if slide_cost(&map, &grid, &failed, slide, &mut hint).is_some() {
                                    visit(&map, f, rank, slide);
                                    visited += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        visited
    }

    #[test]
    fn slides_listed_by_lines_are_the_node_by_node_slides() {
        let checked = for_each_feasible_slide(random_states(), 1, |map, f, rank, slide| {
            let (d, dir, plane) = slide;
            let grid = *map.grid();
            let (dims, n) = plane_array(plane);
            let (mut by_lines, mut by_nodes) = (Vec::new(), Vec::new());
            assert!(slide_moves_by_lines::<false>(
                &mut map.clone(),
                &grid,
                f,
                rank,
                (d, dir),
                plane,
                (&mut by_lines, true)
            ));
            slide_moves_by_nodes(
                map,
                &grid,
                f,
                rank,
                (d, dir),
                &dims[..n],
                (&mut by_nodes, &mut Vec::new()),
            );
            assert_eq!(by_lines, by_nodes);
        });
        assert!(checked > 1000, "{checked}");
    }

    #[test]
    fn slides_carried_out_line_by_line_leave_the_map_the_listed_moves_leave() {
        // Every other state without link loads, the rest with them.
        let states = random_states()
            .into_iter()
            .enumerate()
            .map(|(i, mut state)| {
                if i % 2 == 1 {
                    state.track_traffic(&Pattern::star(1), false);
                }
                state
            })
            .collect();
        let checked = for_each_feasible_slide(states, 3, |map, f, rank, slide| {
            let (d, dir, plane) = slide;
            let grid = *map.grid();
            let mut listed = map.clone();
            let mut moves = Vec::new();
            let way = (d, dir);
            if !slide_moves_by_lines::<false>(
                &mut listed,
                &grid,
                f,
                rank,
                way,
                plane,
                (&mut moves, true),
            ) {
                return;
            }
            listed.apply_moves(&moves, Some(way));
            let mut carried = map.clone();
            let mut scratch = Scratch::default();
            apply_slide(&mut carried, f, rank, slide, &mut scratch);
            assert_eq!(scratch.moves, moves);
            assert!(carried == listed, "slide {slide:?} of node {f}");
            assert_eq!(carried.tracked_traffic(), listed.tracked_traffic());
        });
        assert!(checked > 500, "{checked}");
    }

    /// The spec's kD choice, every slab walked node by node.
    fn slide_node_by_node(map: &SpareMap, f: u32, k: usize) -> Option<(usize, Dir, u8)> {
        let grid = *map.grid();
        type Keyed = ((Reverse<u32>, u32), (usize, Dir, u8));
        let mut best: Option<Keyed> = None;
        for d in 0..grid.dims() {
            for dir in Dir::BOTH {
                for plane in planes(grid.dims(), d, k) {
                    let (dims, n) = plane_array(plane);
                    let mut moved = 0;
                    let feasible = for_each_in_slab(&grid, f, &dims[..n], |h| {
                        if h != f && !matches!(map.state(h), NodeState::Busy(_)) {
                            return true;
                        }
                        walk_nodes(map, &grid, h, d, dir)
                            .map(|w| moved += w.1)
                            .is_some()
                    });
                    let key = (Reverse(map.slide_counts()[d][dir.slot()]), moved);
                    if feasible && best.is_none_or(|(b, _)| key < b) {
                        best = Some((key, (d, dir, plane)));
                    }
                }
            }
        }
        best.map(|b| b.1)
    }

    #[test]
    fn slab_hints_left_by_other_failures_change_no_slide() {
        let mut hints = SlabHints::default();
        let mut checked = 0;
        for map in random_states() {
            let grid = *map.grid();
            let q = grid.dims();
            for f in (0..grid.len()).filter(|&f| matches!(map.state(f), NodeState::Busy(_))) {
                let failed = Failed::new(&map, f, true);
                for k in 1..=q {
                    let fresh = best_slide_in(&map, &failed, k, &mut SlabHints::default());
                    assert_eq!(fresh, slide_node_by_node(&map, f, k));
                    assert_eq!(best_slide_in(&map, &failed, k, &mut hints), fresh);
                    checked += 1;
                }
            }
        }
        assert!(checked > 1000);
    }

    #[test]
    fn methods_parse_and_print() {
        assert_eq!(Method::parse("hybrid", 3).unwrap().degrees(), &[3, 2, 1, 0]);
        assert_eq!(
            Method::parse("hybrid(all)", 2).unwrap().degrees(),
            &[2, 1, 0]
        );
        assert_eq!(
            Method::parse("hybrid(-2D)", 3).unwrap().degrees(),
            &[3, 1, 0]
        );
        assert_eq!(
            Method::parse("hybrid(3D+1D+0D)", 3).unwrap().degrees(),
            &[3, 1, 0]
        );
        assert_eq!(Method::parse("0D", 3).unwrap().degrees(), &[0]);
        for s in ["hybrid", "hybrid(-2D)", "hybrid(3D+1D+0D)", "1D"] {
            assert_eq!(Method::parse(s, 3).unwrap().to_string(), s);
        }
        for bad in [
            "4D",
            "hybrid(4D)",
            "hybrid(2D+2D)",
            "hybridx",
            "sliding",
            "hybrid(-0D-1D-2D-3D)",
        ] {
            assert!(Method::parse(bad, 3).is_err(), "{bad}");
        }
    }

    #[test]
    fn planes_come_in_the_lexicographic_order_of_their_dimension_lists() {
        for q in 1..=MAX_DIMS {
            for d in 0..q {
                for k in 1..=q {
                    let got: Vec<Vec<usize>> = planes(q, d, k).map(plane_dims).collect();
                    let mut want: Vec<Vec<usize>> = (0u8..1 << q)
                        .filter(|m| m >> d & 1 == 0 && m.count_ones() as usize == k - 1)
                        .map(plane_dims)
                        .collect();
                    want.sort();
                    assert_eq!(got, want, "q={q} d={d} k={k}");
                }
            }
        }
    }

    #[test]
    fn one_d_slide_shifts_the_row_towards_the_spare() {
        let mut m = map2d([6, 6], [5, 5]);
        let f = node(&m, &[2, 2]);
        let out = fail(&mut m, f, &Method::parse("1D", 2).unwrap()).unwrap();
        let Outcome::Substituted {
            degree: 1,
            slide: Some(s),
            moves,
        } = out
        else {
            panic!("{out:?}")
        };
        assert_eq!((s.dim, s.dir), (0, Dir::Plus));
        // Ranks at x=4, 3 then the failed one at x=2 move, farthest first.
        let xs: Vec<(u32, u32)> = moves
            .iter()
            .map(|mv| (m.coord(mv.from)[0], m.coord(mv.to)[0]))
            .collect();
        assert_eq!(xs, vec![(4, 5), (3, 4), (2, 3)]);
    }

    #[test]
    fn zero_d_measures_and_routes_on_the_network_ring() {
        // A box of 6 on a ring of 8: compute 0..4, spare 5. Node 0 fails; its rank goes to 5,
        // 3 hops away the short way round (0, 7, 6, 5) but 5 hops inside the box.
        let grid = Grid::mesh(&[6]).unwrap();
        let mut map = SpareMap::new(grid, &[5], &[0]).unwrap();
        map.set_rings(&[8]).unwrap();
        assert_eq!(map.routing().distance(&[0; MAX_DIMS], &map.coord(5)), 3);
        let star = Pattern::star(1);
        map.track_traffic(&star, false);
        fail(&mut map, 0, &Method::parse("0D", 1).unwrap()).unwrap();
        assert_eq!(map.node_of(0), 5);
        // Rank 0 (node 5) to rank 1 (node 1): 4 hops either way, + on the tie: 5, 6, 7, 0, 1,
        // over 3 links with an end outside the box. Rank 1 to rank 0: 1, 2, 3, 4, 5 (inside).
        // Link 1+ then carries 1 -> 2 and 1 -> 5.
        let t = map.traffic(&star, false);
        assert_eq!(t.outside_links, 3);
        assert_eq!(t.collisions, 2);
        assert_eq!(t.total_hops, 4 + 4 + 6);
        assert_eq!(
            t,
            map.full_traffic(&crate::traffic::neighbours(&[5], &star, false))
        );
    }

    #[test]
    fn zero_d_prefers_the_same_line_then_the_lowest_index() {
        let mut m = map2d([6, 6], [5, 5]);
        // (2,2): nearest spares at distance 3 are (5,2) on its row and (2,5) on its column;
        // both share one coordinate; (5,2) has the lower index.
        let f = node(&m, &[2, 2]);
        let out = fail(&mut m, f, &Method::parse("0D", 2).unwrap()).unwrap();
        assert_eq!(out.moves()[0].to, node(&m, &[5, 2]));
        // (4,4): (5,4) and (4,5) are at distance 1; (5,5) at 2.
        let f = node(&m, &[4, 4]);
        let out = fail(&mut m, f, &Method::parse("0D", 2).unwrap()).unwrap();
        assert_eq!(out.moves()[0].to, node(&m, &[5, 4]));
    }

    #[test]
    fn failing_twice_is_an_error_and_changes_nothing() {
        let mut m = map2d([4, 4], [3, 3]);
        let f = node(&m, &[1, 1]);
        fail(&mut m, f, &Method::hybrid(2)).unwrap();
        let before = m.clone();
        assert!(matches!(
            fail(&mut m, f, &Method::hybrid(2)),
            Err(Error::AlreadyFailed(_))
        ));
        assert_eq!(m, before);
        assert!(matches!(
            fail(&mut m, 99, &Method::hybrid(2)),
            Err(Error::UnknownNode(_))
        ));
    }

    #[test]
    fn free_node_failures_only_kill_the_node() {
        let mut m = map2d([4, 4], [3, 3]);
        let spare = node(&m, &[3, 0]);
        assert_eq!(
            fail(&mut m, spare, &Method::hybrid(2)).unwrap(),
            Outcome::FreeNodeDied
        );
        assert_eq!(m.free_nodes().len(), 6);
    }

    #[test]
    fn job_is_lost_when_no_method_applies() {
        let mut m = map2d([3, 3], [3, 3]);
        let out = fail(&mut m, 4, &Method::hybrid(2)).unwrap();
        assert_eq!(out, Outcome::JobLost);
        assert!(m.is_lost());
        assert_eq!(
            fail(&mut m, 0, &Method::hybrid(2)).unwrap(),
            Outcome::JobLost
        );
    }

    #[test]
    fn slides_follow_the_most_used_direction() {
        // 2D(2,1) on 6x6, 1D only: after a slide along x+, the next failure on another row
        // slides along x+ too even though y+ moves fewer ranks.
        let mut m = map2d([6, 6], [5, 5]);
        let one = Method::parse("1D", 2).unwrap();
        let (first, second) = (node(&m, &[3, 0]), node(&m, &[0, 4]));
        fail(&mut m, first, &one).unwrap();
        let out = fail(&mut m, second, &one).unwrap();
        let Outcome::Substituted { slide: Some(s), .. } = out else {
            panic!()
        };
        assert_eq!((s.dim, s.dir), (0, Dir::Plus));
        let t = m.traffic(&Pattern::star(2), false);
        assert!(t.collisions >= 1);
    }
    #[test]
    fn zero_d_rules_parse_print_and_need_a_zero_d_step() {
        for spec in [
            "0D:alternate",
            "hybrid:least-load",
            "hybrid(3D+0D):least-load",
        ] {
            let m = Method::parse(spec, 3).unwrap();
            assert_eq!(m.to_string(), spec);
        }
        assert_eq!(
            Method::parse("hybrid(3D+0D:least-load)", 3)
                .unwrap()
                .zero_rule(),
            ZeroRule::LeastLoad
        );
        assert_eq!(Method::parse("0D:nearest", 3).unwrap().to_string(), "0D");
        assert!(Method::parse("1D:alternate", 3).is_err());
        assert!(Method::parse("0D:farthest", 3).is_err());
    }

    #[test]
    fn alternate_takes_the_side_used_least() {
        let alternate = Method::parse("0D:alternate", 2).unwrap();
        let nearest = Method::parse("0D", 2).unwrap();
        let mut m = map2d([6, 6], [5, 5]);
        // (3,3): (5,3) and (3,5) are both 2 away; the lower index (5,3) wins: side x+.
        let f = node(&m, &[3, 3]);
        let out = fail(&mut m, f, &alternate).unwrap();
        assert_eq!(out.moves()[0].to, node(&m, &[5, 3]));
        // (3,2): the nearest is (5,2) on side x+ again; alternate goes to side y+: (3,5).
        let f = node(&m, &[3, 2]);
        let mut plain = m.clone();
        let out = fail(&mut plain, f, &nearest).unwrap();
        assert_eq!(out.moves()[0].to, node(&m, &[5, 2]));
        let out = fail(&mut m, f, &alternate).unwrap();
        assert_eq!(out.moves()[0].to, node(&m, &[3, 5]));
        assert_eq!(m.zero_sides()[0], [1, 0]);
        assert_eq!(m.zero_sides()[1], [1, 0]);
        // The side counts survive the map's document.
        let meta = crate::MapMeta {
            topology: None,
            origin: vec![0, 0],
            spares: "2D(2,1)".into(),
            method: alternate,
            pattern: Pattern::star(2),
            periodic: false,
            hosts: None,
        };
        let doc = crate::MapDocument::new(&m, &meta);
        let (back, _) = crate::MapDocument::from_json(&doc.to_json())
            .unwrap()
            .into_map()
            .unwrap();
        assert_eq!(back.zero_sides(), m.zero_sides());
    }

    #[test]
    fn least_load_never_leaves_more_collisions_than_nearest() {
        use rand::{Rng, SeedableRng};
        let least = Method::parse("0D:least-load", 3).unwrap();
        let nearest = Method::parse("0D", 3).unwrap();
        let pattern = Pattern::star(3);
        let grid = Grid::mesh(&[7, 7, 6]).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut m = SpareMap::new(grid, &[6, 6, 6], &[0, 0, 0]).unwrap();
        m.track_traffic(&pattern, false);
        let mut plain = m.clone();
        plain.untrack_traffic();
        let before = plain.clone();
        assert!(
            fail(&mut plain, 0, &least).is_err(),
            "least-load needs link loads"
        );
        assert_eq!(plain, before);
        for _ in 0..40 {
            let f = rng.gen_range(0..grid.len());
            if !matches!(m.state(f), NodeState::Busy(_)) {
                continue;
            }
            let mut by_nearest = m.clone();
            fail(&mut by_nearest, f, &nearest).unwrap();
            fail(&mut m, f, &least).unwrap();
            assert!(
                m.traffic(&pattern, false).collisions
                    <= by_nearest.traffic(&pattern, false).collisions
            );
        }
    }
}
