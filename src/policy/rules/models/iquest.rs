//! IQuest Q1: its override provider (`arg_groups/model_overrides/iquest_q1.py`, 0.5.21 on) and the
//! speculative hook's `_handle_iquest_q1_mtp_draft`.

use crate::api::{AttentionLayout, MtpDraft};
use crate::policy::argv::{given, number_option, option_value};
use crate::policy::rules::predicates::{
    ATTENTION_BACKENDS, DECODE_CONTEXT_PARALLEL, DECODE_DP_ATTENTION, DECODE_PIPELINE, EAGLE_TOPK_FIELD, NUM_STEPS,
    PREFILL_CP, SPECULATIVE_ALGORITHM, SPECULATIVE_DRAFT_MODEL, eagle_topk, fleets_in_scope, pd_servers,
    provider_dp_attention, runs_attention_cp, speculative_algorithm,
};
use crate::policy::rules::{EVERY_SERVER, Fix, Rule, RuleInput, text, text_from, when};
use crate::release::{Span, v0_5};

pub(in crate::policy::rules) const IQ1: Rule = Rule {
    id: "IQ1",
    about: "IQuest Q1 needs FA3 attention",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: "spec.decode.extraArgs[--attention-backend]",
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text(
        "IQuestQ1 applies its attention sink from the softmax LSE and requires FA3 attention for both prefill and \
         decode.",
    )],
    check: |c| {
        when(
            iquest_q1(c)
                && fleets_in_scope(c)
                    .any(|fleet| ATTENTION_BACKENDS.iter().any(|option| not_fa3(&fleet.extra_args, option))),
        )
    },
    fix: Fix::Manual { hint: IQUEST_FA3_HINT },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ2: Rule = Rule {
    id: "IQ2",
    about: "IQuest Q1 drafts with EAGLE or NEXTN only",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: SPECULATIVE_ALGORITHM,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuest Q1 MTP requires serial EAGLE or NEXTN drafting.")],
    check: |c| when(iquest_q1(c) && !matches!(speculative_algorithm(c)?.as_str(), "EAGLE" | "NEXTN")),
    fix: Fix::Manual { hint: "set speculativeAlgorithm to EAGLE (or NEXTN), or unset it" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ3: Rule = Rule {
    id: "IQ3",
    about: "IQuest Q1's MTP draft needs FA3 attention",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: "spec.decode.extraArgs[--speculative-draft-attention-backend]",
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuestQ1 requires FA3 attention for the MTP draft.")],
    check: |c| {
        when(
            iquest_q1(c)
                && c.settings.speculative_algorithm.is_some()
                && fleets_in_scope(c).any(|fleet| not_fa3(&fleet.extra_args, "--speculative-draft-attention-backend")),
        )
    },
    fix: Fix::Manual { hint: "drop --speculative-draft-attention-backend from extraArgs, or set it to fa3" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ4: Rule = Rule {
    id: "IQ4",
    about: "IQuest Q1 × context parallelism",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: DECODE_CONTEXT_PARALLEL,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuestQ1 does not support context parallelism.")],
    check: |c| {
        when(
            iquest_q1(c)
                && pd_servers(c).any(|(fleet, _, dcp)| {
                    let args = &fleet.extra_args;
                    dcp > 1 || runs_attention_cp(fleet) || given(args, PREFILL_CP)
                }),
        )
    },
    fix: Fix::Manual {
        hint: "set decodeContextParallel to 1 and drop --attn-cp-size and --enable-prefill-cp from extraArgs",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ5: Rule = Rule {
    id: "IQ5",
    about: "IQuest Q1 drafts one token per step",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: EAGLE_TOPK_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuestQ1 speculative decoding requires --speculative-eagle-topk 1.")],
    check: |c| {
        when(iquest_q1(c) && fleets_in_scope(c).any(|fleet| eagle_topk(&fleet.extra_args).is_some_and(|topk| topk > 1)))
    },
    fix: Fix::Manual { hint: "set --speculative-eagle-topk 1 in extraArgs" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ6: Rule = Rule {
    id: "IQ6",
    about: "IQuest Q1 × multi-layer EAGLE",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: "spec.decode.extraArgs[--enable-multi-layer-eagle]",
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuest Q1 MTP drafting does not support multi-layer EAGLE.")],
    check: |c| {
        when(iquest_q1(c) && fleets_in_scope(c).any(|fleet| given(&fleet.extra_args, "--enable-multi-layer-eagle")))
    },
    fix: Fix::Manual { hint: "drop --enable-multi-layer-eagle from extraArgs" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ7: Rule = Rule {
    id: "IQ7",
    about: "IQuest Q1 × DP attention",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: DECODE_DP_ATTENTION,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuest Q1 does not support DP attention.")],
    changes: &[text_from(22, "DP attention counts from more than one attention-DP group")],
    check: |c| when(iquest_q1(c) && fleets_in_scope(c).any(|fleet| provider_dp_attention(c, fleet))),
    fix: Fix::Manual { hint: "turn enableDpAttention off on both fleets" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ8: Rule = Rule {
    id: "IQ8",
    about: "IQuest Q1 × pipeline stages",
    reproduces: "_iquest_q1_overrides, srt/arg_groups/model_overrides/iquest_q1.py (0.5.21–0.5.23)",
    field: DECODE_PIPELINE,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuest Q1 does not support pipeline parallelism.")],
    check: |c| when(iquest_q1(c) && fleets_in_scope(c).any(|fleet| fleet.pipeline_parallel > 1)),
    fix: Fix::Manual { hint: "set pipelineParallel to 1 on both fleets" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ9: Rule = Rule {
    id: "IQ9",
    about: "IQuest Q1 drafts with an MTP checkpoint of its own",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: SPECULATIVE_DRAFT_MODEL,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuest Q1 requires an independent draft model path.")],
    check: |c| {
        when(iquest_q1_mtp_drafting(c) && (c.settings.speculative_draft_model.is_none() || c.draft_is_the_model))
    },
    fix: Fix::Manual { hint: IQUEST_MTP_DRAFT_HINT },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ10: Rule = Rule {
    id: "IQ10",
    about: "IQuest Q1's draft is an IQuest Q1 MTP checkpoint",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: SPECULATIVE_DRAFT_MODEL,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("IQuest Q1 requires an independent MTP draft checkpoint.")],
    check: |c| {
        when(
            iquest_q1_mtp_drafting(c)
                && !c.draft_is_the_model
                && c.draft.is_some_and(|draft| draft.model_type.as_deref() != Some(IQUEST_MTP_MODEL_TYPE)),
        )
    },
    fix: Fix::Manual { hint: IQUEST_MTP_DRAFT_HINT },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ11: Rule = Rule {
    id: "IQ11",
    about: "IQuest Q1's MTP draft has the target's hidden and vocabulary sizes",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: SPECULATIVE_DRAFT_MODEL,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("MTP draft hidden size and vocabulary must match the target.")],
    check: |c| {
        let (draft, _) = iquest_q1_mtp_draft(c)?;
        let differs = |ours: Option<u64>, theirs: Option<u64>| ours.zip(theirs).is_some_and(|(a, b)| a != b);
        when(differs(draft.hidden_size, c.layout.hidden_size) || differs(draft.vocab_size, c.layout.vocab_size))
    },
    fix: Fix::Manual { hint: "use the MTP draft checkpoint trained for this model (same hidden_size and vocab_size)" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ12: Rule = Rule {
    id: "IQ12",
    about: "IQuest Q1's MTP draft was trained for the target's layer count",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: SPECULATIVE_DRAFT_MODEL,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("MTP draft target layer count must match the target.")],
    check: |c| {
        let (_, mtp) = iquest_q1_mtp_draft(c)?;
        when(mtp.target_layers != u64::from(c.layout.layers.total))
    },
    fix: Fix::Manual {
        hint: "use the MTP draft checkpoint trained for this model (its num_target_layers is the model's \
               num_hidden_layers)",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ13: Rule = Rule {
    id: "IQ13",
    about: "IQuest Q1's MTP draft × a speculative token map",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: "spec.decode.extraArgs[--speculative-token-map]",
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("MTP uses its own full-vocabulary embedding and head.")],
    check: |c| {
        when(
            iquest_q1_mtp_drafting(c)
                && fleets_in_scope(c).any(|fleet| option_value(&fleet.extra_args, TOKEN_MAP).is_some()),
        )
    },
    fix: Fix::Manual { hint: "drop --speculative-token-map from extraArgs" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ14: Rule = Rule {
    id: "IQ14",
    about: "IQuest Q1's MTP draft runs at least one step",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: NUM_STEPS_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("MTP requires positive speculative_num_steps.")],
    check: |c| {
        when(
            iquest_q1_mtp_drafting(c)
                && fleets_in_scope(c).any(|fleet| speculative_num_steps(&fleet.extra_args).is_some_and(|s| s < 1)),
        )
    },
    fix: Fix::Manual {
        hint: "set --speculative-num-steps to 1 or more in extraArgs, or drop it (the checkpoint's \
               num_draft_slots)",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ15: Rule = Rule {
    id: "IQ15",
    about: "IQuest Q1's MTP draft × a top-k below 1",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: EAGLE_TOPK_FIELD,
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("MTP requires --speculative-eagle-topk 1.")],
    // A top-k above 1 is refused before, by the override provider (IQ5).
    check: |c| {
        when(
            iquest_q1_mtp_drafting(c)
                && fleets_in_scope(c).any(|fleet| eagle_topk(&fleet.extra_args).is_some_and(|topk| topk < 1)),
        )
    },
    fix: Fix::Manual { hint: "set --speculative-eagle-topk 1 in extraArgs, or drop it" },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const IQ16: Rule = Rule {
    id: "IQ16",
    about: "IQuest Q1's MTP draft verifies its steps and one token",
    reproduces: "_handle_iquest_q1_mtp_draft, srt/arg_groups/speculative_hook.py (0.5.21–0.5.23)",
    field: "spec.decode.extraArgs[--speculative-num-draft-tokens]",
    span: Span::since(v0_5(21)),
    roles: EVERY_SERVER,
    messages: &[text("MTP verification width must equal draft steps + 1.")],
    check: |c| {
        if !iquest_q1_mtp_drafting(c) {
            return None;
        }
        let slots = iquest_q1_mtp_draft(c).map(|(_, mtp)| mtp.draft_slots);
        when(fleets_in_scope(c).any(|fleet| {
            let args = &fleet.extra_args;
            let steps = match option_value(args, NUM_STEPS) {
                Some(_) => speculative_num_steps(args),
                None => slots.and_then(|slots| i64::try_from(slots).ok()),
            };
            let tokens =
                option_value(args, "--speculative-num-draft-tokens").and_then(|t| t.trim().parse::<i64>().ok());
            matches!((steps, tokens), (Some(steps), Some(tokens)) if tokens != steps + 1)
        }))
    },
    fix: Fix::Manual {
        hint: "set --speculative-num-draft-tokens to --speculative-num-steps + 1 in extraArgs (the steps default \
               to the checkpoint's num_draft_slots), or drop it",
    },
    ..Rule::DEFAULT
};

/// The architectures SGLang's IQuest Q1 override provider is registered for
/// (`arg_groups/model_overrides/iquest_q1.py`, 0.5.21 on).
const IQUEST_Q1: &[&str] = &["IQuestQ1ForCausalLM", "IQuestQ1MTP"];

const IQUEST_FA3_HINT: &str = "drop --attention-backend, --prefill-attention-backend and --decode-attention-backend \
                               from extraArgs, or set them to fa3";

/// Whether the model is IQuest Q1.
fn iquest_q1(c: &RuleInput<'_>) -> bool {
    IQUEST_Q1.contains(&c.layout.architecture.as_str())
}

const IQUEST_MTP_MODEL_TYPE: &str = "iquest_q1_mtp";

const IQUEST_MTP_DRAFT_HINT: &str = "name IQuest Q1's MTP draft checkpoint (an iquest_q1_mtp config) as \
                                     speculativeDraftModel (--speculative-draft-model-path), apart from the model";

const NUM_STEPS_FIELD: &str = "spec.decode.extraArgs[--speculative-num-steps]";
const TOKEN_MAP: &str = "--speculative-token-map";

/// Whether IQuest Q1's MTP draft checks run (`_handle_iquest_q1_mtp_draft` in the speculative
/// hook's EAGLE family, 0.5.21 on): an IQuest Q1 target drafting with EAGLE or NEXTN, the
/// algorithms its override provider lets through (IQ2).
fn iquest_q1_mtp_drafting(c: &RuleInput<'_>) -> bool {
    c.layout.architecture == "IQuestQ1ForCausalLM"
        && matches!(speculative_algorithm(c).as_deref(), Some("EAGLE" | "NEXTN"))
}

/// IQuest Q1's MTP draft and its facts, where its config.json was read and is an MTP
/// checkpoint's (IQ9 and IQ10 pass).
fn iquest_q1_mtp_draft<'a>(c: &'a RuleInput<'_>) -> Option<(&'a AttentionLayout, MtpDraft)> {
    let draft = c.draft.filter(|_| iquest_q1_mtp_drafting(c) && !c.draft_is_the_model)?;
    Some((draft, draft.mtp_draft?))
}

/// A server's `--speculative-num-steps`, None when unset or not a number.
fn speculative_num_steps(args: &[String]) -> Option<i64> {
    number_option(args, &[NUM_STEPS])
}

/// Whether an attention backend option among a server's arguments is given as something other
/// than FA3 (the IQuest Q1 provider takes unset or `fa3`).
fn not_fa3(args: &[String], option: &str) -> bool {
    option_value(args, option).is_some_and(|backend| backend != "fa3")
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// IQuest Q1's MTP draft checks in the speculative hook (0.5.21 on): an EAGLE or NEXTN draft
    /// needs a draft model of its own (IQ9), an MTP checkpoint (IQ10) trained for the model (IQ11,
    /// IQ12), no token map (IQ13), at least one step (IQ14), a top-k of 1 (IQ15) and a verify width
    /// of the steps plus one, the steps defaulting to the checkpoint's draft slots (IQ16).
    #[test]
    fn iquest_q1_drafts_with_an_mtp_checkpoint_trained_for_it() {
        let target = fixture("parity/iquest-q1");
        let mtp = fixture("parity/iquest-q1-mtp");
        let eagle = |draft_named: bool| {
            with(|s| {
                s.speculative_algorithm = Some("nextn".into());
                s.speculative_draft_model = draft_named.then(|| crate::api::DraftModelSpec {
                    name: "iquest/q1-mtp".into(),
                    revision: None,
                    path: None,
                    config: crate::api::ModelConfigSource::default(),
                });
            })
        };
        let fired =
            |patch: u16, settings: &DisaggregationSpec, draft: Option<&AttentionLayout>, args: &[&str], own: bool| {
                let decode =
                    FleetSpec { extra_args: args.iter().map(|a| a.to_string()).collect(), ..FleetSpec::default() };
                let verdict = evaluate(
                    PolicyInput::of(settings, &target, v0_5(patch))
                        .with_decode(&decode)
                        .with_draft(draft)
                        .with_draft_is_the_model(own),
                );
                verdict.violations.into_iter().map(|v| v.rule).filter(|rule| rule.starts_with("IQ")).collect::<Vec<_>>()
            };
        assert!(fired(20, &eagle(false), None, &[], false).is_empty(), "before 0.5.21");
        assert_eq!(fired(21, &eagle(false), None, &[], false), ["IQ9"]);
        assert_eq!(fired(23, &eagle(true), Some(&target), &[], true), ["IQ9"], "the model's own path");
        assert!(fired(23, &eagle(true), Some(&mtp), &[], false).is_empty());
        assert!(fired(23, &eagle(true), None, &[], false).is_empty(), "a draft config not read decides nothing");
        assert_eq!(fired(23, &eagle(true), Some(&target), &[], false), ["IQ10"]);
        assert_eq!(fired(23, &eagle(true), Some(&fixture("parity/iquest-q1-mtp-other-width")), &[], false), ["IQ11"]);
        assert_eq!(fired(23, &eagle(true), Some(&fixture("parity/iquest-q1-mtp-other-target")), &[], false), ["IQ12"]);
        let with_mtp = |args: &[&str]| fired(23, &eagle(true), Some(&mtp), args, false);
        assert_eq!(with_mtp(&["--speculative-token-map", "/maps/t.pt"]), ["IQ13"]);
        assert_eq!(with_mtp(&["--speculative-num-steps", "0"]), ["IQ14"]);
        assert_eq!(with_mtp(&["--speculative-eagle-topk", "0"]), ["IQ15"]);
        assert_eq!(with_mtp(&["--speculative-eagle-topk", "2"]), ["IQ5"], "the provider refuses it first");
        assert!(with_mtp(&["--speculative-num-draft-tokens", "8"]).is_empty(), "7 draft slots and one");
        assert_eq!(with_mtp(&["--speculative-num-draft-tokens", "3"]), ["IQ16"]);
        assert!(with_mtp(&["--speculative-num-steps", "2", "--speculative-num-draft-tokens", "3"]).is_empty());
        let standalone = with(|s| s.speculative_algorithm = Some("STANDALONE".into()));
        assert_eq!(fired(23, &standalone, None, &[], false), ["IQ2"], "the provider refuses it first");
    }
}
