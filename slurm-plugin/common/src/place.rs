//! Where job_submit pins a padded box: on nodes that are free now, read from a file that
//! something outside slurmctld refreshes (a job_submit plugin runs under slurmctld's locks
//! and must never ask slurmctld). No file: every node is a candidate and Slurm queues the job.
//!
//! The free-node file, version 2 (backward compatible with version 1, a list of free nodes):
//! one or more lines, `#` starts a comment, blank lines are ignored; each line is
//! `HOSTLIST [state=free|busy|unusable] [partitions=NAME,NAME*,...] [other key=value]`.
//! A line without `state=` lists free nodes; without `partitions=` its nodes count for every
//! partition; `*` marks the default partition (as `sinfo` prints it); a further token
//! without `=` is another hostlist of the same line. Nodes of the topology the file does not
//! name are busy; names the topology does not know are ignored (other clusters).
//!
//! Boxes pinned since the file was written count as busy, so a burst of submissions between
//! two refreshes does not pile onto the same nodes.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use topology::grid::format_shape;
use topology::{hostlist, placement, Plan, Topology};

use crate::ffi::UserText;
use crate::policy::{OnNoPlacement, Policy, Refusal, RefusalKind};

/// The longest `--partition`, `--exclude` or `--nodelist` any site allows: what the plugin
/// copies out of a job descriptor at most.
pub use topology::limits::MAX_REQUEST_BYTES;

/// Most host names all hostlists of a free-node file may expand to together: each line's
/// expansion is bounded by the hostlist parser, but a file of many such lines would make
/// slurmctld build billions of names.
pub const MAX_FILE_HOSTS: u64 = hostlist::MAX_HOSTS as u64;

/// Most distinct partitions a free-node file may name (a site has a handful, a few hundred
/// at most).
pub const MAX_FILE_PARTITIONS: usize = 1024;

/// Most (node, partition) memberships a free-node file may give the topology's nodes: four
/// partitions for every node of the largest network.
pub const MAX_FILE_MEMBERSHIPS: u64 = 4 * hostlist::MAX_HOSTS as u64;

/// Longest partition name accepted, in bytes.
pub const MAX_PARTITION_NAME_BYTES: usize = 256;

/// Why a free-node file cannot be used; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum FreeNodeFileError {
    /// The file cannot be read (not a regular file, too large, not text, I/O).
    #[error("free node file: {0}")]
    Read(#[from] topology::sitefile::SiteFileError),
    /// A line that is not `HOSTLIST [key=value ...]`.
    #[error("free node file {path} line {line}: {why}")]
    Line {
        path: String,
        line: usize,
        why: String,
    },
    /// The file as a whole is over a budget.
    #[error("free node file {path}: {what} {value} exceeds the limit of {limit}")]
    Limit {
        path: String,
        what: &'static str,
        value: u64,
        limit: u64,
    },
}

/// What the file says of a node. The order is the precedence when lines disagree (a node
/// listed in two partitions appears twice): the less usable state wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NodeState {
    Free,
    Busy,
    Unusable,
}

impl NodeState {
    fn parse(value: &str) -> Option<Self> {
        match value {
            "free" => Some(NodeState::Free),
            "busy" => Some(NodeState::Busy),
            "unusable" => Some(NodeState::Unusable),
            _ => None,
        }
    }
}

/// A free-node file read against a topology: node states and partitions, as network node
/// indices, and when the file was written.
#[derive(Debug, Clone, PartialEq)]
pub struct FreeNodes {
    /// Nodes a job can start on now.
    pub nodes: HashSet<u32>,
    /// Nodes no job can be given (down, drained, not responding, ...).
    pub unusable: HashSet<u32>,
    /// Nodes the file lists as busy (a job may wait for them); nodes it does not list are
    /// busy as well.
    pub busy: HashSet<u32>,
    /// The distinct partition names of the file, in the order they first appear.
    pub partition_names: Vec<String>,
    /// The partitions of each node whose partitions the file gives, as indices into
    /// `partition_names`; a node absent here counts for every partition.
    pub node_partitions: HashMap<u32, Vec<u16>>,
    /// The partition the file marks with `*`.
    pub default_partition: Option<String>,
    pub written: SystemTime,
}

