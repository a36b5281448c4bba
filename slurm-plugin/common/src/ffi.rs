//! Safe wrappers over the Slurm C API: the only module of the plugins (with
//! the `slurm-sys` bindings and the entry-point shells) that uses `unsafe`.
//!
//! Every function called here is provided by the process that loaded the
//! plugin: `slurm_*` log functions and `slurm_xstrdup`/`slurm_xfree` by every
//! Slurm program, `spank_*` by the SPANK hosts (sbatch, salloc, srun,
//! slurmstepd, slurmd). The plugins are not linked against libslurm.

use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::os::raw::{c_char, c_int};

use crate::error::PluginError;
use crate::options::OptionDef;
use crate::sys;

// ---------------------------------------------------------------- strings

/// A C string for Slurm; NUL bytes inside `s` become `?` (a log line or a
/// message must never be lost for a stray NUL).
pub fn c_string_lossy(s: &str) -> CString {
    CString::new(s.replace('\0', "?")).expect("no NUL left")
}

/// A C string for Slurm; an error for a value with a NUL byte.
pub fn c_string(s: &str) -> Result<CString, PluginError> {
    CString::new(s).map_err(|_| PluginError::Nul(s.to_string()))
}

/// Copies a C string (invalid UTF-8 replaced); `None` for NULL.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid during
/// the call.
pub unsafe fn string_from_ptr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        None
    } else {
        Some(CStr::from_ptr(p).to_string_lossy().into_owned())
    }
}

/// A string field of a job descriptor that the user wrote (`--partition`, `--exclude`,
/// `--nodelist`), copied only up to a length: its length is the user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserText {
    /// The text (invalid UTF-8 replaced).
    Text(String),
    /// Longer than the bytes the plugin copies.
    TooLong,
}

/// Copies a C string of at most `max_bytes` bytes; longer ones are not copied
/// ([`UserText::TooLong`]); `None` for NULL or an empty string.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that stays valid during the call.
pub unsafe fn bounded_string_from_ptr(p: *const c_char, max_bytes: usize) -> Option<UserText> {
    if p.is_null() {
        return None;
    }
    let mut len = 0;
    // Reads at most max_bytes + 1 bytes, never past the terminating NUL.
    while len <= max_bytes && *p.add(len) != 0 {
        len += 1;
    }
    if len > max_bytes {
        return Some(UserText::TooLong);
    }
    if len == 0 {
        return None;
    }
    let bytes = std::slice::from_raw_parts(p.cast::<u8>(), len);
    Some(UserText::Text(String::from_utf8_lossy(bytes).into_owned()))
}

/// Copies `len` C strings from an array (NULL entries skipped); empty for a
/// NULL array.
///
/// # Safety
/// `array` is NULL or points to at least `len` pointers, each NULL or a
/// NUL-terminated string, all valid during the call.
pub unsafe fn strings_from_array(array: *const *mut c_char, len: usize) -> Vec<String> {
    if array.is_null() {
        return Vec::new();
    }
    std::slice::from_raw_parts(array, len)
        .iter()
        .filter_map(|&p| string_from_ptr(p))
        .collect()
}

/// Copies a NULL-terminated array of C strings (like `environ`).
///
/// # Safety
/// `array` is NULL or a NULL-terminated array of NUL-terminated strings, all
/// valid during the call.
pub unsafe fn strings_from_null_terminated(array: *const *mut c_char) -> Vec<String> {
    let mut out = Vec::new();
    if array.is_null() {
        return out;
    }
    let mut p = array;
    while !(*p).is_null() {
        out.extend(string_from_ptr(*p));
        p = p.add(1);
    }
    out
}

// ---------------------------------------------------------------- logging

/// Slurm's log levels that a plugin can write at (`slurm/spank.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlurmLevel {
    /// `slurm_error`: always shown (`sbatch: error: ...` on the user's
    /// terminal in sbatch/srun, `error:` in a daemon's log).
    Error,
    /// `slurm_info`: shown by default; in sbatch/srun on the user's terminal.
    Info,
    /// `slurm_verbose`: `-v` in sbatch/srun, `*Debug=verbose` in daemons.
    Verbose,
    /// `slurm_debug`.
    Debug,
    /// `slurm_debug2`.
    Debug2,
}

/// Writes one line to Slurm's log at `level`, control characters escaped (a
/// message may carry a user's value: it must not forge further lines).
pub fn slurm_log(level: SlurmLevel, msg: &str) {
    let msg = c_string_lossy(&crate::logger::escape_controls(msg));
    let fmt = b"%s\0".as_ptr().cast::<c_char>();
    // SAFETY: the format is "%s" and its one argument a valid C string; the
    // log functions are exported by every Slurm program that loads plugins.
    unsafe {
        match level {
            SlurmLevel::Error => sys::slurm_error(fmt, msg.as_ptr()),
            SlurmLevel::Info => sys::slurm_info(fmt, msg.as_ptr()),
            SlurmLevel::Verbose => sys::slurm_verbose(fmt, msg.as_ptr()),
            SlurmLevel::Debug => sys::slurm_debug(fmt, msg.as_ptr()),
            SlurmLevel::Debug2 => sys::slurm_debug2(fmt, msg.as_ptr()),
        }
    }
}

