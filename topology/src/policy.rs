//! The multi-job spare policy of the journal seed (section 6.1, Figure 22): small jobs get a
//! low-order spare shape, large jobs a higher-order one, so that the spare fraction stays inside
//! a band (2% to 5% in the seed) instead of falling with the job size.

use serde::{Deserialize, Serialize};

use crate::grid::format_shape;
use crate::shape::{AllocationUnit, Plan, SpareShape};
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
            let (limit, shape) = self
                .table
                .iter()
                .find(|(up, _)| up.is_none_or(|u| nodes <= u))
                .ok_or_else(|| {
                    Error::Invalid(format!(
                        "the auto table has no row for a job of {nodes} nodes"
                    ))
                })?;
            let plan = Plan::for_compute(compute, Some(shape), unit, network)?;
            let in_band = (self.min_fraction..=self.max_fraction).contains(&plan.fraction);
            let reason = match limit {
                Some(u) => format!("table row for jobs of up to {u} nodes"),
                None => "table row for the largest jobs".to_string(),
            };
            return Ok(AutoChoice {
                plan,
                in_band,
                reason,
            });
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
        // The most protective shape whose fraction stays under the band's top; else the
        // lightest one.
        if let Some(p) = plans.iter().rev().find(|p| p.fraction <= self.max_fraction) {
            let in_band = p.fraction >= self.min_fraction;
            return Ok(AutoChoice {
                reason: format!(
                    "most protective shape with at most {:.1}% spares",
                    self.max_fraction * 100.0
                ),
                plan: p.clone(),
                in_band,
            });
        }
        let p = plans
            .iter()
            .min_by(|a, b| a.fraction.total_cmp(&b.fraction))
            .expect("non-empty");
        Ok(AutoChoice {
            reason: format!(
                "every shape exceeds {:.1}% spares for a job this small; the lightest is used",
                self.max_fraction * 100.0
            ),
            plan: p.clone(),
            in_band: false,
        })
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
