//! The job's spare map on its nodes (SPANK, remote side): every node computes the same map
//! from the same inputs (the job's node list, the policy's topology, the options), so no node
//! has to wait for another. The map is written as JSON with a hostfile of the compute nodes in
//! rank order next to it, and the task environment says which node computes which rank.

use std::path::{Path, PathBuf};

use topology::grid::format_shape;
use topology::{hostlist, placement, MapDocument, NodeState, Pattern};

use crate::job_env::SparesRequest;
use crate::policy::{Decision, Policy};
use crate::statedir::{StateDir, StateDirError};

/// `SLURM_SPARES_MAP`: path of the map document.
pub const ENV_MAP: &str = "SLURM_SPARES_MAP";
/// `SLURM_SPARES_HOSTFILE`: compute nodes in rank order, for `SLURM_HOSTFILE`.
pub const ENV_HOSTFILE: &str = "SLURM_SPARES_HOSTFILE";
/// `SLURM_SPARES_ROLE`: `compute` or `spare`.
pub const ENV_ROLE: &str = "SLURM_SPARES_ROLE";
/// `SLURM_SPARES_RANK`: the logical rank of a compute node.
pub const ENV_RANK: &str = "SLURM_SPARES_RANK";

/// What this node is in the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Compute(u32),
    Spare,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Compute(_) => "compute",
            Role::Spare => "spare",
        }
    }
}

/// The map of a job and this node's part in it.
#[derive(Debug, Clone)]
pub struct JobMap {
    pub doc: MapDocument,
    /// Compute host names in rank order.
    pub rank_hosts: Vec<String>,
    pub role: Role,
    pub map_path: PathBuf,
    pub hostfile_path: PathBuf,
    pub job_id: u32,
    /// The nodes of the box dead at start, in the order they failed, with what that did.
    pub failed_at_start: Vec<StartFailureRecord>,
    /// Ranks a re-map at start moved after the substitutions (`initial_map: remap`).
    pub remapped_at_start: Option<Vec<u32>>,
}

/// A node of the job's box dead at start, as sparesd's history records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartFailureRecord {
    pub node: String,
    pub outcome: topology::Outcome,
    /// The largest link load before and after this failure.
    pub collisions: (u32, u32),
}

impl StartFailureRecord {
    /// The record as sparesd's history keeps a substitution (step 0: before the job started).
    pub fn to_json(&self, method: &str, hosts: &[String]) -> serde_json::Value {
        let name = |n: u32| hosts.get(n as usize).cloned().unwrap_or_default();
        let moves: Vec<serde_json::Value> = self
            .outcome
            .moves()
            .iter()
            .map(|m| serde_json::json!({"rank": m.rank, "from": name(m.from), "to": name(m.to)}))
            .collect();
        let mut v = serde_json::json!({
            "step": 0,
            "node": self.node,
            "outcome": self.outcome.name(),
            "method": method,
            "moves": moves,
            "collisions_before": self.collisions.0,
            "collisions_after": self.collisions.1,
            "lost": false,
        });
        if let Some(used) = self.outcome.method_used() {
            v["method_used"] = used.into();
        }
        if let Some(slide) = self.outcome.slide() {
            v["slide"] = slide.to_string().into();
        }
        v
    }
}

/// Why a job's map could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JobMapError {
    #[error("{0}")]
    Policy(String),
    #[error("job node list {list:?}: {why}")]
    NodeList { list: String, why: String },
    #[error("the job's {count} nodes ({list}) are not a {needed} box of the {network} network; was the job placed by job_submit_spares?")]
    NotABox {
        count: usize,
        list: String,
        needed: String,
        network: String,
    },
    #[error("node {0} is not one of the job's nodes")]
    NotInJob(String),
    #[error("dead-at-start {list:?}: {why}")]
    DeadAtStart { list: String, why: String },
    #[error(transparent)]
    State(#[from] StateDirError),
}

/// Largest hostfile the task side reads (bytes): a box of millions of nodes.
pub const MAX_HOSTFILE_BYTES: u64 = 64 << 20;

