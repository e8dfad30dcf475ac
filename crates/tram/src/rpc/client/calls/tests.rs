//! The call table's rules, without sockets: answers, releases, relays.

use bytes::Bytes;
use tram_wire::{GoAway, Message, Reason};

use super::*;

fn message(call: CallId, end_stream: bool) -> Frame {
    Frame::Message(Message {
        call,
        end_stream,
        metadata: None,
        payload: Bytes::from_static(b"ok"),
    })
}

fn open_unary(calls: &mut Calls) -> CallId {
    match calls.open(CallKind::Unary(None), true, 0) {
        Ok((id, _)) => id,
        Err(_) => panic!("opens"),
    }
}

fn poll(calls: &mut Calls, id: CallId) -> Poll<Result<Answer, Status>> {
    calls.poll_unary(id, &mut Context::from_waker(Waker::noop()))
}

#[test]
fn a_unary_answer_completes_the_call_and_frees_its_id() {
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    let a = open_unary(&mut calls);
    let b = open_unary(&mut calls);
    assert_eq!((a, b), (0, 1));
    assert!(poll(&mut calls, a).is_pending());
    calls.frame(message(a, true), &mut fx).unwrap();
    let Poll::Ready(Ok((body, _, _))) = poll(&mut calls, a) else {
        panic!("answered")
    };
    assert_eq!(&body[..], b"ok");
    assert_eq!(calls.len(), 1);
    // The id freed last is reused first.
    assert_eq!(open_unary(&mut calls), 0);
}

#[test]
fn a_dropped_call_is_cancelled_and_its_id_held_until_the_server_ends_it() {
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    let id = open_unary(&mut calls);
    calls.release(id, true, Code::Cancelled, &mut fx);
    assert!(matches!(fx.send.as_slice(), [Frame::Cancel(c)] if c.call == id));
    assert_eq!(fx.freed, 0);
    assert_eq!(open_unary(&mut calls), 1, "id 0 is still taken");
    calls
        .frame(Frame::End(End::new(id, Code::Cancelled)), &mut fx)
        .unwrap();
    assert_eq!(fx.freed, 1);
    assert_eq!(open_unary(&mut calls), 0);
}

#[test]
fn frames_on_calls_not_open_break_the_protocol() {
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    assert!(calls.frame(message(3, true), &mut fx).is_err());
    let id = open_unary(&mut calls);
    calls.frame(message(id, false), &mut fx).unwrap();
    assert!(
        calls.frame(message(id, true), &mut fx).is_err(),
        "two responses"
    );
    let id = open_unary(&mut calls);
    calls.frame(message(id, true), &mut fx).unwrap();
    assert!(
        calls
            .frame(Frame::End(End::new(id, Code::Ok)), &mut fx)
            .is_err(),
        "END after END_STREAM"
    );
}

#[test]
fn capacity_and_goaway_refuse_new_calls() {
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    calls.settled(Settings {
        max_concurrent_calls: 1,
        ..Settings::DEFAULT
    });
    open_unary(&mut calls);
    assert!(matches!(
        calls.open(CallKind::Unary(None), true, 0),
        Err(Refused::Full)
    ));
    let goaway = GoAway {
        last_call_seq: 1,
        reason: Reason::NO_ERROR,
        message: "bye".into(),
    };
    calls.frame(Frame::GoAway(goaway), &mut fx).unwrap();
    assert!(matches!(
        calls.open(CallKind::Unary(None), true, 0),
        Err(Refused::Broken(s)) if s.code() == Code::Unavailable
    ));
}

/// A waker that counts its wakes.
struct Count(std::sync::atomic::AtomicUsize);

impl std::task::Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

fn counting() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count(Default::default()));
    (count.clone(), Waker::from(count))
}

fn wakes(c: &Count) -> usize {
    c.0.load(std::sync::atomic::Ordering::Relaxed)
}

/// `n` unary calls, each waking its own counter, answered in one read.
fn answered(calls: &mut Calls, fx: &mut Effects, n: usize) -> (Vec<Arc<Count>>, Vec<CallId>) {
    let (counts, wakers): (Vec<_>, Vec<_>) = (0..n).map(|_| counting()).unzip();
    let ids: Vec<_> = wakers
        .iter()
        .map(
            |w| match calls.open(CallKind::Unary(Some(w.clone())), true, 0) {
                Ok((id, _)) => id,
                Err(_) => panic!("opens"),
            },
        )
        .collect();
    for &id in &ids {
        calls.frame(message(id, true), fx).unwrap();
    }
    (counts, ids)
}

