//! One way to print a substitution, for every tool that shows one: `spares substitute`,
//! `sparesctl fail/show/node-down` and `spares-run`. The words are those of the substitution
//! record (`docs/protocol.md`): the outcome, the degree used, the slide, the moves.
//!
//! ```text
//! failure   1: node06         3D sliding along dim 0 +, slab over dims 1,2: 12 rank(s) move; collisions 1 -> 2
//!       rank  4  node05 -> node06
//!       rank 13  node21 -> node22
//! ```

use serde_json::Value;

/// One rank's move, with node names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveText<'a> {
    /// The rank that moves.
    pub rank: u64,
    /// The node it leaves.
    pub from: &'a str,
    /// The node it goes to.
    pub to: &'a str,
}

/// One failure's answer, as printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureText<'a> {
    /// 1 for the first failure, ... (0: already dead in the registered map).
    pub step: u64,
    /// The failed node.
    pub node: &'a str,
    /// `substituted`, `free_node_died`, `no_spare_left` or `already_failed`.
    pub outcome: &'a str,
    /// The degree used when substituted (`3D`, `0D`, ...).
    pub method_used: Option<&'a str>,
    /// The slide when k >= 1 (`along dim 0 +, slab over dims 1,2`).
    pub slide: Option<&'a str>,
    /// How many ranks moved (`moves` may be left empty while this is not).
    pub moved: usize,
    /// The moves, in pipeline order.
    pub moves: Vec<MoveText<'a>>,
    /// Collisions of the map before this failure, when known.
    pub collisions_before: Option<u64>,
    /// Collisions of the map after it.
    pub collisions_after: u64,
}

/// The `moves` of a sparesd record (a substitution or a re-map); missing fields read as `?`
/// or 0, so a reply from another version still prints.
pub fn moves_of(r: &Value) -> Vec<MoveText<'_>> {
    r["moves"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|m| MoveText {
                    rank: m["rank"].as_u64().unwrap_or(0),
                    from: m["from"].as_str().unwrap_or("?"),
                    to: m["to"].as_str().unwrap_or("?"),
                })
                .collect()
        })
        .unwrap_or_default()
}

impl<'a> FailureText<'a> {
    /// Reads a substitution record as sparesd answers it (`fail`, `show`'s `history`,
    /// `node_down`'s `results`) or `spares substitute --json` writes a step. Missing fields
    /// read as `?` or 0: a reply from another version still prints.
    pub fn from_record(r: &'a Value) -> FailureText<'a> {
        let moves = moves_of(r);
        FailureText {
            step: r["step"].as_u64().unwrap_or(0),
            node: r["node"].as_str().unwrap_or("?"),
            outcome: r["outcome"].as_str().unwrap_or("?"),
            method_used: r["method_used"].as_str(),
            slide: r["slide"].as_str(),
            moved: r["moved"]
                .as_u64()
                .map_or(moves.len(), |n| n as usize)
                .max(moves.len()),
            moves,
            collisions_before: r["collisions_before"].as_u64(),
            collisions_after: r["collisions_after"].as_u64().unwrap_or(0),
        }
    }

    /// What happened, in words: `3D sliding along dim 0 +: 12 rank(s) move`.
    pub fn what(&self) -> String {
        match self.outcome {
            "substituted" => format!(
                "{} sliding{}: {} rank(s) move",
                self.method_used.unwrap_or("?"),
                self.slide.map(|s| format!(" {s}")).unwrap_or_default(),
                self.moved
            ),
            "free_node_died" => "a free node: no rank moves".into(),
            "no_spare_left" => "no spare left: the job is lost".into(),
            "already_failed" => "already failed in the registered map".into(),
            other => other.to_string(),
        }
    }

    /// The failure's line, without a newline: step, node, what happened, the collisions, and
    /// `extra` (further figures or who reported it) after a `, `.
    pub fn line(&self, extra: &str) -> String {
        let collisions = match self.collisions_before {
            Some(b) => format!("collisions {b} -> {}", self.collisions_after),
            None => format!("collisions {}", self.collisions_after),
        };
        let extra = if extra.is_empty() {
            String::new()
        } else {
            format!(", {extra}")
        };
        format!(
            "failure {:>3}: {:<14} {}; {collisions}{extra}",
            self.step,
            self.node,
            self.what()
        )
    }

    /// The line and then one line per move, each ending in a newline.
    pub fn text(&self, extra: &str) -> String {
        let mut s = self.line(extra);
        s.push('\n');
        s += &moves_text(&self.moves);
        s
    }
}

/// The moves, one line each, in aligned columns: `      rank   4  node05 -> node06`.
pub fn moves_text(moves: &[MoveText<'_>]) -> String {
    let rank_w = moves
        .iter()
        .map(|m| m.rank.to_string().len())
        .max()
        .unwrap_or(0);
    let from_w = moves.iter().map(|m| m.from.len()).max().unwrap_or(0);
    let mut s = String::new();
    for m in moves {
        s += &format!(
            "      rank {:>rank_w$}  {:<from_w$} -> {}\n",
            m.rank, m.from, m.to
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_substitution_prints_in_aligned_columns() {
        let r: Value = serde_json::json!({
            "step": 1, "node": "node06", "outcome": "substituted", "method_used": "3D",
            "slide": "along dim 0 +, slab over dims 1,2",
            "moves": [
                {"rank": 4, "from": "node5", "to": "node06"},
                {"rank": 13, "from": "node021", "to": "node022"},
            ],
            "collisions_before": 1, "collisions_after": 2,
        });
        let t = FailureText::from_record(&r);
        assert_eq!(
            t.text(""),
            "failure   1: node06         3D sliding along dim 0 +, slab over dims 1,2: 2 rank(s) move; collisions 1 -> 2\n\
             \x20     rank  4  node5   -> node06\n\
             \x20     rank 13  node021 -> node022\n"
        );
    }

    #[test]
    fn the_other_outcomes_and_extra_figures() {
        let free = serde_json::json!({"step": 3, "node": "1,0,0", "outcome": "free_node_died",
            "moves": [], "collisions_before": 2, "collisions_after": 2});
        assert_eq!(
            FailureText::from_record(&free).line("reported by the trigger"),
            "failure   3: 1,0,0          a free node: no rank moves; collisions 2 -> 2, reported by the trigger"
        );
        let lost = serde_json::json!({"step": 12, "node": "n7", "outcome": "no_spare_left",
            "collisions_after": 5});
        assert_eq!(
            FailureText::from_record(&lost).text("hops 9"),
            "failure  12: n7             no spare left: the job is lost; collisions 5, hops 9\n"
        );
        // `spares substitute --no-moves` keeps the count without the list.
        let counted = serde_json::json!({"step": 1, "node": "n1", "outcome": "substituted",
            "method_used": "0D", "moved": 7, "collisions_after": 0});
        assert!(FailureText::from_record(&counted)
            .line("")
            .contains("0D sliding: 7 rank(s) move"));
    }
}
