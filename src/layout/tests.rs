//! Unit tests of the resolver's rules and errors; fixture tables live in `tests/layout.rs`.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::api::MtpDraft;
use crate::release::v0_5;

fn resolve_default(config: Value) -> Result<AttentionLayout, LayoutError> {
    resolve(&config, ResolveOptions::default())
}

fn error_field(config: Value) -> String {
    resolve_default(config).expect_err("config should be refused").field
}

#[test]
fn refuses_what_cannot_be_a_model_config() {
    assert_eq!(error_field(json!([1, 2])), "$");
    assert_eq!(error_field(json!("config")), "$");
    assert_eq!(error_field(json!({"architectures": ["LlamaForCausalLM"]})), "num_hidden_layers");
    assert_eq!(
        error_field(json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 0})),
        "num_hidden_layers"
    );
    assert_eq!(
        error_field(json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": "32"})),
        "num_hidden_layers"
    );
    assert_eq!(error_field(json!({"architectures": "LlamaForCausalLM", "num_hidden_layers": 2})), "architectures");
    assert_eq!(error_field(json!({"architectures": [7], "num_hidden_layers": 2})), "architectures[0]");
}

#[test]
fn refuses_absurd_layer_counts_before_allocating() {
    let err =
        resolve_default(json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1u64 << 40})).unwrap_err();
    assert_eq!(err.field, "num_hidden_layers");
    assert!(err.message.contains("10000"), "{}", err.message);
}

#[test]
fn refuses_contradictory_per_layer_lengths() {
    let err = resolve_default(json!({
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 4, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"]
    }))
    .unwrap_err();
    assert_eq!(err.field, "layer_types");
    assert_eq!(err.message, "has 2 entries but num_hidden_layers is 4; give one entry per layer");

    let err = resolve_default(json!({
        "architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 3, "hybrid_override_pattern": "M*"
    }))
    .unwrap_err();
    assert_eq!(err.field, "hybrid_override_pattern");
}

#[test]
fn names_the_nested_field_of_multimodal_configs() {
    let err = resolve_default(json!({
        "architectures": ["Gemma4ForConditionalGeneration"],
        "text_config": {"num_hidden_layers": 2, "sliding_window": 512, "layer_types": ["sliding_attention", "bogus"]}
    }))
    .unwrap_err();
    assert_eq!(err.field, "text_config.layer_types[1]");
    assert!(err.message.contains("unknown layer type \"bogus\""), "{}", err.message);
}

#[test]
fn sliding_layers_need_a_window() {
    let err = resolve_default(json!({
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"]
    }))
    .unwrap_err();
    assert_eq!(err.field, "sliding_window");
}

fn laguna(window: Option<Value>) -> Value {
    let mut config = json!({
        "architectures": ["LagunaForCausalLM"], "model_type": "laguna", "num_hidden_layers": 3,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]
    });
    if let Some(window) = window {
        config["sliding_window"] = window;
    }
    config
}

/// Parity (every release 0.5.17–0.5.23): Laguna's config class defaults `sliding_window` to 512,
/// and an explicit null window gives SGLang's ordinary pool.
#[test]
fn laguna_window_follows_its_config_class() {
    for release in crate::release::KNOWN.iter().copied() {
        let options = ResolveOptions { release, ..ResolveOptions::default() };
        let defaulted = resolve(&laguna(None), options).unwrap();
        assert_eq!(defaulted.sliding_window, Some(512), "{release}");
        assert_eq!(defaulted.kv_pool, KvPool::HybridSwa, "{release}");
        assert_eq!((defaulted.layers.full_attention, defaulted.layers.sliding_window), (1, 2), "{release}");

        let null = resolve(&laguna(Some(Value::Null)), options).unwrap();
        assert_eq!(null.sliding_window, None, "{release}");
        assert_eq!(null.kv_pool, KvPool::Full, "{release}");
        assert_eq!((null.layers.full_attention, null.layers.sliding_window), (3, 0), "{release}");
        assert!(null.warnings.iter().any(|w| w.contains("sliding_window is null")), "{:?}", null.warnings);

        let explicit = resolve(&laguna(Some(json!(1024))), options).unwrap();
        assert_eq!(explicit.sliding_window, Some(1024), "{release}");
    }
}

