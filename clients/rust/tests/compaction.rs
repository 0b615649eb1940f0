//! The shared apply-plan vectors (tests/conformance/compaction, spec §15.3 step 4) through
//! `apply_compaction`: each gives its expected history exactly, or is refused with
//! `ConversionError`. They need no server.

use std::collections::BTreeSet;
use std::path::PathBuf;

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage};
use serde_json::Value;
use turnkeeper_client::pb::{CompactionPlan, History};
use turnkeeper_client::{FILE_DESCRIPTOR_SET, apply_compaction};

const KEYS: [&str; 7] = [
    "name",
    "rule",
    "description",
    "history",
    "plan",
    "summaryText",
    "expect",
];

/// Parses the proto3 JSON of a message strictly: an unknown field is an error in the vector.
fn parse<M: Default + prost::Message>(name: &str, json: &Value) -> M {
    let pool = DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("descriptor set");
    let descriptor = pool.get_message_by_name(name).expect(name);
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    DynamicMessage::deserialize_with_options(descriptor, json, &options)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .transcode_to()
        .expect("transcode")
}

fn to_json(history: &History) -> String {
    let pool = DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("descriptor set");
    let descriptor = pool
        .get_message_by_name("turnkeeper.v1.History")
        .expect("History");
    let mut message = DynamicMessage::new(descriptor);
    message.transcode_from(history).expect("transcode");
    serde_json::to_string(&message).expect("json")
}

fn vector_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/conformance/compaction");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
}

/// What is wrong with applying one vector's plan, if anything.
fn check(path: &PathBuf) -> Result<(), String> {
    let vector: Value =
        serde_json::from_str(&std::fs::read_to_string(path).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    let keys: BTreeSet<&str> = vector
        .as_object()
        .ok_or("not an object")?
        .keys()
        .map(String::as_str)
        .collect();
    if keys != BTreeSet::from(KEYS) {
        return Err(format!("keys {keys:?}, want {KEYS:?}"));
    }
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    if stem.split_once('-').map(|(_, name)| name) != vector["name"].as_str() {
        return Err("`name` does not match the file name".into());
    }
    let history: History = parse("turnkeeper.v1.History", &vector["history"]);
    let plan: CompactionPlan = parse("turnkeeper.v1.CompactionPlan", &vector["plan"]);
    let summary_text = vector["summaryText"].as_str().ok_or("`summaryText`")?;
    let applied = apply_compaction(&history, &plan, summary_text);
    let expect = &vector["expect"];
    match (expect.get("history"), expect.get("error")) {
        (Some(expected), None) => {
            let expected: History = parse("turnkeeper.v1.History", expected);
            match applied {
                Ok(applied) if applied == expected => Ok(()),
                Ok(applied) => Err(format!(
                    "history differs:\n  expected {}\n  got      {}",
                    to_json(&expected),
                    to_json(&applied)
                )),
                Err(e) => Err(format!("refused: {e}")),
            }
        }
        (None, Some(Value::Bool(true))) => match applied {
            Err(_) => Ok(()),
            Ok(applied) => Err(format!("want a ConversionError, got {}", to_json(&applied))),
        },
        _ => Err("expect needs exactly one of `history` and `error: true`".into()),
    }
}

#[test]
fn compaction_vectors() {
    let files = vector_files();
    assert!(files.len() >= 6, "{} compaction vectors", files.len());
    let failures: Vec<String> = files
        .iter()
        .filter_map(|path| {
            check(path)
                .err()
                .map(|e| format!("{}: {e}", path.display()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
