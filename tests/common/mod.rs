//! Shared by several integration-test crates, each of which uses only part of it.
#![allow(dead_code)]

pub mod cluster;
pub mod crd;
pub mod output;
