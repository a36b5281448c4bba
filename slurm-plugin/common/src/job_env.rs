//! The spares options as slurmctld sees them: entries
//! `_SLURM_SPANK_OPTION_spares_<option>=<value>` of `job_desc->spank_job_env`
//! (sbatch, salloc and srun put them there when the SPANK plugin is loaded on
//! the submit host).

use crate::options::{Opt, OPTIONS};
use crate::spec::{self, SpecError};

/// Prefix of SPANK option variables (`SPANK_OPTION_ENV_PREFIX` in Slurm).
pub const OPTION_ENV_PREFIX: &str = "_SLURM_SPANK_OPTION_";

/// What slurmd puts before every entry of the job record's `spank_job_env` in a prolog's
/// and epilog's environment (`valid_spank_job_env` in Slurm), so the user's entries cannot
/// set e.g. `LD_PRELOAD` for root.
pub const PROLOG_ENV_PREFIX: &str = "SPANK_";

/// Longest option value looked at (bytes); the real ones have a few dozen. Longer values
/// are refused before any parsing.
pub const MAX_OPTION_VALUE_LEN: usize = 256;

/// Slurm's `_canonical_char`: everything but ASCII letters and digits becomes
/// `_`.
fn canonical(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// The variable that carries `option` of SPANK plugin `plugin`:
/// `_SLURM_SPANK_OPTION_<plugin>_<option>`, both canonicalised.
pub fn option_env_name(plugin: &str, option: &str) -> String {
    format!(
        "{OPTION_ENV_PREFIX}{}_{}",
        canonical(plugin),
        canonical(option)
    )
}

/// The `spank_job_env` entry in which job_submit names the nodes of the job's box that are
/// dead at start (unusable when it placed the box; a hostlist, empty for none). Not a SPANK
/// option a user can give: job_submit always writes it for a job with spares, replacing
/// whatever the user's environment held.
pub const DEAD_AT_START: &str = "dead-at-start";

/// The value of the [`DEAD_AT_START`] entry in a prolog's environment (see
/// [`SparesOptions::from_prolog_env`]); `None` when absent or empty.
pub fn dead_at_start_from_prolog_env<I, S>(entries: I) -> Option<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let key = format!(
        "{PROLOG_ENV_PREFIX}{}=",
        option_env_name(crate::SPANK_PLUGIN_NAME, DEAD_AT_START)
    );
    entries
        .into_iter()
        .filter_map(|e| e.as_ref().strip_prefix(&key).map(str::to_owned))
        .last()
        .filter(|v| !v.is_empty())
}

/// The raw values of the spares options found in a job's SPANK environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SparesOptions {
    pub spares: Option<String>,
    pub job_shape: Option<String>,
    pub spare_method: Option<String>,
}

/// The options after their syntax check (the site policy's type).
pub use topology::site_policy::SparesRequest;

