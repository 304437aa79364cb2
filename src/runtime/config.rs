//! `runtime.json`, the cache runtime's whole input as the controller renders it (model,
//! layout, effective settings, the settings in spec form, decode sizes), and the start-up
//! check: the same policy the control plane runs, so a pod started by hand with settings the
//! layout cannot run fails as SGLang would, with SGLang's message.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use serde::{Deserialize, Serialize};

use crate::api::{
    AttentionLayout, DecodeSpec, DisaggregationSpec, EffectiveSettings, KvPool, LayerKind, OnInvalid, RetractionBackup,
};
use crate::policy::{self, Outcome, PolicyInput, Violation};
use crate::release::{self, Release, ReleaseSource};

/// The model the pod serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRef {
    /// Model id or path.
    pub name: String,
    /// Revision, if pinned.
    #[serde(default)]
    pub revision: Option<String>,
}

/// Decode sizes the pools are computed from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecodeSizes {
    /// Tokens per KV page.
    #[serde(default = "one")]
    pub page_size: i32,
    /// Tensor-parallel size.
    #[serde(default = "one")]
    pub tensor_parallel: i32,
    /// Data-parallel size.
    #[serde(default = "one")]
    pub data_parallel: i32,
    /// Pipeline-parallel size.
    #[serde(default = "one")]
    pub pipeline_parallel: i32,
    /// DP attention (attention TP = TP / DP).
    #[serde(default)]
    pub enable_dp_attention: bool,
    /// GPUs of the pod.
    #[serde(default)]
    pub gpus_per_pod: Option<i32>,
    /// Environment of the decode container (some rules read it).
    #[serde(default)]
    pub env: Vec<EnvVar>,
    /// KV cache dtype (`--kv-cache-dtype`), `auto` when unset.
    #[serde(default)]
    pub kv_cache_dtype: Option<String>,
    /// SWA tokens per full-attention token in a hybrid SWA pool (SGLang's
    /// `--swa-full-tokens-ratio`, default 0.8).
    #[serde(default)]
    pub swa_full_tokens_ratio: Option<f64>,
    /// Fields this version does not know (reported, not fatal).
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

fn one() -> i32 {
    1
}

/// The parsed `runtime.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfig {
    /// The model.
    pub model: ModelRef,
    /// The resolved attention layout.
    pub layout: AttentionLayout,
    /// The settings the control plane decided the pod runs with.
    #[serde(default)]
    pub effective: Option<EffectiveSettings>,
    /// The disaggregation settings in spec form (after any rewrite).
    #[serde(default)]
    pub disaggregation: DisaggregationSpec,
    /// Decode sizes.
    pub decode: DecodeSizes,
    /// The SGLang release whose rules the control plane applied; the newest known when unset.
    #[serde(default)]
    pub sglang_version: Option<String>,
    /// Fields this version does not know (reported, not fatal).
    #[serde(flatten)]
    pub unknown: BTreeMap<String, serde_json::Value>,
}

/// Why the runtime does not start.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The file could not be read or parsed (exit code 2).
    #[error("{0}")]
    Input(String),
    /// The settings are ones SGLang refuses for this layout (exit code 1).
    #[error("{}", refusal_text(.0))]
    Refused(Vec<Violation>),
    /// The pools do not fit the memory given (exit code 1).
    #[error("{0}")]
    Sizing(String),
}

impl StartupError {
    /// The process exit code: 2 for unreadable input, 1 for a refused configuration.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Input(_) => 2,
            Self::Refused(_) | Self::Sizing(_) => 1,
        }
    }
}

/// SGLang's message on its own line first (what a user greps a crash-looping pod's log for),
/// then the rule, field and fix.
fn refusal_text(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| format!("{}\n  rule {} on {}; fix: {}", v.message, v.rule, v.field, v.fix))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A configuration that passed the start-up check.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The file as read.
    pub config: RuntimeConfig,
    /// The settings the runtime runs with, as the policy computes them.
    pub effective: EffectiveSettings,
    /// What was noticed but is not fatal.
    pub warnings: Vec<String>,
}

