//! sparesd: the spare-node substitution daemon of the `spares` project.
//!
//! It keeps a registry of jobs (owner, map, failed nodes, the answer to every failure), answers
//! requests of wire protocol v1 (`docs/protocol.md`) on a Unix socket (and, when configured, on
//! a MUNGE-authenticated TCP port), and makes every acknowledged change durable first. The
//! model crate `topology` decides every substitution: the daemon gives exactly the answers of
//! `spares substitute` for the same map and failures.
//!
//! - [`protocol`]: requests, replies, error codes.
//! - [`registry`]: jobs and their histories in memory; changes prepared on copies, then
//!   committed.
//! - [`store`]: the journal and snapshots under the state directory.
//! - [`server`]: authorization, request handling, the socket listener.
//! - [`config`]: the TOML configuration.
//! - [`munge`]: the TCP listener's MUNGE authentication.
//! - [`sys`]: the few system calls std does not wrap (`SO_PEERCRED`, `flock`, `getpwnam_r`).

pub mod config;
pub mod munge;
pub mod protocol;
pub mod registry;
pub mod server;
pub mod store;
pub mod sys;

use std::sync::Arc;

pub use config::Config;
pub use server::{Daemon, DaemonError};

/// Opens the state, binds the socket and serves it on a background thread: for tests and for
/// embedding. The daemon binary does the same on its main thread.
pub fn start(config: Config) -> Result<Arc<Daemon>, DaemonError> {
    let daemon = Arc::new(Daemon::open(config)?);
    let listener = server::bind(&daemon.config().socket, daemon.config().socket_mode)?;
    let d = Arc::clone(&daemon);
    std::thread::Builder::new()
        .name("accept".into())
        .spawn(move || server::serve(d, listener))
        .map_err(|e| DaemonError::Socket {
            path: daemon.config().socket.clone(),
            why: format!("cannot start the accept thread: {e}"),
        })?;
    if let Some(tcp) = daemon.config().tcp.clone() {
        munge::start_tcp(Arc::clone(&daemon), &tcp)?;
    }
    Ok(daemon)
}

/// `text` with its control characters written as escapes (`\n`, `\u{1b}`), so that a log record
/// stays on one line whatever a client put in it.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod escape_tests {
    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(super::escape_controls("job 7: \"a\" ok"), "job 7: \"a\" ok");
        assert_eq!(
            super::escape_controls("node06\nFORGED line\r\u{1b}[31m"),
            "node06\\nFORGED line\\r\\u{1b}[31m"
        );
    }
}
