//! The key space of the example Redis-protocol server: [`SHARDS`] shards,
//! each a `parking_lot::Mutex` over a `HashMap` from key to [`Entry`], with
//! a key's shard picked by a hash of the key.
//!
//! # Why `parking_lot` and not `gofer::sync::Mutex`
//!
//! No task ever parks while it holds a shard lock: a command takes the
//! lock, touches memory (the map, the reply buffer) and lets go, with no
//! socket call, channel, sleep or other lock in between. So a task that
//! finds a shard locked waits for a critical section of a few hundred
//! nanoseconds running on another thread, and `parking_lot`'s brief spin
//! covers it without ever blocking its thread in practice; its uncontended
//! lock and unlock are one atomic each. `gofer::sync::Mutex` is the lock to
//! use when the holder may park (do IO, wait on a channel, sleep): a
//! thread-blocking lock would then hold the waiter's whole Processer, and
//! every task queued on it, for as long as the holder stays parked.
//!
//! # Expiry
//!
//! An entry may have a deadline. Every access checks it and removes an
//! expired entry on the spot (lazy expiry), so a command never sees one.
//! Keys that nobody reads again are removed by [`Store::sweep`], which the
//! server calls periodically from a task of its own: each shard keeps a
//! min-heap of (deadline, key), popped while the top has passed. Heap
//! entries are not removed when a key is deleted or its deadline changes;
//! a popped entry that no longer matches its key's deadline is dropped, and
//! the heap is compacted when more than half of it is stale, so it stays
//! within twice the number of keys.

// Each binary that includes this file uses only part of it.
#![allow(dead_code)]

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

/// Shards in a [`Store`]: a power of two, well above the thread count, so
/// that two threads rarely want the same one.
pub const SHARDS: usize = 64;

/// The most expired keys [`Store::sweep`] removes from one shard in one
/// call, so that it holds no lock for long; the rest wait for the next call
/// (or an access).
pub const SWEEP_BUDGET: usize = 1024;

/// What a key holds.
#[derive(Debug)]
pub enum Value {
    /// A string (also what `INCR` works on: its decimal digits).
    Str(Vec<u8>),
    /// A list, never empty: the key goes when its last element does.
    List(VecDeque<Vec<u8>>),
}

/// A key's value and deadline.
#[derive(Debug)]
pub struct Entry {
    /// The value.
    pub value: Value,
    expires: Option<Instant>,
}

impl Entry {
    /// When the key expires, if it does.
    pub fn expires(&self) -> Option<Instant> {
        self.expires
    }

    fn expired(&self) -> bool {
        self.expires.is_some_and(|t| t <= Instant::now())
    }
}

/// What a write does to the key's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Keeps it (none for a new key).
    Keep,
    /// Removes it.
    Clear,
    /// Sets it.
    At(Instant),
}

/// One shard: part of the keys, behind one lock.
#[derive(Debug, Default)]
pub struct Shard {
    map: HashMap<Box<[u8]>, Entry>,
    deadlines: BinaryHeap<Reverse<(Instant, Box<[u8]>)>>,
}

impl Shard {
    /// The live entry under `key`; an expired one is removed instead.
    pub fn get(&mut self, key: &[u8]) -> Option<&mut Entry> {
        // Two look-ups: the borrow checker cannot yet see that a reference
        // returned from one arm of a match does not outlive the other arm.
        if self.map.get(key)?.expired() {
            self.map.remove(key);
            return None;
        }
        self.map.get_mut(key)
    }

    /// The live entry under `key`, created (without a deadline) holding
    /// `value()` if there is none.
    pub fn entry(&mut self, key: &[u8], value: impl FnOnce() -> Value) -> &mut Entry {
        if self.get(key).is_none() {
            let e = Entry {
                value: value(),
                expires: None,
            };
            self.map.insert(key.into(), e);
        }
        self.map
            .get_mut(key)
            .expect("the entry was found or inserted under this lock")
    }

