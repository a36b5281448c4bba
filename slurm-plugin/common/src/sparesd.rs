//! The client side of `sparesd`'s wire protocol v1: one JSON object per line over a Unix
//! socket, one JSON line back.
//!
//! - register: `{"version":1,"kind":"register","job_id":N,"uid":U,"map":{...}}`
//! - release:  `{"version":1,"kind":"release","job_id":N}`
//! - reply:    `{"version":1,"ok":true,...}` or
//!   `{"version":1,"ok":false,"error":{"code":"...","message":"..."}}`

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use topology::MapDocument;

/// How long a plugin waits for the daemon: a job must not stall on it.
pub const TIMEOUT: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum SparesdError {
    /// No daemon answers (no socket, refused, timed out).
    #[error("sparesd not reachable at {path}: {why}")]
    Unreachable { path: String, why: String },
    /// The daemon answered something that is not a v1 reply.
    #[error("sparesd at {path} sent a reply this plugin cannot read: {why}")]
    Protocol { path: String, why: String },
    /// The daemon refused the request.
    #[error("sparesd refused: {code}: {message}")]
    Refused { code: String, message: String },
}

/// Sends one request line and reads one reply line.
pub fn request(socket: &Path, req: &Value) -> Result<Value, SparesdError> {
    let path = socket.display().to_string();
    let unreachable = |e: std::io::Error| SparesdError::Unreachable {
        path: path.clone(),
        why: e.to_string(),
    };
    let stream = UnixStream::connect(socket).map_err(unreachable)?;
    stream
        .set_read_timeout(Some(TIMEOUT))
        .map_err(unreachable)?;
    stream
        .set_write_timeout(Some(TIMEOUT))
        .map_err(unreachable)?;
    let mut line = req.to_string();
    line.push('\n');
    (&stream).write_all(line.as_bytes()).map_err(unreachable)?;
    let mut reply = String::new();
    BufReader::new(&stream)
        .read_line(&mut reply)
        .map_err(unreachable)?;
    let protocol = |why: String| SparesdError::Protocol {
        path: path.clone(),
        why,
    };
    let v: Value = serde_json::from_str(reply.trim()).map_err(|e| protocol(e.to_string()))?;
    match v.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(v),
        Some(false) => {
            let err = v.get("error");
            let field = |k: &str| {
                err.and_then(|e| e.get(k))
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_string()
            };
            Err(SparesdError::Refused {
                code: field("code"),
                message: field("message"),
            })
        }
        None => Err(protocol(format!("no \"ok\" in {}", reply.trim()))),
    }
}

/// The register request of a job; `at_start`: the substitutions of its nodes dead at start
/// (sent only when there are some, so a daemon of an older release reads the rest).
pub fn register_request(job_id: u32, uid: u32, map: &MapDocument, at_start: &[Value]) -> Value {
    let mut v = json!({"version": 1, "kind": "register", "job_id": job_id, "uid": uid, "map": map});
    if !at_start.is_empty() {
        v["at_start"] = json!(at_start);
    }
    v
}

/// The release request of a job.
pub fn release_request(job_id: u32) -> Value {
    json!({"version": 1, "kind": "release", "job_id": job_id})
}

/// Registers a job with its map.
pub fn register(
    socket: &Path,
    job_id: u32,
    uid: u32,
    map: &MapDocument,
    at_start: &[Value],
) -> Result<(), SparesdError> {
    request(socket, &register_request(job_id, uid, map, at_start)).map(drop)
}

/// Tells the daemon the job ended.
pub fn release(socket: &Path, job_id: u32) -> Result<(), SparesdError> {
    request(socket, &release_request(job_id)).map(drop)
}

