//! Syntax of the option values (no semantics: whether a shape fits a job or
//! a network is decided later, by the `topology` crate).
//!
//! - `--spares`: `qD(r,s)` (`1 <= q <= 6`, `1 <= r <= q`, `s >= 1`, e.g.
//!   `3D(2,1)`), `auto` or `none`.
//! - `--job-shape`: `AxBxC`, 1 to 6 extents of at least 1 (e.g. `3x3x2`).
//! - `--spare-method`: `kD` (`0 <= k <= 6`: 0D substitution or kD sliding),
//!   `hybrid` / `hybrid(all)`, `hybrid(-2D)` (all but the listed ones, e.g.
//!   `hybrid(-2D-1D)`), `hybrid(3D+1D+0D)` (the listed ones in that order).
//!
//! Keywords and the `D` are case-insensitive; blanks around numbers are
//! allowed.

use std::fmt;

/// Most dimensions of a network (as in `topology`).
pub const MAX_DIMS: u32 = 6;

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

const SPARES_EXPECTED: &str = "qD(r,s) such as 3D(2,1), auto or none";
const SHAPE_EXPECTED: &str = "extents such as 3x3x2";
const METHOD_EXPECTED: &str = "0D..6D, hybrid, hybrid(-2D) or hybrid(3D+1D+0D)";

/// Value of `--spares`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spares {
    /// Let the site policy choose by job size.
    Auto,
    /// No spare nodes.
    None,
    /// `qD(r,s)`: `r` of the `q` dimensions extended by `s` layers.
    Shape { q: u32, r: u32, s: u32 },
}

impl fmt::Display for Spares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spares::Auto => f.write_str("auto"),
            Spares::None => f.write_str("none"),
            Spares::Shape { q, r, s } => write!(f, "{q}D({r},{s})"),
        }
    }
}

/// Value of `--spare-method`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpareMethod {
    /// `kD`: 0D substitution (`k = 0`) or kD sliding.
    Single(u32),
    /// `hybrid` or `hybrid(all)`.
    HybridAll,
    /// `hybrid(-2D-1D)`: all but these.
    HybridWithout(Vec<u32>),
    /// `hybrid(3D+1D+0D)`: these, in this order.
    HybridOf(Vec<u32>),
}

impl fmt::Display for SpareMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |ks: &[u32], sep: &str, lead: &str| {
            ks.iter()
                .map(|k| format!("{lead}{k}D"))
                .collect::<Vec<_>>()
                .join(sep)
        };
        match self {
            SpareMethod::Single(k) => write!(f, "{k}D"),
            SpareMethod::HybridAll => f.write_str("hybrid(all)"),
            SpareMethod::HybridWithout(ks) => write!(f, "hybrid({})", list(ks, "", "-")),
            SpareMethod::HybridOf(ks) => write!(f, "hybrid({})", list(ks, "+", "")),
        }
    }
}

fn err(option: &'static str, value: &str, expected: &'static str, reason: String) -> SpecError {
    SpecError {
        option,
        value: value.to_string(),
        reason,
        expected,
    }
}

/// A whole number made of ASCII digits only (no sign), blanks around allowed.
fn number(s: &str) -> Result<u32, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("a number is missing".into());
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{t}' is not a whole number"));
    }
    t.parse().map_err(|_| format!("'{t}' is too large"))
}

/// `kD` (blanks around allowed) -> k.
fn dimension(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let Some(digits) = t.strip_suffix(['D', 'd']) else {
        return Err(format!("'{t}' does not end in D"));
    };
    number(digits)
}

/// Parses `--spares`.
pub fn parse_spares(value: &str) -> Result<Spares, SpecError> {
    let e = |reason: String| err("spares", value, SPARES_EXPECTED, reason);
    let t = value.trim();
    if t.eq_ignore_ascii_case("auto") {
        return Ok(Spares::Auto);
    }
    if t.eq_ignore_ascii_case("none") {
        return Ok(Spares::None);
    }
    if t.is_empty() {
        return Err(e("the value is empty".into()));
    }
    let Some(open) = t.find('(') else {
        return Err(e("not a known keyword and no '(r,s)'".into()));
    };
    let Some(inner) = t[open + 1..].strip_suffix(')') else {
        return Err(e("')' missing at the end".into()));
    };
    let q = dimension(&t[..open]).map_err(|r| e(format!("dimension q: {r}")))?;
    let parts: Vec<&str> = inner.split(',').collect();
    if parts.len() != 2 {
        return Err(e(format!("{} numbers in parentheses, need 2", parts.len())));
    }
    let r = number(parts[0]).map_err(|m| e(format!("r: {m}")))?;
    let s = number(parts[1]).map_err(|m| e(format!("s: {m}")))?;
    if !(1..=MAX_DIMS).contains(&q) {
        return Err(e(format!("q = {q}, must be 1..{MAX_DIMS}")));
    }
    if !(1..=q).contains(&r) {
        return Err(e(format!("r = {r}, must be 1..q = 1..{q}")));
    }
    if s < 1 {
        return Err(e("s = 0, must be at least 1".into()));
    }
    Ok(Spares::Shape { q, r, s })
}

