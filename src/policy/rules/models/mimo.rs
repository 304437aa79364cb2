//! MiMo-V2: the model hook's fused-QKV and HiCache checks (`arg_groups/model_hook.py`,
//! `handle_model_specific_adjustments`).

use crate::api::FleetSpec;
use crate::policy::argv::given;
use crate::policy::rules::predicates::{
    DECODE_TP, ENCODER_ONLY, HIERARCHICAL_CACHE, MIMO_V2, UNIFIED_RADIX_TREE_ENV, attention_cp_size, attention_dp_size,
    fleets_in_scope, hicache_fleets,
};
use crate::policy::rules::{EVERY_SERVER, Finding, Fix, Rule, RuleInput, text, text_from, when, when_with};
use crate::release::{Span, v0_5};

pub(in crate::policy::rules) const MV1: Rule = Rule {
    id: "MV1",
    about: "MiMo-V2 fused QKV projection layout",
    reproduces: "get_mimo_v2_fused_qkv_expected_tp_size, srt/configs/model_config.py (0.5.17–0.5.23)",
    field: MODEL_CONFIG,
    roles: EVERY_SERVER,
    messages: &[
        text("MiMoV2 hf_config has unsupported attention_projection_layout={layout}; expected 'fused_qkv' or unset."),
        text_from(
            22,
            "MiMoV2 hf_config has unsupported attention_projection_layout={layout}; expected 'fused_qkv', 'split' \
             or unset.",
        ),
    ],
    check: |c| {
        let layout = c.layout.attention_projection_layout.as_deref()?;
        let supported = layout == "fused_qkv" || (layout == "split" && c.release >= v0_5(22));
        when_with(
            !supported && mimo_v2_fused_qkv_fleets(c).next().is_some(),
            vec![("layout", crate::python::py_repr(layout))],
        )
    },
    fix: Fix::Manual {
        hint: "set attention_projection_layout in the model's config.json to fused_qkv or leave it unset (split \
               from SGLang 0.5.22), as its checkpoint's QKV weights are stored",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const MV2: Rule = Rule {
    id: "MV2",
    about: "MiMo-V2 fused QKV weights × attention TP",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18); \
                 handle_model_specific_adjustments, srt/arg_groups/model_hook.py (0.5.19–0.5.23)",
    field: DECODE_TP,
    roles: EVERY_SERVER,
    messages: &[
        text(
            "MiMoV2ForCausalLM requires effective attention TP size {expected} because its fused qkv_proj weights \
             are TP={expected}-interleaved; got {effective} (tp_size={tp}, dp_size={dp}, \
             enable_dp_attention={dp_attention}, attn_cp_size={cp}). Set --tp, --dp, --enable-dp-attention, and \
             --attention-context-parallel-size so the effective attention TP size is {expected}.",
        ),
        text_from(
            22,
            "MiMoV2ForCausalLM requires effective attention TP size {expected} because its fused qkv_proj weights \
             are TP={expected}-interleaved; got {effective} (tp_size={tp}, attn_dp_size={dp}, attn_cp_size={cp}). \
             Set --tp, --attn-dp-size, and --attention-context-parallel-size so the effective attention TP size is \
             {expected}.",
        ),
    ],
    check: mimo_v2_attention_tp_mismatch,
    fix: Fix::Manual {
        hint: "set tensorParallel, dataParallel with enableDpAttention, and --attn-cp-size in extraArgs so that TP ÷ \
               attention DP ÷ attention CP divides the model's num_key_value_heads",
    },
    ..Rule::DEFAULT
};

pub(in crate::policy::rules) const MV3: Rule = Rule {
    id: "MV3",
    about: "MiMo-V2 × HiCache without the unified radix tree",
    reproduces: "ServerArgs._handle_model_specific_adjustments, srt/server_args.py (0.5.17–0.5.18)",
    field: HIERARCHICAL_CACHE,
    span: Span::between(v0_5(17), v0_5(18)),
    roles: EVERY_SERVER,
    messages: &[text(
        "Hierarchical cache for MiMoV2 requires the unified radix tree. Set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 to \
         enable --enable-hierarchical-cache for this model.",
    )],
    check: |c| {
        let mimo_v2 = MIMO_V2.contains(&c.layout.architecture.as_str());
        when(mimo_v2 && hicache_fleets(c).any(|fleet| !fleet.env_on(UNIFIED_RADIX_TREE_ENV)))
    },
    fix: Fix::Manual {
        hint: "set SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 in the env of the servers with HiCache ({spec.decode.env}, \
               {spec.prefill.env}), turn hierarchicalCache off, or use SGLang 0.5.19 or later",
    },
    ..Rule::DEFAULT
};

const MODEL_CONFIG: &str = "spec.model.config";

/// The fleets in scope whose servers run the model hook's MiMo-V2 fused-QKV check: a
/// MiMoV2ForCausalLM model (its multimodal and text checkpoints; the Flash architecture is not
/// checked) on servers that are not `--encoder-only`.
fn mimo_v2_fused_qkv_fleets<'a>(c: &'a RuleInput<'_>) -> impl Iterator<Item = &'a FleetSpec> {
    let checked = c.layout.architecture == "MiMoV2ForCausalLM";
    fleets_in_scope(c).filter(move |fleet| checked && !given(&fleet.extra_args, ENCODER_ONLY))
}

/// MV2: the first server whose effective attention TP (TP ÷ attention DP ÷ attention CP, as
/// SGLang's integer division gives it) does not divide the attention TP a fused-QKV MiMo-V2
/// checkpoint is interleaved for. Up to 0.5.21 the message names `--dp-size` and
/// `--enable-dp-attention`, from 0.5.22 the attention DP size.
fn mimo_v2_attention_tp_mismatch(c: &RuleInput<'_>) -> Option<Finding> {
    if c.layout.attention_projection_layout.as_deref() != Some("fused_qkv") {
        return None;
    }
    let expected = i64::try_from(c.layout.fused_qkv_attention_tp?).ok()?;
    mimo_v2_fused_qkv_fleets(c).find_map(|fleet| {
        let cp = attention_cp_size(&fleet.extra_args)?;
        let attention_dp = attention_dp_size(fleet);
        let effective = i64::from(fleet.tensor_parallel) / attention_dp / cp.max(1);
        let dp = if c.release >= v0_5(22) { attention_dp } else { i64::from(fleet.data_parallel) };
        let dp_attention = if fleet.enable_dp_attention { "True" } else { "False" };
        when_with(
            effective > 0 && expected % effective != 0,
            vec![
                ("expected", expected.to_string()),
                ("effective", effective.to_string()),
                ("tp", fleet.tensor_parallel.to_string()),
                ("dp", dp.to_string()),
                ("dp_attention", dp_attention.to_string()),
                ("cp", cp.to_string()),
            ],
        )
    })
}

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// MiMoV2ForCausalLM's model hook refuses a QKV projection layout it does not know (MV1: `split`
    /// only from 0.5.22) and, for fused QKV weights, an effective attention TP (TP ÷ attention DP ÷
    /// attention CP) that does not divide the KV head count they are interleaved for (MV2), on every
    /// server but an encoder-only one; the Flash architecture is not checked.
    #[test]
    fn mv1_mv2_mimo_v2_fused_qkv_weights_fix_the_attention_tp() {
        let rules = |layout: &AttentionLayout, fleet: &FleetSpec, patch: u16| {
            violations_of(&["MV1", "MV2"], layout, fleet, patch)
        };
        let fused = fixture("parity/mimo-v2-fused-qkv");
        let tp8 = parallel_fleet(8, 1, false, &[]);
        assert_eq!(
            rules(&fused, &tp8, 23),
            [(
                "MV2",
                "MiMoV2ForCausalLM requires effective attention TP size 4 because its fused qkv_proj weights are \
                 TP=4-interleaved; got 8 (tp_size=8, attn_dp_size=1, attn_cp_size=1). Set --tp, --attn-dp-size, and \
                 --attention-context-parallel-size so the effective attention TP size is 4."
                    .to_string()
            )]
        );
        let replicas = parallel_fleet(8, 2, false, &[]);
        assert!(
            rules(&fused, &replicas, 21)[0]
                .1
                .contains("(tp_size=8, dp_size=2, enable_dp_attention=False, attn_cp_size=1)")
        );
        for fits in [
            parallel_fleet(4, 1, false, &[]),
            parallel_fleet(8, 2, true, &[]),
            parallel_fleet(8, 1, false, &["--attn-cp-size", "2"]),
        ] {
            assert!(rules(&fused, &fits, 23).is_empty(), "{fits:?}");
        }
        assert!(rules(&fused, &parallel_fleet(8, 1, false, &["--encoder-only"]), 23).is_empty());
        let unknown =
            "MiMoV2 hf_config has unsupported attention_projection_layout='split'; expected 'fused_qkv' or unset.";
        let split = fixture("parity/mimo-v2-split-qkv");
        assert_eq!(rules(&split, &tp8, 21), [("MV1", unknown.to_string())]);
        assert!(rules(&split, &tp8, 22).is_empty());
        let packed = fixture("parity/mimo-v2-packed-qkv");
        assert_eq!(rules(&packed, &tp8, 23)[0].0, "MV1");
        let mut flash = fused.clone();
        flash.architecture = "MiMoV2FlashForCausalLM".into();
        assert!(rules(&flash, &tp8, 23).is_empty());
    }

    /// Up to 0.5.18 the model hook's MiMo-V2 branch (both architectures) refuses HiCache on a server
    /// whose env does not turn on the unified radix tree (MV3): the decode servers with
    /// `hierarchicalCache`, and a service's prefill servers given `--enable-hierarchical-cache`.
    #[test]
    fn mv3_mimo_v2_hicache_needs_the_unified_radix_tree() {
        let flash = fixture("mimo-v2-flash");
        let hicache = with(|s| s.hierarchical_cache = true);
        let rules = |settings: &DisaggregationSpec, fleet: &FleetSpec, layout: &AttentionLayout, patch: u16| {
            run_at(v0_5(patch), settings, fleet, layout).violations.iter().any(|v| v.rule == "MV3")
        };
        let plain = FleetSpec::default();
        assert!(rules(&hicache, &plain, &flash, 17) && rules(&hicache, &plain, &flash, 18));
        assert!(!rules(&hicache, &plain, &flash, 19), "the check is gone from 0.5.19");
        assert!(!rules(&DisaggregationSpec::default(), &plain, &flash, 18), "no HiCache");
        assert!(!rules(&hicache, &plain, &full(), 18), "not MiMo-V2");
        let unified = FleetSpec {
            env: vec![EnvVar {
                name: "SGLANG_ENABLE_UNIFIED_RADIX_TREE".into(),
                value: Some("1".into()),
                ..Default::default()
            }],
            ..FleetSpec::default()
        };
        assert!(!rules(&hicache, &unified, &flash, 18));

        let prefill = parallel_fleet(1, 1, false, &["--enable-hierarchical-cache"]);
        let defaults = DisaggregationSpec::default();
        let input = PolicyInput::alone(&defaults, &unified, &flash, v0_5(18)).with_prefill(Some(&prefill));
        let verdict = evaluate(input);
        assert!(verdict.violations.iter().any(|v| v.rule == "MV3"), "the prefill servers run HiCache without the env");
    }
}
