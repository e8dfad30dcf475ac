//! Where a unary call's answer is handed to its caller without the call
//! table's lock.
//!
//! The caller's future holds an [`AnswerSlot`], pinned, and registers its
//! address with the call ([`SlotPtr`]). The reader, under the table's
//! lock, writes the answer into the slot, frees the call's entry and only
//! then marks the slot ready; it never touches the slot again. The caller
//! that finds it ready owns the answer and takes it with no lock: taking
//! an answer under the lock the reader holds while it routes a whole read
//! made callers spin, yield and sleep on it.
//!
//! Ready and the entry's removal happen under one hold of the lock, so a
//! caller that finds its slot not ready under the lock still has its
//! entry (its call id is not yet anyone else's), and one that lets go of
//! an unanswered call detaches its slot from the entry under the lock
//! before the slot's memory goes.
//!
//! The one hand-off in the client that the borrow checker cannot see, so
//! the one place it uses `unsafe`: kept to this protocol.
#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::marker::PhantomPinned;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};

use super::super::super::Status;
use super::super::super::unary::Answer;

/// A unary call's answer, handed over once.
pub(crate) struct AnswerSlot {
    ready: AtomicBool,
    answer: UnsafeCell<Option<Result<Answer, Status>>>,
    /// Registered by address.
    _pinned: PhantomPinned,
}

// The answer is written by one thread before `ready` is set (Release) and
// read by another only after it is seen set (Acquire).
unsafe impl Sync for AnswerSlot {}

impl Default for AnswerSlot {
    fn default() -> Self {
        AnswerSlot {
            ready: AtomicBool::new(false),
            answer: UnsafeCell::new(None),
            _pinned: PhantomPinned,
        }
    }
}

impl AnswerSlot {
    /// Whether the answer is in: from then on the slot is the caller's
    /// alone, and its call's entry is gone from the table.
    #[inline]
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// The answer, if it is in (once: a second take finds none).
    #[inline]
    pub(crate) fn take(&self) -> Option<Result<Answer, Status>> {
        if !self.is_ready() {
            return None;
        }
        // SAFETY: ready, so the table has let go of the slot: only its
        // owner, the caller polling it now, reaches it.
        unsafe { (*self.answer.get()).take() }
    }
}

/// The table's pointer to a registered slot.
pub(crate) struct SlotPtr(NonNull<AnswerSlot>);

// Written through only under the table's lock, as `AnswerSlot` says.
unsafe impl Send for SlotPtr {}

impl SlotPtr {
    /// # Safety
    ///
    /// `slot` stays where it is until it is ready or its owner has
    /// detached it under the table's lock ([`super::Calls::release`]).
    pub(crate) unsafe fn new(slot: &AnswerSlot) -> SlotPtr {
        SlotPtr(NonNull::from(slot))
    }

    /// Hands `outcome` to the caller and lets go of the slot.
    ///
    /// # Safety
    ///
    /// Under the table's lock, with the call's entry (which held this
    /// pointer) already freed.
    pub(super) unsafe fn deliver(self, outcome: Result<Answer, Status>) {
        // SAFETY: the slot is registered (the caller detaches it before it
        // goes), not ready, and the caller reads it only once ready.
        let slot = unsafe { self.0.as_ref() };
        unsafe { *slot.answer.get() = Some(outcome) };
        slot.ready.store(true, Ordering::Release);
    }
}
