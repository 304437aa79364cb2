//! `config.json` → layout for every family of docs/layout.md. The expected values are written
//! from that table, not from running the resolver.

use std::path::PathBuf;

use kvpilot::api::{AttentionKind, AttentionLayout, KvPool, LayoutFeature};
use kvpilot::layout::{ResolveOptions, resolve};

fn fixture(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configs").join(format!("{name}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn layout_of(name: &str) -> AttentionLayout {
    resolve(&fixture(name), ResolveOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

struct Expected {
    fixture: &'static str,
    architecture: &'static str,
    total: u32,
    full: u32,
    sliding: u32,
    ssm: u32,
    window: Option<u64>,
    attention: AttentionKind,
    pool: KvPool,
    features: &'static [LayoutFeature],
    /// Whether the resolver should say it assumed something (unknown architectures).
    warns: bool,
}

const fn row(
    fixture: &'static str,
    architecture: &'static str,
    (total, full, sliding, ssm): (u32, u32, u32, u32),
    window: Option<u64>,
    attention: AttentionKind,
    pool: KvPool,
    features: &'static [LayoutFeature],
) -> Expected {
    Expected { fixture, architecture, total, full, sliding, ssm, window, attention, pool, features, warns: false }
}

const fn warning(mut e: Expected) -> Expected {
    e.warns = true;
    e
}

use AttentionKind::{Mha, Mla};
use KvPool::{Full, HybridSsm, HybridSwa, Mla as MlaPool, PureSwa};
use LayoutFeature::{
    AttentionSinks, DeepseekV4, DeepseekV41, Dsa, DsparkHead, MinimaxSparse, NoNextnLayers, ParallelHybrid, SwaCompress,
};

const TABLE: &[Expected] = &[
    // 1–4: dense and Mistral-family.
    row("llama-3.1-8b-instruct", "LlamaForCausalLM", (32, 32, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    row("mistral-7b-v0.1", "MistralForCausalLM", (32, 0, 32, 0), Some(4096), Mha, Full, &[NoNextnLayers]),
    row("mistral-7b-instruct-v0.3", "MistralForCausalLM", (32, 32, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    row("mixtral-8x7b-v0.1", "MixtralForCausalLM", (32, 32, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    // 5–7: Gemma-2/3 are sliding physically but SGLang forces a full pool.
    row("gemma-2-9b-it", "Gemma2ForCausalLM", (42, 21, 21, 0), Some(4096), Mha, Full, &[NoNextnLayers]),
    row("gemma-3-1b-it", "Gemma3ForCausalLM", (26, 4, 22, 0), Some(512), Mha, Full, &[NoNextnLayers]),
    row("gemma-3-27b-it", "Gemma3ForConditionalGeneration", (62, 10, 52, 0), Some(1024), Mha, Full, &[NoNextnLayers]),
    // 8: Gemma-4, multimodal nesting, and a pure-SWA variant.
    row(
        "gemma-4-multimodal",
        "Gemma4ForConditionalGeneration",
        (30, 5, 25, 0),
        Some(1024),
        Mha,
        HybridSwa,
        &[SwaCompress, NoNextnLayers],
    ),
    // 9–10: GPT-OSS.
    row(
        "gpt-oss-120b",
        "GptOssForCausalLM",
        (36, 18, 18, 0),
        Some(128),
        Mha,
        HybridSwa,
        &[AttentionSinks, NoNextnLayers],
    ),
    row(
        "gpt-oss-20b",
        "GptOssForCausalLM",
        (24, 12, 12, 0),
        Some(128),
        Mha,
        HybridSwa,
        &[AttentionSinks, NoNextnLayers],
    ),
    // 11: Llama-4, every 4th layer full, chunked local attention elsewhere.
    row(
        "llama-4-scout-17b-16e",
        "Llama4ForConditionalGeneration",
        (48, 12, 36, 0),
        Some(8192),
        Mha,
        HybridSwa,
        &[NoNextnLayers],
    ),
    // 12–13: Qwen2/2.5/3 (use_sliding_window decides).
    row("qwen2.5-7b-instruct", "Qwen2ForCausalLM", (28, 28, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    row("qwen2-sliding-enabled", "Qwen2ForCausalLM", (28, 20, 8, 0), Some(4096), Mha, Full, &[NoNextnLayers]),
    row("qwen3-8b", "Qwen3ForCausalLM", (36, 36, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    // 14–21: SSM / linear hybrids.
    row("qwen3-next-80b-a3b", "Qwen3NextForCausalLM", (48, 12, 0, 36), None, Mha, HybridSsm, &[]),
    row("qwen3.5-27b", "Qwen3_5ForConditionalGeneration", (64, 16, 0, 48), None, Mha, HybridSsm, &[]),
    // No SGLang release serves Jamba, and none counts its Mamba layers as SSM state (parity,
    // 0.5.17–0.5.23): an ordinary pool, with warnings saying both.
    warning(row("jamba-v0.1", "JambaForCausalLM", (32, 4, 0, 28), None, Mha, Full, &[NoNextnLayers])),
    row("nemotron-nano-9b-v2", "NemotronHForCausalLM", (56, 4, 0, 27), None, Mha, HybridSsm, &[]),
    row("nemotron-nano-vl-v2", "NemotronH_Nano_VL_V2", (8, 1, 0, 4), None, Mha, HybridSsm, &[NoNextnLayers]),
    row("falcon-h1-7b", "FalconH1ForCausalLM", (44, 0, 0, 44), None, Mha, HybridSsm, &[ParallelHybrid, NoNextnLayers]),
    row("granite-4.0-h-small", "GraniteMoeHybridForCausalLM", (40, 4, 0, 36), None, Mha, HybridSsm, &[NoNextnLayers]),
    row("granite-4.0-micro", "GraniteMoeHybridForCausalLM", (40, 40, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    // No SGLang release serves MiniMax-Text-01 either.
    warning(row(
        "minimax-text-01",
        "MiniMaxText01ForCausalLM",
        (80, 10, 0, 70),
        None,
        Mha,
        HybridSsm,
        &[NoNextnLayers],
    )),
    row("minimax-m2", "MiniMaxM2ForCausalLM", (62, 62, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    // MiniMax-M3 sparse attention: a full pool plus the sparse index state its transfers move.
    warning(row(
        "minimax-m3-sparse",
        "MiniMaxM3SparseForCausalLM",
        (62, 62, 0, 0),
        None,
        Mha,
        Full,
        &[MinimaxSparse, NoNextnLayers],
    )),
    // 23–26: MLA / DSA / DeepSeek-V4 / Kimi-Linear.
    row("deepseek-v3", "DeepseekV3ForCausalLM", (61, 61, 0, 0), None, Mla, MlaPool, &[]),
    row("deepseek-v2-lite", "DeepseekV2ForCausalLM", (27, 27, 0, 0), None, Mla, MlaPool, &[NoNextnLayers]),
    row("deepseek-v3.2-exp", "DeepseekV32ForCausalLM", (61, 61, 0, 0), None, Mla, MlaPool, &[Dsa]),
    row("deepseek-v4", "DeepseekV4ForCausalLM", (8, 6, 2, 0), Some(128), Mha, HybridSwa, &[DeepseekV4]),
    // DeepSeek-V4.1 with a bundled DSpark head: compression-ratio-2 layers.
    row(
        "deepseek-v4.1-dspark",
        "DeepseekV4ForCausalLM",
        (8, 6, 2, 0),
        Some(128),
        Mha,
        HybridSwa,
        &[DeepseekV4, DeepseekV41, DsparkHead],
    ),
    // Draft checkpoints of its NextN layer (compress ratio 0: sliding window only).
    row("deepseek-v4-nextn", "DeepseekV4ForCausalLMNextN", (1, 0, 1, 0), Some(128), Mha, PureSwa, &[DeepseekV4]),
    row(
        "deepseek-v4-nextn-window-64",
        "DeepseekV4ForCausalLMNextN",
        (1, 0, 1, 0),
        Some(64),
        Mha,
        PureSwa,
        &[DeepseekV4],
    ),
    row("kimi-linear-48b-a3b", "KimiLinearForCausalLM", (27, 7, 0, 20), None, Mla, HybridSsm, &[NoNextnLayers]),
    // 27: MiMo-V2 and its pure-SWA variants.
    row(
        "mimo-v2-flash",
        "MiMoV2FlashForCausalLM",
        (48, 8, 40, 0),
        Some(128),
        Mha,
        HybridSwa,
        &[AttentionSinks, SwaCompress],
    ),
    row("custom-pure-swa", "MiMoV2FlashForCausalLM", (8, 0, 8, 0), Some(128), Mha, PureSwa, &[SwaCompress]),
    row("mimo-v2-mtp", "MiMoV2MTP", (1, 0, 1, 0), Some(128), Mha, PureSwa, &[SwaCompress, NoNextnLayers]),
    // 28–30: sliding-window models SGLang gives a full pool.
    row("command-r7b-12-2024", "Cohere2ForCausalLM", (32, 8, 24, 0), Some(4096), Mha, Full, &[NoNextnLayers]),
    row("command-a-03-2025", "Cohere2ForCausalLM", (64, 16, 48, 0), Some(4096), Mha, Full, &[NoNextnLayers]),
    row("phi-3-mini-4k-instruct", "Phi3ForCausalLM", (32, 0, 32, 0), Some(2047), Mha, Full, &[NoNextnLayers]),
    // 31–35.
    row("mamba2-2.7b", "Mamba2ForCausalLM", (64, 0, 0, 64), None, Mha, HybridSsm, &[NoNextnLayers]),
    row("step3", "Step3VLForConditionalGeneration", (61, 61, 0, 0), None, Mha, Full, &[NoNextnLayers]),
    row("step-3.5-flash", "Step3p5ForCausalLM", (45, 12, 33, 0), Some(512), Mha, HybridSwa, &[NoNextnLayers]),
    row("glm-4.5", "Glm4MoeForCausalLM", (92, 92, 0, 0), None, Mha, Full, &[]),
    row("glm-4.7-flash", "Glm4MoeLiteForCausalLM", (47, 47, 0, 0), None, Mla, MlaPool, &[NoNextnLayers]),
    row("glm-5", "GlmMoeDsaForCausalLM", (78, 78, 0, 0), None, Mla, MlaPool, &[Dsa, NoNextnLayers]),
    row("laguna", "LagunaForCausalLM", (24, 8, 16, 0), Some(4096), Mha, HybridSwa, &[NoNextnLayers]),
    // Opt-in hybrids and unknown architectures: the generic probe, with a warning.
    warning(row(
        "custom-opt-in-hybrid-swa",
        "AcmeHybridForCausalLM",
        (6, 2, 4, 0),
        Some(256),
        Mha,
        HybridSwa,
        &[NoNextnLayers],
    )),
    warning(row(
        "unknown-gemma-like",
        "AcmeLocalGlobalForCausalLM",
        (12, 3, 9, 0),
        Some(1024),
        Mha,
        Full,
        &[NoNextnLayers],
    )),
    warning(row("unknown-mla", "AcmeLatentForCausalLM", (10, 10, 0, 0), None, Mla, MlaPool, &[NoNextnLayers])),
    warning(row(
        "unknown-mamba-hybrid",
        "AcmeMambaHybridForCausalLM",
        (8, 2, 0, 5),
        None,
        Mha,
        HybridSsm,
        &[NoNextnLayers],
    )),
];

#[test]
fn every_family_resolves_as_sglang_classifies_it() {
    let mut failures = Vec::new();
    for e in TABLE {
        let l = layout_of(e.fixture);
        let got = (
            l.architecture.as_str(),
            (l.layers.total, l.layers.full_attention, l.layers.sliding_window, l.layers.ssm),
            l.sliding_window,
            l.attention,
            l.kv_pool,
            l.features.as_slice(),
            !l.warnings.is_empty(),
        );
        let want =
            (e.architecture, (e.total, e.full, e.sliding, e.ssm), e.window, e.attention, e.pool, e.features, e.warns);
        if got != want {
            failures.push(format!("{}:\n  got  {got:?}\n  want {want:?}\n  warnings {:?}", e.fixture, l.warnings));
        }
        assert_eq!(l.layer_kinds.len() as u32, l.layers.total, "{}", e.fixture);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Fixtures the newest release's loader refuses, so they have no row in [`TABLE`] (which
/// resolves as the newest release does); each has a per-release test of its own.
const REFUSED_BY_NEWEST: &[&str] = &["gemma-4-pure-swa"];

/// Parity: transformers forces Gemma-4's last layer to full attention, so the all-sliding
/// fixture is 1 full + 5 SWA on 0.5.17–0.5.21 (transformers 5.12.1); transformers 5.19.0
/// (0.5.22+) refuses it, its full layer's head_dim (global_head_dim, default 512) differing
/// from head_dim 256.
#[test]
fn gemma4_all_sliding_follows_each_releases_loader() {
    let config = fixture("gemma-4-pure-swa");
    for patch in 17..=21 {
        let options = ResolveOptions { release: kvpilot::release::v0_5(patch), ..ResolveOptions::default() };
        let layout = resolve(&config, options).unwrap();
        assert_eq!((layout.layers.full_attention, layout.layers.sliding_window), (1, 5), "0.5.{patch}");
        assert_eq!(layout.kv_pool, HybridSwa, "0.5.{patch}");
        assert!(layout.warnings.iter().any(|w| w.contains("forces the last layer")), "{:?}", layout.warnings);
    }
    for patch in 22..=23 {
        let options = ResolveOptions { release: kvpilot::release::v0_5(patch), ..ResolveOptions::default() };
        let err = resolve(&config, options).unwrap_err();
        assert_eq!(err.field, "global_head_dim", "0.5.{patch}");
        assert!(err.message.contains("transformers 5.19.0) refuses this config"), "{}", err.message);
    }
}

#[test]
fn every_fixture_file_is_in_the_table() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/configs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // Subfolders (parity/) hold configs only the SGLang parity harness checks.
        if path.extension().is_none_or(|ext| ext != "json") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if !TABLE.iter().any(|e| e.fixture == name) && !REFUSED_BY_NEWEST.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "fixtures without an expected row: {missing:?}");
}

/// The shared fixtures, compared as whole JSON documents (the `kvpilot layout` contract).
#[test]
fn shared_fixtures_match_their_full_json() {
    for name in [
        "custom-pure-swa",
        "deepseek-v3",
        "gemma-3-1b-it",
        "gpt-oss-20b",
        "llama-3.1-8b-instruct",
        "mistral-7b-v0.1",
        "nemotron-nano-9b-v2",
        "qwen3-next-80b-a3b",
    ] {
        let path =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/layouts").join(format!("{name}.json"));
        let expected: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let actual = serde_json::to_value(layout_of(name)).unwrap();
        assert_eq!(actual, expected, "{name}");
    }
}

#[test]
fn gemma3_layer_kinds_put_global_attention_on_every_sixth_layer() {
    let kinds = serde_json::to_value(layout_of("gemma-3-1b-it").layer_kinds).unwrap();
    let globals: Vec<usize> =
        kinds.as_array().unwrap().iter().enumerate().filter(|(_, k)| *k == "full").map(|(i, _)| i).collect();
    assert_eq!(globals, vec![5, 11, 17, 23]);
}

#[test]
fn disabling_hybrid_swa_memory_turns_allowlisted_models_into_full_pools() {
    for name in ["gpt-oss-20b", "custom-pure-swa", "llama-4-scout-17b-16e", "gemma-4-multimodal"] {
        let layout =
            resolve(&fixture(name), ResolveOptions { disable_hybrid_swa_memory: true, ..ResolveOptions::default() })
                .unwrap();
        assert_eq!(layout.kv_pool, Full, "{name}");
    }
}

#[test]
fn kv_shapes_follow_the_config() {
    let mimo = layout_of("mimo-v2-flash").kv_shape;
    assert_eq!((mimo.num_kv_heads, mimo.swa_num_kv_heads, mimo.head_dim, mimo.v_head_dim), (4, 8, 192, 128));
    let step = layout_of("step-3.5-flash").kv_shape;
    assert_eq!(step.swa_num_kv_heads, 8, "Step-3.5 SWA heads come from attention_other_setting");
    let dsv3 = layout_of("deepseek-v3").kv_shape;
    assert_eq!((dsv3.kv_lora_rank, dsv3.qk_rope_head_dim, dsv3.head_dim), (Some(512), Some(64), 576));
    let gemma2 = layout_of("gemma-2-9b-it").kv_shape;
    assert_eq!(gemma2.dtype_bytes, 4, "torch_dtype float32");
    // Nemotron-H: 128 heads × 80 × 128 state × 4 B + (128×80 + 2×8×128) × 3 × 2 B.
    let nemotron = layout_of("nemotron-nano-9b-v2").kv_shape;
    assert_eq!(nemotron.ssm_state_bytes_per_layer, Some(128 * 80 * 128 * 4 + (128 * 80 + 2 * 8 * 128) * 3 * 2));
    assert!(layout_of("mamba2-2.7b").warnings.is_empty(), "pure Mamba-2 heads are read from num_heads/head_dim");
}

/// A probe config: `model_type` llama with only the architecture, layer types and window set, so
/// that only the architecture decides the classification.
fn probe(architecture: &str, model_type: &str, layer_types: &[&str], extra: serde_json::Value) -> serde_json::Value {
    let mut config = serde_json::json!({
        "architectures": [architecture], "model_type": model_type, "num_hidden_layers": layer_types.len(),
        "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 64, "sliding_window": 128,
        "layer_types": layer_types,
    });
    config.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    config
}

fn pool_at(config: &serde_json::Value, patch: u16) -> KvPool {
    let options = ResolveOptions { release: kvpilot::release::v0_5(patch), ..ResolveOptions::default() };
    resolve(config, options).unwrap().kv_pool
}

const ALTERNATING: &[&str] = &["sliding_attention", "full_attention", "sliding_attention", "full_attention"];

#[test]
fn classification_follows_the_release_that_added_each_architecture() {
    let none = serde_json::json!({});
    let mla_fields = serde_json::json!({"kv_lora_rank": 512, "qk_rope_head_dim": 64});
    // (config, first release with the new pool, pool before, pool from then on)
    let cases = [
        ("granite-swa", probe("GraniteSWAForCausalLM", "llama", ALTERNATING, none.clone()), 19, Full, HybridSwa),
        ("iquest-q1", probe("IQuestQ1ForCausalLM", "llama", ALTERNATING, none.clone()), 21, Full, HybridSwa),
        (
            "diffusion-gemma",
            probe("DiffusionGemmaForBlockDiffusion", "llama", ALTERNATING, none.clone()),
            21,
            Full,
            HybridSwa,
        ),
        ("embedding-gemma2", probe("EmbeddingGemma2Model", "llama", ALTERNATING, none.clone()), 22, Full, HybridSwa),
        ("beam", probe("BeamForCausalLM", "llama", ALTERNATING, none.clone()), 23, Full, HybridSwa),
        (
            "glm5next",
            probe("Glm5NextForConditionalGeneration", "llama", &["full_attention"; 4], mla_fields.clone()),
            20,
            Full,
            MlaPool,
        ),
        ("gigachat35", probe("GigaChat35ForCausalLM", "llama", &["full_attention"; 4], mla_fields), 21, Full, MlaPool),
        ("spark2_5 opt-in", probe("Spark2_5ForCausalLM", "spark2_5", ALTERNATING, none.clone()), 20, Full, HybridSwa),
    ];
    for (name, config, first, before, after) in cases {
        for patch in 17..=23 {
            let want = if patch < first { before } else { after };
            assert_eq!(pool_at(&config, patch), want, "{name} on 0.5.{patch}");
        }
    }
    let all_full = probe("BeamForCausalLM", "llama", &["full_attention"; 4], none.clone());
    assert_eq!(pool_at(&all_full, 23), Full, "Beam without a sliding layer keeps the ordinary pool");
    let unlimited = probe("UnlimitedOCRForCausalLM", "llama", &["sliding_attention"; 8], none);
    assert_eq!(pool_at(&unlimited, 17), PureSwa, "UnlimitedOCR is a pure-SWA target in every release");
    let mamba = fixture("mamba2-2.7b");
    assert_eq!((pool_at(&mamba, 19), pool_at(&mamba, 20)), (Full, HybridSsm), "pure Mamba is SSM from 0.5.20");
}

#[test]
fn an_architecture_the_release_does_not_serve_gets_a_warning_one_it_serves_does_not() {
    let gemma2 = probe("EmbeddingGemma2Model", "llama", ALTERNATING, serde_json::json!({}));
    let at = |patch| {
        resolve(&gemma2, ResolveOptions { release: kvpilot::release::v0_5(patch), ..ResolveOptions::default() })
            .unwrap()
            .warnings
    };
    assert!(
        at(21).iter().any(|w| w.starts_with("SGLang 0.5.21 has no model for EmbeddingGemma2Model")),
        "{:?}",
        at(21)
    );
    assert!(!at(22).iter().any(|w| w.contains("has no model")), "{:?}", at(22));
    for served in
        ["Exaone4ForCausalLM", "DeciLMForCausalLM", "Mistral3ForConditionalGeneration", "FalconMambaForCausalLM"]
    {
        let layout =
            resolve(&probe(served, "llama", ALTERNATING, serde_json::json!({})), ResolveOptions::default()).unwrap();
        assert!(
            !layout.warnings.iter().any(|w| w.contains("has no model") || w.contains("unknown")),
            "{served}: {:?}",
            layout.warnings
        );
    }
}

#[test]
fn python_json_tokens_are_accepted_in_config_files() {
    let text = r#"{"architectures": ["NemotronHForCausalLM"], "num_hidden_layers": 4, "hybrid_override_pattern": "M*M-",
        "time_step_limit": [0.0, Infinity], "rescale": NaN, "head_dim": 128, "num_key_value_heads": 8}"#;
    let config = kvpilot::source::parse_config_text(text, "config.json").unwrap();
    assert_eq!(resolve(&config, ResolveOptions::default()).unwrap().kv_pool, HybridSsm);
}
