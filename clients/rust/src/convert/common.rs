//! Pieces every converter shares: rows being built, skeletons, cursors, markers, attachments.
//! docs/converters.md is the mapping; the vectors in tests/conformance/converters pin it.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::marks::{TurnMarks, apply_marks};
use crate::error::ConversionError;
use crate::pb::{
    AssistantToolCalls, Attachment, ChatHistory, ChatMessage, ConversationHistory,
    ConversationMessage, History, Role, ToolCall, ToolResult, ToolResults, attachment,
    conversation_message, history,
};

/// The server's default breadcrumb text (docs/semantics.md, Trims).
pub const DEFAULT_BREADCRUMB: &str = "[earlier turns omitted to fit the context window]";
/// The start of the text of a `[Tool results]` carrier row.
pub const CARRIER_PREFIX: &str = "[Tool results]";
const MARKER_OPEN: &str = "[IMAGE:";

pub(crate) type Object = Map<String, Value>;
pub(crate) type Res<T> = std::result::Result<T, ConversionError>;

/// The history shape a converter builds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Shape {
    /// `ChatMessage` rows.
    #[default]
    Chat,
    /// Structured `ConversationMessage` rows.
    Conversation,
}

/// How an import builds the history.
#[derive(Debug, Clone, Default)]
pub struct ConvertOptions {
    /// The history shape to build.
    pub shape: Shape,
    /// User texts right after the leading system rows that mark the breadcrumb; `None` means the
    /// server's default text.
    pub breadcrumb_texts: Option<Vec<String>>,
    /// The summary and pinned-turn marks kept beside the provider JSON ([`turn_marks`](super::turn_marks)).
    pub marks: TurnMarks,
}

/// The stream a skeleton slot takes priced text from (one field except on conversation steps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stream {
    Text,
    Reasoning,
}

/// Reads a provider object's key with null as absent (docs/converters.md): SDK dumps write
/// `"function_call": null`, `"tool_calls": null` and the like, which mean "not there". The
/// skeleton keeps the null, so it round-trips.
pub(crate) trait Field {
    fn field(&self, key: &str) -> Option<&Value>;
}

impl Field for Object {
    fn field(&self, key: &str) -> Option<&Value> {
        self.get(key).filter(|value| !value.is_null())
    }
}

pub(crate) fn err(path: impl Into<String>, reason: impl Into<String>) -> ConversionError {
    ConversionError::new(path, reason)
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

pub(crate) fn expect_str<'a>(value: Option<&'a Value>, path: &str) -> Res<&'a str> {
    match value {
        Some(Value::String(s)) => Ok(s),
        other => Err(err(
            path,
            format!(
                "expected a string, got {}",
                other.map_or("nothing", kind_of)
            ),
        )),
    }
}

pub(crate) fn expect_object<'a>(value: Option<&'a Value>, path: &str) -> Res<&'a Object> {
    match value {
        Some(Value::Object(o)) => Ok(o),
        other => Err(err(
            path,
            format!(
                "expected an object, got {}",
                other.map_or("nothing", kind_of)
            ),
        )),
    }
}

pub(crate) fn expect_array<'a>(value: Option<&'a Value>, path: &str) -> Res<&'a Vec<Value>> {
    match value {
        Some(Value::Array(a)) => Ok(a),
        other => Err(err(
            path,
            format!(
                "expected an array, got {}",
                other.map_or("nothing", kind_of)
            ),
        )),
    }
}

/// A skeleton slot: the number of code points it takes from its stream.
fn expect_length(value: Option<&Value>, path: &str) -> Res<usize> {
    value
        .and_then(Value::as_f64)
        .filter(|f| *f >= 0.0 && f.fract() == 0.0)
        .map(|f| f as usize)
        .ok_or_else(|| err(path, "passthrough slot is not a length"))
}

/// The length of a string in code points, the unit of every skeleton slot.
pub(crate) fn code_points(text: &str) -> usize {
    text.chars().count()
}

pub(crate) fn length(text: &str) -> Value {
    Value::from(code_points(text))
}

/// Compact JSON with sorted keys: the one text every client writes for a JSON value.
pub(crate) fn canonical_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::from(k.as_str()), canonical_json(&map[k])))
                .collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(canonical_json).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

pub(crate) fn is_carrier(content: &str) -> bool {
    content.starts_with(CARRIER_PREFIX)
}

fn sendable_url(reference: &str) -> bool {
    let trimmed = reference.trim();
    ["http://", "https://", "data:"]
        .iter()
        .any(|p| trimmed.starts_with(p))
}

