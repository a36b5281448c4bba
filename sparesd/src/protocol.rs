//! Wire protocol v1: one JSON object per line, one reply line per request (`docs/protocol.md`).
//!
//! Parsing is strict about what it needs (version, kind, field types) and lenient about what it
//! does not (unknown fields are ignored), so that a newer client can add optional fields.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use topology::MapDocument;

use crate::registry::Substitution;

/// The protocol version this daemon speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// The default largest request line, newline excluded. A 48x48x48 map with host names is about
/// 3 MB of JSON; 16 MiB leaves room and still bounds what one client can make us buffer.
pub const DEFAULT_MAX_LINE: usize = 16 << 20;

/// The error codes of a reply (`{"ok":false,"error":{"code":...}}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not UTF-8, not JSON, not an object, a missing field or a field of the wrong type.
    BadRequest,
    /// The request line is longer than the configured limit; the connection is closed.
    TooLarge,
    /// `version` is not one this daemon speaks.
    UnsupportedVersion,
    /// `kind` is not one this daemon knows.
    UnknownKind,
    /// No job with this id is registered.
    UnknownJob,
    /// The node is not in the job's box.
    UnknownNode,
    /// The peer may not do this.
    Forbidden,
    /// The request contradicts the registered state (another map for a live job).
    Conflict,
    /// The daemon has too many connections (in all, or of this user), or its input buffers
    /// are full, or it is stopping; try again later.
    Busy,
    /// The request line did not arrive whole within the daemon's deadline; the connection is
    /// closed.
    Timeout,
    /// The map document is inconsistent.
    InvalidMap,
    /// Something failed inside the daemon (disk); the state is as before the request.
    Internal,
}

impl ErrorCode {
    /// The snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::UnsupportedVersion => "unsupported_version",
            ErrorCode::UnknownKind => "unknown_kind",
            ErrorCode::UnknownJob => "unknown_job",
            ErrorCode::UnknownNode => "unknown_node",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Busy => "busy",
            ErrorCode::Timeout => "timeout",
            ErrorCode::InvalidMap => "invalid_map",
            ErrorCode::Internal => "internal",
        }
    }
}

/// A refused request: the code and a message for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", code.as_str())]
pub struct ProtoError {
    /// What kind of refusal.
    pub code: ErrorCode,
    /// What was wrong and what to change.
    pub message: String,
}

impl ProtoError {
    /// A refusal with this code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ProtoError {
        ProtoError {
            code,
            message: message.into(),
        }
    }
}

/// The kinds of request, as named on the wire.
pub const KINDS: &[&str] = &[
    "register",
    "show",
    "fail",
    "node_down",
    "list",
    "release",
    "health",
    "history",
    "remap",
];

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Registers a job with its failure-free (or current) map.
    Register {
        /// Slurm job id.
        job_id: u32,
        /// The job owner's uid.
        uid: u32,
        /// The map document (as `spares plan -o` writes it).
        map: Box<MapDocument>,
        /// The substitutions of the map's nodes that were dead before the job started (a box
        /// placed with unusable nodes), step 0 each, in the order the model failed them.
        at_start: Vec<Substitution>,
    },
    /// The job's current map and history.
    Show {
        /// Slurm job id.
        job_id: u32,
    },
    /// A node of the job failed.
    Fail {
        /// Slurm job id.
        job_id: u32,
        /// Host name, or coordinates such as `3,4,5`.
        node: String,
    },
    /// Re-map the job's ranks onto its alive nodes for fewer collisions, within a budget
    /// (each capped by the daemon's `[remap]` settings).
    Remap {
        /// Slurm job id.
        job_id: u32,
        /// Most ranks that may end on another node (absent: the daemon's `max_moves`).
        max_moves: Option<u32>,
        /// Most candidate moves the search evaluates (absent: the daemon's `iterations`).
        iterations: Option<u64>,
        /// Seed of the search (absent: 1).
        seed: Option<u64>,
    },
    /// Nodes went down (Slurm trigger): a failure for every job holding one of them.
    NodeDown {
        /// A Slurm hostlist, e.g. `node[06,11]`.
        nodes: String,
    },
    /// The registered jobs (an ordinary user sees only their own).
    List,
    /// Forgets a job (epilog).
    Release {
        /// Slurm job id.
        job_id: u32,
    },
    /// Liveness and version.
    Health,
    /// The released jobs whose histories are kept (an ordinary user sees only their own),
    /// released at or after `since` (Unix seconds).
    History {
        /// Unix seconds; 0: all kept.
        since: u64,
    },
}

