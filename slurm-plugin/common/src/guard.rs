//! The one guard every `extern "C"` entry point of the plugins goes through:
//! a panic or an error never crosses into Slurm (a plugin must not take a
//! Slurm daemon down); it is logged through Slurm's log and becomes a status
//! code.

use std::any::Any;
use std::cell::RefCell;
use std::os::raw::c_int;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use crate::error::{PluginError, SLURM_ERROR};
use crate::ffi::{slurm_log, SlurmLevel};
use crate::LOG_PREFIX;

thread_local! {
    /// Where the last panic of this thread happened (set by our hook).
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Replaces the default panic hook (which writes to stderr, i.e. a daemon's
/// log or the user's terminal, without the entry point) with one that only
/// records the location; [`guard`] logs it. A cdylib has its own copy of std,
/// so this hook is this plugin's own and touches nothing else in the host.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        panic::set_hook(Box::new(|info| {
            let loc = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            PANIC_LOCATION.with(|p| *p.borrow_mut() = Some(loc));
        }));
    });
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs the body of entry point `entry` (the C function's name, for the log)
/// and returns what Slurm gets:
/// - `Ok(rc)`: `rc`;
/// - `Err(e)`: logged (a user's error as `spares: <message>`, any other as
///   `spares: <entry>: <message>`), then `e.code()`: `SLURM_ERROR` (-1,
///   which fails a SPANK call or a job_submit) or the `ESLURM_*` code of a
///   rejection;
/// - a panic: logged with its location, then `SLURM_ERROR`.
///
/// A rejected job is logged at info level (the user reads the message in
/// `err_msg`; it is not an error of slurmctld's), anything else at error
/// level (in sbatch/srun that is the user's terminal).
pub fn guard<F>(entry: &str, f: F) -> c_int
where
    F: FnOnce() -> Result<c_int, PluginError>,
{
    install_panic_hook();
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(rc)) => rc,
        Ok(Err(e)) => {
            match &e {
                PluginError::Rejected { .. } => slurm_log(SlurmLevel::Info, &e.to_string()),
                e if e.is_user_error() => {
                    slurm_log(SlurmLevel::Error, &format!("{LOG_PREFIX}: {e}"))
                }
                e => slurm_log(SlurmLevel::Error, &format!("{LOG_PREFIX}: {entry}: {e}")),
            }
            e.code()
        }
        Err(payload) => {
            let loc = PANIC_LOCATION
                .with(|p| p.borrow_mut().take())
                .map(|l| format!(" at {l}"))
                .unwrap_or_default();
            slurm_log(
                SlurmLevel::Error,
                &format!(
                    "{LOG_PREFIX}: {entry}: internal error (panic{loc}): {}",
                    panic_message(payload.as_ref())
                ),
            );
            SLURM_ERROR
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_payloads() {
        assert_eq!(panic_message(&"boom"), "boom");
        assert_eq!(panic_message(&String::from("bang")), "bang");
        assert_eq!(panic_message(&42u8), "unknown panic payload");
    }

    #[test]
    fn ok_passes_through() {
        // No error, no panic: nothing is logged, so no Slurm symbol is needed.
        assert_eq!(guard("test", || Ok(7)), 7);
    }
}
