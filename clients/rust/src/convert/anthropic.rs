//! Anthropic Messages (`system` + `messages`) <-> turnkeeper.v1 History (passthrough key
//! `anthropic`). docs/converters.md is the mapping; the converter vectors pin it.

use std::collections::HashMap;

use serde_json::Value;

use super::cache::{AnthropicExportOptions, BlockPlace, history_length, mark_cache_breakpoints};
use super::common::{
    ConvertOptions, Field, FlatRow, Object, Res, Row, Stream, Streams, canonical_json, code_points,
    err, expect_array, expect_object, expect_str, finish, flat_rows, is_carrier, length,
    marker_text_row, marker_url, obj, objects, parse_data_url, part_texts, role, split_markers,
    type_of,
};
use crate::pb::{Attachment, History, Role, ToolCall, attachment};

const FORMAT: &str = "anthropic";

/// Converts an Anthropic Messages request (`system` and `messages`; other keys are the caller's
/// and are not read), or a bare `messages` array, to a History.
pub fn from_anthropic(request: &Value, options: &ConvertOptions) -> Res<History> {
    let mut rows = Vec::new();
    let messages = match request {
        Value::Array(messages) => messages,
        other => {
            let request = expect_object(Some(other), "request")?;
            match request.field("system") {
                Some(Value::String(system)) => {
                    let mut row = Row::new(Role::System, Object::new());
                    row.add(system);
                    rows.push(row);
                }
                None | Some(Value::Null) => {}
                system => {
                    for (k, raw) in expect_array(system, "system")?.iter().enumerate() {
                        rows.push(import_system_block(raw, &format!("system[{k}]"))?);
                    }
                }
            }
            expect_array(request.field("messages"), "messages")?
        }
    };
    for (i, raw) in messages.iter().enumerate() {
        let path = format!("messages[{i}]");
        let message = expect_object(Some(raw), &path)?;
        match message.field("role").and_then(Value::as_str) {
            Some("user") => rows.extend(import_user(message, &path)?),
            Some("assistant") => rows.push(import_assistant(message, &path)?),
            other => {
                return Err(err(
                    format!("{path}.role"),
                    format!("unsupported role {other:?}"),
                ));
            }
        }
    }
    finish(rows, FORMAT, default_skeleton, options)
}

fn import_system_block(raw: &Value, path: &str) -> Res<Row> {
    let block = expect_object(Some(raw), path)?;
    if type_of(block) != Some("text") {
        return Err(err(path, "only text blocks are supported"));
    }
    let mut row = Row::new(Role::System, block.clone());
    let n = row.add(expect_str(block.field("text"), &format!("{path}.text"))?);
    row.skeleton.insert("text".into(), n);
    Ok(row)
}

/// One row per `tool_result` block and one user row per run of other blocks; rows after the first
/// have a skeleton without `role`: they continue the same message.
fn import_user(message: &Object, path: &str) -> Res<Vec<Row>> {
    let mut skeleton = message.clone();
    if let Some(Value::String(content)) = message.field("content") {
        let mut row = Row::new(Role::User, skeleton);
        let n = row.add(content);
        row.skeleton.insert("content".into(), n);
        return Ok(vec![row]);
    }
    let blocks = objects(
        expect_array(message.field("content"), &format!("{path}.content"))?,
        &format!("{path}.content"),
    )?;
    let mut runs: Vec<Vec<(usize, &Object)>> = Vec::new();
    for (k, block) in blocks.into_iter().enumerate() {
        let starts = type_of(block) == Some("tool_result")
            || runs
                .last()
                .is_none_or(|run| type_of(run[0].1) == Some("tool_result"));
        if starts {
            runs.push(vec![(k, block)]);
        } else if let Some(run) = runs.last_mut() {
            run.push((k, block));
        }
    }
    if runs.is_empty() {
        skeleton.insert("content".into(), Value::Array(Vec::new()));
        return Ok(vec![Row::new(Role::User, skeleton)]);
    }
    let mut rows = Vec::new();
    for (n, run) in runs.into_iter().enumerate() {
        let mut head = if n == 0 {
            skeleton.clone()
        } else {
            Object::new()
        };
        let (k0, first) = run[0];
        let mut row;
        if type_of(first) == Some("tool_result") {
            let (imported, block) = import_tool_result(first, &format!("{path}.content[{k0}]"))?;
            row = imported;
            head.insert("content".into(), Value::Array(vec![Value::Object(block)]));
        } else {
            row = Row::new(Role::User, Object::new());
            let texts: Vec<&Object> = run.iter().map(|(_, b)| *b).collect();
            let attach = is_carrier(&part_texts(&texts, &["text"]));
            let mut out = Vec::new();
            for (k, block) in run {
                let here = format!("{path}.content[{k}]");
                let mut block_skeleton = block.clone();
                match type_of(block) {
                    Some("text") => {
                        let n = row.add(expect_str(block.field("text"), &format!("{here}.text"))?);
                        block_skeleton.insert("text".into(), n);
                    }
                    Some("image") => {
                        let url = import_image(block, &mut block_skeleton, &here)?;
                        row.add_image(&url, attach, &here)?;
                    }
                    other => {
                        return Err(err(&here, format!("unsupported user block type {other:?}")));
                    }
                }
                out.push(Value::Object(block_skeleton));
            }
            head.insert("content".into(), Value::Array(out));
        }
        row.skeleton = head;
        rows.push(row);
    }
    Ok(rows)
}

