//! TCP between ranks: a rendezvous directory (each rank writes `rank-<r>.addr`, `host:port` of
//! its listener, atomically), one connection per pair of peers (the higher rank connects to
//! the lower one and introduces itself), length-prefixed messages, halo exchanges with
//! concurrent sends, and star collectives through rank 0.
//!
//! A broken connection (a peer died with its node) is an error: the rank exits non-zero and
//! the launcher sees the step fail.

use std::collections::HashMap;
use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use crate::Error;

/// Connections of one rank to its peers.
pub struct Comm {
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub size: u32,
    peers: HashMap<u32, TcpStream>,
}

fn addr_file(dir: &Path, rank: u32) -> std::path::PathBuf {
    dir.join(format!("rank-{rank}.addr"))
}

impl Comm {
    /// Listens on `bind:0`, publishes `advertise:port` in `dir`, and connects to every rank of
    /// `peers` (which must list this rank among theirs), within `timeout`.
    pub fn connect(
        rank: u32,
        size: u32,
        peers: &[u32],
        dir: &Path,
        bind: &str,
        advertise: &str,
        timeout: Duration,
    ) -> Result<Comm, Error> {
        let deadline = Instant::now() + timeout;
        let listener =
            TcpListener::bind((bind, 0)).map_err(Error::io(format!("listen on {bind}")))?;
        let port = listener
            .local_addr()
            .map_err(Error::io("listener address"))?
            .port();
        let file = addr_file(dir, rank);
        let tmp = dir.join(format!(".rank-{rank}.addr.tmp"));
        fs::write(&tmp, format!("{advertise}:{port}\n"))
            .and_then(|()| fs::rename(&tmp, &file))
            .map_err(Error::io(format!("publish {}", file.display())))?;

        let mut conns = HashMap::new();
        // Lower ranks are connected to (their listener's backlog takes the connection even
        // before they accept), higher ones are accepted: no cycle of waits.
        for &p in peers.iter().filter(|&&p| p < rank) {
            let addr = wait_for_addr(dir, p, deadline)?;
            let mut s = loop {
                match TcpStream::connect(&addr) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline => {
                        let _ = e;
                        thread::sleep(Duration::from_millis(20));
                    }
                    Err(e) => {
                        return Err(Error::Peer {
                            peer: p,
                            message: format!("cannot connect to {addr}: {e}"),
                        })
                    }
                }
            };
            s.write_all(&rank.to_le_bytes())
                .map_err(|e| peer_err(p, "introduce", e))?;
            conns.insert(p, s);
        }
        let higher = peers.iter().filter(|&&p| p > rank).count();
        listener
            .set_nonblocking(true)
            .map_err(Error::io("listener"))?;
        while conns.len() < peers.len() {
            match listener.accept() {
                Ok((mut s, _)) => {
                    s.set_nonblocking(false)
                        .map_err(Error::io("accepted socket"))?;
                    s.set_read_timeout(Some(Duration::from_secs(10)))
                        .map_err(Error::io("accepted socket"))?;
                    let mut b = [0u8; 4];
                    s.read_exact(&mut b)
                        .map_err(Error::io("read a peer's rank"))?;
                    let p = u32::from_le_bytes(b);
                    if !peers.contains(&p) || p < rank || conns.contains_key(&p) {
                        return Err(Error::Peer {
                            peer: p,
                            message: "unexpected connection".into(),
                        });
                    }
                    conns.insert(p, s);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if Instant::now() >= deadline {
                        return Err(Error::Timeout(format!(
                            "rank {rank}: {} of {higher} higher peers connected",
                            conns.len() + higher - peers.len()
                        )));
                    }
                    thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(Error::io("accept")(e)),
            }
        }
        for s in conns.values() {
            s.set_nodelay(true).map_err(Error::io("nodelay"))?;
            // A hung peer must not hang the step forever.
            s.set_read_timeout(Some(Duration::from_secs(120)))
                .map_err(Error::io("timeout"))?;
        }
        Ok(Comm {
            rank,
            size,
            peers: conns,
        })
    }

