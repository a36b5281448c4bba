//! Failure campaigns: the seeds' simulations, reproducible and fast.
//!
//! A campaign fails nodes of one job box one at a time, drawn uniformly among the nodes still
//! alive (spares and vacated nodes too, as the seeds did), under one or more substitution
//! methods, and records after every failure whether the job survived, which method was used
//! and the traffic figures. Every method of a sample sees the same failure sequence.
//!
//! Sample `j` draws its failures from its own random stream (`seed`, stream `j`) and all
//! figures are integer sums, so a campaign gives the same numbers whatever the thread count,
//! and shards (`j mod n == i`) merge into exactly the single run. That also lets a thread run
//! its samples in any order: it runs them sorted by their first failed node. Samples that
//! fail the same node first share that substitution, and among them those whose second
//! failure slides the whole box at the same place share that slide too (on the seeds' box,
//! two 3D slides of most ranks).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::grid::format_shape;
use crate::map::{NodeState, SpareMap};
use crate::sliding::{
    carry_out, choose, fail, fail_with, Choice, Handled, Method, Scratch, ZeroRule,
};
use crate::traffic::{self, Pattern};
use crate::Error;

/// How traffic is computed after each failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Link loads updated for the moved ranks' messages only.
    Incremental,
    /// Every route recomputed after every failure (the reference, for benchmarks).
    Full,
    /// The previous incremental engine ([`crate::loads_reference`]): the same figures as
    /// `Incremental`, kept to measure it against.
    Reference,
}

/// What a campaign runs: the job box, the stencil, the methods and the failures.
#[derive(Debug, Clone)]
pub struct Campaign {
    /// The failure-free map of the job.
    pub map: SpareMap,
    /// Stencil pattern.
    pub pattern: Pattern,
    /// Whether the stencil wraps around the logical grid.
    pub periodic: bool,
    /// Methods compared on the same failure sequences.
    pub methods: Vec<Method>,
    /// Failures per sample.
    pub failures: u32,
    /// Traffic engine.
    pub engine: Engine,
    /// Keep this many worst maps (by collisions) at each failure count of `keep_at`.
    pub keep_worst: usize,
    /// Failure counts at which the worst maps are kept.
    pub keep_at: Vec<u32>,
    /// What the results say about the job (network, spares, ...).
    pub info: CampaignInfo,
}

/// The description of a campaign carried in its results; merging requires equal ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CampaignInfo {
    /// Topology name, when the box came from a topology file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// The spare shape.
    pub spares: String,
    /// Extents of the job box.
    #[serde(rename = "box")]
    pub box_extents: Vec<u32>,
    /// Ring flag per box dimension.
    pub wrap: Vec<bool>,
    /// The logical grid.
    pub compute: Vec<u32>,
    /// The stencil pattern.
    pub pattern: String,
    /// Whether the stencil wraps.
    pub periodic: bool,
    /// Failures per sample.
    pub failures: u32,
    /// Random samples asked for (0 for an exhaustive campaign).
    pub samples: u64,
    /// Seed of the random streams.
    pub seed: u64,
    /// Whether every ordered failure sequence was enumerated.
    pub exhaustive: bool,
    /// Worst maps kept per failure count.
    #[serde(default)]
    pub keep_worst: usize,
    /// Failure counts at which worst maps are kept.
    #[serde(default)]
    pub keep_at: Vec<u32>,
    /// Re-mapping of each alive case at some failure counts, if asked (results written before
    /// re-mapping existed have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remap: Option<RemapAt>,
}

/// Re-mapping at some failure counts: each alive case's map is re-mapped there by
/// [`crate::remap::remap`] as an evaluation on a copy; the failures that follow slide on the
/// unchanged map.
///
/// The search runs on an iteration cap, never on wall time, with a seed drawn from the
/// campaign's seed, the sample and the failure count ([`remap_seed`]): the figures stay the
/// same whatever the threads and shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemapAt {
    /// Failure counts, ascending, each from 1 to the campaign's failures.
    pub at: Vec<u32>,
    /// Most ranks a re-map may move (`None`: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_moved: Option<u32>,
    /// Candidate moves each re-map evaluates.
    pub iterations: u64,
}

/// The seed of the re-map of `sample` (or of the failure prefix's ordinal, exhaustive) at
/// `failed` failures: splitmix64 steps over the three, so that neighbouring samples get
/// unrelated searches.
pub fn remap_seed(seed: u64, sample: u64, failed: u32) -> u64 {
    fn splitmix(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    splitmix(splitmix(splitmix(seed) ^ sample) ^ u64::from(failed))
}

/// The figures of one method's maps re-mapped at one failure count, over the cases that
/// sliding kept alive there (the same cases as that step's [`StepStats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemapStats {
    /// Failures before the re-map.
    pub failed: u32,
    /// Traffic of the re-mapped maps (`alive`: the cases re-mapped; no selections or losses).
    pub traffic: StepStats,
    /// Sum over the cases of the ranks that end on another node.
    pub sum_moved: u64,
    /// Most ranks moved in one case.
    pub max_moved: u32,
    /// Cases whose largest link load the re-map lowered.
    pub improved: u64,
}

impl RemapStats {
    /// Mean ranks moved per re-mapped case.
    pub fn mean_moved(&self) -> Option<f64> {
        (self.traffic.alive > 0).then(|| ratio(self.sum_moved, self.traffic.alive))
    }

    fn add(&mut self, o: &RemapStats) {
        self.traffic.add(&o.traffic);
        self.sum_moved += o.sum_moved;
        self.max_moved = self.max_moved.max(o.max_moved);
        self.improved += o.improved;
    }
}

/// The figures of one method after a given number of failures.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepStats {
    /// Failures so far.
    pub failed: u32,
    /// Cases at this step: samples, or ordered failure sequences when exhaustive.
    pub cases: u64,
    /// Cases in which the job is still alive.
    pub alive: u64,
    /// `histogram[c]`: alive cases whose largest link load is c.
    pub histogram: Vec<u64>,
    /// Sum of the largest link loads of alive cases.
    pub sum_collisions: u64,
    /// Sum of total hop counts of alive cases.
    pub sum_hops: u64,
    /// Sum of hot-link counts of alive cases.
    pub sum_hot_links: u64,
    /// The longest route seen in an alive case.
    pub longest_route: u32,
    /// Substitutions of this step by degree (index 0 = 0D, k = kD).
    pub selected: Vec<u64>,
    /// Failures of this step that hit a free node (nothing to substitute).
    pub free_hits: u64,
    /// Jobs lost at this step.
    pub lost: u64,
}

impl StepStats {
    /// Fraction of cases still alive.
    pub fn survival(&self) -> f64 {
        ratio(self.alive, self.cases)
    }
    /// Smallest largest-link-load among alive cases.
    pub fn best(&self) -> Option<u32> {
        self.histogram.iter().position(|&n| n > 0).map(|c| c as u32)
    }
    /// Largest largest-link-load among alive cases.
    pub fn worst(&self) -> Option<u32> {
        self.histogram
            .iter()
            .rposition(|&n| n > 0)
            .map(|c| c as u32)
    }
    /// Mean largest link load of alive cases.
    pub fn mean(&self) -> Option<f64> {
        (self.alive > 0).then(|| ratio(self.sum_collisions, self.alive))
    }
    /// The collisions value at quantile `p` (0..=1) of alive cases.
    pub fn quantile(&self, p: f64) -> Option<u32> {
        if self.alive == 0 {
            return None;
        }
        let target = ((p * self.alive as f64).ceil() as u64).clamp(1, self.alive);
        let mut seen = 0;
        for (c, &n) in self.histogram.iter().enumerate() {
            seen += n;
            if seen >= target {
                return Some(c as u32);
            }
        }
        None
    }

    fn add(&mut self, o: &StepStats) {
        self.cases += o.cases;
        self.alive += o.alive;
        add_vec(&mut self.histogram, &o.histogram);
        self.sum_collisions += o.sum_collisions;
        self.sum_hops += o.sum_hops;
        self.sum_hot_links += o.sum_hot_links;
        self.longest_route = self.longest_route.max(o.longest_route);
        add_vec(&mut self.selected, &o.selected);
        self.free_hits += o.free_hits;
        self.lost += o.lost;
    }
}

fn add_vec(a: &mut Vec<u64>, b: &[u64]) {
    if a.len() < b.len() {
        a.resize(b.len(), 0);
    }
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// One kept worst case: which sample (or sequence ordinal) and its collisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorstCase {
    /// Largest link load.
    pub collisions: u32,
    /// The sample index (random) or the sequence ordinal (exhaustive).
    pub sample: u64,
}

/// The worst cases of one method at one failure count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptWorst {
    /// Failure count.
    pub failed: u32,
    /// Cases, worst first (ties: lower sample first).
    pub cases: Vec<WorstCase>,
}