// ---------------------------------------------------------------- job_submit

/// The `char **err_msg` of `job_submit`: the message slurmctld sends to the
/// user with a rejection.
pub struct ErrMsgSlot<'a> {
    raw: *mut *mut c_char,
    _slurm: PhantomData<&'a mut *mut c_char>,
}

impl<'a> ErrMsgSlot<'a> {
    /// # Safety
    /// `raw` is NULL or the `err_msg` argument Slurm passed to the running
    /// `job_submit` call (a valid `char **` whose string, if any, was
    /// allocated with Slurm's xmalloc family), and the slot is used only
    /// during that call.
    pub unsafe fn from_raw(raw: *mut *mut c_char) -> Self {
        ErrMsgSlot {
            raw,
            _slurm: PhantomData,
        }
    }

    /// Sets the message, allocated with Slurm's `xstrdup` (Slurm releases it
    /// with `xfree`); a previous message is released first. No-op for a NULL
    /// slot.
    pub fn set(&mut self, msg: &str) {
        if self.raw.is_null() {
            return;
        }
        // slurmctld may log it: one line, like every log line.
        let msg = c_string_lossy(&crate::logger::escape_controls(msg));
        // SAFETY: `raw` is a valid `char **` (from_raw's contract); the old
        // string came from Slurm's allocator, so xfree may release it, and
        // slurm_xstrdup copies `msg` into Slurm's allocator.
        unsafe {
            if !(*self.raw).is_null() {
                sys::slurm_xfree(self.raw.cast::<*mut c_void>());
            }
            *self.raw = sys::slurm_xstrdup(msg.as_ptr());
        }
    }
}

/// Read access to a `job_desc_msg_t` handed to `job_submit`/`job_modify`.
pub struct JobDesc<'a> {
    raw: &'a sys::job_desc_msg_t,
}

/// `NO_VAL` (unset) becomes `None`.
fn unless_no_val(v: u32) -> Option<u32> {
    (v != sys::NO_VAL).then_some(v)
}

impl<'a> JobDesc<'a> {
    /// # Safety
    /// `raw` is NULL or the job descriptor Slurm passed to the running
    /// `job_submit`/`job_modify` call, used only during that call.
    pub unsafe fn from_raw(raw: *const sys::job_desc_msg_t) -> Result<Self, PluginError> {
        raw.as_ref()
            .map(|raw| JobDesc { raw })
            .ok_or(PluginError::NullPointer("job_desc"))
    }

    /// `spank_job_env` (`spank_job_env_size` entries of `KEY=VALUE`).
    pub fn spank_job_env(&self) -> Vec<String> {
        // SAFETY: Slurm keeps `spank_job_env_size` entries in `spank_job_env`.
        unsafe { strings_from_array(self.raw.spank_job_env, self.raw.spank_job_env_size as usize) }
    }

    /// Job name (`--job-name`).
    pub fn name(&self) -> Option<String> {
        // SAFETY: NULL or a C string owned by the descriptor.
        unsafe { string_from_ptr(self.raw.name) }
    }

    /// `job_id` for an update, `None` (NO_VAL) for a new job.
    pub fn job_id(&self) -> Option<u32> {
        unless_no_val(sys::job_desc_job_id(self.raw)).filter(|&id| id != 0)
    }

    /// User the job runs as (`NO_VAL` for unset).
    pub fn user_id(&self) -> Option<u32> {
        unless_no_val(self.raw.user_id)
    }

    /// `-N` lower bound.
    pub fn min_nodes(&self) -> Option<u32> {
        unless_no_val(self.raw.min_nodes)
    }

    /// `-N` upper bound.
    pub fn max_nodes(&self) -> Option<u32> {
        unless_no_val(self.raw.max_nodes)
    }

    /// `--time` in minutes (`INFINITE` for no limit), `None` when not given.
    pub fn time_limit_minutes(&self) -> Option<u32> {
        unless_no_val(self.raw.time_limit)
    }

    /// `req_nodes` (`--nodelist`), if given.
    pub fn req_nodes(&self) -> Option<String> {
        // SAFETY: NULL or a C string owned by the descriptor.
        unsafe { string_from_ptr(self.raw.req_nodes) }.filter(|s| !s.is_empty())
    }

    /// `req_nodes` (`--nodelist`) as the user gave it, copied up to `max_bytes`.
    pub fn req_nodes_text(&self, max_bytes: usize) -> Option<UserText> {
        // SAFETY: NULL or a C string owned by the descriptor.
        unsafe { bounded_string_from_ptr(self.raw.req_nodes, max_bytes) }
    }

