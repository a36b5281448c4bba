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

/// The `failure_rate:` section of a site policy: spares sized by how many nodes fail over
/// the job's time limit (journal seed, section 6.1: spares in proportion to nodes x time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureRateSpec {
    /// Mean time between failures of one node, in hours.
    #[serde(default)]
    pub node_mtbf_hours: Option<f64>,
    /// Or the failure rate itself, failures per node-hour.
    #[serde(default)]
    pub failures_per_node_hour: Option<f64>,
    /// The probability, at least, that the job keeps enough spares over its time limit.
    pub target: f64,
    /// Time limit assumed for jobs submitted without `--time`, in hours.
    #[serde(default)]
    pub default_hours: Option<f64>,
}

/// Spare sizing by failure rate, checked.
///
/// The model: every node of the box (compute and spare) fails independently at `rate` per
/// hour, so the number of failures over `hours` is Poisson with mean
/// `box nodes x rate x hours` (the dead nodes' own rate is kept: slightly pessimistic). A
/// failed spare is a spare lost, a failed compute node takes a spare; with a method that
/// ends in 0D every failure is substituted while a free spare is left, so the job keeps its
/// spares while failures <= spare nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureRate {
    /// Failures per node-hour.
    pub rate: f64,
    /// Wanted probability of keeping enough spares.
    pub target: f64,
    /// Hours for jobs without a time limit.
    pub default_hours: Option<f64>,
}

/// Longest time limit considered, in hours (Slurm's largest finite limit is about 8000
/// years; beyond a century the sizing means nothing).
pub const MAX_HOURS: f64 = 24.0 * 365.25 * 100.0;

impl FailureRate {
    /// Checks a policy's section: exactly one of the two rates, a target in (0, 1).
    pub fn from_spec(spec: &FailureRateSpec) -> Result<FailureRate, Error> {
        let rate = match (spec.node_mtbf_hours, spec.failures_per_node_hour) {
            (Some(m), None) if m.is_finite() && m > 0.0 => 1.0 / m,
            (None, Some(r)) if r.is_finite() && r > 0.0 => r,
            (Some(_), Some(_)) | (None, None) => {
                return Err(Error::Invalid(
                    "give one of node_mtbf_hours and failures_per_node_hour".into(),
                ))
            }
            (Some(m), None) => {
                return Err(Error::Invalid(format!(
                    "node_mtbf_hours: {m} is not a positive number of hours"
                )))
            }
            (None, Some(r)) => {
                return Err(Error::Invalid(format!(
                    "failures_per_node_hour: {r} is not a positive rate"
                )))
            }
        };
        if !(spec.target > 0.0 && spec.target < 1.0) {
            return Err(Error::Invalid(format!(
                "target: {} is not a probability above 0 and below 1 (e.g. 0.99)",
                spec.target
            )));
        }
        if let Some(h) = spec.default_hours {
            if !(h > 0.0 && h <= MAX_HOURS) {
                return Err(Error::Invalid(format!(
                    "default_hours: {h} is not between 0 and {MAX_HOURS} hours"
                )));
            }
        }
        Ok(FailureRate {
            rate,
            target: spec.target,
            default_hours: spec.default_hours,
        })
    }

    /// Expected failures among `nodes` nodes over `hours`.
    pub fn expected_failures(&self, nodes: u64, hours: f64) -> f64 {
        nodes as f64 * self.rate * hours
    }

    /// Probability that a plan keeps enough spares over `hours` (see the type's notes).
    pub fn keep_probability(&self, plan: &Plan, hours: f64) -> f64 {
        poisson_at_most(
            plan.spare_nodes,
            self.expected_failures(plan.box_nodes, hours),
        )
    }

    /// The smallest box among the plans of `candidates` (fewest nodes, then fewest spare
    /// dimensions) whose keep probability meets the target; if none does, the most
    /// protective plan, flagged out of band. `plan_of` plans a candidate (and may refuse it).
    pub fn choose(
        &self,
        candidates: &[SpareShape],
        hours: f64,
        plan_of: impl Fn(&SpareShape) -> Result<Plan, Error>,
    ) -> Result<AutoChoice, Error> {
        self.choose_with(candidates, hours, plan_of, |p| {
            self.keep_probability(p, hours)
        })
    }

