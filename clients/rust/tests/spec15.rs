//! The fourth edition's compaction (spec §15) against the live server.

mod common;

use turnkeeper_client::apply_compaction;
use turnkeeper_client::pb::{
    ChatMessage, History, PlanCompactionRequest, PrepareModelCallRequest, Profiles,
    ProviderProfile, RuntimeProfile, plan_compaction_response,
};

/// The server plans, the client applies, and the server accepts the applied history: spec §11's
/// history (a 104-token system row, ten turns of two 104-token rows), budget 2,000, the first
/// turn pinned. The budget trim drops turn 2 alone, so the plan condenses it and keeps turn 1 out.
#[tokio::test]
async fn plan_compaction_then_apply_it() {
    let client = common::tcp_client().await;
    let row = "x".repeat(400); // 104 tokens
    let mut rows = vec![ChatMessage::system(row.clone())];
    for turn in 0..10 {
        rows.push(ChatMessage {
            pinned: turn == 0,
            ..ChatMessage::user(row.clone())
        });
        rows.push(ChatMessage::assistant(row.clone()));
    }
    let history = History::chat(rows.clone());
    let profiles = Profiles {
        runtime: Some(RuntimeProfile {
            default_provider: "p".into(),
            max_context_tokens: Some(2_000),
            ..Default::default()
        }),
        providers: vec![ProviderProfile {
            alias: "p".into(),
            model: "m".into(),
            context_window: Some(8_000),
            ..Default::default()
        }],
        ..Default::default()
    };
    let planned = client
        .plan_compaction(PlanCompactionRequest {
            history: Some(history.clone()),
            profiles: Some(profiles.clone()),
            summary_output_tokens: Some(100),
            ..Default::default()
        })
        .await
        .expect("PlanCompaction");
    let plan = match planned.result {
        Some(plan_compaction_response::Result::Plan(plan)) => plan,
        other => panic!("no plan: {other:?}"),
    };
    assert_eq!((plan.condensed_turns, plan.saved_tokens), (1, 208 - 100));

    let summary = "Summary: turn 2 asked and answered.";
    let applied = apply_compaction(&history, &plan, summary).expect("the plan applies");
    let mut expected = vec![rows[0].clone(), ChatMessage::summary_row(summary)];
    expected.extend_from_slice(&rows[1..3]);
    expected.extend_from_slice(&rows[5..]);
    assert_eq!(applied, History::chat(expected));

    let prepared = client
        .prepare_model_call(PrepareModelCallRequest {
            history: Some(applied.clone()),
            profiles: Some(profiles),
            ..Default::default()
        })
        .await
        .expect("the server accepts the applied history");
    // 104 + the summary + 9 x 208 < 2,000: the applied history fits, nothing is trimmed.
    assert!(
        prepared.trims.is_empty(),
        "trimmed again: {:?}",
        prepared.trims
    );
    assert_eq!(prepared.history, Some(applied));
}
