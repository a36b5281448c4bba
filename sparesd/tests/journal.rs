//! Journal integrity: on-disk damage is refused at start (naming file, line and sequence
//! number) instead of being cut as a torn tail; `--repair` keeps the valid prefix and reports
//! what it dropped; `--check` creates nothing; a state directory owned by another user is
//! named with its owner and the fix.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

/// A daemon with three jobs (journal records 1 to 3) and two failures (records 4 and 5),
/// killed, so that its files can be damaged.
fn five_records(extra: &[&str]) -> Daemon {
    let mut d = Daemon::start(extra);
    let doc = doc(&[6, 6], "2D(2,1)", false);
    for j in 1..=3 {
        ok(&d.call(&register_line(j, 1000 + j, &doc)));
    }
    ok(&d.call(&fail_line(1, "1,1")));
    ok(&d.call(&fail_line(2, "2,2")));
    d.kill9();
    d
}

fn ok(v: &Value) -> &Value {
    assert_eq!(v["ok"], true, "{v}");
    v
}

fn journal(d: &Daemon) -> PathBuf {
    d.state_dir().join("journal.jsonl")
}

fn snapshot(d: &Daemon) -> PathBuf {
    d.state_dir().join("snapshot.json")
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn write_lines(p: &Path, lines: &[String]) {
    let mut s = lines.join("\n");
    s.push('\n');
    std::fs::write(p, s).unwrap();
}

fn sparesd(d: &Daemon, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sparesd"));
    c.arg("--socket")
        .arg(d.socket())
        .arg("--state-dir")
        .arg(d.state_dir())
        .args(&d.extra)
        .args(args)
        .env("RUST_LOG", "info");
    c
}

/// Starts the daemon on its (damaged) state and expects it to refuse: its stderr.
fn refused(d: &Daemon) -> String {
    let mut child = sparesd(d, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(!st.success(), "exited 0 on damaged state: {err}");
            return err;
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "sparesd started on damaged state; log:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run(d: &Daemon, args: &[&str]) -> Output {
    sparesd(d, args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn assert_names(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{p:?} missing from: {msg}");
    }
}

/// Recomputes a checksummed JSON file's checksum after an edit (`{...,"crc":"xxxxxxxx"}`):
/// the edit then passes the checksum, and only the sequence checks can catch it.
fn reseal(line: &str) -> String {
    let body = &line[..line.len() - r#","crc":"00000000"}"#.len()];
    format!(
        r#"{body},"crc":"{:08x}"}}"#,
        crc32fast::hash(body.as_bytes())
    )
}

#[test]
fn a_flipped_byte_in_the_last_complete_record_is_refused() {
    let d = five_records(&[]);
    let mut l = lines(&journal(&d));
    assert_eq!(l.len(), 5);
    // Still valid JSON: node 2,2 becomes 2,3 (a record the model would accept and replay).
    let flipped = l[4].replacen(r#""node":"(2,2)""#, r#""node":"(2,3)""#, 1);
    assert_ne!(flipped, l[4]);
    l[4] = flipped;
    write_lines(&journal(&d), &l);
    let err = refused(&d);
    assert_names(&err, &["journal.jsonl", "line 5", "seq 5", "checksum"]);
}

#[test]
fn a_garbled_last_complete_line_is_refused() {
    let d = five_records(&[]);
    let mut l = lines(&journal(&d));
    let half = l[4].len() / 2;
    l[4].truncate(half); // cut, but with its newline: not a torn write
    write_lines(&journal(&d), &l);
    let err = refused(&d);
    assert_names(&err, &["journal.jsonl", "line 5", "seq 5"]);
}

#[test]
fn a_truncation_in_the_middle_of_the_journal_is_refused() {
    let d = five_records(&[]);
    let bytes = std::fs::read(journal(&d)).unwrap();
    // Cut inside record 3: records 3 to 5 were acknowledged and are gone.
    let third = bytes
        .iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .nth(1)
        .unwrap()
        .0;
    std::fs::write(journal(&d), &bytes[..third + 20]).unwrap();
    let err = refused(&d);
    assert_names(&err, &["journal.jsonl", "seq 2", "acknowledged", "5"]);
}

#[test]
fn a_deleted_middle_line_is_refused() {
    let d = five_records(&[]);
    let mut l = lines(&journal(&d));
    l.remove(2); // record 3: job 3's registration
    write_lines(&journal(&d), &l);
    let err = refused(&d);
    assert_names(&err, &["journal.jsonl", "line 3", "seq 4", "after seq 2"]);
}

#[test]
fn a_snapshot_seq_edited_upward_is_refused() {
    // Snapshot after record 3; records 4 and 5 in the journal.
    let d = five_records(&["--snapshot-every", "3"]);
    let snap = std::fs::read_to_string(snapshot(&d)).unwrap();
    assert!(snap.contains(r#""seq":3"#), "{snap}");
    assert_eq!(lines(&journal(&d)).len(), 2);
    // Edited: record 4 would be skipped as already in the snapshot.
    std::fs::write(snapshot(&d), snap.replacen(r#""seq":3"#, r#""seq":4"#, 1)).unwrap();
    let err = refused(&d);
    assert_names(&err, &["snapshot.json", "checksum", "seq 4"]);

    // With a checksum that matches, a snapshot ahead of the journal's last record is refused.
    let edited = reseal(
        snap.trim_end()
            .replacen(r#""seq":3"#, r#""seq":6"#, 1)
            .as_str(),
    );
    std::fs::write(snapshot(&d), edited + "\n").unwrap();
    let err = refused(&d);
    assert_names(&err, &["snapshot.json", "seq 6", "journal.jsonl", "seq 5"]);

    // And a gap between the snapshot and the journal's first record.
    std::fs::write(snapshot(&d), snap).unwrap();
    let l = lines(&journal(&d));
    write_lines(&journal(&d), &l[1..]);
    let err = refused(&d);
    assert_names(&err, &["journal.jsonl", "line 1", "seq 5", "seq 3"]);
}

#[test]
fn a_missing_snapshot_with_an_empty_journal_is_refused() {
    let d = five_records(&[]);
    let _ = std::fs::remove_file(snapshot(&d));
    std::fs::write(journal(&d), b"").unwrap();
    let err = refused(&d);
    assert_names(&err, &["snapshot.json", "missing"]);
}

#[test]
fn a_torn_last_line_without_newline_is_cut_silently() {
    let mut d = five_records(&[]);
    let l = lines(&journal(&d));
    // A sixth record cut by a crash before its newline: never acknowledged.
    let torn = l[4].replacen(r#""seq":5"#, r#""seq":6"#, 1);
    let mut bytes = std::fs::read(journal(&d)).unwrap();
    bytes.extend_from_slice(&torn.as_bytes()[..torn.len() - 7]);
    std::fs::write(journal(&d), &bytes).unwrap();
    d.restart();
    assert!(d.log().contains("torn last record"), "{}", d.log());
    let h = d.call(&show_line(2));
    assert_eq!(h["history"].as_array().unwrap().len(), 1, "{h}");
    assert_eq!(lines(&journal(&d)).len(), 5, "the torn bytes are cut");
}

#[test]
fn repair_keeps_the_valid_prefix_and_reports_what_it_dropped() {
    let mut d = five_records(&[]);
    let mut l = lines(&journal(&d));
    // Record 3 damaged: records 3 (job 3), 4 (job 1) and 5 (job 2) cannot be trusted in order.
    l[2] = l[2].replacen(r#""uid":1003"#, r#""uid":1004"#, 1);
    write_lines(&journal(&d), &l);
    let before = std::fs::read(journal(&d)).unwrap();
    refused(&d);

    let out = run(&d, &["--repair"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}{}", text(&out.stderr));
    assert_names(
        &report,
        &[
            "line 3 (seq 3, job 3)",
            "line 4 (seq 4, job 1)",
            "line 5 (seq 5, job 2)",
            "kept 2",
        ],
    );
    // The damaged journal is kept next to the new one, byte for byte.
    let copies: Vec<PathBuf> = std::fs::read_dir(d.state_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains("journal.jsonl.damaged-"))
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(std::fs::read(&copies[0]).unwrap(), before);

    // A restart serves exactly the kept records: jobs 1 and 2, no failures, no job 3.
    d.restart();
    assert_eq!(d.call(&show_line(1))["history"], serde_json::json!([]));
    assert_eq!(d.call(&show_line(2))["history"], serde_json::json!([]));
    assert_eq!(d.call(&show_line(3))["ok"], false);
    // And the repaired state grows again normally.
    ok(&d.call(&fail_line(1, "1,1")));
    d.restart();
    assert_eq!(d.call(&show_line(1))["history"][0]["node"], "(1,1)");

    // Nothing to repair: nothing is written.
    d.kill9();
    let out = run(&d, &["--repair"]);
    assert!(out.status.success());
    assert!(
        text(&out.stdout).contains("nothing to repair"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn repair_after_a_truncation_reports_the_lost_sequence_numbers() {
    let mut d = five_records(&[]);
    let l = lines(&journal(&d));
    write_lines(&journal(&d), &l[..3]);
    refused(&d);
    let out = run(&d, &["--repair"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}{}", text(&out.stderr));
    assert_names(&report, &["seq 4 to 5"]);
    d.restart();
    assert_eq!(d.call(&show_line(3))["ok"], true);
    assert_eq!(d.call(&show_line(1))["history"], serde_json::json!([]));
}

fn listing(dir: &Path) -> Vec<(String, u64, i64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                m.len(),
                m.mtime_nsec() + m.mtime() * 1_000_000_000,
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn check_creates_no_state_files() {
    let d = five_records(&[]);
    // A fresh state directory is not created by a check.
    let fresh = d.dir.path().join("fresh-state");
    let out = Command::new(env!("CARGO_BIN_EXE_sparesd"))
        .arg("--socket")
        .arg(d.dir.path().join("fresh.sock"))
        .arg("--state-dir")
        .arg(&fresh)
        .arg("--check")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!fresh.exists(), "--check created {}", fresh.display());

    let before = listing(&d.state_dir());
    let out = run(&d, &["--check"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_names(&text(&out.stdout), &["3 job(s)", "seq 5"]);
    assert_eq!(listing(&d.state_dir()), before, "--check changed the state");

    // A check on damaged state fails with the same message as a start.
    let mut l = lines(&journal(&d));
    l.remove(1);
    write_lines(&journal(&d), &l);
    let out = run(&d, &["--check"]);
    assert!(!out.status.success());
    assert_names(&text(&out.stderr), &["journal.jsonl", "line 2", "seq 3"]);
}

#[test]
fn a_start_on_files_of_another_user_names_the_owner_and_the_fix() {
    if !is_root() {
        eprintln!("SKIPPED: needs root to own files as another user");
        return;
    }
    // What `sparesd --check` run as root left behind on the old main: root's lock and journal
    // in the daemon user's directory.
    let d = five_records(&[]);
    let state = d.state_dir();
    let nobody = 65534;
    std::os::unix::fs::chown(&state, Some(nobody), Some(nobody)).unwrap();
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // The build directory may not be reachable by nobody: a copy of the binary.
    let exe = d.dir.path().join("sparesd");
    install_executable(Path::new(env!("CARGO_BIN_EXE_sparesd")), &exe);
    let out = Command::new("setpriv")
        .arg(format!("--reuid={nobody}"))
        .arg(format!("--regid={nobody}"))
        .arg("--clear-groups")
        .arg(&exe)
        .arg("--socket")
        .arg(d.dir.path().join("nobody.sock"))
        .arg("--state-dir")
        .arg(&state)
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert_names(&err, &["lock", "owned by root", "chown -R nobody:"]);
    assert!(err.contains(&state.display().to_string()), "{err}");
}

#[test]
fn a_journal_of_the_previous_release_loads_once_and_is_converted() {
    let mut d = Daemon::start(&[]);
    d.kill9();
    // The previous release: no snapshot until the first rotation, an empty lock, and journal
    // records without checksums.
    let doc = doc(&[6, 6], "2D(2,1)", false);
    let recs: Vec<String> = (1..=3)
        .map(|j| {
            serde_json::json!({"seq": j, "op": "register", "job_id": j, "uid": 1000 + j, "map": doc})
                .to_string()
        })
        .collect();
    let _ = std::fs::remove_file(snapshot(&d));
    std::fs::write(d.state_dir().join("lock"), b"").unwrap();
    write_lines(&journal(&d), &recs);
    d.restart();
    assert!(d.log().contains("converted"), "{}", d.log());
    for j in 1..=3 {
        ok(&d.call(&show_line(j)));
    }
    d.kill9();
    assert!(std::fs::read_to_string(snapshot(&d))
        .unwrap()
        .contains(r#""crc":"#));
    assert_eq!(std::fs::read(journal(&d)).unwrap(), b"");
    // Once converted, a record without a checksum is damage.
    write_lines(
        &journal(&d),
        &[
            serde_json::json!({"seq": 4, "op": "release", "job_id": 1}).to_string(),
            serde_json::json!({"seq": 5, "op": "release", "job_id": 2}).to_string(),
        ],
    );
    let err = refused(&d);
    assert_names(&err, &["journal.jsonl", "line 1", "seq 4", "checksum"]);
}

#[test]
fn a_repair_run_as_root_leaves_the_files_to_the_directory_owner() {
    if !is_root() {
        eprintln!("SKIPPED: needs root to own files as another user");
        return;
    }
    let d = five_records(&[]);
    let state = d.state_dir();
    let nobody = 65534;
    let mut l = lines(&journal(&d));
    l.remove(3);
    write_lines(&journal(&d), &l);
    for e in std::fs::read_dir(&state).unwrap() {
        std::os::unix::fs::chown(e.unwrap().path(), Some(nobody), Some(nobody)).unwrap();
    }
    std::os::unix::fs::chown(&state, Some(nobody), Some(nobody)).unwrap();
    let out = run(&d, &["--repair"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for e in std::fs::read_dir(&state).unwrap() {
        let e = e.unwrap();
        assert_eq!(
            e.metadata().unwrap().uid(),
            nobody,
            "{} is not the daemon user's",
            e.path().display()
        );
    }
}

/// A line or snapshot as the previous release wrote it: the same JSON without the checksum.
fn unsealed(line: &str) -> String {
    format!("{}}}", &line[..line.len() - r#","crc":"00000000"}"#.len()])
}

#[test]
fn a_snapshot_and_journal_of_the_previous_release_load_once_and_are_converted() {
    // Snapshot after record 3, records 4 and 5 in the journal: rewritten as 0.1 wrote them.
    let mut d = five_records(&["--snapshot-every", "3"]);
    d.restart();
    let before: Vec<Value> = (1..=3).map(|j| d.call(&show_line(j))).collect();
    d.kill9();
    let snap = std::fs::read_to_string(snapshot(&d)).unwrap();
    std::fs::write(snapshot(&d), unsealed(snap.trim_end()) + "\n").unwrap();
    let l: Vec<String> = lines(&journal(&d)).iter().map(|l| unsealed(l)).collect();
    assert_eq!(l.len(), 2);
    write_lines(&journal(&d), &l);
    std::fs::write(d.state_dir().join("lock"), b"").unwrap();
    d.restart();
    assert!(d.log().contains("converted"), "{}", d.log());
    let after: Vec<Value> = (1..=3).map(|j| d.call(&show_line(j))).collect();
    assert_eq!(
        before, after,
        "the jobs of the previous release survive the upgrade"
    );
    assert_eq!(after[1]["history"].as_array().unwrap().len(), 1);
}

#[test]
fn no_state_file_write_follows_a_link_planted_in_the_state_directory() {
    // The daemon user owns the state directory; a daemon or repair run as root must not be led
    // by a link there to write another file.
    let mut d = Daemon::start(&["--snapshot-every", "1"]);
    d.kill9();
    let victim = d.dir.path().join("victim");
    std::fs::write(&victim, b"root's file\n").unwrap();
    std::os::unix::fs::symlink(&victim, d.state_dir().join("snapshot.json.tmp")).unwrap();
    d.restart();
    // The registration is journaled (durable); the snapshot after it cannot be written.
    ok(&d.call(&register_line(1, 1001, &doc(&[6, 6], "2D(2,1)", false))));
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's file\n");

    d.kill9();
    std::fs::remove_file(d.state_dir().join("snapshot.json.tmp")).unwrap();
    std::fs::remove_file(journal(&d)).unwrap();
    std::os::unix::fs::symlink(&victim, journal(&d)).unwrap();
    let err = refused(&d);
    assert_names(&err, &["journal.jsonl"]);
    let out = run(&d, &["--repair"]);
    assert!(!out.status.success());
    assert_eq!(std::fs::read(&victim).unwrap(), b"root's file\n");
}

#[test]
fn a_remap_is_kept_by_a_restart_and_by_a_repair_of_a_later_record() {
    let mut d = Daemon::start(&[]);
    let doc = doc(&[6, 6], "2D(2,1)", false);
    ok(&d.call(&register_line(1, 1000, &doc)));
    for n in ["1,1", "2,2", "1,2"] {
        ok(&d.call(&fail_line(1, n)));
    }
    let remap = d.call(r#"{"version":1,"kind":"remap","job_id":1,"iterations":3000}"#);
    ok(&remap);
    assert_eq!(remap["after_step"], 3);
    // A failure after the re-map slides from it; its record is then damaged.
    ok(&d.call(&fail_line(1, "0,0")));
    d.kill9();
    let mut l = lines(&journal(&d));
    assert_eq!(l.len(), 6, "register, 3 failures, the re-map, a failure");
    assert!(l[4].contains(r#""op":"remap""#), "{}", l[4]);
    d.start_again();
    assert_eq!(d.call(&show_line(1))["remaps"][0], {
        let mut r = remap.clone();
        for k in ["version", "ok", "job_id", "capped", "map"] {
            r.as_object_mut().unwrap().remove(k);
        }
        r
    });
    d.kill9();
    l[5] = l[5].replacen(r#""node":"(0,0)""#, r#""node":"(0,1)""#, 1);
    write_lines(&journal(&d), &l);
    refused(&d);
    let out = run(&d, &["--repair"]);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}{}", text(&out.stderr));
    assert_names(&report, &["line 6 (seq 6, job 1)", "kept 5"]);
    // The repaired state has the re-map and its map: installed from its moves.
    d.restart();
    let shown = d.call(&show_line(1));
    assert_eq!(shown["remaps"].as_array().unwrap().len(), 1);
    assert_eq!(shown["history"].as_array().unwrap().len(), 3);
    assert_eq!(shown["map"], remap["map"]);
}
