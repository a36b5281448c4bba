//! The daemon: authorization, request handling, the Unix socket listener and its connections.
//!
//! One mutex protects the registry. A change is decided and journaled under it, then the
//! handler waits (outside it) until the journal is on disk, and only then replies. A query
//! waits the same way for the last change of what it shows, so no reply ever reveals a state
//! that a crash could take back.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use topology::hostlist;

use crate::config::Config;
use crate::protocol::{error_line, ok_line, parse_request, ErrorCode, ProtoError, Request};
use crate::registry::{
    unix_now, Job, JobSummary, Prepared, Registry, ReleasedJob, RemapRecord, Reply, SharedJson,
    Substitution,
};
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
    /// A thread of the daemon.
    #[error("cannot start the {what} thread: {why}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// The system's answer.
        why: String,
    },
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
    slots: Mutex<SlotCounts>,
    /// Requests being handled, per user other than an administrator.
    user_requests: Mutex<HashMap<u32, usize>>,
    user_turn: Condvar,
    /// Bytes of request lines buffered by every connection together.
    buffered: AtomicUsize,
    /// Requests read whole and not yet answered (SIGTERM waits for them).
    in_flight: AtomicUsize,
    stopping: AtomicBool,
    /// A second handle on the listening socket while [`serve`] runs: [`Daemon::stop`] shuts
    /// it down to wake `accept`, whatever became of the socket's path meanwhile.
    accepting: Mutex<Option<UnixListener>>,
    refusals: RateLimited,
    /// Held while a re-map's search runs: one at a time, so re-maps take at most one
    /// processor whoever asks.
    remap_turn: Mutex<()>,
}

#[derive(Serialize)]
struct FailBody {
    job_id: u32,
    #[serde(flatten)]
    record: Substitution,
    map: SharedJson,
}

#[derive(Serialize)]
struct RemapBody {
    job_id: u32,
    #[serde(flatten)]
    record: RemapRecord,
    /// Whether the daemon's `[remap]` caps cut the budget asked for.
    capped: bool,
    map: SharedJson,
}

#[derive(Serialize)]
struct ShowBody {
    job_id: u32,
    uid: u32,
    lost: bool,
    collisions: u32,
    failed: Vec<String>,
    #[serde(serialize_with = "serialize_shared")]
    history: Arc<Vec<Substitution>>,
    #[serde(serialize_with = "serialize_shared")]
    remaps: Arc<Vec<RemapRecord>>,
    map: SharedJson,
    /// Set for a released job (Unix seconds): the map is the one it had then.
    #[serde(skip_serializing_if = "Option::is_none")]
    released_at: Option<u64>,
}

fn serialize_shared<T: Serialize, S: serde::Serializer>(
    v: &Arc<T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    v.as_ref().serialize(s)
}

/// Most released jobs one `history` reply lists (the newest).
pub const HISTORY_REPLY_JOBS: usize = 10_000;

#[derive(Serialize)]
struct HistoryEntry {
    #[serde(flatten)]
    summary: JobSummary,
    released_at: u64,
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

/// The answer to a user asking about a job that is not theirs, and to one asking about a job
/// that does not exist: the same, so that no user learns which job ids exist.
fn not_yours(peer: &Peer, job_id: u32) -> ProtoError {
    ProtoError::new(
        ErrorCode::UnknownJob,
        format!("uid {} has no job {job_id} registered", peer.uid),
    )
}

/// The job `peer` may act on: any job for an administrator, else only their own.
fn owned_job<'r>(
    reg: &'r Registry,
    job_id: u32,
    peer: &Peer,
    admin: bool,
    what: &str,
) -> Result<&'r Job, ProtoError> {
    if admin {
        return reg.get(job_id);
    }
    match reg.get(job_id) {
        Ok(job) if job.uid == peer.uid => Ok(job),
        Ok(_) => {
            // Logged for the site, answered as for a job that does not exist.
            log::warn!(
                "refused: uid {} (pid {}) may not {what} job {job_id}",
                peer.uid,
                peer.pid
            );
            Err(not_yours(peer, job_id))
        }
        Err(_) => Err(not_yours(peer, job_id)),
    }
}

/// A released job whose history `peer` may read (the same rule as for a live job); None
/// answers as for a job that does not exist.
fn owned_released<'r>(
    reg: &'r Registry,
    job_id: u32,
    peer: &Peer,
    admin: bool,
) -> Option<&'r ReleasedJob> {
    reg.released(job_id, unix_now())
        .filter(|j| admin || j.summary.uid == peer.uid)
}

