//! Flags SGLang refuses by the role a server runs in (PD decode, PD prefill, no PD): the PD hook's role
//! checks (`arg_groups/pd_disaggregation_hook.py`: the Rust server's bootstrap port, `prefill_complete`
//! allocation, an encoder-only or fake-backend server), the KV cache hook's decode-only flags
//! (`arg_groups/kv_cache_hook.py`), the validation and serving hooks' response store, watermark and
//! KV cache sharding (`arg_groups/validation_hook.py`, `arg_groups/serving_hook.py`,
//! `arg_groups/kv_shard_hook.py`), and the model hook's language-model-only handler
//! (`arg_groups/model_hook.py`).

use super::predicates::{
    CacheOptions, ENCODER_ONLY, RETRACTION_BACKUP, RUST_SERVER_ENV, attention_cp_size, dcp_of, fleets_in_scope,
    host_receive_on, resolved_speculative_algorithm, service_prefill, speculative_algorithm,
};
use super::{
    EVERY_SERVER, Finding, Fix, NOT_DECODE, NOT_PREFILL, PD_SERVERS, PREFILL_SERVERS, Rule, RuleInput, ServerRole,
    Subject, text, text_from, when, when_with,
};
use crate::api::{FleetSpec, RetractionBackup, TransferBackend};
use crate::policy::argv::{given, number_option, option_value};
use crate::release::{Release, Span, v0_5};

/// S1: the retraction backup is a PD decode server's flag.
pub(super) const S1: Rule = Rule {
    id: "S1",
    about: "host_pool off the decode side",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: RETRACTION_BACKUP,
    // 0.5.17 has no such flag: its parser refuses it first (CLI, F1).
    span: Span::since(v0_5(18)),
    roles: NOT_DECODE,
    messages: &[text("--disaggregation-decode-retraction-backup=host_pool is only supported on a PD decode server.")],
    check: |c| when(c.settings.retraction_backup == Some(RetractionBackup::HostPool)),
    fix: Fix::Manual {
        hint: "drop --disaggregation-decode-retraction-backup from servers that are not PD decode servers",
    },
    ..Rule::DEFAULT
};

/// S5: decode offload is a PD decode server's flag.
pub(super) const S5: Rule = Rule {
    id: "S5",
    about: "decode offload off the decode side",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: "spec.disaggregation.decodeOffloadKvCache",
    roles: NOT_DECODE,
    messages: &[text("The argument disaggregation-decode-enable-offload-kvcache is only supported for decode side.")],
    check: |c| when(c.settings.decode_offload_kv_cache),
    fix: Fix::Manual {
        hint: "drop --disaggregation-decode-enable-offload-kvcache from servers that are not PD decode servers",
    },
    ..Rule::DEFAULT
};

/// R21: a prefill server sends KV, which the fake backend cannot.
pub(super) const R21: Rule = Rule {
    id: "R21",
    about: "a prefill server on the fake transfer backend",
    reproduces: "handle_pd_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.23)",
    field: "spec.disaggregation.transferBackend",
    roles: PREFILL_SERVERS,
    messages: &[text("Prefill server does not support 'fake' as the transfer backend")],
    check: |c| when(c.settings.transfer_backend == TransferBackend::Fake),
    fix: Fix::Manual { hint: "use a real transfer backend (mooncake, nixl or mori) on the prefill server" },
    ..Rule::DEFAULT
};

pub(super) const BP1: Rule = Rule {
    id: "BP1",
    about: "prefill on SGLang's Rust server × a bootstrap port of its own",
    reproduces: "_alias_bootstrap_port_to_api_port, srt/arg_groups/pd_disaggregation_hook.py (0.5.17–0.5.23)",
    field: BOOTSTRAP_PORT,
    roles: PD_SERVERS,
    messages: &[text(
        "SGLANG_RUST_SERVER serves the PD KV bootstrap registry on the api port itself; \
         --disaggregation-bootstrap-port {bootstrap} conflicts with --port {port}. Drop \
         --disaggregation-bootstrap-port (decode nodes and the PD router must then target the prefill api port).",
    )],
    check: |c| {
        let (bootstrap, port) = rust_server_prefill_ports(c)?;
        when_with(
            bootstrap != SGLANG_BOOTSTRAP_PORT && bootstrap != port,
            vec![("bootstrap", bootstrap.to_string()), ("port", port.to_string())],
        )
    },
    fix: Fix::Manual {
        hint: "set bootstrapPort to the prefill servers' API port ({spec.prefill.port}), where the Rust server serves \
               the registry, or drop SGLANG_RUST_SERVER from the prefill servers' env",
    },
    ..Rule::DEFAULT
};

