//! The directory where root writes the job map files (`state_dir` of the policy).
//!
//! The plugins write there as root, and the job's user knows the names (they contain the job
//! id). So every access goes through one directory descriptor, opened without following a
//! link, and checked with `fstat` to be owned by this process's user (root in Slurm) and not
//! writable by group or others: nobody else can plant a link or a file in it. Files are
//! created under a fresh temporary name with `O_CREAT | O_EXCL | O_NOFOLLOW` relative to that
//! descriptor and renamed into place, and removed with `unlinkat`: no path is resolved again
//! after the check, and no existing file or link is ever opened for writing.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Gid, Mode, OFlags, Uid};
use rustix::io::Errno;

/// Why the state directory or a file in it was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateDirError {
    #[error("state directory {path}: {why}")]
    Open { path: String, why: String },
    #[error("state directory {path} is owned by uid {owner}, neither root nor uid {expected} (this process): refusing to use it")]
    Owner {
        path: String,
        owner: u32,
        expected: u32,
    },
    #[error("state directory {path} has mode {mode:04o}: writable by group or others, refusing to use it (chmod go-w)")]
    Writable { path: String, mode: u32 },
    #[error("state directory {path}: {name:?} is not a plain file name")]
    BadName { path: String, name: String },
    #[error("cannot write {path}: {why}")]
    Write { path: String, why: String },
    #[error("cannot read {path}: {why}")]
    Read { path: String, why: String },
    #[error("{path} has {size} bytes; the limit is {limit}")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{path} is not a regular file")]
    NotRegular { path: String },
    #[error("cannot remove {path}: {why}")]
    Remove { path: String, why: String },
}

/// A checked state directory, held open.
#[derive(Debug)]
pub struct StateDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// How many temporary names a writer tries before giving up (a name is taken only by a
/// writer of the same process id that died between create and rename).
const TEMP_ATTEMPTS: u32 = 16;

impl StateDir {
    /// Opens `path`, creating it (mode 0755, with missing parents) if it does not exist, and
    /// checks it: a directory (not a link to one), owned by root or this process's effective
    /// uid, not writable by group or others.
    pub fn open_or_create(path: &Path) -> Result<StateDir, StateDirError> {
        if std::fs::symlink_metadata(path).is_err() {
            use std::os::unix::fs::DirBuilderExt;
            // Races with another node creating it are fine: the open below checks the result.
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(path);
        }
        Self::open(path)
    }

    /// Opens and checks an existing directory (see [`StateDir::open_or_create`]).
    pub fn open(path: &Path) -> Result<StateDir, StateDirError> {
        let shown = path.display().to_string();
        let open_err = |e: Errno| StateDirError::Open {
            path: shown.clone(),
            why: match e {
                // O_NOFOLLOW with O_DIRECTORY fails a link with ENOTDIR or ELOOP.
                Errno::LOOP | Errno::NOTDIR
                    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_symlink()) =>
                {
                    "is a symbolic link".into()
                }
                Errno::NOTDIR => "is not a directory".into(),
                e => std::io::Error::from(e).to_string(),
            },
        };
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(open_err)?;
        let st = rustix::fs::fstat(&fd).map_err(open_err)?;
        let expected = rustix::process::geteuid().as_raw();
        // Root's in Slurm; a reader that runs as the job's user (e.g. in user_init) still
        // wants root's directory, and its own one could only fool itself.
        if st.st_uid != 0 && st.st_uid != expected {
            return Err(StateDirError::Owner {
                path: shown,
                owner: st.st_uid,
                expected,
            });
        }
        let mode = st.st_mode & 0o7777;
        if mode & 0o022 != 0 {
            return Err(StateDirError::Writable { path: shown, mode });
        }
        Ok(StateDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory's path (for messages and the task environment).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn shown(&self, name: &str) -> String {
        self.path.join(name).display().to_string()
    }

