//! The daemon: authorization, request handling, the Unix socket listener and its connections.
//!
//! One mutex protects the registry. A change is decided and journaled under it, then the
//! handler waits (outside it) until the journal is on disk, and only then replies. A query
//! waits the same way for the last change of what it shows, so no reply ever reveals a state
//! that a crash could take back.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::value::RawValue;
use topology::hostlist;

use crate::config::Config;
use crate::protocol::{error_line, ok_line, parse_request, ErrorCode, ProtoError, Request};
use crate::registry::{JobSummary, Prepared, Registry, Reply, Substitution};
use crate::store::{Store, StoreError};
use crate::sys::Peer;

/// What can stop the daemon from starting.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The state directory.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The configuration.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// The socket.
    #[error("socket {path}: {why}")]
    Socket {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        why: String,
    },
}

/// A running daemon's shared state.
pub struct Daemon {
    registry: Mutex<Registry>,
    store: Store,
    admins: Vec<u32>,
    config: Config,
    started: Instant,
    connections: AtomicUsize,
}

#[derive(Serialize)]
struct FailBody<'a> {
    job_id: u32,
    #[serde(flatten)]
    record: &'a Substitution,
    map: &'a RawValue,
}

#[derive(Serialize)]
struct ShowBody<'a> {
    job_id: u32,
    uid: u32,
    lost: bool,
    collisions: u32,
    failed: Vec<String>,
    history: &'a [Substitution],
    map: &'a RawValue,
}

#[derive(Serialize)]
struct NodeDownResult {
    job_id: u32,
    #[serde(flatten)]
    record: Substitution,
}

fn forbidden(peer: &Peer, what: &str) -> ProtoError {
    log::warn!(
        "refused: uid {} (pid {}) may not {what}",
        peer.uid,
        peer.pid
    );
    ProtoError::new(
        ErrorCode::Forbidden,
        format!("uid {} may not {what}", peer.uid),
    )
}