impl RuntimeConfig {
    /// Parses `runtime.json` text; errors name the field.
    pub fn parse(text: &str, origin: &str) -> Result<Self, StartupError> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
            let path = e.path().to_string();
            let field = if path == "." { "the document".to_string() } else { format!("field `{path}`") };
            StartupError::Input(format!("{origin}: {field}: {}", e.inner()))
        })
    }

    /// Reads and parses a `runtime.json` file.
    pub fn load(path: &std::path::Path) -> Result<Self, StartupError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| StartupError::Input(format!("{}: cannot read the runtime config: {e}", path.display())))?;
        Self::parse(&text, &path.display().to_string())
    }

    fn decode_spec(&self) -> DecodeSpec {
        let d = &self.decode;
        DecodeSpec {
            page_size: d.page_size,
            tensor_parallel: d.tensor_parallel,
            data_parallel: d.data_parallel,
            pipeline_parallel: d.pipeline_parallel,
            enable_dp_attention: d.enable_dp_attention,
            gpus_per_pod: d.gpus_per_pod,
            env: d.env.clone(),
            kv_cache_dtype: d.kv_cache_dtype.clone(),
            ..DecodeSpec::default()
        }
    }

    /// Checks the layout is self-consistent, then runs the policy exactly as the control plane
    /// does (in Reject mode: the runtime never rewrites), and computes the effective settings.
    pub fn check(self) -> Result<Checked, StartupError> {
        self.check_layout()?;
        self.check_sizes()?;
        let release = match &self.sglang_version {
            Some(text) => {
                release::choose_text(text, ReleaseSource::Spec)
                    .map_err(|e| StartupError::Input(format!("sglangVersion: {e}")))?
                    .release
            }
            None => Release::newest_known(),
        };
        let mut warnings: Vec<String> = self
            .unknown
            .keys()
            .map(|k| format!("unknown field `{k}` ignored"))
            .chain(self.decode.unknown.keys().map(|k| format!("unknown field `decode.{k}` ignored")))
            .collect();
        let mut settings = DisaggregationSpec { on_invalid: OnInvalid::Reject, ..self.disaggregation.clone() };
        // A hand-written file may state the backup only under `effective`; it is checked the same.
        let stated = self.effective.as_ref().map(|e| e.retraction_backup);
        match (settings.retraction_backup, stated) {
            (Some(spec), Some(effective)) if spec != effective => {
                return Err(StartupError::Input(format!(
                    "disaggregation.retractionBackup is {} but effective.retractionBackup is {}; make them agree",
                    spec.as_str(),
                    effective.as_str()
                )));
            }
            (None, Some(effective)) => {
                let auto = policy::automatic_retraction_backup(&settings, &self.decode_spec(), &self.layout, release);
                if effective != auto {
                    settings.retraction_backup = Some(effective);
                }
            }
            _ => {}
        }
        if settings.host_pool_ratio.is_none() {
            settings.host_pool_ratio = self.effective.as_ref().and_then(|e| e.host_pool_ratio);
        }
        if let Some(ratio) = settings.host_pool_ratio
            && !(ratio.is_finite() && ratio > 0.0)
        {
            return Err(StartupError::Input(format!(
                "disaggregation.hostPoolRatio is {ratio}; it must be a number greater than 0"
            )));
        }
        let decode = self.decode_spec();
        let verdict =
            policy::evaluate(PolicyInput { disaggregation: &settings, decode: &decode, layout: &self.layout, release });
        if verdict.outcome == Outcome::Rejected {
            return Err(StartupError::Refused(verdict.violations));
        }
        warnings.extend(verdict.warnings.iter().cloned());
        let mut effective = verdict.effective;
        // The runtime sees settings after the control plane's rewrites; where the value agrees,
        // the control plane's record of where it came from stands.
        if let Some(stated) = &self.effective
            && stated.retraction_backup == effective.retraction_backup
        {
            effective.retraction_backup_source = stated.retraction_backup_source;
        }
        Ok(Checked { effective, config: self, warnings })
    }

    fn check_sizes(&self) -> Result<(), StartupError> {
        let d = &self.decode;
        for (field, value) in [
            ("decode.pageSize", d.page_size),
            ("decode.tensorParallel", d.tensor_parallel),
            ("decode.dataParallel", d.data_parallel),
            ("decode.pipelineParallel", d.pipeline_parallel),
        ] {
            if value < 1 {
                return Err(StartupError::Input(format!("{field} is {value}; it must be at least 1")));
            }
        }
        if let Some(ratio) = d.swa_full_tokens_ratio
            && !(ratio > 0.0 && ratio <= 1.0)
        {
            return Err(StartupError::Input(format!(
                "decode.swaFullTokensRatio is {ratio}: --swa-full-tokens-ratio should be in range (0, 1.0]."
            )));
        }
        Ok(())
    }

    /// The layout comes from a file a person may have edited: its counts, kinds and sizes must
    /// agree before pools are sized from them.
    fn check_layout(&self) -> Result<(), StartupError> {
        let layout = &self.layout;
        let bad = |field: &str, message: String| Err(StartupError::Input(format!("layout.{field}: {message}")));
        let counts = layout.layers;
        if layout.layer_kinds.len() != counts.total as usize {
            return bad(
                "layerKinds",
                format!("has {} entries but layers.total is {}", layout.layer_kinds.len(), counts.total),
            );
        }
        let of = |kind| layout.layer_kinds.iter().filter(|k| **k == kind).count() as u32;
        for (field, kind, count) in [
            ("layers.fullAttention", LayerKind::Full, counts.full_attention),
            ("layers.slidingWindow", LayerKind::Sliding, counts.sliding_window),
            ("layers.ssm", LayerKind::Ssm, counts.ssm),
        ] {
            if of(kind) != count {
                return bad(field, format!("is {count} but layerKinds lists {}", of(kind)));
            }
        }
        let shape = &layout.kv_shape;
        if !matches!(shape.dtype_bytes, 1 | 2 | 4) {
            return bad("kvShape.dtypeBytes", format!("is {}; expected 1, 2 or 4", shape.dtype_bytes));
        }
        let attention_layers = counts.full_attention + counts.sliding_window;
        if attention_layers > 0 && (shape.num_kv_heads == 0 || shape.head_dim == 0) {
            return bad("kvShape", "numKvHeads and headDim must be at least 1 for a model with attention".into());
        }
        let swa_pool = matches!(layout.kv_pool, KvPool::HybridSwa | KvPool::PureSwa);
        if swa_pool {
            if counts.sliding_window == 0 {
                return bad("kvPool", format!("is {} but no layer is sliding", layout.kv_pool.as_str()));
            }
            if layout.sliding_window.unwrap_or(0) == 0 {
                return bad("slidingWindow", "must be set (tokens) for a sliding-window pool".into());
            }
            if shape.swa_num_kv_heads == 0 || shape.swa_head_dim == 0 {
                return bad("kvShape", "swaNumKvHeads and swaHeadDim must be at least 1 for sliding layers".into());
            }
        }
        if layout.kv_pool == KvPool::HybridSwa && counts.full_attention == 0 {
            return bad("kvPool", "is hybrid-swa but no layer has full attention (that is pure-swa)".into());
        }
        if layout.kv_pool == KvPool::PureSwa && counts.full_attention > 0 {
            return bad("kvPool", "is pure-swa but some layers have full attention (that is hybrid-swa)".into());
        }
        if counts.ssm > 0 && shape.ssm_state_bytes_per_layer.unwrap_or(0) == 0 {
            return bad("kvShape.ssmStateBytesPerLayer", "must be set for a model with SSM layers".into());
        }
        if layout.kv_pool == KvPool::HybridSsm && counts.ssm == 0 {
            return bad("kvPool", "is hybrid-ssm but no layer is an SSM layer".into());
        }
        Ok(())
    }
}

