//! The descriptor table sized at build
//! (`SchedulerBuilder::reserve_descriptors`): after `build` the process's
//! table (`FDSize:` in `/proc/self/status`, the number of entries the
//! kernel has room for) is as large as the reserve asked, lowered to the
//! soft `RLIMIT_NOFILE` limit, so that no Processer has to wait for it to
//! grow. Each check runs in a fresh child process, whose table starts
//! small, and sets the limit it needs there.

use crate::common;

use gofer::{ConfigError, Scheduler, MAX_RESERVE_DESCRIPTORS};

/// The entries of this process's descriptor table.
fn fd_table_size() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("FDSize:"))
        .expect("an FDSize line")
        .trim()
        .parse()
        .expect("FDSize is a number")
}

/// Sets the soft `RLIMIT_NOFILE` limit to `n`, or to the hard limit when
/// that is lower; returns the soft limit now in force.
fn set_soft_nofile_limit(n: u64) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into a live local.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    lim.rlim_cur = n.min(lim.rlim_max);
    // SAFETY: setrlimit reads one rlimit from a live local.
    assert_eq!(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) },
        0,
        "setrlimit: {}",
        std::io::Error::last_os_error()
    );
    lim.rlim_cur
}

/// The table of a fresh child is smaller than `n` entries (else a check
/// could not tell whether `build` grew it).
fn assert_small_table(n: usize) -> usize {
    let before = fd_table_size();
    assert!(
        before < n,
        "the child's descriptor table already has {before} entries, not fewer than {n}"
    );
    before
}

#[test]
fn building_with_a_reserve_sizes_the_descriptor_table_before_the_processers_run() {
    common::in_child(
        module_path!(),
        "building_with_a_reserve_sizes_the_descriptor_table_before_the_processers_run",
        || {
            let want = set_soft_nofile_limit(8192) as usize;
            assert!(want > 1024, "the hard descriptor limit {want} is too low");
            let before = assert_small_table(want);
            let s = Scheduler::builder()
                .min_threads(2)
                .reserve_descriptors(want)
                .build()
                .expect("a scheduler");
            let after = fd_table_size();
            println!("figure: descriptor table {before} -> {after} entries (reserve {want})");
            assert!(
                after >= want,
                "the table has {after} entries after build, fewer than the {want} reserved"
            );
            s.shutdown();
        },
    );
}

#[test]
fn the_default_reserve_sizes_the_table_for_the_soft_limit() {
    common::in_child(
        module_path!(),
        "the_default_reserve_sizes_the_table_for_the_soft_limit",
        || {
            // Below the default reserve (65,536): the limit is what counts.
            let limit = set_soft_nofile_limit(5000) as usize;
            assert!(limit > 1024, "the hard descriptor limit {limit} is too low");
            assert_small_table(limit);
            let s = Scheduler::builder()
                .min_threads(2)
                .build()
                .expect("a scheduler");
            let after = fd_table_size();
            assert!(
                after >= limit,
                "the table has {after} entries after a default build, fewer than the \
                 soft limit of {limit} descriptors"
            );
            s.shutdown();
        },
    );
}

#[test]
fn a_reserve_above_the_soft_limit_is_lowered_to_it_and_build_succeeds() {
    common::in_child(
        module_path!(),
        "a_reserve_above_the_soft_limit_is_lowered_to_it_and_build_succeeds",
        || {
            let limit = set_soft_nofile_limit(3000) as usize;
            assert!(limit > 1024, "the hard descriptor limit {limit} is too low");
            assert_small_table(limit);
            let s = Scheduler::builder()
                .min_threads(1)
                .reserve_descriptors(MAX_RESERVE_DESCRIPTORS)
                .build()
                .expect("a reserve above the limit is no error");
            let after = fd_table_size();
            // The kernel rounds a table up to a power of two.
            assert!(
                after >= limit && after <= limit.next_power_of_two(),
                "the table has {after} entries; the soft limit is {limit}"
            );
            s.shutdown();
        },
    );
}

#[test]
fn a_zero_reserve_leaves_the_table_alone() {
    common::in_child(
        module_path!(),
        "a_zero_reserve_leaves_the_table_alone",
        || {
            set_soft_nofile_limit(8192);
            let before = assert_small_table(8192);
            let s = Scheduler::builder()
                .min_threads(1)
                .reserve_descriptors(0)
                .build()
                .expect("a scheduler");
            assert_eq!(fd_table_size(), before, "a zero reserve grew the table");
            s.shutdown();
        },
    );
}

#[test]
fn a_reserve_above_the_maximum_is_a_config_error_that_names_the_range() {
    let e = Scheduler::builder()
        .reserve_descriptors(MAX_RESERVE_DESCRIPTORS + 1)
        .build()
        .expect_err("a reserve above the maximum is refused");
    assert_eq!(
        e,
        ConfigError::DescriptorReserve {
            requested: MAX_RESERVE_DESCRIPTORS + 1,
            max: MAX_RESERVE_DESCRIPTORS,
        }
    );
    let text = e.to_string();
    assert!(
        text.contains("reserve_descriptors") && text.contains(&MAX_RESERVE_DESCRIPTORS.to_string()),
        "{text}"
    );
}
