//! The job registry: jobs, their maps and their substitution histories, in memory.
//!
//! Every change goes through [`Registry::prepare`] (which decides, on a copy, what the change
//! would be, without touching the registry) and [`Registry::commit`] (which installs it). The
//! server writes the journal record between the two, so a failed write leaves the registry as
//! it was. Replaying a journal calls the same two functions. The model (`topology`) decides every
//! substitution; this module only carries names in and records out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use topology::grid::format_shape;
use topology::remap::{Budget, Remap, Step};
use topology::sliding::fail;
use topology::{MapDocument, MapMeta, NodeState, SpareMap};

use crate::protocol::{ErrorCode, ProtoError};

/// One rank's move, with node names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveOut {
    /// The rank that moves.
    pub rank: u32,
    /// The node it leaves (host name, or coordinates when the map has no host names).
    pub from: String,
    /// The node it goes to.
    pub to: String,
}

/// The answer to one failure of a job: what a `fail` reply carries, and what the journal keeps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Substitution {
    /// The record's place in the job's history: 1 for the first, 2 for the second, ...; 0 for
    /// a node already dead in the registered map (a substitution at start, which still takes a
    /// place in the history, or an answer about such a node).
    pub step: u32,
    /// The failed node.
    pub node: String,
    /// `substituted`, `free_node_died`, `no_spare_left` or `already_failed`.
    pub outcome: String,
    /// The job's method (`hybrid`, `2D`, ...).
    pub method: String,
    /// The degree used (`3D`, `0D`, ...) when substituted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method_used: Option<String>,
    /// The slide (`along dim 0 +, slab over dims 1,2`) when k >= 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slide: Option<String>,
    /// The moves, in pipeline order.
    pub moves: Vec<MoveOut>,
    /// Collisions of the map before this failure.
    pub collisions_before: u32,
    /// Collisions of the map after it.
    pub collisions_after: u32,
    /// Whether the job is lost after this failure (a rank sits on a dead node).
    pub lost: bool,
}

/// A re-map of a job's ranks onto its alive nodes (`remap` request): what the reply carries,
/// the journal keeps and `show` tells. The journal keeps the resulting moves, so a replay
/// installs the same map without running the search again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemapRecord {
    /// 1 for the job's first re-map, 2 for the second, ...
    pub remap: u32,
    /// Failures recorded before it: it follows the substitution of this `step`.
    pub after_step: u32,
    /// Most ranks it could move (the request's, capped by the daemon's `[remap] max_moves`).
    pub max_moves: u32,
    /// Most candidate moves the search could evaluate (capped by `[remap] iterations`).
    pub iterations: u64,
    /// Seed of the search.
    pub seed: u64,
    /// Why the search stopped: `iterations`, `time`, `optimal` or `nothing_to_do`.
    pub stop: String,
    /// Collisions of the map before it.
    pub collisions_before: u32,
    /// Collisions of the map after it.
    pub collisions_after: u32,
    /// A largest link load that no placement on these alive nodes can go below.
    pub lower_bound: u32,
    /// Ranks that end on another node (a rank staged through a free node moves twice).
    pub moved: u32,
    /// The moves, in an order that never puts two ranks on one node; the ranks of a cycle
    /// with no free node to stage through (an exchange) come one after the other and move at
    /// once, as a relaunch from a checkpoint does.
    pub moves: Vec<MoveOut>,
}

/// What a re-map may spend, after the daemon's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemapBudget {
    /// Most ranks that may end on another node.
    pub max_moves: u32,
    /// Most candidate moves evaluated: what makes the result the same on every machine.
    pub iterations: u64,
    /// Safety bound on the search's time (the result then depends on the machine; the
    /// journal keeps the result, so a replay does not).
    pub time_limit: std::time::Duration,
    /// Seed of the search.
    pub seed: u64,
}

/// What a re-map starts from, taken under the registry lock so that the search can run
/// without it.
#[derive(Debug, Clone)]
pub struct RemapInput {
    job_id: u32,
    map: SpareMap,
    meta: MapMeta,
    /// The job's failures and re-maps when taken: a change meanwhile voids the search.
    version: (usize, usize),
}

impl RemapInput {
    /// Runs the search (the caller holds no lock: it takes up to the budget's time).
    pub fn run(&self, budget: &RemapBudget) -> Result<Remap, ProtoError> {
        let b = Budget {
            max_moved: Some(budget.max_moves),
            time_limit: Some(budget.time_limit),
            iterations: Some(budget.iterations),
            seed: budget.seed,
        };
        topology::remap::remap(&self.map, &self.meta.pattern, self.meta.periodic, &b).map_err(|e| {
            ProtoError::new(
                ErrorCode::Conflict,
                format!("job {}: cannot re-map: {e}", self.job_id),
            )
        })
    }
}

/// One registered job.
#[derive(Debug, Clone)]
pub struct Job {
    /// Slurm job id.
    pub job_id: u32,
    /// Owner's uid.
    pub uid: u32,
    /// The map as registered (a second registration must match it).
    pub registered: MapDocument,
    map: SpareMap,
    meta: MapMeta,
    /// The current map document, serialised once per change. Shared: a reply takes a
    /// reference under the registry lock and copies the text out after releasing it.
    doc_json: SharedJson,
    collisions: u32,
    /// The failures reported so far, in order (shared with replies being written, like
    /// `doc_json`).
    pub history: Arc<Vec<Substitution>>,
    /// The re-maps so far, in order (shared like `history`).
    pub remaps: Arc<Vec<RemapRecord>>,
    /// What `list` shows, computed once per change: `list` holds the lock for a copy only.
    summary: JobSummary,
    /// Failed node -> index in `history`: a repeated report gets the same answer.
    by_node: HashMap<u32, usize>,
    /// Host name -> box index, for `fail` and `node_down`.
    host_index: HashMap<String, u32>,
    /// Journal sequence number of the last change: a reply showing this job waits for it to be
    /// durable.
    pub last_seq: u64,
}

fn doc_raw(doc: &MapDocument) -> Box<RawValue> {
    RawValue::from_string(serde_json::to_string(doc).expect("map documents serialise"))
        .expect("serde_json output is valid JSON")
}

/// A JSON text shared between the registry and the replies being written.
#[derive(Debug, Clone)]
pub struct SharedJson(Arc<RawValue>);

impl SharedJson {
    fn new(raw: Box<RawValue>) -> SharedJson {
        SharedJson(Arc::from(raw))
    }

    /// The JSON text.
    pub fn get(&self) -> &RawValue {
        &self.0
    }
}

impl Serialize for SharedJson {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for SharedJson {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(d).map(SharedJson::new)
    }
}

impl PartialEq for SharedJson {
    fn eq(&self, other: &SharedJson) -> bool {
        self.0.get() == other.0.get()
    }
}

impl Job {
    fn new(job_id: u32, uid: u32, registered: MapDocument) -> Result<Job, ProtoError> {
        let (mut map, meta) = registered
            .clone()
            .into_map()
            .map_err(|e| ProtoError::new(ErrorCode::InvalidMap, format!("job {job_id}: {e}")))?;
        let host_index = meta
            .hosts
            .as_ref()
            .map(|h| {
                h.iter()
                    .enumerate()
                    .map(|(i, n)| (n.clone(), i as u32))
                    .collect()
            })
            .unwrap_or_default();
        // Link loads kept up to date: a failure then costs the moved ranks' messages, not a
        // recomputation of the whole job's traffic (25 ms on a 48x48x48 box).
        map.track_traffic(&meta.pattern, meta.periodic);
        let doc = MapDocument::new(&map, &meta);
        let mut job = Job {
            job_id,
            uid,
            registered,
            doc_json: SharedJson::new(doc_raw(&doc)),
            collisions: doc.collisions,
            map,
            meta,
            history: Arc::new(Vec::new()),
            remaps: Arc::new(Vec::new()),
            summary: JobSummary::default(),
            by_node: HashMap::new(),
            host_index,
            last_seq: 0,
        };
        job.summary = job.compute_summary();
        Ok(job)
    }

