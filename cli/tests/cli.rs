//! The `spares` binary end to end: outputs, JSON, rankfiles, and bad input that must give a
//! one-line error and a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn spares(args: &[&str]) -> Output {
    // An installed site policy must not change what these tests see.
    Command::new(env!("CARGO_BIN_EXE_spares"))
        .args(args)
        .current_dir(repo())
        .env_remove("SPARES_POLICY")
        .output()
        .expect("spares runs")
}

fn spares_with_env(args: &[&str], key: &str, value: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spares"))
        .args(args)
        .current_dir(repo())
        .env(key, value)
        .output()
        .expect("spares runs")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("valid JSON")
}

/// Asserts a clean refusal: exit 1 (not a panic's 101), one line on stderr containing `want`.
fn refused(args: &[&str], want: &str) {
    let o = spares(args);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{args:?}: one line wanted: {err}"
    );
    assert!(err.starts_with("spares: error: "), "{err}");
    assert!(err.contains(want), "{args:?}: '{want}' not in: {err}");
}

/// Plans the 3x3x2 job with 3D(2,1) on the test torus into `map`.
fn plan_test_job(map: &Path) {
    let m = map.to_str().unwrap();
    let o = spares(&[
        "plan",
        "-t",
        "configs/torus-4x4x2.yaml",
        "-s",
        "3x3x2",
        "--spares",
        "3D(2,1)",
        "-o",
        m,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn every_topology_in_configs_loads_and_plans() {
    let mut seen = 0;
    for entry in std::fs::read_dir(repo().join("configs")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Policy files and Slurm snippets are checked by their own tests.
        if !name.ends_with(".yaml") || name.starts_with("policy") {
            continue;
        }
        let o = spares(&[
            "plan",
            "-t",
            path.to_str().unwrap(),
            "--spares",
            "none",
            "--json",
        ]);
        let v = json(&o);
        assert_eq!(v["map"]["collisions"], 1, "{name}");
        seen += 1;
    }
    assert!(seen >= 6, "only {seen} topology files found");
}

#[test]
fn plan_reports_the_seeds_spare_counts() {
    let v = json(&spares(&[
        "plan", "-n", "12x12x12", "--spares", "3D(2,1)", "--json",
    ]));
    assert_eq!(v["plan"]["spare_nodes"], 276);
    assert_eq!(v["plan"]["compute"], serde_json::json!([11, 11, 12]));
    let v = json(&spares(&[
        "plan", "-n", "24x24x24", "--spares", "3D(2,1)", "--json",
    ]));
    assert_eq!(v["plan"]["spare_nodes"], 1128);
}

#[test]
fn plan_on_the_test_torus_lists_compute_and_spare_nodes() {
    let v = json(&spares(&[
        "plan",
        "-t",
        "configs/torus-4x4x2.yaml",
        "--shape",
        "3x3x2",
        "--spares",
        "3D(2,1)",
        "--json",
    ]));
    assert_eq!(v["plan"]["box"], serde_json::json!([4, 4, 2]));
    assert_eq!(v["plan"]["spare_nodes"], 14);
    assert_eq!(
        v["compute_nodes"],
        "node[01-03,05-07,09-11,17-19,21-23,25-27]"
    );
    assert_eq!(v["spare_nodes"], "node[04,08,12-16,20,24,28-32]");
    let map = &v["map"];
    for key in [
        "box",
        "wrap",
        "compute",
        "pattern",
        "periodic",
        "ranks",
        "collisions",
    ] {
        assert!(map.get(key).is_some(), "map lacks {key}");
    }
    assert_eq!(map["ranks"][4], serde_json::json!([1, 1, 0]));
}

/// Outcomes carry the protocol's names (`sparesd`, `sparesctl` and `spares-run` use the same).
#[test]
fn outcomes_are_named_as_in_the_protocol() {
    let v = json(&spares(&[
        "substitute",
        "-n",
        "4x3",
        "--spares",
        "2D(1,1)",
        "--fail",
        "3,0",
        "--fail",
        "0,0",
        "--method",
        "0D",
        "--json",
    ]));
    let outcomes: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["free_node_died", "substituted"]);
    let v = json(&spares(&[
        "substitute",
        "-n",
        "4x3",
        "--spares",
        "2D(1,1)",
        "--fail",
        "0,0",
        "--fail",
        "1,1",
        "--method",
        "2D",
        "--json",
    ]));
    assert_eq!(v["steps"][1]["outcome"], "no_spare_left");
    assert_eq!(v["lost"], true);
}

#[test]
fn more_random_failures_than_nodes_are_refused_before_any_step() {
    refused(
        &[
            "substitute",
            "-n",
            "4x3",
            "--spares",
            "2D(1,1)",
            "--fail-random",
            "20",
        ],
        "--fail-random 20: the box has only 12 nodes",
    );
    let v = json(&spares(&[
        "substitute",
        "-n",
        "4x3",
        "--spares",
        "2D(1,1)",
        "--fail-random",
        "12",
        "--json",
    ]));
    assert_eq!(v["steps"].as_array().unwrap().len(), 12);
}

/// A periodic stencil 2 wide sends two messages to its one neighbour (one per offset) and
/// says so.
#[test]
fn periodic_stencils_on_narrow_grids_are_explained() {
    let o = spares(&[
        "plan",
        "-n",
        "3x3",
        "--spares",
        "2D(1,1)",
        "-p",
        "5p",
        "--periodic",
        "--json",
    ]);
    assert!(
        stderr(&o)
            .contains("2 wide in dimension 0, so the + and - messages go to the same neighbour"),
        "{}",
        stderr(&o)
    );
    // Compute 2x3: 6 ranks, 4 offsets each, all to other ranks.
    assert_eq!(json(&o)["map"]["traffic"]["messages"], 24);
    let o = spares(&[
        "plan",
        "-n",
        "4x4",
        "--spares",
        "2D(1,1)",
        "-p",
        "5p",
        "--periodic",
    ]);
    assert!(!stderr(&o).contains("note"), "{}", stderr(&o));
}

/// `--fail` takes box coordinates (the default, or `box:`) or network ones (`net:`), and the
/// output says which frame it prints when the box does not start at the network's origin.
#[test]
fn coordinates_name_their_frame() {
    let run = |f: &str| {
        spares(&[
            "substitute",
            "-n",
            "8x8",
            "-s",
            "4x7",
            "--spares",
            "2D(1,1)",
            "--origin",
            "3,0",
            "-m",
            "0D",
            "--fail",
            f,
        ])
    };
    let plain = stdout(&run("3,0"));
    assert!(
        plain.contains("the box starts at network node (3,0)"),
        "{plain}"
    );
    assert!(plain.contains("failure   1: (3,0)"), "{plain}");
    assert_eq!(stdout(&run("box:3,0")), plain);
    assert_eq!(stdout(&run("net:6,0")), plain);
    refused(
        &[
            "substitute",
            "-n",
            "8x8",
            "-s",
            "4x7",
            "--spares",
            "2D(1,1)",
            "--origin",
            "3,0",
            "--fail",
            "net:0,0",
        ],
        "net:(0,0) (the 5x7 box starts at net:(3,0)) is not in the job's box",
    );
    // A box wrapped round a ring: network x=1 is box x=3 for a box starting at x=6.
    let wrapped = |f: &str| {
        stdout(&spares(&[
            "substitute",
            "-n",
            "8x8",
            "--links",
            "ring",
            "-s",
            "4x7",
            "--spares",
            "2D(1,1)",
            "--origin",
            "6,0",
            "-m",
            "0D",
            "--fail",
            f,
        ]))
    };
    assert_eq!(wrapped("net:1,0"), wrapped("3,0"));
    // At the origin both frames are the same numbers: nothing to say.
    let o = stdout(&spares(&[
        "substitute",
        "-n",
        "8x8",
        "-s",
        "4x7",
        "--spares",
        "2D(1,1)",
        "--fail",
        "0,0",
    ]));
    assert!(!o.contains("coordinates are"), "{o}");
}

#[test]
fn substitute_then_rankfiles() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("map.json");
    let after = dir.path().join("after.json");
    let m = map.to_str().unwrap();
    let a = after.to_str().unwrap();
    plan_test_job(&map);
    let v = json(&spares(&[
        "substitute",
        "--map",
        m,
        "--fail",
        "node06",
        "--fail",
        "node01",
        "-o",
        a,
        "--json",
    ]));
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0]["outcome"], "substituted");
    assert_eq!(steps[0]["method_used"], "3D");
    assert_eq!(steps[0]["node"], "node06");
    assert!(steps[0]["moves"]
        .as_array()
        .unwrap()
        .iter()
        .any(|mv| mv["from"] == "node06"));
    // The hostfile of the new map has one line per rank, none on a failed node.
    let o = spares(&["rankfile", "--map", a]);
    assert!(o.status.success(), "{}", stderr(&o));
    let hosts: Vec<String> = stdout(&o).lines().map(str::to_string).collect();
    assert_eq!(hosts.len(), 18);
    assert!(!hosts.iter().any(|h| h == "node06" || h == "node01"));
    let o = spares(&["rankfile", "--map", a, "--format", "openmpi"]);
    assert!(stdout(&o).starts_with("rank 0="));
    assert!(stdout(&o).lines().all(|l| l.ends_with(" slot=0")));
    let o = spares(&["rankfile", "--map", a, "--format", "csv"]);
    assert_eq!(stdout(&o).lines().next(), Some("rank,host,x,y,z"));
    let c = json(&spares(&["collisions", "--map", a, "--json"]));
    assert_eq!(c["collisions"], v["map"]["collisions"]);
}

