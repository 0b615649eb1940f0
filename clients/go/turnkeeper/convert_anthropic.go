package turnkeeper

// Anthropic Messages (`system` + `messages`) <-> turnkeeper.v1 History (passthrough key `anthropic`).
// docs/converters.md is the mapping; the converter vectors pin it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

const formatAnthropic = "anthropic"

// FromAnthropic converts an Anthropic Messages request (`system` and `messages`; other keys are the
// caller's and are not read), or a bare `messages` array, to a History. Errors are *ConversionError.
func FromAnthropic(data []byte, opts ConvertOptions) (*turnkeeperv1.History, error) {
	value, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	var rows []*importRow
	messages, isList := value.([]any)
	if !isList {
		request, err := expectObject(value, "request")
		if err != nil {
			return nil, err
		}
		switch system := request["system"].(type) {
		case string:
			row := newImportRow(turnkeeperv1.Role_ROLE_SYSTEM, nil)
			row.add(system)
			rows = append(rows, row)
		case nil:
		default:
			blocks, err := expectArray(system, "system")
			if err != nil {
				return nil, err
			}
			for k, raw := range blocks {
				row, err := importAnthropicSystem(raw, fmt.Sprintf("system[%d]", k))
				if err != nil {
					return nil, err
				}
				rows = append(rows, row)
			}
		}
		if messages, err = expectArray(request["messages"], "messages"); err != nil {
			return nil, err
		}
	}
	for i, raw := range messages {
		path := fmt.Sprintf("messages[%d]", i)
		message, err := expectObject(raw, path)
		if err != nil {
			return nil, err
		}
		switch message["role"] {
		case "user":
			imported, err := importAnthropicUser(message, path)
			if err != nil {
				return nil, err
			}
			rows = append(rows, imported...)
		case "assistant":
			row, err := importAnthropicAssistant(message, path)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		default:
			return nil, convErr(path+".role", "unsupported role %v", message["role"])
		}
	}
	return finish(rows, formatAnthropic, anthropicDefault, opts)
}

func importAnthropicSystem(raw any, path string) (*importRow, error) {
	block, err := expectObject(raw, path)
	if err != nil {
		return nil, err
	}
	if block["type"] != "text" {
		return nil, convErr(path, "only text blocks are supported")
	}
	text, err := expectString(block["text"], path+".text")
	if err != nil {
		return nil, err
	}
	row := newImportRow(turnkeeperv1.Role_ROLE_SYSTEM, copyObject(block))
	row.skeleton["text"] = row.add(text)
	return row, nil
}

// importAnthropicUser makes one row per tool_result block and one user row per run of other blocks;
// rows after the first have a skeleton without `role`: they continue the same message.
func importAnthropicUser(message object, path string) ([]*importRow, error) {
	skeleton := copyObject(message)
	if content, ok := message["content"].(string); ok {
		row := newImportRow(turnkeeperv1.Role_ROLE_USER, skeleton)
		skeleton["content"] = row.add(content)
		return []*importRow{row}, nil
	}
	list, err := expectArray(message["content"], path+".content")
	if err != nil {
		return nil, err
	}
	blocks, err := objects(list, path+".content")
	if err != nil {
		return nil, err
	}
	type indexed struct {
		k     int
		block object
	}
	var runs [][]indexed
	for k, block := range blocks {
		if block["type"] == "tool_result" || len(runs) == 0 || runs[len(runs)-1][0].block["type"] == "tool_result" {
			runs = append(runs, []indexed{{k, block}})
		} else {
			runs[len(runs)-1] = append(runs[len(runs)-1], indexed{k, block})
		}
	}
	if len(runs) == 0 {
		skeleton["content"] = []any{}
		return []*importRow{newImportRow(turnkeeperv1.Role_ROLE_USER, skeleton)}, nil
	}
	rows := make([]*importRow, len(runs))
	for n, run := range runs {
		head := object{}
		if n == 0 {
			head = skeleton
		}
		if run[0].block["type"] == "tool_result" {
			row, block, err := importAnthropicToolResult(run[0].block, fmt.Sprintf("%s.content[%d]", path, run[0].k))
			if err != nil {
				return nil, err
			}
			head["content"] = []any{block}
			row.skeleton = head
			rows[n] = row
			continue
		}
		row := newImportRow(turnkeeperv1.Role_ROLE_USER, head)
		runBlocks := make([]object, len(run))
		for i, item := range run {
			runBlocks[i] = item.block
		}
		attach := isCarrier(partTexts(runBlocks, "text"))
		out := make([]any, len(run))
		for i, item := range run {
			here := fmt.Sprintf("%s.content[%d]", path, item.k)
			blockSkeleton := copyObject(item.block)
			switch item.block["type"] {
			case "text":
				text, err := expectString(item.block["text"], here+".text")
				if err != nil {
					return nil, err
				}
				blockSkeleton["text"] = row.add(text)
			case "image":
				url, err := importAnthropicImage(item.block, blockSkeleton, here)
				if err != nil {
					return nil, err
				}
				if err := addImage(row, url, attach, here); err != nil {
					return nil, err
				}
			default:
				return nil, convErr(here, "unsupported user block type %v", item.block["type"])
			}
			out[i] = blockSkeleton
		}
		head["content"] = out
		rows[n] = row
	}
	return rows, nil
}

