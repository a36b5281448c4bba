//! `spares`: plan spare-node allocations on mesh/torus networks, substitute failed nodes by
//! sliding, count message collisions, and write rankfiles for the resulting maps.
//!
//! Every decision is made by the `topology` library; this binary reads files, parses flags and
//! prints.

mod commands;
mod input;
mod manual;
mod plot;
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

/// Spare nodes and sliding substitution for stencil jobs on mesh/torus networks.
#[derive(Parser)]
#[command(name = "spares", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Plan a job box: compute shape, spare shape, spare count and fraction, which nodes
    /// compute and which wait as spares.
    Plan(PlanCmd),
    /// Fail nodes of a map one after another and show each substitution.
    Substitute(SubstituteCmd),
    /// Traffic figures of a map: collisions (largest link load), hops, hot links.
    Collisions(CollisionsCmd),
    /// Re-map a job's ranks onto its alive nodes for fewer collisions, within a budget of
    /// moved ranks; prints the moves and writes the new map.
    Remap(RemapCmd),
    /// Write a map as a SLURM_HOSTFILE, an Open MPI rankfile or CSV.
    Rankfile(RankfileCmd),
    /// The size-to-shape table of `--spares=auto`: the site policy's (its auto table, limits
    /// and network), or the seeds' band (journal seed, section 6.1).
    Policy(PolicyCmd),
    /// Failure campaigns: random (or every) failure sequences under one or more methods;
    /// survival, collisions (best, mean, percentiles, worst) and selection rates per
    /// failure count, as the seeds report them.
    Simulate(SimulateCmd),
    /// Merge the results of shards (`simulate --shard i/n`) into the single run's.
    Merge(MergeCmd),
    /// Time the previous and the current incremental engine (and full recomputation) on one
    /// campaign, against the machine's memory-bound limit.
    Bench(BenchCmd),
    /// Draw the seeds' figures from simulation results (SVG and PNG).
    Plot(PlotCmd),
}

#[derive(Args)]
struct PlotCmd {
    /// Results of `spares simulate -o` (or `spares merge -o`).
    #[arg(value_name = "RESULTS")]
    results: PathBuf,
    /// Which figure: collisions (best/mean/worst), survival, selection or
    /// cumulative-selection.
    #[arg(long, short = 'f', value_enum, default_value = "collisions")]
    figure: plot::Figure,
    /// The method of a selection figure (default: the first); limits the other figures to it.
    #[arg(long, short = 'm')]
    method: Option<String>,
    /// Output: FILE.svg and FILE.png are written (an .svg or .png ending is replaced).
    #[arg(long, short = 'o', value_name = "FILE")]
    output: PathBuf,
}

