package turnkeeper

import turnkeeperv1 "github.com/turnkeeper/turnkeeper/clients/go/gen/turnkeeper/v1"

// ReportedUsageOf is the ReportedUsage of spec §10.3: the input tokens the provider reported for
// the previous request, next to turnkeeper's estimate of that request, read from the
// CapacityReport of the PrepareModelCall (or CheckCapacity) that built it: everything sent,
// TotalTokens - ReservedOutputTokens, of which ToolSchemaTokens were tool schemas. Set it as
// ReportedUsage of the next PrepareModelCallRequest, or of a TrimHistoryRequest in
// TRIM_MODE_REPORTED_USAGE.
func ReportedUsageOf(previous *turnkeeperv1.CapacityReport, reportedInputTokens uint64) *turnkeeperv1.ReportedUsage {
	var estimated uint64
	if total, reserved := previous.GetTotalTokens(), previous.GetReservedOutputTokens(); total > reserved {
		estimated = total - reserved
	}
	return &turnkeeperv1.ReportedUsage{
		ReportedInputTokens:  reportedInputTokens,
		EstimatedInputTokens: estimated,
		ToolSchemaTokens:     min(previous.GetToolSchemaTokens(), estimated),
	}
}