    fn stream(&self, peer: u32) -> Result<&TcpStream, Error> {
        self.peers.get(&peer).ok_or(Error::Peer {
            peer,
            message: "not a peer of this rank".into(),
        })
    }

    /// Sends every `(peer, bytes)` concurrently and receives one message from each peer of
    /// `recv_from`, in that order; the received messages, in that order. At most one send per
    /// peer.
    pub fn exchange(
        &self,
        sends: &[(u32, &[u8])],
        recv_from: &[u32],
    ) -> Result<Vec<Vec<u8>>, Error> {
        let streams = sends
            .iter()
            .map(|(p, d)| Ok((*p, self.stream(*p)?, *d)))
            .collect::<Result<Vec<_>, Error>>()?;
        thread::scope(|s| {
            let senders: Vec<_> = streams
                .into_iter()
                .map(|(p, st, d)| s.spawn(move || send_on(p, st, d)))
                .collect();
            let mut got = Vec::with_capacity(recv_from.len());
            let mut first_err = None;
            for &p in recv_from {
                match self.stream(p).and_then(|st| recv_on(p, st)) {
                    Ok(m) => got.push(m),
                    Err(e) => {
                        // Unblock our senders: the step is over for this rank.
                        for st in self.peers.values() {
                            let _ = st.shutdown(std::net::Shutdown::Both);
                        }
                        first_err = Some(e);
                        break;
                    }
                }
            }
            for h in senders {
                match h.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        first_err.get_or_insert(e);
                    }
                    Err(_) => {
                        first_err.get_or_insert(Error::Invalid("a send thread panicked".into()));
                    }
                }
            }
            match first_err {
                Some(e) => Err(e),
                None => Ok(got),
            }
        })
    }

    /// Sends one message to a peer.
    pub fn send(&self, peer: u32, data: &[u8]) -> Result<(), Error> {
        send_on(peer, self.stream(peer)?, data)
    }

    /// Receives one message from a peer.
    pub fn recv(&self, peer: u32) -> Result<Vec<u8>, Error> {
        recv_on(peer, self.stream(peer)?)
    }

    /// Rank 0 gets every rank's message, in rank order (its own first); others get `None`.
    pub fn gather(&self, data: &[u8]) -> Result<Option<Vec<Vec<u8>>>, Error> {
        if self.rank != 0 {
            self.send(0, data)?;
            return Ok(None);
        }
        let mut all = vec![data.to_vec()];
        for r in 1..self.size {
            all.push(self.recv(r)?);
        }
        Ok(Some(all))
    }

    /// Rank 0's message reaches every rank.
    pub fn broadcast(&self, data: &[u8]) -> Result<Vec<u8>, Error> {
        if self.rank != 0 {
            return self.recv(0);
        }
        for r in 1..self.size {
            self.send(r, data)?;
        }
        Ok(data.to_vec())
    }

    /// Every rank waits for all.
    pub fn barrier(&self) -> Result<(), Error> {
        self.gather(&[])?;
        self.broadcast(&[])?;
        Ok(())
    }

    /// Element-wise sum over ranks, added in rank order at rank 0 (deterministic), result on
    /// every rank.
    pub fn allreduce_sum(&self, v: &mut [f64]) -> Result<(), Error> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        let total = match self.gather(&bytes)? {
            Some(all) => {
                let mut acc = vec![0.0f64; v.len()];
                for m in &all {
                    if m.len() != bytes.len() {
                        return Err(Error::Invalid(
                            "allreduce: ranks disagree on the size".into(),
                        ));
                    }
                    for (a, c) in acc.iter_mut().zip(m.chunks_exact(8)) {
                        *a += f64::from_le_bytes(c.try_into().expect("8 bytes"));
                    }
                }
                let out: Vec<u8> = acc.iter().flat_map(|x| x.to_le_bytes()).collect();
                self.broadcast(&out)?
            }
            None => self.broadcast(&[])?,
        };
        for (a, c) in v.iter_mut().zip(total.chunks_exact(8)) {
            *a = f64::from_le_bytes(c.try_into().expect("8 bytes"));
        }
        Ok(())
    }
}

