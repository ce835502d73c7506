//! Fibers and generators that borrow: `ScopedFiber` and `ScopedGenerator`
//! run inside their `scope` call, which unwinds them before it returns, so
//! nothing on their stacks outlives what they borrow.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::common;

use common::in_child;
use gofer::fiber::{Builder, FiberResult, ScopedFiber, ScopedGenerator, Yielder};
use gofer::Scheduler;

#[derive(Debug, PartialEq, Eq)]
enum Tok<'a> {
    Ident(&'a str),
    Num(&'a str),
    Punct(&'a str),
}

/// Yields the tokens of `src` one by one, as slices of it.
fn tokens(src: &str) -> ScopedGenerator<'_, Tok<'_>> {
    ScopedGenerator::new(move |y| {
        let bytes = src.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i];
            if c.is_ascii_whitespace() {
                i += 1;
                continue;
            }
            let start = i;
            if c.is_ascii_alphabetic() || c == b'_' {
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                y.yield_(Tok::Ident(&src[start..i]));
            } else if c.is_ascii_digit() {
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
                y.yield_(Tok::Num(&src[start..i]));
            } else {
                i += 1;
                y.yield_(Tok::Punct(&src[start..i]));
            }
        }
    })
}

#[test]
fn a_tokenizer_generator_yields_slices_of_its_borrowed_input() {
    let src = String::from("let x_1 = 42 + foo(7);");
    let toks: Vec<Tok<'_>> = tokens(&src).scope(|g| g.collect());
    use Tok::*;
    assert_eq!(
        toks,
        [
            Ident("let"),
            Ident("x_1"),
            Punct("="),
            Num("42"),
            Punct("+"),
            Ident("foo"),
            Punct("("),
            Num("7"),
            Punct(")"),
            Punct(";"),
        ]
    );
    // Slices of the input itself, not copies.
    let range = src.as_ptr() as usize..src.as_ptr() as usize + src.len();
    for t in &toks {
        let (Ident(s) | Num(s) | Punct(s)) = t;
        assert!(range.contains(&(s.as_ptr() as usize)), "{t:?} is a copy");
    }
}

#[test]
fn a_scoped_fiber_pushes_onto_a_borrowed_vec_at_each_resume() {
    let mut log: Vec<u32> = Vec::new();
    let ret = ScopedFiber::new(|y: &Yielder<u32, usize>, first: u32| {
        log.push(first);
        let mut input = y.suspend(log.len());
        while input != 0 {
            log.push(input * 10);
            input = y.suspend(log.len());
        }
        log.len() as u64
    })
    .scope(|mut f| {
        assert_eq!(f.resume(1), FiberResult::Yield(1));
        assert_eq!(f.resume(2), FiberResult::Yield(2));
        assert_eq!(f.resume(3), FiberResult::Yield(3));
        let r = f.resume(0);
        assert!(f.is_finished());
        r
    });
    assert_eq!(ret, FiberResult::Return(3));
    assert_eq!(log, [1, 20, 30]);
}

/// Counts its drops into a borrowed cell.
struct Counted<'a>(&'a Cell<u32>);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn an_unfinished_borrowing_generator_is_unwound_before_its_scope_returns() {
    let drops = Cell::new(0);
    let firsts: Vec<u64> = ScopedGenerator::new(|y| {
        let _held = Counted(&drops);
        for i in 0u64.. {
            let _per_item = Counted(&drops);
            y.yield_(i)
        }
    })
    .scope(|g| {
        let v: Vec<u64> = g.take(3).collect();
        // Two items' values dropped as the loop went on; the rest is still
        // on the suspended stack.
        assert_eq!(drops.get(), 2);
        v
    });
    assert_eq!(firsts, [0, 1, 2]);
    // The scope unwound the third item's value and the held one.
    assert_eq!(drops.get(), 4);
}

#[test]
fn a_scoped_generator_dropped_before_its_scope_drops_its_closure() {
    let drops = Cell::new(0);
    {
        let held = Counted(&drops);
        let g = ScopedGenerator::new(move |y| {
            let _held = held;
            y.yield_(1u8);
        });
        assert_eq!(drops.get(), 0);
        drop(g); // never ran: the closure and what it owns are dropped
    }
    assert_eq!(drops.get(), 1);
}

