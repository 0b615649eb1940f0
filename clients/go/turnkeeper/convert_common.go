package turnkeeper

// Pieces every converter shares: rows being built, skeletons, cursors, markers, attachments.
// docs/converters.md is the mapping; the vectors in tests/conformance/converters pin it.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

// DefaultBreadcrumb is the server's default breadcrumb text (docs/semantics.md, Trims).
const DefaultBreadcrumb = "[earlier turns omitted to fit the context window]"

// CarrierPrefix starts the text of a `[Tool results]` carrier row.
const CarrierPrefix = "[Tool results]"

const markerOpen = "[IMAGE:"

// Shape is the history shape a converter builds.
type Shape string

const (
	// ShapeChat builds ChatMessage rows (the default).
	ShapeChat Shape = "chat"
	// ShapeConversation builds structured ConversationMessage rows.
	ShapeConversation Shape = "conversation"
)

// ConvertOptions tunes an import; the zero value builds the chat shape and knows the default breadcrumb.
type ConvertOptions struct {
	// Shape is the history shape to build; empty means ShapeChat.
	Shape Shape
	// BreadcrumbTexts are the user texts right after the leading system rows that mark the breadcrumb;
	// nil means the server's default text.
	BreadcrumbTexts []string
	// Marks are the summary and pinned-turn marks kept beside the provider JSON (TurnMarksOf).
	Marks TurnMarks
}

type object = map[string]any

// The two streams a skeleton slot takes priced text from; one field except on conversation steps.
const (
	streamText      = "text"
	streamReasoning = "reasoning"
)

