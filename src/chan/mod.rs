//! Channels that park tasks (and block threads), with `select!`.
