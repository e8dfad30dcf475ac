//! The call table's storage: entries keyed by call id. A new call takes
//! the id freed last, as a slab does: most often the caller's own last
//! call's, whose entry is still in its core's cache (the lowest free id
//! every time cost calls at 256 in flight; bench log). But
//! once fewer than 128 calls are in flight, ids are kept under 128, one
//! varint byte in every frame of a call (PROTOCOL.md §6.1): when the id
//! freed last is higher, the free ids are taken lowest first. A slab alone
//! would keep ids as high as a burst took them: after 200 calls at once,
//! two bytes an id for every call after.

/// Ids below this take one varint byte.
const ONE_BYTE: usize = 128;

/// No free slot: the end of the free list.
const NONE: u32 = u32::MAX;

/// Entries keyed by id; see the module's doc for which id a new one takes.
///
/// The free slots are a list threaded through themselves, the slot freed
/// last first, as in a slab: taking or freeing an id touches only that
/// slot and the table's own fields, which every caller touches anyway
/// (a free-id bitmap or stack beside the slots, written by callers on
/// both of a runtime's workers, cost calls at 256 in flight; bench log).
#[derive(Debug)]
pub(super) struct Ids<T> {
    slots: Vec<Slot<T>>,
    /// The first free slot, or `NONE`.
    head: u32,
    len: usize,
}

#[derive(Debug)]
enum Slot<T> {
    /// Free; the next free slot, or `NONE`.
    Vacant(u32),
    Occupied(T),
}

impl<T> Ids<T> {
    pub(super) fn new() -> Ids<T> {
        Ids {
            slots: Vec::new(),
            head: NONE,
            len: 0,
        }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Stores `value` under a free id and returns the id.
    pub(super) fn insert(&mut self, value: T) -> usize {
        if self.head != NONE && self.head as usize >= ONE_BYTE && self.len < ONE_BYTE {
            // A burst has ended: start over from the lowest free ids.
            self.relink_ascending();
        }
        let id = self.head as usize;
        if let Some(slot) = self.slots.get_mut(id) {
            if let Slot::Vacant(next) = *slot {
                *slot = Slot::Occupied(value);
                self.head = next;
                self.len += 1;
                return id;
            }
        }
        // Every slot is taken: a new one at the end. (Ids are `u32` on the
        // wire, and a connection holds far fewer calls than that.)
        self.slots.push(Slot::Occupied(value));
        self.len += 1;
        self.slots.len() - 1
    }

    /// Threads the free list through the free slots lowest first.
    fn relink_ascending(&mut self) {
        self.head = NONE;
        for (id, slot) in self.slots.iter_mut().enumerate().rev() {
            if let Slot::Vacant(next) = slot {
                *next = self.head;
                self.head = id as u32;
            }
        }
    }

    pub(super) fn get(&self, id: usize) -> Option<&T> {
        match self.slots.get(id)? {
            Slot::Occupied(v) => Some(v),
            Slot::Vacant(_) => None,
        }
    }

    pub(super) fn get_mut(&mut self, id: usize) -> Option<&mut T> {
        match self.slots.get_mut(id)? {
            Slot::Occupied(v) => Some(v),
            Slot::Vacant(_) => None,
        }
    }

    /// Takes the entry of `id` out, freeing the id; `None` if it held none.
    pub(super) fn try_remove(&mut self, id: usize) -> Option<T> {
        let slot = self.slots.get_mut(id)?;
        match std::mem::replace(slot, Slot::Vacant(self.head)) {
            Slot::Occupied(value) => {
                self.head = id as u32;
                self.len -= 1;
                Some(value)
            }
            // Already free: put its link back as it was.
            vacant => {
                *slot = vacant;
                None
            }
        }
    }

    /// Every entry, with its id, lowest first.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut T)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(id, slot)| match slot {
                Slot::Occupied(v) => Some((id, v)),
                Slot::Vacant(_) => None,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_are_dense_then_the_lowest_free_comes_back_first() {
        let mut ids = Ids::new();
        for want in 0..130 {
            assert_eq!(ids.insert(want), want);
        }
        assert_eq!(ids.try_remove(129), Some(129));
        assert_eq!(ids.try_remove(64), Some(64));
        assert_eq!(ids.try_remove(7), Some(7));
        assert_eq!(ids.try_remove(7), None, "already free");
        assert_eq!(ids.try_remove(500), None, "never held");
        assert_eq!(ids.len(), 127);
        assert_eq!(ids.insert(1000), 7);
        assert_eq!(ids.insert(1001), 64);
        assert_eq!(ids.insert(1002), 129);
        assert_eq!(ids.insert(1003), 130, "then a new slot");
        assert_eq!(ids.get(64), Some(&1001));
        assert_eq!(ids.iter_mut().count(), 131);
    }

    #[test]
    fn the_id_freed_last_is_taken_while_it_keeps_ids_small() {
        let mut ids = Ids::new();
        for want in 0..200 {
            assert_eq!(ids.insert(want), want);
        }
        // 128 or more in flight: the id freed last, whatever it is.
        ids.try_remove(20);
        ids.try_remove(150);
        assert_eq!(ids.insert(0), 150);
        assert_eq!(ids.insert(0), 20, "then the one freed before it");
        // Fewer: the id freed last only if it is under 128.
        for id in 100..200 {
            ids.try_remove(id);
        }
        assert_eq!(ids.len(), 100);
        assert_eq!(ids.insert(0), 100, "the lowest free, not 199");
        assert_eq!(ids.insert(0), 101);
        ids.try_remove(42);
        assert_eq!(ids.insert(0), 42);
    }

    proptest! {
        /// Against a model: the free ids as a stack, the one freed last on
        /// top, sorted lowest on top when a new id is wanted while fewer
        /// than 128 are held and the top is not under 128.
        #[test]
        fn matches_a_model(ops in proptest::collection::vec((0u8..4, 0usize..300), 1..3000)) {
            let mut ids = Ids::new();
            let mut held = std::collections::BTreeSet::new();
            let (mut free, mut slots): (Vec<usize>, usize) = (Vec::new(), 0);
            for (i, (op, n)) in ops.into_iter().enumerate() {
                // Inserts three times as likely as removals for 400 steps,
                // then a third as likely, and so on: the table grows past
                // 128 and shrinks back.
                let insert = if (i / 400) % 2 == 0 { op > 0 } else { op == 0 };
                if insert || held.is_empty() {
                    if free.last().is_some_and(|&top: &usize| top >= ONE_BYTE) && held.len() < ONE_BYTE {
                        free.sort_by(|a, b| b.cmp(a));
                    }
                    let want = free.pop().unwrap_or_else(|| {
                        slots += 1;
                        slots - 1
                    });
                    prop_assert_eq!(ids.insert(want), want);
                    held.insert(want);
                } else {
                    let id = *held.iter().nth(n % held.len()).unwrap();
                    prop_assert_eq!(ids.try_remove(id), Some(id));
                    prop_assert_eq!(ids.try_remove(id), None);
                    held.remove(&id);
                    free.push(id);
                }
                prop_assert_eq!(ids.len(), held.len());
            }
            let seen: Vec<usize> = ids.iter_mut().map(|(id, v)| { assert_eq!(id, *v); id }).collect();
            prop_assert_eq!(seen, held.into_iter().collect::<Vec<_>>());
        }
    }
}
