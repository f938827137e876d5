//! Waiting in line (`--wait`) on both stores.
//!
//! | file | tests |
//! | --- | --- |
//! | [`fair`] | waiters served in arrival order, a free resource reserved for a queued waiter, waiters that give up, are interrupted or die, wake-ups at once |
//!
//! Waiting behind a connection pooler is [`crate::stores::pooler`]'s; a set's place in line,
//! [`crate::locks::sets`]'s.

mod fair;