/// Parity (0.5.17–0.5.23): no release's `uses_ssm_state` recognises Jamba.
#[test]
fn jamba_keeps_no_ssm_state_in_any_release() {
    let config = json!({
        "architectures": ["JambaForCausalLM"], "model_type": "jamba", "num_hidden_layers": 8,
        "attn_layer_period": 8, "attn_layer_offset": 4, "hidden_size": 1024, "mamba_expand": 2, "mamba_d_state": 16
    });
    for release in crate::release::KNOWN.iter().copied() {
        let layout = resolve(&config, ResolveOptions { release, ..ResolveOptions::default() }).unwrap();
        assert_eq!(layout.layers.ssm, 7, "{release}");
        assert!(!layout.uses_ssm_state(), "{release}");
        assert_eq!(layout.kv_pool, KvPool::Full, "{release}");
        assert!(layout.warnings.iter().any(|w| w.contains("uses_ssm_state is false")), "{:?}", layout.warnings);
    }
}

fn gemma4_text(extra: Value) -> Value {
    let mut config = json!({
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "num_hidden_layers": 3,
        "sliding_window": 512, "head_dim": 256,
        "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention"]
    });
    config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    config
}

/// Parity: the last Gemma-4 layer is forced to full attention on every release; 0.5.22+
/// (transformers 5.19.0) refuse a text config whose per-layer overrides differ from the globals.
#[test]
fn gemma4_text_configs_follow_the_pinned_transformers() {
    let at =
        |config: &Value, patch| resolve(config, ResolveOptions { release: v0_5(patch), ..ResolveOptions::default() });
    let defaulted = gemma4_text(json!({}));
    for patch in 17..=21 {
        let layout = at(&defaulted, patch).unwrap();
        assert_eq!(layout.layer_kinds.last(), Some(&LayerKind::Full), "0.5.{patch}");
        assert_eq!(layout.kv_pool, KvPool::HybridSwa, "0.5.{patch}");
    }
    for patch in 22..=23 {
        assert_eq!(at(&defaulted, patch).unwrap_err().field, "global_head_dim", "0.5.{patch}");
        let equal = gemma4_text(json!({"global_head_dim": 256}));
        assert_eq!(at(&equal, patch).unwrap().layers.full_attention, 1, "0.5.{patch}");
        let kv =
            gemma4_text(json!({"global_head_dim": 256, "attention_k_eq_v": true, "num_global_key_value_heads": 2}));
        assert_eq!(at(&kv, patch).unwrap_err().field, "num_global_key_value_heads", "0.5.{patch}");
        let stated = gemma4_text(json!({"per_layer_config": {"2": {"head_dim": 256}}}));
        assert!(at(&stated, patch).is_ok(), "0.5.{patch}");
        let differing = gemma4_text(json!({"per_layer_config": {"2": {"head_dim": 512}}}));
        assert_eq!(at(&differing, patch).unwrap_err().field, "per_layer_config.2.head_dim", "0.5.{patch}");
        let nested = json!({"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
                            "text_config": gemma4_text(json!({}))});
        assert!(at(&nested, patch).is_ok(), "0.5.{patch}: a nested text config loads");
    }
}

fn mla_model(arch: &str, model_type: &str, extra: Value) -> Value {
    let mut config = json!({
        "architectures": [arch], "model_type": model_type, "num_hidden_layers": 8,
        "kv_lora_rank": 512, "qk_rope_head_dim": 64
    });
    config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    config
}

