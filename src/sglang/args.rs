//! The reverse direction: the SGLang flags for an InferenceDeployment's effective settings
//! (`sglangArgs`), written through the same table the guard reads with, so a user can paste
//! them into the prefill and decode servers that pair with the fleet.

use serde::Serialize;

use super::flags::{self, DisaggregationMode, ServerSettings};
use crate::api::{DisaggregationSpec, FleetSpec, InferenceDeploymentSpec, RetractionBackup};
use crate::policy::Verdict;
use crate::release::{Release, v0_5};

/// The server arguments of both sides.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SglangArgs {
    /// For the decode servers: the effective settings, the automatic retraction backup pinned.
    pub decode: Vec<String>,
    /// For the prefill servers: model, transfer backend, page size, the prefill parallelism of
    /// `spec.prefill` (or `spec.disaggregation.prefill`), and the settings both sides must share.
    pub prefill: Vec<String>,
}

/// The flags for `spec` as the policy settled it in `verdict` (after any rewrite), for SGLang
/// `release`: below 0.5.18 there is no retraction-backup flag to pin.
pub fn sglang_args(spec: &InferenceDeploymentSpec, verdict: &Verdict, release: Release) -> SglangArgs {
    let effective = &verdict.effective;
    let settled = &verdict.settings;
    let decode = ServerSettings {
        mode: DisaggregationMode::Decode,
        model_path: Some(spec.model.served_path()),
        // A revision picks a hub commit; weights in a volume are what they are.
        revision: spec.model.revision.clone().filter(|_| spec.model.weights_volume().is_none()),
        draft_model_path: settled.speculative_draft_model.as_ref().map(|draft| draft.served_path(&spec.model)),
        // A revision picks a hub commit; a draft in the weights volume is what it is.
        draft_revision: settled
            .speculative_draft_model
            .as_ref()
            .filter(|draft| draft.path.is_none() || spec.model.weights_volume().is_none())
            .and_then(|draft| draft.revision.clone()),
        hybrid_swa_memory: spec.model.hybrid_swa_memory,
        disaggregation: DisaggregationSpec {
            retraction_backup: (release >= v0_5(18)).then_some(effective.retraction_backup),
            host_pool_ratio: if effective.retraction_backup == RetractionBackup::HostPool
                || effective.hierarchical_cache
            {
                effective.host_pool_ratio
            } else if settled.decode_offload_kv_cache {
                // The offload manager's own host pool follows the spec's ratio, if it names one.
                settled.host_pool_ratio
            } else {
                None
            },
            ..settled.clone()
        },
        decode: spec.decode.clone(),
    };
    let prefill_side = settled.prefill.clone().unwrap_or_default();
    let prefill = ServerSettings {
        mode: DisaggregationMode::Prefill,
        disaggregation: DisaggregationSpec {
            transfer_backend: settled.transfer_backend,
            speculative_algorithm: settled.speculative_algorithm.clone(),
            mamba_radix_cache_strategy: settled.mamba_radix_cache_strategy,
            enable_unified_memory: settled.enable_unified_memory,
            ..DisaggregationSpec::default()
        },
        decode: FleetSpec {
            tensor_parallel: prefill_side.tensor_parallel,
            data_parallel: prefill_side.data_parallel,
            enable_dp_attention: prefill_side.enable_dp_attention,
            pipeline_parallel: spec.prefill.as_ref().map_or(1, |prefill| prefill.pipeline_parallel),
            page_size: prefill_side.page_size.or(spec.decode.page_size),
            kv_cache_dtype: prefill_side.kv_cache_dtype.clone().or_else(|| spec.decode.kv_cache_dtype.clone()),
            ..FleetSpec::default()
        },
        ..decode.clone()
    };
    SglangArgs { decode: flags::write(&decode, release), prefill: flags::write(&prefill, release) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{InferenceDeployment, PrefillSpec};
    use crate::release::ReleaseChoice;
    use crate::sglang::cmdline::Arg;

    fn spec() -> InferenceDeploymentSpec {
        let text = include_str!("../../examples/gpt-oss-20b-hybrid-swa.yaml");
        let resource: InferenceDeployment = serde_norway::from_str(text).unwrap();
        resource.spec
    }

    fn config() -> serde_json::Value {
        serde_json::from_str(include_str!("../../tests/fixtures/configs/gpt-oss-20b.json")).unwrap()
    }

    fn read_back(args: &[String]) -> ServerSettings {
        let parsed = flags::read(&Arg::items(args), crate::sglang::server_cli::for_release(Release::newest_known()));
        assert_eq!(parsed.warnings, Vec::<String>::new());
        parsed.settings
    }

    #[test]
    fn decode_args_pin_the_effective_settings_and_read_back() {
        let mut spec = spec();
        spec.disaggregation.prefill = Some(PrefillSpec { tensor_parallel: 2, ..PrefillSpec::default() });
        let assessment = crate::policy::assess(
            &spec,
            &crate::policy::ModelConfigs::target(config()),
            &ReleaseChoice::default_newest(),
            crate::policy::Checked::Service,
        )
        .unwrap();
        let args = sglang_args(&spec, &assessment.verdict, assessment.release.release);
        let decode = read_back(&args.decode);
        assert_eq!(decode.mode, DisaggregationMode::Decode);
        assert_eq!(decode.model_path.as_deref(), Some(spec.model.name.as_str()));
        assert_eq!(decode.disaggregation.retraction_backup, Some(assessment.verdict.effective.retraction_backup));
        assert_eq!(decode.decode.tensor_parallel, spec.decode.tensor_parallel);
        assert_eq!(decode.disaggregation.host_pool_ratio, assessment.verdict.effective.host_pool_ratio);
        let prefill = read_back(&args.prefill);
        assert_eq!(prefill.mode, DisaggregationMode::Prefill);
        assert_eq!((prefill.decode.tensor_parallel, prefill.disaggregation.retraction_backup), (2, None));
        assert_eq!(prefill.disaggregation.transfer_backend, spec.disaggregation.transfer_backend);
        assert_eq!(prefill.decode.page_size, spec.decode.page_size);
    }

    #[test]
    fn the_ratio_reaches_the_decode_offload_host_pool() {
        let llama = serde_json::from_str::<serde_json::Value>(include_str!(
            "../../tests/fixtures/configs/llama-3.1-8b-instruct.json"
        ));
        let mut spec = spec();
        spec.disaggregation.retraction_backup = Some(RetractionBackup::CpuTensor);
        spec.disaggregation.host_pool_ratio = Some(3.0);
        let ratio_written = |spec: &InferenceDeploymentSpec| {
            let assessment = crate::policy::assess(
                spec,
                &crate::policy::ModelConfigs::target(llama.as_ref().unwrap().clone()),
                &ReleaseChoice::default_newest(),
                crate::policy::Checked::Service,
            );
            let assessment = assessment.unwrap();
            read_back(&sglang_args(spec, &assessment.verdict, assessment.release.release).decode)
                .disaggregation
                .host_pool_ratio
        };
        assert_eq!(ratio_written(&spec), None, "no host pool, no ratio");
        spec.disaggregation.decode_offload_kv_cache = true;
        spec.disaggregation.hicache_storage_backend = Some("file".into());
        assert_eq!(ratio_written(&spec), Some(3.0));
    }

    #[test]
    fn no_backup_flag_below_the_release_that_added_it() {
        let spec = spec();
        let release = crate::release::choose(v0_5(17), crate::release::ReleaseSource::Flag).unwrap();
        let assessment = crate::policy::assess(
            &spec,
            &crate::policy::ModelConfigs::target(config()),
            &release,
            crate::policy::Checked::Service,
        )
        .unwrap();
        let args = sglang_args(&spec, &assessment.verdict, release.release);
        assert!(!args.decode.iter().any(|a| a.starts_with("--disaggregation-decode-retraction-backup")), "{args:?}");
        let newest = sglang_args(&spec, &assessment.verdict, v0_5(23));
        assert!(newest.decode.iter().any(|a| a == "--disaggregation-decode-retraction-backup"), "{newest:?}");
    }
}