pub(super) const LO1: Rule = Rule {
    id: "LO1",
    about: "a language-model-only server under PD",
    reproduces: "ServerArgs._handle_language_model_only, srt/server_args.py (0.5.18); \
                 handle_language_model_only, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: LANGUAGE_MODEL_ONLY_FIELD,
    span: Span::since(v0_5(18)),
    roles: PD_SERVERS,
    messages: &[text("--language-model-only is incompatible with --disaggregation-mode prefill/decode")],
    changes: &[text_from(22, "DeepSeek-V4.1 allowed")],
    // Every server in scope is a PD server (the guard applies it to prefill servers through
    // ON_EVERY_PD_SERVER). From 0.5.22 DeepSeek-V4.1's text-only workers use the PD path.
    check: |c| {
        let exempt = c.release >= v0_5(22) && c.layout.model_type.as_deref() == Some("deepseek_v41");
        when(!exempt && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, LANGUAGE_MODEL_ONLY)))
    },
    fix: Fix::Manual { hint: "drop --language-model-only from extraArgs (it serves without PD disaggregation)" },
    ..Rule::DEFAULT
};

pub(super) const LO2: Rule = Rule {
    id: "LO2",
    about: "a language-model-only server of an architecture without it",
    reproduces: "ServerArgs._handle_language_model_only, srt/server_args.py (0.5.18); \
                 handle_language_model_only, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: LANGUAGE_MODEL_ONLY_FIELD,
    span: Span::since(v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[text("--language-model-only does not support {architectures}. Supported: {supported}.")],
    check: |c| {
        let supported: Vec<&str> = LANGUAGE_MODEL_ONLY_ARCHITECTURES
            .iter()
            .filter(|(_, since)| *since <= c.release)
            .map(|(architecture, _)| *architecture)
            .collect();
        when_with(
            !supported.contains(&c.layout.architecture.as_str())
                && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, LANGUAGE_MODEL_ONLY)),
            vec![
                ("architectures", python_list(&[c.layout.architecture.as_str()])),
                ("supported", python_list(&supported)),
            ],
        )
    },
    fix: Fix::Manual {
        hint: "drop --language-model-only from extraArgs: the release serves only the architectures it lists \
               that way",
    },
    ..Rule::DEFAULT
};

pub(super) const EN1: Rule = Rule {
    id: "EN1",
    about: "an encoder-only server under PD",
    reproduces: "ServerArgs._handle_encoder_disaggregation, srt/server_args.py (0.5.17–0.5.18); \
                 handle_encoder_disaggregation, srt/arg_groups/pd_disaggregation_hook.py (0.5.19–0.5.23)",
    field: ENCODER_ONLY_FIELD,
    roles: PD_SERVERS,
    messages: &[text("Cannot set --encoder-only and --disaggregation-mode prefill/decode together")],
    // Every server in scope is a PD server: the guard applies this rule to prefill servers
    // (ON_EVERY_PD_SERVER) but not to servers without PD.
    check: |c| when(fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, ENCODER_ONLY))),
    fix: Fix::Manual {
        hint: "drop --encoder-only from extraArgs: an encoder-only server runs outside PD disaggregation (its own \
               fleet, without --disaggregation-mode)",
    },
    ..Rule::DEFAULT
};

pub(super) const RS1: Rule = Rule {
    id: "RS1",
    about: "the response store on a PD server",
    reproduces: "validate_response_store, srt/arg_groups/validation_hook.py (0.5.20–0.5.23)",
    field: "spec.decode.extraArgs[--enable-response-store]",
    span: Span::since(v0_5(20)),
    roles: PD_SERVERS,
    messages: &[text(
        "--enable-response-store is not supported with --disaggregation-mode=prefill or decode; response storage \
         must remain disabled in PD mode.",
    )],
    check: |c| when(fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, "--enable-response-store"))),
    fix: Fix::Manual {
        hint: "drop --enable-response-store from extraArgs: SGLang stores responses only on servers without PD",
    },
    ..Rule::DEFAULT
};

pub(super) const KS1: Rule = Rule {
    id: "KS1",
    about: "KV cache sharding off a PD prefill server",
    reproduces: "handle_kv_cache_sharding, srt/arg_groups/kv_shard_hook.py (0.5.22–0.5.23)",
    field: "spec.decode.extraArgs[--enable-kv-cache-sharding]",
    span: Span::since(v0_5(22)),
    roles: NOT_PREFILL,
    messages: &[text(
        "--enable-kv-cache-sharding is only supported on PD prefill workers: a rank's pool holds only its stripe \
         of every cached page, which is incompatible with local decode.",
    )],
    // The decode servers, and (WITHOUT_PD) a server without PD the guard reads; a service's
    // prefill servers may shard.
    check: |c| when(given(&c.decode.extra_args, "--enable-kv-cache-sharding")),
    fix: Fix::Manual {
        hint: "drop --enable-kv-cache-sharding from the decode fleet's extraArgs: it shards the KV cache of PD \
               prefill servers ({spec.prefill})",
    },
    ..Rule::DEFAULT
};

