//! Topology files: this project's YAML for 1- to 6-dimensional networks, and Slurm's own
//! `topology.yaml` with a `torus3d` section (Slurm 26.05), so that a site describes its torus
//! once.
//!
//! The project's format:
//!
//! ```yaml
//! name: k-12x12x12
//! extents: [12, 12, 12]
//! links: ring            # or one per dimension: [ring, ring, mesh]
//! nodes: k[0000-1727]    # hostlist, dimension 0 fastest; or `regions` (below)
//! unit: {multiple: 12}   # or {multiple: [4,4,2]}, {power_of_two: true}, {block: [4,2,8]},
//!                        #    {shapes: [2x2x2, 4x4x2]}
//! ```
//!
//! `regions: [{anchor: [0,0,0], extents: [4,2,2], nodes: rack1-n[01-16]}, ...]` fills boxes of
//! the network instead of `nodes`; cells no region covers are holes (no node there).
//!
//! `box_links: network` (the default) routes a job's messages on the network: where a box
//! covers only part of a ring, the shorter way round may leave the box. `box_links: torus` or
//! `mesh` declares partitions that the hardware isolates (Blue Gene/Q style): every job box
//! is its own torus, or its own mesh, whatever part of the network it is cut from.
//!
//! Slurm's format is a list of topologies; the `torus3d` one holds `toruses`, each with `name`,
//! `dims: {x, y, z}`, `nodes` (x fastest) or `regions` (`anchor`, `dims`, `nodes`), and
//! `placements` (`dims`, `anchor_seed`, `anchor_spacing`). A torus3d network wraps in all three
//! dimensions and its placements become the allocation unit.

use std::collections::HashMap;

use serde::Deserialize;

use crate::grid::{format_shape, parse_shape, Grid, MAX_DIMS};
use crate::hostlist;
use crate::shape::AllocationUnit;
use crate::Error;

/// A network with its node names and allocation unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// Name of the network (or of the Slurm torus).
    pub name: String,
    /// The network's geometry.
    pub grid: Grid,
    /// The box sizes a site hands out.
    pub unit: AllocationUnit,
    /// Where the description came from.
    pub source: String,
    /// How a job box's links are wired.
    pub box_links: BoxLinks,
    /// The placements of a Slurm `topology.yaml` torus3d torus, if the file is one: the boxes
    /// Slurm 26.05 itself hands out (empty for this project's format).
    pub slurm_placements: Vec<Vec<u32>>,
    /// Per placement (same order), per axis: the coordinates where Slurm lets a box of it
    /// start (its anchors: `anchor_seed` + k x `anchor_spacing` round the torus; the spacing
    /// defaults to the placement's dims, the seed to 0), sorted.
    pub slurm_anchors: Vec<[Vec<u32>; 3]>,
    hosts: Vec<Option<String>>,
    index: HashMap<String, u32>,
}

/// One item or a list of items, as Slurm accepts wherever a list is expected.
#[derive(Clone)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

// By hand rather than `untagged`, so that an error inside an item keeps its own message.
impl<'de, T: serde::de::DeserializeOwned> Deserialize<'de> for OneOrMany<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let v = serde_yaml::Value::deserialize(d)?;
        if v.is_sequence() {
            serde_yaml::from_value(v)
                .map(OneOrMany::Many)
                .map_err(D::Error::custom)
        } else {
            serde_yaml::from_value(v)
                .map(OneOrMany::One)
                .map_err(D::Error::custom)
        }
    }
}

impl<T: Clone> OneOrMany<T> {
    fn into_vec(self, n: usize) -> Vec<T> {
        match self {
            OneOrMany::One(x) => vec![x; n.max(1)],
            OneOrMany::Many(v) => v,
        }
    }
}

/// How the links of a job's box are wired (`box_links:` of a topology file).
#[derive(Debug, Deserialize, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum BoxLinks {
    /// The network's own links: where a box covers only part of a ring, messages take the
    /// shorter way round, which may leave the box.
    #[default]
    Network,
    /// The hardware isolates each box and wraps it: every box dimension is a ring of its own.
    Torus,
    /// The hardware isolates each box without wrapping it: every box dimension is a mesh.
    Mesh,
}

