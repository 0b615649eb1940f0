//! The request-item limit's counter: how many elements a request's repeated fields hold, read
//! from the framing alone (tags, varints, lengths) before anything is parsed. The rules are
//! `turnkeeper/server/api/limits.py`'s, which builds the schema from the request descriptors and
//! counts the same way in Python; a test compares the two counters.

use crate::wire::{Field, Reader, LEN, MAX_DEPTH};

/// How one field's occurrences count (`limits.FieldRule`): `wire_type` is the declared one (LEN
/// for strings, bytes and messages), `packed` the element width of a packed occurrence (1 for
/// varints, 0 when it cannot be packed), `child` the message type to descend into.
#[derive(Debug, Clone, Copy)]
pub struct FieldRule {
    pub number: u32,
    pub wire_type: u8,
    pub repeated: bool,
    pub packed: u8,
    pub child: Option<usize>,
}

/// The counted fields of every message type a request reaches, by type index.
#[derive(Debug, Clone)]
pub struct ItemSchema {
    pub types: Vec<Vec<FieldRule>>,
}

/// Why a count stopped before the end of the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The count passed the limit.
    Over,
    /// The framing breaks: the decoder answers for these bytes.
    Broken,
}

/// The number of the top-level field whose items take the request past `limit` items, or None
/// when it holds at most `limit` (or its framing breaks first).
pub fn crossing_field(buf: &[u8], schema: &ItemSchema, root: usize, limit: u64) -> Option<u32> {
    let rules = schema.types.get(root)?;
    let mut left = limit;
    let mut top = Reader::new(buf, 0, buf.len());
    while !top.at_end() {
        let field = top.next_message_field(0).ok()?;
        match count_field(buf, schema, rules, &field, 0, &mut left) {
            Ok(()) => {}
            Err(Stop::Over) => return Some(field.number),
            Err(Stop::Broken) => return None,
        }
    }
    None
}

/// Counts one top-level occurrence of a request of type `root` against `left`, the items that
/// may still come: the native scan counts the fields it does not read itself this way.
pub fn count_top_field(
    buf: &[u8],
    schema: &ItemSchema,
    root: usize,
    field: &Field,
    left: &mut u64,
) -> Result<(), Stop> {
    let rules = schema.types.get(root).ok_or(Stop::Broken)?;
    count_field(buf, schema, rules, field, 0, left)
}

fn walk(
    buf: &[u8],
    schema: &ItemSchema,
    rules: &[FieldRule],
    occurrence: &Field,
    depth: u32,
    left: &mut u64,
) -> Result<(), Stop> {
    let mut reader = Reader::new(buf, occurrence.payload_start, occurrence.end);
    while !reader.at_end() {
        let field = reader.next_message_field(depth).map_err(|_| Stop::Broken)?;
        count_field(buf, schema, rules, &field, depth, left)?;
    }
    Ok(())
}

/// Counts one occurrence of a field of a message body at `depth`.
fn count_field(
    buf: &[u8],
    schema: &ItemSchema,
    rules: &[FieldRule],
    field: &Field,
    depth: u32,
    left: &mut u64,
) -> Result<(), Stop> {
    let Some(rule) = rules.iter().find(|r| r.number == field.number) else {
        return Ok(());
    };
    if field.wire_type == LEN {
        if rule.wire_type == LEN {
            if rule.repeated {
                take(left, 1)?;
            }
            if let Some(child) = rule.child.filter(|_| depth < MAX_DEPTH) {
                let child_rules = schema.types.get(child).ok_or(Stop::Broken)?;
                walk(buf, schema, child_rules, field, depth + 1, left)?;
            }
        } else if rule.packed > 0 {
            take(left, packed_elements(field.payload(buf), rule.packed))?;
        }
    } else if rule.repeated && rule.wire_type == field.wire_type {
        take(left, 1)?;
    }
    Ok(())
}

fn packed_elements(payload: &[u8], width: u8) -> u64 {
    if width == 1 {
        // A varint element ends at each byte without the continuation bit.
        payload.iter().filter(|&&b| b < 0x80).count() as u64
    } else {
        (payload.len() / usize::from(width)) as u64
    }
}

fn take(left: &mut u64, items: u64) -> Result<(), Stop> {
    match left.checked_sub(items) {
        Some(rest) => {
            *left = rest;
            Ok(())
        }
        None => Err(Stop::Over),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents_schema() -> ItemSchema {
        ItemSchema {
            types: vec![vec![FieldRule {
                number: 1,
                wire_type: LEN,
                repeated: true,
                packed: 0,
                child: None,
            }]],
        }
    }

    #[test]
    fn counts_each_occurrence_of_a_repeated_string() {
        let buf = [0x0a, 0x00].repeat(5);
        assert_eq!(crossing_field(&buf, &contents_schema(), 0, 5), None);
        assert_eq!(crossing_field(&buf, &contents_schema(), 0, 4), Some(1));
    }

    #[test]
    fn broken_framing_is_left_to_the_decoder() {
        let buf = [0x0a, 0x00, 0x0a, 0x05];
        assert_eq!(crossing_field(&buf, &contents_schema(), 0, 0), Some(1));
        assert_eq!(crossing_field(&buf[2..], &contents_schema(), 0, 0), None);
    }
}
