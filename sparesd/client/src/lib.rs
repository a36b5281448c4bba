//! Client of sparesd's wire protocol v1 (`docs/protocol.md`): one JSON object per line over a
//! Unix socket, one reply line per request.
//!
//! ```no_run
//! let mut c = spares_client::Client::connect_default()?;
//! let reply = c.fail(4242, "node06")?;
//! println!("{} moves", reply["moves"].as_array().map_or(0, |m| m.len()));
//! # Ok::<(), spares_client::Error>(())
//! ```

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use topology::MapDocument;

/// The protocol version this client speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// The daemon's default socket.
pub const DEFAULT_SOCKET: &str = "/run/sparesd/sparesd.sock";
/// Environment variable naming another socket.
pub const SOCKET_ENV: &str = "SPARES_SOCKET";
/// Default time for a whole request: sending it and receiving the whole reply.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Default time to connect over TCP.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default largest reply line. A `show` of a 48x48x48 job with host names is about 3 MB.
pub const DEFAULT_MAX_REPLY: usize = 64 << 20;

/// What a request can run into.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The daemon's socket cannot be reached.
    #[error("cannot connect to sparesd at {path}: {source} (is sparesd running? set {SOCKET_ENV} or --socket for another socket)")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The connection broke.
    #[error("sparesd connection: {0}")]
    Io(#[from] io::Error),
    /// No MUNGE credential could be made (munged not running?).
    #[error("cannot make a MUNGE credential: {0}")]
    Munge(String),
    /// The daemon closed the connection before replying.
    #[error("sparesd closed the connection without a reply")]
    Closed,
    /// No whole reply within the client's timeout (the connection is then unusable).
    #[error("sparesd did not answer within {0:?} (the connection is closed; connect again)")]
    Timeout(Duration),
    /// The reply is longer than the client's limit (the connection is then unusable).
    #[error("sparesd's reply is longer than {limit} bytes (the client's limit; the connection is closed)")]
    ReplyTooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// A reply that is not protocol v1.
    #[error("sparesd sent a malformed reply: {0}")]
    BadReply(String),
    /// The daemon refused the request.
    #[error("sparesd: {code}: {message}")]
    Daemon {
        /// The error code (`unknown_job`, `forbidden`, ...).
        code: String,
        /// The daemon's message.
        message: String,
    },
}