    /// `exc_nodes` (`--exclude`), copied up to `max_bytes`.
    pub fn exc_nodes_text(&self, max_bytes: usize) -> Option<UserText> {
        // SAFETY: NULL or a C string owned by the descriptor.
        unsafe { bounded_string_from_ptr(self.raw.exc_nodes, max_bytes) }
    }

    /// `partition` (`--partition`, a comma list), copied up to `max_bytes`.
    pub fn partition_text(&self, max_bytes: usize) -> Option<UserText> {
        // SAFETY: NULL or a C string owned by the descriptor.
        unsafe { bounded_string_from_ptr(self.raw.partition, max_bytes) }
    }
}

/// Write access to the `job_desc_msg_t` of a `job_submit` call: the fields the spares
/// plugin changes to pad and pin a job.
pub struct JobDescMut<'a> {
    raw: &'a mut sys::job_desc_msg_t,
}

/// Most entries `spank_job_env` may hold before the plugin adds its own: the descriptor
/// comes from the user, and the plugin's additions must not grow a huge array further.
pub const MAX_SPANK_JOB_ENV_ENTRIES: usize = 4096;

impl<'a> JobDescMut<'a> {
    /// # Safety
    /// `raw` is NULL or the job descriptor Slurm passed to the running `job_submit` call,
    /// used only during that call, with its strings allocated by Slurm's xmalloc family.
    pub unsafe fn from_raw(raw: *mut sys::job_desc_msg_t) -> Result<Self, PluginError> {
        raw.as_mut()
            .map(|raw| JobDescMut { raw })
            .ok_or(PluginError::NullPointer("job_desc"))
    }

    /// A read view of the same descriptor.
    pub fn view(&self) -> JobDesc<'_> {
        JobDesc { raw: self.raw }
    }

    /// Sets `-N min-max`.
    pub fn set_nodes(&mut self, min: u32, max: u32) {
        self.raw.min_nodes = min;
        self.raw.max_nodes = max;
    }

    /// Sets `KEY=VALUE` entries of `spank_job_env`: an entry whose key is there is replaced
    /// (every copy of it, so no later duplicate overrides the value), the others are appended.
    /// The job record keeps this array, and the job's prolog reads it on every node.
    /// Strings come from Slurm's `xstrdup`, the array from `xrecalloc`: slurmctld releases
    /// both with `xfree`.
    pub fn set_spank_job_env(&mut self, entries: &[(String, String)]) -> Result<(), PluginError> {
        let size = self.raw.spank_job_env_size as usize;
        if size > MAX_SPANK_JOB_ENV_ENTRIES {
            return Err(PluginError::Rejected {
                code: sys::ESPANK_BAD_ARG as c_int,
                message: format!(
                    "{}: the job's SPANK environment has {size} entries, over the limit of {MAX_SPANK_JOB_ENV_ENTRIES}",
                    crate::LOG_PREFIX
                ),
            });
        }
        // A NULL array has no entries to compare, whatever its size says.
        let present = if self.raw.spank_job_env.is_null() {
            0
        } else {
            size
        };
        let mut appended = Vec::new();
        for (key, value) in entries {
            let line = c_string(&format!("{key}={value}"))?;
            let mut found = false;
            for i in 0..present {
                // The user's entries are compared where they are, never copied: their
                // lengths are the user's.
                // SAFETY: Slurm keeps `size` entries, each NULL or a C string.
                let entry = unsafe { *self.raw.spank_job_env.add(i) };
                let has_key = !entry.is_null() && {
                    // SAFETY: a non-NULL entry is a NUL-terminated string.
                    let bytes = unsafe { CStr::from_ptr(entry) }.to_bytes();
                    bytes
                        .strip_prefix(key.as_bytes())
                        .is_some_and(|rest| rest.first() == Some(&b'='))
                };
                if has_key {
                    found = true;
                    // SAFETY: entry `i` exists (size entries) and came from Slurm's
                    // allocator; slurm_xstrdup copies `line` into it.
                    unsafe {
                        let slot = self.raw.spank_job_env.add(i);
                        sys::slurm_xfree(slot.cast::<*mut c_void>());
                        *slot = sys::slurm_xstrdup(line.as_ptr());
                    }
                }
            }
            if !found {
                appended.push(line);
            }
        }
        if appended.is_empty() {
            return Ok(());
        }
        let new_size = size + appended.len();
        // SAFETY: the array is NULL or from Slurm's allocator (from_raw's contract);
        // xrecalloc keeps the first `size` pointers and zeroes the rest.
        unsafe {
            let file = c"slurm-plugin/common/src/ffi.rs";
            let func = c"set_spank_job_env";
            sys::slurm_xrecalloc(
                (&mut self.raw.spank_job_env as *mut *mut *mut c_char).cast::<*mut c_void>(),
                new_size,
                std::mem::size_of::<*mut c_char>(),
                true,
                false,
                file.as_ptr(),
                line!() as c_int,
                func.as_ptr(),
            );
            for (i, line) in appended.iter().enumerate() {
                *self.raw.spank_job_env.add(size + i) = sys::slurm_xstrdup(line.as_ptr());
            }
        }
        self.raw.spank_job_env_size = new_size as u32;
        Ok(())
    }

    /// Sets `admin_comment`, which only Slurm's administrators (and job_submit) can set:
    /// the free-node service trusts the box it names ([`topology::pin_mark`]).
    pub fn set_admin_comment(&mut self, text: &str) -> Result<(), PluginError> {
        set_string(&mut self.raw.admin_comment, text)
    }

    /// Sets `req_nodes` (`--nodelist`).
    pub fn set_req_nodes(&mut self, hostlist: &str) -> Result<(), PluginError> {
        set_string(&mut self.raw.req_nodes, hostlist)
    }

    /// Sets `partition` (`--partition`).
    pub fn set_partition(&mut self, name: &str) -> Result<(), PluginError> {
        set_string(&mut self.raw.partition, name)
    }
}

