//! The subcommands: each gathers its input, asks the model, and prints text or JSON.

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use rand::{Rng, SeedableRng};
use serde::Serialize;
use topology::grid::{format_coord, format_shape};
use topology::hostlist;
use topology::report::{FailureText, MoveText};
use topology::sliding::fail;
use topology::{AutoPolicy, MapDocument, MapMeta, NodeState, Pattern, Plan, SpareMap, Traffic};

use crate::input::{self, label};
use crate::{PlanArgs, PolicyArgs};

fn write_out(path: Option<&Path>, text: &str) -> Result<()> {
    match path {
        Some(p) => std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display())),
        None => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`| head`) is not an error worth a message.
            match out.write_all(text.as_bytes()) {
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
                r => r.context("cannot write to standard output"),
            }
        }
    }
}

fn json<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string_pretty(v).expect("serialisable");
    s.push('\n');
    s
}

fn node_list(map: &SpareMap, meta: &MapMeta, nodes: &[u32]) -> String {
    match &meta.hosts {
        Some(h) => hostlist::compress(
            &nodes
                .iter()
                .map(|&n| h[n as usize].as_str())
                .collect::<Vec<_>>(),
        ),
        None => nodes
            .iter()
            .map(|&n| format_coord(&map.coord(n)[..map.grid().dims()]))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

#[derive(Serialize)]
struct PlanOutput<'a> {
    network: String,
    unit: String,
    plan: &'a Plan,
    #[serde(skip_serializing_if = "Option::is_none")]
    auto: Option<String>,
    /// Where each choice came from (the site policy, a default, the command line).
    sources: &'a input::Sources,
    compute_nodes: String,
    spare_nodes: String,
    map: MapDocument,
}

/// `spares plan`.
pub fn plan(
    args: &PlanArgs,
    site: &PolicyArgs,
    output: Option<&Path>,
    show_nodes: bool,
    as_json: bool,
) -> Result<()> {
    let p = match input::site_policy_for_plan(args, site)? {
        Some(policy) => input::plan_for_site(args, &policy)?,
        None => input::plan(args)?,
    };
    note_periodic(p.map.compute(), &p.meta.pattern, p.meta.periodic);
    let doc = MapDocument::new(&p.map, &p.meta);
    if let Some(path) = output {
        write_out(Some(path), &doc.to_json())?;
    }
    let compute: Vec<u32> = p.map.rank_nodes().to_vec();
    let spare: Vec<u32> = (0..p.map.grid().len())
        .filter(|&n| p.map.state(n) == NodeState::Free)
        .collect();
    let net = &p.topology.grid;
    let kinds: Vec<&str> = net
        .wrap()
        .iter()
        .map(|&w| if w { "ring" } else { "mesh" })
        .collect();
    let network = format!(
        "{} ({}, {})",
        p.topology.name,
        format_shape(net.extents()),
        kinds.join("/")
    );
    let auto = p.auto.as_ref().map(|a| {
        format!(
            "{}{}",
            a.reason,
            if a.in_band {
                ""
            } else {
                " (outside the 2%-5% band)"
            }
        )
    });
    if as_json {
        return write_out(
            None,
            &json(&PlanOutput {
                network,
                unit: p.topology.unit.to_string(),
                plan: &p.plan,
                auto,
                sources: &p.sources,
                compute_nodes: node_list(&p.map, &p.meta, &compute),
                spare_nodes: node_list(&p.map, &p.meta, &spare),
                map: doc,
            }),
        );
    }
    let pl = &p.plan;
    let mut s = String::new();
    s += &format!(
        "network   {network}, allocation unit: {}\n",
        p.topology.unit
    );
    s += &format!(
        "box       {} at {} ({} nodes)\n",
        format_shape(&pl.box_extents),
        format_coord(&p.meta.origin),
        pl.box_nodes
    );
    s += &format!(
        "compute   {} ({} ranks)\n",
        format_shape(&pl.compute),
        pl.compute_nodes
    );
    s += &format!(
        "spares    {}: {} nodes = {:.2}% of the box (seeds' formula for a cube of that size: {:.2}%); {} from the shape, {} from rounding\n",
        pl.spares,
        pl.spare_nodes,
        pl.fraction * 100.0,
        pl.formula_fraction * 100.0,
        pl.shaped_spares,
        pl.gap_spares
    );
    if let Some(a) = auto {
        s += &format!("auto      {a}\n");
    }
    let src = &p.sources;
    s += &format!(
        "policy    {}\n",
        src.policy
            .as_deref()
            .unwrap_or("none (the model's defaults; --policy FILE answers as a site would)")
    );
    s += &format!(
        "from      network: {}; compute: {}; spares: {}; method: {}\n",
        src.network, src.compute, src.spares, src.method
    );
    if let Some(note) = input::frame_note(&p.meta) {
        s += &format!("frame     {note}\n");
    }
    s += &format!(
        "traffic   {} {}: {} collision(s), {} messages, {} hops{}\n",
        p.meta.pattern,
        if p.meta.periodic {
            "periodic"
        } else {
            "non-periodic"
        },
        doc.collisions,
        doc.traffic.map_or(0, |t| t.messages),
        doc.traffic.map_or(0, |t| t.total_hops),
        doc.traffic.map(outside_note).unwrap_or_default()
    );
    if show_nodes {
        s += &format!(
            "compute nodes (rank order): {}\n",
            node_list(&p.map, &p.meta, &compute)
        );
        s += &format!("spare nodes: {}\n", node_list(&p.map, &p.meta, &spare));
    }
    if let Some(path) = output {
        s += &format!("map written to {}\n", path.display());
    }
    write_out(None, &s)
}

/// Options of `spares substitute`.
pub struct SubstituteOpts<'a> {
    pub map: Option<&'a Path>,
    pub plan: &'a PlanArgs,
    pub fail: &'a [String],
    pub fail_random: Option<u32>,
    pub seed: u64,
    pub output: Option<&'a Path>,
    pub moves: bool,
    /// Recompute every step's traffic from scratch (the reference for the engine).
    pub full_traffic: bool,
    /// Keep the link loads with the previous incremental engine (`--engine reference`).
    pub reference_engine: bool,
    pub json: bool,
}

