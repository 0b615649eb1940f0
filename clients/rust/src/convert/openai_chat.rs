//! OpenAI Chat Completions `messages` <-> turnkeeper.v1 History (passthrough key `openai_chat`).
//! docs/converters.md is the mapping; the converter vectors pin it.

use serde_json::Value;

use super::common::{
    ConvertOptions, Field, FlatRow, Object, Res, Row, Streams, code_points, err, expect_array,
    expect_object, expect_str, finish, flat_rows, images_are_attachments, is_carrier, length,
    marker_text_row, obj, objects, part_texts, role, split_markers, type_of,
};
use crate::pb::{History, Role, ToolCall};

const FORMAT: &str = "openai_chat";

fn role_from(name: &str) -> Option<Role> {
    match name {
        "system" | "developer" => Some(Role::System),
        "user" => Some(Role::User),
        "assistant" => Some(Role::Assistant),
        "tool" => Some(Role::Tool),
        _ => None,
    }
}

pub(crate) fn role_name(role: Role) -> Option<&'static str> {
    match role {
        Role::System => Some("system"),
        Role::User => Some("user"),
        Role::Assistant => Some("assistant"),
        Role::Tool => Some("tool"),
        Role::Unspecified => None,
    }
}

fn part_types(role: Role) -> &'static [&'static str] {
    match role {
        Role::System => &["text"],
        Role::User | Role::Tool => &["text", "image_url"],
        Role::Assistant => &["text", "refusal"],
        Role::Unspecified => &[],
    }
}

/// Converts Chat Completions `messages` (an array, or a request object holding them) to a History.
pub fn from_openai(messages: &Value, options: &ConvertOptions) -> Res<History> {
    let list = match messages {
        Value::Object(request) => expect_array(request.field("messages"), "messages")?,
        other => expect_array(Some(other), "messages")?,
    };
    let rows = list
        .iter()
        .enumerate()
        .map(|(i, m)| import_message(m, &format!("messages[{i}]")))
        .collect::<Res<Vec<_>>>()?;
    finish(rows, FORMAT, |row, _| default_skeleton(row), options)
}

fn import_message(raw: &Value, path: &str) -> Res<Row> {
    let message = expect_object(Some(raw), path)?;
    let name = expect_str(message.field("role"), &format!("{path}.role"))?;
    let role = role_from(name)
        .ok_or_else(|| err(format!("{path}.role"), format!("unsupported role {name:?}")))?;
    if message.field("function_call").is_some() {
        return Err(err(
            format!("{path}.function_call"),
            "the deprecated form; send tool_calls",
        ));
    }
    let mut row = Row::new(role, message.clone());
    if role == Role::Tool {
        row.message.tool_call_id = expect_str(
            message.field("tool_call_id"),
            &format!("{path}.tool_call_id"),
        )?
        .to_owned();
        row.skeleton.remove("tool_call_id");
    }
    match message.field("content") {
        Some(Value::String(content)) => {
            let n = row.add(content);
            row.skeleton.insert("content".into(), n);
        }
        None | Some(Value::Null) => {}
        Some(content) => {
            let parts = import_parts(&mut row, content, &format!("{path}.content"))?;
            row.skeleton.insert("content".into(), parts);
        }
    }
    if let (Some(Value::String(refusal)), Role::Assistant) = (message.field("refusal"), role) {
        let n = row.add(refusal);
        row.skeleton.insert("refusal".into(), n);
    }
    if let Some(calls) = message.field("tool_calls") {
        if role != Role::Assistant {
            return Err(err(
                format!("{path}.tool_calls"),
                "only assistant messages carry tool calls",
            ));
        }
        let list = expect_array(Some(calls), &format!("{path}.tool_calls"))?;
        let skeletons = list
            .iter()
            .enumerate()
            .map(|(j, call)| import_call(&mut row, call, &format!("{path}.tool_calls[{j}]")))
            .collect::<Res<Vec<_>>>()?;
        row.skeleton
            .insert("tool_calls".into(), Value::Array(skeletons));
    }
    Ok(row)
}