    fn check_name(&self, name: &str) -> Result<(), StateDirError> {
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            return Err(StateDirError::BadName {
                path: self.path.display().to_string(),
                name: name.into(),
            });
        }
        Ok(())
    }

    /// Writes `contents` to `name` in this directory: a new temporary file (never an
    /// existing file or link), mode `mode` and group `gid`, renamed over `name`. A reader
    /// never sees half a file, and concurrent writers of the same content do not collide.
    pub fn write_file(
        &self,
        name: &str,
        contents: &[u8],
        mode: u32,
        gid: Option<u32>,
    ) -> Result<(), StateDirError> {
        self.check_name(name)?;
        let err = |e: std::io::Error| StateDirError::Write {
            path: self.shown(name),
            why: e.to_string(),
        };
        let (tmp, fd) = self.create_temp(name).map_err(err)?;
        let written = (|| -> std::io::Result<()> {
            rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode & 0o777))?;
            if let Some(gid) = gid {
                rustix::fs::fchown(&fd, None::<Uid>, Some(Gid::from_raw(gid)))?;
            }
            let mut file = File::from(fd);
            file.write_all(contents)?;
            rustix::fs::renameat(&self.fd, &tmp, &self.fd, name)?;
            Ok(())
        })();
        if written.is_err() {
            let _ = rustix::fs::unlinkat(&self.fd, &tmp, AtFlags::empty());
        }
        written.map_err(err)
    }

    /// A fresh temporary file next to `name`, created exclusively.
    fn create_temp(&self, name: &str) -> std::io::Result<(String, OwnedFd)> {
        let pid = std::process::id();
        let mut last = Errno::EXIST;
        for attempt in 0..TEMP_ATTEMPTS {
            let tmp = format!(".{name}.tmp.{pid}.{attempt}");
            match rustix::fs::openat(
                &self.fd,
                &tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(fd) => return Ok((tmp, fd)),
                Err(Errno::EXIST) => last = Errno::EXIST,
                Err(e) => return Err(e.into()),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{TEMP_ATTEMPTS} temporary names taken ({})",
                std::io::Error::from(last)
            ),
        ))
    }

    /// Reads `name` (a regular file, not a link, at most `limit` bytes); `None` if it does
    /// not exist.
    pub fn read_file(&self, name: &str, limit: u64) -> Result<Option<String>, StateDirError> {
        self.check_name(name)?;
        let path = self.shown(name);
        let err = |e: std::io::Error| StateDirError::Read {
            path: path.clone(),
            why: e.to_string(),
        };
        let fd = match rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(err(e.into())),
        };
        let st = rustix::fs::fstat(&fd).map_err(|e| err(e.into()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(StateDirError::NotRegular { path });
        }
        let size = st.st_size.max(0) as u64;
        if size > limit {
            return Err(StateDirError::TooLarge { path, size, limit });
        }
        let mut text = String::with_capacity(size as usize);
        // The file may grow after fstat: never read more than the limit.
        File::from(fd)
            .take(limit + 1)
            .read_to_string(&mut text)
            .map_err(err)?;
        if text.len() as u64 > limit {
            return Err(StateDirError::TooLarge {
                path,
                size: text.len() as u64,
                limit,
            });
        }
        Ok(Some(text))
    }

    /// Whether `name` is a regular file (a link is not).
    pub fn is_file(&self, name: &str) -> bool {
        self.check_name(name).is_ok()
            && rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile)
    }

    /// Removes `name` (the entry itself, never what a link points to); whether it existed.
    pub fn remove_file(&self, name: &str) -> Result<bool, StateDirError> {
        self.check_name(name)?;
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()) {
            Ok(()) => Ok(true),
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(StateDirError::Remove {
                path: self.shown(name),
                why: std::io::Error::from(e).to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// A fresh directory owned by the test's user, mode 0755, removed when dropped.
    fn fresh(name: &str) -> tempfile::TempDir {
        let d = tempfile::Builder::new()
            .prefix(&format!("spares-statedir-{name}-"))
            .tempdir()
            .unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        d
    }

    #[test]
    fn writes_reads_and_removes() {
        let dir = fresh("rw");
        let d = dir.path();
        let s = StateDir::open(d).unwrap();
        s.write_file("a.json", b"first", 0o640, None).unwrap();
        s.write_file("a.json", b"second", 0o640, None).unwrap();
        assert_eq!(
            s.read_file("a.json", 100).unwrap().as_deref(),
            Some("second")
        );
        let md = std::fs::metadata(d.join("a.json")).unwrap();
        assert_eq!(md.mode() & 0o777, 0o640);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.json"]);
        assert!(s.remove_file("a.json").unwrap());
        assert!(!s.remove_file("a.json").unwrap());
        assert_eq!(s.read_file("a.json", 100).unwrap(), None);
    }

    #[test]
    fn a_planted_link_is_replaced_not_followed() {
        let dir = fresh("link");
        let d = dir.path();
        let outside = fresh("victim");
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let s = StateDir::open(d).unwrap();
        // Links at the final name and at every temporary name this process would use.
        std::os::unix::fs::symlink(&victim, d.join("m.json")).unwrap();
        for i in 0..TEMP_ATTEMPTS / 2 {
            let tmp = d.join(format!(".m.json.tmp.{}.{i}", std::process::id()));
            std::os::unix::fs::symlink(&victim, tmp).unwrap();
        }
        s.write_file("m.json", b"map", 0o644, None).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(d.join("m.json"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read_to_string(d.join("m.json")).unwrap(), "map");
        // A link is not read through either, and removing it leaves its target alone.
        std::os::unix::fs::symlink(&victim, d.join("r.json")).unwrap();
        assert!(matches!(
            s.read_file("r.json", 100),
            Err(StateDirError::Read { .. })
        ));
        assert!(s.remove_file("r.json").unwrap());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        std::fs::remove_file(victim).unwrap();
    }

    #[test]
    fn every_temporary_name_taken_is_an_error_not_a_reuse() {
        let dir = fresh("taken");
        let d = dir.path();
        let s = StateDir::open(d).unwrap();
        for i in 0..TEMP_ATTEMPTS {
            let tmp = d.join(format!(".x.tmp.{}.{i}", std::process::id()));
            std::fs::write(tmp, "attacker").unwrap();
        }
        let e = s.write_file("x", b"map", 0o644, None).unwrap_err();
        assert!(e.to_string().contains("temporary names taken"), "{e}");
        let tmp0 = d.join(format!(".x.tmp.{}.0", std::process::id()));
        assert_eq!(std::fs::read_to_string(tmp0).unwrap(), "attacker");
        assert!(!d.join("x").exists());
    }

    #[test]
    fn unsafe_directories_are_refused() {
        let dir = fresh("perm");
        let d = dir.path();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = StateDir::open(d).unwrap_err();
        assert!(
            matches!(e, StateDirError::Writable { mode: 0o777, .. }),
            "{e}"
        );
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(matches!(
            StateDir::open(d),
            Err(StateDirError::Writable { .. })
        ));
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(matches!(
            StateDir::open(d),
            Err(StateDirError::Writable { .. })
        ));
        // A link to a good directory is refused too.
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let link = d.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(d, &link).unwrap();
        let e = StateDir::open(&link).unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        std::fs::remove_file(link).unwrap();
        // Someone else's directory (only root can hand one over in a test).
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(d, Some(65534), None).unwrap();
            let e = StateDir::open(d).unwrap_err();
            assert!(
                matches!(
                    e,
                    StateDirError::Owner {
                        owner: 65534,
                        expected: 0,
                        ..
                    }
                ),
                "{e}"
            );
        }
    }

    #[test]
    fn missing_directories_are_created_0755() {
        let dir = fresh("create");
        let d = dir.path().join("a/b");
        let s = StateDir::open_or_create(&d).unwrap();
        assert_eq!(std::fs::metadata(s.path()).unwrap().mode() & 0o777, 0o755);
    }

    #[test]
    fn reads_are_bounded_and_regular_files_only() {
        let dir = fresh("limits");
        let d = dir.path();
        let s = StateDir::open(d).unwrap();
        std::fs::write(d.join("big"), vec![b'x'; 101]).unwrap();
        let e = s.read_file("big", 100).unwrap_err();
        assert!(
            e.to_string().ends_with("has 101 bytes; the limit is 100"),
            "{e}"
        );
        std::fs::create_dir(d.join("sub")).unwrap();
        assert!(matches!(
            s.read_file("sub", 100),
            Err(StateDirError::NotRegular { .. })
        ));
        assert!(matches!(
            s.write_file("../x", b"", 0o644, None),
            Err(StateDirError::BadName { .. })
        ));
    }
}