/// The image's URL (a data URL for base64 sources); the skeleton keeps the rest of the source.
fn import_image(block: &Object, skeleton: &mut Object, path: &str) -> Res<String> {
    let mut source = expect_object(block.field("source"), &format!("{path}.source"))?.clone();
    let url = match source.field("type").and_then(Value::as_str) {
        Some("base64") => {
            let media_type = expect_str(
                source.field("media_type"),
                &format!("{path}.source.media_type"),
            )?;
            let data = expect_str(source.field("data"), &format!("{path}.source.data"))?;
            let url = format!("data:{media_type};base64,{data}");
            source.remove("data");
            url
        }
        Some("url") => {
            let url = expect_str(source.field("url"), &format!("{path}.source.url"))?.to_owned();
            source.remove("url");
            url
        }
        other => {
            return Err(err(
                format!("{path}.source.type"),
                format!("unsupported image source {other:?}"),
            ));
        }
    };
    skeleton.insert("source".into(), Value::Object(source));
    Ok(url)
}

fn import_tool_result(block: &Object, path: &str) -> Res<(Row, Object)> {
    let mut row = Row::new(Role::Tool, Object::new());
    row.message.tool_call_id =
        expect_str(block.field("tool_use_id"), &format!("{path}.tool_use_id"))?.to_owned();
    let mut skeleton = block.clone();
    skeleton.remove("tool_use_id");
    match block.field("content") {
        Some(Value::String(content)) => {
            let n = row.add(content);
            skeleton.insert("content".into(), n);
        }
        None | Some(Value::Null) => {}
        content => {
            let mut inner = Vec::new();
            for (k, raw) in expect_array(content, &format!("{path}.content"))?
                .iter()
                .enumerate()
            {
                let here = format!("{path}.content[{k}]");
                let part = expect_object(Some(raw), &here)?;
                let mut part_skeleton = part.clone();
                match type_of(part) {
                    Some("text") => {
                        let n = row.add(expect_str(part.field("text"), &format!("{here}.text"))?);
                        part_skeleton.insert("text".into(), n);
                    }
                    Some("image") => {
                        let url = import_image(part, &mut part_skeleton, &here)?;
                        row.add_image(&url, true, &here)?;
                    }
                    other => {
                        return Err(err(
                            &here,
                            format!("unsupported tool_result block type {other:?}"),
                        ));
                    }
                }
                inner.push(Value::Object(part_skeleton));
            }
            skeleton.insert("content".into(), Value::Array(inner));
        }
    }
    Ok((row, skeleton))
}