fn peer_err(peer: u32, what: &str, e: std::io::Error) -> Error {
    let message = match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
            format!("{what}: connection lost ({e}); its node died?")
        }
        ErrorKind::WouldBlock | ErrorKind::TimedOut => format!("{what}: no data for 120 s"),
        _ => format!("{what}: {e}"),
    };
    Error::Peer { peer, message }
}

fn send_on(peer: u32, mut s: &TcpStream, data: &[u8]) -> Result<(), Error> {
    s.write_all(&(data.len() as u64).to_le_bytes())
        .and_then(|()| s.write_all(data))
        .map_err(|e| peer_err(peer, "send", e))
}

fn recv_on(peer: u32, mut s: &TcpStream) -> Result<Vec<u8>, Error> {
    let mut len = [0u8; 8];
    s.read_exact(&mut len)
        .map_err(|e| peer_err(peer, "receive", e))?;
    let len = u64::from_le_bytes(len);
    if len > 1 << 34 {
        return Err(Error::Peer {
            peer,
            message: format!("message of {len} bytes"),
        });
    }
    let mut buf = vec![0u8; len as usize];
    s.read_exact(&mut buf)
        .map_err(|e| peer_err(peer, "receive", e))?;
    Ok(buf)
}

fn wait_for_addr(dir: &Path, rank: u32, deadline: Instant) -> Result<String, Error> {
    let f = addr_file(dir, rank);
    loop {
        match fs::read_to_string(&f) {
            Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_string()),
            _ if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                return Err(Error::Timeout(format!(
                    "rank {rank} did not publish {}",
                    f.display()
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Layout;

    #[test]
    fn ranks_in_threads_exchange_and_reduce() {
        let d = tempfile::tempdir().unwrap();
        let l = Layout::new(&[3, 2, 1], false).unwrap();
        let dir = d.path().to_path_buf();
        let handles: Vec<_> = (0..l.size())
            .map(|r| {
                let (l, dir) = (l.clone(), dir.clone());
                thread::spawn(move || {
                    let c = Comm::connect(
                        r,
                        l.size(),
                        &l.peers(r),
                        &dir,
                        "127.0.0.1",
                        "127.0.0.1",
                        Duration::from_secs(20),
                    )
                    .unwrap();
                    let nbs = l.neighbours(r);
                    let msgs: Vec<Vec<u8>> = nbs
                        .iter()
                        .map(|n| vec![r as u8; 100_000 + n.rank as usize])
                        .collect();
                    let sends: Vec<(u32, &[u8])> = nbs
                        .iter()
                        .zip(&msgs)
                        .map(|(n, m)| (n.rank, m.as_slice()))
                        .collect();
                    let from: Vec<u32> = nbs.iter().map(|n| n.rank).collect();
                    let got = c.exchange(&sends, &from).unwrap();
                    for (n, m) in nbs.iter().zip(&got) {
                        assert_eq!(m.len(), 100_000 + r as usize);
                        assert!(m.iter().all(|&b| b == n.rank as u8));
                    }
                    c.barrier().unwrap();
                    let mut v = vec![r as f64, 1.0];
                    c.allreduce_sum(&mut v).unwrap();
                    assert_eq!(v, vec![15.0, 6.0]);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn a_dead_peer_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().to_path_buf();
        let dir2 = dir.clone();
        let t = thread::spawn(move || {
            let c = Comm::connect(
                1,
                2,
                &[0],
                &dir2,
                "127.0.0.1",
                "127.0.0.1",
                Duration::from_secs(20),
            )
            .unwrap();
            drop(c);
        });
        let c = Comm::connect(
            0,
            2,
            &[1],
            &dir,
            "127.0.0.1",
            "127.0.0.1",
            Duration::from_secs(20),
        )
        .unwrap();
        t.join().unwrap();
        let e = c.exchange(&[(1, b"x")], &[1]).unwrap_err();
        assert!(e.to_string().contains("rank 1"), "{e}");
    }
}
