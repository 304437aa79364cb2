//! SGLang's own command line, read and written: the guard that checks SGLang servers in any
//! workload (Deployments, StatefulSets, LeaderWorkerSets, RoleBasedGroups, …) with the same
//! policy that checks InferenceDeployments.
//!
//! The policy's input is engine-neutral: `DisaggregationSpec` + `FleetSpec` (+
//! `ModelSpec.hybridSwaMemory`), the types an InferenceDeployment's spec already is. A command
//! line maps *into* those types ([`flags::read`]) and out of them ([`flags::write`]) through one
//! table, so the rules in `policy` neither change nor know about flags; a verdict's texts name
//! fields as the reader knows them (`policy::FieldNames`: the guard's are flags).
//!
//! - [`args`]: the flags for an InferenceDeployment's effective settings (`sglangArgs`);
//! - [`cmdline`]: shell-word splitting and finding `python -m sglang.launch_server` / `sglang serve`;
//! - [`flags`]: the flag ↔ setting table;
//! - [`server_cli`]: every option of each release's server parser (`server_cli.tsv`), and an argv
//!   read as that release's argparse reads it, with its refusals in argparse's words;
//! - [`workload`]: where containers sit in each workload kind (patches merged), with JSON paths;
//! - [`kv_compat`]: the KV compatibility key, which settings of both sides decide whether a
//!   prefill and a decode server pair;
//! - [`guard`]: object → servers → verdicts → JSON patch, pure; the CLI and the webhook drive it;
//! - [`server`]: the servers' own flags (port, ranks, …), what `extraArgs` may not set (the pod
//!   rules), and [`server::assess`], the verdict every entry point decides with: the policy, the pod
//!   rules and the release's parser, for a resource or for one server the guard read.

pub mod args;
pub mod cmdline;
pub mod flags;
pub mod guard;
pub mod kv_compat;
pub mod server;
pub mod server_cli;
pub mod verdict;
pub mod workload;