fn import_assistant(message: &Object, path: &str) -> Res<Row> {
    let mut row = Row::new(Role::Assistant, message.clone());
    if let Some(Value::String(content)) = message.field("content") {
        let n = row.add(content);
        row.skeleton.insert("content".into(), n);
        return Ok(row);
    }
    let mut blocks = Vec::new();
    for (k, raw) in expect_array(message.field("content"), &format!("{path}.content"))?
        .iter()
        .enumerate()
    {
        let here = format!("{path}.content[{k}]");
        let block = expect_object(Some(raw), &here)?;
        let mut out = block.clone();
        let slot = match type_of(block) {
            Some("text") => Some(("text", Stream::Text)),
            Some("thinking") => Some(("thinking", Stream::Reasoning)),
            Some("redacted_thinking") => Some(("data", Stream::Reasoning)),
            Some("tool_use") => None,
            other => {
                return Err(err(
                    &here,
                    format!("unsupported assistant block type {other:?}"),
                ));
            }
        };
        if let Some((key, stream)) = slot {
            let n = row.add_to(
                stream,
                expect_str(block.get(key), &format!("{here}.{key}"))?,
            );
            out.insert(key.into(), n);
        } else {
            let input = expect_object(block.field("input"), &format!("{here}.input"))?;
            row.message.tool_calls.push(ToolCall {
                id: expect_str(block.field("id"), &format!("{here}.id"))?.to_owned(),
                name: expect_str(block.field("name"), &format!("{here}.name"))?.to_owned(),
                arguments: canonical_json(&Value::Object(input.clone())),
            });
            for key in ["id", "name", "input"] {
                out.remove(key);
            }
        }
        blocks.push(Value::Object(out));
    }
    row.skeleton.insert("content".into(), Value::Array(blocks));
    Ok(row)
}

/// Whether a tool row without passthrough after `row` (as exported) joins its message.
fn continues(row: Option<&FlatRow>) -> bool {
    row.and_then(|r| {
        r.skeleton
            .as_ref()
            .map(|s| !s.contains_key("role") || role(&r.message) == Role::Tool)
    })
    .unwrap_or(false)
}

fn image_skeleton(media_type: Option<&str>) -> Value {
    let source = match media_type {
        Some(media_type) => obj([("type", "base64".into()), ("media_type", media_type.into())]),
        None => obj([("type", "url".into())]),
    };
    Value::Object(obj([
        ("type", "image".into()),
        ("source", Value::Object(source)),
    ]))
}

fn attachment_skeleton(a: &Attachment) -> Value {
    match a.source {
        Some(attachment::Source::Data(_)) => image_skeleton(Some(&a.media_type)),
        _ => image_skeleton(None),
    }
}

fn text_block(n: Value) -> Value {
    Value::Object(obj([("type", "text".into()), ("text", n)]))
}

fn default_skeleton(row: &FlatRow, previous: Option<&FlatRow>) -> Res<Object> {
    let m = &row.message;
    let n = code_points(&m.content);
    match role(m) {
        // A lone leading system row is the `system` string; see to_anthropic.
        Role::System => Ok(Object::new()),
        Role::Tool => {
            let mut result = obj([("type", "tool_result".into()), ("content", Value::from(n))]);
            if !m.attachments.is_empty() {
                let mut inner: Vec<Value> = if n > 0 {
                    vec![text_block(Value::from(n))]
                } else {
                    Vec::new()
                };
                inner.extend(m.attachments.iter().map(attachment_skeleton));
                result.insert("content".into(), Value::Array(inner));
            }
            let content = Value::Array(vec![Value::Object(result)]);
            if continues(previous) {
                Ok(obj([("content", content)]))
            } else {
                Ok(obj([("role", "user".into()), ("content", content)]))
            }
        }
        Role::User => {
            if !m.attachments.is_empty() && is_carrier(&m.content) {
                let mut blocks = vec![text_block(Value::from(n))];
                blocks.extend(m.attachments.iter().map(attachment_skeleton));
                return Ok(obj([
                    ("role", "user".into()),
                    ("content", Value::Array(blocks)),
                ]));
            }
            let pieces = if marker_text_row(m) {
                Vec::new()
            } else {
                split_markers(&m.content)
            };
            if !pieces.iter().any(|p| p.is_marker) {
                return Ok(obj([("role", "user".into()), ("content", Value::from(n))]));
            }
            let blocks = pieces
                .iter()
                .map(|p| {
                    if p.is_marker {
                        image_skeleton(parse_data_url(marker_url(p.text)).map(|(t, _)| t))
                    } else {
                        text_block(length(p.text))
                    }
                })
                .collect();
            Ok(obj([
                ("role", "user".into()),
                ("content", Value::Array(blocks)),
            ]))
        }
        Role::Assistant => {
            if m.tool_calls.is_empty() {
                return Ok(obj([
                    ("role", "assistant".into()),
                    ("content", Value::from(n)),
                ]));
            }
            let mut blocks: Vec<Value> = if n > 0 {
                vec![text_block(Value::from(n))]
            } else {
                Vec::new()
            };
            blocks.extend(
                m.tool_calls
                    .iter()
                    .map(|_| Value::Object(obj([("type", "tool_use".into())]))),
            );
            Ok(obj([
                ("role", "assistant".into()),
                ("content", Value::Array(blocks)),
            ]))
        }
        Role::Unspecified => Err(err("", "the row has no Anthropic role")),
    }
}

