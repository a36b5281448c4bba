//! Running `sinfo`, `squeue` and `scontrol` (no shell; output read within a budget) and
//! reading their output: node states and partitions, pending jobs.

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};

use crate::Error;

/// Longest output read from one Slurm command.
pub const DEFAULT_MAX_OUTPUT_BYTES: u64 = 32 << 20;
/// Most lines read from one Slurm command (one per node and partition, or per pending job).
pub const MAX_LINES: usize = 1 << 20;
/// Longest node or partition name accepted.
pub const MAX_NAME_BYTES: usize = 64;
/// Most partitions a node or a job may name.
pub const MAX_PARTITIONS: usize = 64;

/// What a node can do for a job, as the free-node file says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeState {
    /// Idle, and no pending job asks for it.
    Free,
    /// Allocated, mixed, completing, reserved, powering up: a job may wait for it.
    Busy,
    /// Down, drained, failing, not responding, powered down, maintenance: no job gets it.
    Unusable,
}

impl NodeState {
    pub fn word(self) -> &'static str {
        match self {
            NodeState::Free => "free",
            NodeState::Busy => "busy",
            NodeState::Unusable => "unusable",
        }
    }
}

/// A node as `sinfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub state: NodeState,
    /// Partitions as `sinfo` prints them (the default one with a trailing `*`), sorted.
    pub partitions: Vec<String>,
}

/// The state of `sinfo -o %T` (long form, with its suffix flags), as the file's three words.
/// A word this program does not know (a newer Slurm) counts as busy: such a node is not
/// offered to new jobs, and pending jobs are not moved off it on a guess.
pub fn classify(state: &str) -> NodeState {
    let state = state.to_ascii_lowercase();
    let base = state.trim_end_matches(['*', '~', '#', '!', '%', '$', '@', '^', '-']);
    let flags = &state[base.len()..];
    // Not responding, powered down, powering down (or about to), maintenance.
    if flags.contains(['*', '~', '%', '!', '$']) {
        return NodeState::Unusable;
    }
    let mut result = NodeState::Free;
    for word in base.split('+') {
        let word_state = match word {
            "idle" => NodeState::Free,
            "down" | "drain" | "drained" | "draining" | "drng" | "drained*" | "fail"
            | "failing" | "future" | "unknown" | "unk" | "maint" | "power_down"
            | "powered_down" | "powering_down" | "inval" | "not_responding" | "no_respond" => {
                NodeState::Unusable
            }
            _ => NodeState::Busy,
        };
        result = result.max(word_state);
    }
    if !flags.is_empty() {
        // Powering up, reboot pending or issued, planned: a job may wait for it.
        result = result.max(NodeState::Busy);
    }
    result
}

/// Whether `name` may be a node or partition name here: letters, digits, `.`, `_`, `-`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn lines<'a>(program: &'static str, text: &'a str) -> Result<std::str::Lines<'a>, Error> {
    let count = text.lines().count();
    if count > MAX_LINES {
        return Err(Error::TooManyLines {
            program,
            count,
            limit: MAX_LINES,
        });
    }
    Ok(text.lines())
}

/// The arguments of the `sinfo` call [`parse_sinfo`] reads: one line per node and partition.
pub const SINFO_ARGS: &[&str] = &["--all", "--noheader", "--Node", "--format=%N %T %P"];

/// Reads `sinfo --Node --format='%N %T %P'`: node name, state, partition. A node in several
/// partitions has several lines; it takes the worst state of them.
pub fn parse_sinfo(text: &str) -> Result<BTreeMap<String, NodeInfo>, Error> {
    let mut nodes: BTreeMap<String, NodeInfo> = BTreeMap::new();
    for (i, line) in lines("sinfo", text)?.enumerate() {
        let bad = |why: String| Error::Parse {
            program: "sinfo",
            line: i + 1,
            why,
        };
        let mut words = line.split_whitespace();
        let (Some(name), Some(state), partition, None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            if line.trim().is_empty() {
                continue;
            }
            return Err(bad(format!(
                "expected 'NODE STATE PARTITION', got {} words",
                line.split_whitespace().count()
            )));
        };
        if !valid_name(name) {
            return Err(bad(format!("'{}' is no node name", shorten(name))));
        }
        if state.len() > MAX_NAME_BYTES {
            return Err(bad(format!("state '{}' too long", shorten(state))));
        }
        let partition = match partition {
            Some(p) if valid_name(p.strip_suffix('*').unwrap_or(p)) => Some(p),
            Some(p) => return Err(bad(format!("'{}' is no partition name", shorten(p)))),
            None => None,
        };
        let entry = nodes.entry(name.to_string()).or_insert(NodeInfo {
            state: NodeState::Free,
            partitions: Vec::new(),
        });
        entry.state = entry.state.max(classify(state));
        if let Some(p) = partition {
            if !entry.partitions.iter().any(|q| q == p) {
                if entry.partitions.len() >= MAX_PARTITIONS {
                    return Err(bad(format!(
                        "node {name} is in more than {MAX_PARTITIONS} partitions"
                    )));
                }
                entry.partitions.push(p.to_string());
                entry.partitions.sort();
            }
        }
    }
    Ok(nodes)
}