impl Daemon {
    /// Opens the state directory and recovers every acknowledged job.
    pub fn open(config: Config) -> Result<Daemon, DaemonError> {
        config.check()?;
        let admins = config.admin_uids()?;
        // One descriptor per connection, plus the journal, listeners and a margin.
        match crate::sys::raise_fd_limit() {
            Ok(n) if (n as usize) < config.max_connections + 64 => log::warn!(
                "the descriptor limit {n} is below max_connections = {} + 64: connections may be refused by accept (EMFILE) before the limit; raise LimitNOFILE or lower max_connections",
                config.max_connections
            ),
            Ok(_) => {}
            Err(e) => log::warn!("RLIMIT_NOFILE: {e}"),
        }
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
        let mut registry = rec.registry;
        registry.set_retention(config.retention(), unix_now());
        Ok(Daemon {
            registry: Mutex::new(registry),
            store,
            admins,
            config,
            started: Instant::now(),
            slots: Mutex::new(SlotCounts::default()),
            user_requests: Mutex::new(HashMap::new()),
            user_turn: Condvar::new(),
            buffered: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            accepting: Mutex::new(None),
            refusals: RateLimited::default(),
            remap_turn: Mutex::new(()),
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
                // The message may quote the request: escaped, it cannot forge log lines.
                log::debug!("uid {}: error {}", peer.uid, e.to_string().escape_debug());
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
                // The launchers' policy: whether to re-map at a relaunch, and how far.
                "remap": {
                    "at_relaunch": self.config.remap.at_relaunch,
                    "relaunch_max_moves": self.config.remap.relaunch_max_moves,
                    "max_moves": self.config.remap.max_moves,
                },
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
            Request::History { since } => {
                let now = unix_now();
                let reg = self.lock();
                // Newest first, at most HISTORY_REPLY_JOBS: the reply of an administrator
                // stays bounded however many histories the budgets keep.
                let mut jobs = Vec::new();
                let mut more = false;
                let kept: Box<dyn Iterator<Item = &ReleasedJob>> = if admin {
                    Box::new(reg.released_jobs(now).rev())
                } else {
                    Box::new(reg.released_jobs_of(peer.uid, now).rev())
                };
                for j in kept {
                    if j.released_at < since {
                        continue;
                    }
                    if jobs.len() == HISTORY_REPLY_JOBS {
                        more = true;
                        break;
                    }
                    jobs.push(HistoryEntry {
                        summary: j.summary.clone(),
                        released_at: j.released_at,
                    });
                }
                drop(reg);
                Ok(ok_line(
                    &serde_json::json!({ "jobs": jobs, "truncated": more }),
                ))
            }
            Request::Show { job_id } => {
                // Under the lock only references are taken; the (maybe megabytes of) text is
                // written after, so one user's reads do not stall everybody else.
                let (body, seq) = {
                    let reg = self.lock();
                    match owned_job(&reg, job_id, peer, admin, "read") {
                        Ok(job) => {
                            let body = ShowBody {
                                job_id,
                                uid: job.uid,
                                lost: job.is_lost(),
                                collisions: job.collisions(),
                                failed: job.failed_nodes(),
                                history: Arc::clone(&job.history),
                                remaps: Arc::clone(&job.remaps),
                                map: job.map_json_shared(),
                                released_at: None,
                            };
                            (body, job.last_seq)
                        }
                        Err(e) => {
                            let kept = owned_released(&reg, job_id, peer, admin).ok_or(e)?;
                            let body = ShowBody {
                                job_id,
                                uid: kept.summary.uid,
                                lost: kept.summary.lost,
                                collisions: kept.summary.collisions,
                                failed: kept.failed.clone(),
                                history: Arc::clone(&kept.history),
                                remaps: Arc::clone(&kept.remaps),
                                map: kept.map.clone(),
                                released_at: Some(kept.released_at),
                            };
                            (body, kept.release_seq)
                        }
                    }
                };
                self.store.sync_to(seq);
                Ok(ok_line(&body))
            }
            Request::Register {
                job_id,
                uid,
                map,
                at_start,
            } => {
                if !admin {
                    return Err(forbidden(peer, &format!("register job {job_id}")));
                }
                let body = self.change(
                    |reg| reg.prepare_register_with_start(job_id, uid, *map, at_start),
                    |reg, reply| {
                        let created = matches!(reply, Reply::Registered { created: true, .. });
                        let job = reg.get(job_id).expect("just registered");
                        let summary = job.summary();
                        if created {
                            log::info!(
                                "job {job_id} registered by uid {} for uid {uid}: {} ranks, {} free nodes, method {}",
                                peer.uid,
                                summary.ranks,
                                summary.free,
                                summary.method
                            );
                        }
                        serde_json::json!({
                            "job_id": job_id,
                            "created": created,
                            "ranks": summary.ranks,
                            "free": summary.free,
                            "collisions": summary.collisions,
                        })
                    },
                )?;
                Ok(ok_line(&body))
            }
            Request::Fail { job_id, node } => {
                let body = self.change(
                    |reg| {
                        owned_job(reg, job_id, peer, admin, "report failures of")?;
                        reg.prepare_fail(job_id, &node)
                    },
                    |reg, reply| {
                        let Reply::Failed { record, .. } = reply else {
                            unreachable!("a failure answers with a record")
                        };
                        let job = reg.get(job_id).expect("the job is registered");
                        FailBody {
                            job_id,
                            record: record.clone(),
                            map: job.map_json_shared(),
                        }
                    },
                )?;
                Ok(ok_line(&body))
            }
            Request::Remap {
                job_id,
                max_moves,
                iterations,
                seed,
            } => {
                let (budget, capped) = self.config.remap.budget(max_moves, iterations, seed);
                let what = "re-map";
                let input = {
                    let reg = self.lock();
                    owned_job(&reg, job_id, peer, admin, what)?;
                    reg.remap_input(job_id)?
                };
                // The search runs without the registry lock; a failure meanwhile voids it
                // (`prepare_remap` says `conflict`).
                let found = {
                    let _turn = self.remap_turn.lock().unwrap_or_else(|p| p.into_inner());
                    input.run(&budget)?
                };
                let body = self.change(
                    |reg| {
                        owned_job(reg, job_id, peer, admin, what)?;
                        reg.prepare_remap(&input, &found, &budget)
                    },
                    |reg, reply| {
                        let Reply::Remapped { record, .. } = reply else {
                            unreachable!("a re-map answers with a record")
                        };
                        let job = reg.get(job_id).expect("the job is registered");
                        RemapBody {
                            job_id,
                            record: record.clone(),
                            capped,
                            map: job.map_json_shared(),
                        }
                    },
                )?;
                Ok(ok_line(&body))
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
                    |reg| reg.prepare_release(job_id, unix_now()),
                    |_, _| {
                        log::info!("job {job_id} released by uid {}", peer.uid);
                        ok_line(&serde_json::json!({"job_id": job_id, "released": true}))
                    },
                )
            }
        }
    }