#[test]
fn callers_answered_together_are_woken_one_after_another() {
    let mut calls = Calls::new();
    let mut relay = Relay::default();
    let mut fx = Effects::default();
    let (counts, ids) = answered(&mut calls, &mut fx, relay::RELAY_READ);
    assert!(relay.queue(&mut fx, 0), "the others wait on the relay");
    assert_eq!(fx.wake.len(), 2, "only the two heads are woken by the read");
    fx.wake.drain(..).for_each(Waker::wake);
    let woken = |counts: &[Arc<Count>]| counts.iter().map(|c| wakes(c)).sum::<usize>();
    assert_eq!(
        (wakes(&counts[0]), wakes(&counts[1]), woken(&counts)),
        (1, 1, 2)
    );
    // The first takes its answer and passes the relay on.
    assert!(poll(&mut calls, ids[0]).is_ready());
    let [none, next] = relay.pass_on();
    assert!(none.is_none(), "a relay passes on one");
    next.unwrap().wake();
    assert_eq!((wakes(&counts[2]), woken(&counts)), (1, 3));
    // The second gives up instead: it passes it on too.
    calls.release(ids[1], true, Code::Cancelled, &mut fx);
    relay.pass_on().into_iter().flatten().for_each(Waker::wake);
    assert_eq!((wakes(&counts[3]), woken(&counts)), (1, 4));
}

#[test]
fn a_long_read_wakes_a_fan() {
    let mut calls = Calls::new();
    let mut relay = Relay::default();
    let mut fx = Effects::default();
    let n = relay::RELAY_READ + 1;
    let (counts, ids) = answered(&mut calls, &mut fx, n);
    assert!(relay.queue(&mut fx, n * 100), "the others wait on the fan");
    assert_eq!(
        fx.wake.len(),
        relay::FAN_HEADS,
        "the read wakes the fan's heads"
    );
    fx.wake.drain(..).for_each(Waker::wake);
    let woken = |counts: &[Arc<Count>]| counts.iter().map(|c| wakes(c)).sum::<usize>();
    // Each caller that takes its answer wakes the next two, until none
    // are left; every caller is woken exactly once.
    for (i, &id) in ids.iter().enumerate() {
        assert!(poll(&mut calls, id).is_ready());
        let [second, first] = relay.pass_on();
        let expected = (n - relay::FAN_HEADS).saturating_sub(2 * i).min(2);
        assert_eq!(
            usize::from(first.is_some()) + usize::from(second.is_some()),
            expected,
            "caller {i} passes the fan on to {expected}"
        );
        second.into_iter().chain(first).for_each(Waker::wake);
    }
    assert_eq!(woken(&counts), n);
    assert!(counts.iter().all(|c| wakes(c) == 1));
}

#[test]
fn a_short_read_starts_two_relays() {
    let mut calls = Calls::new();
    let mut relay = Relay::default();
    let mut fx = Effects::default();
    let (_, ids) = answered(&mut calls, &mut fx, 3);
    assert!(relay.queue(&mut fx, 3 * 100));
    assert_eq!(fx.wake.len(), 2, "two are woken by the read");
    fx.wake.clear();
    assert!(poll(&mut calls, ids[0]).is_ready());
    assert!(
        matches!(relay.pass_on(), [None, Some(_)]),
        "the third is passed on"
    );
    assert!(poll(&mut calls, ids[1]).is_ready());
    assert!(
        matches!(relay.pass_on(), [None, None]),
        "and the relay is over"
    );
}

#[test]
fn a_short_read_of_large_answers_starts_one_relay() {
    let mut calls = Calls::new();
    let mut relay = Relay::default();
    let mut fx = Effects::default();
    answered(&mut calls, &mut fx, 3);
    assert!(relay.queue(&mut fx, 3 * 16_400));
    assert_eq!(fx.wake.len(), 1, "one is woken by the read");
}

