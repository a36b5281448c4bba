//! The C ABI of the sparesd client: `libspares.so` / `libspares.a` with `include/spares.h`.
//!
//! Every `extern "C"` function goes through [`guard`], which catches panics and turns them into
//! `SPARES_EPANIC`: a bug here must never take an MPI runtime down. All `unsafe` of the client
//! side lives in this file; each function says what it requires of its pointers.

use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr;

use spares_client::{default_socket, parse_reply, Client, Error};

/// Success.
pub const SPARES_OK: c_int = 0;
/// A NULL pointer or a string that is not UTF-8.
pub const SPARES_EINVAL: c_int = 1;
/// The daemon's socket cannot be reached.
pub const SPARES_ECONNECT: c_int = 2;
/// The connection broke.
pub const SPARES_EIO: c_int = 3;
/// The reply is not protocol v1.
pub const SPARES_EPROTO: c_int = 4;
/// The daemon refused the request.
pub const SPARES_EDAEMON: c_int = 5;
/// A bug inside the library.
pub const SPARES_EPANIC: c_int = 6;
/// No whole reply within the client's timeout; the client must be disconnected.
pub const SPARES_ETIMEDOUT: c_int = 7;
/// The reply is longer than the client's limit; the client must be disconnected.
pub const SPARES_ETOOBIG: c_int = 8;

/// A static C string from bytes ending in NUL (`c"..."` literals need Rust 1.77).
const fn cs(b: &'static [u8]) -> &'static CStr {
    match CStr::from_bytes_with_nul(b) {
        Ok(c) => c,
        Err(_) => panic!("C string literals end in exactly one NUL"),
    }
}

/// A connection and the text of its last error.
pub struct SparesClient {
    client: Client,
    last_error: CString,
}

impl SparesClient {
    fn set_error(&mut self, msg: &str) {
        // Interior NULs cannot be in a C string: replace them.
        self.last_error = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    }
}

fn status_of(e: &Error) -> c_int {
    match e {
        Error::Connect { .. } | Error::Munge(_) => SPARES_ECONNECT,
        Error::Io(_) | Error::Closed => SPARES_EIO,
        Error::Timeout(_) => SPARES_ETIMEDOUT,
        Error::ReplyTooLarge { .. } => SPARES_ETOOBIG,
        Error::BadReply(_) => SPARES_EPROTO,
        Error::Daemon { .. } => SPARES_EDAEMON,
    }
}

/// Runs an entry point's body, turning a panic into `SPARES_EPANIC`.
fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(SPARES_EPANIC)
}

fn to_c(s: &str) -> *mut c_char {
    CString::new(s.replace('\0', " "))
        .unwrap_or_default()
        .into_raw()
}

/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
unsafe fn str_arg<'a>(p: *const c_char) -> Option<&'a str> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller promises a valid NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_str().ok()
}

/// Sends a request line and stores the reply line in `*out`.
fn request(c: &mut SparesClient, line: &str, out: &mut *mut c_char) -> c_int {
    let reply = match c.client.call_raw(line) {
        Ok(r) => r.to_string(),
        Err(e) => {
            c.set_error(&e.to_string());
            return status_of(&e);
        }
    };
    *out = to_c(&reply);
    match parse_reply(&reply) {
        Ok(_) => {
            c.set_error("");
            SPARES_OK
        }
        Err(e) => {
            c.set_error(&match &e {
                Error::Daemon { code, message } => format!("{code}: {message}"),
                other => other.to_string(),
            });
            status_of(&e)
        }
    }
}

/// Gives a new connection to the caller through `out`, or says why there is none.
///
/// # Safety
/// `out` is valid for writes.
unsafe fn hand_out(connected: Result<Client, Error>, out: *mut *mut SparesClient) -> c_int {
    match connected {
        Ok(client) => {
            let c = Box::new(SparesClient {
                client,
                last_error: CString::default(),
            });
            // SAFETY: the caller's promise.
            unsafe { *out = Box::into_raw(c) };
            SPARES_OK
        }
        Err(e) => status_of(&e),
    }
}

/// Connects to sparesd.
///
/// # Safety
/// `socket_path` is NULL or a NUL-terminated string; `out` is a valid pointer to write to.
#[no_mangle]
pub unsafe extern "C" fn spares_connect(
    socket_path: *const c_char,
    out: *mut *mut SparesClient,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return SPARES_EINVAL;
        }
        // SAFETY: `out` is valid for writes (checked non-NULL; the caller promises validity).
        unsafe { *out = ptr::null_mut() };
        let path = if socket_path.is_null() {
            default_socket()
        } else {
            // SAFETY: non-NULL, NUL-terminated by the caller's promise.
            match unsafe { str_arg(socket_path) } {
                Some(p) => PathBuf::from(p),
                None => return SPARES_EINVAL,
            }
        };
        // SAFETY: as above.
        unsafe { hand_out(Client::connect(&path), out) }
    })
}

