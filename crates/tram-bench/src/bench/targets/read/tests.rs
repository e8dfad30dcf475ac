//! The readings of each target from hand-made result files.

use super::*;
use serde_json::json;

fn counted(json: &Value) -> Vec<Reading> {
    match readings(json) {
        FileReadings::Counted(r) => r,
        FileReadings::LeftOut(why) => panic!("left out: {why}"),
    }
}

fn verdict(readings: &[Reading], target: Target) -> Verdict {
    readings
        .iter()
        .find(|r| r.target == target)
        .unwrap_or_else(|| panic!("{target} not read"))
        .verdict
}

const DEFAULT: fn() -> Value =
    || json!({"workers": 2, "client_workers": null, "pin": false, "neighbours": 0});

fn summary(median: f64, min: f64, max: f64) -> Value {
    json!({"median": median, "min": min, "max": max})
}

fn compare_run(settings: Value) -> Value {
    json!({"bench": "compare", "proc": DEFAULT(), "machine": {"build": "release"}, "settings": settings})
}

#[test]
fn closed_loop_targets_are_read_from_tram_and_its_peers() {
    let run = compare_run(json!([
        {"payload": 16, "concurrency": 256, "systems": [
            {"system": "tram", "rates": [950e3, 1000e3, 1080e3], "rate": summary(1000e3, 950e3, 1080e3),
             "client_cpu_us": summary(0.7, 0.6, 0.8), "server_cpu_us": summary(0.45, 0.4, 0.5)},
            {"system": "protosocket", "tram_ratio": summary(3.4, 2.9, 4.0)},
            {"system": "tonic", "tram_ratio": summary(27.0, 25.0, 31.0)},
            {"system": "floor", "rates": [5.2e6, 6.5e6, 6.6e6], "rate": summary(6.5e6, 5.2e6, 6.6e6)},
        ]},
        {"payload": 16, "concurrency": 1, "systems": [
            {"system": "tram", "latency": {"p50_us": 21.0}},
            {"system": "floor", "latency": {"p50_us": 20.0}},
        ]},
    ]));
    let r = counted(&run);
    assert_eq!(verdict(&r, Target::C256Protosocket), Verdict::Met);
    assert_eq!(verdict(&r, Target::C256Tonic), Verdict::NotMet);
    assert_eq!(verdict(&r, Target::C256Cpu), Verdict::Met);
    // +8% is inside ±10%, -5% too.
    assert_eq!(verdict(&r, Target::C256Spread), Verdict::Met);
    // The floor's own spread is read beside tram's, and does not
    // change the verdict.
    let spread = r.iter().find(|r| r.target == Target::C256Spread).unwrap();
    assert_eq!(
        spread.text,
        "-5.0% / +8.0% of 1000k (3 rounds); the floor's -20.0% / +1.5%"
    );
    assert_eq!(verdict(&r, Target::C1Latency), Verdict::Met);
    assert_eq!(r.len(), 5);
}

#[test]
fn one_slow_round_breaks_the_spread_and_cpu_over_the_limit_fails() {
    let run = compare_run(json!([
        {"payload": 16, "concurrency": 256, "systems": [
            {"system": "tram", "rates": [600e3, 1000e3, 1050e3], "rate": summary(1000e3, 600e3, 1050e3),
             "client_cpu_us": summary(1.1, 1.0, 1.2), "server_cpu_us": summary(0.7, 0.6, 0.8)},
        ]},
        {"payload": 16, "concurrency": 1, "systems": [
            {"system": "tram", "latency": {"p50_us": 23.0}},
            {"system": "floor", "latency": {"p50_us": 20.0}},
        ]},
    ]));
    let r = counted(&run);
    assert_eq!(verdict(&r, Target::C256Spread), Verdict::NotMet);
    assert_eq!(verdict(&r, Target::C256Cpu), Verdict::NotMet);
    assert_eq!(verdict(&r, Target::C1Latency), Verdict::NotMet);
    // No peer in the run: its ratios are not read at all.
    assert!(r.iter().all(|r| r.target != Target::C256Protosocket));
}

