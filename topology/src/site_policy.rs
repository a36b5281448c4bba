//! The site policy file (YAML, default `/etc/slurm/spares.yaml`) and what it decides for one
//! job: the spare shape (explicit, default or `auto`), the method, the padded box, and whether
//! the site allows it. Read by the job_submit and SPANK plugins (through
//! `slurm_plugin_common::policy`, which adds the cache and the Slurm error codes) and by
//! `spares plan` / `spares policy`, so the CLI answers as the site would.
//!
//! ```yaml
//! topology: torus-4x4x2.yaml        # topology file (relative paths: to this file's directory)
//! default_spares: none              # none | auto | qD(r,s): for jobs with --job-shape only
//! allowed: ["3D(1,1)", "3D(2,1)"]   # explicit shapes a user may ask for (default: any)
//! auto:                             # --spares=auto: compute nodes -> shape, first row that fits
//!   - {up_to_nodes: 8, spares: "3D(1,1)"}
//!   - {spares: "3D(2,1)"}           # (empty: most protective shape under max_fraction)
//! failure_rate:                     # --spares=auto by failure rate instead of the table:
//!   node_mtbf_hours: 50000          #   (or failures_per_node_hour: 2.0e-5)
//!   target: 0.99                    #   P(the job keeps enough spares over its --time)
//!   default_hours: 24               #   jobs without --time
//! max_fraction: 0.5                 # spare nodes / box nodes, at most
//! unit: {multiple: [2, 2, 1]}       # overrides the topology's allocation unit
//! on_no_placement: wait             # or reject
//! placement: native                 # or pinned; native: Slurm 26.05's topology/torus3d places
//!                                   #   the box (default when `topology` is Slurm's
//!                                   #   topology.yaml with placements and no `unit` override)
//! free_nodes_file: /run/sparesd/free-nodes
//! state_dir: /run/spares            # map files of running jobs
//! sparesd_socket: /run/sparesd/sparesd.sock
//! limits:                           # site budgets (defaults: topology::limits), may only lower
//!   max_nodes: 1048576              # nodes of a job's box
//!   max_file_bytes: 16777216        # size of the topology file
//!   max_request_bytes: 65536        # a job's --partition, --exclude, --nodelist text
//!   max_request_partitions: 64      # partitions in a job's --partition
//! ```

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::grid::format_shape;
use crate::placement::InitialMap;
use crate::policy::{
    failure_rate_candidates, AutoChoice, AutoPolicy, AutoRule, FailureRate, FailureRateSpec,
};
use crate::{Error, Limits, Method, Plan, SpareShape, Topology};

/// Value of `--spares` (and of the policy's `default_spares`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spares {
    /// Let the site policy choose by job size.
    Auto,
    /// No spare nodes.
    None,
    /// `qD(r,s)`: `r` of the `q` dimensions extended by `s` layers.
    Shape(SpareShape),
}

impl fmt::Display for Spares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spares::Auto => f.write_str("auto"),
            Spares::None => f.write_str("none"),
            Spares::Shape(s) => s.fmt(f),
        }
    }
}

impl Spares {
    /// Parses `auto`, `none` (any case, spaces around ignored) or a spare shape.
    pub fn parse(value: &str) -> Result<Spares, Error> {
        let t = value.trim();
        if t.eq_ignore_ascii_case("auto") {
            Ok(Spares::Auto)
        } else if t.eq_ignore_ascii_case("none") {
            Ok(Spares::None)
        } else if t.is_empty() {
            Err(Error::Invalid("the value is empty".into()))
        } else {
            SpareShape::parse(t).map(Spares::Shape)
        }
    }

    /// The model's explanation without the value it repeats.
    pub fn reason(e: Error) -> String {
        match e {
            Error::SpareShape { why, .. } | Error::Method { why, .. } => why,
            other => other.to_string(),
        }
    }
}

/// The spares options of one job after their syntax check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparesRequest {
    pub spares: Option<Spares>,
    pub job_shape: Option<Vec<u32>>,
    pub spare_method: Option<Method>,
}

/// Where the policy file is unless the plugin is told otherwise.
pub const DEFAULT_POLICY_PATH: &str = "/etc/slurm/spares.yaml";
/// The daemon's socket unless the policy names another.
pub const DEFAULT_SPARESD_SOCKET: &str = "/run/sparesd/sparesd.sock";
/// Where map files go unless the policy names a directory: root's, created 0755 by the
/// packaging (never a world-writable directory such as /tmp, which the plugins refuse).
pub const DEFAULT_STATE_DIR: &str = "/run/spares";

/// What to do when no box of free nodes exists now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnNoPlacement {
    /// Pin the first box of the network (lowest origin) and let the job queue for it.
    Wait,
    /// Reject the job.
    Reject,
}

/// Who places a job's box.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementMode {
    /// Slurm's `topology/torus3d` (26.05): job_submit pads the node count to one of the
    /// topology.yaml's placements and sets no node list; the job's nodes find the box's
    /// origin from the nodes Slurm gave it.
    Native,
    /// job_submit picks the box and pins it with `req_nodes` (older Slurm, or any topology).
    Pinned,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    topology: String,
    #[serde(default)]
    torus: Option<String>,
    #[serde(default = "none_string")]
    default_spares: String,
    #[serde(default)]
    default_method: Option<String>,
    #[serde(default)]
    allowed: Option<Vec<String>>,
    #[serde(default)]
    auto: Vec<AutoRule>,
    #[serde(default)]
    failure_rate: Option<FailureRateSpec>,
    #[serde(default = "one")]
    max_fraction: f64,
    #[serde(default)]
    unit: Option<serde_yaml::Value>,
    #[serde(default = "wait")]
    on_no_placement: OnNoPlacement,
    #[serde(default)]
    placement: Option<PlacementMode>,
    #[serde(default)]
    free_nodes_file: Option<PathBuf>,
    #[serde(default)]
    state_dir: Option<PathBuf>,
    #[serde(default)]
    sparesd_socket: Option<PathBuf>,
    #[serde(default)]
    limits: LimitsSpec,
    #[serde(default)]
    max_unusable_nodes_at_start: u32,
    #[serde(default)]
    initial_map: InitialMapSpec,
    #[serde(default = "default_initial_map_iterations")]
    initial_map_iterations: u64,
    #[serde(default)]
    partitions: Vec<String>,
}

/// `initial_map:` of the policy file.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum InitialMapSpec {
    #[default]
    Slide,
    Remap,
}

/// Iterations of the re-map of a start with dead nodes unless the policy says otherwise.
pub const DEFAULT_INITIAL_MAP_ITERATIONS: u64 = 100_000;
/// Most iterations a policy may give the re-map at start: every node of the job runs it in the
/// prolog (about a microsecond each on small boxes).
pub const MAX_INITIAL_MAP_ITERATIONS: u64 = 10_000_000;

fn default_initial_map_iterations() -> u64 {
    DEFAULT_INITIAL_MAP_ITERATIONS
}

/// The policy's `limits:` section; absent entries keep the defaults of `topology::limits`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitsSpec {
    #[serde(default)]
    max_nodes: Option<u32>,
    #[serde(default)]
    max_file_bytes: Option<u64>,
    #[serde(default)]
    max_request_bytes: Option<usize>,
    #[serde(default)]
    max_request_partitions: Option<usize>,
}

