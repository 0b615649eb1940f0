//! Runs every conformance vector (tests/conformance/vectors/*.json, format in
//! docs/conventions.md) through the client against the live server, over TCP and over the
//! Unix socket. Requests and expected responses go through the proto3 JSON mapping
//! (prost-reflect over the committed descriptor set); responses are compared by proto equality.

mod common;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use prost::{Message, Name};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage};
use serde_json::Value;
use turnkeeper_client::pb::CapacityReport;
use turnkeeper_client::{Client, Code, FILE_DESCRIPTOR_SET};

const UNKNOWN_RPC: &str = "unknown rpc";

struct Runner {
    client: Client,
    pool: DescriptorPool,
}

impl Runner {
    /// Parses proto3 JSON into `T`; unknown fields are an error.
    fn parse<T: Message + Name + Default>(&self, json: &Value) -> Result<T, String> {
        let descriptor = self
            .pool
            .get_message_by_name(&T::full_name())
            .ok_or_else(|| format!("{} is not in the descriptor set", T::full_name()))?;
        let options = DeserializeOptions::new().deny_unknown_fields(true);
        let dynamic = DynamicMessage::deserialize_with_options(descriptor, json, &options)
            .map_err(|e| format!("cannot parse {} from JSON: {e}", T::full_name()))?;
        dynamic
            .transcode_to()
            .map_err(|e| format!("cannot transcode {}: {e}", T::full_name()))
    }

    fn to_json<T: Message + Name>(&self, message: &T) -> String {
        let descriptor = self
            .pool
            .get_message_by_name(&T::full_name())
            .expect("known message");
        let mut dynamic = DynamicMessage::new(descriptor);
        dynamic.transcode_from(message).expect("transcode");
        serde_json::to_string(&dynamic).expect("serialize")
    }

    async fn check<Req, Resp, F, Fut>(&self, vector: &Value, call: F) -> Result<(), String>
    where
        Req: Message + Name + Default,
        Resp: Message + Name + Default + PartialEq,
        F: FnOnce(Req) -> Fut,
        Fut: Future<Output = turnkeeper_client::Result<Resp>>,
    {
        let request = self.parse::<Req>(&vector["request"])?;
        let expect = &vector["expect"];
        match (
            call(request).await,
            expect.get("response"),
            expect.get("error"),
        ) {
            (Ok(actual), Some(response), None) => {
                let expected = self.parse::<Resp>(response)?;
                if actual == expected {
                    Ok(())
                } else {
                    Err(format!(
                        "response differs\n  expected: {}\n  actual:   {}",
                        self.to_json(&expected),
                        self.to_json(&actual)
                    ))
                }
            }
            (Err(error), None, Some(expected)) => self.check_error(&error, expected),
            (Ok(actual), _, Some(_)) => Err(format!(
                "expected an error, got a response: {}",
                self.to_json(&actual)
            )),
            (Err(error), Some(_), _) => Err(format!(
                "expected a response, got {error} {:?}",
                error.rpc().map(|rpc| rpc.field_violations())
            )),
            (_, None, None) => Err("`expect` has neither `response` nor `error`".into()),
        }
    }

    fn check_error(
        &self,
        error: &turnkeeper_client::Error,
        expected: &Value,
    ) -> Result<(), String> {
        let rpc = error
            .rpc()
            .ok_or_else(|| format!("expected an RPC status, got {error}"))?;
        let mut problems = String::new();
        let code = expected["code"]
            .as_str()
            .ok_or("the expected error has no `code`")?;
        if code_name(rpc.code()) != code {
            write!(
                problems,
                "\n  code: expected {code}, got {}",
                code_name(rpc.code())
            )
            .unwrap();
        }
        if let Some(reason) = expected["reason"].as_str() {
            if rpc.reason_name() != Some(reason) {
                write!(
                    problems,
                    "\n  reason: expected {reason}, got {:?}",
                    rpc.reason_name()
                )
                .unwrap();
            }
            if rpc.error_info().map(|info| info.domain.as_str())
                != Some(turnkeeper_client::ERROR_DOMAIN)
            {
                write!(problems, "\n  ErrorInfo domain: got {:?}", rpc.error_info()).unwrap();
            }
        }
        if let Some(fields) = expected.get("fieldViolations") {
            let expected: BTreeSet<&str> = fields
                .as_array()
                .ok_or("fieldViolations is not an array")?
                .iter()
                .map(|f| f.as_str().ok_or("a field violation is not a string"))
                .collect::<Result<_, _>>()?;
            let actual: BTreeSet<&str> = rpc
                .field_violations()
                .iter()
                .map(|v| v.field.as_str())
                .collect();
            if expected != actual {
                write!(
                    problems,
                    "\n  field violations: expected {expected:?}, got {actual:?}"
                )
                .unwrap();
            }
        }
        if let Some(report) = expected.get("capacityReport") {
            let expected = self.parse::<CapacityReport>(report)?;
            match rpc.capacity_report() {
                Some(actual) if *actual == expected => {}
                actual => write!(
                    problems,
                    "\n  capacity report: expected {}, got {}",
                    self.to_json(&expected),
                    actual.map_or_else(|| "none".to_owned(), |a| self.to_json(a))
                )
                .unwrap(),
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("error differs ({error}):{problems}"))
        }
    }