impl FreeNodes {
    /// The partitions of `node`; `None` when the file does not say (the node counts for
    /// every partition).
    pub fn partitions_of(&self, node: u32) -> Option<Vec<&str>> {
        self.node_partitions.get(&node).map(|ids| {
            ids.iter()
                .map(|&i| self.partition_names[usize::from(i)].as_str())
                .collect()
        })
    }

    /// Whether `node` belongs to one of `partitions` (a node of unknown partitions belongs
    /// to all of them).
    pub fn in_partitions<S: AsRef<str>>(&self, node: u32, partitions: &[S]) -> bool {
        self.in_any_partition(node, &self.partition_ids(partitions))
    }

    /// The indices (into `partition_names`) of those of `partitions` the file names.
    pub fn partition_ids<S: AsRef<str>>(&self, partitions: &[S]) -> Vec<u16> {
        (0..self.partition_names.len())
            .filter(|&i| {
                partitions
                    .iter()
                    .any(|p| p.as_ref() == self.partition_names[i])
            })
            // MAX_FILE_PARTITIONS fits in u16.
            .map(|i| i as u16)
            .collect()
    }

    /// Whether `node` belongs to one of the partitions `ids` (from [`Self::partition_ids`]);
    /// a node of unknown partitions belongs to all of them.
    pub fn in_any_partition(&self, node: u32, ids: &[u16]) -> bool {
        self.node_partitions
            .get(&node)
            .map_or(true, |own| own.iter().any(|i| ids.contains(i)))
    }

    /// Whether the file names the partition.
    pub fn knows_partition(&self, partition: &str) -> bool {
        self.partition_names.iter().any(|p| p == partition)
    }
}

/// One line of the file, parsed: its hostlists, state and partitions (`*` kept).
struct Line<'a> {
    hostlists: Vec<&'a str>,
    state: NodeState,
    partitions: Option<Vec<&'a str>>,
}

fn parse_line(line: &str) -> Result<Option<Line<'_>>, String> {
    let line = line.split('#').next().unwrap_or("").trim();
    let mut tokens = line.split_whitespace();
    let Some(first) = tokens.next() else {
        return Ok(None);
    };
    if first.contains('=') {
        return Err(format!(
            "'{first}' where a hostlist must come first (HOSTLIST [state=...] [partitions=...])"
        ));
    }
    let mut parsed = Line {
        hostlists: vec![first],
        state: NodeState::Free,
        partitions: None,
    };
    let mut state_seen = false;
    for token in tokens {
        match token.split_once('=') {
            None => parsed.hostlists.push(token),
            Some(("state", value)) => {
                if state_seen {
                    return Err("state= given twice".into());
                }
                state_seen = true;
                parsed.state = NodeState::parse(value)
                    .ok_or_else(|| format!("state={value} is not one of free, busy, unusable"))?;
            }
            Some(("partitions", value)) => {
                if parsed.partitions.is_some() {
                    return Err("partitions= given twice".into());
                }
                let mut names = Vec::new();
                for name in value.split(',') {
                    let bare = name.strip_suffix('*').unwrap_or(name);
                    if bare.is_empty() || bare.contains(['*', '=']) {
                        return Err(format!(
                            "partitions={value}: '{name}' is not a partition name"
                        ));
                    }
                    if bare.len() > MAX_PARTITION_NAME_BYTES {
                        return Err(format!(
                            "partitions=: a name of {} bytes exceeds the limit of {MAX_PARTITION_NAME_BYTES}",
                            bare.len()
                        ));
                    }
                    names.push(name);
                }
                parsed.partitions = Some(names);
            }
            // Keys a later writer may add.
            Some(_) => {}
        }
    }
    Ok(Some(parsed))
}

