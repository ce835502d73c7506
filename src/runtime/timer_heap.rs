//! An indexed min-heap of deadlines: insert, remove by key and pop the
//! earliest, each in `O(log n)`, with no allocation in steady state.
//!
//! A timed wait that ends early (a `recv_timeout` answered at once, a lock
//! that was released) removes its entry there and then, so a finished wait
//! leaves nothing behind: no entry that waits for its original deadline, no
//! memory held for it. That is what a plain `BinaryHeap` cannot do.
//!
//! ```text
//!   nodes (4-ary heap, earliest first)      slots (stable, reused)
//!   +----------------------------+          +-------------------------+
//!   | deadline, seq, slot: 3 ----+--------> | 3: gen 41, pos 0, action|
//!   | deadline, seq, slot: 0     |          | 0: gen 40, pos 1, action|
//!   ...                                     ...
//!   +----------------------------+          +-------------------------+
//! ```
//!
//! A [`TimerKey`] names a slot and the generation it was issued with. Every
//! insert takes a fresh generation from a counter of the heap, so a key
//! whose entry already fired (or was removed) never matches the slot's next
//! occupant: `remove` with a stale key is a harmless `None`. Slots are
//! reused through a free list, and when the heap empties the slot table is
//! released too, so memory follows the number of *pending* timers.
//!
//! Ties between equal deadlines are broken by insertion order (`seq`), so
//! timers with one deadline fire first in, first out.

use std::time::Instant;

/// Children per heap node. A 4-ary heap is shallower than a binary one
/// (fewer cache misses per sift) at the price of more compares per level.
const ARITY: usize = 4;

/// Slot tables larger than this are released when the heap empties.
const KEEP_SLOTS: usize = 1024;

/// Names one inserted entry; see the module docs for why a stale key is
/// harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerKey {
    slot: u32,
    gen: u64,
}

struct Node {
    deadline: Instant,
    seq: u64,
    slot: u32,
}

impl Node {
    fn before(&self, other: &Node) -> bool {
        (self.deadline, self.seq) < (other.deadline, other.seq)
    }
}

struct Slot<A> {
    /// The generation of the key issued for the current occupant.
    gen: u64,
    /// The occupant's index in `nodes`; meaningless while free.
    pos: usize,
    /// `None` while the slot is free.
    action: Option<A>,
}

/// The heap; see the module docs.
pub(crate) struct TimerHeap<A> {
    nodes: Vec<Node>,
    slots: Vec<Slot<A>>,
    free: Vec<u32>,
    /// The next generation (for keys) and sequence number (for ties).
    next: u64,
}

impl<A> Default for TimerHeap<A> {
    fn default() -> Self {
        TimerHeap {
            nodes: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            next: 0,
        }
    }
}

