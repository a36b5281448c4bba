//! Durable state: an append-only journal of JSON lines plus a periodic snapshot.
//!
//! Layout of the state directory (all text, readable with `jq`):
//! - `journal.jsonl`: one change per line,
//!   `{"seq":N,"op":"register"|"fail"|"remap"|"release",...,"crc":"xxxxxxxx"}`.
//! - `snapshot.json`: the registry at journal sequence `seq` (registered maps and answered
//!   failures), sealed the same way; written to `snapshot.json.tmp`, fsynced, renamed, directory
//!   fsynced. It is written at the first start, so a directory in use always has one.
//! - `lock`: held with `flock` while a daemon runs, so two daemons never share a directory. It
//!   holds the format mark and the last sequence number known durable (the acknowledged
//!   watermark, `sparesd-state 2 acknowledged N`), rewritten in place after each group commit.
//!
//! `crc` is the CRC-32 of the line's bytes before `,"crc":`, so a record is checked byte for
//! byte without re-serialising it.
//!
//! A change is acknowledged only after [`Store::sync_to`] returned for its sequence number:
//! concurrent writers share one `fdatasync` (group commit). On start the journal, the snapshot
//! and the directory are fsynced, their cached pages dropped and the files read back from the
//! disk; the snapshot is loaded and the journal records after it replayed. Only a last line
//! without its newline (a write cut by a crash, never acknowledged) is cut. Every other damage
//! refuses the start, naming the file, line and sequence number: a checksum mismatch, a line
//! that is not a record, a sequence gap or repetition, a journal that starts after the
//! snapshot's sequence plus one or ends before it, a journal that ends before the acknowledged
//! watermark (cut), a missing snapshot in a directory in use. [`repair`] keeps the valid prefix
//! and sets the damaged journal aside.
//!
//! The previous release (0.1) wrote records and snapshots without checksums and an empty lock
//! file. Such a directory (no format mark in the lock) is loaded once with checksums optional,
//! then rewritten at once in this format (snapshot, empty journal, mark): a site upgrading the
//! package keeps its jobs without a manual step.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::registry::{Change, Registry, Snapshot};

const JOURNAL: &str = "journal.jsonl";
const SNAPSHOT: &str = "snapshot.json";
const LOCK: &str = "lock";

/// What a sealed object carries before its closing brace: `,"crc":"` + 8 hex digits + `"}`.
const CRC_TAG: &[u8] = b",\"crc\":\"";
const SEAL_LEN: usize = CRC_TAG.len() + 8 + 2;

/// The lock file's content once this format is in use; followed by 20 digits and a newline.
const MARK: &[u8] = b"sparesd-state 2 acknowledged ";
const MARK_DIGITS: usize = 20;

/// Where damage was found: the file, and when it is about one record its line and sequence
/// number (and the job the record names, when readable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The damaged file.
    pub path: PathBuf,
    /// Line number (from 1) in the journal.
    pub line: Option<usize>,
    /// The record's sequence number (as written, or as expected when unreadable).
    pub seq: Option<u64>,
    /// The job the record names, when readable.
    pub job: Option<u64>,
    /// What is wrong.
    pub why: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(l) = self.line {
            write!(f, " line {l}")?;
        }
        match (self.seq, self.job) {
            (Some(s), Some(j)) => write!(f, " (seq {s}, job {j})")?,
            (Some(s), None) => write!(f, " (seq {s})")?,
            (None, Some(j)) => write!(f, " (job {j})")?,
            (None, None) => {}
        }
        write!(f, ": {}", self.why)
    }
}

/// What can go wrong with the state directory.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O error on a named file.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Another daemon holds the directory.
    #[error("{0}: another sparesd uses this state directory (its lock is held); stop it or choose another state_dir")]
    Locked(PathBuf),
    /// Damage that could hide acknowledged records: the daemon does not start on it.
    #[error("{0}; the daemon will not guess which acknowledged records are lost: run `sparesd --repair` with the same --config/--state-dir (it keeps the valid records, keeps the damaged journal next to the new one and lists what it dropped), or restore the state directory from a backup")]
    Damaged(Damage),
    /// A damaged snapshot: repair has no base to rebuild the jobs on.
    #[error("{0}; --repair cannot rebuild the jobs of a damaged snapshot: restore snapshot.json from a backup, or move it away and run --repair again to keep what the journal alone holds")]
    CannotRepair(Damage),
    /// A state file the daemon's user cannot write.
    #[error("{path} is owned by {owner} (uid {owner_uid}), but sparesd runs as {user} (uid {uid}) and cannot write its state; fix: chown -R {user}: {dir}")]
    Owner {
        /// The file.
        path: PathBuf,
        /// Its owner's name (or uid).
        owner: String,
        /// Its owner's uid.
        owner_uid: u32,
        /// The daemon's user name (or uid).
        user: String,
        /// The daemon's uid.
        uid: u32,
        /// The state directory.
        dir: PathBuf,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One journal line.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    seq: u64,
    #[serde(flatten)]
    change: Change,
}

