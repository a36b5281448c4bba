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
pub fn build(
    policy: &Policy,
    req: &SparesRequest,
    job_id: u32,
    job_nodelist: &str,
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
    let nodes = names
        .iter()
        .map(|n| {
            t.node(n).ok_or_else(|| JobMapError::NodeList {
                list: job_nodelist.into(),
                why: format!("{n} is not in the topology {}", t.source),
            })
        })
        .collect::<Result<Vec<u32>, _>>()?;
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
    let (map, meta) = placement::job_map(t, &plan, &origin, method, pattern, false)
        .map_err(|e| JobMapError::Policy(e.to_string()))?;
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
    }))
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
        let body = format!("state_dir: {}\n", dir.join("state").display());
        let p = test_policy("jobmap", &body);
        let r = req("3D(2,1)", "3x3x2");
        let m = build(&p, &r, 7, "node[01-32]", "node06").unwrap().unwrap();
        assert_eq!(m.role, Role::Compute(4)); // (1,1,0)
        assert_eq!(m.rank_hosts.len(), 18);
        assert_eq!(m.rank_hosts[17], "node27"); // (2,2,1)
        let spare = build(&p, &r, 7, "node[01-32]", "node04").unwrap().unwrap();
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
    fn a_wrapped_box_is_found_from_any_node_order() {
        let p = test_policy("jobmap-wrap", "");
        // 3D(1,1) on 1x2x1: a 2x2x1 box; at x=3 it wraps to x=0.
        let r = req("3D(1,1)", "1x2x1");
        let m = build(&p, &r, 8, "node[01,04-05,08]", "node08")
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
        let e = build(&p, &r, 1, "node[01-02]", "node01").unwrap_err();
        assert!(e.to_string().contains("are not a 4x4x2 box"), "{e}");
        let e = build(&p, &r, 1, "node[01-32]", "node77").unwrap_err();
        assert_eq!(e, JobMapError::NotInJob("node77".into()));
        let e = build(&p, &r, 1, "bogus[", "node01").unwrap_err();
        assert!(matches!(e, JobMapError::NodeList { .. }));
        let none = req("none", "3x3x2");
        assert!(build(&p, &none, 1, "node01", "node01").unwrap().is_none());
    }
}
