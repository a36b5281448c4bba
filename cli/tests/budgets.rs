//! Input budgets of the `spares` binary: sizes, extents, nesting and site files that used to
//! abort it (exit 134 after a failed 24 GB allocation), panic (101) or block it forever must
//! give a one-line error naming the value and the limit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `spares`; a run still going after a minute is killed and fails the test (a reader
/// that blocks on a FIFO would otherwise hang the test suite instead of failing it).
fn spares(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spares"))
        .args(args)
        .current_dir(repo())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spares runs");
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("spares {args:?} blocked for a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts a clean refusal: exit 1 (not an abort's 134 or a panic's 101), one line on
/// stderr containing every `want`.
fn refused(args: &[&str], want: &[&str]) {
    let o = spares(args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    for w in want {
        assert!(err.contains(w), "{args:?}: '{w}' not in: {err}");
    }
}

const LIMIT: &str = "over the limit of 1048576 nodes";

#[test]
fn a_billion_node_network_is_refused_naming_the_limit() {
    let count = "1000x1000x1000 grid has 1000000000 nodes";
    refused(
        &["plan", "-n", "1000x1000x1000", "--spares", "3D(1,1)"],
        &[count, LIMIT],
    );
    refused(
        &[
            "substitute",
            "-n",
            "1000x1000x1000",
            "--spares",
            "3D(1,1)",
            "--fail-random",
            "1",
        ],
        &[count, LIMIT],
    );
    refused(
        &[
            "simulate",
            "-n",
            "1000x1000x1000",
            "--spares",
            "3D(1,1)",
            "--samples",
            "1",
        ],
        &[count, LIMIT],
    );
    refused(
        &[
            "simulate",
            "-n",
            "4x4",
            "--spares",
            "2D(1,1)",
            "--samples",
            "1",
            "--threads",
            "100000",
        ],
        &["--threads 100000 is over the limit of 1024 threads"],
    );
    // The largest the seeds use still plans.
    let o = spares(&["plan", "-n", "48x48x48", "--spares", "3D(2,1)"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_billion_node_map_document_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let map = dir.path().join("big.json");
    std::fs::write(
        &map,
        r#"{"version":1,"box":[1000,1000,1000],"wrap":[false,false,false],"compute":[1,1,1],
        "pattern":"7p","periodic":false,"ranks":[[0,0,0]],"collisions":0}"#,
    )
    .unwrap();
    refused(
        &[
            "substitute",
            "--map",
            map.to_str().unwrap(),
            "--fail",
            "0,0,0",
        ],
        &["big.json", LIMIT],
    );
}

#[test]
fn huge_region_extents_and_deep_nesting_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let region = dir.path().join("region.yaml");
    std::fs::write(
        &region,
        "extents: [4, 2]\nregions:\n  - {anchor: [1, 0], extents: [4294967295, 1], nodes: a1}\n",
    )
    .unwrap();
    refused(
        &["plan", "-t", region.to_str().unwrap(), "--spares", "none"],
        &["regions[0]", "does not fit the 4x2 network"],
    );
    let deep = dir.path().join("deep.yaml");
    std::fs::write(&deep, format!("extents: {}", "[".repeat(100_000))).unwrap();
    refused(
        &["plan", "-t", deep.to_str().unwrap(), "--spares", "none"],
        &["nesting of", "over the limit of 32 levels"],
    );
}

#[test]
fn site_files_that_are_not_regular_or_too_large_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("topology.yaml");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    // Blocked forever in open() before: nobody ever writes to the FIFO.
    refused(
        &["plan", "-t", fifo.to_str().unwrap(), "--spares", "none"],
        &["is a FIFO, not a regular file"],
    );
    refused(
        &["plan", "-t", "/dev/zero", "--spares", "none"],
        &["/dev/zero is a character device"],
    );
    refused(
        &["substitute", "--map", "/dev/zero", "--fail", "0,0,0"],
        &["/dev/zero is a character device"],
    );
    refused(
        &[
            "plan",
            "-t",
            dir.path().to_str().unwrap(),
            "--spares",
            "none",
        ],
        &["is a directory"],
    );
    // A sparse 1 GB file: refused by its size, without reading it.
    let big = dir.path().join("big.yaml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    refused(
        &["plan", "-t", big.to_str().unwrap(), "--spares", "none"],
        &["big.yaml is larger than the limit of 16777216 bytes"],
    );
    refused(
        &[
            "substitute",
            "--map",
            big.to_str().unwrap(),
            "--fail",
            "0,0,0",
        ],
        &["big.yaml is larger than the limit of 134217728 bytes"],
    );
}