#[derive(Serialize)]
struct MoveOut {
    rank: u32,
    from: String,
    to: String,
}

#[derive(Serialize)]
/// One failure, with the field names of sparesd's substitution record (`docs/protocol.md`).
struct StepOut {
    step: usize,
    node: String,
    outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    method_used: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    slide: Option<String>,
    moved: usize,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    moves: Vec<MoveOut>,
    collisions_before: u32,
    collisions_after: u32,
    traffic: Traffic,
}

#[derive(Serialize)]
struct SubstituteOutput {
    method: String,
    pattern: String,
    periodic: bool,
    steps: Vec<StepOut>,
    lost: bool,
    map: MapDocument,
}

/// `spares substitute`.
pub fn substitute(o: SubstituteOpts) -> Result<()> {
    let (mut map, mut meta) = match o.map {
        Some(path) => input::map(path)?,
        None => {
            let p = input::plan(o.plan)?;
            (p.map, p.meta)
        }
    };
    if o.map.is_some() {
        // Flags given explicitly override the map's own method and pattern.
        let q = map.grid().dims();
        if let Some(m) = &o.plan.method {
            meta.method = topology::Method::parse(m, q)?;
        }
        if let Some(p) = &o.plan.pattern {
            meta.pattern = Pattern::parse(p, q)?;
        }
        meta.periodic |= o.plan.periodic;
    }
    // Link loads kept up to date: each step's figures cost only the moved ranks' messages,
    // and 0D:least-load can weigh its candidates.
    if o.reference_engine {
        map.track_traffic_reference(&meta.pattern, meta.periodic);
    } else {
        map.track_traffic(&meta.pattern, meta.periodic);
    }
    note_periodic(map.compute(), &meta.pattern, meta.periodic);
    let mut failures: Vec<u32> = Vec::new();
    for name in o.fail {
        failures.push(input::node(&map, &meta, name)?);
    }
    if o.fail.is_empty() && o.fail_random.is_none() {
        bail!("name the failures: --fail NODE (repeatable) or --fail-random K");
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
    let random = o.fail_random.unwrap_or(0) as usize;
    let box_nodes = map.grid().len() as usize;
    if random > box_nodes {
        bail!("--fail-random {random}: the box has only {box_nodes} nodes, so at most {box_nodes} can fail");
    }
    let mut steps = Vec::new();
    let mut collisions_before = map.traffic(&meta.pattern, meta.periodic).collisions;
    let total = if random > 0 { random } else { failures.len() };
    for i in 0..total {
        let f = if random > 0 {
            let alive: Vec<u32> = (0..map.grid().len())
                .filter(|&n| map.state(n) != NodeState::Dead)
                .collect();
            if alive.is_empty() {
                bail!("step {}: every node of the box has failed", i + 1);
            }
            alive[rng.gen_range(0..alive.len())]
        } else {
            failures.get(i).copied().expect("one failure per step")
        };
        let name = label(&map, &meta, f);
        let outcome = fail(&mut map, f, &meta.method)
            .with_context(|| format!("failure {} ({name})", i + 1))?;
        let traffic = if o.full_traffic {
            map.full_traffic(&topology::traffic::neighbours(
                map.compute(),
                &meta.pattern,
                meta.periodic,
            ))
        } else {
            map.traffic(&meta.pattern, meta.periodic)
        };
        let kind = outcome.name();
        let (method_used, slide, moves) = (
            outcome.method_used(),
            outcome.slide().map(|s| s.to_string()),
            outcome.moves(),
        );
        steps.push(StepOut {
            step: i + 1,
            node: name,
            outcome: kind,
            method_used,
            slide,
            moved: moves.len(),
            moves: if o.moves {
                moves
                    .iter()
                    .map(|m| MoveOut {
                        rank: m.rank,
                        from: label(&map, &meta, m.from),
                        to: label(&map, &meta, m.to),
                    })
                    .collect()
            } else {
                Vec::new()
            },
            collisions_before,
            collisions_after: traffic.collisions,
            traffic,
        });
        collisions_before = traffic.collisions;
    }
    let doc = MapDocument::new(&map, &meta);
    if let Some(path) = o.output {
        write_out(Some(path), &doc.to_json())?;
    }
    let lost = map.is_lost();
    if o.json {
        return write_out(
            None,
            &json(&SubstituteOutput {
                method: meta.method.to_string(),
                pattern: meta.pattern.to_string(),
                periodic: meta.periodic,
                steps,
                lost,
                map: doc,
            }),
        );
    }
    let mut s = format!("method {}, {}\n", meta.method, pattern_words(&meta));
    if let Some(note) = input::frame_note(&meta) {
        s += &format!("{note}\n");
    }
    for st in &steps {
        let text = FailureText {
            step: st.step as u64,
            node: &st.node,
            outcome: st.outcome,
            method_used: st.method_used.as_deref(),
            slide: st.slide.as_deref(),
            moved: st.moved,
            moves: st
                .moves
                .iter()
                .map(|m| MoveText {
                    rank: m.rank.into(),
                    from: &m.from,
                    to: &m.to,
                })
                .collect(),
            collisions_before: Some(st.collisions_before.into()),
            collisions_after: st.collisions_after.into(),
        };
        s += &text.text(&format!(
            "hops {}, hot links {}{}",
            st.traffic.total_hops,
            st.traffic.hot_links,
            outside_note(st.traffic)
        ));
    }
    s += &format!(
        "final: {} failed node(s), {} free node(s) left, collisions {}{}\n",
        map.dead_nodes().len(),
        map.free_nodes().len(),
        doc.collisions,
        if lost { ", JOB LOST" } else { "" }
    );
    if let Some(path) = o.output {
        s += &format!("map written to {}\n", path.display());
    }
    write_out(None, &s)
}

/// Options of `spares remap`.
pub struct RemapOpts<'a> {
    pub map: &'a Path,
    pub max_moves: Option<u32>,
    pub time_limit: Option<f64>,
    pub iterations: Option<u64>,
    pub seed: u64,
    pub output: Option<&'a Path>,
    pub json: bool,
}