impl SparesOptions {
    /// Picks the spares options out of `KEY=VALUE` entries (other entries
    /// are ignored; the last of repeated entries wins, as in an environment).
    pub fn from_env<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let names: Vec<(Opt, String)> = OPTIONS
            .iter()
            .map(|o| (o.opt, option_env_name(crate::SPANK_PLUGIN_NAME, o.name)))
            .collect();
        let mut out = SparesOptions::default();
        for entry in entries {
            let Some((key, value)) = entry.as_ref().split_once('=') else {
                continue;
            };
            if let Some((opt, _)) = names.iter().find(|(_, n)| n == key) {
                *out.slot(*opt) = Some(value.to_string());
            }
        }
        out
    }

    /// The options of a job in a prolog's or epilog's environment: the job record's
    /// `spank_job_env` (checked by job_submit at submission), each entry behind
    /// [`PROLOG_ENV_PREFIX`]. Unprefixed option variables are ignored.
    pub fn from_prolog_env<I, S>(entries: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let entries: Vec<String> = entries
            .into_iter()
            .filter_map(|e| {
                e.as_ref()
                    .strip_prefix(PROLOG_ENV_PREFIX)
                    .map(str::to_owned)
            })
            .collect();
        Self::from_env(entries)
    }

    fn slot(&mut self, opt: Opt) -> &mut Option<String> {
        match opt {
            Opt::Spares => &mut self.spares,
            Opt::JobShape => &mut self.job_shape,
            Opt::SpareMethod => &mut self.spare_method,
        }
    }

    /// No spares option was given.
    pub fn is_empty(&self) -> bool {
        self.spares.is_none() && self.job_shape.is_none() && self.spare_method.is_none()
    }

    /// Checks the length and syntax of every value given; the first error wins.
    pub fn validate(&self) -> Result<SparesRequest, SpecError> {
        for o in &OPTIONS {
            let value = match o.opt {
                Opt::Spares => &self.spares,
                Opt::JobShape => &self.job_shape,
                Opt::SpareMethod => &self.spare_method,
            };
            if let Some(v) = value.as_deref().filter(|v| v.len() > MAX_OPTION_VALUE_LEN) {
                return Err(too_long(o.name, v));
            }
        }
        Ok(SparesRequest {
            spares: self.spares.as_deref().map(spec::parse_spares).transpose()?,
            job_shape: self
                .job_shape
                .as_deref()
                .map(spec::parse_job_shape)
                .transpose()?,
            spare_method: self
                .spare_method
                .as_deref()
                .map(spec::parse_spare_method)
                .transpose()?,
        })
    }

    /// One line for the log: `spares=3D(2,1) job-shape=- spare-method=-` (over-long values
    /// cut).
    pub fn summary(&self) -> String {
        OPTIONS
            .iter()
            .map(|o| {
                let v = match o.opt {
                    Opt::Spares => &self.spares,
                    Opt::JobShape => &self.job_shape,
                    Opt::SpareMethod => &self.spare_method,
                };
                match v.as_deref() {
                    None => format!("{}=-", o.name),
                    // A log line must stay short whatever the user sent.
                    Some(v) if v.len() > MAX_OPTION_VALUE_LEN => {
                        format!(
                            "{}={} ({} bytes)",
                            o.name,
                            too_long(o.name, v).value,
                            v.len()
                        )
                    }
                    Some(v) => format!("{}={v}", o.name),
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The error for an over-long value: its start only, so the message stays short.
fn too_long(option: &'static str, value: &str) -> SpecError {
    let mut end = 32.min(value.len());
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    SpecError {
        option,
        value: format!("{}...", &value[..end]),
        reason: format!("{} bytes; the limit is {MAX_OPTION_VALUE_LEN}", value.len()),
        expected: "a short value",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_follow_slurm() {
        assert_eq!(
            option_env_name("spares", "spares"),
            "_SLURM_SPANK_OPTION_spares_spares"
        );
        assert_eq!(
            option_env_name("spares", "job-shape"),
            "_SLURM_SPANK_OPTION_spares_job_shape"
        );
        assert_eq!(
            option_env_name("spares", "spare-method"),
            "_SLURM_SPANK_OPTION_spares_spare_method"
        );
    }

    #[test]
    fn picks_the_options() {
        let env = [
            "SLURM_JOB_NAME=wrap",
            "_SLURM_SPANK_OPTION_spares_spares=3D(2,1)",
            "_SLURM_SPANK_OPTION_other_spares=ignored",
            "garbage-without-equals",
            "_SLURM_SPANK_OPTION_spares_job_shape=3x3x2",
            "_SLURM_SPANK_OPTION_spares_spare_method=hybrid(-2D)",
            "_SLURM_SPANK_OPTION_spares_spares=auto",
        ];
        let o = SparesOptions::from_env(env);
        assert_eq!(o.spares.as_deref(), Some("auto"));
        assert_eq!(o.job_shape.as_deref(), Some("3x3x2"));
        assert_eq!(o.spare_method.as_deref(), Some("hybrid(-2D)"));
        assert!(!o.is_empty());
        let r = o.validate().unwrap();
        assert_eq!(r.spares, Some(crate::spec::Spares::Auto));
        assert_eq!(r.job_shape, Some(vec![3, 3, 2]));
        assert_eq!(
            r.spare_method.map(|m| m.to_string()).as_deref(),
            Some("hybrid(-2D)")
        );
        assert_eq!(
            o.summary(),
            "spares=auto job-shape=3x3x2 spare-method=hybrid(-2D)"
        );
    }

    #[test]
    fn empty_and_values_with_equals() {
        let o = SparesOptions::from_env(Vec::<String>::new());
        assert!(o.is_empty());
        assert_eq!(o.validate().unwrap(), SparesRequest::default());
        let o = SparesOptions::from_env(["_SLURM_SPANK_OPTION_spares_spares=a=b"]);
        assert_eq!(o.spares.as_deref(), Some("a=b"));
        assert_eq!(o.validate().unwrap_err().option, "spares");
    }

    #[test]
    fn the_prolog_reads_only_the_job_records_entries() {
        let env = [
            "_SLURM_SPANK_OPTION_spares_spares=3D(3,1)",
            "SPANK__SLURM_SPANK_OPTION_spares_spares=3D(2,1)",
            "SPANK__SLURM_SPANK_OPTION_spares_job_shape=3x3x2",
            "SLURM_JOB_NODELIST=node[01-32]",
        ];
        let o = SparesOptions::from_prolog_env(env);
        assert_eq!(o.spares.as_deref(), Some("3D(2,1)"));
        assert_eq!(o.job_shape.as_deref(), Some("3x3x2"));
        assert_eq!(o.spare_method, None);
    }

    #[test]
    fn the_dead_nodes_at_start_come_from_the_job_record_only() {
        let env = [
            "_SLURM_SPANK_OPTION_spares_dead_at_start=node09",
            "SPANK__SLURM_SPANK_OPTION_spares_dead_at_start=node[03,07]",
        ];
        assert_eq!(
            dead_at_start_from_prolog_env(env).as_deref(),
            Some("node[03,07]")
        );
        assert_eq!(
            dead_at_start_from_prolog_env(["SPANK__SLURM_SPANK_OPTION_spares_dead_at_start="]),
            None
        );
        assert_eq!(dead_at_start_from_prolog_env(["A=1"]), None);
    }

    #[test]
    fn long_values_are_refused_before_parsing() {
        let long = format!("3D(2,1){}", "é".repeat(200));
        let o = SparesOptions::from_env([format!("_SLURM_SPANK_OPTION_spares_job_shape={long}")]);
        let e = o.validate().unwrap_err();
        assert_eq!(e.option, "job-shape");
        assert!(e.to_string().contains("407 bytes; the limit is 256"), "{e}");
        assert!(e.value.len() < 40, "{}", e.value);
        assert!(
            o.summary().ends_with("é... (407 bytes) spare-method=-"),
            "{}",
            o.summary()
        );
    }

    #[test]
    fn first_error_is_reported() {
        let o = SparesOptions::from_env([
            "_SLURM_SPANK_OPTION_spares_spares=bogus",
            "_SLURM_SPANK_OPTION_spares_job_shape=0x1",
        ]);
        let e = o.validate().unwrap_err();
        assert_eq!(e.option, "spares");
        assert_eq!(e.value, "bogus");
    }
}
