//! The TCP listener for runtimes on other nodes, authenticated with MUNGE. (Filled in below.)

use std::sync::Arc;

use crate::config::TcpConfig;
use crate::server::{Daemon, DaemonError};

/// Starts the MUNGE-authenticated TCP listener on a background thread.
pub fn start_tcp(_daemon: Arc<Daemon>, tcp: &TcpConfig) -> Result<(), DaemonError> {
    Err(DaemonError::Socket {
        path: tcp.listen.clone().into(),
        why: "the MUNGE TCP listener is not built yet".into(),
    })
}
