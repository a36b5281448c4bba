//! The real `sparesd` binary: register, fail, show, release with restarts between the steps;
//! 32 concurrent failure reports; another uid refused; a table of malformed requests.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;

use common::*;
use serde_json::Value;
use topology::MapDocument;

fn ok(v: &Value) -> &Value {
    assert_eq!(v["ok"], true, "expected success: {v}");
    assert_eq!(v["version"], 1);
    v
}

fn err_code(v: &Value) -> String {
    assert_eq!(v["ok"], false, "expected an error: {v}");
    v["error"]["code"].as_str().unwrap().to_string()
}

#[test]
fn register_fail_show_release_survive_restarts() {
    let mut d = Daemon::start(&[]);
    let doc = doc(&[4, 4, 2], "3D(2,1)", true);
    let r = d.call(&register_line(7, 1000, &doc));
    assert_eq!(ok(&r)["created"], true);
    assert_eq!(r["ranks"], 18);
    let show0 = d.call(&show_line(7));
    d.restart();
    assert_eq!(
        d.call(&show_line(7)),
        show0,
        "registration survives a restart"
    );
    // The same registration again: success, no change; another map: conflict.
    assert_eq!(ok(&d.call(&register_line(7, 1000, &doc)))["created"], false);
    let other = common::doc(&[4, 4, 2], "3D(1,1)", true);
    assert_eq!(
        err_code(&d.call(&register_line(7, 1000, &other))),
        "conflict"
    );
    assert_eq!(err_code(&d.call(&register_line(7, 1001, &doc))), "conflict");

    let mut failed = Vec::new();
    let mut answers = Vec::new();
    for node in ["node005", "node010", "node001"] {
        let r = d.call(&fail_line(7, node));
        ok(&r);
        failed.push(node.to_string());
        // The daemon's map is the model's map for the same failures.
        let want = model_after(&doc, &failed);
        let got: MapDocument = serde_json::from_value(r["map"].clone()).unwrap();
        assert_eq!(got, want, "after {failed:?}");
        assert_eq!(r["collisions_after"], want.collisions);
        assert_eq!(r["node"], node);
        answers.push(r.clone());
        let show = d.call(&show_line(7));
        d.restart();
        assert_eq!(
            d.call(&show_line(7)),
            show,
            "state after {node} survives a restart"
        );
    }
    // Steps chain: collisions before = collisions after of the previous failure.
    for w in answers.windows(2) {
        assert_eq!(w[1]["collisions_before"], w[0]["collisions_after"]);
    }
    // The same failure twice: the same answer, nothing changes.
    let before = d.call(&show_line(7));
    let again = d.call(&fail_line(7, "node005"));
    assert_eq!(again["step"], 1);
    let strip = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().unwrap().remove("map");
        v
    };
    assert_eq!(strip(&again), strip(&answers[0]));
    assert_eq!(d.call(&show_line(7)), before);
    // A coordinate names the same node: node005 is (1,1,0).
    assert_eq!(strip(&d.call(&fail_line(7, "1,1,0"))), strip(&answers[0]));

    let show = ok(&d.call(&show_line(7))).clone();
    assert_eq!(show["history"].as_array().unwrap().len(), 3);
    assert_eq!(show["failed"].as_array().unwrap().len(), 3);
    let list = d.call(r#"{"version":1,"kind":"list"}"#);
    assert_eq!(ok(&list)["jobs"][0]["failures"], 3);

    // node_down (the strigger path) applies to every job holding the node.
    ok(&d.call(&register_line(8, 1000, &doc)));
    let nd = d.call(r#"{"version":1,"kind":"node_down","nodes":"node[020,100]"}"#);
    let results = ok(&nd)["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 2, "{nd}");
    assert_eq!(nd["unmatched"], "node100");
    assert_eq!(d.call(&show_line(8))["history"][0]["node"], "node020");

    let before_release = d.call(&show_line(7));
    assert_eq!(ok(&d.call(&release_line(7)))["released"], true);
    assert_eq!(err_code(&d.call(&release_line(7))), "unknown_job");
    d.restart();
    // Released, its history and last map stay readable (history_retention_secs), like sacct.
    let after = ok(&d.call(&show_line(7))).clone();
    assert!(after["released_at"].as_u64().unwrap() > 0);
    for field in ["history", "failed", "map", "uid", "collisions", "lost"] {
        assert_eq!(after[field], before_release[field], "{field}");
    }
    ok(&d.call(&show_line(8)));
    // Journal and snapshot are JSON a person can read.
    let journal = std::fs::read_to_string(d.state_dir().join("journal.jsonl")).unwrap();
    for line in journal.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v["seq"].is_u64() && v["op"].is_string());
    }
}

