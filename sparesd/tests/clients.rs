//! The clients against servers that misbehave: a daemon that never answers, one that answers
//! without end, and one that is not there yet when a node-down report is made.

mod common;

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::time::Duration;

use common::*;
use spares_client::{node_down_with_retry, Client, Error, Retry};

/// A socket whose server accepts and then does `behave` with each connection.
fn fake_server(
    dir: &std::path::Path,
    behave: fn(std::os::unix::net::UnixStream),
) -> std::path::PathBuf {
    let path = dir.join("fake.sock");
    let l = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || behave(s));
        }
    });
    path
}

fn silent(s: std::os::unix::net::UnixStream) {
    // Holds the connection open and never answers.
    std::thread::sleep(Duration::from_secs(120));
    drop(s);
}

fn endless(mut s: std::os::unix::net::UnixStream) {
    let chunk = vec![b'x'; 1 << 16];
    while s.write_all(&chunk).is_ok() {}
}

#[test]
fn the_rust_client_times_out_on_a_daemon_that_never_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let path = fake_server(tmp.path(), silent);
    let mut c = Client::connect(&path).unwrap();
    c.set_timeout(Some(Duration::from_millis(300))).unwrap();
    let e = c.health().unwrap_err();
    assert!(matches!(e, Error::Timeout(_)), "{e}");
    // The connection is not used again: the late reply would answer the next request.
    assert!(matches!(c.health().unwrap_err(), Error::Io(_)));
}

#[test]
fn the_rust_client_refuses_an_endless_reply() {
    let tmp = tempfile::tempdir().unwrap();
    let path = fake_server(tmp.path(), endless);
    let mut c = Client::connect(&path).unwrap();
    c.set_max_reply(1 << 20);
    let e = c.health().unwrap_err();
    assert!(
        matches!(e, Error::ReplyTooLarge { limit } if limit == 1 << 20),
        "{e}"
    );
    // The default limit holds too (on old main the client read until memory ran out).
    let mut c = Client::connect(&path).unwrap();
    let e = c.health().unwrap_err();
    assert!(matches!(e, Error::ReplyTooLarge { .. }), "{e}");
}

#[test]
fn node_down_retries_until_the_daemon_answers() {
    let mut d = Daemon::start(&[]);
    let doc = doc(&[4, 4], "2D(1,1)", true);
    let r = d.call(&register_line(31, 1000, &doc));
    assert_eq!(r["ok"], true, "{r}");
    d.kill9(); // the socket file stays: connections are refused, as after a crash
    let socket = d.socket();
    let reporter = std::thread::spawn(move || {
        let mut retries = 0;
        let r = node_down_with_retry(
            &socket,
            "node005",
            Retry {
                first_wait: Duration::from_millis(50),
                max_wait: Duration::from_millis(400),
                give_up_after: Duration::from_secs(60),
            },
            |_, _, _| retries += 1,
        );
        (r.map_err(|(_, e)| e.to_string()), retries)
    });
    std::thread::sleep(Duration::from_millis(800));
    d.start_again();
    let (r, retries) = reporter.join().unwrap();
    let r = r.expect("delivered once the daemon is back");
    assert!(retries >= 1, "the first attempts failed and were retried");
    assert_eq!(r["results"][0]["node"], "node005");
    assert_eq!(d.call(&show_line(31))["history"][0]["node"], "node005");
}

#[test]
fn node_down_gives_up_after_its_bound_and_does_not_retry_a_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    let nowhere = tmp.path().join("no-daemon.sock");
    let quick = Retry {
        first_wait: Duration::from_millis(10),
        max_wait: Duration::from_millis(20),
        give_up_after: Duration::from_millis(200),
    };
    let (attempts, e) = node_down_with_retry(&nowhere, "n1", quick, |_, _, _| {}).unwrap_err();
    assert!(attempts > 1, "retried before giving up");
    assert!(matches!(e, Error::Connect { .. }), "{e}");
    let d = Daemon::start(&[]);
    // A malformed hostlist is refused by the daemon: final, one attempt.
    let (attempts, e) = node_down_with_retry(&d.socket(), "n[", quick, |_, _, _| {}).unwrap_err();
    assert_eq!(attempts, 1);
    assert_eq!(e.code(), Some("bad_request"));
}
