//! `sparesd-node-down`: the program for Slurm's node-down trigger.
//!
//! ```sh
//! strigger --set --node --down --flags=perm --program=/usr/lib/spares/sparesd-node-down
//! ```
//!
//! slurmctld runs it (as SlurmUser) with the nodes that went down as its argument, a hostlist
//! such as `node[06,11]`. It reports them to sparesd (`node_down`), which substitutes them in
//! every registered job holding one of them, and logs one line per affected job to stderr
//! (which slurmctld keeps in its log). The socket comes from `--socket`, else `$SPARES_SOCKET`,
//! else `/run/sparesd/sparesd.sock`. A report that cannot be delivered (sparesd down,
//! restarting, busy) is retried with exponential backoff (0.1 s doubling up to 10 s) for up to
//! `--retry-for` seconds (default 600), so that no failure is dropped; each retry is logged.
//! Exit status: 0 when the daemon took the report, 1 when it refused it, 2 when it could not be
//! reached within the retry time.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use spares_client::{default_socket, is_transient, node_down_with_retry, Retry};

const USAGE: &str = "usage: sparesd-node-down [--socket PATH] [--retry-for SECONDS] HOSTLIST...";

fn main() -> ExitCode {
    let mut socket = default_socket();
    let mut nodes = Vec::new();
    let mut retry = Retry::default();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => match args.next() {
                Some(s) => socket = PathBuf::from(s),
                None => {
                    eprintln!("sparesd-node-down: --socket needs a path");
                    return ExitCode::from(2);
                }
            },
            "--retry-for" => match args.next().and_then(|s| s.parse::<u64>().ok()) {
                Some(s) => retry.give_up_after = Duration::from_secs(s),
                None => {
                    eprintln!("sparesd-node-down: --retry-for needs a number of seconds");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            _ => nodes.push(a),
        }
    }
    if nodes.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    // strigger passes one hostlist; several arguments (or comma-separated lists) are joined.
    let list = nodes.join(",");
    let r = node_down_with_retry(&socket, &list, retry, |attempt, e, wait| {
        eprintln!(
            "sparesd-node-down: {list}: attempt {attempt} failed: {e}; trying again in {:.1} s",
            wait.as_secs_f64()
        );
    });
    match r {
        Ok(r) => {
            for x in r["results"].as_array().into_iter().flatten() {
                eprintln!(
                    "sparesd-node-down: job {}: node {} {} ({} move(s), collisions {} -> {})",
                    x["job_id"],
                    x["node"].as_str().unwrap_or("?"),
                    x["outcome"].as_str().unwrap_or("?"),
                    x["moves"].as_array().map_or(0, |m| m.len()),
                    x["collisions_before"],
                    x["collisions_after"]
                );
            }
            ExitCode::SUCCESS
        }
        Err((attempt, e)) if is_transient(&e) => {
            eprintln!(
                "sparesd-node-down: {list}: NOT REPORTED: giving up after {attempt} attempt(s) in {} s (--retry-for): {e}",
                retry.give_up_after.as_secs()
            );
            ExitCode::from(2)
        }
        Err((_, e)) => {
            eprintln!("sparesd-node-down: {list}: {e}");
            ExitCode::from(1)
        }
    }
}
