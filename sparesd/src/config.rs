//! The daemon's configuration file (TOML, `configs/sparesd.toml`) and its defaults.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::protocol::DEFAULT_MAX_LINE;

/// Default socket path.
pub const DEFAULT_SOCKET: &str = "/run/sparesd/sparesd.sock";
/// Default state directory.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/sparesd";

/// Everything a site can set. Every field has a default; unknown fields are errors (a typo
/// must not silently leave a default in force).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Unix socket path (its directory is created, mode 0755).
    pub socket: PathBuf,
    /// Permission bits of the socket. Any local user may connect by default: every request is
    /// authorized by the peer's uid, not by the socket's mode.
    pub socket_mode: u32,
    /// Where the journal and snapshot live.
    pub state_dir: PathBuf,
    /// The Slurm user (`SlurmUser` of slurm.conf), a name or a uid: it may register and release
    /// jobs and act on every job, like root.
    pub slurm_user: Option<String>,
    /// Further uids with the same rights (e.g. an operator's).
    pub admin_uids: Vec<u32>,
    /// Largest request line in bytes from an administrator (root, the Slurm user,
    /// `admin_uids`): a `register` carries a whole map. Longer lines get `too_large` and the
    /// connection closes.
    pub max_request_bytes: usize,
    /// Largest request line in bytes from any other user: they send only small requests
    /// (`show`, `fail`, `list`, `health`).
    pub max_user_request_bytes: usize,
    /// Largest first line of a TCP connection (its MUNGE `auth` request), before the peer is
    /// known.
    pub max_auth_bytes: usize,
    /// Bytes of request lines buffered by all connections together. A connection whose line
    /// would exceed it gets `busy` and is closed. Users other than administrators may fill it
    /// only up to this minus `max_request_bytes`, so one largest administrator request always
    /// fits.
    pub max_buffered_bytes: usize,
    /// Connections served at once; one more gets `busy`. The last `reserved_admin_connections`
    /// of them are kept for administrators.
    pub max_connections: usize,
    /// Slots of `max_connections` that only administrators may take, so that no flood of other
    /// users locks root, the Slurm user or the node-down trigger out.
    pub reserved_admin_connections: usize,
    /// Connections one user other than an administrator may hold at once (over TCP, also the
    /// connections not yet authenticated, together).
    pub max_connections_per_uid: usize,
    /// Requests of one user other than an administrator handled at once; more wait (without
    /// using the processor) for their turn.
    pub max_requests_per_uid: usize,
    /// Nice value (0 to 19) of the threads serving users other than administrators: under
    /// load, their work yields the processor to root's and the Slurm user's. 0: same priority.
    pub user_nice: i32,
    /// A connection with no request under way is closed after this long.
    pub idle_timeout_secs: u64,
    /// A request line must arrive whole within this many seconds of its first byte (a
    /// deadline, not reset by each byte: a trickle cannot hold a slot), and its reply must be
    /// taken by the client within as long.
    pub request_timeout_secs: u64,
    /// A TCP connection must authenticate within this many seconds of connecting.
    pub auth_timeout_secs: u64,
    /// On SIGTERM, requests under way get this long to finish before the daemon exits.
    pub shutdown_grace_secs: u64,
    /// Every this many seconds, ask Slurm (`squeue`) which registered jobs it still knows and
    /// release the others (an epilog's release lost while sparesd was down). 0: off.
    pub reconcile_interval_secs: u64,
    /// The `squeue` program for `reconcile_interval_secs` (found on `PATH` when not absolute).
    pub squeue: PathBuf,
    /// Journal records between two snapshots.
    pub snapshot_every: u64,
    /// Seconds a released job's map and failures stay readable with `sparesctl show` (as
    /// `sacct` keeps finished jobs). 0: forgotten at release.
    pub history_retention_secs: u64,
    /// Bytes all kept histories of released jobs may cost together (in memory and in the
    /// snapshot); the oldest release goes first.
    pub history_max_bytes: usize,
    /// Bytes the kept histories of one owner may cost; their oldest release goes first.
    pub history_max_bytes_per_uid: usize,
    /// Log filter when `RUST_LOG` is not set: `error`, `warn`, `info`, `debug`.
    pub log_level: String,
    /// TCP listener for runtimes on other nodes, authenticated with MUNGE (off when absent).
    pub tcp: Option<TcpConfig>,
    /// Re-maps (`remap` requests) and the launchers' policy for them.
    pub remap: RemapConfig,
}