/// Appends `,"crc":"xxxxxxxx"}` to a JSON object in place of its closing brace.
fn seal(mut object: Vec<u8>) -> Vec<u8> {
    debug_assert_eq!(object.last(), Some(&b'}'));
    object.pop();
    let crc = crc32fast::hash(&object);
    object.extend_from_slice(CRC_TAG);
    object.extend_from_slice(format!("{crc:08x}\"}}").as_bytes());
    object
}

enum Unsealed {
    /// The checksum matches: the object without it.
    Valid(Vec<u8>),
    /// A checksum that does not match.
    Mismatch,
    /// No checksum at the end.
    Missing,
}

fn unseal(line: &[u8]) -> Unsealed {
    let n = line.len();
    if n <= SEAL_LEN || !line.ends_with(b"\"}") || &line[n - SEAL_LEN..n - 10] != CRC_TAG {
        return Unsealed::Missing;
    }
    let hex = &line[n - 10..n - 2];
    if !hex.iter().all(u8::is_ascii_hexdigit) {
        return Unsealed::Missing;
    }
    let Some(crc) = std::str::from_utf8(hex)
        .ok()
        .and_then(|h| u32::from_str_radix(h, 16).ok())
    else {
        return Unsealed::Missing;
    };
    let body = &line[..n - SEAL_LEN];
    if crc32fast::hash(body) != crc {
        return Unsealed::Mismatch;
    }
    let mut object = body.to_vec();
    object.push(b'}');
    Unsealed::Valid(object)
}

/// The number after the first `key` in a line that may be damaged: for messages only.
fn number_after(line: &[u8], key: &[u8]) -> Option<u64> {
    let at = line.windows(key.len()).position(|w| w == key)? + key.len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

fn seqs(from: u64, to: u64) -> String {
    if from == to {
        format!("seq {from} is")
    } else {
        format!("seq {from} to {to} are")
    }
}

fn parse_mark(path: &Path, bytes: &[u8]) -> Result<Option<u64>, Damage> {
    if bytes.is_empty() {
        return Ok(None);
    }
    bytes
        .strip_prefix(MARK)
        .and_then(|r| r.strip_suffix(b"\n"))
        .filter(|d| d.len() == MARK_DIGITS && d.iter().all(u8::is_ascii_digit))
        .and_then(|d| std::str::from_utf8(d).ok()?.parse().ok())
        .map(Some)
        .ok_or_else(|| Damage {
            path: path.to_path_buf(),
            line: None,
            seq: None,
            job: None,
            why: "not a sparesd format mark (`sparesd-state 2 acknowledged N`)".into(),
        })
}

fn write_mark(lock: &File, seq: u64) -> io::Result<()> {
    let text = format!("sparesd-state 2 acknowledged {seq:0w$}\n", w = MARK_DIGITS);
    lock.write_all_at(text.as_bytes(), 0)
}

/// How a state file is made durable: `File::sync_all`, or a test's hook.
pub type SyncFn<'a> = &'a dyn Fn(&Path, &File) -> io::Result<()>;

fn sync_all(_: &Path, f: &File) -> io::Result<()> {
    f.sync_all()
}

fn fsync_dir(dir: &Path, sync: SyncFn<'_>) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| sync(dir, &d))
        .map_err(io_err(dir))
}

/// Opens a state file for reading. Like every open in the state directory it does not follow a
/// symbolic link: root (a repair, a check) must not be led to another file.
fn open_read(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Reads a state file as the disk holds it: fsynced first (what a killed daemon left in the
/// page cache becomes durable before anything is served from it), then its cached pages dropped
/// (after a failed writeback the cache still shows data the disk never got), then read.
fn read_durable(path: &Path, sync: SyncFn<'_>) -> Result<Option<Vec<u8>>, StoreError> {
    let mut f = match open_read(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path)(e)),
    };
    sync(path, &f).map_err(io_err(path))?;
    if let Err(e) = crate::sys::drop_cached_pages(&f) {
        log::debug!("{}: cannot drop cached pages ({e})", path.display());
    }
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).map_err(io_err(path))?;
    Ok(Some(buf))
}

fn read_plain(path: &Path) -> Result<Option<Vec<u8>>, StoreError> {
    let mut buf = Vec::new();
    match open_read(path).and_then(|mut f| f.read_to_end(&mut buf)) {
        Ok(_) => Ok(Some(buf)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path)(e)),
    }
}

fn user_name(uid: u32) -> String {
    crate::sys::user_name(uid).unwrap_or_else(|| uid.to_string())
}

/// The owner to give the files a root process creates in a state directory of another user,
/// so that the daemon's user can still write them (a repair run as root).
type Adopt = Option<(u32, u32)>;

fn adopt(file: &File, path: &Path, owner: Adopt) -> Result<(), StoreError> {
    match owner {
        // fchown on the open file: never a path another user could swap for a link.
        Some((uid, gid)) => {
            std::os::unix::fs::fchown(file, Some(uid), Some(gid)).map_err(io_err(path))
        }
        None => Ok(()),
    }
}

