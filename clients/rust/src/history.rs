//! Constructors for the contract's history types, so building a request reads like the history.

use crate::pb::{
    ChatHistory, ChatMessage, ConversationHistory, ConversationMessage, History, Role, ToolCall,
    conversation_message, history,
};

impl ChatMessage {
    /// A row with a role and text content.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            ..Default::default()
        }
    }

    /// A system row.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user row; unless it is a `[Tool results]` carrier, it starts a turn.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant row.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// An assistant row requesting tool calls.
    pub fn assistant_tool_calls(content: impl Into<String>, calls: Vec<ToolCall>) -> Self {
        ChatMessage {
            tool_calls: calls,
            ..Self::assistant(content)
        }
    }

    /// A tool row answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: tool_call_id.into(),
            ..Self::new(Role::Tool, content)
        }
    }
}

impl ToolCall {
    /// A tool call with its id, tool name and JSON arguments.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }
}

impl From<ChatMessage> for ConversationMessage {
    fn from(message: ChatMessage) -> Self {
        ConversationMessage {
            message: Some(conversation_message::Message::Chat(message)),
        }
    }
}

impl History {
    /// The provider-facing shape.
    pub fn chat(messages: impl IntoIterator<Item = ChatMessage>) -> Self {
        let messages = messages.into_iter().collect();
        History {
            shape: Some(history::Shape::Chat(ChatHistory { messages })),
        }
    }

    /// The structured agent shape.
    pub fn conversation(messages: impl IntoIterator<Item = ConversationMessage>) -> Self {
        let messages = messages.into_iter().collect();
        History {
            shape: Some(history::Shape::Conversation(ConversationHistory {
                messages,
            })),
        }
    }

    /// The rows of a chat-shaped history.
    pub fn chat_messages(&self) -> Option<&[ChatMessage]> {
        match &self.shape {
            Some(history::Shape::Chat(chat)) => Some(&chat.messages),
            _ => None,
        }
    }

    /// The rows of a conversation-shaped history.
    pub fn conversation_messages(&self) -> Option<&[ConversationMessage]> {
        match &self.shape {
            Some(history::Shape::Conversation(conversation)) => Some(&conversation.messages),
            _ => None,
        }
    }
}

impl From<Vec<ChatMessage>> for History {
    fn from(messages: Vec<ChatMessage>) -> Self {
        History::chat(messages)
    }
}

impl From<Vec<ConversationMessage>> for History {
    fn from(messages: Vec<ConversationMessage>) -> Self {
        History::conversation(messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_both_shapes() {
        let rows = vec![
            ChatMessage::system("s"),
            ChatMessage::user("hi"),
            ChatMessage::tool("c1", "ok"),
        ];
        let chat = History::from(rows.clone());
        assert_eq!(chat.chat_messages(), Some(rows.as_slice()));
        assert_eq!(chat.conversation_messages(), None);
        assert_eq!(rows[2].role(), Role::Tool);
        assert_eq!(rows[2].tool_call_id, "c1");

        let conversation =
            History::conversation(rows.iter().cloned().map(ConversationMessage::from));
        assert_eq!(
            conversation.conversation_messages().map(<[_]>::len),
            Some(3)
        );
    }
}