#[test]
fn substitute_random_failures_on_12_cubed_in_json() {
    let args = [
        "substitute",
        "-n",
        "12x12x12",
        "--spares",
        "3D(2,1)",
        "-p",
        "7p",
        "--fail-random",
        "100",
        "--seed",
        "5",
        "--json",
    ];
    let v = json(&spares(&args));
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 100);
    assert_eq!(v["map"]["failed"].as_array().unwrap().len(), 100);
    assert_eq!(v["lost"], false);
    // The same seed gives the same campaign.
    assert_eq!(v, json(&spares(&args)));
}

#[test]
fn plan_answers_as_the_site_policy_would_and_says_why() {
    // The seeds' band gave 3D(1,1) in a 4x3x2 box where the cluster's auto table gives
    // 3D(2,1) in 4x4x2 for the same job.
    let site = "configs/policy-spares.yaml";
    let v = json(&spares(&[
        "plan", "--policy", site, "-N", "18", "--spares", "auto", "--json",
    ]));
    assert_eq!(v["plan"]["spares"], "3D(2,1)");
    assert_eq!(v["plan"]["box"], serde_json::json!([4, 4, 2]));
    assert_eq!(v["plan"]["compute"], serde_json::json!([3, 3, 2]));
    let src = &v["sources"];
    assert_eq!(src["policy"], site);
    assert_eq!(
        src["spares"],
        "--spares; the policy's auto table: table row for the largest jobs"
    );
    assert_eq!(src["method"], "the policy's default_method (hybrid)");
    assert_eq!(
        src["network"],
        "the policy's topology (configs/torus-4x4x2.yaml)"
    );
    // The model's defaults say so too.
    let v = json(&spares(&[
        "plan",
        "-t",
        "configs/torus-4x4x2.yaml",
        "-N",
        "18",
        "--json",
    ]));
    assert_eq!(v["plan"]["spares"], "3D(1,1)");
    assert_eq!(v["sources"]["policy"], serde_json::Value::Null);
    assert!(v["sources"]["spares"]
        .as_str()
        .unwrap()
        .starts_with("the default without a site policy (auto); the seeds' 2%-5% band"));
    // The site's default is none and its refusals are the plugin's.
    refused(
        &["plan", "--policy", site, "-N", "18"],
        "the site's policy gives this job no spares (its default_spares is none)",
    );
    refused(
        &["plan", "--policy", site, "-N", "17", "--spares", "auto"],
        "the site's policy refuses this job: --spares=auto with -N 17:",
    );
    refused(
        &[
            "plan", "--policy", site, "-s", "1x1x1", "--spares", "3D(1,2)",
        ],
        "--spares=3D(1,2) is not allowed on this cluster",
    );
    // $SPARES_POLICY is read by default; --no-policy ignores it.
    let o = spares_with_env(
        &["plan", "-N", "18", "--spares", "auto"],
        "SPARES_POLICY",
        site,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("policy    configs/policy-spares.yaml"),
        "{}",
        stdout(&o)
    );
    let o = spares_with_env(
        &[
            "plan",
            "-N",
            "18",
            "--no-policy",
            "-t",
            "configs/torus-4x4x2.yaml",
        ],
        "SPARES_POLICY",
        site,
    );
    assert!(stdout(&o).contains("policy    none"), "{}", stdout(&o));
}

