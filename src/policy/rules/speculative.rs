//! Speculative decoding: the speculative hook (`arg_groups/speculative_hook.py`), which resolves the
//! algorithm's name and dispatches it to `SpeculativeAlgorithm.handle_server_args`, and the DFLASH and
//! DSPARK handlers' checks.

use super::predicates::{
    ATTENTION_CP_FIELD, DECODE_DP_ATTENTION, DECODE_PIPELINE, DP_LM_HEAD, DP_LM_HEAD_FIELD, RAGGED_VERIFY_ENV,
    SPECULATIVE_ALGORITHM, SPECULATIVE_DRAFT_MODEL, attention_cp_size, fleets_in_scope, gemma4_assistant_draft,
    moe_a2a_backend, multi_layer_eagle, resolved_speculative_algorithm, runs_dp_attention, speculating_pipeline_stages,
    speculative_algorithm,
};
use super::{EVERY_SERVER, Fix, NOT_PREFILL, Rule, RuleInput, text, text_from, when, when_with};
use crate::api::FleetSpec;
use crate::policy::argv::{given, number_option};
use crate::release::{Release, Span, v0_5};

pub(super) const SD1: Rule = Rule {
    id: "SD1",
    about: "unknown speculative algorithm",
    reproduces: "SpeculativeAlgorithm.from_string, srt/speculative/spec_info.py (0.5.17–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    roles: EVERY_SERVER,
    messages: &[text("Unknown speculative algorithm name: {name}")],
    changes: &[text_from(20, "UNO is an algorithm")],
    check: |c| {
        let name = speculative_algorithm(c)?;
        when_with(!known_speculative_algorithm(&name, c.release), vec![("name", name)])
    },
    fix: Fix::Manual {
        hint: "use one of SGLang's algorithms: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, \
               FROZEN_KV_MTP, or UNO from 0.5.20",
    },
    ..Rule::DEFAULT
};

pub(super) const SD2: Rule = Rule {
    id: "SD2",
    about: "DFLASH without a draft model",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: SPECULATIVE_DRAFT_MODEL,
    roles: EVERY_SERVER,
    messages: &[text("DFLASH speculative decoding requires setting --speculative-draft-model-path.")],
    check: |c| when(speculative_algorithm(c)? == "DFLASH" && c.settings.speculative_draft_model.is_none()),
    fix: Fix::Manual { hint: "set {spec.disaggregation.speculativeDraftModel} to the DFLASH draft checkpoint" },
    ..Rule::DEFAULT
};

pub(super) const SD3: Rule = Rule {
    id: "SD3",
    about: "DFLASH with pipeline parallelism",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: DECODE_PIPELINE,
    roles: EVERY_SERVER,
    messages: &[text("Currently DFLASH speculative decoding only supports pp_size == 1.")],
    check: |c| when(speculative_algorithm(c)? == "DFLASH" && speculating_pipeline_stages(c) != 1),
    fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets, or use another speculativeAlgorithm" },
    ..Rule::DEFAULT
};

pub(super) const SD4: Rule = Rule {
    id: "SD4",
    about: "UNO with a draft model",
    reproduces: "_handle_uno, srt/arg_groups/speculative_hook.py (0.5.20–0.5.23)",
    field: SPECULATIVE_DRAFT_MODEL,
    span: Span::since(v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text("UNO reuses the target model and does not accept --speculative-draft-model-path.")],
    check: |c| when(speculative_algorithm(c)? == "UNO" && c.settings.speculative_draft_model.is_some()),
    fix: Fix::Manual { hint: "unset {spec.disaggregation.speculativeDraftModel}: UNO drafts with the model itself" },
    ..Rule::DEFAULT
};

pub(super) const SD5: Rule = Rule {
    id: "SD5",
    about: "EAGLE3 with a Gemma-4 assistant draft",
    reproduces: "_resolve_speculative_algorithm_alias, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    roles: EVERY_SERVER,
    messages: &[text(
        "Gemma4AssistantForCausalLM draft requires --speculative-algorithm NEXTN or EAGLE; EAGLE3 is not \
         supported for this draft architecture.",
    )],
    check: |c| when(speculative_algorithm(c)? == "EAGLE3" && gemma4_assistant_draft(c)),
    fix: Fix::Manual {
        hint: "set speculativeAlgorithm to EAGLE or NEXTN for a Gemma-4 assistant draft (SGLang runs it as \
               FROZEN_KV_MTP), or use an EAGLE3 draft model",
    },
    ..Rule::DEFAULT
};