/// A pending job as `squeue` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJob {
    pub id: u32,
    /// Partitions the job may run in (none: the default partition).
    pub partitions: Vec<String>,
    /// `--nodelist` / `ReqNodeList` (a hostlist), if any.
    pub req_nodes: Option<String>,
    /// `--exclude` (a hostlist), if any.
    pub exc_nodes: Option<String>,
    /// `admin_comment`, which only administrators and job_submit can set.
    pub admin_comment: Option<String>,
}

/// The `squeue` call of the pending jobs' fields [`parse_squeue`] reads (22.05's `--Format`
/// has no excluded nodes, `--format` no admin comment: two calls).
pub const SQUEUE_JOB_ARGS: &[&str] = &[
    "--noheader",
    "--all",
    "--states=PENDING",
    "--format=%i|%P|%n|%x",
];
/// The `squeue` call of the pending jobs' admin comments; the comment comes last, so a `|`
/// in it cannot shift the job id.
pub const SQUEUE_MARK_ARGS: &[&str] = &[
    "--noheader",
    "--all",
    "--states=PENDING",
    "--Format=JobID:|,admin_comment:",
];

fn field(value: &str) -> Option<String> {
    let v = value.trim();
    (!v.is_empty() && v != "(null)").then(|| v.to_string())
}

/// Reads the outputs of the [`SQUEUE_JOB_ARGS`] and [`SQUEUE_MARK_ARGS`] calls, joined by job
/// id (a job that left the queue between the two has no comment).
pub fn parse_squeue(jobs_text: &str, marks_text: &str) -> Result<Vec<PendingJob>, Error> {
    let mut marks: BTreeMap<u32, String> = BTreeMap::new();
    for line in lines("squeue", marks_text)? {
        let Some((id, comment)) = line.split_once('|') else {
            continue;
        };
        if let (Ok(id), Some(c)) = (id.trim().parse::<u32>(), field(comment)) {
            marks.insert(id, c);
        }
    }
    let mut jobs = Vec::new();
    for (i, line) in lines("squeue", jobs_text)?.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: String| Error::Parse {
            program: "squeue",
            line: i + 1,
            why,
        };
        let f: Vec<&str> = line.split('|').collect();
        if f.len() != 4 {
            return Err(bad(format!("expected 4 fields, got {}", f.len())));
        }
        // An array's pending tasks show as 12_[1-5]: not one job that can be moved.
        let Ok(id) = f[0].trim().parse::<u32>() else {
            continue;
        };
        let partitions: Vec<String> = match field(f[1]) {
            Some(p) => p.split(',').map(str::to_string).collect(),
            None => Vec::new(),
        };
        if partitions.len() > MAX_PARTITIONS || !partitions.iter().all(|p| valid_name(p)) {
            return Err(bad(format!(
                "job {id}: bad partition list '{}'",
                shorten(f[1])
            )));
        }
        jobs.push(PendingJob {
            id,
            partitions,
            req_nodes: field(f[2]),
            exc_nodes: field(f[3]),
            admin_comment: marks.remove(&id),
        });
    }
    Ok(jobs)
}

/// At most 64 characters of a value for a message.
pub fn shorten(s: &str) -> String {
    s.chars().take(64).collect()
}