impl Error {
    /// The daemon's error code, when the daemon refused the request.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Daemon { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// The socket named by `SPARES_SOCKET`, else the default.
pub fn default_socket() -> PathBuf {
    std::env::var_os(SOCKET_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// The daemon's Unix socket, or its MUNGE-authenticated TCP port.
enum Conn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Conn {
    fn try_clone(&self) -> io::Result<Conn> {
        Ok(match self {
            Conn::Unix(s) => Conn::Unix(s.try_clone()?),
            Conn::Tcp(s) => Conn::Tcp(s.try_clone()?),
        })
    }

    fn set_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        // A zero timeout means "none" to the system: keep at least a millisecond.
        let t = t.map(|t| t.max(Duration::from_millis(1)));
        match self {
            Conn::Unix(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
            Conn::Tcp(s) => {
                s.set_read_timeout(t)?;
                s.set_write_timeout(t)
            }
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.read(buf),
            Conn::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Unix(s) => s.write(buf),
            Conn::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Unix(s) => s.flush(),
            Conn::Tcp(s) => s.flush(),
        }
    }
}

/// A connection to sparesd; requests on it are answered in order. Each request has a
/// deadline (default [`DEFAULT_TIMEOUT`]) and each reply a length limit (default
/// [`DEFAULT_MAX_REPLY`]); after a timeout or an over-long reply the connection is unusable.
pub struct Client {
    reader: BufReader<Conn>,
    writer: Conn,
    line: String,
    timeout: Option<Duration>,
    max_reply: usize,
    /// Set after an error that leaves a reply half read.
    broken: bool,
}

impl Client {
    /// Connects to the daemon's socket, waiting at most [`DEFAULT_CONNECT_TIMEOUT`].
    pub fn connect(path: &Path) -> Result<Client, Error> {
        Client::connect_timeout(path, DEFAULT_CONNECT_TIMEOUT)
    }

    /// Connects to the daemon's socket, waiting at most `timeout` while its backlog is full (a
    /// daemon that is stopped or hung accepts nothing; std's connect would wait forever).
    pub fn connect_timeout(path: &Path, timeout: Duration) -> Result<Client, Error> {
        use socket2::{Domain, SockAddr, Socket, Type};
        let err = |source| Error::Connect {
            path: path.to_path_buf(),
            source,
        };
        let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(err)?;
        let addr = SockAddr::unix(path).map_err(err)?;
        sock.set_nonblocking(true).map_err(err)?;
        let deadline = Instant::now() + timeout;
        loop {
            match sock.connect(&addr) {
                Ok(()) => break,
                // A Unix socket's full backlog: the connection is not queued; try again.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout(timeout));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(err(e)),
            }
        }
        sock.set_nonblocking(false).map_err(err)?;
        Client::over(Conn::Unix(UnixStream::from(sock)))
    }

    fn over(conn: Conn) -> Result<Client, Error> {
        let writer = conn.try_clone()?;
        Ok(Client {
            reader: BufReader::with_capacity(64 * 1024, conn),
            writer,
            line: String::new(),
            timeout: Some(DEFAULT_TIMEOUT),
            max_reply: DEFAULT_MAX_REPLY,
            broken: false,
        })
    }

    /// Connects to the daemon's TCP listener (`host:port`, for runtimes on other nodes) and
    /// authenticates with a MUNGE credential from the local munged (`munge_socket`, or
    /// libmunge's default). The connection then acts for this process's uid.
    pub fn connect_tcp(addr: &str, munge_socket: Option<&Path>) -> Result<Client, Error> {
        let connect_err = |source| Error::Connect {
            path: PathBuf::from(addr),
            source,
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing");
        let mut stream = None;
        for a in addr.to_socket_addrs().map_err(connect_err)? {
            match TcpStream::connect_timeout(&a, DEFAULT_CONNECT_TIMEOUT) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = e,
            }
        }
        let s = stream.ok_or_else(|| connect_err(last))?;
        s.set_nodelay(true)?;
        let mut c = Client::over(Conn::Tcp(s))?;
        let cred = munge_sys::cred::encode(b"sparesd", munge_socket)
            .map_err(|e| Error::Munge(e.to_string()))?;
        c.call(&json!({"version": PROTOCOL_VERSION, "kind": "auth", "credential": cred}))?;
        Ok(c)
    }

    /// Connects to [`default_socket`].
    pub fn connect_default() -> Result<Client, Error> {
        Client::connect(&default_socket())
    }

    /// Sets the time a whole request may take, sending it and receiving the whole reply
    /// ([`DEFAULT_TIMEOUT`] by default; `None`: wait forever).
    pub fn set_timeout(&mut self, t: Option<Duration>) -> Result<(), Error> {
        self.timeout = t;
        Ok(())
    }

    /// Sets the largest reply line accepted ([`DEFAULT_MAX_REPLY`] by default).
    pub fn set_max_reply(&mut self, bytes: usize) {
        self.max_reply = bytes;
    }

    /// Sends one request line (a newline is added) and returns the reply line, unparsed.
    pub fn call_raw(&mut self, line: &str) -> Result<&str, Error> {
        if self.broken {
            return Err(Error::Io(io::Error::new(
                io::ErrorKind::NotConnected,
                "an earlier request on this connection failed halfway; connect again",
            )));
        }
        let r = self.exchange(line);
        if r.is_err() {
            self.broken = true;
        }
        r?;
        Ok(self.line.trim_end_matches('\n'))
    }

    fn remaining(&self, deadline: Option<Instant>) -> Result<Option<Duration>, Error> {
        match (deadline, self.timeout) {
            (Some(d), Some(t)) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::Timeout(t));
                }
                Ok(Some(left))
            }
            _ => Ok(None),
        }
    }

