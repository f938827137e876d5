//! The store writer's queue: what callers ask of the store, waiting for the writer's next
//! batch, in two lanes, each served by caller in turn.
//!
//! - **Two lanes.** What keeps or ends a tenure a caller already holds (renewals, releases,
//!   a waiter leaving its place, a `break`) goes in the [`Lane::Keep`] lane, which the writer
//!   empties first; acquires, waiters' looks among them, go in the [`Lane::Take`] lane. So a
//!   flood of acquires and waiters never stands between a holder and its renewal: a renewal
//!   waits at most for the batch being committed, then goes first.
//! - **Callers in turn.** Within a lane, each caller (a token; callers without one are one
//!   caller) has a queue of its own, and a batch takes one item from each caller in turn, as
//!   long as there are items and room. A caller that sends ten thousand requests delays another
//!   caller's one request by one item per turn at most, never by the ten thousand.
//! - **No waiting for a batch to fill.** The writer takes whatever is queued when it is free, up
//!   to its bound: a lone request is committed at once, and under load the batch grows by
//!   itself while the previous one commits.
//!
//! Pure bookkeeping, without threads or a store: the writer holds it under a lock.

use std::collections::{HashMap, VecDeque};

use crate::lock::TokenName;

/// Which lane an item goes in (see the module's notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Renewals, releases, leaving a place, breaks: served first.
    Keep,
    /// Acquires.
    Take,
}

/// Items waiting for the writer, by lane and caller.
#[derive(Debug)]
pub struct Lanes<T> {
    keep: Turns<T>,
    take: Turns<T>,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Lanes {
            keep: Turns::default(),
            take: Turns::default(),
        }
    }
}

impl<T> Lanes<T> {
    /// Queues `item` of the caller `token` in `lane`, behind that caller's earlier items.
    pub fn push(&mut self, lane: Lane, token: Option<&TokenName>, item: T) {
        match lane {
            Lane::Keep => self.keep.push(token, item),
            Lane::Take => self.take.push(token, item),
        }
    }

