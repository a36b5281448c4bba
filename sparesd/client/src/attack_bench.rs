//! `sparesctl bench attack`: root's latency for `fail` and `health`, quiet and while a hostile
//! user (another uid, through `setpriv`) floods `show` on its own large job, holds connections
//! open and trickles bytes. Part of the `sparesctl` binary (see `docs/sparesd.md`).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::SeedableRng;
use spares_client::Client;

use crate::{bench_doc, pct, Result};

/// The attacker's job id and the first of root's (bench ids, far from real ones).
const ATTACK_JOB: u32 = 4_100_000_000;
const ROOT_JOB: u32 = 4_100_000_100;

/// What the attack bench was asked.
pub struct AttackArgs<'a> {
    pub attacker_uid: u32,
    pub attacker_box: &'a str,
    pub root_box: &'a str,
    pub requests: usize,
    pub flooders: usize,
    pub holders: usize,
    pub tricklers: usize,
    pub seed: u64,
}

struct Figures {
    fail: Vec<u64>,
    health: Vec<u64>,
    errors: usize,
}

/// Root's requests: `requests` failures (each a new node, spread over fresh jobs) and as
/// many `health`, alternating, one connection each time (as the node-down trigger and
/// runtimes do).
fn root_phase(socket: &Path, a: &AttackArgs, first_job: u32, seed: u64) -> Result<Figures> {
    let doc = bench_doc(a.root_box, "3D(2,1)", false)?;
    let dims = doc.box_extents.clone();
    let n: u32 = dims.iter().product();
    let per_job = (n as usize / 4).max(1);
    let jobs = a.requests.div_ceil(per_job) as u32;
    let mut c = Client::connect(socket)?;
    for j in 0..jobs {
        let _ = c.release(first_job + j);
        c.register(first_job + j, 0, &doc)?;
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut nodes: Vec<u32> = (0..n).collect();
    nodes.shuffle(&mut rng);
    let mut f = Figures {
        fail: Vec::new(),
        health: Vec::new(),
        errors: 0,
    };
    let health = "{\"version\":1,\"kind\":\"health\"}";
    for k in 0..a.requests {
        let job = first_job + (k / per_job) as u32;
        let mut rest = nodes[k % per_job];
        let coord: Vec<String> = dims
            .iter()
            .map(|&e| {
                let v = rest % e;
                rest /= e;
                v.to_string()
            })
            .collect();
        let line = format!(
            "{{\"version\":1,\"kind\":\"fail\",\"job_id\":{job},\"node\":\"{}\"}}",
            coord.join(",")
        );
        for (req, out) in [(line.as_str(), 0), (health, 1)] {
            let t = Instant::now();
            let ok = Client::connect(socket)
                .and_then(|mut c| c.call_raw(req).map(|r| r.contains("\"ok\":true")))
                .unwrap_or(false);
            let dt = t.elapsed().as_nanos() as u64;
            if !ok {
                f.errors += 1;
            }
            if out == 0 {
                f.fail.push(dt);
            } else {
                f.health.push(dt);
            }
        }
    }
    for j in 0..jobs {
        c.release(first_job + j)?;
    }
    f.fail.sort_unstable();
    f.health.sort_unstable();
    Ok(f)
}

/// Runs the bench: needs root (it registers jobs and switches to `attacker_uid`).
pub fn run(socket: &Path, a: &AttackArgs, as_json: bool) -> Result<()> {
    let big = bench_doc(a.attacker_box, "3D(1,1)", true)?;
    let mut c = Client::connect(socket)?;
    let _ = c.release(ATTACK_JOB);
    let t = Instant::now();
    c.register(ATTACK_JOB, a.attacker_uid, &big)?;
    let show_bytes = c.show(ATTACK_JOB)?.to_string().len();
    if !as_json {
        outln!(
            "attacker's job {ATTACK_JOB} ({} box, uid {}) registered in {:.2} s; its show reply is {:.1} MB",
            a.attacker_box,
            a.attacker_uid,
            t.elapsed().as_secs_f64(),
            show_bytes as f64 / 1e6
        );
    }
    let quiet = root_phase(socket, a, ROOT_JOB, a.seed)?;

    // The attacker: this program as another uid (copied where that uid may run it).
    let dir = std::env::temp_dir().join(format!("sparesctl-attack-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let exe = dir.join("sparesctl");
    std::fs::copy(std::env::current_exe()?, &exe)?;
    let mut child = Command::new("setpriv")
        .arg(format!("--reuid={}", a.attacker_uid))
        .arg(format!("--regid={}", a.attacker_uid))
        .arg("--clear-groups")
        .arg(&exe)
        .arg("--socket")
        .arg(socket)
        .args(["bench", "hostile"])
        .args(["--job", &ATTACK_JOB.to_string()])
        .args(["--flooders", &a.flooders.to_string()])
        .args(["--holders", &a.holders.to_string()])
        .args(["--tricklers", &a.tricklers.to_string()])
        .stdout(Stdio::piped())
        .spawn()?;
    let mut out = BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    out.read_line(&mut first)?; // "STARTED": every attacking connection was tried once
    std::thread::sleep(Duration::from_millis(500));
    let attacked = root_phase(socket, a, ROOT_JOB + 10_000, a.seed + 1);
    let _ = child.kill();
    let _ = child.wait();
    let mut rest = String::new();
    let _ = out.read_to_string(&mut rest);
    let _ = std::fs::remove_dir_all(&dir);
    let attacked = attacked?;
    let stats = rest.lines().last().unwrap_or("").to_string();
    let _ = Client::connect(socket)?.release(ATTACK_JOB);

    let ms = |v: &[u64], p: f64| pct(v, p) / 1e6;
    if as_json {
        outln!(
            "{}",
            serde_json::json!({
                "what": "attack", "attacker_box": a.attacker_box, "root_box": a.root_box,
                "requests": a.requests, "flooders": a.flooders, "holders": a.holders,
                "tricklers": a.tricklers,
                "quiet": {"fail_p50_ms": ms(&quiet.fail, 0.5), "fail_p99_ms": ms(&quiet.fail, 0.99),
                          "health_p50_ms": ms(&quiet.health, 0.5), "health_p99_ms": ms(&quiet.health, 0.99),
                          "errors": quiet.errors},
                "attack": {"fail_p50_ms": ms(&attacked.fail, 0.5), "fail_p99_ms": ms(&attacked.fail, 0.99),
                           "health_p50_ms": ms(&attacked.health, 0.5), "health_p99_ms": ms(&attacked.health, 0.99),
                           "errors": attacked.errors},
                "attacker": stats,
            })
        );
        return Ok(());
    }
    outln!(
        "root: {} fail + {} health requests per phase, a new connection each ({} jobs, 3D(2,1))",
        a.requests,
        a.requests,
        a.root_box
    );
    outln!(
        "attack: uid {} floods show on its job from {} connections, holds {} and trickles {}",
        a.attacker_uid,
        a.flooders,
        a.holders,
        a.tricklers
    );
    outln!(
        "{:<8} {:>10} {:>10} | {:>10} {:>10} | {:>9}",
        "request",
        "quiet p50",
        "p99",
        "attack p50",
        "p99",
        "p99 ratio"
    );
    for (name, q, x) in [
        ("fail", &quiet.fail, &attacked.fail),
        ("health", &quiet.health, &attacked.health),
    ] {
        outln!(
            "{name:<8} {:>8.2}ms {:>8.2}ms | {:>8.2}ms {:>8.2}ms | {:>8.1}x",
            ms(q, 0.5),
            ms(q, 0.99),
            ms(x, 0.5),
            ms(x, 0.99),
            ms(x, 0.99) / ms(q, 0.99).max(1e-9)
        );
    }
    outln!(
        "root's errors: quiet {}, attack {}; attacker: {stats}",
        quiet.errors,
        attacked.errors
    );
    Ok(())
}

/// The hostile side (run as another uid by `run`, until killed): flooders ask `show` in a
/// loop, holders keep connections open without a byte, tricklers send one byte every 100 ms;
/// each reconnects when closed. Prints `STARTED` once, then its counts every second.
pub fn hostile(
    socket: &Path,
    job: u32,
    flooders: usize,
    holders: usize,
    tricklers: usize,
) -> Result<()> {
    let shows = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let cut = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let line = format!("{{\"version\":1,\"kind\":\"show\",\"job_id\":{job}}}\n");
    let mut threads = Vec::new();
    for _ in 0..flooders {
        let (shows, refused, line, socket) = (
            Arc::clone(&shows),
            Arc::clone(&refused),
            line.clone(),
            socket.to_path_buf(),
        );
        threads.push(std::thread::spawn(move || loop {
            let Ok(s) = UnixStream::connect(&socket) else {
                refused.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
                continue;
            };
            let mut r = BufReader::new(&s);
            let mut reply = String::new();
            loop {
                if (&s).write_all(line.as_bytes()).is_err() {
                    break;
                }
                reply.clear();
                if r.read_line(&mut reply).unwrap_or(0) == 0 {
                    break;
                }
                if reply.contains("\"ok\":true") {
                    shows.fetch_add(1, Ordering::Relaxed);
                } else {
                    refused.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                    break;
                }
            }
        }));
    }
    // Holders and tricklers: one thread keeps them all, reconnecting closed ones.
    let (refused2, cut2, socket2) = (Arc::clone(&refused), Arc::clone(&cut), socket.to_path_buf());
    let started = Arc::new(AtomicBool::new(false));
    let started2 = Arc::clone(&started);
    threads.push(std::thread::spawn(move || {
        let mut conns: Vec<(Option<UnixStream>, bool)> = (0..holders)
            .map(|_| (None, false))
            .chain((0..tricklers).map(|_| (None, true)))
            .collect();
        loop {
            for (c, trickle) in conns.iter_mut() {
                if let Some(s) = c {
                    // Closed by the daemon (deadline, busy)? Reconnect.
                    let mut b = [0u8; 256];
                    let _ = s.set_nonblocking(true);
                    match s.read(&mut b) {
                        Ok(0) => *c = None,
                        Ok(_) => {
                            cut2.fetch_add(1, Ordering::Relaxed);
                            *c = None;
                        }
                        Err(_) => {}
                    }
                }
                match c {
                    Some(s) if *trickle => {
                        let _ = s.write_all(b" ");
                    }
                    Some(_) => {}
                    None => match UnixStream::connect(&socket2) {
                        Ok(s) => *c = Some(s),
                        Err(_) => {
                            refused2.fetch_add(1, Ordering::Relaxed);
                        }
                    },
                }
            }
            started2.store(true, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(100));
        }
    }));
    while !started.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(10));
    }
    outln!("STARTED");
    let t = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_secs(1));
        outln!(
            "{} shows answered in {:.0} s, {} refused (busy) or failed connections, {} closed by the daemon",
            shows.load(Ordering::Relaxed),
            t.elapsed().as_secs_f64(),
            refused.load(Ordering::Relaxed),
            cut.load(Ordering::Relaxed)
        );
    }
    Ok(())
}
