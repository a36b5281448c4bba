//! Connecting to a daemon that accepts nothing (stopped, hung): a timeout, not a hang.

use std::time::Duration;

use socket2::{Domain, SockAddr, Socket, Type};
use spares_client::{Client, Error};

#[test]
fn connect_times_out_when_the_daemon_accepts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("hung.sock");
    let listener = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
    listener.bind(&SockAddr::unix(&path).unwrap()).unwrap();
    listener.listen(0).unwrap(); // never accepts: the backlog fills at once
    let mut queued = Vec::new();
    loop {
        let s = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        if s.connect(&SockAddr::unix(&path).unwrap()).is_err() {
            break; // full
        }
        queued.push(s);
        assert!(queued.len() < 64, "the backlog does not fill");
    }
    // On old main `Client::connect` waited here forever.
    let e = Client::connect_timeout(&path, Duration::from_millis(200))
        .err()
        .expect("no connection");
    assert!(matches!(e, Error::Timeout(_)), "{e}");
}
