//! What a hang looks like: two tasks wait for each other's channels, a
//! third sleeps. The program prints a task dump on a signal (it sends
//! itself SIGUSR1 while all three wait), and the scheduler's stall report
//! fires once the sleeper has finished and only the deadlocked pair is
//! left, parked with nothing but each other to wake them.
//!
//! ```sh
//! cargo run --release --example stuck
//! ```

use std::time::Duration;

use gofer::chan;

fn ping(from: chan::Receiver<u32>, to: chan::Sender<u32>) -> u32 {
    // Waits for the peer first: so does the peer. Neither sends.
    let v = from.recv().unwrap_or(0);
    to.send(v + 1).ok();
    v
}

fn pong(from: chan::Receiver<u32>, to: chan::Sender<u32>) -> u32 {
    let v = from.recv().unwrap_or(1);
    to.send(v * 2).ok();
    v
}

fn nap() {
    gofer::sleep(Duration::from_millis(600));
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    gofer::debug::install_signal_dump(libc::SIGUSR1)?;
    let sched = gofer::Scheduler::builder()
        .min_threads(2)
        .stall_report(Duration::from_millis(400))
        .build()?;
    let (a_tx, a_rx) = chan::unbounded();
    let (b_tx, b_rx) = chan::unbounded();
    let _a = gofer::Builder::new()
        .name("ping")
        .scheduler(&sched)
        .spawn(move || ping(a_rx, b_tx))?;
    let _b = gofer::Builder::new()
        .name("pong")
        .scheduler(&sched)
        .spawn(move || pong(b_rx, a_tx))?;
    let sleeper = gofer::Builder::new()
        .name("sleeper")
        .scheduler(&sched)
        .spawn(nap)?;
    std::thread::sleep(Duration::from_millis(200));
    eprintln!(
        "--- sending SIGUSR1 to myself (pid {}); `kill -USR1` does the same",
        std::process::id()
    );
    // SAFETY: raise(3) only delivers a signal to this thread; the handler
    // installed above is async-signal-safe.
    unsafe { libc::raise(libc::SIGUSR1) };
    sleeper.join()?;
    eprintln!("--- the sleeper is done; waiting for the stall report");
    std::thread::sleep(Duration::from_millis(1500));
    eprintln!("--- still running after both reports; exiting");
    // The pair will never finish: do not wait for them.
    let _ = sched.shutdown_timeout(Duration::from_millis(10));
    Ok(())
}