/// The results of one method.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MethodResults {
    /// The method, as it parses.
    pub method: String,
    /// Index = failures so far (0 = the failure-free map).
    pub steps: Vec<StepStats>,
    /// Worst cases per kept failure count.
    #[serde(default)]
    pub worst: Vec<KeptWorst>,
    /// Re-mapped figures per failure count of [`CampaignInfo::remap`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remapped: Vec<RemapStats>,
}

impl MethodResults {
    /// Cumulative selection rate per degree after `failed` failures (Figure 15 of the journal
    /// seed): substitutions by degree over all substitutions so far.
    pub fn cumulative_selection(&self, failed: usize) -> Vec<f64> {
        let mut sum: Vec<u64> = Vec::new();
        for s in self.steps.iter().take(failed + 1) {
            add_vec(&mut sum, &s.selected);
        }
        let total: u64 = sum.iter().sum();
        sum.iter().map(|&n| ratio(n, total)).collect()
    }

    /// Selection rate per degree at one step (Figure 14).
    pub fn step_selection(&self, failed: usize) -> Vec<f64> {
        let s = &self.steps[failed].selected;
        let total: u64 = s.iter().sum();
        s.iter().map(|&n| ratio(n, total)).collect()
    }
}

/// The results of a campaign (or of one shard of it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Results {
    /// Format version.
    pub version: u32,
    /// What was simulated.
    pub campaign: CampaignInfo,
    /// Shards merged into these results, out of `shard_count`.
    pub shards: Vec<u32>,
    /// How many shards the campaign was split into.
    pub shard_count: u32,
    /// Per method, in the order given.
    pub methods: Vec<MethodResults>,
}

impl Results {
    /// Current format version.
    pub const VERSION: u32 = 1;

    /// Adds another shard's results; both must describe the same campaign and hold different
    /// shards.
    pub fn merge(&mut self, other: &Results) -> Result<(), Error> {
        if other.version != self.version {
            return Err(Error::Invalid(format!(
                "results of format versions {} and {} cannot be merged",
                self.version, other.version
            )));
        }
        if other.campaign != self.campaign || other.shard_count != self.shard_count {
            return Err(Error::Invalid(
                "these results come from different campaigns (network, spares, methods, \
                 failures, samples, seed or shard count differ)"
                    .into(),
            ));
        }
        let names = |r: &Results| {
            r.methods
                .iter()
                .map(|m| m.method.clone())
                .collect::<Vec<_>>()
        };
        if names(self) != names(other) {
            return Err(Error::Invalid(
                "these results compare different methods".into(),
            ));
        }
        if let Some(s) = other.shards.iter().find(|s| self.shards.contains(s)) {
            return Err(Error::Invalid(format!(
                "shard {s}/{} is in both results: merge each shard once",
                self.shard_count
            )));
        }
        self.shards.extend_from_slice(&other.shards);
        self.shards.sort_unstable();
        let keep = self.campaign.keep_worst;
        for (a, b) in self.methods.iter_mut().zip(&other.methods) {
            for (x, y) in a.steps.iter_mut().zip(&b.steps) {
                x.add(y);
            }
            for (x, y) in a.worst.iter_mut().zip(&b.worst) {
                x.cases.extend_from_slice(&y.cases);
                x.cases.sort_by_key(|c| (Reverse(c.collisions), c.sample));
                x.cases.truncate(keep);
            }
            for (x, y) in a.remapped.iter_mut().zip(&b.remapped) {
                x.add(y);
            }
        }
        Ok(())
    }

    /// Whether every shard of the campaign is in.
    pub fn is_complete(&self) -> bool {
        self.shards.len() as u32 == self.shard_count
    }

