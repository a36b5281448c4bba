//! Syntax of the option values, decided by the `topology` crate (the model parses every
//! spare shape, job shape and method in the project). Whether a shape fits a job or a network
//! is decided later, when the network is known.
//!
//! - `--spares`: `qD(r,s)` (e.g. `3D(2,1)`, options `/dims=x,z` `/side=low`), `auto` or `none`.
//! - `--job-shape`: `AxBxC`, 1 to 6 extents of at least 1 (e.g. `3x3x2`).
//! - `--spare-method`: `kD`, `hybrid` / `hybrid(all)`, `hybrid(-2D)`, `hybrid(3D+1D+0D)`.
//!
//! Keywords and the `D` are case-insensitive.

use topology::{Method, MAX_DIMS};

/// A malformed option value: `invalid --<option>=<value>: <reason> (expected
/// <expected>)`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid --{option}={value}: {reason} (expected {expected})")]
pub struct SpecError {
    pub option: &'static str,
    pub value: String,
    pub reason: String,
    pub expected: &'static str,
}

const SPARES_EXPECTED: &str = "qD(r,s) such as 3D(2,1) (or 3D:2,1), auto or none";
const SHAPE_EXPECTED: &str = "extents such as 3x3x2";
const METHOD_EXPECTED: &str = "0D..6D, hybrid, hybrid(-2D) or hybrid(3D+1D+0D)";

/// Value of `--spares` (the site policy's word, shared with the CLI).
pub use topology::site_policy::Spares;

/// Value of `--spare-method`: a method whose degrees exist in some network (up to 6D); the
/// network's own dimension count is checked once the job's network is known.
pub type SpareMethod = Method;

fn err(option: &'static str, value: &str, expected: &'static str, reason: String) -> SpecError {
    SpecError {
        option,
        value: value.to_string(),
        reason,
        expected,
    }
}

/// The model's explanation without the value it repeats.
fn reason(e: topology::Error) -> String {
    match e {
        topology::Error::SpareShape { why, .. } | topology::Error::Method { why, .. } => why,
        other => other.to_string(),
    }
}

/// Parses `--spares`.
pub fn parse_spares(value: &str) -> Result<Spares, SpecError> {
    Spares::parse(value).map_err(|e| err("spares", value, SPARES_EXPECTED, reason(e)))
}

/// Parses `--job-shape` into its extents.
pub fn parse_job_shape(value: &str) -> Result<Vec<u32>, SpecError> {
    topology::grid::parse_shape(value)
        .map_err(|e| err("job-shape", value, SHAPE_EXPECTED, reason(e)))
}

/// Parses `--spare-method`.
pub fn parse_spare_method(value: &str) -> Result<SpareMethod, SpecError> {
    if value.trim().is_empty() {
        return Err(err(
            "spare-method",
            value,
            METHOD_EXPECTED,
            "the value is empty".into(),
        ));
    }
    Method::parse(value, MAX_DIMS)
        .map_err(|e| err("spare-method", value, METHOD_EXPECTED, reason(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_accepts() {
        assert_eq!(parse_spares("auto").unwrap(), Spares::Auto);
        assert_eq!(parse_spares(" AUTO ").unwrap(), Spares::Auto);
        assert_eq!(parse_spares("none").unwrap(), Spares::None);
        assert_eq!(parse_spares("3D(2,1)").unwrap().to_string(), "3D(2,1)");
        assert_eq!(parse_spares("2d( 1 , 3 )").unwrap().to_string(), "2D(1,3)");
        assert_eq!(parse_spares("6D(6,1)").unwrap().to_string(), "6D(6,1)");
    }

    #[test]
    fn spares_rejects_with_reason() {
        for (v, why) in [
            ("bogus", "expected qD(r,s)"),
            ("", "empty"),
            ("3D(2,1", "expected qD(r,s)"),
            ("3(2,1)", "expected qD(r,s)"),
            ("3D(2)", "two numbers"),
            ("3D(4,1)", "r = 4"),
            ("3D(0,1)", "r = 0"),
            ("3D(2,0)", "s must be at least 1"),
            ("0D(1,1)", "q = 0"),
            ("7D(1,1)", "q = 7"),
            ("3D(-1,1)", "r must be a whole number"),
            ("3D(2,99999999999)", "s must be a whole number"),
            ("xD(1,1)", "dimension count"),
        ] {
            let e = parse_spares(v).unwrap_err();
            assert_eq!(e.option, "spares");
            assert!(e.reason.contains(why), "{v}: {e}");
            assert!(e.to_string().starts_with(&format!("invalid --spares={v}:")));
        }
    }

    #[test]
    fn shape() {
        assert_eq!(parse_job_shape("3x3x2").unwrap(), vec![3, 3, 2]);
        assert_eq!(parse_job_shape("11X11X12").unwrap(), vec![11, 11, 12]);
        assert_eq!(parse_job_shape("16").unwrap(), vec![16]);
        for bad in ["3x0x2", "3xx2", "", "3x3x", "1x1x1x1x1x1x1", "3*3"] {
            assert!(parse_job_shape(bad).is_err(), "{bad}");
        }
        let e = parse_job_shape("axb").unwrap_err();
        assert_eq!(e.option, "job-shape");
    }

    #[test]
    fn method() {
        assert_eq!(
            parse_spare_method("hybrid").unwrap().degrees(),
            &[6, 5, 4, 3, 2, 1, 0]
        );
        assert_eq!(
            parse_spare_method("Hybrid(all)").unwrap().to_string(),
            "hybrid"
        );
        assert_eq!(parse_spare_method("0D").unwrap().degrees(), &[0]);
        assert_eq!(parse_spare_method("1d").unwrap().degrees(), &[1]);
        for m in ["hybrid(3D+1D+0D)", "hybrid(-2D-1D)", "hybrid", "2D"] {
            assert_eq!(parse_spare_method(m).unwrap().to_string(), m);
        }
        for bad in [
            "",
            "hybrid(",
            "hybrid()",
            "hybrid(3D+3D)",
            "hybrid(7D)",
            "7D",
            "sideways",
            "hybrid(-)",
            "hybrid 3D",
            "D",
        ] {
            let e = parse_spare_method(bad).unwrap_err();
            assert_eq!(e.option, "spare-method", "{bad}");
        }
    }
}
