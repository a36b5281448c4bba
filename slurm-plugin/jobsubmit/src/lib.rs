//! `job_submit_spares.so`: the job_submit plugin of spares, loaded by
//! slurmctld with `JobSubmitPlugins=spares` (slurmctld maps the name to
//! `job_submit/spares` and loads `job_submit_spares.so` from `PluginDir`).
//!
//! For a job with spares options (`job_desc->spank_job_env`) it reads the
//! site policy (`SPARES_POLICY` in slurmctld's environment, default
//! `/etc/slurm/spares.yaml`), pads `min_nodes`/`max_nodes` to the job's box,
//! pins the box with `req_nodes` (inside the job's `partition`, off its
//! `exc_nodes`, around the `req_nodes` the user gave), or rejects the job with
//! a message the user reads. Every other job passes untouched. It runs inside slurmctld while
//! slurmctld holds its locks: it never calls back into slurmctld (free nodes
//! come from a file refreshed outside it).
//!
//! A thin shell: every entry point goes through [`common::guard`]; the logic
//! lives in `slurm_plugin_common::submit`.

#![allow(non_upper_case_globals)]

use std::ffi::c_void;
use std::os::raw::{c_char, c_int};
use std::time::{Instant, SystemTime};

use slurm_plugin_common::error::SLURM_SUCCESS;
use slurm_plugin_common::ffi::{ErrMsgSlot, JobDesc, JobDescMut};
use slurm_plugin_common::job_env::SparesOptions;
use slurm_plugin_common::logger::{self, SlurmLogger};
use slurm_plugin_common::place::{MAX_REQUEST_BYTES, PINS};
use slurm_plugin_common::submit::{self, Change, JobRequest};
use slurm_plugin_common::{self as common, policy, sys, PluginError};

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
/// A bad policy file does not fail it: slurmctld must keep running, and the
/// jobs that need the policy are rejected with a message naming the file.
#[no_mangle]
pub extern "C" fn init() -> c_int {
    common::guard("init", || {
        logger::init(&LOGGER);
        let path = policy::path_from_env();
        match policy::cached(&path) {
            Ok(p) => log::info!(
                "job_submit/spares loaded, policy {} (network {})",
                path.display(),
                p.topology.name
            ),
            Err(e) => log::error!("{e}; jobs with spares are rejected until it is fixed"),
        }
        Ok(SLURM_SUCCESS)
    })
}

/// Called when slurmctld unloads the plugin.
#[no_mangle]
pub extern "C" fn fini() -> c_int {
    common::guard("fini", || Ok(SLURM_SUCCESS))
}

/// One line naming a job for the log.
fn describe(desc: &JobDesc<'_>) -> String {
    desc.job_id()
        .map(|id| format!("job {id}"))
        .unwrap_or_else(|| format!("new job {:?}", desc.name().unwrap_or_default()))
}