fn import_parts(row: &mut Row, content: &Value, path: &str) -> Res<Value> {
    let parts = objects(expect_array(Some(content), path)?, path)?;
    let r = role(&row.message);
    let attach = r == Role::Tool || (r == Role::User && is_carrier(&part_texts(&parts, &["text"])));
    let mut out = Vec::new();
    for (k, part) in parts.into_iter().enumerate() {
        let here = format!("{path}[{k}]");
        let kind = type_of(part).unwrap_or_default();
        if !part_types(r).contains(&kind) {
            return Err(err(
                &here,
                format!("unsupported content part type {kind:?} here"),
            ));
        }
        let mut skeleton = part.clone();
        match kind {
            "text" => {
                let n = row.add(expect_str(part.field("text"), &format!("{here}.text"))?);
                skeleton.insert("text".into(), n);
            }
            "refusal" => {
                let n = row.add(expect_str(
                    part.field("refusal"),
                    &format!("{here}.refusal"),
                )?);
                skeleton.insert("refusal".into(), n);
            }
            _ => {
                let mut image =
                    expect_object(part.field("image_url"), &format!("{here}.image_url"))?.clone();
                let url =
                    expect_str(image.field("url"), &format!("{here}.image_url.url"))?.to_owned();
                image.remove("url");
                skeleton.insert("image_url".into(), Value::Object(image));
                row.add_image(&url, attach, &here)?;
            }
        }
        out.push(Value::Object(skeleton));
    }
    Ok(Value::Array(out))
}

fn import_call(row: &mut Row, raw: &Value, path: &str) -> Res<Value> {
    let call = expect_object(Some(raw), path)?;
    if let Some(kind) = call.field("type").filter(|kind| *kind != "function") {
        return Err(err(
            format!("{path}.type"),
            format!("unsupported tool call type {kind}"),
        ));
    }
    let function = expect_object(call.field("function"), &format!("{path}.function"))?;
    let arguments = match function.field("arguments") {
        None => "",
        value => expect_str(value, &format!("{path}.function.arguments"))?,
    };
    row.message.tool_calls.push(ToolCall {
        id: expect_str(call.field("id"), &format!("{path}.id"))?.to_owned(),
        name: expect_str(function.field("name"), &format!("{path}.function.name"))?.to_owned(),
        arguments: arguments.to_owned(),
    });
    let mut skeleton = call.clone();
    skeleton.remove("id");
    let mut rest = function.clone();
    rest.remove("name");
    rest.remove("arguments");
    skeleton.insert("function".into(), Value::Object(rest));
    Ok(Value::Object(skeleton))
}

fn default_skeleton(row: &FlatRow) -> Res<Object> {
    let m = &row.message;
    let r = role(m);
    let name = role_name(r).ok_or_else(|| err("", "the row has no Chat Completions role"))?;
    let n = code_points(&m.content);
    let mut out = obj([("role", Value::from(name))]);
    if r == Role::Assistant && !m.tool_calls.is_empty() {
        out.insert(
            "content".into(),
            if n > 0 { Value::from(n) } else { Value::Null },
        );
        let calls = m.tool_calls.iter().map(|_| {
            Value::Object(obj([
                ("type", "function".into()),
                ("function", Value::Object(Object::new())),
            ]))
        });
        out.insert("tool_calls".into(), Value::Array(calls.collect()));
    } else if !m.attachments.is_empty() && images_are_attachments(m) {
        let mut parts = Vec::new();
        if n > 0 || r == Role::User {
            parts.push(Value::Object(obj([
                ("type", "text".into()),
                ("text", Value::from(n)),
            ])));
        }
        parts.extend(m.attachments.iter().map(|_| image_part()));
        out.insert("content".into(), Value::Array(parts));
    } else if r == Role::User && !marker_text_row(m) {
        let pieces = split_markers(&m.content);
        let content = if pieces.iter().any(|p| p.is_marker) {
            Value::Array(
                pieces
                    .iter()
                    .map(|p| {
                        if p.is_marker {
                            image_part()
                        } else {
                            Value::Object(obj([("type", "text".into()), ("text", length(p.text))]))
                        }
                    })
                    .collect(),
            )
        } else {
            Value::from(n)
        };
        out.insert("content".into(), content);
    } else {
        out.insert("content".into(), Value::from(n));
    }
    Ok(out)
}

