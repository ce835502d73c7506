//! With the `tracing` feature: a task's spans follow it across switches
//! (`gofer::trace`). One global subscriber for the whole file (the
//! Processer threads see only the global default): a registry with gofer's
//! layer and a layer capturing, for each event with a `tag` field, the
//! spans in its scope. Each test uses tags and span names of its own.
#![cfg(feature = "tracing")]

use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use gofer::Scheduler;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// An event the capturing layer saw: its tag and its scope, root first,
/// each span as `name{fields}`.
#[derive(Clone, Debug)]
struct Seen {
    tag: String,
    scope: Vec<String>,
}

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());

/// A span's fields as text, kept in its extensions.
#[derive(Default)]
struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, "{}={:?};", field.name(), value);
    }
}

#[derive(Default)]
struct Tag(Option<String>);

impl Visit for Tag {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "tag" {
            self.0 = Some(value.to_string());
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

struct Capture;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut f = Fields::default();
        attrs.record(&mut f);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(f);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut tag = Tag::default();
        event.record(&mut tag);
        let Some(tag) = tag.0 else { return };
        let scope = ctx
            .event_scope(event)
            .map(|s| {
                s.from_root()
                    .map(|span| {
                        let ext = span.extensions();
                        let f = ext.get::<Fields>().map(|f| f.0.as_str()).unwrap_or("");
                        format!("{}{{{}}}", span.name(), f)
                    })
                    .collect()
            })
            .unwrap_or_default();
        SEEN.lock().unwrap().push(Seen { tag, scope });
    }
}

fn init() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let subscriber = tracing_subscriber::registry()
            .with(gofer::trace::layer())
            .with(Capture);
        tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
    });
}

/// The events seen with tags starting with `prefix`, in order.
fn seen(prefix: &str) -> Vec<Seen> {
    SEEN.lock()
        .unwrap()
        .iter()
        .filter(|s| s.tag.starts_with(prefix))
        .cloned()
        .collect()
}

fn one_processer(name: &str) -> Scheduler {
    Scheduler::builder()
        .min_threads(1)
        .max_threads(1)
        .name(name)
        .build()
        .expect("valid scheduler config")
}

fn has_span(s: &Seen, name: &str) -> bool {
    s.scope
        .iter()
        .any(|sp| sp.starts_with(&format!("{name}{{")))
}

/// The `id` of the `task` span in the event's scope.
fn task_id(s: &Seen) -> Option<u64> {
    let t = s.scope.iter().find(|sp| sp.starts_with("task{"))?;
    let rest = t.strip_prefix("task{id=")?;
    rest.split(';').next()?.parse().ok()
}

#[test]
fn each_event_carries_its_own_tasks_spans_across_interleaved_parks() {
    init();
    let s = one_processer("trace-interleave");
    const N: usize = 300;
    // Ping-pong: each task parks in every round inside its own spans, and
    // the other runs meanwhile on the same thread.
    let (to_b, from_a) = gofer::chan::unbounded::<usize>();
    let (to_a, from_b) = gofer::chan::unbounded::<usize>();
    let a = s.spawn(move || {
        let _outer = tracing::info_span!("outer_a").entered();
        let _inner = tracing::info_span!("inner_a").entered();
        for i in 0..N {
            tracing::info!(tag = "ileave-a", i);
            to_b.send(i).unwrap();
            from_b.recv().unwrap();
            tracing::info!(tag = "ileave-a", i);
            gofer::yield_now();
        }
    });
    let b = s.spawn(move || {
        let _span = tracing::info_span!("span_b").entered();
        for i in 0..N {
            from_a.recv().unwrap();
            tracing::info!(tag = "ileave-b", i);
            to_a.send(i).unwrap();
            gofer::yield_now();
            tracing::info!(tag = "ileave-b", i);
        }
    });
    let ids = (a.id().as_u64(), b.id().as_u64());
    a.join().unwrap();
    b.join().unwrap();
    let (a, b) = ids;
    let all = seen("ileave-");
    assert_eq!(all.len(), 4 * N);
    // Interleaved: the tags change many times along the sequence.
    let turns = all.windows(2).filter(|w| w[0].tag != w[1].tag).count();
    assert!(turns >= N, "only {turns} turns between the tasks");
    for e in &all {
        if e.tag == "ileave-a" {
            assert!(has_span(e, "outer_a") && has_span(e, "inner_a"), "{e:?}");
            assert!(!has_span(e, "span_b"), "a's event in b's span: {e:?}");
            assert_eq!(task_id(e), Some(a), "{e:?}");
            // Root first: the task's span, then its own, in entering order.
            let names: Vec<_> = e
                .scope
                .iter()
                .map(|s| s.split('{').next().unwrap())
                .collect();
            assert_eq!(names, ["task", "outer_a", "inner_a"], "{e:?}");
        } else {
            assert!(has_span(e, "span_b"), "{e:?}");
            assert!(
                !has_span(e, "outer_a") && !has_span(e, "inner_a"),
                "b's event in a's span: {e:?}"
            );
            assert_eq!(task_id(e), Some(b), "{e:?}");
            assert_eq!(e.scope.len(), 2, "{e:?}");
        }
    }
    // Both switch paths ran: through the loop, and task to task.
    let p = &s.stats().processers[0];
    assert!(
        p.direct_switches > 0 && p.switches > p.direct_switches,
        "{p:?}"
    );
    s.shutdown();
}