#[test]
fn a_flush_or_a_lost_connection_wakes_the_whole_relay() {
    let mut calls = Calls::new();
    let mut relay = Relay::default();
    let mut fx = Effects::default();
    let (counts, _) = answered(&mut calls, &mut fx, 5);
    relay.queue(&mut fx, 0);
    fx.wake.clear();
    relay.flush(&mut fx);
    assert_eq!(fx.wake.len(), 3, "all but the two heads");
    fx.wake.drain(..).for_each(Waker::wake);
    assert_eq!(counts.iter().map(|c| wakes(c)).sum::<usize>(), 3);
    // Queued again, then the connection goes.
    let (_, waker) = counting();
    for _ in 0..3 {
        fx.wake.push(waker.clone());
    }
    relay.queue(&mut fx, 0);
    fx.wake.clear();
    calls.fail_all(&Status::unavailable("lost"), &mut fx);
    relay.flush(&mut fx);
    assert_eq!(fx.wake.len(), 1, "the relay's caller is woken");
}

#[test]
fn the_deadline_timer_is_set_for_the_earliest_and_wakes_whose_deadline_passed() {
    let mut calls = Calls::new();
    let t0 = std::time::Instant::now();
    let ms = std::time::Duration::from_millis(1);
    let open = |calls: &mut Calls, at: Option<std::time::Instant>| {
        let (count, waker) = counting();
        let (id, _) = match calls.open_until(CallKind::Unary(Some(waker)), true, 0, at) {
            Ok(opened) => opened,
            Err(_) => panic!("opens"),
        };
        (id, count)
    };
    let (_, late) = open(&mut calls, Some(t0 + 30 * ms));
    assert!(
        calls.deadline_to_set(t0 + 30 * ms),
        "the first sets the timer"
    );
    let (_, none) = open(&mut calls, None);
    let (soon_id, soon) = open(&mut calls, Some(t0 + 10 * ms));
    assert!(
        calls.deadline_to_set(t0 + 10 * ms),
        "an earlier one sets it sooner"
    );
    let (_, later) = open(&mut calls, Some(t0 + 20 * ms));
    assert!(
        !calls.deadline_to_set(t0 + 20 * ms),
        "a later one leaves it"
    );
    // Answered before its deadline: not woken for it.
    let mut fx = Effects::default();
    calls.frame(message(soon_id, true), &mut fx).unwrap();
    fx.wake.clear();
    assert_eq!(calls.expire(t0 + 5 * ms, &mut fx), Some(t0 + 20 * ms));
    assert!(fx.wake.is_empty(), "nothing passed yet");
    assert_eq!(calls.expire(t0 + 25 * ms, &mut fx), Some(t0 + 30 * ms));
    fx.wake.drain(..).for_each(Waker::wake);
    assert_eq!(
        [wakes(&late), wakes(&none), wakes(&soon), wakes(&later)],
        [0, 0, 0, 1],
        "only the call whose deadline passed"
    );
    assert_eq!(
        calls.expire(t0 + 40 * ms, &mut fx),
        None,
        "none left to time"
    );
    assert!(
        calls.deadline_to_set(t0 + 50 * ms),
        "a new deadline sets it again"
    );
}

#[test]
fn losing_the_connection_fails_every_call() {
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    let id = open_unary(&mut calls);
    calls.fail_all(&Status::unavailable("lost"), &mut fx);
    let Poll::Ready(Err(s)) = poll(&mut calls, id) else {
        panic!("failed")
    };
    assert_eq!(s.code(), Code::Unavailable);
}

/// PROTOCOL.md §6.1: ids stay under 128 (one varint byte) while fewer
/// calls than that are in flight, whatever order a burst's calls ended in.
#[test]
fn ids_come_back_under_128_after_a_burst() {
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    let ids: Vec<CallId> = (0..200).map(|_| open_unary(&mut calls)).collect();
    assert_eq!(ids, (0..200).collect::<Vec<_>>());
    // The burst ends, highest ids last, but for three calls left open.
    for &id in ids.iter().filter(|&&id| id != 3 && id != 130 && id != 199) {
        calls.frame(message(id, true), &mut fx).unwrap();
        assert!(poll(&mut calls, id).is_ready());
    }
    assert_eq!(calls.len(), 3);
    let next: Vec<CallId> = (0..100).map(|_| open_unary(&mut calls)).collect();
    assert!(next.iter().all(|&id| id < 128 && id != 3), "{next:?}");
    // With 128 or more in flight, the id freed last is taken (its entry
    // the one touched last).
    let more: Vec<CallId> = (0..30).map(|_| open_unary(&mut calls)).collect();
    assert_eq!(calls.len(), 133);
    let id = more[7];
    calls.frame(message(id, true), &mut fx).unwrap();
    assert!(poll(&mut calls, id).is_ready());
    assert_eq!(open_unary(&mut calls), id);
}

