//! One rank's block of the global field: `n^3` cells plus a one-cell halo, the Jacobi heat
//! step, face packing, and the checksums.
//!
//! Every cell is updated by the same expression in the same operand order whichever rank holds
//! it, and the initial field is a function of global coordinates only, so the final field is
//! bit-identical for any placement of the ranks and any restart from a checkpoint.

use crate::layout::{Layout, Neighbour};

/// Diffusion coefficient of the explicit step (stable below 1/6).
const ALPHA: f64 = 0.1;

/// A rank's block with its halo.
#[derive(Debug, Clone)]
pub struct Block {
    /// Cells per dimension (without halo).
    pub n: usize,
    /// Global cell index of this block's first interior cell.
    pub origin: [u64; 3],
    /// Global extents in cells.
    pub global: [u64; 3],
    cur: Vec<f64>,
    next: Vec<f64>,
}

impl Block {
    /// The initial block of `rank`: a smooth ramp plus a hot ball near the global centre.
    pub fn initial(layout: &Layout, rank: u32, n: usize) -> Block {
        let c = layout.coord(rank);
        let origin = [0, 1, 2].map(|d| c[d] as u64 * n as u64);
        let global = [0, 1, 2].map(|d| layout.dims[d] as u64 * n as u64);
        let m = n + 2;
        let mut b = Block {
            n,
            origin,
            global,
            cur: vec![0.0; m * m * m],
            next: vec![0.0; m * m * m],
        };
        for k in 0..n {
            for j in 0..n {
                for i in 0..n {
                    let g = [
                        origin[0] + i as u64,
                        origin[1] + j as u64,
                        origin[2] + k as u64,
                    ];
                    let idx = b.idx(i + 1, j + 1, k + 1);
                    b.cur[idx] = initial_value(g, global);
                }
            }
        }
        b
    }

    /// A block with the given interior values (from a checkpoint).
    pub fn from_interior(layout: &Layout, rank: u32, n: usize, interior: &[f64]) -> Block {
        let mut b = Block::initial(layout, rank, n);
        b.set_interior(interior);
        b
    }

    #[inline]
    fn idx(&self, i: usize, j: usize, k: usize) -> usize {
        let m = self.n + 2;
        i + m * (j + m * k)
    }

    /// The interior cells, `i` fastest.
    pub fn interior(&self) -> Vec<f64> {
        let n = self.n;
        let mut v = Vec::with_capacity(n * n * n);
        for k in 1..=n {
            for j in 1..=n {
                for i in 1..=n {
                    v.push(self.cur[self.idx(i, j, k)]);
                }
            }
        }
        v
    }

    fn set_interior(&mut self, v: &[f64]) {
        let n = self.n;
        assert_eq!(v.len(), n * n * n, "interior of the wrong size");
        let mut it = v.iter();
        for k in 1..=n {
            for j in 1..=n {
                for i in 1..=n {
                    let idx = self.idx(i, j, k);
                    self.cur[idx] = *it.next().expect("length checked");
                }
            }
        }
    }

    /// Cells of a face layer: `layer` 1 or `n` are interior faces (sent), 0 or `n+1` halos.
    fn face_cells(&self, dim: usize, layer: usize) -> Vec<usize> {
        let n = self.n;
        let mut out = Vec::with_capacity(n * n);
        for b in 1..=n {
            for a in 1..=n {
                let (i, j, k) = match dim {
                    0 => (layer, a, b),
                    1 => (a, layer, b),
                    _ => (a, b, layer),
                };
                out.push(self.idx(i, j, k));
            }
        }
        out
    }

    /// The face this rank sends to neighbour `nb` (its own boundary layer on that side).
    pub fn pack(&self, nb: &Neighbour) -> Vec<u8> {
        let layer = if nb.side == 0 { 1 } else { self.n };
        let mut out = Vec::with_capacity(self.n * self.n * 8);
        for c in self.face_cells(nb.dim, layer) {
            out.extend_from_slice(&self.cur[c].to_le_bytes());
        }
        out
    }

    /// Bytes of one face message.
    pub fn face_bytes(&self) -> usize {
        self.n * self.n * 8
    }

    /// Stores the face received from neighbour `nb` in the halo on that side.
    pub fn unpack(&mut self, nb: &Neighbour, data: &[u8]) {
        let layer = if nb.side == 0 { 0 } else { self.n + 1 };
        for (c, v) in self
            .face_cells(nb.dim, layer)
            .into_iter()
            .zip(data.chunks_exact(8))
        {
            self.cur[c] = f64::from_le_bytes(v.try_into().expect("chunks of 8"));
        }
    }