    fn exchange(&mut self, line: &str) -> Result<(), Error> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let timed_out = |e: io::Error, t: Option<Duration>| match (e.kind(), t) {
            (io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut, Some(t)) => Error::Timeout(t),
            _ => Error::Io(e),
        };
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.writer.set_timeout(self.remaining(deadline)?)?;
        self.writer
            .write_all(&buf)
            .map_err(|e| timed_out(e, self.timeout))?;
        // Read up to the newline, never more than the limit, each wait bounded by what is
        // left of the deadline (a reply trickled byte by byte still ends in time).
        let mut reply: Vec<u8> = Vec::new();
        loop {
            self.writer.set_timeout(self.remaining(deadline)?)?;
            let avail = match self.reader.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(timed_out(e, self.timeout)),
            };
            if avail.is_empty() {
                return Err(if reply.is_empty() {
                    Error::Closed
                } else {
                    Error::BadReply("the reply line has no end (the connection closed)".into())
                });
            }
            let (take, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (avail.len(), false),
            };
            if reply.len() + take > self.max_reply.saturating_add(1) {
                return Err(Error::ReplyTooLarge {
                    limit: self.max_reply,
                });
            }
            reply.extend_from_slice(&avail[..take]);
            self.reader.consume(take);
            if done {
                break;
            }
        }
        self.line = String::from_utf8(reply)
            .map_err(|_| Error::BadReply("the reply is not UTF-8".into()))?;
        Ok(())
    }

    /// Sends a request object and returns the reply object; an `ok:false` reply is
    /// [`Error::Daemon`].
    pub fn call(&mut self, request: &Value) -> Result<Value, Error> {
        let line = request.to_string();
        let reply = self.call_raw(&line)?;
        parse_reply(reply)
    }

    /// Registers a job (root or the Slurm user only).
    pub fn register(&mut self, job_id: u32, uid: u32, map: &MapDocument) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "register", "job_id": job_id, "uid": uid, "map": map}))
    }

    /// A job's current map, failed nodes and history.
    pub fn show(&mut self, job_id: u32) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "show", "job_id": job_id}))
    }

    /// Reports a failed node (host name or coordinates) of a job: the substitution and new map.
    pub fn fail(&mut self, job_id: u32, node: &str) -> Result<Value, Error> {
        self.call(
            &json!({"version": PROTOCOL_VERSION, "kind": "fail", "job_id": job_id, "node": node}),
        )
    }

    /// Re-maps a job's ranks onto its alive nodes for fewer collisions, moving at most
    /// `max_moves` ranks (`None`: the daemon's cap): the record and the new map.
    pub fn remap(&mut self, job_id: u32, max_moves: Option<u32>) -> Result<Value, Error> {
        let mut request = json!({"version": PROTOCOL_VERSION, "kind": "remap", "job_id": job_id});
        if let Some(k) = max_moves {
            request["max_moves"] = k.into();
        }
        self.call(&request)
    }

    /// Reports nodes down (a Slurm hostlist) for every job holding them.
    pub fn node_down(&mut self, nodes: &str) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "node_down", "nodes": nodes}))
    }

    /// The registered jobs the caller may see.
    pub fn list(&mut self) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "list"}))
    }

    /// The released jobs whose histories sparesd keeps, released at or after `since` (Unix
    /// seconds; 0: all), newest first.
    pub fn history(&mut self, since: u64) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "history", "since": since}))
    }

    /// Forgets a job (root or the Slurm user only).
    pub fn release(&mut self, job_id: u32) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "release", "job_id": job_id}))
    }

    /// The daemon's status and version.
    pub fn health(&mut self) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "health"}))
    }
}

/// How [`node_down_with_retry`] retries.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Wait after the first failed attempt; doubled after each further one.
    pub first_wait: Duration,
    /// Longest wait between two attempts.
    pub max_wait: Duration,
    /// No attempt starts after this long since the first one.
    pub give_up_after: Duration,
}

impl Default for Retry {
    fn default() -> Retry {
        Retry {
            first_wait: Duration::from_millis(100),
            max_wait: Duration::from_secs(10),
            give_up_after: Duration::from_secs(600),
        }
    }
}

/// Whether another attempt may succeed: the daemon unreachable, the connection broken, the
/// daemon busy, stopping or failing inside. A refusal of the request itself is final.
pub fn is_transient(e: &Error) -> bool {
    match e {
        Error::Connect { .. } | Error::Io(_) | Error::Closed | Error::Timeout(_) => true,
        Error::Daemon { code, .. } => matches!(code.as_str(), "busy" | "internal" | "timeout"),
        Error::Munge(_) | Error::BadReply(_) | Error::ReplyTooLarge { .. } => false,
    }
}

