//! Slurm hostlist expressions, both ways: `node[001-064]`, `rack[1-2]-n[01-16]`, `a1,b[3,5-6]`.
//!
//! Expansion follows Slurm: comma-separated items, each item a name with bracketed ranges; with
//! several bracket groups the leftmost varies slowest; a range keeps the zero padding of its low
//! bound. Compression keeps the order it is given, so `expand(compress(x)) == x` for any list.

use crate::Error;

/// Refuse expressions that expand to more names than any network may hold
/// ([`crate::limits::MAX_NODES`]).
pub const MAX_HOSTS: usize = crate::limits::MAX_NODES as usize;

/// Most bytes all expanded names may take together (a long literal times many ranges would
/// otherwise multiply into gigabytes): 64 MiB, 64 bytes for each of [`MAX_HOSTS`] names.
pub const MAX_HOSTLIST_BYTES: usize = 64 << 20;

/// Expands a hostlist expression into host names, in order.
///
/// Every count is checked before names are built: at most [`MAX_HOSTS`] names and
/// [`MAX_HOSTLIST_BYTES`] bytes of names in all, and each name is built once (no intermediate
/// lists per bracket group), so the work is linear in what is returned.
pub fn expand(expr: &str) -> Result<Vec<String>, Error> {
    let bad = |why: String| Error::Hostlist {
        expr: expr.to_string(),
        why,
    };
    let mut out = Vec::new();
    let mut bytes_left = MAX_HOSTLIST_BYTES;
    for item in split_top_level(expr).map_err(&bad)? {
        let item = item.trim();
        if item.is_empty() {
            return Err(bad("an empty name between commas".into()));
        }
        expand_item(item, &mut out, &mut bytes_left).map_err(&bad)?;
    }
    if out.is_empty() {
        return Err(bad("names no host".into()));
    }
    Ok(out)
}

/// How many names `expr` expands to, without building them (so that a caller can check a
/// budget over many expressions first); the same errors as [`expand`], except the byte budget.
pub fn count(expr: &str) -> Result<u64, Error> {
    let bad = |why: String| Error::Hostlist {
        expr: expr.to_string(),
        why,
    };
    let mut total: u64 = 0;
    for item in split_top_level(expr).map_err(&bad)? {
        let item = item.trim();
        if item.is_empty() {
            return Err(bad("an empty name between commas".into()));
        }
        let mut names: u64 = 1;
        let mut rest = item;
        while let Some(open) = rest.find('[') {
            let close = rest[open..]
                .find(']')
                .ok_or_else(|| bad("'[' without ']'".into()))?
                + open;
            let group = parse_group(&rest[..open], &rest[open + 1..close]).map_err(&bad)?;
            names = names.saturating_mul(group.count);
            rest = &rest[close + 1..];
        }
        total = total.saturating_add(names);
        if total > MAX_HOSTS as u64 {
            return Err(bad(format!(
                "expands to more than {MAX_HOSTS} names, the limit"
            )));
        }
    }
    Ok(total)
}

fn split_top_level(expr: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, ch) in expr.char_indices() {
        match ch {
            '[' if depth > 0 => return Err("nested '['".into()),
            '[' => depth = 1,
            ']' if depth == 0 => return Err(format!("']' at offset {i} without '['")),
            ']' => depth = 0,
            ',' if depth == 0 => {
                items.push(&expr[start..i]);
                start = i + 1;
            }
            c if c.is_whitespace() => return Err(format!("white space at offset {i}")),
            _ => {}
        }
    }
    if depth != 0 {
        return Err("'[' without ']'".into());
    }
    items.push(&expr[start..]);
    Ok(items)
}

/// One range of a bracket group: `lo..=hi`, zero-padded to `width` digits.
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

/// A bracket group and the literal text before it.
struct Group<'a> {
    literal: &'a str,
    ranges: Vec<Range>,
    /// Numbers in the group.
    count: u64,
    /// Longest number the group prints.
    widest: usize,
}

/// Parses a bracket group's ranges, counting its numbers (at most [`MAX_HOSTS`]).
fn parse_group<'a>(literal: &'a str, group: &str) -> Result<Group<'a>, String> {
    let mut g = Group {
        literal,
        ranges: Vec::new(),
        count: 0,
        widest: 0,
    };
    for part in group.split(',') {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(format!("'[{group}]' holds '{part}', not a number or range"));
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| format!("'{lo}' is too large"))?,
            hi.parse().map_err(|_| format!("'{hi}' is too large"))?,
        );
        if a > b {
            return Err(format!("range '{part}' runs backwards"));
        }
        // Counted over the whole group: `[0-999999,0-999999,...]` adds up.
        g.count = g.count.saturating_add((b - a).saturating_add(1));
        if g.count > MAX_HOSTS as u64 {
            return Err(format!(
                "'[{group}]' has more than {MAX_HOSTS} numbers, the limit"
            ));
        }
        let width = lo.len();
        g.widest = g.widest.max(width).max(b.to_string().len());
        g.ranges.push(Range {
            lo: a,
            hi: b,
            width,
        });
    }
    Ok(g)
}