impl Daemon {
    /// Opens the state directory and recovers every acknowledged job.
    pub fn open(config: Config) -> Result<Daemon, DaemonError> {
        config.check()?;
        let admins = config.admin_uids()?;
        let (store, rec) = Store::open(&config.state_dir, config.snapshot_every)?;
        for w in &rec.warnings {
            log::warn!("{w}");
        }
        log::info!(
            "state {}: {} job(s) recovered, {} journal record(s) replayed{}",
            config.state_dir.display(),
            rec.registry.len(),
            rec.replayed,
            if rec.torn_bytes > 0 {
                format!(", {} torn byte(s) cut", rec.torn_bytes)
            } else {
                String::new()
            }
        );
        Ok(Daemon {
            registry: Mutex::new(rec.registry),
            store,
            admins,
            config,
            started: Instant::now(),
            connections: AtomicUsize::new(0),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn is_admin(&self, uid: u32) -> bool {
        self.admins.contains(&uid)
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // A panic while holding the lock cannot leave a half-made change: changes are built
        // on copies and installed by one assignment. So a poisoned lock is still consistent.
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Answers one request line (without its newline) from `peer`: the reply line.
    pub fn handle_line(&self, line: &[u8], peer: &Peer) -> String {
        let result = parse_request(line).and_then(|req| self.handle(req, peer));
        match result {
            Ok(reply) => reply,
            Err(e) => {
                log::debug!("uid {}: error {}", peer.uid, e);
                error_line(&e)
            }
        }
    }

    /// Answers a parsed request.
    pub fn handle(&self, req: Request, peer: &Peer) -> Result<String, ProtoError> {
        let admin = self.is_admin(peer.uid);
        match req {
            Request::Health => Ok(ok_line(&serde_json::json!({
                "status": "ok",
                "daemon_version": env!("CARGO_PKG_VERSION"),
                "protocol": crate::protocol::PROTOCOL_VERSION,
                "jobs": self.lock().len(),
                "uptime_s": self.started.elapsed().as_secs(),
                "journal_seq": self.store.written_seq(),
                "uid": peer.uid,
                "admin": admin,
            }))),
            Request::List => {
                let jobs: Vec<JobSummary> = self
                    .lock()
                    .jobs()
                    .filter(|j| admin || j.uid == peer.uid)
                    .map(|j| j.summary())
                    .collect();
                Ok(ok_line(&serde_json::json!({ "jobs": jobs })))
            }
            Request::Show { job_id } => {
                let (line, seq) = {
                    let reg = self.lock();
                    let job = reg.get(job_id)?;
                    if !admin && job.uid != peer.uid {
                        return Err(forbidden(peer, &format!("read job {job_id}")));
                    }
                    let line = ok_line(&ShowBody {
                        job_id,
                        uid: job.uid,
                        lost: job.is_lost(),
                        collisions: job.collisions(),
                        failed: job.failed_nodes(),
                        history: &job.history,
                        map: job.map_json(),
                    });
                    (line, job.last_seq)
                };
                self.store.sync_to(seq);
                Ok(line)
            }
            Request::Register { job_id, uid, map } => {
                if !admin {
                    return Err(forbidden(peer, &format!("register job {job_id}")));
                }
                self.change(
                    |reg| reg.prepare_register(job_id, uid, *map),
                    |reg, reply| {
                        let created = matches!(reply, Reply::Registered { created: true, .. });
                        let job = reg.get(job_id).expect("just registered");
                        if created {
                            log::info!(
                                "job {job_id} registered by uid {} for uid {uid}: {} ranks, {} free nodes, method {}",
                                peer.uid,
                                job.ranks(),
                                job.free_nodes(),
                                job.summary().method
                            );
                        }
                        ok_line(&serde_json::json!({
                            "job_id": job_id,
                            "created": created,
                            "ranks": job.ranks(),
                            "free": job.free_nodes(),
                            "collisions": job.collisions(),
                        }))
                    },
                )
            }
            Request::Fail { job_id, node } => {
                {
                    let reg = self.lock();
                    let job = reg.get(job_id)?;
                    if !admin && job.uid != peer.uid {
                        return Err(forbidden(peer, &format!("report failures of job {job_id}")));
                    }
                }
                // The owner check is repeated inside: the job may be released and registered
                // again for another owner between the two locks.
                self.change(
                    |reg| {
                        let job = reg.get(job_id)?;
                        if !admin && job.uid != peer.uid {
                            return Err(forbidden(
                                peer,
                                &format!("report failures of job {job_id}"),
                            ));
                        }
                        reg.prepare_fail(job_id, &node)
                    },
                    |reg, reply| {
                        let Reply::Failed { record, .. } = reply else {
                            unreachable!("a failure answers with a record")
                        };
                        let job = reg.get(job_id).expect("the job is registered");
                        ok_line(&FailBody {
                            job_id,
                            record,
                            map: job.map_json(),
                        })
                    },
                )
            }
            Request::NodeDown { nodes } => {
                if !admin {
                    return Err(forbidden(peer, "report nodes down"));
                }
                self.node_down(&nodes, peer)
            }
            Request::Release { job_id } => {
                if !admin {
                    return Err(forbidden(peer, &format!("release job {job_id}")));
                }
                self.change(
                    |reg| reg.prepare_release(job_id),
                    |_, _| {
                        log::info!("job {job_id} released by uid {}", peer.uid);
                        ok_line(&serde_json::json!({"job_id": job_id, "released": true}))
                    },
                )
            }
        }
    }

    /// Decides a change, journals and installs it, renders the reply under the same lock, and
    /// returns the reply once the change is durable.
    fn change(
        &self,
        decide: impl FnOnce(&Registry) -> Result<Prepared, ProtoError>,
        render: impl FnOnce(&Registry, &Reply) -> String,
    ) -> Result<String, ProtoError> {
        let (line, seq) = {
            let mut reg = self.lock();
            match decide(&reg)? {
                Prepared::Unchanged(reply) => {
                    let seq = match &reply {
                        Reply::Registered { job_id, .. } | Reply::Failed { job_id, .. } => {
                            reg.get(*job_id).map(|j| j.last_seq).unwrap_or(0)
                        }
                        Reply::Released { .. } => 0,
                    };
                    (render(&reg, &reply), seq)
                }
                Prepared::Change {
                    change,
                    apply,
                    reply,
                } => {
                    let seq = self.store.append(&change).map_err(|e| {
                        log::error!("journal: {e}");
                        ProtoError::new(
                            ErrorCode::Internal,
                            format!("the change could not be recorded, nothing changed: {e}"),
                        )
                    })?;
                    reg.commit(apply, seq);
                    if let Reply::Failed { job_id, record } = &reply {
                        log::info!(
                            "job {job_id}: node {} failed (step {}): {}{}, {} move(s), collisions {} -> {}{}",
                            record.node,
                            record.step,
                            record.outcome,
                            record
                                .method_used
                                .as_ref()
                                .map(|m| format!(" {m}"))
                                .unwrap_or_default(),
                            record.moves.len(),
                            record.collisions_before,
                            record.collisions_after,
                            if record.lost { ", JOB LOST" } else { "" }
                        );
                    }
                    if let Err(e) = self.store.maybe_snapshot(&reg) {
                        // The journal still holds everything: a failed snapshot costs only
                        // replay time at the next start.
                        log::error!("snapshot: {e}");
                    }
                    (render(&reg, &reply), seq)
                }
            }
        };
        self.store.sync_to(seq);
        Ok(line)
    }

    fn node_down(&self, nodes: &str, peer: &Peer) -> Result<String, ProtoError> {
        let names = hostlist::expand(nodes)
            .map_err(|e| ProtoError::new(ErrorCode::BadRequest, e.to_string()))?;
        log::info!("uid {}: nodes down {nodes}", peer.uid);
        let mut results = Vec::new();
        let mut unmatched = Vec::new();
        for name in &names {
            let jobs: Vec<u32> = self
                .lock()
                .jobs()
                .filter(|j| j.has_host(name))
                .map(|j| j.job_id)
                .collect();
            if jobs.is_empty() {
                unmatched.push(name.clone());
            }
            for job_id in jobs {
                let mut rec = None;
                let r = self.change(
                    |reg| reg.prepare_fail(job_id, name),
                    |_, reply| {
                        if let Reply::Failed { record, .. } = reply {
                            rec = Some(record.clone());
                        }
                        String::new()
                    },
                );
                match (r, rec) {
                    (Ok(_), Some(record)) => results.push(NodeDownResult { job_id, record }),
                    // Released meanwhile: nothing to do for it.
                    (Err(e), _) if e.code == ErrorCode::UnknownJob => {}
                    (Err(e), _) => return Err(e),
                    (Ok(_), None) => {}
                }
            }
        }
        Ok(ok_line(&serde_json::json!({
            "nodes": names.len(),
            "results": results,
            "unmatched": hostlist::compress(&unmatched),
        })))
    }
}

enum ReadLine {
    Line,
    Eof,
    TooLarge,
}

/// Reads one request line into `buf` (newline and a trailing `\r` removed), refusing lines
/// longer than `max` without buffering them.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<ReadLine> {
    buf.clear();
    loop {
        let avail = r.fill_buf()?;
        if avail.is_empty() {
            // A last request without its newline is still answered (as whatever it parses to).
            return Ok(if buf.is_empty() {
                ReadLine::Eof
            } else {
                ReadLine::Line
            });
        }
        if let Some(i) = avail.iter().position(|&b| b == b'\n') {
            if buf.len() + i > max {
                return Ok(ReadLine::TooLarge);
            }
            buf.extend_from_slice(&avail[..i]);
            r.consume(i + 1);
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
            return Ok(ReadLine::Line);
        }
        let n = avail.len();
        if buf.len() + n > max {
            return Ok(ReadLine::TooLarge);
        }
        buf.extend_from_slice(avail);
        r.consume(n);
    }
}

/// An authentication step for connections whose peer the socket does not tell (TCP): the
/// first line in, the peer out.
pub type Authenticate<'a> = &'a dyn Fn(&[u8]) -> Result<Peer, ProtoError>;

/// Serves one connection: request lines in, reply lines out, until EOF or an error. Without a
/// `peer`, the first line goes to `authenticate`; a refusal closes the connection.
pub fn serve_stream<S: io::Read + Write>(
    daemon: &Daemon,
    stream: S,
    writer: S,
    mut peer: Option<Peer>,
    authenticate: Authenticate<'_>,
) {
    let mut reader = BufReader::with_capacity(64 * 1024, stream);
    let mut writer = io::BufWriter::with_capacity(64 * 1024, writer);
    let mut buf = Vec::new();
    let max = daemon.config.max_request_bytes;
    let uid = |p: &Option<Peer>| p.map_or(u32::MAX, |p| p.uid);
    loop {
        let reply = match read_line(&mut reader, &mut buf, max) {
            Ok(ReadLine::Line) => match &peer {
                Some(p) => daemon.handle_line(&buf, p),
                None => match authenticate(&buf) {
                    Ok(p) => {
                        peer = Some(p);
                        ok_line(&serde_json::json!({"uid": p.uid, "gid": p.gid}))
                    }
                    Err(e) => {
                        let _ = writer.write_all(error_line(&e).as_bytes());
                        let _ = writer.write_all(b"\n");
                        let _ = writer.flush();
                        return;
                    }
                },
            },
            Ok(ReadLine::Eof) => return,
            Ok(ReadLine::TooLarge) => {
                log::warn!(
                    "uid {}: request longer than {max} bytes refused; closing the connection",
                    uid(&peer)
                );
                let e = ProtoError::new(
                    ErrorCode::TooLarge,
                    format!(
                        "a request line may hold at most {max} bytes; the connection is closed"
                    ),
                );
                let _ = writer.write_all(error_line(&e).as_bytes());
                let _ = writer.write_all(b"\n");
                let _ = writer.flush();
                return;
            }
            Err(e) => {
                if e.kind() != io::ErrorKind::WouldBlock && e.kind() != io::ErrorKind::TimedOut {
                    log::debug!("uid {}: read: {e}", uid(&peer));
                }
                return;
            }
        };
        if buf.capacity() > 1 << 20 {
            buf = Vec::new(); // do not keep a huge buffer for an idle connection
        }
        if writer.write_all(reply.as_bytes()).is_err()
            || writer.write_all(b"\n").is_err()
            || writer.flush().is_err()
        {
            return;
        }
    }
}

/// Binds the Unix socket: creates its directory (0755), replaces a stale socket file (one
/// nobody answers on), refuses to steal a live one, and sets the socket's mode.
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, DaemonError> {
    let err = |why: String| DaemonError::Socket {
        path: path.to_path_buf(),
        why,
    };
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
        }
    }
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(err("another daemon answers on this socket".into()));
        }
        std::fs::remove_file(path)
            .map_err(|e| err(format!("cannot remove the stale socket: {e}")))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| err(format!("cannot set its mode: {e}")))?;
    Ok(listener)
}

