//! Time: sleeping and user timers, on the runtime's timer service.

pub(crate) mod sleep;
pub mod timer;