pub(super) const WM1: Rule = Rule {
    id: "WM1",
    about: "the watermark on a PD server",
    reproduces: "check_watermark_server_args, srt/arg_groups/validation_hook.py (0.5.22–0.5.23)",
    field: WATERMARK_FIELD,
    span: Span::since(v0_5(22)),
    roles: PD_SERVERS,
    messages: &[text("--enable-watermark is not supported with PD disaggregation")],
    check: |c| when(watermark_fleets(c).next().is_some()),
    fix: Fix::Manual { hint: "drop --enable-watermark from extraArgs: SGLang watermarks only on servers without PD" },
    ..Rule::DEFAULT
};

pub(super) const WM2: Rule = Rule {
    id: "WM2",
    about: "the watermark × a speculative algorithm it does not sample",
    reproduces: "check_watermark_server_args, srt/arg_groups/validation_hook.py (0.5.22–0.5.23)",
    field: WATERMARK_FIELD,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-watermark supports speculative algorithms NGRAM, EAGLE, and EAGLE3, got '{algorithm}'")],
    // Checked last (check_server_args), on the algorithm the speculative hook resolved.
    check: |c| {
        let algorithm =
            resolved_speculative_algorithm(c).filter(|a| !matches!(a.as_str(), "NGRAM" | "EAGLE" | "EAGLE3"))?;
        when_with(watermark_fleets(c).next().is_some(), vec![("algorithm", algorithm)])
    },
    fix: Fix::Manual { hint: "drop --enable-watermark from extraArgs, or speculate with NGRAM, EAGLE or EAGLE3" },
    ..Rule::DEFAULT
};

pub(super) const WM3: Rule = Rule {
    id: "WM3",
    about: "the watermark × pipeline stages that speculate",
    reproduces: "check_watermark_server_args, srt/arg_groups/validation_hook.py (0.5.22–0.5.23)",
    field: WATERMARK_FIELD,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-watermark is not supported with pipeline-parallel speculative decoding")],
    check: |c| when(speculative_algorithm(c).is_some() && watermark_fleets(c).any(|fleet| fleet.pipeline_parallel > 1)),
    fix: Fix::Manual {
        hint: "drop --enable-watermark from extraArgs, set pipelineParallel to 1, or turn speculative decoding off",
    },
    ..Rule::DEFAULT
};

pub(super) const WM4: Rule = Rule {
    id: "WM4",
    about: "the watermark on SGLang's Rust server",
    reproduces: "check_watermark_server_args, srt/arg_groups/validation_hook.py (0.5.22–0.5.23)",
    field: WATERMARK_FIELD,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text("--enable-watermark is not supported with SGLANG_RUST_SERVER")],
    check: |c| when(watermark_fleets(c).any(|fleet| fleet.env_on(RUST_SERVER_ENV))),
    fix: Fix::Manual { hint: "drop --enable-watermark from extraArgs, or SGLANG_RUST_SERVER from the fleet's env" },
    ..Rule::DEFAULT
};

pub(super) const PC1: Rule = Rule {
    id: "PC1",
    about: "prefill_complete allocation on a PD server that does not support it",
    reproduces: "_validate_prefill_complete, srt/arg_groups/pd_disaggregation_hook.py (0.5.22–0.5.23)",
    field: ALLOCATION_POLICY_FIELD,
    span: Span::since(v0_5(22)),
    roles: PD_SERVERS,
    messages: &[text(PREFILL_COMPLETE_UNSUPPORTED)],
    check: |c| prefill_complete_refused(c, ServerRole::Prefill),
    fix: Fix::Manual {
        hint: "drop --disaggregation-decode-allocation-policy prefill_complete from extraArgs, or change what the \
               message lists (it runs on TP 1 Mooncake servers without CP, PP, HiSparse, host receive, decode \
               radix cache or HiCache)",
    },
    ..Rule::DEFAULT
};

pub(super) const PC2: Rule = Rule {
    id: "PC2",
    about: "prefill_complete allocation on a server without PD",
    reproduces: "_validate_prefill_complete, srt/arg_groups/pd_disaggregation_hook.py (0.5.22–0.5.23)",
    field: ALLOCATION_POLICY_FIELD,
    span: Span::since(v0_5(22)),
    roles: NOT_PREFILL,
    messages: &[text(PREFILL_COMPLETE_UNSUPPORTED)],
    // The guard's server without PD only (WITHOUT_PD); PC1 covers PD servers.
    check: |c| prefill_complete_refused(c, ServerRole::WithoutPd).filter(|_| c.subject == Subject::OtherServer),
    fix: Fix::Manual { hint: "drop --disaggregation-decode-allocation-policy from a server without PD disaggregation" },
    ..Rule::DEFAULT
};

