//! spares-run against a real sparesd, with stand-ins for srun (a step that fails and "kills"
//! the node of rank 0) and sinfo (those nodes DOWN, every other one not responding, which must
//! not count as dead): the substitution is sparesd's, the relaunch uses the new map, and the
//! launcher gives up when no spare is left or when no node died.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use topology::{Grid, MapDocument, MapMeta, Method, Pattern, SpareMap};

/// A binary of this workspace, when it was built (`cargo test --workspace` builds them all).
fn workspace_bin(name: &str) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join(name);
    p.exists().then_some(p)
}

fn sparesd_bin() -> Option<PathBuf> {
    workspace_bin("sparesd")
}

struct Daemon {
    child: Child,
    socket: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_daemon(bin: &Path, dir: &Path) -> Daemon {
    let socket = dir.join("s.sock");
    let uid = fs::metadata("/proc/self").unwrap().uid();
    let child = Command::new(bin)
        .arg("--socket")
        .arg(&socket)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["--slurm-user", &uid.to_string(), "--log-level", "warn"])
        .spawn()
        .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    while spares_client::Client::connect(&socket)
        .and_then(|mut c| c.health())
        .is_err()
    {
        assert!(Instant::now() < end, "sparesd did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
    Daemon { child, socket }
}

/// A 2x1x1 box, one compute rank on n0 and one spare, n1.
fn small_map() -> MapDocument {
    let g = Grid::new(&[2, 1, 1], &[false, false, false]).unwrap();
    let map = SpareMap::new(g, &[1, 1, 1], &[0, 0, 0]).unwrap();
    let meta = MapMeta {
        topology: None,
        origin: vec![0, 0, 0],
        spares: "3D(1,1)".into(),
        method: Method::hybrid(3),
        pattern: Pattern::parse("7p", 3).unwrap(),
        periodic: false,
        hosts: Some(vec!["n0".into(), "n1".into()]),
    };
    MapDocument::new(&map, &meta)
}

fn script(path: &Path, body: &str) {
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs spares-run for job 77 with the stand-ins; `srun_kills` makes each step "kill" its first
/// host, `srun_status` is the step's exit status.
fn run_launcher(dir: &Path, socket: &Path, srun_kills: bool, srun_status: i32) -> Output {
    run_launcher_with(dir, socket, srun_kills, srun_status, "")
}

/// The same, `also` being more shell run by the srun stand-in after a kill (the dead node is
/// in `$dead`).
fn run_launcher_with(
    dir: &Path,
    socket: &Path,
    srun_kills: bool,
    srun_status: i32,
    also: &str,
) -> Output {
    run_launcher_args(dir, socket, srun_kills, srun_status, also, &[])
}

/// The same with more options of spares-run (`extra`).
fn run_launcher_args(
    dir: &Path,
    socket: &Path,
    srun_kills: bool,
    srun_status: i32,
    also: &str,
    extra: &[&str],
) -> Output {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin).unwrap();
    let dead = dir.join("dead");
    fs::write(&dead, "").unwrap();
    let kill = if srun_kills {
        format!(
            "dead=$(head -1 \"$SLURM_HOSTFILE\")\necho $dead >> {}\n{also}",
            dead.display()
        )
    } else {
        String::new()
    };
    script(&bin.join("srun"), &format!("{kill}\nexit {srun_status}"));
    // sinfo -h -N -o '%N %t' -n a,b (the list is $6): DOWN for the killed nodes, not responding for the rest.
    script(
        &bin.join("sinfo"),
        &format!(
            "for n in $(echo \"$6\" | tr , ' '); do\n  if grep -qx \"$n\" {d}; then echo \"$n down*\"; else echo \"$n alloc*\"; fi\ndone",
            d = dead.display()
        ),
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(env!("CARGO_BIN_EXE_spares-run"))
        .arg("--socket")
        .arg(socket)
        .args([
            "--job",
            "77",
            "--detect-timeout",
            "2",
            "--daemon-timeout",
            "5",
        ])
        .arg("--dir")
        .arg(dir.join("run"))
        .arg("--srun")
        .arg(bin.join("srun"))
        .args(extra)
        .args(["--", "rank-program"])
        .env("PATH", path)
        .output()
        .unwrap()
}

fn setup() -> Option<(tempfile::TempDir, Daemon)> {
    let Some(bin) = sparesd_bin() else {
        eprintln!("SKIPPED: the sparesd binary is not built (cargo build -p sparesd)");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = start_daemon(&bin, dir.path());
    let uid = fs::metadata("/proc/self").unwrap().uid();
    spares_client::Client::connect(&d.socket)
        .unwrap()
        .register(77, uid, &small_map())
        .unwrap();
    Some((dir, d))
}

#[test]
fn substitutes_relaunches_and_gives_up_when_no_spare_is_left() {
    let Some((dir, d)) = setup() else { return };
    let out = run_launcher(dir.path(), &d.socket, true, 1);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("failure   1: n0 "), "{stdout}");
    assert!(stdout.contains(", reported by spares-run\n"), "{stdout}");
    assert!(stdout.contains("\n      rank 0  n0 -> n1\n"), "{stdout}");
    assert!(stdout.contains("launch 1: 1 ranks on n1"), "{stdout}");
    assert!(
        stdout.contains("failure   2: n1             no spare left: the job is lost"),
        "{stdout}"
    );
    assert!(
        stderr.contains("no spare left: job 77 cannot go on after 2 failure(s)"),
        "{stderr}"
    );
    let run = dir.path().join("run");
    assert_eq!(fs::read_to_string(run.join("hosts-0")).unwrap(), "n0\n");
    assert_eq!(fs::read_to_string(run.join("hosts-1")).unwrap(), "n1\n");
    assert!(!run.join("hosts-2").exists());
    // sparesd holds the story.
    let shown = spares_client::Client::connect(&d.socket)
        .unwrap()
        .show(77)
        .unwrap();
    assert_eq!(shown["failed"], serde_json::json!(["n0", "n1"]));
    assert_eq!(shown["lost"], true);
    // sparesd's policy by default: no re-map at relaunch.
    assert_eq!(shown["remaps"], serde_json::json!([]), "{stdout}");
    assert!(!stdout.contains("re-map"), "{stdout}");
    // sparesctl prints the same failures in the same words (one formatting function).
    if let Some(sparesctl) = workspace_bin("sparesctl") {
        let ctl = std::process::Command::new(sparesctl)
            .args(["--socket"])
            .arg(&d.socket)
            .args(["show", "77"])
            .output()
            .unwrap();
        let ctl = String::from_utf8_lossy(&ctl.stdout);
        for line in ctl.lines().filter(|l| l.starts_with("failure ")) {
            assert!(
                stdout.contains(&format!("{line}, reported by spares-run\n")),
                "sparesctl: {line}\nspares-run: {stdout}"
            );
        }
        assert!(ctl.contains("\n      rank 0  n0 -> n1\n"), "{ctl}");
    }
}

#[test]
fn a_failed_step_without_a_dead_node_is_not_retried() {
    let Some((dir, d)) = setup() else { return };
    let out = run_launcher(dir.path(), &d.socket, false, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a node failure"), "{stderr}");
    let shown = spares_client::Client::connect(&d.socket)
        .unwrap()
        .show(77)
        .unwrap();
    assert_eq!(
        shown["failed"],
        serde_json::json!([]),
        "not responding is not dead"
    );
}

#[test]
fn a_successful_step_ends_the_launcher() {
    let Some((dir, d)) = setup() else { return };
    let out = run_launcher(dir.path(), &d.socket, false, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("job 77 finished: 0 node failure(s), 1 launch(es)"),
        "{stdout}"
    );
}

#[test]
fn a_failure_the_node_down_trigger_reported_is_taken_from_sparesd() {
    let Some((dir, d)) = setup() else { return };
    let Some(node_down) = workspace_bin("sparesd-node-down") else {
        eprintln!("SKIPPED: sparesd-node-down is not built (cargo build -p spares-client)");
        return;
    };
    // The trigger reports the first node before the launcher looks; the second death is left
    // to the launcher.
    let also = format!(
        "[ \"$dead\" = n0 ] && {} --socket {} $dead >/dev/null 2>&1",
        node_down.display(),
        d.socket.display()
    );
    let out = run_launcher_with(dir.path(), &d.socket, true, 1, &also);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(stdout.contains("failure   1: n0 "), "{stdout}");
    assert!(
        stdout.contains(", reported by the Slurm node-down trigger\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\n      rank 0  n0 -> n1\n"), "{stdout}");
    assert!(stdout.contains("launch 1: 1 ranks on n1"), "{stdout}");
    assert!(stdout.contains("failure   2: n1 "), "{stdout}");
}

#[test]
fn remaps_before_the_relaunch_when_asked() {
    let Some((dir, d)) = setup() else { return };
    let out = run_launcher_args(
        dir.path(),
        &d.socket,
        true,
        1,
        "",
        &["--remap", "always", "--remap-max-moves", "5"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    // After the first failure (a spare left), a re-map of the slid map, then the relaunch.
    let remap = stdout
        .find("re-map    1 after failure 1: 0 rank(s) move (at most 5)")
        .unwrap_or_else(|| panic!("{stdout}"));
    let relaunch = stdout.find("launch 1: 1 ranks on n1").unwrap();
    assert!(remap < relaunch, "{stdout}");
    assert!(stdout.contains("checkpoints stay in "), "{stdout}");
    let shown = spares_client::Client::connect(&d.socket)
        .unwrap()
        .show(77)
        .unwrap();
    assert_eq!(shown["remaps"][0]["after_step"], 1, "{shown}");
    assert_eq!(shown["remaps"][0]["max_moves"], 5);
    assert_eq!(
        shown["remaps"].as_array().unwrap().len(),
        1,
        "none for a lost job"
    );
}