/// Parity: SGLang keeps SSM state for the kimi_linear (0.5.17+), glm5_next (0.5.20+) and
/// gigachat3_5 (0.5.21+) config classes, MLA models all, with each class's own layer split.
#[test]
fn mla_models_with_ssm_state_follow_their_config_classes() {
    let at = |config: &Value, patch| {
        resolve(config, ResolveOptions { release: v0_5(patch), ..ResolveOptions::default() }).unwrap()
    };
    let kimi = mla_model("KimiK3LinearForCausalLM", "kimi_linear", json!({}));
    for patch in 17..=23 {
        assert!(at(&kimi, patch).uses_ssm_state(), "0.5.{patch}");
    }
    assert_eq!(at(&kimi, 23).attention, AttentionKind::Mla);
    assert_eq!(at(&kimi, 23).layers.ssm, 0, "no linear_attn_config: no KDA layer, state kept all the same");

    let glm = mla_model("Glm5NextForConditionalGeneration", "glm5_next", json!({}));
    let glm_layout = at(&glm, 20);
    assert_eq!((glm_layout.kv_pool, glm_layout.attention), (KvPool::HybridSsm, AttentionKind::Mla));
    assert_eq!((glm_layout.layers.full_attention, glm_layout.layers.ssm), (2, 6), "every fourth layer full");
    let glm_listed = mla_model(
        "Glm5NextForConditionalGeneration",
        "glm5_next",
        json!({"linear_attn_config": {"kda_layers": [0, 1, 2, 4, 5, 6]}}),
    );
    assert_eq!(at(&glm_listed, 23).layer_kinds[3], LayerKind::Full, "kda_layers are 0-based");

    let giga = mla_model("GigaChat35ForCausalLM", "gigachat3_5", json!({}));
    assert_eq!(at(&giga, 21).layers.ssm, 8, "no layer_types: every layer linear");
    assert!(at(&giga, 21).uses_ssm_state());
    let giga_full = mla_model("GigaChat35ForCausalLM", "gigachat3_5", json!({"full_attention_layers": [3, 7]}));
    assert_eq!((at(&giga_full, 23).layers.full_attention, at(&giga_full, 23).layers.ssm), (2, 6));
}

/// The state size of the SSM config classes comes from their own defaults, not the Mamba
/// fallback: GLM-5-Next KDA 64 heads × 128, GigaChat-3.5 gated delta net 8/16 heads × 128.
#[test]
fn ssm_config_classes_size_their_state_from_their_defaults() {
    let at_23 = |config: &Value| resolve(config, ResolveOptions::default()).unwrap();
    let glm = at_23(&mla_model("Glm5NextForConditionalGeneration", "glm5_next", json!({})));
    let kda = 64 * 128 * 128 * 4 + 64 * 128 * 3 * 3 * 2;
    assert_eq!(glm.kv_shape.ssm_state_bytes_per_layer, Some(kda));
    assert!(!glm.warnings.iter().any(|w| w.contains("Mamba defaults")), "{:?}", glm.warnings);
    let giga = at_23(&mla_model("GigaChat35ForCausalLM", "gigachat3_5", json!({})));
    let gdn = 16 * 128 * 128 * 4 + (8 * 128 * 2 + 16 * 128) * 3 * 2;
    assert_eq!(giga.kv_shape.ssm_state_bytes_per_layer, Some(gdn));
}

/// Parity (0.5.19+): Dots3Note is MLA and hybrid SWA at once, split by its `layer_types`.
#[test]
fn mla_with_sliding_layers_gets_a_hybrid_swa_pool() {
    let dots = mla_model(
        "Dots3NoteForCausalLM",
        "dots3_note",
        json!({"sliding_window": 4096, "layer_types": [
            "sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
            "sliding_attention", "sliding_attention", "sliding_attention", "full_attention"
        ]}),
    );
    for patch in 19..=23 {
        let layout = resolve(&dots, ResolveOptions { release: v0_5(patch), ..ResolveOptions::default() }).unwrap();
        assert_eq!((layout.kv_pool, layout.attention), (KvPool::HybridSwa, AttentionKind::Mla), "0.5.{patch}");
        assert_eq!((layout.layers.full_attention, layout.layers.sliding_window), (2, 6), "0.5.{patch}");
    }
}

