//! `spares simulate`, `spares merge` and `spares bench`: failure campaigns run by the model's
//! [`topology::simulate`], with progress, tables, JSON/CSV results and the worst maps on disk.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use topology::grid::format_shape;
use topology::simulate::{Campaign, CampaignInfo, Engine, RemapAt, Results, Shard};
use topology::{MapDocument, MapMeta, Method};

use crate::commands::{rank_lines, Format};
use crate::input;
use crate::PlanArgs;

/// What `spares simulate` was asked.
pub struct SimulateOpts<'a> {
    pub plan: &'a PlanArgs,
    pub failures: Option<u32>,
    pub samples: u64,
    pub seed: u64,
    pub threads: Option<usize>,
    pub exhaustive: bool,
    pub max_cases: u64,
    pub shard: Option<&'a str>,
    pub keep_worst: usize,
    pub at: &'a [u32],
    pub worst_dir: &'a Path,
    pub remap_at: &'a [u32],
    pub max_moves: Option<u32>,
    pub remap_iterations: u64,
    pub engine: Engine,
    pub output: Option<&'a Path>,
    pub csv: Option<&'a Path>,
    pub json: bool,
    pub quiet: bool,
}

/// The methods of a comma-separated list, and the campaign the plan arguments describe.
fn campaign(
    plan: &PlanArgs,
    failures: Option<u32>,
    samples: u64,
    seed: u64,
    exhaustive: bool,
    keep: (usize, &[u32]),
    engine: Engine,
) -> Result<(Campaign, MapMeta)> {
    let specs: Vec<&str> = plan
        .method()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if specs.is_empty() {
        bail!("--method: name at least one method, e.g. hybrid,0D");
    }
    let mut first = plan.clone();
    first.method = Some(specs[0].to_string());
    let planned = input::plan(&first)?;
    crate::commands::note_periodic(
        planned.map.compute(),
        &planned.meta.pattern,
        planned.meta.periodic,
    );
    let q = planned.map.grid().dims();
    let methods = specs
        .iter()
        .map(|s| Method::parse(s, q))
        .collect::<Result<Vec<_>, _>>()?;
    let spares = planned.map.free_nodes().len() as u32;
    let failures = failures.unwrap_or(spares);
    let meta = planned.meta;
    let grid = *planned.map.grid();
    let info = CampaignInfo {
        topology: meta.topology.clone(),
        spares: meta.spares.clone(),
        box_extents: grid.extents().to_vec(),
        wrap: grid.wrap().to_vec(),
        compute: planned.map.compute().to_vec(),
        pattern: meta.pattern.to_string(),
        periodic: meta.periodic,
        failures,
        samples: if exhaustive { 0 } else { samples },
        seed,
        exhaustive,
        keep_worst: keep.0,
        keep_at: keep.1.to_vec(),
        remap: None,
    };
    let c = Campaign {
        map: planned.map,
        pattern: meta.pattern.clone(),
        periodic: meta.periodic,
        methods,
        failures,
        engine,
        keep_worst: keep.0,
        keep_at: keep.1.to_vec(),
        info,
    };
    Ok((c, meta))
}

/// Candidate moves per re-map of `--remap-at` by default: about 0.1 s a re-map on the seeds'
/// 12x12x12 network (docs/simulation.md has the figures).
pub const REMAP_ITERATIONS: u64 = 20_000;

/// The re-mapping `--remap-at`, `--max-moves` and `--remap-iterations` ask for.
fn remap_at(at: &[u32], max_moved: Option<u32>, iterations: u64) -> Option<RemapAt> {
    if at.is_empty() {
        return None;
    }
    let mut at = at.to_vec();
    at.sort_unstable();
    at.dedup();
    Some(RemapAt {
        at,
        max_moved,
        iterations,
    })
}

/// Most worker threads: each holds a copy of the map, and a failed spawn would panic.
const MAX_THREADS: usize = 1024;