/// Converts a History (either shape) to `{"system": ..., "messages": [...]}`.
pub fn to_anthropic(history: &History) -> Res<Value> {
    to_anthropic_with(history, &AnthropicExportOptions::default())
}

/// Converts a History (either shape) to `{"system": ..., "messages": [...]}`, with the
/// `cache_control` marks of spec §14 the options ask for.
pub fn to_anthropic_with(history: &History, options: &AnthropicExportOptions) -> Res<Value> {
    let rows = flat_rows(history, FORMAT)?;
    let lead = rows
        .iter()
        .take_while(|r| role(&r.message) == Role::System)
        .count();
    // Where each history message's last block went, for the cache marks.
    let mut places: HashMap<usize, BlockPlace> = HashMap::new();
    let mut out = Object::new();
    if lead == 1 && rows[0].skeleton.is_none() {
        out.insert("system".into(), rows[0].message.content.clone().into());
        places.insert(rows[0].index, BlockPlace::System(None));
    } else if lead > 0 {
        let mut blocks = Vec::new();
        for (i, row) in rows[..lead].iter().enumerate() {
            let path = format!("rows[{i}]");
            let skeleton = row.skeleton.clone().unwrap_or_else(|| {
                obj([
                    ("type", "text".into()),
                    ("text", length(&row.message.content)),
                ])
            });
            let mut s = Streams::new(row, &path)?;
            let mut block = skeleton.clone();
            block.insert(
                "text".into(),
                s.text(skeleton.field("text"), &format!("{path}.text"))?,
            );
            s.done()?;
            blocks.push(Value::Object(block));
            places.insert(row.index, BlockPlace::System(Some(i)));
        }
        out.insert("system".into(), Value::Array(blocks));
    }
    let mut messages: Vec<Value> = Vec::new();
    let mut previous: Option<FlatRow> = None;
    for (i, row) in rows.iter().enumerate().skip(lead) {
        let path = format!("rows[{i}]");
        if role(&row.message) == Role::System {
            return Err(err(
                &path,
                "Anthropic Messages has no system row after messages",
            ));
        }
        let skeleton = match &row.skeleton {
            Some(s) => s.clone(),
            None => default_skeleton(row, previous.as_ref())?,
        };
        let mut message = export_message(row, &skeleton, &path)?;
        let rendered = match message.get("content") {
            Some(Value::Array(blocks)) => !blocks.is_empty(),
            Some(content) => content.is_string(),
            None => false,
        };
        let last = messages.last_mut().and_then(Value::as_object_mut);
        let joinable = last.as_ref().is_some_and(|l| {
            l.get("role").and_then(Value::as_str) == Some("user")
                && l.get("content").is_some_and(Value::is_array)
        });
        if skeleton.contains_key("role") {
            messages.push(Value::Object(message));
        } else if let (true, Some(last)) = (joinable, last) {
            if let (Some(Value::Array(into)), Some(Value::Array(blocks))) =
                (last.get_mut("content"), message.remove("content"))
            {
                into.extend(blocks);
            }
        } else {
            message.insert("role".into(), "user".into());
            messages.push(Value::Object(message));
        }
        if rendered {
            let at = messages.len() - 1;
            let block = match messages[at].get("content") {
                Some(Value::Array(blocks)) => Some(blocks.len() - 1),
                _ => None,
            };
            places.insert(row.index, BlockPlace::Message(at, block));
        }
        previous = Some(FlatRow {
            message: row.message.clone(),
            reasoning: row.reasoning.clone(),
            skeleton: Some(skeleton),
            index: row.index,
        });
    }
    out.insert("messages".into(), Value::Array(messages));
    if !options.breakpoints().is_empty() {
        mark_cache_breakpoints(&mut out, &places, options, lead, history_length(history))?;
    }
    Ok(Value::Object(out))
}