pub(super) const SD6: Rule = Rule {
    id: "SD6",
    about: "DSPARK with pipeline stages off a PD prefill server",
    reproduces: "_handle_dspark, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: DECODE_PIPELINE,
    span: Span::since(v0_5(21)),
    roles: NOT_PREFILL,
    messages: &[text(
        "DSpark pipeline parallelism requires PD prefill; decode and non-disaggregated serving require pp_size \
         == 1.",
    )],
    check: |c| when(resolved_speculative_algorithm(c)? == "DSPARK" && c.decode.pipeline_parallel > 1),
    fix: Fix::Manual {
        hint: "set the decode pipelineParallel to 1 (DSPARK runs pipeline stages on PD prefill servers only), or \
               use another speculativeAlgorithm",
    },
    ..Rule::DEFAULT
};

pub(super) const SD7: Rule = Rule {
    id: "SD7",
    about: "STANDALONE with DP attention",
    reproduces: "_handle_eagle_family, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: DECODE_DP_ATTENTION,
    roles: EVERY_SERVER,
    messages: &[text("Currently standalone speculative decoding does not support dp attention.")],
    check: |c| {
        when(
            resolved_speculative_algorithm(c)? == "STANDALONE"
                && fleets_in_scope(c).any(|fleet| runs_dp_attention(c, fleet)),
        )
    },
    fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets, or use another speculativeAlgorithm" },
    ..Rule::DEFAULT
};

pub(super) const SD8: Rule = Rule {
    id: "SD8",
    about: "NGRAM with DP attention",
    reproduces: "_handle_ngram, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: DECODE_DP_ATTENTION,
    roles: EVERY_SERVER,
    messages: &[text("Currently ngram speculative decoding does not support dp attention.")],
    check: |c| {
        when(
            resolved_speculative_algorithm(c)? == "NGRAM"
                && fleets_in_scope(c).any(|fleet| runs_dp_attention(c, fleet)),
        )
    },
    fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets, or use another speculativeAlgorithm" },
    ..Rule::DEFAULT
};

pub(super) const SD9: Rule = Rule {
    id: "SD9",
    about: "DSPARK with pipeline stages",
    reproduces: "_handle_dspark, srt/arg_groups/speculative_hook.py (0.5.17–0.5.20)",
    field: DECODE_PIPELINE,
    span: Span::between(v0_5(17), v0_5(20)),
    roles: EVERY_SERVER,
    messages: &[text("Currently DSpark speculative decoding only supports pp_size == 1.")],
    check: |c| when(resolved_speculative_algorithm(c)? == "DSPARK" && speculating_pipeline_stages(c) != 1),
    fix: Fix::Manual {
        hint: "set pipelineParallel to 1 on both fleets (from SGLang 0.5.21 DSPARK runs pipeline stages on PD \
               prefill servers), or use another speculativeAlgorithm",
    },
    ..Rule::DEFAULT
};

pub(super) const SD10: Rule = Rule {
    id: "SD10",
    about: "DFLASH with DP attention",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: DECODE_DP_ATTENTION,
    roles: EVERY_SERVER,
    messages: &[
        text("Currently DFLASH speculative decoding does not support dp attention."),
        text_from(20, "Currently DFLASH speculative decoding does not support dp attention on non-NPU devices."),
        text_from(23, "DFLASH with dp attention requires --enable-dp-lm-head."),
    ],
    changes: &[text_from(23, "allowed with --enable-dp-lm-head (SD11, SD12 check further)")],
    check: |c| {
        when(
            resolved_speculative_algorithm(c)? == "DFLASH"
                && fleets_in_scope(c).any(|fleet| {
                    runs_dp_attention(c, fleet) && (c.release < v0_5(23) || !given(&fleet.extra_args, DP_LM_HEAD))
                }),
        )
    },
    fix: Fix::Manual {
        hint: "turn DP attention off on the fleets that speculate, or use another speculativeAlgorithm (from \
               SGLang 0.5.23: or add --enable-dp-lm-head to their extraArgs)",
    },
    ..Rule::DEFAULT
};

pub(super) const SD11: Rule = Rule {
    id: "SD11",
    about: "DFLASH with DP attention × attention CP",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.23)",
    field: ATTENTION_CP_FIELD,
    span: Span::since(v0_5(23)),
    roles: EVERY_SERVER,
    messages: &[text("DFLASH with dp attention does not support context parallel.")],
    check: |c| {
        when(
            resolved_speculative_algorithm(c)? == "DFLASH"
                && dp_lm_head_fleets(c, runs_dp_attention).any(|f| attention_cp_size(&f.extra_args) != Some(1)),
        )
    },
    fix: Fix::Manual { hint: "drop --attn-cp-size from extraArgs, or turn DP attention off" },
    ..Rule::DEFAULT
};