fn threads(t: Option<usize>) -> Result<usize> {
    match t {
        Some(t) if t > MAX_THREADS => {
            bail!("--threads {t} is over the limit of {MAX_THREADS} threads")
        }
        Some(t) => Ok(t),
        None => Ok(std::thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

/// Runs `work` while showing the progress of `total` samples: a bar with rate and time left
/// on a terminal, a plain line every 10 s otherwise.
fn with_progress<T>(
    what: &str,
    total: u64,
    quiet: bool,
    work: impl FnOnce(&AtomicU64) -> T + Send,
) -> T
where
    T: Send,
{
    let done = AtomicU64::new(0);
    let finished = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        if !quiet {
            s.spawn(|| {
                let tty = std::io::stderr().is_terminal();
                let bar = tty.then(|| {
                    let b = indicatif::ProgressBar::new(total);
                    b.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{msg} [{bar:40}] {pos}/{len} samples, {rate}, {eta} left",
                        )
                        .expect("valid template")
                        // Whole samples per second: indicatif's own {per_sec} prints four
                        // decimals.
                        .with_key(
                            "rate",
                            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                                let _ = write!(w, "{:.0}/s", s.per_sec());
                            },
                        )
                        .progress_chars("=> "),
                    );
                    b.set_message(what.to_string());
                    b
                });
                let start = Instant::now();
                let mut last_line = Instant::now();
                while !finished.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(200));
                    let n = done.load(Ordering::Relaxed);
                    match &bar {
                        Some(b) => b.set_position(n),
                        None if last_line.elapsed() >= Duration::from_secs(10) => {
                            last_line = Instant::now();
                            let secs = start.elapsed().as_secs_f64();
                            let rate = n as f64 / secs.max(1e-9);
                            let left = (total.saturating_sub(n)) as f64 / rate.max(1e-9);
                            eprintln!(
                                "{what}: {n}/{total} samples ({:.1}%), {rate:.0}/s, {} left",
                                100.0 * n as f64 / total.max(1) as f64,
                                human(left)
                            );
                        }
                        None => {}
                    }
                }
                if let Some(b) = bar {
                    b.finish_and_clear();
                }
            });
        }
        let out = work(&done);
        finished.store(true, Ordering::Relaxed);
        out
    })
}