/// Reports nodes down on a new connection to `socket`, retrying transient errors with
/// exponential backoff until `retry.give_up_after`: a failure reported while sparesd is down,
/// restarting or flooded is delivered once it answers. `on_retry` hears each failed attempt
/// and the wait before the next. Node-down reports are idempotent (a node already failed gets
/// the same answer), so a repeat after a lost reply changes nothing.
pub fn node_down_with_retry(
    socket: &Path,
    nodes: &str,
    retry: Retry,
    mut on_retry: impl FnMut(u32, &Error, Duration),
) -> Result<Value, (u32, Error)> {
    let start = Instant::now();
    let mut wait = retry.first_wait;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let e = match Client::connect(socket).and_then(|mut c| c.node_down(nodes)) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if !is_transient(&e) || start.elapsed() + wait > retry.give_up_after {
            return Err((attempt, e));
        }
        on_retry(attempt, &e, wait);
        std::thread::sleep(wait);
        wait = (wait * 2).min(retry.max_wait);
    }
}

/// Parses a reply line: the reply object, or [`Error::Daemon`] for `ok:false`.
pub fn parse_reply(line: &str) -> Result<Value, Error> {
    let v: Value = serde_json::from_str(line).map_err(|e| Error::BadReply(e.to_string()))?;
    match v.get("ok") {
        Some(Value::Bool(true)) => Ok(v),
        Some(Value::Bool(false)) => Err(Error::Daemon {
            code: v["error"]["code"].as_str().unwrap_or("unknown").to_string(),
            message: v["error"]["message"].as_str().unwrap_or("").to_string(),
        }),
        _ => Err(Error::BadReply(format!("no `ok` field in {line}"))),
    }
}

/// One re-map record of sparesd (a `remap` reply, `show`'s `remaps`) in words, with its
/// moves, as `sparesctl` and `spares-run` print it:
///
/// ```text
/// re-map    1 after failure 3: 12 rank(s) move (at most 50); collisions 4 -> 2 (lower bound 1)
///       rank  4  node05 -> node06
/// ```
pub fn remap_text(r: &Value) -> String {
    use topology::report::{moves_of, moves_text};
    let moves = moves_of(r);
    format!(
        "re-map  {:>3} after failure {}: {} rank(s) move (at most {}); collisions {} -> {} (lower bound {})\n{}",
        r["remap"].as_u64().unwrap_or(0),
        r["after_step"].as_u64().unwrap_or(0),
        r["moved"].as_u64().unwrap_or(moves.len() as u64),
        r["max_moves"].as_u64().unwrap_or(0),
        r["collisions_before"].as_u64().unwrap_or(0),
        r["collisions_after"].as_u64().unwrap_or(0),
        r["lower_bound"].as_u64().unwrap_or(0),
        moves_text(&moves)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remap_record_reads_as_its_line_and_moves() {
        let r = json!({"remap": 2, "after_step": 3, "moved": 1, "max_moves": 50,
            "collisions_before": 4, "collisions_after": 2, "lower_bound": 1,
            "moves": [{"rank": 4, "from": "node05", "to": "node06"}]});
        let text = remap_text(&r);
        assert!(
            text.starts_with("re-map    2 after failure 3: 1 rank(s) move (at most 50); collisions 4 -> 2 (lower bound 1)\n"),
            "{text}"
        );
        assert!(text.contains("node05 -> node06"), "{text}");
    }

    #[test]
    fn replies_parse() {
        assert_eq!(
            parse_reply(r#"{"version":1,"ok":true,"a":1}"#).unwrap()["a"],
            1
        );
        let e = parse_reply(
            r#"{"version":1,"ok":false,"error":{"code":"unknown_job","message":"no"}}"#,
        )
        .unwrap_err();
        assert_eq!(e.code(), Some("unknown_job"));
        assert!(parse_reply("nope").is_err());
        assert!(parse_reply("{}").is_err());
    }
}
