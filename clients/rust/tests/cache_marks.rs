//! The edges of the Anthropic cache marks (spec §14) the shared vectors leave out; no server.

use serde_json::{Value, json};
use turnkeeper_client::convert::{self, AnthropicExportOptions, ConvertOptions};
use turnkeeper_client::pb::{CacheLifetime, ChatMessage, History};

fn export(history: &History, options: &AnthropicExportOptions) -> Value {
    convert::to_anthropic_with(history, options).expect("export")
}

#[test]
fn a_breakpoint_past_the_history_is_a_conversion_error() {
    let history = History::chat([ChatMessage::user("q")]);
    let options = AnthropicExportOptions::new().cache_breakpoints([0, 1]);
    let error = convert::to_anthropic_with(&history, &options).expect_err("index 1 is past");
    assert_eq!(error.path, "cache_breakpoints[1]");
}

#[test]
fn a_breakpoint_named_twice_is_marked_once() {
    let history = History::chat([ChatMessage::user("q"), ChatMessage::assistant("a")]);
    let options = AnthropicExportOptions::new()
        .cache_breakpoints([1, 1])
        .cache_lifetime(CacheLifetime::OneHour);
    assert_eq!(
        export(&history, &options),
        json!({"messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
            ]}
        ]})
    );
}

#[test]
fn breakpoints_without_room_are_left_out() {
    // Four system blocks the caller marked leave no room for turnkeeper's marks.
    let marked = |text: &str| {
        let request = json!({
            "system": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}],
            "messages": []
        });
        let history =
            convert::from_anthropic(&request, &ConvertOptions::default()).expect("import");
        history.chat_messages().expect("the chat shape")[0].clone()
    };
    let history = History::chat([
        marked("a"),
        marked("b"),
        marked("c"),
        marked("d"),
        ChatMessage::user("q"),
        ChatMessage::assistant("a"),
    ]);
    let plain = export(&history, &AnthropicExportOptions::new());
    let options = AnthropicExportOptions::new().cache_breakpoints([3, 5]);
    assert_eq!(
        export(&history, &options),
        plain,
        "a fifth mark was rendered"
    );
    assert_eq!(plain.to_string().matches("cache_control").count(), 4);
}

#[test]
fn no_breakpoints_leave_the_export_as_it_was() {
    let history = History::chat([ChatMessage::system("s"), ChatMessage::user("q")]);
    let options = AnthropicExportOptions::new().cache_lifetime(CacheLifetime::FiveMinutes);
    assert_eq!(
        export(&history, &options),
        json!({"system": "s", "messages": [{"role": "user", "content": "q"}]})
    );
}

/// Spec §13.1: the mark has no provider form, so the summary imports back as a plain assistant row.
#[test]
fn a_tool_exchange_summary_comes_back_as_a_plain_assistant_row() {
    let text = "[Tool exchange: 2 tool call(s) \u{2014} results collapsed]";
    let summary = ChatMessage {
        tool_exchange_summary: true,
        ..ChatMessage::assistant(text)
    };
    let history = History::chat([ChatMessage::user("q"), summary, ChatMessage::assistant("a")]);
    let options = ConvertOptions::default();
    let back = [
        convert::from_openai(
            &convert::to_openai(&history).expect("export").into(),
            &options,
        ),
        convert::from_openai_responses(
            &convert::to_openai_responses(&history)
                .expect("export")
                .into(),
            &options,
        ),
        convert::from_anthropic(&convert::to_anthropic(&history).expect("export"), &options),
    ];
    for imported in back {
        let imported = imported.expect("import");
        assert_eq!(
            imported.chat_messages().expect("the chat shape")[1],
            ChatMessage::assistant(text)
        );
    }
}