    /// Opens the history with the substitutions of the nodes dead at start: each names a node
    /// dead in the registered map, once, with step 0 (at most one per dead node, so the
    /// history a registration brings is bounded by the map's own size).
    fn record_at_start(&mut self, at_start: &[Substitution]) -> Result<(), ProtoError> {
        let dead = self.map.dead_nodes();
        if at_start.len() > dead.len() {
            return Err(ProtoError::new(
                ErrorCode::InvalidMap,
                format!(
                    "job {}: {} substitutions at start for {} dead nodes in the map",
                    self.job_id,
                    at_start.len(),
                    dead.len()
                ),
            ));
        }
        for record in at_start {
            let n = self.node(&record.node)?;
            if record.step != 0 || !dead.contains(&n) || self.by_node.contains_key(&n) {
                return Err(ProtoError::new(
                    ErrorCode::InvalidMap,
                    format!(
                        "job {}: a substitution at start must be step 0 of a node dead in the map, once; {} is not",
                        self.job_id, record.node
                    ),
                ));
            }
            self.by_node.insert(n, self.history.len());
            Arc::make_mut(&mut self.history).push(record.clone());
        }
        self.summary = self.compute_summary();
        Ok(())
    }

    /// Names of the nodes dead when the job started (the substitutions at start), in order.
    pub fn failed_at_start(&self) -> Vec<String> {
        self.history
            .iter()
            .take_while(|r| r.step == 0)
            .map(|r| r.node.clone())
            .collect()
    }

    /// The current map document as JSON.
    pub fn map_json(&self) -> &RawValue {
        self.doc_json.get()
    }

    /// The current map document as JSON, shared: cheap to take under the registry lock.
    pub fn map_json_shared(&self) -> SharedJson {
        self.doc_json.clone()
    }

    /// The current map document.
    pub fn map_document(&self) -> MapDocument {
        MapDocument::new(&self.map, &self.meta)
    }

    /// Collisions of the current map.
    pub fn collisions(&self) -> u32 {
        self.collisions
    }

    /// Whether a rank sits on a dead node.
    pub fn is_lost(&self) -> bool {
        self.map.is_lost()
    }

    /// Names of the dead nodes, ascending by box index.
    pub fn failed_nodes(&self) -> Vec<String> {
        self.map
            .dead_nodes()
            .iter()
            .map(|&n| self.name(n))
            .collect()
    }

    /// Free nodes left.
    pub fn free_nodes(&self) -> usize {
        self.map.free_nodes().len()
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.map.rank_nodes().len()
    }

    /// The job's summary line for `list`.
    pub fn summary(&self) -> JobSummary {
        self.summary.clone()
    }

    fn compute_summary(&self) -> JobSummary {
        JobSummary {
            job_id: self.job_id,
            uid: self.uid,
            topology: self.meta.topology.clone(),
            box_shape: format_shape(self.map.grid().extents()),
            spares: self.meta.spares.clone(),
            method: self.meta.method.to_string(),
            ranks: self.ranks(),
            free: self.free_nodes(),
            failures: self.history.len(),
            collisions: self.collisions,
            lost: self.is_lost(),
        }
    }

    fn name(&self, node: u32) -> String {
        self.meta.node_name(self.map.grid(), node)
    }

    /// The box index of a node named by host name or coordinates.
    pub fn node(&self, name: &str) -> Result<u32, ProtoError> {
        if let Some(&i) = self.host_index.get(name) {
            return Ok(i);
        }
        self.meta.node_by_name(self.map.grid(), name).map_err(|e| {
            ProtoError::new(ErrorCode::UnknownNode, format!("job {}: {e}", self.job_id))
        })
    }

    /// Whether the job's box holds a host of this name.
    pub fn has_host(&self, name: &str) -> bool {
        self.host_index.contains_key(name)
    }
}

/// What `list` shows of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSummary {
    /// Slurm job id.
    pub job_id: u32,
    /// Owner's uid.
    pub uid: u32,
    /// Topology name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// Box extents, e.g. `4x4x2`.
    #[serde(rename = "box")]
    pub box_shape: String,
    /// Spare shape.
    pub spares: String,
    /// Method.
    pub method: String,
    /// Ranks.
    pub ranks: usize,
    /// Free nodes left.
    pub free: usize,
    /// Failures reported.
    pub failures: usize,
    /// Collisions of the current map.
    pub collisions: u32,
    /// Whether the job is lost.
    pub lost: bool,
}

/// A change, as the journal records it (one JSON line each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Change {
    /// A job was registered with this map.
    Register {
        /// Slurm job id.
        job_id: u32,
        /// Owner's uid.
        uid: u32,
        /// The map as registered.
        map: Box<MapDocument>,
        /// Substitutions of the nodes dead at start, as registered.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        at_start: Vec<Substitution>,
    },
    /// A node of a job failed; `record` is the answer that was given.
    Fail {
        /// Slurm job id.
        job_id: u32,
        /// The answer (node name, outcome, moves, ...).
        record: Box<Substitution>,
    },
    /// A job's ranks were re-mapped; `record` holds the moves, which a replay installs as
    /// they are (the search is not run again).
    Remap {
        /// Slurm job id.
        job_id: u32,
        /// The re-map that was answered.
        record: Box<RemapRecord>,
    },
    /// A job was released.
    Release {
        /// Slurm job id.
        job_id: u32,
        /// When (Unix seconds): its history is kept `history_retention_secs` from then. 0 in
        /// journals of releases before 0.3: such a history is not kept.
        #[serde(default)]
        released_at: u64,
    },
}

/// A change decided but not installed; [`Registry::commit`] installs it.
pub enum Prepared {
    /// Nothing changes; the reply is already known (a repeated registration or failure).
    Unchanged(Reply),
    /// Install this change (after journaling it) and give this reply.
    Change {
        /// The journal record.
        change: Change,
        /// What to install.
        apply: Apply,
        /// The reply.
        reply: Reply,
    },
}

/// What a prepared change installs.
pub enum Apply {
    /// A new job.
    Insert(Box<Job>),
    /// A job's new state after a failure.
    Fail(Box<FailApply>),
    /// A job's new map after a re-map.
    Remap(Box<RemapApply>),
    /// Remove the job; keep what happened to it (when `released_at` is known).
    Remove(Box<ReleasedJob>),
}

/// A job's new map after a failure, and the answer to remember.
pub struct FailApply {
    job_id: u32,
    node: u32,
    map: SpareMap,
    doc_json: Box<RawValue>,
    collisions: u32,
    record: Substitution,
}

/// A job's new map after a re-map, and the record to remember.
pub struct RemapApply {
    job_id: u32,
    map: SpareMap,
    doc_json: Box<RawValue>,
    collisions: u32,
    record: RemapRecord,
}

/// What the registry answers to a change.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// Registration: whether the job is new.
    Registered {
        /// Slurm job id.
        job_id: u32,
        /// False when the same registration was seen before.
        created: bool,
    },
    /// A failure's answer.
    Failed {
        /// Slurm job id.
        job_id: u32,
        /// The answer.
        record: Substitution,
    },
    /// A re-map's answer.
    Remapped {
        /// Slurm job id.
        job_id: u32,
        /// The answer.
        record: RemapRecord,
    },
    /// The job was released.
    Released {
        /// Slurm job id.
        job_id: u32,
    },
}

/// Every registered job, and what happened to the released ones.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    jobs: BTreeMap<u32, Job>,
    released: ReleasedJobs,
}

/// How long, and within which budgets, the histories of released jobs are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Seconds after its release a job's history is kept (0: not kept).
    pub secs: u64,
    /// Budget of all kept histories together, in bytes (map text and records, estimated).
    pub max_bytes: usize,
    /// Budget of one owner's kept histories, in bytes.
    pub max_bytes_per_uid: usize,
}

