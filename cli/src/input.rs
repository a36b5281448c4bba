//! Reading what the user names: topology files, networks, plans and map documents.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use topology::grid::{format_shape, parse_coord, parse_shape};
use topology::policy::AutoChoice;
use topology::shape::shape_for_nodes;
use topology::{
    AutoPolicy, Grid, MapDocument, MapMeta, Method, Pattern, Plan, SpareMap, SpareShape, Topology,
};

use crate::{NetworkArgs, PlanArgs};

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

/// A planned job: its topology, plan, map and metadata.
pub struct Planned {
    pub topology: Topology,
    pub plan: Plan,
    pub auto: Option<AutoChoice>,
    pub map: SpareMap,
    pub meta: MapMeta,
}

/// Plans the job box the arguments describe and builds its failure-free map.
pub fn plan(args: &PlanArgs) -> Result<Planned> {
    let topology = network(&args.network)?;
    let net = topology.grid.extents().to_vec();
    let q = net.len();
    let method = Method::parse(&args.method, q)?;
    let pattern = match &args.pattern {
        Some(p) => Pattern::parse(p, q)?,
        None => Pattern::star(q),
    };
    let compute = match (&args.shape, args.nodes) {
        (Some(s), _) => Some(parse_shape(s)?),
        (None, Some(n)) => Some(nodes_shape(n, &args.spares, &topology)?),
        (None, None) => None,
    };
    let (plan, auto) = match args.spares.trim() {
        "auto" => {
            let compute = match &compute {
                Some(c) => c.clone(),
                None => bail!("--spares auto needs the job's size: give --shape or --nodes"),
            };
            let choice = AutoPolicy::seed_band().choose(&compute, &topology.unit, &net)?;
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
