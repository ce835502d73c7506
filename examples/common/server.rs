//! What the example servers share: their command-line options, and a main
//! loop that starts a scheduler, listens, serves every connection in a task
//! of its own, and stops cleanly on SIGINT or SIGTERM.
//!
//! The clean stop is `Scheduler::shutdown_now`: it cancels every task, so
//! the accept loop and each connection's task unwind from the wait they are
//! parked in (`accept`, `read`, ...), their sockets close as the unwind
//! drops them, and the call returns once no task is left.
//!
//! SIGUSR1 prints one line of the scheduler's counters and goes on serving
//! (`stats: cross_wakeups N switches M`; the echo bench reads it at the
//! start and the end of its measured window).

use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use gofer::net::{TcpListener, TcpStream};
use gofer::signal::{Signals, SIGINT, SIGTERM, SIGUSR1};

/// The options every example server takes.
#[derive(clap::Args, Debug)]
pub struct Options {
    /// Address to listen on, HOST:PORT; port 0 picks a free port.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080", value_parser = parse_addr)]
    pub addr: SocketAddr,

    /// Processer threads; 0 means one per CPU.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=gofer::MAX_THREADS_LIMIT as i64))]
    pub threads: u16,

    /// Seconds a connection may wait for the client to send (or to read
    /// what it was sent) before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub idle_timeout: u64,

    /// Stack size of each connection's task, in KiB (16 to 1,048,576);
    /// only the pages a task touches cost memory.
    #[arg(long, value_name = "KIB", default_value_t = (gofer::DEFAULT_STACK_SIZE / 1024) as u32, value_parser = clap::value_parser!(u32).range(16..=1_048_576))]
    pub stack_size: u32,

    /// Carve stacks out of large shared mappings without guard pages
    /// (`SchedulerBuilder::dense_stacks`): past about 30,000 connections,
    /// guarded stacks run out of memory mappings.
    #[arg(long)]
    pub dense_stacks: bool,

    /// Finished stacks kept for reuse (`SchedulerBuilder::stack_cache`);
    /// a kept stack stays resident.
    #[arg(long, value_name = "STACKS", default_value_t = gofer::DEFAULT_STACK_CACHE)]
    pub stack_cache: usize,

    /// Where connections are accepted: `one` accept loop, whose
    /// connections the scheduler places over the Processers, or one per
    /// Processer (`per-processer`), each pinned there with a listener of
    /// its own on the shared port (`SO_REUSEPORT`), so the kernel spreads
    /// the connections.
    #[arg(long, value_enum, default_value_t = Acceptors::One)]
    pub acceptors: Acceptors,

    /// Serve the live debug page (`gofer::debug::serve`: charts per
    /// Processer, tasks by state, blocked threads, the task dump) at
    /// HOST:PORT, e.g. 127.0.0.1:6060. It shows task names, stacks and
    /// source paths: keep it on loopback.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_addr)]
    pub debug_addr: Option<SocketAddr>,
}

/// Where a server accepts its connections (`--acceptors`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acceptors {
    /// One accept loop; the scheduler places each connection's task.
    One,
    /// One accept loop pinned to each core Processer, each with its own
    /// `SO_REUSEPORT` listener on the shared port.
    PerProcesser,
}

/// What `--help` says after the options.
pub const AFTER_HELP: &str = "Prints `listening on ADDR` first (then `debug page at URL` with \
                              --debug-addr), then runs until SIGINT (Ctrl-C) \
                              or SIGTERM, which close every connection and end the program \
                              with `stopped` and status 0; SIGUSR1 prints the line \
                              `stats: cross_wakeups N switches M` (the scheduler's counters). \
                              Exit status: 2 for a bad argument, 1 when the address cannot be \
                              bound.";

fn parse_addr(s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| format!("`{s}` is not an address; write HOST:PORT, e.g. 127.0.0.1:8080"))
}

/// Starts a scheduler named `name`, listens on `opts.addr`, prints
/// `listening on ADDR`, and serves every connection with `serve` (given
/// the idle timeout) in a task of its own, until SIGINT or SIGTERM; then
/// cancels every task, prints `stopped`, and returns success.
#[allow(dead_code)] // each server uses `run` or `run_with`
pub fn run(
    name: &str,
    opts: &Options,
    serve: fn(TcpStream, Duration) -> io::Result<()>,
) -> ExitCode {
    run_with(name, opts, gofer::Scheduler::builder(), serve, |_| Ok(()))
}