    /// Makes `key` hold the string `val`, whatever it held, and applies
    /// `expiry` to its deadline.
    pub fn set_str(&mut self, key: &[u8], val: &[u8], expiry: Expiry) {
        let deadline = match self.get(key) {
            Some(e) => {
                match &mut e.value {
                    // Reuse the allocation, unless it is far too large.
                    Value::Str(v) if v.capacity() <= 2 * val.len() + 64 => {
                        v.clear();
                        v.extend_from_slice(val);
                    }
                    other => *other = Value::Str(val.to_vec()),
                }
                match expiry {
                    Expiry::Keep => return,
                    Expiry::Clear => {
                        e.expires = None;
                        return;
                    }
                    Expiry::At(t) => {
                        e.expires = Some(t);
                        t
                    }
                }
            }
            None => {
                let expires = match expiry {
                    Expiry::At(t) => Some(t),
                    Expiry::Keep | Expiry::Clear => None,
                };
                let e = Entry {
                    value: Value::Str(val.to_vec()),
                    expires,
                };
                self.map.insert(key.into(), e);
                match expires {
                    Some(t) => t,
                    None => return,
                }
            }
        };
        self.note_deadline(key, deadline);
    }

    /// Removes `key`; whether it was there (and live).
    pub fn remove(&mut self, key: &[u8]) -> bool {
        self.map.remove(key).is_some_and(|e| !e.expired())
    }

    /// Sets or clears the deadline of a live `key`; whether it was there.
    pub fn set_expiry(&mut self, key: &[u8], at: Option<Instant>) -> bool {
        let Some(e) = self.get(key) else {
            return false;
        };
        e.expires = at;
        if let Some(t) = at {
            self.note_deadline(key, t);
        }
        true
    }

    /// Keys in the shard, expired ones not yet removed included.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    fn note_deadline(&mut self, key: &[u8], t: Instant) {
        self.deadlines.push(Reverse((t, key.into())));
        if self.deadlines.len() > 2 * self.map.len() + 64 {
            let map = &self.map;
            self.deadlines
                .retain(|Reverse((t, k))| map.get(k).is_some_and(|e| e.expires == Some(*t)));
        }
    }

    /// Removes up to `budget` keys whose deadline is at or before `now`;
    /// how many it removed.
    fn sweep(&mut self, now: Instant, budget: usize) -> usize {
        let mut removed = 0;
        for _ in 0..budget {
            match self.deadlines.peek() {
                Some(Reverse((t, _))) if *t <= now => {}
                _ => break,
            }
            let Some(Reverse((t, key))) = self.deadlines.pop() else {
                break;
            };
            // Only if the deadline is still the key's own.
            if self.map.get(&key).is_some_and(|e| e.expires == Some(t)) {
                self.map.remove(&key);
                removed += 1;
            }
        }
        removed
    }
}

/// A shard, alone on its cache lines.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Padded(Mutex<Shard>);

/// All the keys.
#[derive(Debug)]
pub struct Store {
    shards: Box<[Padded]>,
}

impl Default for Store {
    fn default() -> Store {
        Store::new()
    }
}

impl Store {
    /// An empty store.
    pub fn new() -> Store {
        Store {
            shards: (0..SHARDS).map(|_| Padded::default()).collect(),
        }
    }

    /// Locks the shard `key` belongs to. Hold it only for memory work:
    /// see the module documentation.
    pub fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        // FNV-1a: the shard only spreads the load; the map inside has its
        // own (keyed) hash.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in key {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.shards[((h ^ (h >> 32)) as usize) & (SHARDS - 1)]
            .0
            .lock()
    }

    /// Removes every key. The memory is freed after each shard's lock is
    /// released.
    pub fn flush(&self) {
        for s in self.shards.iter() {
            let old = std::mem::take(&mut *s.0.lock());
            drop(old);
        }
    }

    /// Keys in the store, expired ones not yet removed included (as
    /// redis-server's `DBSIZE`).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().len()).sum()
    }

    /// Removes keys whose deadline has passed by `now`, at most
    /// [`SWEEP_BUDGET`] from each shard; how many it removed.
    pub fn sweep(&self, now: Instant) -> usize {
        self.shards
            .iter()
            .map(|s| s.0.lock().sweep(now, SWEEP_BUDGET))
            .sum()
    }
}
