//! The TCP listener for runtimes on other nodes, authenticated with MUNGE (as Slurm does).
//!
//! Off unless `[tcp]` is configured. The first line of a TCP connection must be
//! `{"version":1,"kind":"auth","credential":"MUNGE:..."}`: a credential made by the client's
//! munged (`munge_encode`, payload empty or `sparesd`). The daemon decodes it with its own
//! munged (`munge_decode`), which checks the shared key, the time-to-live and that the
//! credential was never used before (replay). The uid inside then stands for the connection,
//! exactly as `SO_PEERCRED`'s uid does on the Unix socket; every later line is an ordinary
//! request. A connection that does not authenticate first gets `forbidden` and is closed; one
//! that sends no whole `auth` line within `auth_timeout_secs`, or a longer one than
//! `max_auth_bytes`, is closed too. Until authenticated, peers share one user's connection
//! limit and none of the slots kept for administrators.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use munge_sys::cred::{decode, encode, MungeError};
use serde::Deserialize;

use crate::config::TcpConfig;
use crate::protocol::{error_line, ErrorCode, ProtoError};
use crate::server::{serve_conn, Daemon, DaemonError, SlotOwner};
use crate::sys::Peer;

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
                if daemon.stopping() {
                    break;
                }
                let stream = match conn {
                    Ok(s) => s,
                    Err(e) => {
                        daemon.log_refusal(|| format!("tcp accept: {e}"));
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                // Until it authenticates, a peer is counted with every other unauthenticated
                // one, under one user's limit, and outside the administrators' reserve.
                let slot = match daemon.admit(SlotOwner::Unauthenticated) {
                    Ok(s) => s,
                    Err(e) => {
                        daemon.log_refusal(|| {
                            format!(
                                "tcp {:?}: connection refused: {}",
                                stream.peer_addr().ok(),
                                e.message
                            )
                        });
                        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
                        let _ = std::io::Write::write_all(
                            &mut &stream,
                            format!("{}\n", error_line(&e)).as_bytes(),
                        );
                        continue;
                    }
                };
                let d = Arc::clone(&daemon);
                let sock = munge_socket.clone();
                let spawned = std::thread::Builder::new()
                    .name("tcp-conn".into())
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        let addr = stream.peer_addr().ok();
                        let _ = stream.set_nodelay(true);
                        let auth = |line: &[u8]| {
                            let r = authenticate(line, sock.as_deref());
                            match &r {
                                Ok(p) => log::info!("tcp {addr:?}: authenticated as uid {}", p.uid),
                                Err(e) => d.log_refusal(|| {
                                    format!("tcp {addr:?}: refused: {}", e.message)
                                }),
                            }
                            r
                        };
                        serve_conn(&d, stream, slot, None, &auth);
                    });
                if let Err(e) = spawned {
                    log::error!("cannot start a TCP connection thread: {e}; connection dropped");
                }
            }
        })
        .map_err(|e| DaemonError::Socket {
            path: tcp.listen.clone().into(),
            why: format!("cannot start the TCP thread: {e}"),
        })?;
    Ok(())
}
