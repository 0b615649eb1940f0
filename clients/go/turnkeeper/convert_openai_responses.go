package turnkeeper

// OpenAI Responses input items (what the Agents SDK sessions store) <-> turnkeeper.v1 History
// (passthrough key `openai_responses`). docs/converters.md is the mapping; the converter vectors pin it.

import (
	"fmt"
	"slices"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

const (
	formatOpenAIResponses = "openai_responses"
	// responsesItemsKey holds the item skeletons of a row that stands for several items.
	responsesItemsKey = "items"
)

var (
	responsesRoles = map[string]turnkeeperv1.Role{
		"system": turnkeeperv1.Role_ROLE_SYSTEM, "developer": turnkeeperv1.Role_ROLE_SYSTEM,
		"user": turnkeeperv1.Role_ROLE_USER, "assistant": turnkeeperv1.Role_ROLE_ASSISTANT,
	}
	responsesTextParts = []string{"input_text", "output_text"}
	// responsesOpaqueItems have no row field but a model reads them (the hosted tools' calls and
	// their outputs, the Agents SDK's references and compactions): each is one assistant row whose
	// text is the item's canonical JSON, so it is priced, stays within its turn and comes back as it
	// went in. An output is an assistant row like its call: as a tool row it would answer no call and
	// the orphan sweep would remove it.
	responsesOpaqueItems = []string{
		"web_search_call", "file_search_call", "mcp_call", "mcp_list_tools", "mcp_approval_request",
		"mcp_approval_response", "computer_call", "computer_call_output", "code_interpreter_call",
		"image_generation_call", "local_shell_call", "local_shell_call_output", "shell_call",
		"shell_call_output", "apply_patch_call", "apply_patch_call_output", "custom_tool_call",
		"custom_tool_call_output", "tool_search_call", "compaction_trigger", "hosted_tool_call",
		"item_reference", "compaction",
	}
	// responsesOpaqueParts are content parts kept the same way inside their message or tool output.
	responsesOpaqueParts = []string{"input_file"}
)

// responsesItemType is an item's type; one without it is a message, or an item reference (whose
// `type` the API lets be omitted) when it has an id and no role.
func responsesItemType(item object) string {
	if t := item["type"]; t != nil {
		kind, _ := t.(string)
		return kind
	}
	if _, hasID := item["id"]; hasID && item["role"] == nil {
		return "item_reference"
	}
	return "message"
}

// importOpaque puts value's canonical JSON into the row's text and returns its length.
func importOpaque(row *importRow, value any) (int, error) {
	text, err := canonicalJSON(value)
	if err != nil {
		return 0, err
	}
	return row.add(text), nil
}

// exportOpaque is the item or part back from the canonical JSON its row holds at the cursor.
func exportOpaque(s *streams, length any, path string) (object, error) {
	text, err := s.text.take(length, path)
	if err != nil {
		return nil, err
	}
	value, err := decodeJSON([]byte(text))
	if err != nil {
		return nil, convErr(path, "the row's text is no longer the item's JSON")
	}
	return expectObject(value, path)
}

// FromOpenAIResponses converts Responses input items (a JSON array, or a request object holding
// them as `input`) to a History, one row per item except that consecutive function_call items (a
// model's parallel calls) are one assistant row, so each output follows the row that calls it.
// Errors are *ConversionError.
func FromOpenAIResponses(data []byte, opts ConvertOptions) (*turnkeeperv1.History, error) {
	value, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	if request, ok := value.(map[string]any); ok {
		value = request["input"]
	}
	list, err := expectArray(value, "input")
	if err != nil {
		return nil, err
	}
	rows := make([]*importRow, 0, len(list))
	// The skeletons of the function_call run the last row holds; nil when it holds none.
	var calls []any
	for i, raw := range list {
		row, err := importResponsesItem(raw, fmt.Sprintf("input[%d]", i))
		if err != nil {
			return nil, err
		}
		// Only a function_call item gives a row tool calls.
		if len(row.message.GetToolCalls()) == 0 {
			calls = nil
		} else if calls == nil {
			calls = []any{row.skeleton}
		} else {
			last := rows[len(rows)-1]
			last.message.ToolCalls = append(last.message.ToolCalls, row.message.GetToolCalls()...)
			calls = append(calls, row.skeleton)
			last.skeleton = object{responsesItemsKey: calls}
			continue
		}
		rows = append(rows, row)
	}
	return finish(rows, formatOpenAIResponses, func(row flatRow, _ *flatRow) (object, error) {
		items, err := responsesDefault(row)
		if err != nil || len(items) == 1 {
			return first(items), err
		}
		return object{responsesItemsKey: items}, nil
	}, opts)
}

func first(items []any) object {
	if len(items) == 0 {
		return nil
	}
	o, _ := items[0].(map[string]any)
	return o
}

func importResponsesItem(raw any, path string) (*importRow, error) {
	item, err := expectObject(raw, path)
	if err != nil {
		return nil, err
	}
	kind := responsesItemType(item)
	if slices.Contains(responsesOpaqueItems, kind) {
		row := newImportRow(turnkeeperv1.Role_ROLE_ASSISTANT, object{"type": kind})
		n, err := importOpaque(row, item)
		if err != nil {
			return nil, err
		}
		row.skeleton["item"] = n
		return row, nil
	}
	skeleton := copyObject(item)
	take := func(key string) (string, error) {
		value, err := expectString(item[key], path+"."+key)
		delete(skeleton, key)
		return value, err
	}
	switch kind {
	case "message":
		roleName, _ := item["role"].(string)
		role, ok := responsesRoles[roleName]
		if !ok {
			return nil, convErr(path+".role", "unsupported role %v", item["role"])
		}
		row := newImportRow(role, skeleton)
		if content, ok := item["content"].(string); ok {
			skeleton["content"] = row.add(content)
		} else if skeleton["content"], err = importResponsesParts(row, item["content"], path+".content"); err != nil {
			return nil, err
		}
		return row, nil
	case "function_call":
		row := newImportRow(turnkeeperv1.Role_ROLE_ASSISTANT, skeleton)
		id, err := take("call_id")
		if err != nil {
			return nil, err
		}
		name, err := take("name")
		if err != nil {
			return nil, err
		}
		arguments, err := take("arguments")
		if err != nil {
			return nil, err
		}
		row.message.ToolCalls = []*turnkeeperv1.ToolCall{{Id: id, Name: name, Arguments: arguments}}
		return row, nil
	case "function_call_output":
		row := newImportRow(turnkeeperv1.Role_ROLE_TOOL, skeleton)
		if row.message.ToolCallId, err = take("call_id"); err != nil {
			return nil, err
		}
		if output, ok := item["output"].(string); ok {
			skeleton["output"] = row.add(output)
		} else if skeleton["output"], err = importResponsesParts(row, item["output"], path+".output"); err != nil {
			return nil, err
		}
		return row, nil
	case "reasoning":
		row := newImportRow(turnkeeperv1.Role_ROLE_ASSISTANT, skeleton)
		for _, key := range [][2]string{{"summary", "summary_text"}, {"content", "reasoning_text"}} {
			value, present := item[key[0]]
			if !present || value == nil {
				continue
			}
			list, err := expectArray(value, path+"."+key[0])
			if err != nil {
				return nil, err
			}
			parts := make([]any, len(list))
			for k, raw := range list {
				here := fmt.Sprintf("%s.%s[%d]", path, key[0], k)
				part, err := expectObject(raw, here)
				if err != nil {
					return nil, err
				}
				if part["type"] != key[1] {
					return nil, convErr(here, "expected a %s part", key[1])
				}
				text, err := expectString(part["text"], here)
				if err != nil {
					return nil, err
				}
				out := copyObject(part)
				out["text"] = row.addTo(streamReasoning, text)
				parts[k] = out
			}
			skeleton[key[0]] = parts
		}
		if encrypted, ok := item["encrypted_content"].(string); ok {
			skeleton["encrypted_content"] = row.addTo(streamReasoning, encrypted)
		}
		return row, nil
	default:
		return nil, convErr(path+".type", "unsupported item type %q", kind)
	}
}

func importResponsesParts(row *importRow, content any, path string) ([]any, error) {
	list, err := expectArray(content, path)
	if err != nil {
		return nil, err
	}
	parts, err := objects(list, path)
	if err != nil {
		return nil, err
	}
	role := row.message.GetRole()
	attach := role == turnkeeperv1.Role_ROLE_TOOL || (role == turnkeeperv1.Role_ROLE_USER && isCarrier(partTexts(parts, responsesTextParts...)))
	out := make([]any, len(parts))
	for k, part := range parts {
		here := fmt.Sprintf("%s[%d]", path, k)
		skeleton := copyObject(part)
		kind, _ := part["type"].(string)
		switch {
		case slices.Contains(responsesTextParts, kind):
			text, err := expectString(part["text"], here+".text")
			if err != nil {
				return nil, err
			}
			skeleton["text"] = row.add(text)
		case slices.Contains(responsesOpaqueParts, kind):
			n, err := importOpaque(row, part)
			if err != nil {
				return nil, err
			}
			skeleton = object{"type": kind, "part": n}
		case kind == "refusal" && role == turnkeeperv1.Role_ROLE_ASSISTANT:
			text, err := expectString(part["refusal"], here+".refusal")
			if err != nil {
				return nil, err
			}
			skeleton["refusal"] = row.add(text)
		case kind == "input_image" && (role == turnkeeperv1.Role_ROLE_USER || role == turnkeeperv1.Role_ROLE_TOOL):
			url, err := expectString(part["image_url"], here+".image_url")
			if err != nil {
				return nil, err
			}
			delete(skeleton, "image_url")
			if err := addImage(row, url, attach, here); err != nil {
				return nil, err
			}
		default:
			return nil, convErr(here, "unsupported content part type %q here", kind)
		}
		out[k] = skeleton
	}
	return out, nil
}

// responsesDefault lists the items a row without passthrough becomes.
func responsesDefault(row flatRow) ([]any, error) {
	m := row.message
	n := length(m.GetContent())
	image := func() any { return object{"type": "input_image", "detail": "auto"} }
	if m.GetRole() == turnkeeperv1.Role_ROLE_TOOL {
		var output any = n
		if len(m.GetAttachments()) > 0 {
			parts := []any{}
			if n > 0 {
				parts = append(parts, object{"type": "input_text", "text": n})
			}
			for range m.GetAttachments() {
				parts = append(parts, image())
			}
			output = parts
		}
		return []any{object{"type": "function_call_output", "output": output}}, nil
	}
	roleName, ok := openAIRoleNames[m.GetRole()]
	if !ok || m.GetRole() == turnkeeperv1.Role_ROLE_TOOL {
		return nil, convErr("", "role %v has no Responses role", m.GetRole())
	}
	item := object{"role": roleName, "content": n}
	if m.GetRole() == turnkeeperv1.Role_ROLE_USER {
		if len(m.GetAttachments()) > 0 && isCarrier(m.GetContent()) {
			parts := []any{object{"type": "input_text", "text": n}}
			for range m.GetAttachments() {
				parts = append(parts, image())
			}
			item["content"] = parts
		} else if !markerTextRow(m) {
			pieces := splitMarkers(m.GetContent())
			if slices.ContainsFunc(pieces, func(p markerPiece) bool { return p.isMarker }) {
				parts := make([]any, len(pieces))
				for i, p := range pieces {
					if p.isMarker {
						parts[i] = image()
					} else {
						parts[i] = object{"type": "input_text", "text": length(p.text)}
					}
				}
				item["content"] = parts
			}
		}
	}
	if m.GetRole() == turnkeeperv1.Role_ROLE_ASSISTANT && len(m.GetToolCalls()) > 0 {
		var items []any
		if n > 0 {
			items = append(items, item)
		}
		for range m.GetToolCalls() {
			items = append(items, object{"type": "function_call"})
		}
		return items, nil
	}
	return []any{item}, nil
}

// ToOpenAIResponses converts a History (either shape) to Responses input items JSON.
func ToOpenAIResponses(history *turnkeeperv1.History) ([]byte, error) {
	rows, err := flatRows(history, formatOpenAIResponses)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for i, row := range rows {
		path := fmt.Sprintf("rows[%d]", i)
		items, err := responsesItems(row)
		if err != nil {
			return nil, err
		}
		s, err := newStreams(row, path)
		if err != nil {
			return nil, err
		}
		for k, raw := range items {
			skeleton, err := expectObject(raw, fmt.Sprintf("%s.passthrough.items[%d]", path, k))
			if err != nil {
				return nil, err
			}
			// A function_call whose call the sweep removed is gone with it.
			if skeleton["type"] == "function_call" && len(items) > 1 && len(s.calls) == 0 {
				continue
			}
			item, err := exportResponsesItem(row.message, s, skeleton, path)
			if err != nil {
				return nil, err
			}
			out = append(out, item)
		}
		if err := s.done(); err != nil {
			return nil, err
		}
	}
	return marshalJSON(out)
}

// responsesItems lists the item skeletons a row stands for: its passthrough's (one item, or the
// list under responsesItemsKey), else its default items.
func responsesItems(row flatRow) ([]any, error) {
	if row.skeleton == nil {
		return responsesDefault(row)
	}
	if list, ok := row.skeleton[responsesItemsKey].([]any); ok && len(row.skeleton) == 1 {
		return list, nil
	}
	return []any{row.skeleton}, nil
}

func exportResponsesItem(m *turnkeeperv1.ChatMessage, s *streams, skeleton object, path string) (object, error) {
	out := copyObject(skeleton)
	kind := "message"
	if t := skeleton["type"]; t != nil {
		kind, _ = t.(string)
	}
	if slices.Contains(responsesOpaqueItems, kind) {
		return exportOpaque(s, skeleton["item"], path+".item")
	}
	var err error
	switch kind {
	case "message":
		roleName, _ := skeleton["role"].(string)
		if role, ok := responsesRoles[roleName]; !ok || role != m.GetRole() {
			return nil, convErr(path, "passthrough role does not match the row")
		}
		out["content"], err = exportResponsesContent(m, s, skeleton["content"], path+".content")
	case "function_call":
		call := s.call()
		if call == nil || m.GetRole() != turnkeeperv1.Role_ROLE_ASSISTANT {
			return nil, convErr(path, "passthrough function_call without its tool call")
		}
		out["call_id"], out["name"], out["arguments"] = call.GetId(), call.GetName(), call.GetArguments()
	case "function_call_output":
		if m.GetRole() != turnkeeperv1.Role_ROLE_TOOL {
			return nil, convErr(path, "passthrough function_call_output on a non-tool row")
		}
		out["call_id"] = m.GetToolCallId()
		out["output"], err = exportResponsesContent(m, s, skeleton["output"], path+".output")
	case "reasoning":
		for _, key := range []string{"summary", "content"} {
			parts, ok := skeleton[key].([]any)
			if !ok {
				continue
			}
			filled := make([]any, len(parts))
			for k, raw := range parts {
				part, err := expectObject(deepCopy(raw), path)
				if err != nil {
					return nil, err
				}
				if part["text"], err = s.reasoning.take(part["text"], path); err != nil {
					return nil, err
				}
				filled[k] = part
			}
			out[key] = filled
		}
		if encrypted, present := skeleton["encrypted_content"]; present && encrypted != nil {
			out["encrypted_content"], err = s.reasoning.take(encrypted, path)
		}
	default:
		return nil, convErr(path, "passthrough item type %q is not Responses", kind)
	}
	return out, err
}

func exportResponsesContent(m *turnkeeperv1.ChatMessage, s *streams, content any, path string) (any, error) {
	parts, ok := content.([]any)
	if !ok {
		return s.text.take(content, path)
	}
	out := make([]any, len(parts))
	for k, raw := range parts {
		part, err := expectObject(deepCopy(raw), path)
		if err != nil {
			return nil, err
		}
		kind, _ := part["type"].(string)
		switch {
		case slices.Contains(responsesTextParts, kind):
			part["text"], err = s.text.take(part["text"], path+".text")
		case slices.Contains(responsesOpaqueParts, kind):
			part, err = exportOpaque(s, part["part"], path+".part")
		case kind == "refusal":
			part["refusal"], err = s.text.take(part["refusal"], path+".refusal")
		case kind == "input_image":
			part["image_url"], err = s.imageURL(m, path)
		default:
			return nil, convErr(path, "passthrough part type %q is not Responses", kind)
		}
		if err != nil {
			return nil, err
		}
		out[k] = part
	}
	return out, nil
}
