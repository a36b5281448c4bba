//! `sparesctl`: talk to sparesd (register, show, fail, remap, node-down, list, release, health) and
//! measure it (`bench`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use rand::{Rng, SeedableRng};
use serde_json::Value;
use spares_client::{default_socket, Client, Error};
use topology::grid::{format_coord, parse_shape};
use topology::report::FailureText;
use topology::sliding::fail;
use topology::{MapDocument, MapMeta, Method, NodeState, Pattern, Plan, SpareMap, SpareShape};

/// `println!` that ends the program quietly when stdout is a closed pipe (`| head`).
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($t)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}

#[path = "../attack_bench.rs"]
mod attack_bench;

/// Exit status of a reported failure that left the job without a spare (`no_spare_left`).
const EXIT_JOB_LOST: u8 = 4;

#[derive(Parser)]
#[command(
    name = "sparesctl",
    version,
    about = "Talk to sparesd: register jobs, report failures, show maps",
    after_help = "Exit status: 0 done; 1 bad arguments or files; 2 sparesd could not be reached \
                  or answered wrongly (socket, timeout, MUNGE); 3 sparesd refused the request \
                  (unknown job, not allowed, bad request); 4 a reported failure left the job \
                  without a spare (no_spare_left). Releasing a job that is not registered \
                  (any more) is not an error."
)]
struct Cli {
    /// sparesd's socket (default: $SPARES_SOCKET, else /run/sparesd/sparesd.sock).
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// Use sparesd's MUNGE-authenticated TCP listener at HOST:PORT instead of the socket.
    #[arg(long, global = true, value_name = "HOST:PORT")]
    tcp: Option<String>,
    /// munged's socket for --tcp (default: libmunge's).
    #[arg(long, global = true)]
    munge_socket: Option<PathBuf>,
    /// Print the daemon's reply as JSON.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The daemon's status and version.
    Health,
    /// Register a job with a map document (`spares plan -o map.json`); root or the Slurm user.
    Register {
        /// Slurm job id.
        #[arg(long)]
        job: u32,
        /// The job owner's uid.
        #[arg(long)]
        uid: u32,
        /// The map document.
        #[arg(long)]
        map: PathBuf,
    },
    /// A job's current map, failed nodes and substitutions; after its release, the map and
    /// substitutions it had then (for history_retention_secs, a day by default).
    Show {
        /// Slurm job id.
        job: u32,
        /// Write the current map document to this file.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// A job's current map (after its substitutions) as a map document, or as a hostfile of
    /// the ranks' nodes in rank order (for SLURM_HOSTFILE); the files SLURM_SPARES_MAP and
    /// SLURM_SPARES_HOSTFILE name are the job's initial map.
    Map {
        /// Slurm job id.
        job: u32,
        /// Print the hostfile instead of the map document.
        #[arg(long)]
        hostfile: bool,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Report failed nodes of a job (host names or coordinates such as 3,4,5), in order.
    Fail {
        /// Slurm job id.
        job: u32,
        /// The failed nodes.
        #[arg(required = true)]
        nodes: Vec<String>,
    },
    /// Re-map a job's ranks onto its alive nodes for fewer collisions (the job's owner, root
    /// or the Slurm user): the moves, collisions before and after, the new map.
    Remap {
        /// Slurm job id.
        job: u32,
        /// Most ranks that may end on another node (default and cap: sparesd's
        /// `[remap] max_moves`).
        #[arg(long, value_name = "K")]
        max_moves: Option<u32>,
        /// Write the new map document to this file.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// Report nodes down (a Slurm hostlist) for every job holding them; root or the Slurm user.
    NodeDown {
        /// Hostlist, e.g. node[06,11].
        nodes: String,
    },
    /// The registered jobs (all for root and the Slurm user, your own otherwise).
    #[command(disable_help_flag = true)]
    List {
        /// Leave the header line out (as `squeue -h`).
        #[arg(short = 'h', long)]
        noheader: bool,
        /// Print help.
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Released jobs whose histories sparesd still keeps (all for root and the Slurm user,
    /// your own otherwise), newest first; `show JOB` tells each one's substitutions.
    #[command(disable_help_flag = true)]
    History {
        /// Only jobs released within this long: seconds, or a number with s, m, h or d.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        since: Option<u64>,
        /// Leave the header line out.
        #[arg(short = 'h', long)]
        noheader: bool,
        /// Print help.
        #[arg(long, action = clap::ArgAction::Help)]
        help: Option<bool>,
    },
    /// Forget a job (epilog); root or the Slurm user.
    Release {
        /// Slurm job id.
        job: u32,
    },
    /// Measure the daemon or the model (see /usr/share/doc/sparesd/sparesd.md).
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// Queries per second and latency with many concurrent clients.
    Queries {
        /// Concurrent clients (one connection and thread each).
        #[arg(long, default_value_t = 32)]
        clients: usize,
        /// Seconds to run.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// What to ask.
        #[arg(long, value_enum, default_value_t = QueryKind::Show)]
        kind: QueryKind,
        /// Box of the job registered for `show` (needs root or the Slurm user).
        #[arg(long, default_value = "8x8x8")]
        r#box: String,
    },
    /// Failure reports per second and latency: jobs registered, random nodes failed, released.
    Failures {
        /// Jobs registered for the run (ids from 4000000000 up).
        #[arg(long, default_value_t = 32)]
        jobs: u32,
        /// Failures reported per job.
        #[arg(long, default_value_t = 20)]
        per_job: u32,
        /// Concurrent clients.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Box of each job.
        #[arg(long, default_value = "12x12x12")]
        r#box: String,
        /// Spare shape.
        #[arg(long, default_value = "3D(2,1)")]
        spares: String,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Root's latency for fail and health, quiet and while another uid floods show on its own
    /// large job, holds connections and trickles bytes (run as root; see /usr/share/doc/sparesd/sparesd.md).
    Attack {
        /// The hostile user's uid (e.g. of `useradd sparesattacker`).
        #[arg(long)]
        attacker_uid: u32,
        /// Box of the attacker's job (the show replies it floods).
        #[arg(long, default_value = "48x48x48")]
        attacker_box: String,
        /// Box of root's jobs (failures reported in them).
        #[arg(long, default_value = "8x8x8")]
        root_box: String,
        /// fail and health requests of root per phase.
        #[arg(long, default_value_t = 300)]
        requests: usize,
        /// Connections flooding show.
        #[arg(long, default_value_t = 16)]
        flooders: usize,
        /// Connections held open without a byte.
        #[arg(long, default_value_t = 300)]
        holders: usize,
        /// Connections trickling a byte every 100 ms.
        #[arg(long, default_value_t = 300)]
        tricklers: usize,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// The attacker side of `bench attack` (run by it as another uid).
    #[command(hide = true)]
    Hostile {
        #[arg(long)]
        job: u32,
        #[arg(long)]
        flooders: usize,
        #[arg(long)]
        holders: usize,
        #[arg(long)]
        tricklers: usize,
    },
    /// The model's decision time (`topology::sliding::fail`) on a large box, without the daemon.
    Decision {
        /// Box.
        #[arg(long, default_value = "48x48x48")]
        r#box: String,
        /// Spare shape.
        #[arg(long, default_value = "3D(2,1)")]
        spares: String,
        /// Failures timed per method.
        #[arg(long, default_value_t = 50)]
        repeat: usize,
        /// Random seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum QueryKind {
    Show,
    Health,
    List,
}

/// What `man sparesctl` says beyond `--help` (`sparesctl generate man DIR`).
const MAN: manpage::Extra = manpage::Extra {
    section: "1",
    examples: &[
        ("The daemon's status, version and job count.", "sparesctl health"),
        ("Your jobs (all for root and the Slurm user), without the header.", "sparesctl list -h"),
        (
            "A job's map, failed nodes and substitutions; also after its end, for history_retention_secs.",
            "sparesctl show 4242",
        ),
        (
            "The job's current ranks' nodes as a SLURM_HOSTFILE, to relaunch after a substitution.",
            "sparesctl map 4242 --hostfile >hosts",
        ),
        ("The current map document.", "sparesctl map 4242 -o map.json"),
        ("Report that node06 of job 4242 died: the substitution and its moves.", "sparesctl fail 4242 node06"),
        (
            "Re-map job 4242's ranks for fewer collisions, moving at most 50 (before a relaunch from a checkpoint).",
            "sparesctl remap 4242 --max-moves 50",
        ),
        (
            "Register a job with a map (root or the Slurm user; the prolog does this).",
            "sparesctl register --job 4242 --uid 1000 --map map.json",
        ),
        ("Nodes down for every job holding them (root or the Slurm user).", "sparesctl node-down node[06,11]"),
        ("Forget a job (the epilog does this).", "sparesctl release 4242"),
        ("Jobs released within the last 12 hours, as sacct lists ended jobs.", "sparesctl history --since 12h"),
    ],
    exit_status: &[
        ("0", "Done; also a release of a job that is not registered (any more)."),
        ("1", "Bad arguments or files."),
        ("2", "sparesd could not be reached or answered wrongly (socket, timeout, MUNGE)."),
        ("3", "sparesd refused the request (unknown job, not allowed, bad request)."),
        ("4", "A reported failure left the job without a spare (no_spare_left): the job is lost."),
    ],
};

fn main() -> ExitCode {
    manpage::generate_if_asked(Cli::command, &MAN);
    let cli = Cli::parse();
    env_logger::Builder::new()
        .parse_filters("warn")
        .parse_env("RUST_LOG")
        .init();
    let socket = cli.socket.clone().unwrap_or_else(default_socket);
    match run(&cli, &socket) {
        Ok(Done::Ok) => ExitCode::SUCCESS,
        Ok(Done::JobLost) => ExitCode::from(EXIT_JOB_LOST),
        Err(e) => {
            eprintln!("sparesctl: {e}");
            match e.downcast_ref::<Error>() {
                Some(Error::Daemon { .. }) => ExitCode::from(3),
                Some(_) => ExitCode::from(2),
                None => ExitCode::FAILURE,
            }
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// How a command that ran ended.
enum Done {
    Ok,
    /// A reported failure left the job without a spare.
    JobLost,
}

trait Downcast {
    fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T>;
}

impl Downcast for Box<dyn std::error::Error + Send + Sync> {
    fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        (**self).downcast_ref::<T>()
    }
}

fn print_json(v: &Value) {
    outln!(
        "{}",
        serde_json::to_string_pretty(v).expect("JSON values serialise")
    );
}

fn run(cli: &Cli, socket: &Path) -> Result<Done> {
    if let Cmd::Bench { what } = &cli.cmd {
        return bench(what, socket, cli.json).map(|()| Done::Ok);
    }
    let mut lost = false;
    let mut c = match &cli.tcp {
        Some(addr) => Client::connect_tcp(addr, cli.munge_socket.as_deref())?,
        None => Client::connect(socket)?,
    };
    match &cli.cmd {
        Cmd::Health => {
            let r = c.health()?;
            if cli.json {
                print_json(&r);
            } else {
                outln!(
                    "sparesd {} (protocol {}): {}, {} job(s), up {} s, journal at {}",
                    r["daemon_version"].as_str().unwrap_or("?"),
                    r["protocol"],
                    r["status"].as_str().unwrap_or("?"),
                    r["jobs"],
                    r["uptime_s"],
                    r["journal_seq"]
                );
            }
        }
        Cmd::Register { job, uid, map } => {
            let text = std::fs::read_to_string(map)
                .map_err(|e| format!("cannot read {}: {e}", map.display()))?;
            let doc =
                MapDocument::from_json(&text).map_err(|e| format!("{}: {e}", map.display()))?;
            let r = c.register(*job, *uid, &doc)?;
            if cli.json {
                print_json(&r);
            } else {
                outln!(
                    "job {job} {} for uid {uid}: {} ranks, {} free nodes, collisions {}",
                    if r["created"] == true {
                        "registered"
                    } else {
                        "was already registered with this map"
                    },
                    r["ranks"],
                    r["free"],
                    r["collisions"]
                );
            }
        }
        Cmd::Show { job, output } => {
            let r = c.show(*job)?;
            if let Some(path) = output {
                let doc = serde_json::to_string_pretty(&r["map"])?;
                std::fs::write(path, doc + "\n")
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
            if cli.json {
                print_json(&r);
            } else {
                let m = &r["map"];
                outln!(
                    "job {job} (uid {}): box {} compute {} spares {} method {} pattern {}",
                    r["uid"],
                    shape(&m["box"]),
                    shape(&m["compute"]),
                    m["spares"].as_str().unwrap_or("?"),
                    m["method"].as_str().unwrap_or("?"),
                    m["pattern"].as_str().unwrap_or("?")
                );
                let failed: Vec<&str> = r["failed"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if let Some(at) = r["released_at"].as_i64() {
                    outln!(
                        "released {} (its map and failures as they were then)",
                        release_time(at)
                    );
                }
                outln!(
                    "collisions {}, failed nodes: {}{}",
                    r["collisions"],
                    if failed.is_empty() {
                        "none".to_string()
                    } else {
                        failed.join(" ")
                    },
                    if r["lost"] == true { ", JOB LOST" } else { "" }
                );
                // Step 0: nodes dead before the job started (a box placed with unusable
                // nodes), substituted before rank 0 ran.
                let at_start: Vec<&str> = r["history"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .take_while(|h| h["step"] == 0)
                    .filter_map(|h| h["node"].as_str())
                    .collect();
                if !at_start.is_empty() {
                    outln!("failed at start: {}", at_start.join(", "));
                }
                // Each re-map after the history record it followed (`after_step` counts the
                // records before it, substitutions at start included).
                let remaps: Vec<&Value> = r["remaps"].as_array().into_iter().flatten().collect();
                let remaps_after = |records: u64| {
                    remaps
                        .iter()
                        .filter(move |x| x["after_step"].as_u64() == Some(records))
                        .for_each(|x| out(&spares_client::remap_text(x)))
                };
                remaps_after(0);
                for (i, h) in r["history"].as_array().into_iter().flatten().enumerate() {
                    let extra = if h["step"] == 0 { "at start" } else { "" };
                    out(&FailureText::from_record(h).text(extra));
                    remaps_after(i as u64 + 1);
                }
                if let Some(path) = output {
                    outln!("map written to {}", path.display());
                }
            }
        }
        Cmd::Map {
            job,
            hostfile,
            output,
        } => {
            let r = c.show(*job)?;
            let text = if *hostfile {
                let doc = MapDocument::from_json(&r["map"].to_string())
                    .map_err(|e| format!("job {job}: sparesd's map: {e}"))?;
                let (map, meta) = doc
                    .into_map()
                    .map_err(|e| format!("job {job}: sparesd's map: {e}"))?;
                let hosts = topology::placement::rank_hosts(&map, &meta).ok_or_else(|| {
                    format!("job {job}: the map has no host names, so no hostfile (it was registered from a plan without --topology)")
                })?;
                hosts.iter().map(|h| format!("{h}\n")).collect::<String>()
            } else {
                serde_json::to_string_pretty(&r["map"])? + "\n"
            };
            match output {
                Some(path) => std::fs::write(path, text)
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?,
                None => out(&text),
            }
            if r["lost"] == true {
                eprintln!("sparesctl: job {job} is lost: a rank sits on a dead node");
            }
        }
        Cmd::Fail { job, nodes } => {
            for node in nodes {
                let r = c.fail(*job, node)?;
                if r["lost"] == Value::Bool(true) {
                    lost = true;
                }
                if cli.json {
                    print_json(&r);
                } else {
                    out(&FailureText::from_record(&r).text(""));
                }
            }
        }
        Cmd::Remap {
            job,
            max_moves,
            output,
        } => {
            let r = c.remap(*job, *max_moves)?;
            if let Some(path) = output {
                let doc = serde_json::to_string_pretty(&r["map"])?;
                std::fs::write(path, doc + "\n")
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
            if cli.json {
                print_json(&r);
            } else {
                out(&spares_client::remap_text(&r));
                if r["capped"] == true {
                    outln!("(the budget asked for was capped by sparesd's [remap] settings)");
                }
                if let Some(path) = output {
                    outln!("map written to {}", path.display());
                }
            }
        }
        Cmd::NodeDown { nodes } => {
            let r = c.node_down(nodes)?;
            if cli.json {
                print_json(&r);
            } else {
                for x in r["results"].as_array().into_iter().flatten() {
                    outln!("job {}:", x["job_id"]);
                    out(&FailureText::from_record(x).text(""));
                }
                let un = r["unmatched"].as_str().unwrap_or("");
                if !un.is_empty() {
                    outln!("in no registered job: {un}");
                }
            }
        }
        Cmd::List { noheader, .. } => {
            let r = c.list()?;
            if cli.json {
                print_json(&r);
            } else {
                if !noheader {
                    outln!(
                        "{:>10} {:>6} {:<10} {:<8} {:<8} {:>7} {:>6} {:>8} {:>10}",
                        "job",
                        "uid",
                        "box",
                        "spares",
                        "method",
                        "ranks",
                        "free",
                        "failures",
                        "collisions"
                    );
                }
                for j in r["jobs"].as_array().into_iter().flatten() {
                    outln!(
                        "{:>10} {:>6} {:<10} {:<8} {:<8} {:>7} {:>6} {:>8} {:>10}{}",
                        j["job_id"].to_string(),
                        j["uid"].to_string(),
                        j["box"].as_str().unwrap_or("?"),
                        j["spares"].as_str().unwrap_or("?"),
                        j["method"].as_str().unwrap_or("?"),
                        j["ranks"].to_string(),
                        j["free"].to_string(),
                        j["failures"].to_string(),
                        j["collisions"].to_string(),
                        if j["lost"] == true { "  LOST" } else { "" }
                    );
                }
            }
        }
        Cmd::History {
            since, noheader, ..
        } => {
            let from = since.map_or(0, |s| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
                    .saturating_sub(s)
            });
            let r = c.history(from)?;
            if cli.json {
                print_json(&r);
            } else {
                if !noheader {
                    outln!(
                        "{:>10} {:>6} {:<20} {:<10} {:<8} {:>8} {:>10}",
                        "job",
                        "uid",
                        "released",
                        "box",
                        "spares",
                        "failures",
                        "collisions"
                    );
                }
                for j in r["jobs"].as_array().into_iter().flatten() {
                    outln!(
                        "{:>10} {:>6} {:<20} {:<10} {:<8} {:>8} {:>10}{}",
                        j["job_id"].to_string(),
                        j["uid"].to_string(),
                        release_time(j["released_at"].as_i64().unwrap_or(0)),
                        j["box"].as_str().unwrap_or("?"),
                        j["spares"].as_str().unwrap_or("?"),
                        j["failures"].to_string(),
                        j["collisions"].to_string(),
                        if j["lost"] == true { "  LOST" } else { "" }
                    );
                }
                if r["truncated"] == true {
                    eprintln!("sparesctl: only the newest jobs are listed; narrow with --since");
                }
            }
        }
        Cmd::Release { job } => match c.release(*job) {
            Ok(r) if cli.json => print_json(&r),
            Ok(_) => outln!("job {job} released"),
            // Releasing twice (the epilog of every node, a reconciled job) leaves the same
            // state as releasing once.
            Err(e) if e.code() == Some("unknown_job") => {
                eprintln!("sparesctl: job {job} is not registered (already released?)")
            }
            Err(e) => return Err(e.into()),
        },
        Cmd::Bench { .. } => unreachable!("handled above"),
    }
    Ok(if lost { Done::JobLost } else { Done::Ok })
}

/// `--since`: seconds, or a number with `s`, `m`, `h` or `d`.
fn parse_duration(text: &str) -> std::result::Result<u64, String> {
    let (digits, unit) = match text.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&text[..i], c),
        _ => (text, 's'),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a duration (e.g. 3600, 90m, 12h, 2d)"))?;
    let scale = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(format!("'{text}': the unit is s, m, h or d")),
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("'{text}' is too long a duration"))
}

/// A release time (Unix seconds) as RFC 3339 in UTC.
fn release_time(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_else(|_| format!("at Unix time {secs}"))
}

fn shape(v: &Value) -> String {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join("x")
        })
        .unwrap_or_else(|| "?".into())
}

/// Text that ends in its newline, on stdout (a closed pipe ends the program quietly).
fn out(text: &str) {
    use std::io::Write as _;
    if let Err(e) = std::io::stdout().lock().write_all(text.as_bytes()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
    }
}

/// Percentile of sorted latencies.
fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64
}

fn report(what: &str, mut lat_ns: Vec<u64>, elapsed: Duration, as_json: bool) {
    lat_ns.sort_unstable();
    let n = lat_ns.len();
    let rate = n as f64 / elapsed.as_secs_f64();
    let (p50, p99, max) = (
        pct(&lat_ns, 0.50) / 1e3,
        pct(&lat_ns, 0.99) / 1e3,
        lat_ns.last().copied().unwrap_or(0) as f64 / 1e3,
    );
    if as_json {
        outln!(
            "{}",
            serde_json::json!({"what": what, "requests": n, "seconds": elapsed.as_secs_f64(),
                "per_second": rate, "p50_us": p50, "p99_us": p99, "max_us": max})
        );
    } else {
        outln!(
            "{what}: {n} requests in {:.2} s = {rate:.0}/s; latency p50 {p50:.1} us, p99 {p99:.1} us, max {max:.1} us",
            elapsed.as_secs_f64()
        );
    }
}

/// A failure-free map document of a box with a spare shape, optionally with host names.
fn bench_doc(box_spec: &str, spares: &str, hosts: bool) -> Result<MapDocument> {
    let extents = parse_shape(box_spec)?;
    let q = extents.len();
    let shape = SpareShape::parse(spares)?;
    let plan = Plan::for_box(&extents, Some(&shape))?;
    let map = SpareMap::from_plan(&plan, &vec![false; q])?;
    let n = map.grid().len();
    let meta = MapMeta {
        topology: Some("bench".into()),
        origin: vec![0; q],
        spares: plan.spares.clone(),
        method: Method::hybrid(q),
        pattern: Pattern::star(q),
        periodic: false,
        hosts: hosts.then(|| (0..n).map(|i| format!("b{i:06}")).collect()),
    };
    Ok(MapDocument::new(&map, &meta))
}

const BENCH_JOB: u32 = 4_000_000_000;

fn bench(what: &Bench, socket: &Path, as_json: bool) -> Result<()> {
    match what {
        Bench::Attack {
            attacker_uid,
            attacker_box,
            root_box,
            requests,
            flooders,
            holders,
            tricklers,
            seed,
        } => {
            let args = attack_bench::AttackArgs {
                attacker_uid: *attacker_uid,
                attacker_box,
                root_box,
                requests: *requests,
                flooders: *flooders,
                holders: *holders,
                tricklers: *tricklers,
                seed: *seed,
            };
            attack_bench::run(socket, &args, as_json)?;
        }
        Bench::Hostile {
            job,
            flooders,
            holders,
            tricklers,
        } => attack_bench::hostile(socket, *job, *flooders, *holders, *tricklers)?,
        Bench::Queries {
            clients,
            seconds,
            kind,
            r#box,
        } => {
            let line = match kind {
                QueryKind::Show => {
                    let doc = bench_doc(r#box, "3D(1,1)", false)?;
                    let mut c = Client::connect(socket)?;
                    let _ = c.release(BENCH_JOB);
                    c.register(BENCH_JOB, 0, &doc)?;
                    format!("{{\"version\":1,\"kind\":\"show\",\"job_id\":{BENCH_JOB}}}")
                }
                QueryKind::Health => "{\"version\":1,\"kind\":\"health\"}".to_string(),
                QueryKind::List => "{\"version\":1,\"kind\":\"list\"}".to_string(),
            };
            let (lat, elapsed) = run_clients(
                socket,
                *clients,
                |_, c, deadline, lat| {
                    while Instant::now() < deadline {
                        let t = Instant::now();
                        let r = c.call_raw(&line)?;
                        if !r.contains("\"ok\":true") {
                            return Err(format!("query refused: {r}").into());
                        }
                        lat.push(t.elapsed().as_nanos() as u64);
                    }
                    Ok(())
                },
                Some(Duration::from_secs_f64(*seconds)),
            )?;
            if matches!(kind, QueryKind::Show) {
                Client::connect(socket)?.release(BENCH_JOB)?;
            }
            let name = match kind {
                QueryKind::Show => format!("show ({} box)", r#box),
                QueryKind::Health => "health".into(),
                QueryKind::List => "list".into(),
            };
            report(&format!("{name}, {clients} clients"), lat, elapsed, as_json);
        }
        Bench::Failures {
            jobs,
            per_job,
            clients,
            r#box,
            spares,
            seed,
        } => {
            let doc = bench_doc(r#box, spares, false)?;
            let n = doc.box_extents.iter().product::<u32>();
            let dims = doc.box_extents.clone();
            let mut c = Client::connect(socket)?;
            let t = Instant::now();
            for j in 0..*jobs {
                let _ = c.release(BENCH_JOB + j);
                c.register(BENCH_JOB + j, 0, &doc)?;
            }
            let reg = t.elapsed();
            if !as_json {
                outln!(
                    "registered {jobs} {} job(s) in {:.3} s",
                    r#box,
                    reg.as_secs_f64()
                );
            }
            let next = AtomicU64::new(0);
            let total = u64::from(*jobs) * u64::from(*per_job);
            let (lat, elapsed) = run_clients(
                socket,
                *clients,
                |i, c, _, lat| {
                    let mut rng =
                        rand_chacha::ChaCha8Rng::seed_from_u64(seed.wrapping_add(i as u64));
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= total {
                            return Ok(());
                        }
                        let job = BENCH_JOB + (k % u64::from(*jobs)) as u32;
                        // Random nodes may repeat: a repeated report is answered from the history,
                        // as a runtime's retry would be.
                        let node = rng.gen_range(0..n);
                        let mut c0 = node;
                        let coord: Vec<u32> = dims
                            .iter()
                            .map(|&e| {
                                let v = c0 % e;
                                c0 /= e;
                                v
                            })
                            .collect();
                        let line = format!(
                            "{{\"version\":1,\"kind\":\"fail\",\"job_id\":{job},\"node\":\"{}\"}}",
                            format_coord(&coord)
                        );
                        let t = Instant::now();
                        let r = c.call_raw(&line)?;
                        if !r.contains("\"ok\":true") {
                            return Err(format!(
                                "failure report refused: {}",
                                &r[..r.len().min(300)]
                            )
                            .into());
                        }
                        lat.push(t.elapsed().as_nanos() as u64);
                    }
                },
                None,
            )?;
            let mut c = Client::connect(socket)?;
            for j in 0..*jobs {
                c.release(BENCH_JOB + j)?;
            }
            report(
                &format!("fail ({} box, {spares}), {clients} clients", r#box),
                lat,
                elapsed,
                as_json,
            );
        }
        Bench::Decision {
            r#box,
            spares,
            repeat,
            seed,
        } => {
            let doc = bench_doc(r#box, spares, false)?;
            let (map, meta) = doc.into_map()?;
            let q = map.grid().dims();
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(*seed);
            let busy: Vec<u32> = (0..map.grid().len())
                .filter(|&n| matches!(map.state(n), NodeState::Busy(_)))
                .collect();
            let mut methods: Vec<String> = vec!["0D".into(), "1D".into()];
            if q >= 2 {
                methods.push(format!("{q}D"));
            }
            methods.push("hybrid".into());
            for m in methods {
                let method = Method::parse(&m, q)?;
                let mut times = Vec::with_capacity(*repeat);
                let mut moved = 0usize;
                for _ in 0..*repeat {
                    let f = busy[rng.gen_range(0..busy.len())];
                    let mut copy = map.clone();
                    let t = Instant::now();
                    let out = fail(&mut copy, f, &method)?;
                    times.push(t.elapsed().as_nanos() as u64);
                    moved += out.moves().len();
                }
                times.sort_unstable();
                let (p50, max) = (
                    pct(&times, 0.5) / 1e3,
                    *times.last().unwrap_or(&0) as f64 / 1e3,
                );
                let avg_moves = moved as f64 / *repeat as f64;
                if as_json {
                    outln!(
                        "{}",
                        serde_json::json!({"what": "decision", "box": r#box, "spares": spares,
                            "method": m, "failures": repeat, "p50_us": p50, "max_us": max,
                            "avg_moves": avg_moves})
                    );
                } else {
                    outln!(
                        "decision {} {spares} {m:<7}: p50 {p50:>9.1} us, max {max:>9.1} us over {repeat} failures ({avg_moves:.0} moves on average)",
                        r#box
                    );
                }
            }
            // What the daemon adds to a decision: the collisions of the new map (all routes)
            // and its JSON document.
            let t = Instant::now();
            let doc = MapDocument::new(&map, &meta);
            let traffic = t.elapsed();
            let t = Instant::now();
            let text = serde_json::to_string(&doc)?;
            let json = t.elapsed();
            if as_json {
                outln!(
                    "{}",
                    serde_json::json!({"what": "map_document", "box": r#box, "traffic_us": traffic.as_secs_f64() * 1e6,
                        "json_us": json.as_secs_f64() * 1e6, "json_bytes": text.len()})
                );
            } else {
                outln!(
                    "map document {}: traffic (collisions) {:.1} ms, JSON {:.1} ms for {} bytes",
                    r#box,
                    traffic.as_secs_f64() * 1e3,
                    json.as_secs_f64() * 1e3,
                    text.len()
                );
            }
        }
    }
    Ok(())
}

type Work<'a> = dyn Fn(usize, &mut Client, Instant, &mut Vec<u64>) -> Result<()> + Sync + 'a;

/// Runs `clients` threads, one connection each, started together; returns every latency and
/// the wall time.
fn run_clients(
    socket: &Path,
    clients: usize,
    work: impl Fn(usize, &mut Client, Instant, &mut Vec<u64>) -> Result<()> + Sync,
    duration: Option<Duration>,
) -> Result<(Vec<u64>, Duration)> {
    let work: &Work = &work;
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut conns = Vec::new();
    for _ in 0..clients {
        conns.push(Client::connect(socket)?);
    }
    let (lat, elapsed) = std::thread::scope(|s| -> Result<(Vec<u64>, Duration)> {
        let mut handles = Vec::new();
        let start_at = Arc::new(std::sync::Mutex::new(None::<Instant>));
        for (i, mut c) in conns.into_iter().enumerate() {
            let b = Arc::clone(&barrier);
            let start_at = Arc::clone(&start_at);
            handles.push(s.spawn(move || -> Result<Vec<u64>> {
                let mut lat = Vec::with_capacity(1 << 16);
                b.wait();
                let start = start_at.lock().unwrap().expect("set before the barrier");
                let deadline = start + duration.unwrap_or(Duration::from_secs(3600));
                work(i, &mut c, deadline, &mut lat)?;
                Ok(lat)
            }));
        }
        *start_at.lock().unwrap() = Some(Instant::now());
        let t0 = Instant::now();
        barrier.wait();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| "a bench client panicked")??);
        }
        Ok((all, t0.elapsed()))
    })?;
    Ok((lat, elapsed))
}