pub(super) const SD12: Rule = Rule {
    id: "SD12",
    about: "DFLASH with DP attention × DP speculative prefill coordination",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.23)",
    field: "spec.decode.env[SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION]",
    span: Span::since(v0_5(23)),
    roles: EVERY_SERVER,
    messages: &[text("DFLASH with dp attention requires SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION=0.")],
    check: |c| {
        when(
            resolved_speculative_algorithm(c)? == "DFLASH"
                && dp_lm_head_fleets(c, runs_dp_attention).any(|fleet| {
                    attention_cp_size(&fleet.extra_args) == Some(1) && fleet.env_on(DP_SPEC_PREFILL_COORDINATION)
                }),
        )
    },
    fix: Fix::Manual { hint: "unset SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION (or set it to 0)" },
    ..Rule::DEFAULT
};

pub(super) const SD13: Rule = Rule {
    id: "SD13",
    about: "DSPARK with DP attention needs the DP LM head",
    reproduces: "_handle_dspark, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: DP_LM_HEAD_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("DSpark with dp attention requires --enable-dp-lm-head.")],
    changes: &[text_from(18, "DP attention with one DP group passes")],
    check: |c| {
        when(
            resolved_speculative_algorithm(c)? == "DSPARK"
                && fleets_in_scope(c)
                    .any(|fleet| dspark_dp_attention(c, fleet) && !given(&fleet.extra_args, DP_LM_HEAD)),
        )
    },
    fix: Fix::Manual {
        hint: "add --enable-dp-lm-head to the extraArgs of the fleets that run DP attention, or turn DP attention off",
    },
    ..Rule::DEFAULT
};

pub(super) const SD15: Rule = Rule {
    id: "SD15",
    about: "DSPARK with DP attention × the MoE all-to-all backend",
    reproduces: "_handle_dspark, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: MOE_A2A_FIELD,
    roles: EVERY_SERVER,
    messages: &[
        text("DSpark with dp attention only supports the built-in TP MoE (moe_a2a_backend='none'), got {backend}."),
        text_from(
            18,
            "DSpark with dp attention supports moe_a2a_backend 'none' (built-in TP MoE) or 'megamoe', got {backend}.",
        ),
        text_from(
            21,
            "DSpark with dp attention supports moe_a2a_backend 'none' (built-in TP MoE), 'megamoe', or 'mori', got \
             {backend}.",
        ),
    ],
    check: |c| {
        (resolved_speculative_algorithm(c)? == "DSPARK").then_some(())?;
        let allowed = dspark_dp_moe_backends(c.release);
        let backend = dp_lm_head_fleets(c, dspark_dp_attention)
            .map(|fleet| moe_a2a_backend(&fleet.extra_args))
            .find(|backend| !allowed.contains(backend))?;
        when_with(true, vec![("backend", format!("'{backend}'"))])
    },
    fix: Fix::Manual {
        hint: "drop --moe-a2a-backend from extraArgs (the built-in TP MoE), or pass one DSpark takes with DP \
               attention (megamoe from SGLang 0.5.18, mori from 0.5.21)",
    },
    ..Rule::DEFAULT
};