/// A released job: its last map, its failures and its summary, kept for `show`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleasedJob {
    /// When it was released (Unix seconds).
    pub released_at: u64,
    /// The journal sequence number of its release: orders the kept jobs, oldest first.
    pub release_seq: u64,
    /// The job as `list` showed it last.
    pub summary: JobSummary,
    /// Names of its dead nodes.
    pub failed: Vec<String>,
    /// Its failures, in order.
    #[serde(serialize_with = "serialize_arc", deserialize_with = "deserialize_arc")]
    pub history: Arc<Vec<Substitution>>,
    /// Its re-maps, in order (absent before re-maps existed).
    #[serde(
        default,
        serialize_with = "serialize_arc",
        deserialize_with = "deserialize_arc"
    )]
    pub remaps: Arc<Vec<RemapRecord>>,
    /// Its map at release.
    pub map: SharedJson,
}

fn serialize_arc<T: Serialize, S: serde::Serializer>(v: &Arc<T>, s: S) -> Result<S::Ok, S::Error> {
    v.as_ref().serialize(s)
}

fn deserialize_arc<'de, T: Deserialize<'de>, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Arc<T>, D::Error> {
    T::deserialize(d).map(Arc::new)
}

impl ReleasedJob {
    /// What keeping it costs, in bytes: the map text, and the records estimated by their
    /// strings plus a fixed part (no serialisation needed to count).
    pub fn cost(&self) -> usize {
        const FIXED: usize = 256;
        const PER_RECORD: usize = 160;
        const PER_MOVE: usize = 32;
        let records: usize = self
            .history
            .iter()
            .map(|r| {
                PER_RECORD
                    + r.node.len()
                    + r.method.len()
                    + r.slide.as_ref().map_or(0, String::len)
                    + r.moves
                        .iter()
                        .map(|m| PER_MOVE + m.from.len() + m.to.len())
                        .sum::<usize>()
            })
            .sum();
        let remaps: usize = self
            .remaps
            .iter()
            .map(|r| {
                PER_RECORD
                    + r.stop.len()
                    + r.moves
                        .iter()
                        .map(|m| PER_MOVE + m.from.len() + m.to.len())
                        .sum::<usize>()
            })
            .sum();
        FIXED
            + self.map.get().get().len()
            + remaps
            + self.failed.iter().map(|f| f.len() + 8).sum::<usize>()
            + records
    }
}

/// The kept released jobs, oldest release first, with the bytes they cost in all and per
/// owner.
#[derive(Debug, Default, Clone)]
struct ReleasedJobs {
    by_seq: BTreeMap<u64, (ReleasedJob, usize)>,
    by_job: HashMap<u32, u64>,
    per_uid: HashMap<u32, (BTreeSet<u64>, usize)>,
    bytes: usize,
    /// None while a journal is replayed: everything is kept until the daemon's budgets apply.
    retention: Option<Retention>,
}

impl ReleasedJobs {
    fn get(&self, job_id: u32, now: u64) -> Option<&ReleasedJob> {
        let (job, _) = self.by_seq.get(self.by_job.get(&job_id)?)?;
        match self.retention {
            Some(r) if job.released_at.saturating_add(r.secs) <= now => None,
            _ => Some(job),
        }
    }

    fn remove_seq(&mut self, seq: u64) -> Option<ReleasedJob> {
        let (job, cost) = self.by_seq.remove(&seq)?;
        self.by_job.remove(&job.summary.job_id);
        let uid = job.summary.uid;
        if let Some((seqs, bytes)) = self.per_uid.get_mut(&uid) {
            seqs.remove(&seq);
            *bytes -= cost;
            if seqs.is_empty() {
                self.per_uid.remove(&uid);
            }
        }
        self.bytes -= cost;
        Some(job)
    }

    fn remove_job(&mut self, job_id: u32) {
        if let Some(&seq) = self.by_job.get(&job_id) {
            self.remove_seq(seq);
        }
    }

    fn insert(&mut self, job: ReleasedJob) {
        if job.released_at == 0 || self.retention.is_some_and(|r| r.secs == 0) {
            return;
        }
        self.remove_job(job.summary.job_id);
        let cost = job.cost();
        if let Some(r) = self.retention {
            if cost > r.max_bytes_per_uid || cost > r.max_bytes {
                log::warn!(
                    "job {}: its history ({cost} bytes) is larger than history_max_bytes_per_uid = {} or history_max_bytes = {}; not kept after its release",
                    job.summary.job_id,
                    r.max_bytes_per_uid,
                    r.max_bytes
                );
                return;
            }
        }
        let (seq, uid, now) = (job.release_seq, job.summary.uid, job.released_at);
        self.by_job.insert(job.summary.job_id, seq);
        let e = self.per_uid.entry(uid).or_default();
        e.0.insert(seq);
        e.1 += cost;
        self.bytes += cost;
        self.by_seq.insert(seq, (job, cost));
        self.prune(now, Some(uid));
    }

    /// Drops what is older than the retention time at `now` (in release order: a clock set
    /// back may leave one behind, which reads filter out), then the oldest of an owner over
    /// their budget (`uid`, or every owner), then the oldest of all over the total budget.
    fn prune(&mut self, now: u64, uid: Option<u32>) {
        let Some(r) = self.retention else {
            return;
        };
        while let Some((&s, (j, _))) = self.by_seq.first_key_value() {
            if j.released_at.saturating_add(r.secs) > now {
                break;
            }
            self.remove_seq(s);
        }
        let owners: Vec<u32> = match uid {
            Some(u) => vec![u],
            None => self.per_uid.keys().copied().collect(),
        };
        for uid in owners {
            while let Some((seqs, bytes)) = self.per_uid.get(&uid) {
                if *bytes <= r.max_bytes_per_uid {
                    break;
                }
                let oldest = *seqs.first().expect("an owner's entry holds a job");
                self.remove_seq(oldest);
            }
        }
        while self.bytes > r.max_bytes {
            let Some(&oldest) = self.by_seq.keys().next() else {
                break;
            };
            self.remove_seq(oldest);
        }
    }
}