impl LimitsSpec {
    /// The site's limits: between 1 and the built-in defaults, which no site may raise (they
    /// bound what the daemons allocate for one job).
    fn limits(&self) -> Result<Limits, String> {
        let mut limits = Limits::default();
        let within = |name: &str, v: u64, max: u64| {
            if v == 0 || v > max {
                Err(format!("limits.{name}: {v} must be between 1 and {max}"))
            } else {
                Ok(v)
            }
        };
        if let Some(v) = self.max_nodes {
            within("max_nodes", u64::from(v), u64::from(limits.max_nodes))?;
            limits.max_nodes = v;
        }
        if let Some(v) = self.max_file_bytes {
            limits.max_file_bytes = within("max_file_bytes", v, limits.max_file_bytes)?;
        }
        if let Some(v) = self.max_request_bytes {
            within(
                "max_request_bytes",
                v as u64,
                limits.max_request_bytes as u64,
            )?;
            limits.max_request_bytes = v;
        }
        if let Some(v) = self.max_request_partitions {
            within(
                "max_request_partitions",
                v as u64,
                limits.max_request_partitions as u64,
            )?;
            limits.max_request_partitions = v;
        }
        Ok(limits)
    }
}

fn none_string() -> String {
    "none".into()
}
fn one() -> f64 {
    1.0
}
fn wait() -> OnNoPlacement {
    OnNoPlacement::Wait
}

/// The policy's `placement:`, checked against its topology: native placement needs Slurm's
/// torus3d placements as the allocation unit (the boxes Slurm hands out), which is also the
/// default when the topology is such a file.
fn native_placement(
    asked: Option<PlacementMode>,
    unit_overridden: bool,
    topology: &Topology,
) -> Result<PlacementMode, String> {
    let torus3d = !topology.slurm_placements.is_empty();
    match asked {
        None if torus3d && !unit_overridden => Ok(PlacementMode::Native),
        None | Some(PlacementMode::Pinned) => Ok(PlacementMode::Pinned),
        Some(PlacementMode::Native) if !torus3d => Err(format!(
            "placement: native needs Slurm's topology.yaml with a torus3d torus and its placements as `topology` ({} has none): Slurm places only those boxes; use placement: pinned",
            topology.source
        )),
        Some(PlacementMode::Native) if unit_overridden => Err(
            "placement: native takes the boxes Slurm places (the topology.yaml's placements); remove `unit`, or use placement: pinned".into()
        ),
        Some(PlacementMode::Native) => Ok(PlacementMode::Native),
    }
}

/// A policy file that cannot be used; the message names the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("policy file {file}: {why}")]
pub struct PolicyError {
    pub file: String,
    pub why: String,
}

/// A site's policy, loaded and checked.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The policy file.
    pub path: PathBuf,
    /// The topology file it names (read again when either file changes).
    pub topology_path: PathBuf,
    /// The network (with the policy's unit, if it overrides the topology's).
    pub topology: Topology,
    /// Spares for jobs that give `--job-shape` but no `--spares`.
    pub default_spares: Spares,
    /// Method for jobs without `--spare-method`.
    pub default_method: Method,
    /// Explicit shapes users may ask for; `None` allows any.
    pub allowed: Option<Vec<SpareShape>>,
    /// How `auto` chooses.
    pub auto: AutoPolicy,
    /// `--spares=auto` by failure rate (replaces the table and the band when given).
    pub failure_rate: Option<FailureRate>,
    /// Largest spare fraction of a box.
    pub max_fraction: f64,
    pub on_no_placement: OnNoPlacement,
    /// Who places the box (`placement:`).
    pub placement: PlacementMode,
    pub free_nodes_file: Option<PathBuf>,
    pub state_dir: PathBuf,
    pub sparesd_socket: PathBuf,
    /// The site's budgets (`limits:`), applied to every job's box.
    pub limits: Limits,
    /// Most unusable (down, drained) nodes a box may hold when job_submit finds no box of free
    /// nodes; the job's map treats them as dead at start. 0: only boxes of free nodes.
    pub max_unusable_nodes_at_start: u32,
    /// How the map of a box with dead nodes at start is computed.
    pub initial_map: InitialMap,
    /// The Slurm partitions that take jobs with spares (`partitions:`); the first is where
    /// such a job without `--partition` goes. Empty: any partition, and Slurm's default.
    pub partitions: Vec<String>,
}

/// Most partitions the policy's `partitions:` may name, and the longest name.
pub const MAX_POLICY_PARTITIONS: usize = 64;
pub const MAX_PARTITION_NAME_BYTES: usize = 256;

/// What the policy makes of a job (one per submission: its size does not matter).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No spares: the job passes untouched.
    Untouched,
    /// A padded box with spares.
    Spares {
        /// The box, its compute shape and counts.
        plan: Plan,
        /// The substitution method.
        method: Method,
        /// Why `auto` chose this shape, if it did.
        auto_reason: Option<String>,
    },
}

/// A job the policy refuses: the text is what the user reads after `spares: `, the kind
/// chooses the Slurm error code (whose text sbatch prints after ours).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String, pub RefusalKind);

/// Why a job is refused; the Slurm plugins turn each kind into the Slurm error code that
/// says it (`slurm_plugin_common::policy::refusal_code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// An option or a combination of options that cannot work (`ESPANK_BAD_ARG`: "Bad
    /// argument").
    Options,
    /// Neither `-N` nor `--job-shape` (`ESLURM_JOB_MISSING_SIZE_SPECIFICATION`: "Job size
    /// specification needs to be provided").
    MissingSize,
    /// `-N` that disagrees with the shape, or a box over the site's size limit
    /// (`ESLURM_INVALID_NODE_COUNT`: "Node count specification invalid").
    NodeCount,
    /// A shape the site does not allow (`ESLURM_ACCESS_DENIED`).
    NotAllowed,
    /// A box the network, the allocation unit or the spare limit cannot hold
    /// (`ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE`).
    Unavailable,
    /// No free box now and the site rejects rather than waits
    /// (`ESLURM_CAN_NOT_START_IMMEDIATELY`: "Job can not start immediately";
    /// `ESLURM_NODES_BUSY` would make sbatch retry for a minute).
    Busy,
}

impl Refusal {
    pub fn options(message: String) -> Self {
        Refusal(message, RefusalKind::Options)
    }
    pub fn node_count(message: String) -> Self {
        Refusal(message, RefusalKind::NodeCount)
    }
    pub fn unavailable(message: String) -> Self {
        Refusal(message, RefusalKind::Unavailable)
    }
}

/// What the policy reads of a job beyond its spares options.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JobFacts {
    /// `-N` as given (`min_nodes`), if the user gave it.
    pub nodes: Option<u32>,
    /// `--time` in minutes, if the job has a limit (failure-rate sizing).
    pub time_limit_minutes: Option<u32>,
    /// Whether job_submit already admitted the options (the job's nodes re-read the decision
    /// job_submit wrote): the submission-only rules (`allowed:`, `--job-shape` without
    /// `--spares`) are not applied again, so a shape `auto` chose is rebuilt as it was.
    pub admitted: bool,
}

impl JobFacts {
    /// The facts of a job on its nodes, after job_submit wrote its decision.
    pub fn admitted() -> Self {
        JobFacts {
            admitted: true,
            ..Default::default()
        }
    }
}

