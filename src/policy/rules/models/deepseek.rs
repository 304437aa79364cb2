//! The DeepSeek family: its model override provider (`arg_groups/model_overrides/deepseek_v2.py`,
//! `_deepseek_family_overrides`) and the model hook's DSA branch (`handle_model_specific_adjustments`).

use crate::api::{FleetSpec, LayoutFeature, TransferBackend};
use crate::policy::argv::{given, option_value};
use crate::policy::rules::predicates::{
    CP_STRATEGY, DATA_PARALLEL_FIELD, DECODE_CONTEXT_PARALLEL, DECODE_KV_CACHE_DTYPE, DECODE_TP, DEEPSEEK_V4,
    EAGLE_TOPK, EAGLE_TOPK_FIELD, HICACHE_FLAG, PREFILL_CP, dcp_of, eagle_topk_is_one, fleets_in_scope, kv_cache_dtype,
    pd_servers, prefill_cp_fleets, service_prefill,
};
use crate::policy::rules::{
    EVERY_SERVER, Fix, NOT_PREFILL, PD_SERVERS, Rule, RuleInput, Subject, text, text_from, when, when_with,
};
use crate::release::{Release, Span, v0_5};

pub(in crate::policy::rules) const K1: Rule = Rule {
    id: "K1",
    about: "DSA decode context parallelism × HiSparse or HiCache",
    reproduces: "_dsa_dcp_overrides, srt/arg_groups/model_overrides/deepseek_v2.py (0.5.22–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text("DSA DCP does not support HiSparse or HiCache.")],
    check: |c| when(dsa_dcp_servers(c).any(|(_, hierarchical)| hierarchical)),
    fix: Fix::Manual { hint: "set decodeContextParallel to 1, or turn hierarchicalCache and hisparse off" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const K2: Rule = Rule {
    id: "K2",
    about: "DSA decode context parallelism under PD",
    reproduces: "_dsa_dcp_overrides, srt/arg_groups/model_overrides/deepseek_v2.py (0.5.22–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    span: Span::since(v0_5(22)),
    roles: PD_SERVERS,
    messages: &[text("DSA DCP does not support PD disaggregation.")],
    check: |c| when(dsa_dcp_servers(c).next().is_some()),
    fix: Fix::Manual {
        hint: "set decodeContextParallel to 1: from SGLang 0.5.22 a DSA model (DeepSeek-V3.2, GLM-5) runs \
               decode context parallelism only without PD disaggregation",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const K3: Rule = Rule {
    id: "K3",
    about: "DSA decode context parallelism needs one draft token per step",
    reproduces: "_dsa_dcp_overrides, srt/arg_groups/model_overrides/deepseek_v2.py (0.5.22–0.5.23)",
    field: EAGLE_TOPK_FIELD,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text("DSA DCP requires --speculative-eagle-topk 1.")],
    check: |c| {
        when(dsa_dcp_servers(c).any(|(fleet, _)| {
            option_value(&fleet.extra_args, EAGLE_TOPK).is_some() && !eagle_topk_is_one(&fleet.extra_args)
        }))
    },
    fix: Fix::Manual { hint: "set --speculative-eagle-topk 1 in extraArgs, or decodeContextParallel to 1" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const K6: Rule = Rule {
    id: "K6",
    about: "DSA pooled index keys × decode context parallelism",
    reproduces: "_deepseek_family_overrides, srt/arg_groups/model_overrides/deepseek_v2.py (0.5.22–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    span: Span::since(v0_5(22)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--dcp-size > 1 is not supported for DSA with index_kpool={kpool}: a pooled index key spans positions \
         owned by different DCP ranks.",
    )],
    check: |c| {
        let kpool = c.layout.dsa_index_kpool.filter(|&kpool| kpool > 1)?;
        when_with(dsa_dcp_servers(c).next().is_some(), vec![("kpool", kpool.to_string())])
    },
    fix: Fix::Manual {
        hint: "set decodeContextParallel to 1 (and drop --dcp-size from extraArgs): the model pools its index keys \
               (index_kpool above 1), which CUDA's DSA path cannot split across DCP ranks",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const K4: Rule = Rule {
    id: "K4",
    about: "HYV4 × decode context parallelism",
    reproduces: "_deepseek_family_overrides, srt/arg_groups/model_overrides/deepseek_v2.py (0.5.20–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--dcp-size > 1 is not supported for HYV4 because decode context parallelism gathers query heads across \
         DCP ranks but does not provide single-owner semantics for learnable attention sinks. Got \
         architecture='{arch}' and dcp_size={dcp}.",
    )],
    check: |c| {
        let (arch, dcp) = hyv4_dcp(c)?;
        when_with(true, vec![("arch", arch), ("dcp", dcp.to_string())])
    },
    fix: Fix::Manual { hint: "set decodeContextParallel to 1 (and drop --dcp-size from extraArgs)" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const K5: Rule = Rule {
    id: "K5",
    about: "HYV4 × prefill context parallelism",
    reproduces: "_deepseek_family_overrides, srt/arg_groups/model_overrides/deepseek_v2.py (0.5.20–0.5.23)",
    field: PREFILL_CP_FIELD,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-prefill-cp is not supported for HYV4 because its attention path does not implement DSA \
         context-parallel metadata and sharding. Got architecture='{arch}' and enable_prefill_cp=True.",
    )],
    check: |c| {
        let arch = c.layout.architecture.as_str();
        when_with(
            c.release >= v0_5(20)
                && HYV4.contains(&arch)
                && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, PREFILL_CP)),
            vec![("arch", arch.to_string())],
        )
    },
    fix: Fix::Manual { hint: "remove --enable-prefill-cp from extraArgs" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const CP9: Rule = Rule {
    id: "CP9",
    about: "DSA prefill CP with the interleave strategy × DP",
    reproduces: "_deepseek_family_overrides, srt/arg_groups/overrides.py (0.5.17–0.5.18); \
                 _deepseek_family_overrides, srt/arg_groups/model_overrides/deepseek_v2.py (0.5.19–0.5.21)",
    field: DATA_PARALLEL_FIELD,
    span: Span::between(v0_5(17), v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("interleave DSA CP does not support DP attention.")],
    check: |c| {
        when(
            model_hook_dsa(c)
                && prefill_cp_fleets(c).any(|fleet| {
                    option_value(&fleet.extra_args, CP_STRATEGY) != Some("zigzag") && fleet.data_parallel > 1
                }),
        )
    },
    fix: Fix::Manual {
        hint: "drop dataParallel (--dp-size) from the prefill-CP servers (CP spans the TP group), use --cp-strategy \
               zigzag, or use SGLang 0.5.22 or later, where interleave prefill CP runs with attention DP",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const CP10: Rule = Rule {
    id: "CP10",
    about: "DeepSeek prefill CP beyond one machine",
    reproduces: "DSA models: _deepseek_family_overrides, srt/arg_groups/overrides.py (0.5.17–0.5.18), \
                 srt/arg_groups/model_overrides/deepseek_v2.py (0.5.19–0.5.23); \
                 DeepSeek-V4: validate_deepseek_v4_cp, srt/arg_groups/deepseek_v4_hook.py (0.5.17–0.5.23)",
    field: DECODE_TP,
    roles: EVERY_SERVER,
    messages: &[text(
        "Context parallel only supports single machine (tp_size <= 8). Cross-machine CP has precision issues.",
    )],
    check: |c| {
        let deepseek = model_hook_dsa(c) || c.layout.architecture == DEEPSEEK_V4;
        when(deepseek && prefill_cp_fleets(c).any(|fleet| fleet.tensor_parallel > 8))
    },
    fix: Fix::Manual {
        hint: "keep tensorParallel at 8 or below on servers with --enable-prefill-cp (SGLang runs a DeepSeek \
               model's prefill CP on one machine)",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const CP6: Rule = Rule {
    id: "CP6",
    about: "DSA prefill CP on a PD decode server",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: "spec.decode.extraArgs[--enable-prefill-cp]",
    messages: &[text("CP is only supported for prefill when PD disaggregation, please remove --enable-prefill-cp.")],
    check: |c| when(c.subject != Subject::OtherServer && model_hook_dsa(c) && given(&c.decode.extra_args, PREFILL_CP)),
    fix: Fix::Manual {
        hint: "remove --enable-prefill-cp from the decode servers' extraArgs (prefill servers keep it)",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const LS0: Rule = Rule {
    id: "LS0",
    about: "DSA cache layer split on a model without DSA",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: DSA_CACHE_LAYER_SPLIT_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("--enable-dsa-cache-layer-split is only supported for DSA (DeepSeek Sparse Attention) models.")],
    check: |c| {
        when(
            !c.layout.has(LayoutFeature::Dsa)
                && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, DSA_CACHE_LAYER_SPLIT)),
        )
    },
    fix: Fix::Manual { hint: "drop --enable-dsa-cache-layer-split from extraArgs: the model has no DSA layers" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const LS1: Rule = Rule {
    id: "LS1",
    about: "DSA cache layer split on a PD decode server",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: DSA_CACHE_LAYER_SPLIT_FIELD,
    messages: &[text(
        "--enable-dsa-cache-layer-split is not supported on decode workers. This flag is a prefill-CP \
         optimization; decode receives full cache shards through PD transfer.",
    )],
    // The decode servers (no role list keeps this rule for other servers).
    check: |c| {
        when(
            c.subject != Subject::OtherServer
                && model_hook_dsa(c)
                && given(&c.decode.extra_args, DSA_CACHE_LAYER_SPLIT),
        )
    },
    fix: Fix::Manual {
        hint: "drop --enable-dsa-cache-layer-split from the decode fleet's extraArgs (it belongs on the prefill \
               servers, {spec.prefill})",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const LS2: Rule = Rule {
    id: "LS2",
    about: "DSA cache layer split on a server without PD",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: DSA_CACHE_LAYER_SPLIT_FIELD,
    roles: NOT_PREFILL,
    messages: &[text(
        "--enable-dsa-cache-layer-split is only supported on PD prefill workers. Non-PD workers also run decode \
         and require ordinary local decode cache semantics.",
    )],
    // The guard's server without PD (WITHOUT_PD).
    check: |c| {
        when(
            c.subject == Subject::OtherServer
                && model_hook_dsa(c)
                && given(&c.decode.extra_args, DSA_CACHE_LAYER_SPLIT),
        )
    },
    fix: Fix::Manual { hint: "drop --enable-dsa-cache-layer-split: it splits the cache of PD prefill servers only" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const LS3: Rule = Rule {
    id: "LS3",
    about: "DSA cache layer split without interleaved prefill CP",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: DSA_CACHE_LAYER_SPLIT_FIELD,
    roles: EVERY_SERVER,
    messages: &[
        text(
            "--enable-dsa-cache-layer-split requires --enable-prefill-cp and --cp-strategy interleave (or legacy \
             --enable-nsa-prefill-context-parallel with --nsa-prefill-cp-mode round-robin-split).",
        ),
        text_from(20, "--enable-dsa-cache-layer-split requires --enable-prefill-cp and --cp-strategy interleave."),
    ],
    check: |c| {
        when(dsa_layer_split_fleets(c).any(|fleet| {
            let args = &fleet.extra_args;
            !given(args, PREFILL_CP) || option_value(args, "--cp-strategy") != Some("interleave")
        }))
    },
    fix: Fix::Manual {
        hint: "add --enable-prefill-cp and --cp-strategy interleave to the extraArgs that split the cache layers",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const LS4: Rule = Rule {
    id: "LS4",
    about: "DSA cache layer split off Mooncake",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: DSA_CACHE_LAYER_SPLIT_FIELD,
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-dsa-cache-layer-split currently only supports the mooncake transfer backend (mooncake / \
         mooncake_tcp). Got --disaggregation-transfer-backend '{backend}'. mori/nixl support will be added later \
         by the community.",
    )],
    check: |c| {
        when_with(
            c.settings.transfer_backend != TransferBackend::Mooncake && dsa_layer_split_fleets(c).next().is_some(),
            vec![("backend", c.settings.transfer_backend.as_str().to_string())],
        )
    },
    fix: Fix::Manual { hint: "set transferBackend to mooncake, or drop --enable-dsa-cache-layer-split from extraArgs" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const LS5: Rule = Rule {
    id: "LS5",
    about: "DSA cache layer split × pipeline stages",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: DSA_CACHE_LAYER_SPLIT_FIELD,
    roles: EVERY_SERVER,
    messages: &[text(
        "--enable-dsa-cache-layer-split is not supported with pipeline parallelism (pp_size > 1) yet. It requires \
         prefill context parallelism, and CP + PP has not been validated for this feature.",
    )],
    check: |c| when(dsa_layer_split_fleets(c).any(|fleet| fleet.pipeline_parallel > 1)),
    fix: Fix::Manual {
        hint: "set pipelineParallel to 1 on the servers that split the cache layers, or drop \
               --enable-dsa-cache-layer-split",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const DT2: Rule = Rule {
    id: "DT2",
    about: "DSA learnable attention sinks × a KV cache dtype other than bfloat16",
    reproduces: "_dsa_kv_cache_dtype_default, srt/arg_groups/overrides.py (0.5.20–0.5.23)",
    field: DECODE_KV_CACHE_DTYPE,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text("Learnable DSA attention sinks require a bfloat16 KV cache; got kv_cache_dtype={dtype}.")],
    check: |c| {
        let dtype = dsa_kv_cache_dtype_refused(c, &["auto", "bf16", "bfloat16"])?;
        when_with(c.layout.has(LayoutFeature::LearnableAttentionSinks), vec![("dtype", dtype.to_string())])
    },
    fix: Fix::Manual { hint: "set the KV cache dtype (kvCacheDtype, --kv-cache-dtype) to bfloat16, or leave it unset" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const DT1: Rule = Rule {
    id: "DT1",
    about: "DSA KV cache dtype other than bfloat16 or fp8_e4m3",
    reproduces: "_dsa_kv_cache_dtype_default, srt/arg_groups/overrides.py (0.5.17–0.5.23)",
    field: DECODE_KV_CACHE_DTYPE,
    roles: EVERY_SERVER,
    messages: &[text("DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype")],
    check: |c| when(dsa_kv_cache_dtype_refused(c, &["auto", "bf16", "bfloat16", "fp8_e4m3"]).is_some()),
    fix: Fix::Manual {
        hint: "set the KV cache dtype (kvCacheDtype, --kv-cache-dtype) to fp8_e4m3 or bfloat16, or leave it unset \
               (SGLang then picks fp8_e4m3 on Blackwell and bfloat16 before)",
    },
    ..Rule::DEFAULT
};

/// Architectures SGLang's DeepSeek-family override provider is registered for
/// (`_deepseek_family_overrides` in `arg_groups/model_overrides/deepseek_v2.py`, the same list in
/// 0.5.20-0.5.23): HYV4's context-parallel checks (K4, K5) and, for a DSA model, DSA DCP's (K1-K3,
/// 0.5.22 on) run there. Earlier releases have neither.
const DEEPSEEK_FAMILY_OVERRIDES: &[&str] = &[
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration",
    "GlmMoeDsaForCausalLM",
    "Glm5NextForConditionalGeneration",
    "HYV4ForCausalLM",
    "HYV4ForCausalLMNextN",
    "LongcatFlashForCausalLM",
    "LongcatFlashForCausalLMNextN",
    "Dots3NoteForCausalLM",
];

const HYV4: &[&str] = &["HYV4ForCausalLM", "HYV4ForCausalLMNextN"];
const PREFILL_CP_FIELD: &str = "spec.prefill.extraArgs[--enable-prefill-cp]";

/// The servers in scope with decode context parallelism, for DSA DCP's checks (0.5.22 on) on a
/// DSA model of the DeepSeek family: each as (fleet, whether it runs HiSparse or HiCache).
fn dsa_dcp_servers<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = (&'a FleetSpec, bool)> {
    let dsa = c.release >= v0_5(22)
        && c.layout.has(LayoutFeature::Dsa)
        && DEEPSEEK_FAMILY_OVERRIDES.contains(&c.layout.architecture.as_str());
    let own = (c.decode, c.settings.decode_context_parallel, c.settings.hisparse || c.settings.hierarchical_cache);
    let prefill = service_prefill(c).map(|fleet| {
        let args = &fleet.extra_args;
        (fleet, dcp_of(args), given(args, "--enable-hisparse") || given(args, HICACHE_FLAG))
    });
    std::iter::once(own)
        .chain(prefill)
        .filter(move |(_, dcp, _)| dsa && *dcp > 1)
        .map(|(fleet, _, hierarchical)| (fleet, hierarchical))
}

/// HYV4's first server in scope with decode context parallelism, as (its architecture, its DCP)
/// (0.5.20 on).
fn hyv4_dcp(c: &RuleInput<'_>) -> Option<(String, i32)> {
    (c.release >= v0_5(20) && HYV4.contains(&c.layout.architecture.as_str())).then_some(())?;
    pd_servers(c).find(|(_, _, dcp)| *dcp > 1).map(|(_, _, dcp)| (c.layout.architecture.clone(), dcp))
}

/// The architectures of the model hook's DeepSeek-family branch (`handle_model_specific_adjustments`)
/// with the first release of each, whose DSA branch refuses prefill CP on a PD decode server (CP6).
const MODEL_HOOK_DEEPSEEK_FAMILY: &[(&str, Release)] = &[
    ("DeepseekV3ForCausalLM", v0_5(17)),
    ("DeepseekV32ForCausalLM", v0_5(17)),
    ("KimiK25ForConditionalGeneration", v0_5(17)),
    ("MistralLarge3ForCausalLM", v0_5(17)),
    ("PixtralForConditionalGeneration", v0_5(17)),
    ("GlmMoeDsaForCausalLM", v0_5(17)),
    ("LongcatFlashForCausalLM", v0_5(17)),
    ("Dots3NoteForCausalLM", v0_5(19)),
    ("Glm5NextForConditionalGeneration", v0_5(20)),
    ("HYV4ForCausalLM", v0_5(20)),
    ("HYV4ForCausalLMNextN", v0_5(20)),
];

/// Whether the model takes the model hook's DSA branch: a DSA model of its DeepSeek family. The
/// family's override provider (`_deepseek_family_overrides`) is registered for the same DSA
/// architectures in each release, so its DSA prefill-CP asserts (CP9, CP10) read this too.
fn model_hook_dsa(c: &RuleInput<'_>) -> bool {
    c.layout.has(LayoutFeature::Dsa)
        && MODEL_HOOK_DEEPSEEK_FAMILY.iter().any(|(arch, since)| *arch == c.layout.architecture && *since <= c.release)
}

/// The KV cache dtype of the first server in scope whose dtype the model hook's DSA branch
/// refuses (`_dsa_kv_cache_dtype_default`, run on CUDA and ROCm GPUs): one other than `allowed`,
/// as given. SGLang decides `auto` from the GPU (fp8_e4m3 from Blackwell, bfloat16 before, and
/// bfloat16 with learnable sinks), always an allowed one.
fn dsa_kv_cache_dtype_refused<'a>(c: &'a RuleInput<'_>, allowed: &[&str]) -> Option<&'a str> {
    if !model_hook_dsa(c) {
        return None;
    }
    fleets_in_scope(c)
        .map(|fleet| kv_cache_dtype(fleet.kv_cache_dtype.as_deref()))
        .find(|dtype| !allowed.contains(dtype))
}

const DSA_CACHE_LAYER_SPLIT: &str = "--enable-dsa-cache-layer-split";
const DSA_CACHE_LAYER_SPLIT_FIELD: &str = "spec.decode.extraArgs[--enable-dsa-cache-layer-split]";

/// The servers in scope that split a DSA model's cache layers over their prefill CP ranks, where
/// the model hook's DSA branch checks them.
fn dsa_layer_split_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let dsa = model_hook_dsa(c);
    fleets_in_scope(c).filter(move |fleet| dsa && given(&fleet.extra_args, DSA_CACHE_LAYER_SPLIT))
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// From 0.5.22 the DeepSeek family's provider refuses DCP on a DSA model that pools its index
    /// keys (K6: `index_kpool` above 1, on CUDA), after DSA DCP's own checks (K1-K3; under PD, K2
    /// refuses first). kvpilot called such servers without PD valid.
    #[test]
    fn k6_dsa_pooled_index_keys_refuse_decode_context_parallelism() {
        let pooled = fixture("parity/deepseek-v3.2-index-kpool-2");
        assert_eq!(pooled.dsa_index_kpool, Some(2));
        assert_eq!(fixture("deepseek-v3.2-exp").dsa_index_kpool, Some(1));
        assert_eq!(full().dsa_index_kpool, None);
        let dcp = with(|s| s.decode_context_parallel = 2);
        let alone = |layout: &AttentionLayout, settings: &DisaggregationSpec, patch: u16| {
            let decode = FleetSpec::default();
            let input = PolicyInput::alone(settings, &decode, layout, v0_5(patch));
            evaluate_other_server(input, false).violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
        };
        assert_eq!(
            alone(&pooled, &dcp, 22),
            [(
                "K6",
                "--dcp-size > 1 is not supported for DSA with index_kpool=2: a pooled index key spans positions owned \
                 by different DCP ranks."
                    .to_string()
            )]
        );
        assert!(alone(&pooled, &dcp, 21).is_empty(), "0.5.22 on");
        assert!(alone(&pooled, &DisaggregationSpec::default(), 23).is_empty(), "no DCP");
        assert!(alone(&fixture("deepseek-v3.2-exp"), &dcp, 23).is_empty(), "one key per group");
        let service = rule_ids(run_at(v0_5(23), &dcp, &FleetSpec::default(), &pooled));
        assert_eq!(service.iter().filter(|r| r.starts_with('K')).collect::<Vec<_>>(), [&"K2", &"K6"], "K2 first");
    }

    /// The DeepSeek family's prefill-CP asserts, which kvpilot called valid before: a DSA model's
    /// interleave (or unset) strategy without DP up to 0.5.21 (CP9), DeepSeek-V4's strategy (CP11: up
    /// to 0.5.20 interleave only, then a strategy at all; CP12: zigzag needs an NPU from 0.5.21) and
    /// DP (CP13), and one machine's TP for both (CP10), in that order.
    #[test]
    fn cp9_to_cp13_deepseek_prefill_cp() {
        let all = ["CP9", "CP10", "CP11", "CP12", "CP13"];
        let rules = |layout: &AttentionLayout, fleet: &FleetSpec, patch: u16| {
            violations_of(&all, layout, fleet, patch).into_iter().map(|(rule, _)| rule).collect::<Vec<_>>()
        };
        let interleave = ["--enable-prefill-cp", "--cp-strategy", "interleave"];
        let zigzag = ["--enable-prefill-cp", "--cp-strategy", "zigzag"];
        let dsa = fixture("deepseek-v3.2-exp");
        assert!(rules(&dsa, &parallel_fleet(8, 1, false, &interleave), 23).is_empty());
        // The decode servers of a service are PD decode servers: the model hook's DSA branch
        // refuses prefill CP there before the family's asserts run on the prefill servers.
        assert_eq!(
            violations_of(&["CP6"], &dsa, &parallel_fleet(8, 1, false, &interleave), 23),
            [(
                "CP6",
                "CP is only supported for prefill when PD disaggregation, please remove --enable-prefill-cp.".into()
            )]
        );
        assert_eq!(rules(&dsa, &parallel_fleet(8, 2, true, &interleave), 21), ["CP9"]);
        assert!(rules(&dsa, &parallel_fleet(8, 2, true, &interleave), 22).is_empty(), "attention DP from 0.5.22");
        assert!(rules(&dsa, &parallel_fleet(8, 2, false, &zigzag), 21).is_empty(), "zigzag runs with DP");
        assert_eq!(rules(&dsa, &parallel_fleet(16, 2, false, &["--enable-prefill-cp"]), 17), ["CP9", "CP10"]);
        assert!(rules(&dsa, &parallel_fleet(16, 1, false, &[]), 23).is_empty(), "no prefill CP");
        assert!(rules(&full(), &parallel_fleet(16, 2, false, &interleave), 23).is_empty(), "not a DeepSeek model");

        let v4 = fixture("deepseek-v4");
        let message = |fleet: &FleetSpec, patch: u16| violations_of(&all, &v4, fleet, patch)[0].1.clone();
        assert!(rules(&v4, &parallel_fleet(8, 1, false, &interleave), 23).is_empty());
        let unset = parallel_fleet(8, 1, false, &["--enable-prefill-cp"]);
        assert_eq!(message(&unset, 20), "DeepSeekV4 only supports interleave CP strategy, got None");
        assert_eq!(message(&unset, 21), "DeepSeekV4 only supports interleave/zigzag CP strategy, got None");
        let zigzag_v4 = parallel_fleet(8, 1, false, &zigzag);
        assert_eq!(message(&zigzag_v4, 20), "DeepSeekV4 only supports interleave CP strategy, got zigzag");
        assert_eq!(rules(&v4, &zigzag_v4, 21), ["CP12"]);
        assert!(message(&zigzag_v4, 22).ends_with("CUDA/HIP backends reindex with interleave order."));
        assert_eq!(rules(&v4, &parallel_fleet(16, 2, true, &interleave), 23), ["CP13", "CP10"]);
        assert_eq!(rules(&v4, &parallel_fleet(4, 2, false, &interleave), 17), ["CP13"]);
    }

    /// DSA cache layer split (every release): refused on a model without DSA (LS0), on a PD decode
    /// server (LS1) and a server without PD (LS2), and on a DSA model's prefill server without
    /// interleaved prefill CP (LS3, in 0.5.20's words from then), off Mooncake (LS4) and with pipeline
    /// stages (LS5).
    #[test]
    fn ls_dsa_cache_layer_split() {
        let all = ["LS0", "LS1", "LS2", "LS3", "LS4", "LS5"];
        let split = ["--enable-dsa-cache-layer-split"];
        let interleaved = [&split[..], &["--enable-prefill-cp", "--cp-strategy", "interleave"]].concat();
        let dsa = fixture("deepseek-v3.2-exp");
        let plain = parallel_fleet(4, 1, false, &[]);
        let service = |settings: &DisaggregationSpec,
                       layout: &AttentionLayout,
                       decode: &FleetSpec,
                       prefill: &FleetSpec,
                       patch| {
            let input = PolicyInput::alone(settings, decode, layout, v0_5(patch)).with_prefill(Some(prefill));
            evaluate(input).violations.into_iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
        };
        let defaults = DisaggregationSpec::default();
        assert!(service(&defaults, &dsa, &plain, &parallel_fleet(4, 1, false, &interleaved), 23).is_empty());
        assert_eq!(service(&defaults, &full(), &plain, &parallel_fleet(4, 1, false, &interleaved), 17), ["LS0"]);
        assert_eq!(service(&defaults, &dsa, &parallel_fleet(4, 1, false, &interleaved), &plain, 23), ["LS1"]);
        assert_eq!(service(&defaults, &dsa, &plain, &parallel_fleet(4, 1, false, &split), 23), ["LS3"]);
        let zigzag =
            parallel_fleet(4, 1, false, &[&split[..], &["--enable-prefill-cp", "--cp-strategy", "zigzag"]].concat());
        assert_eq!(service(&defaults, &dsa, &plain, &zigzag, 23), ["LS3"]);
        let nixl = with(|s| s.transfer_backend = TransferBackend::Nixl);
        assert_eq!(service(&nixl, &dsa, &plain, &parallel_fleet(4, 1, false, &interleaved), 23), ["LS4"]);
        let staged = FleetSpec { pipeline_parallel: 2, ..parallel_fleet(4, 1, false, &interleaved) };
        assert_eq!(service(&defaults, &dsa, &plain, &staged, 23), ["LS5"]);
        let message = |patch| {
            let prefill = parallel_fleet(4, 1, false, &split);
            let input = PolicyInput::alone(&defaults, &plain, &dsa, v0_5(patch)).with_prefill(Some(&prefill));
            evaluate(input).violations.into_iter().find(|v| v.rule == "LS3").map(|v| v.message)
        };
        assert!(message(19).is_some_and(|m| m.ends_with("--nsa-prefill-cp-mode round-robin-split).")));
        assert_eq!(
            message(20).as_deref(),
            Some("--enable-dsa-cache-layer-split requires --enable-prefill-cp and --cp-strategy interleave.")
        );

        let alone = |fleet: &FleetSpec, prefill: bool| {
            let verdict = evaluate_other_server(PolicyInput::alone(&defaults, fleet, &dsa, v0_5(23)), prefill);
            verdict.violations.iter().map(|v| v.rule).filter(|rule| all.contains(rule)).collect::<Vec<_>>()
        };
        let interleaved_fleet = parallel_fleet(4, 1, false, &interleaved);
        assert!(alone(&interleaved_fleet, true).is_empty());
        assert_eq!(alone(&interleaved_fleet, false), ["LS2"]);
    }

    /// The DeepSeek family's model overrides: from 0.5.20 HYV4 refuses DCP and prefill CP (K4, K5);
    /// from 0.5.22 a DSA model with DCP refuses HiSparse and HiCache (K1), PD disaggregation (K2)
    /// and an EAGLE top-k other than 1 (K3).
    #[test]
    fn dsa_decode_context_parallelism_runs_without_pd_from_0_5_22() {
        let dsa = layout_at(json!({
            "architectures": ["DeepseekV32ForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512,
            "qk_rope_head_dim": 64, "index_topk": 2048
        }));
        assert!(dsa.has(LayoutFeature::Dsa));
        let dcp = |edit: fn(&mut DisaggregationSpec)| {
            with(|s| {
                s.decode_context_parallel = 2;
                edit(s);
            })
        };
        let fired = |patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
            let mut rules: Vec<_> = at(patch, settings, decode, layout)
                .violations
                .into_iter()
                .map(|v| v.rule)
                .filter(|r| r.starts_with('K'))
                .collect();
            rules.sort_unstable();
            rules
        };
        let plain = FleetSpec::default();
        assert!(fired(21, &dcp(|_| ()), &plain, &dsa).is_empty(), "0.5.21 runs DSA DCP under PD");
        assert_eq!(fired(22, &dcp(|_| ()), &plain, &dsa), ["K2"]);
        assert_eq!(fired(23, &dcp(|s| s.hierarchical_cache = true), &plain, &dsa), ["K1", "K2"]);
        let top_k_2 =
            FleetSpec { extra_args: vec!["--speculative-eagle-topk".into(), "2".into()], ..FleetSpec::default() };
        assert_eq!(fired(23, &dcp(|_| ()), &top_k_2, &dsa), ["K2", "K3"]);
        assert!(fired(23, &DisaggregationSpec::default(), &top_k_2, &dsa).is_empty(), "without DCP");
        assert!(fired(23, &dcp(|_| ()), &plain, &mla()).is_empty(), "DeepSeek-V3 has no DSA");

        // A server without PD runs DSA DCP (K2 is a PD server's rule).
        let settings = dcp(|_| ());
        let input = PolicyInput::of(&settings, &dsa, v0_5(23)).with_decode(&plain);
        let colocated: Vec<_> = evaluate_other_server(input, false).violations.into_iter().map(|v| v.rule).collect();
        assert!(!colocated.contains(&"K2"), "{colocated:?}");

        let hyv4 = layout_at(json!({
            "architectures": ["HYV4ForCausalLM"], "num_hidden_layers": 4, "kv_lora_rank": 512, "qk_rope_head_dim": 64
        }));
        assert!(fired(19, &dcp(|_| ()), &plain, &hyv4).is_empty());
        let k4 = at(20, &dcp(|_| ()), &plain, &hyv4).violations.into_iter().find(|v| v.rule == "K4").unwrap();
        assert!(k4.message.ends_with("Got architecture='HYV4ForCausalLM' and dcp_size=2."), "{}", k4.message);
        let prefill_cp = FleetSpec { extra_args: vec!["--enable-prefill-cp".into()], ..FleetSpec::default() };
        assert_eq!(fired(23, &DisaggregationSpec::default(), &prefill_cp, &hyv4), ["K5"]);
    }

    /// The model hook's DSA branch on a GPU: a DSA model runs a bfloat16 or fp8_e4m3 KV cache only
    /// (DT1, every release), and one with learnable attention sinks a bfloat16 one only (DT2, 0.5.20
    /// on; HunYuan V4's config class turns the sinks on by default and refuses them off). `auto` is
    /// always allowed: SGLang
    /// picks an allowed dtype from the GPU.
    #[test]
    fn dsa_models_refuse_other_kv_cache_dtypes_and_learnable_sinks_need_bfloat16() {
        let fired = |patch: u16, dtype: Option<&str>, layout: &AttentionLayout| {
            let decode = FleetSpec { kv_cache_dtype: dtype.map(str::to_string), ..FleetSpec::default() };
            let verdict = at(patch, &DisaggregationSpec::default(), &decode, layout);
            verdict.violations.into_iter().map(|v| (v.rule, v.message)).collect::<Vec<_>>()
        };
        let dsa = fixture("deepseek-v3.2-exp");
        for dtype in [None, Some("auto"), Some("bf16"), Some("bfloat16"), Some("fp8_e4m3")] {
            assert!(fired(17, dtype, &dsa).is_empty(), "{dtype:?}");
        }
        let refused = [("DT1", "DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype".to_string())];
        assert_eq!(fired(17, Some("fp8_e5m2"), &dsa), refused);
        assert_eq!(fired(23, Some("mxfp8"), &dsa), refused);
        assert!(fired(23, Some("fp8_e5m2"), &mla()).is_empty(), "MLA without a DSA indexer");

        let hyv4 = fixture("parity/hy-v4");
        assert!(hyv4.has(LayoutFeature::LearnableAttentionSinks), "the config class's default");
        assert_eq!(
            fired(20, Some("fp8_e4m3"), &hyv4),
            [(
                "DT2",
                "Learnable DSA attention sinks require a bfloat16 KV cache; got kv_cache_dtype=fp8_e4m3.".to_string()
            )]
        );
        assert_eq!(
            fired(23, Some("fp8_e5m2"), &hyv4).iter().map(|(rule, _)| *rule).collect::<Vec<_>>(),
            ["DT2", "DT1"]
        );
        assert!(fired(23, Some("bf16"), &hyv4).is_empty());
        let sinks = fixture("parity/deepseek-v3.2-learnable-sink");
        assert!(sinks.has(LayoutFeature::LearnableAttentionSinks));
        assert!(fired(19, Some("fp8_e4m3"), &sinks).is_empty(), "no sink check before 0.5.20");
        assert_eq!(fired(20, Some("fp8_e4m3"), &sinks).iter().map(|(rule, _)| *rule).collect::<Vec<_>>(), ["DT2"]);
    }
}