/// Connects to sparesd's MUNGE-authenticated TCP listener, for runtimes on other nodes.
///
/// # Safety
/// `host_port` is a NUL-terminated `host:port`; `munge_socket` is NULL (libmunge's default) or
/// a NUL-terminated path; `out` is a valid pointer to write to.
#[no_mangle]
pub unsafe extern "C" fn spares_connect_tcp(
    host_port: *const c_char,
    munge_socket: *const c_char,
    out: *mut *mut SparesClient,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return SPARES_EINVAL;
        }
        // SAFETY: `out` is valid for writes by the caller's promise.
        unsafe { *out = ptr::null_mut() };
        // SAFETY: NUL-terminated strings (or NULL) by the caller's promise.
        let Some(addr) = (unsafe { str_arg(host_port) }) else {
            return SPARES_EINVAL;
        };
        let sock = if munge_socket.is_null() {
            None
        } else {
            // SAFETY: as above.
            match unsafe { str_arg(munge_socket) } {
                Some(p) => Some(PathBuf::from(p)),
                None => return SPARES_EINVAL,
            }
        };
        // SAFETY: as above.
        unsafe { hand_out(Client::connect_tcp(addr, sock.as_deref()), out) }
    })
}

/// Reports a failed node of a job.
///
/// # Safety
/// `client` comes from `spares_connect` and is not used by another thread during the call;
/// `node` is a NUL-terminated string; `reply_json` is a valid pointer to write to.
#[no_mangle]
pub unsafe extern "C" fn spares_report_failure(
    client: *mut SparesClient,
    job_id: u32,
    node: *const c_char,
    reply_json: *mut *mut c_char,
) -> c_int {
    guard(|| {
        if client.is_null() || reply_json.is_null() {
            return SPARES_EINVAL;
        }
        // SAFETY: the caller's promises above.
        let (c, out) = unsafe { (&mut *client, &mut *reply_json) };
        *out = ptr::null_mut();
        // SAFETY: NUL-terminated by the caller's promise.
        let Some(node) = (unsafe { str_arg(node) }) else {
            c.set_error("node is NULL or not UTF-8");
            return SPARES_EINVAL;
        };
        let line =
            serde_json::json!({"version": 1, "kind": "fail", "job_id": job_id, "node": node})
                .to_string();
        request(c, &line, out)
    })
}

/// Asks for a re-map of a job's ranks, moving at most `max_moves` ranks (`u32::MAX`: as many
/// as the daemon allows).
///
/// # Safety
/// `client` comes from `spares_connect` and is not used by another thread during the call;
/// `reply_json` is a valid pointer to write to.
#[no_mangle]
pub unsafe extern "C" fn spares_remap(
    client: *mut SparesClient,
    job_id: u32,
    max_moves: u32,
    reply_json: *mut *mut c_char,
) -> c_int {
    guard(|| {
        if client.is_null() || reply_json.is_null() {
            return SPARES_EINVAL;
        }
        // SAFETY: the caller's promises above.
        let (c, out) = unsafe { (&mut *client, &mut *reply_json) };
        *out = ptr::null_mut();
        let mut line = serde_json::json!({"version": 1, "kind": "remap", "job_id": job_id});
        if max_moves != u32::MAX {
            line["max_moves"] = max_moves.into();
        }
        request(c, &line.to_string(), out)
    })
}

/// The job's current map document.
///
/// # Safety
/// `client` comes from `spares_connect` and is not used by another thread during the call;
/// `map_json` is a valid pointer to write to.
#[no_mangle]
pub unsafe extern "C" fn spares_get_map(
    client: *mut SparesClient,
    job_id: u32,
    map_json: *mut *mut c_char,
) -> c_int {
    guard(|| {
        if client.is_null() || map_json.is_null() {
            return SPARES_EINVAL;
        }
        // SAFETY: the caller's promises above.
        let (c, out) = unsafe { (&mut *client, &mut *map_json) };
        *out = ptr::null_mut();
        let line = format!("{{\"version\":1,\"kind\":\"show\",\"job_id\":{job_id}}}");
        let mut reply = ptr::null_mut();
        let st = request(c, &line, &mut reply);
        if reply.is_null() {
            return st;
        }
        // SAFETY: `reply` was made by `to_c` just above.
        let text = unsafe { CString::from_raw(reply) };
        if st != SPARES_OK {
            *out = text.into_raw();
            return st;
        }
        let v: serde_json::Value = match serde_json::from_slice(text.as_bytes()) {
            Ok(v) => v,
            Err(e) => {
                c.set_error(&e.to_string());
                return SPARES_EPROTO;
            }
        };
        *out = to_c(&v["map"].to_string());
        SPARES_OK
    })
}