#[derive(Serialize)]
/// One step of a re-map's migration: a move, or ranks that exchange nodes at once.
struct RemapStepOut {
    /// `move` or `exchange`.
    kind: &'static str,
    moves: Vec<MoveOut>,
}

#[derive(Serialize)]
struct RemapOutput {
    pattern: String,
    periodic: bool,
    before: Traffic,
    after: Traffic,
    /// Links at the largest load, before and after.
    links_at_max: [u64; 2],
    lower_bound: u32,
    moved: usize,
    iterations: u64,
    stop: &'static str,
    steps: Vec<RemapStepOut>,
    map: MapDocument,
}

/// `spares remap`.
pub fn remap(o: RemapOpts) -> Result<()> {
    use topology::remap::{Budget, Step};
    let (map, meta) = input::map(o.map)?;
    let time_limit = match (o.time_limit, o.iterations) {
        (Some(s), _) if !(s.is_finite() && s > 0.0 && s <= 86_400.0) => {
            bail!("--time-limit {s}: give seconds above 0 and at most 86400 (one day)")
        }
        (Some(s), _) => Some(std::time::Duration::from_secs_f64(s)),
        (None, Some(_)) => None,
        (None, None) => Some(std::time::Duration::from_secs(1)),
    };
    let budget = Budget {
        max_moved: o.max_moves,
        time_limit,
        iterations: o.iterations,
        seed: o.seed,
    };
    note_periodic(map.compute(), &meta.pattern, meta.periodic);
    let r = topology::remap::remap(&map, &meta.pattern, meta.periodic, &budget)?;
    let doc = MapDocument::new(&r.map, &meta);
    if let Some(path) = o.output {
        write_out(Some(path), &doc.to_json())?;
    }
    let out_move = |m: &topology::Move| MoveOut {
        rank: m.rank,
        from: label(&r.map, &meta, m.from),
        to: label(&r.map, &meta, m.to),
    };
    let steps: Vec<RemapStepOut> = r
        .steps
        .iter()
        .map(|s| match s {
            Step::Move(m) => RemapStepOut {
                kind: "move",
                moves: vec![out_move(m)],
            },
            Step::Exchange(ms) => RemapStepOut {
                kind: "exchange",
                moves: ms.iter().map(out_move).collect(),
            },
        })
        .collect();
    if o.json {
        return write_out(
            None,
            &json(&RemapOutput {
                pattern: meta.pattern.to_string(),
                periodic: meta.periodic,
                before: r.before,
                after: r.after,
                links_at_max: [r.links_at_max.0, r.links_at_max.1],
                lower_bound: r.lower_bound,
                moved: r.moved.len(),
                iterations: r.iterations,
                stop: r.stop.name(),
                steps,
                map: doc,
            }),
        );
    }
    let mut s = format!("{}\n", pattern_words(&meta));
    if let Some(note) = input::frame_note(&meta) {
        s += &format!("{note}\n");
    }
    for (what, t, at_max) in [
        ("before", r.before, r.links_at_max.0),
        ("after ", r.after, r.links_at_max.1),
    ] {
        s += &format!(
            "{what}  collisions {} ({at_max} link(s) at it), hops {}, hot links {}{}\n",
            t.collisions,
            t.total_hops,
            t.hot_links,
            outside_note(t)
        );
    }
    s += &format!(
        "lower bound {} (no map of these ranks on these nodes goes below)\n",
        r.lower_bound
    );
    s += &format!(
        "{} rank(s) move, {} step(s); search: {} candidate(s), stopped by {}\n",
        r.moved.len(),
        steps.len(),
        r.iterations,
        r.stop.name()
    );
    // Runs of single moves print as one aligned block; an exchange as a block of its own.
    let mut block: Vec<MoveText> = Vec::new();
    for st in &steps {
        if st.kind == "exchange" {
            s += &topology::report::moves_text(&std::mem::take(&mut block));
            s += "      exchange at once:\n";
        }
        block.extend(st.moves.iter().map(|m| MoveText {
            rank: m.rank.into(),
            from: &m.from,
            to: &m.to,
        }));
        if st.kind == "exchange" {
            s += &topology::report::moves_text(&std::mem::take(&mut block));
        }
    }
    s += &topology::report::moves_text(&block);
    if let Some(path) = o.output {
        s += &format!("map written to {}\n", path.display());
    }
    write_out(None, &s)
}