    /// [`FailureRate::choose`] with another probability of keeping the job alive, e.g.
    /// [`poisson_weighted`] over the simulator's survival curve for a method that can fail
    /// before its spares run out.
    pub fn choose_with(
        &self,
        candidates: &[SpareShape],
        hours: f64,
        plan_of: impl Fn(&SpareShape) -> Result<Plan, Error>,
        keep_of: impl Fn(&Plan) -> f64,
    ) -> Result<AutoChoice, Error> {
        let mut plans: Vec<(Plan, f64, usize)> = candidates
            .iter()
            .filter_map(|s| plan_of(s).ok().map(|p| (p, s.r)))
            .map(|(p, r)| {
                let keep = keep_of(&p);
                (p, keep, r)
            })
            .collect();
        if plans.is_empty() {
            return Err(Error::Invalid(
                "no spare shape fits the job on this network".into(),
            ));
        }
        plans.sort_by_key(|p| (p.0.box_nodes, p.2));
        let expected = |p: &Plan| self.expected_failures(p.box_nodes, hours);
        if let Some((p, keep, _)) = plans.iter().find(|(_, k, _)| *k >= self.target) {
            return Ok(AutoChoice {
                reason: format!(
                    "failure rate: the smallest box that keeps its spares over {hours} h with probability {:.2}% (target {:.2}%; {:.3} failures expected among {} nodes)",
                    keep * 100.0,
                    self.target * 100.0,
                    expected(p),
                    p.box_nodes
                ),
                plan: p.clone(),
                in_band: true,
            });
        }
        let (p, keep, _) = plans
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("non-empty");
        Ok(AutoChoice {
            reason: format!(
                "failure rate: no shape reaches the target {:.2}% over {hours} h; the most protective keeps its spares with probability {:.2}% ({:.3} failures expected among {} nodes)",
                self.target * 100.0,
                keep * 100.0,
                expected(p),
                p.box_nodes
            ),
            plan: p.clone(),
            in_band: false,
        })
    }
}

/// Shapes failure-rate sizing tries when the site lists none: qD(r,s) for every r and
/// s = 1..=3 (thicker layers for long jobs on large boxes).
pub fn failure_rate_candidates(q: usize) -> Vec<SpareShape> {
    (1..=3)
        .flat_map(|s| (1..=q).filter_map(move |r| SpareShape::new(q, r, s).ok()))
        .collect()
}

/// The probability that a job survives failures that are Poisson with mean `mean` when it
/// survives `k` failures with probability `survival[k]` (the simulator's survival curve,
/// `survival[0]` for no failure; beyond the curve the job is lost). Summed in logarithms;
/// as many terms as the curve has.
pub fn poisson_weighted(mean: f64, survival: &[f64]) -> f64 {
    if !(mean.is_finite() && mean >= 0.0) {
        return 0.0;
    }
    if mean == 0.0 {
        return survival.first().copied().unwrap_or(0.0);
    }
    let ln_mean = mean.ln();
    let mut log_term = -mean;
    let mut sum = 0.0;
    for (k, s) in survival.iter().enumerate() {
        if k > 0 {
            log_term += ln_mean - (k as f64).ln();
        }
        sum += log_term.exp() * s;
    }
    sum.clamp(0.0, 1.0)
}

