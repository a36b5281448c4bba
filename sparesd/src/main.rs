//! `sparesd`: the daemon binary. See `docs/sparesd.md`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser};
use sparesd::{munge, server, Config, Daemon};

/// The spare-node substitution daemon: a registry of jobs with spare nodes, answering failure
/// reports with the model's substitution, durable before every acknowledgement.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// Configuration file (TOML; the package installs /etc/spares/sparesd.toml, every key
    /// commented); without it, the defaults (/usr/share/doc/sparesd/sparesd.md).
    #[arg(short, long, default_value = None)]
    config: Option<PathBuf>,
    /// Unix socket path (overrides the file).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// State directory (overrides the file).
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// The Slurm user, a name or uid (overrides the file).
    #[arg(long)]
    slurm_user: Option<String>,
    /// Journal records between snapshots (overrides the file).
    #[arg(long)]
    snapshot_every: Option<u64>,
    /// Largest request line in bytes (overrides the file).
    #[arg(long)]
    max_request_bytes: Option<usize>,
    /// Release registered jobs that Slurm (squeue) no longer knows as running, every this many
    /// seconds; 0: off (overrides the file).
    #[arg(long)]
    reconcile_interval_secs: Option<u64>,
    /// The squeue program for --reconcile-interval-secs (overrides the file).
    #[arg(long)]
    squeue: Option<PathBuf>,
    /// Log level when RUST_LOG is not set (overrides the file).
    #[arg(long)]
    log_level: Option<String>,
    /// Check the configuration and the state directory, print what was found, and exit; creates
    /// no file.
    #[arg(long, conflicts_with = "repair")]
    check: bool,
    /// Repair a damaged state directory (the daemon stopped): keep the valid records, keep the
    /// damaged journal next to the new one, print what was dropped, and exit.
    #[arg(long)]
    repair: bool,
}

/// What `man sparesd` says beyond `--help` (`sparesd generate man DIR`).
const MAN: manpage::Extra = manpage::Extra {
    section: "8",
    examples: &[
        (
            "Check the configuration and the state directory as the daemon's user; creates no file.",
            "sparesd --config /etc/spares/sparesd.toml --check",
        ),
        (
            "Run in the foreground (systemd runs it so: sparesd.service).",
            "sparesd --config /etc/spares/sparesd.toml",
        ),
        (
            "Repair a state directory the daemon refuses (the daemon stopped).",
            "sparesd --config /etc/spares/sparesd.toml --repair",
        ),
        (
            "A private daemon for a trial: its own socket and state.",
            "sparesd --socket /tmp/sd.sock --state-dir /tmp/sd-state --log-level debug",
        ),
    ],
    exit_status: &[
        ("0", "Stopped by SIGTERM or SIGINT after the requests under way; --check or --repair done."),
        (
            "1",
            "It cannot start (the state directory's owner, its lock held by another sparesd, damage; the socket; a thread), or --check or --repair found a problem; the message names the file and the fix.",
        ),
        ("2", "The configuration file cannot be read or has a wrong value, or a command-line syntax error."),
    ],
};

fn main() -> ExitCode {
    manpage::generate_if_asked(Args::command, &MAN);
    let args = Args::parse();
    // Before any thread starts, so that every thread inherits the mask and only the signal
    // thread takes these signals.
    let signals = match sparesd::sys::block_signals(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("sparesd: cannot block SIGTERM/SIGHUP: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut config = match &args.config {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("sparesd: {e}");
                return ExitCode::from(2);
            }
        },
        None => Config::default(),
    };
    if let Some(s) = args.socket {
        config.socket = s;
    }
    if let Some(s) = args.state_dir {
        config.state_dir = s;
    }
    if let Some(u) = args.slurm_user {
        config.slurm_user = Some(u);
    }
    if let Some(n) = args.snapshot_every {
        config.snapshot_every = n;
    }
    if let Some(n) = args.max_request_bytes {
        config.max_request_bytes = n;
    }
    if let Some(n) = args.reconcile_interval_secs {
        config.reconcile_interval_secs = n;
    }
    if let Some(p) = args.squeue {
        config.squeue = p;
    }
    if let Some(l) = args.log_level {
        config.log_level = l;
    }
    env_logger::Builder::new()
        .parse_filters(&config.log_level)
        .parse_env("RUST_LOG")
        .format(|buf, record| {
            use std::io::Write as _;
            // One record, one line: a value a client sent cannot start a line of its own.
            writeln!(
                buf,
                "[{} {} {}] {}",
                buf.timestamp_millis(),
                record.level(),
                record.target(),
                sparesd::escape_controls(&record.args().to_string())
            )
        })
        .init();
    if args.check {
        return check(&config);
    }
    if args.repair {
        return match sparesd::store::repair(&config.state_dir) {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sparesd: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let daemon = match Daemon::open(config) {
        Ok(d) => Arc::new(d),
        Err(e) => {
            log::error!("{e}");
            eprintln!("sparesd: {e}");
            return ExitCode::FAILURE;
        }
    };
    let c = daemon.config().clone();
    let listener = match server::bind(&c.socket, c.socket_mode) {
        Ok(l) => l,
        Err(e) => {
            log::error!("{e}");
            eprintln!("sparesd: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(tcp) = &c.tcp {
        if let Err(e) = munge::start_tcp(Arc::clone(&daemon), tcp) {
            log::error!("{e}");
            eprintln!("sparesd: {e}");
            return ExitCode::FAILURE;
        }
    }
    log::info!(
        "sparesd {} listening on {} (protocol 1, state {})",
        env!("CARGO_PKG_VERSION"),
        c.socket.display(),
        c.state_dir.display()
    );
    if let Err(e) = server::handle_signals(Arc::clone(&daemon), signals) {
        log::error!("{e}");
        return ExitCode::FAILURE;
    }
    server::serve(Arc::clone(&daemon), listener);
    let all = daemon.finish();
    log::info!(
        "sparesd stopped{}",
        if all {
            ""
        } else {
            " (requests under way were cut)"
        }
    );
    ExitCode::SUCCESS
}

/// `--check`: the configuration and a read-only verification of the state; no file is created
/// (a check run as root must not leave root's files where the daemon's user writes).
fn check(config: &Config) -> ExitCode {
    let state = config
        .check()
        .and_then(|()| config.admin_uids())
        .map_err(|e| e.to_string())
        .and_then(|_| sparesd::store::check(&config.state_dir).map_err(|e| e.to_string()));
    match state {
        Ok(summary) => {
            println!("configuration is usable\n{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sparesd: {e}");
            ExitCode::FAILURE
        }
    }
}