pub(super) const PC3: Rule = Rule {
    id: "PC3",
    about: "prefill_complete allocation without optimistic prefill",
    reproduces: "handle_other_validations, srt/arg_groups/serving_hook.py (0.5.22–0.5.23)",
    field: ALLOCATION_POLICY_FIELD,
    span: Span::since(v0_5(22)),
    roles: PD_SERVERS,
    messages: &[text(
        "prefill_complete requires optimistic prefill, but the resolved model/cache configuration disabled it.",
    )],
    // On a prefill server that passes PC1 the PD hook turns 0 attempts (the default) into 1 and
    // nothing later turns them off, so only negative attempts as given stay.
    check: |c| {
        when(prefill_complete_servers(c, ServerRole::Prefill).iter().any(|server| {
            server.role == ServerRole::Prefill
                && number_option(&server.fleet.extra_args, &["--optimistic-prefill-attempts"])
                    .is_some_and(|attempts| attempts < 0)
        }))
    },
    fix: Fix::Manual {
        hint: "set --optimistic-prefill-attempts to 0 (the default) or more on the prefill servers, or drop \
               --disaggregation-decode-allocation-policy prefill_complete",
    },
    ..Rule::DEFAULT
};

const BOOTSTRAP_PORT: &str = "spec.disaggregation.bootstrapPort";
const LANGUAGE_MODEL_ONLY: &str = "--language-model-only";
const LANGUAGE_MODEL_ONLY_FIELD: &str = "spec.decode.extraArgs[--language-model-only]";

/// `ServerArgs.LANGUAGE_MODEL_ONLY_ARCHITECTURES`, in its order, with the release each joins.
const LANGUAGE_MODEL_ONLY_ARCHITECTURES: &[(&str, Release)] = &[
    ("DeepseekV4ForCausalLM", v0_5(22)),
    ("MuseGlimmerForConditionalGeneration", v0_5(18)),
    ("Cosmos3ForConditionalGeneration", v0_5(20)),
    ("Cosmos3EdgeForConditionalGeneration", v0_5(20)),
];

/// Python's `repr()` of a list of strings, as SGLang's messages print one.
fn python_list(items: &[&str]) -> String {
    let quoted: Vec<String> = items.iter().map(|item| crate::python::py_repr(item)).collect();
    format!("[{}]", quoted.join(", "))
}

const ALLOCATION_POLICY: &str = "--disaggregation-decode-allocation-policy";

/// `_validate_prefill_complete`'s message, on PD servers (PC1) and without PD (PC2).
const PREFILL_COMPLETE_UNSUPPORTED: &str =
    "--disaggregation-decode-allocation-policy prefill_complete does not yet support {unsupported}";

const ALLOCATION_POLICY_FIELD: &str = "spec.decode.extraArgs[--disaggregation-decode-allocation-policy]";

/// What `_validate_prefill_complete` reads of one server that allocates decode memory only once
/// its prefill completes (`--disaggregation-decode-allocation-policy prefill_complete`, 0.5.22 on),
/// as given: its PD hook runs before the hooks that resolve CP and DP.
struct AllocatingServer<'a> {
    fleet: &'a FleetSpec,
    role: ServerRole,
    dcp: i32,
    hisparse: bool,
    host_receive: bool,
    hicache: bool,
    storage_backend: bool,
}

/// The servers in scope with `prefill_complete`: the decode servers (the guard's one server, in
/// `other_server`'s role where it is not a PD decode server), with the settings, and a service's
/// prefill servers, with their `extraArgs` (kvpilot gives them none of these settings).
fn prefill_complete_servers<'a>(c: &'a RuleInput<'_>, other_server: ServerRole) -> Vec<AllocatingServer<'a>> {
    let own = AllocatingServer {
        fleet: c.decode,
        role: if c.subject == Subject::OtherServer { other_server } else { ServerRole::Decode },
        dcp: c.settings.decode_context_parallel,
        hisparse: c.settings.hisparse,
        host_receive: host_receive_on(c.settings, c.release),
        hicache: CacheOptions::of_settings(c).hierarchical,
        storage_backend: c.settings.hicache_storage_backend.is_some(),
    };
    let prefill = service_prefill(c).map(|fleet| {
        let args = &fleet.extra_args;
        let threshold = option_value(args, "--disaggregation-decode-host-receive-threshold")
            .and_then(|value| value.trim().parse::<f64>().ok());
        AllocatingServer {
            fleet,
            role: ServerRole::Prefill,
            dcp: dcp_of(args),
            hisparse: given(args, "--enable-hisparse"),
            host_receive: threshold.is_some_and(|threshold| threshold < 1.0),
            hicache: CacheOptions::of_prefill(c, fleet).hierarchical,
            storage_backend: option_value(args, "--hicache-storage-backend").is_some(),
        }
    });
    std::iter::once(own)
        .chain(prefill)
        .filter(|server| option_value(&server.fleet.extra_args, ALLOCATION_POLICY) == Some("prefill_complete"))
        .collect()
}

