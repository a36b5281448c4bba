//! libspares against servers that misbehave: it returns a status, never hangs forever and
//! never aborts the caller (the header's promise).

use std::ffi::{CStr, CString};
use std::io::Write;
use std::os::unix::net::{UnixListener, UnixStream};
use std::ptr;
use std::time::Duration;

use spares::*;

fn fake_server(dir: &std::path::Path, behave: fn(UnixStream)) -> CString {
    let path = dir.join("fake.sock");
    let l = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || behave(s));
        }
    });
    CString::new(path.to_str().unwrap()).unwrap()
}

fn silent(s: UnixStream) {
    std::thread::sleep(Duration::from_secs(120));
    drop(s);
}

fn endless(mut s: UnixStream) {
    let chunk = vec![b'x'; 1 << 16];
    while s.write_all(&chunk).is_ok() {}
}

fn connect(path: &CString) -> *mut SparesClient {
    let mut c = ptr::null_mut();
    // SAFETY: a valid path and out pointer.
    assert_eq!(unsafe { spares_connect(path.as_ptr(), &mut c) }, SPARES_OK);
    c
}

fn health(c: *mut SparesClient) -> (i32, *mut std::ffi::c_char) {
    let req = CString::new(r#"{"version":1,"kind":"health"}"#).unwrap();
    let mut reply = ptr::null_mut();
    // SAFETY: a live client, a valid string and out pointer.
    let st = unsafe { spares_request(c, req.as_ptr(), &mut reply) };
    (st, reply)
}

#[test]
fn libspares_times_out_on_a_daemon_that_never_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let path = fake_server(tmp.path(), silent);
    let c = connect(&path);
    // SAFETY: a live client.
    assert_eq!(unsafe { spares_set_timeout(c, 300) }, SPARES_OK);
    let (st, reply) = health(c);
    assert_eq!(st, SPARES_ETIMEDOUT);
    assert!(reply.is_null());
    // SAFETY: a live client; the error string lives until the next call.
    let msg = unsafe { CStr::from_ptr(spares_last_error(c)) }
        .to_str()
        .unwrap();
    assert!(msg.contains("did not answer"), "{msg}");
    // SAFETY: a live client, not used afterwards.
    unsafe { spares_disconnect(c) };
}

#[test]
fn libspares_refuses_an_endless_reply_without_aborting() {
    let tmp = tempfile::tempdir().unwrap();
    let path = fake_server(tmp.path(), endless);
    let c = connect(&path);
    // SAFETY: a live client.
    assert_eq!(unsafe { spares_set_max_reply(c, 1 << 20) }, SPARES_OK);
    // SAFETY: as above.
    assert_eq!(unsafe { spares_set_max_reply(c, 10) }, SPARES_EINVAL);
    let (st, reply) = health(c);
    assert_eq!(st, SPARES_ETOOBIG);
    assert!(reply.is_null());
    // SAFETY: a live client, not used afterwards.
    unsafe { spares_disconnect(c) };
    // With the default limit too: on old main the library read until memory ran out.
    let c = connect(&path);
    let (st, _) = health(c);
    assert_eq!(st, SPARES_ETOOBIG);
    // SAFETY: a live client, not used afterwards.
    unsafe { spares_disconnect(c) };
    // SAFETY: a static string for any status.
    let s = unsafe { CStr::from_ptr(spares_strerror(SPARES_ETOOBIG)) };
    assert!(s.to_str().unwrap().contains("limit"));
}
