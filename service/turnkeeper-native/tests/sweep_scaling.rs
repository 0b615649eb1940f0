//! The sweep of one row with many tool calls: `cargo test` checks what it removes; how its time
//! grows with the calls is measured, never asserted, by the ignored test below, whose figures
//! docs/benchmarks.md keeps (`cargo test --release --test sweep_scaling -- --ignored --nocapture`).

mod common;

use std::time::{Duration, Instant};

use common::conventions;
use turnkeeper_native::scan::scan;
use turnkeeper_native::wire::put_len;
use turnkeeper_native::working::Working;

/// A user row, one assistant step with `calls` calls, a results row answering every other call,
/// a user row: the sweep removes the calls/2 unanswered calls from the step.
fn request(calls: usize) -> Vec<u8> {
    let mut step = Vec::new();
    put_len(&mut step, 1, b"working");
    let mut results = Vec::new();
    for n in 0..calls {
        let id = format!("call-{n}");
        let mut call = Vec::new();
        put_len(&mut call, 1, id.as_bytes());
        put_len(&mut call, 2, b"search");
        put_len(&mut step, 2, &call);
        if n % 2 == 0 {
            let mut result = Vec::new();
            put_len(&mut result, 1, id.as_bytes());
            put_len(&mut result, 3, b"ok");
            put_len(&mut results, 1, &result);
        }
    }
    let user = |text: &[u8]| {
        let mut chat = vec![0x08, 0x02];
        put_len(&mut chat, 2, text);
        let mut member = Vec::new();
        put_len(&mut member, 1, &chat);
        member
    };
    let mut members = vec![user(b"go")];
    let mut member = Vec::new();
    put_len(&mut member, 2, &step);
    members.push(member);
    let mut member = Vec::new();
    put_len(&mut member, 3, &results);
    members.push(member);
    members.push(user(b"next"));
    let mut list = Vec::new();
    for m in &members {
        put_len(&mut list, 1, m);
    }
    let mut history = Vec::new();
    put_len(&mut history, 2, &list);
    let mut out = Vec::new();
    put_len(&mut out, 1, &history);
    out
}

/// A scanned request with `calls` calls, ready to sweep.
struct Case {
    raw: Vec<u8>,
    working: Working,
    calls: usize,
}

impl Case {
    fn new(calls: usize) -> Case {
        let raw = request(calls);
        let scanned = scan(&raw, 10, &conventions()).expect("decodes");
        assert_eq!(scanned.violations.total, 0);
        let working = Working::of(scanned.history, conventions().prices);
        Case {
            raw,
            working,
            calls,
        }
    }

    /// One sweep, timed; checks what it removed.
    fn sweep(&self) -> Duration {
        let start = Instant::now();
        let (swept, removals) = self.working.sweep(&self.raw).expect("re-reads");
        let elapsed = start.elapsed();
        assert_eq!(removals.len(), self.calls / 2);
        assert_eq!(swept.history.rows.len(), 4);
        elapsed
    }
}

#[test]
fn sweeping_a_row_with_many_calls_removes_the_unanswered_ones() {
    Case::new(4_000).sweep();
}

/// Prints how much longer a row with 8x the calls takes to sweep (a linear sweep: about 8x).
/// Interleaved, so a change of load hits both sizes; the best run of each is the least disturbed.
#[test]
#[ignore = "a measurement, not a check: run with --ignored --nocapture"]
fn sweep_time_against_the_calls_of_one_row() {
    let (small, large) = (Case::new(4_000), Case::new(32_000));
    let (mut best_small, mut best_large) = (Duration::MAX, Duration::MAX);
    for _ in 0..7 {
        best_small = best_small.min(small.sweep());
        best_large = best_large.min(large.sweep());
    }
    let ratio = best_large.as_secs_f64() / best_small.as_secs_f64();
    println!("8x the calls: {ratio:.1}x the time ({best_small:?} -> {best_large:?})");
}
