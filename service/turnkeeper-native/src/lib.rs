//! turnkeeper's native history engine: the hot RPCs' history work done in one pass over the
//! request's protobuf wire bytes, the response history written as slices of the request.
//!
//! The crate has no `unsafe` and no panicking paths on input bytes; the Python module
//! (feature `python`) also catches any panic and raises it as an exception.
#![forbid(unsafe_code)]

pub mod clearing;
pub mod conventions;
pub mod items;
mod messages;
pub mod plan;
pub mod pricing;
pub mod projection;
pub mod rows;
pub mod rules;
pub mod scan;
pub mod sweep;
pub mod wire;
pub mod working;

#[cfg(test)]
mod testing;

#[cfg(feature = "python")]
mod python;
