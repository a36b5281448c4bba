//! A `log` backend that writes to Slurm's own log, so `log::debug!` in a
//! plugin lands where Slurm's own messages of that process go (the daemon's
//! log file, or the user's terminal in sbatch/salloc/srun).
//!
//! | `log` level | Slurm function  | seen                                          |
//! |-------------|-----------------|-----------------------------------------------|
//! | `error!`    | `slurm_error`   | always (`sbatch: error: ...` for a user)       |
//! | `warn!`     | `slurm_info`    | by default, as `warning: ...`                  |
//! | `info!`     | `slurm_info` in daemons, `slurm_verbose` in sbatch/salloc/srun | `*Debug=info` (Slurm's default), `-v` |
//! | `debug!`    | `slurm_debug`   | `-vv`, `*Debug=debug`                          |
//! | `trace!`    | `slurm_debug2`  | `-vvv`, `*Debug=debug2`                        |
//!
//! `info!` is the level of the lines an administrator reads (docs/admin.md,
//! "Logs"): slurmctld, slurmd and slurmstepd log them at Slurm's default
//! `info`. In sbatch, salloc and srun (the SPANK plugin's local and allocator
//! contexts, [`SlurmLogger::set_user_terminal`]) `slurm_info` would print on
//! the user's terminal at every submission, so there `info!` maps to
//! `slurm_verbose` (`-v`). `warn!` is for what a user should read.
//!
//! Slurm filters by its own level, so every record is passed on (the cost of
//! formatting is negligible next to a job submission).
//!
//! Log lines carry user values (option values, job names): [`escape_controls`]
//! escapes every control character in [`slurm_log`], the one function every
//! line of the plugins goes through (this logger and the panic guard), so
//! that a value with a newline cannot forge a line in a daemon's log.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ffi::{slurm_log, SlurmLevel};

/// The backend; `prefix` starts every line (`spares: ...`).
pub struct SlurmLogger {
    prefix: &'static str,
    /// The process is sbatch, salloc or srun: Slurm's info level reaches the user's terminal.
    user_terminal: AtomicBool,
}

impl SlurmLogger {
    pub const fn new(prefix: &'static str) -> Self {
        SlurmLogger {
            prefix,
            user_terminal: AtomicBool::new(false),
        }
    }

    /// Says whether this process is a user's command (sbatch, salloc, srun) rather than a
    /// Slurm daemon; `info!` then goes to Slurm's verbose level.
    pub fn set_user_terminal(&self, yes: bool) {
        self.user_terminal.store(yes, Ordering::Relaxed);
    }

    /// The Slurm function and the line for a record of `level`.
    pub fn format(&self, level: log::Level, msg: &str) -> (SlurmLevel, String) {
        let p = self.prefix;
        match level {
            log::Level::Error => (SlurmLevel::Error, format!("{p}: {msg}")),
            log::Level::Warn => (SlurmLevel::Info, format!("{p}: warning: {msg}")),
            log::Level::Info if self.user_terminal.load(Ordering::Relaxed) => {
                (SlurmLevel::Verbose, format!("{p}: {msg}"))
            }
            log::Level::Info => (SlurmLevel::Info, format!("{p}: {msg}")),
            log::Level::Debug => (SlurmLevel::Debug, format!("{p}: {msg}")),
            log::Level::Trace => (SlurmLevel::Debug2, format!("{p}: {msg}")),
        }
    }
}

/// `msg` with every control character escaped (`\n`, `\r`, `\t`, `\u{1b}`, ...)
/// and backslashes doubled, so the escaped text is unambiguous; one line whatever the
/// input.
pub fn escape_controls(msg: &str) -> std::borrow::Cow<'_, str> {
    let special = |c: char| c.is_control() || matches!(c, '\\' | '\u{2028}' | '\u{2029}');
    if !msg.chars().any(special) {
        return msg.into();
    }
    let mut out = String::with_capacity(msg.len() + 8);
    for c in msg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if special(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.into()
}

impl log::Log for SlurmLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let (level, line) = self.format(record.level(), &record.args().to_string());
        slurm_log(level, &line);
    }

    fn flush(&self) {}
}

/// Installs `logger` as this plugin's `log` backend (once per process; later
/// calls do nothing). Each cdylib has its own copy of the `log` crate, so
/// this does not touch any other plugin in the same process.
pub fn init(logger: &'static SlurmLogger) {
    if log::set_logger(logger).is_ok() {
        log::set_max_level(log::LevelFilter::Trace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        let l = SlurmLogger::new("spares");
        assert_eq!(
            l.format(log::Level::Error, "x"),
            (SlurmLevel::Error, "spares: x".into())
        );
        assert_eq!(
            l.format(log::Level::Warn, "x"),
            (SlurmLevel::Info, "spares: warning: x".into())
        );
        // In slurmctld, slurmd and slurmstepd the lines docs/admin.md lists are seen at
        // Slurm's default level; on a user's terminal only with -v.
        assert_eq!(l.format(log::Level::Info, "x").0, SlurmLevel::Info);
        l.set_user_terminal(true);
        assert_eq!(l.format(log::Level::Info, "x").0, SlurmLevel::Verbose);
        assert_eq!(l.format(log::Level::Warn, "x").0, SlurmLevel::Info);
        assert_eq!(l.format(log::Level::Debug, "x").0, SlurmLevel::Debug);
        assert_eq!(l.format(log::Level::Trace, "x").0, SlurmLevel::Debug2);
    }

    #[test]
    fn a_value_with_a_newline_stays_on_one_line() {
        let forged = "submit new job \"x\": spares=3D(2,1)\n[2026-01-01T00:00:00] error: forged\r\0\u{1b}[2J\u{85}\u{2028}";
        // Through the logger and straight through slurm_log (the panic guard's way).
        log::Log::log(
            &SlurmLogger::new("spares"),
            &log::Record::builder()
                .level(log::Level::Warn)
                .args(format_args!("{forged}"))
                .build(),
        );
        slurm_log(SlurmLevel::Error, forged);
        let logged = crate::ffi::stubs::take_logged();
        assert_eq!(logged.len(), 2);
        for (_, line) in logged {
            assert!(!line.chars().any(char::is_control), "{line:?}");
            assert!(line.ends_with(
                "spares=3D(2,1)\\n[2026-01-01T00:00:00] error: forged\\r\\u{0}\\u{1b}[2J\\u{85}\\u{2028}"
            ), "{line}");
        }
        // A backslash in the value cannot fake an escape.
        assert_eq!(escape_controls("a\\nb"), "a\\\\nb");
        assert_eq!(escape_controls("plain (3D(2,1))"), "plain (3D(2,1))");
    }
}