    /// Decides a change, journals and installs it, takes what the reply needs under the same
    /// lock (`render`: shared references, not text), and returns it once the change is durable.
    fn change<T>(
        &self,
        decide: impl FnOnce(&Registry) -> Result<Prepared, ProtoError>,
        render: impl FnOnce(&Registry, &Reply) -> T,
    ) -> Result<T, ProtoError> {
        let (line, seq) = {
            let mut reg = self.lock();
            match decide(&reg)? {
                Prepared::Unchanged(reply) => {
                    let seq = match &reply {
                        Reply::Registered { job_id, .. }
                        | Reply::Failed { job_id, .. }
                        | Reply::Remapped { job_id, .. } => {
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
                    if let Reply::Remapped { job_id, record } = &reply {
                        log::info!(
                            "job {job_id}: re-map {} after failure {}: {} rank(s) moved (at most {}), collisions {} -> {} (lower bound {}), search stopped by {}",
                            record.remap,
                            record.after_step,
                            record.moves.len(),
                            record.max_moves,
                            record.collisions_before,
                            record.collisions_after,
                            record.lower_bound,
                            record.stop
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

/// Who a connection slot is counted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum SlotOwner {
    /// Root, the Slurm user or an `admin_uids` entry: may use the reserved slots.
    Admin(u32),
    /// Any other user: at most `max_connections_per_uid` slots, none of the reserved ones.
    User(u32),
    /// A TCP peer that has not authenticated yet: counted together, like one user.
    Unauthenticated,
}

#[derive(Default)]
struct SlotCounts {
    total: usize,
    per_owner: HashMap<SlotOwner, usize>,
}

/// A connection's slot: given back when dropped (the connection's end, a panic, or a thread
/// that could not be started).
pub(crate) struct Slot {
    daemon: Arc<Daemon>,
    owner: SlotOwner,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.daemon.give_back(self.owner);
    }
}

impl Slot {
    /// Moves the slot to another owner (a TCP peer once authenticated); on refusal the slot
    /// is kept as it was and dropping it gives it back.
    pub(crate) fn transfer(&mut self, owner: SlotOwner) -> Result<(), ProtoError> {
        self.daemon.take(owner)?;
        self.daemon.give_back(self.owner);
        self.owner = owner;
        Ok(())
    }
}

/// Logs a repeated warning at most once a second, with the count of those left out: a flood
/// of refused connections must not become a flood of log lines.
#[derive(Default)]
struct RateLimited {
    last_second: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimited {
    fn warn(&self, started: Instant, msg: impl FnOnce() -> String) {
        let now = started.elapsed().as_secs() + 1;
        let last = self.last_second.load(Ordering::Relaxed);
        if last != now
            && self
                .last_second
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let n = self.suppressed.swap(0, Ordering::Relaxed);
            if n > 0 {
                log::warn!("{} ({n} more like it in the last second)", msg());
            } else {
                log::warn!("{}", msg());
            }
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Daemon {
    /// The owner of a connection from `uid`.
    pub(crate) fn owner_of(&self, uid: u32) -> SlotOwner {
        if self.is_admin(uid) {
            SlotOwner::Admin(uid)
        } else {
            SlotOwner::User(uid)
        }
    }

    fn take(&self, owner: SlotOwner) -> Result<(), ProtoError> {
        let c = &self.config;
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let (limit, what) = match owner {
            SlotOwner::Admin(_) => (c.max_connections, "max_connections"),
            _ => (
                c.max_connections - c.reserved_admin_connections,
                "max_connections - reserved_admin_connections",
            ),
        };
        if slots.total >= limit {
            return Err(ProtoError::new(
                ErrorCode::Busy,
                format!("too many connections ({what} = {limit}); try again later"),
            ));
        }
        let mine = slots.per_owner.get(&owner).copied().unwrap_or(0);
        if !matches!(owner, SlotOwner::Admin(_)) && mine >= c.max_connections_per_uid {
            return Err(ProtoError::new(
                ErrorCode::Busy,
                format!(
                    "{} already hold(s) {mine} connections (max_connections_per_uid = {}); close one or try again later",
                    match owner {
                        SlotOwner::User(uid) => format!("uid {uid}"),
                        _ => "unauthenticated peers".into(),
                    },
                    c.max_connections_per_uid
                ),
            ));
        }
        slots.total += 1;
        *slots.per_owner.entry(owner).or_insert(0) += 1;
        Ok(())
    }

    fn give_back(&self, owner: SlotOwner) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.total = slots.total.saturating_sub(1);
        if let Some(n) = slots.per_owner.get_mut(&owner) {
            *n -= 1;
            if *n == 0 {
                slots.per_owner.remove(&owner);
            }
        }
    }

    /// A slot for a new connection of `owner`, or `busy` naming the limit reached.
    pub(crate) fn admit(self: &Arc<Self>, owner: SlotOwner) -> Result<Slot, ProtoError> {
        self.take(owner)?;
        Ok(Slot {
            daemon: Arc::clone(self),
            owner,
        })
    }

    /// Connections served now (for tests and the log).
    pub fn connections(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).total
    }

    /// Logs a refused connection (rate-limited).
    pub(crate) fn log_refusal(&self, msg: impl FnOnce() -> String) {
        self.refusals.warn(self.started, msg);
    }

    /// Reserves `n` more bytes of the input budget; false when they do not fit.
    fn reserve_input(&self, n: usize, admin: bool) -> bool {
        let max = self.config.max_buffered_bytes;
        // Users other than administrators leave room for one largest administrator request.
        let limit = if admin {
            max
        } else {
            max - self.config.max_request_bytes
        };
        self.buffered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&t| t <= limit)
            })
            .is_ok()
    }

    fn release_input(&self, n: usize) {
        self.buffered.fetch_sub(n, Ordering::AcqRel);
    }

    /// Waits until `uid` has fewer than `max_requests_per_uid` requests being handled, and
    /// counts one more until the turn is dropped.
    fn user_turn(&self, uid: u32) -> UserTurn<'_> {
        let max = self.config.max_requests_per_uid;
        let mut busy = self.user_requests.lock().unwrap_or_else(|p| p.into_inner());
        while busy.get(&uid).copied().unwrap_or(0) >= max {
            busy = self.user_turn.wait(busy).unwrap_or_else(|p| p.into_inner());
        }
        *busy.entry(uid).or_insert(0) += 1;
        UserTurn { daemon: self, uid }
    }

    /// Whether SIGTERM asked the daemon to stop.
    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Stops accepting connections: the accept loop ([`serve`]) returns. Requests under way
    /// go on; [`Daemon::finish`] waits for them.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wakes the accept loop, which sees `stopping` and returns. Not by connecting to the
        // socket's path: once that file is removed (or another daemon's), nothing woke it
        // and SIGTERM went unheeded.
        // Without a handle the loop has not started: it checks `stopping` before it accepts.
        if let Some(listener) = self
            .accepting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            if let Err(e) = crate::sys::wake_accept(listener) {
                log::warn!("cannot wake the accept loop: {e}");
            }
        }
    }

    /// After [`Daemon::stop`]: waits up to `shutdown_grace_secs` for the requests under way,
    /// removes the socket, and says whether every request was answered.
    pub fn finish(&self) -> bool {
        let grace = Duration::from_secs(self.config.shutdown_grace_secs);
        let t = Instant::now();
        let mut done = true;
        loop {
            let n = self.in_flight.load(Ordering::SeqCst);
            if n == 0 {
                break;
            }
            if t.elapsed() >= grace {
                log::warn!(
                    "{n} request(s) still under way after shutdown_grace_secs = {}; exiting without them (none was acknowledged)",
                    self.config.shutdown_grace_secs
                );
                done = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        remove_socket(&self.config.socket);
        done
    }

    /// Asks Slurm which registered jobs it still knows as not ended, and releases the others
    /// (an epilog's `release` that did not reach the daemon). The jobs released, or why the
    /// check could not be made (then nothing is released).
    pub fn reconcile(&self) -> Result<Vec<u32>, String> {
        // Ids taken before asking Slurm: a job registered meanwhile is not judged on an
        // answer older than it.
        let registered: Vec<u32> = self.lock().jobs().map(|j| j.job_id).collect();
        if registered.is_empty() {
            return Ok(Vec::new());
        }
        let active = slurm_active_jobs(&self.config.squeue)?;
        let mut released = Vec::new();
        for job_id in registered.into_iter().filter(|j| !active.contains(j)) {
            match self.change(|reg| reg.prepare_release(job_id, unix_now()), |_, _| ()) {
                Ok(()) => {
                    log::info!(
                        "job {job_id} released: Slurm no longer knows it as running ({} lists it not, or as ended); its epilog's release never arrived",
                        self.config.squeue.display()
                    );
                    released.push(job_id);
                }
                Err(e) if e.code == ErrorCode::UnknownJob => {} // released meanwhile
                Err(e) => return Err(format!("release of job {job_id}: {e}")),
            }
        }
        Ok(released)
    }
}

/// Largest `squeue` output read (about 20 bytes a job).
const MAX_SQUEUE_OUTPUT: u64 = 64 << 20;

/// The ids of the jobs `squeue` lists in a state other than an ended one.
fn slurm_active_jobs(squeue: &Path) -> Result<HashSet<u32>, String> {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(squeue)
        .args(["--noheader", "--states=all", "--format=%A %T"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", squeue.display()))?;
    let mut out = Vec::new();
    let read = child
        .stdout
        .take()
        .map(|o| o.take(MAX_SQUEUE_OUTPUT + 1).read_to_end(&mut out));
    let mut err = Vec::new();
    if let Some(e) = child.stderr.take() {
        let _ = e.take(4096).read_to_end(&mut err);
    }
    let status = child
        .wait()
        .map_err(|e| format!("{}: {e}", squeue.display()))?;
    if let Some(Err(e)) = read {
        return Err(format!("{}: reading its output: {e}", squeue.display()));
    }
    if !status.success() {
        return Err(format!(
            "{} failed ({status}): {}",
            squeue.display(),
            String::from_utf8_lossy(&err).trim().escape_debug()
        ));
    }
    if out.len() as u64 > MAX_SQUEUE_OUTPUT {
        return Err(format!(
            "{} printed more than {MAX_SQUEUE_OUTPUT} bytes",
            squeue.display()
        ));
    }
    const ENDED: &[&str] = &[
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "TIMEOUT",
    ];
    let text = String::from_utf8_lossy(&out);
    let mut active = HashSet::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(id), Some(state)) = (f.next(), f.next()) else {
            continue;
        };
        let Ok(id) = id.parse::<u32>() else { continue };
        if !ENDED.contains(&state) {
            active.insert(id);
        }
    }
    Ok(active)
}

/// Runs [`Daemon::reconcile`] every `reconcile_interval_secs` until the daemon stops.
fn start_reconciler(daemon: &Arc<Daemon>) {
    let every = daemon.config.reconcile_interval_secs;
    if every == 0 {
        return;
    }
    log::info!(
        "every {every} s, jobs that Slurm ({}) no longer knows as running are released",
        daemon.config.squeue.display()
    );
    let d = Arc::clone(daemon);
    let started = std::thread::Builder::new()
        .name("reconcile".into())
        .spawn(move || loop {
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(every) {
                if d.stopping() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Err(e) = d.reconcile() {
                log::warn!("reconcile: {e}; nothing released, tried again in {every} s");
            }
        });
    if let Err(e) = started {
        log::error!("cannot start the reconcile thread: {e}; registered jobs are not checked");
    }
}

/// A connected stream the daemon serves: Unix or TCP. One descriptor per connection (reads
/// and writes go through `&self`), so a connection costs one of the process's descriptors.
pub(crate) trait Conn: Send + 'static {
    fn read_some(&self, buf: &mut [u8]) -> io::Result<usize>;
    fn write_all_of(&self, buf: &[u8]) -> io::Result<()>;
    fn set_read_deadline(&self, t: Duration) -> io::Result<()>;
    fn set_write_deadline(&self, t: Duration) -> io::Result<()>;
}

/// [`Conn`] for a std stream type (the Unix socket and the TCP listener's streams alike).
macro_rules! std_conn {
    ($t:ty) => {
        impl Conn for $t {
            fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
                io::Read::read(&mut &*self, buf)
            }
            fn write_all_of(&self, buf: &[u8]) -> io::Result<()> {
                (&*self).write_all(buf)
            }
            // A zero timeout means "none" to std: the deadline is at least a millisecond.
            fn set_read_deadline(&self, t: Duration) -> io::Result<()> {
                self.set_read_timeout(Some(t.max(Duration::from_millis(1))))
            }
            fn set_write_deadline(&self, t: Duration) -> io::Result<()> {
                self.set_write_timeout(Some(t.max(Duration::from_millis(1))))
            }
        }
    };
}

std_conn!(UnixStream);
std_conn!(std::net::TcpStream);

#[derive(Debug, PartialEq, Eq)]
enum ReadLine {
    Line,
    Eof,
    /// Longer than the limit.
    TooLarge,
    /// The input budget of the daemon is spent.
    OverBudget,
    /// No whole line before the deadline (`partial`: some of it had arrived).
    TimedOut {
        partial: bool,
    },
}

/// Reads request lines of one connection with a deadline per line and a length limit,
/// counting what it buffers against the daemon's input budget.
struct LineReader {
    chunk: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the budget this connection holds (the line buffer's capacity).
    reserved: usize,
}

const CHUNK: usize = 8 << 10;

impl LineReader {
    fn new() -> LineReader {
        LineReader {
            chunk: vec![0; CHUNK],
            start: 0,
            end: 0,
            reserved: 0,
        }
    }

    /// Reads one line (newline and a trailing `\r` removed) into `line`. `idle` bounds the
    /// wait for its first byte; once that arrived, the whole line must arrive by `deadline`
    /// after it (or by `fixed_deadline` when given: the TCP authentication).
    #[allow(clippy::too_many_arguments)]
    fn read_line(
        &mut self,
        daemon: &Daemon,
        conn: &impl Conn,
        line: &mut Vec<u8>,
        max: usize,
        admin: bool,
        idle: Duration,
        deadline: Duration,
        fixed_deadline: Option<Instant>,
    ) -> io::Result<ReadLine> {
        line.clear();
        let mut until = fixed_deadline;
        loop {
            if self.start < self.end {
                until.get_or_insert_with(|| Instant::now() + deadline);
                let avail = &self.chunk[self.start..self.end];
                let (take, newline) = match avail.iter().position(|&b| b == b'\n') {
                    Some(i) => (i, true),
                    None => (avail.len(), false),
                };
                let needed = line.len() + take;
                if needed > max {
                    return Ok(ReadLine::TooLarge);
                }
                if needed > line.capacity() {
                    // Doubling (bounded by the limit), each step paid from the budget first.
                    let cap = needed.max((line.capacity() * 2).min(max)).max(256);
                    let extra = cap.saturating_sub(self.reserved);
                    if extra > 0 {
                        if !daemon.reserve_input(extra, admin) {
                            return Ok(ReadLine::OverBudget);
                        }
                        self.reserved += extra;
                    }
                    line.reserve_exact(cap - line.len());
                }
                line.extend_from_slice(&self.chunk[self.start..self.start + take]);
                if newline {
                    self.start += take + 1;
                    if line.last() == Some(&b'\r') {
                        line.pop();
                    }
                    return Ok(ReadLine::Line);
                }
                self.start = 0;
                self.end = 0;
            }
            let wait = match until {
                Some(u) => {
                    let left = u.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(ReadLine::TimedOut {
                            partial: !line.is_empty(),
                        });
                    }
                    left
                }
                None => idle,
            };
            conn.set_read_deadline(wait)?;
            match conn.read_some(&mut self.chunk) {
                Ok(0) => {
                    // A last request without its newline is still answered.
                    return Ok(if line.is_empty() {
                        ReadLine::Eof
                    } else {
                        ReadLine::Line
                    });
                }
                Ok(n) => {
                    self.start = 0;
                    self.end = n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::TimedOut =>
                {
                    if until.is_some_and(|u| Instant::now() < u) {
                        continue; // woken early; the deadline decides
                    }
                    return Ok(ReadLine::TimedOut {
                        partial: !line.is_empty() || fixed_deadline.is_some(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Gives back the budget held beyond a small line buffer.
    fn trim(&mut self, daemon: &Daemon, line: &mut Vec<u8>) {
        const KEEP: usize = 4 << 10;
        if line.capacity() > KEEP {
            *line = Vec::new();
        }
        let keep = line.capacity();
        if self.reserved > keep {
            daemon.release_input(self.reserved - keep);
            self.reserved = keep;
        }
    }

    fn release_all(&mut self, daemon: &Daemon) {
        daemon.release_input(self.reserved);
        self.reserved = 0;
    }
}

/// An authentication step for connections whose peer the socket does not tell (TCP): the
/// first line in, the peer out.
pub type Authenticate<'a> = &'a dyn Fn(&[u8]) -> Result<Peer, ProtoError>;

/// One of a user's turns to have a request handled (see `Daemon::user_turn`).
struct UserTurn<'a> {
    daemon: &'a Daemon,
    uid: u32,
}

impl Drop for UserTurn<'_> {
    fn drop(&mut self) {
        let mut busy = self
            .daemon
            .user_requests
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = busy.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                busy.remove(&self.uid);
            }
        }
        drop(busy);
        self.daemon.user_turn.notify_all();
    }
}

/// Counts a request under way; SIGTERM waits for it.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn send_error(conn: &impl Conn, e: &ProtoError) {
    let mut line = error_line(e);
    line.push('\n');
    let _ = conn.write_all_of(line.as_bytes());
}

/// Serves one connection: request lines in, reply lines out, until EOF, an error, a deadline
/// or a limit. Without a `peer`, the first line goes to `authenticate` (within
/// `auth_timeout_secs` of connecting, at most `max_auth_bytes`); a refusal closes the
/// connection.
pub(crate) fn serve_conn(
    daemon: &Daemon,
    conn: impl Conn,
    mut slot: Slot,
    mut peer: Option<Peer>,
    authenticate: Authenticate<'_>,
) {
    let c = &daemon.config;
    let idle = Duration::from_secs(c.idle_timeout_secs);
    let deadline = Duration::from_secs(c.request_timeout_secs);
    let _ = conn.set_write_deadline(deadline);
    let auth_until = Instant::now() + Duration::from_secs(c.auth_timeout_secs);
    let mut reader = LineReader::new();
    let mut line = Vec::new();
    // Not an administrator (or not yet known): this thread yields the processor to theirs.
    if c.user_nice > 0 && !peer.is_some_and(|p| daemon.is_admin(p.uid)) {
        if let Err(e) = crate::sys::set_thread_nice(c.user_nice) {
            log::debug!("setpriority: {e}");
        }
    }
    let uid = |p: &Option<Peer>| p.map_or("unauthenticated".to_string(), |p| p.uid.to_string());
    loop {
        let admin = peer.is_some_and(|p| daemon.is_admin(p.uid));
        let (max, max_name) = match (&peer, admin) {
            (None, _) => (c.max_auth_bytes, "max_auth_bytes"),
            (Some(_), true) => (c.max_request_bytes, "max_request_bytes"),
            (Some(_), false) => (c.max_user_request_bytes, "max_user_request_bytes"),
        };
        let fixed = peer.is_none().then_some(auth_until);
        let read = reader.read_line(daemon, &conn, &mut line, max, admin, idle, deadline, fixed);
        let refusal = match read {
            Ok(ReadLine::Line) => None,
            Ok(ReadLine::Eof) => break,
            Ok(ReadLine::TooLarge) => Some(ProtoError::new(
                ErrorCode::TooLarge,
                format!(
                    "a request line of uid {} may hold at most {max} bytes ({max_name}); the connection is closed",
                    uid(&peer)
                ),
            )),
            Ok(ReadLine::OverBudget) => Some(ProtoError::new(
                ErrorCode::Busy,
                format!(
                    "the daemon's input buffers are full (max_buffered_bytes = {}); the connection is closed, try again later",
                    c.max_buffered_bytes
                ),
            )),
            Ok(ReadLine::TimedOut { partial: false }) => break, // idle: close quietly
            Ok(ReadLine::TimedOut { partial: true }) => Some(ProtoError::new(
                ErrorCode::Timeout,
                if peer.is_none() {
                    format!(
                        "no authentication within {} s (auth_timeout_secs); the connection is closed",
                        c.auth_timeout_secs
                    )
                } else {
                    format!(
                        "the request line did not arrive whole within {} s (request_timeout_secs); the connection is closed",
                        c.request_timeout_secs
                    )
                },
            )),
            Err(e) => {
                log::debug!("uid {}: read: {e}", uid(&peer));
                break;
            }
        };
        if let Some(e) = refusal {
            daemon.log_refusal(|| format!("uid {}: {}; closing the connection", uid(&peer), e));
            send_error(&conn, &e);
            break;
        }
        let reply = match &peer {
            Some(p) => {
                daemon.in_flight.fetch_add(1, Ordering::SeqCst);
                let in_flight = InFlight(&daemon.in_flight);
                // Counted before the check: SIGTERM either sees this request or it sees
                // `stopping` (see `Daemon::finish`).
                if daemon.stopping() {
                    drop(in_flight);
                    send_error(
                        &conn,
                        &ProtoError::new(ErrorCode::Busy, "sparesd is stopping; try again later"),
                    );
                    break;
                }
                let turn = (!admin).then(|| daemon.user_turn(p.uid));
                let mut reply = daemon.handle_line(&line, p);
                reply.push('\n');
                reader.trim(daemon, &mut line);
                let sent = conn.write_all_of(reply.as_bytes());
                drop(turn);
                drop(in_flight);
                if sent.is_err() {
                    break;
                }
                continue;
            }
            None => match authenticate(&line) {
                Ok(p) => {
                    let owner = daemon.owner_of(p.uid);
                    if let Err(e) = slot.transfer(owner) {
                        daemon.log_refusal(|| format!("tcp uid {}: {e}", p.uid));
                        send_error(&conn, &e);
                        break;
                    }
                    if daemon.is_admin(p.uid) && c.user_nice > 0 {
                        // Niced while unauthenticated; an administrator's work is not.
                        let _ = crate::sys::set_thread_nice(0);
                    }
                    peer = Some(p);
                    ok_line(&serde_json::json!({"uid": p.uid, "gid": p.gid}))
                }
                Err(e) => {
                    send_error(&conn, &e);
                    break;
                }
            },
        };
        reader.trim(daemon, &mut line);
        if conn.write_all_of(format!("{reply}\n").as_bytes()).is_err() {
            break;
        }
    }
    reader.release_all(daemon);
    drop(slot);
}

/// Removes the socket file if it is still a socket (never anything else).
fn remove_socket(path: &Path) {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if m.file_type().is_socket() {
            if let Err(e) = std::fs::remove_file(path) {
                log::warn!("cannot remove the socket {}: {e}", path.display());
            }
        }
    }
}

/// Binds the Unix socket: creates its directory (0755), replaces a stale socket (one nobody
/// answers on), refuses to steal a live one, refuses a path that exists and is not a socket
/// (a regular file, a link: never deleted), and sets the socket's mode.
pub fn bind(path: &Path, mode: u32) -> Result<UnixListener, DaemonError> {
    use std::os::unix::fs::FileTypeExt;
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
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(err("another daemon answers on this socket".into()));
            }
            std::fs::remove_file(path)
                .map_err(|e| err(format!("cannot remove the stale socket: {e}")))?;
        }
        Ok(m) => {
            let what = if m.file_type().is_symlink() {
                "a symbolic link"
            } else if m.is_dir() {
                "a directory"
            } else if m.is_file() {
                "a regular file"
            } else {
                "not a socket"
            };
            return Err(err(format!(
                "the path exists and is {what}, not a socket; it is left as it is (remove it or choose another socket path)"
            )));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e.to_string())),
    }
    let listener = UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| err(format!("cannot set its mode: {e}")))?;
    Ok(listener)
}