/// What `_validate_prefill_complete` lists as not yet supported on `server`, in its order. Its
/// attention TP reads `dp_size` where `enable_dp_attention` is set, which the deprecated-DP hook
/// has cleared by then (0.5.22 on), so any TP above 1 is listed.
fn prefill_complete_unsupported(c: &RuleInput<'_>, server: &AllocatingServer<'_>) -> Vec<&'static str> {
    let args = &server.fleet.extra_args;
    let write_back = option_value(args, "--hicache-write-policy") == Some("write_back");
    [
        (server.role == ServerRole::WithoutPd, "aggregated serving"),
        (c.settings.transfer_backend != TransferBackend::Mooncake, "transfer backends other than Mooncake"),
        (
            server.fleet.pipeline_parallel != 1 || attention_cp_size(args) != Some(1) || server.dcp != 1,
            "pipeline or attention context parallelism",
        ),
        (server.fleet.tensor_parallel != 1, "attention tensor parallelism greater than one"),
        (
            given(args, "--enable-pdmux") || option_value(args, "--decoupled-spec-role").is_some_and(|r| r != "null"),
            "PD multiplexing or decoupled speculation",
        ),
        (given(args, "--enable-pd-role-switch"), "runtime PD role switching"),
        (given(args, ENCODER_ONLY) || given(args, "--language-only"), "encoder disaggregation"),
        (server.hisparse, "HiSparse"),
        (server.host_receive, "decode host KV buffering"),
        (
            server.role == ServerRole::Decode && (c.settings.decode_radix_cache || server.hicache),
            "decode radix cache or decode HiCache",
        ),
        (
            server.role == ServerRole::Prefill && server.hicache && (server.storage_backend || !write_back),
            "prefill HiCache other than L2 write_back",
        ),
        (server.fleet.env_on("SGLANG_DISAGG_STAGING_BUFFER"), "staging buffers"),
        (server.fleet.env_on(RUST_SERVER_ENV), "the Rust bootstrap registry"),
    ]
    .into_iter()
    .filter_map(|(unsupported, what)| unsupported.then_some(what))
    .collect()
}

/// The first server in scope whose `prefill_complete` lists something unsupported, as SGLang
/// joins the list.
fn prefill_complete_refused(c: &RuleInput<'_>, other_server: ServerRole) -> Option<Finding> {
    let unsupported = prefill_complete_servers(c, other_server)
        .iter()
        .map(|server| prefill_complete_unsupported(c, server))
        .find(|unsupported| !unsupported.is_empty())?;
    when_with(true, vec![("unsupported", unsupported.join(", "))])
}

const WATERMARK_FIELD: &str = "spec.decode.extraArgs[--enable-watermark]";

/// The servers in scope that watermark their output (`--enable-watermark`, 0.5.22 on), which
/// SGLang's last validation checks.
fn watermark_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    fleets_in_scope(c).filter(|fleet| given(&fleet.extra_args, "--enable-watermark"))
}

const ENCODER_ONLY_FIELD: &str = "spec.decode.extraArgs[--encoder-only]";

/// SGLang's default `--disaggregation-bootstrap-port`, every release.
const SGLANG_BOOTSTRAP_PORT: i64 = 8998;

