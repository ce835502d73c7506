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
//!
//! Deadlines are plain nanosecond counts (from an epoch the caller picks),
//! so a comparison is two integer compares, and a node is 24 bytes. Taking
//! the earliest entry moves the hole it leaves down to a leaf along the
//! earlier children, then fills it with the last node and sifts that up
//! (Floyd's bottom-up pop): the last node is usually among the latest (a
//! burst of sleeps of one length inserts in deadline order), so it rarely
//! rises, and each level costs the `ARITY - 1` compares between children
//! only. Taking the entries of 10,000 sleepers fired from one queue cost
//! 1,075 instructions per entry with `Instant` keys and a swap per level,
//! and costs 594 this way (callgrind, `bench/benches/tools/callgrind_sleep.rs`).

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

#[derive(Clone, Copy)]
struct Node {
    /// The deadline, in nanoseconds from the caller's epoch.
    deadline: u64,
    seq: u64,
    slot: u32,
}

impl Node {
    /// The order of the heap: by deadline, then by insertion.
    #[inline]
    fn key(&self) -> u128 {
        (u128::from(self.deadline) << 64) | u128::from(self.seq)
    }

    #[inline]
    fn before(&self, other: &Node) -> bool {
        // One wide compare, no branch per field.
        self.key() < other.key()
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
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.nodes.first().map(|n| n.deadline)
    }

