//! The scanner on hostile bytes: no input panics, and whatever decodes can be trimmed, swept
//! and written back as bytes that decode again. Bounded proptest runs, part of `make test`.

mod common;

use common::conventions;
use proptest::prelude::*;
use turnkeeper_native::plan;
use turnkeeper_native::rows::RowKind;
use turnkeeper_native::scan::scan;
use turnkeeper_native::wire::put_len;
use turnkeeper_native::working::Working;

fn chat_row(role: u8, content: &[u8], call_id: Option<&[u8]>, tool_call_id: &[u8]) -> Vec<u8> {
    let mut row = vec![0x08, role];
    put_len(&mut row, 2, content);
    if !tool_call_id.is_empty() {
        put_len(&mut row, 3, tool_call_id);
    }
    if let Some(id) = call_id {
        let mut call = Vec::new();
        put_len(&mut call, 1, id);
        put_len(&mut call, 2, b"f");
        put_len(&mut row, 4, &call);
    }
    row
}

/// A TrimHistory-like request: history (field 1) in the chat or the conversation shape.
fn request(rows: &[Vec<u8>], conversation: bool) -> Vec<u8> {
    let mut list = Vec::new();
    for row in rows {
        if conversation {
            let mut member = Vec::new();
            put_len(&mut member, 1, row);
            put_len(&mut list, 1, &member);
        } else {
            put_len(&mut list, 1, row);
        }
    }
    let mut history = Vec::new();
    put_len(&mut history, if conversation { 2 } else { 1 }, &list);
    let mut out = Vec::new();
    put_len(&mut out, 1, &history);
    out.extend_from_slice(&[0x10, 0x01]); // mode
    out
}

fn rows_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let row = (
        1u8..=4,
        proptest::collection::vec(any::<u8>(), 0..24),
        proptest::option::of(prop_oneof![Just(b"c1".to_vec()), Just(b"c2".to_vec())]),
        prop_oneof![Just(Vec::new()), Just(b"c1".to_vec())],
    )
        .prop_map(|(role, content, call, result)| {
            chat_row(role, &content, call.as_deref(), &result)
        });
    proptest::collection::vec(row, 0..16)
}

/// Every operation the engine offers on a scanned request; none may panic.
fn exercise(raw: &[u8]) {
    let Ok(scanned) = scan(raw, 100, &conventions()) else {
        return;
    };
    let working = Working::of(scanned.history, conventions().prices);
    let rows = &working.history.rows;
    let costs = &working.tokens;
    for budget in [0, 1, 50, 10_000, u64::MAX] {
        for low_water in [1.0, 0.7, 1e-300, f64::NAN] {
            for allow_growth in [false, true] {
                let planned = plan::token_budget(
                    rows,
                    costs,
                    budget,
                    Some(7),
                    low_water,
                    budget,
                    allow_growth,
                );
                let applied = working.apply(&planned, "[cut]");
                let written = applied.history_field(raw);
                // What is written decodes again, as a request with only its history.
                assert!(scan(&written, 1000, &conventions()).is_ok());
            }
        }
    }
    for low_water in [1.0, 0.5, f64::MIN_POSITIVE] {
        let _ = plan::turn_count(rows, costs, 1, None, low_water);
        let _ = plan::turn_count(rows, costs, u64::MAX, None, low_water);
    }
    let _ = plan::row_count(rows, costs, 2);
    let _ = working.estimates_field();
    if scanned.violations.total == 0 {
        let (swept, _) = working.sweep(raw).expect("a scanned history re-reads");
        let written = swept.history_field(raw);
        assert!(scan(&written, 1000, &conventions()).is_ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(raw in proptest::collection::vec(any::<u8>(), 0..256)) {
        exercise(&raw);
    }

    #[test]
    fn damaged_requests_never_panic(
        rows in rows_strategy(),
        conversation in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let raw = request(&rows, conversation);
        exercise(&raw);
        exercise(&raw[..cut.index(raw.len() + 1)]);
        let mut flipped = raw.clone();
        if !flipped.is_empty() {
            let at = flip.index(flipped.len());
            flipped[at] = byte;
        }
        exercise(&flipped);
    }
}

#[test]
fn a_valid_chat_history_is_read_row_by_row() {
    let rows = vec![
        chat_row(1, b"system", None, b""),
        chat_row(2, b"hello [IMAGE:/a.png]", None, b""),
        chat_row(3, b"", Some(b"c1"), b""),
        chat_row(4, b"result", None, b"c1"),
    ];
    let raw = request(&rows, false);
    let scanned = scan(&raw, 100, &conventions()).expect("decodes");
    assert_eq!(scanned.violations.total, 0);
    let kinds: Vec<RowKind> = scanned.history.rows.iter().map(|r| r.kind).collect();
    assert_eq!(
        kinds,
        [
            RowKind::System,
            RowKind::User,
            RowKind::Assistant,
            RowKind::Tool
        ]
    );
    assert_eq!(scanned.history.rows[1].marker_images, 1);
    assert_eq!(scanned.rest, vec![(raw.len() - 2, raw.len())]);
    // Untrimmed, the history comes back byte for byte.
    let working = Working::of(scanned.history, conventions().prices);
    assert_eq!(working.history_field(&raw), raw[..raw.len() - 2].to_vec());
}

#[test]
fn invalid_utf8_truncation_and_deep_groups_do_not_decode() {
    let bad_utf8 = request(&[chat_row(2, b"\xff", None, b"")], false);
    assert!(scan(&bad_utf8, 10, &conventions()).is_err());
    let good = request(&[chat_row(2, b"ok", None, b"")], true);
    assert!(scan(&good[..good.len() - 3], 10, &conventions()).is_err());
    let mut deep = vec![0x08, 0x02];
    deep.extend(std::iter::repeat_n(0x7b, 120));
    deep.extend(std::iter::repeat_n(0x7c, 120));
    assert!(scan(&request(&[deep], false), 10, &conventions()).is_err());
}