#[test]
fn required_family_fields_are_named() {
    assert_eq!(
        error_field(
            json!({"architectures": ["MiMoV2FlashForCausalLM"], "num_hidden_layers": 2, "sliding_window_size": 128})
        ),
        "hybrid_layer_pattern"
    );
    assert_eq!(
        error_field(json!({"architectures": ["DeepseekV4ForCausalLM"], "num_hidden_layers": 2})),
        "compress_ratios"
    );
    assert_eq!(
        error_field(json!({
            "architectures": ["KimiLinearForCausalLM"], "num_hidden_layers": 2, "kv_lora_rank": 512,
            "linear_attn_config": {"full_attn_layers": [2], "kda_layers": [3]}
        })),
        "linear_attn_config.kda_layers[0]"
    );
}

#[test]
fn disable_hybrid_swa_memory_gives_a_full_pool() {
    let config = json!({
        "architectures": ["GptOssForCausalLM"], "num_hidden_layers": 2, "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"]
    });
    let layout =
        resolve(&config, ResolveOptions { disable_hybrid_swa_memory: true, ..ResolveOptions::default() }).unwrap();
    assert_eq!(layout.kv_pool, KvPool::Full);
    assert_eq!(layout.layers.sliding_window, 1, "the physical view does not change");
    assert_eq!(layout.sliding_window, Some(128));
}

#[test]
fn gemma3_opt_in_is_ignored_with_a_warning() {
    let layout = resolve_default(json!({
        "architectures": ["Gemma3ForCausalLM"], "num_hidden_layers": 6, "sliding_window": 512, "head_dim": 256,
        "sliding_window_pattern": 6, "is_hybrid_swa": true
    }))
    .unwrap();
    assert_eq!(layout.kv_pool, KvPool::Full);
    assert_eq!(layout.warnings.len(), 1, "{:?}", layout.warnings);
}

#[test]
fn pipeline_stage_split_matches_sglang() {
    use crate::policy::pipeline_stages;
    assert_eq!(pipeline_stages(10, 1), vec![(0, 10)]);
    assert_eq!(pipeline_stages(10, 2), vec![(0, 5), (5, 10)]);
    // 10 layers on 4 stages: 2 each, the remainder to the stages before the last.
    assert_eq!(pipeline_stages(10, 4), vec![(0, 2), (2, 5), (5, 8), (8, 10)]);
    assert_eq!(pipeline_stages(3, 8), vec![(0, 1), (1, 2), (2, 3)]);
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (0u64..200).prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        "[a-z_*M-]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        let keys = prop_oneof![
            Just("num_hidden_layers".to_string()),
            Just("layer_types".to_string()),
            Just("architectures".to_string()),
            Just("sliding_window".to_string()),
            Just("text_config".to_string()),
            Just("hybrid_layer_pattern".to_string()),
            Just("hybrid_override_pattern".to_string()),
            Just("kv_lora_rank".to_string()),
            Just("is_hybrid_swa".to_string()),
            Just("linear_attn_config".to_string()),
            "[a-z_]{1,10}",
        ];
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::btree_map(keys, inner, 0..8).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const ARCHS: &[&str] = &[
    "GptOssForCausalLM",
    "Gemma4ForCausalLM",
    "Gemma3ForCausalLM",
    "MistralForCausalLM",
    "LagunaForCausalLM",
    "Step3p5ForCausalLM",
    "AcmeForCausalLM",
    "Qwen3NextForCausalLM",
];

