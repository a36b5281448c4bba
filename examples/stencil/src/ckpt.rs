//! Checkpoints: each rank writes its block as `DIR/rank-<r>.<iteration>.bin` (temporary file,
//! fsync, rename, fsync of the directory), so a file that exists is complete. A rank keeps its
//! last [`KEEP`] checkpoints: ranks run at most a few iterations apart (each waits for its
//! neighbours' halos), so when a node dies the newest iteration that *every* rank has written
//! is at worst one checkpoint behind the newest one.
//!
//! Layout (little endian): magic `SPRSCKP1`, rank u32, ranks u32, iteration u64, n u32, then
//! `n^3` f64 cells, then FNV-1a 64 of everything before it.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::Error;

const MAGIC: &[u8; 8] = b"SPRSCKP1";
const HEADER: usize = 8 + 4 + 4 + 8 + 4;
/// Checkpoints kept per rank.
pub const KEEP: usize = 3;

/// A rank's saved state.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    /// The rank.
    pub rank: u32,
    /// Number of ranks of the run.
    pub ranks: u32,
    /// Iterations done when it was written.
    pub iteration: u64,
    /// Cells per dimension.
    pub n: u32,
    /// The block's interior, `i` fastest.
    pub cells: Vec<f64>,
}

/// The file of `rank` at `iteration`.
pub fn path(dir: &Path, rank: u32, iteration: u64) -> PathBuf {
    dir.join(format!("rank-{rank}.{iteration:08}.bin"))
}

fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Checkpoint {
    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + self.cells.len() * 8 + 8);
        v.extend_from_slice(MAGIC);
        v.extend_from_slice(&self.rank.to_le_bytes());
        v.extend_from_slice(&self.ranks.to_le_bytes());
        v.extend_from_slice(&self.iteration.to_le_bytes());
        v.extend_from_slice(&self.n.to_le_bytes());
        for c in &self.cells {
            v.extend_from_slice(&c.to_le_bytes());
        }
        let h = fnv1a(&v);
        v.extend_from_slice(&h.to_le_bytes());
        v
    }

    fn decode(file: &Path, data: &[u8]) -> Result<Checkpoint, Error> {
        let bad = |m: &str| Error::Checkpoint {
            path: file.display().to_string(),
            message: m.to_string(),
        };
        if data.len() < HEADER + 8 || &data[..8] != MAGIC {
            return Err(bad("not a spares-stencil checkpoint"));
        }
        let (body, sum) = data.split_at(data.len() - 8);
        if fnv1a(body).to_le_bytes() != sum {
            return Err(bad("checksum mismatch"));
        }
        let u32_at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().expect("4 bytes"));
        let n = u32_at(24);
        let count = (n as usize).pow(3);
        if body.len() != HEADER + count * 8 {
            return Err(bad("length does not match its cell count"));
        }
        Ok(Checkpoint {
            rank: u32_at(8),
            ranks: u32_at(12),
            iteration: u64::from_le_bytes(body[16..24].try_into().expect("8 bytes")),
            n,
            cells: body[HEADER..]
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        })
    }

    /// Writes the checkpoint atomically and drops this rank's older ones beyond [`KEEP`].
    pub fn write(&self, dir: &Path) -> Result<PathBuf, Error> {
        let target = path(dir, self.rank, self.iteration);
        let tmp = dir.join(format!(".rank-{}.{}.tmp", self.rank, self.iteration));
        let mut f = File::create(&tmp).map_err(Error::io(format!("create {}", tmp.display())))?;
        f.write_all(&self.encode())
            .and_then(|()| f.sync_all())
            .map_err(Error::io(format!("write {}", tmp.display())))?;
        drop(f);
        fs::rename(&tmp, &target).map_err(Error::io(format!("rename to {}", target.display())))?;
        // The rename is durable only once the directory is.
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(Error::io(format!("fsync {}", dir.display())))?;
        let mut mine = iterations_of(dir, self.rank)?;
        while mine.len() > KEEP {
            let old = mine.pop_first().expect("non-empty");
            let _ = fs::remove_file(path(dir, self.rank, old));
        }
        Ok(target)
    }

    /// Reads and checks `rank`'s checkpoint of `iteration`.
    pub fn read(dir: &Path, rank: u32, iteration: u64) -> Result<Checkpoint, Error> {
        let p = path(dir, rank, iteration);
        let data = fs::read(&p).map_err(Error::io(format!("read {}", p.display())))?;
        let c = Checkpoint::decode(&p, &data)?;
        if c.rank != rank || c.iteration != iteration {
            return Err(Error::Checkpoint {
                path: p.display().to_string(),
                message: format!("holds rank {} iteration {}", c.rank, c.iteration),
            });
        }
        Ok(c)
    }
}