/// Expands one item (no top-level comma) onto `out`: the Cartesian product of its groups,
/// the leftmost varying slowest. `bytes_left` is what the expression may still produce.
fn expand_item(item: &str, out: &mut Vec<String>, bytes_left: &mut usize) -> Result<(), String> {
    let mut groups = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']').ok_or("'[' without ']'")? + open;
        groups.push(parse_group(&rest[..open], &rest[open + 1..close])?);
        rest = &rest[close + 1..];
    }
    let tail = rest;
    // Budgets first: how many names, how long each can be.
    let mut count: u64 = 1;
    let mut longest = tail.len();
    for g in &groups {
        count = count.saturating_mul(g.count);
        if count.saturating_add(out.len() as u64) > MAX_HOSTS as u64 {
            return Err(format!("expands to more than {MAX_HOSTS} names, the limit"));
        }
        longest = longest.saturating_add(g.literal.len() + g.widest);
    }
    let bytes = (count as usize).saturating_mul(longest.max(1));
    if bytes > *bytes_left {
        return Err(format!(
            "expands to more than {MAX_HOSTLIST_BYTES} bytes of names, the limit"
        ));
    }
    *bytes_left -= bytes;
    // An odometer over the groups, the rightmost fastest: (range index, number) per group.
    let mut at: Vec<(usize, u64)> = groups.iter().map(|g| (0, g.ranges[0].lo)).collect();
    out.reserve(count as usize);
    for _ in 0..count {
        let mut name = String::with_capacity(longest);
        for (g, &(r, v)) in groups.iter().zip(&at) {
            name.push_str(g.literal);
            let width = g.ranges[r].width;
            // Writing into a String cannot fail.
            let _ = std::fmt::Write::write_fmt(&mut name, format_args!("{v:0width$}"));
        }
        name.push_str(tail);
        out.push(name);
        for (g, (r, v)) in groups.iter().zip(at.iter_mut()).rev() {
            if *v < g.ranges[*r].hi {
                *v += 1;
                break;
            }
            if *r + 1 < g.ranges.len() {
                *r += 1;
                *v = g.ranges[*r].lo;
                break;
            }
            *r = 0;
            *v = g.ranges[0].lo;
        }
    }
    Ok(())
}

/// Splits a name into a prefix and its trailing number (digits), if any.
fn split_number(name: &str) -> (&str, Option<&str>) {
    let cut = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if cut == name.len() {
        (name, None)
    } else {
        (&name[..cut], Some(&name[cut..]))
    }
}

