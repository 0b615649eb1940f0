//! The shared converter vectors (tests/conformance/converters, docs/converters.md) and one
//! round-trip property per format over seeded random provider JSON, through the live server.

mod common;

use std::path::PathBuf;

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage};
use serde_json::{Value, json};
use turnkeeper_client::convert::{self, AnthropicExportOptions, ConvertOptions, Shape, TurnMarks};
use turnkeeper_client::pb::{self, CacheLifetime, History};
use turnkeeper_client::{Client, ConversionError, FILE_DESCRIPTOR_SET};

type From = fn(&Value, &ConvertOptions) -> Result<History, ConversionError>;
type To = fn(&History, &AnthropicExportOptions) -> Result<Value, ConversionError>;
type Generator = fn(&mut Gen) -> Value;

fn converter(format: &str) -> (From, To) {
    match format {
        "openai_chat" => (convert::from_openai, |h, o| {
            assert_eq!(
                o,
                &AnthropicExportOptions::new(),
                "this export takes no options"
            );
            convert::to_openai(h).map(Value::Array)
        }),
        "openai_responses" => (convert::from_openai_responses, |h, o| {
            assert_eq!(
                o,
                &AnthropicExportOptions::new(),
                "this export takes no options"
            );
            convert::to_openai_responses(h).map(Value::Array)
        }),
        "anthropic" => (convert::from_anthropic, convert::to_anthropic_with),
        other => panic!("unknown format {other}"),
    }
}

fn parse_history(json: &Value) -> History {
    let pool = DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("descriptor set");
    let descriptor = pool
        .get_message_by_name("turnkeeper.v1.History")
        .expect("History");
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    DynamicMessage::deserialize_with_options(descriptor, json, &options)
        .expect("vector history parses")
        .transcode_to()
        .expect("transcode")
}

async fn trim_without_pressure(client: &Client, history: &History) -> History {
    let response = client
        .trim_history(pb::TrimHistoryRequest {
            history: Some(history.clone()),
            mode: pb::TrimMode::TokenBudget as i32,
            caller_path: pb::CallerPath::Agent as i32,
            limits: Some(pb::trim_history_request::Limits::ExplicitLimits(
                pb::ExplicitLimits {
                    budget_tokens: Some(1_000_000_000),
                    ..Default::default()
                },
            )),
            ..Default::default()
        })
        .await
        .expect("TrimHistory");
    assert!(
        !response.outcome.expect("outcome").trimmed,
        "a trim without budget pressure dropped rows"
    );
    response.history.expect("history")
}

/// A vector's optional `exportOptions`: the Anthropic cache marks of spec §14.
fn export_options(vector: &Value) -> AnthropicExportOptions {
    let Some(options) = vector.get("exportOptions") else {
        return AnthropicExportOptions::new();
    };
    let breakpoints = options["cacheBreakpoints"]
        .as_array()
        .expect("cacheBreakpoints")
        .iter()
        .map(|b| u32::try_from(b.as_u64().expect("an index")).expect("a u32"));
    let lifetime = options
        .get("cacheLifetime")
        .map_or(CacheLifetime::Unspecified, |l| {
            CacheLifetime::from_str_name(l.as_str().expect("a lifetime name")).expect("a lifetime")
        });
    AnthropicExportOptions::new()
        .cache_breakpoints(breakpoints)
        .cache_lifetime(lifetime)
}

/// A vector's optional `marks`: the spec §15 marks kept beside the provider JSON (none: no
/// summary, no pins).
fn vector_marks(vector: &Value) -> TurnMarks {
    let Some(marks) = vector.get("marks") else {
        return TurnMarks::default();
    };
    let given = marks.as_object().expect("`marks` is an object");
    assert!(
        given.keys().all(|k| k == "summary" || k == "pinnedTurns"),
        "unknown key in `marks`: {marks}"
    );
    TurnMarks {
        summary: marks["summary"].as_bool().unwrap_or(false),
        pinned_turns: marks["pinnedTurns"]
            .as_array()
            .map_or_else(Vec::new, |turns| {
                let turn = |t: &Value| usize::try_from(t.as_u64().expect("a turn")).expect("turn");
                turns.iter().map(turn).collect()
            }),
    }
}

