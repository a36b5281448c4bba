//! The multi-job spare policy of the journal seed (section 6.1, Figure 22): small jobs get a
//! low-order spare shape, large jobs a higher-order one, so that the spare fraction stays inside
//! a band (2% to 5% in the seed) instead of falling with the job size.

use serde::{Deserialize, Serialize};

use crate::grid::format_shape;
use crate::shape::{shape_for_nodes, AllocationUnit, Plan, SpareShape};
use crate::Error;

/// One row of a size-to-shape table: jobs of up to `up_to_nodes` compute nodes get `spares`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AutoRule {
    /// Largest compute node count this row applies to; `None` for every larger job.
    #[serde(default)]
    pub up_to_nodes: Option<u64>,
    /// The spare shape, e.g. `3D(2,1)`.
    pub spares: String,
}

/// How `--spares=auto` picks a spare shape.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoPolicy {
    /// Lowest wanted spare fraction (0.02 in the seed).
    pub min_fraction: f64,
    /// Highest allowed spare fraction (0.05 in the seed).
    pub max_fraction: f64,
    /// An explicit table; when empty, shapes are chosen from the band.
    pub table: Vec<(Option<u64>, SpareShape)>,
}

/// The choice `auto` made for one job, with the reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoChoice {
    /// The plan of the chosen shape.
    pub plan: Plan,
    /// Whether its fraction lies inside the band.
    pub in_band: bool,
    /// Why this shape.
    pub reason: String,
}

impl AutoPolicy {
    /// The seed's band, 2% to 5%, with no table.
    pub fn seed_band() -> AutoPolicy {
        AutoPolicy {
            min_fraction: 0.02,
            max_fraction: 0.05,
            table: Vec::new(),
        }
    }

    /// A policy from a band and table rows (as a site's policy file gives them).
    pub fn new(min: f64, max: f64, rules: &[AutoRule]) -> Result<AutoPolicy, Error> {
        if !(0.0..1.0).contains(&min) || !(0.0..1.0).contains(&max) || min > max {
            return Err(Error::Invalid(format!(
                "spare fraction band {min}..{max}: give 0 <= min <= max < 1"
            )));
        }
        let mut table = Vec::new();
        for r in rules {
            table.push((r.up_to_nodes, SpareShape::parse(&r.spares)?));
        }
        if table.windows(2).any(|w| match (w[0].0, w[1].0) {
            (Some(a), Some(b)) => a >= b,
            (None, _) => true,
            _ => false,
        }) {
            return Err(Error::Invalid(
                "auto table rows must have increasing up_to_nodes, with the open row last".into(),
            ));
        }
        Ok(AutoPolicy {
            min_fraction: min,
            max_fraction: max,
            table,
        })
    }

    /// Candidate shapes for q dimensions in order of protection: qD(1,1), qD(2,1), ...,
    /// qD(q,1). Like the seed, only single layers: thickness does not change how sliding
    /// behaves (journal seed, section 2.1).
    pub fn candidates(q: usize) -> Vec<SpareShape> {
        (1..=q)
            .map(|r| SpareShape::new(q, r, 1).expect("valid"))
            .collect()
    }

    /// The spare shape for a compute shape on a network.
    pub fn choose(
        &self,
        compute: &[u32],
        unit: &AllocationUnit,
        network: &[u32],
    ) -> Result<AutoChoice, Error> {
        let q = network.len();
        let nodes: u64 = compute.iter().map(|&c| u64::from(c)).product();
        if !self.table.is_empty() {
            let (limit, shape) = self.row(nodes)?;
            let plan = Plan::for_compute(compute, Some(shape), unit, network)?;
            return Ok(self.table_choice(plan, limit));
        }
        let plans: Vec<Plan> = Self::candidates(q)
            .iter()
            .filter_map(|s| Plan::for_compute(compute, Some(s), unit, network).ok())
            .collect();
        if plans.is_empty() {
            return Err(Error::Invalid(format!(
                "no spare shape fits compute shape {} on the {} network",
                format_shape(compute),
                format_shape(network)
            )));
        }
        Ok(self.choose_in_band(&plans))
    }