/// The time now in Unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn unknown_job(job_id: u32) -> ProtoError {
    ProtoError::new(
        ErrorCode::UnknownJob,
        format!("no job {job_id} is registered"),
    )
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A job by id.
    pub fn get(&self, job_id: u32) -> Result<&Job, ProtoError> {
        self.jobs.get(&job_id).ok_or_else(|| unknown_job(job_id))
    }

    /// A released job whose history is still kept at `now` (Unix seconds).
    pub fn released(&self, job_id: u32, now: u64) -> Option<&ReleasedJob> {
        self.released.get(job_id, now)
    }

    /// The released jobs still kept at `now`, oldest release first.
    pub fn released_jobs(&self, now: u64) -> impl DoubleEndedIterator<Item = &ReleasedJob> {
        let r = self.released.retention;
        self.released
            .by_seq
            .values()
            .map(|(j, _)| j)
            .filter(move |j| !matches!(r, Some(r) if j.released_at.saturating_add(r.secs) <= now))
    }

    /// One owner's released jobs still kept at `now`, oldest release first: found through
    /// the owner's index, so a user's request never walks everybody's histories.
    pub fn released_jobs_of(
        &self,
        uid: u32,
        now: u64,
    ) -> impl DoubleEndedIterator<Item = &ReleasedJob> {
        let r = self.released.retention;
        self.released
            .per_uid
            .get(&uid)
            .into_iter()
            .flat_map(|(seqs, _)| seqs.iter())
            .filter_map(|s| self.released.by_seq.get(s).map(|(j, _)| j))
            .filter(move |j| !matches!(r, Some(r) if j.released_at.saturating_add(r.secs) <= now))
    }

    /// Bytes the kept histories of released jobs cost, in all.
    pub fn released_bytes(&self) -> usize {
        self.released.bytes
    }

    /// Applies the daemon's retention and budgets (after a journal was replayed with none) and
    /// drops what they do not keep at `now`.
    pub fn set_retention(&mut self, retention: Retention, now: u64) {
        self.released.retention = Some(retention);
        if retention.secs == 0 {
            let all: Vec<u64> = self.released.by_seq.keys().copied().collect();
            for s in all {
                self.released.remove_seq(s);
            }
        }
        self.released.prune(now, None);
    }

    /// Every job, by id.
    pub fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.jobs.values()
    }

    /// Number of jobs.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether no job is registered.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Decides a registration.
    pub fn prepare_register(
        &self,
        job_id: u32,
        uid: u32,
        map: MapDocument,
    ) -> Result<Prepared, ProtoError> {
        self.prepare_register_with_start(job_id, uid, map, Vec::new())
    }

    /// Decides a registration whose map has nodes dead at start, with the substitutions that
    /// put spares in their place (`at_start`, one for each at most, each of a node dead in the
    /// map): they open the job's history as step 0.
    pub fn prepare_register_with_start(
        &self,
        job_id: u32,
        uid: u32,
        map: MapDocument,
        at_start: Vec<Substitution>,
    ) -> Result<Prepared, ProtoError> {
        if let Some(job) = self.jobs.get(&job_id) {
            if job.uid == uid && job.registered == map {
                return Ok(Prepared::Unchanged(Reply::Registered {
                    job_id,
                    created: false,
                }));
            }
            return Err(ProtoError::new(
                ErrorCode::Conflict,
                format!(
                    "job {job_id} is already registered with {}; release it first",
                    if job.uid != uid {
                        format!("owner uid {} (this request says {uid})", job.uid)
                    } else {
                        "a different map".to_string()
                    }
                ),
            ));
        }
        let mut job = Job::new(job_id, uid, map.clone())?;
        job.record_at_start(&at_start)?;
        Ok(Prepared::Change {
            change: Change::Register {
                job_id,
                uid,
                map: Box::new(map),
                at_start,
            },
            apply: Apply::Insert(Box::new(job)),
            reply: Reply::Registered {
                job_id,
                created: true,
            },
        })
    }

    /// Decides a failure of `node` (host name or coordinates) of a job.
    pub fn prepare_fail(&self, job_id: u32, node: &str) -> Result<Prepared, ProtoError> {
        let job = self.get(job_id)?;
        let n = job.node(node)?;
        if let Some(&i) = job.by_node.get(&n) {
            return Ok(Prepared::Unchanged(Reply::Failed {
                job_id,
                record: job.history[i].clone(),
            }));
        }
        let name = job.name(n);
        if job.map.state(n) == NodeState::Dead {
            // Dead in the registered map: nothing to do, and nothing to remember.
            return Ok(Prepared::Unchanged(Reply::Failed {
                job_id,
                record: Substitution {
                    step: 0,
                    node: name,
                    outcome: "already_failed".into(),
                    method: job.meta.method.to_string(),
                    method_used: None,
                    slide: None,
                    moves: Vec::new(),
                    collisions_before: job.collisions,
                    collisions_after: job.collisions,
                    lost: job.is_lost(),
                },
            }));
        }
        // The model works on a copy: the registry changes only in `commit`, after the journal.
        let mut map = job.map.clone();
        let outcome = fail(&mut map, n, &job.meta.method)
            .map_err(|e| ProtoError::new(ErrorCode::Internal, format!("job {job_id}: {e}")))?;
        let doc = MapDocument::new(&map, &job.meta);
        let kind = outcome.name();
        let (used, slide, moves) = (
            outcome.method_used(),
            outcome.slide().map(|s| s.to_string()),
            outcome.moves(),
        );
        let record = Substitution {
            // Its place in the history, substitutions at start (step 0) included: clients
            // count records by step.
            step: job.history.len() as u32 + 1,
            node: name,
            outcome: kind.into(),
            method: job.meta.method.to_string(),
            method_used: used,
            slide,
            moves: moves
                .iter()
                .map(|m| MoveOut {
                    rank: m.rank,
                    from: job.name(m.from),
                    to: job.name(m.to),
                })
                .collect(),
            collisions_before: job.collisions,
            collisions_after: doc.collisions,
            lost: map.is_lost(),
        };
        Ok(Prepared::Change {
            change: Change::Fail {
                job_id,
                record: Box::new(record.clone()),
            },
            apply: Apply::Fail(Box::new(FailApply {
                job_id,
                node: n,
                map,
                doc_json: doc_raw(&doc),
                collisions: doc.collisions,
                record: record.clone(),
            })),
            reply: Reply::Failed { job_id, record },
        })
    }

    /// What a re-map of a job starts from: its current map. Refused for a lost job (a rank on
    /// a dead node: there is no bijection onto alive nodes).
    pub fn remap_input(&self, job_id: u32) -> Result<RemapInput, ProtoError> {
        let job = self.get(job_id)?;
        if job.is_lost() {
            return Err(ProtoError::new(
                ErrorCode::Conflict,
                format!("job {job_id} is lost (a rank sits on a dead node): nothing to re-map"),
            ));
        }
        Ok(RemapInput {
            job_id,
            map: job.map.clone(),
            meta: job.meta.clone(),
            version: (job.history.len(), job.remaps.len()),
        })
    }

    /// Decides a re-map found by [`RemapInput::run`] on `input` within `budget`. Refused with
    /// `conflict` when the job changed since `input` was taken (a failure meanwhile: the
    /// search's map is no longer the job's).
    pub fn prepare_remap(
        &self,
        input: &RemapInput,
        found: &Remap,
        budget: &RemapBudget,
    ) -> Result<Prepared, ProtoError> {
        let job_id = input.job_id;
        let job = self.get(job_id)?;
        if (job.history.len(), job.remaps.len()) != input.version {
            return Err(ProtoError::new(
                ErrorCode::Conflict,
                format!("job {job_id} changed while its re-map was searched (a failure or another re-map); ask again"),
            ));
        }
        let name = |n: u32| job.name(n);
        let out = |m: &topology::Move| MoveOut {
            rank: m.rank,
            from: name(m.from),
            to: name(m.to),
        };
        let moves = found
            .steps
            .iter()
            .flat_map(|s| match s {
                Step::Move(m) => std::slice::from_ref(m).iter(),
                Step::Exchange(ms) => ms.iter(),
            })
            .map(out)
            .collect();
        let record = RemapRecord {
            remap: job.remaps.len() as u32 + 1,
            after_step: job.history.len() as u32,
            max_moves: budget.max_moves,
            iterations: budget.iterations,
            seed: budget.seed,
            stop: found.stop.name().into(),
            collisions_before: job.collisions,
            collisions_after: found.after.collisions,
            lower_bound: found.lower_bound,
            moved: found.moved.len() as u32,
            moves,
        };
        self.prepare_remap_record(job_id, &record)
    }

    /// Decides the re-map of `record` on the job's current map: its moves are installed as
    /// they are (a journal replay, or a search's result). Each move must start where the
    /// rank is and the result must put every rank on its own alive node.
    pub fn prepare_remap_record(
        &self,
        job_id: u32,
        record: &RemapRecord,
    ) -> Result<Prepared, ProtoError> {
        let job = self.get(job_id)?;
        let invalid = |why: String| {
            ProtoError::new(
                ErrorCode::InvalidMap,
                format!("job {job_id}: re-map {}: {why}", record.remap),
            )
        };
        let grid = *job.map.grid();
        let q = grid.dims();
        // Where each rank is at this point of the sequence: a pipelined rank may move twice.
        let mut at: Vec<u32> = job.map.rank_nodes().to_vec();
        for m in &record.moves {
            let from = job.node(&m.from)?;
            let to = job.node(&m.to)?;
            let Some(node) = at.get_mut(m.rank as usize) else {
                return Err(invalid(format!(
                    "rank {} is not one of the job's {} ranks",
                    m.rank,
                    job.ranks()
                )));
            };
            if *node != from {
                return Err(invalid(format!(
                    "rank {} is on {} at this move, not on {}",
                    m.rank,
                    job.name(*node),
                    m.from
                )));
            }
            *node = to;
        }
        let moved = job
            .map
            .rank_nodes()
            .iter()
            .zip(&at)
            .filter(|(a, b)| a != b)
            .count() as u32;
        let mut doc = job.map_document();
        for (coord, &node) in doc.ranks.iter_mut().zip(&at) {
            *coord = grid.coord(node)[..q].to_vec();
        }
        let (mut map, _) = doc
            .into_map()
            .map_err(|e| invalid(format!("the moves do not give a map: {e}")))?;
        map.track_traffic(&job.meta.pattern, job.meta.periodic);
        let doc = MapDocument::new(&map, &job.meta);
        let record = RemapRecord {
            collisions_before: job.collisions,
            collisions_after: doc.collisions,
            moved,
            ..record.clone()
        };
        Ok(Prepared::Change {
            change: Change::Remap {
                job_id,
                record: Box::new(record.clone()),
            },
            apply: Apply::Remap(Box::new(RemapApply {
                job_id,
                map,
                doc_json: doc_raw(&doc),
                collisions: doc.collisions,
                record: record.clone(),
            })),
            reply: Reply::Remapped { job_id, record },
        })
    }

    /// Decides a release at `released_at` (Unix seconds).
    pub fn prepare_release(&self, job_id: u32, released_at: u64) -> Result<Prepared, ProtoError> {
        let job = self.get(job_id)?;
        let kept = ReleasedJob {
            released_at,
            release_seq: 0,
            summary: job.summary(),
            failed: job.failed_nodes(),
            history: Arc::clone(&job.history),
            remaps: Arc::clone(&job.remaps),
            map: job.map_json_shared(),
        };
        Ok(Prepared::Change {
            change: Change::Release {
                job_id,
                released_at,
            },
            apply: Apply::Remove(Box::new(kept)),
            reply: Reply::Released { job_id },
        })
    }

    /// Installs a prepared change made durable at journal sequence `seq`.
    pub fn commit(&mut self, apply: Apply, seq: u64) {
        match apply {
            Apply::Insert(mut job) => {
                job.last_seq = seq;
                // A job id Slurm gives again: the new job is the one `show` means.
                self.released.remove_job(job.job_id);
                self.jobs.insert(job.job_id, *job);
            }
            Apply::Fail(f) => {
                let f = *f;
                let job = self
                    .jobs
                    .get_mut(&f.job_id)
                    .expect("a prepared failure's job is registered (one lock holds both steps)");
                job.map = f.map;
                job.doc_json = SharedJson::new(f.doc_json);
                job.collisions = f.collisions;
                job.by_node.insert(f.node, job.history.len());
                // Copies the history only when a reply being written still holds it.
                Arc::make_mut(&mut job.history).push(f.record);
                job.summary = job.compute_summary();
                job.last_seq = seq;
            }
            Apply::Remap(r) => {
                let r = *r;
                let job = self
                    .jobs
                    .get_mut(&r.job_id)
                    .expect("a prepared re-map's job is registered (one lock holds both steps)");
                job.map = r.map;
                job.doc_json = SharedJson::new(r.doc_json);
                job.collisions = r.collisions;
                Arc::make_mut(&mut job.remaps).push(r.record);
                job.summary = job.compute_summary();
                job.last_seq = seq;
            }
            Apply::Remove(mut kept) => {
                self.jobs.remove(&kept.summary.job_id);
                kept.release_seq = seq;
                self.released.insert(*kept);
            }
        }
    }

    /// Replays a journal record: the model recomputes the failure, and the result must be the
    /// answer that was given. Returns a warning when it is not (the model changed between
    /// versions); the recomputed state is kept either way, since it is what the model says.
    pub fn replay(&mut self, change: Change, seq: u64) -> Result<Option<String>, ProtoError> {
        let mut remap_warning = None;
        let (prepared, expected) = match change {
            Change::Register {
                job_id,
                uid,
                map,
                at_start,
            } => (
                self.prepare_register_with_start(job_id, uid, *map, at_start)?,
                None,
            ),
            Change::Fail { job_id, record } => {
                (self.prepare_fail(job_id, &record.node)?, Some(record))
            }
            Change::Remap { job_id, record } => {
                // The moves as acknowledged, not a new search: the same map on every replay.
                let prepared = self.prepare_remap_record(job_id, &record)?;
                if let Prepared::Change {
                    reply: Reply::Remapped { record: now, .. },
                    ..
                } = &prepared
                {
                    if now.collisions_after != record.collisions_after {
                        remap_warning = Some(format!(
                            "journal record {seq}: re-map {} of job {job_id} now gives collisions {} where {} was acknowledged",
                            record.remap, now.collisions_after, record.collisions_after
                        ));
                    }
                }
                (prepared, None)
            }
            Change::Release {
                job_id,
                released_at,
            } => (self.prepare_release(job_id, released_at)?, None),
        };
        match prepared {
            Prepared::Unchanged(_) => Ok(Some(format!(
                "journal record {seq} changes nothing (a duplicate); skipped"
            ))),
            Prepared::Change { apply, reply, .. } => {
                let mut warning = remap_warning;
                if let (Some(exp), Reply::Failed { record, .. }) = (expected, &reply) {
                    if *exp != *record {
                        warning = Some(format!(
                            "journal record {seq}: the model now answers {} for node {} of job {} where {} was acknowledged",
                            record.outcome, record.node, record_job(&reply), exp.outcome
                        ));
                    }
                }
                self.commit(apply, seq);
                Ok(warning)
            }
        }
    }

    /// The whole registry as a snapshot.
    pub fn snapshot(&self, seq: u64) -> Snapshot {
        Snapshot {
            format: SNAPSHOT_FORMAT,
            seq,
            jobs: self
                .jobs
                .values()
                .map(|j| SnapshotJob {
                    job_id: j.job_id,
                    uid: j.uid,
                    registered: j.registered.clone(),
                    current: j.map_document(),
                    history: j.history.as_ref().clone(),
                    remaps: j.remaps.as_ref().clone(),
                })
                .collect(),
            released: self
                .released
                .by_seq
                .values()
                .map(|(j, _)| j.clone())
                .collect(),
        }
    }

    /// Rebuilds a registry from a snapshot.
    pub fn from_snapshot(s: Snapshot) -> Result<(Registry, Vec<String>), ProtoError> {
        if s.format != SNAPSHOT_FORMAT {
            return Err(ProtoError::new(
                ErrorCode::Internal,
                format!(
                    "snapshot format {} is not supported (this daemon writes {SNAPSHOT_FORMAT})",
                    s.format
                ),
            ));
        }
        let mut reg = Registry::new();
        for j in s.jobs {
            let job_id = j.job_id;
            let mut job = Job::new(job_id, j.uid, j.registered)?;
            let (mut map, meta) = j.current.into_map().map_err(|e| {
                ProtoError::new(
                    ErrorCode::InvalidMap,
                    format!("job {job_id}: current map: {e}"),
                )
            })?;
            if map.grid() != job.map.grid() || map.compute() != job.map.compute() {
                return Err(ProtoError::new(
                    ErrorCode::InvalidMap,
                    format!("job {job_id}: the current map does not fit the registered box"),
                ));
            }
            map.track_traffic(&meta.pattern, meta.periodic);
            let doc = MapDocument::new(&map, &meta);
            job.map = map;
            job.collisions = doc.collisions;
            job.doc_json = SharedJson::new(doc_raw(&doc));
            for (i, r) in j.history.iter().enumerate() {
                let n = job.node(&r.node)?;
                job.by_node.insert(n, i);
            }
            job.history = Arc::new(j.history);
            job.remaps = Arc::new(j.remaps);
            job.summary = job.compute_summary();
            job.last_seq = s.seq;
            reg.jobs.insert(job_id, job);
        }
        for j in s.released {
            reg.released.insert(j);
        }
        Ok((reg, Vec::new()))
    }
}