/// A state file owned by another user than the daemon's cannot be written by it (the old
/// `--check` run as root left such files): say whose it is and how to fix it. Root may write
/// anything: the files it creates are given to the directory's owner.
fn check_owner(dir: &Path) -> Result<Adopt, StoreError> {
    let me = crate::sys::euid();
    if me == 0 {
        return Ok(fs::metadata(dir)
            .ok()
            .filter(|m| m.uid() != 0)
            .map(|m| (m.uid(), m.gid())));
    }
    for p in [
        dir.to_path_buf(),
        dir.join(LOCK),
        dir.join(SNAPSHOT),
        dir.join(JOURNAL),
    ] {
        // A file that is missing or out of reach is not judged here: its open says why.
        let Ok(m) = fs::symlink_metadata(&p) else {
            continue;
        };
        if m.uid() != me {
            return Err(StoreError::Owner {
                path: p,
                owner: user_name(m.uid()),
                owner_uid: m.uid(),
                user: user_name(me),
                uid: me,
                dir: dir.to_path_buf(),
            });
        }
    }
    Ok(None)
}

/// The files of a state directory, as read.
struct Files {
    lock: Vec<u8>,
    snapshot: Option<Vec<u8>>,
    journal: Option<Vec<u8>>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Any damage is an error.
    Strict,
    /// Damage ends the valid prefix; what follows is listed as dropped.
    Repair,
}

/// What loading a state directory found.
struct Loaded {
    registry: Registry,
    snap_seq: u64,
    /// The last sequence number of the kept state (snapshot or journal).
    last_seq: u64,
    /// Journal bytes kept (through the last valid line).
    keep_len: u64,
    /// Journal lines kept.
    kept_lines: u64,
    replayed: usize,
    /// Bytes after the last newline: a write cut by a crash.
    torn: u64,
    warnings: Vec<String>,
    /// Records or snapshot of the previous release (no checksums): rewrite at open.
    legacy: bool,
    snapshot_missing: bool,
    /// Repair: what is dropped, one entry per damaged or following line, or lost range.
    dropped: Vec<String>,
}

fn refuse(mode: Mode, d: Damage, dropped: &mut Vec<String>) -> Result<(), StoreError> {
    match mode {
        Mode::Strict => Err(StoreError::Damaged(d)),
        Mode::Repair => {
            dropped.push(d.to_string());
            Ok(())
        }
    }
}

fn snapshot_damage(mode: Mode, d: Damage) -> StoreError {
    match mode {
        Mode::Strict => StoreError::Damaged(d),
        Mode::Repair => StoreError::CannotRepair(d),
    }
}

