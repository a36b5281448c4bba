//! The spare-node model of the `spares` project.
//!
//! A job on a mesh/torus network keeps its stencil code and load balance after a node dies only
//! if a spare node takes the dead node's place. This crate decides everything about that, and
//! nothing else: it holds no Slurm code, no unsafe code, and does no I/O beyond parsing the text
//! it is handed and reading site files through [`sitefile`]. The plugins, the daemon and the `spares` CLI carry data in and out of it.
//!
//! - [`grid`]: Cartesian grids (1 to 6 dimensions, mesh or ring each), coordinates, distances.
//! - [`hostlist`]: Slurm hostlist expressions, both ways.
//! - [`limits`]: budgets for input (node counts, nesting depth, file sizes).
//! - [`sitefile`]: reading a site file safely (regular files only, size-limited).
//! - [`topofile`]: topology files (this project's YAML, and Slurm's `topology.yaml` `torus3d`).
//! - [`shape`]: spare shapes `qD(r,s)`, allocation units, padded boxes, spare fractions.
//! - [`policy`]: the multi-job policy (job size -> spare shape inside a spare-fraction band).
//! - [`traffic`]: stencil patterns, dimension-order routes, link loads and collisions.
//! - [`loads`]: link loads kept up to date as ranks move (the simulator's engine).
//! - [`map`]: the rank-to-node map of a job box and its JSON document.
//! - [`placement`]: where a job box starts on a network, and its map there.
//! - [`simulate`]: failure campaigns (random or exhaustive), their statistics, shards and merges.
//! - [`remap`]: a new rank map with fewer collisions after many failures, within a move budget.
//! - [`sliding`]: substitution of failed nodes (0D, kD sliding, hybrids) with pipelined moves.
//!
//! The reference for the rules is `shared/docs/sliding-spec.md`; the seed papers' facts are
//! pinned by the tests of each module and by `tests/seeds.rs`.

#![allow(clippy::needless_range_loop)] // coordinates are indexed by dimension throughout

pub mod grid;
pub mod hostlist;
pub mod limits;
pub mod loads;
pub mod loads_reference;
pub mod map;
pub mod pin_mark;
pub mod placement;
pub mod policy;
pub mod remap;
pub mod report;
mod route_tables;
pub mod shape;
pub mod simulate;
pub mod site_policy;
pub mod sitefile;
pub mod sliding;
pub mod topofile;
pub mod traffic;

pub use grid::{Coord, Dir, Grid, MAX_DIMS};
pub use limits::Limits;
pub use map::{MapDocument, MapMeta, NodeState, SpareMap};
pub use policy::AutoPolicy;
pub use shape::{AllocationUnit, Plan, Side, SpareShape};
pub use sliding::{Method, Move, Outcome, Slide};
pub use topofile::{BoxLinks, Topology};
pub use traffic::{Pattern, Traffic};

/// Everything that can go wrong in the model; each message says what to change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A grid with no dimension or more than [`MAX_DIMS`].
    #[error("a network has 1 to 6 dimensions; this one has {0}")]
    Dimensions(usize),
    /// A value that breaks a rule of the model; the text names the value and the rule.
    #[error("{0}")]
    Invalid(String),
    /// A hostlist expression that cannot be expanded.
    #[error("hostlist '{expr}': {why}")]
    Hostlist {
        /// The expression as given.
        expr: String,
        /// What is wrong with it.
        why: String,
    },
    /// A spare shape that cannot be parsed or does not fit the network.
    #[error("spare shape '{spec}': {why}")]
    SpareShape {
        /// The shape as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A substitution method that cannot be parsed or does not fit the network.
    #[error("method '{spec}': {why}")]
    Method {
        /// The method as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A stencil pattern that cannot be parsed or does not fit the network.
    #[error("pattern '{spec}': {why}")]
    Pattern {
        /// The pattern as given.
        spec: String,
        /// What is wrong with it.
        why: String,
    },
    /// A topology file with an error; `field` is a path such as `torus3d.toruses[0].dims`.
    #[error("{file}: {field}: {why}")]
    TopologyFile {
        /// Where the text came from (a path, or `<stdin>`).
        file: String,
        /// Which field is wrong, or `(document)` for syntax errors.
        field: String,
        /// What is wrong with it.
        why: String,
    },
    /// A compute shape whose padded box is larger than the network.
    #[error("compute shape {compute} with spares {spares} needs a {needed} box; the network is only {network}")]
    DoesNotFit {
        /// The requested compute shape.
        compute: String,
        /// The spare shape (or `none`).
        spares: String,
        /// The box it needs after padding and rounding.
        needed: String,
        /// The network's extents.
        network: String,
    },
    /// A node that is not part of the job's box.
    #[error("node {0} is not in the job's box")]
    UnknownNode(String),
    /// A node that is already dead; the map is unchanged.
    #[error("node {0} has already failed; the map is unchanged")]
    AlreadyFailed(String),
    /// An input over a budget of [`limits`]: `what` has `value` `unit`, more than `limit`.
    #[error("{what} has {value} {unit}, over the limit of {limit} {unit}")]
    Limit {
        /// What was measured (e.g. `network 1000x1000x1000`).
        what: String,
        /// The value found.
        value: u64,
        /// The limit it exceeds.
        limit: u64,
        /// What is counted (`nodes`, `levels`, `names`).
        unit: &'static str,
    },
    /// A map document that is inconsistent.
    #[error("map: {0}")]
    Map(String),
}