impl Policy {
    /// Parses a policy file's text; `path` names it in errors and anchors a relative
    /// topology path. The topology file is read here.
    pub fn parse(text: &str, path: &Path) -> Result<Policy, PolicyError> {
        let file = path.display().to_string();
        let bad = |why: String| PolicyError {
            file: file.clone(),
            why,
        };
        Limits::default()
            .check_depth("the policy", text)
            .map_err(|e| bad(e.to_string()))?;
        let raw: PolicyFile = serde_yaml::from_str(text).map_err(|e| bad(e.to_string()))?;
        let limits = raw.limits.limits().map_err(bad)?;
        // Relative paths are relative to the policy file, wherever slurmctld runs.
        let anchored = |p: PathBuf| {
            if p.is_relative() {
                path.parent().unwrap_or(Path::new(".")).join(p)
            } else {
                p
            }
        };
        let topo_path = anchored(PathBuf::from(&raw.topology));
        // slurmctld reads this inside job_submit: a FIFO or /dev/zero must not block it.
        let topo_text = crate::sitefile::read(&topo_path, limits.max_file_bytes)
            .map_err(|e| bad(format!("topology: {e}")))?;
        let mut topology = Topology::from_yaml(
            &topo_text,
            &topo_path.display().to_string(),
            raw.torus.as_deref(),
        )
        .map_err(|e| bad(format!("topology: {e}")))?;
        let q = topology.grid.dims();
        let unit_overridden = raw.unit.is_some();
        if let Some(unit) = raw.unit {
            let unit =
                crate::topofile::parse_unit(&unit, q).map_err(|e| bad(format!("unit: {e}")))?;
            unit.check(topology.grid.extents())
                .map_err(|e| bad(format!("unit: {e}")))?;
            topology.unit = unit;
        }
        let placement = native_placement(raw.placement, unit_overridden, &topology).map_err(bad)?;
        let default_spares = Spares::parse(&raw.default_spares)
            .map_err(|e| bad(format!("default_spares: {}", Spares::reason(e))))?;
        if let Spares::Shape(s) = &default_spares {
            s.check_dims(q)
                .map_err(|e| bad(format!("default_spares: {e}")))?;
        }
        let default_method = match &raw.default_method {
            Some(m) => Method::parse(m, q).map_err(|e| bad(format!("default_method: {e}")))?,
            None => Method::hybrid(q),
        };
        let allowed = raw
            .allowed
            .map(|list| {
                list.iter()
                    .map(|s| {
                        let shape = SpareShape::parse(s)?;
                        shape.check_dims(q)?;
                        Ok(shape)
                    })
                    .collect::<Result<Vec<_>, Error>>()
            })
            .transpose()
            .map_err(|e| bad(format!("allowed: {e}")))?;
        if !(raw.max_fraction > 0.0 && raw.max_fraction <= 1.0) {
            return Err(bad(format!(
                "max_fraction: {} is not a fraction above 0 and at most 1 (e.g. 0.5)",
                raw.max_fraction
            )));
        }
        for rule in &raw.auto {
            SpareShape::parse(&rule.spares)
                .and_then(|s| s.check_dims(q))
                .map_err(|e| bad(format!("auto: {e}")))?;
        }
        // The model's band must lie below 1; a maximum of 1 means "no limit".
        let auto = AutoPolicy::new(0.0, raw.max_fraction.min(0.999_999), &raw.auto)
            .map_err(|e| bad(format!("auto: {e}")))?;
        let failure_rate = raw
            .failure_rate
            .as_ref()
            .map(FailureRate::from_spec)
            .transpose()
            .map_err(|e| bad(format!("failure_rate: {e}")))?;
        if !(1..=MAX_INITIAL_MAP_ITERATIONS).contains(&raw.initial_map_iterations) {
            return Err(bad(format!(
                "initial_map_iterations: {} must be between 1 and {MAX_INITIAL_MAP_ITERATIONS}",
                raw.initial_map_iterations
            )));
        }
        if u64::from(raw.max_unusable_nodes_at_start) > u64::from(limits.max_nodes) {
            return Err(bad(format!(
                "max_unusable_nodes_at_start: {} exceeds limits.max_nodes = {}",
                raw.max_unusable_nodes_at_start, limits.max_nodes
            )));
        }
        if raw.partitions.len() > MAX_POLICY_PARTITIONS {
            return Err(bad(format!(
                "partitions: {} names, over the limit of {MAX_POLICY_PARTITIONS}",
                raw.partitions.len()
            )));
        }
        for name in &raw.partitions {
            let fine = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
            if name.is_empty() || name.len() > MAX_PARTITION_NAME_BYTES || !name.chars().all(fine) {
                return Err(bad(format!(
                    "partitions: '{}' is no partition name (letters, digits, '_', '-' and '.', at most {MAX_PARTITION_NAME_BYTES} bytes)",
                    name.escape_default()
                )));
            }
        }
        let initial_map = match raw.initial_map {
            InitialMapSpec::Slide => InitialMap::Slide,
            InitialMapSpec::Remap => InitialMap::Remap {
                iterations: raw.initial_map_iterations,
            },
        };
        Ok(Policy {
            path: path.to_path_buf(),
            topology_path: topo_path,
            topology,
            default_spares,
            default_method,
            allowed,
            auto,
            failure_rate,
            max_fraction: raw.max_fraction,
            on_no_placement: raw.on_no_placement,
            placement,
            free_nodes_file: raw.free_nodes_file.map(anchored),
            state_dir: anchored(
                raw.state_dir
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
            ),
            sparesd_socket: anchored(
                raw.sparesd_socket
                    .unwrap_or_else(|| PathBuf::from(DEFAULT_SPARESD_SOCKET)),
            ),
            limits,
            max_unusable_nodes_at_start: raw.max_unusable_nodes_at_start,
            initial_map,
            partitions: raw.partitions,
        })
    }

    /// Reads and parses a policy file.
    pub fn load(path: &Path) -> Result<Policy, PolicyError> {
        let text = crate::sitefile::read(path, crate::limits::MAX_FILE_BYTES).map_err(|e| {
            let why = match e {
                crate::sitefile::SiteFileError::Io { source, .. } => {
                    format!("cannot read it: {source}")
                }
                other => other.to_string(),
            };
            PolicyError {
                file: path.display().to_string(),
                why,
            }
        })?;
        Policy::parse(&text, path)
    }

    /// What the policy makes of a job's (syntax-checked) options alone, as on the job's
    /// nodes (see [`JobFacts::admitted`]).
    pub fn decide(&self, req: &SparesRequest) -> Result<Decision, Refusal> {
        self.decide_job(req, &JobFacts::admitted())
    }

    /// What the policy makes of a job: its options and its `-N`.
    ///
    /// `-N` alone (no `--job-shape`) is the compute node count: the compute shape is derived
    /// from it ([`AutoPolicy::choose_for_nodes`], [`crate::shape::shape_for_nodes`]). With
    /// `--job-shape`, `-N` must be the compute node count or the box's node count; anything
    /// else is refused, never silently changed.
    ///
    /// Under [`PlacementMode::Native`], a box that is no placement of Slurm's topology.yaml is
    /// refused with the placements and the options that would give one.
    pub fn decide_job(&self, req: &SparesRequest, job: &JobFacts) -> Result<Decision, Refusal> {
        match self.decide_in_unit(req, job) {
            Err(r)
                if self.placement == PlacementMode::Native
                    && r.1 == RefusalKind::Unavailable
                    && !job.admitted =>
            {
                if req.spares == Some(Spares::Auto) {
                    if let Some(d) = self.auto_placement(req, job) {
                        return Ok(d);
                    }
                }
                Err(self.name_placements(r, req, job))
            }
            decided => decided,
        }
    }

    /// `--spares=auto` under native placement when the policy's own choice gives no
    /// placement within the limits: the most protective shape (of `allowed`, else qD(r,1))
    /// whose box is one.
    fn auto_placement(&self, req: &SparesRequest, job: &JobFacts) -> Option<Decision> {
        let q = self.topology.grid.dims();
        let candidates = self
            .allowed
            .clone()
            .unwrap_or_else(|| crate::policy::AutoPolicy::candidates(q));
        candidates.iter().rev().find_map(|shape| {
            let r = SparesRequest {
                spares: Some(Spares::Shape(shape.clone())),
                ..req.clone()
            };
            match self.decide_in_unit(&r, job) {
                Ok(Decision::Spares { plan, method, .. }) => Some(Decision::Spares {
                    auto_reason: Some(format!(
                        "the policy's choice gives no placement within its limits; {shape} is the most protective shape whose {} box is one",
                        format_shape(&plan.box_extents)
                    )),
                    plan,
                    method,
                }),
                _ => None,
            }
        })
    }

