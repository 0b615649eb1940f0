//! Protobuf wire format, read exactly as upb (the Python protobuf runtime) reads it.
//!
//! Only what decides "does this decode" lives here: tags, varints, lengths, groups, nesting
//! depth, and the UTF-8 validity of proto3 `string` fields. A known field number that arrives
//! with another wire type is an unknown field, as protobuf has it, never an error.

/// upb's default nesting limit: a message or group at level 101 below the root fails.
pub const MAX_DEPTH: u32 = 100;

/// Why bytes do not decode. The position is kept for debugging; errors are reported by field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

pub type Result<T> = std::result::Result<T, Malformed>;

pub const VARINT: u8 = 0;
pub const FIXED64: u8 = 1;
pub const LEN: u8 = 2;
pub const START_GROUP: u8 = 3;
pub const END_GROUP: u8 = 4;
pub const FIXED32: u8 = 5;

/// One field occurrence: its number, wire type and, for LEN fields, the payload's range.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub number: u32,
    pub wire_type: u8,
    /// Range of the whole occurrence (tag included) in the buffer.
    pub start: usize,
    pub end: usize,
    /// Varint value (VARINT) or payload range (LEN); unused otherwise.
    pub value: u64,
    pub payload_start: usize,
}

impl Field {
    pub fn payload<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.payload_start..self.end]
    }
}

/// A cursor over one message body (`buf[pos..end]`).
pub struct Reader<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    pub end: usize,
}

fn read_varint(buf: &[u8], pos: &mut usize, end: usize) -> Result<u64> {
    read_varint_of(buf, pos, end, 10)
}

/// A varint of at most `max_bytes` bytes (10 for values, 5 for lengths, as upb reads them).
fn read_varint_of(buf: &[u8], pos: &mut usize, end: usize, max_bytes: u32) -> Result<u64> {
    let mut value: u64 = 0;
    for i in 0..max_bytes {
        let byte = *buf.get(*pos).filter(|_| *pos < end).ok_or(Malformed)?;
        *pos += 1;
        // Bits beyond 64 are dropped, as upb does; a tenth byte may not continue.
        value |= u64::from(byte & 0x7f).wrapping_shl(7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Malformed)
}

fn read_tag(buf: &[u8], pos: &mut usize, end: usize) -> Result<(u32, u8)> {
    // upb reads a tag as a varint of at most five bytes that fits 32 bits.
    let mut value: u64 = 0;
    for i in 0..5 {
        let byte = *buf.get(*pos).filter(|_| *pos < end).ok_or(Malformed)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if value > u64::from(u32::MAX) {
                return Err(Malformed);
            }
            let number = (value >> 3) as u32;
            if number == 0 {
                return Err(Malformed);
            }
            return Ok((number, (value & 7) as u8));
        }
    }
    Err(Malformed)
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], start: usize, end: usize) -> Self {
        Reader {
            buf,
            pos: start,
            end,
        }
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.end
    }

    /// The next field occurrence. Groups are skipped (validated) here, END_GROUP is returned to
    /// the caller that opened the group; `depth` is the level of the message being read.
    pub fn next_field(&mut self, depth: u32) -> Result<Field> {
        let start = self.pos;
        let (number, wire_type) = read_tag(self.buf, &mut self.pos, self.end)?;
        let mut field = Field {
            number,
            wire_type,
            start,
            end: 0,
            value: 0,
            payload_start: 0,
        };
        match wire_type {
            VARINT => field.value = read_varint(self.buf, &mut self.pos, self.end)?,
            FIXED64 => self.skip(8)?,
            FIXED32 => self.skip(4)?,
            LEN => {
                let len = read_varint_of(self.buf, &mut self.pos, self.end, 5)?;
                let available = (self.end - self.pos) as u64;
                if len > available {
                    return Err(Malformed);
                }
                field.payload_start = self.pos;
                self.pos += len as usize;
            }
            START_GROUP => self.skip_group(number, depth + 1)?,
            END_GROUP => {}
            _ => return Err(Malformed),
        }
        field.end = self.pos;
        Ok(field)
    }

    fn skip(&mut self, n: usize) -> Result<()> {
        if self.end - self.pos < n {
            return Err(Malformed);
        }
        self.pos += n;
        Ok(())
    }

    /// Reads up to the END_GROUP matching `number`; the group's body is at `depth`.
    fn skip_group(&mut self, number: u32, depth: u32) -> Result<()> {
        if depth > MAX_DEPTH {
            return Err(Malformed);
        }
        loop {
            if self.at_end() {
                return Err(Malformed);
            }
            let field = self.next_field(depth)?;
            if field.wire_type == END_GROUP {
                return if field.number == number {
                    Ok(())
                } else {
                    Err(Malformed)
                };
            }
        }
    }

    /// The next field of a message body (END_GROUP outside a group is malformed).
    pub fn next_message_field(&mut self, depth: u32) -> Result<Field> {
        let field = self.next_field(depth)?;
        if field.wire_type == END_GROUP {
            return Err(Malformed);
        }
        Ok(field)
    }
}