#[test]
fn forgetting_the_reference_inside_the_scope_still_unwinds_the_fiber() {
    let drops = Cell::new(0);
    ScopedFiber::new(|y: &Yielder<(), ()>, ()| {
        let _held = Counted(&drops);
        loop {
            y.suspend(())
        }
    })
    .scope(|mut f| {
        assert!(f.resume(()).is_yield());
        // Only a reference: the fiber itself stays in the scope's frame.
        #[allow(clippy::forget_non_drop)]
        std::mem::forget(f);
    });
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_thread_scope_suspended_inside_a_scoped_fiber_ends_before_the_borrow() {
    // The case that makes leaking a borrowing fiber unsound: a scoped thread
    // that uses borrowed data until its `thread::scope` returns. Here the
    // fiber is abandoned while suspended inside that scope; the scope call
    // unwinds it, so the thread finishes before `text` can go away.
    //
    // In a child: a fiber that is not unwound, or unwound in the wrong
    // order, leaves the thread (and so the scope) waiting for good.
    in_child(
        module_path!(),
        "a_thread_scope_suspended_inside_a_scoped_fiber_ends_before_the_borrow",
        || {
            let text = String::from("borrowed text");
            let seen = AtomicUsize::new(0);
            ScopedFiber::new(|y: &Yielder<(), ()>, ()| {
                let (tx, rx) = mpsc::channel::<()>();
                let (text, seen) = (&text, &seen);
                // `tx` moves into the scope's closure: the unwind drops
                // it before `thread::scope` waits for its thread.
                std::thread::scope(move |ts| {
                    ts.spawn(move || {
                        // Until the fiber's frame (and `tx` in it) unwinds.
                        while rx.recv().is_ok() {}
                        seen.store(text.len(), Ordering::SeqCst);
                    });
                    loop {
                        let () = y.suspend(());
                        tx.send(()).unwrap();
                    }
                })
            })
            .scope(|mut f| {
                assert!(f.resume(()).is_yield());
                assert!(f.resume(()).is_yield());
                // Abandoned here, suspended inside `thread::scope`.
            });
            assert_eq!(seen.load(Ordering::SeqCst), text.len());
            drop(text);
        },
    );
}

#[test]
fn a_panic_in_the_scope_callback_unwinds_the_fiber_too() {
    let drops = Cell::new(0);
    let caught = catch_unwind(AssertUnwindSafe(|| {
        ScopedGenerator::new(|y| {
            let _held = Counted(&drops);
            loop {
                y.yield_(())
            }
        })
        .scope(|mut g| {
            g.next();
            panic!("the callback panics");
        })
    }));
    assert!(caught.is_err());
    assert_eq!(drops.get(), 1);
}

#[test]
fn a_panic_in_a_scoped_fiber_comes_out_of_resume() {
    let name = String::from("bad input");
    let caught = catch_unwind(AssertUnwindSafe(|| {
        Builder::new()
            .name("parser")
            .build_scoped(|_: &Yielder<(), ()>, ()| -> u8 { panic!("{name}") })
            .unwrap()
            .scope(|mut f| {
                assert_eq!(f.name(), Some("parser"));
                f.resume(())
            })
    }));
    let p = caught.expect_err("the fiber's panic");
    assert_eq!(
        p.downcast_ref::<String>().map(String::as_str),
        Some("bad input")
    );
}

#[test]
fn a_scoped_generator_inside_a_task_borrows_the_tasks_locals() {
    let s = Scheduler::builder()
        .min_threads(2)
        .name("fb-task")
        .build()
        .unwrap();
    let h = s.spawn(|| {
        let words = vec![String::from("alpha"), String::from("beta")];
        let total = Cell::new(0usize);
        let lens: Vec<usize> = Builder::new()
            .stack_size(64 << 10)
            .scoped_generator(|y| {
                for w in &words {
                    gofer::yield_now(); // the task switches out, fiber and all
                    total.set(total.get() + w.len());
                    y.yield_(w.len());
                }
            })
            .unwrap()
            .scope(|g| g.collect());
        (lens, total.get())
    });
    assert_eq!(h.join().unwrap(), (vec![5, 4], 9));
    s.shutdown();
}
