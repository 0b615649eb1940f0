package turnkeeper

// Anthropic cache_control marks on the cache breakpoints of a prepared request (spec §14,
// docs/converters.md).

import (
	"fmt"
	"slices"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

// maxCacheMarks is the number of cache_control marks Anthropic accepts in one request.
const maxCacheMarks = 4

// AnthropicOption tunes ToAnthropic.
type AnthropicOption func(*anthropicExport)

type anthropicExport struct {
	breakpoints []uint32
	lifetime    turnkeeperv1.CacheLifetime
}

// WithCacheBreakpoints marks the rows a PrepareModelCallResponse's `cache_breakpoints` name
// (indices into its `history`): the last content block each of them renders gets `cache_control`.
// Counting the marks the rows already carry, no more than four are rendered: past four, the
// breakpoints are left out in the order of spec §14, the one after the newest collapsed turn first,
// then the one after the system rows, the one on the last row last.
func WithCacheBreakpoints(breakpoints []uint32) AnthropicOption {
	return func(e *anthropicExport) { e.breakpoints = slices.Clone(breakpoints) }
}

// WithCacheLifetime sets the `ttl` of the marks WithCacheBreakpoints renders: the provider profile's
// `cache_lifetime`. Unspecified (the default) renders `{"type": "ephemeral"}` alone.
func WithCacheLifetime(lifetime turnkeeperv1.CacheLifetime) AnthropicOption {
	return func(e *anthropicExport) { e.lifetime = lifetime }
}

// blockPlace is where a history message's last block went: a system block or a message's content
// block; block -1 is a string (the `system` string or a message's string content).
type blockPlace struct {
	system         bool
	message, block int
}

// historyLength is the number of messages of a history, in its own shape.
func historyLength(history *turnkeeperv1.History) int {
	if chat := history.GetChat(); chat != nil {
		return len(chat.GetMessages())
	}
	return len(history.GetConversation().GetMessages())
}

// The breakpoint kinds of spec §14, in the order they are left out past four marks.
const (
	breakpointCollapsed = iota // any row between the system rows and the last row
	breakpointSystem           // the last leading system row
	breakpointLast             // the last row
)

type breakpointMark struct {
	index int
	kind  int
}

func (e anthropicExport) cacheControl() object {
	mark := object{"type": "ephemeral"}
	switch e.lifetime {
	case turnkeeperv1.CacheLifetime_CACHE_LIFETIME_FIVE_MINUTES:
		mark["ttl"] = "5m"
	case turnkeeperv1.CacheLifetime_CACHE_LIFETIME_ONE_HOUR:
		mark["ttl"] = "1h"
	}
	return mark
}

// markCacheBreakpoints puts cache_control on the last block of each breakpoint row of an exported
// request, `systemRows` being the leading system rows and `rows` the history's messages.
func markCacheBreakpoints(out object, places map[int]blockPlace, e anthropicExport, systemRows, rows int) error {
	var marks []breakpointMark
	for k, raw := range e.breakpoints {
		index := int(raw)
		if index >= rows {
			return convErr(fmt.Sprintf("cache_breakpoints[%d]", k), "index %d is past the history's %d rows", index, rows)
		}
		place, rendered := places[index]
		if !rendered || slices.ContainsFunc(marks, func(m breakpointMark) bool { return m.index == index }) {
			continue
		}
		if block := placedBlock(out, place, false); block != nil && block["cache_control"] != nil {
			continue // the caller marked it already: that mark counts among theirs
		}
		kind := breakpointCollapsed
		switch index {
		case systemRows - 1:
			kind = breakpointSystem
		case rows - 1:
			kind = breakpointLast
		}
		marks = append(marks, breakpointMark{index: index, kind: kind})
	}
	room := max(maxCacheMarks-countCacheMarks(out), 0)
	for kind := breakpointCollapsed; kind <= breakpointLast; kind++ {
		for len(marks) > room {
			k := slices.IndexFunc(marks, func(m breakpointMark) bool { return m.kind == kind })
			if k < 0 {
				break
			}
			marks = slices.Delete(marks, k, k+1)
		}
	}
	for _, m := range marks {
		placedBlock(out, places[m.index], true)["cache_control"] = e.cacheControl()
	}
	return nil
}

// placedBlock is the block at a place; with `blocks` a string there is first made one text block.
// Without it a string place has no block (nil).
func placedBlock(out object, place blockPlace, blocks bool) object {
	holder, key := out, "system"
	if !place.system {
		holder, key = out["messages"].([]any)[place.message].(map[string]any), "content"
	}
	if text, isString := holder[key].(string); isString {
		if !blocks {
			return nil
		}
		holder[key] = []any{object{"type": "text", "text": text}}
		place.block = 0
	}
	block, _ := holder[key].([]any)[place.block].(map[string]any)
	return block
}

// countCacheMarks counts the cache_control marks (null is absent) the caller's skeletons already
// put anywhere in the request's system and messages, nested blocks included, as every client does.
func countCacheMarks(out object) int {
	var count func(value any) int
	count = func(value any) int {
		n := 0
		switch v := value.(type) {
		case map[string]any:
			for key, inner := range v {
				if key != "cache_control" {
					n += count(inner)
				} else if inner != nil {
					n++
				}
			}
		case []any:
			for _, inner := range v {
				n += count(inner)
			}
		}
		return n
	}
	return count(out["system"]) + count(out["messages"])
}