/// The `[remap]` table: the caps of a `remap` request's budget, and whether launchers
/// (`spares-run`) re-map at each relaunch after a failure (they read it from `health`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RemapConfig {
    /// Whether launchers ask for a re-map at each relaunch after a failure.
    pub at_relaunch: bool,
    /// The move budget launchers ask for at a relaunch (capped by `max_moves`).
    pub relaunch_max_moves: u32,
    /// Most ranks one re-map may move, whatever the request asks.
    pub max_moves: u32,
    /// Candidate moves one re-map evaluates, at most and when the request names none: the
    /// budget that makes the result the same on every machine.
    pub iterations: u64,
    /// Safety bound on one re-map's search, in milliseconds (it binds only on a machine too
    /// slow for `iterations`).
    pub time_limit_ms: u64,
}

impl Default for RemapConfig {
    fn default() -> RemapConfig {
        RemapConfig {
            at_relaunch: false,
            relaunch_max_moves: 50,
            max_moves: 100_000,
            iterations: 200_000,
            time_limit_ms: 5_000,
        }
    }
}

/// Longest search time `[remap] time_limit_ms` may set: a re-map holds a thread of the daemon
/// (and the one re-map slot) for that long.
pub const MAX_REMAP_TIME_MS: u64 = 60_000;

impl RemapConfig {
    /// A request's budget, capped by this table: (budget, whether a cap cut what was asked).
    pub fn budget(
        &self,
        max_moves: Option<u32>,
        iterations: Option<u64>,
        seed: Option<u64>,
    ) -> (crate::registry::RemapBudget, bool) {
        let moves = max_moves.unwrap_or(self.max_moves);
        let iters = iterations.unwrap_or(self.iterations);
        let capped = moves > self.max_moves || iters > self.iterations;
        (
            crate::registry::RemapBudget {
                max_moves: moves.min(self.max_moves),
                iterations: iters.min(self.iterations),
                time_limit: std::time::Duration::from_millis(self.time_limit_ms),
                seed: seed.unwrap_or(1),
            },
            capped,
        )
    }
}

/// The MUNGE-authenticated TCP listener.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpConfig {
    /// Address to listen on, e.g. `0.0.0.0:7391`.
    pub listen: String,
    /// munged's socket (default: libmunge's, `/run/munge/munge.socket.2`).
    #[serde(default)]
    pub munge_socket: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            socket: DEFAULT_SOCKET.into(),
            socket_mode: 0o666,
            state_dir: DEFAULT_STATE_DIR.into(),
            slurm_user: Some("slurm".into()),
            admin_uids: Vec::new(),
            max_request_bytes: DEFAULT_MAX_LINE,
            max_user_request_bytes: 64 << 10,
            max_auth_bytes: 4 << 10,
            max_buffered_bytes: 64 << 20,
            max_connections: 512,
            reserved_admin_connections: 64,
            max_connections_per_uid: 16,
            max_requests_per_uid: 1,
            user_nice: 19,
            idle_timeout_secs: 120,
            request_timeout_secs: 10,
            auth_timeout_secs: 5,
            shutdown_grace_secs: 10,
            reconcile_interval_secs: 0,
            squeue: "squeue".into(),
            snapshot_every: 1000,
            history_retention_secs: 86_400,
            history_max_bytes: 256 << 20,
            history_max_bytes_per_uid: 32 << 20,
            log_level: "info".into(),
            tcp: None,
            remap: RemapConfig::default(),
        }
    }
}

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has a wrong field.
    #[error("{path}: {why}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the field and line).
        why: String,
    },
    /// A value that breaks a rule.
    #[error("{0}")]
    Invalid(String),
}