// importAnthropicImage returns the image's URL (a data URL for base64 sources); the skeleton keeps the rest.
func importAnthropicImage(block, skeleton object, path string) (string, error) {
	source, err := expectObject(block["source"], path+".source")
	if err != nil {
		return "", err
	}
	source = copyObject(source)
	var url string
	switch source["type"] {
	case "base64":
		mediaType, err := expectString(source["media_type"], path+".source.media_type")
		if err != nil {
			return "", err
		}
		data, err := expectString(source["data"], path+".source.data")
		if err != nil {
			return "", err
		}
		url = "data:" + mediaType + ";base64," + data
		delete(source, "data")
	case "url":
		if url, err = expectString(source["url"], path+".source.url"); err != nil {
			return "", err
		}
		delete(source, "url")
	default:
		return "", convErr(path+".source.type", "unsupported image source %v", source["type"])
	}
	skeleton["source"] = source
	return url, nil
}

func importAnthropicToolResult(block object, path string) (*importRow, object, error) {
	row := newImportRow(turnkeeperv1.Role_ROLE_TOOL, nil)
	var err error
	if row.message.ToolCallId, err = expectString(block["tool_use_id"], path+".tool_use_id"); err != nil {
		return nil, nil, err
	}
	skeleton := copyObject(block)
	delete(skeleton, "tool_use_id")
	switch content := block["content"].(type) {
	case string:
		skeleton["content"] = row.add(content)
	case nil:
	default:
		list, err := expectArray(content, path+".content")
		if err != nil {
			return nil, nil, err
		}
		inner := make([]any, len(list))
		for k, raw := range list {
			here := fmt.Sprintf("%s.content[%d]", path, k)
			part, err := expectObject(raw, here)
			if err != nil {
				return nil, nil, err
			}
			partSkeleton := copyObject(part)
			switch part["type"] {
			case "text":
				text, err := expectString(part["text"], here+".text")
				if err != nil {
					return nil, nil, err
				}
				partSkeleton["text"] = row.add(text)
			case "image":
				url, err := importAnthropicImage(part, partSkeleton, here)
				if err != nil {
					return nil, nil, err
				}
				if err := addImage(row, url, true, here); err != nil {
					return nil, nil, err
				}
			default:
				return nil, nil, convErr(here, "unsupported tool_result block type %v", part["type"])
			}
			inner[k] = partSkeleton
		}
		skeleton["content"] = inner
	}
	return row, skeleton, nil
}