/// Starts the thread that takes the blocked signals: SIGTERM and SIGINT stop the daemon
/// ([`Daemon::stop`]; `serve` returns, then [`Daemon::finish`]); SIGHUP is ignored with a log
/// line (the configuration is read at start only: a changed file needs a restart).
pub fn handle_signals(
    daemon: Arc<Daemon>,
    signals: crate::sys::BlockedSignals,
) -> Result<(), DaemonError> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || loop {
            match crate::sys::wait_signal(&signals) {
                Ok(libc::SIGHUP) => log::info!(
                    "SIGHUP ignored: sparesd reads its configuration only at start; restart it to apply a changed one"
                ),
                Ok(sig) => {
                    log::info!(
                        "signal {sig}: stopping: no new connections, requests under way get {} s (shutdown_grace_secs)",
                        daemon.config.shutdown_grace_secs
                    );
                    daemon.stop();
                    return;
                }
                Err(e) => {
                    log::error!("sigwait: {e}; signals are no longer handled");
                    return;
                }
            }
        })
        .map(|_| ())
        .map_err(|e| DaemonError::Thread {
            what: "signal",
            why: e.to_string(),
        })
}

/// Accepts connections, one thread each, until [`Daemon::stop`]; starts the reconciliation
/// with Slurm when configured.
pub fn serve(daemon: Arc<Daemon>, listener: UnixListener) {
    match listener.try_clone() {
        Ok(handle) => *daemon.accepting.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle),
        Err(e) => log::warn!("cannot keep a handle on the listening socket: {e}; SIGTERM may wait for the next connection"),
    }
    start_reconciler(&daemon);
    // The loop checks `stopping` before each accept: a stop that came before the handle was
    // kept found nothing to wake.
    while !daemon.stopping() {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                if !daemon.stopping() {
                    daemon.log_refusal(|| format!("accept: {e}"));
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
        };
        spawn_connection(&daemon, stream);
    }
    daemon
        .accepting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take();
    log::info!("no longer accepting connections");
}