impl Config {
    /// Reads a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses configuration text; `path` names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        c.check()?;
        Ok(c)
    }

    /// Checks the values.
    pub fn check(&self) -> Result<(), ConfigError> {
        if self.max_request_bytes < 1024 {
            return Err(ConfigError::Invalid(format!(
                "max_request_bytes = {} is too small to hold a request; use at least 1024",
                self.max_request_bytes
            )));
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Invalid(
                "max_connections must be at least 1".into(),
            ));
        }
        if self.reserved_admin_connections >= self.max_connections {
            return Err(ConfigError::Invalid(format!(
                "reserved_admin_connections = {} leaves no connection of max_connections = {} to other users; use fewer",
                self.reserved_admin_connections, self.max_connections
            )));
        }
        if self.max_requests_per_uid == 0 {
            return Err(ConfigError::Invalid(
                "max_requests_per_uid must be at least 1".into(),
            ));
        }
        if !(0..=19).contains(&self.user_nice) {
            return Err(ConfigError::Invalid(format!(
                "user_nice = {} is not a nice value from 0 to 19",
                self.user_nice
            )));
        }
        if self.max_connections_per_uid == 0 {
            return Err(ConfigError::Invalid(
                "max_connections_per_uid must be at least 1".into(),
            ));
        }
        for (name, v) in [
            ("max_user_request_bytes", self.max_user_request_bytes),
            ("max_auth_bytes", self.max_auth_bytes),
        ] {
            if v < 256 {
                return Err(ConfigError::Invalid(format!(
                    "{name} = {v} is too small to hold a request; use at least 256"
                )));
            }
            if v > self.max_request_bytes {
                return Err(ConfigError::Invalid(format!(
                    "{name} = {v} is larger than max_request_bytes = {}",
                    self.max_request_bytes
                )));
            }
        }
        if self.max_buffered_bytes < self.max_request_bytes.saturating_mul(2) {
            return Err(ConfigError::Invalid(format!(
                "max_buffered_bytes = {} must hold at least two largest requests (2 x max_request_bytes = {})",
                self.max_buffered_bytes,
                self.max_request_bytes.saturating_mul(2)
            )));
        }
        for (name, v) in [
            ("idle_timeout_secs", self.idle_timeout_secs),
            ("request_timeout_secs", self.request_timeout_secs),
            ("auth_timeout_secs", self.auth_timeout_secs),
        ] {
            if v == 0 {
                return Err(ConfigError::Invalid(format!(
                    "{name} must be at least 1 second"
                )));
            }
        }
        if self.history_max_bytes_per_uid > self.history_max_bytes {
            return Err(ConfigError::Invalid(format!(
                "history_max_bytes_per_uid = {} is larger than history_max_bytes = {}",
                self.history_max_bytes_per_uid, self.history_max_bytes
            )));
        }
        if self.remap.iterations == 0 {
            return Err(ConfigError::Invalid(
                "[remap] iterations must be at least 1".into(),
            ));
        }
        if !(1..=MAX_REMAP_TIME_MS).contains(&self.remap.time_limit_ms) {
            return Err(ConfigError::Invalid(format!(
                "[remap] time_limit_ms = {} is not from 1 to {MAX_REMAP_TIME_MS}",
                self.remap.time_limit_ms
            )));
        }
        if self.remap.relaunch_max_moves > self.remap.max_moves {
            return Err(ConfigError::Invalid(format!(
                "[remap] relaunch_max_moves = {} is larger than max_moves = {}",
                self.remap.relaunch_max_moves, self.remap.max_moves
            )));
        }
        if self.socket_mode > 0o777 {
            return Err(ConfigError::Invalid(format!(
                "socket_mode {:o} is not a permission mode (write e.g. 0o666)",
                self.socket_mode
            )));
        }
        Ok(())
    }

    /// How long and within which budgets released jobs' histories are kept.
    pub fn retention(&self) -> crate::registry::Retention {
        crate::registry::Retention {
            secs: self.history_retention_secs,
            max_bytes: self.history_max_bytes,
            max_bytes_per_uid: self.history_max_bytes_per_uid,
        }
    }

    /// The uids with administrator rights: root, the Slurm user and `admin_uids`.
    pub fn admin_uids(&self) -> Result<Vec<u32>, ConfigError> {
        let mut out = vec![0];
        if let Some(u) = &self.slurm_user {
            match resolve_user(u) {
                Some(uid) => out.push(uid),
                // A site without a `slurm` account (root runs slurmctld) is fine: log, go on.
                None => log::warn!("slurm_user '{u}' is not a known user; only root and admin_uids are administrators"),
            }
        }
        out.extend(&self.admin_uids);
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

/// A user name or numeric uid to a uid.
pub fn resolve_user(name: &str) -> Option<u32> {
    if let Ok(uid) = name.parse::<u32>() {
        return Some(uid);
    }
    crate::sys::uid_of(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sparesd.toml");
        let c = Config::load(&path).unwrap();
        assert_eq!(c.socket, Path::new(DEFAULT_SOCKET));
        assert!(c.tcp.is_none());
        assert_eq!(c.remap, RemapConfig::default());
    }

    #[test]
    fn remap_budgets_are_capped_by_the_config() {
        let r = RemapConfig {
            max_moves: 100,
            iterations: 5000,
            ..RemapConfig::default()
        };
        let (b, capped) = r.budget(Some(u32::MAX), Some(u64::MAX), None);
        assert!(capped);
        assert_eq!((b.max_moves, b.iterations, b.seed), (100, 5000, 1));
        let (b, capped) = r.budget(Some(7), Some(10), Some(9));
        assert!(!capped);
        assert_eq!((b.max_moves, b.iterations, b.seed), (7, 10, 9));
        let (b, capped) = r.budget(None, None, None);
        assert!(!capped);
        assert_eq!((b.max_moves, b.iterations), (100, 5000));
    }

    #[test]
    fn typos_and_bad_values_are_refused() {
        let p = Path::new("t.toml");
        assert!(Config::parse("sokcet = \"/tmp/s\"", p).is_err());
        assert!(Config::parse("max_connections = 0", p).is_err());
        assert!(Config::parse("max_connections = 10\nreserved_admin_connections = 10", p).is_err());
        assert!(Config::parse("max_buffered_bytes = 1048576", p).is_err());
        assert!(Config::parse("request_timeout_secs = 0", p).is_err());
        assert!(Config::parse("socket_mode = 0o7777", p).is_err());
        assert!(Config::parse(
            "history_max_bytes = 1000\nhistory_max_bytes_per_uid = 2000",
            p
        )
        .is_err());
        assert!(Config::parse("[remap]\ntime_limit_ms = 0", p).is_err());
        assert!(Config::parse("[remap]\ntime_limit_ms = 3600000", p).is_err());
        assert!(Config::parse("[remap]\niterations = 0", p).is_err());
        assert!(Config::parse("[remap]\nmax_moves = 10\nrelaunch_max_moves = 20", p).is_err());
        assert!(Config::parse("[remap]\nat_relaunh = true", p).is_err());
        let c = Config::parse("[remap]\nat_relaunch = true\nrelaunch_max_moves = 8", p).unwrap();
        assert!(c.remap.at_relaunch);
        assert_eq!(c.remap.relaunch_max_moves, 8);
        let c = Config::parse("socket = \"/tmp/s\"\nadmin_uids = [5]", p).unwrap();
        assert_eq!(c.socket, Path::new("/tmp/s"));
        assert_eq!(resolve_user("root"), Some(0));
        assert_eq!(resolve_user("42"), Some(42));
        assert_eq!(resolve_user("no-such-user-here"), None);
    }
}