impl<A> TimerHeap<A> {
    /// Entries pending.
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The earliest deadline, if any entry is pending.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.nodes.first().map(|n| n.deadline)
    }

    /// Adds `action` due at `deadline`.
    pub(crate) fn insert(&mut self, deadline: Instant, action: A) -> TimerKey {
        let gen = self.next;
        self.next += 1;
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                let s = u32::try_from(self.slots.len()).expect("fewer than 2^32 timers");
                self.slots.push(Slot {
                    gen,
                    pos: 0,
                    action: None,
                });
                s
            }
        };
        let pos = self.nodes.len();
        let entry = &mut self.slots[slot as usize];
        entry.gen = gen;
        entry.pos = pos;
        entry.action = Some(action);
        self.nodes.push(Node {
            deadline,
            seq: gen,
            slot,
        });
        self.sift_up(pos);
        TimerKey { slot, gen }
    }

    /// Removes the entry `key` names and returns its action, or `None` if it
    /// already left (fired or removed).
    pub(crate) fn remove(&mut self, key: TimerKey) -> Option<A> {
        let s = self.slots.get(key.slot as usize)?;
        if s.gen != key.gen || s.action.is_none() {
            return None;
        }
        let pos = s.pos;
        Some(self.take_at(pos))
    }

    /// Takes the earliest entry if its deadline is at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<A> {
        if self.nodes.first()?.deadline > now {
            return None;
        }
        Some(self.take_at(0))
    }

    /// Takes every entry out, in no particular order.
    pub(crate) fn drain(&mut self) -> Vec<A> {
        self.nodes.clear();
        self.free.clear();
        let out = self.slots.drain(..).filter_map(|s| s.action).collect();
        self.release_if_empty();
        out
    }

    /// Removes the node at `pos`, frees its slot, and restores the heap.
    fn take_at(&mut self, pos: usize) -> A {
        let last = self.nodes.len() - 1;
        self.nodes.swap(pos, last);
        let node = self.nodes.pop().expect("non-empty");
        if pos < self.nodes.len() {
            let moved = self.nodes[pos].slot as usize;
            self.slots[moved].pos = pos;
            // The node moved into `pos` may belong above or below it.
            if pos > 0 && self.nodes[pos].before(&self.nodes[(pos - 1) / ARITY]) {
                self.sift_up(pos);
            } else {
                self.sift_down(pos);
            }
        }
        let action = self.slots[node.slot as usize]
            .action
            .take()
            .expect("a heap node's slot is occupied");
        self.free.push(node.slot);
        self.release_if_empty();
        action
    }

    /// An empty heap gives back its memory, so a burst of timers leaves
    /// nothing behind once they are gone.
    fn release_if_empty(&mut self) {
        if self.nodes.is_empty() && self.slots.len() > KEEP_SLOTS {
            self.slots = Vec::new();
            self.free = Vec::new();
            self.nodes = Vec::new();
        } else if self.nodes.is_empty() {
            // Slots all free: forget them so indices stay small.
            self.slots.clear();
            self.free.clear();
        }
    }

    fn sift_up(&mut self, mut pos: usize) {
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            if !self.nodes[pos].before(&self.nodes[parent]) {
                break;
            }
            self.swap_nodes(pos, parent);
            pos = parent;
        }
    }

    fn sift_down(&mut self, mut pos: usize) {
        loop {
            let first = pos * ARITY + 1;
            if first >= self.nodes.len() {
                break;
            }
            let end = (first + ARITY).min(self.nodes.len());
            let mut best = first;
            for c in first + 1..end {
                if self.nodes[c].before(&self.nodes[best]) {
                    best = c;
                }
            }
            if !self.nodes[best].before(&self.nodes[pos]) {
                break;
            }
            self.swap_nodes(pos, best);
            pos = best;
        }
    }

    fn swap_nodes(&mut self, a: usize, b: usize) {
        self.nodes.swap(a, b);
        self.slots[self.nodes[a].slot as usize].pos = a;
        self.slots[self.nodes[b].slot as usize].pos = b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn pops_in_deadline_order_then_insertion_order() {
        let base = Instant::now();
        let mut h = TimerHeap::default();
        for (i, ms) in [50u64, 10, 30, 10, 70, 20, 10].iter().enumerate() {
            h.insert(at(base, *ms), i);
        }
        let mut out = Vec::new();
        while let Some(i) = h.pop_due(at(base, 1000)) {
            out.push(i);
        }
        assert_eq!(out, [1, 3, 6, 5, 2, 0, 4]);
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn pop_due_leaves_future_entries() {
        let base = Instant::now();
        let mut h = TimerHeap::default();
        h.insert(at(base, 5), 'a');
        h.insert(at(base, 15), 'b');
        assert_eq!(h.pop_due(at(base, 10)), Some('a'));
        assert_eq!(h.pop_due(at(base, 10)), None);
        assert_eq!(h.next_deadline(), Some(at(base, 15)));
    }

    #[test]
    fn removal_by_key_keeps_the_order_of_the_rest() {
        let base = Instant::now();
        let mut h = TimerHeap::default();
        // A deterministic shuffle of 1,000 deadlines.
        let keys: Vec<(u64, TimerKey)> = (0..1000u64)
            .map(|i| {
                let ms = (i * 7919) % 1000;
                (ms, h.insert(at(base, ms), ms))
            })
            .collect();
        for (ms, k) in &keys {
            if ms % 3 == 0 {
                assert_eq!(h.remove(*k), Some(*ms));
                assert_eq!(h.remove(*k), None, "a key removes once");
            }
        }
        let mut last = 0;
        let mut n = 0;
        while let Some(ms) = h.pop_due(at(base, 5000)) {
            assert!(ms >= last && ms % 3 != 0);
            last = ms;
            n += 1;
        }
        assert_eq!(n, 1000 - 334);
    }

    #[test]
    fn a_stale_key_never_removes_the_slots_next_occupant() {
        let base = Instant::now();
        let mut h = TimerHeap::default();
        let old = h.insert(at(base, 1), "old");
        h.insert(at(base, 2), "keep"); // keeps the slot table alive
        assert_eq!(h.pop_due(at(base, 1)), Some("old"));
        let new = h.insert(at(base, 3), "new");
        assert_eq!(old.slot, new.slot, "the slot was reused");
        assert_eq!(h.remove(old), None);
        assert_eq!(h.remove(new), Some("new"));
    }

    #[test]
    fn an_emptied_heap_releases_its_memory() {
        let base = Instant::now();
        let mut h = TimerHeap::default();
        let keys: Vec<_> = (0..10_000).map(|i| h.insert(at(base, i), i)).collect();
        for k in keys {
            h.remove(k);
        }
        assert_eq!(h.len(), 0);
        assert_eq!(h.slots.capacity(), 0);
        assert_eq!(h.nodes.capacity(), 0);
        assert_eq!(h.drain(), Vec::<u64>::new());
    }
}