fn record_job(r: &Reply) -> u32 {
    match r {
        Reply::Registered { job_id, .. }
        | Reply::Failed { job_id, .. }
        | Reply::Remapped { job_id, .. }
        | Reply::Released { job_id } => *job_id,
    }
}

/// Format version of `snapshot.json`.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// The registry on disk: each job's registered map, its current map and its answered
/// failures, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Format version ([`SNAPSHOT_FORMAT`]).
    pub format: u32,
    /// Last journal sequence number included.
    pub seq: u64,
    /// The jobs.
    pub jobs: Vec<SnapshotJob>,
    /// The released jobs whose histories are kept, oldest release first (absent in snapshots
    /// before 0.3).
    #[serde(default)]
    pub released: Vec<ReleasedJob>,
}

/// One job in a snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotJob {
    /// Slurm job id.
    pub job_id: u32,
    /// Owner's uid.
    pub uid: u32,
    /// The map as registered.
    pub registered: MapDocument,
    /// The map after the failures of `history`: loaded as it is, so that a restart does not
    /// recompute every substitution (the journal's records after the snapshot are recomputed).
    pub current: MapDocument,
    /// The failures answered, in order.
    pub history: Vec<Substitution>,
    /// The re-maps answered, in order (absent before re-maps existed).
    #[serde(default)]
    pub remaps: Vec<RemapRecord>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use topology::{Grid, Method, Pattern};

    pub fn doc(hosts: bool) -> MapDocument {
        let g = Grid::mesh(&[4, 4]).unwrap();
        let m = SpareMap::new(g, &[3, 3], &[0, 0]).unwrap();
        let meta = MapMeta {
            topology: Some("t".into()),
            origin: vec![0, 0],
            spares: "2D(2,1)".into(),
            method: Method::parse("hybrid", 2).unwrap(),
            pattern: Pattern::star(2),
            periodic: false,
            hosts: hosts.then(|| (0..16).map(|i| format!("n{i:02}")).collect()),
        };
        MapDocument::new(&m, &meta)
    }

    fn run(reg: &mut Registry, p: Prepared, seq: u64) -> Reply {
        match p {
            Prepared::Unchanged(r) => r,
            Prepared::Change { apply, reply, .. } => {
                reg.commit(apply, seq);
                reply
            }
        }
    }

    #[test]
    fn substitutions_at_start_open_the_history_as_step_0() {
        // n00 (rank 0) was dead before the job started; the prolog's map has it substituted.
        let g = Grid::mesh(&[4, 4]).unwrap();
        let mut m = SpareMap::new(g, &[3, 3], &[0, 0]).unwrap();
        let outcome = fail(&mut m, 0, &Method::parse("hybrid", 2).unwrap()).unwrap();
        let mut meta = doc(true).into_map().unwrap().1;
        meta.origin = vec![0, 0];
        let started = MapDocument::new(&m, &meta);
        let at_start = vec![Substitution {
            step: 0,
            node: "n00".into(),
            outcome: "substituted".into(),
            method: "hybrid".into(),
            method_used: outcome.method_used(),
            slide: None,
            moves: Vec::new(),
            collisions_before: 1,
            collisions_after: started.collisions,
            lost: false,
        }];
        let mut reg = Registry::new();
        let p = reg
            .prepare_register_with_start(5, 1000, started.clone(), at_start.clone())
            .unwrap();
        let Prepared::Change { ref change, .. } = p else {
            panic!()
        };
        let journal = serde_json::to_string(change).unwrap();
        run(&mut reg, p, 1);
        let job = reg.get(5).unwrap();
        assert_eq!(job.failed_at_start(), ["n00"]);
        assert_eq!(job.history.as_ref(), &at_start);
        // Reported again: the answer at start; the next failure is the history's second record.
        let Prepared::Unchanged(Reply::Failed { record, .. }) = reg.prepare_fail(5, "n00").unwrap()
        else {
            panic!()
        };
        assert_eq!(record.step, 0);
        let p = reg.prepare_fail(5, "n05").unwrap();
        let Reply::Failed { record, .. } = run(&mut reg, p, 2) else {
            panic!()
        };
        assert_eq!(record.step, 2);
        // The journal's register record brings them back.
        let mut replayed = Registry::new();
        replayed
            .replay(serde_json::from_str(&journal).unwrap(), 1)
            .unwrap();
        assert_eq!(replayed.get(5).unwrap().failed_at_start(), ["n00"]);
        // Only nodes dead in the map, once each, step 0.
        let refused = |records: Vec<Substitution>| {
            Registry::new()
                .prepare_register_with_start(6, 1000, started.clone(), records)
                .err()
                .unwrap()
                .message
        };
        let mut alive = at_start.clone();
        alive[0].node = "n05".into();
        assert!(
            refused(alive).contains("n05 is not"),
            "step 0 of a live node"
        );
        let twice = vec![at_start[0].clone(), at_start[0].clone()];
        assert!(refused(twice).contains("2 substitutions at start for 1 dead nodes"));
    }

    #[test]
    fn register_fail_release() {
        let mut reg = Registry::new();
        let p = reg.prepare_register(5, 1000, doc(true)).unwrap();
        assert!(matches!(
            run(&mut reg, p, 1),
            Reply::Registered { created: true, .. }
        ));
        let p = reg.prepare_register(5, 1000, doc(true)).unwrap();
        assert!(matches!(
            p,
            Prepared::Unchanged(Reply::Registered { created: false, .. })
        ));
        assert_eq!(
            reg.prepare_register(5, 1001, doc(true)).err().unwrap().code,
            ErrorCode::Conflict
        );
        assert_eq!(
            reg.prepare_register(5, 1000, doc(false))
                .err()
                .unwrap()
                .code,
            ErrorCode::Conflict
        );
        // node n05 = (1,1) hosts rank 4.
        let p = reg.prepare_fail(5, "n05").unwrap();
        let Reply::Failed { record, .. } = run(&mut reg, p, 2) else {
            panic!()
        };
        assert_eq!(record.outcome, "substituted");
        assert_eq!(record.step, 1);
        assert_eq!(record.collisions_before, 1);
        // The same failure again: the same answer, no change.
        let before = reg.get(5).unwrap().map_json().get().to_string();
        let p = reg.prepare_fail(5, "1,1").unwrap();
        let Prepared::Unchanged(Reply::Failed { record: again, .. }) = p else {
            panic!("a repeated failure must change nothing")
        };
        assert_eq!(again, record);
        assert_eq!(reg.get(5).unwrap().map_json().get(), before);
        assert_eq!(
            reg.prepare_fail(5, "n99").err().unwrap().code,
            ErrorCode::UnknownNode
        );
        assert_eq!(
            reg.prepare_fail(6, "n01").err().unwrap().code,
            ErrorCode::UnknownJob
        );
        let p = reg.prepare_release(5, 100).unwrap();
        run(&mut reg, p, 3);
        assert!(reg.is_empty());
    }

    #[test]
    fn snapshots_rebuild_the_same_registry() {
        let mut reg = Registry::new();
        let p = reg.prepare_register(1, 7, doc(false)).unwrap();
        run(&mut reg, p, 1);
        for (i, n) in ["1,1", "3,3", "0,0", "2,1"].iter().enumerate() {
            let p = reg.prepare_fail(1, n).unwrap();
            run(&mut reg, p, 2 + i as u64);
        }
        let s = reg.snapshot(9);
        let text = serde_json::to_string(&s).unwrap();
        let (back, warnings) =
            Registry::from_snapshot(serde_json::from_str(&text).unwrap()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let (a, b) = (reg.get(1).unwrap(), back.get(1).unwrap());
        assert_eq!(a.map_json().get(), b.map_json().get());
        assert_eq!(a.history, b.history);
    }

    /// A 6x6x6 mesh with a 5x5x5 job and 3D(1,0)-like free planes, with host names: room for
    /// collisions to pile up and for a re-map to undo them.
    pub fn doc3() -> MapDocument {
        let g = Grid::mesh(&[6, 6, 6]).unwrap();
        let m = SpareMap::new(g, &[5, 5, 5], &[0, 0, 0]).unwrap();
        let meta = MapMeta {
            topology: Some("t3".into()),
            origin: vec![0, 0, 0],
            spares: "3D(1,0)".into(),
            // 0D: each failed rank goes to a far spare, so collisions rise fast.
            method: Method::parse("0D", 3).unwrap(),
            pattern: Pattern::star(3),
            periodic: false,
            hosts: Some((0..216).map(|i| format!("h{i:03}")).collect()),
        };
        MapDocument::new(&m, &meta)
    }

    pub fn budget(max_moves: u32) -> RemapBudget {
        RemapBudget {
            max_moves,
            iterations: 20_000,
            time_limit: std::time::Duration::from_secs(60),
            seed: 1,
        }
    }

    /// Registers `doc3` as job 9 and fails nodes inside the job until collisions rose.
    fn slid_job(reg: &mut Registry, seq: &mut u64, journal: &mut Vec<Change>) {
        let mut step = |reg: &mut Registry, p: Prepared| {
            *seq += 1;
            if let Prepared::Change { change, .. } = &p {
                journal.push(change.clone());
            }
            run(reg, p, *seq)
        };
        let p = reg.prepare_register(9, 1000, doc3()).unwrap();
        step(reg, p);
        for n in ["1,1,1", "3,2,1", "2,3,3", "1,3,2", "3,1,3", "2,2,2"] {
            let p = reg.prepare_fail(9, n).unwrap();
            step(reg, p);
        }
    }

    fn remap_now(reg: &Registry, job_id: u32, b: &RemapBudget) -> Prepared {
        let input = reg.remap_input(job_id).unwrap();
        let found = input.run(b).unwrap();
        reg.prepare_remap(&input, &found, b).unwrap()
    }

    fn placement(reg: &Registry, job_id: u32) -> Vec<Vec<u32>> {
        reg.get(job_id).unwrap().map_document().ranks
    }

    #[test]
    fn a_remap_lowers_collisions_and_a_later_failure_slides_from_the_remapped_map() {
        let (mut reg, mut seq, mut journal) = (Registry::new(), 0, Vec::new());
        slid_job(&mut reg, &mut seq, &mut journal);
        let before = reg.get(9).unwrap().collisions();
        let slid = placement(&reg, 9);
        let p = remap_now(&reg, 9, &budget(1000));
        let Reply::Remapped { record, .. } = run(&mut reg, p, 100) else {
            panic!("a re-map answers with a record")
        };
        assert_eq!((record.remap, record.after_step), (1, 6));
        assert_eq!(record.collisions_before, before);
        assert!(
            record.collisions_after < before,
            "collisions {before} -> {}",
            record.collisions_after
        );
        assert!(!record.moves.is_empty());
        let job = reg.get(9).unwrap();
        assert_eq!(job.collisions(), record.collisions_after);
        assert_eq!(job.remaps.len(), 1);
        assert_eq!(job.history.len(), 6, "a re-map is no failure");
        let remapped = placement(&reg, 9);
        let host = |c: &[u32]| format!("h{:03}", c[0] + 6 * c[1] + 36 * c[2]);
        let ranks: BTreeSet<u32> = record.moves.iter().map(|m| m.rank).collect();
        assert_eq!(record.moved as usize, ranks.len());
        for &r in &ranks {
            let mut ms = record.moves.iter().filter(|m| m.rank == r);
            let first = ms.next().unwrap();
            let last = ms.next_back().unwrap_or(first);
            assert_eq!(host(&slid[r as usize]), first.from, "rank {r}");
            assert_eq!(host(&remapped[r as usize]), last.to, "rank {r}");
        }

        // The next failure slides from the re-mapped map, not from the slid one: the model
        // run on the re-mapped map gives exactly the daemon's answer.
        let moved_rank = *ranks.first().unwrap();
        let victim = host(&remapped[moved_rank as usize]);
        assert_ne!(victim, host(&slid[moved_rank as usize]));
        let mut expected = reg.get(9).unwrap().map.clone();
        let node = reg.get(9).unwrap().node(&victim).unwrap();
        let outcome = fail(&mut expected, node, &Method::parse("0D", 3).unwrap()).unwrap();
        let p = reg.prepare_fail(9, &victim).unwrap();
        let Reply::Failed { record: f, .. } = run(&mut reg, p, 101) else {
            panic!()
        };
        assert_eq!(f.step, 7);
        assert_eq!(f.moves.len(), outcome.moves().len());
        assert_eq!(
            reg.get(9).unwrap().map.rank_nodes(),
            expected.rank_nodes(),
            "the failure slid from the re-mapped map"
        );
        assert_eq!(
            f.moves[0].rank, moved_rank,
            "the rank re-mapped onto the failed node is the one that leaves it"
        );
        assert_eq!(f.moves[0].from, victim);
    }

    #[test]
    fn a_remap_within_its_budget_moves_at_most_max_moves_ranks() {
        let (mut reg, mut seq, mut journal) = (Registry::new(), 0, Vec::new());
        slid_job(&mut reg, &mut seq, &mut journal);
        let slid = placement(&reg, 9);
        let p = remap_now(&reg, 9, &budget(3));
        let Reply::Remapped { record, .. } = run(&mut reg, p, 100) else {
            panic!()
        };
        assert_eq!(record.max_moves, 3);
        let now = placement(&reg, 9);
        let moved = slid.iter().zip(&now).filter(|(a, b)| a != b).count();
        assert!(
            moved <= 3 && record.moved as usize == moved,
            "{moved} moved"
        );
        let p = remap_now(&reg, 9, &budget(0));
        let Reply::Remapped { record, .. } = run(&mut reg, p, 101) else {
            panic!()
        };
        assert!(record.moves.is_empty());
        assert_eq!(record.stop, "nothing_to_do");
        assert_eq!(placement(&reg, 9), now);
    }

    #[test]
    fn journal_replay_and_snapshot_give_the_remapped_map() {
        let (mut reg, mut seq, mut journal) = (Registry::new(), 0, Vec::new());
        slid_job(&mut reg, &mut seq, &mut journal);
        for (i, p) in [remap_now(&reg, 9, &budget(1000))].into_iter().enumerate() {
            if let Prepared::Change { change, .. } = &p {
                journal.push(change.clone());
            }
            run(&mut reg, p, 50 + i as u64);
        }
        let p = reg.prepare_fail(9, "4,4,4").unwrap();
        if let Prepared::Change { change, .. } = &p {
            journal.push(change.clone());
        }
        run(&mut reg, p, 60);

        // Replay from the journal's text: the same maps, no warning.
        let mut replayed = Registry::new();
        for (i, c) in journal.iter().enumerate() {
            let line = serde_json::to_string(c).unwrap();
            let back: Change = serde_json::from_str(&line).unwrap();
            let w = replayed.replay(back, i as u64 + 1).unwrap();
            assert!(w.is_none(), "{w:?}");
        }
        let (a, b) = (reg.get(9).unwrap(), replayed.get(9).unwrap());
        assert_eq!(a.map_json().get(), b.map_json().get());
        assert_eq!(a.remaps, b.remaps);
        assert_eq!(a.history, b.history);

        // A snapshot: the same map and records.
        let text = serde_json::to_string(&reg.snapshot(60)).unwrap();
        let (back, _) = Registry::from_snapshot(serde_json::from_str(&text).unwrap()).unwrap();
        let b = back.get(9).unwrap();
        assert_eq!(a.map_json().get(), b.map_json().get());
        assert_eq!(a.remaps, b.remaps);
        // A released job keeps its re-maps too.
        let remaps = Arc::clone(&a.remaps);
        let p = reg.prepare_release(9, 100).unwrap();
        run(&mut reg, p, 61);
        assert_eq!(reg.released(9, 100).unwrap().remaps, remaps);
    }

    #[test]
    fn a_replayed_remap_installs_its_moves_without_searching_again() {
        let mut reg = Registry::new();
        let p = reg.prepare_register(5, 1000, doc(true)).unwrap();
        run(&mut reg, p, 1);
        // Rank 0 (n00) to the free node n03: a move no search would make (it adds hops).
        let mut record = RemapRecord {
            remap: 1,
            after_step: 0,
            max_moves: 1,
            iterations: 10,
            seed: 1,
            stop: "iterations".into(),
            collisions_before: 1,
            collisions_after: 0,
            lower_bound: 1,
            moved: 1,
            moves: vec![MoveOut {
                rank: 0,
                from: "n00".into(),
                to: "n03".into(),
            }],
        };
        let change = Change::Remap {
            job_id: 5,
            record: Box::new(record.clone()),
        };
        let w = reg.replay(change, 2).unwrap();
        assert!(
            w.is_some_and(|w| w.contains("now gives collisions")),
            "the stated collisions differ from the map's: a warning"
        );
        assert_eq!(placement(&reg, 5)[0], vec![3, 0]);
        // A move that does not start where its rank is, or lands on a busy node, is refused.
        record.remap = 2;
        for (from, to) in [("n00", "n12"), ("n03", "n01")] {
            record.moves[0].from = from.into();
            record.moves[0].to = to.into();
            let e = reg
                .replay(
                    Change::Remap {
                        job_id: 5,
                        record: Box::new(record.clone()),
                    },
                    3,
                )
                .err()
                .unwrap();
            assert_eq!(e.code, ErrorCode::InvalidMap, "{from} -> {to}: {e}");
        }
        record.moves[0].rank = 99;
        assert!(reg.prepare_remap_record(5, &record).is_err());
    }

    #[test]
    fn a_remap_searched_across_a_failure_is_refused() {
        let (mut reg, mut seq, mut journal) = (Registry::new(), 0, Vec::new());
        slid_job(&mut reg, &mut seq, &mut journal);
        let input = reg.remap_input(9).unwrap();
        let found = input.run(&budget(1000)).unwrap();
        let p = reg.prepare_fail(9, "4,4,4").unwrap();
        run(&mut reg, p, 50);
        let e = reg
            .prepare_remap(&input, &found, &budget(1000))
            .err()
            .unwrap();
        assert_eq!(e.code, ErrorCode::Conflict, "{e}");
    }

    fn retention(secs: u64, max_bytes: usize, max_bytes_per_uid: usize) -> Retention {
        Retention {
            secs,
            max_bytes,
            max_bytes_per_uid,
        }
    }

    /// Registers `job_id` for `uid`, fails n05, releases it at `at` (journal seq `seq`..).
    fn job_released(reg: &mut Registry, job_id: u32, uid: u32, at: u64, seq: u64) {
        let p = reg.prepare_register(job_id, uid, doc(true)).unwrap();
        run(reg, p, seq);
        let p = reg.prepare_fail(job_id, "n05").unwrap();
        run(reg, p, seq + 1);
        let p = reg.prepare_release(job_id, at).unwrap();
        run(reg, p, seq + 2);
    }

    #[test]
    fn a_released_job_keeps_its_history_for_the_retention_time() {
        let mut reg = Registry::new();
        reg.set_retention(retention(3600, 1 << 20, 1 << 20), 1000);
        job_released(&mut reg, 5, 1000, 1000, 1);
        assert!(reg.get(5).is_err(), "released: no longer a live job");
        let kept = reg.released(5, 1000).expect("kept after release");
        assert_eq!(kept.summary.uid, 1000);
        assert_eq!(kept.history.len(), 1);
        assert_eq!(kept.history[0].node, "n05");
        assert_eq!(kept.failed, vec!["n05".to_string()]);
        assert_eq!(kept.release_seq, 3);
        let map: MapDocument = serde_json::from_str(kept.map.get().get()).unwrap();
        assert_eq!(map.failed.len(), 1, "the map at release has the dead node");
        assert!(reg.released(5, 4599).is_some());
        assert!(reg.released(5, 4600).is_none(), "expired after 3600 s");
        // A later release prunes the expired one for good.
        job_released(&mut reg, 6, 1000, 5000, 4);
        assert!(reg.released_jobs(0).all(|j| j.summary.job_id == 6));
        // The same id registered again is the new job; its old history goes.
        let p = reg.prepare_register(6, 1000, doc(true)).unwrap();
        run(&mut reg, p, 7);
        assert!(reg.released(6, 5000).is_none());
        assert_eq!(reg.released_bytes(), 0);
    }

    #[test]
    fn kept_histories_stay_within_the_owner_and_total_budgets() {
        let mut probe = Registry::new();
        job_released(&mut probe, 1, 1, 10, 1);
        let cost = probe.released(1, 10).unwrap().cost();

        // Room for two of one owner, three in all: the oldest go first.
        let mut reg = Registry::new();
        reg.set_retention(retention(3600, 3 * cost, 2 * cost), 10);
        for (i, uid) in [1000, 1000, 1000, 2000, 2000].iter().enumerate() {
            job_released(&mut reg, 10 + i as u32, *uid, 10, 10 * (i as u64 + 1));
        }
        let kept: Vec<u32> = reg.released_jobs(10).map(|j| j.summary.job_id).collect();
        assert_eq!(kept, vec![12, 13, 14]);
        assert!(reg.released_bytes() <= 3 * cost);

        // A history larger than an owner's budget is not kept at all.
        let mut reg = Registry::new();
        reg.set_retention(retention(3600, 4 * cost, cost - 1), 10);
        job_released(&mut reg, 1, 1000, 10, 1);
        assert!(reg.released(1, 10).is_none());

        // Retention 0: nothing kept; and applying it drops what a replay kept.
        let mut reg = Registry::new();
        job_released(&mut reg, 1, 1000, 10, 1);
        assert!(reg.released(1, 10).is_some());
        reg.set_retention(retention(0, 4 * cost, cost), 10);
        assert!(reg.released(1, 10).is_none());
        assert_eq!(reg.released_bytes(), 0);
    }

    #[test]
    fn released_histories_survive_a_snapshot_and_a_replayed_release() {
        let mut reg = Registry::new();
        job_released(&mut reg, 5, 1000, 100, 1);
        let text = serde_json::to_string(&reg.snapshot(3)).unwrap();
        let (back, _) = Registry::from_snapshot(serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back.released(5, 100), reg.released(5, 100));

        // The journal's release record carries its time, so a replay keeps the same history.
        let mut replayed = Registry::new();
        let p = replayed.prepare_register(5, 1000, doc(true)).unwrap();
        run(&mut replayed, p, 1);
        let p = replayed.prepare_fail(5, "n05").unwrap();
        run(&mut replayed, p, 2);
        let line = r#"{"op":"release","job_id":5,"released_at":100}"#;
        replayed
            .replay(serde_json::from_str(line).unwrap(), 3)
            .unwrap();
        assert_eq!(replayed.released(5, 100), reg.released(5, 100));
        // A release journaled by an older daemon (no time) keeps nothing.
        let mut old = Registry::new();
        let p = old.prepare_register(5, 1000, doc(true)).unwrap();
        run(&mut old, p, 1);
        old.replay(
            serde_json::from_str(r#"{"op":"release","job_id":5}"#).unwrap(),
            2,
        )
        .unwrap();
        assert!(old.released(5, 0).is_none() && old.get(5).is_err());
    }
}