    /// The spare shape and the compute shape for a job of `nodes` compute nodes (`-N`
    /// without `--job-shape`). The table's row is found by the node count alone; the compute
    /// shape is then [`shape_for_nodes`]' rule (an exact factorisation of `nodes` whose padded
    /// box fits: the smallest box, then the most cube-like). Without a table, each candidate
    /// shape gets its own compute shape and the band decides as in [`AutoPolicy::choose`].
    /// `nodes` must already be checked against the site's budget: the work is bounded by the
    /// network's size, not by `nodes`.
    pub fn choose_for_nodes(
        &self,
        nodes: u64,
        unit: &AllocationUnit,
        network: &[u32],
    ) -> Result<AutoChoice, Error> {
        let q = network.len();
        if !self.table.is_empty() {
            let (limit, shape) = self.row(nodes)?;
            let plan = shape_for_nodes(nodes, Some(shape), unit, network)?;
            return Ok(self.table_choice(plan, limit));
        }
        let plans: Vec<Plan> = Self::candidates(q)
            .iter()
            .filter_map(|s| shape_for_nodes(nodes, Some(s), unit, network).ok())
            .collect();
        if plans.is_empty() {
            return Err(Error::Invalid(format!(
                "no spare shape fits a job of {nodes} compute nodes on the {} network (no exact {q}-dimensional factorisation of {nodes} whose box with spares fits; give --job-shape or another -N)",
                format_shape(network)
            )));
        }
        Ok(self.choose_in_band(&plans))
    }