#[test]
fn policy_prints_the_sites_table() {
    let o = spares(&[
        "policy",
        "--policy",
        "configs/policy-spares.yaml",
        "-N",
        "4,17,18",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("auto: up to 4 compute nodes: 3D(1,1)"),
        "{out}"
    );
    assert!(
        out.contains("18     3x3x2      4x4x2      3D(2,1)          32    43.75%  table row for the largest jobs"),
        "{out}"
    );
    assert!(
        out.contains("17     refused: --spares=auto with -N 17"),
        "{out}"
    );
    // The seeds' band table when asked for.
    let o = spares(&[
        "policy",
        "--policy",
        "configs/policy-spares.yaml",
        "--band",
        "2,5",
    ]);
    assert!(stdout(&o).starts_with("spare fraction band 2% to 5%"));
}

#[test]
fn policy_sizes_spares_by_failure_rate() {
    // Nodes with a 100 h MTBF, a day, a 512-node cubic job: 3D(1,1) (64 spares, 138
    // failures expected) is hopeless; 3D(3,1) is the smallest box that keeps its spares with
    // 99% probability.
    let v = json(&spares(&[
        "policy", "--mtbf", "100", "--time", "24", "--sides", "8", "--json",
    ]));
    let row = &v.as_array().unwrap()[0];
    assert_eq!(row["chosen"], "3D(3,1)");
    assert_eq!(row["meets_target"], true);
    let light = &row["shapes"][0];
    assert_eq!(light["spares"], "3D(1,1)");
    assert_eq!(light["spare_nodes"], 64);
    assert!((light["expected_failures"].as_f64().unwrap() - 138.24).abs() < 1e-9);
    assert!(light["keep_probability"].as_f64().unwrap() < 1e-6);
    let chosen = &row["shapes"][2];
    assert!(chosen["keep_probability"].as_f64().unwrap() >= 0.99);
    // The site's table with a failure rate given on the command line: reliable nodes for a
    // day need only the lightest shape (the table's row would give 3D(2,1)); the reason gives
    // the probability.
    let o = spares(&[
        "policy",
        "--policy",
        "configs/policy-spares.yaml",
        "--mtbf",
        "5000",
        "--time",
        "24",
        "-N",
        "18",
    ]);
    let out = stdout(&o);
    assert!(
        out.contains("18     3x3x2      4x3x2      3D(1,1)          24    25.00%  failure rate: the smallest box that keeps its spares over 24 h with probability 100.00% (target 99.00%; 0.115 failures expected among 24 nodes)"),
        "{out}"
    );
    // A method that can fail before its spares run out: the simulator's survival curve
    // weighs the Poisson terms, and the same boxes keep the job alive less often.
    let sim = json(&spares(&[
        "policy",
        "--mtbf",
        "100",
        "--time",
        "24",
        "--sides",
        "4",
        "--method",
        "1D",
        "--samples",
        "50",
        "--json",
    ]));
    let plain = json(&spares(&[
        "policy", "--mtbf", "100", "--time", "24", "--sides", "4", "--json",
    ]));
    assert_eq!(plain[0]["chosen"], "3D(2,1)");
    for i in 0..3 {
        let a = sim[0]["shapes"][i]["keep_probability"].as_f64().unwrap();
        let b = plain[0]["shapes"][i]["keep_probability"].as_f64().unwrap();
        assert!(
            a < b,
            "shape {i}: simulated 1D {a} must be below the 0D bound {b}"
        );
    }
    assert_ne!(sim[0]["chosen"], "3D(2,1)");
    refused(&["policy", "--target", "0.9"], "--target needs --mtbf");
    refused(
        &[
            "plan",
            "--policy",
            "configs/policy-spares.yaml",
            "-N",
            "18",
            "--spares",
            "auto",
            "--time",
            "NaN",
        ],
        "--time NaN: give the job's time limit in hours, above 0",
    );
}

#[test]
fn policy_table_follows_the_band() {
    let v = json(&spares(&["policy", "--dims", "3", "--json"]));
    let rows = v.as_array().unwrap();
    let last = rows.last().unwrap();
    assert_eq!(last["in_band"], true);
    assert!(last["fraction"].as_f64().unwrap() <= 0.05);
}

#[test]
fn help_is_there_for_every_subcommand() {
    for sub in [
        "plan",
        "substitute",
        "collisions",
        "remap",
        "rankfile",
        "policy",
        "simulate",
        "merge",
        "bench",
        "plot",
    ] {
        let o = spares(&[sub, "--help"]);
        assert!(o.status.success());
        assert!(stdout(&o).contains("Usage: spares"), "{sub}");
    }
}

#[test]
fn bad_topology_files_are_refused_with_file_and_field() {
    let cases: &[(&str, &str, &str)] = &[
        ("malformed.yaml", "extents: [4, 4\nnodes: n[1-16]\n", "malformed.yaml: line"),
        ("unknown.yaml", "extents: [4, 4]\nnodes: n[1-16]\ncolour: red\n", "unknown field `colour`"),
        ("zero.yaml", "extents: [4, 0]\nnodes: n[1-16]\n", "extents[1]: extent 0"),
        ("seven.yaml", "extents: [2, 2, 2, 2, 2, 2, 2]\nnodes: n[1-128]\n", "1 to 6 dimensions"),
        ("count.yaml", "extents: [4, 4]\nnodes: n[1-15]\n", "nodes: 15 names for 16 cells"),
        ("dup.yaml", "extents: [2, 2]\nnodes: a,b,c,a\n", "'a' appears twice"),
        ("hostlist.yaml", "extents: [2, 2]\nnodes: n[4-1]\n", "runs backwards"),
        ("slurm.yaml", "- topology: t\n  torus3d:\n    toruses:\n      - name: p\n        dims: {x: 2, y: 2}\n        nodes: n[1-4]\n", "missing field `z`"),
    ];
    for (name, text, want) in cases {
        let (_d, p) = temp_file(name, text);
        refused(
            &["plan", "-t", p.to_str().unwrap(), "--spares", "none"],
            want,
        );
    }
    refused(
        &["plan", "-t", "/nonexistent/t.yaml"],
        "cannot read /nonexistent/t.yaml",
    );
}

#[test]
fn bad_plans_are_refused() {
    refused(
        &["plan", "-n", "12x12x12", "--spares", "3D(4,1)"],
        "r = 4 must be between 1 and q = 3",
    );
    refused(
        &["plan", "-n", "12x12x12", "--spares", "3D(1,12)"],
        "s must be smaller than the extent",
    );
    refused(
        &["plan", "-n", "12x12x12", "--spares", "2D(1,1)"],
        "written for 2D but the network has 3",
    );
    refused(
        &["plan", "-n", "4x4x2", "-s", "4x4x2", "--spares", "3D(2,1)"],
        "needs a 5x5x2 box; the network is only 4x4x2",
    );
    refused(
        &["plan", "-n", "4x4x2", "-s", "3x3", "--spares", "none"],
        "has 2 dimensions; the network has 3",
    );
    refused(&["plan", "-n", "4x0x2"], "extents must be at least 1");
    refused(
        &["plan", "-n", "12x12x12", "--spares", "3D(2,1)", "-p", "5p"],
        "takes 7p (star) or 27p (box)",
    );
    refused(
        &["plan", "-n", "12x12x12", "--spares", "3D(2,1)", "-m", "4D"],
        "4D sliding needs",
    );
    refused(
        &["plan", "-n", "4x4x2", "--spares", "auto"],
        "needs the job's size",
    );
}

#[test]
fn bad_failures_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("map.json");
    let m = map.to_str().unwrap();
    plan_test_job(&map);
    let before = std::fs::read(&map).unwrap();
    refused(
        &["substitute", "--map", m, "--fail", "node99"],
        "node node99 is not in the job's box",
    );
    refused(
        &["substitute", "--map", m, "--fail", "9,9,9"],
        "outside the 4x4x2 grid",
    );
    refused(
        &[
            "substitute",
            "--map",
            m,
            "--fail",
            "node05",
            "--fail",
            "node05",
            "-o",
            m,
        ],
        "has already failed; the map is unchanged",
    );
    assert_eq!(
        std::fs::read(&map).unwrap(),
        before,
        "a refused substitution writes nothing"
    );
    let (_d, garbage) = temp_file("garbage.json", "{\"version\": 1, \"box\": [2]}");
    refused(
        &[
            "substitute",
            "--map",
            garbage.to_str().unwrap(),
            "--fail",
            "0",
        ],
        "not a map document",
    );
    let (_d2, bin) = temp_file("bin.json", "\u{0}\u{1}");
    refused(
        &["collisions", "--map", bin.to_str().unwrap()],
        "not a map document",
    );
}