/// Verifies and loads a state directory's files (no writes).
fn load(dir: &Path, files: &Files, mode: Mode) -> Result<Loaded, StoreError> {
    let snap_path = dir.join(SNAPSHOT);
    let jpath = dir.join(JOURNAL);
    let mut dropped = Vec::new();
    let mark = match parse_mark(&dir.join(LOCK), &files.lock) {
        Ok(m) => m,
        Err(d) => {
            refuse(mode, d, &mut dropped)?;
            Some(0)
        }
    };
    // With the mark, this format is in use: every record and the snapshot carry checksums.
    let strict_format = mark.is_some();
    let mut legacy = false;

    let snap_damage = |seq: Option<u64>, why: String| Damage {
        path: snap_path.clone(),
        line: None,
        seq,
        job: None,
        why,
    };
    let (mut registry, snap_seq, mut warnings, snapshot_missing) = match &files.snapshot {
        Some(bytes) => {
            let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
            let claimed = number_after(body, b"\"seq\":");
            let json = match unseal(body) {
                Unsealed::Valid(j) => j,
                Unsealed::Mismatch => {
                    return Err(snapshot_damage(
                        mode,
                        snap_damage(
                            claimed,
                            "checksum mismatch: the file changed after it was written".into(),
                        ),
                    ))
                }
                Unsealed::Missing if !strict_format => {
                    legacy = true;
                    body.to_vec()
                }
                Unsealed::Missing => {
                    return Err(snapshot_damage(
                        mode,
                        snap_damage(claimed, "no checksum: cut or overwritten".into()),
                    ))
                }
            };
            let snap: Snapshot = serde_json::from_slice(&json)
                .map_err(|e| snapshot_damage(mode, snap_damage(claimed, e.to_string())))?;
            let seq = snap.seq;
            let (reg, w) = Registry::from_snapshot(snap)
                .map_err(|e| snapshot_damage(mode, snap_damage(Some(seq), e.to_string())))?;
            (reg, seq, w, false)
        }
        None => {
            if let Some(w) = mark {
                refuse(
                    mode,
                    snap_damage(
                        None,
                        format!("missing, but the lock file marks this directory as in use (records through seq {w} acknowledged): the jobs it held would be lost"),
                    ),
                    &mut dropped,
                )?;
            }
            (Registry::new(), 0, Vec::new(), true)
        }
    };

    let bytes = files.journal.as_deref().unwrap_or(&[]);
    let mut pos = 0usize;
    let mut lineno = 0usize;
    let mut prev: Option<(u64, usize)> = None; // last kept record: seq, line
    let mut keep_len = 0usize;
    let mut kept_lines = 0u64;
    let mut replayed = 0;
    let mut stopped = false;
    let mut max_dropped_seq = 0u64;
    while pos < bytes.len() {
        let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
            break; // no newline: a torn write
        };
        lineno += 1;
        let line = &bytes[pos..pos + nl];
        let next = pos + nl + 1;
        pos = next;
        let claimed = number_after(line, b"\"seq\":");
        let job = number_after(line, b"\"job_id\":");
        max_dropped_seq = max_dropped_seq.max(claimed.unwrap_or(0));
        let damage = |seq: Option<u64>, why: String| Damage {
            path: jpath.clone(),
            line: Some(lineno),
            seq,
            job,
            why,
        };
        if stopped {
            dropped.push(
                damage(
                    claimed,
                    "follows a dropped record, so it cannot be replayed".into(),
                )
                .to_string(),
            );
            continue;
        }
        let expected = prev.map_or(snap_seq, |(s, _)| s).saturating_add(1);
        let json = match unseal(line) {
            Unsealed::Valid(j) => Ok(j),
            Unsealed::Mismatch => Err(damage(
                claimed.or(Some(expected)),
                "checksum mismatch: the record changed after it was written".into(),
            )),
            Unsealed::Missing => {
                let parses = serde_json::from_slice::<Record>(line).is_ok();
                if parses && !strict_format {
                    legacy = true;
                    Ok(line.to_vec())
                } else if parses {
                    Err(damage(
                        claimed,
                        format!("no checksum, in a directory already converted to checksummed records; if an older sparesd wrote it, empty {} (`truncate -s 0`) and start again to load and convert the state once", dir.join(LOCK).display()),
                    ))
                } else {
                    Err(damage(
                        claimed.or(Some(expected)),
                        "not a journal record (cut or overwritten)".into(),
                    ))
                }
            }
        };
        let result = json.and_then(|json| {
            let rec: Record = serde_json::from_slice(&json).map_err(|e| {
                damage(claimed.or(Some(expected)), format!("not a journal record: {e}"))
            })?;
            let seq = rec.seq;
            match prev {
                Some((p, _)) if seq > p.saturating_add(1) => {
                    return Err(damage(
                        Some(seq),
                        format!("after seq {p}: {} missing", seqs(p + 1, seq - 1)),
                    ))
                }
                Some((p, _)) if seq <= p => {
                    return Err(damage(
                        Some(seq),
                        format!("after seq {p}: repeated or out of order"),
                    ))
                }
                None if seq == 0 => {
                    return Err(damage(Some(0), "sequence numbers start at 1".into()))
                }
                None if seq > snap_seq.saturating_add(1) => {
                    return Err(damage(
                        Some(seq),
                        format!(
                            "the journal's first record, but the snapshot ends at seq {snap_seq}: {} missing",
                            seqs(snap_seq + 1, seq - 1)
                        ),
                    ))
                }
                _ => {}
            }
            if seq > snap_seq {
                match registry.replay(rec.change, seq) {
                    Ok(Some(w)) => warnings.push(w),
                    Ok(None) => {}
                    Err(e) => {
                        return Err(damage(Some(seq), format!("cannot be replayed: {e}")));
                    }
                }
                replayed += 1;
            }
            Ok(seq)
        });
        match result {
            Ok(seq) => {
                prev = Some((seq, lineno));
                keep_len = next;
                kept_lines += 1;
            }
            Err(d) => {
                refuse(mode, d, &mut dropped)?;
                stopped = true;
            }
        }
    }
    let torn = (bytes.len() - pos) as u64;

    if let Some((j, line)) = prev {
        if j < snap_seq {
            // Records the snapshot already holds: nothing is lost by dropping them.
            refuse(
                mode,
                snap_damage(
                    Some(snap_seq),
                    format!(
                        "ahead of the journal's last record ({} line {line}, seq {j}): the records in between are missing from the journal",
                        jpath.display()
                    ),
                ),
                &mut dropped,
            )?;
            keep_len = 0;
            kept_lines = 0;
            prev = None;
        }
    }
    let last_seq = prev.map_or(snap_seq, |(s, _)| s.max(snap_seq));
    if let Some(w) = mark {
        let first_lost = last_seq.max(max_dropped_seq).saturating_add(1);
        if w >= first_lost {
            let at = prev.map_or(String::new(), |(_, l)| format!(" (line {l})"));
            let d = Damage {
                path: jpath.clone(),
                line: None,
                seq: None,
                job: None,
                why: format!(
                    "ends at seq {last_seq}{at}, but records through seq {w} were acknowledged (the lock file keeps that number): {} missing, with no line left (the journal was cut)",
                    seqs(first_lost, w)
                ),
            };
            refuse(mode, d, &mut dropped)?;
        }
    }
    Ok(Loaded {
        registry,
        snap_seq,
        last_seq,
        keep_len: keep_len as u64,
        kept_lines,
        replayed,
        torn,
        warnings,
        legacy,
        snapshot_missing,
        dropped,
    })
}

