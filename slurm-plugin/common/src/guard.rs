//! The one guard every `extern "C"` entry point of the plugins goes through:
//! a panic or an error never crosses into Slurm (a plugin must not take a
//! Slurm daemon down); it is logged through Slurm's log and becomes a status
//! code.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::os::raw::c_int;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use crate::error::{PluginError, SLURM_ERROR};
use crate::ffi::{slurm_log, SlurmLevel};
use crate::LOG_PREFIX;

thread_local! {
    /// Where the last panic inside a guard of this thread happened.
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
    /// How many guards this thread is inside.
    static GUARD_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Installs (once) a panic hook that, inside a guard, only records where the
/// panic happened ([`guard`] logs it through Slurm) instead of writing to
/// stderr; outside a guard it defers to the previous hook. A cdylib has its
/// own copy of std, so this hook is this plugin's own and changes nothing
/// else in the host process.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if GUARD_DEPTH.with(Cell::get) == 0 {
                return previous(info);
            }
            let loc = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            PANIC_LOCATION.with(|p| *p.borrow_mut() = Some(loc));
        }));
    });
}

/// Counts this thread into a guard until dropped (also on unwinding).
struct Depth;

impl Depth {
    fn enter() -> Self {
        GUARD_DEPTH.with(|d| d.set(d.get() + 1));
        Depth
    }
}

impl Drop for Depth {
    fn drop(&mut self) {
        GUARD_DEPTH.with(|d| d.set(d.get() - 1));
    }
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
    let outcome = {
        let _depth = Depth::enter();
        panic::catch_unwind(AssertUnwindSafe(f))
    };
    match outcome {
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
    use crate::ffi::stubs::take_logged;
    use crate::spec::parse_spares;

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
        assert!(take_logged().is_empty());
    }

    #[test]
    fn errors_are_logged_and_become_codes() {
        take_logged();
        let rc = guard("slurm_spank_init", || {
            Err(PluginError::NullPointer("spank_t"))
        });
        assert_eq!(rc, -1);
        assert_eq!(
            take_logged(),
            [(
                SlurmLevel::Error,
                "spares: slurm_spank_init: Slurm passed a NULL spank_t".to_string()
            )]
        );

        let rc = guard("option --spares", || Ok(parse_spares("bogus").map(|_| 0)?));
        assert_eq!(rc, -1);
        let logged = take_logged();
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0].0, SlurmLevel::Error);
        assert!(logged[0].1.starts_with("spares: invalid --spares=bogus: "));

        let rc = guard("job_submit", || {
            Err(PluginError::reject_spec(
                parse_spares("9D(1,1)").unwrap_err(),
            ))
        });
        assert_eq!(rc, 3001); // ESPANK_BAD_ARG
        let logged = take_logged();
        assert_eq!(logged[0].0, SlurmLevel::Info);
        assert!(logged[0]
            .1
            .starts_with("spares: invalid --spares=9D(1,1): q = 9"));
    }

    #[test]
    fn panics_are_caught_and_logged_with_their_location() {
        take_logged();
        let rc = guard("job_modify", || -> Result<c_int, PluginError> {
            panic!("boom {}", 1)
        });
        assert_eq!(rc, SLURM_ERROR);
        let logged = take_logged();
        assert_eq!(logged.len(), 1);
        assert_eq!(logged[0].0, SlurmLevel::Error);
        let line = &logged[0].1;
        assert!(
            line.starts_with("spares: job_modify: internal error (panic at "),
            "{line}"
        );
        assert!(line.contains("guard.rs:"), "{line}");
        assert!(line.ends_with("): boom 1"), "{line}");
    }
}
