//! spares-halo-bench: the seeds' measurement. For a spare map (say one of the worst maps from
//! `spares simulate --keep-worst`), times the stencil's halo exchange (concurrent sends and
//! receives of `--size` bytes with every logical neighbour), a barrier and an allreduce of
//! `--allreduce` bytes, with one rank per compute node of the map; with `--baseline`, does the
//! same on the failure-free map and prints the slowdown ratios. Run it inside an allocation
//! that holds every node of both maps; it starts its ranks with srun (docs/measure.md).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use spares_stencil::comm::Comm;
use spares_stencil::{mapinfo, parse_size};

#[derive(Parser)]
#[command(
    version,
    about = "Time halo exchange, barrier and allreduce on a spare map, and the slowdown against the failure-free map"
)]
struct Args {
    #[command(subcommand)]
    rank: Option<RankCmd>,
    /// The map to measure (a map document: spares plan/substitute -o, a worst map of spares simulate).
    #[arg(long)]
    map: Option<PathBuf>,
    /// The failure-free map to compare with.
    #[arg(long)]
    baseline: Option<PathBuf>,
    #[command(flatten)]
    sizes: Sizes,
    /// Working directory shared by the nodes (hostfiles, rendezvous, results).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The srun program.
    #[arg(long, default_value = "srun")]
    srun: String,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Clone)]
struct Sizes {
    /// Bytes sent to each neighbour per halo exchange.
    #[arg(long, default_value = "4MiB", value_parser = parse_size_arg)]
    size: usize,
    /// Bytes of the allreduce (f64 sum).
    #[arg(long, default_value = "64KiB", value_parser = parse_size_arg)]
    allreduce: usize,
    /// Timed repetitions of each operation.
    #[arg(long, default_value_t = 20)]
    iters: u32,
}

#[derive(Subcommand)]
enum RankCmd {
    /// One rank (started by srun; not for people).
    #[command(hide = true)]
    Rank {
        #[arg(long)]
        map: PathBuf,
        #[arg(long)]
        rendezvous: PathBuf,
        #[arg(long)]
        out: PathBuf,
        #[command(flatten)]
        sizes: Sizes,
    },
}

fn parse_size_arg(s: &str) -> Result<usize, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// What one measurement gives: seconds per operation of the slowest rank.
#[derive(Serialize, Deserialize, Clone, Debug)]
struct Times {
    ranks: u32,
    hosts: String,
    collisions: u32,
    halo_s: f64,
    barrier_s: f64,
    allreduce_s: f64,
}

