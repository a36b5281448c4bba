//! The TCP listener for runtimes on other nodes, authenticated with MUNGE (as Slurm does).
//!
//! Off unless `[tcp]` is configured. The first line of a TCP connection must be
//! `{"version":1,"kind":"auth","credential":"MUNGE:..."}`: a credential made by the client's
//! munged (`munge_encode`, payload empty or `sparesd`). The daemon decodes it with its own
//! munged (`munge_decode`), which checks the shared key, the time-to-live and that the
//! credential was never used before (replay). The uid inside then stands for the connection,
//! exactly as `SO_PEERCRED`'s uid does on the Unix socket; every later line is an ordinary
//! request. A connection that does not authenticate first gets `forbidden` and is closed.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::net::TcpListener;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use munge_sys as sys;
use serde::Deserialize;

use crate::config::TcpConfig;
use crate::protocol::{ErrorCode, ProtoError};
use crate::server::{serve_stream, Daemon, DaemonError};
use crate::sys::Peer;

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

#[derive(Deserialize)]
struct Auth {
    version: u32,
    kind: String,
    credential: String,
}

/// Checks a connection's first line; the peer it authenticates.
pub fn authenticate(line: &[u8], socket: Option<&Path>) -> Result<Peer, ProtoError> {
    let a: Auth = serde_json::from_slice(line).map_err(|e| {
        ProtoError::new(
            ErrorCode::Forbidden,
            format!("a TCP connection starts with {{\"version\":1,\"kind\":\"auth\",\"credential\":\"MUNGE:...\"}}: {e}"),
        )
    })?;
    if a.version != 1 || a.kind != "auth" {
        return Err(ProtoError::new(
            ErrorCode::Forbidden,
            "a TCP connection starts with an auth request (version 1)",
        ));
    }
    let (uid, gid, payload) = decode(&a.credential, socket)
        .map_err(|e| ProtoError::new(ErrorCode::Forbidden, format!("credential refused: {e}")))?;
    if !payload.is_empty() && payload != b"sparesd" {
        return Err(ProtoError::new(
            ErrorCode::Forbidden,
            "credential refused: its payload is not for sparesd",
        ));
    }
    Ok(Peer { uid, gid, pid: 0 })
}

/// Starts the MUNGE-authenticated TCP listener on a background thread.
pub fn start_tcp(daemon: Arc<Daemon>, tcp: &TcpConfig) -> Result<(), DaemonError> {
    let listener = TcpListener::bind(&tcp.listen).map_err(|e| DaemonError::Socket {
        path: tcp.listen.clone().into(),
        why: format!("cannot listen: {e}"),
    })?;
    log::info!(
        "MUNGE-authenticated TCP listener on {} (munged socket {})",
        tcp.listen,
        tcp.munge_socket
            .as_ref()
            .map_or("default".into(), |p| p.display().to_string())
    );
    let munge_socket = tcp.munge_socket.clone();
    std::thread::Builder::new()
        .name("tcp-accept".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let stream = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        log::warn!("tcp accept: {e}");
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                let d = Arc::clone(&daemon);
                let sock = munge_socket.clone();
                let _ = std::thread::Builder::new()
                    .name("tcp-conn".into())
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        let addr = stream.peer_addr().ok();
                        let t = Duration::from_secs(d.config().idle_timeout_secs.max(1));
                        let _ = stream.set_read_timeout(Some(t));
                        let _ = stream.set_nodelay(true);
                        let Ok(w) = stream.try_clone() else { return };
                        let auth = |line: &[u8]| {
                            let r = authenticate(line, sock.as_deref());
                            match &r {
                                Ok(p) => log::info!("tcp {addr:?}: authenticated as uid {}", p.uid),
                                Err(e) => log::warn!("tcp {addr:?}: refused: {}", e.message),
                            }
                            r
                        };
                        serve_stream(&d, stream, w, None, &auth);
                    });
            }
        })
        .map_err(|e| DaemonError::Socket {
            path: tcp.listen.clone().into(),
            why: format!("cannot start the TCP thread: {e}"),
        })?;
    Ok(())
}
