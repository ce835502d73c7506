//! Which IO driver a scheduler runs, and why: the rule behind
//! [`IoDriver::Auto`] and the check behind a forced [`IoDriver::Uring`].
//!
//! The rule, in order:
//! 1. A driver the builder names ([`SchedulerBuilder::io_driver`]) wins;
//!    without one, `GOFER_IO` (`auto`, `epoll` or `uring`) decides; without
//!    that, `Auto`. Another `GOFER_IO` value fails the build.
//! 2. `Epoll` runs epoll.
//! 3. `Uring` runs io_uring if the probe passes (the kernel offers
//!    io_uring, it is not disabled, and it has every operation the driver
//!    uses); otherwise the build fails with [`ConfigError::IoDriver`]: no
//!    silent fallback, so a benchmark never measures the other driver by
//!    mistake. A forced `Uring` probes afresh at every build
//!    ([`probe_forced`]), so a ring refused since an earlier build fails
//!    this one too.
//! 4. `Auto` runs io_uring only where the benchmarks show it ahead of
//!    epoll ([`URING_AHEAD`]) and the probe passes; otherwise epoll. While
//!    the ring is not ahead, `Auto` does not probe at all: the probe sets
//!    up and tears down a ring (a few system calls, kernel memory, and an
//!    audit record where a seccomp profile refuses it) for an answer that
//!    would not change the choice. The reason says so ("not probed"),
//!    rather than claiming io_uring is there or not.
//!
//! The probe runs once per process, on a thread of its own that exits
//! before the answer is used ([`probe_once`]): the kernel tears a ring down
//! asynchronously and then notifies, with task work that interrupts a
//! blocking call, every thread that set one up. Probing on the thread that
//! calls `build` made its next socket read with a timeout (`SO_RCVTIMEO`)
//! fail with `EINTR`.
//!
//! The outcome and its reason are in [`Stats::io_driver`] and
//! [`Stats::io_driver_reason`].
//!
//! [`IoDriver::Auto`]: crate::IoDriver::Auto
//! [`IoDriver::Uring`]: crate::IoDriver::Uring
//! [`SchedulerBuilder::io_driver`]: crate::SchedulerBuilder::io_driver
//! [`ConfigError::IoDriver`]: crate::ConfigError::IoDriver
//! [`Stats::io_driver`]: crate::Stats::io_driver
//! [`Stats::io_driver_reason`]: crate::Stats::io_driver_reason

use std::ffi::OsStr;
use std::sync::OnceLock;

use crate::error::ConfigError;
use crate::runtime::config::IoDriver;

/// Whether the benchmarks show io_uring ahead of epoll (BENCHMARKS.md,
/// "The io_uring driver": CPU per request and tail latency of the servers
/// against epoll in the same run). [`IoDriver::Auto`] picks the ring only
/// while this holds: the one switch to flip once it wins.
pub(crate) const URING_AHEAD: bool = false;

/// Whether this kernel offers io_uring with the operations the driver uses
/// (`uring::probe`), asked once per process on a thread of its own (module
/// docs): a thread that set up a ring is interrupted when the kernel
/// finishes tearing it down, and this one has exited by then, so no
/// caller's thread ever is. A kernel that refuses io_uring later (the
/// `kernel.io_uring_disabled` sysctl changed, a seccomp filter added) makes
/// each Processer's ring fail to set up instead; its tasks then use epoll.
pub(crate) fn probe_once() -> Result<(), String> {
    static ANSWER: OnceLock<Result<(), String>> = OnceLock::new();
    ANSWER.get_or_init(super::uring_probe).clone()
}

/// The check behind a forced [`IoDriver::Uring`]: a ring set up afresh at
/// each such build (on a thread of its own, as [`probe_once`]), not the
/// process's first answer. io_uring that worked once may be refused since
/// (`kernel.io_uring_disabled` set, a seccomp filter installed, the
/// process out of descriptors or locked memory): the build then fails
/// with [`ConfigError::IoDriver`] instead of running epoll under the
/// name of the ring. `Auto` keeps the cached answer (it falls back to
/// epoll by design). A ring that still fails after the build, on one
/// Processer, is counted in the stats' reason (`Shared::stats`).
///
/// [`ConfigError::IoDriver`]: crate::ConfigError::IoDriver
pub(crate) fn probe_forced() -> Result<(), String> {
    super::uring_probe()
}

/// Where the driver asked for came from, for the reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// `SchedulerBuilder::io_driver`.
    Builder,
    /// The `GOFER_IO` environment variable.
    Env,
    /// Neither: `Auto` by default.
    Default,
}

/// The driver asked for: the builder's, else `GOFER_IO`'s, else `Auto`.
/// `env` is `GOFER_IO`'s value (`None` when unset), read with `var_os`: a
/// value that is not UTF-8 names no driver, and fails like any other.
pub(crate) fn requested(
    builder: Option<IoDriver>,
    env: Option<&OsStr>,
) -> Result<(IoDriver, Source), ConfigError> {
    if let Some(d) = builder {
        return Ok((d, Source::Builder));
    }
    let Some(env) = env else {
        return Ok((IoDriver::Auto, Source::Default));
    };
    let Some(env) = env.to_str() else {
        return Err(ConfigError::IoDriver {
            requested: env.to_string_lossy().into_owned(),
            reason: "GOFER_IO is not valid UTF-8; GOFER_IO accepts auto, epoll or uring"
                .to_string(),
        });
    };
    match env {
        "auto" => Ok((IoDriver::Auto, Source::Env)),
        "epoll" => Ok((IoDriver::Epoll, Source::Env)),
        "uring" => Ok((IoDriver::Uring, Source::Env)),
        v => Err(ConfigError::IoDriver {
            requested: v.to_string(),
            reason: "GOFER_IO accepts auto, epoll or uring".to_string(),
        }),
    }
}

