//! Spare shapes `qD(r,s)`, a site's allocation unit, and the padded box of a job.
//!
//! `qD(r,s)` reserves `s` layers on one side of `r` of the `q` dimensions (journal seed,
//! section 2.1). A job asks for a compute shape; its box is the compute shape plus the spare
//! layers, rounded up to the site's allocation unit. Everything in the box that is not compute
//! is a spare: the shaped layers and the rounding gap alike.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::grid::{format_shape, MAX_DIMS};
use crate::Error;

/// Which side of a dimension the spare layers sit on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Highest coordinates (the default; compute starts at the low corner).
    High,
    /// Lowest coordinates (compute is pushed towards the high corner).
    Low,
}

/// A spare shape `qD(r,s)`, with the dimensions that carry spare layers and their side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpareShape {
    /// Number of network dimensions the shape is written for.
    pub q: usize,
    /// Number of dimensions extended with spare layers.
    pub r: usize,
    /// Thickness of each spare layer set.
    pub s: u32,
    /// The `r` extended dimensions, ascending.
    pub dims: Vec<usize>,
    /// Side of the spare layers.
    pub side: Side,
}

const DIM_LETTERS: [char; MAX_DIMS] = ['x', 'y', 'z', 'a', 'b', 'c'];

impl SpareShape {
    /// `qD(r,s)` on the default dimensions `0..r` and the high side.
    pub fn new(q: usize, r: usize, s: u32) -> Result<SpareShape, Error> {
        let shape = SpareShape {
            q,
            r,
            s,
            dims: (0..r).collect(),
            side: Side::High,
        };
        shape.validate(&format!("{q}D({r},{s})"))?;
        Ok(shape)
    }