/// Mode of the files the job's user may read (group: the job's group).
const READABLE_BY_JOB: u32 = 0o640;

/// File name of a job's map document.
pub fn map_name(job_id: u32) -> String {
    format!("spares-job-{job_id}.json")
}

/// File name of a job's hostfile.
pub fn hostfile_name(job_id: u32) -> String {
    format!("spares-job-{job_id}.hosts")
}

/// File name of the mark that the job was registered with `sparesd` (the epilog that
/// removes it releases the job).
pub fn registered_name(job_id: u32) -> String {
    format!("spares-job-{job_id}.registered")
}

/// Map file of a job.
pub fn map_path(state_dir: &Path, job_id: u32) -> PathBuf {
    state_dir.join(map_name(job_id))
}

/// Hostfile of a job.
pub fn hostfile_path(state_dir: &Path, job_id: u32) -> PathBuf {
    state_dir.join(hostfile_name(job_id))
}

/// The map of job `job_id` on `node` (a Slurm node name), or `None` for a job without spares.
/// `dead_at_start` (job_submit's decision) names nodes of the box that the job was not given
/// because they were unusable: the box is the job's nodes and those, and the map has them
/// failed before rank 0 starts (see [`placement::job_map_with_dead`]).
pub fn build(
    policy: &Policy,
    req: &SparesRequest,
    job_id: u32,
    job_nodelist: &str,
    dead_at_start: Option<&str>,
    node: &str,
) -> Result<Option<JobMap>, JobMapError> {
    let (plan, method) = match policy.decide(req).map_err(|r| JobMapError::Policy(r.0))? {
        Decision::Untouched => return Ok(None),
        Decision::Spares { plan, method, .. } => (plan, method),
    };
    let t = &policy.topology;
    let names = hostlist::expand(job_nodelist).map_err(|e| JobMapError::NodeList {
        list: job_nodelist.into(),
        why: e.to_string(),
    })?;
    let mut nodes = names
        .iter()
        .map(|n| {
            t.node(n).ok_or_else(|| JobMapError::NodeList {
                list: job_nodelist.into(),
                why: format!("{n} is not in the topology {}", t.source),
            })
        })
        .collect::<Result<Vec<u32>, _>>()?;
    let dead = match dead_at_start {
        Some(list) => dead_nodes(policy, list, plan.spare_nodes, &nodes)?,
        None => Vec::new(),
    };
    if t.node(node).is_some_and(|n| dead.contains(&n)) {
        return Err(JobMapError::NotInJob(node.into()));
    }
    nodes.extend(&dead);
    let not_a_box = || JobMapError::NotABox {
        count: nodes.len(),
        list: job_nodelist.into(),
        needed: format_shape(&plan.box_extents),
        network: t.name.clone(),
    };
    let origin = placement::origin_of(t, &plan.box_extents, &nodes)
        .map_err(|_| not_a_box())?
        .ok_or_else(not_a_box)?;
    let pattern = Pattern::star(t.grid.dims());
    let start = placement::job_map_with_dead(
        t,
        &plan,
        &origin,
        method,
        pattern,
        false,
        &dead,
        policy.initial_map,
        true,
    )
    .map_err(|e| JobMapError::Policy(e.to_string()))?;
    let (map, meta) = (start.map, start.meta);
    let rank_hosts = placement::rank_hosts(&map, &meta).ok_or_else(not_a_box)?;
    let hosts = meta.hosts.as_ref().ok_or_else(not_a_box)?;
    let index = hosts
        .iter()
        .position(|h| h == node)
        .ok_or_else(|| JobMapError::NotInJob(node.into()))?;
    let role = match map.state(index as u32) {
        NodeState::Busy(rank) => Role::Compute(rank),
        _ => Role::Spare,
    };
    Ok(Some(JobMap {
        doc: MapDocument::new(&map, &meta),
        rank_hosts,
        role,
        map_path: map_path(&policy.state_dir, job_id),
        hostfile_path: hostfile_path(&policy.state_dir, job_id),
        job_id,
        failed_at_start: start
            .failures
            .into_iter()
            .map(|f| StartFailureRecord {
                node: hosts[f.node as usize].clone(),
                outcome: f.outcome,
                collisions: f.collisions.unwrap_or_default(),
            })
            .collect(),
        remapped_at_start: start.remapped,
    }))
}

