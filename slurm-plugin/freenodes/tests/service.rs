//! The `spares-free-nodes` program against stand-ins for `sinfo`, `squeue` and `scontrol`
//! (shell scripts first in PATH): the file it writes, the job it moves, SIGTERM.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_spares-free-nodes");

fn script(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A directory with the policy, the topology, fake Slurm commands in `bin/` (scontrol
/// records its arguments in `scontrol.log`), and the output file's directory `run/`.
fn setup(sinfo: &str, queue: &str, marks: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs/torus-4x4x2.yaml");
    std::fs::copy(topo, d.join("torus.yaml")).unwrap();
    std::fs::write(
        d.join("spares.yaml"),
        format!(
            "topology: torus.yaml\nfree_nodes_file: {}/run/free-nodes\n",
            d.display()
        ),
    )
    .unwrap();
    let bin = d.join("bin");
    std::fs::create_dir(&bin).unwrap();
    script(&bin, "sinfo", &format!("cat <<'EOF'\n{sinfo}EOF"));
    // The two squeue calls: --format (the jobs) and --Format (the admin comments).
    script(
        &bin,
        "squeue",
        &format!(
            "case \"$*\" in *--Format*) cat <<'EOF'\n{marks}EOF\n;; *) cat <<'EOF'\n{queue}EOF\n;; esac"
        ),
    );
    script(
        &bin,
        "scontrol",
        &format!("echo \"$@\" >>{}/scontrol.log", d.display()),
    );
    dir
}

fn sinfo_with(down: &str, busy: &[&str]) -> String {
    (1..=32)
        .map(|i| {
            let n = format!("node{i:02}");
            let state = if n == down {
                "down*"
            } else if busy.contains(&n.as_str()) {
                "allocated"
            } else {
                "idle"
            };
            format!("{n} {state} torus*\n")
        })
        .collect()
}

fn command(dir: &Path) -> Command {
    let mut c = Command::new(BIN);
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    c.env("PATH", path)
        .env("SPARES_POLICY", dir.join("spares.yaml"))
        .env("RUST_LOG", "info");
    c
}

#[test]
fn one_pass_writes_the_file_and_moves_the_marked_job() {
    let dir = setup(
        &sinfo_with("node02", &["node01", "node17"]),
        "7|torus|node[01-16]|\n8|torus|node[01-16]|\n",
        "7|spares-box=node[01-16]\n8|(null)\n",
    );
    let d = dir.path();
    let out = command(d).arg("--once").output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(d.join("run/free-nodes")).unwrap();
    let lines: Vec<&str> = text.lines().skip(1).collect();
    // Job 7 now asks for box B: its nodes are busy for new jobs; job 8 still asks for A.
    assert_eq!(
        lines,
        vec![
            "node[01,03-32] state=busy partitions=torus*",
            "node02 state=unusable partitions=torus*",
        ]
    );
    let log = std::fs::read_to_string(d.join("scontrol.log")).unwrap();
    // Only job 7 (marked by job_submit) moves; job 8's user pinned the same nodes.
    assert_eq!(
        log,
        "update JobId=7 ReqNodeList=node[17-32] AdminComment=spares-box=node[17-32]\n"
    );
}

#[test]
fn a_failing_sinfo_keeps_the_old_file() {
    let dir = setup("", "", "");
    let d = dir.path();
    std::fs::create_dir(d.join("run")).unwrap();
    std::fs::write(d.join("run/free-nodes"), "node01 state=free\n").unwrap();
    script(
        &d.join("bin"),
        "sinfo",
        "echo 'sinfo: error: no controller' >&2; exit 1",
    );
    let out = command(d).arg("--once").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sinfo failed") && err.contains("no controller"),
        "{err}"
    );
    let text = std::fs::read_to_string(d.join("run/free-nodes")).unwrap();
    assert_eq!(text, "node01 state=free\n");
}

#[test]
fn sigterm_ends_the_loop_cleanly() {
    let dir = setup(&sinfo_with("", &[]), "", "");
    let d = dir.path();
    let mut child = command(d).args(["--interval", "60"]).spawn().unwrap();
    let file = d.join("run/free-nodes");
    let end = Instant::now() + Duration::from_secs(20);
    while !file.exists() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(file.exists(), "no file written");
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    // Within the 60 s interval: the loop checks the flag between short sleeps.
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}