    /// Parses `3D(2,1)`, optionally followed by `/dims=x,z` (or `/dims=0,2`) and `/side=low`.
    pub fn parse(spec: &str) -> Result<SpareShape, Error> {
        let bad = |why: &str| Error::SpareShape {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        let mut parts = spec.trim().split('/');
        let head = parts.next().unwrap_or_default();
        let (q, rest) = head
            .split_once(['D', 'd'])
            .ok_or_else(|| bad("expected qD(r,s) or qD:r,s, e.g. 3D(2,1) or 3D:2,1"))?;
        let q: usize = q
            .parse()
            .map_err(|_| bad("the number before 'D' must be the network's dimension count"))?;
        // `3D(2,1)`, or `3D:2,1`, which needs no quotes in a shell.
        let inner = rest
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .or_else(|| rest.strip_prefix(':'))
            .ok_or_else(|| bad("expected qD(r,s) or qD:r,s, e.g. 3D(2,1) or 3D:2,1"))?;
        let (r, s) = inner
            .split_once(',')
            .ok_or_else(|| bad("expected two numbers in the brackets, r and s"))?;
        let r: usize = r
            .trim()
            .parse()
            .map_err(|_| bad("r must be a whole number"))?;
        let s: u32 = s
            .trim()
            .parse()
            .map_err(|_| bad("s must be a whole number"))?;
        // q and r bound the dimension list built below: check them before it is allocated
        // (a huge r from a user's option once aborted slurmctld).
        // Same words as `validate`, which checks a shape built by hand.
        if q == 0 || q > MAX_DIMS {
            return Err(bad(&format!(
                "q = {q} but a network has 1 to {MAX_DIMS} dimensions"
            )));
        }
        if r == 0 || r > q {
            return Err(bad(&format!("r = {r} must be between 1 and q = {q}")));
        }
        let mut shape = SpareShape {
            q,
            r,
            s,
            dims: (0..r).collect(),
            side: Side::High,
        };
        for opt in parts {
            match opt.split_once('=') {
                Some(("dims", list)) => {
                    let mut dims = Vec::new();
                    for item in list.split(',') {
                        if dims.len() == MAX_DIMS {
                            return Err(bad(&format!("more than {MAX_DIMS} dimensions named")));
                        }
                        let item = item.trim();
                        let d = match item.parse::<usize>() {
                            Ok(d) => d,
                            Err(_) => DIM_LETTERS
                                .iter()
                                .position(|&c| item.len() == 1 && item.starts_with(c))
                                .ok_or_else(|| {
                                    bad(&format!(
                                        "'{item}' is not a dimension (0..5 or x,y,z,a,b,c)"
                                    ))
                                })?,
                        };
                        dims.push(d);
                    }
                    dims.sort_unstable();
                    shape.dims = dims;
                }
                Some(("side", "high")) => shape.side = Side::High,
                Some(("side", "low")) => shape.side = Side::Low,
                Some(("side", other)) => {
                    return Err(bad(&format!("side '{other}': use high or low")))
                }
                _ => {
                    return Err(bad(&format!(
                        "unknown option '{opt}': use /dims=x,y or /side=high|low"
                    )))
                }
            }
        }
        shape.validate(spec)?;
        Ok(shape)
    }

    fn validate(&self, spec: &str) -> Result<(), Error> {
        let bad = |why: String| Error::SpareShape {
            spec: spec.to_string(),
            why,
        };
        if self.q == 0 || self.q > MAX_DIMS {
            return Err(bad(format!(
                "q = {} but a network has 1 to {MAX_DIMS} dimensions",
                self.q
            )));
        }
        if self.r == 0 || self.r > self.q {
            return Err(bad(format!(
                "r = {} must be between 1 and q = {}",
                self.r, self.q
            )));
        }
        if self.s == 0 {
            return Err(bad("s must be at least 1".into()));
        }
        if self.dims.len() != self.r {
            return Err(bad(format!(
                "{} dimensions named for r = {}",
                self.dims.len(),
                self.r
            )));
        }
        if self.dims.windows(2).any(|w| w[0] == w[1]) {
            return Err(bad("a dimension is named twice".into()));
        }
        if let Some(&d) = self.dims.iter().find(|&&d| d >= self.q) {
            return Err(bad(format!("dimension {d} does not exist in {}D", self.q)));
        }
        Ok(())
    }

    /// Checks that the shape is written for a network of `dims` dimensions.
    pub fn check_dims(&self, dims: usize) -> Result<(), Error> {
        if self.q != dims {
            return Err(Error::SpareShape {
                spec: self.to_string(),
                why: format!(
                    "written for {}D but the network has {dims} dimensions (use {dims}D(r,s))",
                    self.q
                ),
            });
        }
        Ok(())
    }

    /// Whether dimension d carries spare layers.
    pub fn extends(&self, d: usize) -> bool {
        self.dims.contains(&d)
    }

    /// The seeds' spare fraction `R = 1 - (N^(1/q) - s)^r * N^((q-r)/q) / N` for a cube of
    /// `n` nodes (rounding ignored, as in the journal seed's formula).
    pub fn formula_fraction(&self, n: f64) -> f64 {
        let q = self.q as f64;
        let r = self.r as f64;
        let side = n.powf(1.0 / q);
        1.0 - (side - f64::from(self.s)).max(0.0).powf(r) * n.powf((q - r) / q) / n
    }
}

impl fmt::Display for SpareShape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}D({},{})", self.q, self.r, self.s)?;
        if self.dims != (0..self.r).collect::<Vec<_>>() {
            let names: Vec<String> = self
                .dims
                .iter()
                .map(|&d| DIM_LETTERS[d].to_string())
                .collect();
            write!(f, "/dims={}", names.join(","))?;
        }
        if self.side == Side::Low {
            write!(f, "/side=low")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for SpareShape {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpareShape::parse(s)
    }
}

/// The box sizes a site may hand out (journal seed, section 2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AllocationUnit {
    /// Any extent (one node is the unit).
    #[default]
    Node,
    /// Extents are multiples of these numbers, one per dimension (K computer: 12 each, the
    /// Tofu unit).
    Multiple(Vec<u32>),
    /// Extents are powers of two (Blue Gene/Q).
    PowerOfTwo,
    /// Boxes are made of whole blocks of this shape (Cray XK7 hands out 4x2x8 blocks). Sizes
    /// round like [`AllocationUnit::Multiple`]; unlike it, a placement must also start a box on
    /// a block boundary.
    Block(Vec<u32>),
    /// Boxes are exactly one of these shapes (the placements of Slurm's `topology/torus3d`).
    Shapes(Vec<Vec<u32>>),
}

