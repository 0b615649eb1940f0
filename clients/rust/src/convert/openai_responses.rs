//! OpenAI Responses input items (what the Agents SDK sessions store) <-> turnkeeper.v1 History
//! (passthrough key `openai_responses`). docs/converters.md is the mapping; the vectors pin it.

use serde_json::Value;

use super::common::{
    ConvertOptions, Field, FlatRow, Object, Res, Row, Stream, Streams, canonical_json, code_points,
    err, expect_array, expect_object, expect_str, finish, flat_rows, is_carrier, length,
    marker_text_row, obj, objects, part_texts, role, split_markers, type_of,
};
use super::openai_chat::role_name;
use crate::pb::{History, Role, ToolCall};

const FORMAT: &str = "openai_responses";
/// Holds the item skeletons of a row that stands for several items.
const ITEMS: &str = "items";
const TEXT_PARTS: [&str; 2] = ["input_text", "output_text"];
/// Items turnkeeper has no row field for but a model reads (the hosted tools' calls and their
/// outputs, the Agents SDK's references and compactions): each is one assistant row whose text is
/// the item's canonical JSON, so it is priced, stays within its turn and comes back as it went in.
/// An output is an assistant row like its call: as a tool row it would answer no call and the
/// orphan sweep would remove it.
const OPAQUE_ITEMS: [&str; 23] = [
    "web_search_call",
    "file_search_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "tool_search_call",
    "compaction_trigger",
    "hosted_tool_call",
    "item_reference",
    "compaction",
];
/// Content parts kept the same way inside their message or tool output.
const OPAQUE_PARTS: [&str; 1] = ["input_file"];

/// The item's type; one without it is a message, or an item reference (whose `type` the API lets
/// be omitted) when it has an id and no role.
fn item_type(item: &Object) -> &str {
    match item.field("type") {
        Some(t) => t.as_str().unwrap_or_default(),
        None if item.field("role").is_none() && item.contains_key("id") => "item_reference",
        None => "message",
    }
}

/// The item or part back from the canonical JSON its row holds at the cursor.
fn opaque(s: &mut Streams, length: Option<&Value>, path: &str) -> Res<Object> {
    let Value::String(text) = s.text(length, path)? else {
        return Err(err(path, "the row's text is no longer the item's JSON"));
    };
    match serde_json::from_str(&text) {
        Ok(Value::Object(value)) => Ok(value),
        _ => Err(err(path, "the row's text is no longer the item's JSON")),
    }
}

fn role_from(name: Option<&str>) -> Option<Role> {
    match name? {
        "system" | "developer" => Some(Role::System),
        "user" => Some(Role::User),
        "assistant" => Some(Role::Assistant),
        _ => None,
    }
}

/// Converts Responses input items (an array, or a request object holding them as `input`) to a
/// History, one row per item except that consecutive function_call items (a model's parallel
/// calls) are one assistant row, so each output follows the row that calls it.
pub fn from_openai_responses(items: &Value, options: &ConvertOptions) -> Res<History> {
    let list = match items {
        Value::Object(request) => expect_array(request.field("input"), "input")?,
        other => expect_array(Some(other), "input")?,
    };
    let mut rows: Vec<Row> = Vec::with_capacity(list.len());
    // The skeletons of the function_call run the last row holds; empty when it holds none.
    let mut calls: Vec<Value> = Vec::new();
    for (i, item) in list.iter().enumerate() {
        let row = import_item(item, &format!("input[{i}]"))?;
        // Only a function_call item gives a row tool calls.
        let last = rows.last_mut().filter(|_| !calls.is_empty());
        match last {
            Some(last) if !row.message.tool_calls.is_empty() => {
                last.message.tool_calls.extend(row.message.tool_calls);
                calls.push(Value::Object(row.skeleton));
                last.skeleton = obj([(ITEMS, Value::Array(calls.clone()))]);
            }
            _ => {
                calls.clear();
                if !row.message.tool_calls.is_empty() {
                    calls.push(Value::Object(row.skeleton.clone()));
                }
                rows.push(row);
            }
        }
    }
    finish(
        rows,
        FORMAT,
        |row, _| {
            let mut items = default_items(row)?;
            Ok(if items.len() == 1 {
                items.remove(0)
            } else {
                obj([(
                    ITEMS,
                    Value::Array(items.into_iter().map(Value::Object).collect()),
                )])
            })
        },
        options,
    )
}