/// Writes `snapshot.json` for `registry` at `seq`: to a temporary file, fsynced, renamed,
/// directory fsynced, so that a crash leaves the old snapshot or the new one.
fn write_snapshot(
    dir: &Path,
    registry: &Registry,
    seq: u64,
    owner: Adopt,
) -> Result<(), StoreError> {
    let tmp = dir.join("snapshot.json.tmp");
    let dst = dir.join(SNAPSHOT);
    let mut f = OpenOptions::new()
        .custom_flags(libc::O_NOFOLLOW)
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp))?;
    adopt(&f, &tmp, owner)?;
    let mut w = SealingWriter::new(io::BufWriter::new(&mut f));
    serde_json::to_writer(&mut w, &registry.snapshot(seq)).map_err(|e| io_err(&tmp)(e.into()))?;
    w.finish().map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    fs::rename(&tmp, &dst).map_err(io_err(&dst))?;
    fsync_dir(dir, &sync_all)
}

/// Streams a JSON object and seals it ([`seal`]) without holding it in memory: the last byte
/// (the closing brace) is held back until [`SealingWriter::finish`].
struct SealingWriter<W: Write> {
    inner: W,
    crc: crc32fast::Hasher,
    held: Option<u8>,
}

impl<W: Write> SealingWriter<W> {
    fn new(inner: W) -> Self {
        SealingWriter {
            inner,
            crc: crc32fast::Hasher::new(),
            held: None,
        }
    }

    fn emit(&mut self, b: &[u8]) -> io::Result<()> {
        self.crc.update(b);
        self.inner.write_all(b)
    }

    fn finish(mut self) -> io::Result<()> {
        if self.held != Some(b'}') {
            return Err(io::Error::other("a snapshot is a JSON object"));
        }
        let crc = self.crc.clone().finalize();
        self.inner.write_all(CRC_TAG)?;
        self.inner
            .write_all(format!("{crc:08x}\"}}\n").as_bytes())?;
        self.inner.flush()
    }
}

impl<W: Write> Write for SealingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some((&last, rest)) = buf.split_last() {
            if let Some(h) = self.held.take() {
                self.emit(&[h])?;
            }
            self.emit(rest)?;
            self.held = Some(last);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

struct Journal {
    file: File,
    len: u64,
    since_snapshot: u64,
}

/// The state directory of a running daemon.
pub struct Store {
    dir: PathBuf,
    journal: Mutex<Journal>,
    /// A second handle on the journal, for `fdatasync` without the journal's lock.
    sync_file: File,
    sync_lock: Mutex<()>,
    written: AtomicU64,
    durable: AtomicU64,
    snapshot_every: u64,
    /// Held with `flock`; carries the acknowledged watermark.
    lock: File,
    mark_failed: AtomicBool,
    owner: Adopt,
}

/// What opening the state directory found.
pub struct Recovered {
    /// The registry as of the last durable change.
    pub registry: Registry,
    /// Journal records replayed after the snapshot.
    pub replayed: usize,
    /// Bytes cut from a torn journal tail.
    pub torn_bytes: u64,
    /// Things worth a warning in the log.
    pub warnings: Vec<String>,
}

/// Takes the directory's lock (creating the directory and the lock file when missing).
fn take_lock(dir: &Path, owner: Adopt) -> Result<File, StoreError> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io_err(dir))?;
    let lock_path = dir.join(LOCK);
    let lock = OpenOptions::new()
        .custom_flags(libc::O_NOFOLLOW)
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(io_err(&lock_path))?;
    if !crate::sys::try_lock_exclusive(&lock) {
        return Err(StoreError::Locked(dir.to_path_buf()));
    }
    adopt(&lock, &lock_path, owner)?;
    Ok(lock)
}

/// Reads the state files durably (see [`read_durable`]) with the lock held.
fn read_locked(dir: &Path, mut lock: &File, sync: SyncFn<'_>) -> Result<Files, StoreError> {
    let lock_path = dir.join(LOCK);
    let mut mark = Vec::new();
    lock.read_to_end(&mut mark).map_err(io_err(&lock_path))?;
    let journal = read_durable(&dir.join(JOURNAL), sync)?;
    let snapshot = read_durable(&dir.join(SNAPSHOT), sync)?;
    fsync_dir(dir, sync)?;
    Ok(Files {
        lock: mark,
        snapshot,
        journal,
    })
}

impl Store {
    /// Opens (creating if needed) the state directory, and recovers the registry.
    pub fn open(dir: &Path, snapshot_every: u64) -> Result<(Store, Recovered), StoreError> {
        Store::open_with_sync(dir, snapshot_every, &sync_all)
    }