    async fn run(&self, vector: &Value) -> Result<(), String> {
        let client = &self.client;
        match vector["rpc"].as_str().ok_or("`rpc` is missing")? {
            "EstimateTokens" => self.check(vector, |r| client.estimate_tokens(r)).await,
            "ResolveBudget" => self.check(vector, |r| client.resolve_budget(r)).await,
            "TrimHistory" => self.check(vector, |r| client.trim_history(r)).await,
            "PrepareModelCall" => self.check(vector, |r| client.prepare_model_call(r)).await,
            "CheckCapacity" => self.check(vector, |r| client.check_capacity(r)).await,
            "SweepOrphans" => self.check(vector, |r| client.sweep_orphans(r)).await,
            "CapToolResults" => self.check(vector, |r| client.cap_tool_results(r)).await,
            "PlanCompaction" => self.check(vector, |r| client.plan_compaction(r)).await,
            "ClassifyProviderError" => {
                self.check(vector, |r| client.classify_provider_error(r))
                    .await
            }
            other => Err(format!("{UNKNOWN_RPC} {other:?}")),
        }
    }
}

/// The canonical gRPC name of a code, as the vectors spell it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn vector_files() -> Vec<PathBuf> {
    let dir = common::conformance_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {dir}: {e}"))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no conformance vectors in {dir}");
    files
}

async fn run_all(client: Client, transport: &str) {
    let runner = Runner {
        client,
        pool: DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .expect("the committed descriptor set decodes"),
    };
    let files = vector_files();
    let mut failures = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let outcome = match std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()))
        {
            Ok(vector) => runner.run(&vector).await,
            Err(e) => Err(format!("unreadable vector: {e}")),
        };
        if let Err(problem) = outcome {
            failures.push(format!("{name}: {problem}"));
        }
    }
    println!(
        "conformance over {transport}: {} passed, {} failed",
        files.len() - failures.len(),
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} vectors failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

/// Fails when the contract gains a unary RPC the runner (and so possibly the client) lacks.
#[tokio::test]
async fn the_runner_covers_every_unary_rpc() {
    let runner = Runner {
        client: common::tcp_client().await,
        pool: DescriptorPool::decode(FILE_DESCRIPTOR_SET)
            .expect("the committed descriptor set decodes"),
    };
    let service = runner
        .pool
        .get_service_by_name("turnkeeper.v1.HistoryService")
        .expect("HistoryService is in the descriptor set");
    for method in service.methods() {
        if method.is_server_streaming() || method.is_client_streaming() {
            continue;
        }
        // An empty request and no expectation: only the dispatch matters here.
        let probe = serde_json::json!({"rpc": method.name(), "request": {}, "expect": {}});
        if let Err(problem) = runner.run(&probe).await {
            assert!(
                !problem.starts_with(UNKNOWN_RPC),
                "no runner entry for {}",
                method.name()
            );
        }
    }
}

#[tokio::test]
async fn conformance_vectors_over_tcp() {
    run_all(common::tcp_client().await, "TCP").await;
}

#[tokio::test]
async fn conformance_vectors_over_unix_socket() {
    run_all(common::unix_client().await, "a Unix socket").await;
}

/// The defaults every client shares: tests/conformance/client-defaults.json (docs/conventions.md).
#[test]
fn defaults_are_the_ones_every_client_shares() {
    let file = std::path::Path::new(&common::conformance_dir()).join("../client-defaults.json");
    let shared: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("client-defaults.json"))
            .expect("JSON");
    assert_eq!(
        turnkeeper_client::DEFAULT_TIMEOUT.as_secs_f64(),
        shared["unaryDeadlineSeconds"]
            .as_f64()
            .expect("unaryDeadlineSeconds")
    );
    assert_eq!(
        turnkeeper_client::DEFAULT_MAX_MESSAGE_SIZE as u64,
        shared["maxMessageBytes"].as_u64().expect("maxMessageBytes")
    );
    let retry = &shared["retry"];
    let seconds = |key: &str| Duration::from_secs_f64(retry[key].as_f64().expect(key));
    let policy = turnkeeper_client::RetryPolicy::default();
    assert_eq!(
        u64::from(policy.max_attempts),
        retry["maxAttempts"].as_u64().expect("maxAttempts")
    );
    assert_eq!(policy.max_delay, seconds("maxDelaySeconds"));
    assert_eq!(policy.backoff, seconds("backoffSeconds"));
    assert_eq!(Some(policy.multiplier), retry["backoffMultiplier"].as_f64());
    assert_eq!(Some(policy.jitter), retry["backoffJitter"].as_f64());
    let codes: Vec<String> = turnkeeper_client::RETRYABLE_CODES
        .iter()
        // Code's Debug is "ResourceExhausted"; the file uses the canonical names.
        .map(|code| {
            format!("{code:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let sep = (i > 0 && c.is_uppercase()).then_some('_');
                    sep.into_iter().chain(c.to_uppercase())
                })
                .collect()
        })
        .collect();
    let shared_codes: Vec<&str> = retry["retryableCodes"]
        .as_array()
        .expect("retryableCodes")
        .iter()
        .filter_map(|code| code.as_str())
        .collect();
    assert_eq!(codes, shared_codes);
}
