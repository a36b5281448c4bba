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
//! else `/run/sparesd/sparesd.sock`. Exit status: 0 when the daemon took the report, 1 when it
//! refused it, 2 when it could not be reached.

use std::path::PathBuf;
use std::process::ExitCode;

use spares_client::{default_socket, Client, Error};

fn main() -> ExitCode {
    let mut socket = default_socket();
    let mut nodes = Vec::new();
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
            "-h" | "--help" => {
                println!("usage: sparesd-node-down [--socket PATH] HOSTLIST...");
                return ExitCode::SUCCESS;
            }
            _ => nodes.push(a),
        }
    }
    if nodes.is_empty() {
        eprintln!("usage: sparesd-node-down [--socket PATH] HOSTLIST...");
        return ExitCode::from(2);
    }
    // strigger passes one hostlist; several arguments (or comma-separated lists) are joined.
    let list = nodes.join(",");
    let mut c = match Client::connect(&socket) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sparesd-node-down: {e}");
            return ExitCode::from(2);
        }
    };
    match c.node_down(&list) {
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
        Err(e @ Error::Daemon { .. }) => {
            eprintln!("sparesd-node-down: {list}: {e}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("sparesd-node-down: {list}: {e}");
            ExitCode::from(2)
        }
    }
}