fn import_item(raw: &Value, path: &str) -> Res<Row> {
    let item = expect_object(Some(raw), path)?;
    let kind = item_type(item);
    if OPAQUE_ITEMS.contains(&kind) {
        let mut row = Row::new(Role::Assistant, obj([("type", kind.into())]));
        let n = row.add(&canonical_json(raw));
        row.skeleton.insert("item".into(), n);
        return Ok(row);
    }
    let mut skeleton = item.clone();
    let mut take = |key: &str| -> Res<String> {
        let value = expect_str(item.get(key), &format!("{path}.{key}"))?.to_owned();
        skeleton.remove(key);
        Ok(value)
    };
    match kind {
        "message" => {
            let role = role_from(item.field("role").and_then(Value::as_str)).ok_or_else(|| {
                err(
                    format!("{path}.role"),
                    format!("unsupported role {:?}", item.field("role")),
                )
            })?;
            let mut row = Row::new(role, skeleton);
            let content = match item.field("content") {
                Some(Value::String(content)) => row.add(content),
                content => import_parts(&mut row, content, &format!("{path}.content"))?,
            };
            row.skeleton.insert("content".into(), content);
            Ok(row)
        }
        "function_call" => {
            let call = ToolCall {
                id: take("call_id")?,
                name: take("name")?,
                arguments: take("arguments")?,
            };
            let mut row = Row::new(Role::Assistant, skeleton);
            row.message.tool_calls.push(call);
            Ok(row)
        }
        "function_call_output" => {
            let id = take("call_id")?;
            let mut row = Row::new(Role::Tool, skeleton);
            row.message.tool_call_id = id;
            let output = match item.field("output") {
                Some(Value::String(output)) => row.add(output),
                output => import_parts(&mut row, output, &format!("{path}.output"))?,
            };
            row.skeleton.insert("output".into(), output);
            Ok(row)
        }
        "reasoning" => {
            let mut row = Row::new(Role::Assistant, skeleton);
            for (key, part_type) in [("summary", "summary_text"), ("content", "reasoning_text")] {
                let Some(value) = item.get(key).filter(|v| !v.is_null()) else {
                    continue;
                };
                let mut parts = Vec::new();
                for (k, raw) in expect_array(Some(value), &format!("{path}.{key}"))?
                    .iter()
                    .enumerate()
                {
                    let here = format!("{path}.{key}[{k}]");
                    let part = expect_object(Some(raw), &here)?;
                    if type_of(part) != Some(part_type) {
                        return Err(err(&here, format!("expected a {part_type} part")));
                    }
                    let mut out = part.clone();
                    out.insert(
                        "text".into(),
                        row.add_to(Stream::Reasoning, expect_str(part.field("text"), &here)?),
                    );
                    parts.push(Value::Object(out));
                }
                row.skeleton.insert(key.into(), Value::Array(parts));
            }
            if let Some(Value::String(encrypted)) = item.field("encrypted_content") {
                let n = row.add_to(Stream::Reasoning, encrypted);
                row.skeleton.insert("encrypted_content".into(), n);
            }
            Ok(row)
        }
        other => Err(err(
            format!("{path}.type"),
            format!("unsupported item type {other:?}"),
        )),
    }
}