impl AllocationUnit {
    /// Rounds a box up to the unit; `None` when no allowed shape holds it.
    pub fn round(&self, extents: &[u32]) -> Option<Vec<u32>> {
        // Saturating: a huge extent or unit must give a box that does not fit, not a wrap.
        let up = |x: u32, m: u32| x.div_ceil(m.max(1)).saturating_mul(m.max(1));
        match self {
            AllocationUnit::Node => Some(extents.to_vec()),
            AllocationUnit::Multiple(m) | AllocationUnit::Block(m) => Some(
                extents
                    .iter()
                    .enumerate()
                    .map(|(d, &x)| up(x, m.get(d).copied().unwrap_or(1)))
                    .collect(),
            ),
            AllocationUnit::PowerOfTwo => Some(
                extents
                    .iter()
                    .map(|&x| x.checked_next_power_of_two().unwrap_or(u32::MAX))
                    .collect(),
            ),
            AllocationUnit::Shapes(shapes) => shapes
                .iter()
                .filter(|s| s.len() == extents.len() && s.iter().zip(extents).all(|(a, b)| a >= b))
                .min_by_key(|s| product(s))
                .cloned(),
        }
    }

    /// Checks the unit against a network of these extents.
    pub fn check(&self, network: &[u32]) -> Result<(), Error> {
        let sizes: Vec<&Vec<u32>> = match self {
            AllocationUnit::Multiple(m) | AllocationUnit::Block(m) => vec![m],
            AllocationUnit::Shapes(s) => s.iter().collect(),
            _ => vec![],
        };
        for m in sizes {
            if m.len() != network.len() {
                return Err(Error::Invalid(format!(
                    "allocation unit has {} entries for a {}-dimensional network",
                    m.len(),
                    network.len()
                )));
            }
            if m.contains(&0) {
                return Err(Error::Invalid(
                    "allocation unit entries must be at least 1".into(),
                ));
            }
            // A unit larger than the network along a dimension allows no box at all: say so
            // when the file is loaded, not at the first job.
            if let Some(d) = (0..m.len()).find(|&d| m[d] > network[d]) {
                return Err(Error::Invalid(format!(
                    "allocation unit {} ({self}) does not fit the {} network: along dimension {d} it needs {} nodes and the network has {}, so no box of it can ever be allocated",
                    format_shape(m),
                    format_shape(network),
                    m[d],
                    network[d]
                )));
            }
        }
        // Blocks tile the network from its origin: a network that is not a whole number of
        // blocks has nodes no job can ever get.
        if let AllocationUnit::Block(b) = self {
            if let Some(d) = (0..b.len()).find(|&d| network[d].checked_rem(b[d]) != Some(0)) {
                return Err(Error::Invalid(format!(
                    "{self} do not divide the {} network: along dimension {d}, {} is not a multiple of {}, so the last {} node(s) of that dimension could never be allocated",
                    format_shape(network),
                    network[d],
                    b[d],
                    network[d] % b[d]
                )));
            }
        }
        Ok(())
    }
}

impl fmt::Display for AllocationUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllocationUnit::Node => write!(f, "node"),
            AllocationUnit::Multiple(m) => write!(f, "multiples of {}", format_shape(m)),
            AllocationUnit::PowerOfTwo => write!(f, "powers of two"),
            AllocationUnit::Block(b) => write!(f, "blocks of {}", format_shape(b)),
            AllocationUnit::Shapes(s) => {
                let v: Vec<String> = s.iter().map(|x| format_shape(x)).collect();
                write!(f, "one of {}", v.join(", "))
            }
        }
    }
}