prop_compose! {
    fn layer_types_config()(
        arch in prop::sample::select(ARCHS),
        kinds in prop::collection::vec(prop::sample::select(&["full_attention", "sliding_attention", "linear_attention", "mlp"][..]), 1..40),
        opt_in in any::<bool>(),
        disable in any::<bool>(),
    ) -> (Value, bool) {
        let config = json!({
            "architectures": [arch], "num_hidden_layers": kinds.len(), "sliding_window": 64,
            "layer_types": kinds, "is_hybrid_swa": opt_in,
        });
        (config, disable)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn never_panics_on_arbitrary_json(config in arbitrary_json()) {
        if let Ok(layout) = resolve_default(config) {
            let l = layout.layers;
            prop_assert!(l.full_attention + l.sliding_window + l.ssm <= l.total);
            prop_assert_eq!(layout.layer_kinds.len() as u32, l.total);
        }
    }

    #[test]
    fn pure_swa_iff_hybrid_swa_without_full_layers((config, disable) in layer_types_config()) {
        let arch_name = config["architectures"][0].as_str().unwrap().to_string();
        let opt_in = config["is_hybrid_swa"].as_bool().unwrap();
        let Ok(layout) = resolve(&config, ResolveOptions { disable_hybrid_swa_memory: disable, ..ResolveOptions::default() }) else {
            return Ok(());
        };
        let l = layout.layers;
        prop_assert!(l.full_attention + l.sliding_window + l.ssm <= l.total);
        let hybrid_swa_in_sglang_sense = ((arch::listed(arch::HYBRID_SWA, &arch_name, ResolveOptions::default().release)
            && (l.sliding_window > 0 || !arch::HYBRID_SWA_IF_SLIDING.contains(&arch_name.as_str())))
            || opt_in)
            && !arch::HYBRID_SWA_FORCED_OFF.contains(&arch_name.as_str())
            && !disable
            && l.ssm == 0
            && layout.attention == AttentionKind::Mha;
        prop_assert_eq!(
            layout.kv_pool == KvPool::PureSwa,
            hybrid_swa_in_sglang_sense && l.full_attention == 0,
            "{:?}", layout
        );
    }
}

#[test]
fn the_served_architectures_file_parses_line_by_line() {
    let text = include_str!("served_architectures.tsv");
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert!(lines.len() > 200, "{} architectures", lines.len());
    for line in lines {
        let mut fields = line.split('\t');
        let arch = fields.next().unwrap();
        let first: crate::release::Release = fields.next().unwrap().parse().unwrap();
        assert!(first.is_known(), "{line}");
        match fields.next().unwrap() {
            "-" => assert!(arch::served(arch, crate::release::Release::newest_known()), "{line}"),
            last => assert!(last.parse::<crate::release::Release>().unwrap().is_known(), "{line}"),
        }
        assert!(arch::served(arch, first), "{line}");
    }
}

/// The NextN layers an EAGLE draft of the config gets: the release's draft-config rewrites (on
/// the nested text config from 0.5.18 for Qwen3.5, Dots3's from 0.5.19), the key itself, its
/// alias and default in Transformers 5.19's DeepSeek-V3 class (pinned from 0.5.22), or a config
/// class default kvpilot leaves to SGLang.
#[test]
fn an_eagle_draft_has_no_nextn_layers_only_where_the_config_decides_it() {
    let lacks = |config: &Value, patch: u16| {
        let options = ResolveOptions { release: v0_5(patch), ..ResolveOptions::default() };
        resolve(config, options).unwrap().has(LayoutFeature::NoNextnLayers)
    };
    let llama = json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2});
    assert!(lacks(&llama, 23));
    let mut with_zero = llama.clone();
    with_zero["num_nextn_predict_layers"] = json!(0);
    assert!(lacks(&with_zero, 23));
    with_zero["num_nextn_predict_layers"] = json!(2);
    assert!(!lacks(&with_zero, 23));
    let qwen35 = json!({"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
                        "text_config": {"model_type": "qwen3_5_text", "num_hidden_layers": 4,
                                        "layer_types": ["linear_attention", "linear_attention", "linear_attention",
                                                        "full_attention"]}});
    assert!(lacks(&qwen35, 17), "0.5.17 sets the count on the top-level config only");
    assert!(!lacks(&qwen35, 18));
    let qwen3_next = json!({"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 2});
    assert!(!lacks(&qwen3_next, 17));
    let v32 = json!({"architectures": ["DeepseekV32ForCausalLM"], "model_type": "deepseek_v32",
                     "num_hidden_layers": 2, "kv_lora_rank": 512});
    assert!(lacks(&v32, 21));
    assert!(!lacks(&v32, 22), "Transformers 5.19 supplies a default");
    let mut v32_mtp = v32.clone();
    v32_mtp["num_mtp_layers"] = json!(0);
    assert!(lacks(&v32_mtp, 22), "num_mtp_layers is the class's alias");
    v32_mtp["num_mtp_layers"] = json!(2);
    assert!(!lacks(&v32_mtp, 22));
    assert!(lacks(&v32_mtp, 21), "0.5.21's Transformers reads num_nextn_predict_layers only");
    v32_mtp["num_nextn_predict_layers"] = json!(0);
    assert!(lacks(&v32_mtp, 22), "num_nextn_predict_layers wins over the alias");
    let dots3 = json!({"architectures": ["Dots3NoteForCausalLM"], "model_type": "dots3_note",
                       "num_hidden_layers": 2, "kv_lora_rank": 512, "num_nextn_predict_layers": 0});
    assert!(!lacks(&dots3, 19), "the draft config is rewritten to one shared MTP layer");
    assert!(lacks(&dots3, 18));
    let step37 = json!({"architectures": ["Step3p7ForConditionalGeneration"], "model_type": "step3p7",
                        "text_config": {"model_type": "step3p5", "num_hidden_layers": 2, "num_mtp_layers": 2,
                                        "sliding_window": 512,
                                        "layer_types": ["full_attention", "sliding_attention"]}});
    assert!(lacks(&step37, 22), "SGLang's Step-3.5 text class reads no num_mtp_layers");
}

/// A DSPARK draft is DeepSeek-V4's DSpark head when the config names it or bundles one.
#[test]
fn a_dspark_draft_is_the_head_a_deepseek_v4_checkpoint_bundles() {
    let head = |config: Value| resolve_default(config).unwrap().has(LayoutFeature::DsparkHead);
    let v4 = |extra: Value| {
        let mut config: Value =
            serde_json::from_str(include_str!("../../tests/fixtures/configs/deepseek-v4.json")).unwrap();
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        config
    };
    assert!(!head(v4(json!({}))));
    assert!(head(v4(json!({"dspark_block_size": 8}))));
    assert!(!head(v4(json!({"dspark_block_size": null}))), "a null key bundles nothing");
    assert!(!head(json!({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "dspark_block_size": 8})));
}

fn minicpm_sala(extra: Value) -> Value {
    let mut config = json!({
        "architectures": ["MiniCPMSALAForCausalLM"], "model_type": "minicpm_sala", "num_hidden_layers": 6,
        "hidden_size": 1024, "num_attention_heads": 16, "num_key_value_heads": 16
    });
    config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    config
}

#[test]
fn minicpm_sala_layers_follow_its_mixer_types() {
    use LayerKind::{Full, Ssm};
    let layout =
        resolve_default(minicpm_sala(json!({"mixer_types": ["attn", "lightning_attn", "lightning"]}))).unwrap();
    assert_eq!(layout.layer_kinds, [Full, Ssm, Ssm, Full, Ssm, Ssm], "the list repeats over the layers");
    assert_eq!(layout.kv_pool, KvPool::HybridSsm);
    // 16 KV heads × a 64 × 64 fp32 state.
    assert_eq!(layout.kv_shape.ssm_state_bytes_per_layer, Some(16 * 64 * 64 * 4));
    let dense = resolve_default(minicpm_sala(json!({"mixer_types": [], "sparse_config": {}}))).unwrap();
    assert_eq!((dense.kv_pool, dense.layers.ssm), (KvPool::Full, 0), "no mixer_types is one minicpm4 layer");
    // SGLang 0.5.18 has no MiniCPM-SALA model: its pool is not SGLang's hybrid one there.
    let options = ResolveOptions { release: v0_5(18), ..ResolveOptions::default() };
    let old = resolve(&minicpm_sala(json!({"mixer_types": ["minicpm4", "lightning"]})), options).unwrap();
    assert_eq!(old.kv_pool, KvPool::Full);
}

#[test]
fn minicpm_sala_refuses_what_its_config_class_refuses() {
    assert_eq!(error_field(minicpm_sala(json!({"mixer_types": vec!["minicpm4"; 7]}))), "mixer_types");
    assert_eq!(error_field(minicpm_sala(json!({"mixer_types": ["minicpm4", "mamba"]}))), "mixer_types[1]");
    assert_eq!(error_field(minicpm_sala(json!({"mixer_types": ["lightning"], "lightning_nkv": 4}))), "lightning_nkv");
    // Without lightning layers the head counts need not match.
    assert!(resolve_default(minicpm_sala(json!({"lightning_nkv": 4}))).is_ok());
}

fn iquest_q1(extra: Value) -> Value {
    let mut config = json!({
        "architectures": ["IQuestQ1ForCausalLM"], "model_type": "iquest_q1", "num_hidden_layers": 88,
        "layer_types": vec!["full_attention"; 88]
    });
    config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    config
}

#[test]
fn iquest_q1_layers_follow_its_config_class_pattern() {
    let options = ResolveOptions { release: v0_5(21), ..ResolveOptions::default() };
    // One full layer, 21 blocks of one full and three sliding ones, three full: layer_types is ignored.
    let layout = resolve(&iquest_q1(json!({})), options).unwrap();
    assert_eq!((layout.layers.full_attention, layout.layers.sliding_window), (25, 63));
    assert_eq!((layout.kv_pool, layout.sliding_window), (KvPool::HybridSwa, Some(4096)));
    // SGLang lists the architecture as hybrid SWA: without sliding layers its pool is still the
    // hybrid one, all of it full.
    let full = resolve(&iquest_q1(json!({"use_sliding_window": false})), options).unwrap();
    assert_eq!((full.kv_pool, full.layers.full_attention), (KvPool::HybridSwa, 88));
    let custom = json!({"num_hidden_layers": 6, "num_hybrid_layers_block": 2, "hybrid_layers_types_block":
        ["sliding_attention", "full_attention"], "last_layers_types": ["full_attention"]});
    let layout = resolve(&iquest_q1(custom), options).unwrap();
    assert_eq!(layout.layers.sliding_window, 2);
    assert_eq!(error_field(iquest_q1(json!({"num_hybrid_layers_block": 20}))), "num_hybrid_layers_block");
    assert_eq!(
        error_field(iquest_q1(json!({"last_layers_types": ["full_attention", "full_attention", "mla"]}))),
        "last_layers_types[2]"
    );
}

#[test]
fn hy_v4_has_learnable_sinks_its_config_class_refuses_off() {
    let hy_v4 = |extra: Value| {
        let mut config = json!({
            "architectures": ["HYV4ForCausalLM"], "model_type": "hy_v4", "num_hidden_layers": 4, "index_topk": 2048,
            "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64
        });
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        config
    };
    let layout = resolve_default(hy_v4(json!({}))).unwrap();
    assert!(layout.has(LayoutFeature::LearnableAttentionSinks), "the class default");
    assert_eq!(error_field(hy_v4(json!({"learnable_sink": false}))), "learnable_sink");
    assert_eq!(error_field(hy_v4(json!({"learnable_sink": null}))), "learnable_sink");
    let old = ResolveOptions { release: v0_5(19), ..ResolveOptions::default() };
    assert!(resolve(&hy_v4(json!({"learnable_sink": false})), old).is_ok(), "no HYV4 config class before 0.5.20");
    let deepseek = json!({
        "architectures": ["DeepseekV32ForCausalLM"], "num_hidden_layers": 4, "index_topk": 2048, "kv_lora_rank": 512,
        "qk_rope_head_dim": 64, "learnable_sink": 1
    });
    assert!(resolve_default(deepseek).unwrap().has(LayoutFeature::LearnableAttentionSinks), "Python's truth value");
}

#[test]
fn an_iquest_q1_mtp_checkpoint_is_one_layer_of_its_target_as_its_config_class_builds_it() {
    let mtp = |extra: Value| {
        let mut config = json!({
            "model_type": "iquest_q1_mtp", "architectures": ["IQuestQ1MTP"],
            "target_config": {"model_type": "iquest_q1", "num_hidden_layers": 88, "hidden_size": 2048}
        });
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        config
    };
    let layout = resolve_default(mtp(json!({}))).unwrap();
    assert_eq!((layout.layers.total, layout.layers.sliding_window, layout.sliding_window), (1, 1, Some(512)));
    assert_eq!((layout.hidden_size, layout.vocab_size), (Some(2048), Some(160_000)), "target's, then class default");
    assert_eq!(layout.mtp_draft, Some(MtpDraft { target_layers: 88, draft_slots: 7 }));
    let full = resolve_default(mtp(json!({"sliding_window": null, "num_draft_slots": 2}))).unwrap();
    assert_eq!((full.layers.full_attention, full.sliding_window), (1, None));
    assert_eq!(full.mtp_draft, Some(MtpDraft { target_layers: 88, draft_slots: 2 }));
    assert_eq!(resolve_default(mtp(json!({"hidden_size": 4096}))).unwrap().hidden_size, Some(4096), "its own keys win");
    for (extra, field) in [
        (json!({"num_hidden_layers": 2}), "num_hidden_layers"),
        (json!({"num_draft_slots": 0}), "num_draft_slots"),
        (json!({"swa_rope_theta": null}), "swa_rope_theta"),
        (json!({"num_target_layers": 0}), "num_target_layers"),
        (json!({"num_target_layers": 64}), "num_target_layers"),
    ] {
        assert_eq!(error_field(mtp(extra.clone())), field, "{extra}");
    }
    let old = ResolveOptions { release: v0_5(20), ..ResolveOptions::default() };
    assert!(resolve(&mtp(json!({})), old).is_err(), "no such class before 0.5.21: num_hidden_layers is required");
}

/// MiMo-V2's QKV projection layout as config.json sets it, and where the weights are fused the
/// attention TP they are interleaved for: `num_key_value_heads`, else the text config's
/// (`get_mimo_v2_fused_qkv_expected_tp_size`). Without either, kvpilot warns that it cannot check.
#[test]
fn mimo_v2_fused_qkv_weights_are_interleaved_for_the_kv_head_count() {
    let mimo = |extra: Value| {
        let mut config = json!({
            "architectures": ["MiMoV2ForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 8,
            "head_dim": 64, "hybrid_layer_pattern": [0, 1], "sliding_window_size": 128
        });
        config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        resolve_default(config).unwrap()
    };
    let fused = mimo(json!({"attention_projection_layout": "fused_qkv", "num_key_value_heads": 4}));
    assert_eq!(
        (fused.attention_projection_layout.as_deref(), fused.fused_qkv_attention_tp),
        (Some("fused_qkv"), Some(4))
    );
    let nested = resolve_default(json!({
        "architectures": ["MiMoV2ForCausalLM"], "attention_projection_layout": "fused_qkv",
        "text_config": {
            "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
            "hybrid_layer_pattern": [0, 1], "sliding_window_size": 128
        }
    }))
    .unwrap();
    assert_eq!(nested.fused_qkv_attention_tp, Some(2));
    let split = mimo(json!({"attention_projection_layout": "split", "num_key_value_heads": 4}));
    assert_eq!((split.attention_projection_layout.as_deref(), split.fused_qkv_attention_tp), (Some("split"), None));
    let unset = mimo(json!({"num_key_value_heads": 4}));
    assert_eq!((unset.attention_projection_layout, unset.fused_qkv_attention_tp), (None, None));
    let headless = mimo(json!({"attention_projection_layout": "fused_qkv"}));
    assert_eq!(headless.fused_qkv_attention_tp, None);
    assert!(headless.warnings.iter().any(|w| w.contains("cannot check the attention TP")), "{:?}", headless.warnings);
    let mut typed = json!({
        "architectures": ["MiMoV2ForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 8, "head_dim": 64,
        "hybrid_layer_pattern": [0, 1], "sliding_window_size": 128
    });
    typed["attention_projection_layout"] = json!(1);
    assert_eq!(resolve_default(typed).unwrap_err().field, "attention_projection_layout");
}