/// How a field of a schema is checked when it arrives with its declared wire type.
#[derive(Clone, Copy)]
pub enum Kind {
    /// A proto3 `string`: must be UTF-8.
    Str,
    /// A sub-message, validated against its schema one level deeper.
    Message(&'static Schema),
    /// A repeated sub-message: as `Message`, and each occurrence is one item of the request-item
    /// limit (`items.rs`).
    Items(&'static Schema),
}

/// The fields of a message type that can fail to decode beyond framing: strings and messages.
pub struct Schema {
    pub fields: &'static [(u32, Kind)],
}

impl Schema {
    pub fn kind(&self, number: u32) -> Option<Kind> {
        self.fields
            .iter()
            .find(|(n, _)| *n == number)
            .map(|(_, kind)| *kind)
    }
}

pub fn check_utf8(bytes: &[u8]) -> Result<()> {
    std::str::from_utf8(bytes)
        .map(|_| ())
        .map_err(|_| Malformed)
}

/// Validates a whole message body against its schema; the body is at `depth`. Gives the items
/// it holds (occurrences of `Kind::Items` fields, at any depth).
pub fn validate(buf: &[u8], start: usize, end: usize, schema: &Schema, depth: u32) -> Result<u64> {
    if depth > MAX_DEPTH {
        return Err(Malformed);
    }
    let mut items = 0;
    let mut reader = Reader::new(buf, start, end);
    while !reader.at_end() {
        let field = reader.next_message_field(depth)?;
        if field.wire_type == LEN {
            items += check_known(buf, &field, schema.kind(field.number), depth)?;
        }
    }
    Ok(items)
}

/// Checks a LEN field occurrence against its declared kind (None: unknown, nothing to check);
/// gives the items it holds, itself included.
pub fn check_known(buf: &[u8], field: &Field, kind: Option<Kind>, depth: u32) -> Result<u64> {
    match kind {
        Some(Kind::Str) => check_utf8(field.payload(buf)).map(|()| 0),
        Some(Kind::Message(schema)) => {
            validate(buf, field.payload_start, field.end, schema, depth + 1)
        }
        Some(Kind::Items(schema)) => {
            Ok(1 + validate(buf, field.payload_start, field.end, schema, depth + 1)?)
        }
        None => Ok(0),
    }
}

// google.protobuf.Struct, Value and ListValue (the passthrough fields).
pub static STRUCT: Schema = Schema {
    fields: &[(1, Kind::Items(&STRUCT_FIELDS_ENTRY))],
};
static STRUCT_FIELDS_ENTRY: Schema = Schema {
    fields: &[(1, Kind::Str), (2, Kind::Message(&VALUE))],
};
static VALUE: Schema = Schema {
    fields: &[
        (3, Kind::Str),
        (5, Kind::Message(&STRUCT)),
        (6, Kind::Message(&LIST_VALUE)),
    ],
};
static LIST_VALUE: Schema = Schema {
    fields: &[(1, Kind::Items(&VALUE))],
};

// turnkeeper.v1 history messages, for the parts the scanner does not interpret itself.
pub static ATTACHMENT: Schema = Schema {
    fields: &[(1, Kind::Str), (3, Kind::Str)],
};

/// Appends `value` as a varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value > 0x7f {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Appends a LEN field: tag, length, payload.
pub fn put_len(out: &mut Vec<u8>, number: u32, payload: &[u8]) {
    put_varint(out, u64::from(number) << 3 | u64::from(LEN));
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// Appends a LEN field's header only (the caller writes `len` payload bytes next).
pub fn put_len_header(out: &mut Vec<u8>, number: u32, len: usize) {
    put_varint(out, u64::from(number) << 3 | u64::from(LEN));
    put_varint(out, len as u64);
}

/// The encoded size of a varint.
pub fn varint_len(mut value: u64) -> usize {
    let mut n = 1;
    while value > 0x7f {
        value >>= 7;
        n += 1;
    }
    n
}

/// Appends a varint field, omitted when 0 (proto3 implicit presence).
pub fn put_uint(out: &mut Vec<u8>, number: u32, value: u64) {
    if value != 0 {
        put_varint(out, u64::from(number) << 3 | u64::from(VARINT));
        put_varint(out, value);
    }
}
