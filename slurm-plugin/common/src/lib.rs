//! What the spares Slurm plugins share: safe wrappers over Slurm's C API
//! ([`ffi`], the only module with `unsafe`), one panic guard for every
//! `extern "C"` entry point ([`guard()`]), a `log` backend that writes to
//! Slurm's log ([`logger`]), the plugin's option names ([`options`]), their
//! syntax ([`spec`]), the parsing of a job's SPANK environment
//! ([`job_env`]), the site policy ([`policy`]), box placement on free nodes
//! ([`place`]), the job's map on its nodes ([`jobmap`]) and the `sparesd`
//! client ([`sparesd`]).
//!
//! The syntax checks here are only syntactic: what a spare shape or a method
//! means for a job is decided by the `topology` crate.

#![deny(unsafe_code)]

pub mod dead_at_start;
pub mod error;
#[allow(unsafe_code)]
pub mod ffi;
pub mod guard;
pub mod job_env;
pub mod jobmap;
pub mod logger;
pub mod native;
pub mod options;
pub mod place;
pub mod policy;
pub mod sparesd;
pub mod spec;
pub mod statedir;
pub mod submit;

pub use error::PluginError;
pub use guard::guard;
pub use slurm_sys as sys;

/// Name of the SPANK plugin (`plugin_name` of spank_spares.so). It is part of
/// the environment names that carry the options to slurmctld:
/// `_SLURM_SPANK_OPTION_spares_<option>`.
pub const SPANK_PLUGIN_NAME: &str = "spares";

/// Prefix of every message the plugins log.
pub const LOG_PREFIX: &str = "spares";