    /// The table row for a job of `nodes` compute nodes.
    fn row(&self, nodes: u64) -> Result<(Option<u64>, &SpareShape), Error> {
        self.table
            .iter()
            .find(|(up, _)| up.is_none_or(|u| nodes <= u))
            .map(|(up, s)| (*up, s))
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "the auto table has no row for a job of {nodes} nodes"
                ))
            })
    }

    fn table_choice(&self, plan: Plan, limit: Option<u64>) -> AutoChoice {
        let in_band = (self.min_fraction..=self.max_fraction).contains(&plan.fraction);
        let reason = match limit {
            Some(u) => format!("table row for jobs of up to {u} nodes"),
            None => "table row for the largest jobs".to_string(),
        };
        AutoChoice {
            plan,
            in_band,
            reason,
        }
    }

    /// The band's choice among the plans of the candidate shapes (lightest first).
    fn choose_in_band(&self, plans: &[Plan]) -> AutoChoice {
        // The most protective shape whose fraction stays under the band's top; else the
        // lightest one.
        if let Some(p) = plans.iter().rev().find(|p| p.fraction <= self.max_fraction) {
            let in_band = p.fraction >= self.min_fraction;
            return AutoChoice {
                reason: format!(
                    "most protective shape with at most {:.1}% spares",
                    self.max_fraction * 100.0
                ),
                plan: p.clone(),
                in_band,
            };
        }
        let p = plans
            .iter()
            .min_by(|a, b| a.fraction.total_cmp(&b.fraction))
            .expect("callers pass at least one plan");
        AutoChoice {
            reason: format!(
                "every shape exceeds {:.1}% spares for a job this small; the lightest is used",
                self.max_fraction * 100.0
            ),
            plan: p.clone(),
            in_band: false,
        }
    }

    /// The table this policy gives for cubic jobs of side `sides` (Figure 22 of the seed).
    pub fn table_for_cubes(&self, q: usize, sides: &[u32]) -> Vec<(u32, AutoChoice)> {
        sides
            .iter()
            .filter_map(|&n| {
                let compute = vec![n; q];
                let network = vec![n.saturating_mul(2).max(n + 4); q];
                self.choose(&compute, &AllocationUnit::Node, &network)
                    .ok()
                    .map(|c| (n, c))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn larger_jobs_get_higher_order_shapes_inside_the_band() {
        let p = AutoPolicy::seed_band();
        let sides: Vec<u32> = (20..=100).step_by(10).collect();
        let rows = p.table_for_cubes(3, &sides);
        let mut last_r = 0;
        for (n, c) in &rows {
            let shape = SpareShape::parse(&c.plan.spares).unwrap();
            assert!(
                shape.r >= last_r,
                "order must not fall with size (side {n})"
            );
            last_r = shape.r;
            assert!(
                c.plan.fraction <= 0.05 + 1e-12,
                "side {n}: {}",
                c.plan.fraction
            );
        }
        // Large jobs are in the band with all three sides as spares.
        let (_, big) = rows.last().unwrap();
        assert!(big.in_band);
        assert_eq!(big.plan.spares, "3D(3,1)");
    }

    #[test]
    fn small_jobs_get_the_lightest_shape_and_are_flagged() {
        let c = AutoPolicy::seed_band()
            .choose(&[3, 3, 2], &AllocationUnit::Node, &[4, 4, 2])
            .unwrap();
        assert!(!c.in_band);
        assert_eq!(c.plan.spares, "3D(1,1)");
    }

    #[test]
    fn node_counts_get_a_shape_and_a_compute_grid() {
        // -N 1331 on the K computer's network with the seeds' 3D(2,1): an 11x11x11 grid.
        let rules = [AutoRule {
            up_to_nodes: None,
            spares: "3D(2,1)".into(),
        }];
        let p = AutoPolicy::new(0.0, 0.5, &rules).unwrap();
        let c = p
            .choose_for_nodes(1331, &AllocationUnit::Node, &[12, 12, 12])
            .unwrap();
        assert_eq!(c.plan.compute, vec![11, 11, 11]);
        assert_eq!(c.plan.box_extents, vec![12, 12, 11]);
        assert_eq!(c.plan.spares, "3D(2,1)");
        // The test cluster's job: 18 nodes become 3x3x2 in the 4x4x2 torus.
        let c = p
            .choose_for_nodes(18, &AllocationUnit::Node, &[4, 4, 2])
            .unwrap();
        assert_eq!(c.plan.compute, vec![3, 3, 2]);
        assert_eq!(c.plan.box_nodes, 32);
        // A prime count has no box with room for spares: refused with what to do.
        let e = p
            .choose_for_nodes(17, &AllocationUnit::Node, &[4, 4, 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("17"), "{e}");
        // Without a table every candidate gets its own grid; the band decides.
        let band = AutoPolicy::new(0.0, 0.5, &[]).unwrap();
        let c = band
            .choose_for_nodes(18, &AllocationUnit::Node, &[4, 4, 2])
            .unwrap();
        assert_eq!(c.plan.compute, vec![3, 3, 2]);
        assert_eq!(c.plan.spares, "3D(2,1)");
        let e = band
            .choose_for_nodes(32, &AllocationUnit::Node, &[4, 4, 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("give --job-shape or another -N"), "{e}");
        // The unit rounds the box: multiples of 2 in x and y.
        let unit = AllocationUnit::Multiple(vec![2, 2, 1]);
        let c = p.choose_for_nodes(4, &unit, &[4, 4, 2]).unwrap();
        assert_eq!(c.plan.compute, vec![1, 2, 2]);
        assert_eq!(c.plan.box_extents, vec![2, 4, 2]);
    }

    #[test]
    fn explicit_tables_are_followed_and_checked() {
        let rules = vec![
            AutoRule {
                up_to_nodes: Some(100),
                spares: "3D(1,1)".into(),
            },
            AutoRule {
                up_to_nodes: None,
                spares: "3D(2,1)".into(),
            },
        ];
        let p = AutoPolicy::new(0.0, 0.5, &rules).unwrap();
        let c = p
            .choose(&[3, 3, 2], &AllocationUnit::Node, &[4, 4, 2])
            .unwrap();
        assert_eq!(c.plan.spares, "3D(1,1)");
        let c = p
            .choose(&[11, 11, 12], &AllocationUnit::Node, &[12, 12, 12])
            .unwrap();
        assert_eq!(c.plan.spares, "3D(2,1)");
        let backwards = vec![rules[1].clone(), rules[0].clone()];
        assert!(AutoPolicy::new(0.0, 0.5, &backwards).is_err());
        assert!(AutoPolicy::new(0.5, 0.1, &rules).is_err());
    }
}