/// The driver to run (never `Auto`) and why, for `requested` from
/// `source`; `uring_ahead` is [`URING_AHEAD`] and `probe` the kernel check
/// ([`probe_once`]), parameters so that every branch can be tested.
pub(crate) fn resolve(
    requested: IoDriver,
    source: Source,
    uring_ahead: bool,
    probe: impl FnOnce() -> Result<(), String>,
) -> Result<(IoDriver, String), ConfigError> {
    let asked = match (source, requested) {
        (Source::Builder, d) => format!("SchedulerBuilder::io_driver({d:?})"),
        (Source::Env, IoDriver::Auto) => "GOFER_IO=auto".to_string(),
        (Source::Env, IoDriver::Epoll) => "GOFER_IO=epoll".to_string(),
        (Source::Env, _) => "GOFER_IO=uring".to_string(),
        (Source::Default, _) => "Auto (the default)".to_string(),
    };
    match requested {
        IoDriver::Epoll => Ok((IoDriver::Epoll, format!("asked for by {asked}"))),
        IoDriver::Uring => match probe() {
            Ok(()) => Ok((IoDriver::Uring, format!("asked for by {asked}"))),
            Err(reason) => Err(ConfigError::IoDriver {
                requested: "uring".to_string(),
                reason,
            }),
        },
        IoDriver::Auto if !uring_ahead => Ok((
            IoDriver::Epoll,
            format!(
                "{asked} chose epoll: the benchmarks do not show io_uring ahead of it \
                 (io_uring not probed)"
            ),
        )),
        IoDriver::Auto => match probe() {
            Ok(()) => Ok((
                IoDriver::Uring,
                format!("{asked} chose io_uring: available, and ahead of epoll in the benchmarks"),
            )),
            Err(e) => Ok((
                IoDriver::Epoll,
                format!("{asked} chose epoll: io_uring unavailable: {e}"),
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_probe() -> Result<(), String> {
        panic!("probed although the choice does not depend on it")
    }

    #[test]
    fn the_builder_wins_over_gofer_io_and_auto_is_the_default() {
        assert_eq!(
            requested(Some(IoDriver::Epoll), Some(OsStr::new("uring"))).unwrap(),
            (IoDriver::Epoll, Source::Builder)
        );
        assert_eq!(
            requested(None, None).unwrap(),
            (IoDriver::Auto, Source::Default)
        );
        for (v, d) in [
            ("auto", IoDriver::Auto),
            ("epoll", IoDriver::Epoll),
            ("uring", IoDriver::Uring),
        ] {
            assert_eq!(
                requested(None, Some(OsStr::new(v))).unwrap(),
                (d, Source::Env)
            );
        }
        for bad in ["", "Epoll", "kqueue"] {
            let e = requested(None, Some(OsStr::new(bad))).unwrap_err();
            assert!(e.to_string().contains("auto, epoll or uring"), "{e}");
        }
        use std::os::unix::ffi::OsStrExt;
        let e = requested(None, Some(OsStr::from_bytes(b"ur\xffing"))).unwrap_err();
        assert!(matches!(e, ConfigError::IoDriver { .. }), "{e:?}");
        assert!(e.to_string().contains("GOFER_IO is not valid UTF-8"), "{e}");
    }

    #[test]
    fn auto_runs_epoll_without_probing_while_the_ring_is_not_ahead() {
        let (d, why) = resolve(IoDriver::Auto, Source::Default, false, no_probe).unwrap();
        assert_eq!(d, IoDriver::Epoll);
        assert!(
            why.contains("not ahead") || why.contains("do not show"),
            "{why}"
        );
        assert!(why.contains("not probed"), "{why}");
    }

    #[test]
    fn auto_once_ahead_runs_the_ring_where_the_probe_passes_and_epoll_where_it_fails() {
        let (d, why) = resolve(IoDriver::Auto, Source::Env, true, || Ok(())).unwrap();
        assert_eq!(d, IoDriver::Uring);
        assert!(why.starts_with("GOFER_IO=auto chose io_uring"), "{why}");
        let (d, why) = resolve(IoDriver::Auto, Source::Env, true, || {
            Err("io_uring_setup failed: EPERM".to_string())
        })
        .unwrap();
        assert_eq!(d, IoDriver::Epoll);
        assert!(
            why.contains("io_uring unavailable: io_uring_setup failed: EPERM"),
            "{why}"
        );
    }

    #[test]
    fn a_forced_ring_is_a_config_error_where_the_probe_fails_and_epoll_never_probes() {
        let e = resolve(IoDriver::Uring, Source::Builder, false, || {
            Err("the kernel's io_uring lacks IORING_OP_RECV".to_string())
        })
        .unwrap_err();
        assert!(matches!(e, ConfigError::IoDriver { .. }), "{e:?}");
        assert!(e.to_string().contains("IORING_OP_RECV"), "{e}");
        let (d, why) = resolve(IoDriver::Uring, Source::Builder, false, || Ok(())).unwrap();
        assert_eq!(d, IoDriver::Uring);
        assert_eq!(why, "asked for by SchedulerBuilder::io_driver(Uring)");
        let (d, why) = resolve(IoDriver::Epoll, Source::Env, true, no_probe).unwrap();
        assert_eq!(d, IoDriver::Epoll);
        assert_eq!(why, "asked for by GOFER_IO=epoll");
    }
}
