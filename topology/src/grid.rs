//! Cartesian grids: extents, mesh or ring per dimension, coordinates and hop distances.
//!
//! Coordinates are fixed-size arrays so that the hot paths (routing, sliding) never allocate;
//! only the first [`Grid::dims`] entries are meaningful, the rest stay zero.

use crate::Error;

/// The most dimensions a network may have (the K computer's Tofu has six).
pub const MAX_DIMS: usize = 6;

/// A node coordinate; entries past the grid's dimension count are zero.
pub type Coord = [u32; MAX_DIMS];

/// A step direction along one dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// Towards higher coordinates.
    Plus,
    /// Towards lower coordinates.
    Minus,
}

impl Dir {
    /// Both directions, `+` first (the spec's tie order).
    pub const BOTH: [Dir; 2] = [Dir::Plus, Dir::Minus];

    /// 0 for `+`, 1 for `-`: the slot of this direction in per-dimension tables.
    pub fn slot(self) -> usize {
        match self {
            Dir::Plus => 0,
            Dir::Minus => 1,
        }
    }

    /// `'+'` or `'-'`.
    pub fn sign(self) -> char {
        match self {
            Dir::Plus => '+',
            Dir::Minus => '-',
        }
    }
}

/// A q-dimensional Cartesian grid; dimension 0 varies fastest in linear indices. Small and
/// `Copy`, so that code mutating a map can hold its grid by value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grid {
    dims: usize,
    extents: Coord,
    wrap: [bool; MAX_DIMS],
    strides: [u32; MAX_DIMS],
    nodes: u32,
}

impl Grid {
    /// A grid with the given extents; `wrap[d]` makes dimension d a ring.
    pub fn new(extents: &[u32], wrap: &[bool]) -> Result<Grid, Error> {
        if extents.is_empty() || extents.len() > MAX_DIMS {
            return Err(Error::Dimensions(extents.len()));
        }
        if wrap.len() != extents.len() {
            return Err(Error::Invalid(format!(
                "{} extents but {} mesh/ring entries: give one per dimension",
                extents.len(),
                wrap.len()
            )));
        }
        let mut g = Grid {
            dims: extents.len(),
            extents: [0; MAX_DIMS],
            wrap: [false; MAX_DIMS],
            strides: [0; MAX_DIMS],
            nodes: 1,
        };
        let mut total: u64 = 1;
        for (d, (&e, &w)) in extents.iter().zip(wrap).enumerate() {
            if e == 0 {
                return Err(Error::Invalid(format!(
                    "extent of dimension {d} is 0: every extent must be at least 1"
                )));
            }
            g.extents[d] = e;
            g.wrap[d] = w;
            g.strides[d] = total as u32;
            total *= u64::from(e);
            // Every map, load table and name list is sized by the node count: refuse before
            // any of them is allocated (the product cannot overflow u64 here: each factor
            // is below 2^32 and the running total stays at most MAX_NODES).
            if total > u64::from(crate::limits::MAX_NODES) {
                return Err(Error::Limit {
                    what: format!("a {} grid", format_shape(extents)),
                    value: extents
                        .iter()
                        .fold(1u64, |p, &e| p.saturating_mul(u64::from(e))),
                    limit: u64::from(crate::limits::MAX_NODES),
                    unit: "nodes",
                });
            }
        }
        g.nodes = total as u32;
        Ok(g)
    }

    /// A mesh (no wrap-around) with the given extents.
    pub fn mesh(extents: &[u32]) -> Result<Grid, Error> {
        Grid::new(extents, &vec![false; extents.len()])
    }

    /// Number of dimensions q.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Extents of the q dimensions.
    pub fn extents(&self) -> &[u32] {
        &self.extents[..self.dims]
    }

    /// Extent of dimension d.
    pub fn extent(&self, d: usize) -> u32 {
        self.extents[d]
    }

    /// Ring flags of the q dimensions.
    pub fn wrap(&self) -> &[bool] {
        &self.wrap[..self.dims]
    }

    /// Whether dimension d is a ring.
    pub fn wraps(&self, d: usize) -> bool {
        self.wrap[d]
    }

    /// Number of nodes.
    pub fn len(&self) -> u32 {
        self.nodes
    }

    /// Never true: a grid has at least one node.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Linear index of a coordinate (dimension 0 fastest).
    #[inline]
    pub fn index(&self, c: &Coord) -> u32 {
        let mut i = 0;
        for d in 0..self.dims {
            i += c[d] * self.strides[d];
        }
        i
    }

