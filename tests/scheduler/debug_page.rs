//! `gofer::debug::serve`: every endpoint answers, with what it should,
//! and the page keeps answering while every Processer is blocked.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, wait_until};

/// A GET of `path`; the status line and the body.
fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the debug page");
    s.set_read_timeout(Some(common::PATIENCE)).unwrap();
    s.set_write_timeout(Some(common::PATIENCE)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text)
        .expect("the page answers and closes");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let status = head.lines().next().unwrap().to_owned();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .expect("a Content-Length")
        .parse()
        .unwrap();
    assert_eq!(len, body.len(), "{head}");
    (status, body.to_owned())
}

#[test]
fn every_endpoint_answers_with_what_it_names() {
    let s = gofer::Scheduler::builder()
        .name("page-test")
        .min_threads(2)
        .build()
        .unwrap();
    let (tx, rx) = gofer::chan::bounded::<()>(0);
    let h = gofer::Builder::new()
        .name("waits-for-the-test")
        .scheduler(&s)
        .spawn(move || rx.recv())
        .unwrap();
    let page = gofer::debug::serve("127.0.0.1:0").unwrap();
    let addr = page.local_addr();
    assert!(addr.ip().is_loopback());

    let (status, body) = get(addr, "/");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        body.contains("<canvas") || body.contains("\"canvas\""),
        "{body}"
    );
    assert!(body.contains("/stats.json") && body.contains("/tasks.json"));

    wait_until("the task parks", || {
        get(addr, "/tasks.json").1.contains("\"state\":\"parked\"")
    });
    let (status, body) = get(addr, "/tasks.json");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("\"name\":\"waits-for-the-test\""), "{body}");
    assert!(
        body.contains("\"waiting_on\":\"channel receive\""),
        "{body}"
    );

    let (status, body) = get(addr, "/tasks");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("waits-for-the-test"), "{body}");

    let (status, body) = get(addr, "/stats.json");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(body.contains("\"name\":\"page-test\""), "{body}");
    assert!(body.contains("\"history\":[{\"at\":"), "{body}");
    let ours = &body[body.find("\"name\":\"page-test\"").unwrap()..];
    let now = &ours[..ours.find("\"history\"").unwrap()];
    assert_eq!(now.matches("\"kind\":\"core\"").count(), 2, "{now}");
    assert_eq!(now.matches("\"busy_ns\":").count(), 2, "{now}");

    let (status, _) = get(addr, "/nothing-here");
    assert_eq!(status, "HTTP/1.1 404 Not Found");

    tx.send(()).unwrap();
    h.join().unwrap().unwrap();
    drop(page);
    assert!(
        TcpStream::connect(addr).is_err(),
        "the page stops listening when its DebugServer is dropped"
    );
    s.shutdown();
}

/// Lets the spinning tasks go when the test ends, however it ends.
struct Release(Arc<AtomicBool>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn the_page_answers_while_every_processer_is_blocked() {
    let s = gofer::Scheduler::builder()
        .name("page-blocked")
        .min_threads(2)
        .max_threads(2)
        .build()
        .unwrap();
    let go = Arc::new(AtomicBool::new(false));
    let release = Release(go.clone());
    let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut spinners = Vec::new();
    for i in 0..2 {
        let (go, started) = (go.clone(), started.clone());
        spinners.push(
            gofer::Builder::new()
                .name(format!("spinner-{i}"))
                .scheduler(&s)
                .pin(i)
                .spawn(move || {
                    started.fetch_add(1, Ordering::SeqCst);
                    // Never switches out: the thread is blocked for the
                    // Dispatcher, whatever the build's hooks.
                    while !go.load(Ordering::SeqCst) {
                        std::hint::spin_loop();
                    }
                })
                .unwrap(),
        );
    }
    wait_until("both spinners run", || {
        started.load(Ordering::SeqCst) == 2 && s.stats().blocked == 2
    });
    let page = gofer::debug::serve("127.0.0.1:0").unwrap();
    let addr = page.local_addr();

    let (status, body) = get(addr, "/stats.json");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let ours = &body[body.find("\"name\":\"page-blocked\"").unwrap()..];
    assert!(ours.contains("\"blocked\":2"), "{ours}");

    let (status, body) = get(addr, "/tasks.json");
    assert_eq!(status, "HTTP/1.1 200 OK");
    for i in 0..2 {
        assert!(
            body.contains(&format!("\"task_name\":\"spinner-{i}\"")),
            "{body}"
        );
    }
    let (status, body) = get(addr, "/tasks");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        body.contains("spinner-0") && body.contains("spinner-1"),
        "{body}"
    );
    let (status, _) = get(addr, "/");
    assert_eq!(status, "HTTP/1.1 200 OK");

    drop(release);
    for h in spinners {
        h.join().unwrap();
    }
    drop(page);
    s.shutdown_timeout(Duration::from_secs(20)).unwrap();
}