    /// [`Store::open`] with the function that makes the journal, the snapshot and the directory
    /// durable before they are read (a test watches or fails it).
    pub fn open_with_sync(
        dir: &Path,
        snapshot_every: u64,
        sync: SyncFn<'_>,
    ) -> Result<(Store, Recovered), StoreError> {
        let owner = check_owner(dir)?;
        let lock = take_lock(dir, owner)?;
        let files = read_locked(dir, &lock, sync)?;
        let loaded = load(dir, &files, Mode::Strict)?;
        let mut warnings = loaded.warnings;

        let jpath = dir.join(JOURNAL);
        let file = OpenOptions::new()
            .custom_flags(libc::O_NOFOLLOW)
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&jpath)
            .map_err(io_err(&jpath))?;
        adopt(&file, &jpath, owner)?;
        let mut len = loaded.keep_len;
        let mut since_snapshot = loaded.kept_lines;
        if loaded.torn > 0 {
            warnings.push(format!(
                "{}: cut {} bytes of a torn last record (never acknowledged)",
                jpath.display(),
                loaded.torn
            ));
            file.set_len(len).map_err(io_err(&jpath))?;
            sync(&jpath, &file).map_err(io_err(&jpath))?;
        }
        if loaded.legacy || loaded.snapshot_missing {
            // The first start, or the previous release's state: a snapshot in this format
            // holds everything, then the journal starts again. A crash in between leaves no
            // mark, and the next start does this again.
            write_snapshot(dir, &loaded.registry, loaded.last_seq, owner)?;
            file.set_len(0).map_err(io_err(&jpath))?;
            sync(&jpath, &file).map_err(io_err(&jpath))?;
            if loaded.legacy {
                warnings.push(format!(
                    "{}: converted the previous release's state ({} job(s) through seq {}) to checksummed records",
                    dir.display(),
                    loaded.registry.len(),
                    loaded.last_seq
                ));
            }
            len = 0;
            since_snapshot = 0;
        }
        fsync_dir(dir, sync)?;
        let lock_path = dir.join(LOCK);
        write_mark(&lock, loaded.last_seq)
            .and_then(|()| lock.sync_data())
            .map_err(io_err(&lock_path))?;

        let sync_file = file.try_clone().map_err(io_err(&jpath))?;
        let last_seq = loaded.last_seq;
        let store = Store {
            dir: dir.to_path_buf(),
            journal: Mutex::new(Journal {
                file,
                len,
                since_snapshot,
            }),
            sync_file,
            sync_lock: Mutex::new(()),
            written: AtomicU64::new(last_seq),
            durable: AtomicU64::new(last_seq),
            snapshot_every: snapshot_every.max(1),
            lock,
            mark_failed: AtomicBool::new(false),
            owner,
        };
        Ok((
            store,
            Recovered {
                registry: loaded.registry,
                replayed: loaded.replayed,
                torn_bytes: loaded.torn,
                warnings,
            },
        ))
    }

    /// The state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last sequence number written (durable or not).
    pub fn written_seq(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Appends a change; returns its sequence number. Not yet durable: see [`Store::sync_to`].
    ///
    /// Call with the registry locked, so that journal order is the order changes are applied.
    /// On error the journal is cut back to where it was.
    pub fn append(&self, change: &Change) -> Result<u64, StoreError> {
        let mut j = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let seq = self.written.load(Ordering::Acquire) + 1;
        let path = self.dir.join(JOURNAL);
        let object =
            serde_json::to_vec(&RecordRef { seq, change }).map_err(|e| io_err(&path)(e.into()))?;
        let mut line = seal(object);
        line.push(b'\n');
        if let Err(e) = j.file.write_all(&line) {
            let len = j.len;
            if let Err(e2) = j.file.set_len(len) {
                // The journal may now hold a record that was never acknowledged and that the
                // registry does not have: stop, so that a restart reads the file as the truth.
                log::error!(
                    "{}: cannot cut back a failed write ({e2}); stopping",
                    path.display()
                );
                std::process::abort();
            }
            return Err(io_err(&path)(e));
        }
        j.len += line.len() as u64;
        j.since_snapshot += 1;
        self.written.store(seq, Ordering::Release);
        Ok(seq)
    }

    /// Returns once every change up to `seq` is on disk. Concurrent callers share one fsync.
    ///
    /// A failed fsync aborts the process: after it the kernel may have dropped the dirty pages,
    /// and only a restart that reads the file back knows what is really durable.
    pub fn sync_to(&self, seq: u64) {
        if self.durable.load(Ordering::Acquire) >= seq {
            return;
        }
        let _g = self.sync_lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.durable.load(Ordering::Acquire) >= seq {
            return;
        }
        let target = self.written.load(Ordering::Acquire);
        if let Err(e) = self.sync_file.sync_data() {
            log::error!(
                "{}: fsync failed ({e}); stopping so that a restart recovers what is on disk",
                self.dir.join(JOURNAL).display()
            );
            std::process::abort();
        }
        self.durable.fetch_max(target, Ordering::AcqRel);
        // The watermark is written only after the journal holding it is durable, so whenever
        // the kernel writes it back it never claims more than the disk has; no fsync of its
        // own: a watermark that lags a few seconds still catches a journal cut before it.
        if let Err(e) = write_mark(&self.lock, target) {
            if !self.mark_failed.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "{}: cannot record the acknowledged sequence number ({e}); a cut journal may go unnoticed",
                    self.dir.join(LOCK).display()
                );
            }
        }
    }

    /// Writes a snapshot and empties the journal when enough records have accumulated. Call
    /// with the registry locked (no append can slip between the snapshot and the truncation).
    pub fn maybe_snapshot(&self, registry: &Registry) -> Result<bool, StoreError> {
        let mut j = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if j.since_snapshot < self.snapshot_every {
            return Ok(false);
        }
        let seq = self.written.load(Ordering::Acquire);
        write_snapshot(&self.dir, registry, seq, self.owner)?;
        // The snapshot holds every record up to `seq`: they are durable now, and the journal
        // can start again. A crash before the truncation leaves records the snapshot covers,
        // ending at `seq` exactly, which a restart skips by their sequence numbers.
        self.durable.fetch_max(seq, Ordering::AcqRel);
        let path = self.dir.join(JOURNAL);
        j.file.set_len(0).map_err(io_err(&path))?;
        j.file.sync_all().map_err(io_err(&path))?;
        j.len = 0;
        j.since_snapshot = 0;
        Ok(true)
    }
}