#[test]
fn one_in_flight_is_read_from_the_rounds_p50s_not_a_quicker_rounds_calls() {
    // One round of five in which client and server shared a vCPU made
    // seven times the calls, and so most of the merged histogram: its p50
    // is that round's. Each round counts once.
    let run = compare_run(json!([
        {"payload": 16, "concurrency": 1, "systems": [
            {"system": "tram", "latency": {"p50_us": 8.6},
             "p50_rounds_us": [81.5, 8.6, 82.0, 80.9, 83.1]},
            {"system": "floor", "latency": {"p50_us": 71.9},
             "p50_rounds_us": [71.0, 72.0, 73.4, 72.4, 71.9]},
        ]},
    ]));
    let r = counted(&run);
    let c1 = r.iter().find(|r| r.target == Target::C1Latency).unwrap();
    assert_eq!(c1.text, "1.132x (81.5 against 72.0 µs)");
    assert_eq!(c1.verdict, Verdict::NotMet);
}

#[test]
fn the_least_rpc_client_is_read_beside_tram_and_changes_no_verdict() {
    let run = compare_run(json!([
        {"payload": 16, "concurrency": 256, "systems": [
            {"system": "tram", "rates": [950e3, 1000e3, 1080e3], "rate": summary(1000e3, 950e3, 1080e3),
             "client_cpu_us": summary(1.6, 1.5, 1.7), "server_cpu_us": summary(0.9, 0.8, 1.0)},
            {"system": "floor-tasks", "rates": [600e3, 800e3, 820e3], "rate": summary(800e3, 600e3, 820e3),
             "client_cpu_us": summary(1.87, 1.8, 1.9), "server_cpu_us": summary(0.6, 0.5, 0.7)},
        ]},
        {"payload": 16, "concurrency": 1, "systems": [
            {"system": "tram", "latency": {"p50_us": 23.0}},
            {"system": "floor", "latency": {"p50_us": 20.0}},
            {"system": "floor-tasks", "latency": {"p50_us": 20.6}},
        ]},
    ]));
    let r = counted(&run);
    let text = |t: Target| r.iter().find(|r| r.target == t).unwrap().text.clone();
    assert_eq!(
        text(Target::C256Cpu),
        "2.50 µs (1.60 + 0.90); floor-tasks client 1.87 µs"
    );
    assert_eq!(
        text(Target::C256Spread),
        "-5.0% / +8.0% of 1000k (3 rounds); floor-tasks -25.0% / +2.5%"
    );
    assert_eq!(
        text(Target::C1Latency),
        "1.150x (23.0 against 20.0 µs); floor-tasks 1.030x"
    );
    assert_eq!(verdict(&r, Target::C256Cpu), Verdict::NotMet);
    assert_eq!(verdict(&r, Target::C256Spread), Verdict::Met);
    assert_eq!(verdict(&r, Target::C1Latency), Verdict::NotMet);
}

#[test]
fn large_payloads_are_read_at_each_depth() {
    let run = compare_run(json!([
        {"payload": 16384, "concurrency": 32, "systems": [
            {"system": "tram"}, {"system": "protosocket", "tram_ratio": summary(1.6, 1.4, 1.9)}]},
        {"payload": 16384, "concurrency": 256, "systems": [
            {"system": "tram"}, {"system": "protosocket", "tram_ratio": summary(1.4, 1.2, 1.5)}]},
    ]));
    let r = counted(&run);
    let got: Vec<_> = r
        .iter()
        .map(|r| (r.detail.clone().unwrap(), r.verdict))
        .collect();
    assert_eq!(
        got,
        [
            ("C=32".to_string(), Verdict::Met),
            ("C=256".to_string(), Verdict::NotMet)
        ]
    );
}

#[test]
fn streams_are_read_from_tram_rpc_not_tram_conn() {
    let run = json!({"bench": "stream", "proc": DEFAULT(), "systems": [
        {"system": "tram", "of_floor": summary(1.2, 1.1, 1.3), "over_protosocket": summary(8.0, 7.0, 9.0)},
        {"system": "tram-rpc", "of_floor": summary(0.24, 0.18, 0.40), "over_protosocket": summary(5.02, 4.7, 7.0)},
        {"system": "floor-push", "of_floor": summary(1.0, 1.0, 1.0)},
    ]});
    let r = counted(&run);
    assert_eq!(verdict(&r, Target::StreamFloor), Verdict::NotMet);
    assert_eq!(verdict(&r, Target::StreamProtosocket), Verdict::Met);
    assert_eq!(r[0].text, "24% (18–40%)");
}