    /// Coordinate of a linear index.
    #[inline]
    pub fn coord(&self, mut i: u32) -> Coord {
        let mut c = [0; MAX_DIMS];
        for d in 0..self.dims {
            c[d] = i % self.extents[d];
            i /= self.extents[d];
        }
        c
    }

    /// The coordinate from a slice, checked against the extents.
    pub fn checked_coord(&self, v: &[u32]) -> Result<Coord, Error> {
        if v.len() != self.dims {
            return Err(Error::Invalid(format!(
                "coordinate {} has {} entries, the grid has {} dimensions",
                format_coord(v),
                v.len(),
                self.dims
            )));
        }
        let mut c = [0; MAX_DIMS];
        for d in 0..self.dims {
            if v[d] >= self.extents[d] {
                return Err(Error::Invalid(format!(
                    "coordinate {} is outside the {} grid",
                    format_coord(v),
                    format_shape(self.extents())
                )));
            }
            c[d] = v[d];
        }
        Ok(c)
    }

    /// Index stride of dimension d.
    #[inline]
    pub fn stride(&self, d: usize) -> u32 {
        self.strides[d]
    }

    /// The neighbour of node `i` one step along d, or `None` at a mesh edge.
    #[inline]
    pub fn step(&self, i: u32, d: usize, dir: Dir) -> Option<u32> {
        let e = self.extents[d];
        let x = (i / self.strides[d]) % e;
        match dir {
            Dir::Plus if x + 1 < e => Some(i + self.strides[d]),
            Dir::Plus if self.wrap[d] && e > 1 => Some(i + self.strides[d] - e * self.strides[d]),
            Dir::Minus if x > 0 => Some(i - self.strides[d]),
            Dir::Minus if self.wrap[d] && e > 1 => Some(i + (e - 1) * self.strides[d]),
            _ => None,
        }
    }

    /// The grid that a box's messages are routed on when the box lies in a network whose
    /// dimension d is a ring of `rings[d]` nodes (0: a mesh). Where the box covers only part of
    /// a ring, the routing grid holds the whole ring, with the box at its low end: positions
    /// `extent..ring` are the network's nodes past the box's high end, in order, and the
    /// shorter way round may pass them. Elsewhere the routing grid is the box. Box coordinates
    /// are routing coordinates.
    pub fn routing_grid(&self, rings: &[u32]) -> Result<Grid, Error> {
        if rings.len() != self.dims {
            return Err(Error::Invalid(format!(
                "{} ring lengths for a {}-dimensional box",
                rings.len(),
                self.dims
            )));
        }
        let mut extents = [0; MAX_DIMS];
        let mut wrap = [false; MAX_DIMS];
        for d in 0..self.dims {
            let (e, ring) = (self.extents[d], rings[d]);
            // The box wraps exactly where it covers its ring.
            if (ring == e) != self.wrap[d] || (ring != 0 && ring < e) {
                return Err(Error::Invalid(format!(
                    "dimension {d} of the {} box ({}) does not lie on a {}",
                    format_shape(self.extents()),
                    if self.wrap[d] { "a ring" } else { "a mesh" },
                    if ring == 0 {
                        "mesh".to_string()
                    } else {
                        format!("ring of {ring} nodes")
                    }
                )));
            }
            extents[d] = if ring > 0 { ring } else { e };
            wrap[d] = ring > 0;
        }
        Grid::new(&extents[..self.dims], &wrap[..self.dims])
    }

    /// The node of this grid at the coordinates that node `node` of `other` has.
    #[inline]
    pub fn reindex(&self, other: &Grid, node: u32) -> u32 {
        if self == other {
            node
        } else {
            self.index(&other.coord(node))
        }
    }

    /// Whether a coordinate of this grid lies inside a box of `extents` at its low corner.
    #[inline]
    pub fn inside(&self, c: &Coord, extents: &[u32]) -> bool {
        (0..self.dims).all(|d| c[d] < extents[d])
    }

    /// Signed hop count from `a` to `b` along dimension d by the routing rule: on a ring the
    /// shorter way, `+` on an exact tie.
    #[inline]
    pub fn delta(&self, d: usize, a: u32, b: u32) -> i64 {
        let e = i64::from(self.extents[d]);
        let diff = i64::from(b) - i64::from(a);
        if !self.wrap[d] {
            return diff;
        }
        let fwd = diff.rem_euclid(e);
        let back = e - fwd;
        if fwd == 0 {
            0
        } else if fwd <= back {
            fwd
        } else {
            -back
        }
    }