fn image_part() -> Value {
    Value::Object(obj([
        ("type", "image_url".into()),
        ("image_url", Value::Object(Object::new())),
    ]))
}

/// Converts a History (either shape) to Chat Completions `messages`.
pub fn to_openai(history: &History) -> Res<Vec<Value>> {
    flat_rows(history, FORMAT)?
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let skeleton = match &row.skeleton {
                Some(s) => s.clone(),
                None => default_skeleton(row)?,
            };
            export_message(row, &skeleton, &format!("messages[{i}]")).map(Value::Object)
        })
        .collect()
}

fn export_message(row: &FlatRow, skeleton: &Object, path: &str) -> Res<Object> {
    let wanted = skeleton
        .field("role")
        .and_then(Value::as_str)
        .and_then(role_from);
    if wanted != Some(role(&row.message)) {
        return Err(err(path, "passthrough role does not match the row"));
    }
    let mut s = Streams::new(row, path)?;
    let mut out = skeleton.clone();
    if let Some(id) = s.tool_call_id() {
        out.insert("tool_call_id".into(), id.into());
    }
    match skeleton.field("content") {
        Some(Value::Array(parts)) => {
            let filled = parts
                .iter()
                .enumerate()
                .map(|(k, p)| {
                    export_part(
                        &mut s,
                        expect_object(Some(p), &format!("{path}.content[{k}]"))?,
                        path,
                    )
                })
                .collect::<Res<Vec<_>>>()?;
            out.insert("content".into(), Value::Array(filled));
        }
        None | Some(Value::Null) => {}
        content => {
            let text = s.text(content, &format!("{path}.content"))?;
            out.insert("content".into(), text);
        }
    }
    if let Some(refusal) = skeleton.field("refusal").filter(|r| !r.is_null()) {
        let text = s.text(Some(refusal), &format!("{path}.refusal"))?;
        out.insert("refusal".into(), text);
    }
    if let Some(calls) = skeleton.field("tool_calls") {
        let mut filled = Vec::new();
        for (j, raw) in expect_array(Some(calls), &format!("{path}.tool_calls"))?
            .iter()
            .enumerate()
        {
            let Some(call) = s.call() else { break };
            let mut item = expect_object(Some(raw), &format!("{path}.tool_calls[{j}]"))?.clone();
            let mut function = item
                .field("function")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            function.insert("name".into(), call.name.into());
            function.insert("arguments".into(), call.arguments.into());
            item.insert("id".into(), call.id.into());
            item.insert("function".into(), Value::Object(function));
            filled.push(Value::Object(item));
        }
        out.insert("tool_calls".into(), Value::Array(filled));
    }
    s.done()?;
    Ok(out)
}

fn export_part(s: &mut Streams, part: &Object, path: &str) -> Res<Value> {
    let mut out = part.clone();
    match type_of(part) {
        Some("text") => {
            let text = s.text(part.field("text"), &format!("{path}.text"))?;
            out.insert("text".into(), text);
        }
        Some("refusal") => {
            let text = s.text(part.field("refusal"), &format!("{path}.refusal"))?;
            out.insert("refusal".into(), text);
        }
        Some("image_url") => {
            let mut image = part
                .field("image_url")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            image.insert("url".into(), s.image_url(path)?.into());
            out.insert("image_url".into(), Value::Object(image));
        }
        other => {
            return Err(err(
                path,
                format!("passthrough part type {other:?} is not Chat Completions"),
            ));
        }
    }
    Ok(Value::Object(out))
}
