//! The [`select!`](crate::select) macro: wait on several channel operations
//! and run the arm of the one that completes.
//!
//! The macro parses its arms into a normal form (`@list`), checks each arm
//! and gives every one its own hidden variables (`@parse`; every expansion
//! step makes fresh hygienic names, so arms never clash), then expands to a
//! call of the selection algorithm in `selector.rs` (`@gen`).

/// Waits on several channel operations and runs the arm of the one that
/// completes, with the syntax of `crossbeam_channel::select!`.
///
/// ```text
/// select! {
///     recv(receiver) -> result => body,      // result: Result<T, RecvError>
///     send(sender, value) -> result => body, // result: Result<(), SendError<T>>
///     cancelled(token) => body,              // a CancelToken was cancelled
///     default => body,                       // optional: do not wait
///     default(timeout) => body,              // optional: wait at most `timeout`
/// }
/// ```
///
/// - Exactly one operation completes. When several are ready, one is picked
///   at random, so every ready arm gets a fair share.
/// - A receive on a disconnected, empty channel and a send on a
///   disconnected channel are ready at once: the arm runs with the error.
/// - With no arm ready, the task parks once, registered on every channel; the
///   first channel to fire wins. Without `default`, it waits for ever.
/// - The channel and value expressions are evaluated once, in order, before
///   anything waits (as in Go's `select`). The value of a `send` arm that
///   is not chosen is dropped.
/// - A body may be a block (no comma needed after it) or an expression, and
///   may `break`, `continue` or `return` from the enclosing code; the
///   operations are finished (channels no longer borrowed) before it runs.
/// - `select! {}` waits for ever.
/// - `cancelled(token)` is ready once the
///   [`CancelToken`](crate::task::CancelToken) `token` is cancelled: it is
///   a `recv` arm on [`token.done()`](crate::task::CancelToken::done), a
///   channel that disconnects on cancel. A task's end, a timer or any other
///   event that can be made a channel goes in the same way: see
///   [`chan::after`](crate::chan::after) and [`chan::tick`](crate::chan::tick)
///   for timers, and [`CancelToken::drop_guard`](crate::task::CancelToken::drop_guard)
///   for a task's end.
///
/// ```
/// use std::time::Duration;
/// use gofer::chan::{bounded, unbounded};
///
/// let (tx1, rx1) = unbounded::<i32>();
/// let (tx2, rx2) = bounded::<&str>(1);
/// tx2.send("hello").unwrap();
///
/// let got = gofer::select! {
///     recv(rx1) -> v => format!("rx1: {:?}", v),
///     recv(rx2) -> v => format!("rx2: {}", v.unwrap()),
///     default(Duration::from_secs(1)) => "timeout".to_string(),
/// };
/// assert_eq!(got, "rx2: hello");
///
/// // A send arm, and `default` when nothing is ready.
/// let (tx3, rx3) = bounded::<i32>(0);
/// gofer::select! {
///     send(tx3, 5) -> res => panic!("no receiver waits: {res:?}"),
///     default => {}
/// }
/// drop((tx1, rx3));
/// ```
#[macro_export]
macro_rules! select {
    () => {
        loop {
            $crate::park();
        }
    };
    ($($tokens:tt)+) => {
        $crate::__gofer_select!(@list ($($tokens)+) ())
    };
}

