//! The site policy for the plugins: the file is parsed and its decisions made by
//! [`topology::site_policy`] (shared with the `spares` CLI); this module adds where the
//! plugins find the file, the cache slurmctld keeps, and the Slurm error code of each
//! refusal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

pub use topology::site_policy::{
    Decision, JobFacts, OnNoPlacement, Policy, PolicyError, Refusal, RefusalKind,
    DEFAULT_POLICY_PATH, DEFAULT_SPARESD_SOCKET, DEFAULT_STATE_DIR,
};

/// Environment variable naming the policy file (slurmctld has no plugin arguments for
/// job_submit; plugstack.conf's `policy=` argument wins for the SPANK plugin).
pub const POLICY_ENV: &str = "SPARES_POLICY";

/// The `ESLURM_*` code job_submit returns for a refusal: sbatch prints its text after the
/// spares message, so it must say the same thing.
pub fn refusal_code(kind: RefusalKind) -> i32 {
    (match kind {
        RefusalKind::Options => crate::sys::ESPANK_BAD_ARG,
        RefusalKind::MissingSize => crate::sys::ESLURM_JOB_MISSING_SIZE_SPECIFICATION,
        RefusalKind::NodeCount => crate::sys::ESLURM_INVALID_NODE_COUNT,
        RefusalKind::NotAllowed => crate::sys::ESLURM_ACCESS_DENIED,
        RefusalKind::Unavailable => crate::sys::ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE,
        RefusalKind::Busy => crate::sys::ESLURM_CAN_NOT_START_IMMEDIATELY,
    }) as i32
}

/// The policy path of this process: `SPARES_POLICY`, else [`DEFAULT_POLICY_PATH`].
pub fn path_from_env() -> PathBuf {
    std::env::var_os(POLICY_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_POLICY_PATH))
}

type Stamp = (SystemTime, u64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

/// Per policy path: the stamps of the policy file and of its topology file when it was read.
type Cache = HashMap<PathBuf, ((Stamp, Stamp), Arc<Policy>)>;

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);

/// The policy at `path`, parsed again only when the policy file or the topology file it
/// names changed (time, size or inode), so an edit of either takes effect at the next job
/// without restarting slurmctld, and slurmctld sees the topology the job's nodes read.
/// Errors are not cached.
pub fn cached(path: &Path) -> Result<Arc<Policy>, PolicyError> {
    let policy_now = stamp(path);
    let mut guard = CACHE.lock().unwrap_or_else(|p| p.into_inner());
    let cache = guard.get_or_insert_with(HashMap::new);
    if let (Some(policy_now), Some(((policy_then, topology_then), policy))) =
        (policy_now, cache.get(path))
    {
        if *policy_then == policy_now && stamp(&policy.topology_path) == Some(*topology_then) {
            return Ok(Arc::clone(policy));
        }
    }
    let policy = Arc::new(Policy::load(path)?);
    match (policy_now, stamp(&policy.topology_path)) {
        (Some(p), Some(t)) => {
            cache.insert(path.to_path_buf(), ((p, t), Arc::clone(&policy)));
        }
        _ => {
            cache.remove(path);
        }
    }
    Ok(policy)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A directory with the 4x4x2 torus and a policy file of `body` (after its topology line),
    /// removed when dropped.
    pub fn policy_dir(name: &str, body: &str) -> tempfile::TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("spares-policy-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::write(
            dir.path().join("torus.yaml"),
            "name: torus-4x4x2\nextents: [4, 4, 2]\nlinks: ring\nnodes: node[01-32]\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("policy.yaml"),
            format!("topology: torus.yaml\n{body}"),
        )
        .unwrap();
        dir
    }

    pub fn test_policy(name: &str, body: &str) -> Policy {
        let dir = policy_dir(name, body);
        Policy::load(&dir.path().join("policy.yaml")).unwrap()
    }

    #[test]
    fn the_cache_sees_edits() {
        let dir = policy_dir("cache", "on_no_placement: wait\n");
        let path = dir.path().join("policy.yaml");
        let a = cached(&path).unwrap();
        assert_eq!(a.on_no_placement, OnNoPlacement::Wait);
        assert!(Arc::ptr_eq(&a, &cached(&path).unwrap()));
        // A new file (new inode) replaces it, as an editor or `mv` does.
        let tmp = dir.path().join("policy.yaml.new");
        std::fs::write(&tmp, "topology: torus.yaml\non_no_placement: reject\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        assert_eq!(
            cached(&path).unwrap().on_no_placement,
            OnNoPlacement::Reject
        );
        std::fs::write(&path, "topology: torus.yaml\nbogus: 1\n").unwrap();
        assert!(cached(&path).is_err());
    }

    #[test]
    fn the_cache_sees_edits_of_the_topology_file() {
        // slurmctld caches the policy; the nodes read the topology afresh: an edit of the
        // topology alone must reach slurmctld too.
        let dir = policy_dir("cache-topology", "");
        let path = dir.path().join("policy.yaml");
        let a = cached(&path).unwrap();
        assert_eq!(a.topology.grid.extents(), &[4, 4, 2]);
        let tmp = dir.path().join("torus.yaml.new");
        std::fs::write(
            &tmp,
            "name: torus-4x4x4\nextents: [4, 4, 4]\nlinks: ring\nnodes: node[01-64]\n",
        )
        .unwrap();
        std::fs::rename(&tmp, dir.path().join("torus.yaml")).unwrap();
        let b = cached(&path).unwrap();
        assert_eq!(b.topology.grid.extents(), &[4, 4, 4]);
        assert!(
            Arc::ptr_eq(&b, &cached(&path).unwrap()),
            "read once per change"
        );
    }
}
