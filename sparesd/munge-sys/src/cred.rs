//! Safe wrappers of the two calls a client and a server need: make a credential, check one.
//! All of the MUNGE `unsafe` of the project is in this crate.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate as sys;

/// A MUNGE call that failed, with libmunge's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("munge: {0}")]
pub struct MungeError(pub String);

/// A munge context, destroyed on drop (libmunge's contexts are not shared between threads).
struct Ctx(sys::munge_ctx_t);

impl Ctx {
    fn new(socket: Option<&Path>) -> Result<Ctx, MungeError> {
        // SAFETY: munge_ctx_create has no preconditions; NULL means out of memory.
        let ctx = unsafe { sys::munge_ctx_create() };
        if ctx.is_null() {
            return Err(MungeError("cannot create a context (out of memory)".into()));
        }
        let ctx = Ctx(ctx);
        if let Some(p) = socket {
            let c = CString::new(p.as_os_str().as_bytes())
                .map_err(|_| MungeError("socket path holds a NUL byte".into()))?;
            // SAFETY: a live context; MUNGE_OPT_SOCKET takes one `const char *`, which libmunge
            // copies before returning.
            let e =
                unsafe { sys::munge_ctx_set(ctx.0, sys::MUNGE_OPT_SOCKET as c_int, c.as_ptr()) };
            if e != sys::EMUNGE_SUCCESS {
                return Err(MungeError(strerror(e)));
            }
        }
        Ok(ctx)
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: created by munge_ctx_create and destroyed once.
        unsafe { sys::munge_ctx_destroy(self.0) }
    }
}

fn strerror(e: sys::munge_err_t) -> String {
    // SAFETY: munge_strerror returns a static string for every value.
    let p = unsafe { sys::munge_strerror(e) };
    if p.is_null() {
        return format!("error {e}");
    }
    // SAFETY: a NUL-terminated static string.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Makes a credential for `payload` (what a client on another node sends).
pub fn encode(payload: &[u8], socket: Option<&Path>) -> Result<String, MungeError> {
    let ctx = Ctx::new(socket)?;
    let mut cred: *mut c_char = std::ptr::null_mut();
    // SAFETY: a live context; `payload` is valid for its length; libmunge allocates `cred`
    // with malloc, freed below.
    let e = unsafe {
        sys::munge_encode(
            &mut cred,
            ctx.0,
            payload.as_ptr().cast(),
            payload.len() as c_int,
        )
    };
    if e != sys::EMUNGE_SUCCESS {
        return Err(MungeError(strerror(e)));
    }
    // SAFETY: a NUL-terminated string from libmunge, freed once with free().
    let s = unsafe { CStr::from_ptr(cred) }
        .to_string_lossy()
        .into_owned();
    unsafe { libc::free(cred.cast()) };
    Ok(s)
}

/// Checks a credential: the uid and gid of whoever made it, and its payload.
pub fn decode(cred: &str, socket: Option<&Path>) -> Result<(u32, u32, Vec<u8>), MungeError> {
    let ctx = Ctx::new(socket)?;
    let c = CString::new(cred).map_err(|_| MungeError("credential holds a NUL byte".into()))?;
    let mut buf: *mut c_void = std::ptr::null_mut();
    let mut len: c_int = 0;
    let mut uid: sys::uid_t = 0;
    let mut gid: sys::gid_t = 0;
    // SAFETY: a live context and a NUL-terminated credential; libmunge mallocs `buf`, freed
    // below; the out-parameters are live locals.
    let e = unsafe { sys::munge_decode(c.as_ptr(), ctx.0, &mut buf, &mut len, &mut uid, &mut gid) };
    let payload = if buf.is_null() || len <= 0 {
        Vec::new()
    } else {
        // SAFETY: libmunge returned `len` bytes at `buf`.
        unsafe { std::slice::from_raw_parts(buf as *const u8, len as usize) }.to_vec()
    };
    if !buf.is_null() {
        // SAFETY: allocated by libmunge with malloc, freed once.
        unsafe { libc::free(buf) };
    }
    if e != sys::EMUNGE_SUCCESS {
        return Err(MungeError(strerror(e)));
    }
    Ok((uid, gid, payload))
}