/// `spares collisions`.
pub fn collisions(path: &Path, pattern: Option<&str>, periodic: bool, as_json: bool) -> Result<()> {
    let (map, meta) = input::map(path)?;
    let q = map.grid().dims();
    let pattern = match pattern {
        Some(p) => Pattern::parse(p, q)?,
        None => meta.pattern.clone(),
    };
    let periodic = periodic || meta.periodic;
    note_periodic(map.compute(), &pattern, periodic);
    let t = map.traffic(&pattern, periodic);
    if as_json {
        #[derive(Serialize)]
        struct Out {
            pattern: String,
            periodic: bool,
            #[serde(flatten)]
            traffic: Traffic,
        }
        return write_out(
            None,
            &json(&Out {
                pattern: pattern.to_string(),
                periodic,
                traffic: t,
            }),
        );
    }
    write_out(
        None,
        &format!(
            "pattern {pattern} {}\ncollisions     {}\nmessages       {}\ntotal hops     {}\nhot links      {} (load >= 2)\nlongest route  {} hops\noutside links  {} (links out of the box, shared with other jobs)\n",
            if periodic { "periodic" } else { "non-periodic" },
            t.collisions,
            t.messages,
            t.total_hops,
            t.hot_links,
            t.longest_route,
            t.outside_links
        ),
    )
}