/// The implementation of [`select!`](crate::select).
#[doc(hidden)]
#[macro_export]
macro_rules! __gofer_select {
    // ---- @list: split the input into `case args [-> res] => { body },` ----
    (@list () ($($head:tt)*)) => {
        $crate::__gofer_select!(@parse ($($head)*) () () () () (0))
    };
    (@list (default => $($tail:tt)*) ($($head:tt)*)) => {
        $crate::__gofer_select!(@list (default () => $($tail)*) ($($head)*))
    };
    // A block body followed by a comma.
    (@list ($case:ident $args:tt $(-> $res:pat)? => { $($body:tt)* }, $($tail:tt)*)
        ($($head:tt)*)) => {
        $crate::__gofer_select!(@list ($($tail)*)
            ($($head)* $case $args $(-> $res)? => { $($body)* },))
    };
    // An expression body followed by a comma.
    (@list ($case:ident $args:tt $(-> $res:pat)? => $body:expr, $($tail:tt)*)
        ($($head:tt)*)) => {
        $crate::__gofer_select!(@list ($($tail)*)
            ($($head)* $case $args $(-> $res)? => { $body },))
    };
    // A block body needs no comma.
    (@list ($case:ident $args:tt $(-> $res:pat)? => { $($body:tt)* } $($tail:tt)*)
        ($($head:tt)*)) => {
        $crate::__gofer_select!(@list ($($tail)*)
            ($($head)* $case $args $(-> $res)? => { $($body)* },))
    };
    // The last arm, without a comma.
    (@list ($case:ident $args:tt $(-> $res:pat)? => $body:expr) ($($head:tt)*)) => {
        $crate::__gofer_select!(@list () ($($head)* $case $args $(-> $res)? => { $body },))
    };
    (@list ($($tail:tt)*) ($($head:tt)*)) => {
        ::core::compile_error!(
            "gofer::select!: expected arms `recv(r) -> res => body`, \
             `send(s, value) -> res => body`, `cancelled(token) => body`, \
             `default => body` or \
             `default(timeout) => body`, separated by commas"
        )
    };

    // ---- @parse: check each arm; collect (index, names, arm) ----
    // @parse (arms left) (declarations) (arm setup) (arms) (default) index
    (@parse () ($($decl:tt)*) ($($setup:tt)*) ($($arms:tt)*) ($($default:tt)*) $idx:tt) => {
        $crate::__gofer_select!(@gen ($($decl)*) ($($setup)*) ($($arms)*) ($($default)*))
    };
    (@parse (recv($r:expr $(,)?) -> $res:pat => $body:block, $($tail:tt)*)
        ($($decl:tt)*) ($($setup:tt)*) ($($arms:tt)*) ($($default:tt)*) $idx:tt) => {
        $crate::__gofer_select!(@parse ($($tail)*)
            ($($decl)* let mut __out = ::core::option::Option::None;)
            ($($setup)*
                let __chan = &$r;
                let mut __arm = $crate::chan::__private::RecvArm::new(__chan);)
            ($($arms)* [$idx __arm __out ($res) $body])
            ($($default)*)
            ($idx + 1))
    };
    (@parse (send($s:expr, $v:expr $(,)?) -> $res:pat => $body:block, $($tail:tt)*)
        ($($decl:tt)*) ($($setup:tt)*) ($($arms:tt)*) ($($default:tt)*) $idx:tt) => {
        $crate::__gofer_select!(@parse ($($tail)*)
            ($($decl)* let mut __out = ::core::option::Option::None;)
            ($($setup)*
                let __chan = &$s;
                let mut __arm = $crate::chan::__private::SendArm::new(__chan, $v);)
            ($($arms)* [$idx __arm __out ($res) $body])
            ($($default)*)
            ($idx + 1))
    };
    (@parse (cancelled($t:expr $(,)?) => $body:block, $($tail:tt)*)
        ($($decl:tt)*) ($($setup:tt)*) ($($arms:tt)*) ($($default:tt)*) $idx:tt) => {
        $crate::__gofer_select!(@parse ($($tail)*)
            ($($decl)* let mut __out = ::core::option::Option::None;)
            ($($setup)*
                let __token = &$t;
                let __chan = $crate::chan::__private::CancelSource::cancel_channel(__token);
                let mut __arm = $crate::chan::__private::RecvArm::new(__chan);)
            ($($arms)* [$idx __arm __out (_) $body])
            ($($default)*)
            ($idx + 1))
    };
    (@parse (default() => $body:block, $($tail:tt)*)
        ($($decl:tt)*) ($($setup:tt)*) ($($arms:tt)*) () $idx:tt) => {
        $crate::__gofer_select!(@parse ($($tail)*) ($($decl)*) ($($setup)*) ($($arms)*)
            (($crate::chan::__private::Mode::Now) $body) $idx)
    };
    (@parse (default($t:expr $(,)?) => $body:block, $($tail:tt)*)
        ($($decl:tt)*) ($($setup:tt)*) ($($arms:tt)*) () $idx:tt) => {
        $crate::__gofer_select!(@parse ($($tail)*) ($($decl)*) ($($setup)*) ($($arms)*)
            (($crate::chan::__private::Mode::timeout($t)) $body) $idx)
    };
    (@parse (default $($tail:tt)*) $decl:tt $setup:tt $arms:tt ($($default:tt)+) $idx:tt) => {
        ::core::compile_error!("gofer::select!: more than one `default` arm")
    };
    (@parse (recv $($tail:tt)*) $($rest:tt)*) => {
        ::core::compile_error!("gofer::select!: expected `recv(receiver) -> result => body`")
    };
    (@parse (send $($tail:tt)*) $($rest:tt)*) => {
        ::core::compile_error!("gofer::select!: expected `send(sender, value) -> result => body`")
    };
    (@parse (default $($tail:tt)*) $($rest:tt)*) => {
        ::core::compile_error!("gofer::select!: expected `default => body` or `default(timeout) => body`")
    };
    (@parse (cancelled $($tail:tt)*) $($rest:tt)*) => {
        ::core::compile_error!("gofer::select!: expected `cancelled(token) => body`")
    };
    (@parse ($case:ident $($tail:tt)*) $($rest:tt)*) => {
        ::core::compile_error!(::core::concat!(
            "gofer::select!: expected `recv`, `send`, `cancelled` or `default`, found `",
            ::core::stringify!($case),
            "`"
        ))
    };

    // ---- @gen: the expansion ----
    (@gen ($($decl:tt)*) ($($setup:tt)*)
        ($([$idx:tt $arm:ident $out:ident ($res:pat) $body:block])*)
        ($($default:tt)*)) => {{
        $($decl)*
        let __selected = {
            $($setup)*
            let __selected = $crate::chan::__private::select(
                [$($arm.arm()),*],
                $crate::__gofer_select!(@mode $($default)*),
            );
            $(
                if __selected == ::core::option::Option::Some($idx) {
                    $out = ::core::option::Option::Some($arm.into_result());
                }
            )*
            __selected
            // The arms drop here: unchosen send values are dropped and the
            // channels are no longer borrowed while a body runs.
        };
        match __selected {
            $(
                ::core::option::Option::Some(__i) if __i == $idx => {
                    let $res = $out.expect("gofer::select!: the selected arm has a result");
                    $body
                }
            )*
            _ => $crate::__gofer_select!(@default $($default)*),
        }
    }};
    (@mode) => { $crate::chan::__private::Mode::Block };
    (@mode ($mode:expr) $body:block) => { $mode };
    (@default) => { ::core::unreachable!("gofer::select!: no arm completed") };
    (@default ($mode:expr) $body:block) => { $body };
}
