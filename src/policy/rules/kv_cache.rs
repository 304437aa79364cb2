//! The KV cache hook's range check of the hybrid-SWA memory split (`arg_groups/kv_cache_hook.py`,
//! `handle_cache_compatibility`).

use super::{EVERY_SERVER, Fix, Rule, text, when};

pub(super) const S8: Rule = Rule {
    id: "S8",
    about: "SWA full-tokens ratio range",
    reproduces: "ServerArgs._handle_cache_compatibility, srt/server_args.py (0.5.17–0.5.18); \
                 handle_cache_compatibility, srt/arg_groups/kv_cache_hook.py (0.5.19–0.5.23)",
    field: DECODE_SWA_RATIO,
    roles: EVERY_SERVER,
    messages: &[text("--swa-full-tokens-ratio should be in range (0, 1.0].")],
    check: |c| {
        let ratio = c.decode.swa_full_tokens_ratio?;
        // SGLang checks the resolved ratio: Step-3.5 with HiCache resets any value to 1.0 first.
        let reset = c.layout.architecture == "Step3p5ForCausalLM" && c.settings.hierarchical_cache;
        let in_range = ratio > 0.0 && ratio <= 1.0;
        when(!reset && !in_range)
    },
    fix: Fix::Manual { hint: "set {spec.decode.swaFullTokensRatio} above 0 and at most 1, or unset it" },
    ..Rule::DEFAULT
};

const DECODE_SWA_RATIO: &str = "spec.decode.swaFullTokensRatio";

#[cfg(test)]
mod tests {
    use crate::policy::test_support::*;

    #[test]
    fn s8_the_swa_full_tokens_ratio_is_above_0_and_at_most_1() {
        let ratio = |value: f64| FleetSpec { swa_full_tokens_ratio: Some(value), ..FleetSpec::default() };
        let message = "--swa-full-tokens-ratio should be in range (0, 1.0].";
        for value in [0.0, -0.5, 1.01, 4.0] {
            assert_manual(
                DisaggregationSpec::default(),
                &ratio(value),
                &hybrid_swa(),
                "S8",
                "spec.decode.swaFullTokensRatio",
                message,
            );
        }
        for value in [0.01, 0.5, 1.0] {
            assert_eq!(
                run(&DisaggregationSpec::default(), &ratio(value), &hybrid_swa()).outcome,
                Outcome::Valid,
                "{value}"
            );
        }
        // SGLang range-checks the resolved value, for every model (a full pool ignores it).
        assert_eq!(
            ids(&run(&DisaggregationSpec::default(), &ratio(2.0), &full())),
            [("S8", "spec.decode.swaFullTokensRatio")]
        );
        assert_eq!(run(&DisaggregationSpec::default(), &FleetSpec::default(), &hybrid_swa()).outcome, Outcome::Valid);
    }

    #[test]
    fn s8_step_3_5_with_hierarchical_cache_resets_the_ratio_before_the_check() {
        let step = layout_at(
            serde_json::from_str(include_str!("../../../tests/fixtures/configs/step-3.5-flash.json")).unwrap(),
        );
        assert_eq!(step.architecture, "Step3p5ForCausalLM");
        let decode = FleetSpec { swa_full_tokens_ratio: Some(3.0), ..FleetSpec::default() };
        let rules = |settings: &DisaggregationSpec| -> Vec<&str> {
            run(settings, &decode, &step).violations.iter().map(|v| v.rule).collect()
        };
        assert!(rules(&DisaggregationSpec::default()).contains(&"S8"));
        let hicache = with(|s| {
            s.decode_radix_cache = true;
            s.hierarchical_cache = true;
        });
        assert!(!rules(&hicache).contains(&"S8"), "{:?}", rules(&hicache));
    }
}