/// The network nodes of a dead-at-start hostlist: counted against the box's spares before it
/// is expanded (more dead nodes than spares can never start), each a node of the topology
/// and none of the job's own.
fn dead_nodes(
    policy: &Policy,
    list: &str,
    spare_nodes: u64,
    job_nodes: &[u32],
) -> Result<Vec<u32>, JobMapError> {
    let bad = |why: String| JobMapError::DeadAtStart {
        list: list.chars().take(64).collect(),
        why,
    };
    if list.len() > crate::place::MAX_REQUEST_BYTES {
        return Err(bad(format!(
            "{} bytes, over the limit of {}",
            list.len(),
            crate::place::MAX_REQUEST_BYTES
        )));
    }
    let count = hostlist::count(list).map_err(|e| bad(e.to_string()))?;
    if count > spare_nodes {
        return Err(bad(format!(
            "{count} nodes, more than the {spare_nodes} spare nodes of the box"
        )));
    }
    let t = &policy.topology;
    let job_nodes: std::collections::HashSet<u32> = job_nodes.iter().copied().collect();
    let mut out = Vec::new();
    for name in hostlist::expand(list).map_err(|e| bad(e.to_string()))? {
        let n = t
            .node(&name)
            .ok_or_else(|| bad(format!("{name} is not in the topology {}", t.source)))?;
        if job_nodes.contains(&n) {
            return Err(bad(format!("{name} is one of the job's nodes")));
        }
        out.push(n);
    }
    Ok(out)
}

impl JobMap {
    /// Writes the map document and the hostfile into `dir` (root's checked state directory),
    /// readable by the job's group `gid`.
    pub fn write(&self, dir: &StateDir, gid: Option<u32>) -> Result<(), JobMapError> {
        dir.write_file(
            &map_name(self.job_id),
            self.doc.to_json().as_bytes(),
            READABLE_BY_JOB,
            gid,
        )?;
        let mut hosts = self.rank_hosts.join("\n");
        hosts.push('\n');
        dir.write_file(
            &hostfile_name(self.job_id),
            hosts.as_bytes(),
            READABLE_BY_JOB,
            gid,
        )?;
        Ok(())
    }

    /// The substitutions at start as sparesd's register request carries them.
    pub fn at_start_json(&self) -> Vec<serde_json::Value> {
        let hosts = self.doc.hosts.as_deref().unwrap_or_default();
        self.failed_at_start
            .iter()
            .map(|f| f.to_json(&self.doc.method, hosts))
            .collect()
    }

    /// The task environment of this node.
    pub fn env(&self) -> TaskEnv {
        task_env(&self.map_path, &self.hostfile_path, self.role)
    }
}