    /// How many items wait.
    pub fn len(&self) -> usize {
        self.keep.len + self.take.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The next batch, at most `most` items: the [`Lane::Keep`] lane first, then the
    /// [`Lane::Take`] lane, each a caller at a time in turn. Each caller's items keep their
    /// order.
    pub fn next_batch(&mut self, most: usize) -> Vec<T> {
        let mut batch = Vec::with_capacity(most.min(self.len()));
        self.keep.take_into(&mut batch, most);
        self.take.take_into(&mut batch, most);
        batch
    }
}

/// One lane: a queue per caller, and the callers with items in the order they are served.
#[derive(Debug)]
struct Turns<T> {
    queues: HashMap<Option<TokenName>, VecDeque<T>>,
    /// Callers with items, the next to be served first.
    order: VecDeque<Option<TokenName>>,
    len: usize,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Turns {
            queues: HashMap::new(),
            order: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T> Turns<T> {
    fn push(&mut self, token: Option<&TokenName>, item: T) {
        let queue = self.queues.entry(token.cloned()).or_default();
        if queue.is_empty() {
            self.order.push_back(token.cloned());
        }
        queue.push_back(item);
        self.len += 1;
    }

    /// Moves items into `batch` until it holds `most` or this lane is empty, a caller at a
    /// time; a caller with items left goes to the back of the turns.
    fn take_into(&mut self, batch: &mut Vec<T>, most: usize) {
        while batch.len() < most {
            let Some(caller) = self.order.pop_front() else {
                return;
            };
            let Some(queue) = self.queues.get_mut(&caller) else {
                continue;
            };
            if let Some(item) = queue.pop_front() {
                batch.push(item);
                self.len -= 1;
            }
            if queue.is_empty() {
                self.queues.remove(&caller);
            } else {
                self.order.push_back(caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(name: &str) -> TokenName {
        TokenName::parse(name).unwrap()
    }

    /// Pushes `items` (lane, caller or "" for none, label) and takes batches of `most` until
    /// the lanes are empty: the labels of each batch.
    fn batches(items: &[(Lane, &str, &str)], most: usize) -> Vec<Vec<String>> {
        let mut lanes = Lanes::default();
        for (lane, caller, label) in items {
            let caller = (!caller.is_empty()).then(|| token(caller));
            lanes.push(*lane, caller.as_ref(), (*label).to_owned());
        }
        assert_eq!(lanes.len(), items.len());
        let mut out = Vec::new();
        while !lanes.is_empty() {
            let batch = lanes.next_batch(most);
            assert!(!batch.is_empty() && batch.len() <= most, "{batch:?}");
            out.push(batch);
        }
        out
    }

    /// Items pushed (lane, caller, item), a batch's bound, the batches taken.
    type Case = (
        Vec<(Lane, &'static str, &'static str)>,
        usize,
        Vec<Vec<&'static str>>,
    );

    #[test]
    fn holders_go_first_and_callers_take_turns_each_in_its_own_order() {
        use Lane::{Keep, Take};
        let cases: Vec<Case> = vec![
            // One caller: its order, in batches of the bound.
            (
                vec![(Take, "a", "a1"), (Take, "a", "a2"), (Take, "a", "a3")],
                2,
                vec![vec!["a1", "a2"], vec!["a3"]],
            ),
            // A lone item is a batch of its own: nothing waits for a batch to fill.
            (vec![(Take, "", "x")], 64, vec![vec!["x"]]),
            // A renewal queued after a flood of acquires is served first.
            (
                vec![
                    (Take, "a", "a1"),
                    (Take, "a", "a2"),
                    (Take, "a", "a3"),
                    (Keep, "b", "renew"),
                ],
                2,
                vec![vec!["renew", "a1"], vec!["a2", "a3"]],
            ),
            // Callers take turns: b's one acquire does not wait for a's ten.
            (
                vec![
                    (Take, "a", "a1"),
                    (Take, "a", "a2"),
                    (Take, "a", "a3"),
                    (Take, "a", "a4"),
                    (Take, "b", "b1"),
                    (Take, "", "n1"),
                ],
                3,
                vec![vec!["a1", "b1", "n1"], vec!["a2", "a3", "a4"]],
            ),
            // In the holders' lane too, and each caller keeps its own order.
            (
                vec![
                    (Keep, "a", "ra1"),
                    (Keep, "a", "ra2"),
                    (Keep, "b", "rb1"),
                    (Take, "b", "tb1"),
                    (Keep, "b", "rb2"),
                ],
                10,
                vec![vec!["ra1", "rb1", "ra2", "rb2", "tb1"]],
            ),
            // A full holders' lane leaves the acquires for the next batch.
            (
                vec![(Take, "a", "t1"), (Keep, "a", "k1"), (Keep, "b", "k2")],
                2,
                vec![vec!["k1", "k2"], vec!["t1"]],
            ),
        ];
        for (items, most, expected) in cases {
            let got = batches(&items, most);
            let expected: Vec<Vec<String>> = expected
                .iter()
                .map(|b| b.iter().map(|s| (*s).to_owned()).collect())
                .collect();
            assert_eq!(got, expected, "{items:?}, batches of {most}");
        }
    }

    #[test]
    fn a_caller_that_comes_back_after_emptying_its_queue_waits_its_turn_again() {
        let mut lanes = Lanes::default();
        let (a, b) = (token("a"), token("b"));
        lanes.push(Lane::Take, Some(&a), 1);
        lanes.push(Lane::Take, Some(&b), 2);
        assert_eq!(lanes.next_batch(1), [1]);
        lanes.push(Lane::Take, Some(&a), 3);
        // b was waiting before a came back.
        assert_eq!(lanes.next_batch(1), [2]);
        assert_eq!(lanes.next_batch(1), [3]);
        assert!(lanes.is_empty());
        assert_eq!(lanes.next_batch(5), Vec::<i32>::new());
    }
}
