//! Where job_submit pins a padded box: on nodes that are free now, read from a file that
//! something outside slurmctld refreshes (a job_submit plugin runs under slurmctld's locks
//! and must never ask slurmctld). The file holds hostlist expressions or node names, one or
//! more per line (`#` starts a comment); `sinfo -h -N -t idle -o %N` writes one, as do
//! `scripts/free-nodes.sh` and the test cluster. No file: every node is a candidate and Slurm
//! queues the job.
//!
//! Boxes pinned since the file was written count as busy, so a burst of submissions between
//! two refreshes does not pile onto the same nodes.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use topology::grid::format_shape;
use topology::{hostlist, placement, Plan, Topology};

use crate::policy::{OnNoPlacement, Policy, Refusal, RefusalKind};

/// The free nodes of a file, as network node indices, and when the file was written.
#[derive(Debug, Clone, PartialEq)]
pub struct FreeNodes {
    pub nodes: HashSet<u32>,
    pub written: SystemTime,
}

/// Reads the free-node file; `Ok(None)` when it does not exist. Names the topology does not
/// know are ignored (other partitions); a malformed line is an error naming the file.
/// Read inside slurmctld: a FIFO, a device or a huge file there must not block or grow it,
/// so the file is read with the site-file reader and `max_bytes`.
pub fn read_free_nodes(
    path: &Path,
    topology: &Topology,
    max_bytes: u64,
) -> Result<Option<FreeNodes>, String> {
    let text = match topology::sitefile::read(path, max_bytes) {
        Ok(t) => t,
        Err(topology::sitefile::SiteFileError::Io { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(None)
        }
        Err(e) => return Err(format!("free node file: {e}")),
    };
    let written = std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let mut nodes = HashSet::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        for expr in line.split_whitespace() {
            let names = hostlist::expand(expr)
                .map_err(|e| format!("free node file {} line {}: {e}", path.display(), i + 1))?;
            nodes.extend(names.iter().filter_map(|n| topology.node(n)));
        }
    }
    Ok(Some(FreeNodes { nodes, written }))
}

/// How long a pin outlives the first file written after it: the job may still be pending
/// when the next refresh runs.
const PIN_GRACE: Duration = Duration::from_secs(2);

/// Boxes this process pinned recently.
#[derive(Debug, Default)]
pub struct Pins {
    pins: Vec<(SystemTime, Vec<u32>)>,
}

impl Pins {
    pub const fn new() -> Self {
        Pins { pins: Vec::new() }
    }

    /// Drops the pins a file written at `written` already reflects; returns the nodes of
    /// the others.
    pub fn busy(&mut self, written: Option<SystemTime>) -> HashSet<u32> {
        if let Some(w) = written {
            self.pins.retain(|(t, _)| *t + PIN_GRACE > w);
        }
        self.pins
            .iter()
            .flat_map(|(_, n)| n.iter().copied())
            .collect()
    }

    pub fn add(&mut self, at: SystemTime, nodes: Vec<u32>) {
        self.pins.push((at, nodes));
        // Bounded: without a free node file nothing ever clears them.
        if self.pins.len() > 4096 {
            self.pins.remove(0);
        }
    }
}

/// The pins of this slurmctld.
pub static PINS: Mutex<Pins> = Mutex::new(Pins::new());

/// A placed box.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub origin: Vec<u32>,
    /// Host names of the box, in box order.
    pub hosts: Vec<String>,
    /// Compressed hostlist of the box (for `req_nodes`).
    pub hostlist: String,
    /// Whether the box holds nodes that are not free now (the job waits for them).
    pub waits: bool,
}

