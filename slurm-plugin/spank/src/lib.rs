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
//! Trust: everything done as root works from data the user cannot forge.
//! The job prolog (`slurm_spank_job_prolog`, root, run by slurmd with
//! `PrologFlags=Alloc` on every node at allocation) builds the job's spare
//! map from the prolog environment that slurmd builds from the job record:
//! `SLURM_NODELIST` (22.05; `SLURM_JOB_NODELIST` in later releases),
//! `SLURMD_NODENAME`, the job's uid and gid, and the
//! options as `SPANK__SLURM_SPANK_OPTION_spares_*` (the job record's
//! `spank_job_env`, checked by job_submit at submission, parsed again here as
//! untrusted input). Every node computes the same map and writes it, with a
//! hostfile of the compute nodes in rank order, into the policy's
//! `state_dir` (root's; see `statedir`); the job's first node registers the
//! job with `sparesd`. In each step (remote side) the plugin only reads
//! those files and gives every task `SLURM_SPARES_MAP`,
//! `SLURM_SPARES_HOSTFILE`, `SLURM_SPARES_ROLE` and `SLURM_SPARES_RANK`: the
//! step's environment (`SLURM_JOB_NODELIST`, `_SLURM_SPANK_OPTION_*`) is
//! the user's and is not used. The job epilog removes the files and
//! releases the job, retrying while `sparesd` is unreachable.
//!
//! plugstack.conf arguments: `policy=<path>` (default: `$SPARES_POLICY`, else
//! `/etc/slurm/spares.yaml`).
//!
//! This crate is a thin shell: every entry point goes through
//! [`common::guard`]; the logic lives in `slurm-plugin-common`.

#![allow(non_upper_case_globals)]

use std::os::raw::{c_char, c_int};
use std::path::PathBuf;

use slurm_plugin_common::ffi::{self, Context, SpankHandle};
use slurm_plugin_common::job_env::{self, SparesOptions};
use slurm_plugin_common::logger::{self, SlurmLogger};
use slurm_plugin_common::options::{self, OPTIONS};
use slurm_plugin_common::statedir::StateDir;
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

/// A number from the prolog's environment (set by slurmd).
fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok()?.parse().ok()
}

