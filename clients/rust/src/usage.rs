//! Provider-reported usage for the calibrated trim (spec §10.3).

use crate::pb::{CapacityReport, ReportedUsage};

impl ReportedUsage {
    /// What the provider reported for the previous request, next to turnkeeper's estimate of it,
    /// read from the [`CapacityReport`] of the `prepare_model_call` (or `check_capacity`) that
    /// built it: everything sent, `total_tokens - reserved_output_tokens`, of which
    /// `tool_schema_tokens` were tool schemas. Set it as `reported_usage` of the next
    /// `PrepareModelCallRequest`, or of a `TrimHistoryRequest` in `TrimMode::ReportedUsage`.
    pub fn from_previous(previous: &CapacityReport, reported_input_tokens: u64) -> Self {
        let estimated = previous
            .total_tokens
            .saturating_sub(previous.reserved_output_tokens);
        ReportedUsage {
            reported_input_tokens,
            estimated_input_tokens: estimated,
            tool_schema_tokens: previous.tool_schema_tokens.min(estimated),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_is_what_was_sent_without_the_reserved_output() {
        let report = CapacityReport {
            message_tokens: 80,
            hook_tokens: 7,
            tool_schema_tokens: 9,
            reserved_output_tokens: 100,
            total_tokens: 196,
            ..Default::default()
        };
        assert_eq!(
            ReportedUsage::from_previous(&report, 250),
            ReportedUsage {
                reported_input_tokens: 250,
                estimated_input_tokens: 96,
                tool_schema_tokens: 9,
            }
        );
    }
}