    /// Hop distance between two nodes (Manhattan, rings the shorter way).
    #[inline]
    pub fn distance(&self, a: &Coord, b: &Coord) -> u32 {
        (0..self.dims)
            .map(|d| self.delta(d, a[d], b[d]).unsigned_abs() as u32)
            .sum()
    }
}

/// `12x12x12`.
pub fn format_shape(extents: &[u32]) -> String {
    extents
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("x")
}

/// `(1,2,3)`.
pub fn format_coord(c: &[u32]) -> String {
    format!(
        "({})",
        c.iter()
            .map(|e| e.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// Parses `11x11x12` (also `11X11X12`) into extents; every extent at least 1.
pub fn parse_shape(s: &str) -> Result<Vec<u32>, Error> {
    let bad = |why: &str| Error::Invalid(format!("shape '{s}': {why} (expected e.g. 11x11x12)"));
    let parts: Vec<&str> = s.trim().split(['x', 'X']).collect();
    if parts.len() > MAX_DIMS {
        return Err(Error::Dimensions(parts.len()));
    }
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        let v: u32 = p
            .trim()
            .parse()
            .map_err(|_| bad(&format!("'{p}' is not a whole number")))?;
        if v == 0 {
            return Err(bad("extents must be at least 1"));
        }
        out.push(v);
    }
    Ok(out)
}

/// Parses a coordinate such as `3,4,5` or `(3,4,5)`.
pub fn parse_coord(s: &str) -> Option<Vec<u32>> {
    let t = s.trim().trim_start_matches('(').trim_end_matches(')');
    if !t.contains(',') && t.parse::<u32>().is_err() {
        return None;
    }
    t.split(',').map(|p| p.trim().parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_and_coord_round_trip_dimension_zero_fastest() {
        let g = Grid::mesh(&[3, 4, 5]).unwrap();
        assert_eq!(g.len(), 60);
        let c = g.coord(1 + 3 * (2 + 4 * 3));
        assert_eq!(&c[..3], &[1, 2, 3]);
        for i in 0..g.len() {
            assert_eq!(g.index(&g.coord(i)), i);
        }
    }

    #[test]
    fn ring_takes_the_shorter_way_and_plus_on_ties() {
        let g = Grid::new(&[6], &[true]).unwrap();
        assert_eq!(g.delta(0, 0, 2), 2);
        assert_eq!(g.delta(0, 0, 4), -2);
        assert_eq!(g.delta(0, 0, 3), 3, "tie goes the positive way");
        assert_eq!(g.delta(0, 4, 1), 3);
        assert_eq!(g.delta(0, 5, 0), 1);
        let m = Grid::mesh(&[6]).unwrap();
        assert_eq!(m.delta(0, 5, 0), -5);
    }

    #[test]
    fn steps_stop_at_mesh_edges_and_wrap_on_rings() {
        let g = Grid::new(&[4, 3], &[false, true]).unwrap();
        assert_eq!(g.step(3, 0, Dir::Plus), None);
        assert_eq!(g.step(0, 0, Dir::Minus), None);
        assert_eq!(g.step(0, 1, Dir::Minus), Some(8));
        assert_eq!(g.step(8, 1, Dir::Plus), Some(0));
    }

    #[test]
    fn bad_grids_are_refused() {
        assert!(matches!(Grid::mesh(&[]), Err(Error::Dimensions(0))));
        assert!(matches!(Grid::mesh(&[2; 7]), Err(Error::Dimensions(7))));
        assert!(Grid::mesh(&[4, 0]).is_err());
        assert!(parse_shape("4x0x2").is_err());
        assert!(parse_shape("4xax2").is_err());
        assert_eq!(parse_shape("11x11X12").unwrap(), vec![11, 11, 12]);
    }

    #[test]
    fn grids_over_the_node_limit_are_refused_before_anything_is_allocated() {
        // One billion nodes passed the old guard (about 1 billion) and aborted the CLI
        // allocating 24 GB of map.
        let e = Grid::mesh(&[1000, 1000, 1000]).unwrap_err().to_string();
        assert!(
            e.contains("1000x1000x1000") && e.contains("1000000000 nodes"),
            "{e}"
        );
        assert!(e.contains("limit of 1048576 nodes"), "{e}");
        assert!(Grid::mesh(&[2_000_000, 0]).is_err());
        assert_eq!(Grid::mesh(&[48, 48, 48]).unwrap().len(), 110_592);
        assert_eq!(Grid::mesh(&[1 << 20]).unwrap().len(), 1 << 20);
    }
}