    /// [`Policy::decide_job`] without the placements' explanation.
    fn decide_in_unit(&self, req: &SparesRequest, job: &JobFacts) -> Result<Decision, Refusal> {
        let net = self.topology.grid.extents();
        let q = net.len();
        let spares = match (&req.spares, &req.job_shape) {
            (Some(s), _) => s.clone(),
            (None, Some(shape)) => {
                if self.default_spares == Spares::None && !job.admitted {
                    return Err(Refusal::options(format!(
                        "--job-shape={} without --spares: this cluster's default is no spares, so the job would run on {} node(s), not as a {} grid; add --spares=auto (or a shape such as {}), or drop --job-shape",
                        format_shape(shape),
                        job.nodes.unwrap_or(1),
                        format_shape(shape),
                        AutoPolicy::candidates(q).first().map(|s| s.to_string()).unwrap_or_default()
                    )));
                }
                self.default_spares.clone()
            }
            (None, None) => return Ok(Decision::Untouched),
        };
        if spares == Spares::None {
            return Ok(Decision::Untouched);
        }
        let method = match &req.spare_method {
            Some(m) => Method::parse(&m.to_string(), q)
                .map_err(|e| Refusal::options(format!("--spare-method={m}: {e}")))?,
            None => self.default_method.clone(),
        };
        let over =
            |e: Error| Refusal::node_count(format!("{e} (limits.max_nodes of the site policy)"));
        let Some(compute) = req.job_shape.as_ref() else {
            let Some(nodes) = job.nodes else {
                return Err(Refusal(
                    format!(
                        "--spares={spares} needs the job's size: -N (the number of compute nodes) or --job-shape=AxBxC (the logical grid of the job's ranks, {q} extents on this {} network)",
                        format_shape(net)
                    ),
                    RefusalKind::MissingSize,
                ));
            };
            return self.decide_nodes(&spares, nodes, method, job);
        };
        if compute.len() != q {
            return Err(Refusal::options(format!(
                "--job-shape={} has {} extents; the {} network has {q} dimensions",
                format_shape(compute),
                compute.len(),
                format_shape(net)
            )));
        }
        // The site's budget, before any planning work: the compute shape, then the box.
        self.limits
            .check_nodes("--job-shape", compute)
            .map_err(over)?;
        let (plan, auto_reason) = match &spares {
            Spares::Auto => {
                let c = match &self.failure_rate {
                    Some(f) => self.by_failure_rate(f, job, &method, |s| {
                        Plan::for_compute(compute, Some(s), &self.topology.unit, net)
                    })?,
                    None => self
                        .auto
                        .choose(compute, &self.topology.unit, net)
                        .map_err(|e| Refusal::unavailable(format!("--spares=auto: {e}")))?,
                };
                (c.plan, Some(c.reason))
            }
            Spares::Shape(shape) => {
                shape
                    .check_dims(q)
                    .map_err(|e| Refusal::options(e.to_string()))?;
                if !job.admitted {
                    self.check_allowed(shape)?;
                }
                let plan = Plan::for_compute(compute, Some(shape), &self.topology.unit, net)
                    .map_err(|e| Refusal::unavailable(e.to_string()))?;
                (plan, None)
            }
            Spares::None => unreachable!("handled above"),
        };
        if let Some(n) = job.nodes {
            if u64::from(n) != plan.compute_nodes && u64::from(n) != plan.box_nodes {
                return Err(Refusal::node_count(format!(
                    "-N {n} does not match --job-shape={} ({} compute nodes; with spares {} the job's {} box has {} nodes): give -N {}, or -N {}, or leave -N out",
                    format_shape(compute),
                    plan.compute_nodes,
                    plan.spares,
                    format_shape(&plan.box_extents),
                    plan.box_nodes,
                    plan.compute_nodes,
                    plan.box_nodes
                )));
            }
        }
        self.checked(plan, method, auto_reason)
    }

    /// A native-placement refusal with Slurm's placements and, checked by deciding them, the
    /// spare shapes (same size) and node counts (same spare shape) that give one.
    fn name_placements(&self, refusal: Refusal, req: &SparesRequest, job: &JobFacts) -> Refusal {
        let placements = &self.topology.slurm_placements;
        let listed: Vec<String> = placements
            .iter()
            .map(|p| {
                let n: u64 = p.iter().map(|&x| u64::from(x)).product();
                format!("{} ({n} nodes)", format_shape(p))
            })
            .collect();
        let q = self.topology.grid.dims();
        let candidates = self
            .allowed
            .clone()
            .unwrap_or_else(|| crate::policy::AutoPolicy::candidates(q));
        let works = |r: &SparesRequest, j: &JobFacts| {
            matches!(self.decide_in_unit(r, j), Ok(Decision::Spares { .. }))
        };
        let mut tries: Vec<String> = candidates
            .iter()
            .filter(|s| {
                let r = SparesRequest {
                    spares: Some(Spares::Shape((*s).clone())),
                    ..req.clone()
                };
                Some(&Spares::Shape((*s).clone())) != req.spares.as_ref() && works(&r, job)
            })
            .map(|s| format!("--spares={s}"))
            .collect();
        // Node counts that fill a placement with the job's own spare shape.
        if let Some(Spares::Shape(shape)) = &req.spares {
            let mut counts: Vec<u64> = placements
                .iter()
                .filter_map(|p| Plan::for_box(p, Some(shape)).ok())
                .map(|plan| plan.compute_nodes)
                .filter(|&n| {
                    let r = SparesRequest {
                        job_shape: None,
                        ..req.clone()
                    };
                    let j = JobFacts {
                        nodes: u32::try_from(n).ok(),
                        ..*job
                    };
                    works(&r, &j)
                })
                .collect();
            counts.sort_unstable();
            counts.dedup();
            tries.extend(
                counts
                    .iter()
                    .map(|n| format!("-N {n} --spares={shape} without --job-shape")),
            );
        }
        let hint = if tries.is_empty() {
            String::new()
        } else {
            format!("; try {}", tries.join(", or "))
        };
        Refusal(
            format!(
                "{}. Slurm places only these boxes on the {} torus (placements of {}): {}{hint}",
                refusal.0,
                self.topology.name,
                self.topology.source,
                listed.join(", ")
            ),
            refusal.1,
        )
    }

    /// `-N nodes` without `--job-shape`: the compute shape from the node count.
    fn decide_nodes(
        &self,
        spares: &Spares,
        nodes: u32,
        method: Method,
        job: &JobFacts,
    ) -> Result<Decision, Refusal> {
        let net = self.topology.grid.extents();
        // The site's budget and the network's size bound the search before it starts.
        let network_nodes = self.topology.grid.len();
        if nodes == 0 || nodes > network_nodes || nodes > self.limits.max_nodes {
            return Err(Refusal::node_count(format!(
                "-N {nodes} compute nodes: the {} network has {network_nodes} nodes and this cluster allows boxes of at most {} nodes (limits.max_nodes of the site policy)",
                format_shape(net),
                self.limits.max_nodes
            )));
        }
        let (plan, auto_reason) = match spares {
            Spares::Auto => {
                let c = match &self.failure_rate {
                    Some(f) => self.by_failure_rate(f, job, &method, |s| {
                        crate::shape::shape_for_nodes(
                            u64::from(nodes),
                            Some(s),
                            &self.topology.unit,
                            net,
                        )
                    })?,
                    None => self
                        .auto
                        .choose_for_nodes(u64::from(nodes), &self.topology.unit, net)
                        .map_err(|e| {
                            Refusal::unavailable(format!("--spares=auto with -N {nodes}: {e}"))
                        })?,
                };
                (c.plan, Some(c.reason))
            }
            Spares::Shape(shape) => {
                shape
                    .check_dims(net.len())
                    .map_err(|e| Refusal::options(e.to_string()))?;
                self.check_allowed(shape)?;
                let plan = crate::shape::shape_for_nodes(
                    u64::from(nodes),
                    Some(shape),
                    &self.topology.unit,
                    net,
                )
                .map_err(|e| {
                    Refusal::unavailable(format!("-N {nodes}: {e}; give --job-shape=AxBxC"))
                })?;
                (plan, None)
            }
            Spares::None => return Ok(Decision::Untouched),
        };
        self.checked(plan, method, auto_reason)
    }