#[test]
fn snapshots_and_journal_together_restore_the_state() {
    let mut d = Daemon::start(&["--snapshot-every", "3"]);
    let doc = doc(&[6, 6], "2D(2,1)", false);
    for j in 1..=3 {
        ok(&d.call(&register_line(j, 1000 + j, &doc)));
    }
    for (j, n) in [(1, "1,1"), (2, "2,2"), (1, "3,0"), (3, "0,0"), (2, "5,5")] {
        ok(&d.call(&fail_line(j, n)));
    }
    assert!(d.state_dir().join("snapshot.json").exists());
    let before: Vec<Value> = (1..=3).map(|j| d.call(&show_line(j))).collect();
    d.restart();
    let after: Vec<Value> = (1..=3).map(|j| d.call(&show_line(j))).collect();
    assert_eq!(before, after);
}

#[test]
fn concurrent_failure_reports_are_serialized_and_consistent() {
    let d = Daemon::start(&[]);
    let doc = doc(&[8, 8, 8], "3D(2,1)", true);
    ok(&d.call(&register_line(42, 1000, &doc)));
    // 32 clients: 16 report the same node, 16 report 16 different nodes.
    let nodes: Vec<String> = (0..32)
        .map(|i| {
            if i % 2 == 0 {
                "node073".to_string()
            } else {
                format!("node{:03}", 10 + i * 13)
            }
        })
        .collect();
    let barrier = std::sync::Barrier::new(32);
    let replies: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = nodes
            .iter()
            .map(|n| {
                let sock = d.socket();
                let b = &barrier;
                s.spawn(move || {
                    let mut c = UnixStream::connect(sock).unwrap();
                    b.wait();
                    call(&mut c, &fail_line(42, n))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut by_node: HashMap<String, Value> = HashMap::new();
    let mut by_step: HashMap<u64, String> = HashMap::new();
    for r in &replies {
        ok(r);
        let mut rec = r.clone();
        rec.as_object_mut().unwrap().remove("map");
        let node = r["node"].as_str().unwrap().to_string();
        if let Some(prev) = by_node.get(&node) {
            assert_eq!(prev, &rec, "one node, one answer");
        }
        by_node.insert(node.clone(), rec);
        let step = r["step"].as_u64().unwrap();
        if let Some(other) = by_step.insert(step, node.clone()) {
            assert_eq!(other, node, "step {step} given to two nodes");
        }
    }
    assert_eq!(by_node.len(), 17);
    let steps: Vec<u64> = {
        let mut s: Vec<u64> = by_step.keys().copied().collect();
        s.sort();
        s
    };
    assert_eq!(
        steps,
        (1..=17).collect::<Vec<_>>(),
        "steps are 1..17 without gaps"
    );
    // The final map is the model's for the failures in step order, and each answer chains.
    let order: Vec<String> = steps.iter().map(|s| by_step[s].clone()).collect();
    let show = d.call(&show_line(42));
    let got: MapDocument = serde_json::from_value(show["map"].clone()).unwrap();
    assert_eq!(got, model_after(&doc, &order));
    for w in order.windows(2) {
        assert_eq!(
            by_node[&w[1]]["collisions_before"],
            by_node[&w[0]]["collisions_after"]
        );
    }
}

/// Run by the authorization test as another user (`setpriv`): sends the request lines of
/// `SPARESD_TEST_REQUESTS` to `SPARESD_TEST_SOCKET` and prints each reply after `REPLY `.
#[test]
fn helper_client_as_another_user() {
    let (Ok(sock), Ok(reqs)) = (
        std::env::var("SPARESD_TEST_SOCKET"),
        std::env::var("SPARESD_TEST_REQUESTS"),
    ) else {
        return; // not called as the helper
    };
    let mut c = UnixStream::connect(sock).unwrap();
    for line in reqs.lines() {
        let r = call(&mut c, line);
        println!("REPLY {r}");
    }
}

fn as_user(d: &Daemon, uid: u32, requests: &[String]) -> Vec<Value> {
    // A copy of this test program in the daemon's directory (0755): the build directory may sit
    // where the other user cannot enter (a clone under /root).
    let exe = d.dir.path().join("helper");
    if !exe.exists() {
        install_executable(&std::env::current_exe().unwrap(), &exe);
    }
    let out = Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(exe)
        .args([
            "--exact",
            "helper_client_as_another_user",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SPARESD_TEST_SOCKET", d.socket())
        .env("SPARESD_TEST_REQUESTS", requests.join("\n"))
        .output()
        .expect("run setpriv");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "helper as uid {uid}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        // libtest may print its own "test ... " prefix on the first line.
        .filter_map(|l| l.find("REPLY ").map(|i| &l[i + 6..]))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn other_users_are_refused_and_owners_are_served() {
    if !is_root() {
        eprintln!("SKIPPED: switching users needs root (run the tests as root)");
        return;
    }
    let d = Daemon::start(&["--slurm-user", "root"]);
    let doc = doc(&[4, 4], "2D(1,1)", true);
    ok(&d.call(&register_line(5, 1000, &doc)));
    let before = d.call(&show_line(5));
    let reqs = [
        show_line(5),
        fail_line(5, "node005"),
        register_line(6, 65534, &doc),
        release_line(5),
        r#"{"version":1,"kind":"node_down","nodes":"node005"}"#.to_string(),
        r#"{"version":1,"kind":"list"}"#.to_string(),
        r#"{"version":1,"kind":"health"}"#.to_string(),
        show_line(999),
        fail_line(999, "node005"),
    ];
    let r = as_user(&d, 65534, &reqs);
    assert_eq!(r.len(), reqs.len());
    for v in &r[2..5] {
        assert_eq!(err_code(v), "forbidden");
    }
    // Another user's job and a job that does not exist get the same answer, word for word:
    // no user learns which job ids exist.
    let strip_id = |v: &Value| v.to_string().replace("999", "5");
    assert_eq!(err_code(&r[0]), "unknown_job");
    assert_eq!(strip_id(&r[7]), r[0].to_string());
    assert_eq!(err_code(&r[1]), "unknown_job");
    assert_eq!(strip_id(&r[8]), r[1].to_string());
    assert_eq!(
        ok(&r[5])["jobs"].as_array().unwrap().len(),
        0,
        "nobody sees no job"
    );
    assert_eq!(ok(&r[6])["uid"], 65534);
    assert_eq!(d.call(&show_line(5)), before, "refusals change nothing");
    assert!(
        d.log().contains("refused: uid 65534"),
        "refusals are logged"
    );

    // The owner reads its map and reports its failures, but may not release.
    let r = as_user(
        &d,
        1000,
        &[show_line(5), fail_line(5, "node005"), release_line(5)],
    );
    ok(&r[0]);
    assert_eq!(ok(&r[1])["outcome"], "substituted");
    assert_eq!(err_code(&r[2]), "forbidden");
}

#[test]
fn malformed_requests_get_errors_and_the_daemon_keeps_serving() {
    let d = Daemon::start(&["--max-request-bytes", "65536"]);
    let doc = doc(&[4, 4], "2D(1,1)", true);
    ok(&d.call(&register_line(3, 1000, &doc)));
    let before = d.call(&show_line(3));
    let mut twice = doc.clone();
    twice.ranks[1] = twice.ranks[0].clone();
    let table: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "truncated",
            br#"{"version":1,"kind":"sh"#.to_vec(),
            "bad_request",
        ),
        (
            "truncated object",
            br#"{"version":1,"kind":"show","job_id":3"#.to_vec(),
            "bad_request",
        ),
        ("not json", b"hello".to_vec(), "bad_request"),
        ("empty line", b"".to_vec(), "bad_request"),
        ("not an object", b"[1,2,3]".to_vec(), "bad_request"),
        ("no version", br#"{"kind":"list"}"#.to_vec(), "bad_request"),
        (
            "version string",
            br#"{"version":"1","kind":"list"}"#.to_vec(),
            "bad_request",
        ),
        (
            "version 2",
            br#"{"version":2,"kind":"list"}"#.to_vec(),
            "unsupported_version",
        ),
        (
            "unknown kind",
            br#"{"version":1,"kind":"reboot"}"#.to_vec(),
            "unknown_kind",
        ),
        (
            "kind number",
            br#"{"version":1,"kind":5}"#.to_vec(),
            "bad_request",
        ),
        (
            "job id string",
            br#"{"version":1,"kind":"show","job_id":"3"}"#.to_vec(),
            "bad_request",
        ),
        (
            "job id float",
            br#"{"version":1,"kind":"show","job_id":3.5}"#.to_vec(),
            "bad_request",
        ),
        (
            "negative job id",
            br#"{"version":1,"kind":"show","job_id":-3}"#.to_vec(),
            "bad_request",
        ),
        (
            "job id too big",
            br#"{"version":1,"kind":"show","job_id":4294967296}"#.to_vec(),
            "bad_request",
        ),
        (
            "negative uid",
            register_line(9, 0, &doc)
                .replace("\"uid\":0", "\"uid\":-1")
                .into_bytes(),
            "bad_request",
        ),
        (
            "node number",
            br#"{"version":1,"kind":"fail","job_id":3,"node":5}"#.to_vec(),
            "bad_request",
        ),
        (
            "missing node",
            br#"{"version":1,"kind":"fail","job_id":3}"#.to_vec(),
            "bad_request",
        ),
        (
            "unknown job",
            fail_line(99, "node001").into_bytes(),
            "unknown_job",
        ),
        (
            "unknown job show",
            show_line(99).into_bytes(),
            "unknown_job",
        ),
        (
            "unknown node",
            fail_line(3, "node999").into_bytes(),
            "unknown_node",
        ),
        (
            "coordinate outside",
            fail_line(3, "9,9").into_bytes(),
            "unknown_node",
        ),
        (
            "non-utf8",
            b"{\"version\":1,\"kind\":\"show\xff\xfe\",\"job_id\":3}".to_vec(),
            "bad_request",
        ),
        (
            "non-utf8 node",
            b"{\"version\":1,\"kind\":\"fail\",\"job_id\":3,\"node\":\"\xc3\x28\"}".to_vec(),
            "bad_request",
        ),
        (
            "map wrong type",
            br#"{"version":1,"kind":"register","job_id":9,"uid":0,"map":"x"}"#.to_vec(),
            "bad_request",
        ),
        (
            "inconsistent map",
            register_line(9, 0, &twice).into_bytes(),
            "invalid_map",
        ),
        (
            "bad hostlist",
            br#"{"version":1,"kind":"node_down","nodes":"n[3-"}"#.to_vec(),
            "bad_request",
        ),
        ("nul bytes", b"\0\0\0".to_vec(), "bad_request"),
    ];
    let mut c = d.connect();
    for (name, line, code) in &table {
        let mut buf = line.clone();
        buf.push(b'\n');
        c.write_all(&buf).unwrap();
        let r = read_reply(&mut c);
        assert_eq!(err_code(&r), *code, "{name}: {r}");
        assert!(!r["error"]["message"].as_str().unwrap().is_empty());
    }
    // The connection still serves, and nothing changed.
    assert_eq!(call(&mut c, &show_line(3)), before);
    assert_eq!(err_code(&d.call(&show_line(9))), "unknown_job");

    // Huge: a too_large reply, then the connection closes; the daemon serves others.
    let mut c = d.connect();
    let huge = vec![b'x'; 200_000];
    let w = {
        let mut c2 = c.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = c2.write_all(&huge);
        })
    };
    let r = read_reply(&mut c);
    assert_eq!(err_code(&r), "too_large");
    let mut rest = Vec::new();
    let _ = c.read_to_end(&mut rest);
    w.join().unwrap();
    // A truncated request at end of input (no newline) still gets its reply.
    let mut c = d.connect();
    c.write_all(br#"{"version":1,"kind":"show","job_id""#)
        .unwrap();
    c.shutdown(std::net::Shutdown::Write).unwrap();
    let mut line = String::new();
    BufReader::new(&mut c).read_line(&mut line).unwrap();
    let r: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(err_code(&r), "bad_request");
    // Several requests in one write are answered in order.
    let mut c = d.connect();
    c.write_all(format!("{}\n{}\n", show_line(3), show_line(99)).as_bytes())
        .unwrap();
    let mut r = BufReader::new(c);
    let mut a = String::new();
    let mut b = String::new();
    r.read_line(&mut a).unwrap();
    r.read_line(&mut b).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&a).unwrap(), before);
    assert_eq!(err_code(&serde_json::from_str(&b).unwrap()), "unknown_job");
    assert_eq!(ok(&d.call(r#"{"version":1,"kind":"health"}"#))["jobs"], 1);
}

#[test]
fn a_second_daemon_on_the_same_state_is_refused() {
    let d = Daemon::start(&[]);
    let out = Command::new(env!("CARGO_BIN_EXE_sparesd"))
        .arg("--socket")
        .arg(d.dir.path().join("other.sock"))
        .arg("--state-dir")
        .arg(d.state_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another sparesd"));
    let out = Command::new(env!("CARGO_BIN_EXE_sparesd"))
        .arg("--socket")
        .arg(d.socket())
        .arg("--state-dir")
        .arg(d.dir.path().join("other-state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("another daemon answers"));
    ok(&d.call(r#"{"version":1,"kind":"health"}"#));
}

/// The `spares` binary of this workspace, when it was built (`cargo test --workspace` builds it).
fn spares_cli() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent()?.parent()?.join("spares");
    p.exists().then_some(p)
}

#[test]
fn the_daemon_answers_as_spares_substitute_does() {
    let Some(cli) = spares_cli() else {
        eprintln!("SKIPPED: the spares binary is not built (cargo build -p spares-cli)");
        return;
    };
    let d = Daemon::start(&[]);
    let doc = doc(&[6, 6, 4], "3D(2,1)", true);
    let path = d.dir.path().join("map.json");
    std::fs::write(&path, doc.to_json()).unwrap();
    ok(&d.call(&register_line(12, 1000, &doc)));
    let nodes = [
        "node050", "node007", "node100", "node035", "node051", "node143",
    ];
    let mut args = vec![
        "substitute".to_string(),
        "--map".into(),
        path.display().to_string(),
    ];
    for n in nodes {
        args.push("--fail".into());
        args.push(n.into());
    }
    args.push("--json".into());
    let out = Command::new(cli).args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut last = Value::Null;
    for (i, n) in nodes.iter().enumerate() {
        let got = d.call(&fail_line(12, n));
        let step = &want["steps"][i];
        assert_eq!(got["node"], step["node"]);
        // One vocabulary: the daemon and `spares --json` name outcomes alike.
        assert_eq!(got["outcome"], step["outcome"]);
        assert_eq!(got["method_used"], step["method_used"]);
        assert_eq!(got["slide"], step["slide"]);
        assert_eq!(got["moves"].as_array().unwrap().len() as u64, step["moved"]);
        assert_eq!(got["collisions_after"], step["traffic"]["collisions"]);
        last = got;
    }
    assert_eq!(last["map"], want["map"], "the same final map");
}

/// `sparesctl`'s exit status says what happened (docs/sparesd.md): 4 when a reported failure
/// leaves the job without a spare, 0 for a second release, 3 for a refusal; `list -h` drops
/// the header as `squeue -h` does.
#[test]
fn sparesctl_exit_status_and_list_header() {
    let sparesctl = Path::new(env!("CARGO_BIN_EXE_sparesd")).with_file_name("sparesctl");
    assert!(
        sparesctl.exists(),
        "{} is not built: run the workspace's tests (cargo test --workspace)",
        sparesctl.display()
    );
    let d = Daemon::start(&[]);
    let mut doc = doc(&[4, 3], "2D(1,1)", true);
    doc.method = "2D".into();
    let mut c = d.connect();
    assert_eq!(call(&mut c, &register_line(77, 0, &doc))["ok"], true);
    let ctl = |args: &[&str]| {
        Command::new(&sparesctl)
            .arg("--socket")
            .arg(d.socket())
            .args(args)
            .output()
            .unwrap()
    };
    let listed = ctl(&["list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).starts_with("       job"));
    let quiet = ctl(&["list", "-h"]);
    let quiet = String::from_utf8_lossy(&quiet.stdout).into_owned();
    assert_eq!(quiet.lines().count(), 1, "{quiet}");
    assert!(quiet.trim_start().starts_with("77 "), "{quiet}");
    // `map --hostfile`: the ranks' nodes now, rank 0 first; after a failure, not the dead one.
    let hosts = |out: std::process::Output| String::from_utf8(out.stdout).unwrap();
    let initial = hosts(ctl(&["map", "77", "--hostfile"]));
    assert_eq!(initial.lines().next(), Some("node000"), "{initial}");
    assert_eq!(ctl(&["fail", "77", "node000"]).status.code(), Some(0));
    let current = hosts(ctl(&["map", "77", "--hostfile"]));
    assert_eq!(current.lines().count(), initial.lines().count());
    assert!(!current.lines().any(|h| h == "node000"), "{current}");
    let doc = d.state_dir().join("current.json");
    assert_eq!(
        ctl(&["map", "77", "-o", doc.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&doc).unwrap()).unwrap();
    assert_eq!(doc["failed"].as_array().unwrap().len(), 1, "{doc}");
    // 2D only: the first failure slid, the second finds no spare left.
    let fail = ctl(&["fail", "77", "node000", "node005"]);
    let out = String::from_utf8_lossy(&fail.stdout);
    assert_eq!(fail.status.code(), Some(4), "{out}");
    assert!(out.contains("no spare left"), "{out}");
    assert_eq!(ctl(&["fail", "78", "node000"]).status.code(), Some(3));
    assert_eq!(ctl(&["release", "77"]).status.code(), Some(0));
    let again = ctl(&["release", "77"]);
    assert_eq!(again.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&again.stderr).contains("not registered"));
    // After the release, show still tells what happened, and when it was released.
    let shown = ctl(&["show", "77"]);
    let out = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(shown.status.code(), Some(0), "{out}");
    assert!(out.contains("\nreleased 20"), "{out}");
    assert!(out.contains("no spare left"), "{out}");
    // history: the released jobs, as sacct lists ended ones.
    let listed = ctl(&["history", "--since", "1h", "-h"]);
    let text = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert_eq!(listed.status.code(), Some(0), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.trim_start().starts_with("77 "), "{text}");
    assert!(text.contains(" 20") && text.contains("LOST"), "{text}");
    assert_eq!(ctl(&["history", "--since", "5x"]).status.code(), Some(2));
}

/// `man sparesd` (section 8) has EXAMPLES and EXIT STATUS, made by `sparesd generate man`.
#[test]
fn sparesd_man_page_has_examples_and_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_sparesd"))
        .args(["generate", "man"])
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(st.success());
    let page = std::fs::read_to_string(dir.path().join("sparesd.8")).unwrap();
    assert!(page.contains(".TH sparesd 8"), "{page}");
    assert!(
        page.contains(".SH EXAMPLES") && page.contains("\\-\\-check"),
        "{page}"
    );
    assert!(page.contains(".SH \"EXIT STATUS\""), "{page}");
}
