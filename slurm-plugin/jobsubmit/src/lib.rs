//! `job_submit_spares.so`: the job_submit plugin of spares, loaded by
//! slurmctld with `JobSubmitPlugins=spares` (slurmctld maps the name to
//! `job_submit/spares` and loads `job_submit_spares.so` from `PluginDir`).
//!
//! For now it reads the spares options from `job_desc->spank_job_env`, logs
//! them at debug level, rejects a job whose options are malformed (the
//! message reaches the user through `err_msg`) and passes every other job
//! untouched. It runs inside slurmctld while slurmctld holds its locks: it
//! must never call back into slurmctld.
//!
//! A thin shell: every entry point goes through [`common::guard`]; the logic
//! lives in `slurm-plugin-common`.

#![allow(non_upper_case_globals)]

use std::ffi::c_void;
use std::os::raw::{c_char, c_int};

use slurm_plugin_common::error::SLURM_SUCCESS;
use slurm_plugin_common::ffi::{ErrMsgSlot, JobDesc};
use slurm_plugin_common::job_env::SparesOptions;
use slurm_plugin_common::logger::{self, SlurmLogger};
use slurm_plugin_common::{self as common, sys, PluginError};

/// `plugin_name` (free text).
#[no_mangle]
pub static plugin_name: [u8; 18] = *b"spares job_submit\0";

/// `plugin_type`: `job_submit/<name of JobSubmitPlugins>`.
#[no_mangle]
pub static plugin_type: [u8; 18] = *b"job_submit/spares\0";

/// `plugin_version`: slurmctld loads a job_submit plugin only if this equals
/// its own `SLURM_VERSION_NUMBER` exactly.
#[no_mangle]
pub static plugin_version: u32 = sys::SLURM_VERSION_NUMBER;

static LOGGER: SlurmLogger = SlurmLogger::new(common::LOG_PREFIX);

/// Called when slurmctld loads the plugin; non-zero would fail the load.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    common::guard("init", || {
        logger::init(&LOGGER);
        log::info!("job_submit/spares loaded");
        Ok(SLURM_SUCCESS)
    })
}

/// Called when slurmctld unloads the plugin.
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    common::guard("fini", || Ok(SLURM_SUCCESS))
}

/// Checks the spares options of a job; `Err` rejects it.
fn check(desc: &JobDesc<'_>, what: &str) -> Result<(), PluginError> {
    let opts = SparesOptions::from_env(desc.spank_job_env());
    if opts.is_empty() {
        return Ok(());
    }
    log::debug!(
        "{what} {} (min_nodes {:?}, max_nodes {:?}): {}",
        desc.job_id()
            .map(|id| format!("job {id}"))
            .unwrap_or_else(|| format!("new job {:?}", desc.name().unwrap_or_default())),
        desc.min_nodes(),
        desc.max_nodes(),
        opts.summary()
    );
    opts.validate().map_err(PluginError::reject_spec)?;
    Ok(())
}

/// `job_submit(job_desc_msg_t *, uint32_t submit_uid, char **err_msg)`
/// (22.05).
///
/// # Safety
/// Called by slurmctld with a valid job descriptor and `err_msg` slot.
#[no_mangle]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut sys::job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    common::guard("job_submit", || {
        // SAFETY: the descriptor of this call, only read during it.
        let desc = unsafe { JobDesc::from_raw(job_desc) }?;
        match check(&desc, "submit") {
            Ok(()) => Ok(SLURM_SUCCESS),
            Err(e) => {
                // SAFETY: the `err_msg` slot of this call.
                unsafe { ErrMsgSlot::from_raw(err_msg) }.set(&e.to_string());
                log::debug!("rejected a job of uid {submit_uid}");
                Err(e)
            }
        }
    })
}

/// `job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid)`
/// (22.05: no `err_msg`; `job_record_t` is not public, so opaque).
///
/// # Safety
/// Called by slurmctld with a valid job descriptor.
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut sys::job_desc_msg_t,
    _job_ptr: *mut c_void,
    _submit_uid: u32,
) -> c_int {
    common::guard("job_modify", || {
        // SAFETY: the descriptor of this call, only read during it.
        let desc = unsafe { JobDesc::from_raw(job_desc) }?;
        check(&desc, "modify")?;
        Ok(SLURM_SUCCESS)
    })
}