    /// One CSV row per method and failure count.
    pub fn to_csv(&self) -> String {
        let degrees = self
            .methods
            .iter()
            .flat_map(|m| m.steps.iter().map(|s| s.selected.len()))
            .max()
            .unwrap_or(0);
        let mut out = String::from(
            "method,failed,cases,alive,survival,best,mean,p50,p90,p99,worst,\
             mean_hot_links,mean_total_hops,longest_route,free_hits,lost",
        );
        for k in 0..degrees {
            out.push_str(&format!(",sel_{k}D"));
        }
        for k in 0..degrees {
            out.push_str(&format!(",cum_{k}D"));
        }
        // Re-mapping columns only when the campaign re-mapped, so older readers see the
        // columns they know.
        let remapped = self.campaign.remap.is_some();
        if remapped {
            out.push_str(
                ",remap_cases,remap_best,remap_mean,remap_p50,remap_p90,remap_p99,remap_worst,\
                 remap_mean_hot_links,remap_mean_total_hops,remap_improved,mean_moved,max_moved",
            );
        }
        out.push('\n');
        let opt = |v: Option<u32>| v.map(|v| v.to_string()).unwrap_or_default();
        for m in &self.methods {
            for (i, s) in m.steps.iter().enumerate() {
                out.push_str(&format!(
                    "{},{},{},{},{:.6},{},{},{},{},{},{},{},{},{},{},{}",
                    csv_field(&m.method),
                    s.failed,
                    s.cases,
                    s.alive,
                    s.survival(),
                    opt(s.best()),
                    s.mean().map(|v| format!("{v:.4}")).unwrap_or_default(),
                    opt(s.quantile(0.5)),
                    opt(s.quantile(0.9)),
                    opt(s.quantile(0.99)),
                    opt(s.worst()),
                    format_args!("{:.4}", ratio(s.sum_hot_links, s.alive)),
                    format_args!("{:.4}", ratio(s.sum_hops, s.alive)),
                    s.longest_route,
                    s.free_hits,
                    s.lost
                ));
                let step = m.step_selection(i);
                let cum = m.cumulative_selection(i);
                for k in 0..degrees {
                    out.push_str(&format!(",{:.6}", step.get(k).copied().unwrap_or(0.0)));
                }
                for k in 0..degrees {
                    out.push_str(&format!(",{:.6}", cum.get(k).copied().unwrap_or(0.0)));
                }
                if remapped {
                    match m.remapped.iter().find(|r| r.failed == s.failed) {
                        Some(r) => {
                            let t = &r.traffic;
                            out.push_str(&format!(
                                ",{},{},{},{},{},{},{},{:.4},{:.4},{},{},{}",
                                t.alive,
                                opt(t.best()),
                                t.mean().map(|v| format!("{v:.4}")).unwrap_or_default(),
                                opt(t.quantile(0.5)),
                                opt(t.quantile(0.9)),
                                opt(t.quantile(0.99)),
                                opt(t.worst()),
                                ratio(t.sum_hot_links, t.alive),
                                ratio(t.sum_hops, t.alive),
                                r.improved,
                                r.mean_moved()
                                    .map(|v| format!("{v:.4}"))
                                    .unwrap_or_default(),
                                r.max_moved
                            ));
                        }
                        None => out.push_str(",,,,,,,,,,,,"),
                    }
                }
                out.push('\n');
            }
        }
        out
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Which samples a run covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, from 0.
    pub index: u32,
    /// Number of shards.
    pub count: u32,
}

impl Shard {
    /// The whole campaign.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `i/n` (i from 0 to n-1).
    pub fn parse(s: &str) -> Result<Shard, Error> {
        let bad = || {
            Error::Invalid(format!(
                "shard '{s}': write i/n with 0 <= i < n, e.g. 3/16 (Slurm: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)"
            ))
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = i.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// Number of samples of `total` in this shard.
    pub fn len(&self, total: u64) -> u64 {
        let (i, n) = (u64::from(self.index), u64::from(self.count));
        if total > i {
            (total - i).div_ceil(n)
        } else {
            0
        }
    }

    /// Whether the shard holds no sample of `total`.
    pub fn is_empty(&self, total: u64) -> bool {
        self.len(total) == 0
    }
}

/// The kept worst cases as a min-heap of (collisions, lower sample first): its top is the
/// case the next worse one replaces.
type WorstHeap = BinaryHeap<Reverse<(u32, Reverse<u64>)>>;

/// Per-thread accumulation.
struct Tally {
    methods: Vec<MethodTally>,
}

struct MethodTally {
    steps: Vec<StepStats>,
    /// Min-heaps of the kept worst cases, one per `keep_at` entry.
    worst: Vec<WorstHeap>,
    /// One per failure count of the campaign's re-mapping.
    remapped: Vec<RemapStats>,
}

impl Tally {
    fn new(c: &Campaign) -> Tally {
        let degrees = c.map.grid().dims() + 1;
        let steps = (0..=c.failures)
            .map(|failed| StepStats {
                failed,
                selected: vec![0; degrees],
                ..StepStats::default()
            })
            .collect::<Vec<_>>();
        Tally {
            methods: c
                .methods
                .iter()
                .map(|_| MethodTally {
                    steps: steps.clone(),
                    worst: c.keep_at.iter().map(|_| BinaryHeap::new()).collect(),
                    remapped: c
                        .remap_at()
                        .iter()
                        .map(|&failed| RemapStats {
                            failed,
                            traffic: StepStats {
                                failed,
                                ..StepStats::default()
                            },
                            ..RemapStats::default()
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    fn add(&mut self, o: Tally, keep: usize) {
        for (a, b) in self.methods.iter_mut().zip(o.methods) {
            for (x, y) in a.steps.iter_mut().zip(&b.steps) {
                x.add(y);
            }
            for (x, y) in a.worst.iter_mut().zip(b.worst) {
                for e in y {
                    keep_case(x, e.0, keep);
                }
            }
            for (x, y) in a.remapped.iter_mut().zip(&b.remapped) {
                x.add(y);
            }
        }
    }
}

fn keep_case(heap: &mut WorstHeap, key: (u32, Reverse<u64>), keep: usize) {
    if keep == 0 {
        return;
    }
    if heap.len() < keep {
        heap.push(Reverse(key));
    } else if heap.peek().is_some_and(|min| key > min.0) {
        heap.pop();
        heap.push(Reverse(key));
    }
}

/// Sample `j`'s random stream.
fn sample_rng(seed: u64, j: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(j);
    rng
}

/// The first node that sample `j` fails among `nodes` ([`Worker::draw`]'s first draw),
/// without drawing the rest.
fn first_failed_node(seed: u64, j: u64, nodes: u32) -> u32 {
    // As the draw does: a usize range (a u32 range draws other numbers).
    sample_rng(seed, j).gen_range(0..nodes as usize) as u32
}

/// The state one worker reuses for every sample (no per-sample allocation).
struct Worker<'a> {
    c: &'a Campaign,
    map: SpareMap,
    /// Failure-free map, tracked when the engine is incremental.
    start: SpareMap,
    /// The failure-free map's traffic figures.
    start_traffic: traffic::Traffic,
    /// Per method, the map after the first failure of a sample whose successor fails the
    /// same node first ([`Worker::share`]).
    after: Vec<Option<Kept>>,
    /// Set before a sample is run: whether the next sample fails the same node first, so
    /// that the map after it is kept.
    share: bool,
    /// Maps after second failures that slid the whole box ([`Worker::second_failure`]), at
    /// most `slid_room` of them.
    slid: Vec<(SlideKey, Kept)>,
    slid_room: usize,
    /// How many times the map after the first failure was copied from `after`, and the map
    /// after the second from `slid`.
    reused: [u64; 2],
    /// Set when `map` is not yet the map after the sample's first failure: that map is the
    /// one kept in `after` for this method, copied when needed ([`Worker::second_failure`]
    /// mostly copies a map after the second failure instead).
    stale: Option<usize>,
    /// Node ids for the partial Fisher-Yates draw, restored after each sample.
    order: Vec<u32>,
    swaps: Vec<(usize, usize)>,
    sequence: Vec<u32>,
    neighbours: Vec<Vec<u32>>,
    /// The substitutions' buffers, reused for every failure.
    scratch: Scratch,
}

impl<'a> Worker<'a> {
    fn new(c: &'a Campaign) -> Worker<'a> {
        let mut start = c.map.clone();
        start.untrack_traffic();
        match c.engine {
            Engine::Incremental => start.track_traffic(&c.pattern, c.periodic),
            Engine::Reference => start.track_traffic_reference(&c.pattern, c.periodic),
            Engine::Full => {}
        }
        let mut w = Worker {
            c,
            map: start.clone(),
            start,
            start_traffic: traffic::Traffic::default(),
            after: vec![None; c.methods.len()],
            share: false,
            slid: Vec::new(),
            slid_room: slid_room(&c.map, 1),
            reused: [0; 2],
            stale: None,
            order: (0..c.map.grid().len()).collect(),
            swaps: Vec::with_capacity(c.failures as usize),
            sequence: Vec::with_capacity(c.failures as usize),
            neighbours: traffic::neighbours(c.map.compute(), &c.pattern, c.periodic),
            scratch: Scratch::without_slide_moves(),
        };
        w.start_traffic = w.traffic();
        w
    }

    /// Draws sample `j`'s failure sequence: uniform among nodes still alive, one at a time.
    fn draw(&mut self, seed: u64, j: u64) {
        let mut rng = sample_rng(seed, j);
        self.sequence.clear();
        self.swaps.clear();
        let n = self.order.len();
        for i in 0..(self.c.failures as usize).min(n) {
            let k = rng.gen_range(i..n);
            self.order.swap(i, k);
            self.swaps.push((i, k));
            self.sequence.push(self.order[i]);
        }
        for &(i, k) in self.swaps.iter().rev() {
            self.order.swap(i, k);
        }
    }

    fn traffic(&self) -> traffic::Traffic {
        match self.c.engine {
            // The worker tracked the campaign's pattern itself: no pattern comparison per
            // failure (a map whose routing grid is too large to track has no loads).
            Engine::Incremental | Engine::Reference => self
                .map
                .tracked_traffic()
                .unwrap_or_else(|| self.map.traffic(&self.c.pattern, self.c.periodic)),
            Engine::Full => self.map.full_traffic(&self.neighbours),
        }
    }

    /// Runs every method over the drawn sequence and records it as `sample`.
    fn run_sequence(&mut self, sample: u64, tally: &mut Tally) -> Result<(), Error> {
        let c = self.c;
        let keep = c.keep_worst;
        for (mi, method) in c.methods.iter().enumerate() {
            let mt = &mut tally.methods[mi];
            record(&mut mt.steps[0], &self.start_traffic);
            mt.steps[0].cases += 1;
            let mut alive = true;
            for i in 0..self.sequence.len() {
                let step = &mut mt.steps[i + 1];
                step.cases += 1;
                if !alive {
                    continue;
                }
                let node = self.sequence[i];
                let (handled, traffic) = if i == 0 {
                    self.first_failure(mi, method)?
                } else if i == 1 {
                    self.second_failure(mi, method)?
                } else {
                    let handled = fail_with(&mut self.map, node, method, &mut self.scratch)?;
                    (
                        handled,
                        (handled != Handled::JobLost).then(|| self.traffic()),
                    )
                };
                match handled {
                    Handled::FreeNodeDied => step.free_hits += 1,
                    Handled::Substituted { degree, .. } => step.selected[degree] += 1,
                    Handled::JobLost => {
                        step.lost += 1;
                        alive = false;
                        continue;
                    }
                }
                let t = traffic.expect("a job not lost has traffic figures");
                record(step, &t);
                if let Some(w) = c.keep_at.iter().position(|&k| k as usize == i + 1) {
                    keep_case(&mut mt.worst[w], (t.collisions, Reverse(sample)), keep);
                }
                if let Some(r) = c.remap_at().iter().position(|&k| k as usize == i + 1) {
                    self.refresh();
                    self.remap_case(sample, t.collisions, &mut mt.remapped[r])?;
                }
            }
        }
        Ok(())
    }

    /// The first failure of a sample under method `mi`: the map after it is a function of
    /// the failure-free map and the failed node alone, so it is computed once for
    /// consecutive samples that fail the same node first, and left in `after` for the
    /// others (`stale`).
    fn first_failure(
        &mut self,
        mi: usize,
        method: &Method,
    ) -> Result<(Handled, Option<traffic::Traffic>), Error> {
        let node = self.sequence[0];
        self.stale = None;
        if let Some(f) = self.after[mi].as_ref().filter(|f| f.node == node) {
            self.stale = Some(mi);
            self.reused[0] += 1;
            return Ok((f.handled, f.traffic));
        }
        self.map.clone_from(&self.start);
        let handled = fail_with(&mut self.map, node, method, &mut self.scratch)?;
        let traffic = (handled != Handled::JobLost).then(|| self.traffic());
        if self.share {
            match &mut self.after[mi] {
                Some(f) => f.set(node, &self.map, handled, traffic),
                slot @ None => *slot = Some(Kept::new(node, &self.map, handled, traffic)),
            }
        }
        Ok((handled, traffic))
    }

    /// The second failure of a sample under method `mi`. When it slides the whole box, the
    /// ranks move the same way whichever busy node of the slid plane failed: every line
    /// along the slide with a busy node on that plane shifts from there to its first free
    /// node. The map after it is then that of any earlier sample with the same first failed
    /// node and the same slide at the same place, but for which node of the plane is dead:
    /// it is copied from `slid`, and the death moved ([`SpareMap::move_death`]).
    fn second_failure(
        &mut self,
        mi: usize,
        method: &Method,
    ) -> Result<(Handled, Option<traffic::Traffic>), Error> {
        let node = self.sequence[1];
        let choice = match self.choose_on_kept(mi, node, method) {
            Some(choice) => choice?,
            None => {
                self.refresh();
                choose(&mut self.map, node, method, &mut self.scratch)?
            }
        };
        let grid = *self.map.grid();
        let key = match choice {
            Choice::Slide {
                degree,
                slide: (d, dir, _),
                ..
            } if degree == grid.dims() => Some(SlideKey {
                method: mi,
                first: self.sequence[0],
                way: 2 * d + dir.slot(),
                at: grid.coord(node)[d],
            }),
            _ => None,
        };
        if let Some((_, kept)) = key.and_then(|k| self.slid.iter().find(|s| s.0 == k)) {
            self.map.clone_from(&kept.map);
            self.map.move_death(kept.node, node);
            self.reused[1] += 1;
            let done = (kept.handled, kept.traffic);
            self.revive_kept(node);
            return Ok(done);
        }
        if let Some(mi) = self.stale {
            // The failure chosen on the kept map: that map, with the node dead, is this
            // sample's.
            self.map
                .clone_from(&self.after[mi].as_ref().expect("a kept map").map);
            self.revive_kept(node);
        }
        let handled = carry_out(&mut self.map, node, choice, &mut self.scratch);
        let traffic = (handled != Handled::JobLost).then(|| self.traffic());
        // Kept only when the next sample fails the same first node: samples come sorted by it,
        // so no later one asks for it otherwise.
        if let Some(key) = key.filter(|_| self.share) {
            // In place of one kept for another first failed node, else in a new place while
            // there is room.
            let room = self.slid.len() < self.slid_room;
            match self.slid.iter_mut().find(|s| s.0.first != key.first) {
                Some((k, kept)) => {
                    *k = key;
                    kept.set(node, &self.map, handled, traffic);
                }
                None if room => self
                    .slid
                    .push((key, Kept::new(node, &self.map, handled, traffic))),
                None => {}
            }
        }
        Ok((handled, traffic))
    }
}

impl Worker<'_> {
    /// Makes `map` the map after the sample's first failure, if it is not yet.
    fn refresh(&mut self) {
        if let Some(mi) = self.stale.take() {
            let kept = self.after[mi].as_ref().expect("a kept map");
            self.map.clone_from(&kept.map);
        }
    }

    /// The second failure's choice made on the map kept after the first failure, when `map`
    /// is not yet a copy of it (`stale`) and choosing changes no more than the failed
    /// node's death: the node holds a rank, and 0D takes the nearest free node (the other
    /// rules count or probe). The kept map is left with the node dead, for
    /// [`Worker::revive_kept`]; `None` when the choice is to be made on `map`.
    fn choose_on_kept(
        &mut self,
        mi: usize,
        node: u32,
        method: &Method,
    ) -> Option<Result<Choice, Error>> {
        self.stale?;
        debug_assert_eq!(self.stale, Some(mi));
        let kept = self.after[mi].as_mut().expect("a kept map");
        let busy = matches!(kept.map.state(node), NodeState::Busy(_));
        if !busy || method.zero_rule() != ZeroRule::Nearest {
            return None;
        }
        let choice = choose(&mut kept.map, node, method, &mut self.scratch);
        if choice.is_err() {
            kept.map.revive(node);
        }
        Some(choice)
    }

    /// Undoes the death [`Worker::choose_on_kept`] left in the kept map, once `map` no
    /// longer needs it.
    fn revive_kept(&mut self, node: u32) {
        if let Some(mi) = self.stale.take() {
            self.after[mi]
                .as_mut()
                .expect("a kept map")
                .map
                .revive(node);
        }
    }
}

/// A map kept for later samples: after a sample's first failure ([`Worker::first_failure`])
/// or its second ([`Worker::second_failure`]), and what that failure did.
#[derive(Clone)]
struct Kept {
    /// The node whose failure the map follows: dead in `map`.
    node: u32,
    map: SpareMap,
    handled: Handled,
    /// None when the job was lost.
    traffic: Option<traffic::Traffic>,
}

impl Kept {
    fn new(node: u32, map: &SpareMap, handled: Handled, traffic: Option<traffic::Traffic>) -> Kept {
        Kept {
            node,
            map: map.clone(),
            handled,
            traffic,
        }
    }

    /// Keeps another map in place of this one, reusing its buffers.
    fn set(
        &mut self,
        node: u32,
        map: &SpareMap,
        handled: Handled,
        traffic: Option<traffic::Traffic>,
    ) {
        self.node = node;
        self.map.clone_from(map);
        self.handled = handled;
        self.traffic = traffic;
    }
}

/// What makes the maps after two samples' second failures the same but for their dead node:
/// the method, the first failed node, and the whole-box slide's way (`2 d + dir.slot()`) and
/// plane (the second failed node's coordinate along d).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlideKey {
    method: usize,
    first: u32,
    way: usize,
    at: u32,
}

/// Most bytes of maps the workers of a run keep after second failures, all together, unless
/// each would have less than [`SLID_BUDGET_EACH`]. On two threads that is room for 41 maps
/// each on the seeds' 24x24x24 box: the first two failures of its campaign then took 219 s
/// of CPU, against 386 s with 16 MiB a worker (13 maps) and 208 s with 256 MiB. The 12^3
/// campaign needs at most 72 maps (its 3D slides' ways and positions), an eighth the size.
const SLID_BUDGET: usize = 96 << 20;

/// Most bytes of maps a worker keeps after second failures when [`SLID_BUDGET`] shared
/// out gives it less.
const SLID_BUDGET_EACH: usize = 16 << 20;

/// How many maps after second failures a worker of a run on `threads` threads keeps, from
/// an estimate of a map's size: per node its rank, state, free-set entry and line bits, per
/// rank its place in a batch, per link its load (64 bytes a node, 4 a link).
fn slid_room(map: &SpareMap, threads: usize) -> usize {
    let nodes = map.grid().len() as usize;
    let links = map.routing().len() as usize * 2 * map.grid().dims();
    let budget = (SLID_BUDGET / threads.max(1)).max(SLID_BUDGET_EACH);
    budget / (64 * nodes + 4 * links).max(1)
}

impl Worker<'_> {
    /// Re-maps a copy of the current map (`sliding`: its largest link load) and records it.
    /// An exhaustive campaign meets each failure prefix once per ordering of the failures
    /// after it: only the first of them is re-mapped, with the prefix's ordinal as its sample,
    /// so each prefix counts once, as the divided steps do.
    fn remap_case(&self, sample: u64, sliding: u32, out: &mut RemapStats) -> Result<(), Error> {
        let at = out.failed;
        let sample = if self.c.info.exhaustive {
            let repeat = self.c.orderings_after(at);
            if !sample.is_multiple_of(repeat) {
                return Ok(());
            }
            sample / repeat
        } else {
            sample
        };
        let Some(settings) = &self.c.info.remap else {
            return Ok(());
        };
        let budget = crate::remap::Budget {
            max_moved: settings.max_moved,
            time_limit: None,
            iterations: Some(settings.iterations),
            seed: remap_seed(self.c.info.seed, sample, at),
        };
        let r = crate::remap::remap(&self.map, &self.c.pattern, self.c.periodic, &budget)?;
        record(&mut out.traffic, &r.after);
        out.traffic.cases += 1;
        let moved = r.moved.len() as u32;
        out.sum_moved += u64::from(moved);
        out.max_moved = out.max_moved.max(moved);
        out.improved += u64::from(r.after.collisions < sliding);
        Ok(())
    }
}

fn record(s: &mut StepStats, t: &traffic::Traffic) {
    s.alive += 1;
    let c = t.collisions as usize;
    if c >= s.histogram.len() {
        s.histogram.resize(c + 1, 0);
    }
    s.histogram[c] += 1;
    s.sum_collisions += u64::from(t.collisions);
    s.sum_hops += t.total_hops;
    s.sum_hot_links += t.hot_links;
    s.longest_route = s.longest_route.max(t.longest_route);
}

impl Campaign {
    fn check(&self) -> Result<(), Error> {
        if self.methods.is_empty() {
            return Err(Error::Invalid("name at least one method".into()));
        }
        if self.failures > self.map.grid().len() {
            return Err(Error::Invalid(format!(
                "{} failures asked for a box of {} nodes",
                self.failures,
                self.map.grid().len()
            )));
        }
        if let Some(&k) = self.keep_at.iter().find(|&&k| k == 0 || k > self.failures) {
            return Err(Error::Invalid(format!(
                "worst maps are kept at failure counts 1 to {}; {k} is outside",
                self.failures
            )));
        }
        self.check_remap()
    }

    /// The failure counts at which alive cases are re-mapped (none if not asked).
    fn remap_at(&self) -> &[u32] {
        self.info.remap.as_ref().map_or(&[], |r| &r.at)
    }

    /// Orderings of the failures after the first `failed` of an exhaustive campaign:
    /// P(n - failed, failures - failed), at most the campaign's case count.
    fn orderings_after(&self, failed: u32) -> u64 {
        let n = u64::from(self.map.grid().len());
        (u64::from(failed)..u64::from(self.failures))
            .map(|j| n - j)
            .product()
    }

    fn check_remap(&self) -> Result<(), Error> {
        let Some(r) = &self.info.remap else {
            return Ok(());
        };
        if let Some(&k) = r.at.iter().find(|&&k| k == 0 || k > self.failures) {
            return Err(Error::Invalid(format!(
                "re-mapping happens at failure counts 1 to {}; {k} is outside",
                self.failures
            )));
        }
        if let Some(w) = r.at.windows(2).find(|w| w[0] >= w[1]) {
            return Err(Error::Invalid(format!(
                "re-mapping failure counts must ascend without repeats; {} comes after {}",
                w[1], w[0]
            )));
        }
        if r.iterations == 0 {
            return Err(Error::Invalid("a re-map needs at least 1 iteration".into()));
        }
        let ranks = self.map.rank_nodes().len() as u64;
        let messages = ranks.saturating_mul(self.pattern.offsets().len() as u64);
        if messages > crate::remap::MAX_MESSAGES {
            return Err(Error::Limit {
                what: format!("a re-map of {ranks} ranks with pattern {}", self.pattern),
                value: messages,
                limit: crate::remap::MAX_MESSAGES,
                unit: "messages",
            });
        }
        Ok(())
    }

    /// Runs the random samples of `shard` on `threads` threads; `done` counts finished
    /// samples for a progress display.
    pub fn run(
        &self,
        shard: Shard,
        threads: usize,
        done: Option<&AtomicU64>,
    ) -> Result<Results, Error> {
        self.check()?;
        let sample = |i: u64| u64::from(shard.index) + i * u64::from(shard.count);
        let nodes = self.map.grid().len();
        let tally = self.run_items(
            shard.len(self.info.samples),
            threads,
            done,
            |i| first_failed_node(self.info.seed, sample(i), nodes),
            |w, i| {
                w.draw(self.info.seed, sample(i));
                sample(i)
            },
        )?;
        Ok(self.results(tally, vec![shard.index], shard.count))
    }

    /// Runs `count` items on `threads` threads: `first` gives item i's first failed node,
    /// `load` puts its failure sequence into the worker and returns its sample number. The
    /// tallies of all threads are summed; every figure is an integer sum, so the order does
    /// not matter. The items are run in windows of up to [`MAX_WINDOW`], each sorted by first
    /// failed node, so that consecutive items share their first substitution
    /// ([`Worker::share`]) and often their second ([`Worker::second_failure`]). Each thread
    /// takes a chunk of a window's sorted items at a time, shrinking towards the end so that
    /// the threads finish together.
    fn run_items(
        &self,
        count: u64,
        threads: usize,
        done: Option<&AtomicU64>,
        first: impl Fn(u64) -> u32 + Sync,
        load: impl Fn(&mut Worker, u64) -> u64 + Sync,
    ) -> Result<Tally, Error> {
        let threads = threads.max(1);
        let out: Mutex<Option<Tally>> = Mutex::new(None);
        let error: Mutex<Option<Error>> = Mutex::new(None);
        let mut items = Vec::new();
        let mut window_start = 0;
        while window_start < count && error.lock().expect("no panic holds it").is_none() {
            let window = (count - window_start).min(MAX_WINDOW);
            sorted_window(window_start, window, threads, &first, &mut items);
            let next = AtomicU64::new(0);
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(|| {
                        let mut w = Worker::new(self);
                        w.slid_room = slid_room(&self.map, threads);
                        let mut tally = Tally::new(self);
                        'work: while let Some(range) = take_chunk(&next, window, threads) {
                            let chunk = &items[range.start as usize..range.end as usize];
                            for (p, &item) in chunk.iter().enumerate() {
                                let sample = load(&mut w, window_start + item_index(item));
                                w.share = chunk
                                    .get(p + 1)
                                    .is_some_and(|&next| item_first(next) == item_first(item));
                                if let Err(e) = w.run_sequence(sample, &mut tally) {
                                    *error.lock().expect("no panic holds it") = Some(e);
                                    break 'work;
                                }
                                if let Some(d) = done {
                                    d.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        let mut o = out.lock().expect("no panic holds it");
                        match o.as_mut() {
                            Some(t) => t.add(tally, self.keep_worst),
                            None => *o = Some(tally),
                        }
                    });
                }
            });
            window_start += window;
        }
        if let Some(e) = error.into_inner().expect("threads joined") {
            return Err(e);
        }
        Ok(out
            .into_inner()
            .expect("threads joined")
            .unwrap_or_else(|| Tally::new(self)))
    }

    /// Link-load updates (one link's load up or down by one) that the incremental engine
    /// makes over samples `0..samples` of every method, the failure-free routes left out:
    /// the work behind `spares bench`'s rate of updates per second.
    pub fn link_updates(&self, samples: u64) -> Result<u64, Error> {
        self.check()?;
        let mut current = self.clone();
        current.engine = Engine::Incremental;
        let mut w = Worker::new(&current);
        let mut total = 0;
        for j in 0..samples {
            w.draw(self.info.seed, j);
            for method in &self.methods {
                w.map.clone_from(&w.start);
                let before = w.map.tracked_updates().unwrap_or(0);
                for &node in &w.sequence {
                    // A lost job only marks nodes dead: no load changes.
                    if fail_with(&mut w.map, node, method, &mut w.scratch)? == Handled::JobLost {
                        break;
                    }
                }
                total += w.map.tracked_updates().unwrap_or(0) - before;
            }
        }
        Ok(total)
    }

    /// Number of ordered sequences of `failures` distinct nodes, if it fits in a u64.
    pub fn exhaustive_cases(&self) -> Option<u64> {
        let n = u64::from(self.map.grid().len());
        (0..u64::from(self.failures)).try_fold(1u64, |acc, i| acc.checked_mul(n - i))
    }

    /// Runs every ordered sequence of `failures` failures (as the journal seed's Figure 8).
    /// Refuses campaigns of more than `limit` sequences.
    pub fn run_exhaustive(
        &self,
        threads: usize,
        limit: u64,
        done: Option<&AtomicU64>,
    ) -> Result<Results, Error> {
        self.check()?;
        let cases = self
            .exhaustive_cases()
            .filter(|&c| c <= limit)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{} failures among {} nodes make more than {limit} ordered sequences: \
                 sample them instead (--samples)",
                    self.failures,
                    self.map.grid().len()
                ))
            })?;
        let n = self.map.grid().len();
        // Each sequence is decoded from its ordinal, so the same ordinal always names the
        // same sequence (for --keep-worst replays).
        // The first failure is the slowest digit of the ordinal.
        let after_first = self.orderings_after(1);
        let mut tally = self.run_items(
            cases,
            threads,
            done,
            |ordinal| (ordinal / after_first) as u32,
            |w, ordinal| {
                decode_sequence(ordinal, n, self.failures, &mut w.sequence);
                ordinal
            },
        )?;
        // Each full sequence was counted once at every step; a step with i failures has
        // P(n, i) distinct prefixes, each seen P(n - i, K - i) times.
        for mt in &mut tally.methods {
            for (i, st) in mt.steps.iter_mut().enumerate() {
                let repeat: u64 = (i as u64..u64::from(self.failures))
                    .map(|j| u64::from(n) - j)
                    .product();
                divide(st, repeat);
            }
        }
        Ok(self.results(tally, vec![0], 1))
    }

