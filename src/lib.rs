//! kvpilot: a Kubernetes operator that checks SGLang-style PD-disaggregation settings against a
//! model's attention layout, and the decode-side KV cache runtime its pods run.
//!
//! Data flows one way: [`release`], [`api`] → [`layout`] → [`policy`] → [`sglang`] → controller /
//! webhook / cli, and [`policy`] → [`runtime`].

pub mod api;
pub mod apiserver;
pub mod cli;
pub mod controller;
pub mod layout;
pub mod policy;
pub mod release;
pub mod runtime;
pub mod sglang;
pub mod source;
pub mod webhook;