fn options(shape: &str) -> ConvertOptions {
    ConvertOptions {
        shape: if shape == "conversation" {
            Shape::Conversation
        } else {
            Shape::Chat
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn converter_vectors() {
    let dir = PathBuf::from(common::conformance_dir()).join("../converters");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("converter vectors")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "{} converter vectors", files.len());
    let client = common::tcp_client().await;
    for file in files {
        let vector: Value = serde_json::from_str(&std::fs::read_to_string(&file).expect("read"))
            .expect("vector JSON");
        let name = vector["name"].as_str().expect("name");
        let (from, to) = converter(vector["format"].as_str().expect("format"));
        let opts = ConvertOptions {
            marks: vector_marks(&vector),
            ..options(vector["shape"].as_str().expect("shape"))
        };
        let provider = &vector["provider"];
        let direction = vector["direction"].as_str().expect("direction");
        let export = export_options(&vector);
        if direction == "import-error" {
            assert!(from(provider, &opts).is_err(), "{name}: import must fail");
            continue;
        }
        let history = parse_history(&vector["history"]);
        if direction == "both" {
            let got = from(provider, &opts).unwrap_or_else(|e| panic!("{name}: import: {e}"));
            assert_eq!(got, history, "{name}: import");
        }
        let marks = convert::turn_marks(&history).unwrap_or_else(|e| panic!("{name}: marks: {e}"));
        assert_eq!(marks, opts.marks, "{name}: turn marks");
        let out = to(&history, &export).unwrap_or_else(|e| panic!("{name}: export: {e}"));
        assert_eq!(&out, provider, "{name}: export");
        let estimate = client
            .estimate_tokens(pb::EstimateTokensRequest {
                history: Some(history.clone()),
            })
            .await
            .expect("EstimateTokens");
        assert_eq!(
            Some(estimate.total_tokens),
            vector["estimate"]["totalTokens"].as_u64(),
            "{name}: estimate"
        );
        let kept = trim_without_pressure(&client, &history).await;
        assert_eq!(kept, history, "{name}: the trim changed the history");
        assert_eq!(
            &to(&kept, &export).expect("export"),
            provider,
            "{name}: round trip"
        );
    }
}

/// A parallel pair whose second call was never answered: the sweep removes that call from the
/// pair's one row and keeps the answered call with its output; the export leaves the removed
/// call's item out and keeps the answered one's id.
#[tokio::test]
async fn responses_parallel_calls_sweep_keeps_the_answered_call() {
    let client = common::tcp_client().await;
    let transcript = json!([
        {"role": "user", "content": "go"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "a", "arguments": "{}"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "b", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"}
    ]);
    let history =
        convert::from_openai_responses(&transcript, &ConvertOptions::default()).expect("import");
    let swept = client
        .sweep_orphans(pb::SweepOrphansRequest {
            history: Some(history),
        })
        .await
        .expect("SweepOrphans");
    assert_eq!(
        swept.removals.len(),
        1,
        "the unanswered call alone is removed: {:?}",
        swept.removals
    );
    let out = convert::to_openai_responses(&swept.history.expect("history")).expect("export");
    let want = json!([
        {"role": "user", "content": "go"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "a", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "x"}
    ]);
    assert_eq!(Value::Array(out), want);
}

/// xorshift64*: a small seeded PRNG, so a failure names the seed that reproduces it.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
    fn bool(&mut self) -> bool {
        self.next().is_multiple_of(2)
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.int(0, items.len() - 1)].clone()
    }
    fn text(&mut self) -> String {
        let alphabet = [
            "a",
            "b",
            " ",
            "é",
            "🦀",
            "[",
            "]",
            ":",
            "/",
            "\n",
            "\"",
            "[IMAGE:https://x/y.png]",
            "[Tool results]",
        ];
        (0..self.int(0, 6)).map(|_| self.pick(&alphabet)).collect()
    }
    fn id(&mut self) -> String {
        (0..self.int(1, 6))
            .map(|_| self.pick(&["a", "b", "c", "_", "1", "2"]))
            .collect()
    }
    fn times(&mut self, lo: usize, hi: usize, mut f: impl FnMut(&mut Gen) -> Value) -> Value {
        let n = self.int(lo, hi);
        Value::Array((0..n).map(|_| f(self)).collect())
    }
    fn extra(&mut self, mut base: Value) -> Value {
        if self.bool() {
            base["cache_control"] = json!({"type": "ephemeral"});
        }
        if self.bool() {
            let note = match self.int(0, 3) {
                0 => Value::Null,
                1 => json!(true),
                2 => json!(3),
                _ => json!(self.text()),
            };
            base["x_note"] = note;
        }
        base
    }
    fn image_url(&mut self) -> String {
        self.pick(&[
            "https://x.test/a.png",
            "http://h/b.jpg",
            "data:image/png;base64,AAAA",
            "data:;base64,",
        ])
        .to_owned()
    }
    fn text_or_null(&mut self) -> Value {
        if self.bool() {
            Value::Null
        } else {
            json!(self.text())
        }
    }
}

fn openai_messages(g: &mut Gen) -> Value {
    g.times(0, 6, |g| {
        let role = g.pick(&["system", "developer", "user", "assistant", "tool"]);
        let mut m = json!({"role": role});
        if g.bool() {
            m["name"] = json!(g.text());
        }
        match role {
            "tool" => {
                m["tool_call_id"] = json!(g.id());
                m["content"] = json!(g.text());
            }
            "assistant" => {
                m["content"] = g.text_or_null();
                if g.bool() {
                    m["tool_calls"] = g.times(1, 2, |g| {
                        json!({"id": g.id(), "type": "function", "function": {"name": g.id(), "arguments": g.text()}})
                    });
                }
                if g.bool() {
                    m["refusal"] = g.text_or_null();
                }
            }
            "user" if g.bool() => {
                m["content"] = g.times(0, 3, |g| {
                    if g.bool() {
                        return json!({"type": "text", "text": g.text()});
                    }
                    let mut image = json!({"url": g.image_url()});
                    if g.bool() {
                        image["detail"] = json!(g.pick(&["low", "high", "auto"]));
                    }
                    json!({"type": "image_url", "image_url": image})
                });
            }
            _ => {
                m["content"] = if g.bool() {
                    json!(g.text())
                } else {
                    g.times(0, 2, |g| json!({"type": "text", "text": g.text()}))
                };
            }
        }
        m
    })
}

fn responses_items(g: &mut Gen) -> Value {
    g.times(0, 6, |g| match g.int(0, 3) {
        0 => {
            let role = g.pick(&["system", "developer", "user", "assistant"]);
            let mut content = json!(g.text());
            if g.bool() {
                let kind = if role == "assistant" { "output_text" } else { "input_text" };
                let mut parts = vec![json!({"type": kind, "text": g.text()})];
                if role == "user" && g.bool() {
                    parts.push(json!({"type": "input_image", "image_url": g.image_url(), "detail": g.pick(&["low", "high", "auto"])}));
                }
                content = Value::Array(parts);
            }
            let mut item = json!({"role": role, "content": content});
            if g.bool() {
                item["type"] = json!("message");
                item["id"] = json!(g.id());
                item["status"] = json!("completed");
            }
            item
        }
        1 => {
            let call = json!({"type": "function_call", "call_id": g.id(), "name": g.id(), "arguments": g.text()});
            g.extra(call)
        }
        2 => {
            let output = if g.bool() {
                json!(g.text())
            } else {
                json!([{"type": "input_text", "text": "o"}])
            };
            json!({"type": "function_call_output", "call_id": g.id(), "output": output})
        }
        _ => {
            let summary = g.times(0, 2, |g| json!({"type": "summary_text", "text": g.text()}));
            let mut item = json!({"type": "reasoning", "id": g.id(), "summary": summary});
            if g.bool() {
                item["encrypted_content"] = g.text_or_null();
            }
            item
        }
    })
}

fn anthropic_image(g: &mut Gen) -> Value {
    if g.bool() {
        json!({"type": "image", "source": {"type": "url", "url": g.image_url()}})
    } else {
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}})
    }
}