/// Every map document the tools write is valid under the shipped JSON Schema
/// (docs/map-document.schema.json), which admits no undocumented field.
#[test]
fn map_documents_follow_the_shipped_schema() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/map-document.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("map.json");
    let m = map.to_str().unwrap();
    let mut docs = Vec::new();
    // A site topology with host names, the seeds' network after failures, a box smaller than
    // a torus (rings), a 0D:alternate history (zero_sides).
    plan_test_job(&map);
    docs.push(std::fs::read_to_string(&map).unwrap());
    for args in [
        &[
            "-n",
            "12x12x12",
            "--spares",
            "3D(2,1)",
            "--fail-random",
            "40",
        ][..],
        &[
            "-n", "8x8", "--links", "ring", "-s", "6x7", "--spares", "2D(2,1)", "--fail", "0,3",
        ],
        &[
            "-n",
            "6x6",
            "--spares",
            "2D(2,1)",
            "-m",
            "0D:alternate",
            "--fail-random",
            "5",
        ],
    ] {
        let mut a = vec!["substitute"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", m]);
        let o = spares(&a);
        assert!(o.status.success(), "{}", stderr(&o));
        docs.push(std::fs::read_to_string(&map).unwrap());
    }
    assert!(
        docs[2].contains("\"rings\""),
        "the partial box records its rings"
    );
    assert!(docs[3].contains("\"zero_sides\""));
    for doc in &docs {
        let v: serde_json::Value = serde_json::from_str(doc).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
    // The schema is strict: an unknown field is refused, as `spares` refuses it.
    let mut v: serde_json::Value = serde_json::from_str(&docs[0]).unwrap();
    v["colour"] = serde_json::json!("blue");
    assert!(!validator.is_valid(&v));
}

/// `spares remap` writes a map document that the other tools take, within its move budget,
/// the same for the same seed and iteration count, and valid under the shipped schema; on a
/// site's torus (host names, a box that wraps).
#[test]
fn remap_writes_a_map_that_collisions_rankfile_and_substitute_accept() {
    let dir = tempfile::tempdir().unwrap();
    let before = dir.path().join("before.json");
    let after = dir.path().join("after.json");
    let (b, a) = (before.to_str().unwrap(), after.to_str().unwrap());
    let o = spares(&[
        "substitute",
        "-t",
        "configs/k-12x12x12.yaml",
        "-s",
        "7x7x8",
        "--spares",
        "3D(2,1)",
        "--fail-random",
        "40",
        "--seed",
        "2",
        "-o",
        b,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = json(&spares(&[
        "remap",
        "--map",
        b,
        "--iterations",
        "100000",
        "--seed",
        "3",
        "--json",
        "-o",
        a,
    ]));
    let (was, now) = (
        r["before"]["collisions"].as_u64().unwrap(),
        r["after"]["collisions"].as_u64().unwrap(),
    );
    let hops = |t: &serde_json::Value| t["total_hops"].as_u64().unwrap();
    assert!(
        now < was || (now == was && hops(&r["after"]) < hops(&r["before"])),
        "remap lowered nothing: {}",
        r["after"]
    );
    assert_eq!(r["stop"], "iterations");
    assert!(r["lower_bound"].as_u64().unwrap() <= now);
    let steps = r["steps"].as_array().unwrap();
    assert!(!steps.is_empty());
    assert!(steps
        .iter()
        .all(|s| s["kind"] == "move" || s["kind"] == "exchange"));
    // The map written is the map printed, and the other tools read it.
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&after).unwrap()).unwrap();
    assert_eq!(doc, r["map"]);
    let c = json(&spares(&["collisions", "--map", a, "--json"]));
    assert_eq!(c["collisions"].as_u64(), Some(now));
    let o = spares(&["rankfile", "--map", a]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().count(), 7 * 7 * 8);
    let o = spares(&["substitute", "--map", a, "--fail-random", "3", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/map-document.schema.json")).unwrap(),
    )
    .unwrap();
    assert!(jsonschema::validator_for(&schema).unwrap().is_valid(&doc));
    // Same seed and iterations: same map.
    let again = json(&spares(&[
        "remap",
        "--map",
        b,
        "--iterations",
        "100000",
        "--seed",
        "3",
        "--json",
    ]));
    assert_eq!(again["map"], r["map"]);
    // A move budget binds; none moves nothing.
    let few = json(&spares(&[
        "remap",
        "--map",
        b,
        "--iterations",
        "20000",
        "--max-moves",
        "4",
        "--json",
    ]));
    assert!(few["moved"].as_u64().unwrap() <= 4);
    let none = json(&spares(&[
        "remap",
        "--map",
        b,
        "--max-moves",
        "0",
        "--json",
    ]));
    assert_eq!(none["moved"], 0);
    let start: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&before).unwrap()).unwrap();
    assert_eq!(none["map"]["ranks"], start["ranks"]);
    refused(
        &["remap", "--map", b, "--time-limit=-1"],
        "--time-limit -1: give seconds above 0",
    );
}