/// The job prolog's work on one node: the job's map from the prolog environment (see the
/// crate doc), written into root's state directory; the first node registers the job.
/// Problems are logged, never fatal: the job runs, without the spares environment.
fn prolog(spank: &SpankHandle<'_>, policy_file: &std::path::Path) -> Result<(), PluginError> {
    let job_id = spank.job_id()?;
    // vars_os: a value from the job record need not be UTF-8 (vars() would panic).
    let env: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    let opts = SparesOptions::from_prolog_env(&env);
    let dead_at_start = job_env::dead_at_start_from_prolog_env(&env);
    if opts.is_empty() {
        return Ok(());
    }
    // slurmd's job node list: SLURM_NODELIST in 22.05 (checked), later releases add
    // SLURM_JOB_NODELIST.
    let nodelist = ["SLURM_JOB_NODELIST", "SLURM_NODELIST"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|l| !l.is_empty()));
    let node = std::env::var("SLURMD_NODENAME")
        .ok()
        .filter(|n| !n.is_empty());
    // Validated first: the log line then holds short, well-formed values only.
    let req = match opts.validate() {
        Ok(r) => r,
        Err(e) => {
            log::warn!("job {job_id}: {e}; the job runs without its spare map");
            return Ok(());
        }
    };
    log::debug!(
        "job {job_id} prolog on {}: node list {}, {}",
        node.as_deref().unwrap_or("?"),
        nodelist.as_deref().unwrap_or("?"),
        opts.summary()
    );
    let policy = match policy::cached(policy_file) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("{e}; job {job_id} runs without its spare map");
            return Ok(());
        }
    };
    let (Some(nodelist), Some(node)) = (nodelist, node) else {
        log::warn!("job {job_id}: no SLURM_NODELIST or SLURMD_NODENAME in the prolog; the job runs without its spare map");
        return Ok(());
    };
    let map = match jobmap::build(
        &policy,
        &req,
        job_id,
        &nodelist,
        dead_at_start.as_deref(),
        &node,
    ) {
        Ok(Some(m)) => m,
        Ok(None) => return Ok(()),
        Err(e) => {
            log::warn!("job {job_id} on {node}: {e}; the job runs without its spare map");
            return Ok(());
        }
    };
    let dir = match StateDir::open_or_create(&policy.state_dir) {
        Ok(d) => d,
        Err(e) => {
            log::error!("job {job_id} on {node}: {e}; the job runs without its spare map");
            return Ok(());
        }
    };
    let gid = spank.gid().ok().or_else(|| env_u32("SLURM_JOB_GID"));
    if let Err(e) = map.write(&dir, gid) {
        log::error!("job {job_id} on {node}: {e}; the job runs without its spare map");
        return Ok(());
    }
    log::debug!("job {job_id} on {node}: map written, {}", map.role.name());
    let first = topology::hostlist::expand(&nodelist)
        .ok()
        .and_then(|n| n.into_iter().next());
    if first.as_deref() != Some(node.as_str()) {
        return Ok(());
    }
    let Some(uid) = spank.uid().ok().or_else(|| env_u32("SLURM_JOB_UID")) else {
        log::warn!("job {job_id}: uid unknown; not registered with sparesd");
        return Ok(());
    };
    match sparesd::register(
        &policy.sparesd_socket,
        job_id,
        uid,
        &map.doc,
        &map.at_start_json(),
    ) {
        Ok(()) => {
            log::info!("job {job_id} registered with sparesd");
            // The epilog that removes this mark releases the job.
            if let Err(e) = dir.write_file(&jobmap::registered_name(job_id), b"", 0o600, None) {
                log::error!("job {job_id}: {e}; the epilog will not release the job");
            }
        }
        Err(e @ sparesd::SparesdError::Unreachable { .. }) => {
            log::warn!("{e}; job {job_id} runs without a substitution daemon")
        }
        Err(e) => log::warn!("job {job_id}: {e}; the job runs without a substitution daemon"),
    }
    Ok(())
}

/// A step's spares environment, read from the files the job's prolog wrote (the job id is
/// Slurm's, the node name slurmstepd's own; nothing comes from the step's environment).
fn setup_step(spank: &SpankHandle<'_>, policy_file: &std::path::Path) -> Result<(), PluginError> {
    let job_id = spank.job_id()?;
    let Ok(policy) = policy::cached(policy_file) else {
        return Ok(());
    };
    let Some(node) = spank.node_name() else {
        log::debug!("job {job_id}: node name unknown");
        return Ok(());
    };
    let env = match StateDir::open(&policy.state_dir) {
        Ok(dir) => jobmap::task_env_from_files(&dir, job_id, &node),
        Err(e) => Err(e.into()),
    };
    let env = match env {
        Ok(Some(env)) => env,
        Ok(None) => return Ok(()),
        Err(e) => {
            // Every step of every job gets here: the prolog already logged a bad directory
            // for the jobs with spares.
            log::debug!(
                "job {job_id} on {node}: {e}; the step runs without its spares environment"
            );
            return Ok(());
        }
    };
    for (name, value) in env {
        match value {
            Some(v) => spank.setenv(name, &v, true)?,
            None => spank.unsetenv(name)?,
        }
    }
    Ok(())
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
        LOGGER.set_user_terminal(matches!(ctx, Context::Local | Context::Allocator));
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
        if remote != 0 {
            // In slurmstepd the value comes from the step's environment, which the user
            // controls; the step's spares environment comes from the prolog's files, so the
            // value is not even parsed here.
            log::trace!("--{} from the step's environment ignored", def.name);
            return Ok(0);
        }
        options::validate(def.opt, &value)?;
        if ffi::context() == Context::Local {
            let given = if std::env::var_os("SLURM_JOB_ID").is_some() {
                options::Given::SrunInAllocation
            } else {
                options::Given::SrunAlone
            };
            options::check_where(def.opt, &value, given).map_err(PluginError::Usage)?;
        }
        log::debug!("--{}={value} accepted", def.name);
        Ok(0)
    })
}

