//! The `spares` binary end to end: outputs, JSON, rankfiles, and bad input that must give a
//! one-line error and a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn spares(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spares"))
        .args(args)
        .current_dir(repo())
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
    assert_eq!(steps[0]["method"], "3D");
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
