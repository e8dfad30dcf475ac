use std::time::Duration;

use super::*;

const MS: Duration = Duration::from_millis(1);

/// Polls `alarm` once in the task polling this future.
async fn poll_once(alarm: &mut Alarm) -> Poll<()> {
    std::future::poll_fn(|cx| Poll::Ready(alarm.poll(cx))).await
}

/// Waits for `alarm` to ring; fails the test after a second.
async fn rung(alarm: &mut Alarm) {
    tokio::time::timeout(
        Duration::from_secs(1),
        std::future::poll_fn(|cx| alarm.poll(cx)),
    )
    .await
    .expect("the alarm woke its task");
}

#[tokio::test]
async fn rings_once_due_and_wakes_the_task() {
    let mut alarm = Alarm::new(Instant::now() + 20 * MS);
    assert!(poll_once(&mut alarm).await.is_pending());
    for _ in 0..3 {
        assert!(poll_once(&mut alarm).await.is_pending());
    }
    // Waiting on it alone: only its ring can wake the task.
    rung(&mut alarm).await;
    assert!(Instant::now() >= alarm.deadline());
    // Ready until reset.
    assert!(poll_once(&mut alarm).await.is_ready());
}

#[tokio::test]
async fn one_due_already_is_ready_at_once_and_never_scheduled() {
    let mut alarm = Alarm::new(Instant::now());
    assert!(alarm.key.is_none());
    assert!(poll_once(&mut alarm).await.is_ready());
    alarm.reset(Instant::now() - MS);
    assert!(alarm.key.is_none());
    assert!(poll_once(&mut alarm).await.is_ready());
}

#[tokio::test]
async fn a_reset_moves_the_deadline_both_ways() {
    let start = Instant::now();
    let mut alarm = Alarm::new(start + Duration::from_secs(3600));
    assert!(poll_once(&mut alarm).await.is_pending());
    // Sooner: the thread, asleep until the far deadline (or another
    // test's), is told.
    alarm.reset(start + 5 * MS);
    rung(&mut alarm).await;
    assert!(Instant::now() >= start + 5 * MS);
    // Later again: pending until then.
    let again = Instant::now() + 30 * MS;
    alarm.reset(again);
    assert!(poll_once(&mut alarm).await.is_pending());
    tokio::time::sleep(10 * MS).await;
    assert!(poll_once(&mut alarm).await.is_pending());
    rung(&mut alarm).await;
    assert!(Instant::now() >= again);
}

#[tokio::test]
async fn a_new_task_is_woken_too() {
    let start = Instant::now();
    let mut alarm = Alarm::new(start + 20 * MS);
    assert!(poll_once(&mut alarm).await.is_pending());
    // Polled from another task from now on.
    let waited = tokio::spawn(async move {
        rung(&mut alarm).await;
        Instant::now()
    });
    let at = waited.await.unwrap();
    assert!(at - start >= 20 * MS);
}

#[tokio::test]
async fn a_dropped_or_reset_alarm_leaves_the_schedule() {
    let alarm = Alarm::new(Instant::now() + Duration::from_secs(3600));
    let key = alarm.key.expect("scheduled");
    assert!(Alarm::is_scheduled(&key));
    drop(alarm);
    assert!(!Alarm::is_scheduled(&key));

    let mut alarm = Alarm::new(Instant::now() + Duration::from_secs(3600));
    let first = alarm.key.expect("scheduled");
    alarm.reset(Instant::now() + Duration::from_secs(7200));
    let second = alarm.key.expect("scheduled");
    assert!(!Alarm::is_scheduled(&first));
    assert!(Alarm::is_scheduled(&second));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_alarms_each_ring_once_due() {
    let start = Instant::now();
    let tasks: Vec<_> = (0..200u64)
        .map(|i| {
            // Deadlines out of order, several on one instant.
            let at = start + MS * u32::try_from((i * 37) % 50).unwrap();
            tokio::spawn(async move {
                let mut alarm = Alarm::new(at);
                rung(&mut alarm).await;
                assert!(Instant::now() >= at);
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
}

#[test]
fn a_ring_for_a_moved_deadline_is_lost() {
    let bell = Bell {
        state: AtomicU64::new(5),
        task: Mutex::new(None),
    };
    // Meant for deadline 4, which was moved (to 5) before it rang.
    bell.ring(4);
    assert!(!bell.rung());
    bell.ring(5);
    assert!(bell.rung());
    // Rung once, a second ring of the same deadline changes nothing.
    bell.ring(5);
    assert!(bell.rung());
}