/// Parks in its destructor, then logs: an unwind that switches out.
struct ParkThenLog(&'static str);

impl Drop for ParkThenLog {
    fn drop(&mut self) {
        gofer::sleep(Duration::from_millis(5));
        tracing::info!(tag = self.0);
    }
}

#[test]
fn a_task_that_panics_in_a_span_leaves_it_with_its_unwind() {
    init();
    let s = one_processer("trace-panic");
    let p = s.spawn(|| {
        let _span = tracing::info_span!("span_p").entered();
        let _d = ParkThenLog("panic-p-unwind");
        gofer::sleep(Duration::from_millis(5));
        tracing::info!(tag = "panic-p");
        panic!("inside span_p");
    });
    // Runs while `p` is parked, before and in the middle of its unwind.
    let q = s.spawn(|| {
        for _ in 0..20 {
            tracing::info!(tag = "panic-q");
            gofer::sleep(Duration::from_millis(1));
        }
    });
    assert!(p.join().is_err());
    q.join().unwrap();
    // After both: a new task on the same thread, in no span of theirs.
    s.spawn(|| tracing::info!(tag = "panic-after"))
        .join()
        .unwrap();
    let all = seen("panic-");
    for e in &all {
        match e.tag.as_str() {
            "panic-p" | "panic-p-unwind" => assert!(has_span(e, "span_p"), "{e:?}"),
            _ => assert!(!has_span(e, "span_p"), "{e:?}"),
        }
        assert_eq!(
            e.scope.len(),
            1 + usize::from(e.tag.starts_with("panic-p")),
            "{e:?}"
        );
    }
    assert!(all.iter().any(|e| e.tag == "panic-p-unwind"));
    assert_eq!(all.iter().filter(|e| e.tag == "panic-q").count(), 20);
    s.shutdown();
}

#[test]
fn a_task_cancelled_in_a_span_leaves_it_with_its_unwind() {
    init();
    let s = one_processer("trace-cancel");
    let (_tx, rx) = gofer::chan::bounded::<()>(0);
    let c = s.spawn(move || {
        let _span = tracing::info_span!("span_c").entered();
        let _d = ParkThenLog("cancel-c-unwind");
        tracing::info!(tag = "cancel-c");
        let _ = rx.recv(); // waits for ever, until cancelled
    });
    let q = s.spawn(|| {
        for _ in 0..20 {
            tracing::info!(tag = "cancel-q");
            gofer::sleep(Duration::from_millis(1));
        }
    });
    std::thread::sleep(Duration::from_millis(5));
    c.cancel();
    assert!(c.join().unwrap_err().is_cancelled());
    q.join().unwrap();
    s.spawn(|| tracing::info!(tag = "cancel-after"))
        .join()
        .unwrap();
    let all = seen("cancel-");
    for e in &all {
        match e.tag.as_str() {
            "cancel-c" | "cancel-c-unwind" => assert!(has_span(e, "span_c"), "{e:?}"),
            _ => assert!(!has_span(e, "span_c"), "{e:?}"),
        }
    }
    assert!(all.iter().any(|e| e.tag == "cancel-c-unwind"));
    assert!(all.iter().any(|e| e.tag == "cancel-after"));
    s.shutdown();
}
