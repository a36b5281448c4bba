//! The end-to-end example of spares: a 3D 7-point heat stencil whose ranks talk over TCP
//! (`spares-stencil`), the launcher that restarts it on the map sparesd chose after a node
//! failure (`spares-run`), and the seeds' measurement program (`spares-halo-bench`).
//!
//! Why TCP and not MPI: see `examples/README.md`.

pub mod ckpt;
pub mod comm;
pub mod field;
pub mod layout;
pub mod mapinfo;

/// What the example's library calls can run into.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A peer rank broke the protocol or went away.
    #[error("rank {peer}: {message}")]
    Peer {
        /// The peer's rank.
        peer: u32,
        /// What happened.
        message: String,
    },
    /// Something did not arrive in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// A checkpoint file is not usable.
    #[error("checkpoint {path}: {message}")]
    Checkpoint {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Bad input (map, sizes, options).
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let what = what.into();
        move |source| Error::Io { what, source }
    }
}

/// Parses a byte size such as `4MiB`, `64KiB`, `1M`, `512` (bytes).
pub fn parse_size(s: &str) -> Result<usize, Error> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| Error::Invalid(format!("bad size `{s}` (e.g. 4MiB, 64KiB, 4096)")))?;
    let mul = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(Error::Invalid(format!("bad size unit in `{s}`"))),
    };
    n.checked_mul(mul)
        .ok_or_else(|| Error::Invalid(format!("size `{s}` too large")))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse() {
        assert_eq!(super::parse_size("4MiB").unwrap(), 4 << 20);
        assert_eq!(super::parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(super::parse_size("512").unwrap(), 512);
        assert!(super::parse_size("4XB").is_err());
        assert!(super::parse_size("MiB").is_err());
    }
}