pub(crate) fn marker(url: &str, path: &str) -> Res<String> {
    if url.contains(']') {
        return Err(err(
            path,
            "image URL contains ']' and cannot be an [IMAGE:] marker",
        ));
    }
    Ok(format!("{MARKER_OPEN}{url}]"))
}

/// A text run, or a sendable `[IMAGE:<ref>]` marker, of user text.
pub(crate) struct Piece<'a> {
    pub(crate) text: &'a str,
    pub(crate) is_marker: bool,
}

pub(crate) fn split_markers(content: &str) -> Vec<Piece<'_>> {
    let mut parts = Vec::new();
    let (mut text_start, mut pos) = (0, 0);
    while let Some(found) = content[pos..].find(MARKER_OPEN) {
        let start = pos + found;
        let Some(close) = content[start + MARKER_OPEN.len()..].find(']') else {
            break;
        };
        let end = start + MARKER_OPEN.len() + close;
        if sendable_url(&content[start + MARKER_OPEN.len()..end]) {
            if start > text_start {
                parts.push(Piece {
                    text: &content[text_start..start],
                    is_marker: false,
                });
            }
            parts.push(Piece {
                text: &content[start..=end],
                is_marker: true,
            });
            text_start = end + 1;
        }
        pos = end + 1;
    }
    if text_start < content.len() {
        parts.push(Piece {
            text: &content[text_start..],
            is_marker: false,
        });
    }
    parts
}

/// The URL inside a marker text `[IMAGE:<url>]`.
pub(crate) fn marker_url(marker_text: &str) -> &str {
    &marker_text[MARKER_OPEN.len()..marker_text.len() - 1]
}

/// `(media type, base64 payload)` of a `data:<type>;base64,<payload>` URL.
pub(crate) fn parse_data_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("data:")?;
    let (header, payload) = rest.split_once(',')?;
    Some((header.strip_suffix(";base64")?, payload))
}

fn decode_base64(payload: &str, path: &str) -> Res<Vec<u8>> {
    STANDARD
        .decode(payload)
        .map_err(|_| err(path, "invalid base64 image data"))
}

/// A data URL becomes inline bytes, any other URL a `uri` (no media type is guessed).
pub(crate) fn attachment_from_url(url: &str, path: &str) -> Res<Attachment> {
    if let Some((media_type, payload)) = parse_data_url(url) {
        return Ok(Attachment {
            media_type: media_type.to_owned(),
            source: Some(attachment::Source::Data(decode_base64(payload, path)?)),
        });
    }
    Ok(Attachment {
        media_type: String::new(),
        source: Some(attachment::Source::Uri(url.to_owned())),
    })
}

pub(crate) fn attachment_url(a: &Attachment, path: &str) -> Res<String> {
    match &a.source {
        Some(attachment::Source::Data(data)) => Ok(format!(
            "data:{};base64,{}",
            a.media_type,
            STANDARD.encode(data)
        )),
        Some(attachment::Source::Uri(uri)) => Ok(uri.clone()),
        None => Err(err(path, "attachment has neither data nor uri")),
    }
}

/// A provider row being imported: the row, its priced text as pieces in provider order and the
/// skeleton of the fragment it came from.
pub(crate) struct Row {
    pub(crate) message: ChatMessage,
    pub(crate) skeleton: Object,
    pieces: Vec<(Stream, String)>,
}

impl Row {
    pub(crate) fn new(role: Role, skeleton: Object) -> Self {
        Row {
            message: ChatMessage {
                role: role as i32,
                ..Default::default()
            },
            skeleton,
            pieces: Vec::new(),
        }
    }

    /// Adds priced text; returns its length, which the skeleton keeps in the text's place.
    pub(crate) fn add(&mut self, text: &str) -> Value {
        self.add_to(Stream::Text, text)
    }

    pub(crate) fn add_to(&mut self, stream: Stream, text: &str) -> Value {
        self.pieces.push((stream, text.to_owned()));
        length(text)
    }

    fn joined(&self, stream: Option<Stream>) -> String {
        self.pieces
            .iter()
            .filter(|(s, _)| stream.is_none_or(|want| *s == want))
            .map(|(_, t)| t.as_str())
            .collect()
    }

    /// Adds an image where the row keeps it: an attachment, or a marker in its text.
    pub(crate) fn add_image(&mut self, url: &str, attach: bool, path: &str) -> Res<()> {
        if attach {
            self.message
                .attachments
                .push(attachment_from_url(url, path)?);
        } else {
            let text = marker(url, path)?;
            self.add(&text);
        }
        Ok(())
    }
}

