//! Generators: a fiber seen as an iterator. Items in order, the end, early
//! drops that unwind (every destructor counted), panics, nested yields.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use gofer::fiber::{Builder, Generator, Yielder};

struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_generator_yields_its_items_in_order_then_ends_for_good() {
    let mut g = Generator::new(|y| {
        for i in 0..5u32 {
            y.yield_(i * i)
        }
    });
    let items: Vec<u32> = g.by_ref().collect();
    assert_eq!(items, [0, 1, 4, 9, 16]);
    assert!(g.is_finished());
    assert_eq!(g.next(), None, "fused: nothing after the end");
    assert_eq!(g.next(), None);
}

#[test]
fn an_infinite_generator_cut_short_unwinds_its_stack() {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let g = Generator::new(move |y| {
        let _held = Counted(d.clone());
        for i in 0u64.. {
            let _per_item = Counted(d.clone());
            y.yield_(i)
        }
    });
    let first: Vec<u64> = g.take(3).collect();
    assert_eq!(first, [0, 1, 2]);
    // `take` dropped the generator: two items' values were dropped as the
    // loop went on, and the third one and the held one by the unwind.
    assert_eq!(drops.load(Ordering::SeqCst), 4);
}

#[test]
fn a_panic_in_a_generator_comes_out_of_next_and_ends_it() {
    let mut g = Generator::new(|y| {
        y.yield_(1);
        panic!("generator failed");
    });
    assert_eq!(g.next(), Some(1));
    let err = catch_unwind(AssertUnwindSafe(|| g.next())).expect_err("the panic came out");
    assert_eq!(err.downcast_ref::<&str>(), Some(&"generator failed"));
    assert!(g.is_finished());
    assert_eq!(g.next(), None);
}

#[test]
fn a_generator_yields_from_nested_calls() {
    enum Tree {
        Leaf(u32),
        Node(Box<Tree>, Box<Tree>),
    }
    fn walk(t: &Tree, y: &Yielder<(), u32>) {
        match t {
            Tree::Leaf(v) => y.yield_(*v),
            Tree::Node(l, r) => {
                walk(l, y);
                walk(r, y);
            }
        }
    }
    fn build(lo: u32, hi: u32) -> Tree {
        if lo == hi {
            Tree::Leaf(lo)
        } else {
            let mid = (lo + hi) / 2;
            Tree::Node(Box::new(build(lo, mid)), Box::new(build(mid + 1, hi)))
        }
    }
    let tree = build(1, 1000);
    let g = Generator::new(move |y| walk(&tree, y));
    let leaves: Vec<u32> = g.collect();
    assert_eq!(leaves, (1..=1000).collect::<Vec<_>>());
}

#[test]
fn generators_interleave_on_one_thread() {
    let evens = Generator::new(|y| (0..10u32).step_by(2).for_each(|i| y.yield_(i)));
    let odds = Generator::new(|y| (1..10u32).step_by(2).for_each(|i| y.yield_(i)));
    let pairs: Vec<(u32, u32)> = evens.zip(odds).collect();
    assert_eq!(pairs, [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9)]);
}

#[test]
fn the_builder_makes_generators_with_options() {
    let g = Builder::new()
        .name("counter")
        .stack_size(gofer::MIN_STACK_SIZE)
        .generator(|y| (0..3u8).for_each(|i| y.yield_(i)))
        .expect("a valid size");
    assert_eq!(g.collect::<Vec<_>>(), [0, 1, 2]);
    assert!(Builder::new()
        .stack_size(1)
        .generator(|y: &Yielder<(), u8>| y.yield_(0))
        .is_err());
}
