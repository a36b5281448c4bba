//! `spares-free-nodes`: the service outside slurmctld that keeps the free-node file job_submit
//! reads (format v2, `docs/admin.md`), and moves pinned pending spares jobs off boxes that
//! lost a node. It runs as root and reads what `sinfo`, `squeue` and users put there:
//! every output is read within a byte budget, every name is checked, no shell is involved.

pub mod file;
pub mod mover;
pub mod slurm;

/// What can go wrong in one pass; the old file stays in place.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{program}: {source}")]
    Spawn {
        program: &'static str,
        source: std::io::Error,
    },
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        program: &'static str,
        status: String,
        stderr: String,
    },
    #[error("{program} printed more than {limit} bytes; not read (raise --max-output-bytes)")]
    TooLong { program: &'static str, limit: u64 },
    #[error("{program} line {line}: {why}")]
    Parse {
        program: &'static str,
        line: usize,
        why: String,
    },
    #[error("{program} printed {count} lines, over the limit of {limit}")]
    TooManyLines {
        program: &'static str,
        count: usize,
        limit: usize,
    },
    #[error("{path}: {why}")]
    Unsafe { path: String, why: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}