    fn results(&self, tally: Tally, shards: Vec<u32>, shard_count: u32) -> Results {
        Results {
            version: Results::VERSION,
            campaign: self.info.clone(),
            shards,
            shard_count,
            methods: self
                .methods
                .iter()
                .zip(tally.methods)
                .map(|(m, t)| MethodResults {
                    method: m.to_string(),
                    steps: t.steps,
                    worst: self
                        .keep_at
                        .iter()
                        .zip(t.worst)
                        .map(|(&failed, heap)| {
                            let mut cases: Vec<WorstCase> = heap
                                .into_iter()
                                .map(|Reverse((collisions, Reverse(sample)))| WorstCase {
                                    collisions,
                                    sample,
                                })
                                .collect();
                            cases.sort_by_key(|c| (Reverse(c.collisions), c.sample));
                            KeptWorst { failed, cases }
                        })
                        .collect(),
                    remapped: t.remapped,
                })
                .collect(),
        }
    }

    /// The map of `method` after the first `failed` failures of a sample (random campaign)
    /// or of a sequence ordinal (exhaustive), as recorded in [`KeptWorst`].
    pub fn replay(&self, method: usize, sample: u64, failed: u32) -> Result<SpareMap, Error> {
        let mut w = Worker::new(self);
        if self.info.exhaustive {
            decode_sequence(
                sample,
                self.map.grid().len(),
                self.failures,
                &mut w.sequence,
            );
        } else {
            w.draw(self.info.seed, sample);
        }
        let mut map = self.map.clone();
        if self.methods[method].zero_rule() == crate::sliding::ZeroRule::LeastLoad {
            map.track_traffic(&self.pattern, self.periodic);
        }
        for &node in w.sequence.iter().take(failed as usize) {
            fail(&mut map, node, &self.methods[method])?;
        }
        Ok(map)
    }