/// Replaces a string field of a job descriptor with a copy of `text` made by Slurm's `xstrdup`
/// (slurmctld releases it with `xfree`); the previous value, if any, is released first.
fn set_string(field: &mut *mut c_char, text: &str) -> Result<(), PluginError> {
    let v = c_string(text)?;
    // SAFETY: the field belongs to a descriptor handed to us by Slurm (JobDescMut::from_raw's
    // contract), so an old string came from Slurm's allocator; slurm_xstrdup copies `v`
    // into that allocator.
    unsafe {
        if !field.is_null() {
            sys::slurm_xfree((field as *mut *mut c_char).cast::<*mut c_void>());
        }
        *field = sys::slurm_xstrdup(v.as_ptr());
    }
    Ok(())
}

// ---------------------------------------------------------------- SPANK

/// Where a SPANK plugin is running (`spank_context()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// srun.
    Local,
    /// slurmstepd (the job's nodes).
    Remote,
    /// sbatch or salloc.
    Allocator,
    /// slurmd.
    Slurmd,
    /// prolog/epilog.
    JobScript,
    /// `S_CTX_ERROR` or a value this build does not know.
    Error,
}

impl Context {
    /// Contexts in which options are registered and parsed.
    pub fn has_options(self) -> bool {
        matches!(self, Context::Local | Context::Remote | Context::Allocator)
    }
}

/// The current SPANK context.
pub fn context() -> Context {
    // SAFETY: no arguments; provided by every SPANK host.
    let c = unsafe { sys::spank_context() };
    match c {
        sys::S_CTX_LOCAL => Context::Local,
        sys::S_CTX_REMOTE => Context::Remote,
        sys::S_CTX_ALLOCATOR => Context::Allocator,
        sys::S_CTX_SLURMD => Context::Slurmd,
        sys::S_CTX_JOB_SCRIPT => Context::JobScript,
        _ => Context::Error,
    }
}

/// Slurm's text for a SPANK error code.
pub fn spank_strerror(code: sys::spank_err_t) -> String {
    // SAFETY: returns a static string for any code.
    unsafe { string_from_ptr(sys::spank_strerror(code)) }.unwrap_or_default()
}

fn spank_result(call: &'static str, rc: sys::spank_err_t) -> Result<(), PluginError> {
    if rc == sys::ESPANK_SUCCESS {
        Ok(())
    } else {
        Err(PluginError::Spank {
            call,
            code: rc as c_int,
            message: spank_strerror(rc),
        })
    }
}

/// A step id for humans: `0`, `batch`, `extern`, `interactive`.
pub fn step_name(id: u32) -> String {
    match id {
        sys::SLURM_BATCH_SCRIPT => "batch".into(),
        sys::SLURM_EXTERN_CONT => "extern".into(),
        sys::SLURM_INTERACTIVE_STEP => "interactive".into(),
        sys::SLURM_PENDING_STEP => "pending".into(),
        n => n.to_string(),
    }
}

/// Signature of a SPANK option callback.
pub type OptionCallback = unsafe extern "C" fn(c_int, *const c_char, c_int) -> c_int;

/// The `spank_t` of the running SPANK callback.
pub struct SpankHandle<'a> {
    raw: sys::spank_t,
    _slurm: PhantomData<&'a mut sys::spank_handle>,
}

impl<'a> SpankHandle<'a> {
    /// # Safety
    /// `raw` is NULL or the handle Slurm passed to the running SPANK
    /// callback, and the wrapper is used only during that callback.
    pub unsafe fn from_raw(raw: sys::spank_t) -> Result<Self, PluginError> {
        if raw.is_null() {
            Err(PluginError::NullPointer("spank_t"))
        } else {
            Ok(SpankHandle {
                raw,
                _slurm: PhantomData,
            })
        }
    }