/// Says on stderr what a periodic stencil does on logical extents of 1 and 2 (one message per
/// offset), where the figures could surprise.
pub fn note_periodic(compute: &[u32], pattern: &Pattern, periodic: bool) {
    for n in topology::traffic::periodic_notes(compute, pattern, periodic) {
        eprintln!("spares: note: {n}");
    }
}

/// `, 12 links outside the box`: where messages leave the job's box (the shorter way round a
/// ring the box covers in part), over links that other jobs share.
fn outside_note(t: Traffic) -> String {
    if t.outside_links == 0 {
        String::new()
    } else {
        format!(", {} links outside the box", t.outside_links)
    }
}

/// Rankfile formats.
pub enum Format {
    Hostfile,
    OpenMpi,
    Csv,
}

/// `spares rankfile`.
pub fn rankfile(path: &Path, format: Format, output: Option<&Path>) -> Result<()> {
    let (map, meta) = input::map(path)?;
    let s = rank_lines(&map, &meta, format).with_context(|| path.display().to_string())?;
    write_out(output, &s)
}

/// The ranks of a map in rank order as a SLURM_HOSTFILE, an Open MPI rankfile or CSV.
pub fn rank_lines(map: &SpareMap, meta: &MapMeta, format: Format) -> Result<String> {
    if map.is_lost() {
        bail!("the job is lost (a rank sits on a failed node); no rankfile can be written");
    }
    let q = map.grid().dims();
    let hosts = meta.hosts.as_ref();
    let mut s = String::new();
    match format {
        Format::Csv => {
            let dims = ["x", "y", "z", "a", "b", "c"];
            s += &format!("rank,host,{}\n", dims[..q].join(","));
            for (rank, &n) in map.rank_nodes().iter().enumerate() {
                let c: Vec<String> = map.coord(n)[..q].iter().map(|v| v.to_string()).collect();
                let h = hosts.map_or("", |h| h[n as usize].as_str());
                s += &format!("{rank},{h},{}\n", c.join(","));
            }
        }
        Format::Hostfile | Format::OpenMpi => {
            let hosts = hosts
                .ok_or_else(|| anyhow!("the map has no host names; plan it with --topology"))?;
            for (rank, &n) in map.rank_nodes().iter().enumerate() {
                let h = &hosts[n as usize];
                match format {
                    Format::Hostfile => s += &format!("{h}\n"),
                    _ => s += &format!("rank {rank}={h} slot=0\n"),
                }
            }
        }
    }
    Ok(s)
}

/// `spares policy`.
pub fn policy(dims: usize, band: &str, sides: &[u32], as_json: bool) -> Result<()> {
    if !(1..=6).contains(&dims) {
        bail!("--dims {dims}: a network has 1 to 6 dimensions");
    }
    let (lo, hi) = band
        .split_once(',')
        .and_then(|(a, b)| Some((a.trim().parse::<f64>().ok()?, b.trim().parse::<f64>().ok()?)))
        .ok_or_else(|| anyhow!("--band '{band}': give min,max in percent, e.g. 2,5"))?;
    let policy = AutoPolicy::new(lo / 100.0, hi / 100.0, &[])?;
    let rows = policy.table_for_cubes(dims, sides);
    if as_json {
        #[derive(Serialize)]
        struct Row {
            side: u32,
            nodes: u64,
            spares: String,
            fraction: f64,
            in_band: bool,
        }
        let out: Vec<Row> = rows
            .iter()
            .map(|(n, c)| Row {
                side: *n,
                nodes: c.plan.box_nodes,
                spares: c.plan.spares.clone(),
                fraction: c.plan.fraction,
                in_band: c.in_band,
            })
            .collect();
        return write_out(None, &json(&out));
    }
    let mut s = format!("spare fraction band {lo}% to {hi}%, {dims}-dimensional cubic jobs\n");
    s += "compute side  box nodes  spares    fraction  in band\n";
    for (n, c) in rows {
        s += &format!(
            "{n:>12}  {:>9}  {:<8}  {:>7.2}%  {}\n",
            c.plan.box_nodes,
            c.plan.spares,
            c.plan.fraction * 100.0,
            if c.in_band { "yes" } else { "no" }
        );
    }
    write_out(None, &s)
}

