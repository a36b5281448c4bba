//! Helpers of the integration tests: the real `sparesd` binary in a temporary directory, map
//! documents, and raw request lines.

#![allow(dead_code)] // each test file uses a different part

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use topology::{Grid, MapDocument, MapMeta, Method, Pattern, Plan, SpareMap, SpareShape};

/// A daemon process with its own socket and state directory.
pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub extra: Vec<String>,
}

impl Daemon {
    /// Starts the daemon with extra arguments, and waits until it answers.
    pub fn start(extra: &[&str]) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sparesd-test")
            .tempdir()
            .unwrap();
        // Other users (the authorization test) must reach the socket inside.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut d = Daemon {
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        d.spawn();
        d
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("sparesd.sock")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("sparesd.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_sparesd"))
            .arg("--socket")
            .arg(self.socket())
            .arg("--state-dir")
            .arg(self.state_dir())
            .args(&self.extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sparesd");
        self.child = Some(child);
        let t = Instant::now();
        loop {
            if let Ok(mut c) = UnixStream::connect(self.socket()) {
                if call(&mut c, r#"{"version":1,"kind":"health"}"#)["ok"] == true {
                    return;
                }
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("sparesd exited with {st}; log:\n{}", self.log());
            }
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "sparesd did not answer; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// kill -9, and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill(); // SIGKILL
            let _ = c.wait();
        }
    }

    /// Starts the daemon again (after `kill9`) on the same state and socket.
    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// kill -9 and start again on the same state.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    pub fn connect(&self) -> UnixStream {
        UnixStream::connect(self.socket()).unwrap()
    }

    /// One request on a new connection.
    pub fn call(&self, line: &str) -> Value {
        call(&mut self.connect(), line)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Sends a request line and reads the reply line.
pub fn call(s: &mut UnixStream, line: &str) -> Value {
    let mut buf = line.as_bytes().to_vec();
    buf.push(b'\n');
    s.write_all(&buf).unwrap();
    read_reply(s)
}

pub fn read_reply(s: &mut UnixStream) -> Value {
    let mut r = BufReader::new(s);
    let mut reply = String::new();
    r.read_line(&mut reply).unwrap();
    assert!(reply.ends_with('\n'), "no full reply line: {reply:?}");
    serde_json::from_str(&reply).unwrap()
}

/// A map document: a box with a spare shape, host names `node000`...
pub fn doc(box_: &[u32], spares: &str, hosts: bool) -> MapDocument {
    let plan = Plan::for_box(box_, Some(&SpareShape::parse(spares).unwrap())).unwrap();
    let q = box_.len();
    let map = SpareMap::from_plan(&plan, &vec![false; q]).unwrap();
    let n = Grid::mesh(box_).unwrap().len();
    let meta = MapMeta {
        topology: Some("test".into()),
        origin: vec![0; q],
        spares: plan.spares.clone(),
        method: Method::hybrid(q),
        pattern: Pattern::star(q),
        periodic: false,
        hosts: hosts.then(|| (0..n).map(|i| format!("node{i:03}")).collect()),
    };
    MapDocument::new(&map, &meta)
}

pub fn register_line(job: u32, uid: u32, doc: &MapDocument) -> String {
    serde_json::json!({"version":1,"kind":"register","job_id":job,"uid":uid,"map":doc}).to_string()
}

pub fn fail_line(job: u32, node: &str) -> String {
    serde_json::json!({"version":1,"kind":"fail","job_id":job,"node":node}).to_string()
}

pub fn show_line(job: u32) -> String {
    format!(r#"{{"version":1,"kind":"show","job_id":{job}}}"#)
}

pub fn release_line(job: u32) -> String {
    format!(r#"{{"version":1,"kind":"release","job_id":{job}}}"#)
}

/// The model's answer for a sequence of failures: the map document after them, as the daemon
/// (and `spares substitute`) must give it.
pub fn model_after(doc: &MapDocument, nodes: &[String]) -> MapDocument {
    let (mut map, meta) = doc.clone().into_map().unwrap();
    for n in nodes {
        let i = meta.node_by_name(map.grid(), n).unwrap();
        topology::sliding::fail(&mut map, i, &meta.method).unwrap();
    }
    MapDocument::new(&map, &meta)
}

/// Whether we may switch users (the authorization test needs root).
pub fn is_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            m.uid() == 0
        })
        .unwrap_or(false)
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// Copies an executable to `dest` (mode 0755) for another user to run. The copy is made by
/// `install`, another process: a file this test process had open for writing could leak into
/// a child forked meanwhile by another test thread, and running the copy would then fail with
/// "Text file busy".
pub fn install_executable(src: &Path, dest: &Path) {
    let status = std::process::Command::new("install")
        .args(["-m", "0755"])
        .arg(src)
        .arg(dest)
        .status()
        .expect("run install");
    assert!(
        status.success(),
        "install {} {}",
        src.display(),
        dest.display()
    );
}