/// Reads the free-node file; `Ok(None)` when it does not exist. Names the topology does not
/// know are ignored (other clusters); a malformed line is an error naming the file and line.
/// Read inside slurmctld: a FIFO, a device or a huge file there must not block or grow it,
/// so the file is read with the site-file reader and `max_bytes`, and every hostlist is
/// counted against [`MAX_FILE_HOSTS`] before it is expanded.
pub fn read_free_nodes(
    path: &Path,
    topology: &Topology,
    max_bytes: u64,
) -> Result<Option<FreeNodes>, FreeNodeFileError> {
    let text = match topology::sitefile::read(path, max_bytes) {
        Ok(t) => t,
        Err(topology::sitefile::SiteFileError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    let written = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(Some(parse_free_nodes(
        &text,
        &path.display().to_string(),
        topology,
        written,
    )?))
}

/// Parses the text of a free-node file (see the module's notes) against `topology`; `source`
/// names the file in errors, `written` is when it was written.
pub fn parse_free_nodes(
    text: &str,
    source: &str,
    topology: &Topology,
    written: SystemTime,
) -> Result<FreeNodes, FreeNodeFileError> {
    let name = || source.to_string();
    let limit = |what, value, limit| FreeNodeFileError::Limit {
        path: name(),
        what,
        value,
        limit,
    };
    let mut states: HashMap<u32, NodeState> = HashMap::new();
    let mut free = FreeNodes {
        nodes: HashSet::new(),
        unusable: HashSet::new(),
        busy: HashSet::new(),
        partition_names: Vec::new(),
        node_partitions: HashMap::new(),
        default_partition: None,
        written,
    };
    let mut hosts_named: u64 = 0;
    let mut memberships: u64 = 0;
    for (i, text_line) in text.lines().enumerate() {
        let bad = |why: String| FreeNodeFileError::Line {
            path: name(),
            line: i + 1,
            why,
        };
        let Some(line) = parse_line(text_line).map_err(bad)? else {
            continue;
        };
        // The line's partitions as indices; the default one remembered.
        let mut ids: Vec<u16> = Vec::new();
        for &p in line.partitions.iter().flatten() {
            let bare = p.strip_suffix('*').unwrap_or(p);
            if bare.len() < p.len() {
                match &free.default_partition {
                    Some(d) if d != bare => {
                        return Err(bad(format!(
                            "default partition {bare}* after {d}* (a cluster has one default partition)"
                        )))
                    }
                    _ => free.default_partition = Some(bare.to_string()),
                }
            }
            let id = match free.partition_names.iter().position(|n| n == bare) {
                Some(id) => id,
                None => {
                    if free.partition_names.len() >= MAX_FILE_PARTITIONS {
                        return Err(limit(
                            "the count of partitions",
                            free.partition_names.len() as u64 + 1,
                            MAX_FILE_PARTITIONS as u64,
                        ));
                    }
                    free.partition_names.push(bare.to_string());
                    free.partition_names.len() - 1
                }
            };
            // MAX_FILE_PARTITIONS fits in u16.
            let id = id as u16;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        for expr in &line.hostlists {
            let count = hostlist::count(expr).map_err(|e| bad(e.to_string()))?;
            hosts_named = hosts_named.saturating_add(count);
            if hosts_named > MAX_FILE_HOSTS {
                return Err(limit(
                    "the count of host names",
                    hosts_named,
                    MAX_FILE_HOSTS,
                ));
            }
            let names = hostlist::expand(expr).map_err(|e| bad(e.to_string()))?;
            for node in names.iter().filter_map(|n| topology.node(n)) {
                let state = states.entry(node).or_insert(line.state);
                *state = (*state).max(line.state);
                if line.partitions.is_some() {
                    let known = free.node_partitions.entry(node).or_default();
                    for &id in &ids {
                        if !known.contains(&id) {
                            memberships += 1;
                            if memberships > MAX_FILE_MEMBERSHIPS {
                                return Err(limit(
                                    "the count of node-partition memberships",
                                    memberships,
                                    MAX_FILE_MEMBERSHIPS,
                                ));
                            }
                            known.push(id);
                        }
                    }
                }
            }
        }
    }
    for (node, state) in states {
        match state {
            NodeState::Free => free.nodes.insert(node),
            NodeState::Busy => free.busy.insert(node),
            NodeState::Unusable => free.unusable.insert(node),
        };
    }
    Ok(free)
}

/// How long a pin outlives the first file written after it: the job may still be pending
/// when the next refresh runs.
const PIN_GRACE: Duration = Duration::from_secs(2);

/// Boxes this process pinned recently.
#[derive(Debug, Default)]
pub struct Pins {
    pins: Vec<(SystemTime, Vec<u32>)>,
}

impl Pins {
    pub const fn new() -> Self {
        Pins { pins: Vec::new() }
    }

    /// Drops the pins a file written at `written` already reflects; returns the nodes of
    /// the others.
    pub fn busy(&mut self, written: Option<SystemTime>) -> HashSet<u32> {
        if let Some(w) = written {
            self.pins.retain(|(t, _)| *t + PIN_GRACE > w);
        }
        self.pins
            .iter()
            .flat_map(|(_, n)| n.iter().copied())
            .collect()
    }

    pub fn add(&mut self, at: SystemTime, nodes: Vec<u32>) {
        self.pins.push((at, nodes));
        // Bounded: without a free node file nothing ever clears them.
        if self.pins.len() > 4096 {
            self.pins.remove(0);
        }
    }
}

/// The pins of this slurmctld.
pub static PINS: Mutex<Pins> = Mutex::new(Pins::new());

/// Longest piece of a user's text a message quotes (the text itself may be 64 KiB).
const QUOTE_BYTES: usize = 120;

/// `text` for a message: at most [`QUOTE_BYTES`] bytes, cut at a character boundary.
fn quote(text: &str) -> String {
    if text.len() <= QUOTE_BYTES {
        return text.to_string();
    }
    let mut end = QUOTE_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

/// What a job asks of its box's nodes beyond being free: nodes of its partitions only, none
/// of its `--exclude`d nodes, and every node of its `--nodelist`. Built from the job
/// descriptor and the free-node file only (never from slurmctld).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeRequest {
    /// Nodes of the job's partitions; `None`: every node (no partition information).
    pub partition_nodes: Option<HashSet<u32>>,
    /// How messages name the partitions: `partition second`, `the default partition batch`.
    pub partition_label: Option<String>,
    /// Network nodes of `--exclude`.
    pub excluded: HashSet<u32>,
    /// Network nodes of `--nodelist`: the box must hold all of them.
    pub must_contain: HashSet<u32>,
}

impl NodeRequest {
    /// Reads a job's `--partition`, `--exclude` and `--nodelist` against the topology and the
    /// free-node file. Every text is checked against the site's limits before it is split or
    /// expanded; `--nodelist` must name nodes of the network, in the job's partitions and not
    /// excluded.
    pub fn from_job(
        policy: &Policy,
        free: Option<&FreeNodes>,
        partition: Option<&UserText>,
        exclude: Option<&UserText>,
        nodelist: Option<&UserText>,
    ) -> Result<NodeRequest, Refusal> {
        let t = &policy.topology;
        let limits = &policy.limits;
        let text = |what: &str, v: Option<&UserText>| -> Result<Option<String>, Refusal> {
            let too_long = || {
                Refusal::options(format!(
                    "{what} is longer than {} bytes, the limit of this cluster (limits.max_request_bytes of the site policy); use ranges such as node[01-16]",
                    limits.max_request_bytes
                ))
            };
            match v {
                None => Ok(None),
                Some(UserText::TooLong) => Err(too_long()),
                Some(UserText::Text(s)) if s.len() > limits.max_request_bytes => Err(too_long()),
                Some(UserText::Text(s)) => Ok(Some(s.trim().to_string()).filter(|s| !s.is_empty())),
            }
        };
        let partition = text("--partition", partition)?;
        let exclude = text("--exclude", exclude)?;
        let nodelist = text("--nodelist", nodelist)?;
        let mut request = NodeRequest::default();

        // Partitions: the job's list, else the default partition the file marks.
        let wanted: Option<(Vec<String>, String)> = match &partition {
            Some(list) => {
                let count = list.split(',').count();
                if count > limits.max_request_partitions {
                    return Err(Refusal::options(format!(
                        "--partition names {count} partitions, over the limit of {} (limits.max_request_partitions of the site policy)",
                        limits.max_request_partitions
                    )));
                }
                let names: Vec<String> = list.split(',').map(|p| p.trim().to_string()).collect();
                if names.iter().any(String::is_empty) {
                    return Err(Refusal::options(format!(
                        "--partition={} has an empty partition name",
                        quote(list)
                    )));
                }
                let label = if names.len() == 1 {
                    format!("partition {}", quote(&names[0]))
                } else {
                    format!("partitions {}", quote(&names.join(",")))
                };
                Some((names, label))
            }
            None => free
                .and_then(|f| f.default_partition.as_ref())
                .map(|d| (vec![d.clone()], format!("the default partition {d}"))),
        };
        if let (Some((names, label)), Some(f)) = (wanted, free) {
            // Only the file knows partitions: without one every node counts.
            let ids = f.partition_ids(&names);
            let members: HashSet<u32> = (0..t.grid.len())
                .filter(|&n| t.host(n).is_some() && f.in_any_partition(n, &ids))
                .collect();
            // A partition over the whole network restricts nothing: messages name the
            // network, as for a cluster without partitions.
            let whole = (0..t.grid.len()).filter(|&n| t.host(n).is_some()).count();
            if members.len() < whole {
                request.partition_nodes = Some(members);
                request.partition_label = Some(label);
            }
        }

        // Host lists: counted against the box limit before they are expanded, then expanded
        // one expression at a time (the names of one are dropped before the next is built).
        let each_name = |what: &str,
                         list: &str,
                         on_name: &mut dyn FnMut(&str) -> Result<(), Refusal>|
         -> Result<(), Refusal> {
            let bad = |e: topology::Error| Refusal::options(format!("{what}={}: {e}", quote(list)));
            let mut total: u64 = 0;
            for expr in list.split_whitespace() {
                total = total.saturating_add(hostlist::count(expr).map_err(bad)?);
                if total > u64::from(limits.max_nodes) {
                    return Err(Refusal::options(format!(
                        "{what} names more than {} nodes, the most a job's box may have here (limits.max_nodes of the site policy)",
                        limits.max_nodes
                    )));
                }
            }
            for expr in list.split_whitespace() {
                for name in hostlist::expand(expr).map_err(bad)? {
                    on_name(&name)?;
                }
            }
            Ok(())
        };
        if let Some(list) = &exclude {
            // Names of other clusters cannot be in the box anyway.
            each_name("--exclude", list, &mut |name| {
                request.excluded.extend(t.node(name));
                Ok(())
            })?;
        }
        if let Some(list) = &nodelist {
            each_name("--nodelist", list, &mut |name| {
                let node = t.node(name).ok_or_else(|| {
                    Refusal::options(format!(
                        "--nodelist names {}, not a node of the {} network the spares plugin places boxes on",
                        quote(name),
                        t.name
                    ))
                })?;
                if request.excluded.contains(&node) {
                    return Err(Refusal::options(format!(
                        "--nodelist and --exclude both name {name}; drop it from one of them"
                    )));
                }
                if let (Some(members), Some(label)) =
                    (&request.partition_nodes, &request.partition_label)
                {
                    if !members.contains(&node) {
                        return Err(Refusal::unavailable(format!(
                            "--nodelist names {name}, which is not in {label} (sinfo -N -n {name} shows its partitions); name nodes of the partition or submit to one of its partitions"
                        )));
                    }
                }
                request.must_contain.insert(node);
                Ok(())
            })?;
        }
        Ok(request)
    }

    /// Whether the request lets the box use `node` at all (busy or not).
    pub fn allows(&self, node: u32) -> bool {
        self.partition_nodes
            .as_ref()
            .map_or(true, |p| p.contains(&node))
            && !self.excluded.contains(&node)
    }

    fn is_plain(&self) -> bool {
        self.partition_nodes.is_none() && self.excluded.is_empty() && self.must_contain.is_empty()
    }

    /// Where boxes are looked for, for messages: `partition second` or `the X network`.
    fn scope(&self, topology: &Topology) -> String {
        self.partition_label
            .clone()
            .unwrap_or_else(|| format!("the {} network", topology.name))
    }

    /// Why no box of `extents` fits the request even with every node free: the message a user
    /// reads, naming the constraint that leaves no box.
    fn why_no_box(&self, topology: &Topology, extents: &[u32]) -> Result<String, Refusal> {
        let refuse = |e: topology::Error| Refusal::unavailable(e.to_string());
        let shape = format_shape(extents);
        let scope = self.scope(topology);
        let hosts = |set: &HashSet<u32>| {
            let mut nodes: Vec<u32> = set.iter().copied().collect();
            nodes.sort_unstable();
            let names: Vec<&str> = nodes.iter().filter_map(|&n| topology.host(n)).collect();
            quote(&hostlist::compress(&names))
        };
        let in_partition = |n: u32| {
            self.partition_nodes
                .as_ref()
                .map_or(true, |p| p.contains(&n))
        };
        if let Some(members) = &self.partition_nodes {
            if members.is_empty() {
                return Ok(format!(
                    "{scope} has no node of the {} network (as the free-node file lists partitions); submit to a partition of that network",
                    topology.name
                ));
            }
        }
        let must = &self.must_contain;
        if !must.is_empty() {
            let cells: u64 = extents.iter().map(|&e| u64::from(e)).product();
            if must.len() as u64 > cells {
                return Ok(format!(
                    "--nodelist names {} nodes, more than the job's {shape} box of {cells} holds; name at most {cells} nodes",
                    must.len()
                ));
            }
            let anywhere = placement::find_box_containing(topology, extents, |_| true, must)
                .map_err(refuse)?;
            if anywhere.is_none() {
                return Ok(format!(
                    "no {shape} box of the {} network holds all of --nodelist {}: they are too far apart; name nodes that lie in one {shape} box",
                    topology.name,
                    hosts(must)
                ));
            }
            let partition = placement::find_box_containing(topology, extents, in_partition, must)
                .map_err(refuse)?;
            if partition.is_none() {
                return Ok(format!(
                    "no {shape} box in {scope} holds all of --nodelist {}; name nodes that lie in one {shape} box of the partition",
                    hosts(must)
                ));
            }
            return Ok(format!(
                "every {shape} box in {scope} that holds --nodelist {} has --exclude'd nodes ({}); exclude fewer nodes or name others",
                hosts(must),
                hosts(&self.excluded)
            ));
        }
        if placement::find_box(topology, extents, in_partition)
            .map_err(refuse)?
            .is_none()
        {
            return Ok(match &self.partition_label {
                None => format!(
                    "the {} network has no complete {shape} box (holes in the topology)",
                    topology.name
                ),
                Some(_) => format!(
                    "{scope} has no complete {shape} box of the {} network; submit to a larger partition or ask for fewer nodes",
                    topology.name
                ),
            });
        }
        Ok(format!(
            "every {shape} box in {scope} has --exclude'd nodes ({}); exclude fewer nodes",
            hosts(&self.excluded)
        ))
    }
}

/// A placed box.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub origin: Vec<u32>,
    /// Host names of the box, in box order.
    pub hosts: Vec<String>,
    /// Compressed hostlist of the box (for `req_nodes`).
    pub hostlist: String,
    /// Whether the box holds nodes that are not free now (the job waits for them).
    pub waits: bool,
}

/// Places the box of `plan` where `request` allows: the first one whose nodes are all free
/// and not pinned; if there is none, `wait` pins the first box the request allows (the job
/// waits for its nodes), `reject` refuses the job. A request no box can meet even on an idle
/// network is refused, naming why.
pub fn place(
    policy: &Policy,
    plan: &Plan,
    free: Option<&HashSet<u32>>,
    pinned: &HashSet<u32>,
    request: &NodeRequest,
) -> Result<Placement, Refusal> {
    let t = &policy.topology;
    let usable =
        |n: u32| request.allows(n) && free.map_or(true, |f| f.contains(&n)) && !pinned.contains(&n);
    let refuse = |e: topology::Error| Refusal::unavailable(e.to_string());
    let must = &request.must_contain;
    let (origin, waits) = match placement::find_box_containing(t, &plan.box_extents, usable, must)
        .map_err(refuse)?
    {
        Some(o) => (o, false),
        None => {
            let possible =
                placement::find_box_containing(t, &plan.box_extents, |n| request.allows(n), must)
                    .map_err(refuse)?;
            let Some(possible) = possible else {
                return Err(Refusal::unavailable(
                    request.why_no_box(t, &plan.box_extents)?,
                ));
            };
            match policy.on_no_placement {
                OnNoPlacement::Reject => {
                    let busy = (0..t.grid.len())
                        .filter(|&n| t.host(n).is_some() && request.allows(n) && !usable(n))
                        .count();
                    let scope = if request.is_plain() {
                        format!("on the {} network", t.name)
                    } else {
                        format!("in {}", request.scope(t))
                    };
                    let holding = if must.is_empty() {
                        String::new()
                    } else {
                        " holding --nodelist".to_string()
                    };
                    return Err(Refusal(
                        format!(
                            "no free {} box{holding} {scope} ({busy} nodes busy or down); submit later or ask for fewer nodes",
                            format_shape(&plan.box_extents),
                        ),
                        RefusalKind::Busy,
                    ));
                }
                OnNoPlacement::Wait => (possible, true),
            }
        }
    };
    let hosts = t
        .box_hosts(&origin, &plan.box_extents)
        .ok_or_else(|| Refusal::unavailable("the box has a cell without a node".into()))?;
    Ok(Placement {
        hostlist: hostlist::compress(&hosts),
        hosts,
        origin,
        waits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{policy_dir, test_policy};
    use topology::SpareShape;

    fn plan(p: &Policy, spares: &str, shape: &[u32]) -> Plan {
        let s = SpareShape::parse(spares).unwrap();
        Plan::for_compute(shape, Some(&s), &p.topology.unit, p.topology.grid.extents()).unwrap()
    }

    #[test]
    fn free_node_files_are_read() {
        let p = test_policy("free", "");
        let dir = policy_dir("free", "");
        let f = dir.path().join("free");
        assert_eq!(
            read_free_nodes(&f, &p.topology, p.limits.max_file_bytes).unwrap(),
            None
        );
        std::fs::write(&f, "node[01-03]\n# comment\nnode05 other7 # trailing\n").unwrap();
        let free = read_free_nodes(&f, &p.topology, p.limits.max_file_bytes)
            .unwrap()
            .unwrap();
        let mut n: Vec<u32> = free.nodes.into_iter().collect();
        n.sort();
        assert_eq!(n, vec![0, 1, 2, 4]);
        std::fs::write(&f, "node[01-\n").unwrap();
        let e = read_free_nodes(&f, &p.topology, p.limits.max_file_bytes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 1"), "{e}");
        // A FIFO (or a device) at the path must not block slurmctld; a file over the
        // policy's size limit is refused.
        let fifo = dir.path().join("fifo");
        let _ = std::fs::remove_file(&fifo);
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read_free_nodes(&fifo, &p.topology, p.limits.max_file_bytes)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::write(&f, "node01\n".repeat(10)).unwrap();
        let e = read_free_nodes(&f, &p.topology, 16)
            .unwrap_err()
            .to_string();
        assert!(e.contains("larger than the limit of 16 bytes"), "{e}");
    }

    fn sorted(set: &HashSet<u32>) -> Vec<u32> {
        let mut v: Vec<u32> = set.iter().copied().collect();
        v.sort();
        v
    }

    fn read_text(name: &str, text: &str) -> Result<FreeNodes, FreeNodeFileError> {
        let p = test_policy(name, "");
        let dir = policy_dir(name, "");
        let f = dir.path().join("free");
        std::fs::write(&f, text).unwrap();
        read_free_nodes(&f, &p.topology, p.limits.max_file_bytes).map(Option::unwrap)
    }

    #[test]
    fn version_2_files_give_states_and_partitions() {
        let free = read_text(
            "free-v2",
            "# written by spares-free-nodes\n\
             node[01-04] state=free partitions=batch*,long\n\
             node05 state=busy partitions=batch* extra=1\n\
             node[06-07] state=unusable partitions=second\n\
             node08 state=free partitions=second\n\
             node08 state=busy partitions=batch*\n\
             node09 node10 state=free\n\
             other[1-99] state=free partitions=elsewhere\n",
        )
        .unwrap();
        assert_eq!(sorted(&free.nodes), [0, 1, 2, 3, 8, 9]);
        // node08 is free in one partition and busy in the other: busy.
        assert_eq!(sorted(&free.busy), [4, 7]);
        assert_eq!(sorted(&free.unusable), [5, 6]);
        assert_eq!(free.default_partition.as_deref(), Some("batch"));
        assert_eq!(free.partitions_of(0), Some(vec!["batch", "long"]));
        assert_eq!(free.partitions_of(7), Some(vec!["second", "batch"]));
        assert_eq!(free.partitions_of(8), None);
        assert!(free.in_partitions(0, &["long"]));
        assert!(!free.in_partitions(5, &["batch", "long"]));
        // Unknown partitions: the node counts for every partition.
        assert!(free.in_partitions(9, &["anything"]));
        assert!(free.knows_partition("elsewhere"));
        assert!(!free.knows_partition("debug"));
    }

    #[test]
    fn version_1_files_list_free_nodes_of_every_partition() {
        let free = read_text("free-v1", "node[01-03] node05\n\nnode07 # idle\n").unwrap();
        assert_eq!(sorted(&free.nodes), [0, 1, 2, 4, 6]);
        assert!(free.busy.is_empty() && free.unusable.is_empty());
        assert_eq!(free.default_partition, None);
        assert!(free.partition_names.is_empty());
        assert!(free.in_partitions(0, &["any"]));
    }

    #[test]
    fn malformed_version_2_lines_are_refused_with_their_line() {
        for (text, why) in [
            (
                "node01\nstate=free node02\n",
                "line 2: 'state=free' where a hostlist must come first",
            ),
            (
                "node01 state=idle\n",
                "line 1: state=idle is not one of free, busy, unusable",
            ),
            ("node01 state=free state=busy\n", "state= given twice"),
            (
                "node01 partitions=a,,b\n",
                "partitions=a,,b: '' is not a partition name",
            ),
            ("node01 partitions=a**\n", "'a**' is not a partition name"),
            (
                "node01 partitions=a partitions=b\n",
                "partitions= given twice",
            ),
            (
                "node01 partitions=a*\nnode02 partitions=b*\n",
                "line 2: default partition b* after a*",
            ),
            ("node[01- state=free\n", "line 1: "),
        ] {
            let e = read_text("free-bad", text).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
        let long = format!(
            "node01 partitions={}\n",
            "p".repeat(MAX_PARTITION_NAME_BYTES + 1)
        );
        let e = read_text("free-bad", &long).unwrap_err().to_string();
        assert!(e.contains("exceeds the limit of 256"), "{e}");
    }

    #[test]
    fn free_node_files_over_their_budgets_are_refused_before_expanding() {
        // Each line alone is within the hostlist parser's budget; together they would make
        // slurmctld build two million names.
        let e = read_text("free-hosts", "x[0000000-0999999]\nx[1000000-1999999]\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the count of host names 2000000 exceeds the limit of 1048576"),
            "{e}"
        );
        let many: String = (0..=MAX_FILE_PARTITIONS)
            .map(|i| format!("node01 partitions=p{i}\n"))
            .collect();
        let e = read_text("free-parts", &many).unwrap_err().to_string();
        assert!(
            e.contains("the count of partitions 1025 exceeds the limit of 1024"),
            "{e}"
        );
    }

    #[test]
    fn boxes_go_on_free_unpinned_nodes() {
        let p = test_policy("place", "on_no_placement: reject\n");
        let pl = plan(&p, "3D(1,1)", &[1, 1, 1]); // a 2x1x1 box
        let free: HashSet<u32> = [1, 2, 3, 5, 6].into_iter().collect();
        let a = place(
            &p,
            &pl,
            Some(&free),
            &HashSet::new(),
            &NodeRequest::default(),
        )
        .unwrap();
        assert_eq!(a.hosts, ["node02", "node03"]);
        assert_eq!(a.hostlist, "node[02-03]");
        assert!(!a.waits);
        let pinned: HashSet<u32> = [1, 2].into_iter().collect();
        let b = place(&p, &pl, Some(&free), &pinned, &NodeRequest::default()).unwrap();
        assert_eq!(b.hosts, ["node06", "node07"]);
        // No file: anything goes.
        let c = place(&p, &pl, None, &HashSet::new(), &NodeRequest::default()).unwrap();
        assert_eq!(c.hosts, ["node01", "node02"]);
    }

    #[test]
    fn no_free_box_waits_or_rejects_by_policy() {
        let p = test_policy("reject", "on_no_placement: reject\n");
        let whole = plan(&p, "3D(2,1)", &[3, 3, 2]);
        let free: HashSet<u32> = (0..30).collect();
        let e = place(
            &p,
            &whole,
            Some(&free),
            &HashSet::new(),
            &NodeRequest::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.0,
            "no free 4x4x2 box on the torus-4x4x2 network (2 nodes busy or down); submit later or ask for fewer nodes"
        );
        let p = test_policy("wait", "on_no_placement: wait\n");
        let w = place(
            &p,
            &whole,
            Some(&free),
            &HashSet::new(),
            &NodeRequest::default(),
        )
        .unwrap();
        assert!(w.waits);
        assert_eq!(w.hostlist, "node[01-32]");
    }

    #[test]
    fn pins_expire_once_a_later_file_shows_them() {
        let mut pins = Pins::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        pins.add(t0, vec![1, 2]);
        assert_eq!(pins.busy(None).len(), 2);
        assert_eq!(pins.busy(Some(t0 + Duration::from_secs(1))).len(), 2);
        assert!(pins.busy(Some(t0 + Duration::from_secs(3))).is_empty());
    }
}
