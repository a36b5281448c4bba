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
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use topology::MapDocument;

/// The protocol version this client speaks.
pub const PROTOCOL_VERSION: u32 = 1;
/// The daemon's default socket.
pub const DEFAULT_SOCKET: &str = "/run/sparesd/sparesd.sock";
/// Environment variable naming another socket.
pub const SOCKET_ENV: &str = "SPARES_SOCKET";

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

/// A connection to sparesd; requests on it are answered in order.
pub struct Client {
    reader: BufReader<Conn>,
    writer: Conn,
    line: String,
}

impl Client {
    /// Connects to the daemon's socket.
    pub fn connect(path: &Path) -> Result<Client, Error> {
        let s = UnixStream::connect(path).map_err(|source| Error::Connect {
            path: path.to_path_buf(),
            source,
        })?;
        Client::over(Conn::Unix(s))
    }

    fn over(conn: Conn) -> Result<Client, Error> {
        let writer = conn.try_clone()?;
        Ok(Client {
            reader: BufReader::with_capacity(64 * 1024, conn),
            writer,
            line: String::new(),
        })
    }

    /// Connects to the daemon's TCP listener (`host:port`, for runtimes on other nodes) and
    /// authenticates with a MUNGE credential from the local munged (`munge_socket`, or
    /// libmunge's default). The connection then acts for this process's uid.
    pub fn connect_tcp(addr: &str, munge_socket: Option<&Path>) -> Result<Client, Error> {
        let s = TcpStream::connect(addr).map_err(|source| Error::Connect {
            path: PathBuf::from(addr),
            source,
        })?;
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

    /// Sets a timeout for each reply (none by default).
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), Error> {
        Ok(self.writer.set_timeout(t)?)
    }

    /// Sends one request line (a newline is added) and returns the reply line, unparsed.
    pub fn call_raw(&mut self, line: &str) -> Result<&str, Error> {
        let mut buf = Vec::with_capacity(line.len() + 1);
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
        self.writer.write_all(&buf)?;
        self.line.clear();
        if self.reader.read_line(&mut self.line)? == 0 {
            return Err(Error::Closed);
        }
        Ok(self.line.trim_end_matches('\n'))
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

    /// Reports nodes down (a Slurm hostlist) for every job holding them.
    pub fn node_down(&mut self, nodes: &str) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "node_down", "nodes": nodes}))
    }

    /// The registered jobs the caller may see.
    pub fn list(&mut self) -> Result<Value, Error> {
        self.call(&json!({"version": PROTOCOL_VERSION, "kind": "list"}))
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

#[cfg(test)]
mod tests {
    use super::*;

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
