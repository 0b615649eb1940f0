package turnkeeper

import (
	"fmt"
	"slices"

	turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"
)

// TurnMarks are the spec §15 marks of a history, which no provider format can carry: a provider
// refuses a key it does not know, so the summary row and a pinned turn's user row export as plain
// user messages, and the runtime keeps these marks beside the provider JSON (docs/converters.md).
// TurnMarksOf reads them from a history; every import takes them as ConvertOptions.Marks and sets
// them on the rows it makes.
type TurnMarks struct {
	// Summary says the first row after the leading system rows is the summary row (§15.2).
	Summary bool
	// PinnedTurns are the pinned turns (§15.1) by their 0-based position among the history's
	// turns, ascending. A turn starts at a real user row: not the summary row, the breadcrumb or a
	// "[Tool results]" carrier.
	PinnedTurns []int
}

// startsTurn says whether m is a real user row (spec §0): a turn boundary, the only row a pin may
// mark (§15.1).
func startsTurn(m *turnkeeperv1.ChatMessage) bool {
	return m.GetRole() == turnkeeperv1.Role_ROLE_USER && !m.GetBreadcrumb() && !m.GetSummary() && !isCarrier(m.GetContent())
}

// TurnMarksOf reads the summary and pinned-turn marks of history, to keep beside its provider JSON
// and pass back as ConvertOptions.Marks when importing it again. A mark no provider position can
// name (a pin on a row that starts no turn, a summary row anywhere but right after the leading
// system rows) is a *ConversionError: the server refuses such a history too.
func TurnMarksOf(history *turnkeeperv1.History) (TurnMarks, error) {
	rows, err := flatRows(history, "")
	if err != nil {
		return TurnMarks{}, err
	}
	first := slices.IndexFunc(rows, func(row flatRow) bool {
		return row.message.GetRole() != turnkeeperv1.Role_ROLE_SYSTEM
	})
	var marks TurnMarks
	turn := 0
	for i, row := range rows {
		m := row.message
		if m.GetSummary() && i != first {
			return TurnMarks{}, convErr(fmt.Sprintf("rows[%d]", i), "a summary row stands nowhere but right after the system rows")
		}
		switch {
		case startsTurn(m):
			if m.GetPinned() {
				marks.PinnedTurns = append(marks.PinnedTurns, turn)
			}
			turn++
		case m.GetPinned():
			return TurnMarks{}, convErr(fmt.Sprintf("rows[%d]", i), "pinned, but only a real user row starts a turn")
		}
	}
	marks.Summary = first >= 0 && rows[first].message.GetSummary()
	return marks, nil
}

// applyMarks sets the caller's marks and finds the breadcrumb. Provider formats have no
// breadcrumb flag: a user row with a known breadcrumb text is the breadcrumb the server inserted
// when it stands where one may (spec §7, §15.1): right after the leading system rows, the summary
// row and the pinned turns before it. Turns are counted without it, so the pins are set on the
// same walk.
func applyMarks(rows []*importRow, marks TurnMarks, breadcrumbTexts []string) error {
	leading := 0
	for leading < len(rows) && rows[leading].message.GetRole() == turnkeeperv1.Role_ROLE_SYSTEM {
		leading++
	}
	afterSystem := rows[leading:]
	if marks.Summary {
		if len(afterSystem) == 0 {
			return convErr("Marks.Summary", "the first message after the system messages is no plain user message")
		}
		first := afterSystem[0].message
		if first.GetRole() != turnkeeperv1.Role_ROLE_USER || len(first.GetAttachments()) > 0 || isCarrier(first.GetContent()) {
			return convErr("Marks.Summary", "the first message after the system messages is no plain user message")
		}
		first.Summary = true
	}
	turn := 0
	crumbMayFollow := true
	for _, row := range afterSystem {
		m := row.message
		if m.GetSummary() {
			continue
		}
		isCrumbText := m.GetRole() == turnkeeperv1.Role_ROLE_USER && slices.Contains(breadcrumbTexts, m.GetContent()) && len(m.GetAttachments()) == 0
		switch {
		case crumbMayFollow && isCrumbText:
			m.Breadcrumb = true
			crumbMayFollow = false
		case startsTurn(m):
			m.Pinned = slices.Contains(marks.PinnedTurns, turn)
			crumbMayFollow = crumbMayFollow && m.Pinned
			turn++
		case turn == 0:
			// Rows before the first real user row belong to the first turn (spec §0).
			crumbMayFollow = false
		}
	}
	for _, n := range marks.PinnedTurns {
		if n < 0 || n >= turn {
			return convErr("Marks.PinnedTurns", "turn %d does not exist (the history has %d)", n, turn)
		}
	}
	return nil
}
