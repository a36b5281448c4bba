//! The daemon's few system calls that std does not wrap, each behind a safe function. This is
//! the only module of the daemon with `unsafe` (besides the MUNGE binding in `munge.rs`):
//! `SO_PEERCRED`, `flock`, `getpwnam_r`, the signal mask and `sigwait`, `RLIMIT_NOFILE`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;

/// The credentials of the process at the other end of a Unix socket (`SO_PEERCRED`): the
/// kernel fills them in at connect time, so a client cannot lie about them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
    /// Process id (0 when unknown, e.g. over TCP).
    pub pid: i32,
}

/// `getsockopt(SO_PEERCRED)` of a connected Unix stream socket.
pub fn peer_cred(stream: &UnixStream) -> io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are live locals of the size given; the fd is open for the call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Peer {
        uid: cred.uid,
        gid: cred.gid,
        pid: cred.pid,
    })
}

/// Shuts down a listening socket for reading: a thread blocked in `accept` on it returns
/// (EINVAL on Linux), and no connection is accepted any more.
pub fn wake_accept(listener: &std::os::unix::net::UnixListener) -> io::Result<()> {
    // SAFETY: shutdown on a descriptor the listener owns, for as long as the borrow lasts.
    let rc = unsafe { libc::shutdown(listener.as_raw_fd(), libc::SHUT_RD) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Takes an exclusive `flock` on a file without waiting; false when another process holds it.
pub fn try_lock_exclusive(file: &File) -> bool {
    // SAFETY: flock on a file descriptor we own; no memory is involved.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Drops a file's clean pages from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`), so
/// that the next read comes from the disk. After a failed writeback the kernel keeps the unwritten
/// data as clean cached pages: reading them would show records that never reached the disk.
pub fn drop_cached_pages(file: &File) -> io::Result<()> {
    // SAFETY: posix_fadvise on a file descriptor we own; offset 0 and length 0 mean the whole
    // file; no memory is involved.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// The name of a uid (`getpwuid_r`), or None when no user has it.
pub fn user_name(uid: u32) -> Option<String> {
    // SAFETY: an all-zero passwd is a valid value of this plain C struct.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwuid_r writes into `pwd` and `buf`, both live and of the sizes passed.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result) };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string inside `buf`, still live.
    let name = unsafe { std::ffi::CStr::from_ptr(pwd.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

/// The uid of a user name (`getpwnam_r`), or None when there is no such user.
pub fn uid_of(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    // SAFETY: an all-zero passwd is a valid value of this plain C struct.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16384];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: getpwnam_r writes into `pwd` and `buf`, both live and of the sizes passed.
    let rc = unsafe {
        libc::getpwnam_r(
            c.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    (rc == 0 && !result.is_null()).then_some(pwd.pw_uid)
}

/// The effective uid of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A set of signals blocked in every thread and taken synchronously by [`wait_signal`]: the
/// daemon's handling of SIGTERM and SIGHUP runs as ordinary code on one thread, not in a
/// signal handler.
pub struct BlockedSignals(libc::sigset_t);

/// Blocks `signals` in the calling thread and in every thread it starts afterwards (call it
/// before starting any). Children started with `std::process::Command` get an empty mask.
pub fn block_signals(signals: &[libc::c_int]) -> io::Result<BlockedSignals> {
    // SAFETY: an all-zero sigset_t is a valid value that sigemptyset then initialises.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live local; sigemptyset/sigaddset only write into it.
    unsafe {
        libc::sigemptyset(&mut set);
        for &s in signals {
            if libc::sigaddset(&mut set, s) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    // SAFETY: `set` is initialised; the old mask is not asked for (NULL).
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(BlockedSignals(set))
}

/// Waits until one of the blocked signals arrives; the signal number.
pub fn wait_signal(set: &BlockedSignals) -> io::Result<libc::c_int> {
    let mut sig: libc::c_int = 0;
    // SAFETY: `set.0` was initialised by `block_signals`; `sig` is a live local.
    let rc = unsafe { libc::sigwait(&set.0, &mut sig) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(sig)
}

/// Raises the soft limit of open descriptors to the hard limit (each connection holds one);
/// the soft limit now in force.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a live local of the type getrlimit writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let want = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: `want` is a live, initialised local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            lim.rlim_cur = lim.rlim_max;
        }
    }
    Ok(lim.rlim_cur)
}

/// Lowers the calling thread's CPU priority to `nice` (Linux: the nice value is per thread),
/// so that the work done for ordinary users yields the processor to root's and the Slurm
/// user's requests.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid has no preconditions; setpriority on our own thread id touches no memory.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, nice) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