/// One journal line, as written (without copying the change).
#[derive(Serialize)]
struct RecordRef<'a> {
    seq: u64,
    #[serde(flatten)]
    change: &'a Change,
}

/// What [`repair`] did.
#[derive(Debug)]
pub struct RepairReport {
    /// The state directory.
    pub dir: PathBuf,
    /// The state kept ends at this sequence number (every record up to it is kept).
    pub kept_seq: u64,
    /// Jobs in the kept state.
    pub jobs: usize,
    /// What was dropped: one entry per damaged or following journal line (file, line, seq,
    /// job, why), per lost range of sequence numbers, and for a cut tail.
    pub dropped: Vec<String>,
    /// Where the damaged journal was kept, when it was replaced.
    pub backup: Option<PathBuf>,
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(backup) = &self.backup else {
            return write!(
                f,
                "{}: nothing to repair: {} job(s), state through seq {}",
                self.dir.display(),
                self.jobs,
                self.kept_seq
            );
        };
        writeln!(
            f,
            "{}: kept {} record(s) (through seq {}), {} job(s); dropped:",
            self.dir.display(),
            self.kept_seq,
            self.kept_seq,
            self.jobs
        )?;
        for d in &self.dropped {
            writeln!(f, "  - {d}")?;
        }
        write!(f, "the damaged journal is kept as {}", backup.display())
    }
}

/// Repairs a state directory the daemon refuses: keeps the snapshot and the journal's valid
/// prefix (the records up to the first damage, contiguous from the snapshot), writes a new
/// snapshot of that state and an empty journal (each atomically, by rename), keeps the damaged
/// journal as `journal.jsonl.damaged-<unix time>` and reports what it dropped. A damaged
/// snapshot is not repaired (there is no base to rebuild its jobs on). Takes the lock: the
/// daemon must be stopped.
pub fn repair(dir: &Path) -> Result<RepairReport, StoreError> {
    fs::metadata(dir).map_err(io_err(dir))?;
    let owner = check_owner(dir)?;
    let lock = take_lock(dir, owner)?;
    let files = read_locked(dir, &lock, &sync_all)?;
    let mut loaded = load(dir, &files, Mode::Repair)?;
    let jpath = dir.join(JOURNAL);
    if loaded.torn > 0 {
        loaded.dropped.push(format!(
            "{}: {} byte(s) of a torn last record after line {} (never acknowledged)",
            jpath.display(),
            loaded.torn,
            files
                .journal
                .as_deref()
                .map_or(0, |j| j.iter().filter(|&&b| b == b'\n').count())
        ));
    }
    let mut report = RepairReport {
        dir: dir.to_path_buf(),
        kept_seq: loaded.last_seq,
        jobs: loaded.registry.len(),
        dropped: loaded.dropped,
        backup: None,
    };
    if report.dropped.is_empty() {
        return Ok(report);
    }

    // 1. The damaged journal, byte for byte, next to the new one.
    let journal = files.journal.unwrap_or_default();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut n = 0;
    let (backup, mut f) = loop {
        let name = if n == 0 {
            format!("{JOURNAL}.damaged-{stamp}")
        } else {
            format!("{JOURNAL}.damaged-{stamp}-{n}")
        };
        let p = dir.join(name);
        match OpenOptions::new()
            .custom_flags(libc::O_NOFOLLOW)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&p)
        {
            Ok(f) => {
                adopt(&f, &p, owner)?;
                break (p, f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(io_err(&p)(e)),
        }
    };
    f.write_all(&journal)
        .and_then(|()| f.sync_all())
        .map_err(io_err(&backup))?;
    fsync_dir(dir, &sync_all)?;
    // 2. The kept state as a snapshot; 3. an empty journal. A crash between the two leaves the
    // new snapshot and the old journal, whose valid prefix it covers: --repair again.
    write_snapshot(dir, &loaded.registry, loaded.last_seq, owner)?;
    let tmp = dir.join("journal.jsonl.tmp");
    OpenOptions::new()
        .custom_flags(libc::O_NOFOLLOW)
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io_err(&tmp))
        .and_then(|f| {
            adopt(&f, &tmp, owner)?;
            f.sync_all().map_err(io_err(&tmp))
        })?;
    fs::rename(&tmp, &jpath).map_err(io_err(&jpath))?;
    fsync_dir(dir, &sync_all)?;
    // 4. The watermark: the dropped records are no longer expected.
    let lock_path = dir.join(LOCK);
    lock.set_len(0)
        .and_then(|()| write_mark(&lock, loaded.last_seq))
        .and_then(|()| lock.sync_data())
        .map_err(io_err(&lock_path))?;
    report.backup = Some(backup);
    Ok(report)
}