/// Accepts connections forever, one thread each.
pub fn serve(daemon: Arc<Daemon>, listener: UnixListener) {
    for conn in listener.incoming() {
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                log::warn!("accept: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let d = Arc::clone(&daemon);
        spawn_connection(d, stream);
    }
}

/// The reply to a connection over `max_connections`.
pub(crate) fn busy_line() -> String {
    error_line(&ProtoError::new(
        ErrorCode::Busy,
        "too many connections; try again later",
    ))
}

impl Daemon {
    /// Counts a new connection; false (and not counted) when `max_connections` are served.
    pub(crate) fn take_slot(&self) -> bool {
        let n = self.connections.fetch_add(1, Ordering::AcqRel) + 1;
        if n > self.config.max_connections {
            self.connections.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Gives a connection's slot back when dropped (even by a panic).
    pub(crate) fn slot(&self) -> Slot<'_> {
        Slot(&self.connections)
    }
}

/// Decrements the connection count when a connection's thread ends, even by a panic.
pub(crate) struct Slot<'a>(&'a AtomicUsize);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn spawn_connection(daemon: Arc<Daemon>, mut stream: UnixStream) {
    let peer = match crate::sys::peer_cred(&stream) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("SO_PEERCRED: {e}; connection dropped");
            return;
        }
    };
    if !daemon.take_slot() {
        log::warn!("uid {}: too many connections; refused", peer.uid);
        let _ = stream.write_all(format!("{}\n", busy_line()).as_bytes());
        return;
    }
    let timeout = Duration::from_secs(daemon.config.idle_timeout_secs.max(1));
    let _ = stream.set_read_timeout(Some(timeout));
    let _ = stream.set_write_timeout(Some(timeout));
    let spawned = std::thread::Builder::new()
        .name(format!("conn-uid{}", peer.uid))
        .stack_size(256 * 1024)
        .spawn(move || {
            let _slot = daemon.slot();
            let Ok(w) = stream.try_clone() else { return };
            let no_auth = |_: &[u8]| -> Result<Peer, ProtoError> {
                unreachable!("the socket tells the peer")
            };
            serve_stream(&daemon, stream, w, Some(peer), &no_auth);
        });
    if let Err(e) = spawned {
        log::error!("cannot start a connection thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_limited_without_buffering_them() {
        let mut buf = Vec::new();
        let mut r = io::Cursor::new(b"abc\r\ndef\nlonglonglong\n".to_vec());
        assert!(matches!(
            read_line(&mut r, &mut buf, 5).unwrap(),
            ReadLine::Line
        ));
        assert_eq!(buf, b"abc");
        assert!(matches!(
            read_line(&mut r, &mut buf, 5).unwrap(),
            ReadLine::Line
        ));
        assert_eq!(buf, b"def");
        assert!(matches!(
            read_line(&mut r, &mut buf, 5).unwrap(),
            ReadLine::TooLarge
        ));
        let mut r = io::Cursor::new(b"tail".to_vec());
        assert!(matches!(
            read_line(&mut r, &mut buf, 5).unwrap(),
            ReadLine::Line
        ));
        assert!(matches!(
            read_line(&mut r, &mut buf, 5).unwrap(),
            ReadLine::Eof
        ));
    }
}
