//! Reading a site file (topology, policy, map document) safely: slurmctld reads these inside
//! `job_submit`, so a path that is a FIFO, a device such as `/dev/zero`, a directory or a
//! huge file must be refused quickly, not block the daemon or fill its memory.
//!
//! The file is opened with `O_NONBLOCK` (opening a FIFO without a writer does not wait) and
//! `O_CLOEXEC`, then checked with `fstat` on the opened descriptor (not `stat` on the path, so
//! nothing can be swapped in between): only regular files are read, and at most `max_bytes`
//! of them. Symbolic links are followed: site files are written by the administrator.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a site file could not be read; every message names the path.
#[derive(Debug, thiserror::Error)]
pub enum SiteFileError {
    /// The file cannot be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The path as given.
        path: String,
        /// What the system said.
        source: std::io::Error,
    },
    /// The path is not a regular file (a FIFO, a device, a directory, a socket).
    #[error("{path} is a {kind}, not a regular file")]
    NotRegular {
        /// The path as given.
        path: String,
        /// What it is.
        kind: &'static str,
    },
    /// The file is larger than the limit.
    #[error("{path} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The path as given.
        path: String,
        /// The limit in bytes.
        limit: u64,
    },
    /// The file is not UTF-8 text.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// The path as given.
        path: String,
    },
}

/// Reads a regular file of at most `max_bytes` as UTF-8 text (see the module's notes).
pub fn read(path: &Path, max_bytes: u64) -> Result<String, SiteFileError> {
    let name = || path.display().to_string();
    let io = |source| SiteFileError::Io {
        path: name(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    // fstat on the descriptor we read from.
    let meta = file.metadata().map_err(io)?;
    let ft = meta.file_type();
    if !ft.is_file() {
        let kind = if ft.is_dir() {
            "directory"
        } else if ft.is_fifo() {
            "FIFO"
        } else if ft.is_char_device() {
            "character device"
        } else if ft.is_block_device() {
            "block device"
        } else if ft.is_socket() {
            "socket"
        } else {
            "special file"
        };
        return Err(SiteFileError::NotRegular { path: name(), kind });
    }
    if meta.len() > max_bytes {
        return Err(SiteFileError::TooLarge {
            path: name(),
            limit: max_bytes,
        });
    }
    // The file may grow after fstat: never read more than the limit plus one byte.
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&file as &File)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(SiteFileError::TooLarge {
            path: name(),
            limit: max_bytes,
        });
    }
    String::from_utf8(bytes).map_err(|_| SiteFileError::NotText { path: name() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("spares-sitefile-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn regular_files_within_the_limit_are_read() {
        let d = temp_dir("ok");
        let p = d.join("t.yaml");
        std::fs::write(&p, "extents: [2]\n").unwrap();
        assert_eq!(read(&p, 100).unwrap(), "extents: [2]\n");
        // Exactly at the limit is fine, one byte over is not.
        assert!(read(&p, 13).is_ok());
        let e = read(&p, 12).unwrap_err().to_string();
        assert!(e.contains("larger than the limit of 12 bytes"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        let d = temp_dir("special");
        let fifo = d.join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Without O_NONBLOCK this open would wait for a writer forever.
        let e = read(&fifo, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("is a FIFO"), "{e}");
        let e = read(Path::new("/dev/zero"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/dev/zero is a character device"), "{e}");
        let e = read(&d, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