    /// A short description for progress lines: `12x12x12 3D(2,1) 7p`.
    pub fn label(&self) -> String {
        format!(
            "{} {} {}",
            format_shape(&self.info.box_extents),
            self.info.spares,
            self.info.pattern
        )
    }
}

/// Exhaustive counts are exact multiples of the repeat; dividing keeps every figure exact.
fn divide(s: &mut StepStats, r: u64) {
    let div = |v: &mut u64| {
        debug_assert_eq!(*v % r, 0);
        *v /= r;
    };
    div(&mut s.cases);
    div(&mut s.alive);
    s.histogram.iter_mut().for_each(div);
    div(&mut s.sum_collisions);
    div(&mut s.sum_hops);
    div(&mut s.sum_hot_links);
    s.selected.iter_mut().for_each(div);
    div(&mut s.free_hits);
    div(&mut s.lost);
}

/// Most items a thread takes at once: a chunk takes about 10 s of one core on the seeds'
/// 12x12x12 box.
const MAX_CHUNK: u64 = 32_768;

/// Most items sorted at once by their first failed node: 8 bytes each, 32 MiB. The seeds'
/// campaign (3,686,400 samples) fits in one window: about 2,130 samples fail each of the
/// 1,728 nodes first.
const MAX_WINDOW: u64 = 1 << WINDOW_BITS;
const WINDOW_BITS: u32 = 22;

/// Fills `items` with the window of `len` items from `start`, sorted by first failed node and
/// index, each packed in one word (the node above the item's index in its window); `threads`
/// threads draw the nodes.
fn sorted_window(
    start: u64,
    len: u64,
    threads: usize,
    first: &(impl Fn(u64) -> u32 + Sync),
    items: &mut Vec<u64>,
) {
    items.clear();
    items.resize(len as usize, 0);
    let per_thread = (len as usize).div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for (t, part) in items.chunks_mut(per_thread).enumerate() {
            s.spawn(move || {
                for (i, item) in part.iter_mut().enumerate() {
                    let index = (t * per_thread + i) as u64;
                    *item = u64::from(first(start + index)) << WINDOW_BITS | index;
                }
            });
        }
    });
    items.sort_unstable();
}

