//! The SPANK options of the spares plugin: their names, help texts, and the
//! syntax check of each value.

use std::ffi::CStr;
use std::os::raw::c_int;

use crate::spec::{self, SpecError};

/// A NUL-terminated literal as a `&'static CStr`, at compile time.
const fn cstr(bytes: &'static [u8]) -> &'static CStr {
    match CStr::from_bytes_with_nul(bytes) {
        Ok(c) => c,
        Err(_) => panic!("option strings must end in exactly one NUL"),
    }
}

/// Which option (`val` of `struct spank_option`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    Spares = 1,
    JobShape = 2,
    SpareMethod = 3,
}

/// One option as registered with `spank_option_register`.
#[derive(Debug, Clone, Copy)]
pub struct OptionDef {
    pub opt: Opt,
    /// Long option name, without `--`.
    pub name: &'static str,
    pub c_name: &'static CStr,
    /// One word for the argument in `--help`.
    pub arginfo: &'static CStr,
    pub usage: &'static CStr,
}

impl OptionDef {
    /// `val` of `struct spank_option`.
    pub fn val(&self) -> c_int {
        self.opt as c_int
    }
}

/// The options, in `--help` order.
pub const OPTIONS: [OptionDef; 3] = [
    OptionDef {
        opt: Opt::Spares,
        name: "spares",
        c_name: cstr(b"spares\0"),
        arginfo: cstr(b"qD(r,s)|auto|none\0"),
        usage: cstr(
            b"Spare nodes for the job: qD(r,s) extends r of the q dimensions \
              by s layers (e.g. 3D(2,1), or 3D:2,1 without quotes); auto lets \
              the site policy choose; none asks for none.\0",
        ),
    },
    OptionDef {
        opt: Opt::JobShape,
        name: "job-shape",
        c_name: cstr(b"job-shape\0"),
        arginfo: cstr(b"AxBxC\0"),
        usage: cstr(b"Logical grid of the job's ranks, e.g. 11x11x12.\0"),
    },
    OptionDef {
        opt: Opt::SpareMethod,
        name: "spare-method",
        c_name: cstr(b"spare-method\0"),
        arginfo: cstr(b"method\0"),
        usage: cstr(
            b"Substitution after a node failure: 0D, 1D, 2D, 3D, hybrid \
              (default), hybrid(-2D) or hybrid(3D+1D+0D).\0",
        ),
    },
];

/// The option registered with `val`.
pub fn by_val(val: c_int) -> Option<&'static OptionDef> {
    OPTIONS.iter().find(|o| o.val() == val)
}

/// Syntax check of one option value.
pub fn validate(opt: Opt, value: &str) -> Result<(), SpecError> {
    match opt {
        Opt::Spares => spec::parse_spares(value).map(drop),
        Opt::JobShape => spec::parse_job_shape(value).map(drop),
        Opt::SpareMethod => spec::parse_spare_method(value).map(drop),
    }
}

/// Where an option was given, as far as it matters for spares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Given {
    /// sbatch or salloc: the job's allocation is being asked for.
    Allocator,
    /// srun inside an allocation (`SLURM_JOB_ID` set): the job's map is already made.
    SrunInAllocation,
    /// srun creating its own allocation.
    SrunAlone,
}

/// Refuses a spares option where it cannot do what the user means: `srun --spares`
/// outside an allocation would get a padded box and start a task on every node of it,
/// spares included (srun has no way to start the ranks on the compute nodes only).
/// `--spares=none` asks for nothing and passes.
pub fn check_where(opt: Opt, value: &str, given: Given) -> Result<(), String> {
    if given != Given::SrunAlone
        || (opt == Opt::Spares && value.trim().eq_ignore_ascii_case("none"))
    {
        return Ok(());
    }
    let name = OPTIONS
        .iter()
        .find(|o| o.opt == opt)
        .map_or("spares", |o| o.name);
    Err(format!(
        "srun --{name} outside an allocation would start a task on every node of the padded box, spares included: allocate the box with salloc or sbatch (--spares, -N or --job-shape), then start the ranks with SLURM_HOSTFILE=$SLURM_SPARES_HOSTFILE srun --distribution=arbitrary -n <compute nodes>"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srun_alone_is_refused_with_what_to_do() {
        // `srun --spares=3D(2,1) --job-shape=3x3x2 app` started a task on every node of the
        // box, spares included.
        let e = check_where(Opt::Spares, "3D(2,1)", Given::SrunAlone).unwrap_err();
        assert!(
            e.starts_with("srun --spares outside an allocation would start a task on every node"),
            "{e}"
        );
        assert!(e.contains("SLURM_HOSTFILE=$SLURM_SPARES_HOSTFILE"), "{e}");
        assert!(check_where(Opt::JobShape, "3x3x2", Given::SrunAlone)
            .unwrap_err()
            .starts_with("srun --job-shape"));
        assert!(check_where(Opt::Spares, "none", Given::SrunAlone).is_ok());
        // Inside a job the options come from the batch script's environment: srun passes.
        assert!(check_where(Opt::Spares, "3D(2,1)", Given::SrunInAllocation).is_ok());
        assert!(check_where(Opt::Spares, "3D(2,1)", Given::Allocator).is_ok());
    }

    #[test]
    fn names_agree_and_are_short() {
        for o in OPTIONS {
            assert_eq!(o.c_name.to_str().unwrap(), o.name);
            assert!(o.name.len() <= 75, "SPANK_OPTION_MAXLEN");
            assert_eq!(by_val(o.val()).unwrap().name, o.name);
        }
        assert!(by_val(0).is_none());
    }

    #[test]
    fn validate_dispatches() {
        assert!(validate(Opt::Spares, "3D(2,1)").is_ok());
        assert!(validate(Opt::Spares, "3x3x2").is_err());
        assert!(validate(Opt::JobShape, "3x3x2").is_ok());
        assert!(validate(Opt::JobShape, "auto").is_err());
        assert!(validate(Opt::SpareMethod, "hybrid(3D+0D)").is_ok());
        assert!(validate(Opt::SpareMethod, "3D(2,1)").is_err());
    }
}
