//! The Dispatcher: watches Processers for blocking. (Filled in below.)

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::scheduler::Shared;

/// Counters and the thread handle of one scheduler's Dispatcher.
#[derive(Default)]
pub(crate) struct DispatchState {
    pub(crate) detections: AtomicU64,
    pub(crate) rescued: AtomicU64,
}

pub(crate) fn start(_shared: &Arc<Shared>) {}

pub(crate) fn wake(_shared: &Shared) {}

pub(crate) fn join(_shared: &Shared) {}

pub(crate) fn may_retire(shared: &Shared) -> bool {
    shared.threads.load(std::sync::atomic::Ordering::SeqCst) > shared.config.min_threads
}