/// `job_submit(job_desc_msg_t *, uint32_t submit_uid, char **err_msg)`
/// (the same in 22.05, 24.11 and 26.05).
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
        // SAFETY: the descriptor of this call, only used during it.
        let mut desc = unsafe { JobDescMut::from_raw(job_desc) }?;
        let view = desc.view();
        let job = JobRequest {
            spank_env: view.spank_job_env(),
            min_nodes: view.min_nodes(),
            // Copied only up to the most any site allows; the policy's own limit is
            // checked by the decision.
            req_nodes: view.req_nodes_text(MAX_REQUEST_BYTES),
            exc_nodes: view.exc_nodes_text(MAX_REQUEST_BYTES),
            partition: view.partition_text(MAX_REQUEST_BYTES),
            time_limit_minutes: view.time_limit_minutes(),
        };
        let who = describe(&view);
        let opts = SparesOptions::from_env(&job.spank_env);
        if !opts.is_empty() {
            log::debug!(
                "submit {who} (min_nodes {:?}): {}",
                job.min_nodes,
                opts.summary()
            );
        }
        let started = Instant::now();
        let outcome = {
            let mut pins = PINS.lock().unwrap_or_else(|p| p.into_inner());
            submit::decide(&policy::path_from_env(), &job, &mut pins, SystemTime::now())
        };
        // What a submission costs slurmctld, for tests/cluster/overhead.sh.
        let took = started.elapsed().as_micros();
        match outcome {
            Ok(Change::Untouched) => Ok(SLURM_SUCCESS),
            Ok(Change::Pad {
                nodes,
                req_nodes,
                partition,
                decision,
                summary,
                user_message,
            }) => {
                desc.set_nodes(nodes, nodes);
                desc.set_req_nodes(&req_nodes)?;
                if let Some(p) = &partition {
                    desc.set_partition(p)?;
                }
                // The mark the free-node service moves a pending job by (users cannot set
                // it). Not on a job with the user's --nodelist: the service does not know
                // which nodes the box must keep, so it leaves such a job where it is.
                if job.req_nodes.is_none() {
                    desc.set_admin_comment(&topology::pin_mark::format(&req_nodes))?;
                }
                desc.set_spank_job_env(&decision)?;
                // On success slurmctld hands err_msg to the user (sbatch prints it), and if
                // slurmctld refuses the padded job after us, the user still learns why its
                // node count and node list are what they are.
                // SAFETY: the `err_msg` slot of this call.
                unsafe { ErrMsgSlot::from_raw(err_msg) }.set(&user_message);
                log::info!("submit {who} of uid {submit_uid}: {summary} (decided in {took} us)");
                Ok(SLURM_SUCCESS)
            }
            Ok(Change::PadNative(pad)) => {
                // Slurm's torus3d places the box: no node list.
                desc.set_nodes(pad.nodes, pad.nodes);
                if let Some(p) = &pad.partition {
                    desc.set_partition(p)?;
                }
                desc.set_spank_job_env(&pad.decision)?;
                // SAFETY: the `err_msg` slot of this call.
                unsafe { ErrMsgSlot::from_raw(err_msg) }.set(&pad.user_message);
                log::info!(
                    "submit {who} of uid {submit_uid}: {} (decided in {took} us)",
                    pad.summary
                );
                Ok(SLURM_SUCCESS)
            }
            Err(e) => {
                // SAFETY: the `err_msg` slot of this call.
                unsafe { ErrMsgSlot::from_raw(err_msg) }.set(&e.to_string());
                log::debug!("rejected {who} of uid {submit_uid} (decided in {took} us)");
                Err(e)
            }
        }
    })
}

/// `job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid)` (22.05;
/// `job_record_t` is not public, so opaque). Only the syntax of changed options
/// is checked; the box is not moved. 22.05 has no `err_msg`: the refusal's
/// reason reaches slurmctld's log only.
///
/// # Safety
/// Called by slurmctld with a valid job descriptor.
#[cfg(not(slurm_job_modify_err_msg))]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut sys::job_desc_msg_t,
    _job_ptr: *mut c_void,
    _submit_uid: u32,
) -> c_int {
    common::guard("job_modify", || {
        // SAFETY: the descriptor of this call, only read during it.
        let desc = unsafe { JobDesc::from_raw(job_desc) }?;
        check_modify(&desc, None)
    })
}

/// `job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid,
/// char **err_msg)` (since 23.02): as above, and the user reads why a
/// modification is refused (`scontrol update` prints `err_msg`).
///
/// # Safety
/// Called by slurmctld with a valid job descriptor and `err_msg` slot.
#[cfg(slurm_job_modify_err_msg)]
#[no_mangle]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut sys::job_desc_msg_t,
    _job_ptr: *mut c_void,
    _submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    common::guard("job_modify", || {
        // SAFETY: the descriptor of this call, only read during it.
        let desc = unsafe { JobDesc::from_raw(job_desc) }?;
        // SAFETY: the `err_msg` slot of this call, used only during it.
        let slot = unsafe { ErrMsgSlot::from_raw(err_msg) };
        check_modify(&desc, Some(slot))
    })
}

/// The body of both `job_modify` signatures: validates the changed options;
/// a refusal's message goes into `err_msg` where the release has one.
fn check_modify(desc: &JobDesc<'_>, err_msg: Option<ErrMsgSlot<'_>>) -> Result<c_int, PluginError> {
    let opts = SparesOptions::from_env(desc.spank_job_env());
    if !opts.is_empty() {
        log::debug!("modify {}: {}", describe(desc), opts.summary());
        if let Err(e) = opts.validate().map_err(PluginError::reject_spec) {
            if let Some(mut slot) = err_msg {
                slot.set(&e.to_string());
            }
            return Err(e);
        }
    }
    Ok(SLURM_SUCCESS)
}
