package turnkeeper

// OpenAI Chat Completions `messages` <-> turnkeeper.v1 History (passthrough key `openai_chat`).
// docs/converters.md is the mapping; the converter vectors pin it.

import (
	"fmt"
	"slices"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

const formatOpenAIChat = "openai_chat"

var (
	openAIRoles = map[string]turnkeeperv1.Role{
		"system": turnkeeperv1.Role_ROLE_SYSTEM, "developer": turnkeeperv1.Role_ROLE_SYSTEM,
		"user": turnkeeperv1.Role_ROLE_USER, "assistant": turnkeeperv1.Role_ROLE_ASSISTANT, "tool": turnkeeperv1.Role_ROLE_TOOL,
	}
	openAIRoleNames = map[turnkeeperv1.Role]string{
		turnkeeperv1.Role_ROLE_SYSTEM: "system", turnkeeperv1.Role_ROLE_USER: "user",
		turnkeeperv1.Role_ROLE_ASSISTANT: "assistant", turnkeeperv1.Role_ROLE_TOOL: "tool",
	}
	openAIPartTypes = map[turnkeeperv1.Role][]string{
		turnkeeperv1.Role_ROLE_SYSTEM: {"text"}, turnkeeperv1.Role_ROLE_USER: {"text", "image_url"},
		turnkeeperv1.Role_ROLE_ASSISTANT: {"text", "refusal"}, turnkeeperv1.Role_ROLE_TOOL: {"text", "image_url"},
	}
)

// FromOpenAI converts Chat Completions `messages` (a JSON array, or a request object holding them)
// to a History. Errors are *ConversionError.
func FromOpenAI(data []byte, opts ConvertOptions) (*turnkeeperv1.History, error) {
	value, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	if request, ok := value.(map[string]any); ok {
		value = request["messages"]
	}
	list, err := expectArray(value, "messages")
	if err != nil {
		return nil, err
	}
	rows := make([]*importRow, len(list))
	for i, raw := range list {
		if rows[i], err = importOpenAIMessage(raw, fmt.Sprintf("messages[%d]", i)); err != nil {
			return nil, err
		}
	}
	return finish(rows, formatOpenAIChat, func(row flatRow, _ *flatRow) (object, error) { return openAIDefault(row) }, opts)
}

func importOpenAIMessage(raw any, path string) (*importRow, error) {
	message, err := expectObject(raw, path)
	if err != nil {
		return nil, err
	}
	roleName, err := expectString(message["role"], path+".role")
	if err != nil {
		return nil, err
	}
	role, ok := openAIRoles[roleName]
	if !ok {
		return nil, convErr(path+".role", "unsupported role %q", roleName)
	}
	// A key whose value is null is absent (SDK dumps write "function_call": null, "tool_calls": null);
	// the skeleton keeps the null, so it round-trips.
	if message["function_call"] != nil {
		return nil, convErr(path+".function_call", "the deprecated form; send tool_calls")
	}
	skeleton := copyObject(message)
	row := newImportRow(role, skeleton)
	if role == turnkeeperv1.Role_ROLE_TOOL {
		if row.message.ToolCallId, err = expectString(message["tool_call_id"], path+".tool_call_id"); err != nil {
			return nil, err
		}
		delete(skeleton, "tool_call_id")
	}
	switch content := message["content"].(type) {
	case string:
		skeleton["content"] = row.add(content)
	case nil:
	default:
		if skeleton["content"], err = importOpenAIParts(row, content, path+".content"); err != nil {
			return nil, err
		}
	}
	if refusal, ok := message["refusal"].(string); ok && role == turnkeeperv1.Role_ROLE_ASSISTANT {
		skeleton["refusal"] = row.add(refusal)
	}
	if calls := message["tool_calls"]; calls != nil {
		if role != turnkeeperv1.Role_ROLE_ASSISTANT {
			return nil, convErr(path+".tool_calls", "only assistant messages carry tool calls")
		}
		list, err := expectArray(calls, path+".tool_calls")
		if err != nil {
			return nil, err
		}
		out := make([]any, len(list))
		for j, call := range list {
			if out[j], err = importOpenAICall(row, call, fmt.Sprintf("%s.tool_calls[%d]", path, j)); err != nil {
				return nil, err
			}
		}
		skeleton["tool_calls"] = out
	}
	return row, nil
}

func importOpenAIParts(row *importRow, content any, path string) ([]any, error) {
	list, err := expectArray(content, path)
	if err != nil {
		return nil, err
	}
	parts, err := objects(list, path)
	if err != nil {
		return nil, err
	}
	role := row.message.GetRole()
	attach := role == turnkeeperv1.Role_ROLE_TOOL || (role == turnkeeperv1.Role_ROLE_USER && isCarrier(partTexts(parts, "text")))
	out := make([]any, len(parts))
	for k, part := range parts {
		here := fmt.Sprintf("%s[%d]", path, k)
		kind, _ := part["type"].(string)
		if !slices.Contains(openAIPartTypes[role], kind) {
			return nil, convErr(here, "unsupported content part type %q here", kind)
		}
		skeleton := copyObject(part)
		switch kind {
		case "text":
			text, err := expectString(part["text"], here+".text")
			if err != nil {
				return nil, err
			}
			skeleton["text"] = row.add(text)
		case "refusal":
			text, err := expectString(part["refusal"], here+".refusal")
			if err != nil {
				return nil, err
			}
			skeleton["refusal"] = row.add(text)
		default:
			image, err := expectObject(part["image_url"], here+".image_url")
			if err != nil {
				return nil, err
			}
			url, err := expectString(image["url"], here+".image_url.url")
			if err != nil {
				return nil, err
			}
			image = copyObject(image)
			delete(image, "url")
			skeleton["image_url"] = image
			if err := addImage(row, url, attach, here); err != nil {
				return nil, err
			}
		}
		out[k] = skeleton
	}
	return out, nil
}

// addImage puts an image where the row keeps it: an attachment, or a marker in its text.
func addImage(row *importRow, url string, attach bool, path string) error {
	if attach {
		a, err := attachmentFromURL(url, path)
		if err != nil {
			return err
		}
		row.message.Attachments = append(row.message.Attachments, a)
		return nil
	}
	m, err := marker(url, path)
	if err != nil {
		return err
	}
	row.add(m)
	return nil
}

func importOpenAICall(row *importRow, raw any, path string) (object, error) {
	call, err := expectObject(raw, path)
	if err != nil {
		return nil, err
	}
	if kind := call["type"]; kind != nil && kind != "function" {
		return nil, convErr(path+".type", "unsupported tool call type %v", kind)
	}
	function, err := expectObject(call["function"], path+".function")
	if err != nil {
		return nil, err
	}
	id, err := expectString(call["id"], path+".id")
	if err != nil {
		return nil, err
	}
	name, err := expectString(function["name"], path+".function.name")
	if err != nil {
		return nil, err
	}
	arguments := ""
	if value := function["arguments"]; value != nil {
		if arguments, err = expectString(value, path+".function.arguments"); err != nil {
			return nil, err
		}
	}
	row.message.ToolCalls = append(row.message.ToolCalls, &turnkeeperv1.ToolCall{Id: id, Name: name, Arguments: arguments})
	skeleton := copyObject(call)
	delete(skeleton, "id")
	rest := copyObject(function)
	delete(rest, "name")
	delete(rest, "arguments")
	skeleton["function"] = rest
	return skeleton, nil
}

func openAIDefault(row flatRow) (object, error) {
	m := row.message
	roleName, ok := openAIRoleNames[m.GetRole()]
	if !ok {
		return nil, convErr("", "role %v has no Chat Completions role", m.GetRole())
	}
	n := length(m.GetContent())
	out := object{"role": roleName}
	switch {
	case m.GetRole() == turnkeeperv1.Role_ROLE_ASSISTANT && len(m.GetToolCalls()) > 0:
		out["content"] = nil
		if n > 0 {
			out["content"] = n
		}
		calls := make([]any, len(m.GetToolCalls()))
		for i := range calls {
			calls[i] = object{"type": "function", "function": object{}}
		}
		out["tool_calls"] = calls
	case len(m.GetAttachments()) > 0 && imagesAreAttachments(m):
		var parts []any
		if n > 0 || m.GetRole() == turnkeeperv1.Role_ROLE_USER {
			parts = append(parts, object{"type": "text", "text": n})
		}
		for range m.GetAttachments() {
			parts = append(parts, object{"type": "image_url", "image_url": object{}})
		}
		out["content"] = parts
	case m.GetRole() == turnkeeperv1.Role_ROLE_USER && !markerTextRow(m):
		out["content"] = n
		pieces := splitMarkers(m.GetContent())
		if slices.ContainsFunc(pieces, func(p markerPiece) bool { return p.isMarker }) {
			parts := make([]any, len(pieces))
			for i, p := range pieces {
				if p.isMarker {
					parts[i] = object{"type": "image_url", "image_url": object{}}
				} else {
					parts[i] = object{"type": "text", "text": length(p.text)}
				}
			}
			out["content"] = parts
		}
	default:
		out["content"] = n
	}
	return out, nil
}

// ToOpenAI converts a History (either shape) to Chat Completions `messages` JSON.
func ToOpenAI(history *turnkeeperv1.History) ([]byte, error) {
	rows, err := flatRows(history, formatOpenAIChat)
	if err != nil {
		return nil, err
	}
	out := make([]any, len(rows))
	for i, row := range rows {
		skeleton := row.skeleton
		if skeleton == nil {
			if skeleton, err = openAIDefault(row); err != nil {
				return nil, err
			}
		}
		if out[i], err = exportOpenAIMessage(row, skeleton, fmt.Sprintf("messages[%d]", i)); err != nil {
			return nil, err
		}
	}
	return marshalJSON(out)
}

func exportOpenAIMessage(row flatRow, skeleton object, path string) (object, error) {
	m := row.message
	roleName, _ := skeleton["role"].(string)
	if role, ok := openAIRoles[roleName]; !ok || role != m.GetRole() {
		return nil, convErr(path, "passthrough role %q does not match the row", roleName)
	}
	s, err := newStreams(row, path)
	if err != nil {
		return nil, err
	}
	out := copyObject(skeleton)
	if m.GetRole() == turnkeeperv1.Role_ROLE_TOOL {
		out["tool_call_id"] = m.GetToolCallId()
	}
	switch content := skeleton["content"].(type) {
	case []any:
		parts := make([]any, len(content))
		for k, raw := range content {
			part, err := expectObject(raw, fmt.Sprintf("%s.content[%d]", path, k))
			if err != nil {
				return nil, err
			}
			if parts[k], err = exportOpenAIPart(m, s, part, path); err != nil {
				return nil, err
			}
		}
		out["content"] = parts
	case nil:
	default:
		if out["content"], err = s.text.take(content, path+".content"); err != nil {
			return nil, err
		}
	}
	if refusal, present := skeleton["refusal"]; present && refusal != nil {
		if out["refusal"], err = s.text.take(refusal, path+".refusal"); err != nil {
			return nil, err
		}
	}
	if raw := skeleton["tool_calls"]; raw != nil {
		list, err := expectArray(raw, path+".tool_calls")
		if err != nil {
			return nil, err
		}
		calls := []any{}
		for j, item := range list {
			call := s.call()
			if call == nil {
				break
			}
			filled, err := expectObject(deepCopy(item), fmt.Sprintf("%s.tool_calls[%d]", path, j))
			if err != nil {
				return nil, err
			}
			function, _ := filled["function"].(map[string]any)
			if function == nil {
				function = object{}
			}
			function["name"], function["arguments"] = call.GetName(), call.GetArguments()
			filled["id"], filled["function"] = call.GetId(), function
			calls = append(calls, filled)
		}
		out["tool_calls"] = calls
	}
	return out, s.done()
}

func exportOpenAIPart(m *turnkeeperv1.ChatMessage, s *streams, part object, path string) (object, error) {
	out := copyObject(part)
	var err error
	switch part["type"] {
	case "text":
		out["text"], err = s.text.take(part["text"], path+".text")
	case "refusal":
		out["refusal"], err = s.text.take(part["refusal"], path+".refusal")
	case "image_url":
		image, _ := out["image_url"].(map[string]any)
		if image == nil {
			image = object{}
		}
		image["url"], err = s.imageURL(m, path)
		out["image_url"] = image
	default:
		return nil, convErr(path, "passthrough part type %v is not Chat Completions", part["type"])
	}
	return out, err
}