/// Runs `program args` without a shell; its stdout if it exits 0 within `max_bytes`.
pub fn run(program: &'static str, args: &[&str], max_bytes: u64) -> Result<String, Error> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn { program, source })?;
    // stderr is drained while stdout is read: a child that fills one pipe while we wait on the
    // other would block both for ever. Only its beginning is kept, for the message.
    let stderr = child.stderr.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let _ = (&mut s).take(4096).read_to_end(&mut kept);
            let _ = std::io::copy(&mut s, &mut std::io::sink());
            kept
        })
    });
    let mut out = Vec::new();
    let read = child
        .stdout
        .take()
        .map(|s| s.take(max_bytes + 1).read_to_end(&mut out))
        .transpose();
    if read.is_err() || out.len() as u64 > max_bytes {
        let _ = child.kill();
        let _ = child.wait();
        drop(stderr); // the thread ends with the child's pipe
        return match read {
            Err(source) => Err(Error::Spawn { program, source }),
            Ok(_) => Err(Error::TooLong {
                program,
                limit: max_bytes,
            }),
        };
    }
    let status = child
        .wait()
        .map_err(|source| Error::Spawn { program, source })?;
    let err = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if !status.success() {
        return Err(Error::Failed {
            program,
            status: status.to_string(),
            stderr: shorten(String::from_utf8_lossy(&err).trim()),
        });
    }
    String::from_utf8(out).map_err(|_| Error::Parse {
        program,
        line: 0,
        why: "output is not UTF-8".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `run` on `sh -c script` in a thread; None when it has not returned within 60 s.
    fn run_sh(script: &'static str, max_bytes: u64) -> Option<Result<String, Error>> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(run("sh", &["-c", script], max_bytes));
        });
        rx.recv_timeout(std::time::Duration::from_secs(60)).ok()
    }

    #[test]
    fn a_child_that_fills_its_stderr_pipe_first_does_not_block_the_reader() {
        // 1 MB on stderr before any stdout: reading stdout first, then 4 KiB of stderr,
        // waited for ever on a child blocked writing stderr.
        let got = run_sh(
            "head -c 1000000 /dev/zero | tr '\\0' x >&2; echo sinfo-output",
            1024,
        )
        .expect("run returned");
        assert_eq!(got.unwrap(), "sinfo-output\n");
        let failed = run_sh("head -c 1000000 /dev/zero | tr '\\0' y >&2; exit 3", 1024)
            .expect("run returned");
        match failed {
            Err(Error::Failed { stderr, status, .. }) => {
                assert!(status.contains('3'), "{status}");
                assert_eq!(stderr, "y".repeat(64));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn states_map_to_the_three_words() {
        use NodeState::*;
        for (s, want) in [
            ("idle", Free),
            ("IDLE", Free),
            ("allocated", Busy),
            ("mixed", Busy),
            ("completing", Busy),
            ("reserved", Busy),
            ("idle#", Busy),
            ("idle@", Busy),
            ("planned", Busy),
            ("down", Unusable),
            ("down*", Unusable),
            ("idle*", Unusable),
            ("drained", Unusable),
            ("draining", Unusable),
            ("mixed+drain", Unusable),
            ("failing", Unusable),
            ("idle~", Unusable),
            ("idle%", Unusable),
            ("idle$", Unusable),
            ("maint", Unusable),
            ("future", Unusable),
            ("unknown", Unusable),
            ("powered_down", Unusable),
            ("something_new", Busy),
        ] {
            assert_eq!(classify(s), want, "{s}");
        }
    }

    #[test]
    fn sinfo_lines_merge_per_node() {
        let nodes = parse_sinfo(
            "node01 idle debug*\nnode01 idle big\nnode02 down* debug*\n\nnode03 allocated big\n",
        )
        .unwrap();
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes["node01"].state, NodeState::Free);
        assert_eq!(nodes["node01"].partitions, vec!["big", "debug*"]);
        assert_eq!(nodes["node02"].state, NodeState::Unusable);
        assert_eq!(nodes["node03"].partitions, vec!["big"]);
    }

    #[test]
    fn hostile_sinfo_lines_are_refused_with_the_line() {
        for text in [
            "node01 idle debug extra",
            "node01",
            "../etc idle debug",
            "node01 idle deb;ug",
        ] {
            let e = parse_sinfo(text).unwrap_err().to_string();
            assert!(e.starts_with("sinfo line 1:"), "{e}");
        }
        let many: String = (0..=MAX_PARTITIONS)
            .map(|i| format!("n1 idle p{i}\n"))
            .collect();
        let e = parse_sinfo(&many).unwrap_err().to_string();
        assert!(e.contains("more than 64 partitions"), "{e}");
    }

    #[test]
    fn output_over_the_budget_is_not_read() {
        let e = run("yes", &[], 1000).unwrap_err().to_string();
        assert!(e.contains("more than 1000 bytes"), "{e}");
        let e = run("false", &[], 1000).unwrap_err().to_string();
        assert!(e.starts_with("false failed"), "{e}");
    }

    #[test]
    fn pending_jobs_are_read_field_by_field() {
        let jobs = parse_squeue(
            "12|debug|node[01-16]|\n13|debug,big||node01\n14_[1-3]|debug||\n",
            "12|spares-box=node[01-16]\n13|(null)\n14_[1-3]|x\n99|a|b\n",
        )
        .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].id, 12);
        assert_eq!(jobs[0].req_nodes.as_deref(), Some("node[01-16]"));
        assert_eq!(jobs[0].exc_nodes, None);
        assert_eq!(
            jobs[0].admin_comment.as_deref(),
            Some("spares-box=node[01-16]")
        );
        assert_eq!(jobs[1].partitions, vec!["debug", "big"]);
        assert_eq!(jobs[1].exc_nodes.as_deref(), Some("node01"));
        assert_eq!(jobs[1].admin_comment, None);
        let e = parse_squeue("15|debug\n", "").unwrap_err().to_string();
        assert_eq!(e, "squeue line 1: expected 4 fields, got 2");
    }
}
