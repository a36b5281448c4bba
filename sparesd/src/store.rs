//! Durable state: an append-only journal of JSON lines plus a periodic snapshot.
//!
//! Layout of the state directory (all text, readable with `jq`):
//! - `journal.jsonl`: one change per line, `{"seq":N,"op":"register"|"fail"|"release",...}`.
//! - `snapshot.json`: the registry at journal sequence `seq` (registered maps and answered
//!   failures); written to `snapshot.json.tmp`, fsynced, renamed, directory fsynced.
//! - `lock`: held with `flock` while a daemon runs, so two daemons never share a directory.
//!
//! A change is acknowledged only after [`Store::sync_to`] returned for its sequence number:
//! concurrent writers share one `fdatasync` (group commit). On start the snapshot is loaded, the
//! journal records after it are replayed, and a torn last line (a write cut by a crash, never
//! acknowledged) is cut off. A bad line followed by good ones is corruption: the daemon refuses
//! to start rather than guess.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::registry::{Change, Registry, Snapshot};

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
    /// A file that cannot be read back.
    #[error("{path}: {why}; the daemon will not guess: inspect the file, and move it away to start empty")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong, with the line number.
        why: String,
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
    _lock: File,
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

fn fsync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err(dir))
}

impl Store {
    /// Opens (creating if needed) the state directory, and recovers the registry.
    pub fn open(dir: &Path, snapshot_every: u64) -> Result<(Store, Recovered), StoreError> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io_err(dir))?;
        let lock_path = dir.join("lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        if !crate::sys::try_lock_exclusive(&lock) {
            return Err(StoreError::Locked(dir.to_path_buf()));
        }

        let snap_path = dir.join("snapshot.json");
        let (mut registry, snap_seq, mut warnings) = match fs::read(&snap_path) {
            Ok(bytes) => {
                let snap: Snapshot =
                    serde_json::from_slice(&bytes).map_err(|e| StoreError::Corrupt {
                        path: snap_path.clone(),
                        why: e.to_string(),
                    })?;
                let seq = snap.seq;
                let (reg, w) = Registry::from_snapshot(snap).map_err(|e| StoreError::Corrupt {
                    path: snap_path.clone(),
                    why: e.to_string(),
                })?;
                (reg, seq, w)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (Registry::new(), 0, Vec::new()),
            Err(e) => return Err(io_err(&snap_path)(e)),
        };

        let jpath = dir.join("journal.jsonl");
        let bytes = match fs::read(&jpath) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(&jpath)(e)),
        };
        let mut good_len = 0usize;
        let mut last_seq = snap_seq;
        let mut replayed = 0;
        let mut records = 0;
        let mut pos = 0usize;
        let mut lineno = 0;
        while pos < bytes.len() {
            let Some(nl) = bytes[pos..].iter().position(|&b| b == b'\n') else {
                break; // no newline: a torn write
            };
            lineno += 1;
            let line = &bytes[pos..pos + nl];
            let next = pos + nl + 1;
            let rec: Record = match serde_json::from_slice(line) {
                Ok(r) => r,
                Err(e) => {
                    if bytes[next..].iter().all(|&b| b == b'\n' || b == 0) {
                        break; // the last line, cut or garbled by a crash: never acknowledged
                    }
                    return Err(StoreError::Corrupt {
                        path: jpath.clone(),
                        why: format!("line {lineno}: {e}"),
                    });
                }
            };
            records += 1;
            if rec.seq > snap_seq {
                if rec.seq <= last_seq {
                    return Err(StoreError::Corrupt {
                        path: jpath.clone(),
                        why: format!("line {lineno}: sequence {} after {last_seq}", rec.seq),
                    });
                }
                match registry.replay(rec.change, rec.seq) {
                    Ok(Some(w)) => warnings.push(w),
                    Ok(None) => {}
                    Err(e) => {
                        return Err(StoreError::Corrupt {
                            path: jpath.clone(),
                            why: format!("line {lineno} cannot be replayed: {e}"),
                        })
                    }
                }
                last_seq = rec.seq;
                replayed += 1;
            }
            pos = next;
            good_len = pos;
        }
        let torn = (bytes.len() - good_len) as u64;

        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&jpath)
            .map_err(io_err(&jpath))?;
        if torn > 0 {
            warnings.push(format!(
                "{}: cut {torn} bytes of a torn last record (never acknowledged)",
                jpath.display()
            ));
            file.set_len(good_len as u64).map_err(io_err(&jpath))?;
            file.sync_all().map_err(io_err(&jpath))?;
        }
        fsync_dir(dir)?;
        let sync_file = file.try_clone().map_err(io_err(&jpath))?;
        let store = Store {
            dir: dir.to_path_buf(),
            journal: Mutex::new(Journal {
                file,
                len: good_len as u64,
                since_snapshot: records,
            }),
            sync_file,
            sync_lock: Mutex::new(()),
            written: AtomicU64::new(last_seq),
            durable: AtomicU64::new(last_seq),
            snapshot_every: snapshot_every.max(1),
            _lock: lock,
        };
        Ok((
            store,
            Recovered {
                registry,
                replayed,
                torn_bytes: torn,
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
        let mut line = serde_json::to_vec(&Record {
            seq,
            change: change.clone(),
        })
        .expect("journal records serialise");
        line.push(b'\n');
        let path = self.dir.join("journal.jsonl");
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
                self.dir.join("journal.jsonl").display()
            );
            std::process::abort();
        }
        self.durable.fetch_max(target, Ordering::AcqRel);
    }

    /// Writes a snapshot and empties the journal when enough records have accumulated. Call
    /// with the registry locked (no append can slip between the snapshot and the truncation).
    pub fn maybe_snapshot(&self, registry: &Registry) -> Result<bool, StoreError> {
        let mut j = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if j.since_snapshot < self.snapshot_every {
            return Ok(false);
        }
        let seq = self.written.load(Ordering::Acquire);
        self.write_snapshot(registry, seq)?;
        // The snapshot holds every record up to `seq`: they are durable now, and the journal
        // can start again. A crash before the truncation leaves records the snapshot covers,
        // which a restart skips by their sequence numbers.
        self.durable.fetch_max(seq, Ordering::AcqRel);
        let path = self.dir.join("journal.jsonl");
        j.file.set_len(0).map_err(io_err(&path))?;
        j.file.sync_all().map_err(io_err(&path))?;
        j.len = 0;
        j.since_snapshot = 0;
        Ok(true)
    }

    fn write_snapshot(&self, registry: &Registry, seq: u64) -> Result<(), StoreError> {
        let tmp = self.dir.join("snapshot.json.tmp");
        let dst = self.dir.join("snapshot.json");
        let mut f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        let mut w = io::BufWriter::new(&mut f);
        serde_json::to_writer(&mut w, &registry.snapshot(seq))
            .map_err(|e| io_err(&tmp)(e.into()))?;
        w.write_all(b"\n").map_err(io_err(&tmp))?;
        w.flush().map_err(io_err(&tmp))?;
        drop(w);
        f.sync_all().map_err(io_err(&tmp))?;
        fs::rename(&tmp, &dst).map_err(io_err(&dst))?;
        fsync_dir(&self.dir)
    }
}
