//! spares-run: starts a program's ranks on the job's current spare map, and when the step fails
//! because a node died, gets the substitution from sparesd (reporting the node itself, or
//! finding it already reported by the Slurm node-down trigger), prints the moves, and starts the
//! ranks again on the new map from the last complete checkpoint. Gives up when no spare is left.
//!
//! Called from a job script of a job with spares:
//!
//! ```sh
//! spares-run -- spares-stencil --iters 200 --ckpt-every 20
//! ```
//!
//! Every placement is sparesd's (the model in `topology`); this program never slides itself.
//! At a relaunch it may also ask sparesd to re-map the ranks for fewer collisions
//! (`--remap`, or sparesd's `[remap] at_relaunch` policy).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{CommandFactory, Parser};
use serde_json::Value;
use spares_client::Client;
use spares_stencil::{ckpt, mapinfo};
use topology::report::{moves_text, FailureText};
use topology::MapDocument;

#[derive(Parser)]
#[command(
    name = "spares-run",
    version,
    about = "Run a program's ranks on the job's spare map; after a node failure, restart them on the map sparesd chose, from the last checkpoint"
)]
struct Args {
    /// sparesd's socket (default: $SPARES_SOCKET, else /run/sparesd/sparesd.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// The Slurm job id (default: $SLURM_JOB_ID).
    #[arg(long, env = "SLURM_JOB_ID")]
    job: u32,
    /// Working directory: maps, hostfiles, rendezvous directories, checkpoints
    /// (default: ./spares-run-<job>).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Checkpoint directory (default: <dir>/ckpt); given to the ranks as SPARES_RUN_CKPT_DIR.
    #[arg(long)]
    ckpt_dir: Option<PathBuf>,
    /// After a failed step, how long to wait for Slurm or sparesd to show a dead node of the
    /// job (seconds).
    #[arg(long, default_value_t = 90)]
    detect_timeout: u64,
    /// How long to keep trying when sparesd cannot be reached (seconds).
    #[arg(long, default_value_t = 60)]
    daemon_timeout: u64,
    /// Launches at most (the first one included).
    #[arg(long, default_value_t = 16)]
    max_launches: u32,
    /// The srun program.
    #[arg(long, default_value = "srun")]
    srun: String,
    /// Re-map the ranks for fewer collisions at each relaunch after a failure: `auto` does
    /// what sparesd's `[remap] at_relaunch` says, `always` and `never` override it.
    #[arg(long, value_enum, default_value_t = RemapWhen::Auto)]
    remap: RemapWhen,
    /// Most ranks a relaunch's re-map may move (default: sparesd's `[remap]
    /// relaunch_max_moves`; sparesd caps it at its `max_moves`).
    #[arg(long, value_name = "K")]
    remap_max_moves: Option<u32>,
    /// The program and its arguments, started once per rank.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

/// When to re-map at a relaunch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum RemapWhen {
    /// As sparesd's policy says (`health`'s `remap.at_relaunch`).
    Auto,
    /// At every relaunch after a failure.
    Always,
    /// Never.
    Never,
}

/// What `man spares-run` says beyond `--help` (`spares-run generate man DIR`).
const MAN: manpage::Extra = manpage::Extra {
    section: "1",
    examples: &[
        (
            "In a job script of a job with spares: run the stencil's ranks on the map, restart them on the spares after a node failure.",
            "spares-run -- spares-stencil --iters 200 --ckpt-every 20",
        ),
        (
            "The same, waiting up to 2 minutes for Slurm to see a dead node, at most 8 launches.",
            "spares-run --detect-timeout 120 --max-launches 8 -- ./my-solver --restart",
        ),
    ],
    exit_status: &[
        ("0", "The program's step ended successfully."),
        ("1", "An error: arguments, files, sparesd unreachable for --daemon-timeout, srun missing."),
        (
            "2",
            "The step failed but no node holding a rank went down within --detect-timeout: not a node failure.",
        ),
        ("3", "No spare left: the job cannot go on (its last checkpoint stays)."),
        ("4", "--max-launches launches failed."),
    ],
};

fn main() {
    manpage::generate_if_asked(Args::command, &MAN);
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("spares-run: error: {e:#}");
            std::process::exit(match e.downcast_ref::<GiveUp>() {
                Some(g) => g.code,
                None => 1,
            });
        }
    }
}