impl Request {
    /// The wire name of the kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Register { .. } => "register",
            Request::Show { .. } => "show",
            Request::Fail { .. } => "fail",
            Request::Remap { .. } => "remap",
            Request::NodeDown { .. } => "node_down",
            Request::List => "list",
            Request::Release { .. } => "release",
            Request::Health => "health",
            Request::History { .. } => "history",
        }
    }

    /// The request as one JSON line (without the newline): what a client sends.
    pub fn to_line(&self) -> String {
        let v = match self {
            Request::Register {
                job_id,
                uid,
                map,
                at_start,
            } => {
                let mut v = serde_json::json!({
                    "version": PROTOCOL_VERSION, "kind": "register", "job_id": job_id, "uid": uid,
                    "map": map,
                });
                if !at_start.is_empty() {
                    v["at_start"] = serde_json::json!(at_start);
                }
                v
            }
            Request::Show { job_id } => {
                serde_json::json!({"version": PROTOCOL_VERSION, "kind": "show", "job_id": job_id})
            }
            Request::Fail { job_id, node } => serde_json::json!({
                "version": PROTOCOL_VERSION, "kind": "fail", "job_id": job_id, "node": node,
            }),
            Request::Remap {
                job_id,
                max_moves,
                iterations,
                seed,
            } => {
                let mut v = serde_json::json!({
                    "version": PROTOCOL_VERSION, "kind": "remap", "job_id": job_id,
                });
                for (key, value) in [
                    ("max_moves", max_moves.map(u64::from)),
                    ("iterations", *iterations),
                    ("seed", *seed),
                ] {
                    if let Some(value) = value {
                        v[key] = value.into();
                    }
                }
                v
            }
            Request::NodeDown { nodes } => {
                serde_json::json!({"version": PROTOCOL_VERSION, "kind": "node_down", "nodes": nodes})
            }
            Request::List => serde_json::json!({"version": PROTOCOL_VERSION, "kind": "list"}),
            Request::Release { job_id } => serde_json::json!({
                "version": PROTOCOL_VERSION, "kind": "release", "job_id": job_id,
            }),
            Request::Health => serde_json::json!({"version": PROTOCOL_VERSION, "kind": "health"}),
            Request::History { since } => {
                serde_json::json!({"version": PROTOCOL_VERSION, "kind": "history", "since": since})
            }
        };
        v.to_string()
    }
}

#[derive(Deserialize)]
struct JobReq {
    job_id: u32,
}

#[derive(Deserialize)]
struct RegisterReq {
    job_id: u32,
    uid: u32,
    map: Box<MapDocument>,
    #[serde(default)]
    at_start: Vec<Substitution>,
}

#[derive(Deserialize)]
struct FailReq {
    job_id: u32,
    node: String,
}

#[derive(Deserialize)]
struct RemapReq {
    job_id: u32,
    #[serde(default)]
    max_moves: Option<u32>,
    #[serde(default)]
    iterations: Option<u64>,
    #[serde(default)]
    seed: Option<u64>,
}

#[derive(Deserialize)]
struct HistoryReq {
    #[serde(default)]
    since: u64,
}

#[derive(Deserialize)]
struct NodeDownReq {
    nodes: String,
}

fn bad(message: impl Into<String>) -> ProtoError {
    ProtoError::new(ErrorCode::BadRequest, message)
}

/// The fields every request has. The others are skipped unread here (`RawValue` only
/// remembers where they are), so a huge unknown field costs no memory.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow, default)]
    version: Option<&'a RawValue>,
    #[serde(borrow, default)]
    kind: Option<&'a RawValue>,
}

/// Deserialises the request's fields straight from the text: no `Value` tree in between, which
/// costs about 17 times the text for a line of small numbers.
fn typed<'a, T: Deserialize<'a>>(kind: &str, text: &'a str) -> Result<T, ProtoError> {
    serde_json::from_str(text).map_err(|e| bad(format!("{kind}: {e}")))
}

