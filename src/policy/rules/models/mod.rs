//! The checks of one model family each: SGLang's model override providers
//! (`arg_groups/model_overrides/`) and the branches of its model hooks that test an architecture.

pub(super) mod deepseek;
pub(super) mod deepseek_v4;
pub(super) mod ernie;
pub(super) mod iquest;
pub(super) mod mimo;
pub(super) mod minicpm;
pub(super) mod nemotron_h;
pub(super) mod qwen4_exp;

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    /// Other families' model override providers: MiniCPM (0.5.19 on) refuses DP attention on every
    /// MiniCPM model (MC1), HiCache on MiniCPM-SALA's hybrid attention (MC2), and PD on its sparse
    /// attention backend (MC3); Qwen4-Exp (0.5.20 on) refuses unified memory (QX2, rewritten); IQuest
    /// Q1 (0.5.21 on) its own limits.
    #[test]
    fn other_families_override_providers_refuse_their_settings() {
        let fired = |patch: u16, settings: &DisaggregationSpec, decode: &FleetSpec, layout: &AttentionLayout| {
            at(patch, settings, decode, layout).violations.into_iter().map(|v| v.rule).collect::<Vec<_>>()
        };
        let minicpm = layout_at(json!({
            "architectures": ["MiniCPMForCausalLM"], "model_type": "minicpm", "num_hidden_layers": 4,
            "hidden_size": 1024, "num_attention_heads": 16
        }));
        // TP 2, which both DP sizes divide (DP1).
        let dp_attention = |groups: i32| FleetSpec {
            tensor_parallel: 2,
            data_parallel: groups,
            enable_dp_attention: true,
            ..FleetSpec::default()
        };
        let plain = DisaggregationSpec::default();
        assert!(fired(18, &plain, &dp_attention(2), &minicpm).is_empty(), "no MiniCPM provider before 0.5.19");
        assert_eq!(fired(19, &plain, &dp_attention(2), &minicpm), ["MC1"]);
        assert_eq!(fired(21, &plain, &dp_attention(1), &minicpm), ["MC1"], "the flag alone up to 0.5.21");
        assert!(fired(22, &plain, &dp_attention(1), &minicpm).is_empty(), "one attention-DP group from 0.5.22");
        let hicache = with(|s| s.hierarchical_cache = true);
        assert!(!fired(23, &hicache, &FleetSpec::default(), &minicpm).contains(&"MC2"), "dense MiniCPM takes HiCache");

        let sala = layout_at(
            serde_json::from_str(include_str!("../../../../tests/fixtures/configs/parity/minicpm-sala.json")).unwrap(),
        );
        assert!(fired(23, &hicache, &FleetSpec::default(), &sala).contains(&"MC2"));
        // Under PD the provider picks its sparse backend unless told to run dense attention.
        assert!(fired(19, &plain, &FleetSpec::default(), &sala).contains(&"MC3"));
        let dense = env_fleet("SGLANG_MINICPM_FORCE_DENSE", "yes");
        assert!(!fired(23, &plain, &dense, &sala).contains(&"MC3"));
        let fa3 = FleetSpec { extra_args: vec!["--attention-backend".into(), "fa3".into()], ..FleetSpec::default() };
        assert!(!fired(23, &plain, &fa3, &sala).contains(&"MC3"));
        let sparse_prefill = FleetSpec {
            extra_args: vec![
                "--attention-backend=fa3".into(),
                "--prefill-attention-backend".into(),
                "minicpm_flashinfer".into(),
            ],
            ..FleetSpec::default()
        };
        assert!(fired(23, &plain, &sparse_prefill, &sala).contains(&"MC3"));

        let qwen4 = layout_at(
            serde_json::from_str(include_str!("../../../../tests/fixtures/configs/parity/qwen4-exp.json")).unwrap(),
        );
        let unified = with(|s| s.enable_unified_memory = true);
        assert!(!fired(19, &unified, &FleetSpec::default(), &qwen4).contains(&"QX2"));
        let verdict = at(
            20,
            &with(|s| {
                s.enable_unified_memory = true;
                s.on_invalid = OnInvalid::Rewrite;
            }),
            &FleetSpec::default(),
            &qwen4,
        );
        assert!(verdict.rewrites.iter().any(|r| r.rule == "QX2"), "{verdict:?}");

        let iquest = layout_at(
            serde_json::from_str(include_str!("../../../../tests/fixtures/configs/parity/iquest-q1.json")).unwrap(),
        );
        let args = |words: &[&str]| FleetSpec {
            extra_args: words.iter().map(|w| w.to_string()).collect(),
            ..FleetSpec::default()
        };
        assert!(fired(20, &plain, &args(&["--attention-backend", "triton"]), &iquest).is_empty());
        assert_eq!(fired(21, &plain, &args(&["--decode-attention-backend", "triton"]), &iquest), ["IQ1"]);
        assert!(fired(21, &plain, &args(&["--attention-backend", "fa3"]), &iquest).is_empty());
        // Two GPUs, so that attention CP divides TP (CP7).
        let cp2 = FleetSpec { tensor_parallel: 2, ..args(&["--attn-cp-size", "2"]) };
        assert_eq!(fired(23, &plain, &cp2, &iquest), ["IQ4"]);
        assert_eq!(fired(23, &plain, &args(&["--speculative-eagle-topk", "2"]), &iquest), ["IQ5"]);
        let standalone = with(|s| s.speculative_algorithm = Some("standalone".into()));
        assert!(fired(23, &standalone, &FleetSpec::default(), &iquest).contains(&"IQ2"));

        // Nemotron-H (0.5.23): expert remapping needs a runner that takes it.
        let nemotron = layout_at(
            serde_json::from_str(include_str!("../../../../tests/fixtures/configs/nemotron-nano-9b-v2.json")).unwrap(),
        );
        let trtllm = args(&["--ep-num-redundant-experts", "2", "--moe-runner-backend", "flashinfer_trtllm"]);
        assert!(fired(22, &plain, &trtllm, &nemotron).is_empty());
        assert_eq!(fired(23, &plain, &trtllm, &nemotron), ["NH1"]);
        let cutedsl = args(&["--enable-eplb", "--moe-runner-backend", "flashinfer_cutedsl"]);
        assert_eq!(fired(23, &plain, &cutedsl, &nemotron), ["NH2"]);
        let with_a2a =
            args(&["--enable-eplb", "--moe-runner-backend", "flashinfer_cutedsl", "--moe-a2a-backend", "deepep"]);
        assert!(fired(23, &plain, &with_a2a, &nemotron).is_empty());
    }
}