/// Parses `--job-shape` into its extents.
pub fn parse_job_shape(value: &str) -> Result<Vec<u32>, SpecError> {
    let e = |reason: String| err("job-shape", value, SHAPE_EXPECTED, reason);
    let t = value.trim();
    if t.is_empty() {
        return Err(e("the value is empty".into()));
    }
    let parts: Vec<&str> = t.split(['x', 'X']).collect();
    if parts.len() > MAX_DIMS as usize {
        return Err(e(format!("{} dimensions, at most {MAX_DIMS}", parts.len())));
    }
    let mut extents = Vec::with_capacity(parts.len());
    for p in parts {
        let v = number(p).map_err(&e)?;
        if v == 0 {
            return Err(e("extents must be at least 1".into()));
        }
        extents.push(v);
    }
    Ok(extents)
}

/// Parses `--spare-method`.
pub fn parse_spare_method(value: &str) -> Result<SpareMethod, SpecError> {
    let e = |reason: String| err("spare-method", value, METHOD_EXPECTED, reason);
    let t = value.trim();
    let check = |k: u32| {
        if k > MAX_DIMS {
            Err(e(format!("{k}D: at most {MAX_DIMS}D")))
        } else {
            Ok(k)
        }
    };
    if t.is_empty() {
        return Err(e("the value is empty".into()));
    }
    if t.eq_ignore_ascii_case("hybrid") {
        return Ok(SpareMethod::HybridAll);
    }
    let lower = t.to_ascii_lowercase();
    let Some(rest) = lower.strip_prefix("hybrid") else {
        return dimension(t)
            .map_err(&e)
            .and_then(check)
            .map(SpareMethod::Single);
    };
    let Some(inner) = rest
        .trim_start()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
    else {
        return Err(e("hybrid takes its list in parentheses".into()));
    };
    let inner = inner.trim();
    if inner == "all" {
        return Ok(SpareMethod::HybridAll);
    }
    let (items, without): (Vec<&str>, bool) = if let Some(ex) = inner.strip_prefix('-') {
        (ex.split('-').collect(), true)
    } else {
        (inner.split('+').collect(), false)
    };
    let mut ks = Vec::with_capacity(items.len());
    for item in items {
        let k = dimension(item).map_err(&e).and_then(check)?;
        if ks.contains(&k) {
            return Err(e(format!("{k}D is listed twice")));
        }
        ks.push(k);
    }
    Ok(if without {
        SpareMethod::HybridWithout(ks)
    } else {
        SpareMethod::HybridOf(ks)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_accepts() {
        assert_eq!(parse_spares("auto").unwrap(), Spares::Auto);
        assert_eq!(parse_spares(" AUTO ").unwrap(), Spares::Auto);
        assert_eq!(parse_spares("none").unwrap(), Spares::None);
        assert_eq!(
            parse_spares("3D(2,1)").unwrap(),
            Spares::Shape { q: 3, r: 2, s: 1 }
        );
        assert_eq!(
            parse_spares("2d( 1 , 3 )").unwrap(),
            Spares::Shape { q: 2, r: 1, s: 3 }
        );
        assert_eq!(parse_spares("6D(6,1)").unwrap().to_string(), "6D(6,1)");
    }

    #[test]
    fn spares_rejects_with_reason() {
        for (v, why) in [
            ("bogus", "no '(r,s)'"),
            ("", "empty"),
            ("3D(2,1", "')' missing"),
            ("3(2,1)", "does not end in D"),
            ("3D(2)", "1 numbers"),
            ("3D(2,1,1)", "3 numbers"),
            ("3D(4,1)", "r = 4"),
            ("3D(0,1)", "r = 0"),
            ("3D(2,0)", "s = 0"),
            ("0D(1,1)", "q = 0"),
            ("7D(1,1)", "q = 7"),
            ("3D(-1,1)", "not a whole number"),
            ("3D(2,99999999999)", "too large"),
            ("xD(1,1)", "not a whole number"),
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
        assert!(parse_job_shape("3x0x2").is_err());
        assert!(parse_job_shape("3xx2").is_err());
        assert!(parse_job_shape("").is_err());
        assert!(parse_job_shape("3x3x").is_err());
        assert!(parse_job_shape("1x1x1x1x1x1x1").is_err());
        assert!(parse_job_shape("3*3").is_err());
        let e = parse_job_shape("axb").unwrap_err();
        assert_eq!(e.option, "job-shape");
    }

    #[test]
    fn method() {
        use SpareMethod::*;
        assert_eq!(parse_spare_method("hybrid").unwrap(), HybridAll);
        assert_eq!(parse_spare_method("Hybrid(all)").unwrap(), HybridAll);
        assert_eq!(parse_spare_method("0D").unwrap(), Single(0));
        assert_eq!(parse_spare_method("1d").unwrap(), Single(1));
        assert_eq!(
            parse_spare_method("hybrid(-2D)").unwrap(),
            HybridWithout(vec![2])
        );
        assert_eq!(
            parse_spare_method("hybrid(-2D-1D)").unwrap(),
            HybridWithout(vec![2, 1])
        );
        assert_eq!(
            parse_spare_method("hybrid(3D+1D+0D)").unwrap(),
            HybridOf(vec![3, 1, 0])
        );
        for m in ["hybrid(3D+1D+0D)", "hybrid(-2D-1D)", "hybrid(all)", "2D"] {
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
