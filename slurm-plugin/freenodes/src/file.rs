//! The free-node file, version 2 (docs/admin.md): one line per state and partition set,
//! `HOSTLIST state=free|busy|unusable partitions=P,Q*`, replaced atomically in a directory
//! only root can write, never through a link.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{Mode, OFlags};
use topology::hostlist;

use crate::slurm::{NodeInfo, NodeState};
use crate::Error;

/// The text of the file: nodes grouped by state and partitions, each group one compressed
/// hostlist, in a stable order (state, then partitions).
pub fn render(nodes: &BTreeMap<String, NodeInfo>) -> String {
    let mut groups: BTreeMap<(NodeState, String), Vec<&str>> = BTreeMap::new();
    for (name, info) in nodes {
        groups
            .entry((info.state, info.partitions.join(",")))
            .or_default()
            .push(name);
    }
    let mut out = String::from(
        "# Free-node file v2, written by spares-free-nodes from sinfo (docs/admin.md).\n",
    );
    for ((state, partitions), names) in groups {
        out.push_str(&hostlist::compress(&names));
        out.push_str(" state=");
        out.push_str(state.word());
        if !partitions.is_empty() {
            out.push_str(" partitions=");
            out.push_str(&partitions);
        }
        out.push('\n');
    }
    out
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Opens the file's directory (created 0755 if missing) after checking that no one but this
/// user can change it: owned by the effective user, not writable by group or others, not a
/// link. Otherwise another user could swap the file or the temp file for a link.
pub fn open_dir(dir: &Path) -> Result<OwnedFd, Error> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(dir)
            .map_err(io(dir))?;
        // DirBuilder honours the umask; make the mode exact.
        rustix::fs::chmod(dir, Mode::from_raw_mode(0o755)).map_err(|e| io(dir)(e.into()))?;
    }
    let fd = rustix::fs::open(
        dir,
        OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io(dir)(e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| io(dir)(e.into()))?;
    let me = rustix::process::geteuid().as_raw();
    let unsafe_dir = |why: String| Error::Unsafe {
        path: dir.display().to_string(),
        why,
    };
    if st.st_uid != me {
        return Err(unsafe_dir(format!(
            "owned by uid {}, not by this service's uid {me}; not written",
            st.st_uid
        )));
    }
    if st.st_mode & 0o022 != 0 {
        return Err(unsafe_dir(format!(
            "mode {:o} lets group or others write; not written (chmod go-w)",
            st.st_mode & 0o7777
        )));
    }
    Ok(fd)
}

/// Replaces `path` with `text`: a temp file in the same directory (created with O_EXCL and
/// O_NOFOLLOW, so never through a link), fsync, rename over the file (a link there is
/// replaced, not followed), fsync of the directory.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), Error> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::Unsafe {
            path: path.display().to_string(),
            why: "no directory and file name".into(),
        });
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let dirfd = open_dir(dir)?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(".tmp");
    let tmp_path = dir.join(&tmp_name);
    // A temp file left by a killed run; only this user can have made it (open_dir).
    match rustix::fs::unlinkat(&dirfd, &tmp_name, rustix::fs::AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(io(&tmp_path)(e.into())),
    }
    let fd = rustix::fs::openat(
        &dirfd,
        &tmp_name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| io(&tmp_path)(e.into()))?;
    let mut file = std::fs::File::from(fd);
    file.write_all(text.as_bytes()).map_err(io(&tmp_path))?;
    file.sync_all().map_err(io(&tmp_path))?;
    drop(file);
    rustix::fs::renameat(&dirfd, &tmp_name, &dirfd, name).map_err(|e| io(path)(e.into()))?;
    rustix::fs::fsync(&dirfd).map_err(|e| io(dir)(e.into()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn node(state: NodeState, partitions: &[&str]) -> NodeInfo {
        NodeInfo {
            state,
            partitions: partitions.iter().map(|p| p.to_string()).collect(),
        }
    }

    #[test]
    fn nodes_are_grouped_by_state_and_partitions() {
        let mut nodes = BTreeMap::new();
        for i in 1..=4 {
            nodes.insert(format!("node{i:02}"), node(NodeState::Free, &["debug*"]));
        }
        nodes.insert("node05".into(), node(NodeState::Unusable, &["debug*"]));
        nodes.insert("node06".into(), node(NodeState::Busy, &["big", "debug*"]));
        nodes.insert("node07".into(), node(NodeState::Free, &[]));
        let text = render(&nodes);
        let lines: Vec<&str> = text.lines().skip(1).collect();
        assert_eq!(
            lines,
            vec![
                "node07 state=free",
                "node[01-04] state=free partitions=debug*",
                "node06 state=busy partitions=big,debug*",
                "node05 state=unusable partitions=debug*",
            ]
        );
    }

    #[test]
    fn the_file_is_replaced_and_a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        let path = dir.path().join("free-nodes");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        // A link planted where the temp file goes is removed, not written through.
        std::os::unix::fs::symlink(&victim, dir.path().join(".free-nodes.tmp")).unwrap();
        write_atomic(&path, "node01 state=free\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "node01 state=free\n"
        );
        write_atomic(&path, "node02 state=busy\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "node02 state=busy\n"
        );
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = write_atomic(&dir.path().join("f"), "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mode 1777 lets group or others write"), "{e}");
        assert!(!dir.path().join("f").exists());
    }

    #[test]
    fn a_missing_directory_is_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("run/spares");
        write_atomic(&sub.join("free-nodes"), "x\n").unwrap();
        let mode = std::fs::metadata(&sub).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
    }
}