/// Pauses between the epilog's release attempts: about 8 s in all, so a daemon restart
/// during a job's end does not leave the job registered, and a dead daemon does not hold
/// the epilog long.
pub const RELEASE_BACKOFF: [Duration; 5] = [
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// Releases a job, trying again after each pause of `backoff` while the daemon is not
/// reachable or answers garbage (a refusal is final). `pause` sleeps (tests pass their
/// own). The number of attempts made comes with the outcome.
pub fn release_with_retry(
    socket: &Path,
    job_id: u32,
    backoff: &[Duration],
    mut pause: impl FnMut(Duration),
) -> (u32, Result<(), SparesdError>) {
    let mut attempts = 0;
    let mut waits = backoff.iter();
    loop {
        attempts += 1;
        match release(socket, job_id) {
            Err(e @ (SparesdError::Unreachable { .. } | SparesdError::Protocol { .. })) => {
                match waits.next() {
                    Some(&d) => {
                        log::debug!(
                            "job {job_id}: release attempt {attempts}: {e}; again in {d:?}"
                        );
                        pause(d);
                    }
                    None => return (attempts, Err(e)),
                }
            }
            done => return (attempts, done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A one-shot daemon: answers `reply` to one line and returns what it read.
    fn daemon(
        name: &str,
        reply: &'static str,
    ) -> (std::path::PathBuf, std::thread::JoinHandle<String>) {
        let path =
            std::env::temp_dir().join(format!("sparesd-test-{}-{name}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let bound = path.clone();
        let h = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            // Connected: the socket file is no longer needed.
            std::fs::remove_file(&bound).unwrap();
            let mut line = String::new();
            BufReader::new(&s).read_line(&mut line).unwrap();
            if !reply.is_empty() {
                (&s).write_all(reply.as_bytes()).unwrap();
            }
            line
        });
        (path, h)
    }

    #[test]
    fn release_speaks_v1() {
        let (path, h) = daemon("ok", "{\"version\":1,\"ok\":true}\n");
        release(&path, 42).unwrap();
        let sent: Value = serde_json::from_str(&h.join().unwrap()).unwrap();
        assert_eq!(sent, json!({"version":1,"kind":"release","job_id":42}));
    }

    #[test]
    fn refusals_and_garbage_are_errors() {
        let (path, h) = daemon(
            "no",
            "{\"version\":1,\"ok\":false,\"error\":{\"code\":\"unknown_job\",\"message\":\"no job 7\"}}\n",
        );
        let e = release(&path, 7).unwrap_err();
        h.join().unwrap();
        assert_eq!(e.to_string(), "sparesd refused: unknown_job: no job 7");
        let (path, h) = daemon("garbage", "hello\n");
        assert!(matches!(
            release(&path, 7),
            Err(SparesdError::Protocol { .. })
        ));
        h.join().unwrap();
    }

    #[test]
    fn release_is_retried_until_the_daemon_is_back() {
        let path =
            std::env::temp_dir().join(format!("sparesd-test-{}-retry.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut daemon = None;
        let mut pauses = Vec::new();
        // The daemon comes back during the second pause.
        let (attempts, outcome) = release_with_retry(&path, 9, &RELEASE_BACKOFF, |d| {
            pauses.push(d);
            if pauses.len() == 2 {
                let listener = UnixListener::bind(&path).unwrap();
                daemon = Some(std::thread::spawn(move || {
                    let (s, _) = listener.accept().unwrap();
                    let mut line = String::new();
                    BufReader::new(&s).read_line(&mut line).unwrap();
                    (&s).write_all(b"{\"version\":1,\"ok\":true}\n").unwrap();
                    line
                }));
            }
        });
        outcome.unwrap();
        assert_eq!(attempts, 3);
        assert_eq!(pauses, RELEASE_BACKOFF[..2]);
        let sent: Value = serde_json::from_str(&daemon.unwrap().join().unwrap()).unwrap();
        assert_eq!(sent, json!({"version":1,"kind":"release","job_id":9}));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn release_gives_up_after_the_backoff_and_on_a_refusal() {
        let mut pauses = 0;
        let (attempts, outcome) = release_with_retry(
            Path::new("/nonexistent/sparesd.sock"),
            1,
            &RELEASE_BACKOFF,
            |_| pauses += 1,
        );
        assert!(matches!(outcome, Err(SparesdError::Unreachable { .. })));
        assert_eq!((attempts, pauses), (6, 5));
        let (path, h) = daemon(
            "refuse",
            "{\"version\":1,\"ok\":false,\"error\":{\"code\":\"unknown_job\",\"message\":\"no job 7\"}}\n",
        );
        let (attempts, outcome) =
            release_with_retry(&path, 7, &RELEASE_BACKOFF, |_| panic!("no retry"));
        h.join().unwrap();
        assert!(matches!(outcome, Err(SparesdError::Refused { .. })));
        assert_eq!(attempts, 1);
    }

    #[test]
    fn a_missing_daemon_is_unreachable() {
        let e = release(Path::new("/nonexistent/sparesd.sock"), 1).unwrap_err();
        assert!(e
            .to_string()
            .starts_with("sparesd not reachable at /nonexistent/sparesd.sock: "));
    }

    #[test]
    fn a_silent_daemon_times_out() {
        let (path, h) = daemon("silent", "");
        let start = std::time::Instant::now();
        // The daemon closes without a reply: an empty line is no reply.
        let e = release(&path, 1).unwrap_err();
        h.join().unwrap();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(matches!(e, SparesdError::Protocol { .. }), "{e}");
    }
}