/// A job box: compute shape, spare layers and rounding gap, with its counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The spare shape, `none` when the job has no shaped spares.
    pub spares: String,
    /// Extents of the box the job gets.
    #[serde(rename = "box")]
    pub box_extents: Vec<u32>,
    /// The job's logical grid.
    pub compute: Vec<u32>,
    /// Where the compute grid starts inside the box.
    pub compute_origin: Vec<u32>,
    /// Nodes in the box.
    pub box_nodes: u64,
    /// Compute nodes (ranks).
    pub compute_nodes: u64,
    /// All spares: shaped layers plus rounding gap.
    pub spare_nodes: u64,
    /// Spares that come from the shape's layers alone (before rounding).
    pub shaped_spares: u64,
    /// Spares that come from rounding the box up to the allocation unit.
    pub gap_spares: u64,
    /// Exact spare fraction, `spare_nodes / box_nodes`.
    pub fraction: f64,
    /// The seeds' formula for the same shape and box size (rounding ignored).
    pub formula_fraction: f64,
}

fn product(v: &[u32]) -> u64 {
    v.iter().fold(1u64, |p, &x| p.saturating_mul(u64::from(x)))
}

impl Plan {
    /// The box for a requested compute shape: compute plus spare layers, rounded to the unit,
    /// checked against the network.
    pub fn for_compute(
        compute: &[u32],
        shape: Option<&SpareShape>,
        unit: &AllocationUnit,
        network: &[u32],
    ) -> Result<Plan, Error> {
        let q = network.len();
        if compute.len() != q {
            return Err(Error::Invalid(format!(
                "compute shape {} has {} dimensions; the network has {q}",
                format_shape(compute),
                compute.len()
            )));
        }
        if compute.contains(&0) {
            return Err(Error::Invalid(format!(
                "compute shape {}: extents must be at least 1",
                format_shape(compute)
            )));
        }
        if let Some(shape) = shape {
            shape.check_dims(q)?;
        }
        let shaped: Vec<u32> = (0..q)
            .map(|d| match shape {
                Some(sh) if sh.extends(d) => compute[d].saturating_add(sh.s),
                _ => compute[d],
            })
            .collect();
        let spares = shape.map_or("none".to_string(), |s| s.to_string());
        let rounded = unit.round(&shaped).ok_or_else(|| {
            Error::Invalid(format!(
                "compute shape {} with spares {spares} needs a {} box, and the allocation unit ({unit}) has none that holds it",
                format_shape(compute),
                format_shape(&shaped)
            ))
        })?;
        if rounded.iter().zip(network).any(|(b, n)| b > n) {
            return Err(Error::DoesNotFit {
                compute: format_shape(compute),
                spares,
                needed: format_shape(&rounded),
                network: format_shape(network),
            });
        }
        let origin = (0..q)
            .map(|d| match shape {
                Some(sh) if sh.extends(d) && sh.side == Side::Low => sh.s,
                _ => 0,
            })
            .collect();
        Ok(Plan::counted(
            spares,
            shape,
            rounded,
            compute.to_vec(),
            origin,
            product(&shaped),
        ))
    }

    /// The plan of a whole box (the simulator's case): compute is the box minus the layers.
    pub fn for_box(box_extents: &[u32], shape: Option<&SpareShape>) -> Result<Plan, Error> {
        let q = box_extents.len();
        let mut compute = box_extents.to_vec();
        let mut origin = vec![0; q];
        if let Some(sh) = shape {
            sh.check_dims(q)?;
            for &d in &sh.dims {
                if sh.s >= box_extents[d] {
                    return Err(Error::SpareShape {
                        spec: sh.to_string(),
                        why: format!(
                            "s = {} leaves no compute node along dimension {d} of extent {}: s must be smaller than the extent",
                            sh.s, box_extents[d]
                        ),
                    });
                }
                compute[d] -= sh.s;
                if sh.side == Side::Low {
                    origin[d] = sh.s;
                }
            }
        }
        let spares = shape.map_or("none".to_string(), |s| s.to_string());
        Ok(Plan::counted(
            spares,
            shape,
            box_extents.to_vec(),
            compute,
            origin,
            product(box_extents),
        ))
    }

