//! Ranks on the job's logical grid: rank `r` sits at logical coordinate `(r % P0, r / P0 % P1,
//! r / (P0 P1))` (dimension 0 fastest, as in the spare map), and its stencil neighbours are the
//! ranks one step away along each dimension.

use crate::Error;

/// The logical grid of ranks (the map's `compute` extents).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Ranks along each of the 3 dimensions.
    pub dims: [u32; 3],
    /// Whether the stencil wraps around.
    pub periodic: bool,
}

/// A neighbour of a rank: which dimension, which side (0 = minus, 1 = plus), which rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Neighbour {
    /// Dimension 0, 1 or 2.
    pub dim: usize,
    /// 0 for the minus side, 1 for the plus side.
    pub side: usize,
    /// The neighbour's rank.
    pub rank: u32,
}

impl Layout {
    /// A layout from a map's compute extents (1 to 3 dimensions; missing ones are 1).
    pub fn new(compute: &[u32], periodic: bool) -> Result<Layout, Error> {
        if compute.is_empty() || compute.len() > 3 || compute.contains(&0) {
            return Err(Error::Invalid(format!(
                "the stencil needs 1 to 3 non-zero compute extents, not {compute:?}"
            )));
        }
        let mut dims = [1; 3];
        dims[..compute.len()].copy_from_slice(compute);
        // Two ranks along a ring would be each other's minus and plus neighbour on one
        // connection; the example keeps one message per neighbour and direction.
        if periodic && dims.contains(&2) {
            return Err(Error::Invalid(
                "a periodic stencil needs 1 or at least 3 ranks along each dimension".into(),
            ));
        }
        Ok(Layout { dims, periodic })
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.dims.iter().product()
    }

    /// Logical coordinate of a rank.
    pub fn coord(&self, rank: u32) -> [u32; 3] {
        let [p0, p1, _] = self.dims;
        [rank % p0, rank / p0 % p1, rank / (p0 * p1)]
    }

    /// Rank at a logical coordinate.
    pub fn rank(&self, c: [u32; 3]) -> u32 {
        c[0] + self.dims[0] * (c[1] + self.dims[1] * c[2])
    }

    /// The stencil neighbours of a rank, minus before plus, dimension 0 first.
    pub fn neighbours(&self, rank: u32) -> Vec<Neighbour> {
        let c = self.coord(rank);
        let mut out = Vec::new();
        for dim in 0..3 {
            let p = self.dims[dim];
            if p == 1 {
                continue;
            }
            for side in 0..2 {
                let x = c[dim];
                let nx = match (side, self.periodic) {
                    (0, _) if x > 0 => x - 1,
                    (0, true) => p - 1,
                    (1, _) if x + 1 < p => x + 1,
                    (1, true) => 0,
                    _ => continue,
                };
                let mut n = c;
                n[dim] = nx;
                out.push(Neighbour {
                    dim,
                    side,
                    rank: self.rank(n),
                });
            }
        }
        out
    }

    /// Every rank this rank talks to: its neighbours and, for the collectives, rank 0 (rank 0
    /// talks to all), sorted, without itself.
    pub fn peers(&self, rank: u32) -> Vec<u32> {
        let mut p: Vec<u32> = if rank == 0 {
            (1..self.size()).collect()
        } else {
            let mut v: Vec<u32> = self.neighbours(rank).iter().map(|n| n.rank).collect();
            v.push(0);
            v
        };
        p.sort_unstable();
        p.dedup();
        p.retain(|&r| r != rank);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_are_dimension_0_fastest() {
        let l = Layout::new(&[3, 3, 2], false).unwrap();
        assert_eq!(l.size(), 18);
        assert_eq!(l.coord(4), [1, 1, 0]);
        assert_eq!(l.coord(13), [1, 1, 1]);
        for r in 0..18 {
            assert_eq!(l.rank(l.coord(r)), r);
        }
    }

    #[test]
    fn neighbours_stop_at_mesh_edges_and_wrap_on_rings() {
        let l = Layout::new(&[3, 3, 2], false).unwrap();
        let n: Vec<u32> = l.neighbours(0).iter().map(|n| n.rank).collect();
        assert_eq!(n, vec![1, 3, 9]);
        let n: Vec<u32> = l.neighbours(13).iter().map(|n| n.rank).collect();
        assert_eq!(n, vec![12, 14, 10, 16, 4]);
        let p = Layout::new(&[3, 3, 1], true).unwrap();
        let n: Vec<u32> = p.neighbours(0).iter().map(|n| n.rank).collect();
        assert_eq!(n, vec![2, 1, 6, 3]);
        assert!(Layout::new(&[3, 2], true).is_err());
    }

    #[test]
    fn peers_are_symmetric() {
        let l = Layout::new(&[3, 3, 2], false).unwrap();
        for a in 0..18 {
            for b in l.peers(a) {
                assert!(l.peers(b).contains(&a), "{a} -> {b}");
            }
        }
    }
}