fn anthropic_request(g: &mut Gen) -> Value {
    let mut request = json!({});
    match g.int(0, 2) {
        1 => request["system"] = json!(g.text()),
        2 => {
            request["system"] = g.times(1, 2, |g| {
                let block = json!({"type": "text", "text": g.text()});
                g.extra(block)
            })
        }
        _ => {}
    }
    request["messages"] = g.times(0, 5, |g| {
        if g.bool() {
            let blocks = g.times(0, 4, |g| match g.int(0, 3) {
                0 => {
                    let block = json!({"type": "text", "text": g.text()});
                    g.extra(block)
                }
                1 => json!({"type": "thinking", "thinking": g.text(), "signature": g.id()}),
                2 => json!({"type": "redacted_thinking", "data": g.text()}),
                _ => {
                    let mut input = serde_json::Map::new();
                    for _ in 0..g.int(0, 3) {
                        let value = match g.int(0, 4) {
                            0 => json!(1),
                            1 => json!(-2),
                            2 => json!(true),
                            3 => Value::Null,
                            _ => json!(g.text()),
                        };
                        input.insert(g.text(), value);
                    }
                    let block =
                        json!({"type": "tool_use", "id": g.id(), "name": g.id(), "input": input});
                    g.extra(block)
                }
            });
            let content = if g.bool() { json!(g.text()) } else { blocks };
            return json!({"role": "assistant", "content": content});
        }
        let mut blocks = match g.times(0, 2, |g| {
            let mut result = json!({"type": "tool_result", "tool_use_id": g.id()});
            match g.int(0, 2) {
                1 => result["content"] = json!(g.text()),
                2 => {
                    result["content"] =
                        json!([{"type": "text", "text": g.text()}, anthropic_image(g)])
                }
                _ => {}
            }
            if g.bool() {
                result["is_error"] = json!(g.bool());
            }
            g.extra(result)
        }) {
            Value::Array(blocks) => blocks,
            _ => unreachable!("times makes an array"),
        };
        for _ in 0..g.int(0, 2) {
            let block = if g.bool() {
                let text = json!({"type": "text", "text": g.text()});
                g.extra(text)
            } else {
                anthropic_image(g)
            };
            blocks.push(block);
        }
        let content = if g.bool() {
            json!(g.text())
        } else {
            Value::Array(blocks)
        };
        json!({"role": "user", "content": content})
    });
    request
}