/// [`run`] with a scheduler configured from `builder` (its name, thread
/// count and stack options are set here from `opts`), calling `setup` with
/// the scheduler once it is built, before listening (to spawn the server's
/// own background tasks, or start a helper thread); an error from it ends
/// the program.
#[allow(dead_code)] // each server uses `run` or `run_with`
pub fn run_with(
    name: &str,
    opts: &Options,
    builder: gofer::SchedulerBuilder,
    serve: fn(TcpStream, Duration) -> io::Result<()>,
    setup: impl FnOnce(&gofer::Scheduler) -> io::Result<()>,
) -> ExitCode {
    // Any time would do (gofer::signal needs no signal mask); before the
    // scheduler, so that a signal from then on stops the server.
    let stop = match Signals::new(&[SIGINT, SIGTERM, SIGUSR1]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot handle the stop signals: {e}");
            return ExitCode::FAILURE;
        }
    };
    let sched = match builder
        .name(name)
        .min_threads(opts.threads.into())
        .stack_size(opts.stack_size as usize * 1024)
        .dense_stacks(opts.dense_stacks)
        .stack_cache(opts.stack_cache)
        .build()
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: cannot start the scheduler: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = setup(&sched) {
        eprintln!("error: {e}");
        return ExitCode::FAILURE;
    }
    // Kept until the end of `run_with`: dropping it stops the page.
    let debug_page = match opts.debug_addr.map(gofer::debug::serve).transpose() {
        Ok(page) => page,
        Err(e) => {
            eprintln!("error: cannot serve the debug page: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listeners = match listen(opts, sched.stats().threads) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", opts.addr);
            return ExitCode::FAILURE;
        }
    };
    let addr = listeners[0]
        .local_addr()
        .expect("a bound listener has an address");
    println!("listening on {addr}");
    if let Some(p) = &debug_page {
        println!("debug page at http://{}/", p.local_addr());
    }
    io::stdout().flush().expect("stdout");

    let idle = Duration::from_secs(opts.idle_timeout);
    let pin = listeners.len() > 1;
    for (i, listener) in listeners.into_iter().enumerate() {
        let b = gofer::Builder::new().scheduler(&sched);
        let b = if pin { b.pin(i) } else { b };
        b.spawn(move || accept_loop(&listener, idle, serve))
            .expect("the scheduler runs");
    }
    let signal = loop {
        match stop.recv() {
            SIGINT => break "SIGINT",
            SIGUSR1 => {
                let st = sched.stats();
                let switches: u64 = st.processers.iter().map(|p| p.switches).sum();
                println!(
                    "stats: cross_wakeups {} switches {switches}",
                    st.cross_wakeups
                );
                io::stdout().flush().expect("stdout");
            }
            _ => break "SIGTERM",
        }
    };
    // A second signal now has its default action: it ends a shutdown that
    // hangs.
    drop(stop);
    eprintln!("{signal}: stopping");
    // Cancels the accept loop and every connection's task (each unwinds
    // from its wait, closing its socket), then waits for them all.
    sched.shutdown_now();
    println!("stopped");
    ExitCode::SUCCESS
}

/// The listeners `opts.acceptors` asks for: one, or one per Processer of
/// `threads` on one port (the first resolves port 0, the others bind its
/// address), each with gofer's backlog and `SO_REUSEPORT`.
fn listen(opts: &Options, threads: usize) -> io::Result<Vec<TcpListener>> {
    if opts.acceptors == Acceptors::One {
        return Ok(vec![TcpListener::bind(opts.addr)?]);
    }
    let bind = |addr: SocketAddr| -> io::Result<TcpListener> {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.bind(&addr.into())?;
        s.listen(i32::MAX)?;
        TcpListener::from_std(s.into())
    };
    let first = bind(opts.addr)?;
    let addr = first.local_addr()?;
    let mut all = vec![first];
    for _ in 1..threads {
        all.push(bind(addr)?);
    }
    Ok(all)
}

/// Accepts connections forever, each served by a task of its own.
fn accept_loop(
    listener: &TcpListener,
    idle: Duration,
    serve: fn(TcpStream, Duration) -> io::Result<()>,
) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                // A connection whose task cannot be had is closed (dropped).
                if let Err(e) = gofer::Builder::new().spawn(move || serve(stream, idle)) {
                    eprintln!("cannot serve a connection: {e}");
                }
            }
            Err(e) => {
                // Out of descriptors, most likely: give connections time to close.
                eprintln!("accept: {e}");
                gofer::sleep(Duration::from_millis(10));
            }
        }
    }
}