    /// `--spares=auto` by the policy's failure rate over the job's time limit, among the
    /// allowed shapes (or every qD(r,s), s <= 3). Only for methods that end in 0D: those
    /// substitute every failure while a free spare is left, so a job keeps its spares while
    /// failures <= spares; other methods can die earlier, and their survival is the
    /// simulator's (`spares simulate`), not this sum.
    fn by_failure_rate(
        &self,
        rate: &FailureRate,
        job: &JobFacts,
        method: &Method,
        plan_of: impl Fn(&SpareShape) -> Result<Plan, Error>,
    ) -> Result<AutoChoice, Refusal> {
        if method.degrees().last() != Some(&0) {
            return Err(Refusal::options(format!(
                "--spares=auto sizes spares by failure rate on this cluster, which assumes a method that ends in 0D; --spare-method={method} can fail before its spares run out: give an explicit --spares (spares simulate shows its survival)"
            )));
        }
        let hours = match (job.time_limit_minutes, rate.default_hours) {
            (Some(m), _) => f64::from(m) / 60.0,
            (None, Some(h)) => h,
            (None, None) => return Err(Refusal(
                "--spares=auto sizes spares by the job's time limit on this cluster: give --time"
                    .into(),
                RefusalKind::MissingSize,
            )),
        };
        let hours = hours.min(crate::policy::MAX_HOURS);
        let candidates = match &self.allowed {
            Some(a) => a.clone(),
            None => failure_rate_candidates(self.topology.grid.dims()),
        };
        rate.choose(&candidates, hours, plan_of)
            .map_err(|e| Refusal::unavailable(format!("--spares=auto: {e}")))
    }

    /// Refuses an explicit shape the site does not allow.
    fn check_allowed(&self, shape: &SpareShape) -> Result<(), Refusal> {
        if let Some(allowed) = &self.allowed {
            if !allowed.contains(shape) {
                let list: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
                return Err(Refusal(
                    format!(
                        "--spares={shape} is not allowed on this cluster (allowed: {}, auto, none)",
                        list.join(", ")
                    ),
                    RefusalKind::NotAllowed,
                ));
            }
        }
        Ok(())
    }