pub(super) const SD16: Rule = Rule {
    id: "SD16",
    about: "DSPARK with DP attention × ragged verification",
    reproduces: "_handle_dspark, srt/arg_groups/speculative_hook.py (0.5.18–0.5.23)",
    field: "spec.decode.env[SGLANG_RAGGED_VERIFY_MODE]",
    span: Span::since(v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[
        text("DSpark with dp attention + moe_a2a_backend={backend} requires SGLANG_RAGGED_VERIFY_MODE=static."),
        text_from(22, "DSpark DP MoE or prefill coordination requires SGLANG_RAGGED_VERIFY_MODE=static."),
    ],
    changes: &[text_from(22, "also with SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION on")],
    check: |c| {
        (resolved_speculative_algorithm(c)? == "DSPARK").then_some(())?;
        let allowed = dspark_dp_moe_backends(c.release);
        let backend = dp_lm_head_fleets(c, dspark_dp_attention).find_map(|fleet| {
            let backend = moe_a2a_backend(&fleet.extra_args);
            let coordinated = c.release >= v0_5(22) && fleet.env_on(DP_SPEC_PREFILL_COORDINATION);
            let ragged = matches!(fleet.env_value(RAGGED_VERIFY_ENV), Some("compact" | "cap-accept"));
            (allowed.contains(&backend) && (backend != "none" || coordinated) && ragged).then_some(backend)
        })?;
        when_with(true, vec![("backend", format!("'{backend}'"))])
    },
    fix: Fix::Manual { hint: "set SGLANG_RAGGED_VERIFY_MODE to static (the default) in the fleet's env" },
    ..Rule::DEFAULT
};

pub(super) const SD14: Rule = Rule {
    id: "SD14",
    about: "DSPARK with DP attention × attention CP",
    reproduces: "_handle_dspark, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: ATTENTION_CP_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("DSpark with dp attention does not support context parallel (attn_cp_size={size}).")],
    check: |c| {
        (resolved_speculative_algorithm(c)? == "DSPARK").then_some(())?;
        let size = dp_lm_head_fleets(c, dspark_dp_attention)
            .find_map(|fleet| attention_cp_size(&fleet.extra_args).filter(|&size| size > 1))?;
        when_with(true, vec![("size", size.to_string())])
    },
    fix: Fix::Manual { hint: "drop --attn-cp-size from extraArgs, or turn DP attention off" },
    ..Rule::DEFAULT
};

pub(super) const SD17: Rule = Rule {
    id: "SD17",
    about: "DP speculative prefill coordination without single-layer EAGLE",
    reproduces: "handle_speculative_decoding, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: "spec.decode.env[SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION]",
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[
        text_from(21, "DP spec/prefill coordination requires single-layer EAGLE or EAGLE3"),
        text_from(22, "DP spec/prefill coordination requires single-layer EAGLE, EAGLE3 or DSPARK"),
    ],
    changes: &[text_from(22, "DSPARK allowed")],
    // The speculative hook checks the algorithm as it resolved it (NEXTN is EAGLE), on every
    // server whose env turns the coordination on, speculating or not.
    check: |c| {
        let algorithm = resolved_speculative_algorithm(c);
        let allowed = matches!(algorithm.as_deref(), Some("EAGLE" | "EAGLE3"))
            || (c.release >= v0_5(22) && algorithm.as_deref() == Some("DSPARK"));
        when(fleets_in_scope(c).any(|fleet| {
            fleet.env_on(DP_SPEC_PREFILL_COORDINATION) && (!allowed || multi_layer_eagle(c, &fleet.extra_args))
        }))
    },
    fix: Fix::Manual {
        hint: "unset SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION (or set it to 0), or speculate with single-layer \
               EAGLE or EAGLE3 (DSPARK too from SGLang 0.5.22)",
    },
    ..Rule::DEFAULT
};

pub(super) const DB1: Rule = Rule {
    id: "DB1",
    about: "a DFLASH block size that is not positive",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: DFLASH_BLOCK_SIZE_FIELD,
    roles: EVERY_SERVER,
    messages: &[text("DFLASH requires --speculative-dflash-block-size to be positive, got {size}.")],
    check: |c| {
        let size = dflash_sizes(c).find_map(|(size, _, _)| size.filter(|size| *size <= 0))?;
        when_with(true, vec![("size", size.to_string())])
    },
    fix: Fix::Manual { hint: "set --speculative-dflash-block-size to a positive verify window, or drop it" },
    ..Rule::DEFAULT
};

pub(super) const DB2: Rule = Rule {
    id: "DB2",
    about: "DFLASH draft tokens other than its block size",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: DFLASH_BLOCK_SIZE_FIELD,
    roles: EVERY_SERVER,
    messages: &[text(
        "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. For \
         DFLASH they must match. speculative_num_draft_tokens={tokens}, speculative_dflash_block_size={size}.",
    )],
    check: |c| {
        let (size, tokens) = dflash_sizes(c).find_map(|(size, tokens, _)| {
            let (size, tokens) = (size?, tokens?);
            (size > 0 && size != tokens).then_some((size, tokens))
        })?;
        when_with(true, vec![("tokens", tokens.to_string()), ("size", size.to_string())])
    },
    fix: Fix::Manual {
        hint: "give one of --speculative-num-draft-tokens and --speculative-dflash-block-size, or the same value \
               to both",
    },
    ..Rule::DEFAULT
};

pub(super) const DB3: Rule = Rule {
    id: "DB3",
    about: "a DFLASH draft window narrower than its block",
    reproduces: "_handle_dflash, srt/arg_groups/speculative_hook.py (0.5.17–0.5.23)",
    field: "spec.decode.extraArgs[--speculative-draft-window-size]",
    roles: EVERY_SERVER,
    messages: &[text(
        "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). \
         window_size={window}, block_size={block}.",
    )],
    // The block is the block size as given, else the draft tokens as given; SGLang reads one
    // from the draft's config.json otherwise (or takes 16), which kvpilot leaves to it.
    check: |c| {
        let (window, block) = dflash_sizes(c).find_map(|(size, tokens, window)| {
            let (window, block) = (window?, size.or(tokens)?);
            (window < block).then_some((window, block))
        })?;
        when_with(true, vec![("window", window.to_string()), ("block", block.to_string())])
    },
    fix: Fix::Manual { hint: "set --speculative-draft-window-size to at least the DFLASH block size, or drop it" },
    ..Rule::DEFAULT
};

/// The names `--speculative-algorithm` takes in `release`, as its speculative hook reads them
/// (upper-cased): the `SpeculativeAlgorithm` members, and NEXTN, which the hook turns into EAGLE.
/// Plugin-registered algorithms are not known here.
fn known_speculative_algorithm(name: &str, release: Release) -> bool {
    const ALWAYS: &[&str] =
        &["DFLASH", "DSPARK", "EAGLE", "EAGLE3", "FROZEN_KV_MTP", "STANDALONE", "NGRAM", "NONE", "NEXTN"];
    let name = name.to_uppercase();
    ALWAYS.contains(&name.as_str()) || (name == "UNO" && release >= v0_5(20))
}

const DFLASH_BLOCK_SIZE_FIELD: &str = "spec.decode.extraArgs[--speculative-dflash-block-size]";

/// The DFLASH handler's sizes on the servers in scope, as given (kvpilot keeps no setting for
/// them): (block size, draft tokens, draft window), each None where unset; none where the
/// resolved algorithm is not DFLASH.
fn dflash_sizes<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = (Option<i64>, Option<i64>, Option<i64>)> + 'a {
    let dflash = resolved_speculative_algorithm(c).as_deref() == Some("DFLASH");
    fleets_in_scope(c).filter(move |_| dflash).map(|fleet| {
        let args = &fleet.extra_args;
        (
            number_option(args, &["--speculative-dflash-block-size"]),
            number_option(args, &["--speculative-num-draft-tokens"]),
            number_option(args, &["--speculative-draft-window-size"]),
        )
    })
}