/// One provider row on its way out: the row, the reasoning of a conversation step (`None` where
/// reasoning is in `content`), this format's skeleton, if any, and the index of the history
/// message it comes from (the rows of one ToolResults message share it).
#[derive(Clone)]
pub(crate) struct FlatRow {
    pub(crate) message: ChatMessage,
    pub(crate) reasoning: Option<String>,
    pub(crate) skeleton: Option<Object>,
    pub(crate) index: usize,
}

pub(crate) type DefaultSkeleton = fn(&FlatRow, Option<&FlatRow>) -> Res<Object>;

fn role_of(message: &ChatMessage) -> Role {
    Role::try_from(message.role).unwrap_or(Role::Unspecified)
}

/// Fills content, marks the breadcrumb, drops skeletons equal to the default and builds the history.
pub(crate) fn finish(
    mut rows: Vec<Row>,
    format: &str,
    default_skeleton: DefaultSkeleton,
    options: &ConvertOptions,
) -> Res<History> {
    for row in &mut rows {
        row.message.content = row.joined(None);
    }
    let default_texts = [DEFAULT_BREADCRUMB.to_owned()];
    let texts = options
        .breadcrumb_texts
        .as_deref()
        .unwrap_or(&default_texts);
    apply_marks(&mut rows, &options.marks, texts)?;
    let mut previous: Option<FlatRow> = None;
    for row in &mut rows {
        let plain = FlatRow {
            message: row.message.clone(),
            reasoning: None,
            skeleton: None,
            index: 0,
        };
        if row.skeleton != default_skeleton(&plain, previous.as_ref())? {
            let mut envelope = Object::new();
            envelope.insert(format.to_owned(), Value::Object(row.skeleton.clone()));
            row.message.passthrough = Some(to_struct(&envelope));
        }
        previous = Some(FlatRow {
            message: row.message.clone(),
            reasoning: None,
            skeleton: Some(row.skeleton.clone()),
            index: 0,
        });
    }
    Ok(build_history(rows, options.shape))
}

fn build_history(rows: Vec<Row>, shape: Shape) -> History {
    if shape == Shape::Chat {
        let messages = rows.into_iter().map(|r| r.message).collect();
        return History {
            shape: Some(history::Shape::Chat(ChatHistory { messages })),
        };
    }
    let mut out: Vec<ConversationMessage> = Vec::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for row in rows {
        let text = row.joined(Some(Stream::Text));
        let reasoning = row.joined(Some(Stream::Reasoning));
        let m = row.message;
        if role_of(&m) == Role::Assistant && !m.tool_calls.is_empty() {
            for call in &m.tool_calls {
                names.insert(call.id.clone(), call.name.clone());
            }
            let step = AssistantToolCalls {
                text,
                tool_calls: m.tool_calls,
                reasoning,
                passthrough: m.passthrough,
            };
            out.push(ConversationMessage {
                message: Some(conversation_message::Message::AssistantToolCalls(step)),
            });
        } else if role_of(&m) == Role::Tool {
            let result = ToolResult {
                tool_name: names.get(&m.tool_call_id).cloned().unwrap_or_default(),
                tool_call_id: m.tool_call_id,
                content: m.content,
                attachments: m.attachments,
                passthrough: m.passthrough,
            };
            if let Some(ConversationMessage {
                message: Some(conversation_message::Message::ToolResults(results)),
            }) = out.last_mut()
            {
                results.results.push(result);
            } else {
                out.push(ConversationMessage {
                    message: Some(conversation_message::Message::ToolResults(ToolResults {
                        results: vec![result],
                    })),
                });
            }
        } else {
            out.push(ConversationMessage {
                message: Some(conversation_message::Message::Chat(m)),
            });
        }
    }
    History {
        shape: Some(history::Shape::Conversation(ConversationHistory {
            messages: out,
        })),
    }
}

fn to_struct(object: &Object) -> prost_types::Struct {
    prost_types::Struct {
        fields: object
            .iter()
            .map(|(k, v)| (k.clone(), to_value(v)))
            .collect(),
    }
}

fn to_value(value: &Value) -> prost_types::Value {
    use prost_types::value::Kind;
    let kind = match value {
        Value::Null => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => Kind::StringValue(s.clone()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        Value::Object(o) => Kind::StructValue(to_struct(o)),
    };
    prost_types::Value { kind: Some(kind) }
}

/// A Struct value as JSON; integral numbers become integers again (Struct keeps every number a double).
fn from_value(value: &prost_types::Value) -> Value {
    use prost_types::value::Kind;
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 => {
            Value::from(*n as i64)
        }
        Some(Kind::NumberValue(n)) => {
            serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
        }
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(from_value).collect()),
        Some(Kind::StructValue(s)) => Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), from_value(v)))
                .collect(),
        ),
    }
}

