//! Generates `$OUT_DIR/bindings.rs` from Slurm's public headers with bindgen.
//!
//! When bindgen cannot run (no libclang, no `slurm/spank.h`), or when
//! `SPARES_FORCE_FALLBACK_BINDINGS=1` / the `fallback-bindings` feature asks
//! for it, the checked-in `src/bindings_fallback.rs` (generated from Slurm
//! 22.05.8's headers) is copied there instead, with a `cargo:warning`.
//!
//! Environment:
//! - `SLURM_INCLUDE_DIR`: directory holding `slurm/slurm.h` (default: the
//!   compiler's include path, i.e. `/usr/include`), e.g. another release's
//!   root filesystem's `/usr/include`: only its `slurm/` is used (the C
//!   library's headers stay the host's). With it set, the build fails rather
//!   than falling back to the 22.05.8 bindings: a plugin asked for one
//!   release must never silently be built for another.
//! - `SPARES_FORCE_FALLBACK_BINDINGS=1`: always use the fallback file.
//!
//! Nothing is linked: the plugins leave every Slurm symbol undefined and the
//! host process (sbatch, srun, slurmstepd, slurmctld) provides them.
//!
//! What differs between releases becomes a `cfg` of this crate, read from
//! the bindings themselves (so a release in between is classified by what
//! its headers hold, not by a guessed version):
//! - `slurm_job_desc_step_id`: `job_desc_msg_t` has no `job_id`; the job id
//!   is `step_id.job_id` (26.05).
//! - `slurm_job_modify_err_msg`: `job_modify` takes a fourth argument
//!   `char **err_msg` (since 23.02, `SLURM_VERSION_NUMBER >= 0x170200`).
//!
//! The same facts reach dependents' build scripts (`links = "slurm"`) as
//! `DEP_SLURM_VERSION_NUMBER`, `DEP_SLURM_RELEASE` (e.g. `24.11.5`) and
//! `DEP_SLURM_JOB_MODIFY_ERR_MSG` (`1` or `0`), and the crate as
//! `SLURM_SYS_RELEASE`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const FALLBACK: &str = "src/bindings_fallback.rs";

/// Functions of the public headers that the plugins call.
const FUNCTIONS: &[&str] = &[
    "spank_option_register",
    "spank_getenv",
    "spank_setenv",
    "spank_unsetenv",
    "spank_get_item",
    "spank_context",
    "spank_remote",
    "spank_strerror",
    "slurm_info",
    "slurm_error",
    "slurm_verbose",
    "slurm_debug",
    "slurm_debug2",
    "slurm_spank_log",
];

/// Types (their dependencies come along).
const TYPES: &[&str] = &[
    "spank_t",
    "spank_option",
    "spank_opt_cb_f",
    "spank_item_t",
    "spank_context_t",
    "spank_err_t",
    "slurm_err_t",
    "job_desc_msg_t",
];

/// `#define` constants.
const VARS: &[&str] = &[
    "NO_VAL",
    "NO_VAL16",
    "NO_VAL64",
    "INFINITE",
    "INFINITE16",
    "INFINITE64",
    "SLURM_VERSION_NUMBER",
    "SLURM_SUCCESS",
    "SLURM_ERROR",
    "ESPANK_SUCCESS",
    "SPANK_OPTION_MAXLEN",
    "SLURM_BATCH_SCRIPT",
    "SLURM_EXTERN_CONT",
    "SLURM_INTERACTIVE_STEP",
    "SLURM_PENDING_STEP",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed={FALLBACK}");
    println!("cargo:rerun-if-env-changed=SPARES_FORCE_FALLBACK_BINDINGS");
    println!("cargo:rerun-if-env-changed=SLURM_INCLUDE_DIR");

    let out =
        PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo")).join("bindings.rs");

    let forced = env::var_os("CARGO_FEATURE_FALLBACK_BINDINGS").is_some()
        || env::var("SPARES_FORCE_FALLBACK_BINDINGS").is_ok_and(|v| v == "1");

    let explicit = env::var_os("SLURM_INCLUDE_DIR").is_some();
    let source = if forced {
        if explicit {
            panic!(
                "slurm-sys: SLURM_INCLUDE_DIR is set and the fallback bindings are forced: \
                 choose one"
            );
        }
        use_fallback_with(
            &out,
            "forced by SPARES_FORCE_FALLBACK_BINDINGS=1 or feature fallback-bindings",
        );
        "fallback"
    } else {
        match generate(&out) {
            Ok(()) => "bindgen",
            Err(why) if explicit => panic!(
                "slurm-sys: no bindings from SLURM_INCLUDE_DIR={}: {why}",
                env::var("SLURM_INCLUDE_DIR").unwrap_or_default()
            ),
            Err(why) => {
                use_fallback_with(&out, &why);
                "fallback"
            }
        }
    };
    println!("cargo:rustc-env=SLURM_SYS_BINDINGS={source}");

    let bindings = fs::read_to_string(&out).expect("read the bindings back");
    let facts = ReleaseFacts::from_bindings(&bindings).unwrap_or_else(|e| {
        panic!("slurm-sys: {e} in {}", out.display());
    });
    println!("cargo:rustc-check-cfg=cfg(slurm_job_desc_step_id)");
    println!("cargo:rustc-check-cfg=cfg(slurm_job_modify_err_msg)");
    if facts.job_id_in_step_id {
        println!("cargo:rustc-cfg=slurm_job_desc_step_id");
    }
    if facts.job_modify_err_msg() {
        println!("cargo:rustc-cfg=slurm_job_modify_err_msg");
    }
    let release = facts.release();
    println!("cargo:rustc-env=SLURM_SYS_RELEASE={release}");
    println!("cargo:version_number={}", facts.version_number);
    println!("cargo:release={release}");
    println!(
        "cargo:job_modify_err_msg={}",
        u8::from(facts.job_modify_err_msg())
    );
}