func importAnthropicAssistant(message object, path string) (*importRow, error) {
	skeleton := copyObject(message)
	row := newImportRow(turnkeeperv1.Role_ROLE_ASSISTANT, skeleton)
	if content, ok := message["content"].(string); ok {
		skeleton["content"] = row.add(content)
		return row, nil
	}
	list, err := expectArray(message["content"], path+".content")
	if err != nil {
		return nil, err
	}
	blocks := make([]any, len(list))
	for k, raw := range list {
		here := fmt.Sprintf("%s.content[%d]", path, k)
		block, err := expectObject(raw, here)
		if err != nil {
			return nil, err
		}
		out := copyObject(block)
		switch block["type"] {
		case "text", "thinking", "redacted_thinking":
			key, stream := "text", streamText
			if block["type"] == "thinking" {
				key, stream = "thinking", streamReasoning
			} else if block["type"] == "redacted_thinking" {
				key, stream = "data", streamReasoning
			}
			text, err := expectString(block[key], here+"."+key)
			if err != nil {
				return nil, err
			}
			out[key] = row.addTo(stream, text)
		case "tool_use":
			id, err := expectString(block["id"], here+".id")
			if err != nil {
				return nil, err
			}
			name, err := expectString(block["name"], here+".name")
			if err != nil {
				return nil, err
			}
			input, err := expectObject(block["input"], here+".input")
			if err != nil {
				return nil, err
			}
			arguments, err := canonicalJSON(input)
			if err != nil {
				return nil, err
			}
			row.message.ToolCalls = append(row.message.ToolCalls, &turnkeeperv1.ToolCall{Id: id, Name: name, Arguments: arguments})
			delete(out, "id")
			delete(out, "name")
			delete(out, "input")
		default:
			return nil, convErr(here, "unsupported assistant block type %v", block["type"])
		}
		blocks[k] = out
	}
	skeleton["content"] = blocks
	return row, nil
}

// anthropicContinues says whether a tool row without passthrough after row (as exported) joins its message.
func anthropicContinues(row *flatRow) bool {
	if row == nil || row.skeleton == nil {
		return false
	}
	_, hasRole := row.skeleton["role"]
	return !hasRole || row.message.GetRole() == turnkeeperv1.Role_ROLE_TOOL
}

func imageSkeletonForURL(url string) object {
	if mediaType, _, ok := parseDataURL(url); ok {
		return object{"type": "image", "source": object{"type": "base64", "media_type": mediaType}}
	}
	return object{"type": "image", "source": object{"type": "url"}}
}

func attachmentSkeleton(a *turnkeeperv1.Attachment) object {
	if _, ok := a.GetSource().(*turnkeeperv1.Attachment_Data); ok {
		return object{"type": "image", "source": object{"type": "base64", "media_type": a.GetMediaType()}}
	}
	return object{"type": "image", "source": object{"type": "url"}}
}

func anthropicDefault(row flatRow, previous *flatRow) (object, error) {
	m := row.message
	n := length(m.GetContent())
	switch m.GetRole() {
	case turnkeeperv1.Role_ROLE_SYSTEM:
		return object{}, nil // a lone leading system row is the `system` string; see ToAnthropic
	case turnkeeperv1.Role_ROLE_TOOL:
		result := object{"type": "tool_result", "content": n}
		if len(m.GetAttachments()) > 0 {
			var inner []any
			if n > 0 {
				inner = append(inner, object{"type": "text", "text": n})
			}
			for _, a := range m.GetAttachments() {
				inner = append(inner, attachmentSkeleton(a))
			}
			result["content"] = inner
		}
		if anthropicContinues(previous) {
			return object{"content": []any{result}}, nil
		}
		return object{"role": "user", "content": []any{result}}, nil
	case turnkeeperv1.Role_ROLE_USER:
		if len(m.GetAttachments()) > 0 && isCarrier(m.GetContent()) {
			blocks := []any{object{"type": "text", "text": n}}
			for _, a := range m.GetAttachments() {
				blocks = append(blocks, attachmentSkeleton(a))
			}
			return object{"role": "user", "content": blocks}, nil
		}
		var pieces []markerPiece
		if !markerTextRow(m) {
			pieces = splitMarkers(m.GetContent())
		}
		if !slices.ContainsFunc(pieces, func(p markerPiece) bool { return p.isMarker }) {
			return object{"role": "user", "content": n}, nil
		}
		blocks := make([]any, len(pieces))
		for i, p := range pieces {
			if p.isMarker {
				blocks[i] = imageSkeletonForURL(p.text[len(markerOpen) : len(p.text)-1])
			} else {
				blocks[i] = object{"type": "text", "text": length(p.text)}
			}
		}
		return object{"role": "user", "content": blocks}, nil
	case turnkeeperv1.Role_ROLE_ASSISTANT:
		if len(m.GetToolCalls()) == 0 {
			return object{"role": "assistant", "content": n}, nil
		}
		var blocks []any
		if n > 0 {
			blocks = append(blocks, object{"type": "text", "text": n})
		}
		for range m.GetToolCalls() {
			blocks = append(blocks, object{"type": "tool_use"})
		}
		return object{"role": "assistant", "content": blocks}, nil
	default:
		return nil, convErr("", "role %v has no Anthropic role", m.GetRole())
	}
}

