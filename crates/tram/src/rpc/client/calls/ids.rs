//! The call table's storage: entries keyed by call id. A new call takes
//! the id freed last, as a slab does: the entry touched last, most likely
//! still in a cache (the lowest free id every time cost calls at 256 in
//! flight; bench log). But once fewer
//! than 128 calls are in flight, a new call's id is under 128, one varint
//! byte in every frame of a call (PROTOCOL.md §6.1). A slab alone would
//! keep ids as high as a burst took them: after 200 calls at once, two
//! bytes an id for every call after.
//!
//! So the free ids are two lists, those under 128 and the rest, each the
//! id freed last first: taking or freeing an id costs the same however
//! large a burst once made the table. (One list, sorted again by a walk
//! over the whole table whenever a high id came up while fewer than 128
//! were in flight, made each such call pay for the largest burst the
//! connection had seen; bench log.)

/// Ids below this take one varint byte.
const ONE_BYTE: usize = 128;

/// No free slot: the end of a free list.
const NONE: u32 = u32::MAX;

/// Entries keyed by id; see the module's doc for which id a new one takes.
///
/// The free slots are lists threaded through themselves, the slot freed
/// last first, as in a slab: taking or freeing an id touches only that
/// slot and the table's own fields, which every caller touches anyway
/// (a free-id bitmap or stack beside the slots, written by callers on
/// both of a runtime's workers, cost calls at 256 in flight; bench log).
#[derive(Debug)]
pub(super) struct Ids<T> {
    slots: Vec<Slot<T>>,
    /// The first free slot under `ONE_BYTE`, or `NONE`.
    low: u32,
    /// The first free slot at `ONE_BYTE` or above, or `NONE`.
    high: u32,
    /// Whether the id freed last went to `low`'s list.
    freed_low: bool,
    len: usize,
}

#[derive(Debug)]
enum Slot<T> {
    /// Free; the next free slot of its list, or `NONE`.
    Vacant(u32),
    Occupied(T),
}

impl<T> Ids<T> {
    pub(super) fn new() -> Ids<T> {
        Ids {
            slots: Vec::new(),
            low: NONE,
            high: NONE,
            freed_low: true,
            len: 0,
        }
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Stores `value` under a free id and returns the id.
    pub(super) fn insert(&mut self, value: T) -> usize {
        // Under 128 in flight, an id under 128 is free, or the table has
        // fewer than 128 slots and the new one's id is under 128: the high
        // list is only for 128 or more. Otherwise the list the id freed
        // last went to, whichever holds one.
        let from_low = if self.len < ONE_BYTE || self.freed_low {
            self.low != NONE
        } else {
            self.high == NONE
        };
        let head = if from_low {
            &mut self.low
        } else {
            &mut self.high
        };
        if *head != NONE {
            let id = *head as usize;
            let Slot::Vacant(next) = std::mem::replace(&mut self.slots[id], Slot::Occupied(value))
            else {
                unreachable!("a free list holds vacant slots only")
            };
            *head = next;
            self.len += 1;
            return id;
        }
        // Every slot is taken: a new one at the end. (Ids are `u32` on the
        // wire, and a connection holds far fewer calls than that.)
        self.slots.push(Slot::Occupied(value));
        self.len += 1;
        self.slots.len() - 1
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
        let low = id < ONE_BYTE;
        let head = if low { self.low } else { self.high };
        let slot = self.slots.get_mut(id)?;
        match std::mem::replace(slot, Slot::Vacant(head)) {
            Slot::Occupied(value) => {
                if low {
                    self.low = id as u32;
                } else {
                    self.high = id as u32;
                }
                self.freed_low = low;
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
        // Fewer: the id freed last only if it is under 128, else another
        // under 128 (the one under 128 freed last).
        for id in 100..200 {
            ids.try_remove(id);
        }
        assert_eq!(ids.len(), 100);
        assert_eq!(ids.insert(0), 127, "under 128, not 199");
        assert_eq!(ids.insert(0), 126);
        ids.try_remove(42);
        assert_eq!(ids.insert(0), 42);
    }

    #[test]
    fn after_a_burst_each_freed_high_id_gives_way_to_one_under_128() {
        // 100,000 slots after a burst, then calls going and coming at 127
        // in flight, each ending one of the burst's high ids: the case
        // that had walked the whole table at every insert.
        let mut ids = Ids::new();
        for want in 0..100_000 {
            assert_eq!(ids.insert(want), want);
        }
        for id in 0..100_000 - 127 {
            ids.try_remove(id);
        }
        for (k, high) in (100_000 - 127..100_000).enumerate() {
            ids.try_remove(high);
            let id = ids.insert(k);
            assert!(id < ONE_BYTE, "{id}");
        }
        assert_eq!(ids.len(), 127);
    }

    proptest! {
        /// What a new id must be, checked against the ids held and freed:
        /// never one held; under 128 while fewer than 128 are held; a new
        /// slot only when none is free; and the id freed just before,
        /// unless that breaks the rule of 128.
        #[test]
        fn ids_follow_the_rules(ops in proptest::collection::vec((0u8..4, 0usize..300), 1..3000)) {
            let mut ids = Ids::new();
            let mut held = std::collections::BTreeSet::new();
            let mut free = std::collections::BTreeSet::new();
            let mut slots = 0;
            let mut freed_just_before = None;
            for (i, (op, n)) in ops.into_iter().enumerate() {
                // Inserts three times as likely as removals for 400 steps,
                // then a third as likely, and so on: the table grows past
                // 128 and shrinks back.
                let insert = if (i / 400) % 2 == 0 { op > 0 } else { op == 0 };
                if insert || held.is_empty() {
                    let fewer = held.len() < ONE_BYTE;
                    let id = ids.insert(n);
                    prop_assert!(!held.contains(&id));
                    if fewer {
                        prop_assert!(id < ONE_BYTE, "{} with {} held", id, held.len());
                    }
                    if id == slots {
                        prop_assert!(free.is_empty(), "a new slot with {:?} free", free);
                        slots += 1;
                    } else {
                        prop_assert!(free.remove(&id));
                    }
                    if let Some(last) = freed_just_before.take() {
                        if !(fewer && last >= ONE_BYTE) {
                            prop_assert_eq!(id, last);
                        }
                    }
                    held.insert(id);
                } else {
                    let id = *held.iter().nth(n % held.len()).unwrap();
                    prop_assert!(ids.try_remove(id).is_some());
                    prop_assert!(ids.try_remove(id).is_none());
                    held.remove(&id);
                    free.insert(id);
                    freed_just_before = Some(id);
                }
                prop_assert_eq!(ids.len(), held.len());
            }
            let seen: Vec<usize> = ids.iter_mut().map(|(id, _)| id).collect();
            prop_assert_eq!(seen, held.into_iter().collect::<Vec<_>>());
        }
    }
}