/// Compresses host names into a hostlist expression, keeping their order:
/// `n01,n02,n03,n05` -> `n[01-03,05]`.
pub fn compress<S: AsRef<str>>(names: &[S]) -> String {
    // Runs of names with the same prefix and number width become one bracket group, as long as
    // their numbers increase (so that expansion gives back the same order).
    struct Group<'a> {
        prefix: &'a str,
        width: usize,
        ranges: Vec<(u64, u64)>,
    }
    let mut items: Vec<String> = Vec::new();
    let mut group: Option<Group> = None;
    let flush = |g: Group, items: &mut Vec<String>| {
        let w = g.width;
        let body: Vec<String> = g
            .ranges
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    format!("{a:0w$}")
                } else {
                    format!("{a:0w$}-{b:0w$}")
                }
            })
            .collect();
        if g.ranges.len() == 1 && g.ranges[0].0 == g.ranges[0].1 {
            items.push(format!("{}{}", g.prefix, body[0]));
        } else {
            items.push(format!("{}[{}]", g.prefix, body.join(",")));
        }
    };
    for name in names {
        let name = name.as_ref();
        let (prefix, num) = split_number(name);
        // Names without a number, or with one too long for u64, stay plain names.
        let Some((num, value)) = num.and_then(|n| n.parse::<u64>().ok().map(|v| (n, v))) else {
            if let Some(g) = group.take() {
                flush(g, &mut items);
            }
            items.push(name.to_string());
            continue;
        };
        // Slurm pads a range to the width of its low bound: only a leading zero makes a width.
        let width = if num.len() > 1 && num.starts_with('0') {
            num.len()
        } else {
            1
        };
        if let Some(g) = group.as_mut() {
            let last = g.ranges.last_mut().expect("groups are never empty");
            let same_form = g.prefix == prefix && format!("{value:0w$}", w = g.width) == num;
            if same_form && value == last.1 + 1 {
                last.1 = value;
                continue;
            }
            if same_form && value > last.1 + 1 {
                g.ranges.push((value, value));
                continue;
            }
        }
        if let Some(g) = group.take() {
            flush(g, &mut items);
        }
        group = Some(Group {
            prefix,
            width,
            ranges: vec![(value, value)],
        });
    }
    if let Some(g) = group.take() {
        flush(g, &mut items);
    }
    items.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansions_over_the_budget_are_refused_before_building_names() {
        let e = expand("node[0-99999999999]").unwrap_err().to_string();
        assert!(e.contains("limit"), "{e}");
        assert!(expand("n[0-18446744073709551615]").is_err());
        // Zero padding as wide as the input: a million names of 10 kB each.
        let wide = format!("n[{}0-999999]", "0".repeat(10_000));
        let e = expand(&wide).unwrap_err().to_string();
        assert!(e.contains("bytes of names, the limit"), "{e}");
        // Many single-number groups: each name is built once.
        let groups = format!("n[0-9999]{}", "[0]".repeat(1000));
        let names = expand(&groups).unwrap();
        assert_eq!(names.len(), 10_000);
        assert_eq!(names[1], format!("n1{}", "0".repeat(1000)));
        // Ranges of one group add up: each alone is under the limit.
        let many = format!("n[{}]", vec!["0-999999"; 50].join(","));
        let e = expand(&many).unwrap_err().to_string();
        assert!(e.contains("more than 1048576 numbers"), "{e}");
        // A long literal times many numbers: gigabytes of names from a short text.
        let long = format!("{}[0-999999]", "a".repeat(10_000));
        let e = expand(&long).unwrap_err().to_string();
        assert!(e.contains("bytes of names, the limit"), "{e}");
        // Items add up too.
        let items = ["n[0-999999]"; 3].join(",");
        assert!(expand(&items).is_err());
        assert_eq!(expand("n[0-1023]").unwrap().len(), 1024);
    }
    use proptest::prelude::*;

    #[test]
    fn counts_agree_with_expansions_without_building_names() {
        for expr in ["node[01-32]", "a1,b[3,5-6]", "rack[1-2]-n[01-16]", "x"] {
            assert_eq!(
                count(expr).unwrap(),
                expand(expr).unwrap().len() as u64,
                "{expr}"
            );
        }
        // A billion names are counted (and refused) without a byte of them being built.
        let e = count("n[0-999][0-999][0-999]").unwrap_err().to_string();
        assert!(e.contains("more than 1048576 names"), "{e}");
        assert!(count("n[1-").is_err());
        assert!(count("a,,b").is_err());
    }

    #[test]
    fn expands_padded_ranges() {
        let v = expand("node[001-064]").unwrap();
        assert_eq!(v.len(), 64);
        assert_eq!(v[0], "node001");
        assert_eq!(v[63], "node064");
    }

    #[test]
    fn leftmost_group_varies_slowest() {
        let v = expand("rack[1-2]-n[01-16]").unwrap();
        assert_eq!(v.len(), 32);
        assert_eq!(v[0], "rack1-n01");
        assert_eq!(v[15], "rack1-n16");
        assert_eq!(v[16], "rack2-n01");
    }

    #[test]
    fn lists_and_plain_names_mix() {
        let v = expand("a1,b[3,5-6],c").unwrap();
        assert_eq!(v, vec!["a1", "b3", "b5", "b6", "c"]);
        assert_eq!(expand("n[8-10]").unwrap(), vec!["n8", "n9", "n10"]);
    }

    #[test]
    fn bad_expressions_are_refused() {
        for e in [
            "", "n[1-", "n1-3]", "n[3-1]", "n[a-b]", "a,,b", "n[[1]]", "n[]", "a b",
        ] {
            assert!(expand(e).is_err(), "{e:?} must be refused");
        }
    }

    #[test]
    fn compresses_in_order() {
        let names = expand("node[01-32]").unwrap();
        assert_eq!(compress(&names), "node[01-32]");
        assert_eq!(compress(&["n1", "n2", "n3", "n5"]), "n[1-3,5]");
        assert_eq!(compress(&["n3", "n1"]), "n3,n1");
        assert_eq!(compress(&["login"]), "login");
        assert_eq!(compress(&["n8", "n9", "n10"]), "n[8-10]");
    }

    proptest! {
        #[test]
        fn compress_then_expand_gives_the_same_list(
            names in proptest::collection::vec("(n|rack[0-9]-n|x)(0|00|)[0-9]{1,3}", 1..40)
        ) {
            let expr = compress(&names);
            prop_assert_eq!(expand(&expr).unwrap(), names);
        }
    }
}