/// P(X <= k) for X Poisson with mean `mean`, summed in logarithms (no underflow for large
/// means). The sum stops where the terms no longer count: at most about
/// `mean + 40 sqrt(mean) + 50` terms whatever `k`.
pub fn poisson_at_most(k: u64, mean: f64) -> f64 {
    if !(mean.is_finite() && mean >= 0.0) {
        return 0.0;
    }
    if mean == 0.0 {
        return 1.0;
    }
    let last = (mean + 40.0 * mean.sqrt() + 50.0).ceil();
    if (k as f64) > last {
        return 1.0;
    }
    let ln_mean = mean.ln();
    let mut log_term = -mean;
    let mut sum = log_term.exp();
    for i in 1..=k {
        log_term += ln_mean - (i as f64).ln();
        sum += log_term.exp();
    }
    sum.min(1.0)
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
    fn poisson_sums_match_closed_forms() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(poisson_at_most(0, 1.0), (-1.0f64).exp()));
        assert!(close(poisson_at_most(1, 2.0), 3.0 * (-2.0f64).exp()));
        assert!(close(
            poisson_at_most(2, 0.5),
            (1.0 + 0.5 + 0.125) * (-0.5f64).exp()
        ));
        assert_eq!(poisson_at_most(5, 0.0), 1.0);
        // Large means do not underflow: P(X <= mean) is close to one half.
        let half = poisson_at_most(10_000, 10_000.0);
        assert!((half - 0.5).abs() < 0.01, "{half}");
        // A huge k stops early and is certain.
        assert_eq!(poisson_at_most(u64::MAX, 3.0), 1.0);
        assert_eq!(poisson_at_most(3, f64::NAN), 0.0);
    }

    #[test]
    fn survival_curves_weigh_the_poisson_terms() {
        // A method that survives every failure up to 3 is the plain sum up to 3.
        let all = [1.0; 4];
        assert!((poisson_weighted(2.0, &all) - poisson_at_most(3, 2.0)).abs() < 1e-12);
        // One that dies at the second failure for half the sequences.
        let half = [1.0, 1.0, 0.5, 0.5];
        let m: f64 = 2.0;
        let want = (-m).exp() * (1.0 + m + 0.5 * m * m / 2.0 + 0.5 * m * m * m / 6.0);
        assert!((poisson_weighted(m, &half) - want).abs() < 1e-12);
        assert_eq!(poisson_weighted(0.0, &half), 1.0);
        assert_eq!(poisson_weighted(f64::INFINITY, &half), 0.0);
    }

    #[test]
    fn failure_rates_pick_the_smallest_box_that_meets_the_target() {
        let spec = |mtbf: f64, target: f64| FailureRateSpec {
            node_mtbf_hours: Some(mtbf),
            failures_per_node_hour: None,
            target,
            default_hours: Some(24.0),
        };
        let net = [12u32, 12, 12];
        let compute = [11u32, 11, 11];
        let plan_of =
            |s: &SpareShape| Plan::for_compute(&compute, Some(s), &AllocationUnit::Node, &net);
        let candidates = failure_rate_candidates(3);
        // Reliable nodes, a day: 3D(1,1) (121 spares) keeps its spares with certainty.
        let f = FailureRate::from_spec(&spec(100_000.0, 0.99)).unwrap();
        let c = f.choose(&candidates, 24.0, plan_of).unwrap();
        assert_eq!(c.plan.spares, "3D(1,1)");
        assert!(c.in_band);
        // Very unreliable nodes (MTBF 2 h) for 10 h: about 7000 failures expected; no shape
        // suffices, the most protective is used and the reason says so.
        let f = FailureRate::from_spec(&spec(2.0, 0.99)).unwrap();
        let c = f.choose(&candidates, 10.0, plan_of).unwrap();
        assert!(!c.in_band);
        assert!(
            c.reason.contains("no shape reaches the target"),
            "{}",
            c.reason
        );
        // A 1331-node job on 1000 h nodes for 24 h: about 32 failures expected in 1452
        // nodes. 3D(1,1) has 121 spares: enough. The probability is the Poisson sum.
        let f = FailureRate::from_spec(&spec(1000.0, 0.999)).unwrap();
        let c = f.choose(&candidates, 24.0, plan_of).unwrap();
        assert_eq!(c.plan.spares, "3D(1,1)");
        let mean = c.plan.box_nodes as f64 * 24.0 / 1000.0;
        assert!((f.keep_probability(&c.plan, 24.0) - poisson_at_most(121, mean)).abs() < 1e-15);
        // Few spares for a long job: a 2x2x2 job on the 4x4x2 torus, 5000 h nodes, a year.
        let small = |s: &SpareShape| {
            Plan::for_compute(&[2, 2, 2], Some(s), &AllocationUnit::Node, &[4, 4, 2])
        };
        let f = FailureRate::from_spec(&spec(5000.0, 0.9)).unwrap();
        let c = f.choose(&candidates, 24.0, small).unwrap();
        assert_eq!(c.plan.spares, "3D(1,1)");
        let c = f.choose(&candidates, 8760.0, small).unwrap();
        assert_ne!(c.plan.spares, "3D(1,1)", "{}", c.reason);
        assert!(c.plan.spare_nodes > 4);
    }

    #[test]
    fn failure_rate_sections_are_checked() {
        let mut spec = FailureRateSpec {
            node_mtbf_hours: Some(1000.0),
            failures_per_node_hour: Some(0.001),
            target: 0.99,
            default_hours: None,
        };
        assert!(FailureRate::from_spec(&spec)
            .unwrap_err()
            .to_string()
            .contains("give one of"));
        spec.node_mtbf_hours = None;
        assert_eq!(FailureRate::from_spec(&spec).unwrap().rate, 0.001);
        spec.target = 1.0;
        assert!(FailureRate::from_spec(&spec)
            .unwrap_err()
            .to_string()
            .contains("target: 1 is not a probability"));
        spec.target = 0.9;
        spec.failures_per_node_hour = Some(-1.0);
        assert!(FailureRate::from_spec(&spec).is_err());
        spec.failures_per_node_hour = Some(f64::NAN);
        assert!(FailureRate::from_spec(&spec).is_err());
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
