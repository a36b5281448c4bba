//! Errors of the plugins and the status code each one becomes.

use std::os::raw::c_int;

use crate::spec::SpecError;
use crate::sys;

/// `SLURM_ERROR` (-1): a failed SPANK entry point (any non-zero value fails
/// a `required` SPANK plugin) and a generic job_submit failure.
pub const SLURM_ERROR: c_int = sys::SLURM_ERROR;

/// `SLURM_SUCCESS` (0).
pub const SLURM_SUCCESS: c_int = sys::SLURM_SUCCESS as c_int;

/// Everything an entry point can fail with.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// A user-supplied option value is malformed (SPANK option callback).
    #[error(transparent)]
    InvalidOption(#[from] SpecError),

    /// Options that cannot do what the user means where they were given (e.g. `srun
    /// --spares` outside an allocation); the message says what to do instead.
    #[error("{0}")]
    Usage(String),

    /// slurmctld must reject the job: `code` is the `ESLURM_*` value returned
    /// by `job_submit`, `message` is what the user reads.
    #[error("{message}")]
    Rejected { code: c_int, message: String },

    /// A SPANK call failed.
    #[error("{call} failed: {message} (error {code})")]
    Spank {
        call: &'static str,
        code: c_int,
        message: String,
    },

    /// Slurm handed us a NULL pointer where it must not.
    #[error("Slurm passed a NULL {0}")]
    NullPointer(&'static str),

    /// A string for Slurm contains a NUL byte.
    #[error("string for Slurm contains a NUL byte: {0:?}")]
    Nul(String),
}

impl PluginError {
    /// The code an entry point returns for this error.
    pub fn code(&self) -> c_int {
        match self {
            PluginError::Rejected { code, .. } => *code,
            _ => SLURM_ERROR,
        }
    }

    /// Whether the user caused it (a bad option or a rejected job), as
    /// opposed to a failure of the plugin or of Slurm.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            PluginError::InvalidOption(_) | PluginError::Usage(_) | PluginError::Rejected { .. }
        )
    }

    /// Rejection of a job for a malformed option, with `ESPANK_BAD_ARG` (sbatch then
    /// prints "Bad argument" after the spares message, not an unrelated node count error).
    pub fn reject_spec(e: SpecError) -> Self {
        PluginError::Rejected {
            code: sys::ESPANK_BAD_ARG as c_int,
            message: format!("{}: {e}", crate::LOG_PREFIX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::parse_spares;

    #[test]
    fn codes() {
        let e = parse_spares("bogus").unwrap_err();
        let opt = PluginError::from(e.clone());
        assert_eq!(opt.code(), -1);
        assert!(opt.is_user_error());
        let rej = PluginError::reject_spec(e);
        assert_eq!(rej.code(), 3001);
        assert!(rej
            .to_string()
            .starts_with("spares: invalid --spares=bogus"));
        assert_eq!(PluginError::NullPointer("job_desc").code(), -1);
        assert!(!PluginError::NullPointer("job_desc").is_user_error());
    }
}
