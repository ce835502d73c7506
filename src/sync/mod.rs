//! Coroutine-aware synchronisation primitives: they park the task inside a
//! coroutine and block the thread outside one, and mix freely.