/// The default node counts of a site's table: every count on a small network, else powers of
/// two and cubes.
fn default_counts(network_nodes: u32) -> Vec<u32> {
    if network_nodes <= 64 {
        return (1..=network_nodes).collect();
    }
    let mut n: Vec<u32> = (0..32)
        .map(|k| 1u32 << k)
        .take_while(|&c| c <= network_nodes)
        .collect();
    n.extend(
        (2..)
            .map(|s: u32| s.saturating_mul(s).saturating_mul(s))
            .take_while(|&c| c <= network_nodes),
    );
    n.sort_unstable();
    n.dedup();
    n
}

/// `spares policy` with a site policy: what `--spares=auto` gives a job of each node count
/// on the site's network (`sbatch -N COUNT --spares=auto`), and where each choice comes from.
pub fn site_policy_table(
    policy: &topology::site_policy::Policy,
    counts: &[u32],
    hours: Option<f64>,
    as_json: bool,
) -> Result<()> {
    use topology::site_policy::{Decision, JobFacts, Spares, SparesRequest};
    if let Some(h) = hours.filter(|h| !(*h > 0.0 && h.is_finite())) {
        bail!("--time {h}: give the jobs' time limit in hours, above 0");
    }
    let counts = if counts.is_empty() {
        default_counts(policy.topology.grid.len())
    } else {
        counts.to_vec()
    };
    let req = SparesRequest {
        spares: Some(Spares::Auto),
        ..Default::default()
    };
    #[derive(Serialize)]
    struct Row {
        nodes: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        plan: Option<Plan>,
        /// Why the policy chose this shape, or why it refuses the job.
        why: String,
    }
    let rows: Vec<Row> = counts
        .iter()
        .map(|&n| {
            let facts = JobFacts {
                nodes: Some(n),
                time_limit_minutes: hours.map(hours_to_minutes),
                admitted: false,
            };
            match policy.decide_job(&req, &facts) {
                Ok(Decision::Spares {
                    plan, auto_reason, ..
                }) => Row {
                    nodes: n,
                    plan: Some(plan),
                    why: auto_reason.unwrap_or_default(),
                },
                Ok(Decision::Untouched) => Row {
                    nodes: n,
                    plan: None,
                    why: "no spares".into(),
                },
                Err(r) => Row {
                    nodes: n,
                    plan: None,
                    why: format!("refused: {}", r.0),
                },
            }
        })
        .collect();
    if as_json {
        return write_out(None, &json(&rows));
    }
    let t = &policy.topology;
    let mut s = format!(
        "site policy {}: network {} ({}, {} nodes), allocation unit {}\n",
        policy.path.display(),
        t.name,
        format_shape(t.grid.extents()),
        t.grid.len(),
        t.unit
    );
    s += &format!(
        "default_spares {}, default_method {}, max_fraction {:.1}%, allowed {}\n",
        policy.default_spares,
        policy.default_method,
        policy.max_fraction * 100.0,
        policy.allowed.as_ref().map_or("any".to_string(), |a| {
            a.iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
    );
    if let Some(f) = &policy.failure_rate {
        s += &format!(
            "auto: by failure rate: {} failures per node-hour (MTBF {:.0} h), target {:.2}%, over {}\n",
            f.rate,
            1.0 / f.rate,
            f.target * 100.0,
            match (hours, f.default_hours) {
                (Some(h), _) => format!("{h} h (--time)"),
                (None, Some(h)) => format!("{h} h (the policy's default_hours)"),
                (None, None) => "the job's --time".to_string(),
            }
        );
    } else if policy.auto.table.is_empty() {
        s += "auto: no table: the most protective qD(r,1) under max_fraction\n";
    } else {
        for (up, shape) in &policy.auto.table {
            match up {
                Some(u) => s += &format!("auto: up to {u} compute nodes: {shape}\n"),
                None => s += &format!("auto: larger jobs: {shape}\n"),
            }
        }
    }
    s += "-N     compute    box        spares    box nodes  fraction  why\n";
    for r in rows {
        match r.plan {
            Some(p) => {
                s += &format!(
                    "{:<6} {:<10} {:<10} {:<9} {:>9}  {:>7.2}%  {}\n",
                    r.nodes,
                    format_shape(&p.compute),
                    format_shape(&p.box_extents),
                    p.spares,
                    p.box_nodes,
                    p.fraction * 100.0,
                    r.why
                )
            }
            None => s += &format!("{:<6} {}\n", r.nodes, r.why),
        }
    }
    write_out(None, &s)
}

/// Minutes of a time in hours, as Slurm counts them (capped below `INFINITE`).
fn hours_to_minutes(h: f64) -> u32 {
    (h * 60.0).round().clamp(0.0, f64::from(u32::MAX - 2)) as u32
}

/// The failure rate of `spares policy`'s options, if any.
pub fn failure_rate_args(
    mtbf: Option<f64>,
    rate: Option<f64>,
    target: Option<f64>,
) -> Result<Option<topology::policy::FailureRate>> {
    if mtbf.is_none() && rate.is_none() {
        if target.is_some() {
            bail!("--target needs --mtbf or --failures-per-node-hour");
        }
        return Ok(None);
    }
    let spec = topology::policy::FailureRateSpec {
        node_mtbf_hours: mtbf,
        failures_per_node_hour: rate,
        target: target.unwrap_or(0.99),
        default_hours: None,
    };
    Ok(Some(topology::policy::FailureRate::from_spec(&spec)?))
}

/// `spares policy --mtbf H [--time T]` without a site policy: for cubic jobs of each side
/// (on a network twice as large), each qD(r,1)'s probability of keeping its spares over
/// `hours`, and the shape failure-rate sizing picks (the smallest box meeting the target).
pub fn failure_rate_table(
    rate: &topology::policy::FailureRate,
    hours: f64,
    dims: usize,
    sides: &[u32],
    (method, samples): (&str, u64),
    as_json: bool,
) -> Result<()> {
    use topology::policy::{failure_rate_candidates, poisson_weighted};
    if !(1..=6).contains(&dims) {
        bail!("--dims {dims}: a network has 1 to 6 dimensions");
    }
    let method = topology::Method::parse(method, dims)?;
    let ends_in_0d = method.degrees().last() == Some(&0);
    if !ends_in_0d && !(1..=MAX_SURVIVAL_SAMPLES).contains(&samples) {
        bail!("--samples {samples}: give 1 to {MAX_SURVIVAL_SAMPLES}");
    }
    // The probability of keeping the job alive: while a free spare is left for a method that
    // ends in 0D; else over the simulator's survival curve of that box and method.
    let keep_of = |p: &Plan| -> Result<f64> {
        let mean = rate.expected_failures(p.box_nodes, hours);
        if ends_in_0d {
            return Ok(topology::policy::poisson_at_most(p.spare_nodes, mean));
        }
        Ok(poisson_weighted(
            mean,
            &survival_curve(p, &method, samples)?,
        ))
    };
    if !(hours > 0.0 && hours <= topology::policy::MAX_HOURS) {
        bail!("--time {hours}: give hours above 0");
    }
    #[derive(Serialize)]
    struct Shape {
        spares: String,
        box_nodes: u64,
        spare_nodes: u64,
        expected_failures: f64,
        keep_probability: f64,
    }
    #[derive(Serialize)]
    struct Row {
        side: u32,
        compute_nodes: u64,
        chosen: String,
        meets_target: bool,
        shapes: Vec<Shape>,
    }
    let candidates = failure_rate_candidates(dims);
    let mut rows = Vec::new();
    for &n in sides {
        let compute = vec![n; dims];
        let network = vec![n.saturating_mul(2).max(n + 4); dims];
        let plan_of = |s: &topology::SpareShape| {
            Plan::for_compute(&compute, Some(s), &topology::AllocationUnit::Node, &network)
        };
        // Every plan's probability once (a simulation each for a method without 0D).
        let mut keep: Vec<(Plan, f64)> = Vec::new();
        for s in &candidates {
            if let Ok(p) = plan_of(s) {
                let k = keep_of(&p)?;
                keep.push((p, k));
            }
        }
        let known = |p: &Plan| {
            keep.iter()
                .find(|(q, _)| q.spares == p.spares)
                .map_or(0.0, |(_, k)| *k)
        };
        let Ok(choice) = rate.choose_with(&candidates, hours, plan_of, known) else {
            continue;
        };
        let shapes = keep
            .iter()
            .filter(|(p, _)| p.spares.ends_with(",1)"))
            .map(|(p, k)| Shape {
                keep_probability: *k,
                spares: p.spares.clone(),
                box_nodes: p.box_nodes,
                spare_nodes: p.spare_nodes,
                expected_failures: rate.expected_failures(p.box_nodes, hours),
            })
            .collect();
        rows.push(Row {
            side: n,
            compute_nodes: choice.plan.compute_nodes,
            chosen: choice.plan.spares.clone(),
            meets_target: choice.in_band,
            shapes,
        });
    }
    if as_json {
        return write_out(None, &json(&rows));
    }
    let mut s = format!(
        "failure rate {} per node-hour (MTBF {:.0} h), {hours} h, target {:.2}%; {dims}-dimensional cubic jobs, method {method}\n",
        rate.rate,
        1.0 / rate.rate,
        rate.target * 100.0
    );
    if ends_in_0d {
        s += "P(keep): the probability that failures (spares included) stay within the spares: Poisson(box nodes x rate x hours) <= spare nodes\n";
    } else {
        s += &format!("P(keep): the Poisson(box nodes x rate x hours) terms weighted by the simulator's survival after k failures ({samples} random sequences per box)\n");
    }
    s += "compute side  chosen    meets  P(keep) per qD(r,1): spares, box nodes, expected failures\n";
    for r in rows {
        let per: Vec<String> = r
            .shapes
            .iter()
            .map(|x| {
                format!(
                    "{} {:.4}% ({} nodes, {:.2} failures)",
                    x.spares,
                    x.keep_probability * 100.0,
                    x.box_nodes,
                    x.expected_failures
                )
            })
            .collect();
        s += &format!(
            "{:>12}  {:<8}  {:<5}  {}\n",
            r.side,
            r.chosen,
            if r.meets_target { "yes" } else { "no" },
            per.join("; ")
        );
    }
    write_out(None, &s)
}

/// Most failure sequences per box for a survival curve.
const MAX_SURVIVAL_SAMPLES: u64 = 100_000;
/// Largest box simulated for a survival curve (a copy of its map per sequence step).
const MAX_SURVIVAL_BOX_NODES: u64 = 1 << 16;

/// The simulator's survival curve of a plan's box under `method`: entry k is the share of
/// random failure sequences (spares included, as the simulator draws them) alive after k
/// failures, for k = 0 to the box's spare count.
fn survival_curve(plan: &Plan, method: &topology::Method, samples: u64) -> Result<Vec<f64>> {
    use topology::simulate::{Campaign, CampaignInfo, Engine, Shard};
    if plan.box_nodes > MAX_SURVIVAL_BOX_NODES {
        bail!(
            "a {} box has {} nodes: survival curves are simulated for boxes of at most {MAX_SURVIVAL_BOX_NODES} nodes (use smaller --sides, or spares simulate)",
            format_shape(&plan.box_extents),
            plan.box_nodes
        );
    }
    let q = plan.box_extents.len();
    let topology =
        topology::Topology::unnamed(topology::Grid::new(&plan.box_extents, &vec![false; q])?);
    let pattern = Pattern::star(q);
    let (map, meta) = topology::placement::job_map(
        &topology,
        plan,
        &vec![0; q],
        method.clone(),
        pattern.clone(),
        false,
    )?;
    let failures = u32::try_from(plan.spare_nodes)?;
    let info = CampaignInfo {
        topology: None,
        spares: meta.spares.clone(),
        box_extents: plan.box_extents.clone(),
        wrap: vec![false; q],
        compute: plan.compute.clone(),
        pattern: pattern.to_string(),
        periodic: false,
        failures,
        samples,
        seed: 1,
        exhaustive: false,
        keep_worst: 0,
        keep_at: Vec::new(),
        remap: None,
    };
    let campaign = Campaign {
        map,
        pattern,
        periodic: false,
        methods: vec![method.clone()],
        failures,
        engine: Engine::Incremental,
        keep_worst: 0,
        keep_at: Vec::new(),
        info,
    };
    let results = campaign.run(Shard::ALL, 1, None)?;
    Ok(results.methods[0]
        .steps
        .iter()
        .map(|st| st.survival())
        .collect())
}

/// "pattern 7p non-periodic": the first line of the text outputs that describe a map.
fn pattern_words(meta: &MapMeta) -> String {
    let periodic = if meta.periodic {
        "periodic"
    } else {
        "non-periodic"
    };
    format!("pattern {} {periodic}", meta.pattern)
}