const DP_SPEC_PREFILL_COORDINATION: &str = "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION";

/// The fleets in scope that run DP attention, as `dp_attention` says the handler reads it, with
/// the DP LM head, which the DFLASH (SD11, SD12) and DSPARK (SD14-SD16) handlers check further.
fn dp_lm_head_fleets<'a>(
    c: &'a RuleInput<'_>,
    dp_attention: fn(&RuleInput<'_>, &FleetSpec) -> bool,
) -> impl Iterator<Item = &'a FleetSpec> {
    fleets_in_scope(c).filter(move |fleet| dp_attention(c, fleet) && given(&fleet.extra_args, DP_LM_HEAD))
}

const MOE_A2A_FIELD: &str = "spec.decode.extraArgs[--moe-a2a-backend]";

/// The MoE all-to-all backends the DSPARK handler takes with DP attention in `release`.
fn dspark_dp_moe_backends(release: Release) -> &'static [&'static str] {
    if release < v0_5(18) {
        &["none"]
    } else if release < v0_5(21) {
        &["none", "megamoe"]
    } else {
        &["none", "megamoe", "mori"]
    }
}

/// Whether the DSPARK handler takes a fleet's servers to run DP attention: the flag as given in
/// 0.5.17; from 0.5.18 with more than one DP group (which `--dp-size N --enable-dp-attention`
/// becomes from 0.5.22).
fn dspark_dp_attention(c: &RuleInput<'_>, fleet: &FleetSpec) -> bool {
    fleet.enable_dp_attention && (c.release < v0_5(18) || fleet.data_parallel > 1)
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// The DFLASH handler's sizes (every release): a block size that is not positive (DB1), draft
    /// tokens other than the block size (DB2) and a draft window narrower than the block as given
    /// (DB3); other algorithms are not checked.
    #[test]
    fn db_dflash_block_size() {
        let fired = |algorithm: &str, args: &[&str]| {
            let settings = with(|s| s.speculative_algorithm = Some(algorithm.into()));
            let verdict = run_at(v0_5(23), &settings, &parallel_fleet(1, 1, false, args), &full());
            verdict
                .violations
                .into_iter()
                .filter(|v| v.rule.starts_with("DB"))
                .map(|v| (v.rule, v.message))
                .collect::<Vec<_>>()
        };
        let block = "--speculative-dflash-block-size";
        let tokens = "--speculative-num-draft-tokens";
        let window = "--speculative-draft-window-size";
        assert_eq!(
            fired("DFLASH", &[block, "0"]),
            [("DB1", "DFLASH requires --speculative-dflash-block-size to be positive, got 0.".to_string())]
        );
        assert_eq!(fired("DFLASH", &[block, "8", tokens, "4"])[0].0, "DB2");
        assert!(fired("DFLASH", &[block, "8", tokens, "8", window, "8"]).is_empty());
        assert_eq!(
            fired("DFLASH", &[tokens, "8", window, "4"]),
            [(
                "DB3",
                "--speculative-draft-window-size must be >= --speculative-num-draft-tokens (block_size). window_size=4, \
                 block_size=8."
                    .to_string()
            )]
        );
        assert!(fired("DFLASH", &[window, "4"]).is_empty(), "the block comes from the draft's config");
        assert!(fired("EAGLE", &[block, "0", tokens, "4", window, "2"]).is_empty());
    }

    /// From 0.5.21 SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION asks for single-layer EAGLE or EAGLE3
    /// (DSPARK too from 0.5.22), as the speculative hook resolved the algorithm, on every server that
    /// sets it, speculating or not (SD17).
    #[test]
    fn sd17_dp_speculative_prefill_coordination_needs_single_layer_eagle() {
        let coordinated = |args: &[&str]| FleetSpec {
            env: vec![EnvVar {
                name: "SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION".into(),
                value: Some("1".into()),
                value_from: None,
            }],
            ..parallel_fleet(1, 1, false, args)
        };
        let fired = |algorithm: Option<&str>, fleet: &FleetSpec, patch| {
            let settings = with(|s| s.speculative_algorithm = algorithm.map(str::to_string));
            run_at(v0_5(patch), &settings, fleet, &full()).violations.iter().any(|v| v.rule == "SD17")
        };
        let plain = coordinated(&[]);
        assert!(fired(None, &plain, 21), "no speculative decoding");
        assert!(!fired(Some("nextn"), &plain, 21), "NEXTN is EAGLE");
        assert!(fired(Some("EAGLE"), &coordinated(&["--enable-multi-layer-eagle"]), 23));
        assert!(fired(Some("DSPARK"), &plain, 21) && !fired(Some("DSPARK"), &plain, 22));
        assert!(!fired(None, &plain, 20));
        assert!(!fired(None, &parallel_fleet(1, 1, false, &[]), 23), "the env unset");
    }

    /// SGLang's speculative hook runs EAGLE and NEXTN with a Gemma-4 assistant draft as FROZEN_KV_MTP,
    /// whose worker has no draft runners to back up, and refuses EAGLE3 with it, in every release.
    #[test]
    fn a_gemma4_assistant_draft_runs_as_frozen_kv_mtp_and_refuses_eagle3() {
        let assistant: serde_json::Value =
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/parity/gemma-4-assistant.json"))
                .unwrap();
        let assistant = layout_at(assistant);
        assert!(assistant.has(LayoutFeature::NoNextnLayers));
        let settings = |algorithm: &str| {
            let algorithm = algorithm.to_string();
            with(move |s| {
                s.retraction_backup = Some(RetractionBackup::CpuTensor);
                s.hierarchical_cache = true;
                s.unified_cache_external_linker = true;
                s.speculative_algorithm = Some(algorithm);
            })
        };
        let rules = |algorithm: &str, draft: &AttentionLayout, patch: u16| {
            let violations = at_with_draft(patch, &settings(algorithm), &full(), Some(draft)).violations;
            let mut rules: Vec<_> =
                violations.into_iter().map(|v| v.rule).filter(|r| ["N6", "X4", "X5", "SD5"].contains(r)).collect();
            rules.sort_unstable();
            rules
        };
        for patch in 17..=23 {
            for algorithm in ["EAGLE", "nextn"] {
                assert!(rules(algorithm, &assistant, patch).is_empty(), "{algorithm} 0.5.{patch}");
            }
            assert!(rules("EAGLE3", &assistant, patch).contains(&"SD5"), "0.5.{patch}");
        }
        // A Llama draft without NextN layers backs up through a sidecar under the same settings.
        assert_eq!(rules("EAGLE", &full(), 21), ["N6", "X4"]);
        let sd5 = at_with_draft(23, &settings("eagle3"), &full(), Some(&assistant))
            .violations
            .into_iter()
            .find(|v| v.rule == "SD5")
            .unwrap();
        assert_eq!(
            sd5.message,
            "Gemma4AssistantForCausalLM draft requires --speculative-algorithm NEXTN or EAGLE; EAGLE3 is not supported \
             for this draft architecture."
        );
    }

    #[test]
    fn sd1_to_sd4_read_the_speculative_algorithm_as_the_hook_does() {
        let algorithm = |name: &str| with(|s| s.speculative_algorithm = Some(name.into()));
        let sd1 = |name: &str| format!("Unknown speculative algorithm name: {name}");
        assert_eq!(messages("SD1", &algorithm("eagle3"), &FleetSpec::default(), &full()), vec![None; 7]);
        assert_eq!(messages("SD1", &algorithm("nextn"), &FleetSpec::default(), &full()), vec![None; 7]);
        assert_eq!(messages("SD1", &algorithm("uno"), &FleetSpec::default(), &full()), on(17..=19, &sd1("UNO")));
        assert_eq!(messages("SD1", &algorithm("medusa"), &FleetSpec::default(), &full()), on(17..=23, &sd1("MEDUSA")));

        let dflash = algorithm("dflash");
        let sd2 = "DFLASH speculative decoding requires setting --speculative-draft-model-path.";
        assert_eq!(messages("SD2", &dflash, &FleetSpec::default(), &full()), on(17..=23, sd2));
        let draft = crate::api::DraftModelSpec {
            name: "acme/dflash".into(),
            revision: None,
            path: None,
            config: crate::api::ModelConfigSource::default(),
        };
        let with_draft = DisaggregationSpec { speculative_draft_model: Some(draft.clone()), ..dflash.clone() };
        assert_eq!(messages("SD2", &with_draft, &FleetSpec::default(), &full()), vec![None; 7]);
        let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
        let sd3 = "Currently DFLASH speculative decoding only supports pp_size == 1.";
        assert_eq!(messages("SD3", &with_draft, &stages, &full()), on(17..=23, sd3));
        let uno = DisaggregationSpec { speculative_draft_model: Some(draft), ..algorithm("UNO") };
        let sd4 = "UNO reuses the target model and does not accept --speculative-draft-model-path.";
        assert_eq!(messages("SD4", &uno, &FleetSpec::default(), &full()), on(20..=23, sd4));
    }

    /// The speculative hook's parallelism checks: DSPARK runs pipeline stages on PD prefill servers
    /// only (SD6, 0.5.21 on); STANDALONE and NGRAM drafts refuse DP attention (SD7, SD8), which from
    /// 0.5.22 needs more than one attention-DP group.
    #[test]
    fn the_speculative_hook_refuses_dspark_stages_on_decode_and_dp_attention_for_standalone_and_ngram() {
        let fired = |patch: u16, algorithm: &str, decode: &FleetSpec| {
            let mut rules: Vec<_> = at(patch, &speculating(algorithm), decode, &full())
                .violations
                .into_iter()
                .map(|v| v.rule)
                .filter(|r| ["SD6", "SD7", "SD8"].contains(r))
                .collect();
            rules.sort_unstable();
            rules
        };
        let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
        assert!(fired(20, "dspark", &stages).is_empty());
        assert_eq!(fired(21, "dspark", &stages), ["SD6"]);
        assert!(fired(23, "EAGLE", &stages).is_empty());
        let dp_attention =
            |groups: i32| FleetSpec { data_parallel: groups, enable_dp_attention: true, ..FleetSpec::default() };
        for patch in 17..=23 {
            assert_eq!(fired(patch, "standalone", &dp_attention(2)), ["SD7"], "0.5.{patch}");
            assert_eq!(fired(patch, "ngram", &dp_attention(2)), ["SD8"], "0.5.{patch}");
            assert!(fired(patch, "EAGLE", &dp_attention(2)).is_empty());
        }
        assert_eq!(fired(21, "NGRAM", &dp_attention(1)), ["SD8"], "the flag alone up to 0.5.21");
        assert!(fired(22, "NGRAM", &dp_attention(1)).is_empty(), "one attention-DP group from 0.5.22");

        // A PD prefill server runs DSPARK's pipeline stages; one without PD does not.
        let (settings, layout) = (speculating("DSPARK"), full());
        let input = PolicyInput::of(&settings, &layout, v0_5(23)).with_decode(&stages);
        let rules =
            |prefill| evaluate_other_server(input, prefill).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>();
        assert!(!rules(true).contains(&"SD6"));
        assert!(rules(false).contains(&"SD6"));
    }

    /// The DFLASH and DSPARK handlers' checks of DP attention and pipeline stages: DSPARK ran one
    /// stage only up to 0.5.20 (SD9); DFLASH refused DP attention up to 0.5.22 and from 0.5.23 needs
    /// the DP LM head, no attention CP and no DP speculative prefill coordination (SD10-SD12); DSPARK
    /// with DP attention needs the DP LM head, no attention CP, an all-to-all backend it takes and,
    /// with one, static ragged verification (SD13-SD16), from 0.5.18 only with more than one DP group.
    #[test]
    fn dflash_and_dspark_with_dp_attention_need_the_dp_lm_head() {
        let fired = |patch: u16, algorithm: &str, decode: &FleetSpec| {
            at(patch, &speculating(algorithm), decode, &full())
                .violations
                .into_iter()
                .filter(|v| ["SD9", "SD10", "SD11", "SD12", "SD13", "SD14", "SD15", "SD16", "PP1"].contains(&v.rule))
                .map(|v| (v.rule, v.message))
                .collect::<Vec<_>>()
        };
        let rules = |found: Vec<(&'static str, String)>| found.into_iter().map(|(rule, _)| rule).collect::<Vec<_>>();
        let stages = FleetSpec { pipeline_parallel: 2, ..FleetSpec::default() };
        assert_eq!(rules(fired(20, "DSPARK", &stages)), ["SD9"], "the handler's own check, not the validation's");
        assert!(rules(fired(21, "DSPARK", &stages)).is_empty(), "SD6 from 0.5.21");

        let dp_attention = |groups: i32, args: &[&str]| FleetSpec {
            tensor_parallel: 2,
            data_parallel: groups,
            enable_dp_attention: true,
            extra_args: args.iter().map(|a| a.to_string()).collect(),
            ..FleetSpec::default()
        };
        let text =
            |found: Vec<(&'static str, String)>| found.into_iter().map(|(_, message)| message).collect::<Vec<_>>();
        assert_eq!(
            text(fired(19, "DFLASH", &dp_attention(2, &["--enable-dp-lm-head"]))),
            ["Currently DFLASH speculative decoding does not support dp attention."]
        );
        assert_eq!(
            text(fired(22, "DFLASH", &dp_attention(2, &[]))),
            ["Currently DFLASH speculative decoding does not support dp attention on non-NPU devices."]
        );
        assert_eq!(rules(fired(23, "DFLASH", &dp_attention(2, &[]))), ["SD10"]);
        assert!(fired(23, "DFLASH", &dp_attention(2, &["--enable-dp-lm-head"])).is_empty());
        assert_eq!(
            rules(fired(23, "DFLASH", &dp_attention(2, &["--enable-dp-lm-head", "--attn-cp-size", "2"]))),
            ["SD11"]
        );
        let coordinated = FleetSpec {
            env: env_fleet("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION", "true").env,
            ..dp_attention(2, &["--enable-dp-lm-head"])
        };
        assert_eq!(rules(fired(23, "DFLASH", &coordinated)), ["SD12"]);

        assert_eq!(rules(fired(17, "DSPARK", &dp_attention(1, &[]))), ["SD13"], "the flag alone in 0.5.17");
        assert!(fired(18, "DSPARK", &dp_attention(1, &[])).is_empty(), "one DP group from 0.5.18");
        assert_eq!(rules(fired(23, "dspark", &dp_attention(2, &[]))), ["SD13"]);
        assert_eq!(
            text(fired(23, "DSPARK", &dp_attention(2, &["--enable-dp-lm-head", "--attn-cp-size=2"]))),
            ["DSpark with dp attention does not support context parallel (attn_cp_size=2)."]
        );

        // Its MoE all-to-all backends, per release, and the ragged verification they need.
        let mori = dp_attention(2, &["--enable-dp-lm-head", "--moe-a2a-backend", "mori"]);
        assert_eq!(
            text(fired(20, "DSPARK", &mori)),
            ["DSpark with dp attention supports moe_a2a_backend 'none' (built-in TP MoE) or 'megamoe', got 'mori'."]
        );
        assert!(fired(21, "DSPARK", &mori).is_empty());
        let compact =
            |fleet: FleetSpec| FleetSpec { env: env_fleet("SGLANG_RAGGED_VERIFY_MODE", "compact").env, ..fleet };
        assert_eq!(
            text(fired(21, "DSPARK", &compact(mori.clone()))),
            ["DSpark with dp attention + moe_a2a_backend='mori' requires SGLANG_RAGGED_VERIFY_MODE=static."]
        );
        assert!(
            fired(22, "DSPARK", &compact(dp_attention(2, &["--enable-dp-lm-head"]))).is_empty(),
            "the built-in MoE"
        );
        let coordinated_dspark = FleetSpec {
            env: [("SGLANG_RAGGED_VERIFY_MODE", "compact"), ("SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION", "1")]
                .map(|(name, value)| EnvVar { name: name.into(), value: Some(value.into()), value_from: None })
                .to_vec(),
            ..dp_attention(2, &["--enable-dp-lm-head"])
        };
        assert_eq!(rules(fired(22, "DSPARK", &coordinated_dspark)), ["SD16"]);
        assert_eq!(
            rules(fired(17, "DSPARK", &dp_attention(2, &["--enable-dp-lm-head", "--moe-a2a-backend=megamoe"]))),
            ["SD15"]
        );
    }
}
