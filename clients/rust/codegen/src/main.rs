//! Regenerates the committed Rust code of the turnkeeper.v1 contract.
//!
//! Usage: `turnkeeper-codegen <proto-root> <out-dir>`
//!
//! protoc comes from the `protoc-bin-vendored` crate and every generator from crates.io at the
//! versions pinned in Cargo.lock, so the output depends on nothing installed on the machine.
//! The out dir is replaced wholesale: a file a previous contract produced cannot linger.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::FileDescriptorSet;

const PACKAGE_DIR: &str = "turnkeeper/v1";
const DESCRIPTOR_FILE: &str = "turnkeeper.v1.bin";

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [proto_root, out_dir] = args.as_slice() else {
        return Err("usage: turnkeeper-codegen <proto-root> <out-dir>".into());
    };
    generate(proto_root, out_dir)
}

fn generate(proto_root: &Path, out_dir: &Path) -> Result<(), Box<dyn Error>> {
    let mut protos: Vec<PathBuf> = fs::read_dir(proto_root.join(PACKAGE_DIR))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    protos.retain(|p| p.extension().is_some_and(|ext| ext == "proto"));
    // protoc output order follows input order; sort so the directory listing order cannot leak in.
    protos.sort();
    if protos.is_empty() {
        return Err(format!(
            "no .proto files under {}",
            proto_root.join(PACKAGE_DIR).display()
        )
        .into());
    }

    let staging = out_dir.with_extension("staging");
    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    fs::create_dir_all(&staging)?;
    let raw_descriptor = staging.join("descriptor.raw");

    let mut config = prost_build::Config::new();
    config
        .protoc_executable(protoc_bin_vendored::protoc_bin_path()?)
        .file_descriptor_set_path(&raw_descriptor)
        // `prost::Name` gives every message its type URL, which the client matches in error details.
        .enable_type_names()
        .type_name_domain(["."], "type.googleapis.com");
    let includes = [
        proto_root.to_path_buf(),
        protoc_bin_vendored::include_path()?,
    ];
    tonic_prost_build::configure()
        .build_server(false)
        .build_transport(false)
        .out_dir(&staging)
        .compile_with_config(config, &protos, &includes)?;

    // The committed descriptor set serves reflection (the proto JSON mapping in tests and for
    // users); comments are already in the Rust code, so source info is dropped to keep it small.
    let mut fds = FileDescriptorSet::decode(fs::read(&raw_descriptor)?.as_slice())?;
    for file in &mut fds.file {
        file.source_code_info = None;
    }
    fs::write(staging.join(DESCRIPTOR_FILE), fds.encode_to_vec())?;
    fs::remove_file(&raw_descriptor)?;

    if out_dir.exists() {
        fs::remove_dir_all(out_dir)?;
    }
    fs::rename(&staging, out_dir)?;
    for entry in fs::read_dir(out_dir)? {
        println!("generated {}", entry?.path().display());
    }
    Ok(())
}
