//! The second-edition wrappers (spec §10) against the live server.

mod common;

use std::time::Duration;

use turnkeeper_client::pb::{
    self, CallerContext, CallerPath, CapToolResultsRequest, ChatMessage,
    ClassifyProviderErrorRequest, CountSource, EstimateTokensRequest, ExplicitLimits, History,
    ModelPrices, PhraseSource, PrepareModelCallRequest, Profiles, ProviderProfile, RecoveryBlocker,
    ReportedUsage, RuntimeProfile, TrimEventsRequest, TrimHistoryRequest, TrimMode,
    trim_history_request,
};
use turnkeeper_client::{Code, FeedItem, ReconnectPolicy};

/// A system row and three short turns.
fn seven_rows() -> History {
    let mut rows = vec![ChatMessage::system("sys")];
    for turn in ["one", "two", "three"] {
        rows.push(ChatMessage::user(format!("user turn {turn} asks")));
        rows.push(ChatMessage::assistant(format!("answer {turn}")));
    }
    History::chat(rows)
}

/// The route p/m with a known 1,000-token window and input prices for m.
fn priced_profiles(max_context_tokens: Option<u64>) -> Profiles {
    Profiles {
        runtime: Some(RuntimeProfile {
            default_provider: "p".into(),
            max_context_tokens,
            ..Default::default()
        }),
        providers: vec![ProviderProfile {
            alias: "p".into(),
            model: "m".into(),
            context_window: Some(1000),
            prices: Some(ModelPrices {
                input_per_million_tokens: 2.5,
                cached_input_per_million_tokens: Some(0.25),
                currency: "USD".into(),
                ..Default::default()
            }),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn assert_near(got: f64, want: f64) {
    assert!(
        (got - want).abs() <= 1e-12 * want.abs().max(1.0),
        "{got} != {want}"
    );
}

/// spec §10.4: a listed phrase in any case is an overflow naming it; a near miss is not; an HTTP
/// status outside 100-599 is a field violation.
#[tokio::test]
async fn classify_provider_error_names_the_matched_phrase() {
    let client = common::tcp_client().await;
    let overflow = client
        .classify_provider_error(ClassifyProviderErrorRequest {
            message: "Error 400: Prompt is too long: 250000 tokens > 200000 maximum".into(),
            http_status: Some(400),
            provider: "anthropic".into(),
        })
        .await
        .expect("classify");
    assert!(overflow.overflow);
    assert_eq!(overflow.matched_phrase, "prompt is too long");
    assert_eq!(overflow.phrase_source(), PhraseSource::BuiltIn);

    let near_miss = client
        .classify_provider_error(ClassifyProviderErrorRequest {
            message: "rate limit exceeded: too many requests".into(),
            ..Default::default()
        })
        .await
        .expect("classify");
    assert!(!near_miss.overflow);
    assert_eq!(near_miss.matched_phrase, "");
    assert_eq!(near_miss.phrase_source(), PhraseSource::Unspecified);

    let error = client
        .classify_provider_error(ClassifyProviderErrorRequest {
            message: "x".into(),
            http_status: Some(700),
            ..Default::default()
        })
        .await
        .expect_err("700 is no HTTP status");
    assert_eq!(error.code(), Some(Code::InvalidArgument));
    assert_eq!(error.reason(), Some(pb::ErrorReason::InvalidProviderError));
    assert_eq!(common::violated_fields(&error), ["http_status"]);
}

/// spec §10.3 and §10.5 through the wrapper: the first call's CapacityReport and the provider's
/// count become the next call's ReportedUsage, whose budget trim then counts provider tokens;
/// every response carries the meter and the cost of the resolved route.
#[tokio::test]
async fn prepare_calibrates_with_the_previous_calls_reported_usage() {
    let client = common::tcp_client().await;
    let mut request = PrepareModelCallRequest {
        history: Some(seven_rows()),
        profiles: Some(priced_profiles(Some(100))),
        hook_texts: vec!["Be brief.".into()],
        reserved_output_tokens: 100,
        cached_input_tokens: Some(40),
        ..Default::default()
    };
    let first = client
        .prepare_model_call(request.clone())
        .await
        .expect("prepare");
    assert!(first.trims.is_empty());
    let report = first.capacity_report.expect("a capacity report");
    let used = report.total_tokens - report.reserved_output_tokens;
    let meter = first.context_meter.expect("a meter");
    assert_eq!(
        (
            meter.used_tokens,
            meter.budget_tokens,
            meter.capacity_tokens
        ),
        (used, 100, Some(1000))
    );
    assert_near(
        meter.capacity_fraction.expect("a fraction"),
        used as f64 / 1000.0,
    );
    let cost = first.input_cost.expect("a cost");
    assert_eq!(
        (
            cost.currency.as_str(),
            cost.cached_input_tokens,
            cost.uncached_input_tokens
        ),
        ("USD", 40, used - 40)
    );
    assert_near(cost.cost, ((used - 40) as f64 * 2.5 + 40.0 * 0.25) / 1e6);

    // The provider counted twice as much as estimated: more than the budget of 100.
    request.reported_usage = Some(ReportedUsage::from_previous(&report, 2 * used));
    let second = client.prepare_model_call(request).await.expect("prepare");
    let calibrated = second
        .trims
        .last()
        .expect("a reported count above the budget trims");
    assert_eq!(calibrated.count_source(), CountSource::ProviderReported);
    // spec §16.2 step 5 scales the history, tool schemas included, not the hooks the count covered.
    assert_eq!(
        calibrated.tokens_before,
        2 * (report.message_tokens + report.tool_schema_tokens)
    );
    assert_eq!(
        calibrated.calibration.map(|c| c.calibrated_target_tokens),
        Some((100 * used / (2 * used)).max(1))
    );
}

/// spec §10.3 as a TrimHistory mode: the outcome and the event count provider tokens; within
/// the budget by the provider's count, both counts are the reported one.
#[tokio::test]
async fn trim_history_in_reported_usage_mode() {
    let client = common::tcp_client().await;
    let total = client
        .estimate_tokens(EstimateTokensRequest {
            history: Some(seven_rows()),
        })
        .await
        .expect("estimate")
        .total_tokens;
    let mut request = TrimHistoryRequest {
        history: Some(seven_rows()),
        mode: TrimMode::ReportedUsage.into(),
        caller_path: CallerPath::Agent.into(),
        limits: Some(trim_history_request::Limits::ExplicitLimits(
            ExplicitLimits {
                budget_tokens: Some(total),
                ..Default::default()
            },
        )),
        caller: Some(CallerContext {
            session_id: common::session_id("usage"),
            ..Default::default()
        }),
        reported_usage: Some(ReportedUsage {
            reported_input_tokens: 3 * total,
            estimated_input_tokens: total,
            tool_schema_tokens: 0,
        }),
    };
    let trimmed = client.trim_history(request.clone()).await.expect("trim");
    let outcome = trimmed.outcome.expect("outcome");
    assert!(outcome.trimmed);
    assert_eq!(outcome.count_source(), CountSource::ProviderReported);
    assert_eq!(outcome.tokens_before, 3 * total);
    assert_eq!(
        trimmed.history_trimmed.map(|t| t.count_source()),
        Some(CountSource::ProviderReported)
    );

    request.reported_usage = Some(ReportedUsage {
        reported_input_tokens: total,
        estimated_input_tokens: total,
        tool_schema_tokens: 0,
    });
    let outcome = client
        .trim_history(request)
        .await
        .expect("trim")
        .outcome
        .expect("outcome");
    assert!(!outcome.trimmed);
    assert_eq!(
        (outcome.tokens_before, outcome.tokens_after),
        (total, total)
    );
}

/// spec §10.5: the 32,000 fallback is never shown as a capacity; no prices, no cost.
#[tokio::test]
async fn the_meter_of_an_unknown_capacity_has_no_capacity() {
    let client = common::tcp_client().await;
    let prepared = client
        .prepare_model_call(PrepareModelCallRequest {
            history: Some(seven_rows()),
            ..Default::default()
        })
        .await
        .expect("prepare");
    let meter = prepared.context_meter.expect("a meter");
    assert_eq!(
        Some(meter.used_tokens),
        prepared.capacity_report.map(|r| r.total_tokens)
    );
    assert_eq!(
        (meter.capacity_tokens, meter.capacity_fraction),
        (None, None)
    );
    assert_eq!(prepared.input_cost, None);
}

/// spec §10.1: one turn left is reported (floor, blocker, route), never a silent no-op.
#[tokio::test]
async fn a_recovery_that_cannot_trim_says_why() {
    let client = common::tcp_client().await;
    let prepared = client
        .prepare_model_call(PrepareModelCallRequest {
            history: Some(History::chat([
                ChatMessage::system("s".repeat(400)),
                ChatMessage::user("the only turn"),
            ])),
            profiles: Some(priced_profiles(Some(50))),
            overflow_recovery: true,
            ..Default::default()
        })
        .await
        .expect("prepare");
    let recovery = prepared.recovery.expect("a recovery report");
    assert!(!recovery.trimmed);
    assert_eq!(recovery.blocker(), RecoveryBlocker::SingleTurn);
    assert_eq!(recovery.target_tokens, 2 * recovery.baseline_tokens / 3);
    assert_eq!(recovery.budget_tokens, 50);
    assert!(recovery.system_floor_tokens > 50 && recovery.system_floor_reaches_budget);
    let route = recovery.route.expect("the resolved route");
    assert_eq!((route.provider.as_str(), route.model.as_str()), ("p", "m"));
}

/// spec §10.6: the cap resolves from the runtime profile; unset is 50,000 and 0 disables.
#[tokio::test]
async fn the_tool_result_cap_resolves_from_the_profiles() {
    let client = common::tcp_client().await;
    let long = "x".repeat(50_001);
    let by_default = client
        .cap_tool_results(CapToolResultsRequest {
            contents: vec![long.clone()],
            profiles: Some(Profiles::default()),
            ..Default::default()
        })
        .await
        .expect("cap");
    assert_eq!(by_default.max_tool_result_chars, 50_000);
    assert!(by_default.results[0].truncated_chars > 0);
    let off = client
        .cap_tool_results(CapToolResultsRequest {
            contents: vec![long.clone()],
            profiles: Some(Profiles {
                runtime: Some(RuntimeProfile {
                    max_tool_result_chars: Some(0),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .expect("cap");
    assert_eq!(off.max_tool_result_chars, 0);
    assert_eq!(off.results[0].content, long);
}

/// spec §10.5: a subscriber with `include_meter_updates` gets the meter of every prepared call
/// of its sessions (route and meter as returned); one without gets none.
#[tokio::test]
async fn meter_updates_reach_only_subscribers_that_opt_in() {
    let client = common::tcp_client().await;
    let session = common::session_id("meter");
    let request = |include_meter_updates| TrimEventsRequest {
        session_ids: vec![session.clone()],
        heartbeat_interval: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
        include_meter_updates,
        ..Default::default()
    };
    // Patient: a parallel test may keep the server busy beyond three 1 s intervals.
    let policy = ReconnectPolicy {
        stall_timeout: Some(Duration::from_secs(15)),
        ..Default::default()
    };
    let prepare = || {
        client.prepare_model_call(PrepareModelCallRequest {
            history: Some(seven_rows()),
            profiles: Some(priced_profiles(None)),
            caller: Some(CallerContext {
                session_id: session.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
    };
    let mut metered = client
        .trim_events_with(request(true), policy.clone())
        .await
        .expect("subscribe");
    let mut plain = client
        .trim_events_with(request(false), policy)
        .await
        .expect("subscribe");
    let prepared = prepare().await.expect("prepare");
    assert!(matches!(
        metered.next().await,
        Some(Ok(FeedItem::Heartbeat(_)))
    ));
    let update = match metered.next().await {
        Some(Ok(FeedItem::MeterUpdate(update))) => update,
        other => panic!("expected a meter update, got {other:?}"),
    };
    assert_eq!(update.caller.map(|c| c.session_id).as_ref(), Some(&session));
    assert_eq!(update.meter, prepared.context_meter);
    assert_eq!(update.route, prepared.resolution.and_then(|r| r.route));
    assert_eq!(metered.cursor(), Some(update.cursor.as_str()));
    // With no trim in between the next update shares that cursor (the feed position of the
    // trims before it): it is delivered all the same.
    let again = prepare().await.expect("prepare");
    match metered.next().await {
        Some(Ok(FeedItem::MeterUpdate(second))) => assert_eq!(second.meter, again.context_meter),
        other => panic!("expected the second meter update, got {other:?}"),
    }
    // The plain subscriber sees the answer, then an idle heartbeat: no meter update.
    for _ in 0..2 {
        assert!(matches!(
            plain.next().await,
            Some(Ok(FeedItem::Heartbeat(_)))
        ));
    }
}