/// Verifies a state directory without writing anything (`sparesd --check`): no directory, lock,
/// journal or snapshot is created. Returns a summary, or the error a start would give.
pub fn check(dir: &Path) -> Result<String, StoreError> {
    let meta = match fs::metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(format!(
                "state {}: does not exist yet; sparesd creates it (mode 0700) at its first start",
                dir.display()
            ))
        }
        Err(e) => return Err(io_err(dir)(e)),
    };
    let lock_path = dir.join(LOCK);
    // A running daemon holds the lock: say so (what it writes meanwhile may look torn).
    let running = match open_read(&lock_path) {
        Ok(f) => !crate::sys::try_lock_exclusive(&f),
        Err(_) => false,
    };
    let files = Files {
        lock: read_plain(&lock_path)?.unwrap_or_default(),
        snapshot: read_plain(&dir.join(SNAPSHOT))?,
        journal: read_plain(&dir.join(JOURNAL))?,
    };
    let loaded = load(dir, &files, Mode::Strict)?;
    let mut out = format!(
        "state {}: {} job(s), state through seq {} (snapshot at seq {}, {} journal record(s) to replay); owned by {} (uid {})",
        dir.display(),
        loaded.registry.len(),
        loaded.last_seq,
        loaded.snap_seq,
        loaded.replayed,
        user_name(meta.uid()),
        meta.uid()
    );
    if loaded.torn > 0 {
        out += &format!(
            "; a torn last record of {} byte(s) (never acknowledged) is cut at start",
            loaded.torn
        );
    }
    if loaded.legacy {
        out += "; written by the previous release: converted to checksummed records at start";
    }
    if running {
        out += "; a running sparesd holds it";
    }
    for w in loaded.warnings {
        out += &format!("\nwarning: {w}");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_sealed_line_unseals_and_a_changed_byte_does_not() {
        let line = seal(br#"{"seq":7,"op":"release","job_id":3}"#.to_vec());
        assert!(line.ends_with(b"\"}"));
        let Unsealed::Valid(body) = unseal(&line) else {
            panic!("a sealed line is valid")
        };
        assert_eq!(body, br#"{"seq":7,"op":"release","job_id":3}"#);
        for i in 0..line.len() {
            let mut bad = line.clone();
            bad[i] ^= 0x01;
            assert!(
                !matches!(unseal(&bad), Unsealed::Valid(_)),
                "byte {i} flipped"
            );
        }
        assert!(matches!(unseal(b"{\"seq\":7}"), Unsealed::Missing));
    }

    #[test]
    fn the_streamed_snapshot_seal_is_the_line_seal() {
        let object = br#"{"format":1,"seq":3,"jobs":[]}"#;
        let mut out = Vec::new();
        let mut w = SealingWriter::new(&mut out);
        w.write_all(&object[..5]).unwrap();
        w.write_all(&object[5..]).unwrap();
        w.finish().unwrap();
        let mut want = seal(object.to_vec());
        want.push(b'\n');
        assert_eq!(out, want);
    }

    #[test]
    fn open_syncs_the_journal_the_snapshot_and_the_directory_and_stops_when_it_fails() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        drop(Store::open(&dir, 10).unwrap());

        // What a start makes durable before it reads (and serves) anything.
        let synced = RefCell::new(Vec::new());
        let watch = |p: &Path, f: &File| {
            synced.borrow_mut().push(p.to_path_buf());
            f.sync_all()
        };
        drop(Store::open_with_sync(&dir, 10, &watch).unwrap());
        let synced = synced.into_inner();
        for p in [dir.join(JOURNAL), dir.join(SNAPSHOT), dir.clone()] {
            assert!(
                synced.contains(&p),
                "{} not synced: {synced:?}",
                p.display()
            );
        }

        // An fsync error on the journal (e.g. left by a failed writeback) refuses the start.
        let failing = |p: &Path, f: &File| {
            if p.ends_with(JOURNAL) {
                Err(io::Error::from_raw_os_error(libc::EIO))
            } else {
                f.sync_all()
            }
        };
        match Store::open_with_sync(&dir, 10, &failing) {
            Err(StoreError::Io { path, .. }) => assert_eq!(path, dir.join(JOURNAL)),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("started although the journal could not be synced"),
        }
    }
}