#[derive(Args)]
struct SimulateCmd {
    /// The job box; --method takes a comma-separated list here (hybrid,0D,hybrid(-2D),3D).
    #[command(flatten)]
    plan: PlanArgs,
    /// Failures per sample (default: as many as the box has spare nodes).
    #[arg(long, short = 'k', value_name = "K")]
    failures: Option<u32>,
    /// Random failure sequences to draw.
    #[arg(long, default_value_t = 10_000)]
    samples: u64,
    /// Seed of the random streams (sample j uses stream j).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: every core). The numbers do not depend on it.
    #[arg(long, value_name = "T")]
    threads: Option<usize>,
    /// Enumerate every ordered sequence of K failures instead of sampling.
    #[arg(long, conflicts_with_all = ["samples", "shard"])]
    exhaustive: bool,
    /// Refuse exhaustive runs of more sequences than this.
    #[arg(long, default_value_t = 100_000_000)]
    max_cases: u64,
    /// Run only shard i of n (samples j with j mod n = i), e.g. $SLURM_ARRAY_TASK_ID/16;
    /// `spares merge` joins the shards.
    #[arg(long, value_name = "i/n")]
    shard: Option<String>,
    /// Keep the M worst maps (largest collisions) of each method at the failure counts of --at.
    #[arg(long, value_name = "M", default_value_t = 0, requires = "at")]
    keep_worst: usize,
    /// Failure counts for --keep-worst, e.g. 1,2,3,4,100,200,276.
    #[arg(long, value_name = "K,K,...", value_delimiter = ',')]
    at: Vec<u32>,
    /// Directory for the worst maps (map JSON, SLURM_HOSTFILE, Open MPI rankfile).
    #[arg(long, value_name = "DIR", default_value = "worst-maps")]
    worst_dir: PathBuf,
    /// Also re-map each alive case's map at these failure counts, as `spares remap` does, on a
    /// copy: the failures after slide on the unchanged map. E.g. 50,100,276.
    #[arg(long, value_name = "K,K,...", value_delimiter = ',')]
    remap_at: Vec<u32>,
    /// Most ranks each re-map of --remap-at may move (default: any).
    #[arg(long, value_name = "K", requires = "remap_at")]
    max_moves: Option<u32>,
    /// Candidate moves each re-map of --remap-at evaluates; no time limit, so the figures are
    /// the same on every machine, thread count and shard split.
    #[arg(long, value_name = "N", default_value_t = simulate::REMAP_ITERATIONS, requires = "remap_at")]
    remap_iterations: u64,
    /// Traffic engine: incremental, full recomputation after every failure, or the previous
    /// incremental engine (reference); all give the same figures.
    #[arg(long, value_enum, default_value = "incremental")]
    engine: EngineArg,
    /// Write the results (JSON) to this file.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write one CSV row per method and failure count to this file.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// No progress display.
    #[arg(long, short = 'q')]
    quiet: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum EngineArg {
    /// Link loads updated for the moved ranks' messages only.
    Incremental,
    /// Every route recomputed after every failure.
    Full,
    /// The previous incremental engine, kept to measure the current one (same figures).
    Reference,
}

#[derive(Args)]
struct MergeCmd {
    /// Results files of the shards.
    #[arg(required = true, value_name = "RESULTS")]
    inputs: Vec<PathBuf>,
    /// Write the merged results (JSON) here; without it, print the tables.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Also write the CSV.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
}

#[derive(Args)]
struct BenchCmd {
    #[command(flatten)]
    plan: PlanArgs,
    /// Failures per sample (default: all spares).
    #[arg(long, short = 'k', value_name = "K")]
    failures: Option<u32>,
    /// Samples for the incremental engines.
    #[arg(long, default_value_t = 200)]
    samples: u64,
    /// Samples for full recomputation (slow on large boxes; 0 leaves it out).
    #[arg(long, default_value_t = 2)]
    full_samples: u64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Turns of the reference and the current engine; the fastest of each counts.
    #[arg(long, default_value_t = 3)]
    rounds: u32,
}

/// Where the network comes from.
#[derive(Args, Clone)]
pub struct NetworkArgs {
    /// Topology file (this project's YAML or Slurm's topology.yaml with torus3d).
    #[arg(long, short = 't', value_name = "FILE", conflicts_with = "network")]
    pub topology: Option<std::path::PathBuf>,
    /// Which torus of a Slurm topology.yaml holds several.
    #[arg(long, value_name = "NAME", requires = "topology")]
    pub torus: Option<String>,
    /// A network given by its extents instead of a file, e.g. 12x12x12.
    #[arg(long, short = 'n', value_name = "AxBxC")]
    pub network: Option<String>,
    /// With --network: `mesh`, `ring`, or one per dimension (`ring,ring,mesh`).
    #[arg(
        long,
        value_name = "KINDS",
        default_value = "mesh",
        requires = "network"
    )]
    pub links: String,
}