fn spawn_connection(daemon: &Arc<Daemon>, stream: UnixStream) {
    let peer = match crate::sys::peer_cred(&stream) {
        Ok(p) => p,
        Err(e) => {
            log::warn!("SO_PEERCRED: {e}; connection dropped");
            return;
        }
    };
    let slot = match daemon.admit(daemon.owner_of(peer.uid)) {
        Ok(s) => s,
        Err(e) => {
            daemon.log_refusal(|| format!("uid {}: connection refused: {}", peer.uid, e.message));
            // The refusal must not block the accept loop on a client that reads nothing.
            let _ = stream.set_write_deadline(Duration::from_millis(100));
            send_error(&stream, &e);
            return;
        }
    };
    let d = Arc::clone(daemon);
    // The slot moves into the thread: if the thread cannot start, dropping the closure gives
    // it back.
    let spawned = std::thread::Builder::new()
        .name(format!("conn-uid{}", peer.uid))
        .stack_size(256 * 1024)
        .spawn(move || {
            let no_auth = |_: &[u8]| -> Result<Peer, ProtoError> {
                unreachable!("the socket tells the peer")
            };
            serve_conn(&d, stream, slot, Some(peer), &no_auth);
        });
    if let Err(e) = spawned {
        log::error!(
            "cannot start a connection thread: {e}; connection of uid {} dropped",
            peer.uid
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that hands out fixed chunks, then EOF.
    struct Script(Mutex<Vec<Vec<u8>>>);

    impl Conn for Script {
        fn read_some(&self, buf: &mut [u8]) -> io::Result<usize> {
            let mut v = self.0.lock().unwrap();
            if v.is_empty() {
                return Ok(0);
            }
            let c = v.remove(0);
            buf[..c.len()].copy_from_slice(&c);
            Ok(c.len())
        }
        fn write_all_of(&self, _: &[u8]) -> io::Result<()> {
            Ok(())
        }
        fn set_read_deadline(&self, _: Duration) -> io::Result<()> {
            Ok(())
        }
        fn set_write_deadline(&self, _: Duration) -> io::Result<()> {
            Ok(())
        }
    }

    fn daemon() -> (tempfile::TempDir, Daemon) {
        let tmp = tempfile::tempdir().unwrap();
        let config = Config {
            socket: tmp.path().join("s"),
            state_dir: tmp.path().join("state"),
            max_request_bytes: 1 << 20,
            max_buffered_bytes: 2 << 20,
            ..Config::default()
        };
        let d = Daemon::open(config).unwrap();
        (tmp, d)
    }

    #[test]
    fn lines_are_limited_and_counted_against_the_budget() {
        let (_tmp, d) = daemon();
        let conn = Script(Mutex::new(vec![
            b"abc\r\nde".to_vec(),
            b"f\nlonglonglong\n".to_vec(),
        ]));
        let mut r = LineReader::new();
        let mut line = Vec::new();
        let t = Duration::from_secs(1);
        let read = |r: &mut LineReader, line: &mut Vec<u8>| {
            r.read_line(&d, &conn, line, 5, false, t, t, None).unwrap()
        };
        assert_eq!(read(&mut r, &mut line), ReadLine::Line);
        assert_eq!(line, b"abc");
        assert_eq!(read(&mut r, &mut line), ReadLine::Line);
        assert_eq!(line, b"def");
        assert_eq!(read(&mut r, &mut line), ReadLine::TooLarge);
        assert!(d.buffered.load(Ordering::Acquire) > 0);
        r.release_all(&d);
        assert_eq!(d.buffered.load(Ordering::Acquire), 0);
        let conn = Script(Mutex::new(vec![b"tail".to_vec()]));
        let mut r = LineReader::new();
        let read = |r: &mut LineReader, line: &mut Vec<u8>| {
            r.read_line(&d, &conn, line, 5, false, t, t, None).unwrap()
        };
        assert_eq!(read(&mut r, &mut line), ReadLine::Line);
        assert_eq!(read(&mut r, &mut line), ReadLine::Eof);
    }

    #[test]
    fn the_input_budget_keeps_room_for_an_administrator() {
        let (_tmp, d) = daemon();
        // Users may fill 2 MiB - 1 MiB; an administrator the whole 2 MiB.
        assert!(d.reserve_input(1 << 20, false));
        assert!(!d.reserve_input(1, false));
        assert!(d.reserve_input(1 << 20, true));
        assert!(!d.reserve_input(1, true));
        d.release_input(2 << 20);
        assert_eq!(d.buffered.load(Ordering::Acquire), 0);
    }

    #[test]
    fn slots_per_user_and_reserved_for_administrators() {
        let (_tmp, d) = daemon();
        let d = Arc::new(d);
        let c = d.config().clone();
        let mut held = Vec::new();
        for _ in 0..c.max_connections_per_uid {
            held.push(d.admit(SlotOwner::User(1000)).unwrap());
        }
        let e = d.admit(SlotOwner::User(1000)).err().unwrap();
        assert_eq!(e.code, ErrorCode::Busy);
        assert!(e.message.contains("max_connections_per_uid"), "{e}");
        // Many users fill what is not reserved; administrators still get in.
        let mut uid = 2000;
        while held.len() < c.max_connections - c.reserved_admin_connections {
            held.push(d.admit(SlotOwner::User(uid)).unwrap());
            uid += 1;
        }
        assert_eq!(
            d.admit(SlotOwner::User(99999)).err().unwrap().code,
            ErrorCode::Busy
        );
        for _ in 0..c.reserved_admin_connections {
            held.push(d.admit(SlotOwner::Admin(0)).unwrap());
        }
        assert!(d.admit(SlotOwner::Admin(0)).is_err());
        held.clear();
        assert_eq!(d.connections(), 0, "every slot given back");
        // A refused transfer keeps the slot as it was, and it is given back once.
        let mut s = d.admit(SlotOwner::Unauthenticated).unwrap();
        let others: Vec<_> = (0..c.max_connections_per_uid)
            .map(|_| d.admit(SlotOwner::User(5)).unwrap())
            .collect();
        assert!(s.transfer(SlotOwner::User(5)).is_err());
        drop(others);
        s.transfer(SlotOwner::User(5)).unwrap();
        drop(s);
        assert_eq!(d.connections(), 0);
    }

    fn show(d: &Daemon, job_id: u32, uid: u32) -> Result<serde_json::Value, ProtoError> {
        let peer = Peer {
            uid,
            gid: uid,
            pid: 1,
        };
        d.handle(Request::Show { job_id }, &peer)
            .map(|line| serde_json::from_str(&line).unwrap())
    }

    fn peer(uid: u32) -> Peer {
        Peer {
            uid,
            gid: uid,
            pid: 1,
        }
    }

    fn remap_request(job_id: u32, max_moves: Option<u32>) -> Request {
        Request::Remap {
            job_id,
            max_moves,
            iterations: Some(5_000),
            seed: None,
        }
    }

    /// Registers job 9 for uid 1000 (a 6x6x6 box) and fails nodes until collisions rose.
    fn slid_job(d: &Daemon) {
        let map = Box::new(crate::registry::tests::doc3());
        d.handle(
            Request::Register {
                job_id: 9,
                uid: 1000,
                map,
                at_start: Vec::new(),
            },
            &peer(0),
        )
        .unwrap();
        for node in ["1,1,1", "3,2,1", "2,3,3", "1,3,2", "3,1,3", "2,2,2"] {
            let fail = Request::Fail {
                job_id: 9,
                node: node.into(),
            };
            d.handle(fail, &peer(0)).unwrap();
        }
    }

    #[test]
    fn a_remap_is_refused_for_another_users_job_like_a_failure() {
        let (_tmp, d) = daemon();
        slid_job(&d);
        let fail = Request::Fail {
            job_id: 9,
            node: "4,4,4".into(),
        };
        let refused_fail = d.handle(fail, &peer(1001)).unwrap_err();
        let refused_remap = d.handle(remap_request(9, None), &peer(1001)).unwrap_err();
        assert_eq!(refused_remap.code, ErrorCode::UnknownJob);
        assert_eq!(refused_remap, refused_fail, "the same answer as for fail");
        let unknown = d.handle(remap_request(77, None), &peer(1001)).unwrap_err();
        assert_eq!(unknown.code, ErrorCode::UnknownJob, "no job id is revealed");
        assert!(show(&d, 9, 0).unwrap()["remaps"]
            .as_array()
            .unwrap()
            .is_empty());
        // The owner and root may.
        for uid in [1000, 0] {
            let r: serde_json::Value =
                serde_json::from_str(&d.handle(remap_request(9, None), &peer(uid)).unwrap())
                    .unwrap();
            assert_eq!(r["ok"], true, "uid {uid}: {r}");
        }
        assert_eq!(
            show(&d, 9, 1000).unwrap()["remaps"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn a_remap_budget_is_capped_by_the_config_before_the_search() {
        let tmp = tempfile::tempdir().unwrap();
        let config = Config {
            socket: tmp.path().join("s"),
            state_dir: tmp.path().join("state"),
            remap: crate::config::RemapConfig {
                max_moves: 2,
                relaunch_max_moves: 1,
                iterations: 1_000,
                ..Default::default()
            },
            ..Config::default()
        };
        let d = Daemon::open(config).unwrap();
        slid_job(&d);
        let ask = Request::Remap {
            job_id: 9,
            max_moves: Some(u32::MAX),
            iterations: Some(u64::MAX),
            seed: Some(3),
        };
        let r: serde_json::Value =
            serde_json::from_str(&d.handle(ask, &peer(1000)).unwrap()).unwrap();
        assert_eq!(r["capped"], true, "{r}");
        assert_eq!(r["max_moves"], 2);
        assert_eq!(r["iterations"], 1_000);
        assert!(r["moved"].as_u64().unwrap() <= 2, "{r}");
        let health: serde_json::Value =
            serde_json::from_str(&d.handle(Request::Health, &peer(1000)).unwrap()).unwrap();
        assert_eq!(health["remap"]["at_relaunch"], false);
        assert_eq!(health["remap"]["relaunch_max_moves"], 1);
    }

    #[test]
    fn a_remap_survives_a_restart_and_the_next_failure_slides_from_it() {
        for snapshot_every in [1, 1000] {
            let tmp = tempfile::tempdir().unwrap();
            let config = Config {
                socket: tmp.path().join("s"),
                state_dir: tmp.path().join("state"),
                snapshot_every,
                ..Config::default()
            };
            let (map, remaps) = {
                let d = Daemon::open(config.clone()).unwrap();
                slid_job(&d);
                let before = show(&d, 9, 0).unwrap();
                d.handle(remap_request(9, Some(1000)), &peer(1000)).unwrap();
                let after = show(&d, 9, 0).unwrap();
                assert_ne!(after["map"]["ranks"], before["map"]["ranks"]);
                assert!(after["collisions"].as_u64() < before["collisions"].as_u64());
                assert_eq!(after["remaps"][0]["after_step"], 6);
                (after["map"].clone(), after["remaps"].clone())
            };
            let d = Daemon::open(config.clone()).unwrap();
            let back = show(&d, 9, 1000).unwrap();
            assert_eq!(back["map"], map, "snapshot_every {snapshot_every}");
            assert_eq!(back["remaps"], remaps);
            let fail = Request::Fail {
                job_id: 9,
                node: "4,4,4".into(),
            };
            let r: serde_json::Value =
                serde_json::from_str(&d.handle(fail, &peer(1000)).unwrap()).unwrap();
            assert_eq!(r["step"], 7);
            assert_eq!(r["collisions_before"], back["collisions"]);
        }
    }

    #[test]
    fn show_tells_a_released_jobs_history_after_a_restart_to_its_owner_only() {
        for snapshot_every in [1, 1000] {
            let tmp = tempfile::tempdir().unwrap();
            let config = Config {
                socket: tmp.path().join("s"),
                state_dir: tmp.path().join("state"),
                snapshot_every,
                ..Config::default()
            };
            let root = Peer {
                uid: 0,
                gid: 0,
                pid: 1,
            };
            {
                let d = Daemon::open(config.clone()).unwrap();
                let map = Box::new(crate::registry::tests::doc(true));
                d.handle(
                    Request::Register {
                        job_id: 42,
                        uid: 1000,
                        map,
                        at_start: Vec::new(),
                    },
                    &root,
                )
                .unwrap();
                d.handle(
                    Request::Fail {
                        job_id: 42,
                        node: "n05".into(),
                    },
                    &root,
                )
                .unwrap();
                d.handle(Request::Release { job_id: 42 }, &root).unwrap();
                let r = show(&d, 42, 1000).unwrap();
                assert_eq!(r["history"][0]["node"], "n05");
                assert!(r["released_at"].as_u64().unwrap() > 0);
            }
            // Restarted: the journal (or snapshot) still has it, for the owner and root.
            let d = Daemon::open(config.clone()).unwrap();
            for uid in [1000, 0] {
                let r = show(&d, 42, uid).unwrap();
                assert_eq!(r["history"][0]["outcome"], "substituted", "uid {uid}");
                assert_eq!(r["failed"][0], "n05");
                assert_eq!(r["uid"], 1000);
                assert_eq!(r["map"]["failed"].as_array().unwrap().len(), 1);
            }
            assert_eq!(show(&d, 42, 1001).unwrap_err().code, ErrorCode::UnknownJob);
            let history = |uid: u32, since: u64| -> serde_json::Value {
                let peer = Peer {
                    uid,
                    gid: uid,
                    pid: 1,
                };
                serde_json::from_str(&d.handle(Request::History { since }, &peer).unwrap()).unwrap()
            };
            let mine = history(1000, 0);
            assert_eq!(mine["jobs"][0]["job_id"], 42, "{mine}");
            assert_eq!(mine["jobs"][0]["failures"], 1);
            assert!(mine["jobs"][0]["released_at"].as_u64().unwrap() > 0);
            assert_eq!(mine["truncated"], false);
            assert_eq!(
                history(1001, 0)["jobs"],
                serde_json::json!([]),
                "not theirs"
            );
            assert_eq!(history(0, u64::MAX)["jobs"], serde_json::json!([]), "since");
            assert_eq!(
                d.handle(Request::List, &root).unwrap(),
                ok_line(&serde_json::json!({"jobs": []})),
                "list shows live jobs only"
            );
            drop(d);
            // A site that keeps no history: forgotten at the next start.
            let d = Daemon::open(Config {
                history_retention_secs: 0,
                ..config
            })
            .unwrap();
            assert_eq!(show(&d, 42, 0).unwrap_err().code, ErrorCode::UnknownJob);
        }
    }
}
