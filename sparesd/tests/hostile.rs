//! sparesd under a hostile local user (as another uid through `setpriv`, so root's tests
//! exercise the limits of ordinary users): connections held open and trickled, per-user
//! limits, huge lines, probing for job ids; and the daemon's process life: a socket path that
//! is not a socket, SIGTERM, SIGHUP, reconciliation with Slurm.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const ATTACKER: u32 = 65534;

fn ok(v: &Value) -> &Value {
    assert_eq!(v["ok"], true, "expected success: {v}");
    v
}

fn config_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sparesd.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

/// One connection: sends `line` (if any), waits up to `wait` for a reply line.
fn try_reply(s: &mut UnixStream, wait: Duration) -> Option<Value> {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(n) if n > 0 => serde_json::from_str(&line).ok(),
        _ => None,
    }
}

/// The attacks, run as another user by `as_attacker` (this same test program under
/// `setpriv`). `SPARESD_ATTACK` says which:
/// - `hold N SECS`: opens N connections, sends one byte on each; those not refused at once
///   are held and trickled a byte every 100 ms for SECS seconds. Prints `HELD h REFUSED r`.
/// - `big N MB`: N connections at once each send a line of MB megabytes of `[0,0,...]`;
///   prints `CODE c` for each reply (or `CODE none`).
#[test]
fn helper_attacker() {
    let (Ok(sock), Ok(attack)) = (
        std::env::var("SPARESD_TEST_SOCKET"),
        std::env::var("SPARESD_ATTACK"),
    ) else {
        return; // not called as the helper
    };
    let words: Vec<&str> = attack.split_whitespace().collect();
    match words[0] {
        "hold" => {
            let n: usize = words[1].parse().unwrap();
            let secs: u64 = words[2].parse().unwrap();
            let mut held = Vec::new();
            let mut refused = 0;
            for _ in 0..n {
                let Ok(mut s) = UnixStream::connect(&sock) else {
                    refused += 1;
                    continue;
                };
                let _ = s.write_all(b"{");
                match try_reply(&mut s, Duration::from_millis(150)) {
                    Some(_) => refused += 1, // busy
                    None => held.push(s),
                }
            }
            println!("HELD {} REFUSED {refused}", held.len());
            std::io::stdout().flush().unwrap();
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(secs) {
                for s in &mut held {
                    let _ = s.write_all(b" ");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        "big" => {
            let n: usize = words[1].parse().unwrap();
            let mb: usize = words[2].parse().unwrap();
            let threads: Vec<_> = (0..n)
                .map(|_| {
                    let sock = sock.clone();
                    std::thread::spawn(move || {
                        let mut s = UnixStream::connect(&sock).unwrap();
                        let mut line = br#"{"version":1,"kind":"show","job_id":1,"x":["#.to_vec();
                        while line.len() < mb << 20 {
                            line.extend_from_slice(b"0,");
                        }
                        line.extend_from_slice(b"0]}\n");
                        let _ = s.write_all(&line); // the daemon may close early
                        match try_reply(&mut s, Duration::from_secs(60)) {
                            Some(v) => v["error"]["code"].as_str().unwrap_or("ok").to_string(),
                            None => "none".into(),
                        }
                    })
                })
                .collect();
            for t in threads {
                println!("CODE {}", t.join().unwrap());
            }
        }
        other => panic!("unknown attack {other}"),
    }
}

/// Starts the attack as `uid`; the child's stdout is returned for reading.
fn as_attacker(d: &Daemon, uid: u32, attack: &str) -> std::process::Child {
    let exe = d.dir.path().join("attacker");
    if !exe.exists() {
        install_executable(&std::env::current_exe().unwrap(), &exe);
    }
    Command::new("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg(exe)
        .args([
            "--exact",
            "helper_attacker",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SPARESD_TEST_SOCKET", d.socket())
        .env("SPARESD_ATTACK", attack)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run setpriv")
}

/// Reads the attacker's stdout up to a line starting with `prefix` (libtest may print its
/// own text first).
fn read_until(child: &mut std::process::Child, prefix: &str) -> String {
    let out = child.stdout.as_mut().unwrap();
    let mut r = BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "the attacker ended without {prefix}"
        );
        if let Some(i) = line.find(prefix) {
            return line[i..].trim().to_string();
        }
    }
}

fn skip_unless_root() -> bool {
    if !is_root() {
        eprintln!("SKIPPED: switching users needs root (run the tests as root)");
        return true;
    }
    false
}

#[test]
fn connections_held_and_trickled_by_a_user_do_not_lock_root_out() {
    if skip_unless_root() {
        return;
    }
    // The usual descriptor limit of a service (the daemon inherits it from this process).
    let st = Command::new("prlimit")
        .args([
            "--pid",
            &std::process::id().to_string(),
            "--nofile=1024:1024",
        ])
        .status()
        .unwrap();
    assert!(st.success());
    let d = Daemon::start(&[]);
    let doc = doc(&[4, 4], "2D(1,1)", true);
    ok(&d.call(&register_line(9, 1000, &doc)));
    // 600 connections: on old main each cost two descriptors under a limit of 1024, so the
    // daemon could no longer accept anybody.
    let mut attacker = as_attacker(&d, ATTACKER, "hold 600 20");
    let held = read_until(&mut attacker, "HELD");
    // Root is served on new connections during the attack, and so is node_down.
    for _ in 0..20 {
        let mut s = d.connect();
        s.write_all(b"{\"version\":1,\"kind\":\"health\"}\n")
            .unwrap();
        let r = try_reply(&mut s, Duration::from_secs(5))
            .unwrap_or_else(|| panic!("root got no answer while {held}"));
        ok(&r);
    }
    let mut s = d.connect();
    s.write_all(format!("{}\n", fail_line(9, "node005")).as_bytes())
        .unwrap();
    ok(&try_reply(&mut s, Duration::from_secs(5)).expect("root's fail answered"));
    let _ = attacker.kill();
    let _ = attacker.wait();
}

#[test]
fn one_user_gets_at_most_max_connections_per_uid() {
    if skip_unless_root() {
        return;
    }
    let d = Daemon::start(&[]); // max_connections_per_uid = 16 by default
    let mut a = as_attacker(&d, ATTACKER, "hold 24 10");
    assert_eq!(read_until(&mut a, "HELD"), "HELD 16 REFUSED 8");
    // Another user is not affected by the first one's connections.
    let mut b = as_attacker(&d, 4242, "hold 2 1");
    assert_eq!(read_until(&mut b, "HELD"), "HELD 2 REFUSED 0");
    assert!(d.log().contains("max_connections_per_uid = 16"));
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// VmHWM (peak resident memory) of a process, in kB.
fn vm_hwm_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn huge_lines_from_a_user_are_refused_early_and_memory_stays_bounded() {
    if skip_unless_root() {
        return;
    }
    let d = Daemon::start(&[]);
    let before = vm_hwm_kb(d.pid());
    // Four 16 MB lines at once: on old main, each became a JSON tree of about 285 MB.
    let a = as_attacker(&d, ATTACKER, "big 4 16");
    let out = a.wait_with_output().unwrap();
    let codes: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.find("CODE").map(|i| l[i..].trim().to_string()))
        .collect();
    assert_eq!(codes.len(), 4, "{codes:?}");
    let peak = vm_hwm_kb(d.pid());
    for c in &codes {
        assert_eq!(c, "CODE too_large", "{codes:?}");
    }
    let budget_kb = 64 << 10;
    assert!(
        peak < before + budget_kb,
        "peak resident memory {peak} kB (was {before} kB before the attack; budget +{budget_kb} kB)"
    );
    assert!(d.log().contains("max_user_request_bytes"));
    ok(&d.call(r#"{"version":1,"kind":"health"}"#));
}

#[test]
fn a_trickled_request_is_cut_at_its_deadline() {
    let (_c, cfg) = config_file("request_timeout_secs = 1\n");
    let d = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let mut s = d.connect();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut got = Vec::new();
    // One byte every 100 ms: on old main each byte restarted the idle timeout, forever.
    for _ in 0..100 {
        let _ = s.write_all(b" ");
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("\"timeout\""), "reply: {text:?}");
    assert!(text.contains("request_timeout_secs"), "{text}");
}

#[test]
fn a_socket_path_that_is_a_regular_file_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("precious");
    std::fs::write(&victim, "do not delete\n").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sparesd"))
        .arg("--socket")
        .arg(&victim)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "sparesd serves on the path of a regular file (file now: {:?})",
                std::fs::symlink_metadata(&victim).map(|m| m.file_type())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(err.contains("regular file"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "do not delete\n");
    // A symbolic link to a file is not followed nor removed either.
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sparesd"))
        .arg("--socket")
        .arg(&link)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "do not delete\n");
}

fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(st.success());
}

fn wait_exit(d: &mut Daemon) -> std::process::ExitStatus {
    let child = d.child.as_mut().unwrap();
    let t = Instant::now();
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            d.child = None;
            return st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "sparesd did not exit; log:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_finishes_answers_removes_the_socket_and_exits_0() {
    let mut d = Daemon::start(&[]);
    let doc = doc(&[4, 4], "2D(1,1)", true);
    ok(&d.call(&register_line(4, 1000, &doc)));
    // A connection that is idle between requests does not hold the exit up.
    let _idle = d.connect();
    signal(d.pid(), "TERM");
    let st = wait_exit(&mut d);
    assert_eq!(st.code(), Some(0), "log:\n{}", d.log());
    assert!(
        std::fs::symlink_metadata(d.socket()).is_err(),
        "the socket is removed"
    );
    assert!(d.log().contains("stopping"), "{}", d.log());
    // What was acknowledged is there after the restart.
    d.start_again();
    ok(&d.call(&show_line(4)));
}

/// SIGTERM used to wake the accept loop by connecting to the socket's path: with that file
/// removed (a careless cleanup of the run directory), the daemon never exited.
#[test]
fn sigterm_stops_the_daemon_whose_socket_file_was_removed() {
    let mut d = Daemon::start(&[]);
    ok(&d.call(r#"{"version":1,"kind":"health"}"#));
    std::fs::remove_file(d.socket()).unwrap();
    signal(d.pid(), "TERM");
    let st = wait_exit(&mut d);
    assert_eq!(st.code(), Some(0), "log:\n{}", d.log());
    assert!(
        d.log().contains("no longer accepting connections"),
        "{}",
        d.log()
    );
}

#[test]
fn sighup_is_ignored_with_a_log_line() {
    let mut d = Daemon::start(&[]);
    signal(d.pid(), "HUP");
    let t = Instant::now();
    while !d.log().contains("SIGHUP ignored") {
        assert!(t.elapsed() < Duration::from_secs(10), "log:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(10));
    }
    // Still serving (on old main SIGHUP killed the daemon).
    ok(&d.call(r#"{"version":1,"kind":"health"}"#));
    assert!(d.child.as_mut().unwrap().try_wait().unwrap().is_none());
    signal(d.pid(), "TERM");
    assert_eq!(wait_exit(&mut d).code(), Some(0));
}

fn fake_squeue(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("squeue");
    let tmp = dir.join("squeue.new");
    std::fs::write(&tmp, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    p
}

fn jobs(d: &Daemon) -> Vec<u64> {
    let l = d.call(r#"{"version":1,"kind":"list"}"#);
    ok(&l)["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect()
}

#[test]
fn jobs_that_slurm_no_longer_knows_are_released() {
    let bin = tempfile::tempdir().unwrap();
    // First Slurm cannot be asked: nothing may be released.
    let squeue = fake_squeue(
        bin.path(),
        "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2; exit 1",
    );
    let (_c, cfg) = config_file(&format!(
        "reconcile_interval_secs = 1\nsqueue = \"{}\"\n",
        squeue.display()
    ));
    let d = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let doc = doc(&[4, 4], "2D(1,1)", true);
    for j in [7, 8, 9] {
        ok(&d.call(&register_line(j, 1000, &doc)));
    }
    let t = Instant::now();
    while !d.log().contains("Unable to contact") {
        assert!(t.elapsed() < Duration::from_secs(20), "log:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(jobs(&d), [7, 8, 9], "a failed check releases nothing");
    // Now Slurm answers: 7 runs, 8 ended, 9 is gone.
    fake_squeue(
        bin.path(),
        "echo '7 RUNNING'; echo '8 COMPLETED'; echo '12 PENDING'",
    );
    let t = Instant::now();
    while jobs(&d) != [7] {
        assert!(t.elapsed() < Duration::from_secs(20), "log:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    // The daemon logs a release just after making it: wait for both lines.
    while !(d.log().contains("job 8 released") && d.log().contains("job 9 released")) {
        assert!(t.elapsed() < Duration::from_secs(20), "log:\n{}", d.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = d.log();
    assert!(
        log.contains("job 8 released: Slurm no longer knows it"),
        "{log}"
    );
    assert!(log.contains("job 9 released"), "{log}");
}

#[test]
fn tcp_peers_that_do_not_authenticate_are_bounded() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (_c, cfg) = config_file(&format!(
        "auth_timeout_secs = 1\nmax_connections_per_uid = 4\n[tcp]\nlisten = \"127.0.0.1:{port}\"\n"
    ));
    let d = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let read_all = |s: &mut TcpStream| {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    };
    // Unauthenticated peers share one user's limit: the fifth is refused at once.
    let mut held: Vec<TcpStream> = (0..4)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut fifth = TcpStream::connect(("127.0.0.1", port)).unwrap();
    assert!(read_all(&mut fifth).contains("\"busy\""));
    // Those held are closed at the authentication deadline (old main: 600 s), even while
    // trickling bytes.
    let _ = held[0].write_all(b"{");
    for s in &mut held {
        let text = read_all(s);
        assert!(text.contains("\"timeout\""), "{text:?}");
    }
    // A first line longer than max_auth_bytes is refused without buffering it (old main:
    // up to 16 MiB each).
    let mut big = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = big.write_all(&vec![b'x'; 64 << 10]);
    let text = read_all(&mut big);
    assert!(text.contains("\"too_large\""), "{text:?}");
    assert!(text.contains("max_auth_bytes"), "{text:?}");
    ok(&d.call(r#"{"version":1,"kind":"health"}"#));
}

#[test]
fn sigterm_lets_a_request_under_way_finish() {
    let mut d = Daemon::start(&[]);
    // A registration that takes the daemon a while.
    let big = doc(&[40, 40, 40], "3D(1,1)", true);
    let mut s = d.connect();
    s.write_all(format!("{}\n", register_line(5, 1000, &big)).as_bytes())
        .unwrap();
    // Read by now and being handled (about 0.9 s in a debug build), so the signal comes
    // while it is under way; if it were answered first, the rest still holds.
    std::thread::sleep(Duration::from_millis(100));
    signal(d.pid(), "TERM");
    // The reply comes (on old main the daemon died at once), then the daemon exits 0.
    let r = try_reply(&mut s, Duration::from_secs(30)).expect("the request is answered");
    ok(&r);
    assert_eq!(r["created"], true);
    assert_eq!(wait_exit(&mut d).code(), Some(0), "log:\n{}", d.log());
    d.start_again();
    ok(&d.call(&show_line(5)));
}

#[test]
fn lines_beyond_the_input_budget_are_refused_busy() {
    // Room for two partial lines of 64 KiB (the buffers of all connections together).
    let (_c, cfg) = config_file(
        "max_request_bytes = 65536\nmax_user_request_bytes = 65536\nmax_buffered_bytes = 131072\n",
    );
    let d = Daemon::start(&["--config", cfg.to_str().unwrap()]);
    let partial = vec![b' '; 50_000]; // no newline: buffered until the line ends
    let mut conns = Vec::new();
    for _ in 0..2 {
        let mut s = d.connect();
        s.write_all(&partial).unwrap();
        assert!(try_reply(&mut s, Duration::from_millis(300)).is_none());
        conns.push(s);
    }
    let mut third = d.connect();
    let _ = third.write_all(&partial);
    let r = try_reply(&mut third, Duration::from_secs(10)).expect("a refusal");
    assert_eq!(r["error"]["code"], "busy", "{r}");
    assert!(r["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_buffered_bytes = 131072"));
    // Once a buffered line is answered, its room is given back.
    conns[0].write_all(b"\n").unwrap();
    assert_eq!(
        try_reply(&mut conns[0], Duration::from_secs(10)).unwrap()["error"]["code"],
        "bad_request"
    );
    let mut fourth = d.connect();
    fourth.write_all(&partial).unwrap();
    assert!(
        try_reply(&mut fourth, Duration::from_millis(300)).is_none(),
        "room given back"
    );
}
