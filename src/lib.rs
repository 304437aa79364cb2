//! kvpilot: a Kubernetes operator that checks SGLang-style PD-disaggregation settings against a
//! model's attention layout, and the KV cache sidecar SGLang uses as its HiCache L3 store.
//!
//! Data flows one way: [`release`], [`python`], [`api`] → [`layout`] → [`policy`] → [`sglang`] → controller /
//! webhook / cli; [`runtime`] stands alone.

pub mod api;
pub mod apiserver;
pub mod cli;
pub mod controller;
pub mod layout;
pub mod policy;
pub mod python;
pub mod release;
pub mod runtime;
pub mod sglang;
pub mod source;
pub mod webhook;