impl Checked {
    /// Whether retracted requests are backed up into a host pool.
    pub fn host_pool(&self) -> bool {
        self.effective.retraction_backup == RetractionBackup::HostPool
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(sglang_version: Option<&str>, disaggregation: serde_json::Value) -> RuntimeConfig {
        let path = format!("{}/tests/fixtures/layouts/llama-3.1-8b-instruct.json", env!("CARGO_MANIFEST_DIR"));
        let layout: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let text = json!({
            "model": {"name": "llama"}, "layout": layout, "disaggregation": disaggregation, "decode": {},
            "sglangVersion": sglang_version,
        });
        RuntimeConfig::parse(&text.to_string(), "runtime.json").unwrap()
    }

    #[test]
    fn the_start_up_check_applies_the_release_the_control_plane_used() {
        let host_pool = json!({"retractionBackup": "host_pool"});
        let Err(StartupError::Refused(violations)) = config(Some("0.5.17"), host_pool.clone()).check() else {
            panic!("0.5.17 has no retraction flag");
        };
        assert_eq!(violations[0].rule, "F1");
        assert!(config(None, host_pool).check().is_ok(), "the newest release has the flag");
        let none = config(Some("0.5.21"), json!({"retractionBackup": "none"})).check().unwrap();
        assert_eq!(none.effective.retraction_backup, RetractionBackup::None);
        let unset = config(Some("0.5.17"), json!({})).check().unwrap();
        assert_eq!(unset.effective.retraction_backup, RetractionBackup::CpuTensor, "no host pool before 0.5.18");
        let Err(StartupError::Input(message)) = config(Some("0.4.0"), json!({})).check() else {
            panic!("an unknown release is an input error");
        };
        assert!(message.starts_with("sglangVersion: SGLang 0.4.0 is not a release kvpilot knows"), "{message}");
    }
}