#[tokio::test]
async fn round_trip_properties() {
    let client = common::tcp_client().await;
    let generators: [(&str, Generator); 3] = [
        ("openai_chat", openai_messages),
        ("openai_responses", responses_items),
        ("anthropic", anthropic_request),
    ];
    for (format, generate) in generators {
        let (from, to) = converter(format);
        for seed in 1..=60u64 {
            let provider = generate(&mut Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1));
            let shape = if seed.is_multiple_of(2) {
                "chat"
            } else {
                "conversation"
            };
            let history = from(&provider, &options(shape))
                .unwrap_or_else(|e| panic!("{format} seed {seed}: import: {e}\n{provider}"));
            let kept = trim_without_pressure(&client, &history).await;
            let out = to(&kept, &AnthropicExportOptions::new())
                .unwrap_or_else(|e| panic!("{format} seed {seed}: export: {e}"));
            assert_eq!(out, provider, "{format} seed {seed} ({shape}): round trip");
        }
    }
}

/// serde_json's default float parser can be one ULP off (0.9999999999999999 read as 1.0); the
/// crate turns on `float_roundtrip`, so a passthrough number comes back exactly and the
/// conformance runner reads vector values such as a low water of 1 - 2^-53 as written.
#[test]
fn passthrough_floats_round_trip_exactly() {
    let text = r#"[{"role": "user", "content": "hi", "x_score": 0.9999999999999999}]"#;
    let messages: Value = serde_json::from_str(text).expect("JSON");
    assert_eq!(
        messages[0]["x_score"].as_f64(),
        Some(1.0 - f64::EPSILON / 2.0)
    );
    let history = convert::from_openai(&messages, &ConvertOptions::default()).expect("import");
    assert_eq!(
        Value::Array(convert::to_openai(&history).expect("export")),
        messages
    );
}