fn skeleton_of(passthrough: Option<&prost_types::Struct>, format: &str) -> Res<Option<Object>> {
    let Some(value) = passthrough.and_then(|p| p.fields.get(format)) else {
        return Ok(None);
    };
    match from_value(value) {
        Value::Object(o) => Ok(Some(o)),
        _ => Err(err(format!("passthrough.{format}"), "expected an object")),
    }
}

/// The provider rows a history stands for, in order, with their `format` skeletons.
pub(crate) fn flat_rows(history: &History, format: &str) -> Res<Vec<FlatRow>> {
    let mut rows = Vec::new();
    match &history.shape {
        Some(history::Shape::Chat(chat)) => {
            for (index, m) in chat.messages.iter().enumerate() {
                rows.push(FlatRow {
                    message: m.clone(),
                    reasoning: None,
                    skeleton: skeleton_of(m.passthrough.as_ref(), format)?,
                    index,
                });
            }
        }
        Some(history::Shape::Conversation(conversation)) => {
            for (i, message) in conversation.messages.iter().enumerate() {
                match &message.message {
                    Some(conversation_message::Message::Chat(m)) => {
                        rows.push(FlatRow {
                            message: m.clone(),
                            reasoning: None,
                            skeleton: skeleton_of(m.passthrough.as_ref(), format)?,
                            index: i,
                        });
                    }
                    Some(conversation_message::Message::AssistantToolCalls(step)) => {
                        let m = ChatMessage {
                            role: Role::Assistant as i32,
                            content: step.text.clone(),
                            tool_calls: step.tool_calls.clone(),
                            ..Default::default()
                        };
                        rows.push(FlatRow {
                            message: m,
                            reasoning: Some(step.reasoning.clone()),
                            skeleton: skeleton_of(step.passthrough.as_ref(), format)?,
                            index: i,
                        });
                    }
                    Some(conversation_message::Message::ToolResults(results)) => {
                        for result in &results.results {
                            let m = ChatMessage {
                                role: Role::Tool as i32,
                                tool_call_id: result.tool_call_id.clone(),
                                content: result.content.clone(),
                                attachments: result.attachments.clone(),
                                ..Default::default()
                            };
                            rows.push(FlatRow {
                                message: m,
                                reasoning: None,
                                skeleton: skeleton_of(result.passthrough.as_ref(), format)?,
                                index: i,
                            });
                        }
                    }
                    None => {
                        return Err(err(
                            format!("history.conversation.messages[{i}]"),
                            "no message set",
                        ));
                    }
                }
            }
        }
        None => return Err(err("history", "neither chat nor conversation is set")),
    }
    Ok(rows)
}

/// Reads a row's priced text back in the order the skeleton's slots name it.
struct Cursor {
    text: String,
    pos: usize,
    path: String,
    field: &'static str,
}

impl Cursor {
    fn take(&mut self, length: Option<&Value>, path: &str) -> Res<String> {
        let mut n = expect_length(length, path)?;
        let start = self.pos;
        let mut chars = self.text[self.pos..].chars();
        while n > 0 {
            let Some(c) = chars.next() else {
                return Err(err(
                    path,
                    format!(
                        "passthrough wants more characters of {} than the {} that remain; the row changed since it was converted",
                        self.field,
                        code_points(&self.text[start..])
                    ),
                ));
            };
            self.pos += c.len_utf8();
            n -= 1;
        }
        Ok(self.text[start..self.pos].to_owned())
    }

    /// The URL of the `[IMAGE:<url>]` marker at the current position.
    fn marker_url(&mut self, path: &str) -> Res<String> {
        let rest = &self.text[self.pos..];
        let end = match (rest.starts_with(MARKER_OPEN), rest.find(']')) {
            (true, Some(end)) => end,
            _ => return Err(err(path, "passthrough expects an [IMAGE:] marker here")),
        };
        let url = rest[MARKER_OPEN.len()..end].to_owned();
        self.pos += end + 1;
        Ok(url)
    }

    fn done(&self) -> Res<()> {
        if self.pos == self.text.len() {
            return Ok(());
        }
        Err(err(
            &self.path,
            format!(
                "{} characters of {} have no place in the passthrough or the target format",
                code_points(&self.text[self.pos..]),
                self.field
            ),
        ))
    }
}