fn rate_run(tram: Value, peer: Value) -> Value {
    json!({"bench": "rate", "proc": DEFAULT(), "systems": [tram, peer]})
}

fn sweep(name: &str, five: Option<u64>, five_every: Option<u64>, one: Option<u64>) -> Value {
    json!({"system": name, "steps": [{"rate": 10000}, {"rate": 25000}],
           "max_rate_p999_under_5ms": five, "every_rate_p999_under_5ms_to": five_every,
           "max_rate_p999_under_1ms": one, "every_rate_p999_under_1ms_to": null})
}

#[test]
fn the_open_loop_bounds_the_lead_over_a_peer_that_held_no_rate() {
    let run = rate_run(
        sweep("tram", Some(300_000), Some(25_000), Some(200_000)),
        sweep("protosocket", Some(50_000), Some(10_000), None),
    );
    let r = counted(&run);
    assert_eq!(verdict(&r, Target::Open5ms), Verdict::Met);
    assert_eq!(verdict(&r, Target::Open5msEvery), Verdict::NotMet);
    // protosocket-rpc held less than 10k/s: tram's 200k/s is at least 20x.
    assert_eq!(verdict(&r, Target::Open1ms), Verdict::Met);
    assert_eq!(verdict(&r, Target::Open1msEvery), Verdict::Undecided);
    let low = rate_run(
        sweep("tram", None, None, Some(25_000)),
        sweep("protosocket", Some(10_000), None, None),
    );
    let r = counted(&low);
    assert_eq!(verdict(&r, Target::Open5ms), Verdict::NotMet);
    // 25k/s over a peer below 10k/s: 2.5x at least, not enough to tell.
    assert_eq!(verdict(&r, Target::Open1ms), Verdict::Undecided);
}

#[test]
fn where_tram_first_missed_a_limit_the_dispatchers_own_lateness_is_told() {
    let mut tram = sweep("tram", Some(25_000), Some(10_000), None);
    tram["steps"] = json!([
        {"rate": 10000, "p999_rounds_us": [900.0, 1200.0, 1100.0],
         "dispatched_late_p999_us": {"median": 700.0, "min": 500.0, "max": 900.0}},
        {"rate": 25000, "p999_rounds_us": [6000.0, 5500.0, 4000.0],
         "dispatched_late_p999_us": {"median": 1900.0, "min": 1000.0, "max": 2500.0}},
    ]);
    let r = counted(&rate_run(
        tram,
        sweep("protosocket", Some(10_000), Some(10_000), None),
    ));
    let text = |target| &r.iter().find(|r| r.target == target).unwrap().text;
    // 10k/s missed 1 ms in the median round (1.1 ms) and held 5 ms;
    // 25k/s is where 5 ms broke (5.5 ms).
    assert_eq!(
        text(Target::Open5msEvery),
        "1.00x (10k/s against 10k/s); at 25k/s, where tram first missed it, \
         the dispatcher's own p99.9 1900 µs"
    );
    assert_eq!(
        text(Target::Open1msEvery),
        "neither held a rate; at 10k/s, where tram first missed it, \
         the dispatcher's own p99.9 700 µs"
    );
    // Only the readings of every rate up to a limit say it.
    assert!(!text(Target::Open5ms).contains("dispatcher"));
    // Files written before it was recorded read as before.
    let r = counted(&rate_run(
        sweep("tram", Some(25_000), Some(10_000), None),
        sweep("protosocket", Some(10_000), Some(10_000), None),
    ));
    assert!(r.iter().all(|r| !r.text.contains("dispatcher")));
}

