//! kill -9 at random moments during 1,000 failure reports over many jobs: after each restart
//! every acknowledged report is there, and nothing half-written is (each job's history, replayed
//! through the model from its registered map, gives exactly the daemon's current map).

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use common::*;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use topology::MapDocument;

const JOBS: u32 = 20;
const PER_JOB: usize = 50;

/// One request; None when the daemon died before the reply was complete.
fn try_call(sock: &std::path::Path, line: &str) -> Option<Value> {
    let mut s = UnixStream::connect(sock).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("{line}\n").as_bytes()).ok()?;
    let mut reply = String::new();
    BufReader::new(&mut s).read_line(&mut reply).ok()?;
    if !reply.ends_with('\n') {
        return None;
    }
    Some(serde_json::from_str(&reply).expect("a complete reply line is JSON"))
}

fn strip_map(v: &Value) -> Value {
    let mut v = v.clone();
    let o = v.as_object_mut().unwrap();
    o.remove("map");
    o.remove("version");
    o.remove("ok");
    o.remove("job_id");
    v
}

/// Checks every job against the acknowledged answers and the model.
fn verify(
    d: &Daemon,
    docs: &HashMap<u32, MapDocument>,
    acked: &HashMap<(u32, String), Value>,
    with_model: bool,
) {
    for (&job, doc) in docs {
        let show = d.call(&show_line(job));
        assert_eq!(show["ok"], true, "job {job} lost after a restart: {show}");
        let history = show["history"].as_array().unwrap();
        let nodes: Vec<String> = history
            .iter()
            .map(|h| h["node"].as_str().unwrap().to_string())
            .collect();
        for (i, h) in history.iter().enumerate() {
            assert_eq!(h["step"], i as u64 + 1, "job {job}: steps without gaps");
        }
        if with_model {
            let want = model_after(doc, &nodes);
            let got: MapDocument = serde_json::from_value(show["map"].clone()).unwrap();
            assert_eq!(
                got, want,
                "job {job}: the map is the model's for its history"
            );
        }
        for ((j, node), answer) in acked {
            if *j != job {
                continue;
            }
            let h = history
                .iter()
                .find(|h| h["node"] == node.as_str())
                .unwrap_or_else(|| panic!("job {job}: acknowledged failure of {node} is gone"));
            assert_eq!(
                &strip_map(h),
                answer,
                "job {job} {node}: the acknowledged answer"
            );
        }
    }
}

#[test]
fn kill_9_at_random_moments_loses_no_acknowledged_report() {
    let mut d = Daemon::start(&["--snapshot-every", "97"]);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20261122);
    let mut docs = HashMap::new();
    let mut plan: Vec<(u32, String)> = Vec::new();
    for j in 1..=JOBS {
        let doc = doc(&[6, 6, 6], "3D(2,1)", j % 2 == 0);
        let r = d.call(&register_line(j, 1000 + j, &doc));
        assert_eq!(r["ok"], true, "{r}");
        let (map, meta) = doc.clone().into_map().unwrap();
        let mut nodes: Vec<u32> = (0..map.grid().len()).collect();
        nodes.shuffle(&mut rng);
        for &n in &nodes[..PER_JOB] {
            plan.push((j, meta.node_name(map.grid(), n)));
        }
        docs.insert(j, doc);
    }
    plan.shuffle(&mut rng);
    assert_eq!(plan.len(), 1000);

    let mut acked: HashMap<(u32, String), Value> = HashMap::new();
    let mut kills = 0;
    let mut i = 0;
    while i < plan.len() {
        let (job, node) = &plan[i];
        // One report in ten gets a kill -9 after a random delay of 0 to 3 ms: before, during
        // or after the daemon's journal write, fsync and reply.
        let killer = if rng.gen_range(0..10) == 0 {
            let pid = d.pid() as i32;
            let delay = Duration::from_micros(rng.gen_range(0..3000));
            Some(std::thread::spawn(move || {
                std::thread::sleep(delay);
                // SAFETY: kill(2) on our own child's pid; it is not reaped before the join.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }))
        } else {
            None
        };
        let reply = try_call(&d.socket(), &fail_line(*job, node));
        let killed = killer.is_some();
        if let Some(k) = killer {
            k.join().unwrap();
        }
        if let Some(r) = &reply {
            assert_eq!(r["ok"], true, "{job} {node}: {r}");
            acked.insert((*job, node.clone()), strip_map(r));
            i += 1;
        }
        if killed {
            kills += 1;
            d.restart();
            // The model replay is the slow part in a debug build: every 10th restart.
            verify(&d, &docs, &acked, kills % 10 == 0);
        }
        // Without a reply the report is sent again after the restart: if it was durable, the
        // daemon answers it from the history (the same answer), else it is decided anew.
    }
    d.restart();
    verify(&d, &docs, &acked, true);
    let log = d.log();
    eprintln!(
        "torn journal tails cut at restarts: {}",
        log.matches("torn last record").count()
    );
    assert_eq!(acked.len(), 1000);
    assert!(kills >= 50, "only {kills} kills");
    eprintln!("1000 reports acknowledged across {kills} kill -9 restarts");
}
