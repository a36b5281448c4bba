//! Reading what the user names: topology files, networks, plans and map documents.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use topology::grid::{format_shape, parse_coord, parse_shape};
use topology::policy::AutoChoice;
use topology::shape::shape_for_nodes;
use topology::{
    AutoPolicy, Grid, MapDocument, MapMeta, Method, Pattern, Plan, SpareMap, SpareShape, Topology,
};

use serde::Serialize;
use topology::site_policy::{
    Decision, JobFacts, Policy, Spares, SparesRequest, DEFAULT_POLICY_PATH,
};

use crate::{NetworkArgs, PlanArgs, PolicyArgs};

/// Most bytes of a results file of `spares simulate` (its worst maps can be large).
pub const MAX_RESULTS_BYTES: u64 = 1 << 30;

/// Reads a topology file: a regular file (not a FIFO, device or directory)
/// of at most [`topology::limits::MAX_FILE_BYTES`], naming it in the error.
pub fn read(path: &Path) -> Result<String> {
    read_at_most(path, topology::limits::MAX_FILE_BYTES)
}

/// Reads a regular file of at most `max_bytes` as text, naming it in the error.
pub fn read_at_most(path: &Path, max_bytes: u64) -> Result<String> {
    Ok(topology::sitefile::read(path, max_bytes)?)
}

/// The network named by `--topology` or `--network`.
pub fn network(args: &NetworkArgs) -> Result<Topology> {
    match (&args.topology, &args.network) {
        (Some(path), _) => {
            let text = read(path)?;
            Ok(Topology::from_yaml(
                &text,
                &path.display().to_string(),
                args.torus.as_deref(),
            )?)
        }
        (None, Some(extents)) => {
            let extents = parse_shape(extents)?;
            let kinds: Vec<&str> = args.links.split(',').map(str::trim).collect();
            let wrap: Vec<bool> = kinds
                .iter()
                .map(|k| match *k {
                    "mesh" => Ok(false),
                    "ring" | "torus" => Ok(true),
                    other => Err(anyhow!("--links: '{other}' is neither mesh nor ring")),
                })
                .collect::<Result<_>>()?;
            let wrap = if wrap.len() == 1 {
                vec![wrap[0]; extents.len()]
            } else {
                wrap
            };
            Ok(Topology::unnamed(Grid::new(&extents, &wrap)?))
        }
        (None, None) => bail!("name the network: --topology FILE or --network AxBxC"),
    }
}

/// Where each choice of a plan came from, in words for people.
#[derive(Debug, Clone, Serialize)]
pub struct Sources {
    /// The site policy that answered, if any.
    pub policy: Option<String>,
    pub network: String,
    pub compute: String,
    pub spares: String,
    pub method: String,
}

/// A planned job: its topology, plan, map and metadata.
pub struct Planned {
    pub topology: Topology,
    pub plan: Plan,
    pub auto: Option<AutoChoice>,
    pub map: SpareMap,
    pub meta: MapMeta,
    pub sources: Sources,
}

/// The site policy that answers for `spares plan` and `spares policy`: `--policy FILE`,
/// none with `--no-policy`, else `$SPARES_POLICY`, else the installed file when it exists.
pub fn site_policy(args: &PolicyArgs) -> Result<Option<Policy>> {
    if args.no_policy {
        return Ok(None);
    }
    let path = match &args.policy {
        Some(p) => p.clone(),
        None => match std::env::var_os("SPARES_POLICY").filter(|v| !v.is_empty()) {
            Some(p) => std::path::PathBuf::from(p),
            None => {
                let installed = Path::new(DEFAULT_POLICY_PATH);
                if !installed.exists() {
                    return Ok(None);
                }
                installed.to_path_buf()
            }
        },
    };
    Ok(Some(Policy::load(&path)?))
}

/// The site policy that answers for `spares plan`: an explicit `--policy` always; the
/// installed one (or `$SPARES_POLICY`) only for a job (`--shape` or `--nodes`) on the site's
/// network, not when the command line names another network or asks for the whole network
/// minus its spares (the seeds' case, which no site policy decides).
pub fn site_policy_for_plan(plan: &PlanArgs, args: &PolicyArgs) -> Result<Option<Policy>> {
    let names_network = plan.network.topology.is_some() || plan.network.network.is_some();
    let is_job = plan.shape.is_some() || plan.nodes.is_some();
    if args.policy.is_none() && (names_network || !is_job) {
        return Ok(None);
    }
    site_policy(args)
}