fn import_parts(row: &mut Row, content: Option<&Value>, path: &str) -> Res<Value> {
    let parts = objects(expect_array(content, path)?, path)?;
    let r = role(&row.message);
    let attach =
        r == Role::Tool || (r == Role::User && is_carrier(&part_texts(&parts, &TEXT_PARTS)));
    let mut out = Vec::new();
    for (k, part) in parts.into_iter().enumerate() {
        let here = format!("{path}[{k}]");
        let mut skeleton = part.clone();
        match type_of(part) {
            Some(kind) if TEXT_PARTS.contains(&kind) => {
                let n = row.add(expect_str(part.field("text"), &format!("{here}.text"))?);
                skeleton.insert("text".into(), n);
            }
            Some(kind) if OPAQUE_PARTS.contains(&kind) => {
                let n = row.add(&canonical_json(&Value::Object(part.clone())));
                skeleton = obj([("type", kind.into()), ("part", n)]);
            }
            Some("refusal") if r == Role::Assistant => {
                let n = row.add(expect_str(
                    part.field("refusal"),
                    &format!("{here}.refusal"),
                )?);
                skeleton.insert("refusal".into(), n);
            }
            Some("input_image") if matches!(r, Role::User | Role::Tool) => {
                let url =
                    expect_str(part.field("image_url"), &format!("{here}.image_url"))?.to_owned();
                skeleton.remove("image_url");
                row.add_image(&url, attach, &here)?;
            }
            other => {
                return Err(err(
                    &here,
                    format!("unsupported content part type {other:?} here"),
                ));
            }
        }
        out.push(Value::Object(skeleton));
    }
    Ok(Value::Array(out))
}

fn image() -> Value {
    Value::Object(obj([
        ("type", "input_image".into()),
        ("detail", "auto".into()),
    ]))
}

fn input_text(n: Value) -> Value {
    Value::Object(obj([("type", "input_text".into()), ("text", n)]))
}

/// The items a row without passthrough becomes.
fn default_items(row: &FlatRow) -> Res<Vec<Object>> {
    let m = &row.message;
    let n = code_points(&m.content);
    let r = role(m);
    if r == Role::Tool {
        let output = if m.attachments.is_empty() {
            Value::from(n)
        } else {
            let mut parts: Vec<Value> = if n > 0 {
                vec![input_text(Value::from(n))]
            } else {
                Vec::new()
            };
            parts.extend(m.attachments.iter().map(|_| image()));
            Value::Array(parts)
        };
        return Ok(vec![obj([
            ("type", "function_call_output".into()),
            ("output", output),
        ])]);
    }
    let name = role_name(r).ok_or_else(|| err("", "the row has no Responses role"))?;
    let mut item = obj([("role", name.into()), ("content", Value::from(n))]);
    if r == Role::User {
        if !m.attachments.is_empty() && is_carrier(&m.content) {
            let mut parts = vec![input_text(Value::from(n))];
            parts.extend(m.attachments.iter().map(|_| image()));
            item.insert("content".into(), Value::Array(parts));
        } else if !marker_text_row(m) {
            let pieces = split_markers(&m.content);
            if pieces.iter().any(|p| p.is_marker) {
                let parts = pieces
                    .iter()
                    .map(|p| {
                        if p.is_marker {
                            image()
                        } else {
                            input_text(length(p.text))
                        }
                    })
                    .collect();
                item.insert("content".into(), Value::Array(parts));
            }
        }
    }
    if r == Role::Assistant && !m.tool_calls.is_empty() {
        let mut items = if n > 0 { vec![item] } else { Vec::new() };
        items.extend(
            m.tool_calls
                .iter()
                .map(|_| obj([("type", "function_call".into())])),
        );
        return Ok(items);
    }
    Ok(vec![item])
}

/// Converts a History (either shape) to Responses input items.
pub fn to_openai_responses(history: &History) -> Res<Vec<Value>> {
    let mut out = Vec::new();
    for (i, row) in flat_rows(history, FORMAT)?.iter().enumerate() {
        let path = format!("rows[{i}]");
        let items = items_of(row, &path)?;
        let several = items.len() > 1;
        let mut s = Streams::new(row, &path)?;
        for item in &items {
            // A function_call whose call the sweep removed is gone with it.
            if several && type_of(item) == Some("function_call") && s.calls_left() == 0 {
                continue;
            }
            out.push(Value::Object(export_item(row, &mut s, item, &path)?));
        }
        s.done()?;
    }
    Ok(out)
}