fn export_message(row: &FlatRow, skeleton: &Object, path: &str) -> Res<Object> {
    let expected = if role(&row.message) == Role::Assistant {
        "assistant"
    } else {
        "user"
    };
    if skeleton.get("role").is_some_and(|r| r != expected) {
        return Err(err(path, "passthrough role does not match the row"));
    }
    let mut s = Streams::new(row, path)?;
    let mut out = skeleton.clone();
    match skeleton.field("content") {
        Some(Value::Array(content)) => {
            let mut blocks = Vec::new();
            for (k, raw) in content.iter().enumerate() {
                let block = expect_object(Some(raw), &format!("{path}.content[{k}]"))?;
                // Tool-use blocks whose call the sweep removed are gone with it.
                if let Some(filled) = export_block(&mut s, block, path)? {
                    blocks.push(filled);
                }
            }
            out.insert("content".into(), Value::Array(blocks));
        }
        content => {
            out.insert(
                "content".into(),
                s.text(content, &format!("{path}.content"))?,
            );
        }
    }
    s.done()?;
    Ok(out)
}

fn export_block(s: &mut Streams, block: &Object, path: &str) -> Res<Option<Value>> {
    let mut out = block.clone();
    match type_of(block) {
        Some("text") => {
            out.insert(
                "text".into(),
                s.text(block.field("text"), &format!("{path}.text"))?,
            );
        }
        Some("thinking") => {
            out.insert(
                "thinking".into(),
                s.reasoning(block.field("thinking"), &format!("{path}.thinking"))?,
            );
        }
        Some("redacted_thinking") => {
            out.insert(
                "data".into(),
                s.reasoning(block.field("data"), &format!("{path}.data"))?,
            );
        }
        Some("tool_use") => {
            let Some(call) = s.call() else {
                return Ok(None);
            };
            let input = if call.arguments.is_empty() {
                Value::Object(Object::new())
            } else {
                serde_json::from_str(&call.arguments).map_err(|_| {
                    err(
                        path,
                        format!("tool call {} arguments are not JSON", call.id),
                    )
                })?
            };
            if !input.is_object() {
                return Err(err(
                    path,
                    format!("tool call {} arguments are not a JSON object", call.id),
                ));
            }
            out.insert("id".into(), call.id.into());
            out.insert("name".into(), call.name.into());
            out.insert("input".into(), input);
        }
        Some("tool_result") => {
            let id = s
                .tool_call_id()
                .ok_or_else(|| err(path, "passthrough tool_result on a row that is not a tool"))?;
            out.insert("tool_use_id".into(), id.into());
            match block.field("content") {
                Some(Value::Array(inner)) => {
                    let mut parts = Vec::new();
                    for raw in inner {
                        if let Some(part) = export_block(s, expect_object(Some(raw), path)?, path)?
                        {
                            parts.push(part);
                        }
                    }
                    out.insert("content".into(), Value::Array(parts));
                }
                None | Some(Value::Null) => {}
                content => {
                    out.insert(
                        "content".into(),
                        s.text(content, &format!("{path}.content"))?,
                    );
                }
            }
        }
        Some("image") => {
            let url = s.image_url(path)?;
            let mut source = block
                .field("source")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            if source.field("type").and_then(Value::as_str) == Some("base64") {
                let (media_type, payload) = parse_data_url(&url)
                    .ok_or_else(|| err(path, "a base64 image needs a data: URL"))?;
                source
                    .entry("media_type")
                    .or_insert_with(|| media_type.into());
                source.insert("data".into(), payload.into());
            } else {
                source.insert("url".into(), url.into());
            }
            out.insert("source".into(), Value::Object(source));
        }
        other => {
            return Err(err(
                path,
                format!("passthrough block type {other:?} is not Anthropic"),
            ));
        }
    }
    Ok(Some(Value::Object(out)))
}