#[test]
fn the_guest_is_named_by_the_floors_figures() {
    let mut guest = Guest::default();
    assert_eq!(guest.line(), None);
    let mut run = compare_run(json!([
        {"payload": 16, "concurrency": 256, "systems": [{"system": "floor", "rate": summary(7.0e6, 6e6, 8e6)}]},
        {"payload": 16, "concurrency": 1, "systems": [{"system": "floor", "latency": {"p50_us": 19.14}}]},
    ]));
    run["machine"] = json!({"cpu": "Xeon", "kernel": "6.18", "congestion_control": "bbr",
                            "core_to_core_ns": [120.0, 400.0]});
    guest.add(&run);
    run["settings"][0]["systems"][0]["rate"]["median"] = json!(6.5e6);
    guest.add(&run);
    guest.add(&json!({"bench": "stream", "systems": [{"system": "floor-push", "rate": summary(8e7, 6e7, 9e7)}]}));
    assert_eq!(
        guest.line().unwrap(),
        "Guest: Xeon, kernel 6.18, bbr; the floor 6.50M–7.00M calls/s at 256 in flight; \
         p50 19.1 µs at one; floor-push 80.00M messages/s; core-to-core 120–400 ns."
    );
}

#[test]
fn the_guest_line_names_the_cpu_family_and_model_when_recorded() {
    let mut guest = Guest::default();
    let mut run = compare_run(json!([]));
    run["machine"] = json!({"cpu": "AMD EPYC", "cpu_family": 25, "cpu_model": 17,
                            "kernel": "6.18", "congestion_control": "bbr"});
    guest.add(&run);
    assert_eq!(
        guest.line().unwrap(),
        "Guest: AMD EPYC (family 25, model 17), kernel 6.18, bbr."
    );
}

#[test]
fn the_guest_line_says_what_idle_cpus_do_when_recorded() {
    let line = |cpuidle: Value| {
        let mut guest = Guest::default();
        let mut run = compare_run(json!([]));
        run["machine"] = json!({"cpu": "AMD EPYC", "kernel": "6.18",
                                "congestion_control": "bbr", "cpuidle": cpuidle});
        guest.add(&run);
        guest.line().unwrap()
    };
    assert_eq!(
        line(json!({"driver": "haltpoll", "governor": "haltpoll", "halt_poll_ns": 0})),
        "Guest: AMD EPYC, kernel 6.18, bbr, haltpoll idle halting at once."
    );
    assert_eq!(
        line(json!({"driver": "haltpoll", "governor": "haltpoll", "halt_poll_ns": 200000})),
        "Guest: AMD EPYC, kernel 6.18, bbr, haltpoll idle polling 200 µs."
    );
    assert_eq!(
        line(json!({"driver": "intel_idle", "governor": "menu", "halt_poll_ns": null})),
        "Guest: AMD EPYC, kernel 6.18, bbr, intel_idle idle."
    );
    assert_eq!(
        line(json!({"driver": null, "governor": null, "halt_poll_ns": null})),
        "Guest: AMD EPYC, kernel 6.18, bbr."
    );
}

#[test]
fn runs_off_the_default_setting_or_build_are_left_out() {
    let mut pinned = compare_run(json!([]));
    pinned["proc"]["pin"] = json!(true);
    assert!(matches!(readings(&pinned), FileReadings::LeftOut(w) if w.contains("pinned true")));
    let mut one_cpu = compare_run(json!([]));
    one_cpu["proc"]["one_cpu"] = json!(true);
    assert!(matches!(readings(&one_cpu), FileReadings::LeftOut(w) if w.contains("one CPU true")));
    let mut one_worker = compare_run(json!([]));
    one_worker["proc"]["client_workers"] = json!(1);
    assert!(matches!(readings(&one_worker), FileReadings::LeftOut(_)));
    let mut timed = compare_run(json!([]));
    timed["timeout_ms"] = json!(1000);
    assert!(matches!(readings(&timed), FileReadings::LeftOut(w) if w.contains("1000 ms timeout")));
    let mut authed = compare_run(json!([]));
    authed["bearer"] = json!(true);
    assert!(matches!(readings(&authed), FileReadings::LeftOut(w) if w.contains("bearer token")));
    let mut lto = compare_run(json!([]));
    lto["machine"]["build"] = json!("lto");
    assert!(matches!(readings(&lto), FileReadings::LeftOut(w) if w == "the lto build"));
    // On the default setting but with nothing to read.
    assert!(
        matches!(readings(&compare_run(json!([]))), FileReadings::LeftOut(w) if w.contains("none"))
    );
    assert!(matches!(
        readings(&json!({"bench": "fanin", "proc": DEFAULT()})),
        FileReadings::LeftOut(_)
    ));
}
