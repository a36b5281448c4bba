//! `spares-free-nodes`: keeps the free-node file of the spares job_submit plugin (format v2,
//! docs/admin.md) from `sinfo` every `--interval` seconds, and moves pinned pending spares
//! jobs off boxes that lost a node (`scontrol update`). Runs as root on the slurmctld host
//! (packaging/systemd/spares-free-nodes.service); SIGTERM or SIGINT end it after the pass
//! under way.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use spares_freenodes::slurm::{self, PendingJob};
use spares_freenodes::{file, mover, Error};
use topology::site_policy::Policy;

#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    /// The site policy job_submit reads (its topology and `free_nodes_file`).
    #[arg(long, env = "SPARES_POLICY", default_value = "/etc/slurm/spares.yaml")]
    policy: PathBuf,
    /// The file to write (default: the policy's `free_nodes_file`).
    #[arg(long)]
    file: Option<PathBuf>,
    /// Seconds between two passes.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=3600))]
    interval: u64,
    /// One pass, then exit (status 1 if it failed).
    #[arg(long)]
    once: bool,
    /// Only write the file; never move pending jobs.
    #[arg(long)]
    no_move: bool,
    /// Longest output read from sinfo or squeue.
    #[arg(long, default_value_t = slurm::DEFAULT_MAX_OUTPUT_BYTES)]
    max_output_bytes: u64,
}

/// What the service keeps between passes.
struct Service {
    args: Args,
    policy: Option<(SystemTime, Policy)>,
    /// When each job was last moved: not again within two periods.
    moved: HashMap<u32, Instant>,
    /// The last "left pending" line logged per job, so it is logged once, not every pass.
    stuck: HashMap<u32, String>,
}

impl Service {
    fn policy(&mut self) -> Result<&Policy, String> {
        let path = &self.args.policy;
        let mtime = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if self.policy.as_ref().map(|(t, _)| *t) != Some(mtime) {
            let p = Policy::load(path).map_err(|e| e.to_string())?;
            log::info!(
                "policy {}: topology {} ({} nodes)",
                path.display(),
                p.topology.name,
                p.topology.grid.len()
            );
            self.policy = Some((mtime, p));
        }
        Ok(&self.policy.as_ref().expect("just loaded").1)
    }

    fn pass(&mut self) -> Result<(), String> {
        let max = self.args.max_output_bytes;
        let sinfo = slurm::run("sinfo", slurm::SINFO_ARGS, max).map_err(|e| e.to_string())?;
        let mut nodes = slurm::parse_sinfo(&sinfo).map_err(|e| e.to_string())?;
        let queue = slurm::run("squeue", slurm::SQUEUE_JOB_ARGS, max).map_err(|e| e.to_string())?;
        let marks =
            slurm::run("squeue", slurm::SQUEUE_MARK_ARGS, max).map_err(|e| e.to_string())?;
        let mut jobs = slurm::parse_squeue(&queue, &marks).map_err(|e| e.to_string())?;
        let no_move = self.args.no_move;
        let period = Duration::from_secs(self.args.interval);
        let explicit_file = self.args.file.clone();
        self.moved.retain(|_, t| t.elapsed() < 2 * period);
        let skip = self.moved.keys().copied().collect();
        let policy = self.policy()?;
        let path = explicit_file
            .or_else(|| policy.free_nodes_file.clone())
            .ok_or_else(|| {
                format!(
                    "{}: no free_nodes_file, and no --file given",
                    policy.path.display()
                )
            })?;
        let topology = policy.topology.clone();
        if !no_move {
            let outcomes = mover::plan(&topology, &nodes, &jobs, &skip);
            self.apply(outcomes, &mut jobs);
        }
        mover::mark_requested(&topology, &mut nodes, &jobs);
        write(&path, &nodes).map_err(|e| e.to_string())
    }

    fn apply(&mut self, outcomes: Vec<mover::Outcome>, jobs: &mut [PendingJob]) {
        for outcome in outcomes {
            match outcome {
                mover::Outcome::Stay { job, why } => {
                    if self.stuck.get(&job) != Some(&why) {
                        log::warn!("{why}");
                        self.stuck.insert(job, why);
                    }
                }
                mover::Outcome::Move(m) => {
                    let args = [
                        "update".to_string(),
                        format!("JobId={}", m.job),
                        format!("ReqNodeList={}", m.to),
                        format!("AdminComment={}", topology::pin_mark::format(&m.to)),
                    ];
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    self.moved.insert(m.job, Instant::now());
                    self.stuck.remove(&m.job);
                    match slurm::run("scontrol", &args, 1 << 16) {
                        Ok(_) => {
                            log::info!(
                                "moved job {} from {} to {}: {}",
                                m.job,
                                m.from,
                                m.to,
                                m.why
                            );
                            if let Some(j) = jobs.iter_mut().find(|j| j.id == m.job) {
                                j.req_nodes = Some(m.to);
                            }
                        }
                        Err(e) => log::warn!("job {}: not moved to {}: {e}", m.job, m.to),
                    }
                }
            }
        }
        // Forget jobs no longer pending.
        self.stuck.retain(|id, _| jobs.iter().any(|j| j.id == *id));
    }
}

fn write(path: &Path, nodes: &BTreeMap<String, slurm::NodeInfo>) -> Result<(), Error> {
    file::write_atomic(path, &file::render(nodes))
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args = Args::parse();
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("spares-free-nodes: cannot handle signal {sig}: {e}");
            std::process::exit(2);
        }
    }
    let once = args.once;
    let interval = Duration::from_secs(args.interval);
    let mut service = Service {
        args,
        policy: None,
        moved: HashMap::new(),
        stuck: HashMap::new(),
    };
    let mut last_error: Option<String> = None;
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        match service.pass() {
            Ok(()) => {
                if last_error.take().is_some() {
                    log::info!("the free-node file is written again");
                }
            }
            Err(e) => {
                if once {
                    eprintln!("spares-free-nodes: {e}");
                    std::process::exit(1);
                }
                // Once per distinct error, not every second; the old file stays.
                if last_error.as_ref() != Some(&e) {
                    log::error!("{e}; the old file stays");
                    last_error = Some(e);
                }
            }
        }
        if once {
            return;
        }
        // Short sleeps, so SIGTERM ends the service within a tenth of a second.
        while started.elapsed() < interval && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100).min(interval));
        }
    }
    log::info!("stopped by signal");
}
