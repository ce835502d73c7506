//! The list of every hooked symbol, which keeps the linker from dropping
//! the objects that define them. A new hook is added to its family's file
//! and to [`KEEP`].

use super::{data, descriptors, guard, poll, sleep, sockets, syscall};

/// The addresses of every hooked symbol.
struct Symbols([*const (); 26]);

// SAFETY: plain function addresses, never written or dereferenced.
unsafe impl Sync for Symbols {}

/// Every hooked symbol, referenced from code that is always linked, so the
/// linker keeps the object that defines them (and so the program's calls
/// bind to them, not to libc's).
#[used]
static KEEP: Symbols = Symbols([
    data::read as *const (),
    data::readv as *const (),
    data::recv as *const (),
    data::recvfrom as *const (),
    data::recvmsg as *const (),
    data::write as *const (),
    data::writev as *const (),
    data::send as *const (),
    data::sendto as *const (),
    data::sendmsg as *const (),
    sockets::accept as *const (),
    sockets::accept4 as *const (),
    sockets::connect as *const (),
    poll::poll as *const (),
    sleep::nanosleep as *const (),
    sleep::clock_nanosleep as *const (),
    sleep::sleep as *const (),
    sleep::usleep as *const (),
    descriptors::close as *const (),
    descriptors::fcntl as *const (),
    descriptors::ioctl as *const (),
    descriptors::setsockopt as *const (),
    descriptors::dup as *const (),
    descriptors::dup2 as *const (),
    descriptors::dup3 as *const (),
    syscall::syscall as *const (),
]);

/// Touches [`KEEP`] (see there), and registers the fork handler once.
pub(crate) fn keep() {
    std::hint::black_box(&KEEP.0);
    guard::register_fork_handler();
}
