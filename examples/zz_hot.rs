use std::time::Instant;
fn main() {
    let mode = std::env::args().nth(1).unwrap_or_default();
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let sched = gofer::Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .build()
        .unwrap();
    // warm up
    for _ in 0..2 {
        let hs: Vec<_> = (0..1000).map(|_| sched.spawn(|| ())).collect();
        for h in hs {
            h.join().unwrap();
        }
    }
    let t = Instant::now();
    match mode.as_str() {
        "spawn_out" => {
            let hs: Vec<_> = (0..n).map(|_| sched.spawn(|| ())).collect();
            for h in hs {
                h.join().unwrap();
            }
        }
        "spawn_in" => {
            sched
                .spawn(move || {
                    let hs: Vec<_> = (0..n).map(|_| gofer::spawn(|| ())).collect();
                    for h in hs {
                        h.join().unwrap();
                    }
                })
                .join()
                .unwrap();
        }
        "yield" => {
            let a = sched.spawn(move || {
                for _ in 0..n {
                    gofer::yield_now()
                }
            });
            let b = sched.spawn(move || {
                for _ in 0..n {
                    gofer::yield_now()
                }
            });
            a.join().unwrap();
            b.join().unwrap();
        }
        "chan" => {
            let (tx, rx) = gofer::chan::unbounded::<u64>();
            let (tx2, rx2) = gofer::chan::unbounded::<u64>();
            let e = sched.spawn(move || {
                for v in rx.iter() {
                    if tx2.send(v).is_err() {
                        return;
                    }
                }
            });
            sched
                .spawn(move || {
                    for i in 0..n {
                        tx.send(i).unwrap();
                        rx2.recv().unwrap();
                    }
                })
                .join()
                .unwrap();
            e.join().unwrap();
        }
        _ => panic!("mode"),
    }
    let e = t.elapsed();
    println!(
        "{mode}: {:.1} ns/op",
        e.as_nanos() as f64 / n as f64 / if mode == "yield" { 2.0 } else { 1.0 }
    );
    sched.shutdown();
}
