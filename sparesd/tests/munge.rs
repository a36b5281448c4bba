//! The MUNGE-authenticated TCP listener, against a private munged (own key and socket).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

struct Munged {
    child: Child,
    socket: PathBuf,
}

impl Drop for Munged {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_munged(dir: &Path) -> Option<Munged> {
    let have = |p: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if !have("munged") || !have("mungekey") {
        eprintln!("SKIPPED: munged/mungekey not installed (apt-get install munge)");
        return None;
    }
    let m = dir.join("munge");
    std::fs::create_dir_all(&m).unwrap();
    let key = m.join("munge.key");
    let st = Command::new("mungekey")
        .arg("--create")
        .arg(format!("--keyfile={}", key.display()))
        .status()
        .unwrap();
    assert!(st.success(), "mungekey failed");
    let socket = m.join("munge.sock");
    let child = Command::new("munged")
        .args(["-F", "--force"])
        .arg(format!("--socket={}", socket.display()))
        .arg(format!("--key-file={}", key.display()))
        .arg(format!("--pid-file={}", m.join("munged.pid").display()))
        .arg(format!("--seed-file={}", m.join("munge.seed").display()))
        .arg(format!("--log-file={}", m.join("munged.log").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while !socket.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "munged did not start: {}",
            std::fs::read_to_string(m.join("munged.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(Munged { child, socket })
}

fn line(s: &mut TcpStream, r: &mut BufReader<TcpStream>, l: &str) -> Value {
    s.write_all(format!("{l}\n").as_bytes()).unwrap();
    let mut reply = String::new();
    r.read_line(&mut reply).unwrap();
    serde_json::from_str(&reply).unwrap_or(Value::Null)
}

#[test]
fn tcp_requests_are_authenticated_with_munge() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(munged) = start_munged(tmp.path()) else {
        return;
    };
    // A port the system says is free (then released for the daemon to take).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let conf = tmp.path().join("sparesd.toml");
    std::fs::write(
        &conf,
        format!(
            "[tcp]\nlisten = \"127.0.0.1:{port}\"\nmunge_socket = \"{}\"\n",
            munged.socket.display()
        ),
    )
    .unwrap();
    let d = Daemon::start(&["--config", conf.to_str().unwrap()]);
    assert!(d.log().contains("MUNGE-authenticated TCP listener"));
    let doc = doc(&[4, 4], "2D(1,1)", true);
    assert_eq!(d.call(&register_line(11, 4321, &doc))["ok"], true);

    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let r = BufReader::new(s.try_clone().unwrap());
        (s, r)
    };
    let cred = sparesd::munge::encode(b"sparesd", Some(&munged.socket)).unwrap();
    let auth = format!(r#"{{"version":1,"kind":"auth","credential":"{cred}"}}"#);
    let (mut s, mut r) = connect();
    let a = line(&mut s, &mut r, &auth);
    assert_eq!(a["ok"], true, "{a}");
    assert_eq!(a["uid"], sparesd::sys::euid());
    let h = line(&mut s, &mut r, r#"{"version":1,"kind":"health"}"#);
    assert_eq!(h["uid"], sparesd::sys::euid());
    let f = line(&mut s, &mut r, &fail_line(11, "node005"));
    assert_eq!(f["ok"], true, "{f}");

    // The same credential again: munged says replayed.
    let (mut s, mut r) = connect();
    let a = line(&mut s, &mut r, &auth);
    assert_eq!(a["error"]["code"], "forbidden", "{a}");
    // No authentication first.
    let (mut s, mut r) = connect();
    let a = line(&mut s, &mut r, &show_line(11));
    assert_eq!(a["error"]["code"], "forbidden", "{a}");
    // A forged credential.
    let (mut s, mut r) = connect();
    let a = line(
        &mut s,
        &mut r,
        r#"{"version":1,"kind":"auth","credential":"MUNGE:AAAAforged:"}"#,
    );
    assert_eq!(a["error"]["code"], "forbidden", "{a}");
    assert_eq!(
        d.call(&show_line(11))["history"].as_array().unwrap().len(),
        1
    );
}