    /// One Jacobi step over the interior; halos without a neighbour stay 0 (a cold wall).
    pub fn step(&mut self) {
        let n = self.n;
        let m = n + 2;
        let (sx, sy, sz) = (1, m, m * m);
        for k in 1..=n {
            for j in 1..=n {
                for i in 1..=n {
                    let c = self.idx(i, j, k);
                    let u = &self.cur;
                    let sum = u[c - sx] + u[c + sx] + u[c - sy] + u[c + sy] + u[c - sz] + u[c + sz];
                    self.next[c] = u[c] + ALPHA * (sum - 6.0 * u[c]);
                }
            }
        }
        std::mem::swap(&mut self.cur, &mut self.next);
    }

    /// This block's part of the field checksum: an order-free sum (wrapping) of each cell's
    /// bits mixed with its global index, so that the whole field's checksum is the wrapping
    /// sum of the blocks' whatever the order they are added in.
    pub fn checksum(&self) -> u64 {
        let n = self.n;
        let mut h = 0u64;
        for k in 0..n {
            for j in 0..n {
                for i in 0..n {
                    let g = (self.origin[0] + i as u64)
                        + self.global[0]
                            * ((self.origin[1] + j as u64)
                                + self.global[1] * (self.origin[2] + k as u64));
                    let v = self.cur[self.idx(i + 1, j + 1, k + 1)].to_bits();
                    h = h.wrapping_add(mix(v ^ mix(g)));
                }
            }
        }
        h
    }

    /// Sum of this block's cells, `i` fastest (a float figure for people; the checksum is the
    /// exact comparison).
    pub fn sum(&self) -> f64 {
        self.interior().iter().sum()
    }
}

fn initial_value(g: [u64; 3], global: [u64; 3]) -> f64 {
    let ramp = ((g[0] * 7 + g[1] * 13 + g[2] * 29) % 17) as f64 / 16.0;
    let d2: f64 = (0..3)
        .map(|d| {
            let x = g[d] as f64 - global[d] as f64 / 2.0;
            x * x
        })
        .sum();
    let r = global.iter().copied().min().unwrap_or(1) as f64 / 4.0;
    ramp + if d2 <= r * r { 100.0 } else { 0.0 }
}

/// splitmix64's finaliser: spreads the bits so that summing does not cancel structure.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the decomposed stencil in one process (faces copied between blocks) and returns
    /// the wrapping sum of the block checksums.
    fn run(dims: &[u32], n: usize, iters: usize) -> u64 {
        let l = Layout::new(dims, false).unwrap();
        let mut blocks: Vec<Block> = (0..l.size()).map(|r| Block::initial(&l, r, n)).collect();
        for _ in 0..iters {
            let mut msgs = Vec::new();
            for r in 0..l.size() {
                for nb in l.neighbours(r) {
                    // The face r sends to nb arrives at nb on the opposite side.
                    let back = Neighbour {
                        dim: nb.dim,
                        side: 1 - nb.side,
                        rank: r,
                    };
                    msgs.push((nb.rank, back, blocks[r as usize].pack(&nb)));
                }
            }
            for (to, from, data) in msgs {
                blocks[to as usize].unpack(&from, &data);
            }
            blocks.iter_mut().for_each(Block::step);
        }
        blocks
            .iter()
            .fold(0u64, |h, b| h.wrapping_add(b.checksum()))
    }

    #[test]
    fn decomposition_does_not_change_the_result() {
        // The same 12x12x12 global grid as 1 block, 2x3x2 blocks of 6, ... 3x3x3 of 4.
        let one = run(&[1, 1, 1], 12, 15);
        assert_eq!(run(&[2, 2, 2], 6, 15), one);
        assert_eq!(run(&[3, 3, 3], 4, 15), one);
        assert_ne!(
            run(&[3, 3, 3], 4, 14),
            one,
            "the checksum sees one more step"
        );
    }

    #[test]
    fn interior_round_trips() {
        let l = Layout::new(&[2, 1, 1], false).unwrap();
        let mut b = Block::initial(&l, 1, 5);
        b.step();
        let c = Block::from_interior(&l, 1, 5, &b.interior());
        assert_eq!(c.checksum(), b.checksum());
    }
}