// ToAnthropic converts a History (either shape) to `{"system": ..., "messages": [...]}` JSON.
// WithCacheBreakpoints and WithCacheLifetime add spec §14's cache_control marks.
func ToAnthropic(history *turnkeeperv1.History, options ...AnthropicOption) ([]byte, error) {
	var export anthropicExport
	for _, option := range options {
		option(&export)
	}
	rows, err := flatRows(history, formatAnthropic)
	if err != nil {
		return nil, err
	}
	lead := 0
	for lead < len(rows) && rows[lead].message.GetRole() == turnkeeperv1.Role_ROLE_SYSTEM {
		lead++
	}
	// Where each history message's last block went, for the cache marks.
	places := map[int]blockPlace{}
	out := object{}
	if lead == 1 && rows[0].skeleton == nil {
		out["system"] = rows[0].message.GetContent()
		places[rows[0].index] = blockPlace{system: true, block: -1}
	} else if lead > 0 {
		blocks := make([]any, lead)
		for i := range lead {
			skeleton := rows[i].skeleton
			if skeleton == nil {
				skeleton = object{"type": "text", "text": length(rows[i].message.GetContent())}
			}
			path := fmt.Sprintf("rows[%d]", i)
			s, err := newStreams(rows[i], path)
			if err != nil {
				return nil, err
			}
			block := copyObject(skeleton)
			if block["text"], err = s.text.take(skeleton["text"], path+".text"); err != nil {
				return nil, err
			}
			if err := s.done(); err != nil {
				return nil, err
			}
			blocks[i] = block
			places[rows[i].index] = blockPlace{system: true, block: i}
		}
		out["system"] = blocks
	}
	messages := []any{}
	var previous *flatRow
	for i := lead; i < len(rows); i++ {
		row := rows[i]
		path := fmt.Sprintf("rows[%d]", i)
		if row.message.GetRole() == turnkeeperv1.Role_ROLE_SYSTEM {
			return nil, convErr(path, "Anthropic Messages has no system row after messages")
		}
		skeleton := row.skeleton
		if skeleton == nil {
			if skeleton, err = anthropicDefault(row, previous); err != nil {
				return nil, err
			}
		}
		message, err := exportAnthropicMessage(row, skeleton, path)
		if err != nil {
			return nil, err
		}
		_, hasRole := skeleton["role"]
		var last object
		if len(messages) > 0 {
			last, _ = messages[len(messages)-1].(map[string]any)
		}
		lastBlocks, joinable := last["content"].([]any)
		switch {
		case hasRole:
			messages = append(messages, message)
		case joinable && last["role"] == "user":
			last["content"] = append(lastBlocks, message["content"].([]any)...)
		default:
			message["role"] = "user"
			messages = append(messages, message)
		}
		into := messages[len(messages)-1].(map[string]any)
		switch content := into["content"].(type) {
		case string:
			places[row.index] = blockPlace{message: len(messages) - 1, block: -1}
		case []any:
			if rendered, _ := message["content"].([]any); len(rendered) > 0 {
				places[row.index] = blockPlace{message: len(messages) - 1, block: len(content) - 1}
			}
		}
		previous = &flatRow{message: row.message, reasoning: row.reasoning, skeleton: skeleton}
	}
	out["messages"] = messages
	if len(export.breakpoints) > 0 {
		if err := markCacheBreakpoints(out, places, export, lead, historyLength(history)); err != nil {
			return nil, err
		}
	}
	return marshalJSON(out)
}