/// Plans the job box the arguments describe with the model's defaults (`--spares auto` by
/// the seeds' 2%-5% band, method hybrid) and builds its failure-free map.
pub fn plan(args: &PlanArgs) -> Result<Planned> {
    let topology = network(&args.network)?;
    let net = topology.grid.extents().to_vec();
    let q = net.len();
    let method = Method::parse(args.method(), q)?;
    let compute = match (&args.shape, args.nodes) {
        (Some(s), _) => Some(parse_shape(s)?),
        (None, Some(n)) => Some(nodes_shape(n, args.spares(), &topology)?),
        (None, None) => None,
    };
    let mut sources = Sources {
        policy: None,
        network: network_source(&args.network),
        compute: compute_source(args),
        spares: match &args.spares {
            Some(_) => "--spares".into(),
            None => "the default without a site policy (auto)".into(),
        },
        method: match &args.method {
            Some(_) => "--method".into(),
            None => "the default (hybrid)".into(),
        },
    };
    let (plan, auto) = match args.spares().trim() {
        "auto" => {
            let compute = match &compute {
                Some(c) => c.clone(),
                None => bail!("--spares auto needs the job's size: give --shape or --nodes"),
            };
            let choice = AutoPolicy::seed_band().choose(&compute, &topology.unit, &net)?;
            sources.spares += &format!("; the seeds' 2%-5% band: {}", choice.reason);
            (choice.plan.clone(), Some(choice))
        }
        spec => {
            let shape = if spec == "none" {
                None
            } else {
                Some(SpareShape::parse(spec)?)
            };
            let plan = match &compute {
                Some(c) => Plan::for_compute(c, shape.as_ref(), &topology.unit, &net)?,
                None => Plan::for_box(&net, shape.as_ref())?,
            };
            (plan, None)
        }
    };
    finish(args, topology, plan, auto, method, sources)
}

/// Plans the job as the site's policy would decide it at submission: its network (unless the
/// command line names one), its default spares and method, its `auto` table and limits; a
/// job the site would refuse is refused with the site's reason.
pub fn plan_for_site(args: &PlanArgs, policy: &Policy) -> Result<Planned> {
    let mut policy = policy.clone();
    let from_command_line = args.network.topology.is_some() || args.network.network.is_some();
    let network = if from_command_line {
        policy.topology = network(&args.network)?;
        network_source(&args.network)
    } else {
        format!("the policy's topology ({})", policy.topology_path.display())
    };
    let q = policy.topology.grid.dims();
    let req = SparesRequest {
        spares: args
            .spares
            .as_deref()
            .map(Spares::parse)
            .transpose()
            .map_err(|e| anyhow!("--spares: {e}"))?,
        job_shape: args.shape.as_deref().map(parse_shape).transpose()?,
        spare_method: args
            .method
            .as_deref()
            .map(|m| Method::parse(m, q))
            .transpose()?,
    };
    let nodes = args
        .nodes
        .map(|n| {
            u32::try_from(n).map_err(|_| anyhow!("--nodes {n}: more nodes than Slurm can count"))
        })
        .transpose()?;
    if let Some(h) = args.time.filter(|h| !(*h > 0.0 && h.is_finite())) {
        bail!("--time {h}: give the job's time limit in hours, above 0");
    }
    let facts = JobFacts {
        nodes,
        time_limit_minutes: args
            .time
            .map(|h| (h * 60.0).round().min(f64::from(u32::MAX - 2)) as u32),
        admitted: false,
    };
    let decision = policy
        .decide_job(&req, &facts)
        .map_err(|r| anyhow!("the site's policy refuses this job: {}", r.0))?;
    let (plan, method, auto_reason) = match decision {
        Decision::Spares {
            plan,
            method,
            auto_reason,
        } => (plan, method, auto_reason),
        Decision::Untouched => match &req.spares {
            Some(s) => bail!("--spares {s}: the job has no spares, nothing to plan"),
            None => bail!(
                "the site's policy gives this job no spares (its default_spares is {}): give --spares auto or a shape",
                policy.default_spares
            ),
        },
    };
    let mut spares = match &args.spares {
        Some(_) => "--spares".to_string(),
        None => format!("the policy's default_spares ({})", policy.default_spares),
    };
    if let Some(reason) = auto_reason {
        if policy.auto.table.is_empty() {
            spares += &format!("; the policy's max_fraction: {reason}");
        } else {
            spares += &format!("; the policy's auto table: {reason}");
        }
    }
    let sources = Sources {
        policy: Some(policy.path.display().to_string()),
        network,
        compute: compute_source(args),
        spares,
        method: match &args.method {
            Some(_) => "--method".into(),
            None => format!("the policy's default_method ({})", policy.default_method),
        },
    };
    let topology = policy.topology.clone();
    finish(args, topology, plan, None, method, sources)
}

