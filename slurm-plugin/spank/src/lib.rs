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
//! In the job (remote side) it builds the job's spare map from the job's
//! node list, the site policy's topology and the options (every node computes
//! the same map), writes it with a hostfile of the compute nodes in rank
//! order, and gives every task `SLURM_SPARES_MAP`, `SLURM_SPARES_HOSTFILE`,
//! `SLURM_SPARES_ROLE` and `SLURM_SPARES_RANK`. The job's first node
//! registers the job with `sparesd`; the job epilog releases it.
//!
//! plugstack.conf arguments: `policy=<path>` (default: `$SPARES_POLICY`, else
//! `/etc/slurm/spares.yaml`).
//!
//! This crate is a thin shell: every entry point goes through
//! [`common::guard`]; the logic lives in `slurm-plugin-common`.

#![allow(non_upper_case_globals)]

use std::os::raw::{c_char, c_int};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use slurm_plugin_common::ffi::{self, Context, SpankHandle};
use slurm_plugin_common::job_env::SparesOptions;
use slurm_plugin_common::logger::{self, SlurmLogger};
use slurm_plugin_common::options::{self, Opt, OPTIONS};
use slurm_plugin_common::{self as common, jobmap, policy, sparesd, sys, PluginError};

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

/// Whether `init_post_opt` already gave this step its spares environment
/// (the tasks are forked from this process and see the flag).
static STEP_DONE: AtomicBool = AtomicBool::new(false);

/// The policy file named by the plugstack.conf arguments (`policy=<path>`),
/// else by `SPARES_POLICY`, else the default.
///
/// # Safety
/// `av` is NULL or holds `ac` C strings (Slurm's plugin arguments).
unsafe fn policy_path(ac: c_int, av: *mut *mut c_char) -> PathBuf {
    // SAFETY: the caller's contract.
    let args = unsafe { ffi::strings_from_array(av, ac.max(0) as usize) };
    for a in &args {
        match a.split_once('=') {
            Some(("policy", p)) if !p.is_empty() => return PathBuf::from(p),
            _ => log::debug!("plugstack.conf argument {a:?} ignored (known: policy=<path>)"),
        }
    }
    policy::path_from_env()
}

/// The options this process accepted.
fn accepted() -> SparesOptions {
    ACCEPTED.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Builds this node's part of the job's map and puts it in the job's
/// environment; `root` marks the privileged callback that also writes the
/// files and registers the job. Problems are logged, never fatal: the job
/// runs, without the spares environment.
fn setup_step(spank: &SpankHandle<'_>, policy_file: &Path, root: bool) -> Result<(), PluginError> {
    let opts = accepted();
    if opts.is_empty() {
        return Ok(());
    }
    let req = opts.validate()?;
    let policy = match policy::cached(policy_file) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("{e}; the job runs without its spare map");
            return Ok(());
        }
    };
    let job_id = spank.job_id()?;
    let nodelist = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
        .iter()
        .find_map(|v| spank.getenv(v).ok().flatten());
    let (Some(nodelist), Some(node)) = (nodelist, spank.node_name()) else {
        log::debug!("job {job_id}: node list or node name not known yet");
        return Ok(());
    };
    let map = match jobmap::build(&policy, &req, job_id, &nodelist, &node) {
        Ok(Some(m)) => m,
        Ok(None) => return Ok(()),
        Err(e) => {
            log::warn!("job {job_id} on {node}: {e}; the job runs without its spare map");
            return Ok(());
        }
    };
    if root || !map.map_path.exists() {
        if let Err(e) = map.write() {
            log::warn!("job {job_id} on {node}: {e}");
        }
    }
    for (name, value) in map.env() {
        match value {
            Some(v) => spank.setenv(name, &v, true)?,
            None => spank.unsetenv(name)?,
        }
    }
    log::debug!(
        "job {job_id} on {node}: {} {}",
        map.role.name(),
        match map.role {
            jobmap::Role::Compute(r) => format!("rank {r}"),
            jobmap::Role::Spare => String::new(),
        }
    );
    let first = topology::hostlist::expand(&nodelist)
        .ok()
        .and_then(|n| n.into_iter().next());
    if root && first.as_deref() == Some(node.as_str()) {
        let uid = spank.uid()?;
        match sparesd::register(&policy.sparesd_socket, job_id, uid, &map.doc) {
            Ok(()) => log::info!("job {job_id} registered with sparesd"),
            Err(e @ sparesd::SparesdError::Unreachable { .. }) => {
                log::warn!("{e}; the job runs without a substitution daemon")
            }
            Err(e) => log::warn!("job {job_id}: {e}; the job runs without a substitution daemon"),
        }
    }
    Ok(())
}

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

/// `slurm_spank_init_post_opt`: on the job's nodes (remote side, as root,
/// after the options were processed), the job's map and its environment.
///
/// # Safety
/// Called by Slurm with its handle and plugstack.conf arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_init_post_opt(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    common::guard("slurm_spank_init_post_opt", || {
        if ffi::context() != Context::Remote {
            return Ok(0);
        }
        // SAFETY: `sp` is the handle of this call.
        let spank = unsafe { SpankHandle::from_raw(sp) }?;
        if spank.step_id()? == sys::SLURM_EXTERN_CONT {
            return Ok(0);
        }
        // SAFETY: the arguments of this call.
        let path = unsafe { policy_path(ac, av) };
        setup_step(&spank, &path, true)?;
        STEP_DONE.store(
            spank.getenv(jobmap::ENV_ROLE).ok().flatten().is_some() && !accepted().is_empty(),
            Ordering::Relaxed,
        );
        Ok(0)
    })
}

/// `slurm_spank_task_init` (each task, as the user, just before exec): the
/// spares environment if `init_post_opt` could not give it (the job's node
/// list is complete only here).
///
/// # Safety
/// Called by Slurm with its handle and plugstack.conf arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_task_init(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    common::guard("slurm_spank_task_init", || {
        if ffi::context() != Context::Remote || STEP_DONE.load(Ordering::Relaxed) {
            return Ok(0);
        }
        // SAFETY: `sp` is the handle of this call.
        let spank = unsafe { SpankHandle::from_raw(sp) }?;
        // SAFETY: the arguments of this call.
        let path = unsafe { policy_path(ac, av) };
        setup_step(&spank, &path, false).map(|_| 0)
    })
}

/// `slurm_spank_job_epilog` (every node of the job at its end, as root):
/// the first node to get here removes the job's map files and releases the
/// job from `sparesd`.
///
/// # Safety
/// Called by Slurm with its handle and plugstack.conf arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_job_epilog(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    common::guard("slurm_spank_job_epilog", || {
        logger::init(&LOGGER);
        // SAFETY: `sp` is the handle of this call.
        let spank = unsafe { SpankHandle::from_raw(sp) }?;
        let job_id = spank.job_id()?;
        // SAFETY: the arguments of this call.
        let path = unsafe { policy_path(ac, av) };
        let Ok(policy) = policy::cached(&path) else {
            return Ok(0);
        };
        if jobmap::remove_files(&policy.state_dir, job_id) {
            match sparesd::release(&policy.sparesd_socket, job_id) {
                Ok(()) => log::info!("job {job_id} released from sparesd"),
                Err(e) => log::debug!("job {job_id}: release: {e}"),
            }
        }
        Ok(0)
    })
}
