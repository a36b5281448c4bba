//! The mark job_submit leaves on a job whose box it pinned, in the job's `admin_comment`:
//! `spares-box=node[01-16]` (one word, so no tool splits it). Slurm lets only administrators (and job_submit) set
//! `admin_comment`, so the free-node service, which runs as root and moves pinned pending
//! jobs to other boxes, trusts this mark and no field a user can write: a job is moved only
//! while its `ReqNodeList` is still the box the mark names, and that box is a box of the
//! topology ([`crate::placement::box_of`]).

/// Longest mark read: the compressed hostlist of a box is short; a longer comment is no mark.
pub const MAX_MARK_BYTES: usize = 4096;

const PREFIX: &str = "spares-box=";

/// The `admin_comment` of a job pinned to the box `hostlist` (compressed hostlist).
pub fn format(hostlist: &str) -> String {
    format!("{PREFIX}{hostlist}")
}

/// The pinned box's hostlist of a mark; `None` for any other comment (too long, other words).
pub fn parse(text: &str) -> Option<&str> {
    if text.len() > MAX_MARK_BYTES {
        return None;
    }
    let hostlist = text.trim().strip_prefix(PREFIX)?;
    (!hostlist.is_empty() && !hostlist.contains(char::is_whitespace)).then_some(hostlist)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_reads_back_as_written() {
        assert_eq!(format("node[01-16]"), "spares-box=node[01-16]");
        assert_eq!(parse(&format("node[01-16]")), Some("node[01-16]"));
    }

    #[test]
    fn other_comments_are_no_mark() {
        for text in [
            "",
            "spares",
            "spares-box=",
            "spares box=node01",
            "spares-box=node01 extra",
            "user text spares-box=node01",
            "box=node01",
        ] {
            assert_eq!(parse(text), None, "{text:?}");
        }
        let long = format(&"n".repeat(MAX_MARK_BYTES));
        assert_eq!(parse(&long), None);
    }
}