fn network_source(args: &NetworkArgs) -> String {
    match &args.topology {
        Some(p) => format!("--topology {}", p.display()),
        None => "--network".into(),
    }
}

fn compute_source(args: &PlanArgs) -> String {
    match (&args.shape, args.nodes) {
        (Some(_), _) => "--shape".into(),
        (None, Some(n)) => {
            format!(
                "--nodes {n}: an exact factorisation, the smallest box, then the most cube-like"
            )
        }
        (None, None) => "the whole network minus the spares".into(),
    }
}

/// The map of a plan at the arguments' origin, with the arguments' pattern.
fn finish(
    args: &PlanArgs,
    topology: Topology,
    plan: Plan,
    auto: Option<AutoChoice>,
    method: Method,
    sources: Sources,
) -> Result<Planned> {
    let net = topology.grid.extents().to_vec();
    let q = net.len();
    let pattern = match &args.pattern {
        Some(p) => Pattern::parse(p, q)?,
        None => Pattern::star(q),
    };
    let origin = match &args.origin {
        Some(o) => parse_coord(o)
            .filter(|c| c.len() == q)
            .ok_or_else(|| anyhow!("--origin '{o}': give {q} coordinates such as 0,0,0"))?,
        None => vec![0; q],
    };
    if origin.iter().zip(&net).any(|(o, n)| o >= n) {
        bail!(
            "--origin {:?} is outside the {} network",
            origin,
            format_shape(&net)
        );
    }
    // The same function builds the map in the Slurm plugins, so both agree.
    let (map, meta) =
        topology::placement::job_map(&topology, &plan, &origin, method, pattern, args.periodic)?;
    Ok(Planned {
        topology,
        plan,
        auto,
        map,
        meta,
        sources,
    })
}

fn nodes_shape(n: u64, spares: &str, topology: &Topology) -> Result<Vec<u32>> {
    let net = topology.grid.extents();
    let shape = match spares.trim() {
        "auto" | "none" => None,
        s => Some(SpareShape::parse(s)?),
    };
    Ok(shape_for_nodes(n, shape.as_ref(), &topology.unit, net)?.compute)
}

/// Reads a map document.
pub fn map(path: &Path) -> Result<(SpareMap, MapMeta)> {
    let text = read_at_most(path, topology::limits::MAX_MAP_BYTES)?;
    let doc = MapDocument::from_json(&text).with_context(|| path.display().to_string())?;
    doc.into_map().with_context(|| path.display().to_string())
}

/// Finds a node of the box by host name or coordinates (the model's lookup, shared with
/// sparesd). Coordinates are the box's (`3,0` or `box:3,0`) unless written `net:6,0`, the
/// network's.
pub fn node(map: &SpareMap, meta: &MapMeta, name: &str) -> Result<u32> {
    if let Some(net) = name.strip_prefix("net:") {
        let c = parse_coord(net)
            .ok_or_else(|| anyhow!("'{name}': write network coordinates as net:x,y,z"))?;
        return Ok(map.grid().index(&map.box_coord_of(&meta.origin, &c)?));
    }
    let name = name.strip_prefix("box:").unwrap_or(name);
    Ok(meta.node_by_name(map.grid(), name)?)
}

/// The line that says which frame printed coordinates are in, when the box does not start
/// at the network's origin (elsewhere both frames give the same numbers).
pub fn frame_note(meta: &MapMeta) -> Option<String> {
    meta.origin.iter().any(|&o| o != 0).then(|| {
        format!(
            "coordinates are the box's (box:x,y,z); the box starts at network node {}: name network nodes as net:x,y,z",
            topology::grid::format_coord(&meta.origin)
        )
    })
}

/// A node's name for people: its host name when known, else its coordinates.
pub fn label(map: &SpareMap, meta: &MapMeta, node: u32) -> String {
    meta.node_name(map.grid(), node)
}
