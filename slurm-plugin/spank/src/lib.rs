//! `spank_spares.so`: the SPANK plugin of spares (plugstack.conf:
//! `required /path/to/spank_spares.so`).
//!
//! Registers `--spares`, `--job-shape` and `--spare-method` for sbatch,
//! salloc and srun (`--help` lists them) and checks their syntax: a malformed
//! value fails the command with a readable message. Slurm forwards accepted
//! values to slurmctld (`_SLURM_SPANK_OPTION_spares_<option>` in
//! `spank_job_env`, read by job_submit_spares.so) and to slurmstepd, where the
//! same callbacks run again (remote side).
//!
//! This crate is a thin shell: every entry point goes through
//! [`common::guard`]; the logic lives in `slurm-plugin-common`.

#![allow(non_upper_case_globals)]

use std::os::raw::{c_char, c_int};
use std::sync::Mutex;

use slurm_plugin_common::ffi::{self, Context, SpankHandle};
use slurm_plugin_common::job_env::SparesOptions;
use slurm_plugin_common::logger::{self, SlurmLogger};
use slurm_plugin_common::options::{self, Opt, OPTIONS};
use slurm_plugin_common::{self as common, sys, PluginError};

// Symbols the Slurm plugin loader reads: strings as arrays (the loader uses
// the symbol's address as the `char *`), the version as an unsigned int that
// must match the host's major.minor.

/// `plugin_name`: also names the options' variables
/// (`_SLURM_SPANK_OPTION_spares_*`).
#[no_mangle]
pub static plugin_name: [u8; 7] = *b"spares\0";

/// `plugin_type`: `spank` (the loader only checks major.minor for it).
#[no_mangle]
pub static plugin_type: [u8; 6] = *b"spank\0";

/// `plugin_version`: the `SLURM_VERSION_NUMBER` of the headers built
/// against.
#[no_mangle]
pub static plugin_version: u32 = sys::SLURM_VERSION_NUMBER;

static LOGGER: SlurmLogger = SlurmLogger::new(common::LOG_PREFIX);

/// Option values accepted in this process (by the option callbacks).
static ACCEPTED: Mutex<SparesOptions> = Mutex::new(SparesOptions {
    spares: None,
    job_shape: None,
    spare_method: None,
});

fn remember(opt: Opt, value: &str) {
    let mut a = ACCEPTED.lock().unwrap_or_else(|p| p.into_inner());
    let slot = match opt {
        Opt::Spares => &mut a.spares,
        Opt::JobShape => &mut a.job_shape,
        Opt::SpareMethod => &mut a.spare_method,
    };
    *slot = Some(value.to_string());
}

/// `slurm_spank_init`: in srun, slurmstepd, sbatch and salloc, registers the
/// options.
///
/// # Safety
/// Called by Slurm with its handle and plugstack.conf arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init(
    sp: sys::spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    common::guard("slurm_spank_init", || {
        logger::init(&LOGGER);
        let ctx = ffi::context();
        if !ctx.has_options() {
            log::debug!("slurm_spank_init in {ctx:?} context: nothing to do");
            return Ok(0);
        }
        // SAFETY: `sp` is the handle of this call.
        let spank = unsafe { SpankHandle::from_raw(sp) }?;
        for def in &OPTIONS {
            spank.register_option(def, option_callback)?;
        }
        log::debug!("options registered ({ctx:?} context)");
        Ok(0)
    })
}

/// Callback of every option: syntax check only (`remote` is 1 in
/// slurmstepd). A non-zero return makes Slurm print `Invalid --<option>
/// argument` after our message and fail the command.
unsafe extern "C" fn option_callback(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    common::guard("option callback", || {
        // SAFETY: Slurm passes the argument as a C string (or NULL).
        let value = unsafe { ffi::string_from_ptr(optarg) }.unwrap_or_default();
        let def = options::by_val(val).ok_or(PluginError::Spank {
            call: "option callback",
            code: val,
            message: "unknown option value".into(),
        })?;
        options::validate(def.opt, &value)?;
        log::debug!("--{}={value} accepted (remote={remote})", def.name);
        remember(def.opt, &value);
        Ok(0)
    })
}

/// `slurm_spank_user_init` (slurmstepd, before the tasks start): logs what
/// this step was given, at verbose level (slurmd's log with
/// `SlurmdDebug=verbose`).
///
/// # Safety
/// Called by Slurm with its handle and plugstack.conf arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_user_init(
    sp: sys::spank_t,
    _ac: c_int,
    _av: *mut *mut c_char,
) -> c_int {
    common::guard("slurm_spank_user_init", || {
        if ffi::context() != Context::Remote {
            return Ok(0);
        }
        // SAFETY: `sp` is the handle of this call.
        let spank = unsafe { SpankHandle::from_raw(sp) }?;
        let accepted = ACCEPTED.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if accepted.is_empty() {
            return Ok(0);
        }
        // Best effort: a missing item must not fail the job.
        fn or_q<T: std::fmt::Display>(r: Result<T, PluginError>) -> String {
            r.map(|v| v.to_string()).unwrap_or_else(|_| "?".into())
        }
        log::info!(
            "job {} step {} on {} (node {} of {}, uid {}): {}",
            or_q(spank.job_id()),
            or_q(spank.step_id().map(ffi::step_name)),
            spank.node_name().as_deref().unwrap_or("?"),
            or_q(spank.node_id()),
            or_q(spank.nnodes()),
            or_q(spank.uid()),
            accepted.summary()
        );
        Ok(0)
    })
}