/// A task environment: `(name, Some(value))` to set, `(name, None)` to unset.
pub type TaskEnv = Vec<(&'static str, Option<String>)>;

/// The task environment of a node (a spare has no rank, whatever it inherited).
pub fn task_env(map: &Path, hostfile: &Path, role: Role) -> TaskEnv {
    vec![
        (ENV_MAP, Some(map.display().to_string())),
        (ENV_HOSTFILE, Some(hostfile.display().to_string())),
        (ENV_ROLE, Some(role.name().to_string())),
        (
            ENV_RANK,
            match role {
                Role::Compute(r) => Some(r.to_string()),
                Role::Spare => None,
            },
        ),
    ]
}

/// The task environment of job `job_id` on `node`, from the files the job's prolog wrote in
/// `dir` (nothing from the step's environment); `None` for a job without a map.
pub fn task_env_from_files(
    dir: &StateDir,
    job_id: u32,
    node: &str,
) -> Result<Option<TaskEnv>, JobMapError> {
    let Some(hosts) = dir.read_file(&hostfile_name(job_id), MAX_HOSTFILE_BYTES)? else {
        return Ok(None);
    };
    if !dir.is_file(&map_name(job_id)) {
        return Ok(None);
    }
    let role = hosts
        .lines()
        .position(|h| h == node)
        .map_or(Role::Spare, |r| Role::Compute(r as u32));
    Ok(Some(task_env(
        &map_path(dir.path(), job_id),
        &hostfile_path(dir.path(), job_id),
        role,
    )))
}

/// Removes a job's map and hostfile (not following links); whether the map was there.
pub fn remove_files(dir: &StateDir, job_id: u32) -> Result<bool, StateDirError> {
    let had = dir.remove_file(&map_name(job_id))?;
    dir.remove_file(&hostfile_name(job_id))?;
    Ok(had)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{policy_dir, test_policy};
    use crate::spec::{parse_job_shape, parse_spares};

    fn req(spares: &str, shape: &str) -> SparesRequest {
        SparesRequest {
            spares: Some(parse_spares(spares).unwrap()),
            job_shape: Some(parse_job_shape(shape).unwrap()),
            spare_method: None,
        }
    }

    #[test]
    fn every_node_of_the_test_job_knows_its_role() {
        let dir = policy_dir("jobmap", "");
        let body = format!("state_dir: {}\n", dir.path().join("state").display());
        let p = test_policy("jobmap", &body);
        let r = req("3D(2,1)", "3x3x2");
        let m = build(&p, &r, 7, "node[01-32]", None, "node06")
            .unwrap()
            .unwrap();
        assert_eq!(m.role, Role::Compute(4)); // (1,1,0)
        assert_eq!(m.rank_hosts.len(), 18);
        assert_eq!(m.rank_hosts[17], "node27"); // (2,2,1)
        let spare = build(&p, &r, 7, "node[01-32]", None, "node04")
            .unwrap()
            .unwrap();
        assert_eq!(spare.role, Role::Spare);
        assert!(spare.env().contains(&(ENV_RANK, None)));
        assert!(spare.env().contains(&(ENV_ROLE, Some("spare".into()))));
        // Same inputs, same map, whichever node computes it.
        assert_eq!(m.doc, spare.doc);
        let dir = StateDir::open_or_create(&p.state_dir).unwrap();
        m.write(&dir, None).unwrap();
        let hosts = std::fs::read_to_string(&m.hostfile_path).unwrap();
        assert_eq!(hosts.lines().count(), 18);
        assert!(hosts.starts_with("node01\nnode02\nnode03\nnode05\n"));
        let back = MapDocument::from_json(&std::fs::read_to_string(&m.map_path).unwrap()).unwrap();
        assert_eq!(back, m.doc);
        assert!(m.map_path.ends_with("spares-job-7.json"));
        // The task side finds the same roles in the files, without the node list.
        let env = task_env_from_files(&dir, 7, "node06").unwrap().unwrap();
        assert_eq!(env, m.env());
        let env = task_env_from_files(&dir, 7, "node04").unwrap().unwrap();
        assert_eq!(env, spare.env());
        assert_eq!(task_env_from_files(&dir, 8, "node06").unwrap(), None);
        assert!(remove_files(&dir, 7).unwrap());
        assert!(!remove_files(&dir, 7).unwrap());
        assert_eq!(task_env_from_files(&dir, 7, "node06").unwrap(), None);
    }

    #[test]
    fn a_box_with_dead_nodes_at_start_has_them_substituted_on_every_node() {
        // The test job without node01 (a corner: the origin comes from the dead list too) and
        // node06 (rank 4), which job_submit named dead at start.
        let dir = policy_dir("jobmap-dead", "");
        let body = format!("state_dir: {}\n", dir.path().join("state").display());
        let p = test_policy("jobmap-dead", &body);
        let r = req("3D(2,1)", "3x3x2");
        let alive = "node[02-05,07-32]";
        let dead = Some("node[01,06]");
        let m = build(&p, &r, 9, alive, dead, "node02").unwrap().unwrap();
        let other = build(&p, &r, 9, alive, dead, "node32").unwrap().unwrap();
        assert_eq!(m.doc, other.doc);
        assert_eq!(m.doc.origin, vec![0, 0, 0]);
        assert_eq!(m.doc.failed, vec![vec![0, 0, 0], vec![1, 1, 0]]);
        // The map is `spares substitute` of node01 then node06 on the failure-free map.
        let t = &p.topology;
        let plan = match p.decide(&r).unwrap() {
            crate::policy::Decision::Spares { plan, .. } => plan,
            d => panic!("{d:?}"),
        };
        let (mut want, _) = placement::job_map(
            t,
            &plan,
            &[0, 0, 0],
            topology::Method::hybrid(3),
            Pattern::star(3),
            false,
        )
        .unwrap();
        for name in ["node01", "node06"] {
            topology::sliding::fail(
                &mut want,
                t.node(name).unwrap(),
                &topology::Method::hybrid(3),
            )
            .unwrap();
        }
        assert_eq!(
            m.rank_hosts,
            want.rank_nodes()
                .iter()
                .map(|&n| t.host(n).unwrap().to_string())
                .collect::<Vec<_>>()
        );
        assert!(!m.rank_hosts.iter().any(|h| h == "node01" || h == "node06"));
        let names: Vec<&str> = m.failed_at_start.iter().map(|f| f.node.as_str()).collect();
        assert_eq!(names, ["node01", "node06"]);
        // What sparesd's history gets: step 0, the moves by host name.
        let records = m.at_start_json();
        assert_eq!(records[0]["step"], 0);
        assert_eq!(records[0]["node"], "node01");
        assert_eq!(records[0]["outcome"], "substituted");
        assert_eq!(records[0]["moves"][0]["from"], "node01");
        assert!(records[1]["collisions_after"].as_u64().unwrap() >= 1);
        // A dead node is nobody's: not in the job, so it has no role to build.
        assert_eq!(
            build(&p, &r, 9, alive, dead, "node01").unwrap_err(),
            JobMapError::NotInJob("node01".into())
        );
        // Without the dead list the job's nodes are no box at all.
        assert!(matches!(
            build(&p, &r, 9, alive, None, "node02").unwrap_err(),
            JobMapError::NotABox { .. }
        ));
        let e = |dead: &str| {
            build(&p, &r, 9, alive, Some(dead), "node02")
                .unwrap_err()
                .to_string()
        };
        assert!(
            e("node02").ends_with("node02 is one of the job's nodes"),
            "{}",
            e("node02")
        );
        assert!(
            e("n[0-99999]").contains("more than the 14 spare nodes"),
            "{}",
            e("n[0-99999]")
        );
        assert!(e("other1").contains("other1 is not in the topology"));
    }

    #[test]
    fn a_wrapped_box_is_found_from_any_node_order() {
        let p = test_policy("jobmap-wrap", "");
        // 3D(1,1) on 1x2x1: a 2x2x1 box; at x=3 it wraps to x=0.
        let r = req("3D(1,1)", "1x2x1");
        let m = build(&p, &r, 8, "node[01,04-05,08]", None, "node08")
            .unwrap()
            .unwrap();
        assert_eq!(m.doc.origin, vec![3, 0, 0]);
        assert_eq!(m.rank_hosts, ["node04", "node08"]);
        assert_eq!(m.role, Role::Compute(1));
    }

    #[test]
    fn errors_explain() {
        let p = test_policy("jobmap-err", "");
        let r = req("3D(2,1)", "3x3x2");
        let e = build(&p, &r, 1, "node[01-02]", None, "node01").unwrap_err();
        assert!(e.to_string().contains("are not a 4x4x2 box"), "{e}");
        let e = build(&p, &r, 1, "node[01-32]", None, "node77").unwrap_err();
        assert_eq!(e, JobMapError::NotInJob("node77".into()));
        let e = build(&p, &r, 1, "bogus[", None, "node01").unwrap_err();
        assert!(matches!(e, JobMapError::NodeList { .. }));
        let none = req("none", "3x3x2");
        assert!(build(&p, &none, 1, "node01", None, "node01")
            .unwrap()
            .is_none());
    }
}