/// The iterations `rank` has checkpoint files for (by name).
fn iterations_of(dir: &Path, rank: u32) -> Result<BTreeSet<u64>, Error> {
    let prefix = format!("rank-{rank}.");
    let mut out = BTreeSet::new();
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io(format!("list {}", dir.display()))(e)),
    };
    for e in rd {
        let e = e.map_err(Error::io(format!("list {}", dir.display())))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(it) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".bin"))
            .and_then(|r| r.parse().ok())
        {
            out.insert(it);
        }
    }
    Ok(out)
}

/// The newest iteration for which every one of `ranks` ranks has a valid checkpoint of a run
/// with that many ranks, or `None` (start from the initial field).
pub fn latest_complete(dir: &Path, ranks: u32) -> Result<Option<u64>, Error> {
    let mut common: Option<BTreeSet<u64>> = None;
    for r in 0..ranks {
        let its = iterations_of(dir, r)?;
        common = Some(match common {
            None => its,
            Some(c) => c.intersection(&its).copied().collect(),
        });
    }
    let Some(common) = common else {
        return Ok(None);
    };
    'its: for &it in common.iter().rev() {
        for r in 0..ranks {
            match Checkpoint::read(dir, r, it) {
                Ok(c) if c.ranks == ranks => {}
                _ => continue 'its,
            }
        }
        return Ok(Some(it));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ck(rank: u32, iteration: u64) -> Checkpoint {
        Checkpoint {
            rank,
            ranks: 2,
            iteration,
            n: 2,
            cells: (0..8).map(|i| i as f64 + iteration as f64).collect(),
        }
    }

    #[test]
    fn round_trip_and_keep_the_last_few() {
        let d = tempfile::tempdir().unwrap();
        for it in [10, 20, 30, 40] {
            ck(0, it).write(d.path()).unwrap();
        }
        assert_eq!(Checkpoint::read(d.path(), 0, 40).unwrap(), ck(0, 40));
        assert_eq!(
            iterations_of(d.path(), 0)
                .unwrap()
                .into_iter()
                .collect::<Vec<_>>(),
            vec![20, 30, 40]
        );
    }

    #[test]
    fn latest_complete_needs_every_rank_and_a_valid_file() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(latest_complete(d.path(), 2).unwrap(), None);
        ck(0, 10).write(d.path()).unwrap();
        ck(0, 20).write(d.path()).unwrap();
        ck(1, 10).write(d.path()).unwrap();
        assert_eq!(latest_complete(d.path(), 2).unwrap(), Some(10));
        ck(1, 20).write(d.path()).unwrap();
        assert_eq!(latest_complete(d.path(), 2).unwrap(), Some(20));
        // A damaged file does not count.
        let p = path(d.path(), 1, 20);
        let mut data = fs::read(&p).unwrap();
        data[HEADER + 3] ^= 1;
        fs::write(&p, data).unwrap();
        assert!(Checkpoint::read(d.path(), 1, 20).is_err());
        assert_eq!(latest_complete(d.path(), 2).unwrap(), Some(10));
    }
}