    /// Whether this is the remote side (slurmstepd).
    pub fn is_remote(&self) -> bool {
        // SAFETY: valid handle (from_raw's contract).
        unsafe { sys::spank_remote(self.raw) == 1 }
    }

    /// Registers `def` with `cb` as its callback (`slurm_spank_init` only).
    pub fn register_option(&self, def: &OptionDef, cb: OptionCallback) -> Result<(), PluginError> {
        // Slurm 22.05 copies the struct and its strings; the strings are
        // 'static anyway, and the struct is leaked (once per process and
        // option) so an older Slurm that kept the pointer is safe too.
        let opt = Box::leak(Box::new(sys::spank_option {
            name: def.c_name.as_ptr().cast_mut(),
            arginfo: def.arginfo.as_ptr().cast_mut(),
            usage: def.usage.as_ptr().cast_mut(),
            has_arg: 1,
            val: def.val(),
            cb: Some(cb),
        }));
        // SAFETY: valid handle; `opt` lives forever; Slurm does not write
        // through the string pointers.
        let rc = unsafe { sys::spank_option_register(self.raw, opt) };
        spank_result("spank_option_register", rc)
    }

    /// A variable of the job's environment (remote side; `None` if unset).
    pub fn getenv(&self, name: &str) -> Result<Option<String>, PluginError> {
        let cname = c_string(name)?;
        let mut len = 256usize;
        loop {
            let mut buf = vec![0u8; len];
            // SAFETY: valid handle, C string, and a buffer of `len` bytes.
            let rc = unsafe {
                sys::spank_getenv(
                    self.raw,
                    cname.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    len as c_int,
                )
            };
            match rc {
                sys::ESPANK_SUCCESS => {
                    let end = buf.iter().position(|&b| b == 0).unwrap_or(len);
                    return Ok(Some(String::from_utf8_lossy(&buf[..end]).into_owned()));
                }
                sys::ESPANK_ENV_NOEXIST => return Ok(None),
                sys::ESPANK_NOSPACE if len < (1 << 20) => len *= 4,
                _ => return spank_result("spank_getenv", rc).map(|_| None),
            }
        }
    }

    /// Sets a variable of the job's environment (remote side).
    pub fn setenv(&self, name: &str, value: &str, overwrite: bool) -> Result<(), PluginError> {
        let (n, v) = (c_string(name)?, c_string(value)?);
        // SAFETY: valid handle and C strings (Slurm copies them).
        let rc = unsafe { sys::spank_setenv(self.raw, n.as_ptr(), v.as_ptr(), overwrite as c_int) };
        spank_result("spank_setenv", rc)
    }

    /// Removes a variable from the job's environment (remote side).
    pub fn unsetenv(&self, name: &str) -> Result<(), PluginError> {
        let n = c_string(name)?;
        // SAFETY: valid handle and C string.
        let rc = unsafe { sys::spank_unsetenv(self.raw, n.as_ptr()) };
        spank_result("spank_unsetenv", rc)
    }

    fn item_u32(&self, item: sys::spank_item_t, call: &'static str) -> Result<u32, PluginError> {
        let mut v: u32 = 0;
        // SAFETY: valid handle; every item read here takes one `uint32_t *`
        // (uid_t and gid_t are 32-bit unsigned on Linux).
        let rc = unsafe { sys::spank_get_item(self.raw, item, &mut v as *mut u32) };
        spank_result(call, rc).map(|_| v)
    }

    /// `S_JOB_ID`.
    pub fn job_id(&self) -> Result<u32, PluginError> {
        self.item_u32(sys::S_JOB_ID, "spank_get_item(S_JOB_ID)")
    }

    /// `S_JOB_STEPID`.
    pub fn step_id(&self) -> Result<u32, PluginError> {
        self.item_u32(sys::S_JOB_STEPID, "spank_get_item(S_JOB_STEPID)")
    }

    /// `S_JOB_UID`.
    pub fn uid(&self) -> Result<u32, PluginError> {
        self.item_u32(sys::S_JOB_UID, "spank_get_item(S_JOB_UID)")
    }

    /// `S_JOB_GID`.
    pub fn gid(&self) -> Result<u32, PluginError> {
        self.item_u32(sys::S_JOB_GID, "spank_get_item(S_JOB_GID)")
    }

    /// `S_JOB_NNODES`: nodes of the step.
    pub fn nnodes(&self) -> Result<u32, PluginError> {
        self.item_u32(sys::S_JOB_NNODES, "spank_get_item(S_JOB_NNODES)")
    }

    /// `S_JOB_NODEID`: this node's index in the step.
    pub fn node_id(&self) -> Result<u32, PluginError> {
        self.item_u32(sys::S_JOB_NODEID, "spank_get_item(S_JOB_NODEID)")
    }