/// `slurm_spank_user_init` (slurmstepd, before the tasks start): logs what
/// this step was given, at Slurm's info level (slurmd's log).
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
        // Best effort: a missing item must not fail the job.
        fn or_q<T: std::fmt::Display>(r: Result<T, PluginError>) -> String {
            r.map(|v| v.to_string()).unwrap_or_else(|_| "?".into())
        }
        let env = |name| spank.getenv(name).ok().flatten();
        log::info!(
            "job {} step {} on {} (node {} of {}, uid {}): role {}, rank {}",
            or_q(spank.job_id()),
            or_q(spank.step_id().map(ffi::step_name)),
            spank.node_name().as_deref().unwrap_or("?"),
            or_q(spank.node_id()),
            or_q(spank.nnodes()),
            or_q(spank.uid()),
            env(jobmap::ENV_ROLE).as_deref().unwrap_or("-"),
            env(jobmap::ENV_RANK).as_deref().unwrap_or("-"),
        );
        Ok(0)
    })
}

/// `slurm_spank_init_post_opt`: in each step on the job's nodes (remote side,
/// slurmstepd, as root, before the tasks start), the spares environment from
/// the files of the job's prolog.
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
        setup_step(&spank, &path)?;
        Ok(0)
    })
}

/// `slurm_spank_job_prolog` (every node of the job, as root, in slurmd's
/// prolog; at allocation with `PrologFlags=Alloc`): the job's map files, and
/// the registration with `sparesd` on the first node.
///
/// # Safety
/// Called by Slurm with its handle and plugstack.conf arguments.
#[no_mangle]
pub unsafe extern "C" fn slurm_spank_job_prolog(
    sp: sys::spank_t,
    ac: c_int,
    av: *mut *mut c_char,
) -> c_int {
    common::guard("slurm_spank_job_prolog", || {
        logger::init(&LOGGER);
        // SAFETY: `sp` is the handle of this call.
        let spank = unsafe { SpankHandle::from_raw(sp) }?;
        // SAFETY: the arguments of this call.
        let path = unsafe { policy_path(ac, av) };
        prolog(&spank, &path)?;
        Ok(0)
    })
}

/// `slurm_spank_job_epilog` (every node of the job at its end, as root):
/// removes the job's map files; the node that holds the registration mark
/// (the first node) releases the job from `sparesd`, trying again for about
/// 8 s while the daemon is unreachable (a daemon restart during the job's end
/// must not leave the job registered).
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
        let dir = match StateDir::open(&policy.state_dir) {
            Ok(d) => d,
            Err(e) => {
                if std::fs::symlink_metadata(&policy.state_dir).is_ok() {
                    log::error!("job {job_id}: {e}; its files are left alone");
                }
                return Ok(0);
            }
        };
        if let Err(e) = jobmap::remove_files(&dir, job_id) {
            log::warn!("job {job_id}: {e}");
        }
        match dir.remove_file(&jobmap::registered_name(job_id)) {
            Ok(true) => {}
            Ok(false) => return Ok(0),
            Err(e) => {
                log::warn!("job {job_id}: {e}");
                return Ok(0);
            }
        }
        let (attempts, outcome) = sparesd::release_with_retry(
            &policy.sparesd_socket,
            job_id,
            &sparesd::RELEASE_BACKOFF,
            std::thread::sleep,
        );
        match outcome {
            Ok(()) => log::info!("job {job_id} released from sparesd (attempt {attempts})"),
            Err(e @ sparesd::SparesdError::Refused { .. }) => log::debug!("job {job_id}: release: {e}"),
            Err(e) => log::error!(
                "job {job_id}: release failed after {attempts} attempts: {e}; sparesd keeps the job until it learns that Slurm no longer knows it"
            ),
        }
        Ok(0)
    })
}