fn human(secs: f64) -> String {
    let s = secs.round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, s / 60 % 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// `spares simulate`.
pub fn simulate(o: SimulateOpts) -> Result<()> {
    let (mut c, meta) = campaign(
        o.plan,
        o.failures,
        o.samples,
        o.seed,
        o.exhaustive,
        (o.keep_worst, o.at),
        o.engine,
    )?;
    c.info.remap = remap_at(o.remap_at, o.max_moves, o.remap_iterations);
    let threads = threads(o.threads)?;
    let started = Instant::now();
    let results = if o.exhaustive {
        if o.shard.is_some() {
            bail!("--shard splits random samples; an exhaustive run is not sharded");
        }
        let total = c.exhaustive_cases().unwrap_or(u64::MAX);
        with_progress(&c.label(), total, o.quiet, |done| {
            c.run_exhaustive(threads, o.max_cases, Some(done))
        })?
    } else {
        let shard = match o.shard {
            Some(s) => Shard::parse(s)?,
            None => Shard::ALL,
        };
        let total = shard.len(o.samples);
        with_progress(&c.label(), total, o.quiet, |done| {
            c.run(shard, threads, Some(done))
        })?
    };
    let elapsed = started.elapsed();
    if let Some(path) = o.output {
        write(path, &to_json(&results))?;
    }
    if let Some(path) = o.csv {
        write(path, &results.to_csv())?;
    }
    if o.keep_worst > 0 && !o.at.is_empty() {
        let n = write_worst(&c, &meta, &results, o.worst_dir)?;
        if !o.json {
            eprintln!(
                "spares: wrote {n} worst maps (JSON, SLURM_HOSTFILE, Open MPI rankfile) under {}",
                o.worst_dir.display()
            );
        }
    }
    if o.json {
        print!("{}", to_json(&results));
    } else {
        print!("{}", summary(&results));
        let cases: u64 = results.methods[0].steps.last().map_or(0, |s| s.cases);
        let steps: u64 = results
            .methods
            .iter()
            .flat_map(|m| m.steps.iter().skip(1))
            .map(|s| s.alive + s.lost)
            .sum();
        println!(
            "{} cases x {} methods in {:.1} s on {threads} threads ({:.0} cases/s, {:.0} failures handled/s)",
            cases,
            results.methods.len(),
            elapsed.as_secs_f64(),
            cases as f64 / elapsed.as_secs_f64(),
            steps as f64 / elapsed.as_secs_f64()
        );
    }
    Ok(())
}

fn to_json(r: &Results) -> String {
    let mut s = serde_json::to_string(r).expect("results serialise");
    s.push('\n');
    s
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// The failure counts a table shows: the first few, powers of ten and halves, and the last.
fn table_rows(failures: u32) -> Vec<u32> {
    let mut rows: Vec<u32> = vec![0, 1, 2, 3, 4, 5];
    let mut x = 10;
    while x < failures {
        rows.push(x);
        if x * 2 < failures {
            rows.push(x * 2);
        }
        if x * 5 < failures {
            rows.push(x * 5);
        }
        x *= 10;
    }
    rows.push(failures);
    rows.retain(|&r| r <= failures);
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// A table per method: survival, collisions and the cumulative selection rates.
pub fn summary(r: &Results) -> String {
    let c = &r.campaign;
    let mut s = format!(
        "{} box {}, spares {}, compute {}, {}{}, {} failures, {}\n",
        c.topology.as_deref().unwrap_or("network"),
        format_shape(&c.box_extents),
        c.spares,
        format_shape(&c.compute),
        c.pattern,
        if c.periodic { " periodic" } else { "" },
        c.failures,
        if c.exhaustive {
            "every ordered failure sequence".to_string()
        } else {
            format!("{} samples, seed {}", c.samples, c.seed)
        }
    );
    if !r.is_complete() {
        s += &format!(
            "(shards {:?} of {}: partial results)\n",
            r.shards, r.shard_count
        );
    }
    for m in &r.methods {
        let degrees = m.steps.first().map_or(0, |s| s.selected.len());
        s += &format!("\n{}\n", m.method);
        s += &format!(
            "{:>7} {:>9} {:>5} {:>8} {:>5} {:>5} {:>6}",
            "failed", "survival", "best", "mean", "p50", "p99", "worst"
        );
        for k in (0..degrees).rev() {
            s += &format!(" {:>6}", format!("{k}D"));
        }
        s += "  (cumulative selection)\n";
        for f in table_rows(c.failures) {
            let st = &m.steps[f as usize];
            let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
            s += &format!(
                "{:>7} {:>8.2}% {:>5} {:>8} {:>5} {:>5} {:>6}",
                f,
                100.0 * st.survival(),
                opt(st.best()),
                st.mean().map_or("-".into(), |v| format!("{v:.3}")),
                opt(st.quantile(0.5)),
                opt(st.quantile(0.99)),
                opt(st.worst()),
            );
            let cum = m.cumulative_selection(f as usize);
            for k in (0..degrees).rev() {
                s += &format!(" {:>5.1}%", 100.0 * cum.get(k).copied().unwrap_or(0.0));
            }
            s += "\n";
        }
        if let Some(settings) = &c.remap {
            s += &remapped_table(m, settings);
        }
    }
    s
}

/// Sliding's collisions beside the re-mapped ones at each failure count of --remap-at, over
/// the same alive cases, with the ranks the re-maps moved.
fn remapped_table(m: &topology::simulate::MethodResults, settings: &RemapAt) -> String {
    let budget = settings
        .max_moved
        .map_or("any number of".to_string(), |k| format!("at most {k}"));
    let mut s = format!(
        "\n{} re-mapped ({budget} moved ranks, {} iterations a case)\n",
        m.method, settings.iterations
    );
    s += &format!(
        "{:>15}  {:^32}  {:^32}  {:^14}\n",
        "", "sliding", "re-mapped", "moved ranks"
    );
    let columns = format!(
        "{:>5} {:>7} {:>5} {:>5} {:>6}",
        "best", "mean", "p50", "p99", "worst"
    );
    s += &format!(
        "{:>7} {:>7}  {columns}  {columns}  {:>7} {:>6}  {:>8}\n",
        "failed", "cases", "mean", "max", "improved"
    );
    let opt = |v: Option<u32>| v.map_or("-".to_string(), |v| v.to_string());
    let mean = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.3}"));
    let figures = |t: &topology::simulate::StepStats| {
        format!(
            "{:>5} {:>7} {:>5} {:>5} {:>6}",
            opt(t.best()),
            mean(t.mean()),
            opt(t.quantile(0.5)),
            opt(t.quantile(0.99)),
            opt(t.worst())
        )
    };
    for r in &m.remapped {
        let Some(sliding) = m.steps.get(r.failed as usize) else {
            continue;
        };
        let t = &r.traffic;
        s += &format!(
            "{:>7} {:>7}  {}  {}  {:>7} {:>6}  {:>7.1}%\n",
            r.failed,
            t.alive,
            figures(sliding),
            figures(t),
            r.mean_moved().map_or("-".into(), |v| format!("{v:.1}")),
            r.max_moved,
            100.0 * r.improved as f64 / t.alive.max(1) as f64
        );
    }
    s
}

/// A file-name-safe form of a method: `hybrid(-2D)` -> `hybrid_-2D_`.
fn slug(method: &str) -> String {
    method
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphanumeric() || ch == '-' {
                ch
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes every kept worst case as a map document, a SLURM_HOSTFILE and an Open MPI rankfile
/// under `dir/<method>/failed-<K>/`. Returns the number of maps.
fn write_worst(c: &Campaign, meta: &MapMeta, r: &Results, dir: &Path) -> Result<usize> {
    let mut n = 0;
    for (mi, m) in r.methods.iter().enumerate() {
        for kept in &m.worst {
            let sub: PathBuf = dir
                .join(slug(&m.method))
                .join(format!("failed-{}", kept.failed));
            std::fs::create_dir_all(&sub)
                .with_context(|| format!("cannot create {}", sub.display()))?;
            for (i, w) in kept.cases.iter().enumerate() {
                let map = c.replay(mi, w.sample, kept.failed)?;
                let mut meta = meta.clone();
                meta.method = c.methods[mi].clone();
                let stem = sub.join(format!(
                    "worst-{:04}-c{}-sample{}",
                    i + 1,
                    w.collisions,
                    w.sample
                ));
                let doc = MapDocument::new(&map, &meta);
                write(&stem.with_extension("json"), &doc.to_json())?;
                if meta.hosts.is_some() {
                    write(
                        &stem.with_extension("hostfile"),
                        &rank_lines(&map, &meta, Format::Hostfile)?,
                    )?;
                    write(
                        &stem.with_extension("rankfile"),
                        &rank_lines(&map, &meta, Format::OpenMpi)?,
                    )?;
                } else {
                    write(
                        &stem.with_extension("csv"),
                        &rank_lines(&map, &meta, Format::Csv)?,
                    )?;
                }
                n += 1;
            }
        }
    }
    Ok(n)
}

/// `spares merge`.
pub fn merge(inputs: &[PathBuf], output: Option<&Path>, csv: Option<&Path>) -> Result<()> {
    let mut merged: Option<Results> = None;
    for p in inputs {
        let text = input::read_at_most(p, input::MAX_RESULTS_BYTES)?;
        let r: Results = serde_json::from_str(&text)
            .with_context(|| format!("{}: not a results file of spares simulate", p.display()))?;
        match merged.as_mut() {
            None => merged = Some(r),
            Some(m) => m.merge(&r).with_context(|| p.display().to_string())?,
        }
    }
    let Some(merged) = merged else {
        bail!("give the results files to merge");
    };
    if !merged.is_complete() {
        let missing: Vec<String> = (0..merged.shard_count)
            .filter(|s| !merged.shards.contains(s))
            .map(|s| s.to_string())
            .collect();
        eprintln!(
            "spares: warning: shards {} of {} are missing; the merged results are partial",
            missing.join(","),
            merged.shard_count
        );
    }
    if let Some(p) = csv {
        write(p, &merged.to_csv())?;
    }
    match output {
        Some(p) => write(p, &to_json(&merged)),
        None => {
            print!("{}", summary(&merged));
            Ok(())
        }
    }
}

/// `spares bench`: the same campaign with full recomputation, the previous incremental engine
/// (the reference) and the current one, in one run, and the machine's memory-bound limit.
///
/// The reference and the current engine run in turns, `rounds` times each, and the fastest
/// round of each counts: on a shared machine the ratio of two runs of one process is a fairer
/// figure than either time. Both must give the same results, or the bench fails.
pub fn bench(
    plan: &PlanArgs,
    failures: Option<u32>,
    samples: u64,
    full_samples: u64,
    seed: u64,
    rounds: u32,
) -> Result<()> {
    let make = |engine: Engine, samples: u64| -> Result<Campaign> {
        Ok(campaign(plan, failures, samples, seed, false, (0, &[]), engine)?.0)
    };
    // Failures handled (alive or lost on that failure), seconds, and the results.
    let time = |c: &Campaign| -> Result<(u64, f64, Results)> {
        let t = Instant::now();
        let r = c.run(Shard::ALL, 1, None)?;
        let secs = t.elapsed().as_secs_f64();
        let handled: u64 = r
            .methods
            .iter()
            .flat_map(|m| m.steps.iter().skip(1))
            .map(|s| s.alive + s.lost)
            .sum();
        Ok((handled, secs, r))
    };
    if full_samples > 0 {
        let (fh, fs, _) = time(&make(Engine::Full, full_samples)?)?;
        println!(
            "full recomputation: {fh} failures handled in {fs:.2} s: {:.0} failures/s",
            fh as f64 / fs
        );
    }
    let reference = make(Engine::Reference, samples)?;
    let current = make(Engine::Incremental, samples)?;
    let routing = current.map.routing();
    let links = routing.len() as usize * 2 * routing.dims();
    // The limits: random load increments in a table of the engine's size (u32 loads), and in
    // u16 tables that stay in this machine's L1 and L2 caches (a denser engine's bound).
    let tables = [
        ("engine-sized", links, 4),
        ("L1-sized", L1_TABLE, 2),
        ("L2-sized", L2_TABLE, 2),
    ];
    let (mut ref_secs, mut cur_secs) = (f64::MAX, f64::MAX);
    let mut limits = [0f64; 3];
    let mut handled = 0;
    for _ in 0..rounds.max(1) {
        for (limit, &(_, len, bytes)) in limits.iter_mut().zip(&tables) {
            let rate = if bytes == 4 {
                random_increments::<u32>(len)
            } else {
                random_increments::<u16>(len)
            };
            *limit = limit.max(rate);
        }
        let (h, s, a) = time(&reference)?;
        ref_secs = ref_secs.min(s);
        let (_, s, b) = time(&current)?;
        cur_secs = cur_secs.min(s);
        if a != b {
            bail!("the current engine's results differ from the reference engine's");
        }
        handled = h;
    }
    let updates = current.link_updates(samples)?;
    let per_failure = updates as f64 / handled.max(1) as f64;
    let line = |name: &str, secs: f64| {
        let rate = handled as f64 / secs;
        let percent = |limit: f64| 100.0 * rate * per_failure / limit;
        println!(
            "{name}: {handled} failures handled in {secs:.2} s: {rate:.0} failures/s, \
             {:.0} link-load updates/s = {:.1}% / {:.1}% / {:.1}% of the engine-sized / L1 / L2 \
             limits",
            rate * per_failure,
            percent(limits[0]),
            percent(limits[1]),
            percent(limits[2]),
        );
    };
    line("reference engine (previous incremental)", ref_secs);
    line("current engine", cur_secs);
    println!(
        "current / reference: {:.2}x (one thread each, fastest of {} rounds; same results)",
        ref_secs / cur_secs,
        rounds.max(1)
    );
    println!(
        "work: {per_failure:.1} link-load updates per failure ({updates} over {handled} failures), \
         applied {}",
        match topology::loads::changes_applied_at_once() {
            1 => "one at a time".to_string(),
            n => format!("{n} at a time (AVX-512)"),
        }
    );
    for (&(name, len, bytes), limit) in tables.iter().zip(limits) {
        println!(
            "memory-bound limit, {name}: {limit:.0} random increments/s ({:.2} ns each, fastest \
             of {} rounds) of a table of {len} u{} loads ({} KiB)",
            1e9 / limit,
            rounds.max(1),
            bytes * 8,
            len * bytes / 1024
        );
    }
    Ok(())
}

/// u16 loads in a table of 16 KiB: resident in the L1 data cache (32 KiB per core here and
/// on most x86 cores) with room for the rest of an engine's state.
const L1_TABLE: usize = 8 * 1024;

/// u16 loads in a table of 256 KiB: past L1, resident in an L2 of 512 KiB or more.
const L2_TABLE: usize = 128 * 1024;

/// A load counter of the increment microbenchmark.
trait Load: Copy + Default {
    fn bump(self) -> Self;
}

impl Load for u16 {
    fn bump(self) -> u16 {
        self.wrapping_add(1)
    }
}

impl Load for u32 {
    fn bump(self) -> u32 {
        self.wrapping_add(1)
    }
}

/// Independent increments of random entries of a table of `len` loads, per second: what an
/// engine that did nothing but update link loads of that size could reach on this machine.
fn random_increments<T: Load>(len: usize) -> f64 {
    let len = len.max(1);
    let mut table = vec![T::default(); len];
    // xorshift64: a few instructions per index, no memory of its own; the index is taken
    // from the high bits by a multiplication, not a division. Four independent generators:
    // one generator's dependent chain, not the memory, would otherwise set the rate.
    let mut x: [u64; 4] = [
        0x9E37_79B9_7F4A_7C15,
        0xD1B5_4A32_D192_ED03,
        0x8CB9_2BA7_2F3D_8DD7,
        0xABC9_8388_FB8F_AC03,
    ];
    let count: u64 = 1 << 24;
    let t = Instant::now();
    for _ in 0..count / 4 {
        for x in &mut x {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            let i = (((*x >> 32) * len as u64) >> 32) as usize;
            table[i] = table[i].bump();
        }
    }
    let secs = t.elapsed().as_secs_f64();
    std::hint::black_box(&table);
    count as f64 / secs
}