/// A reason to stop with a particular exit status.
#[derive(Debug)]
struct GiveUp {
    code: i32,
    message: String,
}
impl std::fmt::Display for GiveUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
impl std::error::Error for GiveUp {}

/// When this launcher started, for the time stamps of its messages.
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

macro_rules! say {
    ($($t:tt)*) => {
        println!(
            "spares-run: [{:6.1}s] {}",
            START.get_or_init(Instant::now).elapsed().as_secs_f64(),
            format!($($t)*)
        )
    };
}

/// sparesd, reached afresh for each request: the daemon may restart while the job runs.
struct Daemon {
    socket: PathBuf,
    timeout: Duration,
}

impl Daemon {
    fn call<T>(&self, f: impl Fn(&mut Client) -> Result<T, spares_client::Error>) -> Result<T> {
        let deadline = Instant::now() + self.timeout;
        let mut warned = false;
        loop {
            let r = Client::connect(&self.socket).and_then(|mut c| {
                c.set_timeout(Some(Duration::from_secs(30)))?;
                f(&mut c)
            });
            match r {
                Ok(v) => return Ok(v),
                Err(e @ spares_client::Error::Daemon { .. }) => return Err(e.into()),
                Err(e) if Instant::now() < deadline => {
                    if !warned {
                        say!(
                            "sparesd not reachable ({e}); retrying for up to {} s",
                            self.timeout.as_secs()
                        );
                        warned = true;
                    }
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

fn map_of(reply: &Value) -> Result<MapDocument> {
    serde_json::from_value(reply["map"].clone()).context("sparesd's reply carries no valid map")
}

fn run() -> Result<()> {
    let a = Args::parse();
    START.get_or_init(Instant::now);
    let daemon = Daemon {
        socket: a
            .socket
            .clone()
            .unwrap_or_else(spares_client::default_socket),
        timeout: Duration::from_secs(a.daemon_timeout),
    };
    let job = a.job;
    let dir = a
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("spares-run-{job}")));
    let ckpt_dir = a.ckpt_dir.clone().unwrap_or_else(|| dir.join("ckpt"));
    fs::create_dir_all(&ckpt_dir).with_context(|| format!("create {}", ckpt_dir.display()))?;

    let (mut doc, mut reported) = current_map(&daemon, job)?;
    let layout = mapinfo::layout(&doc)?;
    let ranks = layout.size();
    say!(
        "job {job}: {ranks} ranks on a {} grid in a {} box, spares {}, method {}; sparesd at {}",
        dims(&doc.compute),
        dims(&doc.box_extents),
        doc.spares,
        doc.method,
        daemon.socket.display()
    );
    for launch in 0..a.max_launches {
        let hosts = mapinfo::rank_hosts(&doc)?;
        let map_file = dir.join(format!("map-{launch}.json"));
        let host_file = dir.join(format!("hosts-{launch}"));
        let rendezvous = dir.join(format!("rendezvous-{launch}"));
        fs::write(&map_file, doc.to_json()).context("write the map")?;
        fs::write(&host_file, hosts.join("\n") + "\n").context("write the hostfile")?;
        let _ = fs::remove_dir_all(&rendezvous);
        fs::create_dir_all(&rendezvous).context("create the rendezvous directory")?;
        let restart = ckpt::latest_complete(&ckpt_dir, ranks)?.unwrap_or(0);
        say!(
            "launch {launch}: {ranks} ranks on {} from {}",
            topology::hostlist::compress(&hosts),
            if restart == 0 {
                "the start".to_string()
            } else {
                format!("the checkpoint of iteration {restart}")
            }
        );
        let mut srun = Command::new(&a.srun)
            .arg(format!("--ntasks={ranks}"))
            .arg("--distribution=arbitrary")
            .arg(format!("--nodelist={}", hosts.join(",")))
            // One dead rank ends the step at once instead of leaving the others waiting.
            .arg("--kill-on-bad-exit=1")
            // The failed step keeps its CPUs until slurmctld hears from every node, which for
            // a dead node takes up to a minute; the new step must not wait for that.
            .arg("--overlap")
            .args(&a.command)
            .env("SLURM_HOSTFILE", &host_file)
            .env("SPARES_RUN_MAP", abs(&map_file))
            .env("SPARES_RUN_RENDEZVOUS", abs(&rendezvous))
            .env("SPARES_RUN_CKPT_DIR", abs(&ckpt_dir))
            .env("SPARES_RUN_RESTART", restart.to_string())
            .env("SPARES_RUN_ATTEMPT", launch.to_string())
            .spawn()
            .with_context(|| format!("cannot run {}", a.srun))?;
        let status = wait_for_step(&mut srun, &daemon, job, &hosts, reported)?;
        if status.success() {
            say!(
                "job {job} finished: {} node failure(s), {} launch(es)",
                doc.failed.len(),
                launch + 1
            );
            return Ok(());
        }
        say!("launch {launch} failed ({status}); looking for a dead node of the job");
        doc = handle_failures(&daemon, job, &doc, &mut reported, a.detect_timeout)?;
        if let Some(remapped) = remap_at_relaunch(&daemon, job, &a, &ckpt_dir, ranks) {
            doc = remapped;
        }
    }
    Err(GiveUp {
        code: 4,
        message: format!("{} launches failed; giving up", a.max_launches),
    }
    .into())
}

/// Whether to re-map at a relaunch, and with which move budget (`None`: the daemon's):
/// `--remap` first, else sparesd's policy from a `health` reply.
fn remap_wanted(when: RemapWhen, max_moves: Option<u32>, health: &Value) -> Option<Option<u32>> {
    let policy = &health["remap"];
    let wanted = match when {
        RemapWhen::Always => true,
        RemapWhen::Never => false,
        RemapWhen::Auto => policy["at_relaunch"].as_bool().unwrap_or(false),
    };
    let policy_moves = policy["relaunch_max_moves"]
        .as_u64()
        .map(|k| u32::try_from(k).unwrap_or(u32::MAX));
    wanted.then_some(max_moves.or(policy_moves))
}

/// Asks sparesd for a re-map of the job's current map before a relaunch, when wanted; prints
/// it and returns the new map. A refusal leaves the slid map in force (the job goes on).
///
/// Checkpoints need no moving: every rank writes `rank-<r>.<iteration>.bin` in one directory
/// that every node of the job reads (the launcher's `--ckpt-dir`, on a shared file system),
/// keyed by rank, not by node, so a rank re-mapped to another node reads its own file there.
fn remap_at_relaunch(
    daemon: &Daemon,
    job: u32,
    a: &Args,
    ckpt_dir: &Path,
    ranks: u32,
) -> Option<MapDocument> {
    let health = match a.remap {
        RemapWhen::Never => Value::Null,
        _ => daemon.call(|c| c.health()).unwrap_or(Value::Null),
    };
    let max_moves = remap_wanted(a.remap, a.remap_max_moves, &health)?;
    let reply = match daemon.call(|c| c.remap(job, max_moves)) {
        Ok(r) => r,
        Err(e) => {
            say!("re-map refused ({e:#}); relaunching on the slid map");
            return None;
        }
    };
    say!("{}", spares_client::remap_text(&reply).trim_end());
    let restart = ckpt::latest_complete(ckpt_dir, ranks).ok().flatten();
    say!(
        "checkpoints stay in {} (one file per rank, read by rank wherever it runs): {} moved rank(s) read theirs there{}",
        abs(ckpt_dir).display(),
        reply["moved"].as_u64().unwrap_or(0),
        restart.map_or(String::new(), |i| format!(" at iteration {i}"))
    );
    match map_of(&reply) {
        Ok(doc) => Some(doc),
        Err(e) => {
            say!("re-map: {e:#}; relaunching on sparesd's current map");
            daemon
                .call(|c| c.show(job))
                .ok()
                .and_then(|r| map_of(&r).ok())
        }
    }
}

/// Waits for the step of a launch. A node of the launch that dies ends the step only when
/// every other node's slurmstepd has reported: on Slurm 26.05 srun waited a minute more after
/// slurmctld had set the node DOWN. So while the step runs, sparesd is asked every
/// [`POLL`] whether a failure was recorded on a node holding a rank, and if so srun is killed
/// at once (its ranks end on their own: they lose their peer). One attempt per poll: sparesd
/// may be restarting, the step goes on meanwhile.
fn wait_for_step(
    srun: &mut Child,
    daemon: &Daemon,
    job: u32,
    rank_hosts: &[String],
    reported: usize,
) -> Result<ExitStatus> {
    const POLL: Duration = Duration::from_secs(1);
    let mut next_poll = Instant::now() + POLL;
    loop {
        if let Some(status) = srun.try_wait().context("wait for srun")? {
            return Ok(status);
        }
        if Instant::now() >= next_poll {
            next_poll = Instant::now() + POLL;
            if let Some(node) = dead_rank_host(daemon, job, rank_hosts, reported) {
                say!("{node} holds a rank and was reported dead: ending the step");
                // Already exited is fine: the next try_wait returns its status.
                let _ = srun.kill();
                return srun.wait().context("wait for srun");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A node holding a rank among the failures sparesd recorded after the first `reported`.
fn dead_rank_host(
    daemon: &Daemon,
    job: u32,
    rank_hosts: &[String],
    reported: usize,
) -> Option<String> {
    let mut client = Client::connect(&daemon.socket).ok()?;
    client.set_timeout(Some(Duration::from_secs(5))).ok()?;
    let shown = client.show(job).ok()?;
    newly_failed_rank_host(&shown, rank_hosts, reported)
}

/// In a `show` reply, the first failure after the first `reported` that hit a rank host.
fn newly_failed_rank_host(shown: &Value, rank_hosts: &[String], reported: usize) -> Option<String> {
    shown["history"]
        .as_array()?
        .iter()
        .skip(reported)
        .filter_map(|r| r["node"].as_str())
        .find(|n| rank_hosts.iter().any(|h| h == n))
        .map(String::from)
}

/// The ranks start in the job's working directory too, but a path that does not depend on it
/// is plainer in the logs.
fn abs(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    std::env::current_dir()
        .map(|d| d.join(p))
        .unwrap_or_else(|_| p.to_path_buf())
}

fn dims(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join("x")
}

/// The job's current map from sparesd; a job sparesd does not know yet is registered with the
/// map the SPANK plugin wrote (`SLURM_SPARES_MAP`), which only root or the Slurm user may do.
/// Also returns how many substitutions sparesd has recorded for the job.
fn current_map(daemon: &Daemon, job: u32) -> Result<(MapDocument, usize)> {
    match daemon.call(|c| c.show(job)) {
        Ok(r) => Ok((map_of(&r)?, r["history"].as_array().map_or(0, Vec::len))),
        Err(e)
            if e.downcast_ref::<spares_client::Error>()
                .and_then(|e| e.code())
                == Some("unknown_job") =>
        {
            let path = std::env::var_os("SLURM_SPARES_MAP")
                .map(PathBuf::from)
                .ok_or_else(|| anyhow!("job {job} is not registered with sparesd and SLURM_SPARES_MAP is not set (a job without --spares?)"))?;
            let doc = mapinfo::read(&path)?;
            let uid = fs::metadata("/proc/self").map(|m| m.uid()).unwrap_or(0);
            daemon.call(|c| c.register(job, uid, &doc))?;
            say!("job {job} registered with sparesd from {}", path.display());
            Ok((doc, 0))
        }
        Err(e) => Err(e),
    }
}

/// Nodes of `candidates` that Slurm has set DOWN (or FAIL). "Not responding" alone is no
/// death: on a loaded machine a live slurmd misses a ping now and then; slurmctld sets a node
/// DOWN only after SlurmdTimeout without an answer.
fn slurm_dead(candidates: &[String]) -> Result<BTreeSet<String>> {
    if candidates.is_empty() {
        return Ok(BTreeSet::new());
    }
    let out = Command::new("sinfo")
        .args(["-h", "-N", "-o", "%N %t", "-n"])
        .arg(candidates.join(","))
        .output()
        .context("cannot run sinfo")?;
    if !out.status.success() {
        bail!("sinfo: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(dead_in_sinfo(&String::from_utf8_lossy(&out.stdout)))
}

/// The nodes of `sinfo -h -N -o '%N %t'` output in a down or failed state.
fn dead_in_sinfo(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let (node, state) = l.split_once(' ')?;
            let state = state.trim();
            let dead = state.starts_with("down") || state.starts_with("fail");
            dead.then(|| node.to_string())
        })
        .collect()
}

/// Prints one substitution record of sparesd, as sparesctl does, and who reported it (`by`).
fn print_record(r: &Value, by: &str) {
    let text = FailureText::from_record(r);
    say!("{}", text.line(by));
    print!("{}", moves_text(&text.moves));
}

/// After a failed step: waits until a node holding a rank is known dead (reported to sparesd
/// by the node-down trigger, or seen down by Slurm and then reported here), prints every new
/// substitution, and returns the new map.
fn handle_failures(
    daemon: &Daemon,
    job: u32,
    old: &MapDocument,
    reported: &mut usize,
    timeout: u64,
) -> Result<MapDocument> {
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let rank_hosts: BTreeSet<String> = mapinfo::rank_hosts(old)?.into_iter().collect();
    let box_hosts = mapinfo::box_hosts(old);
    loop {
        let shown = daemon.call(|c| c.show(job))?;
        let history = shown["history"].as_array().cloned().unwrap_or_default();
        let known: BTreeSet<String> = history
            .iter()
            .filter_map(|r| r["node"].as_str().map(String::from))
            .collect();
        // Records made since the last look: the trigger's.
        for r in history.iter().skip(*reported) {
            print_record(r, "reported by the Slurm node-down trigger");
        }
        *reported = (*reported).max(history.len());
        let alive: Vec<String> = box_hosts
            .iter()
            .filter(|h| !known.contains(*h))
            .cloned()
            .collect();
        let dead = slurm_dead(&alive)?;
        // Box order, as the trigger's hostlist would give them.
        for node in alive.iter().filter(|h| dead.contains(*h)) {
            let r = daemon.call(|c| c.fail(job, node))?;
            if r["step"].as_u64().unwrap_or(0) as usize > *reported {
                print_record(&r, "reported by spares-run");
                *reported = r["step"].as_u64().unwrap_or(0) as usize;
            }
        }
        let now = daemon.call(|c| c.show(job))?;
        let doc = map_of(&now)?;
        if now["lost"].as_bool().unwrap_or(false) {
            return Err(GiveUp {
                code: 3,
                message: format!(
                    "no spare left: job {job} cannot go on after {} failure(s); its last checkpoint stays in place",
                    doc.failed.len()
                ),
            }
            .into());
        }
        let failed = mapinfo::failed_hosts(&doc)?;
        if failed.iter().any(|h| rank_hosts.contains(h)) {
            let hosts = mapinfo::rank_hosts(&doc)?;
            say!("new map: ranks on {}", topology::hostlist::compress(&hosts));
            return Ok(doc);
        }
        if Instant::now() >= deadline {
            return Err(GiveUp {
                code: 2,
                message: format!(
                    "the step failed but no node holding a rank of job {job} is down after {timeout} s: not a node failure, giving up"
                ),
            }
            .into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_after_the_known_ones_on_a_rank_host_ends_the_step() {
        let shown = serde_json::json!({"history": [
            {"node": "node06"}, {"node": "node30"}, {"node": "node11"}
        ]});
        let hosts = ["node01".to_string(), "node06".into(), "node11".into()];
        // node06 is known already (reported = 1); node30 holds no rank; node11 does.
        assert_eq!(
            newly_failed_rank_host(&shown, &hosts, 1).as_deref(),
            Some("node11")
        );
        assert_eq!(newly_failed_rank_host(&shown, &hosts, 3), None);
        assert_eq!(newly_failed_rank_host(&shown, &hosts[..1], 0), None);
        assert_eq!(
            newly_failed_rank_host(&serde_json::json!({}), &hosts, 0),
            None
        );
    }

    #[test]
    fn the_relaunch_remap_follows_the_flag_then_sparesds_policy() {
        let on = serde_json::json!({"remap": {"at_relaunch": true, "relaunch_max_moves": 50}});
        let off = serde_json::json!({"remap": {"at_relaunch": false, "relaunch_max_moves": 50}});
        let old_daemon = serde_json::json!({"status": "ok"});
        assert_eq!(remap_wanted(RemapWhen::Auto, None, &on), Some(Some(50)));
        assert_eq!(remap_wanted(RemapWhen::Auto, Some(7), &on), Some(Some(7)));
        assert_eq!(remap_wanted(RemapWhen::Auto, None, &off), None);
        assert_eq!(remap_wanted(RemapWhen::Auto, None, &old_daemon), None);
        assert_eq!(remap_wanted(RemapWhen::Always, None, &off), Some(Some(50)));
        assert_eq!(
            remap_wanted(RemapWhen::Always, None, &old_daemon),
            Some(None)
        );
        assert_eq!(remap_wanted(RemapWhen::Never, Some(7), &on), None);
    }

    #[test]
    fn only_down_or_failed_nodes_are_dead() {
        let d = super::dead_in_sinfo(
            "node01 alloc\nnode06 down*\nnode07 alloc*\nnode08 idle*\nnode09 fail\nnode10 drain\n",
        );
        assert_eq!(d.into_iter().collect::<Vec<_>>(), ["node06", "node09"]);
    }
}
