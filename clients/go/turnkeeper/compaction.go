package turnkeeper

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

// SummaryRow is the row that holds a summarizer's answer (spec §15.2): a user row marked Summary.
func SummaryRow(summaryText string) *turnkeeperv1.ChatMessage {
	return &turnkeeperv1.ChatMessage{Role: turnkeeperv1.Role_ROLE_USER, Content: summaryText, Summary: true}
}

// ApplyCompaction builds the history to keep once the summarizer answered summaryText to
// plan.SummaryRequest (spec §15.3, step 4): the leading system rows, one summary row holding the
// answer, every pinned turn that stood before the end of the condensed rows (in order), then every
// row after them. The old summary and any breadcrumb before that end are left out: the new summary
// says what they said. history is the history the plan was made for, in either shape; the result
// has the same shape and copies of its rows. A plan whose ranges do not fit the history (out of
// bounds, unordered, overlapping, or inside the leading system rows) is a *ConversionError.
func ApplyCompaction(history *turnkeeperv1.History, plan *turnkeeperv1.CompactionPlan, summaryText string) (*turnkeeperv1.History, error) {
	switch shape := history.GetShape().(type) {
	case *turnkeeperv1.History_Chat:
		chat := func(row *turnkeeperv1.ChatMessage) *turnkeeperv1.ChatMessage { return row }
		rows, err := applyCompaction(shape.Chat.GetMessages(), plan, SummaryRow(summaryText), chat)
		if err != nil {
			return nil, err
		}
		return ChatHistory(rows...), nil
	case *turnkeeperv1.History_Conversation:
		summary := &turnkeeperv1.ConversationMessage{
			Message: &turnkeeperv1.ConversationMessage_Chat{Chat: SummaryRow(summaryText)},
		}
		rows, err := applyCompaction(shape.Conversation.GetMessages(), plan, summary, (*turnkeeperv1.ConversationMessage).GetChat)
		if err != nil {
			return nil, err
		}
		return ConversationHistory(rows...), nil
	default:
		return nil, convErr("history", "neither chat nor conversation is set")
	}
}

// applyCompaction is ApplyCompaction over the rows of one shape; chat gives a row's chat row (nil
// for a structured step, which is never a system row).
func applyCompaction[Row proto.Message](rows []Row, plan *turnkeeperv1.CompactionPlan, summary Row, chat func(Row) *turnkeeperv1.ChatMessage) ([]Row, error) {
	leading := 0
	for leading < len(rows) && chat(rows[leading]).GetRole() == turnkeeperv1.Role_ROLE_SYSTEM {
		leading++
	}
	condensed := plan.GetCondensedRows()
	if len(condensed) == 0 {
		return nil, convErr("plan.condensed_rows", "empty; a plan condenses at least one row")
	}
	if err := checkRanges("plan.condensed_rows", condensed, leading, len(rows)); err != nil {
		return nil, err
	}
	end := int(condensed[len(condensed)-1].GetEnd())
	pinned := plan.GetPinnedTurns()
	if err := checkRanges("plan.pinned_turns", pinned, leading, end); err != nil {
		return nil, err
	}
	for i, turn := range pinned {
		for _, c := range condensed {
			if turn.GetStart() < c.GetEnd() && c.GetStart() < turn.GetEnd() {
				return nil, convErr(fmt.Sprintf("%s[%d]", "plan.pinned_turns", i), "overlaps the condensed rows [%d, %d)", c.GetStart(), c.GetEnd())
			}
		}
	}
	kept := append([]Row(nil), rows[:leading]...)
	kept = append(kept, summary)
	for _, turn := range pinned {
		kept = append(kept, rows[turn.GetStart():turn.GetEnd()]...)
	}
	kept = append(kept, rows[end:]...)
	out := make([]Row, len(kept))
	for i, row := range kept {
		out[i] = proto.CloneOf(row)
	}
	return out, nil
}

// checkRanges checks that ranges are non-empty, ascending, disjoint and within [first, limit).
func checkRanges(field string, ranges []*turnkeeperv1.IndexRange, first, limit int) error {
	previousEnd := uint32(first)
	for i, r := range ranges {
		if r.GetStart() >= r.GetEnd() {
			return convErr(fmt.Sprintf("%s[%d]", field, i), "empty range [%d, %d)", r.GetStart(), r.GetEnd())
		}
		if r.GetStart() < previousEnd || int(r.GetEnd()) > limit {
			return convErr(fmt.Sprintf("%s[%d]", field, i),
				"[%d, %d) is not within [%d, %d): the ranges must ascend, disjoint, after the leading system "+
					"rows and before the end of the history (pinned turns: before the end of the condensed rows)",
				r.GetStart(), r.GetEnd(), previousEnd, limit)
		}
		previousEnd = r.GetEnd()
	}
	return nil
}