/// An entry fills two cache lines at most and shares none with its
/// neighbours (see `Entry`): growing it past that costs every call a line.
#[test]
fn an_entry_is_at_most_two_cache_lines_of_its_own() {
    use std::mem::{align_of, size_of};
    assert_eq!(align_of::<Entry>(), 64);
    assert!(size_of::<Entry>() <= 128, "{} bytes", size_of::<Entry>());
}

fn open_slot(calls: &mut Calls, slot: &AnswerSlot) -> CallId {
    let (_, waker) = counting();
    // SAFETY: every slot here outlives the table it is registered with.
    #[allow(unsafe_code)]
    let kind = CallKind::UnaryTo(waker, unsafe { SlotPtr::new(slot) });
    match calls.open(kind, true, 0) {
        Ok((id, _)) => id,
        Err(_) => panic!("opens"),
    }
}

#[test]
fn an_answer_given_a_slot_goes_there_and_frees_the_id_at_once() {
    let slot = AnswerSlot::default();
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    let id = open_slot(&mut calls, &slot);
    assert!(!slot.is_ready() && slot.take().is_none());
    calls.frame(message(id, true), &mut fx).unwrap();
    assert!(slot.is_ready(), "the answer is handed over");
    assert_eq!((calls.len(), fx.freed, fx.wake.len()), (0, 1, 1));
    let Some(Ok((body, _, _))) = slot.take() else {
        panic!("answered")
    };
    assert_eq!(&body[..], b"ok");
    assert!(slot.take().is_none(), "taken once");
    // The id is free for the next call before the caller has polled.
    assert_eq!(open_unary(&mut calls), id);
}

#[test]
fn an_error_or_a_lost_connection_is_handed_over_in_the_slot() {
    let (a, b) = (AnswerSlot::default(), AnswerSlot::default());
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    let first = open_slot(&mut calls, &a);
    let _second = open_slot(&mut calls, &b);
    calls
        .frame(Frame::End(End::new(first, Code::NotFound)), &mut fx)
        .unwrap();
    assert_eq!(a.take().unwrap().unwrap_err().code(), Code::NotFound);
    calls.fail_all(&Status::unavailable("lost"), &mut fx);
    assert_eq!(b.take().unwrap().unwrap_err().code(), Code::Unavailable);
    assert_eq!((calls.len(), fx.freed), (0, 2));
}

#[test]
fn a_released_slot_is_detached_and_never_written() {
    let slot = AnswerSlot::default();
    let mut calls = Calls::new();
    let mut fx = Effects::default();
    let id = open_slot(&mut calls, &slot);
    calls.release(id, true, Code::Cancelled, &mut fx);
    assert!(matches!(fx.send.as_slice(), [Frame::Cancel(c)] if c.call == id));
    // The server's answer crossed the CANCEL: it frees the id, and the
    // slot (gone, in a real caller) is not touched.
    calls.frame(message(id, true), &mut fx).unwrap();
    assert!(!slot.is_ready());
    assert_eq!((calls.len(), fx.freed), (0, 1));
}

#[test]
fn a_call_is_alone_only_when_the_last_read_answered_no_other_caller() {
    let mut calls = Calls::new();
    let open = |calls: &mut Calls| match calls.open(CallKind::Unary(None), true, 0) {
        Ok((id, alone)) => (id, alone),
        Err(_) => panic!("opens"),
    };
    let (id, alone) = open(&mut calls);
    assert!(alone, "the only call");
    let mut fx = Effects::default();
    calls.frame(message(id, true), &mut fx).unwrap();
    assert!(poll(&mut calls, id).is_ready());
    // A read answered sixteen callers, whose entries are already freed:
    // the first to open again is not alone, the others are about to.
    calls.answered(16);
    let (id, alone) = open(&mut calls);
    assert!(!alone);
    calls.release(id, false, Code::Cancelled, &mut fx);
    calls.answered(1);
    assert!(
        open(&mut calls).1,
        "one answered: its caller's next call is alone"
    );
}
