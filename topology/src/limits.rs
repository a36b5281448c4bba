//! Budgets for everything that comes from outside: node counts, nesting depth of documents and
//! sizes of site files. Every count, extent and product read from a user's option, a site file
//! or a map document is checked against these before anything is allocated or looped over, so
//! that hostile or broken input gets an error naming the value and the limit instead of
//! aborting the process (an allocation failure cannot be caught).

use crate::grid::format_shape;
use crate::Error;

/// Most nodes a network or a job box may have.
///
/// 2^20 = 1,048,576 is 9.5 times the seeds' largest network (48x48x48 = 110,592, which the
/// simulations run) and 6.6 times the largest torus machine built (Fugaku, 158,976 nodes), so
/// no real site meets it; a fully named network of this size takes about 150 MB to parse,
/// which stays inside the fuzzers' memory budget. A `1000x1000x1000` network (one billion
/// nodes, 24 GB of map) is refused.
pub const MAX_NODES: u32 = 1 << 20;

/// Deepest nesting of brackets and braces a YAML or JSON document may have. Site files and map
/// documents nest at most four levels; the YAML parser takes time quadratic in the depth.
pub const MAX_DEPTH: usize = 32;

/// Largest site file (topology, policy, map document) read: 16 MiB. A fully named network of
/// [`MAX_NODES`] takes about 12 MB as a list of names, far less as a hostlist.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Largest map document read from a file: 128 MiB. `spares plan` writes a box of
/// [`MAX_NODES`] nodes as about 45 MB of JSON, 60 MB with host names.
pub const MAX_MAP_BYTES: u64 = 128 << 20;

/// Longest `--partition`, `--exclude` or `--nodelist` text job_submit reads from a job with
/// spares: 64 KiB, a hostlist of thousands of ranges (a compressed list of every node of the
/// largest network takes a few bytes).
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// Most partitions a job with spares may name in `--partition` (Slurm sites have a handful).
pub const MAX_REQUEST_PARTITIONS: usize = 64;

/// The budgets one caller applies; [`Limits::default`] holds the constants above. A site may
/// lower them in its policy file (`limits:`), never raise them past the constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most nodes of a network or a job box.
    pub max_nodes: u32,
    /// Deepest nesting of a document.
    pub max_depth: usize,
    /// Largest file read, in bytes.
    pub max_file_bytes: u64,
    /// Longest `--partition`, `--exclude` or `--nodelist` of a job with spares, in bytes.
    pub max_request_bytes: usize,
    /// Most partitions in a job's `--partition`.
    pub max_request_partitions: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_nodes: MAX_NODES,
            max_depth: MAX_DEPTH,
            max_file_bytes: MAX_FILE_BYTES,
            max_request_bytes: MAX_REQUEST_BYTES,
            max_request_partitions: MAX_REQUEST_PARTITIONS,
        }
    }
}

impl Limits {
    /// The node count of a box of these extents, refused (naming the extents, the count and
    /// the limit) when the product exceeds `max_nodes`. Checked in `u64` with overflow
    /// detection, so that no product of `u32` extents wraps.
    pub fn check_nodes(&self, what: &str, extents: &[u32]) -> Result<u32, Error> {
        let mut total: u64 = 1;
        for &e in extents {
            total = total.saturating_mul(u64::from(e));
        }
        if total > u64::from(self.max_nodes) {
            return Err(Error::Limit {
                what: format!("{what} {}", format_shape(extents)),
                value: total,
                limit: u64::from(self.max_nodes),
                unit: "nodes",
            });
        }
        Ok(total as u32)
    }

    /// Refuses a YAML or JSON text nested deeper than `max_depth` (see [`nesting_depth`]).
    pub fn check_depth(&self, what: &str, text: &str) -> Result<(), Error> {
        let depth = nesting_depth(text);
        if depth > self.max_depth {
            return Err(Error::Limit {
                what: format!("nesting of {what}"),
                value: depth as u64,
                limit: self.max_depth as u64,
                unit: "levels",
            });
        }
        Ok(())
    }
}

/// The deepest nesting of `[` and `{` in a YAML or JSON text, outside quoted strings and
/// comments, in one linear pass without allocating. Block indentation is not
/// counted: its depth is bounded by the file size and the parser handles it in linear time.
/// An unbalanced closing bracket (as in a plain scalar `a]`) never counts below zero; the
/// parser reports it. Over-counting (a `[` inside a plain scalar such as a hostlist) only
/// refuses documents with dozens of them, which no site file has.
pub fn nesting_depth(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut i = 0;
    // Whether the previous byte separates tokens, so that `#` starts a comment.
    let mut after_space = true;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            // A quote only opens a string at the start of a token (`it's` is plain text).
            b'\'' if after_space || matches!(bytes[i.saturating_sub(1)], b'[' | b'{' | b',') => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
            }
            b'#' if after_space => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            _ => {}
        }
        after_space = i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\n' | b'\r' | b':');
        i += 1;
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_counts_over_the_limit_name_the_value_and_the_limit() {
        let l = Limits::default();
        assert_eq!(l.check_nodes("network", &[48, 48, 48]).unwrap(), 110_592);
        let e = l
            .check_nodes("network", &[1000, 1000, 1000])
            .unwrap_err()
            .to_string();
        assert!(e.contains("1000x1000x1000"), "{e}");
        assert!(e.contains("1000000000 nodes"), "{e}");
        assert!(e.contains(&MAX_NODES.to_string()), "{e}");
        // A product that overflows u64 saturates instead of wrapping to a small number.
        assert!(l.check_nodes("box", &[u32::MAX; 6]).is_err());
    }

    #[test]
    fn nesting_is_counted_outside_strings_and_comments() {
        assert_eq!(nesting_depth("a: [1, [2, {b: 3}]]"), 3);
        assert_eq!(nesting_depth("a: \"[[[[\" # [[[[\nb: '[[['"), 0);
        assert_eq!(nesting_depth("nodes: n[01-32]\nx: it's [1]"), 1);
        assert_eq!(nesting_depth("{\"a\": \"\\\"[[\"}"), 1);
        assert_eq!(nesting_depth(&"[".repeat(100_000)), 100_000);
        let e = Limits::default()
            .check_depth("t.yaml", &format!("a: {}", "[".repeat(100_000)))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("has 100000 levels, over the limit of 32 levels"),
            "{e}"
        );
    }
}