    /// Adds `action` due at `deadline` (nanoseconds).
    pub(crate) fn insert(&mut self, deadline: u64, action: A) -> TimerKey {
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
        let entry = &mut self.slots[slot as usize];
        entry.gen = gen;
        entry.action = Some(action);
        let node = Node {
            deadline,
            seq: gen,
            slot,
        };
        self.nodes.push(node);
        self.sift_up(self.nodes.len() - 1, node);
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

    /// Takes the earliest entry if its deadline is at or before `now`
    /// (nanoseconds).
    pub(crate) fn pop_due(&mut self, now: u64) -> Option<A> {
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
        let node = self.nodes[pos];
        let last = self.nodes.pop().expect("non-empty");
        if pos < self.nodes.len() {
            // `last` fills the hole at `pos`. The root (a pop) takes the
            // bottom-up way: the hole goes down to a leaf, then `last`
            // rises from there. Elsewhere (a removal by key) `last` may
            // belong above or below `pos`.
            if pos == 0 {
                let leaf = self.hole_to_leaf(0);
                self.sift_up(leaf, last);
            } else if last.before(&self.nodes[(pos - 1) / ARITY]) {
                self.sift_up(pos, last);
            } else {
                self.sift_down(pos, last);
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

    /// Writes `node` at `pos` and records its position in its slot.
    #[inline]
    fn place(&mut self, pos: usize, node: Node) {
        self.slots[node.slot as usize].pos = pos;
        self.nodes[pos] = node;
    }

    /// The earliest of the children of `pos` and its position, if it has
    /// any.
    #[inline]
    fn earliest_child(&self, pos: usize) -> Option<(usize, Node)> {
        let first = pos * ARITY + 1;
        let end = (first + ARITY).min(self.nodes.len());
        let kids = self.nodes.get(first..end)?;
        let (mut best, mut node) = (0, *kids.first()?);
        for (i, k) in kids.iter().enumerate().skip(1) {
            if k.before(&node) {
                (best, node) = (i, *k);
            }
        }
        Some((first + best, node))
    }

    /// Moves the hole at `pos` down to a leaf, pulling the earlier child up
    /// at each level; returns the leaf's position (the hole).
    fn hole_to_leaf(&mut self, mut pos: usize) -> usize {
        while let Some((c, child)) = self.earliest_child(pos) {
            self.place(pos, child);
            pos = c;
        }
        pos
    }

    /// Puts `node` in the hole at `pos`, moving it up past later parents.
    fn sift_up(&mut self, mut pos: usize, node: Node) {
        while pos > 0 {
            let parent = (pos - 1) / ARITY;
            let p = self.nodes[parent];
            if !node.before(&p) {
                break;
            }
            self.place(pos, p);
            pos = parent;
        }
        self.place(pos, node);
    }

    /// Puts `node` in the hole at `pos`, moving it down past earlier
    /// children.
    fn sift_down(&mut self, mut pos: usize, node: Node) {
        while let Some((c, child)) = self.earliest_child(pos) {
            if !child.before(&node) {
                break;
            }
            self.place(pos, child);
            pos = c;
        }
        self.place(pos, node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ms` milliseconds after `base`, in nanoseconds.
    fn at(base: u64, ms: u64) -> u64 {
        base + ms * 1_000_000
    }

    #[test]
    fn pops_in_deadline_order_then_insertion_order() {
        let base = 1_000_000_007;
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
        let base = 1_000_000_007;
        let mut h = TimerHeap::default();
        h.insert(at(base, 5), 'a');
        h.insert(at(base, 15), 'b');
        assert_eq!(h.pop_due(at(base, 10)), Some('a'));
        assert_eq!(h.pop_due(at(base, 10)), None);
        assert_eq!(h.next_deadline(), Some(at(base, 15)));
    }

    #[test]
    fn removal_by_key_keeps_the_order_of_the_rest() {
        let base = 1_000_000_007;
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
        let base = 1_000_000_007;
        let mut h = TimerHeap::default();
        let old = h.insert(at(base, 1), "old");
        h.insert(at(base, 2), "keep"); // keeps the slot table alive
        assert_eq!(h.pop_due(at(base, 1)), Some("old"));
        let new = h.insert(at(base, 3), "new");
        assert_eq!(old.slot, new.slot, "the slot was reused");
        assert_eq!(h.remove(old), None);
        assert_eq!(h.remove(new), Some("new"));
    }

    /// Random inserts (many of equal deadlines), removals by key, pops and
    /// pops of everything due, checked against a sorted model after every
    /// step: the order is (deadline, insertion), and each slot's recorded
    /// position names the node that points back at it.
    #[test]
    fn matches_a_sorted_model_under_random_operations() {
        use std::collections::BTreeMap;
        let mut rng = 0x2545_F491_4F6C_DD1D_u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut h = TimerHeap::default();
        // (deadline, insertion number) -> (key, value)
        let mut model: BTreeMap<(u64, u64), (TimerKey, u64)> = BTreeMap::new();
        let mut inserted = 0u64;
        for step in 0..20_000u64 {
            match next(10) {
                0..=4 => {
                    // Deadlines from a narrow range: many ties.
                    let d = next(200);
                    let k = h.insert(d, step);
                    model.insert((d, inserted), (k, step));
                    inserted += 1;
                }
                5 | 6 if !model.is_empty() => {
                    let nth = next(model.len() as u64) as usize;
                    let (&id, &(k, v)) = model.iter().nth(nth).unwrap();
                    model.remove(&id);
                    assert_eq!(h.remove(k), Some(v));
                    assert_eq!(h.remove(k), None);
                }
                7 | 8 => {
                    let now = next(200);
                    while let Some(v) = h.pop_due(now) {
                        let (&id, &(_, want)) = model.iter().next().unwrap();
                        assert!(id.0 <= now);
                        assert_eq!(v, want);
                        model.remove(&id);
                    }
                    assert!(model.keys().next().is_none_or(|id| id.0 > now));
                }
                _ => {
                    if let Some(v) = h.pop_due(u64::MAX) {
                        let (&id, &(_, want)) = model.iter().next().unwrap();
                        assert_eq!(v, want);
                        model.remove(&id);
                    }
                }
            }
            assert_eq!(h.len(), model.len());
            assert_eq!(h.next_deadline(), model.keys().next().map(|id| id.0));
            for (i, n) in h.nodes.iter().enumerate() {
                assert_eq!(h.slots[n.slot as usize].pos, i);
                if i > 0 {
                    assert!(!n.before(&h.nodes[(i - 1) / ARITY]), "heap order");
                }
            }
        }
    }

    #[test]
    fn an_emptied_heap_releases_its_memory() {
        let base = 1_000_000_007;
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