/// The item skeletons a row stands for: its passthrough's (one item, or the list under
/// `items`), else its default items.
fn items_of(row: &FlatRow, path: &str) -> Res<Vec<Object>> {
    let Some(skeleton) = &row.skeleton else {
        return default_items(row);
    };
    match skeleton.get(ITEMS) {
        Some(Value::Array(list)) if skeleton.len() == 1 => list
            .iter()
            .enumerate()
            .map(|(k, raw)| {
                expect_object(Some(raw), &format!("{path}.passthrough.items[{k}]")).cloned()
            })
            .collect(),
        _ => Ok(vec![skeleton.clone()]),
    }
}

fn export_item(row: &FlatRow, s: &mut Streams, skeleton: &Object, path: &str) -> Res<Object> {
    let r = role(&row.message);
    let mut out = skeleton.clone();
    let kind = skeleton
        .field("type")
        .map_or(Some("message"), Value::as_str);
    if kind.is_some_and(|kind| OPAQUE_ITEMS.contains(&kind)) {
        return opaque(s, skeleton.get("item"), &format!("{path}.item"));
    }
    match kind {
        Some("message") => {
            if role_from(skeleton.field("role").and_then(Value::as_str)) != Some(r) {
                return Err(err(path, "passthrough role does not match the row"));
            }
            out.insert(
                "content".into(),
                export_content(s, skeleton.field("content"), &format!("{path}.content"))?,
            );
        }
        Some("function_call") => {
            let call = s
                .call()
                .filter(|_| r == Role::Assistant)
                .ok_or_else(|| err(path, "passthrough function_call without its tool call"))?;
            out.insert("call_id".into(), call.id.into());
            out.insert("name".into(), call.name.into());
            out.insert("arguments".into(), call.arguments.into());
        }
        Some("function_call_output") => {
            let id = s
                .tool_call_id()
                .ok_or_else(|| err(path, "passthrough function_call_output on a non-tool row"))?;
            out.insert("call_id".into(), id.into());
            out.insert(
                "output".into(),
                export_content(s, skeleton.field("output"), &format!("{path}.output"))?,
            );
        }
        Some("reasoning") => {
            for key in ["summary", "content"] {
                let Some(Value::Array(parts)) = skeleton.get(key) else {
                    continue;
                };
                let mut filled = Vec::new();
                for raw in parts {
                    let mut part = expect_object(Some(raw), path)?.clone();
                    let text = s.reasoning(part.field("text"), path)?;
                    part.insert("text".into(), text);
                    filled.push(Value::Object(part));
                }
                out.insert(key.into(), Value::Array(filled));
            }
            if let Some(encrypted) = skeleton.field("encrypted_content").filter(|v| !v.is_null()) {
                out.insert(
                    "encrypted_content".into(),
                    s.reasoning(Some(encrypted), path)?,
                );
            }
        }
        other => {
            return Err(err(
                path,
                format!("passthrough item type {other:?} is not Responses"),
            ));
        }
    }
    Ok(out)
}

fn export_content(s: &mut Streams, content: Option<&Value>, path: &str) -> Res<Value> {
    let Some(Value::Array(parts)) = content else {
        return s.text(content, path);
    };
    let mut out = Vec::new();
    for raw in parts {
        let mut part = expect_object(Some(raw), path)?.clone();
        match type_of(&part) {
            Some(kind) if TEXT_PARTS.contains(&kind) => {
                let text = s.text(part.field("text"), &format!("{path}.text"))?;
                part.insert("text".into(), text);
            }
            Some(kind) if OPAQUE_PARTS.contains(&kind) => {
                part = opaque(s, part.get("part"), &format!("{path}.part"))?;
            }
            Some("refusal") => {
                let text = s.text(part.field("refusal"), &format!("{path}.refusal"))?;
                part.insert("refusal".into(), text);
            }
            Some("input_image") => {
                part.insert("image_url".into(), s.image_url(path)?.into());
            }
            other => {
                return Err(err(
                    path,
                    format!("passthrough part type {other:?} is not Responses"),
                ));
            }
        }
        out.push(Value::Object(part));
    }
    Ok(Value::Array(out))
}
