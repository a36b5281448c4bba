//! spares-stencil: one rank of the 3D 7-point heat stencil. Started by `srun` (one task per
//! compute node of the spare map, usually through `spares-run`); rank and size come from
//! `SLURM_PROCID` / `SLURM_NTASKS`, the rank grid from the map.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Parser;
use spares_stencil::ckpt::Checkpoint;
use spares_stencil::comm::Comm;
use spares_stencil::field::Block;
use spares_stencil::mapinfo;

#[derive(Parser)]
#[command(
    version,
    about = "One rank of a 3D 7-point heat stencil over TCP, with checkpoints"
)]
struct Args {
    /// The spare map (its compute extents are the rank grid).
    #[arg(long, env = "SPARES_RUN_MAP")]
    map: Option<PathBuf>,
    /// Cells per rank along each dimension.
    #[arg(long, default_value_t = 16)]
    cells: usize,
    /// Iterations in all.
    #[arg(long, default_value_t = 200)]
    iters: u64,
    /// Checkpoint every this many iterations (0: never).
    #[arg(long, default_value_t = 20)]
    ckpt_every: u64,
    /// Checkpoint directory (shared by the ranks).
    #[arg(long, env = "SPARES_RUN_CKPT_DIR")]
    ckpt_dir: Option<PathBuf>,
    /// Start from the checkpoints of this iteration (0: the initial field).
    #[arg(long, env = "SPARES_RUN_RESTART", default_value_t = 0)]
    restart_from: u64,
    /// Rendezvous directory of this launch (shared by the ranks; a fresh one per launch).
    #[arg(long, env = "SPARES_RUN_RENDEZVOUS")]
    rendezvous: PathBuf,
    /// Address other ranks reach this one at (default: this machine's host name).
    #[arg(long, env = "SPARES_STENCIL_ADDR")]
    addr: Option<String>,
    /// Pause after each iteration, in milliseconds: stands for real work, so that a test can
    /// kill nodes while the job runs.
    #[arg(long, default_value_t = 0)]
    delay_ms: u64,
    /// Launch attempt (printed; set by spares-run).
    #[arg(long, env = "SPARES_RUN_ATTEMPT", default_value_t = 0)]
    attempt: u32,
}

fn env_u32(name: &str) -> Result<u32> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: start the ranks with srun"))?
        .parse()
        .with_context(|| format!("{name} is not a number"))
}

fn main() {
    if let Err(e) = run() {
        let rank = std::env::var("SLURM_PROCID").unwrap_or_else(|_| "?".into());
        eprintln!("spares-stencil rank {rank}: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let a = Args::parse();
    let rank = env_u32("SLURM_PROCID")?;
    let size = env_u32("SLURM_NTASKS")?;
    let map_path = a
        .map
        .clone()
        .or_else(|| std::env::var_os("SLURM_SPARES_MAP").map(PathBuf::from))
        .context("no map: --map, SPARES_RUN_MAP or SLURM_SPARES_MAP")?;
    let doc = mapinfo::read(&map_path)?;
    let layout = mapinfo::layout(&doc)?;
    if layout.size() != size {
        bail!("{size} tasks for a map of {} ranks", layout.size());
    }
    let node = std::env::var("SLURMD_NODENAME").unwrap_or_else(|_| "?".into());
    let advertise = match &a.addr {
        Some(h) => h.clone(),
        None => std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "127.0.0.1".into()),
    };

    let mut block = if a.restart_from > 0 {
        let dir = a
            .ckpt_dir
            .as_ref()
            .context("--restart-from needs --ckpt-dir")?;
        let c = Checkpoint::read(dir, rank, a.restart_from)?;
        if c.n as usize != a.cells || c.ranks != size {
            bail!(
                "the checkpoint is of another run ({} cells, {} ranks)",
                c.n,
                c.ranks
            );
        }
        Block::from_interior(&layout, rank, a.cells, &c.cells)
    } else {
        Block::initial(&layout, rank, a.cells)
    };
    println!(
        "rank {rank} attempt {} on {node} from iteration {}",
        a.attempt, a.restart_from
    );

    let comm = Comm::connect(
        rank,
        size,
        &layout.peers(rank),
        &a.rendezvous,
        "0.0.0.0",
        &advertise,
        Duration::from_secs(60),
    )?;
    let nbs = layout.neighbours(rank);
    let from: Vec<u32> = nbs.iter().map(|n| n.rank).collect();
    let t0 = Instant::now();
    for it in a.restart_from..a.iters {
        let faces: Vec<Vec<u8>> = nbs.iter().map(|n| block.pack(n)).collect();
        let sends: Vec<(u32, &[u8])> = nbs
            .iter()
            .zip(&faces)
            .map(|(n, f)| (n.rank, f.as_slice()))
            .collect();
        let got = comm.exchange(&sends, &from)?;
        for (n, data) in nbs.iter().zip(&got) {
            if data.len() != block.face_bytes() {
                bail!("rank {}: a face of {} bytes", n.rank, data.len());
            }
            block.unpack(n, data);
        }
        block.step();
        let done = it + 1;
        if let Some(dir) = &a.ckpt_dir {
            if a.ckpt_every > 0 && done % a.ckpt_every == 0 && done < a.iters {
                Checkpoint {
                    rank,
                    ranks: size,
                    iteration: done,
                    n: a.cells as u32,
                    cells: block.interior(),
                }
                .write(dir)?;
                if rank == 0 {
                    println!("checkpoint: iteration {done}");
                }
            }
        }
        if a.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(a.delay_ms));
        }
    }

    // The checksum is an order-free sum of the blocks' parts; the float sum is added in rank
    // order at rank 0, the same order in every run.
    let mut part = block.checksum().to_le_bytes().to_vec();
    part.extend_from_slice(&block.sum().to_le_bytes());
    if let Some(all) = comm.gather(&part)? {
        let mut h = 0u64;
        let mut s = 0.0f64;
        for m in &all {
            h = h.wrapping_add(u64::from_le_bytes(m[..8].try_into()?));
            s += f64::from_le_bytes(m[8..16].try_into()?);
        }
        let g = block.global;
        println!(
            "result: {}x{}x{} cells, {} ranks, {} iterations: checksum {h:016x} sum {s:.6e} ({:.2} s in this launch)",
            g[0],
            g[1],
            g[2],
            size,
            a.iters,
            t0.elapsed().as_secs_f64()
        );
    }
    comm.barrier()?;
    Ok(())
}
