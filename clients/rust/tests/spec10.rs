//! The second-edition wrappers (spec §10) against the live server.

mod common;

use turnkeeper_client::Code;
use turnkeeper_client::pb::{self, ClassifyProviderErrorRequest, PhraseSource};

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