/// A job box on a network.
#[derive(Args, Clone)]
pub struct PlanArgs {
    #[command(flatten)]
    pub network: NetworkArgs,
    /// Compute shape of the job (its logical grid), e.g. 11x11x12. Without it and without
    /// --nodes, the whole network is the box and compute is what the spares leave.
    #[arg(long, short = 's', value_name = "AxBxC", conflicts_with = "nodes")]
    pub shape: Option<String>,
    /// Number of compute nodes; the most cube-like shape that fits is chosen.
    #[arg(long, short = 'N', value_name = "N")]
    pub nodes: Option<u64>,
    /// Spare shape qD(r,s) or qD:r,s (no quotes needed; options: /dims=x,z /side=low), `auto`, or `none`
    /// [default: `spares plan`: the site policy's default_spares; else auto].
    #[arg(long, value_name = "SPEC")]
    pub spares: Option<String>,
    /// Low corner of the box in the network.
    #[arg(long, value_name = "X,Y,Z")]
    pub origin: Option<String>,
    /// Substitution method for failures: hybrid, 0D..6D, hybrid(-2D), hybrid(3D+1D+0D); a 0D
    /// rule may follow: 0D:alternate, hybrid:least-load (/usr/share/doc/spares/simulation.md)
    /// [default: `spares plan`: the site policy's default_method; else hybrid].
    #[arg(long, short = 'm')]
    pub method: Option<String>,
    /// Stencil pattern: 5p, 7p (star), 9p, 27p (box), star, box.
    #[arg(long, short = 'p', value_name = "PATTERN")]
    pub pattern: Option<String>,
    /// The stencil wraps around the logical grid.
    #[arg(long)]
    pub periodic: bool,
    /// The job's time limit in hours (a site policy that sizes spares by failure rate).
    #[arg(long, value_name = "HOURS")]
    pub time: Option<f64>,
}

impl PlanArgs {
    /// `--spares`, or `auto` where no site policy answers.
    pub fn spares(&self) -> &str {
        self.spares.as_deref().unwrap_or("auto")
    }

    /// `--method`, or `hybrid` where no site policy answers.
    pub fn method(&self) -> &str {
        self.method.as_deref().unwrap_or("hybrid")
    }
}

/// Which site policy answers: `--policy FILE`, none with `--no-policy`, else
/// `$SPARES_POLICY`, else the installed `/etc/slurm/spares.yaml` when it exists.
#[derive(Args, Clone)]
pub struct PolicyArgs {
    /// Site policy file (the plugins' spares.yaml): answer as the site would
    /// [default: $SPARES_POLICY, else /etc/slurm/spares.yaml when present].
    #[arg(long, value_name = "FILE", conflicts_with = "no_policy")]
    pub policy: Option<PathBuf>,
    /// Ignore the installed site policy (the model's defaults answer).
    #[arg(long)]
    pub no_policy: bool,
}