/// Places the box of `plan`: the first one whose nodes are all free and not pinned; if there
/// is none, `wait` pins the first box of the network, `reject` refuses the job.
pub fn place(
    policy: &Policy,
    plan: &Plan,
    free: Option<&HashSet<u32>>,
    pinned: &HashSet<u32>,
) -> Result<Placement, Refusal> {
    let t = &policy.topology;
    let usable = |n: u32| free.map_or(true, |f| f.contains(&n)) && !pinned.contains(&n);
    let refuse = |e: topology::Error| Refusal::unavailable(e.to_string());
    let (origin, waits) = match placement::find_box(t, &plan.box_extents, usable).map_err(refuse)? {
        Some(o) => (o, false),
        None => {
            let busy = (0..t.grid.len())
                .filter(|&n| t.host(n).is_some() && !usable(n))
                .count();
            match policy.on_no_placement {
                OnNoPlacement::Reject => {
                    return Err(Refusal(
                        format!(
                            "no free {} box on the {} network ({busy} nodes busy or down); submit later or ask for fewer nodes",
                            format_shape(&plan.box_extents),
                            t.name
                        ),
                        RefusalKind::Busy,
                    ))
                }
                OnNoPlacement::Wait => {
                    let o = placement::find_box(t, &plan.box_extents, |_| true)
                        .map_err(refuse)?
                        .ok_or_else(|| {
                            Refusal::unavailable(format!(
                                "the {} network has no complete {} box (holes in the topology)",
                                t.name,
                                format_shape(&plan.box_extents)
                            ))
                        })?;
                    (o, true)
                }
            }
        }
    };
    let hosts = t
        .box_hosts(&origin, &plan.box_extents)
        .ok_or_else(|| Refusal::unavailable("the box has a cell without a node".into()))?;
    Ok(Placement {
        hostlist: hostlist::compress(&hosts),
        hosts,
        origin,
        waits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{policy_dir, test_policy};
    use topology::SpareShape;

    fn plan(p: &Policy, spares: &str, shape: &[u32]) -> Plan {
        let s = SpareShape::parse(spares).unwrap();
        Plan::for_compute(shape, Some(&s), &p.topology.unit, p.topology.grid.extents()).unwrap()
    }

    #[test]
    fn free_node_files_are_read() {
        let p = test_policy("free", "");
        let dir = policy_dir("free", "");
        let f = dir.join("free");
        assert_eq!(
            read_free_nodes(&f, &p.topology, p.limits.max_file_bytes).unwrap(),
            None
        );
        std::fs::write(&f, "node[01-03]\n# comment\nnode05 other7 # trailing\n").unwrap();
        let free = read_free_nodes(&f, &p.topology, p.limits.max_file_bytes)
            .unwrap()
            .unwrap();
        let mut n: Vec<u32> = free.nodes.into_iter().collect();
        n.sort();
        assert_eq!(n, vec![0, 1, 2, 4]);
        std::fs::write(&f, "node[01-\n").unwrap();
        let e = read_free_nodes(&f, &p.topology, p.limits.max_file_bytes).unwrap_err();
        assert!(e.contains("line 1"), "{e}");
        // A FIFO (or a device) at the path must not block slurmctld; a file over the
        // policy's size limit is refused.
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let e = read_free_nodes(&fifo, &p.topology, p.limits.max_file_bytes).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::write(&f, "node01\n".repeat(10)).unwrap();
        let e = read_free_nodes(&f, &p.topology, 16).unwrap_err();
        assert!(e.contains("larger than the limit of 16 bytes"), "{e}");
    }

    #[test]
    fn boxes_go_on_free_unpinned_nodes() {
        let p = test_policy("place", "on_no_placement: reject\n");
        let pl = plan(&p, "3D(1,1)", &[1, 1, 1]); // a 2x1x1 box
        let free: HashSet<u32> = [1, 2, 3, 5, 6].into_iter().collect();
        let a = place(&p, &pl, Some(&free), &HashSet::new()).unwrap();
        assert_eq!(a.hosts, ["node02", "node03"]);
        assert_eq!(a.hostlist, "node[02-03]");
        assert!(!a.waits);
        let pinned: HashSet<u32> = [1, 2].into_iter().collect();
        let b = place(&p, &pl, Some(&free), &pinned).unwrap();
        assert_eq!(b.hosts, ["node06", "node07"]);
        // No file: anything goes.
        let c = place(&p, &pl, None, &HashSet::new()).unwrap();
        assert_eq!(c.hosts, ["node01", "node02"]);
    }

    #[test]
    fn no_free_box_waits_or_rejects_by_policy() {
        let p = test_policy("reject", "on_no_placement: reject\n");
        let whole = plan(&p, "3D(2,1)", &[3, 3, 2]);
        let free: HashSet<u32> = (0..30).collect();
        let e = place(&p, &whole, Some(&free), &HashSet::new()).unwrap_err();
        assert_eq!(
            e.0,
            "no free 4x4x2 box on the torus-4x4x2 network (2 nodes busy or down); submit later or ask for fewer nodes"
        );
        let p = test_policy("wait", "on_no_placement: wait\n");
        let w = place(&p, &whole, Some(&free), &HashSet::new()).unwrap();
        assert!(w.waits);
        assert_eq!(w.hostlist, "node[01-32]");
    }

    #[test]
    fn pins_expire_once_a_later_file_shows_them() {
        let mut pins = Pins::new();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        pins.add(t0, vec![1, 2]);
        assert_eq!(pins.busy(None).len(), 2);
        assert_eq!(pins.busy(Some(t0 + Duration::from_secs(1))).len(), 2);
        assert!(pins.busy(Some(t0 + Duration::from_secs(3))).is_empty());
    }
}