fn main() {
    if let Err(e) = run() {
        let rank = std::env::var("SLURM_PROCID")
            .map(|r| format!(" rank {r}"))
            .unwrap_or_default();
        eprintln!("spares-halo-bench{rank}: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let a = Args::parse();
    if let Some(RankCmd::Rank {
        map,
        rendezvous,
        out,
        sizes,
    }) = &a.rank
    {
        return rank_main(map, rendezvous, out, sizes);
    }
    let map = a.map.clone().context("--map is required")?;
    let dir = a.dir.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "spares-halo-bench-{}",
            std::env::var("SLURM_JOB_ID").unwrap_or_else(|_| std::process::id().to_string())
        ))
    });
    fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let dir = fs::canonicalize(&dir)?;
    let s = &a.sizes;
    let mut results = Vec::new();
    for (label, path) in [("baseline", a.baseline.as_ref()), ("map", Some(&map))] {
        let Some(path) = path else { continue };
        let t = measure(&a, label, path, &dir)?;
        if !a.json {
            println!(
                "{label:<8} {}: {} ranks on {}, collisions {}",
                path.display(),
                t.ranks,
                t.hosts,
                t.collisions
            );
            println!(
                "         halo {} x neighbours {:>9.3} ms   barrier {:>7.3} ms   allreduce {} {:>8.3} ms",
                human(s.size),
                t.halo_s * 1e3,
                t.barrier_s * 1e3,
                human(s.allreduce),
                t.allreduce_s * 1e3
            );
        }
        results.push((label, t));
    }
    let ratio = match results.as_slice() {
        [(_, b), (_, m)] => Some([
            m.halo_s / b.halo_s,
            m.barrier_s / b.barrier_s,
            m.allreduce_s / b.allreduce_s,
        ]),
        _ => None,
    };
    if a.json {
        let mut v = serde_json::Map::new();
        for (label, t) in &results {
            v.insert(label.to_string(), serde_json::to_value(t)?);
        }
        if let Some(r) = ratio {
            v.insert(
                "slowdown".into(),
                serde_json::json!({"halo": r[0], "barrier": r[1], "allreduce": r[2]}),
            );
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else if let Some(r) = ratio {
        println!(
            "slowdown (map / baseline): halo {:.3}   barrier {:.3}   allreduce {:.3}",
            r[0], r[1], r[2]
        );
    }
    Ok(())
}

fn human(b: usize) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Runs the ranks on one map with srun and reads rank 0's result.
fn measure(a: &Args, label: &str, map: &Path, dir: &Path) -> Result<Times> {
    let doc = mapinfo::read(map)?;
    let hosts = mapinfo::rank_hosts(&doc)?;
    let n = hosts.len();
    let host_file = dir.join(format!("{label}.hosts"));
    let rendezvous = dir.join(format!("{label}.rendezvous"));
    let out = dir.join(format!("{label}.json"));
    fs::write(&host_file, hosts.join("\n") + "\n")?;
    let _ = fs::remove_dir_all(&rendezvous);
    fs::create_dir_all(&rendezvous)?;
    let _ = fs::remove_file(&out);
    let exe = std::env::current_exe().context("own path")?;
    let s = &a.sizes;
    let status = Command::new(&a.srun)
        .arg(format!("--ntasks={n}"))
        .arg("--distribution=arbitrary")
        .arg(format!("--nodelist={}", hosts.join(",")))
        .arg("--kill-on-bad-exit=1")
        .arg("--overlap")
        .arg(exe)
        .arg("rank")
        .arg("--map")
        .arg(fs::canonicalize(map)?)
        .arg("--rendezvous")
        .arg(&rendezvous)
        .arg("--out")
        .arg(&out)
        .args([
            "--size",
            &s.size.to_string(),
            "--allreduce",
            &s.allreduce.to_string(),
        ])
        .args(["--iters", &s.iters.to_string()])
        .env("SLURM_HOSTFILE", &host_file)
        .status()
        .with_context(|| format!("cannot run {}", a.srun))?;
    if !status.success() {
        bail!("the ranks on {} failed ({status})", map.display());
    }
    let mut t: Times = serde_json::from_str(&fs::read_to_string(&out)?)?;
    t.hosts = topology::hostlist::compress(&hosts);
    t.collisions = doc.collisions;
    Ok(t)
}

fn rank_main(map: &Path, rendezvous: &Path, out: &Path, s: &Sizes) -> Result<()> {
    let rank: u32 = std::env::var("SLURM_PROCID")
        .context("SLURM_PROCID: start with srun")?
        .parse()?;
    let size: u32 = std::env::var("SLURM_NTASKS")
        .context("SLURM_NTASKS")?
        .parse()?;
    let doc = mapinfo::read(map)?;
    let layout = mapinfo::layout(&doc)?;
    if layout.size() != size {
        bail!("{size} tasks for a map of {} ranks", layout.size());
    }
    let advertise = fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "127.0.0.1".into());
    let comm = Comm::connect(
        rank,
        size,
        &layout.peers(rank),
        rendezvous,
        "0.0.0.0",
        &advertise,
        Duration::from_secs(60),
    )?;
    let nbs: Vec<u32> = layout.neighbours(rank).iter().map(|n| n.rank).collect();
    let msg = vec![rank as u8; s.size];
    let sends: Vec<(u32, &[u8])> = nbs.iter().map(|&p| (p, msg.as_slice())).collect();
    let iters = s.iters.max(1);

    // One untimed round of each, so that connections and buffers are warm.
    comm.exchange(&sends, &nbs)?;
    let mut v = vec![1.0f64; s.allreduce / 8];
    comm.allreduce_sum(&mut v)?;

    let mut halo = 0.0;
    for _ in 0..iters {
        comm.barrier()?;
        let t = Instant::now();
        comm.exchange(&sends, &nbs)?;
        halo += t.elapsed().as_secs_f64();
    }
    comm.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        comm.barrier()?;
    }
    let barrier = t.elapsed().as_secs_f64();
    comm.barrier()?;
    let t = Instant::now();
    for _ in 0..iters {
        comm.allreduce_sum(&mut v)?;
    }
    let allreduce = t.elapsed().as_secs_f64();

    // The slowest rank sets the pace of a stencil step.
    let mine: Vec<u8> = [halo, barrier, allreduce]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    if let Some(all) = comm.gather(&mine)? {
        let mut worst = [0.0f64; 3];
        for m in &all {
            for (k, w) in worst.iter_mut().enumerate() {
                *w = w.max(f64::from_le_bytes(m[k * 8..k * 8 + 8].try_into()?));
            }
        }
        let t = Times {
            ranks: size,
            hosts: String::new(),
            collisions: 0,
            halo_s: worst[0] / iters as f64,
            barrier_s: worst[1] / iters as f64,
            allreduce_s: worst[2] / iters as f64,
        };
        let tmp = out.with_extension("tmp");
        fs::write(&tmp, serde_json::to_string(&t)?)?;
        fs::rename(&tmp, out)?;
    }
    comm.barrier()?;
    Ok(())
}