    fn counted(
        spares: String,
        shape: Option<&SpareShape>,
        box_extents: Vec<u32>,
        compute: Vec<u32>,
        compute_origin: Vec<u32>,
        shaped_box_nodes: u64,
    ) -> Plan {
        let box_nodes = product(&box_extents);
        let compute_nodes = product(&compute);
        let spare_nodes = box_nodes - compute_nodes;
        let shaped_spares = shaped_box_nodes - compute_nodes;
        Plan {
            spares,
            formula_fraction: shape.map_or(0.0, |s| s.formula_fraction(box_nodes as f64)),
            box_extents,
            compute,
            compute_origin,
            box_nodes,
            compute_nodes,
            spare_nodes,
            shaped_spares,
            gap_spares: spare_nodes - shaped_spares,
            fraction: spare_nodes as f64 / box_nodes as f64,
        }
    }
}

/// A compute shape of exactly `nodes` ranks for a network: the most cube-like factorisation
/// whose padded box fits, preferring the smallest box.
pub fn shape_for_nodes(
    nodes: u64,
    shape: Option<&SpareShape>,
    unit: &AllocationUnit,
    network: &[u32],
) -> Result<Plan, Error> {
    if nodes == 0 {
        return Err(Error::Invalid("a job needs at least one node".into()));
    }
    let q = network.len();
    let mut best: Option<(u64, u32, Plan)> = None;
    let mut current = vec![1u32; q];
    // Enumerate ordered factorisations with each factor within the network's extent.
    fn walk(
        d: usize,
        left: u64,
        cur: &mut Vec<u32>,
        network: &[u32],
        visit: &mut dyn FnMut(&[u32]),
    ) {
        if d + 1 == cur.len() {
            if left <= u64::from(network[d]) {
                cur[d] = left as u32;
                visit(cur);
            }
            return;
        }
        for f in 1..=u64::from(network[d]).min(left) {
            if left.is_multiple_of(f) {
                cur[d] = f as u32;
                walk(d + 1, left / f, cur, network, visit);
            }
        }
    }
    walk(0, nodes, &mut current, network, &mut |c| {
        if let Ok(plan) = Plan::for_compute(c, shape, unit, network) {
            let spread = c.iter().max().unwrap() - c.iter().min().unwrap();
            let better = match &best {
                None => true,
                Some((b, s, _)) => (plan.box_nodes, spread) < (*b, *s),
            };
            if better {
                best = Some((plan.box_nodes, spread, plan));
            }
        }
    });
    best.map(|(_, _, p)| p).ok_or_else(|| {
        Error::Invalid(format!(
            "no {q}-dimensional compute shape of {nodes} nodes fits the {} network with spares {}",
            format_shape(network),
            shape.map_or("none".to_string(), |s| s.to_string())
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_huge_extents_does_not_overflow() {
        // A user's --job-shape reaches the rounding: it overflowed u32 (a panic in debug
        // builds, a wrapped small box in release).
        let big = [u32::MAX, 3];
        assert_eq!(
            AllocationUnit::Multiple(vec![2, 2]).round(&big),
            Some(vec![u32::MAX, 4])
        );
        assert_eq!(
            AllocationUnit::PowerOfTwo.round(&[(1 << 31) + 1]),
            Some(vec![u32::MAX])
        );
        let e = Plan::for_compute(
            &[u32::MAX, u32::MAX, u32::MAX],
            Some(&SpareShape::parse("3D(3,4294967295)").unwrap()),
            &AllocationUnit::PowerOfTwo,
            &[12, 12, 12],
        )
        .unwrap_err();
        assert!(matches!(e, Error::DoesNotFit { .. }), "{e}");
    }

    #[test]
    fn parses_and_prints_shapes() {
        let s = SpareShape::parse("3D(2,1)").unwrap();
        assert_eq!((s.q, s.r, s.s), (3, 2, 1));
        assert_eq!(s.dims, vec![0, 1]);
        assert_eq!(s.to_string(), "3D(2,1)");
        // The spelling without brackets is the same shape.
        assert_eq!(SpareShape::parse("3D:2,1").unwrap(), s);
        let t = SpareShape::parse("3D(2,1)/dims=x,z/side=low").unwrap();
        assert_eq!(SpareShape::parse("3D:2,1/dims=x,z/side=low").unwrap(), t);
        assert_eq!(t.dims, vec![0, 2]);
        assert_eq!(t.side, Side::Low);
        assert_eq!(SpareShape::parse(&t.to_string()).unwrap(), t);
    }

    #[test]
    fn refuses_bad_shapes() {
        for bad in [
            "3D(4,1)",
            "3D(0,1)",
            "3D(2,0)",
            "7D(1,1)",
            "3D2,1",
            "3D(2)",
            "xD(1,1)",
            "3D(2,1)/dims=x",
            "3D(2,1)/dims=x,x",
            "3D(1,1)/dims=w",
            "3D(1,1)/side=up",
            "3D(1,1)/foo",
            // Refused before anything of size r is allocated (this aborted slurmctld).
            "3D(99999999999,1)",
            "3D(18446744073709551615,1)",
            "99999999999D(1,1)",
            "3D(1,1)/dims=0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0",
        ] {
            assert!(SpareShape::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn seeds_spare_counts() {
        let s = SpareShape::parse("3D(2,1)").unwrap();
        let p = Plan::for_box(&[12, 12, 12], Some(&s)).unwrap();
        assert_eq!(p.compute, vec![11, 11, 12]);
        assert_eq!(p.spare_nodes, 276);
        let p = Plan::for_box(&[24, 24, 24], Some(&s)).unwrap();
        assert_eq!(p.spare_nodes, 1128);
        // For a cube the formula is exact.
        assert!((p.formula_fraction - p.fraction).abs() < 1e-12);
    }

    #[test]
    fn rounding_gap_counts_as_free_spares() {
        let s = SpareShape::parse("3D(2,1)").unwrap();
        let unit = AllocationUnit::Multiple(vec![12, 12, 12]);
        let p = Plan::for_compute(&[11, 11, 11], Some(&s), &unit, &[24, 24, 24]).unwrap();
        assert_eq!(p.box_extents, vec![12, 12, 12]);
        assert_eq!(p.shaped_spares, 12 * 12 * 11 - 11 * 11 * 11);
        assert_eq!(p.gap_spares, 12 * 12);
        assert_eq!(p.spare_nodes, 1728 - 1331);
    }

    #[test]
    fn shapes_that_do_not_fit_are_refused() {
        let s = SpareShape::parse("3D(2,1)").unwrap();
        let err = Plan::for_compute(&[4, 3, 2], Some(&s), &AllocationUnit::Node, &[4, 4, 2]);
        assert!(matches!(err, Err(Error::DoesNotFit { .. })));
        assert!(Plan::for_box(&[12, 12, 12], Some(&SpareShape::new(3, 1, 12).unwrap())).is_err());
    }

    #[test]
    fn power_of_two_and_block_units() {
        assert_eq!(
            AllocationUnit::PowerOfTwo.round(&[3, 5, 8]),
            Some(vec![4, 8, 8])
        );
        assert_eq!(
            AllocationUnit::Block(vec![4, 2, 8]).round(&[5, 2, 9]),
            Some(vec![8, 2, 16])
        );
        let placements = AllocationUnit::Shapes(vec![vec![2, 2, 2], vec![4, 4, 2], vec![2, 2, 1]]);
        assert_eq!(placements.round(&[2, 2, 1]), Some(vec![2, 2, 1]));
        assert_eq!(placements.round(&[3, 2, 1]), Some(vec![4, 4, 2]));
        assert_eq!(placements.round(&[5, 1, 1]), None);
    }

    #[test]
    fn node_counts_become_cube_like_shapes() {
        let s = SpareShape::parse("3D(2,1)").unwrap();
        let p = shape_for_nodes(18, Some(&s), &AllocationUnit::Node, &[4, 4, 2]).unwrap();
        assert_eq!(p.compute, vec![3, 3, 2]);
        assert_eq!(p.box_extents, vec![4, 4, 2]);
        assert!(shape_for_nodes(17, Some(&s), &AllocationUnit::Node, &[4, 4, 2]).is_err());
    }
}