/// One row's text and reasoning cursors, attachments and tool calls, read in order.
pub(crate) struct Streams {
    text: Cursor,
    reasoning: Option<Cursor>,
    attachments: std::vec::IntoIter<Attachment>,
    calls: std::vec::IntoIter<ToolCall>,
    tool_call_id: Option<String>,
    attach_images: bool,
    path: String,
}

impl Streams {
    pub(crate) fn new(row: &FlatRow, path: &str) -> Res<Self> {
        let m = &row.message;
        if !m.tool_call_id.is_empty() && role_of(m) != Role::Tool {
            return Err(err(
                path,
                "tool_call_id on a non-tool row has no provider field",
            ));
        }
        Ok(Streams {
            text: Cursor {
                text: m.content.clone(),
                pos: 0,
                path: path.to_owned(),
                field: "content",
            },
            reasoning: row.reasoning.as_ref().map(|r| Cursor {
                text: r.clone(),
                pos: 0,
                path: path.to_owned(),
                field: "reasoning",
            }),
            attachments: m.attachments.clone().into_iter(),
            calls: m.tool_calls.clone().into_iter(),
            tool_call_id: (role_of(m) == Role::Tool).then(|| m.tool_call_id.clone()),
            attach_images: images_are_attachments(m),
            path: path.to_owned(),
        })
    }

    pub(crate) fn text(&mut self, length: Option<&Value>, path: &str) -> Res<Value> {
        self.text.take(length, path).map(Value::String)
    }

    pub(crate) fn reasoning(&mut self, length: Option<&Value>, path: &str) -> Res<Value> {
        self.reasoning
            .as_mut()
            .unwrap_or(&mut self.text)
            .take(length, path)
            .map(Value::String)
    }

    /// An image slot: a marker in a user row, an attachment in a tool or carrier row.
    pub(crate) fn image_url(&mut self, path: &str) -> Res<String> {
        if !self.attach_images {
            return self.text.marker_url(path);
        }
        let a = self
            .attachments
            .next()
            .ok_or_else(|| err(path, "passthrough expects an attachment the row lacks"))?;
        attachment_url(&a, path)
    }

    /// The next tool call; `None` once the row has no more (the sweep may have removed some).
    pub(crate) fn call(&mut self) -> Option<ToolCall> {
        self.calls.next()
    }

    /// How many tool calls are left to place.
    pub(crate) fn calls_left(&self) -> usize {
        self.calls.len()
    }

    /// The id a tool row answers; `None` on other rows.
    pub(crate) fn tool_call_id(&self) -> Option<&str> {
        self.tool_call_id.as_deref()
    }

    pub(crate) fn done(&self) -> Res<()> {
        self.text.done()?;
        if let Some(reasoning) = &self.reasoning {
            reasoning.done()?;
        }
        if self.attachments.len() > 0 {
            return Err(err(
                &self.path,
                "attachments have no place in the passthrough",
            ));
        }
        if self.calls.len() > 0 {
            return Err(err(
                &self.path,
                "tool calls have no place in the passthrough",
            ));
        }
        Ok(())
    }
}

pub(crate) fn images_are_attachments(m: &ChatMessage) -> bool {
    role_of(m) == Role::Tool || (role_of(m) == Role::User && is_carrier(&m.content))
}

/// A user row whose `[IMAGE:]` markers are plain text: the breadcrumb, the summary row (priced as
/// text, spec §15.2) or a carrier.
pub(crate) fn marker_text_row(m: &ChatMessage) -> bool {
    m.breadcrumb || m.summary || is_carrier(&m.content)
}

pub(crate) fn role(m: &ChatMessage) -> Role {
    role_of(m)
}

/// The concatenated `text` of the parts whose type is one of `types`.
pub(crate) fn part_texts(parts: &[&Object], types: &[&str]) -> String {
    parts
        .iter()
        .filter(|p| {
            p.get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| types.contains(&t))
        })
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect()
}

pub(crate) fn objects<'a>(values: &'a [Value], path: &str) -> Res<Vec<&'a Object>> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| expect_object(Some(v), &format!("{path}[{i}]")))
        .collect()
}

/// A JSON object from `(key, value)` pairs.
pub(crate) fn obj<const N: usize>(pairs: [(&str, Value); N]) -> Object {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

pub(crate) fn type_of(o: &Object) -> Option<&str> {
    o.get("type").and_then(Value::as_str)
}