/// Any request line.
///
/// # Safety
/// `client` comes from `spares_connect` and is not used by another thread during the call;
/// `request_json` is a NUL-terminated string; `reply_json` is a valid pointer to write to.
#[no_mangle]
pub unsafe extern "C" fn spares_request(
    client: *mut SparesClient,
    request_json: *const c_char,
    reply_json: *mut *mut c_char,
) -> c_int {
    guard(|| {
        if client.is_null() || reply_json.is_null() {
            return SPARES_EINVAL;
        }
        // SAFETY: the caller's promises above.
        let (c, out) = unsafe { (&mut *client, &mut *reply_json) };
        *out = ptr::null_mut();
        // SAFETY: NUL-terminated by the caller's promise.
        let Some(line) = (unsafe { str_arg(request_json) }) else {
            c.set_error("request is NULL or not UTF-8");
            return SPARES_EINVAL;
        };
        if line.contains('\n') {
            c.set_error("a request is one line");
            return SPARES_EINVAL;
        }
        request(c, line, out)
    })
}

/// Sets the time one request may take on this client, sending it and receiving the whole
/// reply, in milliseconds (0: wait forever). The default is 60 000.
///
/// # Safety
/// `client` is NULL or comes from `spares_connect` and is not used by another thread during
/// the call.
#[no_mangle]
pub unsafe extern "C" fn spares_set_timeout(client: *mut SparesClient, timeout_ms: u32) -> c_int {
    guard(|| {
        if client.is_null() {
            return SPARES_EINVAL;
        }
        // SAFETY: a live client by the caller's promise.
        let c = unsafe { &mut *client };
        let t = (timeout_ms > 0).then(|| std::time::Duration::from_millis(timeout_ms.into()));
        match c.client.set_timeout(t) {
            Ok(()) => SPARES_OK,
            Err(e) => {
                c.set_error(&e.to_string());
                status_of(&e)
            }
        }
    })
}

/// Sets the largest reply accepted on this client, in bytes (at least 1024). The default is
/// 64 MiB.
///
/// # Safety
/// `client` is NULL or comes from `spares_connect` and is not used by another thread during
/// the call.
#[no_mangle]
pub unsafe extern "C" fn spares_set_max_reply(
    client: *mut SparesClient,
    max_bytes: usize,
) -> c_int {
    guard(|| {
        if client.is_null() || max_bytes < 1024 {
            return SPARES_EINVAL;
        }
        // SAFETY: a live client by the caller's promise.
        unsafe { &mut *client }.client.set_max_reply(max_bytes);
        SPARES_OK
    })
}

/// The last error on a client.
///
/// # Safety
/// `client` is NULL or comes from `spares_connect`. The string lives until the next call on
/// the client.
#[no_mangle]
pub unsafe extern "C" fn spares_last_error(client: *const SparesClient) -> *const c_char {
    const EMPTY: &CStr = cs(b"\0");
    const PANIC: &CStr = cs(b"panic inside libspares\0");
    if client.is_null() {
        return EMPTY.as_ptr();
    }
    // SAFETY: a live client by the caller's promise.
    catch_unwind(AssertUnwindSafe(|| unsafe {
        (*client).last_error.as_ptr()
    }))
    .unwrap_or(PANIC.as_ptr())
}

/// A static description of a status code.
#[no_mangle]
pub extern "C" fn spares_strerror(status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        SPARES_OK => cs(b"success\0"),
        SPARES_EINVAL => cs(b"invalid argument (NULL pointer or not UTF-8)\0"),
        SPARES_ECONNECT => cs(b"cannot connect to sparesd\0"),
        SPARES_EIO => cs(b"connection to sparesd broken\0"),
        SPARES_EPROTO => cs(b"malformed reply from sparesd\0"),
        SPARES_EDAEMON => cs(b"sparesd refused the request\0"),
        SPARES_EPANIC => cs(b"internal error in libspares\0"),
        SPARES_ETIMEDOUT => cs(b"no reply from sparesd within the timeout\0"),
        SPARES_ETOOBIG => cs(b"reply from sparesd longer than the limit\0"),
        _ => cs(b"unknown status\0"),
    };
    s.as_ptr()
}

/// Releases a string returned by this library.
///
/// # Safety
/// `s` is NULL or a string returned by this library and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn spares_free(s: *mut c_char) {
    let _ = guard(|| {
        if !s.is_null() {
            // SAFETY: made by `CString::into_raw` in this library, by the caller's promise.
            drop(unsafe { CString::from_raw(s) });
        }
        SPARES_OK
    });
}

/// Closes a client.
///
/// # Safety
/// `client` is NULL or comes from `spares_connect` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn spares_disconnect(client: *mut SparesClient) {
    let _ = guard(|| {
        if !client.is_null() {
            // SAFETY: made by `Box::into_raw` in `spares_connect`, by the caller's promise.
            drop(unsafe { Box::from_raw(client) });
        }
        SPARES_OK
    });
}