/// An item's index in its window.
fn item_index(item: u64) -> u64 {
    item & (MAX_WINDOW - 1)
}

/// An item's first failed node.
fn item_first(item: u64) -> u64 {
    item >> WINDOW_BITS
}

/// The next items for a thread out of `0..count`: a share of what is left (guided
/// self-scheduling), between 16 and [`MAX_CHUNK`] items, or None when none is left.
fn take_chunk(next: &AtomicU64, count: u64, threads: usize) -> Option<std::ops::Range<u64>> {
    let mut from = next.load(Ordering::Relaxed);
    loop {
        if from >= count {
            return None;
        }
        let size = ((count - from) / (4 * threads as u64))
            .clamp(16, MAX_CHUNK)
            .min(count - from);
        match next.compare_exchange_weak(from, from + size, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Some(from..from + size),
            Err(now) => from = now,
        }
    }
}

/// The ordered sequence of `k` distinct nodes of `0..n` with this ordinal (mixed radix: the
/// first failure varies slowest).
fn decode_sequence(ordinal: u64, n: u32, k: u32, out: &mut Vec<u32>) {
    out.clear();
    let mut digits = Vec::with_capacity(k as usize);
    let mut rest = ordinal;
    for i in (0..k).rev() {
        let radix = u64::from(n - i);
        digits.push((rest % radix) as u32);
        rest /= radix;
    }
    digits.reverse();
    let mut remaining: Vec<u32> = (0..n).collect();
    for d in digits {
        out.push(remaining.remove(d as usize));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::Grid;

    fn campaign(methods: &[&str], failures: u32, samples: u64) -> Campaign {
        let grid = Grid::mesh(&[6, 6]).unwrap();
        let map = SpareMap::new(grid, &[5, 5], &[0, 0]).unwrap();
        Campaign {
            map,
            pattern: Pattern::star(2),
            periodic: false,
            methods: methods
                .iter()
                .map(|m| Method::parse(m, 2).unwrap())
                .collect(),
            failures,
            engine: Engine::Incremental,
            keep_worst: 3,
            keep_at: vec![1, failures],
            info: CampaignInfo {
                topology: None,
                spares: "2D(2,1)".into(),
                box_extents: vec![6, 6],
                wrap: vec![false, false],
                compute: vec![5, 5],
                pattern: "5p".into(),
                periodic: false,
                failures,
                samples,
                seed: 11,
                exhaustive: false,
                keep_worst: 3,
                keep_at: vec![1, failures],
                remap: None,
            },
        }
    }

    #[test]
    fn sequences_decode_every_ordered_tuple_once() {
        let mut seen = std::collections::HashSet::new();
        let mut seq = Vec::new();
        for o in 0..(5 * 4 * 3) {
            decode_sequence(o, 5, 3, &mut seq);
            assert_eq!(seq.len(), 3);
            assert!(seq[0] != seq[1] && seq[1] != seq[2] && seq[0] != seq[2]);
            assert!(seen.insert(seq.clone()));
        }
    }

    /// Makes the worker forget every map it kept from earlier samples.
    fn forget(w: &mut Worker) {
        w.share = false;
        w.after.iter_mut().for_each(|f| *f = None);
        w.slid.clear();
    }

    /// Samples run one by one in sample order, each from the failure-free map: nothing
    /// shared between samples.
    fn run_alone(c: &Campaign) -> Results {
        let mut w = Worker::new(c);
        let mut tally = Tally::new(c);
        for j in 0..c.info.samples {
            w.draw(c.info.seed, j);
            forget(&mut w);
            w.run_sequence(j, &mut tally).unwrap();
        }
        c.results(tally, vec![0], 1)
    }

    #[test]
    fn samples_sharing_their_first_failure_give_the_figures_of_samples_run_alone() {
        // 36 nodes and 300 samples: about 8 samples fail each node first.
        for engine in [Engine::Incremental, Engine::Reference, Engine::Full] {
            let methods: &[&str] = match engine {
                // least-load weighs tracked loads, which the full engine does not keep.
                Engine::Full => &["hybrid", "0D", "1D"],
                _ => &["hybrid", "0D", "1D", "hybrid:least-load"],
            };
            let mut c = campaign(methods, 11, 300);
            c.engine = engine;
            let alone = run_alone(&c);
            assert_eq!(c.run(Shard::ALL, 2, None).unwrap(), alone, "{engine:?}");
            assert_eq!(c.run(Shard::ALL, 1, None).unwrap(), alone, "{engine:?}");
        }
        // No spares: a compute node's failure loses the job at once.
        let mut c = campaign(&["hybrid", "0D"], 3, 100);
        c.map = SpareMap::new(Grid::mesh(&[6, 6]).unwrap(), &[6, 6], &[0, 0]).unwrap();
        let alone = run_alone(&c);
        assert!(alone.methods[0].steps[1].lost > 0);
        assert_eq!(c.run(Shard::ALL, 2, None).unwrap(), alone);
    }

    #[test]
    fn samples_sharing_a_whole_box_slide_at_their_second_failure_give_the_figures_of_samples_run_alone(
    ) {
        let c = campaign(&["hybrid", "0D", "1D"], 11, 0);
        // Three samples that fail the same node first: the third fails another node second
        // and slides the box at the same place as the second, which fails another node second
        // than the first and slides elsewhere.
        let first = |j| first_failed_node(c.info.seed, j, 36);
        let mut w = Worker::new(&c);
        let run = |w: &mut Worker, j: u64, share: bool, tally: &mut Tally| {
            w.draw(c.info.seed, j);
            w.share = share;
            w.run_sequence(j, tally).unwrap();
        };
        let mut found = None;
        'search: for a in 0..2000 {
            let same_first: Vec<u64> = (a + 1..a + 2000)
                .filter(|&j| first(j) == first(a))
                .collect();
            for &b in &same_first {
                for &d in &same_first {
                    forget(&mut w);
                    let mut t = Tally::new(&c);
                    run(&mut w, a, true, &mut t);
                    run(&mut w, b, true, &mut t);
                    let hits = w.reused[1];
                    let second = w.sequence[1];
                    run(&mut w, d, false, &mut t);
                    if w.reused[1] == hits + 1 && w.sequence[1] != second {
                        found = Some((a, b, d));
                        break 'search;
                    }
                    w.reused = [0; 2];
                }
            }
        }
        let (a, b, d) = found.expect("such samples among the first 4,000");
        let mut shared = Tally::new(&c);
        let mut w = Worker::new(&c);
        run(&mut w, a, true, &mut shared);
        run(&mut w, b, true, &mut shared);
        run(&mut w, d, false, &mut shared);
        let mut alone = Tally::new(&c);
        for j in [a, b, d] {
            let mut w = Worker::new(&c);
            run(&mut w, j, false, &mut alone);
        }
        assert_eq!(c.results(shared, vec![0], 1), c.results(alone, vec![0], 1));
        // Per method, the second and third samples copied the map after the first failure;
        // the hybrid's third copied the map after the second too.
        assert_eq!(w.reused[0], 6);
        assert!(w.reused[1] >= 1);
    }

    /// A whole-box slide moves the same ranks whichever busy node of its plane failed: the
    /// map after one such failure, with the death moved to the other node, is the map after
    /// the other's failure.
    #[test]
    fn a_whole_box_slide_gives_one_map_for_every_failed_node_of_its_plane() {
        let boxes = [
            SpareMap::new(Grid::mesh(&[6, 6]).unwrap(), &[5, 5], &[0, 0]).unwrap(),
            SpareMap::new(Grid::mesh(&[4, 4, 4]).unwrap(), &[3, 3, 4], &[0, 0, 0]).unwrap(),
            SpareMap::new(
                Grid::new(&[5, 4, 4], &[true; 3]).unwrap(),
                &[4, 3, 4],
                &[0, 0, 0],
            )
            .unwrap(),
        ];
        for start in boxes {
            let mut compared = 0;
            let dims = start.grid().dims();
            let mut start = start;
            start.track_traffic(&Pattern::star(dims), false);
            let method = Method::hybrid(dims);
            let mut scratch = Scratch::default();
            for before in [None, Some(0), Some(start.grid().len() - 1), Some(7)] {
                let mut at = start.clone();
                if let Some(f) = before {
                    fail_with(&mut at, f, &method, &mut scratch).unwrap();
                }
                let mut seen: std::collections::HashMap<_, (u32, SpareMap)> = Default::default();
                for node in 0..at.grid().len() {
                    let mut map = at.clone();
                    if !matches!(map.state(node), crate::map::NodeState::Busy(_)) {
                        continue;
                    }
                    let choice = choose(&mut map, node, &method, &mut scratch).unwrap();
                    let Choice::Slide {
                        degree,
                        slide: (d, dir, _),
                        ..
                    } = choice
                    else {
                        continue;
                    };
                    if degree != dims {
                        continue;
                    }
                    carry_out(&mut map, node, choice, &mut scratch);
                    let key = (d, dir.slot(), map.grid().coord(node)[d]);
                    match seen.get(&key) {
                        None => {
                            seen.insert(key, (node, map));
                        }
                        Some((other, other_map)) => {
                            let mut moved = other_map.clone();
                            moved.move_death(*other, node);
                            assert_eq!(moved, map, "{key:?}: {other} and {node}");
                            assert_eq!(moved.tracked_traffic(), map.tracked_traffic());
                            assert_eq!(moved.free_nodes().len(), map.free_nodes().len());
                            compared += 1;
                        }
                    }
                }
            }
            assert!(compared > 20, "{:?}: {compared}", start.grid());
        }
    }

    #[test]
    fn exhaustive_runs_share_first_failures_with_the_same_figures() {
        let c = campaign(&["hybrid", "1D"], 2, 36 * 35);
        let mut alone = Tally::new(&c);
        let mut w = Worker::new(&c);
        for ordinal in 0..36 * 35 {
            decode_sequence(ordinal, 36, 2, &mut w.sequence);
            forget(&mut w);
            w.run_sequence(ordinal, &mut alone).unwrap();
        }
        let shared = c.run_exhaustive(2, 10_000, None).unwrap();
        for mt in &mut alone.methods {
            for (i, st) in mt.steps.iter_mut().enumerate() {
                divide(st, c.orderings_after(i as u32));
            }
        }
        assert_eq!(shared, c.results(alone, vec![0], 1));
    }

    #[test]
    fn the_first_failed_node_is_the_first_node_drawn() {
        let c = campaign(&["hybrid"], 11, 500);
        let mut w = Worker::new(&c);
        let mut drawn = std::collections::HashSet::new();
        for j in 0..500 {
            w.draw(c.info.seed, j);
            let first = first_failed_node(c.info.seed, j, 36);
            assert_eq!(first, w.sequence[0], "sample {j}");
            drawn.insert(first);
        }
        assert_eq!(drawn.len(), 36);
    }

    #[test]
    fn windows_sort_by_the_first_failed_node_and_keep_every_item() {
        let c = campaign(&["hybrid"], 11, 0);
        let first = |i: u64| first_failed_node(c.info.seed, 1000 + i, 36);
        let mut items = Vec::new();
        sorted_window(1000, 3000, 3, &|i| first(i - 1000), &mut items);
        let mut seen: Vec<u64> = items.iter().map(|&x| item_index(x)).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..3000).collect::<Vec<_>>());
        for &x in &items {
            assert_eq!(item_first(x), u64::from(first(item_index(x))));
        }
        for w in items.windows(2) {
            let (a, b) = (
                (item_first(w[0]), item_index(w[0])),
                (item_first(w[1]), item_index(w[1])),
            );
            assert!(a < b, "sorted by first failed node, then index");
        }
    }

    #[test]
    fn chunks_cover_every_item_once_and_shrink_towards_the_end() {
        for (count, threads) in [(0, 1), (5, 2), (1000, 2), (3_686_400, 2), (100_000, 7)] {
            let next = AtomicU64::new(0);
            let mut covered = 0;
            let mut sizes = Vec::new();
            while let Some(r) = take_chunk(&next, count, threads) {
                assert_eq!(r.start, covered);
                covered = r.end;
                sizes.push(r.end - r.start);
            }
            assert_eq!(covered, count);
            assert!(sizes.iter().all(|&s| s <= MAX_CHUNK));
            assert!(sizes.windows(2).all(|w| w[1] <= w[0]), "{sizes:?}");
        }
    }

    #[test]
    fn same_numbers_whatever_the_thread_count() {
        let c = campaign(&["hybrid", "0D", "1D"], 11, 200);
        let one = c.run(Shard::ALL, 1, None).unwrap();
        let three = c.run(Shard::ALL, 3, None).unwrap();
        assert_eq!(one, three);
        assert_eq!(one.methods[0].steps[11].cases, 200);
    }

    #[test]
    fn shards_merge_into_the_single_run() {
        let c = campaign(&["hybrid", "2D"], 11, 101);
        let whole = c.run(Shard::ALL, 2, None).unwrap();
        let mut parts: Vec<Results> = (0..4)
            .map(|i| c.run(Shard { index: i, count: 4 }, 1, None).unwrap())
            .collect();
        let mut merged = parts.remove(2);
        assert!(!merged.is_complete());
        for p in &parts {
            merged.merge(p).unwrap();
        }
        assert!(merged.is_complete());
        merged.shards = vec![0];
        merged.shard_count = 1;
        assert_eq!(merged, whole);
        let again = merged.clone();
        assert!(
            merged.merge(&again).is_err(),
            "a shard merged twice is refused"
        );
    }

    #[test]
    fn every_step_counts_every_sample_and_survival_is_monotone() {
        let c = campaign(&["1D"], 11, 300);
        let r = c.run(Shard::ALL, 2, None).unwrap();
        let steps = &r.methods[0].steps;
        let mut alive = u64::MAX;
        for s in steps {
            assert_eq!(s.cases, 300);
            assert!(s.alive <= alive);
            alive = s.alive;
            assert_eq!(s.histogram.iter().sum::<u64>(), s.alive);
        }
        assert!(
            steps[11].alive < 300,
            "1D cannot survive 11 failures everywhere"
        );
    }

    #[test]
    fn kept_worst_maps_replay_to_their_collisions() {
        let c = campaign(&["hybrid"], 11, 100);
        let r = c.run(Shard::ALL, 2, None).unwrap();
        for kept in &r.methods[0].worst {
            assert_eq!(kept.cases.len(), 3);
            for w in &kept.cases {
                let map = c.replay(0, w.sample, kept.failed).unwrap();
                assert_eq!(map.traffic(&c.pattern, false).collisions, w.collisions);
            }
            let worst = r.methods[0].steps[kept.failed as usize].worst().unwrap();
            assert_eq!(kept.cases[0].collisions, worst);
        }
    }

    #[test]
    fn full_and_incremental_engines_agree() {
        let mut c = campaign(&["hybrid", "0D"], 11, 50);
        let inc = c.run(Shard::ALL, 1, None).unwrap();
        c.engine = Engine::Full;
        assert_eq!(c.run(Shard::ALL, 1, None).unwrap(), inc);
    }

    #[test]
    fn exhaustive_counts_on_a_tiny_mesh() {
        // 3x2 mesh with compute 2x2 at the origin: nodes (2,0) and (2,1) are spares.
        let grid = Grid::mesh(&[3, 2]).unwrap();
        let map = SpareMap::new(grid, &[2, 2], &[0, 0]).unwrap();
        let mut c = campaign(&["0D", "1D"], 2, 0);
        c.map = map;
        c.keep_at = vec![];
        c.info.exhaustive = true;
        c.info.box_extents = vec![3, 2];
        c.info.compute = vec![2, 2];
        assert_eq!(c.exhaustive_cases(), Some(30));
        let r = c.run_exhaustive(2, 1000, None).unwrap();
        let zero = &r.methods[0].steps;
        // One failure: 6 cases; 4 hit a compute node (0D substitutes), 2 hit a spare.
        assert_eq!((zero[1].cases, zero[1].alive), (6, 6));
        assert_eq!((zero[1].selected[0], zero[1].free_hits), (4, 2));
        // Two failures: 30 ordered pairs, all survived by 0D (two spares for two failures).
        // The second failure hits a busy node in 4x4 + 2x4 = 24 pairs (compute first: 3
        // computes and the filled spare; spare first: the 4 computes), a free one in 6.
        assert_eq!((zero[2].cases, zero[2].alive), (30, 30));
        assert_eq!((zero[2].selected[0], zero[2].free_hits), (24, 6));
        // 1D slides a failed rank's row towards its spare. It loses the job when the second
        // failure is the other compute node of an already slid row (4 pairs: the dead node
        // blocks the row, the columns are full) or a compute node of a row whose spare died
        // first (4 pairs). The other 22 survive.
        let one = &r.methods[1].steps;
        assert_eq!(one[1].alive, 6);
        assert_eq!((one[2].cases, one[2].alive, one[2].lost), (30, 22, 8));
    }
    fn remapping(mut c: Campaign, at: &[u32], max_moved: Option<u32>) -> Campaign {
        c.info.remap = Some(RemapAt {
            at: at.to_vec(),
            max_moved,
            iterations: 300,
        });
        c
    }

    #[test]
    fn remapped_figures_do_not_depend_on_threads_or_shards() {
        let c = remapping(campaign(&["hybrid", "1D"], 11, 41), &[4, 9], Some(6));
        let one = c.run(Shard::ALL, 1, None).unwrap();
        assert_eq!(one, c.run(Shard::ALL, 3, None).unwrap());
        assert_eq!(one.methods[0].remapped.len(), 2);
        assert_eq!(one.methods[0].remapped[1].traffic.alive, 41);
        let mut merged = c.run(Shard { index: 1, count: 3 }, 2, None).unwrap();
        for i in [2, 0] {
            merged
                .merge(&c.run(Shard { index: i, count: 3 }, 1, None).unwrap())
                .unwrap();
        }
        merged.shards = vec![0];
        merged.shard_count = 1;
        assert_eq!(merged, one);
    }

    #[test]
    fn remapping_leaves_the_sliding_figures_unchanged() {
        let plain = campaign(&["hybrid", "0D", "1D"], 11, 60);
        let with = remapping(plain.clone(), &[2, 5, 11], None);
        let a = plain.run(Shard::ALL, 2, None).unwrap();
        let b = with.run(Shard::ALL, 2, None).unwrap();
        for (x, y) in a.methods.iter().zip(&b.methods) {
            assert_eq!(x.steps, y.steps, "{}", x.method);
            assert_eq!(x.worst, y.worst, "{}", x.method);
            assert!(x.remapped.is_empty());
            assert_eq!(y.remapped.len(), 3);
        }
    }

    #[test]
    fn each_case_is_remapped_never_worse_within_the_move_budget() {
        let c = remapping(campaign(&["hybrid", "0D"], 11, 30), &[6, 11], Some(4));
        let r = c.run(Shard::ALL, 2, None).unwrap();
        let settings = c.info.remap.clone().unwrap();
        for (mi, m) in r.methods.iter().enumerate() {
            for stats in &m.remapped {
                let k = stats.failed;
                let sliding = &m.steps[k as usize];
                assert_eq!(stats.traffic.alive, sliding.alive);
                assert!(stats.max_moved <= 4, "{} moved", stats.max_moved);
                assert!(stats.traffic.mean().unwrap() <= sliding.mean().unwrap());
                assert!(stats.traffic.worst() <= sliding.worst());
                // The recorded figures are the sum of each sample's re-map, each no worse
                // than the sample's sliding map.
                let mut sum = 0;
                let mut improved = 0;
                for j in 0..30 {
                    let map = c.replay(mi, j, k).unwrap();
                    if map.is_lost() {
                        continue;
                    }
                    let budget = crate::remap::Budget {
                        max_moved: settings.max_moved,
                        time_limit: None,
                        iterations: Some(settings.iterations),
                        seed: remap_seed(c.info.seed, j, k),
                    };
                    let before = map.traffic(&c.pattern, false).collisions;
                    let after = crate::remap::remap(&map, &c.pattern, false, &budget)
                        .unwrap()
                        .after
                        .collisions;
                    assert!(after <= before, "sample {j} at {k}: {after} > {before}");
                    sum += u64::from(after);
                    improved += u64::from(after < before);
                }
                assert_eq!(stats.traffic.sum_collisions, sum, "{} at {k}", m.method);
                assert_eq!(stats.improved, improved);
            }
        }
        assert!(
            r.methods[1].remapped[1].improved > 0,
            "re-mapping 0D's maps after 11 failures lowers some"
        );
    }

    #[test]
    fn exhaustive_campaigns_remap_each_failure_prefix_once() {
        let grid = Grid::mesh(&[3, 2]).unwrap();
        let mut c = campaign(&["0D", "1D"], 2, 0);
        c.map = SpareMap::new(grid, &[2, 2], &[0, 0]).unwrap();
        c.keep_at = vec![];
        c.info.exhaustive = true;
        let c = remapping(c, &[1, 2], None);
        let one = c.run_exhaustive(1, 1000, None).unwrap();
        assert_eq!(one, c.run_exhaustive(3, 1000, None).unwrap());
        for m in &one.methods {
            for stats in &m.remapped {
                let sliding = &m.steps[stats.failed as usize];
                assert_eq!(stats.traffic.cases, sliding.alive, "{}", m.method);
                assert_eq!(stats.traffic.alive, sliding.alive, "{}", m.method);
                assert!(stats.traffic.sum_collisions <= sliding.sum_collisions);
            }
        }
    }

    #[test]
    fn bad_remapping_settings_are_refused() {
        let refused = |at: &[u32], iterations: u64, want: &str| {
            let mut c = remapping(campaign(&["hybrid"], 5, 3), at, None);
            c.info.remap.as_mut().unwrap().iterations = iterations;
            let e = c.run(Shard::ALL, 1, None).unwrap_err().to_string();
            assert!(e.contains(want), "{at:?} {iterations}: {e}");
        };
        refused(&[0], 10, "1 to 5; 0 is outside");
        refused(&[6], 10, "1 to 5; 6 is outside");
        refused(&[3, 3], 10, "3 comes after 3");
        refused(&[4, 2], 10, "2 comes after 4");
        refused(&[2], 0, "at least 1 iteration");
    }

    #[test]
    fn results_without_remapping_keep_their_old_form() {
        let plain = campaign(&["hybrid"], 5, 10)
            .run(Shard::ALL, 1, None)
            .unwrap();
        let json = serde_json::to_string(&plain).unwrap();
        assert!(!json.contains("remap"), "{json}");
        let back: Results = serde_json::from_str(&json).unwrap();
        assert_eq!(back, plain);
        // A campaign with re-mapping is another campaign: no merging with one without.
        let c = remapping(campaign(&["hybrid"], 5, 10), &[3], None);
        let mut other = c.run(Shard { index: 0, count: 1 }, 1, None).unwrap();
        let json = serde_json::to_string(&other).unwrap();
        assert!(json.contains("\"remapped\""), "{json}");
        assert_eq!(serde_json::from_str::<Results>(&json).unwrap(), other);
        other.shards = vec![5];
        let mut plain = plain;
        assert!(plain.merge(&other).is_err());
    }

    #[test]
    fn remap_seeds_differ_by_sample_and_failure_count() {
        let s = remap_seed(1, 0, 10);
        assert_ne!(s, remap_seed(1, 1, 10));
        assert_ne!(s, remap_seed(1, 0, 11));
        assert_ne!(s, remap_seed(2, 0, 10));
        assert_eq!(s, remap_seed(1, 0, 10));
    }

    #[test]
    fn csv_rows_carry_the_remapped_figures_at_their_failure_counts() {
        let c = remapping(campaign(&["hybrid"], 5, 20), &[3], Some(2));
        let r = c.run(Shard::ALL, 1, None).unwrap();
        let csv = r.to_csv();
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|row| row.len() == header.len()));
        let stats = &r.methods[0].remapped[0];
        let at3 = &rows[3];
        assert_eq!(at3[col("failed")], "3");
        assert_eq!(at3[col("remap_cases")], stats.traffic.alive.to_string());
        let mean = stats.traffic.mean().unwrap();
        assert_eq!(at3[col("remap_mean")], format!("{mean:.4}"));
        assert_eq!(at3[col("max_moved")], stats.max_moved.to_string());
        assert_eq!(at3[col("remap_improved")], stats.improved.to_string());
        assert_eq!(rows[2][col("remap_mean")], "", "no re-map at 2 failures");
        let plain = campaign(&["hybrid"], 5, 20)
            .run(Shard::ALL, 1, None)
            .unwrap();
        assert!(!plain.to_csv().contains("remap"));
    }

    #[test]
    fn engines_agree_with_remapping() {
        let mut c = remapping(campaign(&["hybrid", "0D"], 11, 20), &[5, 11], Some(8));
        let inc = c.run(Shard::ALL, 1, None).unwrap();
        for engine in [Engine::Full, Engine::Reference] {
            c.engine = engine;
            assert_eq!(c.run(Shard::ALL, 2, None).unwrap(), inc, "{engine:?}");
        }
    }
}