func convErr(path, format string, args ...any) error {
	return &ConversionError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// decodeJSON parses provider JSON keeping numbers as written (json.Number).
func decodeJSON(data []byte) (any, error) {
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.UseNumber()
	var value any
	if err := decoder.Decode(&value); err != nil {
		return nil, convErr("", "not JSON: %v", err)
	}
	return value, nil
}

// marshalJSON writes JSON without HTML escaping (a `<` in a prompt stays a `<`).
func marshalJSON(value any) ([]byte, error) {
	var buf bytes.Buffer
	encoder := json.NewEncoder(&buf)
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(value); err != nil {
		return nil, convErr("", "cannot write JSON: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// canonicalJSON is compact JSON with sorted keys: the one text every client writes for a JSON value.
// encoding/json always escapes U+2028 and U+2029; the other clients write them as they are.
func canonicalJSON(value any) (string, error) {
	out, err := marshalJSON(value)
	if err != nil {
		return "", err
	}
	return unescapeSeparators(string(out)), nil
}

// unescapeSeparators turns the `\u2028` and `\u2029` escapes encoding/json writes back into the
// characters; a backslash starts an escape only after an even run of backslashes.
func unescapeSeparators(text string) string {
	if !strings.Contains(text, `\u202`) {
		return text
	}
	out := make([]byte, 0, len(text))
	backslashes := 0
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c == '\\' && backslashes%2 == 0 && (strings.HasPrefix(text[i:], `\u2028`) || strings.HasPrefix(text[i:], `\u2029`)) {
			out = utf8.AppendRune(out, rune(0x2020+int(text[i+5]-'0')))
			i += 5
			continue
		}
		if c == '\\' {
			backslashes++
		} else {
			backslashes = 0
		}
		out = append(out, c)
	}
	return string(out)
}

func jsonEqual(a, b any) bool {
	x, errX := marshalJSON(a)
	y, errY := marshalJSON(b)
	return errX == nil && errY == nil && bytes.Equal(x, y)
}

func deepCopy(value any) any {
	switch v := value.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, item := range v {
			out[k] = deepCopy(item)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, item := range v {
			out[i] = deepCopy(item)
		}
		return out
	default:
		return v
	}
}

func copyObject(o object) object { return deepCopy(o).(object) }

func expectString(value any, path string) (string, error) {
	s, ok := value.(string)
	if !ok {
		return "", convErr(path, "expected a string, got %s", kindOf(value))
	}
	return s, nil
}

func expectObject(value any, path string) (object, error) {
	o, ok := value.(map[string]any)
	if !ok {
		return nil, convErr(path, "expected an object, got %s", kindOf(value))
	}
	return o, nil
}

func expectArray(value any, path string) ([]any, error) {
	a, ok := value.([]any)
	if !ok {
		return nil, convErr(path, "expected an array, got %s", kindOf(value))
	}
	return a, nil
}

func kindOf(value any) string {
	switch value.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	default:
		return "number"
	}
}

// expectLength reads a skeleton slot: the number of code points it takes from its stream.
func expectLength(value any, path string) (int, error) {
	var f float64
	switch v := value.(type) {
	case float64:
		f = v
	case int:
		f = float64(v)
	case json.Number:
		parsed, err := v.Float64()
		if err != nil {
			return 0, convErr(path, "passthrough slot is not a length")
		}
		f = parsed
	default:
		return 0, convErr(path, "passthrough slot is not a length")
	}
	if f < 0 || f != float64(int(f)) {
		return 0, convErr(path, "passthrough slot is not a length")
	}
	return int(f), nil
}

func isCarrier(content string) bool { return strings.HasPrefix(content, CarrierPrefix) }

func sendableURL(ref string) bool {
	ref = strings.TrimSpace(ref)
	return strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://") || strings.HasPrefix(ref, "data:")
}

func marker(url, path string) (string, error) {
	if strings.Contains(url, "]") {
		return "", convErr(path, "image URL contains ']' and cannot be an [IMAGE:] marker")
	}
	return markerOpen + url + "]", nil
}

// markerPiece is a text run or a sendable `[IMAGE:<ref>]` marker of user text.
type markerPiece struct {
	text     string
	isMarker bool
}

func splitMarkers(content string) []markerPiece {
	var parts []markerPiece
	textStart, pos := 0, 0
	for {
		start := strings.Index(content[pos:], markerOpen)
		if start < 0 {
			break
		}
		start += pos
		end := strings.Index(content[start+len(markerOpen):], "]")
		if end < 0 {
			break
		}
		end += start + len(markerOpen)
		if sendableURL(content[start+len(markerOpen) : end]) {
			if start > textStart {
				parts = append(parts, markerPiece{text: content[textStart:start]})
			}
			parts = append(parts, markerPiece{text: content[start : end+1], isMarker: true})
			textStart = end + 1
		}
		pos = end + 1
	}
	if textStart < len(content) {
		parts = append(parts, markerPiece{text: content[textStart:]})
	}
	return parts
}

func parseDataURL(url string) (mediaType, payload string, ok bool) {
	rest, found := strings.CutPrefix(url, "data:")
	if !found {
		return "", "", false
	}
	header, payload, found := strings.Cut(rest, ",")
	if !found {
		return "", "", false
	}
	mediaType, found = strings.CutSuffix(header, ";base64")
	return mediaType, payload, found
}

var base64Text = regexp.MustCompile(`^[A-Za-z0-9+/]*={0,2}$`)

func decodeBase64(payload, path string) ([]byte, error) {
	if len(payload)%4 != 0 || !base64Text.MatchString(payload) {
		return nil, convErr(path, "invalid base64 image data")
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		return nil, convErr(path, "invalid base64 image data")
	}
	return data, nil
}

// attachmentFromURL makes a data URL inline bytes and any other URL a uri (no media type guessed).
func attachmentFromURL(url, path string) (*turnkeeperv1.Attachment, error) {
	if mediaType, payload, ok := parseDataURL(url); ok {
		data, err := decodeBase64(payload, path)
		if err != nil {
			return nil, err
		}
		return &turnkeeperv1.Attachment{MediaType: mediaType, Source: &turnkeeperv1.Attachment_Data{Data: data}}, nil
	}
	return &turnkeeperv1.Attachment{Source: &turnkeeperv1.Attachment_Uri{Uri: url}}, nil
}

func attachmentURL(a *turnkeeperv1.Attachment, path string) (string, error) {
	switch source := a.GetSource().(type) {
	case *turnkeeperv1.Attachment_Data:
		return "data:" + a.GetMediaType() + ";base64," + base64.StdEncoding.EncodeToString(source.Data), nil
	case *turnkeeperv1.Attachment_Uri:
		return source.Uri, nil
	default:
		return "", convErr(path, "attachment has neither data nor uri")
	}
}

// importRow is a provider row being imported: the row, its priced text as pieces in provider
// order, and the skeleton of the fragment it came from.
type importRow struct {
	message  *turnkeeperv1.ChatMessage
	skeleton object
	pieces   [][2]string
}

func newImportRow(role turnkeeperv1.Role, skeleton object) *importRow {
	if skeleton == nil {
		skeleton = object{}
	}
	return &importRow{message: &turnkeeperv1.ChatMessage{Role: role}, skeleton: skeleton}
}

// add records priced text and returns its length, which the skeleton keeps in the text's place.
func (r *importRow) add(text string) int { return r.addTo(streamText, text) }

func (r *importRow) addTo(stream, text string) int {
	r.pieces = append(r.pieces, [2]string{stream, text})
	return utf8.RuneCountInString(text)
}

func (r *importRow) joined(stream string) string {
	var b strings.Builder
	for _, p := range r.pieces {
		if stream == "" || p[0] == stream {
			b.WriteString(p[1])
		}
	}
	return b.String()
}

// flatRow is one provider row on its way out: the row, the reasoning of a conversation step (nil
// where reasoning is in content), this format's skeleton, if any, and the index of the history
// message it comes from (the rows of one ToolResults message share it).
type flatRow struct {
	message   *turnkeeperv1.ChatMessage
	reasoning *string
	skeleton  object
	index     int
}

type defaultSkeletonFunc func(row flatRow, previous *flatRow) (object, error)

// finish fills content, sets the caller's marks (TurnMarks) and the breadcrumb, drops skeletons
// equal to the default and builds the history.
func finish(rows []*importRow, format string, defaults defaultSkeletonFunc, opts ConvertOptions) (*turnkeeperv1.History, error) {
	for _, row := range rows {
		row.message.Content = row.joined("")
	}
	texts := opts.BreadcrumbTexts
	if texts == nil {
		texts = []string{DefaultBreadcrumb}
	}
	if err := applyMarks(rows, opts.Marks, texts); err != nil {
		return nil, err
	}
	var previous *flatRow
	for _, row := range rows {
		def, err := defaults(flatRow{message: row.message}, previous)
		if err != nil {
			return nil, err
		}
		if !jsonEqual(row.skeleton, def) {
			pt, err := structpb.NewStruct(object{format: row.skeleton})
			if err != nil {
				return nil, convErr("", "passthrough: %v", err)
			}
			row.message.Passthrough = pt
		}
		previous = &flatRow{message: row.message, skeleton: row.skeleton}
	}
	return buildHistory(rows, opts.Shape)
}

func buildHistory(rows []*importRow, shape Shape) (*turnkeeperv1.History, error) {
	switch shape {
	case "", ShapeChat:
		messages := make([]*turnkeeperv1.ChatMessage, len(rows))
		for i, row := range rows {
			messages[i] = row.message
		}
		return &turnkeeperv1.History{Shape: &turnkeeperv1.History_Chat{Chat: &turnkeeperv1.ChatHistory{Messages: messages}}}, nil
	case ShapeConversation:
	default:
		return nil, convErr("", "unknown shape %q", shape)
	}
	var out []*turnkeeperv1.ConversationMessage
	names := map[string]string{}
	for _, row := range rows {
		m := row.message
		switch {
		case m.GetRole() == turnkeeperv1.Role_ROLE_ASSISTANT && len(m.GetToolCalls()) > 0:
			for _, call := range m.GetToolCalls() {
				names[call.GetId()] = call.GetName()
			}
			step := &turnkeeperv1.AssistantToolCalls{
				Text: row.joined(streamText), Reasoning: row.joined(streamReasoning),
				ToolCalls: m.GetToolCalls(), Passthrough: m.GetPassthrough(),
			}
			out = append(out, &turnkeeperv1.ConversationMessage{Message: &turnkeeperv1.ConversationMessage_AssistantToolCalls{AssistantToolCalls: step}})
		case m.GetRole() == turnkeeperv1.Role_ROLE_TOOL:
			result := &turnkeeperv1.ToolResult{
				ToolCallId: m.GetToolCallId(), ToolName: names[m.GetToolCallId()], Content: m.GetContent(),
				Attachments: m.GetAttachments(), Passthrough: m.GetPassthrough(),
			}
			if n := len(out); n > 0 && out[n-1].GetToolResults() != nil {
				results := out[n-1].GetToolResults()
				results.Results = append(results.Results, result)
			} else {
				out = append(out, &turnkeeperv1.ConversationMessage{Message: &turnkeeperv1.ConversationMessage_ToolResults{
					ToolResults: &turnkeeperv1.ToolResults{Results: []*turnkeeperv1.ToolResult{result}},
				}})
			}
		default:
			out = append(out, &turnkeeperv1.ConversationMessage{Message: &turnkeeperv1.ConversationMessage_Chat{Chat: m}})
		}
	}
	return &turnkeeperv1.History{Shape: &turnkeeperv1.History_Conversation{Conversation: &turnkeeperv1.ConversationHistory{Messages: out}}}, nil
}

func skeletonOf(pt *structpb.Struct, format string) (object, error) {
	if format == "" || pt == nil {
		return nil, nil
	}
	value, ok := pt.GetFields()[format]
	if !ok {
		return nil, nil
	}
	skeleton, ok := value.AsInterface().(map[string]any)
	if !ok {
		return nil, convErr("passthrough."+format, "expected an object")
	}
	return skeleton, nil
}

// flatRows lists the provider rows a history stands for, in order, with their format skeletons.
func flatRows(history *turnkeeperv1.History, format string) ([]flatRow, error) {
	var rows []flatRow
	index := 0
	add := func(m *turnkeeperv1.ChatMessage, reasoning *string, pt *structpb.Struct) error {
		skeleton, err := skeletonOf(pt, format)
		rows = append(rows, flatRow{message: m, reasoning: reasoning, skeleton: skeleton, index: index})
		return err
	}
	if chat := history.GetChat(); chat != nil {
		for i, m := range chat.GetMessages() {
			index = i
			if err := add(m, nil, m.GetPassthrough()); err != nil {
				return nil, err
			}
		}
		return rows, nil
	}
	conversation := history.GetConversation()
	if conversation == nil {
		return nil, convErr("history", "neither chat nor conversation is set")
	}
	for i, message := range conversation.GetMessages() {
		index = i
		var err error
		switch kind := message.GetMessage().(type) {
		case *turnkeeperv1.ConversationMessage_Chat:
			err = add(kind.Chat, nil, kind.Chat.GetPassthrough())
		case *turnkeeperv1.ConversationMessage_AssistantToolCalls:
			step := kind.AssistantToolCalls
			reasoning := step.GetReasoning()
			m := &turnkeeperv1.ChatMessage{Role: turnkeeperv1.Role_ROLE_ASSISTANT, Content: step.GetText(), ToolCalls: step.GetToolCalls()}
			err = add(m, &reasoning, step.GetPassthrough())
		case *turnkeeperv1.ConversationMessage_ToolResults:
			for _, result := range kind.ToolResults.GetResults() {
				m := &turnkeeperv1.ChatMessage{
					Role: turnkeeperv1.Role_ROLE_TOOL, ToolCallId: result.GetToolCallId(),
					Content: result.GetContent(), Attachments: result.GetAttachments(),
				}
				if err = add(m, nil, result.GetPassthrough()); err != nil {
					break
				}
			}
		default:
			err = convErr(fmt.Sprintf("history.conversation.messages[%d]", i), "no message set")
		}
		if err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// cursor reads a row's priced text back in the order the skeleton's slots name it.
type cursor struct {
	text, path, field string
	pos               int
}

func (c *cursor) take(length any, path string) (string, error) {
	n, err := expectLength(length, path)
	if err != nil {
		return "", err
	}
	start := c.pos
	for ; n > 0 && c.pos < len(c.text); n-- {
		_, size := utf8.DecodeRuneInString(c.text[c.pos:])
		c.pos += size
	}
	if n > 0 {
		return "", convErr(path, "passthrough wants more characters of %s than the %d that remain; the row changed since it was converted",
			c.field, utf8.RuneCountInString(c.text[start:]))
	}
	return c.text[start:c.pos], nil
}

// markerURL is the URL of the `[IMAGE:<url>]` marker at the current position.
func (c *cursor) markerURL(path string) (string, error) {
	if !strings.HasPrefix(c.text[c.pos:], markerOpen) {
		return "", convErr(path, "passthrough expects an [IMAGE:] marker here")
	}
	end := c.pos + strings.Index(c.text[c.pos:], "]")
	url := c.text[c.pos+len(markerOpen) : end]
	c.pos = end + 1
	return url, nil
}

func (c *cursor) done() error {
	if c.pos != len(c.text) {
		return convErr(c.path, "%d characters of %s have no place in the passthrough or the target format",
			utf8.RuneCountInString(c.text[c.pos:]), c.field)
	}
	return nil
}

// streams holds one row's text and reasoning cursors, attachments and tool calls in order.
type streams struct {
	text, reasoning *cursor
	attachments     []*turnkeeperv1.Attachment
	calls           []*turnkeeperv1.ToolCall
	path            string
}

func newStreams(row flatRow, path string) (*streams, error) {
	s := &streams{
		text:        &cursor{text: row.message.GetContent(), path: path, field: "content"},
		attachments: slices.Clone(row.message.GetAttachments()),
		calls:       slices.Clone(row.message.GetToolCalls()),
		path:        path,
	}
	s.reasoning = s.text
	if row.reasoning != nil {
		s.reasoning = &cursor{text: *row.reasoning, path: path, field: "reasoning"}
	}
	if row.message.GetToolCallId() != "" && row.message.GetRole() != turnkeeperv1.Role_ROLE_TOOL {
		return nil, convErr(path, "tool_call_id on a non-tool row has no provider field")
	}
	return s, nil
}

func (s *streams) attachment(path string) (*turnkeeperv1.Attachment, error) {
	if len(s.attachments) == 0 {
		return nil, convErr(path, "passthrough expects an attachment the row lacks")
	}
	next := s.attachments[0]
	s.attachments = s.attachments[1:]
	return next, nil
}

// call is the next tool call; nil once the row has no more (the sweep may have removed some).
func (s *streams) call() *turnkeeperv1.ToolCall {
	if len(s.calls) == 0 {
		return nil
	}
	next := s.calls[0]
	s.calls = s.calls[1:]
	return next
}

func (s *streams) done() error {
	if err := s.text.done(); err != nil {
		return err
	}
	if err := s.reasoning.done(); err != nil {
		return err
	}
	if len(s.attachments) > 0 {
		return convErr(s.path, "attachments have no place in the passthrough")
	}
	if len(s.calls) > 0 {
		return convErr(s.path, "tool calls have no place in the passthrough")
	}
	return nil
}

// imageURL reads an image slot: a marker in a user row, an attachment in a tool or carrier row.
func (s *streams) imageURL(m *turnkeeperv1.ChatMessage, path string) (string, error) {
	if imagesAreAttachments(m) {
		a, err := s.attachment(path)
		if err != nil {
			return "", err
		}
		return attachmentURL(a, path)
	}
	return s.text.markerURL(path)
}

func imagesAreAttachments(m *turnkeeperv1.ChatMessage) bool {
	return m.GetRole() == turnkeeperv1.Role_ROLE_TOOL || (m.GetRole() == turnkeeperv1.Role_ROLE_USER && isCarrier(m.GetContent()))
}

// markerTextRow says whether a user row's [IMAGE:] markers are plain text: the breadcrumb, the
// summary row (priced as text, spec §15.2) or a carrier.
func markerTextRow(m *turnkeeperv1.ChatMessage) bool {
	return m.GetBreadcrumb() || m.GetSummary() || isCarrier(m.GetContent())
}

// partTexts concatenates the `text` of the parts whose type is one of types.
func partTexts(parts []object, types ...string) string {
	var b strings.Builder
	for _, p := range parts {
		kind, _ := p["type"].(string)
		if text, ok := p["text"].(string); ok && slices.Contains(types, kind) {
			b.WriteString(text)
		}
	}
	return b.String()
}

func objects(values []any, path string) ([]object, error) {
	out := make([]object, len(values))
	for i, v := range values {
		o, err := expectObject(v, fmt.Sprintf("%s[%d]", path, i))
		if err != nil {
			return nil, err
		}
		out[i] = o
	}
	return out, nil
}

func length(s string) int { return utf8.RuneCountInString(s) }