#[derive(Args)]
struct PlanCmd {
    #[command(flatten)]
    plan: PlanArgs,
    #[command(flatten)]
    site: PolicyArgs,
    /// Write the map document (JSON) to this file.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// List the compute and spare nodes.
    #[arg(long)]
    show_nodes: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct SubstituteCmd {
    /// A map document written by `spares plan -o` (or a previous `substitute -o`).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["topology", "network"])]
    map: Option<std::path::PathBuf>,
    #[command(flatten)]
    plan: PlanArgs,
    /// A node to fail: host name, or coordinates in the box (3,4,5 or box:3,4,5), or in the
    /// network (net:3,4,5); repeat for a sequence.
    #[arg(long, value_name = "NODE")]
    fail: Vec<String>,
    /// Fail this many nodes drawn at random among the alive ones (spares included).
    #[arg(long, value_name = "K", conflicts_with = "fail")]
    fail_random: Option<u32>,
    /// Seed of --fail-random.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the final map document to this file.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// Leave the moves out of the output.
    #[arg(long)]
    no_moves: bool,
    /// Traffic figures from the incremental engine, recomputed from scratch after every
    /// failure, or from the previous incremental engine (reference); all agree.
    #[arg(long, value_enum, default_value = "incremental")]
    engine: EngineArg,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct CollisionsCmd {
    /// A map document.
    #[arg(long, value_name = "FILE")]
    map: std::path::PathBuf,
    /// Stencil pattern (default: the map's).
    #[arg(long, short = 'p')]
    pattern: Option<String>,
    /// The stencil wraps around the logical grid (default: the map's).
    #[arg(long)]
    periodic: bool,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct RemapCmd {
    /// A map document (from `spares plan -o`, `substitute -o`, or a previous `remap -o`).
    #[arg(long, value_name = "FILE")]
    map: std::path::PathBuf,
    /// Most ranks that may end on another node (default: any).
    #[arg(long, value_name = "K")]
    max_moves: Option<u32>,
    /// Seconds of search (default 1 unless --iterations is given); a limit that binds makes
    /// the result depend on the machine.
    #[arg(long, value_name = "S")]
    time_limit: Option<f64>,
    /// Candidate moves to evaluate: the same seed and count give the same map everywhere.
    #[arg(long, value_name = "N")]
    iterations: Option<u64>,
    /// Seed of the search.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write the re-mapped map document to this file.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<std::path::PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum RankfileFormat {
    /// One host per line in rank order, for `srun --distribution=arbitrary`.
    Hostfile,
    /// Open MPI rankfile lines `rank N=host slot=0`.
    Openmpi,
    /// rank,host,coordinates.
    Csv,
}

#[derive(Args)]
struct RankfileCmd {
    /// A map document.
    #[arg(long, value_name = "FILE")]
    map: std::path::PathBuf,
    /// Output format.
    #[arg(long, short = 'f', value_enum, default_value = "hostfile")]
    format: RankfileFormat,
    /// Write to this file instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<std::path::PathBuf>,
}

#[derive(Args)]
struct PolicyCmd {
    #[command(flatten)]
    site: PolicyArgs,
    /// Compute node counts to tabulate on the site's network [default: every count up to
    /// 64 nodes, else powers of two and cubes].
    #[arg(long, short = 'N', value_delimiter = ',', value_name = "N,...")]
    nodes: Vec<u32>,
    /// Node MTBF in hours: size spares by failure rate (overrides the site policy's
    /// failure_rate; without a site policy, a table for cubic jobs).
    #[arg(long, value_name = "HOURS", conflicts_with = "failures_per_node_hour")]
    mtbf: Option<f64>,
    /// Failures per node-hour, instead of --mtbf.
    #[arg(long, value_name = "RATE")]
    failures_per_node_hour: Option<f64>,
    /// Probability the job keeps enough spares over its time [default: the policy's, else
    /// 0.99].
    #[arg(long, value_name = "P")]
    target: Option<f64>,
    /// The jobs' time limit in hours (failure-rate sizing) [default: the policy's
    /// default_hours, else 24].
    #[arg(long, value_name = "HOURS")]
    time: Option<f64>,
    /// The substitution method of the failure-rate table without a site policy: one that
    /// does not end in 0D can fail before its spares run out, so its survival curve comes
    /// from the simulator (random failure sequences on each box).
    #[arg(long, short = 'm', value_name = "METHOD", default_value = "hybrid")]
    method: String,
    /// Failure sequences per box for such a method's survival curve.
    #[arg(long, default_value_t = 200)]
    samples: u64,
    /// Dimensions of the network: the seeds' band table, whatever the site's policy
    /// [default: 3].
    #[arg(long)]
    dims: Option<usize>,
    /// The spare-fraction band in percent, `min,max`: the seeds' band table, whatever the
    /// site's policy [default: 2,5 without a site policy].
    #[arg(long)]
    band: Option<String>,
    /// Side lengths of the cubic jobs to tabulate.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "8,16,24,32,40,48,56,64,80,100,128"
    )]
    sides: Vec<u32>,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    manpage::generate_if_asked(Cli::command, &manual::MAN);
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Plan(c) => {
            commands::plan(&c.plan, &c.site, c.output.as_deref(), c.show_nodes, c.json)
        }
        Command::Substitute(c) => commands::substitute(commands::SubstituteOpts {
            map: c.map.as_deref(),
            plan: &c.plan,
            fail: &c.fail,
            fail_random: c.fail_random,
            seed: c.seed,
            output: c.output.as_deref(),
            moves: !c.no_moves,
            full_traffic: matches!(c.engine, EngineArg::Full),
            reference_engine: matches!(c.engine, EngineArg::Reference),
            json: c.json,
        }),
        Command::Collisions(c) => {
            commands::collisions(&c.map, c.pattern.as_deref(), c.periodic, c.json)
        }
        Command::Remap(c) => commands::remap(commands::RemapOpts {
            map: &c.map,
            max_moves: c.max_moves,
            time_limit: c.time_limit,
            iterations: c.iterations,
            seed: c.seed,
            output: c.output.as_deref(),
            json: c.json,
        }),
        Command::Rankfile(c) => commands::rankfile(
            &c.map,
            match c.format {
                RankfileFormat::Hostfile => commands::Format::Hostfile,
                RankfileFormat::Openmpi => commands::Format::OpenMpi,
                RankfileFormat::Csv => commands::Format::Csv,
            },
            c.output.as_deref(),
        ),
        Command::Policy(c) => (|| {
            let rate = commands::failure_rate_args(c.mtbf, c.failures_per_node_hour, c.target)?;
            let band_table = c.band.is_some() || (c.dims.is_some() && rate.is_none());
            match input::site_policy(&c.site) {
                Ok(Some(mut policy)) if !band_table && c.dims.is_none() => {
                    if let Some(mut r) = rate {
                        if c.target.is_none() {
                            if let Some(site) = &policy.failure_rate {
                                r.target = site.target;
                            }
                        }
                        policy.failure_rate = Some(r);
                    }
                    commands::site_policy_table(&policy, &c.nodes, c.time, c.json)
                }
                Err(e) if !band_table => Err(e),
                _ => match rate {
                    Some(r) => commands::failure_rate_table(
                        &r,
                        c.time.unwrap_or(24.0),
                        c.dims.unwrap_or(3),
                        &c.sides,
                        (&c.method, c.samples),
                        c.json,
                    ),
                    None => commands::policy(
                        c.dims.unwrap_or(3),
                        c.band.as_deref().unwrap_or("2,5"),
                        &c.sides,
                        c.json,
                    ),
                },
            }
        })(),
        Command::Simulate(c) => simulate::simulate(simulate::SimulateOpts {
            plan: &c.plan,
            failures: c.failures,
            samples: c.samples,
            seed: c.seed,
            threads: c.threads,
            exhaustive: c.exhaustive,
            max_cases: c.max_cases,
            shard: c.shard.as_deref(),
            keep_worst: c.keep_worst,
            at: &c.at,
            worst_dir: &c.worst_dir,
            remap_at: &c.remap_at,
            max_moves: c.max_moves,
            remap_iterations: c.remap_iterations,
            engine: match c.engine {
                EngineArg::Incremental => topology::simulate::Engine::Incremental,
                EngineArg::Full => topology::simulate::Engine::Full,
                EngineArg::Reference => topology::simulate::Engine::Reference,
            },
            output: c.output.as_deref(),
            csv: c.csv.as_deref(),
            json: c.json,
            quiet: c.quiet,
        }),
        Command::Merge(c) => simulate::merge(&c.inputs, c.output.as_deref(), c.csv.as_deref()),
        Command::Plot(c) => (|| {
            let text = input::read_at_most(&c.results, input::MAX_RESULTS_BYTES)?;
            let results: topology::simulate::Results =
                serde_json::from_str(&text).map_err(|e| {
                    anyhow::anyhow!(
                        "{}: not a results file of spares simulate: {e}",
                        c.results.display()
                    )
                })?;
            for p in plot::plot(&results, c.figure, c.method.as_deref(), &c.output)? {
                println!("{}", p.display());
            }
            Ok(())
        })(),
        Command::Bench(c) => simulate::bench(
            &c.plan,
            c.failures,
            c.samples,
            c.full_samples,
            c.seed,
            c.rounds,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line, the way a site's scripts can grep it.
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("spares: error: {msg}");
            ExitCode::FAILURE
        }
    }
}
