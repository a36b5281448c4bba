//! `spares simulate`, `merge` and `plot` end to end: the same numbers whatever the threads,
//! shards that merge into the single run, the seeds' first facts, worst maps on disk, files
//! that are what they claim to be.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn spares(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spares"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap())
        .output()
        .expect("spares runs")
}

fn ok(args: &[&str]) -> String {
    let o = spares(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn results(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A small campaign on an 8x8x8 mesh with 3D(2,1) spares; extra arguments appended.
fn campaign(out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = out.to_str().unwrap();
    let mut args = vec![
        "simulate",
        "-n",
        "8x8x8",
        "--spares",
        "3D(2,1)",
        "-p",
        "7p",
        "-m",
        "hybrid,0D,1D",
        "--samples",
        "120",
        "--seed",
        "5",
        "-q",
        "-o",
        o,
    ];
    args.extend_from_slice(extra);
    ok(&args);
    results(out)
}

#[test]
fn the_numbers_do_not_depend_on_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let one = campaign(&dir.path().join("one.json"), &["--threads", "1"]);
    let two = campaign(&dir.path().join("two.json"), &["--threads", "2"]);
    let five = campaign(&dir.path().join("five.json"), &["--threads", "5"]);
    assert_eq!(one, two);
    assert_eq!(one, five);
}

#[test]
fn shards_merge_into_exactly_the_single_run() {
    let dir = tempfile::tempdir().unwrap();
    let whole = campaign(&dir.path().join("whole.json"), &[]);
    let mut parts: Vec<PathBuf> = Vec::new();
    for i in 0..3 {
        let p = dir.path().join(format!("shard{i}.json"));
        let shard = format!("{i}/3");
        campaign(&p, &["--shard", &shard]);
        parts.push(p);
    }
    let merged = dir.path().join("merged.json");
    let mut args = vec!["merge", "-o", merged.to_str().unwrap()];
    args.extend(parts.iter().map(|p| p.to_str().unwrap()));
    ok(&args);
    let mut m = results(&merged);
    assert_eq!(m["shards"], serde_json::json!([0, 1, 2]));
    // The single run is shard 0 of 1; everything else must be equal.
    m["shards"] = serde_json::json!([0]);
    m["shard_count"] = serde_json::json!(1);
    assert_eq!(m, whole);
    // Merging a shard twice, or shards of another campaign, is refused.
    let o = spares(&[
        "merge",
        parts[0].to_str().unwrap(),
        parts[0].to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let other = dir.path().join("other.json");
    ok(&[
        "simulate",
        "-n",
        "8x8x8",
        "--spares",
        "3D(2,1)",
        "-m",
        "hybrid,0D,1D",
        "--samples",
        "120",
        "--seed",
        "6",
        "--shard",
        "1/3",
        "-q",
        "-o",
        other.to_str().unwrap(),
    ]);
    let o = spares(&["merge", parts[0].to_str().unwrap(), other.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("different campaigns"));
}

#[test]
fn the_first_two_failures_on_12_cubed_use_3d_sliding_without_collision() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let csv = dir.path().join("r.csv");
    ok(&[
        "simulate",
        "-n",
        "12x12x12",
        "--spares",
        "3D(2,1)",
        "-p",
        "7p",
        "-m",
        "hybrid",
        "--samples",
        "300",
        "-k",
        "276",
        "-q",
        "-o",
        out.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let r = results(&out);
    let steps = &r["methods"][0]["steps"];
    for f in 1..=2 {
        let s = &steps[f];
        // Every failure of a compute node is a 3D slide, and no link carries two messages.
        assert_eq!(s["selected"][1], 0);
        assert_eq!(s["selected"][2], 0);
        assert_eq!(s["selected"][0], 0);
        let subs = s["selected"][3].as_u64().unwrap();
        assert_eq!(subs + s["free_hits"].as_u64().unwrap(), 300);
        assert_eq!(s["histogram"], serde_json::json!([0, 300]), "step {f}");
    }
    // Hybrid ends in 0D, so it survives every spare's use (journal seed, J:491-493).
    assert_eq!(steps[276]["alive"], 300);
    // The 002 seed: about 14 collisions on average after 276 failures.
    let mean = steps[276]["sum_collisions"].as_f64().unwrap() / 300.0;
    assert!((12.5..=15.5).contains(&mean), "mean {mean}");
    // The CSV has a header and one row per failure count.
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(text.starts_with("method,failed,cases,alive,survival,best,mean"));
    assert_eq!(text.lines().count(), 1 + 277);
}

#[test]
fn exhaustive_runs_count_every_ordered_sequence() {
    // 4x3 mesh, 2D(1,1): compute 3x2, spares on x=3 and y=2 (6 spares, 12 nodes).
    let out = ok(&[
        "simulate",
        "-n",
        "4x3",
        "--spares",
        "2D(1,1)",
        "-m",
        "0D",
        "-k",
        "2",
        "--exhaustive",
        "--json",
        "-q",
    ]);
    let r: serde_json::Value = serde_json::from_str(&out).unwrap();
    let steps = &r["methods"][0]["steps"];
    assert_eq!(steps[1]["cases"], 12);
    assert_eq!(steps[2]["cases"], 12 * 11);
    // Six spares: 0D survives any two failures.
    assert_eq!(steps[2]["alive"], 132);
    // Too many sequences are refused with a way out.
    let o = spares(&[
        "simulate",
        "-n",
        "12x12x12",
        "--spares",
        "3D(2,1)",
        "-k",
        "5",
        "--exhaustive",
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--samples"));
}

#[test]
fn worst_maps_are_written_as_maps_and_hostfiles() {
    let dir = tempfile::tempdir().unwrap();
    let worst = dir.path().join("worst");
    let out = dir.path().join("r.json");
    ok(&[
        "simulate",
        "-t",
        "configs/torus-4x4x2.yaml",
        "-s",
        "3x3x2",
        "--spares",
        "3D(2,1)",
        "-m",
        "hybrid",
        "--samples",
        "50",
        "--keep-worst",
        "4",
        "--at",
        "1,3",
        "--worst-dir",
        worst.to_str().unwrap(),
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]);
    let r = results(&out);
    for (i, k) in [1, 3].iter().enumerate() {
        let kept = &r["methods"][0]["worst"][i];
        assert_eq!(kept["failed"], *k);
        let cases = kept["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 4);
        let sub = worst.join("hybrid").join(format!("failed-{k}"));
        let mut maps: Vec<_> = std::fs::read_dir(&sub)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        maps.sort();
        assert_eq!(maps.len(), 4);
        // Each map's own collisions are the kept figure, and it has as many failed nodes.
        for (map, case) in maps.iter().zip(cases) {
            let m: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(map).unwrap()).unwrap();
            assert_eq!(m["collisions"], case["collisions"]);
            assert_eq!(m["failed"].as_array().unwrap().len(), *k as usize);
            let hostfile = std::fs::read_to_string(map.with_extension("hostfile")).unwrap();
            assert_eq!(hostfile.lines().count(), 18);
            assert!(hostfile.lines().all(|l| l.starts_with("node")));
        }
    }
}

#[test]
fn plots_are_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    campaign(&out, &[]);
    for figure in [
        "collisions",
        "survival",
        "selection",
        "cumulative-selection",
    ] {
        let stem = dir.path().join(figure);
        let printed = ok(&[
            "plot",
            out.to_str().unwrap(),
            "-f",
            figure,
            "-o",
            stem.to_str().unwrap(),
        ]);
        assert_eq!(printed.lines().count(), 2);
        let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
        assert!(svg.contains("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("8x8x8"));
        let png = std::fs::read(stem.with_extension("png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    }
}

#[test]
fn bad_campaigns_are_refused() {
    for (args, want) in [
        (
            vec![
                "simulate",
                "-n",
                "8x8x8",
                "--spares",
                "3D(2,1)",
                "-m",
                "hybrid,9D",
            ],
            "9D",
        ),
        (
            vec![
                "simulate", "-n", "8x8x8", "--spares", "3D(2,1)", "--shard", "3/3",
            ],
            "shard",
        ),
        (
            vec![
                "simulate", "-n", "8x8x8", "--spares", "3D(2,1)", "-k", "9999",
            ],
            "failures",
        ),
        (
            vec![
                "simulate",
                "-n",
                "8x8x8",
                "--spares",
                "3D(2,1)",
                "--keep-worst",
                "2",
                "--at",
                "0",
            ],
            "failure counts",
        ),
        (
            vec![
                "simulate",
                "-n",
                "8x8x8",
                "--spares",
                "3D(2,1)",
                "-m",
                "1D:least-load",
            ],
            "0D",
        ),
    ] {
        let o = spares(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: '{want}' not in {err}");
    }
}

/// The re-mapping options mean nothing without --remap-at: refused, not silently ignored.
#[test]
fn remap_options_without_remap_at_are_refused() {
    for option in [["--max-moves", "5"], ["--remap-iterations", "300"]] {
        let mut args = vec![
            "simulate",
            "-n",
            "6x6x6",
            "--spares",
            "3D(1,1)",
            "--samples",
            "2",
        ];
        args.extend_from_slice(&option);
        let o = spares(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("--remap-at"), "{args:?}: {err}");
    }
}

/// A 6-D box stencil (728 offsets) gives the same campaign with the incremental engine and with
/// full recomputation, and a slide of the whole job keeps its collisions (32) and messages.
#[test]
fn six_dimensional_box_stencil_engines_agree() {
    let dir = tempfile::tempdir().unwrap();
    let run = |engine: &str| {
        let out = dir.path().join(format!("{engine}.json"));
        ok(&[
            "simulate",
            "-n",
            "3x2x2x2x2x2",
            "--spares",
            "6D(1,1)",
            "-p",
            "box",
            "-m",
            "hybrid,0D",
            "--samples",
            "20",
            "--seed",
            "3",
            "--engine",
            engine,
            "-o",
            out.to_str().unwrap(),
        ]);
        let mut v = results(&out);
        v.as_object_mut().unwrap().remove("run");
        v
    };
    assert_eq!(run("incremental"), run("full"));
    let v: serde_json::Value = serde_json::from_str(&ok(&[
        "substitute",
        "-n",
        "3x2x2x2x2x2",
        "--spares",
        "6D(1,1)",
        "-m",
        "6D",
        "-p",
        "box",
        "--fail",
        "0,0,0,0,0,0",
        "--json",
    ]))
    .unwrap();
    assert_eq!(v["steps"][0]["traffic"]["collisions"], 32);
    assert_eq!(v["steps"][0]["traffic"]["messages"], 4032);
}

/// The incremental engine equals full recomputation over 1-D to 6-D networks, star and box
/// stencils, periodic and not, tori and meshes, and boxes smaller than the network (whose
/// messages may take the shorter way round a ring, out of the box).
#[test]
fn engines_agree_across_dimensions_patterns_and_partial_boxes() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[&[&str]] = &[
        &[
            "-n", "12", "--links", "ring", "-s", "8", "--spares", "1D(1,2)", "-p", "star",
        ],
        &[
            "-n",
            "8x7",
            "--links",
            "ring,mesh",
            "-s",
            "5x5",
            "--spares",
            "2D(2,1)",
            "-p",
            "box",
            "--periodic",
        ],
        &[
            "-n",
            "6x6x4",
            "--links",
            "ring",
            "-s",
            "4x4x3",
            "--spares",
            "3D(2,1)",
            "-p",
            "7p",
            "--periodic",
            "--origin",
            "4,5,3",
        ],
        &[
            "-n", "5x4x4", "--links", "ring", "-s", "3x3x3", "--spares", "3D(3,1)", "-p", "27p",
        ],
        &[
            "-n",
            "4x3x3x3",
            "--links",
            "ring",
            "-s",
            "2x2x2x2",
            "--spares",
            "4D(1,1)",
            "-p",
            "box",
            "--periodic",
        ],
        &[
            "-n",
            "3x3x2x2x2x2",
            "--links",
            "ring",
            "-s",
            "2x2x2x2x2x2",
            "--spares",
            "6D(1,1)",
            "-p",
            "star",
            "--periodic",
        ],
        &["-n", "3x2x2x2x2x2", "--spares", "6D(1,1)", "-p", "box"],
    ];
    for (i, case) in cases.iter().enumerate() {
        let run = |engine: &str| {
            let out = dir.path().join(format!("{i}-{engine}.json"));
            let mut args = vec!["simulate"];
            args.extend_from_slice(case);
            args.extend_from_slice(&[
                "-m",
                "hybrid,0D",
                "--samples",
                "12",
                "--seed",
                "5",
                "--engine",
                engine,
                "-o",
            ]);
            args.push(out.to_str().unwrap());
            ok(&args);
            results(&out)
        };
        assert_eq!(run("incremental"), run("full"), "{case:?}");
        // The same through `spares substitute`: every step's traffic.
        let substitute = |engine: &str| {
            let mut args = vec!["substitute"];
            args.extend_from_slice(case);
            args.extend_from_slice(&[
                "-m",
                "hybrid",
                "--fail-random",
                "6",
                "--seed",
                "9",
                "--json",
                "--engine",
                engine,
            ]);
            ok(&args)
        };
        assert_eq!(substitute("incremental"), substitute("full"), "{case:?}");
        assert_eq!(substitute("reference"), substitute("full"), "{case:?}");
    }
}

/// The current engine gives exactly the previous one's results (every figure of the JSON) over
/// topologies, stencils, periodic tori, partial boxes and every 0D rule and hybrid.
#[test]
fn the_current_engine_equals_the_reference_engine() {
    let dir = tempfile::tempdir().unwrap();
    let methods = "hybrid,0D,1D,hybrid(-2D),hybrid:least-load,0D:alternate,0D:least-load";
    let cases: &[&[&str]] = &[
        &[
            "-n", "8x8x8", "--spares", "3D(2,1)", "-p", "7p", "-m", methods,
        ],
        &[
            "-n",
            "7x6x5",
            "--links",
            "ring",
            "--spares",
            "3D(2,1)",
            "-p",
            "27p",
            "--periodic",
            "-m",
            methods,
        ],
        &[
            "-n",
            "9x8",
            "--links",
            "ring,mesh",
            "--spares",
            "2D(2,1)",
            "-p",
            "9p",
            "-m",
            methods,
        ],
        &[
            "-n",
            "8x7x6",
            "--links",
            "ring",
            "-s",
            "6x5x6",
            "--spares",
            "3D(2,1)",
            "-p",
            "7p",
            "--periodic",
            "-m",
            methods,
        ],
        &[
            "-n",
            "16",
            "--links",
            "ring",
            "-s",
            "10",
            "--spares",
            "1D(1,2)",
            "-p",
            "star",
            "-m",
            "hybrid,0D,1D,hybrid:least-load,0D:alternate,0D:least-load",
        ],
        &[
            "-n",
            "4x3x3x3",
            "--links",
            "ring",
            "--spares",
            "4D(2,1)",
            "-p",
            "box",
            "-m",
            "hybrid,0D:alternate,hybrid:least-load",
        ],
        &[
            "-n",
            "3x3x2x2x2x2",
            "--spares",
            "6D(1,1)",
            "-p",
            "star",
            "--periodic",
            "-m",
            "hybrid,0D",
        ],
    ];
    for (i, case) in cases.iter().enumerate() {
        let run = |engine: &str, threads: &str| {
            let out = dir.path().join(format!("{i}-{engine}-{threads}.json"));
            let mut args = vec!["simulate"];
            args.extend_from_slice(case);
            args.extend_from_slice(&[
                "--samples",
                "40",
                "--seed",
                "11",
                "-q",
                "--keep-worst",
                "3",
                "--at",
                "1,2",
                "--worst-dir",
            ]);
            let worst = dir.path().join(format!("worst-{i}-{engine}-{threads}"));
            args.push(worst.to_str().unwrap());
            args.extend_from_slice(&["--threads", threads, "--engine", engine, "-o"]);
            args.push(out.to_str().unwrap());
            ok(&args);
            results(&out)
        };
        let reference = run("reference", "1");
        assert_eq!(run("incremental", "1"), reference, "{case:?}");
        assert_eq!(run("incremental", "3"), reference, "{case:?}");
    }
}

/// `spares bench` runs both incremental engines on one campaign, checks that they agree and
/// prints their rates against the measured memory-bound limits: a table of the engine's
/// size, and u16 tables in L1 and in L2 (figures, not asserted).
#[test]
fn bench_compares_the_engines_with_the_memory_bound_limit() {
    let out = ok(&[
        "bench",
        "-n",
        "6x6x6",
        "--spares",
        "3D(2,1)",
        "-p",
        "7p",
        "-m",
        "hybrid",
        "--samples",
        "5",
        "--full-samples",
        "1",
        "--rounds",
        "2",
    ]);
    for line in [
        "full recomputation:",
        "reference engine (previous incremental):",
        "current engine:",
        "current / reference:",
        "link-load updates per failure",
        "of the engine-sized / L1 / L2 limits",
        "memory-bound limit, engine-sized:",
        "memory-bound limit, L1-sized:",
        "memory-bound limit, L2-sized:",
        "u16 loads (16 KiB)",
        "u16 loads (256 KiB)",
    ] {
        assert!(out.contains(line), "{line} missing from:\n{out}");
    }
    assert!(out.contains("same results"), "{out}");
}

/// The journal's example of a box smaller than the torus: 0D takes the rank 2 hops round the
/// ring to (6,3), not 4 hops inside the box, and says which links leave the box.
#[test]
fn zero_d_goes_round_the_network_ring() {
    let out = ok(&[
        "substitute",
        "-n",
        "8x8",
        "--links",
        "ring,ring",
        "-s",
        "6x7",
        "--spares",
        "2D(2,1)",
        "-m",
        "0D",
        "--fail",
        "0,3",
    ]);
    assert!(out.contains("(0,3) -> (6,3)"), "{out}");
    assert!(out.contains("8 links outside the box"), "{out}");
}

/// A small campaign with re-mapping at 5 and 20 failures on a 6x6x6 mesh; extra arguments
/// appended.
fn remapping_campaign(out: &Path, extra: &[&str]) -> (serde_json::Value, String) {
    let o = out.to_str().unwrap();
    let mut args = vec![
        "simulate",
        "-n",
        "6x6x6",
        "--spares",
        "3D(2,1)",
        "-p",
        "7p",
        "-m",
        "hybrid,0D",
        "-k",
        "20",
        "--samples",
        "12",
        "--seed",
        "3",
        "--remap-at",
        "20,5",
        "--max-moves",
        "9",
        "--remap-iterations",
        "300",
        "-q",
        "-o",
        o,
    ];
    args.extend_from_slice(extra);
    let table = ok(&args);
    (results(out), table)
}

#[test]
fn remapped_figures_are_exact_under_threads_shards_and_merges() {
    let dir = tempfile::tempdir().unwrap();
    let (one, _) = remapping_campaign(&dir.path().join("one.json"), &["--threads", "1"]);
    let (three, _) = remapping_campaign(&dir.path().join("three.json"), &["--threads", "3"]);
    assert_eq!(one, three);
    let mut parts = Vec::new();
    for i in 0..2 {
        let p = dir.path().join(format!("s{i}.json"));
        remapping_campaign(&p, &["--shard", &format!("{i}/2")]);
        parts.push(p.to_str().unwrap().to_string());
    }
    let merged = dir.path().join("merged.json");
    ok(&[
        "merge",
        "-o",
        merged.to_str().unwrap(),
        &parts[1],
        &parts[0],
    ]);
    let mut m = results(&merged);
    m["shards"] = serde_json::json!([0]);
    m["shard_count"] = serde_json::json!(1);
    assert_eq!(m, one);
    assert_eq!(
        one["campaign"]["remap"],
        serde_json::json!({"at": [5, 20], "max_moved": 9, "iterations": 300})
    );
    // Re-mapped results and plain ones are different campaigns.
    let plain = dir.path().join("plain.json");
    ok(&[
        "simulate",
        "-n",
        "6x6x6",
        "--spares",
        "3D(2,1)",
        "-m",
        "hybrid,0D",
        "-k",
        "20",
        "--samples",
        "12",
        "--seed",
        "3",
        "--shard",
        "1/2",
        "-q",
        "-o",
        plain.to_str().unwrap(),
    ]);
    let o = spares(&["merge", &parts[0], plain.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn remapped_collisions_are_never_worse_and_moves_stay_in_budget() {
    let dir = tempfile::tempdir().unwrap();
    let (r, _) = remapping_campaign(&dir.path().join("r.json"), &[]);
    let mut improved = 0;
    for m in r["methods"].as_array().unwrap() {
        let remapped = m["remapped"].as_array().unwrap();
        assert_eq!(remapped.len(), 2);
        for st in remapped {
            let k = st["failed"].as_u64().unwrap() as usize;
            let sliding = &m["steps"][k];
            let t = &st["traffic"];
            assert_eq!(t["alive"], sliding["alive"]);
            assert!(t["sum_collisions"].as_u64() <= sliding["sum_collisions"].as_u64());
            assert!(st["max_moved"].as_u64().unwrap() <= 9, "{st}");
            improved += st["improved"].as_u64().unwrap();
        }
    }
    assert!(improved > 0, "some re-map lowers the collisions");
}

#[test]
fn remapped_table_csv_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.json");
    let csv = dir.path().join("r.csv");
    let (r, table) = remapping_campaign(&out, &["--csv", csv.to_str().unwrap()]);
    assert!(
        table.contains("hybrid re-mapped (at most 9 moved ranks, 300 iterations a case)"),
        "{table}"
    );
    assert!(table.contains("0D re-mapped"), "{table}");
    let header = table
        .lines()
        .find(|l| l.contains("improved"))
        .expect("a re-mapped table header");
    for column in [
        "failed", "cases", "best", "mean", "p50", "p99", "worst", "max",
    ] {
        assert!(header.contains(column), "{header}");
    }
    // The row at 20 failures: the cases, sliding's mean, the re-mapped mean, the moves.
    let hybrid = &r["methods"][0];
    let alive = hybrid["steps"][20]["alive"].as_u64().unwrap();
    let mean = |v: &serde_json::Value| {
        v["sum_collisions"].as_u64().unwrap() as f64 / v["alive"].as_u64().unwrap() as f64
    };
    let remapped = &hybrid["remapped"][1];
    let row: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.starts_with("hybrid re-mapped"))
        .find(|l| l.split_whitespace().next() == Some("20"))
        .expect("a row at 20 failures")
        .split_whitespace()
        .collect();
    assert_eq!(row[1], alive.to_string());
    assert_eq!(row[3], format!("{:.3}", mean(&hybrid["steps"][20])));
    assert_eq!(row[8], format!("{:.3}", mean(&remapped["traffic"])));
    assert_eq!(row[13], remapped["max_moved"].to_string());

    let text = std::fs::read_to_string(&csv).unwrap();
    let head: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    for column in [
        "remap_cases",
        "remap_mean",
        "remap_p99",
        "mean_moved",
        "max_moved",
    ] {
        assert!(head.contains(&column), "{column} not in {head:?}");
    }

    let stem = dir.path().join("collisions");
    ok(&[
        "plot",
        out.to_str().unwrap(),
        "-f",
        "collisions",
        "-o",
        stem.to_str().unwrap(),
    ]);
    let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
    for label in ["hybrid re-mapped mean", "0D re-mapped worst"] {
        assert!(svg.contains(label), "{label} not in the SVG");
    }
}

#[test]
fn remapping_options_are_checked() {
    let o = spares(&[
        "simulate",
        "-n",
        "6x6x6",
        "--spares",
        "3D(2,1)",
        "--max-moves",
        "5",
    ]);
    assert_eq!(o.status.code(), Some(2), "--max-moves needs --remap-at");
    let o = spares(&[
        "simulate",
        "-n",
        "6x6x6",
        "--spares",
        "3D(2,1)",
        "-k",
        "10",
        "--remap-at",
        "11",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("1 to 10; 11 is outside"), "{err}");
}

#[test]
fn exhaustive_campaigns_remap_too() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("e.json");
    ok(&[
        "simulate",
        "-n",
        "4x3",
        "--spares",
        "2D(1,1)",
        "-p",
        "5p",
        "-m",
        "0D,1D",
        "-k",
        "2",
        "--exhaustive",
        "--remap-at",
        "1,2",
        "--remap-iterations",
        "100",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]);
    let r = results(&out);
    assert_eq!(r["methods"][0]["steps"][2]["alive"], 132);
    for m in r["methods"].as_array().unwrap() {
        for st in m["remapped"].as_array().unwrap() {
            let k = st["failed"].as_u64().unwrap() as usize;
            assert_eq!(st["traffic"]["alive"], m["steps"][k]["alive"], "{m}");
        }
    }
}