/// `spares substitute` prints a failure in sparesctl's words (topology::report): the outcome,
/// the collisions before and after, then the moves in aligned columns.
#[test]
fn substitute_prints_moves_in_aligned_columns_with_sparesctls_words() {
    let out = stdout(&spares(&[
        "substitute",
        "-n",
        "12x12",
        "--spares",
        "2D(1,1)",
        "-m",
        "1D",
        "--fail",
        "0,0",
    ]));
    let first = out
        .lines()
        .find(|l| l.starts_with("failure "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        first.starts_with("failure   1: (0,0)          1D sliding along dim "),
        "{first}"
    );
    assert!(first.contains(" rank(s) move; collisions "), "{first}");
    assert!(first.contains(" -> "), "{first}");
    assert!(first.contains(", hops "), "{first}");
    let moves: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("      rank "))
        .collect();
    assert!(moves.len() >= 10, "{out}");
    let arrow = moves[0].find(" -> ").unwrap();
    assert!(
        moves.iter().all(|l| l.find(" -> ") == Some(arrow)),
        "the arrows line up:\n{}",
        moves.join("\n")
    );
}

/// `spares generate man`: every page has EXAMPLES and EXIT STATUS (spares-manpage).
#[test]
fn spares_man_pages_have_examples_and_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let out = spares(&["generate", "man", dir.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for page in ["spares.1", "spares-plan.1", "spares-substitute.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains(".SH EXAMPLES"), "{page}: {text}");
        assert!(text.contains(".SH \"EXIT STATUS\""), "{page}: {text}");
    }
}
