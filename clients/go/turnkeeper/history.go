package turnkeeper

import turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"

// ChatHistory builds a provider-facing history from its rows, oldest first.
func ChatHistory(messages ...*turnkeeperv1.ChatMessage) *turnkeeperv1.History {
	return &turnkeeperv1.History{Shape: &turnkeeperv1.History_Chat{Chat: &turnkeeperv1.ChatHistory{Messages: messages}}}
}

// ConversationHistory builds a structured agent history from its rows, oldest first.
func ConversationHistory(messages ...*turnkeeperv1.ConversationMessage) *turnkeeperv1.History {
	return &turnkeeperv1.History{Shape: &turnkeeperv1.History_Conversation{Conversation: &turnkeeperv1.ConversationHistory{Messages: messages}}}
}

// System is a system row.
func System(content string) *turnkeeperv1.ChatMessage {
	return &turnkeeperv1.ChatMessage{Role: turnkeeperv1.Role_ROLE_SYSTEM, Content: content}
}

// User is a user row; unless its content starts with "[Tool results]" it starts a turn.
func User(content string) *turnkeeperv1.ChatMessage {
	return &turnkeeperv1.ChatMessage{Role: turnkeeperv1.Role_ROLE_USER, Content: content}
}

// Assistant is an assistant row, optionally requesting tool calls.
func Assistant(content string, calls ...*turnkeeperv1.ToolCall) *turnkeeperv1.ChatMessage {
	return &turnkeeperv1.ChatMessage{Role: turnkeeperv1.Role_ROLE_ASSISTANT, Content: content, ToolCalls: calls}
}

// Tool is the result of the tool call toolCallID.
func Tool(toolCallID, content string) *turnkeeperv1.ChatMessage {
	return &turnkeeperv1.ChatMessage{Role: turnkeeperv1.Role_ROLE_TOOL, ToolCallId: toolCallID, Content: content}
}