    /// The site's limits on a planned box.
    fn checked(
        &self,
        plan: Plan,
        method: Method,
        auto_reason: Option<String>,
    ) -> Result<Decision, Refusal> {
        let over =
            |e: Error| Refusal::node_count(format!("{e} (limits.max_nodes of the site policy)"));
        self.limits
            .check_nodes("the job's box", &plan.box_extents)
            .map_err(over)?;
        if plan.fraction > self.max_fraction + 1e-12 {
            return Err(Refusal::unavailable(format!(
                "--spares={} with --job-shape={} gives a {} box with {} spares of {} nodes ({:.1}%); this cluster allows at most {:.1}% spares",
                plan.spares,
                format_shape(&plan.compute),
                format_shape(&plan.box_extents),
                plan.spare_nodes,
                plan.box_nodes,
                plan.fraction * 100.0,
                self.max_fraction * 100.0
            )));
        }
        Ok(Decision::Spares {
            plan,
            method,
            auto_reason,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A directory with the 4x4x2 torus and a policy file of `body` (after its topology line),
    /// removed when dropped.
    pub fn policy_dir(name: &str, body: &str) -> tempfile::TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("spares-site-policy-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::write(
            dir.path().join("torus.yaml"),
            "name: torus-4x4x2\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("policy.yaml"),
            format!("topology: torus.yaml\n{body}"),
        )
        .unwrap();
        dir
    }

    /// The policy's decision at submission, without `-N`.
    pub fn submit(p: &Policy, r: &SparesRequest) -> Result<Decision, Refusal> {
        p.decide_job(r, &JobFacts::default())
    }

    pub fn test_policy(name: &str, body: &str) -> Policy {
        let dir = policy_dir(name, body);
        Policy::load(&dir.path().join("policy.yaml")).unwrap()
    }

    fn req(spares: Option<&str>, shape: Option<&str>) -> SparesRequest {
        SparesRequest {
            spares: spares.map(|s| Spares::parse(s).unwrap()),
            job_shape: shape.map(|s| crate::grid::parse_shape(s).unwrap()),
            spare_method: None,
        }
    }

    const SITE: &str = "allowed: ['3D(1,1)', '3D(2,1)', '3D(3,1)']\n\
        auto:\n  - {up_to_nodes: 4, spares: '3D(1,1)'}\n  - {spares: '3D(2,1)'}\n\
        max_fraction: 0.6\non_no_placement: reject\nstate_dir: /tmp/x\n";

    #[test]
    fn the_test_job_gets_the_whole_torus() {
        let p = test_policy("site", SITE);
        assert_eq!(p.on_no_placement, OnNoPlacement::Reject);
        assert_eq!(p.state_dir, PathBuf::from("/tmp/x"));
        assert_eq!(p.sparesd_socket, PathBuf::from(DEFAULT_SPARESD_SOCKET));
        let u = test_policy("unit", "unit: {multiple: [2, 2, 1]}\n");
        assert_eq!(
            u.topology.unit,
            crate::AllocationUnit::Multiple(vec![2, 2, 1])
        );
        match submit(&p, &req(Some("3D(2,1)"), Some("3x3x2"))).unwrap() {
            Decision::Spares { plan, method, .. } => {
                assert_eq!(plan.box_extents, vec![4, 4, 2]);
                assert_eq!(plan.spare_nodes, 14);
                assert_eq!(method.to_string(), "hybrid");
            }
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn auto_follows_the_table() {
        let p = test_policy("auto", SITE);
        let shape = |s: &str| match submit(&p, &req(Some("auto"), Some(s))).unwrap() {
            Decision::Spares {
                plan, auto_reason, ..
            } => (plan.spares, auto_reason.unwrap()),
            d => panic!("{d:?}"),
        };
        assert_eq!(shape("2x2x1").0, "3D(1,1)");
        assert!(shape("2x2x1").1.contains("up to 4 nodes"));
        assert_eq!(shape("3x3x2").0, "3D(2,1)");
    }

    #[test]
    fn jobs_without_spares_are_untouched_unless_the_default_says_so() {
        let p = test_policy("untouched", SITE);
        assert_eq!(submit(&p, &req(None, None)).unwrap(), Decision::Untouched);
        // --job-shape alone ran a 1-node job silently: now the user is told.
        let w = submit(&p, &req(None, Some("3x3x2"))).unwrap_err().0;
        assert!(
            w.starts_with("--job-shape=3x3x2 without --spares: this cluster's default is no spares, so the job would run on 1 node(s)"),
            "{w}"
        );
        assert!(w.contains("add --spares=auto"), "{w}");
        // On the job's nodes the admitted options are rebuilt as they were.
        assert_eq!(
            p.decide(&req(None, Some("3x3x2"))).unwrap(),
            Decision::Untouched
        );
        assert_eq!(
            submit(&p, &req(Some("none"), Some("3x3x2"))).unwrap(),
            Decision::Untouched
        );
        let p = test_policy("default", "default_spares: '3D(1,1)'\n");
        assert!(matches!(
            submit(&p, &req(None, Some("3x3x2"))).unwrap(),
            Decision::Spares { .. }
        ));
        // Without a job shape the default cannot shape anything.
        assert_eq!(submit(&p, &req(None, None)).unwrap(), Decision::Untouched);
    }

    fn with_nodes(p: &Policy, r: &SparesRequest, n: u32) -> Result<Decision, Refusal> {
        p.decide_job(
            r,
            &JobFacts {
                nodes: Some(n),
                ..Default::default()
            },
        )
    }

    fn plan_of(d: Decision) -> Plan {
        match d {
            Decision::Spares { plan, .. } => plan,
            d => panic!("{d:?}"),
        }
    }

    #[test]
    fn node_counts_alone_give_the_compute_shape() {
        // `sbatch -N 18 --spares=auto`: no --job-shape needed (it was refused before).
        let p = test_policy("nodes", SITE);
        let plan = plan_of(with_nodes(&p, &req(Some("auto"), None), 18).unwrap());
        assert_eq!(plan.compute, vec![3, 3, 2]);
        assert_eq!(plan.spares, "3D(2,1)");
        assert_eq!(plan.box_nodes, 32);
        // The table row is found by the node count: 4 nodes get 3D(1,1).
        let plan = plan_of(with_nodes(&p, &req(Some("auto"), None), 4).unwrap());
        assert_eq!(plan.spares, "3D(1,1)");
        assert_eq!(plan.compute_nodes, 4);
        let plan = plan_of(with_nodes(&p, &req(Some("3D(1,1)"), None), 9).unwrap());
        assert_eq!(plan.compute, vec![3, 3, 1]);
        // Counts without a fitting factorisation, or beyond the network, are refused.
        let w = with_nodes(&p, &req(Some("auto"), None), 17).unwrap_err().0;
        assert!(w.starts_with("--spares=auto with -N 17:"), "{w}");
        let w = with_nodes(&p, &req(Some("auto"), None), 4_000_000_000)
            .unwrap_err()
            .0;
        assert!(
            w.contains("-N 4000000000 compute nodes: the 4x4x2 network has 32 nodes"),
            "{w}"
        );
        // Neither -N nor --job-shape: the message names both.
        let w = submit(&p, &req(Some("auto"), None)).unwrap_err().0;
        assert!(w.contains("needs the job's size: -N"), "{w}");
    }

    #[test]
    fn node_counts_that_disagree_with_the_job_shape_are_refused() {
        // `-N 18 --job-shape=3x3x2` silently became 32 nodes; 18 (compute) and 32 (box) are
        // what the user can mean, anything else is refused.
        let p = test_policy("disagree", SITE);
        let r = req(Some("3D(2,1)"), Some("3x3x2"));
        assert_eq!(plan_of(with_nodes(&p, &r, 18).unwrap()).box_nodes, 32);
        assert_eq!(plan_of(with_nodes(&p, &r, 32).unwrap()).box_nodes, 32);
        let w = with_nodes(&p, &r, 20).unwrap_err().0;
        assert_eq!(
            w,
            "-N 20 does not match --job-shape=3x3x2 (18 compute nodes; with spares 3D(2,1) the job's 4x4x2 box has 32 nodes): give -N 18, or -N 32, or leave -N out"
        );
    }

    #[test]
    fn auto_by_failure_rate_follows_the_time_limit() {
        // A 2x2x2 job on the 4x4x2 torus, nodes with a 5000 h MTBF, 90% wanted: a day needs
        // the lightest shape, a year a heavier one; the reason gives the probability.
        let p = test_policy(
            "failure-rate",
            "failure_rate: {node_mtbf_hours: 5000, target: 0.9, default_hours: 24}\nmax_fraction: 0.9\n",
        );
        let decide = |minutes: Option<u32>, nodes: Option<u32>, shape: Option<&str>| {
            let facts = JobFacts {
                nodes,
                time_limit_minutes: minutes,
                ..Default::default()
            };
            match p.decide_job(&req(Some("auto"), shape), &facts).unwrap() {
                Decision::Spares {
                    plan, auto_reason, ..
                } => (plan, auto_reason.unwrap()),
                d => panic!("{d:?}"),
            }
        };
        let (day, why) = decide(Some(24 * 60), None, Some("2x2x2"));
        assert_eq!(day.spares, "3D(1,1)");
        assert!(
            why.starts_with(
                "failure rate: the smallest box that keeps its spares over 24 h with probability"
            ),
            "{why}"
        );
        let (year, _) = decide(Some(365 * 24 * 60), None, Some("2x2x2"));
        assert!(year.spare_nodes > day.spare_nodes, "{year:?}");
        // -N alone, and the default time for jobs without --time.
        let (n, _) = decide(None, Some(8), None);
        assert_eq!((n.compute_nodes, n.spares.as_str()), (8, "3D(1,1)"));
        // Methods that can die before the spares run out are not sized by this sum.
        let mut r = req(Some("auto"), Some("2x2x2"));
        r.spare_method = Some(Method::parse("1D", 3).unwrap());
        let w = p.decide_job(&r, &JobFacts::default()).unwrap_err();
        assert_eq!(w.1, RefusalKind::Options);
        assert!(
            w.0.contains("--spare-method=1D can fail before its spares run out"),
            "{}",
            w.0
        );
        // Without default_hours, --time is needed.
        let p = test_policy(
            "failure-rate-time",
            "failure_rate: {failures_per_node_hour: 0.001, target: 0.99}\n",
        );
        let w = p
            .decide_job(&req(Some("auto"), Some("2x2x2")), &JobFacts::default())
            .unwrap_err();
        assert_eq!(w.1, RefusalKind::MissingSize);
        assert!(w.0.contains("give --time"), "{}", w.0);
        let dir = policy_dir("failure-rate-bad", "failure_rate: {target: 0.99}\n");
        let e = Policy::load(&dir.path().join("policy.yaml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("failure_rate: give one of node_mtbf_hours and failures_per_node_hour"),
            "{e}"
        );
    }

    #[test]
    fn refusals_say_what_to_change() {
        let p = test_policy("refuse", SITE);
        let why = |s: Option<&str>, shape: Option<&str>| submit(&p, &req(s, shape)).unwrap_err().0;
        assert!(why(Some("3D(2,1)"), None)
            .contains("needs the job's size: -N (the number of compute nodes) or --job-shape"));
        assert!(why(Some("3D(2,1)"), Some("4x4x2")).contains("the network is only 4x4x2"));
        assert!(why(Some("3D(2,1)"), Some("3x3")).contains("has 2 extents"));
        assert!(why(Some("2D(1,1)"), Some("3x3x2")).contains("written for 2D"));
        assert!(why(Some("3D(1,2)"), Some("2x2x2")).contains("not allowed on this cluster"));
        let w = why(Some("3D(3,1)"), Some("1x1x1"));
        assert!(
            w.contains("2x2x2 box with 7 spares of 8 nodes (87.5%)"),
            "{w}"
        );
        assert!(w.contains("at most 60.0%"), "{w}");
        let mut r = req(Some("3D(1,1)"), Some("1x1x1"));
        r.spare_method = Some(Method::parse("6D", crate::MAX_DIMS).unwrap());
        assert!(submit(&p, &r).unwrap_err().0.contains("--spare-method=6D"));
    }

    #[test]
    fn bad_files_are_named_with_the_field() {
        let dir = policy_dir("bad", "max_fraction: 2\n");
        let e = Policy::load(&dir.path().join("policy.yaml")).unwrap_err();
        assert!(e.file.ends_with("policy.yaml"));
        assert!(
            e.to_string().contains("max_fraction: 2 is not a fraction"),
            "{e}"
        );
        for (body, want) in [
            ("colour: blue\n", "unknown field `colour`"),
            ("on_no_placement: later\n", "unknown variant `later`"),
            ("default_spares: bogus\n", "default_spares"),
            ("allowed: ['2D(1,1)']\n", "allowed: spare shape '2D(1,1)'"),
            ("auto: [{spares: '3D(9,1)'}]\n", "auto:"),
            (
                "unit: {multiple: [2, 2]}\n",
                "unit: allocation unit has 2 entries",
            ),
            (
                "unit: {power_of_two: true, block: [2, 2, 2]}\n",
                "unit: give one of",
            ),
            ("default_method: 5D\n", "default_method"),
        ] {
            let dir = policy_dir("bad2", body);
            let e = Policy::load(&dir.path().join("policy.yaml"))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("policy file "), "{e}");
            assert!(e.contains(want), "{body}: {e}");
        }
        let dir = policy_dir("notopo", "");
        std::fs::write(dir.path().join("policy.yaml"), "topology: missing.yaml\n").unwrap();
        let e = Policy::load(&dir.path().join("policy.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("topology: cannot read"), "{e}");
        let e = Policy::load(Path::new("/nonexistent/spares.yaml")).unwrap_err();
        assert!(e
            .to_string()
            .contains("/nonexistent/spares.yaml: cannot read it"));
    }
}

#[cfg(test)]
mod dead_at_start {
    use super::tests::policy_dir;
    use super::*;

    #[test]
    fn the_policy_says_how_many_unusable_nodes_a_box_may_hold_and_how_its_map_starts() {
        let load = |body: &str| {
            Policy::load(&policy_dir("dead-at-start", body).path().join("policy.yaml"))
                .map_err(|e| e.to_string())
        };
        let p = load("").unwrap();
        assert_eq!(p.max_unusable_nodes_at_start, 0);
        assert_eq!(p.initial_map, InitialMap::Slide);
        let p = load("max_unusable_nodes_at_start: 2\ninitial_map: remap\n").unwrap();
        assert_eq!(p.max_unusable_nodes_at_start, 2);
        assert_eq!(
            p.initial_map,
            InitialMap::Remap {
                iterations: DEFAULT_INITIAL_MAP_ITERATIONS
            }
        );
        let p = load("initial_map: remap\ninitial_map_iterations: 5000\n").unwrap();
        assert_eq!(p.initial_map, InitialMap::Remap { iterations: 5000 });
        let e = load("initial_map_iterations: 0\n").unwrap_err();
        assert!(
            e.ends_with("initial_map_iterations: 0 must be between 1 and 10000000"),
            "{e}"
        );
        let e = load("limits: {max_nodes: 8}\nmax_unusable_nodes_at_start: 9\n").unwrap_err();
        assert!(
            e.ends_with("max_unusable_nodes_at_start: 9 exceeds limits.max_nodes = 8"),
            "{e}"
        );
        assert!(load("initial_map: anneal\n")
            .unwrap_err()
            .contains("unknown variant `anneal`"));
    }

    #[test]
    fn the_partitions_for_jobs_with_spares_are_names_within_limits() {
        let load = |body: &str| {
            Policy::load(&policy_dir("partitions", body).path().join("policy.yaml"))
                .map_err(|e| e.to_string())
        };
        assert!(load("").unwrap().partitions.is_empty());
        assert_eq!(
            load("partitions: [torus, big-1]\n").unwrap().partitions,
            ["torus", "big-1"]
        );
        for (body, want) in [
            (
                "partitions: [\"a,b\"]\n",
                "partitions: 'a,b' is no partition name",
            ),
            (
                "partitions: [\"\"]\n",
                "partitions: '' is no partition name",
            ),
            (
                "partitions: [\"a\\nb\"]\n",
                "partitions: 'a\\nb' is no partition name",
            ),
        ] {
            let e = load(body).unwrap_err();
            assert!(e.contains(want), "{body}: {e}");
        }
        let many = format!("partitions: [{}]\n", vec!["p"; 65].join(", "));
        assert!(load(&many)
            .unwrap_err()
            .ends_with("partitions: 65 names, over the limit of 64"));
        let long = format!("partitions: [{}]\n", "p".repeat(257));
        assert!(load(&long).unwrap_err().contains("at most 256 bytes"));
    }
}

#[cfg(test)]
mod site_config {
    use super::*;

    /// The commented example a site starts from loads, with the test cluster's torus.
    #[test]
    fn configs_policy_file_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/policy-spares.yaml");
        let p = Policy::load(&path).unwrap();
        assert_eq!(p.topology.name, "torus-4x4x2");
        assert_eq!(p.on_no_placement, OnNoPlacement::Wait);
        assert_eq!(
            p.free_nodes_file.as_deref(),
            Some(Path::new("/run/spares/free-nodes"))
        );
        assert_eq!(p.allowed.as_ref().map(Vec::len), Some(3));
    }
}

#[cfg(test)]
mod site_limits {
    use super::tests::{policy_dir, submit, test_policy};
    use super::*;

    fn req(spares: &str, shape: &str) -> SparesRequest {
        SparesRequest {
            spares: Some(Spares::parse(spares).unwrap()),
            job_shape: Some(crate::grid::parse_shape(shape).unwrap()),
            ..Default::default()
        }
    }

    #[test]
    fn site_limits_bound_the_box_and_cannot_be_raised() {
        let p = test_policy("limits", "limits: {max_nodes: 10}\n");
        assert_eq!(p.limits.max_nodes, 10);
        let w = submit(&p, &req("3D(1,1)", "3x3x1")).unwrap_err().0;
        assert!(
            w.contains("the job's box 4x3x1 has 12 nodes, over the limit of 10 nodes"),
            "{w}"
        );
        assert!(w.contains("limits.max_nodes"), "{w}");
        // The compute shape is checked before any planning work.
        let w = submit(&p, &req("3D(1,1)", "4294967295x4294967295x4294967295"))
            .unwrap_err()
            .0;
        assert!(
            w.contains("--job-shape") && w.contains("limit of 10 nodes"),
            "{w}"
        );
        assert!(submit(&p, &req("3D(1,1)", "1x2x2")).is_ok());
        // Defaults when the section is absent; a site may lower them, never raise them.
        assert_eq!(test_policy("nolimits", "").limits, Limits::default());
        for (body, want) in [
            (
                "limits: {max_nodes: 2000000}\n",
                "limits.max_nodes: 2000000 must be between 1 and 1048576",
            ),
            ("limits: {max_nodes: 0}\n", "limits.max_nodes: 0"),
            (
                "limits: {max_file_bytes: 99999999999}\n",
                "limits.max_file_bytes",
            ),
            ("limits: {max_jobs: 3}\n", "unknown field `max_jobs`"),
            (
                "limits: {max_request_bytes: 100000}\n",
                "limits.max_request_bytes: 100000 must be between 1 and 65536",
            ),
            (
                "limits: {max_request_partitions: 0}\n",
                "limits.max_request_partitions: 0",
            ),
        ] {
            let dir = policy_dir("badlimits", body);
            let e = Policy::load(&dir.path().join("policy.yaml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{body}: {e}");
        }
    }

    #[test]
    fn topology_and_policy_paths_that_are_not_regular_files_are_refused() {
        // slurmctld read these inside job_submit: /dev/zero filled its memory, a FIFO
        // blocked it forever.
        let dir = policy_dir("special", "");
        let fifo = dir.path().join("fifo.yaml");
        let _ = std::fs::remove_file(&fifo);
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        for topo in ["/dev/zero", fifo.to_str().unwrap()] {
            std::fs::write(
                dir.path().join("policy.yaml"),
                format!("topology: {topo}\n"),
            )
            .unwrap();
            let e = Policy::load(&dir.path().join("policy.yaml"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("not a regular file"), "{e}");
        }
        let e = Policy::load(&fifo).unwrap_err().to_string();
        assert!(e.contains("is a FIFO, not a regular file"), "{e}");
        let small = policy_dir("small", "limits: {max_file_bytes: 10}\n");
        let e = Policy::load(&small.path().join("policy.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than the limit of 10 bytes"), "{e}");
        let deep = policy_dir("deep", &format!("auto: {}\n", "[".repeat(100_000)));
        let e = Policy::load(&deep.path().join("policy.yaml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("over the limit of 32 levels"), "{e}");
    }

    /// The policy of [`torus3d_dir`].
    fn torus3d_policy(name: &str, body: &str) -> Result<Policy, PolicyError> {
        Policy::load(&torus3d_dir(name, body).path().join("policy.yaml"))
    }

    /// A directory with Slurm's topology.yaml of the 4x4x2 torus (configs/slurm-torus3d.yaml's
    /// placements) and a policy of `body`.
    fn torus3d_dir(name: &str, body: &str) -> tempfile::TempDir {
        let dir = policy_dir(name, "");
        std::fs::write(
            dir.path().join("topology.yaml"),
            std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../configs/slurm-torus3d.yaml"
            ))
            .unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("policy.yaml"),
            format!("topology: topology.yaml\n{body}"),
        )
        .unwrap();
        dir
    }

    fn shaped(spares: &str, shape: Option<&[u32]>) -> SparesRequest {
        SparesRequest {
            spares: Some(Spares::parse(spares).unwrap()),
            job_shape: shape.map(<[u32]>::to_vec),
            spare_method: None,
        }
    }

    fn box_of(d: Result<Decision, Refusal>) -> Vec<u32> {
        match d {
            Ok(Decision::Spares { plan, .. }) => plan.box_extents,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_torus3d_topology_yaml_means_native_placement_unless_the_site_says_otherwise() {
        let p = torus3d_policy("native-default", "").unwrap();
        assert_eq!(p.placement, PlacementMode::Native);
        let p = torus3d_policy("native-pinned", "placement: pinned\n").unwrap();
        assert_eq!(p.placement, PlacementMode::Pinned);
        // A unit of its own: the boxes are no longer Slurm's placements.
        let p = torus3d_policy("native-unit", "unit: {multiple: [2, 2, 1]}\n").unwrap();
        assert_eq!(p.placement, PlacementMode::Pinned);
        let e = torus3d_policy(
            "native-unit-asked",
            "unit: {multiple: 2}\nplacement: native\n",
        )
        .unwrap_err();
        assert!(e.why.contains("remove `unit`"), "{e}");
        // The project's own format: pinned, and native is refused with the reason.
        let dir = policy_dir("native-own", "placement: native\n");
        let e = Policy::load(&dir.path().join("policy.yaml")).unwrap_err();
        assert!(
            e.why
                .contains("placement: native needs Slurm's topology.yaml"),
            "{e}"
        );
        let dir = policy_dir("pinned-own", "");
        assert_eq!(
            Policy::load(&dir.path().join("policy.yaml"))
                .unwrap()
                .placement,
            PlacementMode::Pinned
        );
    }

    #[test]
    fn native_boxes_are_exactly_placements() {
        let p = torus3d_policy("native-pad", "max_fraction: 0.9\n").unwrap();
        let no_n = JobFacts::default();
        // 3x3x1 + 3D(1,1) = a 4x3x1 box: padded to the 4x4x2 placement, not to 4x3x1.
        assert_eq!(
            box_of(p.decide_job(&shaped("3D(1,1)", Some(&[3, 3, 1])), &no_n)),
            vec![4, 4, 2]
        );
        // -N 4 with auto: every candidate gives a placement.
        let n4 = JobFacts {
            nodes: Some(4),
            ..Default::default()
        };
        let b = box_of(p.decide_job(&shaped("auto", None), &n4));
        assert!(p.topology.slurm_placements.contains(&b), "{b:?}");
    }

    #[test]
    fn auto_falls_back_to_a_shape_whose_box_is_a_placement() {
        // The table says 3D(2,1) above 4 nodes: -N 12 is 2x3x2, +2 layers = 3x4x2, padded to
        // 4x4x2: 20 spares of 32 (62.5%) over 60%. 3D(1,1) gives 3x3x2 (a placement once the
        // site lists it) or 4x4x2 (24 compute nodes): the refusal named it, now auto takes it.
        let body = "max_fraction: 0.6\nauto:\n  - {up_to_nodes: 4, spares: '3D(1,1)'}\n  - {spares: '3D(2,1)'}\n";
        torus3d_policy("native-auto", body).unwrap();
        // The test cluster's placements: the configs file's and 3x3x2.
        let dir = torus3d_dir("native-auto", body);
        let topo = std::fs::read_to_string(dir.path().join("topology.yaml"))
            .unwrap()
            .replace(
                "          - dims: {x: 4, y: 4, z: 2}",
                "          - dims: {x: 3, y: 3, z: 2}\n          - dims: {x: 4, y: 4, z: 2}",
            );
        std::fs::write(dir.path().join("topology.yaml"), topo).unwrap();
        let p = Policy::load(&dir.path().join("policy.yaml")).unwrap();
        assert!(p.topology.slurm_placements.contains(&vec![3, 3, 2]));
        let n12 = JobFacts {
            nodes: Some(12),
            ..Default::default()
        };
        match p.decide_job(&shaped("auto", None), &n12) {
            Ok(Decision::Spares {
                plan, auto_reason, ..
            }) => {
                assert_eq!(plan.spares, "3D(1,1)");
                assert!(p.topology.slurm_placements.contains(&plan.box_extents));
                assert!(auto_reason
                    .unwrap()
                    .contains("3D(1,1) is the most protective shape"),);
            }
            d => panic!("{d:?}"),
        }
        // Pinned sites keep the table's answer (and its refusal).
        let pinned = torus3d_policy(
            "native-auto-pinned",
            "max_fraction: 0.6\nplacement: pinned\nauto:\n  - {up_to_nodes: 4, spares: '3D(1,1)'}\n  - {spares: '3D(2,1)'}\n",
        )
        .unwrap();
        assert!(pinned.decide_job(&shaped("auto", None), &n12).is_err());
    }

    #[test]
    fn a_box_that_is_no_placement_is_refused_naming_the_placements_that_work() {
        let p = torus3d_policy("native-refuse", "max_fraction: 0.5\n").unwrap();
        // 3x3x1 + 3D(1,1): 4x3x1, padded to 4x4x2 = 23 spares of 32 (71.9%), over the band.
        let e = p
            .decide_job(&shaped("3D(1,1)", Some(&[3, 3, 1])), &JobFacts::default())
            .unwrap_err();
        assert_eq!(e.1, RefusalKind::Unavailable);
        assert!(
            e.0.contains("placements of")
                && e.0
                    .contains(": 2x2x1 (4 nodes), 2x2x2 (8 nodes), 4x4x2 (32 nodes)"),
            "{}",
            e.0
        );
        // 3D(1,1) (one layer along x) fills 2x2x1 with 2 compute nodes, 2x2x2 with 4 and
        // 4x4x2 with 24, each within 50%.
        assert!(
            e.0.ends_with("; try -N 2 --spares=3D(1,1) without --job-shape, or -N 4 --spares=3D(1,1) without --job-shape, or -N 24 --spares=3D(1,1) without --job-shape"),
            "{}",
            e.0
        );
        // The job's nodes (admitted) never get the explanation, and a pinned site neither.
        let pinned = torus3d_policy(
            "native-refuse-pinned",
            "max_fraction: 0.5\nplacement: pinned\n",
        )
        .unwrap();
        let e = pinned
            .decide_job(&shaped("3D(1,1)", Some(&[3, 3, 1])), &JobFacts::default())
            .unwrap_err();
        assert!(!e.0.contains("placements of"), "{}", e.0);
    }
}