/// Parses one request line (without its newline).
pub fn parse_request(line: &[u8]) -> Result<Request, ProtoError> {
    let text = std::str::from_utf8(line).map_err(|e| {
        bad(format!(
            "the request is not UTF-8 text (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    // A struct also deserialises from a JSON array: insist on an object first.
    if !text.trim_start().starts_with('{') {
        return Err(bad("a request is one JSON object per line"));
    }
    let head: Head = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let version = head
        .version
        .ok_or_else(|| bad("missing field `version` (this daemon speaks version 1)"))?;
    match serde_json::from_str::<u64>(version.get()) {
        Ok(1) => {}
        Ok(n) => {
            return Err(ProtoError::new(
                ErrorCode::UnsupportedVersion,
                format!("protocol version {n} is not supported; this daemon speaks version {PROTOCOL_VERSION}"),
            ))
        }
        Err(_) => {
            return Err(bad(format!(
                "`version` must be a whole number, not {}",
                clip(version.get())
            )))
        }
    }
    let kind = match head.kind {
        Some(k) => serde_json::from_str::<String>(k.get())
            .map_err(|_| bad(format!("`kind` must be a string, not {}", clip(k.get()))))?,
        None => return Err(bad("missing field `kind`")),
    };
    let v = text;
    Ok(match kind.as_str() {
        "register" => {
            let r: RegisterReq = typed(&kind, v)?;
            Request::Register {
                job_id: r.job_id,
                uid: r.uid,
                map: r.map,
                at_start: r.at_start,
            }
        }
        "show" => Request::Show {
            job_id: typed::<JobReq>(&kind, v)?.job_id,
        },
        "fail" => {
            let r: FailReq = typed(&kind, v)?;
            Request::Fail {
                job_id: r.job_id,
                node: r.node,
            }
        }
        "remap" => {
            let r: RemapReq = typed(&kind, v)?;
            Request::Remap {
                job_id: r.job_id,
                max_moves: r.max_moves,
                iterations: r.iterations,
                seed: r.seed,
            }
        }
        "node_down" => Request::NodeDown {
            nodes: typed::<NodeDownReq>(&kind, v)?.nodes,
        },
        "list" => Request::List,
        "release" => Request::Release {
            job_id: typed::<JobReq>(&kind, v)?.job_id,
        },
        "health" => Request::Health,
        "history" => Request::History {
            since: typed::<HistoryReq>(&kind, v)?.since,
        },
        other => {
            return Err(ProtoError::new(
                ErrorCode::UnknownKind,
                format!(
                    "unknown kind '{}'; known: {}",
                    clip(other),
                    KINDS.join(", ")
                ),
            ))
        }
    })
}

/// A value quoted in an error message, cut to a length a person reads (a request may be
/// large; its error must not be).
fn clip(s: &str) -> String {
    const MAX: usize = 64;
    if s.len() <= MAX {
        return s.to_string();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}... ({} bytes)", &s[..end], s.len())
}

/// A success reply line: `{"version":1,"ok":true,<body fields>}` (no newline).
///
/// `body` must serialise to a JSON object; its fields are spliced in without re-parsing.
pub fn ok_line<T: Serialize>(body: &T) -> String {
    let b = serde_json::to_string(body).expect("reply bodies always serialise");
    let inner = b
        .strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .expect("reply bodies are JSON objects");
    if inner.is_empty() {
        format!("{{\"version\":{PROTOCOL_VERSION},\"ok\":true}}")
    } else {
        format!("{{\"version\":{PROTOCOL_VERSION},\"ok\":true,{inner}}}")
    }
}

/// An error reply line (no newline).
pub fn error_line(e: &ProtoError) -> String {
    serde_json::json!({
        "version": PROTOCOL_VERSION,
        "ok": false,
        "error": {"code": e.code.as_str(), "message": e.message},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn code(line: &str) -> ErrorCode {
        parse_request(line.as_bytes()).unwrap_err().code
    }

    #[test]
    fn requests_parse() {
        assert_eq!(
            parse_request(br#"{"version":1,"kind":"show","job_id":7,"extra":true}"#).unwrap(),
            Request::Show { job_id: 7 }
        );
        assert_eq!(
            parse_request(br#"{"version":1,"kind":"fail","job_id":7,"node":"n1"}"#).unwrap(),
            Request::Fail {
                job_id: 7,
                node: "n1".into()
            }
        );
        assert_eq!(
            parse_request(br#"{"version":1,"kind":"health"}"#).unwrap(),
            Request::Health
        );
        let r = Request::NodeDown {
            nodes: "n[1-2]".into(),
        };
        assert_eq!(parse_request(r.to_line().as_bytes()).unwrap(), r);
        let r = Request::History {
            since: 1_700_000_000,
        };
        assert_eq!(parse_request(r.to_line().as_bytes()).unwrap(), r);
        assert_eq!(
            parse_request(br#"{"version":1,"kind":"history"}"#).unwrap(),
            Request::History { since: 0 }
        );
    }

    #[test]
    fn remap_requests_parse_and_serialise() {
        assert_eq!(
            parse_request(br#"{"version":1,"kind":"remap","job_id":7}"#).unwrap(),
            Request::Remap {
                job_id: 7,
                max_moves: None,
                iterations: None,
                seed: None
            }
        );
        let r = Request::Remap {
            job_id: 7,
            max_moves: Some(50),
            iterations: Some(1000),
            seed: Some(3),
        };
        let line = r.to_line();
        assert!(line.contains(r#""max_moves":50"#), "{line}");
        assert_eq!(parse_request(line.as_bytes()).unwrap(), r);
        let none = Request::Remap {
            job_id: 7,
            max_moves: None,
            iterations: None,
            seed: None,
        };
        assert!(!none.to_line().contains("max_moves"), "absent, not null");
        assert_eq!(parse_request(none.to_line().as_bytes()).unwrap(), none);
        // Budgets out of their types' ranges are refused before anything runs.
        for bad in [
            r#"{"version":1,"kind":"remap","job_id":7,"max_moves":-1}"#,
            r#"{"version":1,"kind":"remap","job_id":7,"max_moves":4294967296}"#,
            r#"{"version":1,"kind":"remap","job_id":7,"iterations":1e30}"#,
            r#"{"version":1,"kind":"remap","job_id":7,"seed":"1"}"#,
            r#"{"version":1,"kind":"remap"}"#,
        ] {
            assert_eq!(code(bad), ErrorCode::BadRequest, "{bad}");
        }
    }

    #[test]
    fn a_registration_carries_its_substitutions_at_start() {
        let map = crate::registry::tests::doc(true);
        let record = serde_json::json!({"step": 0, "node": "n00", "outcome": "substituted",
            "method": "hybrid", "method_used": "2D", "moves": [{"rank": 0, "from": "n00", "to": "n03"}],
            "collisions_before": 1, "collisions_after": 2, "lost": false});
        let line = serde_json::json!({"version": 1, "kind": "register", "job_id": 3, "uid": 9,
            "map": map, "at_start": [record]})
        .to_string();
        let Request::Register { at_start, .. } = parse_request(line.as_bytes()).unwrap() else {
            panic!()
        };
        assert_eq!(at_start.len(), 1);
        assert_eq!(at_start[0].node, "n00");
        assert_eq!(at_start[0].moves[0].to, "n03");
        // Written back only when there are some: an older daemon reads the rest.
        let plain = Request::Register {
            job_id: 3,
            uid: 9,
            map: Box::new(map),
            at_start: Vec::new(),
        };
        assert!(!plain.to_line().contains("at_start"));
        let Request::Register { at_start, .. } = parse_request(plain.to_line().as_bytes()).unwrap()
        else {
            panic!()
        };
        assert!(at_start.is_empty());
    }

    #[test]
    fn malformed_requests_get_their_codes() {
        assert_eq!(code("{\"version\":1,\"kind\":\"sh"), ErrorCode::BadRequest);
        assert_eq!(code("[1,2]"), ErrorCode::BadRequest);
        assert_eq!(code(r#"{"kind":"list"}"#), ErrorCode::BadRequest);
        assert_eq!(
            code(r#"{"version":"1","kind":"list"}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"version":2,"kind":"list"}"#),
            ErrorCode::UnsupportedVersion
        );
        assert_eq!(
            code(r#"{"version":1,"kind":"reboot"}"#),
            ErrorCode::UnknownKind
        );
        assert_eq!(code(r#"{"version":1,"kind":7}"#), ErrorCode::BadRequest);
        assert_eq!(
            code(r#"{"version":1,"kind":"show","job_id":-1}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"version":1,"kind":"show","job_id":"7"}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            code(r#"{"version":1,"kind":"fail","job_id":7,"node":3}"#),
            ErrorCode::BadRequest
        );
        assert_eq!(
            parse_request(b"{\"version\":1,\"kind\":\"\xff\"}")
                .unwrap_err()
                .code,
            ErrorCode::BadRequest
        );
    }

    #[test]
    fn replies_splice_the_body() {
        assert_eq!(
            ok_line(&serde_json::json!({})),
            r#"{"version":1,"ok":true}"#
        );
        assert_eq!(
            ok_line(&serde_json::json!({"a":1})),
            r#"{"version":1,"ok":true,"a":1}"#
        );
        let e = error_line(&ProtoError::new(ErrorCode::UnknownJob, "no job 3"));
        let v: Value = serde_json::from_str(&e).unwrap();
        assert_eq!(v["error"]["code"], "unknown_job");
        assert_eq!(v["ok"], false);
    }
}