    /// `S_JOB_ENV`: the job's environment (remote side).
    pub fn job_env(&self) -> Result<Vec<String>, PluginError> {
        let mut env: *mut *mut c_char = std::ptr::null_mut();
        // SAFETY: S_JOB_ENV takes a `char ***`; the array belongs to Slurm
        // and is only read during this call.
        let rc = unsafe { sys::spank_get_item(self.raw, sys::S_JOB_ENV, &mut env as *mut _) };
        spank_result("spank_get_item(S_JOB_ENV)", rc)?;
        // SAFETY: a NULL-terminated environment array owned by Slurm.
        Ok(unsafe { strings_from_null_terminated(env) })
    }

    /// The Slurm name of this node. Every fake node of a multiple-slurmd
    /// host shares the host name, so never `gethostname()`: slurmstepd puts
    /// `SLURMD_NODENAME` in its own process environment, which is what is
    /// read first. The job's environment comes second only: before the tasks
    /// start (e.g. in `user_init`) it still holds the value inherited from
    /// the submitting side (the batch host's name, checked on Slurm 22.05).
    pub fn node_name(&self) -> Option<String> {
        std::env::var("SLURMD_NODENAME")
            .ok()
            .filter(|n| !n.is_empty())
            .or_else(|| self.getenv("SLURMD_NODENAME").ok().flatten())
    }
}