impl BoxLinks {
    /// Ring flags of a box of `extents` placed in `net`: a dimension is a ring where the box
    /// covers a whole ring of the network, or where isolated boxes are tori.
    pub fn box_wrap(self, net: &Grid, extents: &[u32]) -> Vec<bool> {
        (0..extents.len())
            .map(|d| match self {
                BoxLinks::Network => net.wraps(d) && extents[d] == net.extent(d),
                BoxLinks::Torus => true,
                BoxLinks::Mesh => false,
            })
            .collect()
    }

    /// Length of the ring each box dimension's messages are routed on (0: a mesh); see
    /// [`crate::SpareMap::set_rings`].
    pub fn rings(self, net: &Grid, extents: &[u32]) -> Vec<u32> {
        (0..extents.len())
            .map(|d| match self {
                BoxLinks::Network if net.wraps(d) => net.extent(d),
                BoxLinks::Torus => extents[d],
                BoxLinks::Network | BoxLinks::Mesh => 0,
            })
            .collect()
    }
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum LinkKind {
    Mesh,
    Ring,
    Torus,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnFile {
    #[serde(default)]
    version: Option<u32>,
    #[serde(default)]
    name: Option<String>,
    extents: Vec<u32>,
    #[serde(default)]
    links: Option<OneOrMany<LinkKind>>,
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    regions: Option<Vec<OwnRegion>>,
    #[serde(default)]
    unit: Option<UnitSpec>,
    #[serde(default)]
    box_links: BoxLinks,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OwnRegion {
    #[serde(default)]
    anchor: Option<Vec<u32>>,
    extents: Vec<u32>,
    nodes: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UnitSpec {
    #[serde(default)]
    multiple: Option<OneOrMany<u32>>,
    #[serde(default)]
    power_of_two: Option<bool>,
    #[serde(default)]
    block: Option<Vec<u32>>,
    #[serde(default)]
    shapes: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SlurmEntry {
    topology: String,
    #[serde(default)]
    cluster_default: bool,
    #[serde(default)]
    torus3d: Option<Torus3d>,
    #[serde(default)]
    block: Option<serde_yaml::Value>,
    #[serde(default)]
    tree: Option<serde_yaml::Value>,
    #[serde(default)]
    flat: Option<serde_yaml::Value>,
    #[serde(default)]
    ring: Option<serde_yaml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Torus3d {
    toruses: OneOrMany<Torus>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Torus {
    name: String,
    dims: Xyz,
    #[serde(default)]
    nodes: Option<String>,
    #[serde(default)]
    regions: Option<OneOrMany<SlurmRegion>>,
    #[serde(default)]
    placements: Option<OneOrMany<Placement>>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(deny_unknown_fields)]
struct Xyz {
    x: u32,
    y: u32,
    z: u32,
}

impl Xyz {
    fn v(self) -> Vec<u32> {
        vec![self.x, self.y, self.z]
    }
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct SlurmRegion {
    #[serde(default)]
    anchor: Option<Xyz>,
    dims: Xyz,
    nodes: String,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Placement {
    dims: Xyz,
    #[serde(default)]
    anchor_seed: Option<Xyz>,
    #[serde(default)]
    anchor_spacing: Option<Xyz>,
}

/// The anchor coordinates of one axis of `size` nodes, sorted: from `seed` in steps of
/// `spacing` round the ring until back at `seed` (at most `size` of them). A box that covers
/// the ring starts at 0 whatever the seed: every start names the same nodes.
fn axis_anchors(size: u32, box_extent: u32, seed: u32, spacing: u32) -> Vec<u32> {
    if box_extent >= size {
        return vec![0];
    }
    let mut at = vec![false; size as usize];
    let mut pos = seed % size;
    while !at[pos as usize] {
        at[pos as usize] = true;
        pos = (pos + spacing) % size;
    }
    (0..size).filter(|&p| at[p as usize]).collect()
}

/// A box of the network filled with names, dimension 0 fastest.
struct Region {
    field: String,
    anchor: Vec<u32>,
    extents: Vec<u32>,
    nodes: String,
}

/// An error in the file `source`, at `field`.
fn file_error(source: &str, field: &str, why: String) -> Error {
    Error::TopologyFile {
        file: source.to_string(),
        field: field.to_string(),
        why,
    }
}

/// An allocation unit written as in a topology file's `unit:` (`{multiple: 12}`,
/// `{multiple: [4, 4, 2]}`, `{power_of_two: true}`, `{block: [4, 2, 8]}`,
/// `{shapes: [2x2x2, 4x4x2]}`) for a `q`-dimensional network; other files (a site policy)
/// take the same syntax.
pub fn parse_unit(value: &serde_yaml::Value, q: usize) -> Result<AllocationUnit, String> {
    let spec: UnitSpec = serde_yaml::from_value(value.clone()).map_err(|e| e.to_string())?;
    Topology::unit(spec, q)
}

impl Topology {
    /// Parses a topology file's text. `source` names it in errors; `torus` picks one torus of a
    /// Slurm `topology.yaml` that has several (by torus name or `topology/torus`).
    pub fn from_yaml(text: &str, source: &str, torus: Option<&str>) -> Result<Topology, Error> {
        let err = |field: &str, why: String| file_error(source, field, why);
        let yaml_err = |e: serde_yaml::Error| {
            let field = e
                .location()
                .map(|l| format!("line {} column {}", l.line(), l.column()))
                .unwrap_or_else(|| "document".into());
            let msg = e.to_string();
            let why = msg.split(" at line ").next().unwrap_or(&msg).to_string();
            err(&field, why)
        };
        // The YAML parser takes time quadratic in the nesting depth (100k `[` took 12 s):
        // refuse deep documents before parsing.
        crate::Limits::default().check_depth(source, text)?;
        let value: serde_yaml::Value = serde_yaml::from_str(text).map_err(yaml_err)?;
        match value {
            serde_yaml::Value::Sequence(_) => {
                let entries: Vec<SlurmEntry> = serde_yaml::from_str(text).map_err(yaml_err)?;
                Self::from_slurm(entries, source, torus)
            }
            serde_yaml::Value::Mapping(_) => {
                if torus.is_some() {
                    return Err(err(
                        "document",
                        "a torus name was given but this is not a Slurm topology.yaml".into(),
                    ));
                }
                let f: OwnFile = serde_yaml::from_str(text).map_err(yaml_err)?;
                Self::from_own(f, source)
            }
            _ => Err(err(
                "document",
                "expected a topology (a mapping with `extents`) or Slurm's topology.yaml (a list)"
                    .into(),
            )),
        }
    }

    fn from_own(f: OwnFile, source: &str) -> Result<Topology, Error> {
        let err = |field: &str, why: String| file_error(source, field, why);
        if let Some(v) = f.version {
            if v != 1 {
                return Err(err(
                    "version",
                    format!("version {v} is not supported; use 1"),
                ));
            }
        }
        let q = f.extents.len();
        if q == 0 || q > MAX_DIMS {
            return Err(err("extents", Error::Dimensions(q).to_string()));
        }
        let links = f
            .links
            .map(|l| l.into_vec(q))
            .unwrap_or_else(|| vec![LinkKind::Mesh; q]);
        if links.len() != q {
            return Err(err(
                "links",
                format!(
                    "{} entries for {q} extents: give one mesh/ring per dimension",
                    links.len()
                ),
            ));
        }
        let wrap: Vec<bool> = links.iter().map(|&l| l != LinkKind::Mesh).collect();
        if let Some(d) = f.extents.iter().position(|&e| e == 0) {
            return Err(err(
                &format!("extents[{d}]"),
                "extent 0: every extent must be at least 1".into(),
            ));
        }
        let grid = Grid::new(&f.extents, &wrap).map_err(|e| err("extents", e.to_string()))?;
        let regions =
            match (f.nodes, f.regions) {
                (Some(_), Some(_)) => {
                    return Err(err(
                        "nodes",
                        "give either `nodes` or `regions`, not both".into(),
                    ))
                }
                (Some(nodes), None) => vec![Region {
                    field: "nodes".into(),
                    anchor: vec![0; q],
                    extents: f.extents.clone(),
                    nodes,
                }],
                (None, Some(rs)) => rs
                    .into_iter()
                    .enumerate()
                    .map(|(i, r)| Region {
                        field: format!("regions[{i}]"),
                        anchor: r.anchor.unwrap_or_else(|| vec![0; q]),
                        extents: r.extents,
                        nodes: r.nodes,
                    })
                    .collect(),
                (None, None) => return Err(err(
                    "nodes",
                    "missing: name the nodes with a hostlist (dimension 0 fastest) or `regions`"
                        .into(),
                )),
            };
        let unit = match f.unit {
            None => AllocationUnit::Node,
            Some(u) => Self::unit(u, q).map_err(|why| err("unit", why))?,
        };
        unit.check(&f.extents)
            .map_err(|e| err("unit", e.to_string()))?;
        let name = f.name.unwrap_or_else(|| format_shape(&f.extents));
        let mut t = Self::build(name, grid, &regions, unit, source)?;
        t.box_links = f.box_links;
        Ok(t)
    }

    fn unit(u: UnitSpec, q: usize) -> Result<AllocationUnit, String> {
        let given = [
            u.multiple.is_some(),
            u.power_of_two.unwrap_or(false),
            u.block.is_some(),
            u.shapes.is_some(),
        ];
        if given.iter().filter(|&&g| g).count() > 1 {
            return Err("give one of multiple, power_of_two, block or shapes".into());
        }
        Ok(if let Some(m) = u.multiple {
            AllocationUnit::Multiple(m.into_vec(q))
        } else if u.power_of_two == Some(true) {
            AllocationUnit::PowerOfTwo
        } else if let Some(b) = u.block {
            AllocationUnit::Block(b)
        } else if let Some(s) = u.shapes {
            AllocationUnit::Shapes(
                s.iter()
                    .map(|x| parse_shape(x).map_err(|e| e.to_string()))
                    .collect::<Result<_, _>>()?,
            )
        } else {
            AllocationUnit::Node
        })
    }

    fn from_slurm(
        entries: Vec<SlurmEntry>,
        source: &str,
        pick: Option<&str>,
    ) -> Result<Topology, Error> {
        let err = |field: &str, why: String| file_error(source, field, why);
        let mut found: Vec<(String, String, Torus)> = Vec::new();
        for (i, e) in entries.into_iter().enumerate() {
            let others = [
                e.block.is_some(),
                e.tree.is_some(),
                e.flat.is_some(),
                e.ring.is_some(),
            ];
            let _ = e.cluster_default;
            if let Some(t) = e.torus3d {
                if others.iter().any(|&o| o) {
                    return Err(err(
                        &format!("[{i}].torus3d"),
                        "torus3d is exclusive with block, tree, flat and ring".into(),
                    ));
                }
                for (j, torus) in t.toruses.into_vec(1).into_iter().enumerate() {
                    let field = format!("[{i}].torus3d.toruses[{j}]");
                    let full = format!("{}/{}", e.topology, torus.name);
                    found.push((field, full, torus));
                }
            }
        }
        let names: Vec<String> = found.iter().map(|(_, n, _)| n.clone()).collect();
        let (field, _, torus) = match pick {
            Some(p) => found
                .into_iter()
                .find(|(_, full, t)| t.name == p || full == p)
                .ok_or_else(|| {
                    err(
                        "torus3d",
                        format!("no torus named '{p}'; the file has: {}", names.join(", ")),
                    )
                })?,
            None if found.len() == 1 => found.pop().expect("one"),
            None if found.is_empty() => {
                return Err(err(
                    "document",
                    "this Slurm topology.yaml has no torus3d section".into(),
                ))
            }
            None => {
                return Err(err(
                    "torus3d",
                    format!(
                        "several toruses ({}): name the one to use",
                        names.join(", ")
                    ),
                ))
            }
        };
        if torus.name.is_empty() {
            return Err(err(&format!("{field}.name"), "a torus needs a name".into()));
        }
        let dims = torus.dims.v();
        if dims.contains(&0) {
            return Err(err(
                &format!("{field}.dims"),
                "every dimension must be at least 1".into(),
            ));
        }
        let grid = Grid::new(&dims, &[true; 3])
            .map_err(|e| err(&format!("{field}.dims"), e.to_string()))?;
        let regions = match (torus.nodes, torus.regions) {
            (Some(_), Some(_)) => {
                return Err(err(
                    &field,
                    "give either `nodes` or `regions`, not both".into(),
                ))
            }
            (Some(nodes), None) => vec![Region {
                field: format!("{field}.nodes"),
                anchor: vec![0; 3],
                extents: dims.clone(),
                nodes,
            }],
            (None, Some(rs)) => rs
                .into_vec(1)
                .into_iter()
                .enumerate()
                .map(|(i, r)| Region {
                    field: format!("{field}.regions[{i}]"),
                    anchor: r.anchor.map_or(vec![0; 3], Xyz::v),
                    extents: r.dims.v(),
                    nodes: r.nodes,
                })
                .collect(),
            (None, None) => {
                return Err(err(
                    &field,
                    "the torus names no nodes (`nodes` or `regions`)".into(),
                ))
            }
        };
        let mut shapes = Vec::new();
        let mut anchors = Vec::new();
        for (i, p) in torus
            .placements
            .map(|p| p.into_vec(1))
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            let d = p.dims.v();
            if d.contains(&0) || d.iter().zip(&dims).any(|(a, b)| a > b) {
                return Err(err(
                    &format!("{field}.placements[{i}].dims"),
                    format!(
                        "{} does not fit the {} torus",
                        format_shape(&d),
                        format_shape(&dims)
                    ),
                ));
            }
            let seed = p.anchor_seed.map_or(vec![0; 3], Xyz::v);
            // Slurm's defaults: spacing = the placement's dims.
            let spacing = p.anchor_spacing.map_or(d.clone(), Xyz::v);
            if let Some(a) =
                (0..3).find(|&a| seed[a] >= dims[a] || spacing[a] == 0 || spacing[a] > dims[a])
            {
                return Err(err(
                    &format!("{field}.placements[{i}]"),
                    format!(
                        "anchor_seed {} and anchor_spacing {} must lie within the {} torus, spacing at least 1 (axis {})",
                        format_shape(&seed),
                        format_shape(&spacing),
                        format_shape(&dims),
                        ["x", "y", "z"][a]
                    ),
                ));
            }
            anchors.push([0, 1, 2].map(|a| axis_anchors(dims[a], d[a], seed[a], spacing[a])));
            shapes.push(d);
        }
        let unit = if shapes.is_empty() {
            AllocationUnit::Node
        } else {
            AllocationUnit::Shapes(shapes.clone())
        };
        let mut t = Self::build(torus.name, grid, &regions, unit, source)?;
        t.slurm_placements = shapes;
        t.slurm_anchors = anchors;
        Ok(t)
    }

    fn build(
        name: String,
        grid: Grid,
        regions: &[Region],
        unit: AllocationUnit,
        source: &str,
    ) -> Result<Topology, Error> {
        let err = |field: &str, why: String| file_error(source, field, why);
        let q = grid.dims();
        let mut hosts: Vec<Option<String>> = vec![None; grid.len() as usize];
        let mut index: HashMap<String, u32> = HashMap::new();
        for r in regions {
            if r.anchor.len() != q || r.extents.len() != q {
                return Err(err(
                    &r.field,
                    format!("anchor and extents need {q} entries each"),
                ));
            }
            // In u64: an extent of 4294967295 wrapped (or panicked) in u32.
            let outside = |d: usize| {
                r.extents[d] == 0
                    || u64::from(r.anchor[d]) + u64::from(r.extents[d]) > u64::from(grid.extent(d))
            };
            if (0..q).any(outside) {
                return Err(err(
                    &r.field,
                    format!(
                        "a {} region at {:?} does not fit the {} network",
                        format_shape(&r.extents),
                        r.anchor,
                        format_shape(grid.extents())
                    ),
                ));
            }
            let names = hostlist::expand(&r.nodes).map_err(|e| err(&r.field, e.to_string()))?;
            // Inside the network, so within its node limit.
            let cells = Grid::mesh(&r.extents).map_err(|e| err(&r.field, e.to_string()))?;
            if names.len() as u64 != u64::from(cells.len()) {
                return Err(err(
                    &r.field,
                    format!(
                        "{} names for {} cells ({}): the hostlist must name every node once, dimension 0 fastest",
                        names.len(),
                        cells.len(),
                        format_shape(&r.extents)
                    ),
                ));
            }
            for (i, name) in names.into_iter().enumerate() {
                let local = cells.coord(i as u32);
                let mut c = local;
                for d in 0..q {
                    c[d] += r.anchor[d];
                }
                let node = grid.index(&c);
                if hosts[node as usize].is_some() {
                    return Err(err(
                        &r.field,
                        format!("overlaps another region at {:?}", &c[..q]),
                    ));
                }
                if let Some(prev) = index.insert(name.clone(), node) {
                    return Err(err(
                        &r.field,
                        format!(
                            "node name '{name}' appears twice (at {:?} and {:?})",
                            &grid.coord(prev)[..q],
                            &c[..q]
                        ),
                    ));
                }
                hosts[node as usize] = Some(name);
            }
        }
        Ok(Topology {
            name,
            grid,
            unit,
            source: source.to_string(),
            box_links: BoxLinks::Network,
            slurm_placements: Vec::new(),
            slurm_anchors: Vec::new(),
            hosts,
            index,
        })
    }

    /// A network with no host names (for simulations given only extents).
    pub fn unnamed(grid: Grid) -> Topology {
        Topology {
            name: format_shape(grid.extents()),
            hosts: vec![None; grid.len() as usize],
            grid,
            unit: AllocationUnit::Node,
            source: "(command line)".into(),
            box_links: BoxLinks::Network,
            slurm_placements: Vec::new(),
            slurm_anchors: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// The host name of a network node, if the cell has one.
    pub fn host(&self, node: u32) -> Option<&str> {
        self.hosts.get(node as usize).and_then(|h| h.as_deref())
    }

    /// The network node of a host name.
    pub fn node(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    /// Whether every cell has a host name.
    pub fn fully_named(&self) -> bool {
        self.hosts.iter().all(Option::is_some)
    }

    /// Host names of a box of the network (dimension 0 fastest), `None` if a cell has no node.
    /// A box on a ring dimension may wrap around.
    pub fn box_hosts(&self, origin: &[u32], extents: &[u32]) -> Option<Vec<String>> {
        let cells = Grid::mesh(extents).ok()?;
        (0..cells.len())
            .map(|i| {
                let local = cells.coord(i);
                let mut c = local;
                for d in 0..self.grid.dims() {
                    c[d] = (origin[d] + local[d]) % self.grid.extent(d);
                }
                self.host(self.grid.index(&c)).map(str::to_string)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/admin.md section 4 shows a topology file: it must load as written (its `links:`
    /// words are the ones the parser accepts).
    #[test]
    fn the_admin_guides_topology_example_loads() {
        let guide = include_str!("../../docs/admin.md");
        let section = &guide[guide.find("## 4. The topology file").expect("section 4")..];
        let start = section.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
        let yaml = &section[start..start + section[start..].find("```").unwrap()];
        let t = Topology::from_yaml(yaml, "docs/admin.md", None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.grid.extents(), &[4, 4, 2]);
        // Every link word the example's comment names is one the parser takes.
        let comment = yaml
            .lines()
            .find(|l| l.starts_with("links:"))
            .and_then(|l| l.split_once('#'))
            .map(|(_, c)| c)
            .expect("links: has a comment");
        let named: Vec<&str> = ["ring", "torus", "mesh", "line", "linear", "open"]
            .into_iter()
            .filter(|w| comment.split(|c: char| !c.is_alphabetic()).any(|x| x == *w))
            .collect();
        assert!(named.len() >= 2, "{comment}");
        for word in named {
            let text = yaml.replacen("[ring, ring, ring]", word, 1);
            assert!(
                Topology::from_yaml(&text, "t", None).is_ok(),
                "docs/admin.md names links: {word}, which the parser refuses"
            );
        }
    }

    #[test]
    fn an_impossible_allocation_unit_is_refused_when_the_file_is_loaded() {
        let load = |unit: &str| {
            Topology::from_yaml(
                &format!("name: t\nextents: [4, 4, 2]\nlinks: [ring, ring, mesh]\nnodes: node[01-32]\nunit: {unit}\n"),
                "site.yaml",
                None,
            )
            .map(|t| t.unit)
            .map_err(|e| e.to_string())
        };
        let e = load("{multiple: 12}").unwrap_err();
        for part in [
            "site.yaml",
            "unit",
            "12x12x12",
            "4x4x2",
            "dimension 0",
            "needs 12",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let e = load("{block: [3, 2, 2]}").unwrap_err();
        for part in [
            "blocks of 3x2x2",
            "do not divide",
            "dimension 0",
            "4 is not a multiple of 3",
        ] {
            assert!(e.contains(part), "{part}: {e}");
        }
        let e = load("{shapes: [2x2x1, 4x4x4]}").unwrap_err();
        assert!(e.contains("4x4x4") && e.contains("dimension 2"), "{e}");
        // Units that fit are kept.
        assert_eq!(
            load("{multiple: [4, 2, 1]}"),
            Ok(AllocationUnit::Multiple(vec![4, 2, 1]))
        );
        assert_eq!(
            load("{block: [2, 2, 2]}"),
            Ok(AllocationUnit::Block(vec![2, 2, 2]))
        );
    }

    #[test]
    fn own_format_with_hostlist() {
        let t = Topology::from_yaml(
            "name: t\nextents: [4, 4, 2]\nlinks: [ring, ring, mesh]\nnodes: node[01-32]\nunit: {multiple: [2, 2, 1]}\n",
            "t.yaml",
            None,
        )
        .unwrap();
        assert_eq!(t.grid.extents(), &[4, 4, 2]);
        assert_eq!(t.grid.wrap(), &[true, true, false]);
        assert_eq!(t.host(0), Some("node01"));
        assert_eq!(t.node("node05"), Some(4));
        assert_eq!(t.unit, AllocationUnit::Multiple(vec![2, 2, 1]));
        assert_eq!(
            t.box_hosts(&[3, 0, 0], &[2, 1, 1]).unwrap(),
            vec!["node04", "node01"]
        );
    }

    #[test]
    fn own_format_with_regions_and_holes() {
        let t = Topology::from_yaml(
            "extents: [4, 2]\nregions:\n  - {anchor: [0, 0], extents: [2, 2], nodes: 'a[1-4]'}\n",
            "r.yaml",
            None,
        )
        .unwrap();
        assert_eq!(t.host(1), Some("a2"));
        assert_eq!(t.host(4), Some("a3"));
        assert_eq!(t.host(2), None);
        assert!(!t.fully_named());
    }

    #[test]
    fn slurm_torus3d() {
        let text = "- topology: topo5\n  cluster_default: false\n  torus3d:\n    toruses:\n      - name: pod1\n        dims: {x: 4, y: 4, z: 2}\n        nodes: node[01-32]\n        placements:\n          - dims: {x: 2, y: 2, z: 1}\n          - dims: {x: 4, y: 4, z: 2}\n- topology: tree1\n  tree:\n    switches: []\n";
        let t = Topology::from_yaml(text, "topology.yaml", None).unwrap();
        assert_eq!(t.name, "pod1");
        assert_eq!(t.grid.wrap(), &[true, true, true]);
        assert_eq!(t.node("node32"), Some(31));
        assert_eq!(
            t.unit,
            AllocationUnit::Shapes(vec![vec![2, 2, 1], vec![4, 4, 2]])
        );
        assert_eq!(t.slurm_placements, vec![vec![2, 2, 1], vec![4, 4, 2]]);
    }

    #[test]
    fn slurm_anchors_follow_seed_and_spacing_round_the_torus() {
        // As `scontrol show topo` counts them on the 4x4x2 test torus: 2x2x1 8 anchors,
        // 2x2x2 4, 3x3x2 16 (spacing 3 on a ring of 4 visits every x), 4x4x2 1; an explicit
        // seed and spacing shift the grid.
        let text = "- topology: t\n  torus3d:\n    toruses:\n      - name: pod1\n        dims: {x: 4, y: 4, z: 2}\n        nodes: node[01-32]\n        placements:\n          - dims: {x: 2, y: 2, z: 1}\n          - dims: {x: 2, y: 2, z: 2}\n          - dims: {x: 3, y: 3, z: 2}\n          - dims: {x: 4, y: 4, z: 2}\n          - {dims: {x: 1, y: 1, z: 1}, anchor_seed: {x: 1, y: 0, z: 1}, anchor_spacing: {x: 2, y: 4, z: 2}}\n";
        let t = Topology::from_yaml(text, "topology.yaml", None).unwrap();
        let count = |i: usize| t.slurm_anchors[i].iter().map(Vec::len).product::<usize>();
        assert_eq!((0..4).map(count).collect::<Vec<_>>(), vec![8, 4, 16, 1]);
        assert_eq!(t.slurm_anchors[0], [vec![0, 2], vec![0, 2], vec![0, 1]]);
        assert_eq!(
            t.slurm_anchors[2],
            [vec![0, 1, 2, 3], vec![0, 1, 2, 3], vec![0]]
        );
        assert_eq!(t.slurm_anchors[4], [vec![1, 3], vec![0], vec![1]]);
        let e = Topology::from_yaml(
            &text.replace("anchor_spacing: {x: 2", "anchor_spacing: {x: 0"),
            "topology.yaml",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("placements[4]") && e.contains("spacing at least 1"),
            "{e}"
        );
    }

    fn error_of(text: &str) -> String {
        Topology::from_yaml(text, "bad.yaml", None)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_file_field_and_problem() {
        let e = error_of("extents: [4, 0]\nnodes: n[1-4]\n");
        assert!(e.starts_with("bad.yaml: extents[1]:"), "{e}");
        let e = error_of("extents: [4, 4]\nnodes: n[1-15]\n");
        assert!(e.contains("nodes: 15 names for 16 cells"), "{e}");
        let e = error_of("extents: [2, 2]\nnodes: n1,n2,n1,n3\n");
        assert!(e.contains("appears twice"), "{e}");
        let e = error_of("extents: [2, 2]\nnodez: n[1-4]\n");
        assert!(
            e.contains("unknown field `nodez`") && e.contains("line 2"),
            "{e}"
        );
        let e = error_of("extents: [2, 2, 2, 2, 2, 2, 2]\nnodes: n[1-128]\n");
        assert!(e.contains("1 to 6 dimensions"), "{e}");
        let e = error_of("extents: [2, 2\n");
        assert!(e.starts_with("bad.yaml: line"), "{e}");
        let e = error_of("extents: [2, 2]\nlinks: [ring]\nnodes: n[1-4]\n");
        assert!(e.contains("links"), "{e}");
        let e = error_of("- topology: x\n  torus3d:\n    toruses:\n      - name: p\n        dims: {x: 2, y: 2, z: 2}\n        nodes: n[1-7]\n");
        assert!(e.contains("toruses[0].nodes: 7 names for 8 cells"), "{e}");
    }

    #[test]
    fn huge_region_extents_are_errors_not_panics() {
        // anchor + extent overflowed u32: a panic in slurmctld ("Unspecified error").
        let e = error_of("extents: [4, 2]\nregions:\n  - {anchor: [1, 0], extents: [4294967295, 1], nodes: a1}\n");
        assert!(
            e.contains("regions[0]") && e.contains("does not fit"),
            "{e}"
        );
        let e = error_of("- topology: x\n  torus3d:\n    toruses:\n      - name: p\n        dims: {x: 2, y: 2, z: 2}\n        regions:\n          - {anchor: {x: 1, y: 0, z: 0}, dims: {x: 4294967295, y: 1, z: 1}, nodes: a1}\n");
        assert!(
            e.contains("regions[0]") && e.contains("does not fit"),
            "{e}"
        );
    }

    #[test]
    fn networks_over_the_node_limit_are_refused() {
        let e = error_of("extents: [1000, 1000, 1000]\nnodes: n[0-9]\n");
        assert!(
            e.contains("1000000000 nodes") && e.contains("limit of 1048576 nodes"),
            "{e}"
        );
        let e = error_of("- topology: x\n  torus3d:\n    toruses:\n      - name: p\n        dims: {x: 1000, y: 1000, z: 1000}\n        nodes: n1\n");
        assert!(e.contains("limit of 1048576 nodes"), "{e}");
        let e = error_of(&format!("extents: [{}]\nnodes: n1\n", ["1"; 100].join(",")));
        assert!(e.contains("1 to 6 dimensions"), "{e}");
    }

    #[test]
    fn deeply_nested_documents_are_refused_before_parsing() {
        // 100k `[` took 12 s in the YAML parser (quadratic in the depth).
        let e = error_of(&format!("extents: {}", "[".repeat(100_000)));
        assert!(
            e.contains("nesting of bad.yaml") && e.contains("limit of 32 levels"),
            "{e}"
        );
    }
}