/// What the plugins' code depends on, read from the generated bindings.
struct ReleaseFacts {
    version_number: u32,
    job_id_in_step_id: bool,
}

impl ReleaseFacts {
    fn from_bindings(text: &str) -> Result<Self, String> {
        let version_number = text
            .lines()
            .find_map(|l| {
                l.trim()
                    .strip_prefix("pub const SLURM_VERSION_NUMBER: u32 = ")
            })
            .and_then(|v| v.trim_end_matches(';').trim().parse::<u32>().ok())
            .ok_or("no `pub const SLURM_VERSION_NUMBER: u32` in the bindings")?;
        // `job_desc_msg_t` is a typedef of a struct (`job_descriptor`).
        let name = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("pub type job_desc_msg_t = "))
            .map(|v| v.trim_end_matches(';').trim().to_string())
            .unwrap_or_else(|| "job_desc_msg_t".into());
        let start = text
            .find(&format!("pub struct {name} {{"))
            .ok_or_else(|| format!("no `pub struct {name}` in the bindings"))?;
        let body = &text[start..];
        let body = &body[..body.find("\n}").unwrap_or(body.len())];
        let has = |field: &str| body.contains(&format!("pub {field}: "));
        let job_id_in_step_id = match (has("job_id"), has("step_id")) {
            (true, _) => false,
            (false, true) => true,
            (false, false) => return Err(format!("`{name}` has neither `job_id` nor `step_id`")),
        };
        Ok(ReleaseFacts {
            version_number,
            job_id_in_step_id,
        })
    }

    /// `job_modify(job_desc, job_ptr, submit_uid, err_msg)` since 23.02.
    fn job_modify_err_msg(&self) -> bool {
        self.version_number >= 0x17_02_00
    }

    /// `24.11.5` for 0x180b05 (`SLURM_VERSION_NUMBER` is 0xMMmmuu).
    fn release(&self) -> String {
        let v = self.version_number;
        format!("{}.{:02}.{}", v >> 16, (v >> 8) & 0xff, v & 0xff)
    }
}

fn use_fallback_with(out: &Path, why: &str) {
    println!(
        "cargo:warning=slurm-sys: using the checked-in Slurm 22.05.8 bindings \
         ({FALLBACK}): {why}"
    );
    fs::copy(FALLBACK, out).expect("copy the fallback bindings into OUT_DIR");
}

/// bindgen types a `#define` by its value: `NO_VAL64` (0xfffffffffffffffe)
/// would become `i32 = -2`. Give the sentinels their C types.
#[derive(Debug)]
struct MacroTypes;

impl bindgen::callbacks::ParseCallbacks for MacroTypes {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        use bindgen::callbacks::IntKind;
        match name {
            "NO_VAL64" | "INFINITE64" => Some(IntKind::U64),
            "NO_VAL16" | "INFINITE16" => Some(IntKind::U16),
            "NO_VAL" | "INFINITE" => Some(IntKind::U32),
            "SLURM_ERROR" => Some(IntKind::Int),
            _ => None,
        }
    }
}

fn generate(out: &Path) -> Result<(), String> {
    let include = env::var("SLURM_INCLUDE_DIR").ok();
    let probe = Path::new(include.as_deref().unwrap_or("/usr/include")).join("slurm/spank.h");
    if !probe.exists() {
        return Err(format!(
            "{} not found (install libslurm-dev or set SLURM_INCLUDE_DIR)",
            probe.display()
        ));
    }

    let mut builder = bindgen::Builder::default()
        .header("wrapper.h")
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
        .parse_callbacks(Box::new(MacroTypes))
        // Code the workspace's rust-version (1.75) compiles.
        .rust_target(bindgen::RustTarget::stable(75, 0).map_err(|e| e.to_string())?)
        .default_enum_style(bindgen::EnumVariation::Consts)
        // `ESLURM_INVALID_NODE_COUNT`, not `slurm_err_t_ESLURM_INVALID_NODE_COUNT`.
        .prepend_enum_name(false)
        // C comments would become doc comments (and doctests).
        .generate_comments(false)
        .layout_tests(true)
        .raw_line(
            "// Generated by bindgen from Slurm's public headers (slurm-plugin/sys/build.rs).",
        );
    if let Some(dir) = &include {
        // `-I DIR` would also put DIR's C library headers (another glibc's
        // stdint.h ...) before the host's: offer clang DIR's `slurm/` alone.
        let only_slurm = out.with_file_name("slurm-include");
        let link = only_slurm.join("slurm");
        let _ = fs::remove_file(&link);
        fs::create_dir_all(&only_slurm)
            .and_then(|()| std::os::unix::fs::symlink(Path::new(dir).join("slurm"), &link))
            .map_err(|e| format!("linking {} to {dir}/slurm: {e}", link.display()))?;
        builder = builder.clang_arg(format!("-I{}", only_slurm.display()));
    }
    for f in FUNCTIONS {
        builder = builder.allowlist_function(f);
    }
    for t in TYPES {
        builder = builder.allowlist_type(t);
    }
    for v in VARS {
        builder = builder.allowlist_var(v);
    }

    // bindgen panics ("Unable to find libclang") when libclang is missing:
    // turn that into a fallback, without printing the panic.
    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    std::panic::set_hook(prev_hook);

    let bindings = match result {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => return Err(format!("bindgen failed: {e}")),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            return Err(format!(
                "bindgen could not run (libclang-dev missing?): {msg}"
            ));
        }
    };
    bindings
        .write_to_file(out)
        .map_err(|e| format!("writing {}: {e}", out.display()))
}