/// (bootstrap port, API port) of the prefill server in scope that SGLang's Rust server runs
/// (`SGLANG_RUST_SERVER` in its env), whose PD hook serves the KV bootstrap registry on the API
/// port: a service's prefill servers, or the guard's server (ON_EVERY_PD_SERVER keeps it for a
/// prefill one). 0.5.23 asks whether the Rust server stands in for the backend's bootstrap
/// server: it does for every backend a prefill server may run.
fn rust_server_prefill_ports(c: &RuleInput<'_>) -> Option<(i64, i64)> {
    let fleet = if c.subject == Subject::OtherServer { Some(c.decode) } else { service_prefill(c) }?;
    if !fleet.env_on(RUST_SERVER_ENV) {
        return None;
    }
    let args = &fleet.extra_args;
    let bootstrap =
        number_option(args, &["--disaggregation-bootstrap-port"]).unwrap_or(i64::from(c.settings.bootstrap_port));
    Some((bootstrap, number_option(args, &["--port"]).unwrap_or(i64::from(fleet.port))))
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// A prefill server that SGLang's Rust server runs serves the KV bootstrap registry on its API
    /// port, so a bootstrap port of its own, other than SGLang's default, is refused (BP1, every
    /// release): a service's prefill servers with SGLANG_RUST_SERVER in their env, and the guard's
    /// prefill server with its own `--port` and `--disaggregation-bootstrap-port`.
    #[test]
    fn bp1_rust_server_prefill_serves_the_bootstrap_registry_on_its_api_port() {
        let rust_server = |value: &str| FleetSpec {
            env: vec![EnvVar { name: "SGLANG_RUST_SERVER".into(), value: Some(value.into()), ..Default::default() }],
            ..FleetSpec::default()
        };
        let (decode, llama, defaults) = (FleetSpec::default(), full(), DisaggregationSpec::default());
        let service = |settings: &DisaggregationSpec, prefill: &FleetSpec| {
            let input = PolicyInput::alone(settings, &decode, &llama, v0_5(23)).with_prefill(Some(prefill));
            evaluate(input).violations.into_iter().filter(|v| v.rule == "BP1").map(|v| v.message).collect::<Vec<_>>()
        };
        let port_9000 = with(|s| s.bootstrap_port = 9000);
        assert_eq!(
            service(&port_9000, &rust_server("1")),
            ["SGLANG_RUST_SERVER serves the PD KV bootstrap registry on the api port itself; \
              --disaggregation-bootstrap-port 9000 conflicts with --port 30000. Drop --disaggregation-bootstrap-port \
              (decode nodes and the PD router must then target the prefill api port)."]
        );
        assert!(service(&port_9000, &rust_server("0")).is_empty());
        assert!(service(&defaults, &rust_server("true")).is_empty(), "8998 moves to the API port");
        let same_port = with(|s| s.bootstrap_port = 30000);
        assert!(service(&same_port, &rust_server("1")).is_empty(), "the bootstrap port is the API port");
        assert!(run_at(v0_5(23), &port_9000, &rust_server("1"), &full()).violations.iter().all(|v| v.rule != "BP1"));

        let mut guard = rust_server("1");
        guard.extra_args = ["--port", "31000", "--disaggregation-bootstrap-port", "31000"].map(String::from).to_vec();
        let alone = |fleet: &FleetSpec, prefill: bool| {
            rule_ids(evaluate_other_server(PolicyInput::alone(&defaults, fleet, &llama, v0_5(17)), prefill))
        };
        assert!(alone(&guard, true).is_empty());
        guard.extra_args[3] = "9000".into();
        assert_eq!(alone(&guard, true), ["BP1"]);
        assert!(alone(&guard, false).is_empty(), "no PD: the PD hook checks prefill servers only");
    }

    /// Flags SGLang refuses by the server's role: the response store under PD (RS1, 0.5.20 on), KV
    /// cache sharding off a PD prefill server (KS1, 0.5.22 on), and the watermark (0.5.22 on) under PD
    /// (WM1), with a speculative algorithm other than NGRAM, EAGLE and EAGLE3 as resolved (WM2), with
    /// pipeline stages that speculate (WM3) and on the Rust server (WM4).
    #[test]
    fn rs1_ks1_wm_flags_by_role() {
        let all = ["RS1", "KS1", "WM1", "WM2", "WM3", "WM4"];
        let fleet = |args: &[&str]| parallel_fleet(1, 1, false, args);
        let alone = |settings: &DisaggregationSpec, fleet: &FleetSpec, prefill: bool, patch| {
            let verdict = evaluate_other_server(PolicyInput::alone(settings, fleet, &full(), v0_5(patch)), prefill);
            verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
        };
        let defaults = DisaggregationSpec::default();
        let store = fleet(&["--enable-response-store"]);
        assert_eq!(violations_of(&all, &full(), &store, 20)[0].0, "RS1");
        assert!(violations_of(&all, &full(), &store, 19).is_empty(), "no such flag");
        assert_eq!(alone(&defaults, &store, true, 23), ["RS1"]);
        assert!(alone(&defaults, &store, false, 23).is_empty(), "no PD");

        let sharded = fleet(&["--enable-kv-cache-sharding"]);
        assert_eq!(violations_of(&all, &full(), &sharded, 22)[0].0, "KS1");
        assert!(alone(&defaults, &sharded, true, 22).is_empty(), "a PD prefill server shards");
        assert_eq!(alone(&defaults, &sharded, false, 22), ["KS1"]);

        let watermark = fleet(&["--enable-watermark"]);
        assert_eq!(violations_of(&all, &full(), &watermark, 22)[0].0, "WM1");
        assert!(alone(&defaults, &watermark, false, 23).is_empty());
        let speculating = |algorithm: &str| with(|s| s.speculative_algorithm = Some(algorithm.into()));
        assert!(alone(&speculating("nextn"), &watermark, false, 23).is_empty(), "NEXTN is EAGLE");
        let dflash = run_at(v0_5(23), &speculating("DFLASH"), &watermark, &full());
        assert!(dflash.violations.iter().any(|v| v.rule == "WM2"
            && v.message
                == "--enable-watermark supports speculative algorithms NGRAM, EAGLE, and EAGLE3, got 'DFLASH'"));
        let staged = FleetSpec { pipeline_parallel: 2, ..watermark.clone() };
        assert_eq!(alone(&speculating("NGRAM"), &staged, false, 23), ["WM3"]);
        assert!(alone(&defaults, &staged, false, 23).is_empty(), "no speculative decoding");
        let rust_server = FleetSpec {
            env: vec![EnvVar { name: "SGLANG_RUST_SERVER".into(), value: Some("1".into()), value_from: None }],
            ..watermark.clone()
        };
        assert_eq!(alone(&defaults, &rust_server, false, 22), ["WM4"]);
        assert!(alone(&defaults, &rust_server, false, 21).is_empty(), "no such flag");
    }

    /// From 0.5.22 `--disaggregation-decode-allocation-policy prefill_complete` lists what it does not
    /// support yet on each server that gives it (PC1 on PD servers, PC2 without PD, in one message
    /// joined as SGLang joins it), and refuses a prefill server whose optimistic prefill attempts stay
    /// negative (PC3).
    #[test]
    fn pc_prefill_complete_allocation() {
        let all = ["PC1", "PC2", "PC3"];
        let policy = ["--disaggregation-decode-allocation-policy", "prefill_complete"];
        let fleet = |tp, args: &[&str]| parallel_fleet(tp, 1, false, &[&policy[..], args].concat());
        let prefix = "--disaggregation-decode-allocation-policy prefill_complete does not yet support ";
        assert!(violations_of(&all, &full(), &fleet(1, &[]), 23).is_empty());
        assert!(violations_of(&all, &full(), &fleet(2, &[]), 21).is_empty(), "no such flag");
        let radix = with(|s| s.decode_radix_cache = true);
        let verdict = run_at(v0_5(22), &radix, &fleet(2, &["--enable-pdmux"]), &full());
        let messages: Vec<_> =
            verdict.violations.iter().filter(|v| v.rule == "PC1").map(|v| v.message.clone()).collect();
        assert_eq!(
            messages,
            [format!(
                "{prefix}attention tensor parallelism greater than one, PD multiplexing or decoupled speculation, decode \
                 radix cache or decode HiCache"
            )]
        );

        let alone = |fleet: &FleetSpec, prefill: bool| {
            let verdict = evaluate_other_server(
                PolicyInput::alone(&DisaggregationSpec::default(), fleet, &full(), v0_5(23)),
                prefill,
            );
            verdict
                .violations
                .iter()
                .map(|v| (v.rule, v.message.clone()))
                .filter(|(rule, _)| all.contains(rule))
                .collect::<Vec<_>>()
        };
        assert!(alone(&fleet(1, &[]), true).is_empty());
        assert_eq!(alone(&fleet(1, &[]), false), [("PC2", format!("{prefix}aggregated serving"))]);
        let hicache = fleet(1, &["--enable-hierarchical-cache"]);
        let settings = with(|s| s.hierarchical_cache = true);
        let prefill_hicache = evaluate_other_server(PolicyInput::alone(&settings, &hicache, &full(), v0_5(23)), true);
        assert!(
            prefill_hicache
                .violations
                .iter()
                .any(|v| v.rule == "PC1" && v.message == format!("{prefix}prefill HiCache other than L2 write_back"))
        );
        let write_back = fleet(1, &["--hicache-write-policy", "write_back"]);
        let prefill_write_back =
            evaluate_other_server(PolicyInput::alone(&settings, &write_back, &full(), v0_5(23)), true);
        assert!(!prefill_write_back.violations.iter().any(|v| v.rule == "PC1"));
        assert_eq!(
            alone(&fleet(1, &["--optimistic-prefill-attempts", "-1"]), true),
            [(
                "PC3",
                "prefill_complete requires optimistic prefill, but the resolved model/cache configuration disabled it."
                    .to_string()
            )]
        );
        assert!(alone(&fleet(1, &["--optimistic-prefill-attempts", "0"]), true).is_empty(), "turned into 1");
    }

    /// `--language-model-only` (0.5.18 on) runs without PD (LO1; DeepSeek-V4.1's text-only workers
    /// use the PD path from 0.5.22) and only for the architectures the release lists (LO2, with
    /// Python's list in its message).
    #[test]
    fn lo1_lo2_language_model_only() {
        let flag = parallel_fleet(1, 1, false, &["--language-model-only"]);
        let dsv41 = fixture("deepseek-v4.1-dspark");
        assert_eq!(violations_of(&["LO1", "LO2"], &dsv41, &flag, 22), []);
        let v21 = violations_of(&["LO1", "LO2"], &dsv41, &flag, 21);
        assert_eq!(v21.iter().map(|(rule, _)| *rule).collect::<Vec<_>>(), ["LO1", "LO2"]);
        assert_eq!(
            v21[1].1,
            "--language-model-only does not support ['DeepseekV4ForCausalLM']. Supported: \
             ['MuseGlimmerForConditionalGeneration', 'Cosmos3ForConditionalGeneration', 'Cosmos3EdgeForConditionalGeneration']."
        );
        assert!(violations_of(&["LO1", "LO2"], &full(), &flag, 17).is_empty(), "no such flag before 0.5.18");
        assert!(violations_of(&["LO1", "LO2"], &full(), &FleetSpec::default(), 23).is_empty());
    }

    fn llama() -> AttentionLayout {
        let config = serde_json::from_str(include_str!("../../../tests/fixtures/configs/llama-3.1-8b-instruct.json"));
        layout::resolve(&config.unwrap(), ResolveOptions::default()).unwrap()
    }

    fn rules_of(settings: &DisaggregationSpec, prefill: bool) -> Vec<&'static str> {
        rules_of_at(settings, prefill, crate::release::Release::newest_known())
    }

    fn rules_of_at(settings: &DisaggregationSpec, prefill: bool, release: Release) -> Vec<&'static str> {
        let layout = llama();
        let decode = FleetSpec::default();
        let input = PolicyInput::of(settings, &layout, release).with_decode(&decode);
        evaluate_other_server(input, prefill).violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn decode_only_settings_are_refused_off_the_decode_side() {
        let settings = DisaggregationSpec {
            retraction_backup: Some(RetractionBackup::HostPool),
            decode_offload_kv_cache: true,
            transfer_backend: TransferBackend::Fake,
            mamba_radix_cache_strategy: Some(MambaRadixCacheStrategy::ExtraBufferLazy),
            ..DisaggregationSpec::default()
        };
        // The Llama model keeps no Mamba state: the lazy strategy is refused as such (M4, 0.5.21+).
        assert_eq!(rules_of(&settings, true), ["S1", "S5", "R21", "M4"]);
        assert_eq!(rules_of(&settings, false), ["S1", "S5", "M4"]);
        // 0.5.17 has no retraction backup flag for S1 to check: its parser refuses the flag first.
        let host_pool =
            DisaggregationSpec { retraction_backup: Some(RetractionBackup::HostPool), ..Default::default() };
        assert_eq!(rules_of_at(&host_pool, true, v0_5(18)), ["S1"]);
        assert!(rules_of_at(&host_pool, true, v0_5(17)).is_empty());
        // Decode radix cache is a decode-side flag SGLang ignores elsewhere.
        let radix = DisaggregationSpec { decode_radix_cache: true, ..DisaggregationSpec::default() };
        assert!(rules_of(&radix, true).is_empty());
    }

    #[test]
    fn the_swa_ratio_range_holds_on_every_server() {
        let layout = llama();
        let settings = DisaggregationSpec::default();
        let decode = FleetSpec { swa_full_tokens_ratio: Some(0.0), ..FleetSpec::default() };
        let input = PolicyInput::of(&settings, &layout, crate::release::Release::newest_known()).with_decode(&decode);
        for prefill in [true, false] {
            let rules: Vec<_> = evaluate_other_server(input, prefill).violations.iter().map(|v| v.rule).collect();
            assert_eq!(rules, ["S8"], "prefill: {prefill}");
        }
    }

    #[test]
    fn a_prefill_server_compares_its_deepseek_v4_draft_pool_too() {
        let dsv4 = |window: u64, arch: &str| {
            let config = serde_json::json!({
                "architectures": [arch], "num_hidden_layers": 2, "sliding_window": window, "head_dim": 512,
                "compress_ratios": [0, 4]
            });
            layout::resolve(&config, ResolveOptions::default()).unwrap()
        };
        let (target, draft) = (dsv4(128, "DeepseekV4ForCausalLM"), dsv4(64, "DeepseekV4ForCausalLMNextN"));
        let settings =
            DisaggregationSpec { speculative_algorithm: Some("EAGLE".into()), ..DisaggregationSpec::default() };
        // DeepSeek-V4 runs EAGLE with one draft token per step only (V2).
        let decode =
            FleetSpec { extra_args: vec!["--speculative-eagle-topk".into(), "1".into()], ..FleetSpec::default() };
        let input = PolicyInput::of(&settings, &target, crate::release::Release::newest_known())
            .with_decode(&decode)
            .with_draft(Some(&draft));
        let rules =
            |prefill| evaluate_other_server(input, prefill).violations.iter().map(|v| v.rule).collect::<Vec<_>>();
        assert_eq!(rules(true), ["T11"]);
        assert!(rules(false).is_empty(), "without PD no KV manager compares the pools");
    }

    #[test]
    fn lmcache_is_refused_on_a_prefill_server_and_checked_for_its_conflicts_everywhere() {
        let lmcache = DisaggregationSpec { lmcache: true, ..DisaggregationSpec::default() };
        assert_eq!(rules_of(&lmcache, true), ["L7"]);
        // Without PD disaggregation LMCache runs; decode radix cache is not what it needs there.
        assert!(rules_of(&lmcache, false).is_empty());
        let with_hicache = DisaggregationSpec { hierarchical_cache: true, ..lmcache };
        assert_eq!(rules_of(&with_hicache, false), ["L1"]);
        assert_eq!(rules_of(&with_hicache, true), ["L1", "L7"]);
    }
}
