//! Anthropic `cache_control` marks on the cache breakpoints of a prepared request (spec §14,
//! docs/converters.md).

use std::collections::HashMap;

use serde_json::Value;

use super::common::{Object, Res, err, obj};
use crate::pb::{CacheLifetime, History, history};

/// The number of `cache_control` marks Anthropic accepts in one request.
const MAX_CACHE_MARKS: usize = 4;

/// Options of [`to_anthropic_with`](super::to_anthropic_with): the cache marks of spec §14.
///
/// ```
/// use turnkeeper_client::convert::AnthropicExportOptions;
/// use turnkeeper_client::pb::CacheLifetime;
///
/// let options = AnthropicExportOptions::new()
///     .cache_breakpoints([0, 3, 6])
///     .cache_lifetime(CacheLifetime::OneHour);
/// assert_eq!(options.breakpoints(), &[0, 3, 6]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnthropicExportOptions {
    cache_breakpoints: Vec<u32>,
    cache_lifetime: CacheLifetime,
}

impl AnthropicExportOptions {
    /// No marks: the export of [`to_anthropic`](super::to_anthropic).
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks the rows a `PrepareModelCallResponse`'s `cache_breakpoints` name (indices into its
    /// `history`): the last content block each of them renders gets `cache_control`. Counting the
    /// marks the rows already carry, no more than four are rendered: past four, the breakpoints are
    /// left out in the order of spec §14, the one after the newest collapsed turn first, then the
    /// one after the system rows, the one on the last row last.
    pub fn cache_breakpoints(mut self, breakpoints: impl IntoIterator<Item = u32>) -> Self {
        self.cache_breakpoints = breakpoints.into_iter().collect();
        self
    }

    /// The `ttl` of the marks: the provider profile's `cache_lifetime`. Unspecified (the
    /// default) renders `{"type": "ephemeral"}` alone.
    pub fn cache_lifetime(mut self, lifetime: CacheLifetime) -> Self {
        self.cache_lifetime = lifetime;
        self
    }

    /// The breakpoints to mark.
    pub fn breakpoints(&self) -> &[u32] {
        &self.cache_breakpoints
    }

    /// The lifetime of the marks.
    pub fn lifetime(&self) -> CacheLifetime {
        self.cache_lifetime
    }

    fn cache_control(&self) -> Value {
        let mut mark = obj([("type", "ephemeral".into())]);
        let ttl = match self.cache_lifetime {
            CacheLifetime::FiveMinutes => Some("5m"),
            CacheLifetime::OneHour => Some("1h"),
            CacheLifetime::Unspecified => None,
        };
        if let Some(ttl) = ttl {
            mark.insert("ttl".into(), ttl.into());
        }
        Value::Object(mark)
    }
}

/// Where a history message's last block went: a system block or a message's content block;
/// `None` is a string (the `system` string or a message's string content).
#[derive(Clone, Copy, Debug)]
pub(crate) enum BlockPlace {
    System(Option<usize>),
    Message(usize, Option<usize>),
}

/// The number of messages of a history, in its own shape.
pub(crate) fn history_length(history: &History) -> usize {
    match &history.shape {
        Some(history::Shape::Chat(chat)) => chat.messages.len(),
        Some(history::Shape::Conversation(conversation)) => conversation.messages.len(),
        None => 0,
    }
}

/// The breakpoint kinds of spec §14, in the order they are left out past four marks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Breakpoint {
    /// Any row between the system rows and the last row.
    Collapsed,
    /// The last leading system row.
    System,
    /// The last row.
    Last,
}

/// Puts `cache_control` on the last block of each breakpoint row of an exported request,
/// `system_rows` being the leading system rows and `rows` the history's messages.
pub(crate) fn mark_cache_breakpoints(
    out: &mut Object,
    places: &HashMap<usize, BlockPlace>,
    options: &AnthropicExportOptions,
    system_rows: usize,
    rows: usize,
) -> Res<()> {
    let mut marks: Vec<(usize, Breakpoint)> = Vec::new();
    for (k, &raw) in options.cache_breakpoints.iter().enumerate() {
        let index = raw as usize;
        if index >= rows {
            return Err(err(
                format!("cache_breakpoints[{k}]"),
                format!("index {index} is past the history's {rows} rows"),
            ));
        }
        let Some(&place) = places.get(&index) else {
            continue;
        };
        if marks.iter().any(|&(i, _)| i == index) {
            continue;
        }
        if placed_block(out, place, false)
            .and_then(|b| b.get("cache_control"))
            .is_some_and(|c| !c.is_null())
        {
            continue; // the caller marked it already: that mark counts among theirs
        }
        let kind = if index + 1 == system_rows {
            Breakpoint::System
        } else if index + 1 == rows {
            Breakpoint::Last
        } else {
            Breakpoint::Collapsed
        };
        marks.push((index, kind));
    }
    let room = MAX_CACHE_MARKS.saturating_sub(count_cache_marks(out));
    for kind in [Breakpoint::Collapsed, Breakpoint::System, Breakpoint::Last] {
        while marks.len() > room {
            let Some(k) = marks.iter().position(|&(_, t)| t == kind) else {
                break;
            };
            marks.remove(k);
        }
    }
    for (index, _) in marks {
        if let Some(block) = placed_block(out, places[&index], true) {
            block.insert("cache_control".into(), options.cache_control());
        }
    }
    Ok(())
}

/// The block at a place; with `blocks` a string there is first made one text block. Without it a
/// string place has no block.
fn placed_block(out: &mut Object, place: BlockPlace, blocks: bool) -> Option<&mut Object> {
    let (holder, block) = match place {
        BlockPlace::System(block) => (out.get_mut("system")?, block),
        BlockPlace::Message(message, block) => (
            out.get_mut("messages")?
                .get_mut(message)?
                .as_object_mut()?
                .get_mut("content")?,
            block,
        ),
    };
    let block = match (holder.is_string(), blocks) {
        (true, false) => return None,
        (true, true) => {
            let text = holder.take();
            *holder = Value::Array(vec![Value::Object(obj([
                ("type", "text".into()),
                ("text", text),
            ]))]);
            0
        }
        (false, _) => block?,
    };
    holder.get_mut(block)?.as_object_mut()
}

/// Counts the `cache_control` marks (null is absent) the caller's skeletons already put anywhere in
/// the request's system and messages, nested blocks included, as every client does.
fn count_cache_marks(out: &Object) -> usize {
    fn count(value: &Value) -> usize {
        match value {
            Value::Object(object) => object
                .iter()
                .map(|(key, inner)| match key.as_str() {
                    "cache_control" => usize::from(!inner.is_null()),
                    _ => count(inner),
                })
                .sum(),
            Value::Array(list) => list.iter().map(count).sum(),
            _ => 0,
        }
    }
    ["system", "messages"]
        .iter()
        .filter_map(|key| out.get(*key))
        .map(count)
        .sum()
}