func exportAnthropicMessage(row flatRow, skeleton object, path string) (object, error) {
	m := row.message
	expected := "user"
	if m.GetRole() == turnkeeperv1.Role_ROLE_ASSISTANT {
		expected = "assistant"
	}
	if role, present := skeleton["role"]; present && role != expected {
		return nil, convErr(path, "passthrough role does not match the row")
	}
	s, err := newStreams(row, path)
	if err != nil {
		return nil, err
	}
	out := copyObject(skeleton)
	if content, ok := skeleton["content"].([]any); ok {
		blocks := []any{}
		for k, raw := range content {
			block, err := expectObject(raw, fmt.Sprintf("%s.content[%d]", path, k))
			if err != nil {
				return nil, err
			}
			filled, err := exportAnthropicBlock(m, s, block, path)
			if err != nil {
				return nil, err
			}
			if filled != nil { // tool-use blocks whose call the sweep removed are gone with it
				blocks = append(blocks, filled)
			}
		}
		out["content"] = blocks
	} else if out["content"], err = s.text.take(skeleton["content"], path+".content"); err != nil {
		return nil, err
	}
	return out, s.done()
}

func exportAnthropicBlock(m *turnkeeperv1.ChatMessage, s *streams, block object, path string) (object, error) {
	out := copyObject(block)
	var err error
	switch block["type"] {
	case "text":
		out["text"], err = s.text.take(block["text"], path+".text")
	case "thinking":
		out["thinking"], err = s.reasoning.take(block["thinking"], path+".thinking")
	case "redacted_thinking":
		out["data"], err = s.reasoning.take(block["data"], path+".data")
	case "tool_use":
		call := s.call()
		if call == nil {
			return nil, nil
		}
		input := any(object{})
		if call.GetArguments() != "" {
			decoder := json.NewDecoder(bytes.NewReader([]byte(call.GetArguments())))
			decoder.UseNumber()
			if decoder.Decode(&input) != nil {
				return nil, convErr(path, "tool call %s arguments are not JSON", call.GetId())
			}
		}
		if _, ok := input.(map[string]any); !ok {
			return nil, convErr(path, "tool call %s arguments are not a JSON object", call.GetId())
		}
		out["id"], out["name"], out["input"] = call.GetId(), call.GetName(), input
	case "tool_result":
		if m.GetRole() != turnkeeperv1.Role_ROLE_TOOL {
			return nil, convErr(path, "passthrough tool_result on a row that is not a tool")
		}
		out["tool_use_id"] = m.GetToolCallId()
		switch inner := block["content"].(type) {
		case []any:
			parts := make([]any, len(inner))
			for k, raw := range inner {
				part, err := expectObject(raw, path)
				if err != nil {
					return nil, err
				}
				if parts[k], err = exportAnthropicBlock(m, s, part, path); err != nil {
					return nil, err
				}
			}
			out["content"] = parts
		case nil:
		default:
			out["content"], err = s.text.take(inner, path+".content")
		}
	case "image":
		url, err := s.imageURL(m, path)
		if err != nil {
			return nil, err
		}
		source, _ := out["source"].(map[string]any)
		if source == nil {
			source = object{}
		}
		if source["type"] == "base64" {
			mediaType, payload, ok := parseDataURL(url)
			if !ok {
				return nil, convErr(path, "a base64 image needs a data: URL")
			}
			if _, present := source["media_type"]; !present {
				source["media_type"] = mediaType
			}
			source["data"] = payload
		} else {
			source["url"] = url
		}
		out["source"] = source
	default:
		return nil, convErr(path, "passthrough block type %v is not Anthropic", block["type"])
	}
	return out, err
}