#[cfg(test)]
pub(crate) mod stubs {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        pub static LOGGED: RefCell<Vec<(SlurmLevel, String)>> = const { RefCell::new(Vec::new()) };
    }

    /// Takes what this thread logged so far.
    pub fn take_logged() -> Vec<(SlurmLevel, String)> {
        LOGGED.with(|l| std::mem::take(&mut *l.borrow_mut()))
    }

    fn record(level: SlurmLevel, fmt: *const c_char, arg: *const c_char) {
        // SAFETY: slurm_log always passes "%s" and one C string.
        let (fmt, arg) = unsafe { (string_from_ptr(fmt), string_from_ptr(arg)) };
        assert_eq!(fmt.as_deref(), Some("%s"));
        LOGGED.with(|l| l.borrow_mut().push((level, arg.unwrap_or_default())));
    }

    // The real functions are variadic; on x86_64 and aarch64 a caller of a
    // variadic function passes (format, one pointer) as these take them.
    #[no_mangle]
    extern "C" fn slurm_error(fmt: *const c_char, arg: *const c_char) {
        record(SlurmLevel::Error, fmt, arg)
    }
    #[no_mangle]
    extern "C" fn slurm_info(fmt: *const c_char, arg: *const c_char) {
        record(SlurmLevel::Info, fmt, arg)
    }
    #[no_mangle]
    extern "C" fn slurm_verbose(fmt: *const c_char, arg: *const c_char) {
        record(SlurmLevel::Verbose, fmt, arg)
    }
    #[no_mangle]
    extern "C" fn slurm_debug(fmt: *const c_char, arg: *const c_char) {
        record(SlurmLevel::Debug, fmt, arg)
    }
    #[no_mangle]
    extern "C" fn slurm_debug2(fmt: *const c_char, arg: *const c_char) {
        record(SlurmLevel::Debug2, fmt, arg)
    }
    #[no_mangle]
    extern "C" fn slurm_xstrdup(s: *const c_char) -> *mut c_char {
        // SAFETY: callers pass a valid C string.
        unsafe { CStr::from_ptr(s) }.to_owned().into_raw()
    }
    #[no_mangle]
    extern "C" fn slurm_xfree(p: *mut *mut c_void) {
        // SAFETY: `*p` came from slurm_xstrdup above.
        unsafe {
            drop(CString::from_raw((*p).cast()));
            *p = std::ptr::null_mut();
        }
    }
    /// Arrays of the tests: a boxed slice with the entry count in a slot before the array,
    /// grown by copying (tests release them with `tests::free_env_array`).
    #[no_mangle]
    extern "C" fn slurm_xrecalloc(
        p: *mut *mut c_void,
        count: usize,
        size: usize,
        _clear: bool,
        _try: bool,
        _file: *const c_char,
        _line: c_int,
        _func: *const c_char,
    ) -> *mut c_void {
        assert_eq!(size, std::mem::size_of::<usize>());
        let mut grown = vec![0usize; count + 1].into_boxed_slice();
        grown[0] = count;
        // SAFETY: a non-NULL `*p` came from this stub: its count sits one slot before it.
        unsafe {
            let old = (*p).cast::<usize>();
            if !old.is_null() {
                let base = old.sub(1);
                let len = *base;
                for i in 0..len.min(count) {
                    grown[i + 1] = *old.add(i);
                }
                drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    base,
                    len + 1,
                )));
            }
            let new = Box::into_raw(grown).cast::<usize>().add(1).cast::<c_void>();
            *p = new;
            new
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossy_strings() {
        assert_eq!(c_string_lossy("a\0b").to_str().unwrap(), "a?b");
        assert!(c_string("a\0b").is_err());
    }

    #[test]
    fn string_arrays() {
        let a = CString::new("A=1").unwrap();
        let b = CString::new("B=2").unwrap();
        let arr = [
            a.as_ptr().cast_mut(),
            std::ptr::null_mut(),
            b.as_ptr().cast_mut(),
        ];
        // SAFETY: three valid entries (one NULL).
        let v = unsafe { strings_from_array(arr.as_ptr(), 3) };
        assert_eq!(v, ["A=1", "B=2"]);
        // SAFETY: NULL array.
        assert!(unsafe { strings_from_array(std::ptr::null(), 5) }.is_empty());
        let nt = [
            a.as_ptr().cast_mut(),
            b.as_ptr().cast_mut(),
            std::ptr::null_mut(),
        ];
        // SAFETY: NULL-terminated.
        assert_eq!(
            unsafe { strings_from_null_terminated(nt.as_ptr()) },
            ["A=1", "B=2"]
        );
    }

    #[test]
    fn user_texts_are_copied_only_up_to_their_limit() {
        let text = CString::new("node[01-04]").unwrap();
        let empty = CString::new("").unwrap();
        // SAFETY: valid C strings or NULL.
        unsafe {
            assert_eq!(
                bounded_string_from_ptr(text.as_ptr(), 11),
                Some(UserText::Text("node[01-04]".into()))
            );
            assert_eq!(
                bounded_string_from_ptr(text.as_ptr(), 10),
                Some(UserText::TooLong)
            );
            assert_eq!(bounded_string_from_ptr(empty.as_ptr(), 10), None);
            assert_eq!(bounded_string_from_ptr(std::ptr::null(), 10), None);
        }
        // SAFETY: job_desc_msg_t is plain data; all-zero is a valid value.
        let mut d: sys::job_desc_msg_t = unsafe { std::mem::zeroed() };
        let part = CString::new("second,batch").unwrap();
        d.partition = part.as_ptr().cast_mut();
        d.exc_nodes = text.as_ptr().cast_mut();
        // SAFETY: `d` outlives the wrapper.
        let j = unsafe { JobDesc::from_raw(&d) }.unwrap();
        assert_eq!(
            j.partition_text(64),
            Some(UserText::Text("second,batch".into()))
        );
        assert_eq!(j.exc_nodes_text(4), Some(UserText::TooLong));
        assert_eq!(j.req_nodes_text(64), None);
    }

    #[test]
    fn job_desc_reads_fields() {
        // SAFETY: job_desc_msg_t is plain data; all-zero is a valid value.
        let mut d: sys::job_desc_msg_t = unsafe { std::mem::zeroed() };
        let e = CString::new("_SLURM_SPANK_OPTION_spares_spares=3D(2,1)").unwrap();
        let mut env = [e.as_ptr().cast_mut()];
        d.spank_job_env = env.as_mut_ptr();
        d.spank_job_env_size = 1;
        d.min_nodes = 2;
        d.max_nodes = sys::NO_VAL;
        sys::set_job_desc_job_id(&mut d, sys::NO_VAL);
        // SAFETY: `d` outlives the wrapper.
        let j = unsafe { JobDesc::from_raw(&d) }.unwrap();
        assert_eq!(
            j.spank_job_env(),
            ["_SLURM_SPANK_OPTION_spares_spares=3D(2,1)"]
        );
        assert_eq!(j.min_nodes(), Some(2));
        assert_eq!(j.max_nodes(), None);
        assert_eq!(j.job_id(), None);
        assert_eq!(j.name(), None);
        // SAFETY: NULL is allowed.
        assert!(unsafe { JobDesc::from_raw(std::ptr::null()) }.is_err());
    }

    #[test]
    fn job_desc_is_padded_and_pinned() {
        // SAFETY: job_desc_msg_t is plain data; all-zero is a valid value.
        let mut d: sys::job_desc_msg_t = unsafe { std::mem::zeroed() };
        d.min_nodes = sys::NO_VAL;
        d.req_nodes = stubs_xstrdup("node01");
        {
            // SAFETY: `d` outlives the wrapper.
            let mut j = unsafe { JobDescMut::from_raw(&mut d) }.unwrap();
            assert_eq!(j.view().req_nodes().as_deref(), Some("node01"));
            j.set_nodes(32, 32);
            j.set_req_nodes("node[01-32]").unwrap();
            assert_eq!(j.view().min_nodes(), Some(32));
            assert_eq!(j.view().req_nodes().as_deref(), Some("node[01-32]"));
        }
        assert_eq!(d.max_nodes, 32);
        // SAFETY: allocated by the stub; released like Slurm would.
        unsafe { stubs_free(&mut d.req_nodes) };
        // SAFETY: NULL is allowed.
        assert!(unsafe { JobDescMut::from_raw(std::ptr::null_mut()) }.is_err());
    }

    /// A `spank_job_env` array of the test allocator holding `entries`.
    fn env_array(entries: &[&str]) -> *mut *mut c_char {
        let mut arr: *mut c_void = std::ptr::null_mut();
        // SAFETY: the stub allocator; NULL grows into a new array.
        unsafe {
            sys::slurm_xrecalloc(
                &mut arr,
                entries.len(),
                std::mem::size_of::<*mut c_char>(),
                true,
                false,
                std::ptr::null(),
                0,
                std::ptr::null(),
            );
        }
        let arr = arr.cast::<*mut c_char>();
        for (i, e) in entries.iter().enumerate() {
            // SAFETY: `entries.len()` slots were allocated.
            unsafe { *arr.add(i) = stubs_xstrdup(e) };
        }
        arr
    }

    /// Releases an array of [`env_array`] with its strings, as slurmctld does.
    ///
    /// # Safety
    /// `arr` came from the stub allocator and holds `len` strings of the stub `xstrdup`.
    unsafe fn free_env_array(arr: *mut *mut c_char, len: usize) {
        for i in 0..len {
            stubs_free(&mut *arr.add(i));
        }
        let base = arr.cast::<usize>().sub(1);
        assert_eq!(*base, len);
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            base,
            len + 1,
        )));
    }

    #[test]
    fn spank_job_env_entries_are_replaced_or_appended() {
        // SAFETY: job_desc_msg_t is plain data; all-zero is a valid value.
        let mut d: sys::job_desc_msg_t = unsafe { std::mem::zeroed() };
        d.spank_job_env = env_array(&[
            "_SLURM_SPANK_OPTION_spares_spares=auto",
            "OTHER=1",
            "_SLURM_SPANK_OPTION_spares_spares=auto",
        ]);
        d.spank_job_env_size = 3;
        {
            // SAFETY: `d` outlives the wrapper.
            let mut j = unsafe { JobDescMut::from_raw(&mut d) }.unwrap();
            j.set_spank_job_env(&[
                ("_SLURM_SPANK_OPTION_spares_spares".into(), "3D(2,1)".into()),
                (
                    "_SLURM_SPANK_OPTION_spares_job_shape".into(),
                    "3x3x2".into(),
                ),
            ])
            .unwrap();
            assert_eq!(
                j.view().spank_job_env(),
                [
                    "_SLURM_SPANK_OPTION_spares_spares=3D(2,1)",
                    "OTHER=1",
                    "_SLURM_SPANK_OPTION_spares_spares=3D(2,1)",
                    "_SLURM_SPANK_OPTION_spares_job_shape=3x3x2",
                ]
            );
        }
        assert_eq!(d.spank_job_env_size, 4);
        // An empty environment grows from NULL.
        // SAFETY: job_desc_msg_t is plain data; all-zero is a valid value.
        let mut e: sys::job_desc_msg_t = unsafe { std::mem::zeroed() };
        {
            // SAFETY: `e` outlives the wrapper.
            let mut j = unsafe { JobDescMut::from_raw(&mut e) }.unwrap();
            j.set_spank_job_env(&[("A".into(), "1".into())]).unwrap();
            assert_eq!(j.view().spank_job_env(), ["A=1"]);
        }
        // SAFETY: both arrays come from the stub allocator with their sizes.
        unsafe {
            free_env_array(d.spank_job_env, 4);
            free_env_array(e.spank_job_env, 1);
        }
    }

    fn stubs_xstrdup(s: &str) -> *mut c_char {
        let c = CString::new(s).unwrap();
        // SAFETY: a valid C string.
        unsafe { sys::slurm_xstrdup(c.as_ptr()) }
    }

    #[test]
    fn step_names() {
        assert_eq!(step_name(0), "0");
        assert_eq!(step_name(0xffff_fffb), "batch");
        assert_eq!(step_name(0xffff_fffc), "extern");
    }

    #[test]
    fn log_reaches_slurm_with_a_format() {
        slurm_log(SlurmLevel::Debug, "100% done\0");
        assert_eq!(
            stubs::take_logged(),
            [(SlurmLevel::Debug, "100% done\\u{0}".to_string())]
        );
    }

    #[test]
    fn err_msg_replaces_and_frees() {
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: `p` outlives the slot.
        let mut slot = unsafe { ErrMsgSlot::from_raw(&mut p) };
        slot.set("first");
        slot.set("spares: second");
        // SAFETY: set by the stub xstrdup.
        assert_eq!(
            unsafe { string_from_ptr(p) }.as_deref(),
            Some("spares: second")
        );
        // SAFETY: allocated by the stub; released like Slurm would.
        unsafe { stubs_free(&mut p) };
        // SAFETY: a NULL slot is allowed and ignored.
        unsafe { ErrMsgSlot::from_raw(std::ptr::null_mut()) }.set("ignored");
    }

    /// # Safety
    /// `p` holds a string from the stub `slurm_xstrdup`.
    unsafe fn stubs_free(p: &mut *mut c_char) {
        sys::slurm_xfree((p as *mut *mut c_char).cast());
        assert!(p.is_null());
    }
}
